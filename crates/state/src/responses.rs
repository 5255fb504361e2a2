//! Stored responses for conditional requests, and small per-host records that
//! must survive a restart, behind [`ResponseStore`]: [`DiskStore`] (embedded
//! redb file, the default) and [`MemoryStore`] (tests, or no disk).
//!
//! The store keeps bytes and recency; every rule about what may be stored,
//! which variant a request selects and when to revalidate is in
//! `mannerly_policy::conditional`.
//!
//! # Blocking
//!
//! Every method but two may block (redb is synchronous and commits with
//! `fsync`). From async code call them inside `tokio::task::spawn_blocking`,
//! except [`ResponseStore::get_resident`] (memory only: try it first, and go
//! to the blocking pool only when it cannot tell) and
//! [`ResponseStore::put_then`] (queues the write and returns; its callback
//! runs once the write is done). Never make the client's response wait for a
//! write.
//!
//! # Failure
//!
//! A [`StoreError`] means "serve this request as a pass-through and audit
//! `cache: \"error\"`". A damaged entry is not an error: its checksum fails,
//! it is removed, and the lookup is a miss.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use mannerly_policy::conditional::http::HeaderMap;
use mannerly_policy::conditional::{CacheEntryMeta, CacheKey, CacheParams};

mod disk;
mod error;
mod index;
mod lru;
mod memory;
mod record;
mod sharded;
mod shared;

pub use disk::{CommitHold, DiskOptions, DiskStore, WriterHold};
pub use error::StoreError;
pub use memory::MemoryStore;
pub use shared::{SharedPages, SharedPagesStats};

/// A stored response: its metadata and its body, exactly as received (still
/// compressed if the origin compressed it).
#[derive(Clone, Debug)]
pub struct StoredResponse {
    /// Status, headers, validators and RFC 9111 state.
    pub meta: CacheEntryMeta,
    /// The body bytes.
    pub body: Bytes,
}

/// What [`ResponseStore::put`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutOutcome {
    /// Stored (replacing the previous variant, if any); `evicted` least
    /// recently used entries made room for it.
    Stored {
        /// How many other entries were evicted to stay under `max_size`.
        evicted: usize,
    },
    /// Body above `max_body`, or the whole entry above `max_size`: not stored.
    TooLarge,
    /// The body's length differs from the `Content-Length` the origin sent:
    /// a cut-off transfer, never stored.
    LengthMismatch,
    /// Too many bytes are already waiting to be written: not stored, so that
    /// a store slower than the crawl does not fill the memory.
    Busy,
}

/// The callback of [`ResponseStore::put_then`].
pub type PutDone = Box<dyn FnOnce(Result<PutOutcome, StoreError>) + Send>;

/// Counters for `/metrics` and the dashboard.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Entries (variants) stored now.
    pub entries: u64,
    /// Bytes they take (records + keys).
    pub bytes: u64,
    /// Entries evicted to stay under `max_size` since start.
    pub evicted: u64,
    /// Damaged entries found and removed since start.
    pub corrupt_removed: u64,
    /// Write transactions committed since start (one per group of writes).
    pub commits: u64,
    /// Commits of read ticks alone since start (recency kept across a
    /// restart; one once reads pause, not one per read). Not in `commits`.
    pub read_commits: u64,
    /// Forced to disk (`fsync`) since start: every commit with `sync =
    /// "batch"`; with `"none"`, commits carrying a host record, and the
    /// empty catch-up commits (not in `commits`).
    pub forced_commits: u64,
    /// Bytes of entries held decoded in memory.
    pub resident_bytes: u64,
}

/// Where responses (and per-host records) are kept. Implementations are
/// shared between request tasks (`Arc<dyn ResponseStore>`) and block: see
/// the module docs.
pub trait ResponseStore: Send + Sync {
    /// The stored response for `key` that matches `request_headers` on the
    /// fields its `Vary` names, if any. A damaged entry is removed and
    /// reported as `None`. Marks the entry as recently used. Shared: an
    /// entry held in memory is handed out without copying its headers and
    /// policy (a clone under the index lock, on every revalidation).
    fn get(
        &self,
        key: &CacheKey,
        request_headers: &HeaderMap,
    ) -> Result<Option<Arc<StoredResponse>>, StoreError>;

    /// What [`ResponseStore::get`] would answer, when memory alone can tell:
    /// `Some(Ok(None))` when nothing is stored for the URL, `Some(Ok(Some(_)))`
    /// for an entry held in memory. `None`: only the disk can tell. Never
    /// blocks on I/O, so async code may call it directly.
    fn get_resident(
        &self,
        key: &CacheKey,
        request_headers: &HeaderMap,
    ) -> Option<Result<Option<Arc<StoredResponse>>, StoreError>> {
        let _ = (key, request_headers);
        None
    }

    /// [`ResponseStore::put`] without waiting: `done` hears the outcome once
    /// the write is done (for the disk store: committed, and with
    /// `sync = "batch"` on disk), on a thread of the store's choosing.
    fn put_then(&self, meta: CacheEntryMeta, body: Bytes, done: PutDone) {
        done(self.put(&meta, &body));
    }

    /// Stores `body` under `meta`'s key and variant, replacing what was there.
    /// When the response's `Vary` differs from the stored one for this URL,
    /// the URL's other variants are dropped. Evicts least recently used
    /// entries to stay under `max_size`.
    fn put(&self, meta: &CacheEntryMeta, body: &[u8]) -> Result<PutOutcome, StoreError>;

    /// Removes every variant stored for `key`; returns how many there were.
    fn remove(&self, key: &CacheKey) -> Result<usize, StoreError>;

    /// Current counters.
    fn stats(&self) -> StoreStats;

    /// Saves an opaque record for `host` (budget state: pauses, breakers,
    /// ceilings), replacing the previous one. Durable once this returns.
    fn put_host_record(&self, host: &str, record: &[u8]) -> Result<(), StoreError>;

    /// Every saved host record, sorted by host.
    fn host_records(&self) -> Result<Vec<(String, Vec<u8>)>, StoreError>;

    /// Forgets `host`'s record (no error if there was none).
    fn remove_host_record(&self, host: &str) -> Result<(), StoreError>;
}

/// Size limits a store enforces, from `[cache]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreLimits {
    /// Largest body stored, in bytes.
    pub max_body: u64,
    /// Total bytes of all entries.
    pub max_size: u64,
}

impl From<&CacheParams> for StoreLimits {
    fn from(params: &CacheParams) -> Self {
        StoreLimits {
            max_body: params.max_body,
            max_size: params.max_size,
        }
    }
}

impl StoreLimits {
    /// Why `body` may not be stored under `meta`, before any encoding.
    fn refuse(&self, meta: &CacheEntryMeta, body: &[u8]) -> Option<PutOutcome> {
        let len = u64::try_from(body.len()).unwrap_or(u64::MAX);
        if len > self.max_body {
            return Some(PutOutcome::TooLarge);
        }
        match meta.declared_length() {
            Some(declared) if declared != len => Some(PutOutcome::LengthMismatch),
            _ => None,
        }
    }
}

#[derive(Debug, Default)]
struct Counters {
    evicted: AtomicU64,
    corrupt_removed: AtomicU64,
    commits: AtomicU64,
    read_commits: AtomicU64,
    forced: AtomicU64,
}

impl Counters {
    fn stats(&self, entries: usize, bytes: u64, resident_bytes: u64) -> StoreStats {
        StoreStats {
            entries: u64::try_from(entries).unwrap_or(u64::MAX),
            bytes,
            evicted: self.evicted.load(Ordering::Relaxed),
            corrupt_removed: self.corrupt_removed.load(Ordering::Relaxed),
            commits: self.commits.load(Ordering::Relaxed),
            read_commits: self.read_commits.load(Ordering::Relaxed),
            forced_commits: self.forced.load(Ordering::Relaxed),
            resident_bytes,
        }
    }

    fn add_commit(&self, forced: bool) {
        self.commits.fetch_add(1, Ordering::Relaxed);
        if forced {
            self.add_forced();
        }
    }

    fn add_read_commit(&self) {
        self.read_commits.fetch_add(1, Ordering::Relaxed);
    }

    /// A commit of no writes that forces earlier ones to disk.
    fn add_forced(&self) {
        self.forced.fetch_add(1, Ordering::Relaxed);
    }

    fn add_evicted(&self, n: usize) {
        self.evicted
            .fetch_add(u64::try_from(n).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    fn add_corrupt(&self) {
        self.corrupt_removed.fetch_add(1, Ordering::Relaxed);
    }
}

/// Bytes an entry counts against `max_size`.
fn entry_size(variant: &str, record_len: usize) -> u64 {
    u64::try_from(variant.len() + record_len).unwrap_or(u64::MAX)
}
