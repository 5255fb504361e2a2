//! The disk store's one writer thread: group commit.
//!
//! It takes the first job queued, then everything else already waiting (up
//! to [`MAX_BATCH`]), and writes them in one transaction. While that
//! transaction commits, new jobs queue up and form the next batch, so under
//! load one `fsync` serves many responses and no job waits longer than the
//! commit before its own. Each job's callback hears its outcome only after
//! the commit: with `sync = "batch"` that is when it is on disk.
//!
//! With `sync = "none"` commits are not forced to disk one by one; one
//! forced commit follows within [`SYNC_EVERY`] of the first unforced one
//! (redb frees the pages of unforced commits only then), or as soon as the
//! unforced commits carry [`FORCE_AFTER_BYTES`] of pages, and one at exit.
//!
//! The byte bound is for the answers waiting meanwhile. redb keeps an
//! unforced commit's pages in its own buffer, so the forced commit writes
//! them all and then syncs, and no commit can start until it is done:
//! every answer waiting for a "stored" line waits that long. Under a fresh
//! crawl 0.1 s of pages made that 8-10 ms, every 0.1 s: the proxy's p99
//! (bench/README, "Issue 52, seventh round"). Half a MiB makes it 2-4 ms;
//! a slow trickle of pages still gets one forced commit per 0.1 s.
//!
//! Reads (recency ticks, a row per page in `reads_v3`) are committed on
//! their own, in one transaction, once they stop coming ([`READS_QUIET`]),
//! once the oldest has waited [`READS_AT_MOST`], and at exit. Carried by
//! the next page written, as they were, a re-crawl's reads (146,000 after
//! the bench's) made that one commit take most of a second, on whatever
//! the proxy did next; committed every second, they rewrote most of the
//! table's leaves each time while the re-crawl went on.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mannerly_policy::conditional::{CacheEntryMeta, CacheKey, CacheSync};
use redb::{Durability, ReadableTable, Table};

use super::shared::Inner;
use super::tables::{has_tails, tails_of, HOSTS, NO_VARY, PAGES, PIECE, READS, SEQS, TAILS, VARY};
use crate::responses::{entry_size, record, PutOutcome, StoreError, StoredResponse};

/// Jobs written in one transaction, at most.
const MAX_BATCH: usize = 512;
/// With `sync = "none"`, the longest an unforced commit stays unforced.
const SYNC_EVERY: Duration = Duration::from_millis(100);
/// With `sync = "none"`, the most page bytes committed unforced before the
/// next commit is forced.
const FORCE_AFTER_BYTES: usize = 512 * 1024;
/// How often the idle writer looks at the reads gathered.
const READS_EVERY: Duration = Duration::from_millis(250);
/// Reads are committed once none came for this long (a crawl's spell of
/// reads is over)...
const READS_QUIET: Duration = Duration::from_millis(500);
/// ...or once the oldest waited this long, however busy the store is.
const READS_AT_MOST: Duration = Duration::from_secs(60);

/// A job's callback. Dropped without being called (the writer is gone, or
/// panicked), it reports [`StoreError::Closed`], so that no caller waits
/// forever and no audit line waiting for a write is lost.
pub(super) struct Done<T>(Option<Callback<T>>);

type Callback<T> = Box<dyn FnOnce(Result<T, StoreError>) + Send>;

impl<T> Done<T> {
    pub(super) fn new(f: impl FnOnce(Result<T, StoreError>) + Send + 'static) -> Self {
        Done(Some(Box::new(f)))
    }

    fn finish(mut self, result: Result<T, StoreError>) {
        if let Some(f) = self.0.take() {
            f(result);
        }
    }
}

impl<T> Drop for Done<T> {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f(Err(StoreError::Closed));
        }
    }
}

/// One write, as queued by the store's callers.
pub(super) enum Job {
    Put {
        meta: Box<CacheEntryMeta>,
        body: Bytes,
        done: Done<PutOutcome>,
    },
    Remove {
        key: CacheKey,
        done: Done<usize>,
    },
    DropCorrupt {
        variant: String,
        done: Done<()>,
    },
    PutHost {
        host: String,
        record: Vec<u8>,
        done: Done<()>,
    },
    RemoveHost {
        host: String,
        done: Done<()>,
    },
    /// Waits until the sender is dropped, then goes on collecting the batch.
    Hold(Receiver<()>),
}

impl Job {
    fn is_host_record(&self) -> bool {
        matches!(self, Job::PutHost { .. } | Job::RemoveHost { .. })
    }

    /// The page bytes the job writes.
    fn page_bytes(&self) -> usize {
        match self {
            Job::Put { body, .. } => body.len(),
            _ => 0,
        }
    }
}

/// A job's write, encoded and ready for the transaction.
enum Op {
    Put {
        meta: Box<CacheEntryMeta>,
        body: Bytes,
        bytes: Vec<u8>,
        vary_json: String,
    },
    Remove(CacheKey),
    DropCorrupt(String),
    PutHost(String, Vec<u8>),
    RemoveHost(String),
}

/// A job's callback, by the type of its outcome.
enum Waiter {
    Put(Done<PutOutcome>),
    Count(Done<usize>),
    Unit(Done<()>),
}

enum Outcome {
    Put(PutOutcome),
    Count(usize),
    Unit,
}

impl Waiter {
    fn finish(self, result: Result<Outcome, Arc<StoreError>>) {
        let err = |e: &Arc<StoreError>| StoreError::Batch(e.clone());
        match (self, result) {
            (Waiter::Put(d), Ok(Outcome::Put(o))) => d.finish(Ok(o)),
            (Waiter::Count(d), Ok(Outcome::Count(n))) => d.finish(Ok(n)),
            (Waiter::Unit(d), Ok(Outcome::Unit)) => d.finish(Ok(())),
            (Waiter::Put(d), Err(e)) => d.finish(Err(err(&e))),
            (Waiter::Count(d), Err(e)) => d.finish(Err(err(&e))),
            (Waiter::Unit(d), Err(e)) => d.finish(Err(err(&e))),
            // Outcomes are produced in the order of their jobs, one each.
            (w, Ok(_)) => drop(w),
        }
    }
}

/// The writer thread's loop, committing as `sync` says and timing that by
/// `now`; returns when every sender is gone and the queue is empty.
pub(super) fn run(inner: &Inner, jobs: &Receiver<Job>, sync: CacheSync, now: impl Fn() -> Instant) {
    let age = |t: Instant| now().saturating_duration_since(t);
    // The first commit not forced to disk since the last forced one, and
    // the page bytes of all those commits.
    let mut unforced: Option<Instant> = None;
    let mut unforced_bytes = 0;
    let mut reads = Reads::default();
    loop {
        if reads.due(pending_reads(inner), now()) && write_reads(inner) {
            unforced = unforced.or_else(|| Some(now()));
        }
        let first = match unforced {
            Some(since) => match jobs.recv_timeout(SYNC_EVERY.saturating_sub(age(since))) {
                Ok(job) => job,
                Err(RecvTimeoutError::Timeout) => {
                    if force(inner).is_ok() {
                        (unforced, unforced_bytes) = (None, 0);
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            },
            None => match jobs.recv_timeout(READS_EVERY) {
                Ok(job) => job,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => break,
            },
        };
        let mut batch = Vec::new();
        match first {
            Job::Hold(held) => while held.recv().is_ok() {},
            job => batch.push(job),
        }
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(Job::Hold(held)) => while held.recv().is_ok() {},
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        if batch.is_empty() {
            continue;
        }
        let bytes: usize = batch.iter().map(Job::page_bytes).sum();
        // Host records (pauses, breakers, ceilings) are forced whatever
        // the setting: a pause lost in a crash would send requests to a
        // host that asked for none, where a lost page is only fetched again.
        let durable = match sync {
            CacheSync::Batch => true,
            CacheSync::None => {
                batch.iter().any(Job::is_host_record)
                    || unforced.is_some_and(|t| age(t) >= SYNC_EVERY)
                    || unforced_bytes + bytes >= FORCE_AFTER_BYTES
            }
        };
        let committed = commit(inner, batch, durable);
        match (durable, committed) {
            (true, true) => (unforced, unforced_bytes) = (None, 0),
            (false, true) => {
                unforced = unforced.or_else(|| Some(now()));
                unforced_bytes += bytes;
            }
            (_, false) => {}
        }
    }
    if pending_reads(inner) > 0 && write_reads(inner) {
        unforced = unforced.or_else(|| Some(now()));
    }
    if unforced.is_some() {
        if let Err(e) = force(inner) {
            tracing::warn!("response store: last commit not forced to disk: {e}");
        }
    }
}

/// When the reads gathered are due: [`READS_QUIET`] after the last one,
/// or [`READS_AT_MOST`] after the first.
#[derive(Default)]
struct Reads {
    count: usize,
    changed: Option<Instant>,
    since: Option<Instant>,
}

impl Reads {
    /// `count` reads wait at `now`; whether to commit them. Once they are
    /// taken the count is 0, and the watch starts again.
    fn due(&mut self, count: usize, now: Instant) -> bool {
        if count == 0 {
            *self = Reads::default();
            return false;
        }
        let since = *self.since.get_or_insert(now);
        if count != self.count {
            (self.count, self.changed) = (count, Some(now));
        }
        let changed = self.changed.unwrap_or(now);
        now.saturating_duration_since(changed) >= READS_QUIET
            || now.saturating_duration_since(since) >= READS_AT_MOST
    }
}

/// How many reads wait to reach the disk.
fn pending_reads(inner: &Inner) -> usize {
    inner.index().map_or(0, |index| index.pending_reads())
}

/// Commits the reads gathered, alone and unforced (the caller forces it
/// with the next forced commit, or at once); returns whether it committed.
fn write_reads(inner: &Inner) -> bool {
    let written = (|| -> Result<(), StoreError> {
        let mut txn = inner.db.begin_write()?;
        txn.set_durability(Durability::None)?;
        {
            let mut rows = txn.open_table(READS)?;
            let reads = inner.index()?.take_reads();
            for (seq, tick) in reads {
                rows.insert(seq, tick)?;
            }
        }
        txn.commit()?;
        Ok(())
    })();
    match written {
        Ok(()) => {
            inner.counters.add_read_commit();
            true
        }
        Err(e) => {
            tracing::warn!("response store: reads not written: {e}");
            // The index took them as written: it is rebuilt from the disk.
            if let (Ok(rows), Ok(mut index)) = (inner.rows(), inner.index()) {
                index.reset(rows);
            }
            false
        }
    }
}

/// An empty forced commit: makes every earlier unforced commit durable.
fn force(inner: &Inner) -> Result<(), StoreError> {
    let txn = inner.db.begin_write()?;
    txn.commit()?;
    inner.counters.add_forced();
    Ok(())
}

/// Writes one batch; every job's callback hears its outcome. Returns
/// whether the transaction committed.
fn commit(inner: &Inner, batch: Vec<Job>, durable: bool) -> bool {
    let mut ops = Vec::with_capacity(batch.len());
    let mut waiters = Vec::with_capacity(batch.len());
    for job in batch {
        match job {
            Job::Put { meta, body, done } => {
                inner.dequeued(body.len());
                // Encoding fails for this job alone, before the transaction.
                let encoded = record::encode(&meta, &body)
                    .and_then(|bytes| Ok((bytes, serde_json::to_string(meta.vary())?)));
                match encoded {
                    Ok((bytes, vary_json)) => {
                        ops.push(Op::Put {
                            meta,
                            body,
                            bytes,
                            vary_json,
                        });
                        waiters.push(Waiter::Put(done));
                    }
                    Err(e) => done.finish(Err(e.into())),
                }
            }
            Job::Remove { key, done } => {
                ops.push(Op::Remove(key));
                waiters.push(Waiter::Count(done));
            }
            Job::DropCorrupt { variant, done } => {
                ops.push(Op::DropCorrupt(variant));
                waiters.push(Waiter::Unit(done));
            }
            Job::PutHost { host, record, done } => {
                ops.push(Op::PutHost(host, record));
                waiters.push(Waiter::Unit(done));
            }
            Job::RemoveHost { host, done } => {
                ops.push(Op::RemoveHost(host));
                waiters.push(Waiter::Unit(done));
            }
            Job::Hold(_) => {}
        }
    }
    if ops.is_empty() {
        return true;
    }
    let mut keep = Vec::new();
    match write(inner, ops, durable, &mut keep) {
        Ok(outcomes) => {
            inner.counters.add_commit(durable);
            if let Ok(mut index) = inner.index() {
                for (entry, size) in keep {
                    index.refresh(entry, size);
                }
                index.committed();
            }
            for (waiter, outcome) in waiters.into_iter().zip(outcomes) {
                if let Outcome::Put(PutOutcome::Stored { evicted }) = outcome {
                    inner.counters.add_evicted(evicted);
                }
                waiter.finish(Ok(outcome));
            }
            true
        }
        Err(e) => {
            // The disk still holds the state before this batch; the index was
            // changed as the batch went, so it is rebuilt from the disk.
            if let (Ok(rows), Ok(mut index)) = (inner.rows(), inner.index()) {
                index.reset(rows);
            }
            let e = Arc::new(e);
            for waiter in waiters {
                waiter.finish(Err(e.clone()));
            }
            false
        }
    }
}

struct Tables<'t> {
    pages: Table<'t, u64, &'static [u8]>,
    tails: Table<'t, (u64, u32), &'static [u8]>,
    seqs: Table<'t, u64, (&'static str, u64)>,
    reads: Table<'t, u64, u64>,
    vary: Table<'t, &'static str, &'static str>,
    hosts: Table<'t, &'static str, &'static [u8]>,
}

impl Tables<'_> {
    /// Deletes a variant's page (and its read row) and forgets it.
    fn remove_variant(&mut self, inner: &Inner, variant: &str) -> Result<(), StoreError> {
        let (seq, read_row) = {
            let index = inner.index()?;
            (index.seq_of(variant), index.has_read_row(variant))
        };
        self.remove_page(seq, read_row)?;
        inner.index()?.forget(variant);
        Ok(())
    }

    /// Writes `record` as page `seq`: whole when it fits one piece, else in
    /// pieces (see [`TAILS`]).
    fn write_page(&mut self, seq: u64, record: &[u8]) -> Result<(), StoreError> {
        let mut pieces = record.chunks(PIECE);
        self.pages.insert(seq, pieces.next().unwrap_or_default())?;
        for (n, piece) in (1..).zip(pieces) {
            self.tails.insert((seq, n), piece)?;
        }
        Ok(())
    }

    /// Deletes page `seq` and, with `read_row`, its read row.
    fn remove_page(&mut self, seq: Option<u64>, read_row: bool) -> Result<(), StoreError> {
        if let Some(seq) = seq {
            let pieces = self
                .pages
                .remove(seq)?
                .is_some_and(|first| has_tails(first.value()));
            if pieces {
                self.tails.retain_in(tails_of(seq), |_, _| false)?;
            }
            self.seqs.remove(seq)?;
            if read_row {
                self.reads.remove(seq)?;
            }
        }
        Ok(())
    }
}

/// The batch as one transaction; the outcomes in the order of `ops`. Entries
/// written are pushed to `keep`, to be held in memory once committed.
fn write(
    inner: &Inner,
    ops: Vec<Op>,
    durable: bool,
    keep: &mut Vec<(Arc<StoredResponse>, u64)>,
) -> Result<Vec<Outcome>, StoreError> {
    let mut txn = inner.db.begin_write()?;
    if !durable {
        txn.set_durability(Durability::None)?;
    }
    let mut out = Vec::with_capacity(ops.len());
    {
        let mut t = Tables {
            pages: txn.open_table(PAGES)?,
            tails: txn.open_table(TAILS)?,
            seqs: txn.open_table(SEQS)?,
            reads: txn.open_table(READS)?,
            vary: txn.open_table(VARY)?,
            hosts: txn.open_table(HOSTS)?,
        };
        for op in ops {
            out.push(match op {
                Op::Put {
                    meta,
                    body,
                    bytes,
                    vary_json,
                } => put(inner, &mut t, *meta, body, &bytes, &vary_json, keep)?,
                Op::Remove(key) => {
                    let variants = inner.index()?.variants_of(&key);
                    for variant in &variants {
                        t.remove_variant(inner, variant)?;
                    }
                    t.vary.remove(key.as_str())?;
                    Outcome::Count(variants.len())
                }
                Op::DropCorrupt(variant) => {
                    t.remove_variant(inner, &variant)?;
                    Outcome::Unit
                }
                Op::PutHost(host, record) => {
                    t.hosts.insert(host.as_str(), record.as_slice())?;
                    Outcome::Unit
                }
                Op::RemoveHost(host) => {
                    t.hosts.remove(host.as_str())?;
                    Outcome::Unit
                }
            });
        }
    }
    let gate = inner.commit_gate.lock().ok().and_then(|mut g| g.take());
    if let Some(gate) = gate {
        gate.wait();
    }
    txn.commit()?;
    Ok(out)
}

/// Drops variants a changed `Vary` orphaned, evicts least recently used
/// entries, writes the entry.
fn put(
    inner: &Inner,
    t: &mut Tables<'_>,
    meta: CacheEntryMeta,
    body: Bytes,
    bytes: &[u8],
    vary_json: &str,
    keep: &mut Vec<(Arc<StoredResponse>, u64)>,
) -> Result<Outcome, StoreError> {
    let size = entry_size(meta.variant(), bytes.len());
    if size > inner.limits.max_size {
        return Ok(Outcome::Put(PutOutcome::TooLarge));
    }
    let primary = meta.key().as_str();
    // A URL without Vary has no row (most have none, and a row per page is
    // one more tree written per commit).
    let old = t.vary.get(primary)?.map(|v| v.value().to_owned());
    let old_json = old.as_deref().unwrap_or(NO_VARY);
    if old_json != vary_json {
        // Old variants were keyed by other header names: unreachable now.
        let orphans = inner.index()?.variants_of(meta.key());
        for variant in orphans {
            t.remove_variant(inner, &variant)?;
        }
    }
    if vary_json == NO_VARY {
        if old.is_some() {
            t.vary.remove(primary)?;
        }
    } else if old_json != vary_json {
        t.vary.insert(primary, vary_json)?;
    }
    let entry = Arc::new(StoredResponse { meta, body });
    let variant = entry.meta.variant();
    let (victims, old, seq) = {
        let mut index = inner.index()?;
        let written_back = index.read_since_written(variant);
        let victims: Vec<_> = index
            .lru
            .victims(variant, size, inner.limits.max_size)
            .into_iter()
            .map(|v| {
                let page = (index.seq_of(&v), index.has_read_row(&v));
                index.forget(&v);
                page
            })
            .collect();
        let old = (index.seq_of(variant), index.has_read_row(variant));
        let seq = index.stored(variant, size);
        if written_back {
            index.hold_written(entry.clone(), size);
        }
        (victims, old, seq)
    };
    for &(seq, read_row) in &victims {
        t.remove_page(seq, read_row)?;
    }
    t.remove_page(old.0, old.1)?;
    t.write_page(seq, bytes)?;
    t.seqs.insert(seq, (variant, size))?;
    let evicted = victims.len();
    keep.push((entry, size));
    Ok(Outcome::Put(PutOutcome::Stored { evicted }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::disallowed_methods)] // any instant will do as the start
    fn reads_are_due_once_they_pause_or_have_waited_long() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut reads = Reads::default();
        assert!(!reads.due(0, at(0)));
        // Still coming: not due, however many.
        assert!(!reads.due(10, at(0)));
        assert!(!reads.due(20, at(400)));
        assert!(!reads.due(30, at(800)));
        // None for READS_QUIET: due.
        assert!(!reads.due(30, at(1_200)));
        assert!(reads.due(30, at(1_300)));
        // Taken: the watch starts again.
        assert!(!reads.due(0, at(1_400)));
        assert!(!reads.due(1, at(1_500)));
        // Never pausing, they are due READS_AT_MOST after the first.
        let mut n = 1;
        let mut ms = 1_500;
        while ms < 1_500 + 60_000 {
            assert!(!reads.due(n, at(ms)), "{ms}");
            n += 1;
            ms += 250;
        }
        assert!(reads.due(n, at(ms)));
    }
}
