//! The embedded on-disk store: one redb file, ACID commits.
//!
//! Reads run on the caller's thread, and what [`Index`] holds in memory
//! answers misses and recently used entries without a read transaction.
//! Writes go to one thread that commits everything queued while its previous
//! commit ran as one transaction (group commit): under load many responses
//! share one `fsync`, and a lone write waits for no one but itself.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use bytes::Bytes;
use mannerly_policy::conditional::http::HeaderMap;
use mannerly_policy::conditional::{variant_key, CacheEntryMeta, CacheKey, CacheParams, CacheSync};
use redb::{Database, ReadableDatabase, ReadableTable};

use super::index::Index;
use super::{
    record, Counters, PutDone, PutOutcome, ResponseStore, StoreError, StoreLimits, StoreStats,
    StoredResponse,
};

// One way: the callers' side (this file) and the writer meet in `shared`
// and `tables`, and no submodule uses this file.
mod shared;
mod tables;
mod writer;

use shared::{CommitGate, Inner};
use tables::{has_tails, HOSTS, PAGES, VARY};
use writer::{Done, Job};

/// redb's own page cache. Its default (1 GiB) let the proxy's memory grow
/// with the store (heaptrack: 117 MB of cached pages after 35k new pages);
/// recently used entries are held decoded by the index instead.
const REDB_CACHE_BYTES: usize = 16 * 1024 * 1024;

/// Bodies waiting for the writer, at most: a write beyond it is not stored
/// (`PutOutcome::Busy`) rather than held in memory without bound.
const MAX_QUEUED_BYTES: u64 = 64 * 1024 * 1024;

/// Snapshots a read takes, at most, when commits keep landing between its
/// snapshot and its look at the index (each retry needs a commit in that
/// gap of a few microseconds).
const READ_ATTEMPTS: usize = 3;

/// How the disk store keeps things in memory and commits, from `[cache]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskOptions {
    /// Bytes of decoded entries kept in memory (0: none).
    pub memory_size: u64,
    /// When commits are forced to disk.
    pub sync: CacheSync,
}

impl Default for DiskOptions {
    fn default() -> Self {
        DiskOptions::from(&CacheParams::default())
    }
}

impl From<&CacheParams> for DiskOptions {
    fn from(params: &CacheParams) -> Self {
        DiskOptions {
            memory_size: params.memory_size,
            sync: params.sync,
        }
    }
}

/// Responses and host records in one redb file.
///
/// Every write is part of one atomic transaction: a crash (even `kill -9`)
/// mid-write leaves the previous state. With `sync = "batch"` a write's
/// outcome is reported once it is on disk. Records carry a SHA-256 that is
/// checked on every read from disk. Only one process may open the file at a
/// time.
pub struct DiskStore {
    inner: Arc<Inner>,
    options: DiskOptions,
    queue: Option<mpsc::Sender<Job>>,
    writer: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for DiskStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskStore")
            .field("limits", &self.inner.limits)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl DiskStore {
    /// Opens (or creates) the store at `path` with the default options.
    /// Entries beyond a lowered `max_size` are evicted at the next write.
    /// `now` is the monotonic clock the writer times its commits by.
    pub fn open(
        path: impl AsRef<Path>,
        limits: StoreLimits,
        now: impl Fn() -> Instant + Send + 'static,
    ) -> Result<Self, StoreError> {
        DiskStore::open_with(path, limits, DiskOptions::default(), now)
    }

    /// Opens (or creates) the store at `path`; `now` is the monotonic clock
    /// the writer times its commits by (`sync = "none"` forces one within
    /// a bound of the first unforced one).
    pub fn open_with(
        path: impl AsRef<Path>,
        limits: StoreLimits,
        options: DiskOptions,
        now: impl Fn() -> Instant + Send + 'static,
    ) -> Result<Self, StoreError> {
        let db = match Database::builder()
            .set_cache_size(REDB_CACHE_BYTES)
            .create(path)
        {
            Ok(db) => db,
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => return Err(StoreError::InUse),
            Err(e) => return Err(e.into()),
        };
        let txn = db.begin_write()?;
        tables::prepare(&txn)?;
        txn.commit()?;
        let inner = Arc::new(Inner {
            db,
            limits,
            index: Mutex::new(Index::from_rows(Vec::new(), options.memory_size)),
            counters: Counters::default(),
            queued: AtomicU64::new(0),
            commit_gate: Mutex::new(None),
        });
        *inner.index()? = Index::from_rows(inner.rows()?, options.memory_size);
        let (queue, jobs) = mpsc::channel();
        let for_writer = inner.clone();
        let writer = std::thread::Builder::new()
            .name("mannerly-store".into())
            .spawn(move || {
                crate::background::started();
                writer::run(&for_writer, &jobs, options.sync, now)
            })
            .map_err(StoreError::Thread)?;
        Ok(DiskStore {
            inner,
            options,
            queue: Some(queue),
            writer: Some(writer),
        })
    }

    /// Holds the writer until the returned value is dropped; writes queued
    /// meanwhile are then committed together. Lets tests make a batch.
    #[doc(hidden)]
    pub fn hold_writer(&self) -> WriterHold {
        let (release, held) = mpsc::channel();
        self.send(Job::Hold(held));
        WriterHold { _release: release }
    }

    /// Holds the writer's next commit, after the batch is recorded in the
    /// index and before its transaction commits, until the returned value
    /// is dropped. Lets tests read in that window.
    #[doc(hidden)]
    pub fn hold_commit(&self) -> CommitHold {
        let (reached, at_commit) = mpsc::channel();
        let (release, held) = mpsc::channel();
        if let Ok(mut gate) = self.inner.commit_gate.lock() {
            *gate = Some(CommitGate {
                reached,
                release: held,
            });
        }
        CommitHold {
            at_commit,
            _release: release,
        }
    }

    /// Hands `job` to the writer; if the writer is gone, the job's callback
    /// hears so at once.
    fn send(&self, job: Job) {
        match &self.queue {
            Some(queue) => {
                if let Err(mpsc::SendError(job)) = queue.send(job) {
                    drop(job); // its callbacks report `Closed`
                }
            }
            None => drop(job),
        }
    }

    /// Sends a job and waits for its outcome.
    fn wait<T: Send + 'static>(&self, job: impl FnOnce(Done<T>) -> Job) -> Result<T, StoreError> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.send(job(Done::new(move |r| {
            let _ = tx.send(r);
        })));
        rx.recv().unwrap_or(Err(StoreError::Closed))
    }

    /// Removes one damaged variant; the lookup that found it is a miss.
    fn drop_corrupt(&self, variant: String) -> Result<(), StoreError> {
        self.wait(|done| Job::DropCorrupt { variant, done })?;
        self.inner.counters.add_corrupt();
        Ok(())
    }

    /// Reads the variant `key` selects from disk; keeps a decoded copy in
    /// memory if it was read before (see [`Index::read_from_disk`]) and no
    /// write committed meanwhile.
    fn read(
        &self,
        key: &CacheKey,
        request_headers: &HeaderMap,
    ) -> Result<Option<Arc<StoredResponse>>, StoreError> {
        for _ in 0..READ_ATTEMPTS {
            let generation = self.inner.index()?.generation();
            let (variant, found, size, superseded) = {
                let txn = self.inner.db.begin_read()?;
                let vary_table = txn.open_table(VARY)?;
                let vary = match vary_table.get(key.as_str())? {
                    // An unreadable Vary list selects nothing; the next put
                    // rewrites it.
                    Some(row) => match serde_json::from_str::<Vec<String>>(row.value()) {
                        Ok(vary) => vary,
                        Err(_) => return Ok(None),
                    },
                    None => Vec::new(),
                };
                let variant = variant_key(key, &vary, request_headers);
                // Between a write's record in the index and its commit, the
                // index names a page this snapshot lacks; the page it
                // replaced is here instead.
                let [current, before] = self.inner.index()?.pages_of(&variant);
                let pages = txn.open_table(PAGES)?;
                let mut page = None;
                for (superseded, seq) in [(false, current), (true, before)] {
                    let Some(seq) = seq else { continue };
                    if let Some(bytes) = pages.get(seq)? {
                        page = Some((superseded, seq, bytes));
                        break;
                    }
                }
                let Some((superseded, seq, first)) = page else {
                    // A commit that landed after this snapshot began and
                    // before the index was asked leaves the index naming a
                    // page only a newer snapshot holds.
                    if current.is_some() && self.inner.index()?.generation() != generation {
                        continue;
                    }
                    return Ok(None);
                };
                let first = first.value();
                let (found, len) = if has_tails(first) {
                    let whole = tables::whole_record(&txn, seq, first)?;
                    let len = whole.len();
                    (record::decode_owned(whole), len)
                } else {
                    (record::decode(first), first.len())
                };
                let found = found.filter(|r| r.meta.variant() == variant);
                let size = super::entry_size(&variant, len);
                (variant, found, size, superseded)
            };
            let Some(found) = found else {
                // A damaged page being replaced goes with its commit.
                if !superseded {
                    self.drop_corrupt(variant)?;
                }
                return Ok(None);
            };
            let found = Arc::new(found);
            let mut index = self.inner.index()?;
            // A superseded page is never held: the write replacing it is
            // about to commit.
            let fresh = index.generation() == generation && !superseded;
            index.read_from_disk(found.clone(), size, fresh);
            return Ok(Some(found));
        }
        Ok(None)
    }
}

/// See [`DiskStore::hold_commit`].
#[doc(hidden)]
#[derive(Debug)]
pub struct CommitHold {
    at_commit: mpsc::Receiver<()>,
    _release: mpsc::Sender<()>,
}

impl CommitHold {
    /// Waits until the writer has reached the held commit.
    pub fn reached(&self) {
        let _ = self.at_commit.recv();
    }
}

/// See [`DiskStore::hold_writer`].
#[doc(hidden)]
#[derive(Debug)]
pub struct WriterHold {
    _release: mpsc::Sender<()>,
}

impl Drop for DiskStore {
    /// Lets the writer finish what is queued and close the file, so that the
    /// same path can be opened again at once.
    fn drop(&mut self) {
        self.queue = None;
        if let Some(writer) = self.writer.take() {
            // Dropped by a write's callback on the writer itself (a caller
            // let go of its last reference there): it cannot join itself;
            // it ends, and closes the file, once it returns to its queue,
            // which is gone now.
            if writer.thread().id() == std::thread::current().id() {
                return;
            }
            let _ = writer.join();
        }
    }
}

impl ResponseStore for DiskStore {
    fn get(
        &self,
        key: &CacheKey,
        request_headers: &HeaderMap,
    ) -> Result<Option<Arc<StoredResponse>>, StoreError> {
        match self.get_resident(key, request_headers) {
            Some(known) => known,
            None => self.read(key, request_headers),
        }
    }

    fn get_resident(
        &self,
        key: &CacheKey,
        request_headers: &HeaderMap,
    ) -> Option<Result<Option<Arc<StoredResponse>>, StoreError>> {
        let mut index = match self.inner.index() {
            Ok(index) => index,
            Err(e) => return Some(Err(e)),
        };
        if !index.may_hold(key) {
            return Some(Ok(None));
        }
        index
            .resident_get(key, request_headers)
            .map(|found| Ok(Some(found)))
    }

    fn put(&self, meta: &CacheEntryMeta, body: &[u8]) -> Result<PutOutcome, StoreError> {
        let (meta, body) = (meta.clone(), Bytes::copy_from_slice(body));
        let (tx, rx) = mpsc::sync_channel(1);
        self.put_then(
            meta,
            body,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        rx.recv().unwrap_or(Err(StoreError::Closed))
    }

    fn put_then(&self, meta: CacheEntryMeta, body: Bytes, done: PutDone) {
        if let Some(refused) = self.inner.limits.refuse(&meta, &body) {
            return done(Ok(refused));
        }
        let len = u64::try_from(body.len()).unwrap_or(u64::MAX);
        let before = self.inner.queued.fetch_add(len, Ordering::Relaxed);
        if before.saturating_add(len) > MAX_QUEUED_BYTES && before > 0 {
            self.inner.queued.fetch_sub(len, Ordering::Relaxed);
            return done(Ok(PutOutcome::Busy));
        }
        self.send(Job::Put {
            meta: Box::new(meta),
            body,
            done: Done::new(done),
        });
    }

    fn remove(&self, key: &CacheKey) -> Result<usize, StoreError> {
        let key = key.clone();
        self.wait(|done| Job::Remove { key, done })
    }

    fn stats(&self) -> StoreStats {
        match self.inner.index() {
            Ok(index) => {
                let (entries, bytes) = (index.lru.len(), index.lru.total());
                self.inner
                    .counters
                    .stats(entries, bytes, index.resident_bytes())
            }
            Err(_) => self.inner.counters.stats(0, 0, 0),
        }
    }

    fn put_host_record(&self, host: &str, record: &[u8]) -> Result<(), StoreError> {
        let (host, record) = (host.to_owned(), record.to_vec());
        self.wait(|done| Job::PutHost { host, record, done })
    }

    fn host_records(&self) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let txn = self.inner.db.begin_read()?;
        let hosts = txn.open_table(HOSTS)?;
        let mut out = Vec::new();
        for row in hosts.iter()? {
            let (host, record) = row?;
            out.push((host.value().to_owned(), record.value().to_vec()));
        }
        Ok(out)
    }

    fn remove_host_record(&self, host: &str) -> Result<(), StoreError> {
        let host = host.to_owned();
        self.wait(|done| Job::RemoveHost { host, done })
    }
}
