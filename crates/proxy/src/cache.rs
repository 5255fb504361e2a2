//! The I/O half of `mannerly_policy::conditional`: the response store read
//! and written off the async threads, and the body that passes a response on
//! while keeping a copy for the store. Which responses are stored and replayed
//! is decided in the policy crate, never here.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use mannerly_policy::conditional::{
    CacheEntryMeta, CacheKey, CacheOutcome, CacheParams, CacheReads,
};
use mannerly_policy::AuditRecord;
use mannerly_state::responses::{
    DiskOptions, DiskStore, PutOutcome, ResponseStore, SharedPages, StoreError, StoreLimits,
    StoredResponse,
};
use tokio::sync::{oneshot, watch};

use crate::audit::Committer;
use crate::audit::FinishHook;
use crate::body::{BoxError, ProxyBody};
use crate::clock::Clock;
use crate::config::Config;
use crate::error::StartError;

/// The response store with its parameters and its error count.
pub(crate) struct Cache {
    store: Arc<dyn ResponseStore>,
    params: CacheParams,
    errors: AtomicU64,
    /// Background writes still running; shutdown waits for them so that
    /// their audit lines are written before the log is closed. Shared, so
    /// that a finished write can let go of the cache before it says so.
    pending: Arc<watch::Sender<usize>>,
    /// The cluster's page store behind this one (`state.share_pages`).
    shared: std::sync::OnceLock<SharedPages>,
}

impl Cache {
    /// Opens the embedded store named by the config; its writer times its
    /// commits by `clock`.
    pub(crate) fn open(cfg: &Config, clock: &Clock) -> Result<Arc<Cache>, StartError> {
        let path = cfg.store_path();
        let store_err = |why: String| StartError::Store {
            path: path.clone(),
            why,
        };
        crate::datadir::prepare(&cfg.data_dir)?;
        // redb opens by path and creates with the umask's mode: the file is
        // made here first, private, and never through a symlink.
        crate::datadir::ensure_private_file(&path)?;
        let limits = StoreLimits::from(&cfg.cache);
        let clock = clock.clone();
        let store = DiskStore::open_with(&path, limits, DiskOptions::from(&cfg.cache), move || {
            clock.now_std()
        })
        .map_err(|e| store_err(e.to_string()))?;
        Ok(Cache::with_store(Arc::new(store), cfg.cache.clone()))
    }

    pub(crate) fn with_store(store: Arc<dyn ResponseStore>, params: CacheParams) -> Arc<Cache> {
        Arc::new(Cache {
            store,
            params,
            errors: AtomicU64::new(0),
            pending: Arc::new(watch::Sender::new(0)),
            shared: std::sync::OnceLock::new(),
        })
    }

    /// Puts the cluster's page store behind this one: a local miss looks
    /// there, and what is stored here is shared. `None` (state not shared)
    /// leaves the store alone.
    pub(crate) fn share(&self, pages: Option<SharedPages>) {
        if let Some(p) = pages {
            let _ = self.shared.set(p);
        }
    }

    pub(crate) fn params(&self) -> &CacheParams {
        &self.params
    }

    pub(crate) fn store(&self) -> &Arc<dyn ResponseStore> {
        &self.store
    }

    /// Store failures since start (for the metrics endpoint of a later
    /// issue; logged at shutdown until then).
    pub(crate) fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// Counts and logs a store failure; the request it happened in goes on
    /// as a pass-through.
    pub(crate) fn failed(&self, what: &str, e: &dyn std::fmt::Display) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        tracing::warn!("cache: {what} failed: {e}");
    }

    /// The stored response for `key` that the request's headers select.
    /// Misses and entries held in memory are answered on this thread; a
    /// read of the disk too, unless `cache.reads = "pool"`.
    pub(crate) async fn get(
        self: &Arc<Self>,
        key: &CacheKey,
        headers: &HeaderMap,
    ) -> Result<Option<Arc<StoredResponse>>, StoreError> {
        let local = self.get_local(key, headers).await;
        let (Ok(None), Some(shared)) = (&local, self.shared.get()) else {
            return local;
        };
        // Another proxy may have stored it: kept here too from now on, so
        // that its revalidations refresh this proxy's copy.
        let Some(found) = shared.get(key, headers).await else {
            return local;
        };
        let found = Arc::new(found);
        self.put_local(found.meta.clone(), found.body.clone());
        Ok(Some(found))
    }

    async fn get_local(
        self: &Arc<Self>,
        key: &CacheKey,
        headers: &HeaderMap,
    ) -> Result<Option<Arc<StoredResponse>>, StoreError> {
        if let Some(known) = self.store.get_resident(key, headers) {
            return known;
        }
        if self.params.reads == CacheReads::Inline {
            return self.store.get(key, headers);
        }
        let this = self.clone();
        let key = key.clone();
        let headers = headers.clone();
        match tokio::task::spawn_blocking(move || this.store.get(&key, &headers)).await {
            Ok(found) => found,
            // The blocking task panicked or was cancelled: as good as a
            // store that failed.
            Err(_) => Err(StoreError::Poisoned),
        }
    }

    /// Runs `job` on the blocking pool without anyone waiting for it.
    fn background(self: &Arc<Self>, job: impl FnOnce(&Cache) + Send + 'static) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        self.pending.send_modify(|n| *n += 1);
        let (this, pending) = (self.clone(), self.pending.clone());
        rt.spawn_blocking(move || {
            job(&this);
            drop(this);
            pending.send_modify(|n| *n -= 1);
        });
    }

    /// A page found in the shared store, kept in this proxy's own.
    fn put_local(self: &Arc<Self>, meta: CacheEntryMeta, body: Bytes) {
        self.put_only_here(meta, body, |c, outcome| {
            if let Err(e) = outcome {
                c.failed("write", &e);
            }
        });
    }

    /// Queues `meta` and `body` for the store; `then` hears the outcome on
    /// the store's thread. Shutdown waits for it (see [`Cache::drain`]).
    /// What the store kept is shared too, when pages are.
    fn put_then(
        self: &Arc<Self>,
        meta: CacheEntryMeta,
        body: Bytes,
        then: impl FnOnce(&Cache, Result<PutOutcome, StoreError>) + Send + 'static,
    ) {
        let share = self
            .shared
            .get()
            .cloned()
            .zip(tokio::runtime::Handle::try_current().ok())
            .map(|s| (s, meta.clone(), body.clone()));
        self.put_only_here(meta, body, move |c, outcome| {
            if let (Ok(PutOutcome::Stored { .. }), Some(((pages, rt), meta, body))) =
                (&outcome, share)
            {
                rt.spawn(async move { pages.put(&meta, &body).await });
            }
            then(c, outcome);
        });
    }

    fn put_only_here(
        self: &Arc<Self>,
        meta: CacheEntryMeta,
        body: Bytes,
        then: impl FnOnce(&Cache, Result<PutOutcome, StoreError>) + Send + 'static,
    ) {
        self.pending.send_modify(|n| *n += 1);
        let (this, pending) = (self.clone(), self.pending.clone());
        self.store.put_then(
            meta,
            body,
            Box::new(move |outcome| {
                then(&this, outcome);
                // Let go of the cache before shutdown hears this write is
                // done: the last reference must not be dropped here, on the
                // store's own thread, whose store would then join itself.
                drop(this);
                pending.send_modify(|n| *n -= 1);
            }),
        );
    }

    /// Writes a refreshed entry back, off the response path.
    pub(crate) fn write_back(self: &Arc<Self>, meta: CacheEntryMeta, body: Bytes) {
        self.put_then(meta, body, |c, outcome| {
            if let Err(e) = outcome {
                c.failed("write-back", &e);
            }
        });
    }

    /// Forgets what is stored for `key`, off the response path.
    pub(crate) fn remove_later(self: &Arc<Self>, key: CacheKey) {
        self.remove_shared(vec![key.clone()]);
        self.background(move |c| {
            if let Err(e) = c.store.remove(&key) {
                c.failed("remove", &e);
            }
        });
    }

    /// Forgets what is stored for `keys` before the caller goes on: an
    /// unsafe request's success makes them stale, and the client's next
    /// request must not find them (RFC 9111 §4.4).
    pub(crate) async fn remove_now(self: &Arc<Self>, keys: Vec<CacheKey>) {
        self.remove_shared(keys.clone());
        let this = self.clone();
        let removed = tokio::task::spawn_blocking(move || {
            for key in &keys {
                if let Err(e) = this.store.remove(key) {
                    this.failed("invalidate", &e);
                }
            }
        })
        .await;
        if removed.is_err() {
            self.failed("invalidate", &"the removing task stopped");
        }
    }

    /// Forgets `keys` in the shared store too, off the request's path.
    fn remove_shared(&self, keys: Vec<CacheKey>) {
        let (Some(pages), Ok(rt)) = (
            self.shared.get().cloned(),
            tokio::runtime::Handle::try_current(),
        ) else {
            return;
        };
        rt.spawn(async move {
            for key in &keys {
                pages.remove(key).await;
            }
        });
    }

    /// The audit hook of a response that may be stored: once its body has
    /// gone to the client completely, the copy is written in the background
    /// and the audit line says what became of it (`stored`, `miss`, `error`).
    pub(crate) fn store_when_done(
        self: &Arc<Self>,
        meta: CacheEntryMeta,
        copy: oneshot::Receiver<Vec<Bytes>>,
    ) -> FinishHook {
        let this = self.clone();
        Box::new(move |mut rec: Box<AuditRecord>, sink: Committer| {
            let mut copy = copy;
            let Ok(chunks) = copy.try_recv() else {
                // Cut short, failed, or above max_body: nothing to store.
                rec.cache = Some(CacheOutcome::Miss.as_str());
                sink.send(rec);
                return;
            };
            // A copy of its own, even for one chunk: a chunk is a slice of
            // hyper's read buffer, and a stored page held in memory would
            // keep the whole buffer alive (heaptrack: 64 MiB of resident
            // pages held ~530 MB of read buffers).
            let body = match chunks.as_slice() {
                [one] => Bytes::copy_from_slice(one),
                _ => Bytes::from(chunks.concat()),
            };
            this.put_then(meta, body, move |c, outcome| {
                let outcome = match outcome {
                    Ok(PutOutcome::Stored { .. }) => CacheOutcome::Stored,
                    Ok(PutOutcome::TooLarge | PutOutcome::LengthMismatch | PutOutcome::Busy) => {
                        CacheOutcome::Miss
                    }
                    Err(e) => {
                        c.failed("write", &e);
                        CacheOutcome::Error
                    }
                };
                rec.cache = Some(outcome.as_str());
                sink.send(rec);
            });
        })
    }

    /// Waits up to `grace` for background writes to finish.
    pub(crate) async fn drain(&self, grace: Duration) {
        let mut pending = self.pending.subscribe();
        let drained = tokio::time::timeout(grace, pending.wait_for(|n| *n == 0))
            .await
            .is_ok_and(|r| r.is_ok());
        if !drained {
            tracing::warn!("cache: store writes still running at shutdown");
        }
    }
}

/// Passes a body on frame by frame and keeps a copy of it, up to `max`
/// bytes. The copy is handed over only when the body has ended completely;
/// a body that fails, is cut short or grows past `max` hands nothing over.
/// The client never waits for the copy.
pub(crate) struct Tee {
    inner: ProxyBody,
    kept: Vec<Bytes>,
    len: u64,
    max: u64,
    done: Option<oneshot::Sender<Vec<Bytes>>>,
}

impl Tee {
    pub(crate) fn new(inner: ProxyBody, max: u64) -> (Tee, oneshot::Receiver<Vec<Bytes>>) {
        let (tx, rx) = oneshot::channel();
        let tee = Tee {
            inner,
            kept: Vec::new(),
            len: 0,
            max,
            done: Some(tx),
        };
        (tee, rx)
    }

    fn complete(&mut self) {
        if let Some(tx) = self.done.take() {
            let _ = tx.send(std::mem::take(&mut self.kept));
        }
    }
}

impl Body for Tee {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(data), Some(_)) = (frame.data_ref(), &this.done) {
                    this.len += data.len() as u64;
                    if this.len > this.max {
                        this.done = None;
                        this.kept = Vec::new();
                    } else {
                        this.kept.push(data.clone());
                    }
                }
                // hyper stops polling a body that says it has ended, so the
                // last frame is where a sized body completes.
                if this.inner.is_end_stream() {
                    this.complete();
                }
            }
            Poll::Ready(Some(Err(_))) => {
                this.done = None;
                this.kept = Vec::new();
            }
            Poll::Ready(None) => this.complete(),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::thread::ThreadId;

    use mannerly_state::responses::{MemoryStore, StoreStats};

    use super::*;

    /// A store with nothing in memory, so that every lookup is a disk read:
    /// it notes the thread each read runs on.
    struct OnDisk {
        inner: MemoryStore,
        read_on: Mutex<Vec<ThreadId>>,
    }

    impl ResponseStore for OnDisk {
        fn get(
            &self,
            key: &CacheKey,
            headers: &HeaderMap,
        ) -> Result<Option<Arc<StoredResponse>>, StoreError> {
            self.read_on
                .lock()
                .unwrap()
                .push(std::thread::current().id());
            self.inner.get(key, headers)
        }
        fn put(&self, meta: &CacheEntryMeta, body: &[u8]) -> Result<PutOutcome, StoreError> {
            self.inner.put(meta, body)
        }
        fn remove(&self, key: &CacheKey) -> Result<usize, StoreError> {
            self.inner.remove(key)
        }
        fn stats(&self) -> StoreStats {
            self.inner.stats()
        }
        fn put_host_record(&self, host: &str, record: &[u8]) -> Result<(), StoreError> {
            self.inner.put_host_record(host, record)
        }
        fn host_records(&self) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
            self.inner.host_records()
        }
        fn remove_host_record(&self, host: &str) -> Result<(), StoreError> {
            self.inner.remove_host_record(host)
        }
    }

    /// The thread that read the disk for one lookup through a cache with
    /// `reads`, and the thread that asked.
    fn read_thread(reads: CacheReads) -> (ThreadId, ThreadId) {
        let params = CacheParams {
            reads,
            ..CacheParams::default()
        };
        let store = Arc::new(OnDisk {
            inner: MemoryStore::new(StoreLimits::from(&params)),
            read_on: Mutex::new(Vec::new()),
        });
        let cache = Cache::with_store(store.clone(), params);
        let key = CacheKey::new(&http::Method::GET, "http://a.test/page").unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let found = rt.block_on(cache.get(&key, &HeaderMap::new())).unwrap();
        assert!(found.is_none(), "nothing was stored");
        let read_on = store.read_on.lock().unwrap().clone();
        assert_eq!(read_on.len(), 1, "one read of the disk");
        (read_on[0], std::thread::current().id())
    }

    #[test]
    fn a_disk_read_runs_on_the_serving_thread_by_default() {
        let (read, asked) = read_thread(CacheReads::default());
        assert_eq!(read, asked);
    }

    #[test]
    fn with_reads_pool_a_disk_read_runs_on_another_thread() {
        let (read, asked) = read_thread(CacheReads::Pool);
        assert_ne!(read, asked);
    }
}
