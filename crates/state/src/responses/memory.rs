//! The in-process store: same behaviour as the disk store, gone on restart.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use mannerly_policy::conditional::http::HeaderMap;
use mannerly_policy::conditional::{variant_key, variant_prefix, CacheEntryMeta, CacheKey};

use super::lru::Lru;
use super::{
    entry_size, record, Counters, PutOutcome, ResponseStore, StoreError, StoreLimits, StoreStats,
    StoredResponse,
};

/// Responses kept in memory, encoded and checksummed exactly as on disk so
/// both backends behave alike. For tests and for running without a disk.
#[derive(Debug)]
pub struct MemoryStore {
    limits: StoreLimits,
    inner: Mutex<Inner>,
    counters: Counters,
}

#[derive(Debug, Default)]
struct Inner {
    entries: BTreeMap<String, Vec<u8>>,
    vary: HashMap<String, Vec<String>>,
    lru: Lru,
    hosts: BTreeMap<String, Vec<u8>>,
}

impl MemoryStore {
    /// An empty store enforcing `limits`.
    pub fn new(limits: StoreLimits) -> Self {
        MemoryStore {
            limits,
            inner: Mutex::new(Inner::default()),
            counters: Counters::default(),
        }
    }

    fn lock(&self) -> Result<MutexGuard<'_, Inner>, StoreError> {
        self.inner.lock().map_err(|_| StoreError::Poisoned)
    }

    /// Replaces the raw record of a variant: lets tests damage an entry.
    #[doc(hidden)]
    pub fn overwrite_raw(&self, variant: &str, bytes: Vec<u8>) -> Result<(), StoreError> {
        self.lock()?.entries.insert(variant.to_owned(), bytes);
        Ok(())
    }
}

impl Inner {
    fn remove_variant(&mut self, variant: &str) {
        self.entries.remove(variant);
        self.lru.remove(variant);
    }

    fn variants_of(&self, key: &CacheKey) -> Vec<String> {
        let prefix = variant_prefix(key);
        self.entries
            .range(prefix.clone()..)
            .map(|(k, _)| k)
            .take_while(|k| k.starts_with(&prefix))
            .cloned()
            .collect()
    }
}

impl ResponseStore for MemoryStore {
    fn get(
        &self,
        key: &CacheKey,
        request_headers: &HeaderMap,
    ) -> Result<Option<Arc<StoredResponse>>, StoreError> {
        let mut inner = self.lock()?;
        let Some(vary) = inner.vary.get(key.as_str()) else {
            return Ok(None);
        };
        let variant = variant_key(key, vary, request_headers);
        let Some(bytes) = inner.entries.get(&variant) else {
            return Ok(None);
        };
        match record::decode(bytes).filter(|r| r.meta.variant() == variant) {
            Some(found) => {
                inner.lru.touch(&variant);
                Ok(Some(Arc::new(found)))
            }
            None => {
                inner.remove_variant(&variant);
                self.counters.add_corrupt();
                Ok(None)
            }
        }
    }

    fn get_resident(
        &self,
        key: &CacheKey,
        request_headers: &HeaderMap,
    ) -> Option<Result<Option<Arc<StoredResponse>>, StoreError>> {
        Some(self.get(key, request_headers))
    }

    fn put(&self, meta: &CacheEntryMeta, body: &[u8]) -> Result<PutOutcome, StoreError> {
        if let Some(refused) = self.limits.refuse(meta, body) {
            return Ok(refused);
        }
        let bytes = record::encode(meta, body)?;
        let size = entry_size(meta.variant(), bytes.len());
        if size > self.limits.max_size {
            return Ok(PutOutcome::TooLarge);
        }
        let mut inner = self.lock()?;
        let primary = meta.key().as_str().to_owned();
        if inner.vary.get(&primary).is_some_and(|v| v != meta.vary()) {
            for variant in inner.variants_of(meta.key()) {
                inner.remove_variant(&variant);
            }
        }
        inner.vary.insert(primary, meta.vary().to_vec());
        let victims = inner
            .lru
            .victims(meta.variant(), size, self.limits.max_size);
        for victim in &victims {
            inner.remove_variant(victim);
        }
        self.counters.add_evicted(victims.len());
        inner.entries.insert(meta.variant().to_owned(), bytes);
        inner.lru.insert(meta.variant(), size);
        Ok(PutOutcome::Stored {
            evicted: victims.len(),
        })
    }

    fn remove(&self, key: &CacheKey) -> Result<usize, StoreError> {
        let mut inner = self.lock()?;
        let variants = inner.variants_of(key);
        for variant in &variants {
            inner.remove_variant(variant);
        }
        inner.vary.remove(key.as_str());
        Ok(variants.len())
    }

    fn stats(&self) -> StoreStats {
        match self.inner.lock() {
            Ok(inner) => self.counters.stats(inner.lru.len(), inner.lru.total(), 0),
            Err(_) => self.counters.stats(0, 0, 0),
        }
    }

    fn put_host_record(&self, host: &str, record: &[u8]) -> Result<(), StoreError> {
        self.lock()?.hosts.insert(host.to_owned(), record.to_vec());
        Ok(())
    }

    fn host_records(&self) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        Ok(self
            .lock()?
            .hosts
            .iter()
            .map(|(h, r)| (h.clone(), r.clone()))
            .collect())
    }

    fn remove_host_record(&self, host: &str) -> Result<(), StoreError> {
        self.lock()?.hosts.remove(host);
        Ok(())
    }
}
