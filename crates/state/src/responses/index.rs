//! What the disk store keeps in memory, so that the common lookups never
//! wait for the disk: recency and size of every stored variant (to evict, and
//! to persist recency once reads pause), which URLs have anything stored
//! (a miss is answered without a read transaction), and the most recently
//! used entries read more than once, decoded (a revalidation of a page
//! crawled again and again is answered without reading, checksumming and
//! parsing its record).

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;

use mannerly_policy::conditional::http::HeaderMap;
use mannerly_policy::conditional::{variant_key, variant_prefix, CacheKey};

use super::lru::Lru;
use super::sharded::Sharded;
use super::StoredResponse;
use crate::FastHash;

/// What a decoded entry takes beyond twice its encoded size (see
/// [`Index::keep`]).
const DECODED_OVERHEAD: u64 = 1024;

/// A resident entry may take at most this share of the memory budget, so
/// that one large page does not push out many small ones.
const LARGEST_RESIDENT_SHARE: u64 = 8;

/// A stored variant as the disk lists it when the store opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row {
    pub(crate) variant: String,
    /// Key of its page on disk: the recency tick it was written at.
    pub(crate) seq: u64,
    /// Its recency: `seq`, or the tick of a later read.
    pub(crate) tick: u64,
    pub(crate) size: u64,
    /// A read's tick is on disk for it.
    pub(crate) read_row: bool,
}

#[derive(Debug)]
pub(crate) struct Index {
    /// Every variant on disk.
    pub(crate) lru: Lru,
    /// Variant → the key of its page on disk. Pages are keyed by when they
    /// were written, so a commit appends at the end of the disk's tree
    /// instead of rewriting a page of it at random for every response.
    seqs: Sharded<String, u64>,
    /// Variants with a read's tick on disk, to delete with them.
    read_rows: Sharded<String, ()>,
    /// Hash of a URL's primary key → its variants on disk. A hash collision
    /// only sends a lookup to the disk; the count keeps removals exact.
    urls: Sharded<u64, u32>,
    hasher: FastHash,
    resident: Resident,
    /// Bumped by every committed write: a reader keeps what it read only if
    /// no write committed meanwhile, so an older copy never replaces a newer.
    generation: u64,
    /// Variant → the key its page had at the last commit, for variants
    /// written or removed since. Until the next commit the index is ahead
    /// of a reader's snapshot, which holds this page instead.
    superseded: HashMap<String, u64>,
    /// Scans of the whole index by [`Index::variants_of`].
    #[cfg(test)]
    scans: std::cell::Cell<u64>,
}

/// Decoded entries, least recently used out first, within `cap` bytes.
#[derive(Debug)]
struct Resident {
    cap: u64,
    lru: Lru,
    /// Behind a pointer: a decoded entry (headers, cache policy) is large,
    /// the table grows by copying its slots, and a hit hands out a share of
    /// the entry instead of a copy made under the index lock.
    entries: HashMap<String, Arc<StoredResponse>, FastHash>,
    urls: HashMap<String, ResidentUrl, FastHash>,
}

/// A URL's `Vary` names (every variant of a URL shares them) and its
/// resident variants.
#[derive(Debug)]
struct ResidentUrl {
    vary: Vec<String>,
    variants: Vec<String>,
}

/// The primary key a variant key starts with (`variant_key` puts a newline
/// after it, and a URL holds none).
fn primary_of(variant: &str) -> &str {
    variant.split('\n').next().unwrap_or(variant)
}

impl Index {
    /// The index of a store whose disk holds `rows`, keeping up to
    /// `resident_cap` bytes of decoded entries.
    pub(crate) fn from_rows(rows: Vec<Row>, resident_cap: u64) -> Index {
        let mut index = Index {
            lru: Lru::default(),
            seqs: Sharded::default(),
            read_rows: Sharded::default(),
            urls: Sharded::default(),
            hasher: FastHash::default(),
            resident: Resident::new(resident_cap),
            generation: 0,
            superseded: HashMap::new(),
            #[cfg(test)]
            scans: std::cell::Cell::new(0),
        };
        let mut ticks = Vec::with_capacity(rows.len());
        for row in rows {
            if row.read_row {
                index.read_rows.insert(row.variant.clone(), ());
            }
            index.seqs.insert(row.variant.clone(), row.seq);
            ticks.push((row.variant, row.tick.max(row.seq), row.size));
        }
        let lru = Lru::from_rows(ticks);
        for variant in lru.keys() {
            let h = index.hash(primary_of(&variant));
            index.count_url(h);
        }
        index.lru = lru;
        index
    }

    fn count_url(&mut self, h: u64) {
        let n = self.urls.get(&h).unwrap_or(0);
        self.urls.insert(h, n + 1);
    }

    fn hash(&self, primary: &str) -> u64 {
        self.hasher.hash_one(primary)
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Rebuilds the index from the disk's rows (after a write whose effect
    /// on the index is unknown); nothing stays resident.
    pub(crate) fn reset(&mut self, rows: Vec<Row>) {
        let generation = self.generation + 1;
        *self = Index::from_rows(rows, self.resident.cap);
        self.generation = generation;
    }

    /// A write committed: readers that started before it keep nothing, and
    /// snapshots from now on hold the pages the index names.
    pub(crate) fn committed(&mut self) {
        self.generation += 1;
        self.superseded.clear();
    }

    /// Notes the page `variant` had at the last commit before it changes.
    fn supersede(&mut self, variant: &str) {
        if let Some(seq) = self.seqs.get(variant) {
            self.superseded.entry(variant.to_owned()).or_insert(seq);
        }
    }

    /// Records a variant written to disk; returns the key of its new page
    /// (later than every key on disk). Its old page and read row, if any,
    /// are the caller's to delete ([`Index::seq_of`], [`Index::has_read_row`]
    /// before this call).
    pub(crate) fn stored(&mut self, variant: &str, size: u64) -> u64 {
        self.supersede(variant);
        if self.lru.size_of(variant).is_none() {
            let h = self.hash(primary_of(variant));
            self.count_url(h);
        }
        let seq = self.lru.insert(variant, size);
        self.seqs.insert(variant.to_owned(), seq);
        self.read_rows.remove(variant);
        seq
    }

    /// The key of `variant`'s page on disk.
    pub(crate) fn seq_of(&self, variant: &str) -> Option<u64> {
        self.seqs.get(variant)
    }

    /// Where a reader looks for `variant`'s page: the key the index names,
    /// then, if it changed since the last commit, the key it had then.
    pub(crate) fn pages_of(&self, variant: &str) -> [Option<u64>; 2] {
        // Empty but while a batch is between its record and its commit.
        let before = match self.superseded.is_empty() {
            true => None,
            false => self.superseded.get(variant).copied(),
        };
        [self.seqs.get(variant), before]
    }

    /// Whether a read's tick is on disk for `variant`.
    pub(crate) fn has_read_row(&self, variant: &str) -> bool {
        self.read_rows.get(variant).is_some()
    }

    /// How many reads [`Index::take_reads`] would give.
    pub(crate) fn pending_reads(&self) -> usize {
        self.lru.dirty_len()
    }

    /// Reads not yet on disk, to commit: `(page key, tick)`, in the order
    /// of the pages; from then on their variants have a read row, keyed by
    /// the page they have now (deleted with it).
    pub(crate) fn take_reads(&mut self) -> Vec<(u64, u64)> {
        let mut reads = Vec::new();
        for (variant, tick, _) in self.lru.take_dirty() {
            if let Some(seq) = self.seqs.get(&variant) {
                reads.push((seq, tick));
                self.read_rows.insert(variant, ());
            }
        }
        reads.sort_unstable();
        reads
    }

    /// Every stored variant of `key`'s URL. A URL with none (a page with
    /// `Vary` stored for the first time) is answered from the URL counts;
    /// one with some takes a scan of the whole index, for the rare writes
    /// that need it (a URL whose `Vary` changed, a removal).
    pub(crate) fn variants_of(&self, key: &CacheKey) -> Vec<String> {
        if !self.may_hold(key) {
            return Vec::new();
        }
        #[cfg(test)]
        self.scans.set(self.scans.get() + 1);
        let prefix = variant_prefix(key);
        self.seqs.keys_where(|v| v.starts_with(&prefix))
    }

    /// Records a variant removed from disk (and drops its decoded copy).
    pub(crate) fn forget(&mut self, variant: &str) {
        self.supersede(variant);
        self.seqs.remove(variant);
        self.read_rows.remove(variant);
        if self.lru.remove(variant).is_some() {
            let h = self.hash(primary_of(variant));
            match self.urls.get(&h) {
                Some(n) if n > 1 => {
                    self.urls.insert(h, n - 1);
                }
                Some(_) => {
                    self.urls.remove(&h);
                }
                None => {}
            }
        }
        self.resident.remove(variant);
    }

    /// False when nothing at all is stored for `key`'s URL.
    pub(crate) fn may_hold(&self, key: &CacheKey) -> bool {
        self.urls.get(&self.hash(key.as_str())).is_some()
    }

    /// The decoded entry the request selects, if it is resident. Counts as
    /// a read of it.
    pub(crate) fn resident_get(
        &mut self,
        key: &CacheKey,
        request_headers: &HeaderMap,
    ) -> Option<Arc<StoredResponse>> {
        let url = self.resident.urls.get(key.as_str())?;
        let variant = variant_key(key, &url.vary, request_headers);
        let found = Arc::clone(self.resident.entries.get(&variant)?);
        self.resident.lru.touch(&variant);
        self.lru.touch(&variant);
        Some(found)
    }

    /// Records a read from disk of `entry`, `size` bytes encoded, and holds
    /// it in memory if it had been read since it was written (and `fresh`:
    /// no write committed while it was read). A page is held from its
    /// second read on, like a doorkeeper's admission: a re-crawl reads each
    /// page once, and holding each one evicted another (re-crawl benchmark:
    /// insert and eviction were 9% of samples). Reads before a restart count
    /// once persisted (the writer commits
    /// reads once they pause, and at exit).
    pub(crate) fn read_from_disk(&mut self, entry: Arc<StoredResponse>, size: u64, fresh: bool) {
        let again = self.read_since_written(entry.meta.variant());
        self.lru.touch(entry.meta.variant());
        if again && fresh {
            self.keep(entry, size);
        }
    }

    /// Whether `variant` was read since it was last written.
    pub(crate) fn read_since_written(&self, variant: &str) -> bool {
        match (self.lru.tick_of(variant), self.seqs.get(variant)) {
            (Some(tick), Some(seq)) => tick > seq,
            _ => false,
        }
    }

    /// Holds a page being written back (it was read since its last write:
    /// a revalidation changed what is stored) from now, before its commit.
    /// From [`Index::stored`] until the commit a reader's snapshot holds
    /// only the page this one replaces; a page asked for again at once (a
    /// crawler retrying, a second client) finds this newer copy instead.
    /// Readers that began before keep nothing they read.
    pub(crate) fn hold_written(&mut self, entry: Arc<StoredResponse>, size: u64) {
        self.generation += 1;
        self.keep(entry, size);
    }

    /// Keeps a decoded copy of an entry that is on disk, `size` bytes
    /// encoded. It counts against the memory budget at what it takes
    /// decoded, which is more: its headers twice (response and cache
    /// policy) and the structures around them. heaptrack, 24,609 entries of
    /// a 1 KiB page: ~3.8 KiB each, against ~1.5 KiB encoded.
    fn keep(&mut self, entry: Arc<StoredResponse>, size: u64) {
        let variant = entry.meta.variant();
        if self.lru.size_of(variant).is_none() {
            // Evicted or removed since it was read.
            return;
        }
        let cost = size.saturating_mul(2).saturating_add(DECODED_OVERHEAD);
        self.resident.insert(entry, cost);
    }

    /// A written entry replaces the copy held in memory, if one is held. A
    /// new page is held only once it is read again (see
    /// [`Index::read_from_disk`]): most pages a crawl stores are not asked
    /// for again soon, and holding each one made every write evict another
    /// (every URL new: 59 against 65 us of CPU per request with the default
    /// 64 MiB).
    pub(crate) fn refresh(&mut self, entry: Arc<StoredResponse>, size: u64) {
        if self.resident.entries.contains_key(entry.meta.variant()) {
            self.keep(entry, size);
        }
    }

    /// Bytes of decoded entries held (for tests and stats).
    pub(crate) fn resident_bytes(&self) -> u64 {
        self.resident.lru.total()
    }
}

impl Resident {
    fn new(cap: u64) -> Resident {
        Resident {
            cap,
            lru: Lru::untracked(),
            entries: HashMap::default(),
            urls: HashMap::default(),
        }
    }

    fn insert(&mut self, entry: Arc<StoredResponse>, size: u64) {
        let variant = entry.meta.variant();
        if size > self.cap / LARGEST_RESIDENT_SHARE {
            self.remove(variant);
            return;
        }
        let primary = primary_of(variant);
        let vary = entry.meta.vary();
        if self.urls.get(primary).is_some_and(|u| u.vary != vary) {
            // The store dropped the URL's other variants when its Vary changed.
            let stale = self.urls.get(primary).map(|u| u.variants.clone());
            for v in stale.unwrap_or_default() {
                self.remove(&v);
            }
        }
        for victim in self.lru.victims(variant, size, self.cap) {
            self.remove(&victim);
        }
        let url = self
            .urls
            .entry(primary.to_owned())
            .or_insert_with(|| ResidentUrl {
                vary: vary.to_vec(),
                variants: Vec::new(),
            });
        if !url.variants.iter().any(|v| v == variant) {
            url.variants.push(variant.to_owned());
        }
        self.lru.insert(variant, size);
        self.entries.insert(variant.to_owned(), entry);
    }

    fn remove(&mut self, variant: &str) {
        if self.entries.remove(variant).is_none() {
            return;
        }
        self.lru.remove(variant);
        let primary = primary_of(variant);
        if let Some(url) = self.urls.get_mut(primary) {
            url.variants.retain(|v| v != variant);
            if url.variants.is_empty() {
                self.urls.remove(primary);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use mannerly_policy::conditional::http::Method;

    use super::*;

    fn key(url: &str) -> CacheKey {
        CacheKey::new(&Method::GET, url).unwrap()
    }

    fn row(variant: String, seq: u64) -> Row {
        Row {
            variant,
            seq,
            tick: seq,
            size: 100,
            read_row: false,
        }
    }

    #[test]
    fn a_urls_variants_are_its_own_and_a_url_never_stored_has_none() {
        let (a, ab, b) = (
            key("http://e.com/a"),
            key("http://e.com/ab"),
            key("http://e.com/b"),
        );
        let a1 = format!("{}x1", variant_prefix(&a));
        let a2 = format!("{}x2", variant_prefix(&a));
        let ab1 = format!("{}x1", variant_prefix(&ab));
        let mut index = Index::from_rows(vec![row(a1.clone(), 1), row(ab1.clone(), 2)], 1 << 20);
        assert_eq!(index.variants_of(&a), std::slice::from_ref(&a1));
        assert_eq!(index.variants_of(&ab), [ab1]);
        assert!(index.variants_of(&b).is_empty());
        index.stored(&a2, 100);
        let mut got = index.variants_of(&a);
        got.sort();
        assert_eq!(got, [a1.clone(), a2.clone()]);
        index.forget(&a1);
        index.forget(&a2);
        assert!(index.variants_of(&a).is_empty());
        assert!(!index.may_hold(&a));
    }

    #[test]
    fn a_url_never_stored_is_answered_without_a_scan() {
        let rows = (0..1000)
            .map(|i| {
                row(
                    format!("{}x", variant_prefix(&key(&format!("http://e.com/{i}")))),
                    i,
                )
            })
            .collect();
        let index = Index::from_rows(rows, 1 << 20);
        for i in 1000..1100 {
            assert!(index
                .variants_of(&key(&format!("http://e.com/{i}")))
                .is_empty());
        }
        assert_eq!(
            index.scans.get(),
            0,
            "a new URL, as every first store of a page with Vary"
        );
        assert_eq!(index.variants_of(&key("http://e.com/7")).len(), 1);
        assert_eq!(index.scans.get(), 1);
    }
}
