//! The audit log writer. The task that completes a record writes it itself:
//! it queues the record and, if no one else is writing, takes the writer,
//! chains every queued line to the previous one, writes them in one `write`
//! and tells the requests waiting for those lines that they reached the OS.
//! If someone else is writing, that writer takes the queued record with its
//! next round, so under load the lines of many requests share one `write`,
//! and no record waits for a thread hand-off (a hand-off per line, and the
//! context switches with it, cost more than the write itself). An answer's
//! last byte is released only after its line is written, so a `kill -9` at
//! any moment leaves no completely answered request without its line.
//!
//! One thread does what is due by time: signed checkpoints after
//! `audit.checkpoint_secs`, `fsync` once a second (`sync = "batch"`, on a
//! second handle, so that writers do not wait for the disk), rotation by
//! age, and reopening on request (SIGHUP after logrotate moved the file).
//! Checkpoints by line count and rotation by size happen in the writing
//! round that reaches them. With the log on stdout the timer thread also
//! does the writing: a pipe whose reader stalls must not block a runtime
//! thread.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::AtomicBool;
use std::sync::{mpsc, Arc, Mutex, MutexGuard, OnceLock, TryLockError};
use std::task::{Context, Poll};
use std::thread::JoinHandle;
use std::time::Duration;

use mannerly_policy::{AuditRecord, FileTrees, SealReason, GENESIS};
use tokio::runtime::Handle;
use tokio::sync::oneshot;

use crate::clock::Clock;
use crate::config::{AuditSync, AuditTarget, Config};
use crate::datadir;
use crate::error::AuditError;

mod body;
mod files;
mod key;
mod soon;
mod witness;
mod writer;

pub use files::rotated_files;
use files::{open_file, rebuild};
pub use witness::fetch_heads as fetch_witness_heads;
use witness::Witness;
use writer::{Out, Queued, Writer};

pub(crate) use body::{gate, line_written, AuditedBody, FinishHook};
pub use key::{key_path, load as load_key, load_or_create as load_or_create_key};
pub(crate) use writer::AuditStats;

/// Messages to the timer thread.
enum Msg {
    /// Records are queued for the timer thread to write (stdout target).
    Write,
    /// `fsync` this handle of the file, off the writer's lock.
    Sync(std::fs::File),
    Reopen,
    Close,
}

/// What every sink shares: the writer and the records waiting for it.
struct Log {
    writer: Mutex<Writer>,
    queue: Mutex<Vec<Queued>>,
    /// Set for the stdout target: a pipe whose reader stalls would block
    /// the writing task's runtime thread (and with it every task on that
    /// thread), so records are handed to the timer thread instead. A file
    /// takes a `write` without waiting for anyone.
    handoff: Option<mpsc::Sender<Msg>>,
    /// The timer thread, for the early `fsync` (`Writer::early_sync`).
    timers: mpsc::Sender<Msg>,
    soon: Soon,
}

/// Where flushes go for records queued off the runtime's threads
/// (`soon.rs`, which implements the flushing on [`Log`]).
#[derive(Default)]
struct Soon {
    runtime: OnceLock<Handle>,
    /// A flush spawned from a thread with no runtime has not run yet.
    remote_due: Arc<AtomicBool>,
}

impl Log {
    fn writer(&self) -> MutexGuard<'_, Writer> {
        // A panic while writing leaves the file as it was: the next write
        // goes on from the chain value the writer holds.
        self.writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn queue(&self) -> MutexGuard<'_, Vec<Queued>> {
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues a record and writes everything queued unless someone else is
    /// writing now; that writer then writes it in its next round, since it
    /// looks at the queue again after each round, and once more after it
    /// let go of the writer with nothing left.
    /// With `soon`, the write waits for the end of the runtime's turn
    /// (`soon.rs`): only for a line whose answer waits for it before hyper
    /// sees the answer.
    fn submit(
        self: &Arc<Self>,
        rec: Box<AuditRecord>,
        ack: Option<oneshot::Sender<bool>>,
        soon: bool,
    ) {
        self.queue().push((rec, ack));
        match &self.handoff {
            Some(timers) => {
                if timers.send(Msg::Write).is_err() {
                    // The timer thread is gone (closed): the closed writer
                    // answers `false` to whoever waits.
                    self.write_queued();
                }
            }
            None if soon => self.write_soon(),
            None => self.write_queued(),
        }
    }

    /// Runs `f` on the writer for what is due by time, then writes what
    /// was queued meanwhile: a record queued while `f` held the writer
    /// found it taken and was left to whoever held it.
    fn with_writer<T>(&self, f: impl FnOnce(&mut Writer) -> T) -> T {
        let out = f(&mut self.writer());
        self.write_queued();
        out
    }

    fn write_queued(&self) {
        loop {
            let mut w = match self.writer.try_lock() {
                Ok(w) => w,
                Err(TryLockError::WouldBlock) => return,
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
            };
            let batch = std::mem::take(&mut *self.queue());
            if batch.is_empty() {
                drop(w);
                // A record queued after that look but before the unlock
                // found the writer taken and left it to us: look again
                // now that anyone can take the writer.
                if self.queue().is_empty() {
                    return;
                }
                continue;
            }
            w.write_batch(batch);
            if let Some(file) = w.early_sync() {
                // A closed timer thread has synced and sealed already.
                let _ = self.timers.send(Msg::Sync(file));
            }
        }
    }
}

/// Sees every record as it is handed to the writer (the dashboard's live feed).
pub(crate) type Observer = Arc<dyn Fn(&AuditRecord) + Send + Sync>;

/// Hands records to the writer. Cheap to clone (one `Arc`: a forwarded
/// request clones it for its body and its committer); never blocks.
#[derive(Clone)]
pub struct AuditSink(Arc<Sink>);

struct Sink {
    log: Arc<Log>,
    ctl: mpsc::Sender<Msg>,
    stats: Arc<AuditStats>,
    observer: Option<Observer>,
}

impl AuditSink {
    /// Queues a record that no answer waits for (robots.txt fetches, retries,
    /// tunnels that already ended).
    pub fn send(&self, rec: impl Into<Box<AuditRecord>>) {
        let rec = rec.into();
        self.observe(&rec);
        self.0.log.submit(rec, None, false);
    }

    /// Queues a record and returns what resolves once its line has been
    /// written to the file (handed to the OS with `write`).
    pub fn commit(&self, rec: impl Into<Box<AuditRecord>>) -> Written {
        self.commit_with(rec, false)
    }

    /// [`AuditSink::commit`] for an answer that waits for the line before
    /// hyper sees it: written with the others of this turn (`soon.rs`).
    pub(crate) fn commit_soon(&self, rec: impl Into<Box<AuditRecord>>) -> Written {
        self.commit_with(rec, true)
    }

    fn commit_with(&self, rec: impl Into<Box<AuditRecord>>, soon: bool) -> Written {
        let rec = rec.into();
        self.observe(&rec);
        let (tx, rx) = oneshot::channel();
        self.0.log.submit(rec, Some(tx), soon);
        Written(rx)
    }

    fn observe(&self, rec: &AuditRecord) {
        if let Some(observe) = &self.0.observer {
            observe(rec);
        }
    }

    /// The same sink, also showing every record to `observer`.
    pub(crate) fn observed(self, observer: Observer) -> AuditSink {
        AuditSink(Arc::new(Sink {
            log: self.0.log.clone(),
            ctl: self.0.ctl.clone(),
            stats: self.0.stats.clone(),
            observer: Some(observer),
        }))
    }

    /// The writer's counters.
    pub(crate) fn stats(&self) -> &Arc<AuditStats> {
        &self.0.stats
    }

    /// A committer for code that completes a record later.
    /// With `soon`, its line is written with the others of the turn: only
    /// for an answer that waits for the line before hyper sees it.
    pub(crate) fn committer(&self, soon: bool) -> (Committer, Written) {
        if soon {
            // The record may be completed off the runtime (the store's
            // writer thread): its flush needs a runtime to go to.
            self.0.log.note_runtime();
        }
        let (tx, rx) = oneshot::channel();
        (
            Committer {
                sink: self.clone(),
                ack: tx,
                soon,
            },
            Written(rx),
        )
    }

    /// Seals the current file and opens the configured path again (for
    /// logrotate's `create` mode: it moved the file, we start a new one).
    pub fn reopen(&self) {
        let _ = self.0.ctl.send(Msg::Reopen);
    }
}

/// Sends one record whose answer waits for it.
pub(crate) struct Committer {
    sink: AuditSink,
    ack: oneshot::Sender<bool>,
    soon: bool,
}

impl Committer {
    /// Queues the record; the waiting answer is released once it is written.
    pub(crate) fn send(self, rec: impl Into<Box<AuditRecord>>) {
        let rec = rec.into();
        self.sink.observe(&rec);
        self.sink.0.log.submit(rec, Some(self.ack), self.soon);
    }
}

/// Resolves to `true` once a line is written, `false` if it could not be.
pub struct Written(oneshot::Receiver<bool>);

impl Future for Written {
    type Output = bool;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<bool> {
        Pin::new(&mut self.0).poll(cx).map(|r| r.unwrap_or(false))
    }
}

/// The writer thread; [`AuditWriter::close`] seals, flushes and joins it.
pub struct AuditWriter {
    tx: mpsc::Sender<Msg>,
    thread: Option<JoinHandle<io::Result<u64>>>,
}

impl AuditWriter {
    /// Writes everything queued so far, seals the file with a shutdown
    /// checkpoint, syncs, and returns the number of lines this writer wrote.
    pub fn close(mut self) -> io::Result<u64> {
        let _ = self.tx.send(Msg::Close);
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(io::Error::other("audit writer thread panicked")),
            None => Ok(0),
        }
    }
}

impl Drop for AuditWriter {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = self.tx.send(Msg::Close);
            let _ = t.join();
        }
    }
}

/// Opens the log of `cfg` (appending to an existing file and continuing its
/// chain), loads or creates the signing key, and starts the writer thread.
pub fn open(cfg: &Config) -> Result<(AuditSink, AuditWriter), AuditError> {
    let key = key::load_or_create(&cfg.data_dir)?;
    let target = cfg.audit_target();
    let (out, prev, lines, trees) = continued(&target)?;
    let stats = Arc::new(AuditStats::default());
    let clock = Clock::system();
    let witness = match cfg.audit.witness.trim() {
        "" => None,
        url => Some(Witness::start(url, clock.clone()).map_err(AuditError::Thread)?),
    };
    let (trees, file_start) = trees.unwrap_or_else(|| (FileTrees::default(), prev.clone()));
    let now = clock.now_std();
    let bytes = match &out {
        Out::File(f) => f.metadata().map(|m| m.len()).unwrap_or(0),
        Out::Stdout(_) => 0,
    };
    let mut w = Writer {
        target,
        out,
        prev,
        lines,
        // A file that does not end in a checkpoint (a crash) gets one soon.
        since_seal: 0,
        bytes,
        opened: now,
        last_seal: now,
        last_sync: now,
        dirty: false,
        unsynced: 0,
        closed: false,
        key,
        cfg: cfg.audit.clone(),
        buf: Vec::with_capacity(64 * 1024),
        acks: Vec::new(),
        written: 0,
        stats: stats.clone(),
        clock,
        trees,
        file_start,
        witness,
        unwitnessed: Vec::new(),
    };
    if w.lines == 0 && w.prev != GENESIS {
        // A new file continuing an earlier one starts by saying so.
        w.seal(SealReason::Continuation);
        w.flush();
    }
    let (ctl, rx) = mpsc::channel();
    let stdout = matches!(w.out, Out::Stdout(_));
    let log = Arc::new(Log {
        writer: Mutex::new(w),
        queue: Mutex::new(Vec::new()),
        handoff: stdout.then(|| ctl.clone()),
        timers: ctl.clone(),
        soon: Soon::default(),
    });
    let timers = log.clone();
    let thread = std::thread::Builder::new()
        .name("mannerly-audit".into())
        .spawn(move || run_timers(&timers, &rx))
        .map_err(AuditError::Thread)?;
    Ok((
        AuditSink(Arc::new(Sink {
            log,
            ctl: ctl.clone(),
            stats,
            observer: None,
        })),
        AuditWriter {
            tx: ctl,
            thread: Some(thread),
        },
    ))
}

/// Where the log of `target` is written and what it continues: the chain
/// value and line count of the file it appends to, and that file's trees
/// with the chain value it started from (none for a new file or stdout).
#[allow(clippy::type_complexity)]
fn continued(
    target: &AuditTarget,
) -> Result<(Out, String, u64, Option<(FileTrees, String)>), AuditError> {
    Ok(match target {
        AuditTarget::Stdout => (Out::Stdout(io::stdout()), GENESIS.to_string(), 0, None),
        AuditTarget::File(path) => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                datadir::prepare(dir)?;
            }
            let (file, lines, prev) = open_file(path)?;
            let trees = match lines {
                0 => None,
                _ => Some(
                    rebuild(path)
                        .map_err(|e| AuditError::Log(format!("{}: {e}", path.display())))?,
                ),
            };
            (Out::File(file), prev, lines, trees)
        }
    })
}

/// How often the timer thread looks for what is due (checkpoints by time,
/// the batch `fsync`, rotation by age).
const TICK: Duration = Duration::from_millis(100);

/// The timer thread: does what is due by time until closed, then writes
/// what is queued, seals, syncs, and returns the lines written.
fn run_timers(log: &Log, ctl: &mpsc::Receiver<Msg>) -> io::Result<u64> {
    loop {
        let wait = log
            .with_writer(|w| w.next_deadline())
            .map_or(TICK, |d| d.min(TICK));
        match ctl.recv_timeout(wait) {
            Ok(Msg::Write) => log.write_queued(),
            Ok(Msg::Sync(file)) => {
                if let Err(e) = file.sync_data() {
                    tracing::error!("audit log fsync failed: {e}");
                }
            }
            Ok(Msg::Reopen) => log.with_writer(|w| w.rotate(true)),
            Ok(Msg::Close) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        let due = log.with_writer(Writer::tick);
        if let Some(file) = due {
            // On a second handle, outside the lock: writers go on meanwhile.
            if let Err(e) = file.sync_data() {
                tracing::error!("audit log fsync failed: {e}");
            }
        }
    }
    // Records queued before the close are still written; any queued while
    // the log closes hear `false` (no line, no answer).
    log.with_writer(|w| {
        let batch = std::mem::take(&mut *log.queue());
        w.write_batch(batch);
        // Always, even right after another checkpoint: a clean stop is the
        // only way a log ends on a shutdown seal, so a log cut at any other
        // checkpoint shows as unsealed.
        w.seal(SealReason::Shutdown);
        w.flush();
        w.closed = true;
        if w.cfg.sync != AuditSync::None {
            w.out.sync()?;
        }
        if let Some(witness) = w.witness.take() {
            witness.close();
        }
        Ok(w.written)
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use mannerly_policy::AuditRecord;

    use super::open;
    use crate::config::Config;

    /// An empty data dir of its own and the default config on it.
    fn fresh(name: &str) -> (std::path::PathBuf, Config) {
        let dir = std::env::temp_dir().join(format!("mannerly-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let cfg = Config {
            data_dir: dir.clone(),
            ..Config::default()
        }
        .validate()
        .expect("valid config");
        (dir, cfg)
    }

    /// The store's writer thread completes the records of a commit off the
    /// runtime; their flush must find a runtime even when no line was
    /// queued "soon" on one before (a crawl of new pages only), or each
    /// line is written by a `write` of its own on the writer thread.
    #[tokio::test]
    async fn a_committer_made_on_the_runtime_lets_its_line_be_flushed_there() {
        let (dir, cfg) = fresh("soon-remote");
        let (sink, writer) = open(&cfg).expect("open");
        assert!(sink.0.log.soon.runtime.get().is_none());
        let (committer, written) = sink.committer(true);
        assert!(sink.0.log.soon.runtime.get().is_some());
        std::thread::spawn(move || committer.send(AuditRecord::default()))
            .join()
            .expect("sent off the runtime");
        assert!(written.await, "the line reached the file");
        drop(sink);
        writer.close().expect("close");
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Threads that each send a record and wait for its line, over and
    /// over: a record queued just as the current writer lets go must still
    /// be written (a stranded one would leave its sender waiting, since
    /// nobody else sends).
    #[test]
    fn every_committed_record_is_written_while_others_write() {
        let (dir, cfg) = fresh("combine");
        let (sink, writer) = open(&cfg).expect("audit");
        const THREADS: usize = 4;
        const EACH: usize = 3000;
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let sink = sink.clone();
                std::thread::spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_time()
                        .build()
                        .expect("runtime");
                    for i in 0..EACH {
                        let rec = AuditRecord {
                            id: format!("t{t}-{i}"),
                            ..AuditRecord::default()
                        };
                        let written = sink.commit(rec);
                        let ok = rt.block_on(async {
                            tokio::time::timeout(Duration::from_secs(10), written).await
                        });
                        assert_eq!(ok, Ok(true), "record t{t}-{i} was never written");
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().expect("worker");
        }
        drop(sink);
        let lines = writer.close().expect("close");
        assert!(lines >= (THREADS * EACH) as u64, "{lines}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Records of `n` hosts never seen before, from `from` on, as a broad
    /// crawl (or a client naming made-up hosts) sends them.
    fn distinct_hosts(from: usize, n: usize) -> Vec<super::Queued> {
        (from..from + n)
            .map(|i| {
                let host = format!("h{i}.example");
                let rec = AuditRecord {
                    ts: "2026-12-01T00:00:00.000Z".into(),
                    id: format!("{i:016x}"),
                    method: "GET".into(),
                    url: format!("http://{host}/"),
                    host,
                    ..AuditRecord::default()
                };
                (Box::new(rec), None)
            })
            .collect()
    }

    /// The writer keeps an entry per host of the current file: with the
    /// default configuration the file rotates by size, so a stream of new
    /// host names cannot grow that state past what one file holds.
    #[test]
    fn new_hosts_without_end_do_not_grow_the_writer_past_one_files_worth() {
        let (dir, cfg) = fresh("bounded-hosts");
        let (sink, writer) = open(&cfg).expect("open");
        let (mut most, mut rotations, mut before) = (0, 0, 0);
        let total = 150_000;
        for from in (0..total).step_by(1000) {
            let hosts = sink.0.log.with_writer(|w| {
                w.write_batch(distinct_hosts(from, 1000));
                w.trees.hosts()
            });
            most = most.max(hosts);
            if hosts < before {
                rotations += 1;
            }
            before = hosts;
        }
        assert!(rotations >= 1, "{total} hosts and no rotation");
        assert!(most < total / 2, "the writer held {most} hosts at once");
        drop(sink);
        writer.close().expect("close");
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Near a file's end the writer hands out a handle to `fsync` off its
    /// lock, once per sixteenth of the rotation size written there and not
    /// before the last eighth, so that the rotation's own `fsync`, under
    /// the lock on the serving thread, finds little left to write.
    #[test]
    fn a_files_last_eighth_is_synced_off_the_lock_before_it_rotates() {
        let (dir, mut cfg) = fresh("early-sync");
        cfg.audit.rotate_bytes = 1 << 20;
        // No batch `fsync` from the timer thread to race the counts.
        cfg.audit.sync = crate::config::AuditSync::None;
        let (sink, writer) = open(&cfg).expect("open");
        let (mut early, mut rotations, mut last) = (Vec::new(), 0, 0);
        for from in (0..60_000).step_by(100) {
            let (bytes, handle) = sink.0.log.with_writer(|w| {
                w.write_batch(distinct_hosts(from, 100));
                (w.bytes, w.early_sync())
            });
            rotations += usize::from(bytes < last);
            if handle.is_some() {
                early.push(bytes);
            }
            last = bytes;
        }
        let size = cfg.audit.rotate_bytes;
        assert!(rotations >= 3, "{rotations} rotations");
        assert!(
            early.len() >= rotations,
            "early syncs at {early:?}, {rotations} rotations"
        );
        assert!(
            early.len() <= 3 * (rotations + 1),
            "early syncs at {early:?}"
        );
        for b in &early {
            assert!(
                b + size / 8 >= size,
                "an early fsync at {b} of {size} bytes"
            );
        }
        drop(sink);
        writer.close().expect("close");
        let _ = std::fs::remove_dir_all(dir);
    }

    /// The figure in docs/audit.md: resident memory of a process writing
    /// 1,000,000 distinct hosts through the audit path, every 100,000, and
    /// the time to open the log again. `MANNERLY_ROTATE_BYTES=0` for the
    /// unbounded writer; `MANNERLY_FIGURE_HOSTS` for another count (a
    /// current file of the rotation size for the start time). Run with:
    /// `cargo test --release -p mannerly-proxy audit::tests::memory_figure -- --ignored --nocapture`
    #[test]
    #[ignore = "a measurement: 1,000,000 lines, seconds to minutes"]
    // The figure is the machine's own time: no clock of the proxy to read.
    #[allow(clippy::disallowed_methods)]
    fn memory_figure() {
        let rss = || {
            std::fs::read_to_string("/proc/self/status")
                .unwrap_or_default()
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:").map(|v| v.trim().to_string()))
                .unwrap_or_default()
        };
        let (dir, mut cfg) = fresh("memory-figure");
        if let Some(b) = std::env::var("MANNERLY_ROTATE_BYTES")
            .ok()
            .and_then(|b| b.parse().ok())
        {
            cfg.audit.rotate_bytes = b;
        }
        println!(
            "rotate_bytes = {}; before: VmRSS {}",
            cfg.audit.rotate_bytes,
            rss()
        );
        let (sink, writer) = open(&cfg).expect("open");
        let started = std::time::Instant::now();
        let hosts: usize = std::env::var("MANNERLY_FIGURE_HOSTS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(1_000_000);
        for from in (0..hosts).step_by(1000) {
            let hosts = sink.0.log.with_writer(|w| {
                w.write_batch(distinct_hosts(from, 1000));
                w.trees.hosts()
            });
            if (from + 1000) % 100_000 == 0 {
                println!(
                    "{:>9} hosts: VmRSS {}, {hosts} in the current file",
                    from + 1000,
                    rss()
                );
            }
        }
        println!("written in {:.1} s", started.elapsed().as_secs_f64());
        drop(sink);
        writer.close().expect("close");
        let crate::config::AuditTarget::File(path) = cfg.audit_target() else {
            panic!("a file target");
        };
        let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        let started = std::time::Instant::now();
        let (sink, writer) = open(&cfg).expect("open again");
        println!(
            "start on a current file of {size} bytes: {:.3} s",
            started.elapsed().as_secs_f64()
        );
        drop(sink);
        writer.close().expect("close");
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A checkpoint reaches the witness's queue only once its line is in
    /// the file (and synced): sealing alone offers nothing, so a crash
    /// between the two cannot leave the witness a head the log lacks.
    #[test]
    fn a_head_is_offered_to_the_witness_only_after_its_line_is_written() {
        let (dir, mut cfg) = fresh("witness-after");
        // Nothing listens there: heads stay queued, where the test sees them.
        cfg.audit.witness = "http://127.0.0.1:9/heads".into();
        let (sink, writer) = open(&cfg).expect("open");
        let crate::config::AuditTarget::File(path) = cfg.audit_target() else {
            panic!("a file target");
        };
        let queued = |sink: &super::AuditSink| {
            sink.0
                .log
                .with_writer(|w| w.witness.as_ref().map(|w| w.queued()).unwrap_or_default())
        };
        sink.0.log.with_writer(|w| {
            w.write_batch(vec![(Box::new(AuditRecord::default()), None)]);
            w.seal(mannerly_policy::SealReason::Interval);
        });
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(!text.contains("\"why\":\"interval\""), "{text}");
        assert_eq!(
            queued(&sink),
            Vec::<String>::new(),
            "offered before written"
        );
        sink.0.log.with_writer(super::Writer::flush);
        let heads = queued(&sink);
        assert_eq!(heads.len(), 1, "{heads:?}");
        let text = std::fs::read_to_string(&path).expect("log");
        assert!(text.lines().any(|l| l == heads[0]), "{text}");
        drop(sink);
        drop(writer);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A log written before format 3 (no `host_seq`, format-2 seals), then
    /// continued by this writer: the whole file still verifies, the new
    /// seals cover the old lines too, and evidence for a host counts the
    /// old lines by their place.
    #[test]
    fn a_format_2_log_continued_verifies_and_gives_evidence() {
        use ed25519_dalek::Signer;
        use mannerly_policy::{
            chain_line, hex, Checkpoint, Commits, EvidenceBuilder, FileTrees, SealReason, Verifier,
            GENESIS,
        };

        let (dir, cfg) = fresh("format2");
        let key = super::load_or_create_key(&cfg.data_dir).expect("key");
        let mut prev = GENESIS.to_string();
        let mut old = Vec::new();
        for i in 0..3 {
            let content = format!(
                r#"{{"ts":"2026-01-01T00:00:00.000Z","id":"old-{i}","url":"http://a.test/{i}","host":"a.test"}}"#
            );
            let (line, chain) = chain_line(&prev, &content);
            old.push(line);
            prev = chain;
        }
        let unused = Commits {
            continues: GENESIS.into(),
            heads: FileTrees::default().heads(),
        };
        let ts = "2026-01-01T00:00:01.000Z".to_string();
        let mut cp = Checkpoint::sign(&key, ts, SealReason::Shutdown, 3, &prev, 1000, 10, &unused);
        cp.format = 2;
        (cp.continues, cp.tree, cp.hosts, cp.hosts_tree) = (None, None, None, None);
        cp.sig = hex(&key.sign(cp.message().as_bytes()).to_bytes());
        old.push(chain_line(&prev, &cp.to_json()).0);
        let path = cfg.audit_target();
        let crate::config::AuditTarget::File(path) = path else {
            panic!("a file target");
        };
        std::fs::write(&path, old.join("\n") + "\n").expect("old log");

        let (sink, writer) = open(&cfg).expect("audit");
        for i in 3..5 {
            let rec = AuditRecord {
                id: format!("new-{i}"),
                host: "a.test".into(),
                ..AuditRecord::default()
            };
            sink.send(rec);
        }
        drop(sink);
        writer.close().expect("close");

        let text = std::fs::read_to_string(&path).expect("log");
        let mut v = Verifier::new(Some(key.verifying_key()));
        let mut b = EvidenceBuilder::new("a.test");
        v.start_file("audit.jsonl");
        b.start_file("audit.jsonl").expect("file");
        for line in text.lines() {
            v.line(line);
            b.line(line).expect("line");
        }
        let report = v.finish(|_| None);
        assert_eq!(report.problems, vec![], "{text}");
        assert!(report.ends_sealed());
        let evidence = b.finish().expect("evidence");
        let summary = evidence.verify(&key.verifying_key()).expect("verifies");
        assert_eq!(summary.lines, 5);
        assert!(text.contains(r#""host_seq":5"#), "{text}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
