//! The embedded on-disk store: one redb file, ACID commits.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use mannerly_policy::conditional::http::HeaderMap;
use mannerly_policy::conditional::{variant_key, variant_prefix, CacheEntryMeta, CacheKey};
use redb::{Database, ReadableDatabase, ReadableTable, Table, TableDefinition};

use super::lru::Lru;
use super::{
    entry_size, record, Counters, PutOutcome, ResponseStore, StoreError, StoreLimits, StoreStats,
    StoredResponse,
};

/// Variant key → record (see `record.rs`).
const ENTRIES: TableDefinition<&str, &[u8]> = TableDefinition::new("responses_v1");
/// Primary key → JSON list of the `Vary` names of its variants.
const VARY: TableDefinition<&str, &str> = TableDefinition::new("vary_v1");
/// Variant key → (recency tick, size): rebuilds the LRU index on open without
/// reading any body.
const ACCESS: TableDefinition<&str, (u64, u64)> = TableDefinition::new("access_v1");
/// Host → opaque budget record.
const HOSTS: TableDefinition<&str, &[u8]> = TableDefinition::new("host_records_v1");

/// Responses and host records in one redb file.
///
/// Every write is one atomic, durable transaction: a crash (even `kill -9`)
/// mid-write leaves the previous state. Records carry a SHA-256 that is
/// checked on every read. Only one process may open the file at a time.
pub struct DiskStore {
    db: Database,
    limits: StoreLimits,
    lru: Mutex<Lru>,
    counters: Counters,
}

impl std::fmt::Debug for DiskStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskStore")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl DiskStore {
    /// Opens (or creates) the store at `path`. Entries beyond a lowered
    /// `max_size` are evicted at the next write.
    pub fn open(path: impl AsRef<Path>, limits: StoreLimits) -> Result<Self, StoreError> {
        let db = Database::create(path)?;
        let txn = db.begin_write()?;
        let mut rows = Vec::new();
        {
            txn.open_table(ENTRIES)?;
            txn.open_table(VARY)?;
            txn.open_table(HOSTS)?;
            let access = txn.open_table(ACCESS)?;
            for row in access.iter()? {
                let (key, value) = row?;
                let (tick, size) = value.value();
                rows.push((key.value().to_owned(), tick, size));
            }
        }
        txn.commit()?;
        Ok(DiskStore {
            db,
            limits,
            lru: Mutex::new(Lru::from_rows(rows)),
            counters: Counters::default(),
        })
    }

    fn lru(&self) -> Result<MutexGuard<'_, Lru>, StoreError> {
        self.lru.lock().map_err(|_| StoreError::Poisoned)
    }

    /// Removes one damaged variant; the lookup that found it is a miss.
    fn drop_corrupt(&self, variant: &str) -> Result<(), StoreError> {
        let mut lru = self.lru()?;
        let txn = self.db.begin_write()?;
        {
            txn.open_table(ENTRIES)?.remove(variant)?;
            txn.open_table(ACCESS)?.remove(variant)?;
        }
        txn.commit()?;
        lru.remove(variant);
        self.counters.add_corrupt();
        Ok(())
    }
}

fn variants_of(entries: &Table<&str, &[u8]>, key: &CacheKey) -> Result<Vec<String>, StoreError> {
    let prefix = variant_prefix(key);
    let mut out = Vec::new();
    for row in entries.range::<&str>(prefix.as_str()..)? {
        let (k, _) = row?;
        let k = k.value();
        if !k.starts_with(&prefix) {
            break;
        }
        out.push(k.to_owned());
    }
    Ok(out)
}

impl ResponseStore for DiskStore {
    fn get(
        &self,
        key: &CacheKey,
        request_headers: &HeaderMap,
    ) -> Result<Option<StoredResponse>, StoreError> {
        let (variant, found) = {
            let txn = self.db.begin_read()?;
            let vary_table = txn.open_table(VARY)?;
            let Some(vary) = vary_table.get(key.as_str())? else {
                return Ok(None);
            };
            // An unreadable Vary list selects nothing; the next put rewrites it.
            let Ok(vary) = serde_json::from_str::<Vec<String>>(vary.value()) else {
                return Ok(None);
            };
            let variant = variant_key(key, &vary, request_headers);
            let entries = txn.open_table(ENTRIES)?;
            let Some(bytes) = entries.get(variant.as_str())? else {
                return Ok(None);
            };
            let found = record::decode(bytes.value()).filter(|r| r.meta.variant() == variant);
            (variant, found)
        };
        match found {
            Some(found) => {
                self.lru()?.touch(&variant);
                Ok(Some(found))
            }
            None => {
                self.drop_corrupt(&variant)?;
                Ok(None)
            }
        }
    }

    fn put(&self, meta: &CacheEntryMeta, body: &[u8]) -> Result<PutOutcome, StoreError> {
        if let Some(refused) = self.limits.refuse(meta, body) {
            return Ok(refused);
        }
        let bytes = record::encode(meta, body)?;
        let size = entry_size(meta.variant(), &bytes);
        if size > self.limits.max_size {
            return Ok(PutOutcome::TooLarge);
        }
        let vary_json = serde_json::to_string(meta.vary())?;
        let mut lru = self.lru()?;
        let written = self.write_entry(&mut lru, meta, &bytes, size, &vary_json);
        if written.is_err() {
            // The commit did not happen: the disk still holds the previous
            // state, so the index is rebuilt from it rather than patched.
            if let Ok(rows) = self.access_rows() {
                *lru = Lru::from_rows(rows);
            }
        }
        let evicted = written?;
        self.counters.add_evicted(evicted);
        Ok(PutOutcome::Stored { evicted })
    }

    fn remove(&self, key: &CacheKey) -> Result<usize, StoreError> {
        let mut lru = self.lru()?;
        let txn = self.db.begin_write()?;
        let variants;
        {
            let mut entries = txn.open_table(ENTRIES)?;
            let mut access = txn.open_table(ACCESS)?;
            variants = variants_of(&entries, key)?;
            for variant in &variants {
                entries.remove(variant.as_str())?;
                access.remove(variant.as_str())?;
            }
            txn.open_table(VARY)?.remove(key.as_str())?;
        }
        txn.commit()?;
        for variant in &variants {
            lru.remove(variant);
        }
        Ok(variants.len())
    }

    fn stats(&self) -> StoreStats {
        match self.lru.lock() {
            Ok(lru) => self.counters.stats(lru.len(), lru.total()),
            Err(_) => self.counters.stats(0, 0),
        }
    }

    fn put_host_record(&self, host: &str, record: &[u8]) -> Result<(), StoreError> {
        let txn = self.db.begin_write()?;
        txn.open_table(HOSTS)?.insert(host, record)?;
        txn.commit()?;
        Ok(())
    }

    fn host_records(&self) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let txn = self.db.begin_read()?;
        let hosts = txn.open_table(HOSTS)?;
        let mut out = Vec::new();
        for row in hosts.iter()? {
            let (host, record) = row?;
            out.push((host.value().to_owned(), record.value().to_vec()));
        }
        Ok(out)
    }

    fn remove_host_record(&self, host: &str) -> Result<(), StoreError> {
        let txn = self.db.begin_write()?;
        txn.open_table(HOSTS)?.remove(host)?;
        txn.commit()?;
        Ok(())
    }
}

impl DiskStore {
    /// One transaction: drop variants a changed `Vary` orphaned, evict least
    /// recently used entries, write the entry, persist recent reads.
    fn write_entry(
        &self,
        lru: &mut Lru,
        meta: &CacheEntryMeta,
        bytes: &[u8],
        size: u64,
        vary_json: &str,
    ) -> Result<usize, StoreError> {
        let txn = self.db.begin_write()?;
        let evicted;
        {
            let mut entries = txn.open_table(ENTRIES)?;
            let mut access = txn.open_table(ACCESS)?;
            let mut vary = txn.open_table(VARY)?;
            let primary = meta.key().as_str();
            let vary_changed = vary
                .get(primary)?
                .is_some_and(|old| old.value() != vary_json);
            if vary_changed {
                // Old variants were keyed by other header names: unreachable now.
                for variant in variants_of(&entries, meta.key())? {
                    entries.remove(variant.as_str())?;
                    access.remove(variant.as_str())?;
                    lru.remove(&variant);
                }
            }
            vary.insert(primary, vary_json)?;
            let victims = lru.victims(meta.variant(), size, self.limits.max_size);
            for victim in &victims {
                entries.remove(victim.as_str())?;
                access.remove(victim.as_str())?;
                lru.remove(victim);
            }
            evicted = victims.len();
            entries.insert(meta.variant(), bytes)?;
            let tick = lru.insert(meta.variant(), size);
            access.insert(meta.variant(), (tick, size))?;
            for (key, tick, size) in lru.take_dirty() {
                access.insert(key.as_str(), (tick, size))?;
            }
        }
        txn.commit()?;
        Ok(evicted)
    }

    fn access_rows(&self) -> Result<Vec<(String, u64, u64)>, StoreError> {
        let txn = self.db.begin_read()?;
        let access = txn.open_table(ACCESS)?;
        let mut rows = Vec::new();
        for row in access.iter()? {
            let (key, value) = row?;
            let (tick, size) = value.value();
            rows.push((key.value().to_owned(), tick, size));
        }
        Ok(rows)
    }
}
