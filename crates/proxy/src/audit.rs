//! The audit log writer: records are handed over a channel and written by
//! one thread, so the request path never waits on the disk. The thread
//! chains each line to the previous one and flushes whenever it runs out of
//! work, and once more on close.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use mannerly_policy::{chain_line, last_chain, AuditRecord, GENESIS};

use crate::config::AuditTarget;

enum Msg {
    Record(Box<AuditRecord>),
    Close,
}

/// Called with every record as it is handed to the writer (metrics).
pub(crate) type Observer = Arc<dyn Fn(&AuditRecord) + Send + Sync>;

/// Hands records to the writer. Cheap to clone; never blocks.
#[derive(Clone)]
pub struct AuditSink {
    tx: mpsc::Sender<Msg>,
    stats: Arc<AuditStats>,
    observer: Option<Observer>,
}

/// Lines the writer thread wrote and the writes that failed.
#[derive(Debug, Default)]
pub(crate) struct AuditStats {
    pub written: AtomicU64,
    pub errors: AtomicU64,
}

impl AuditSink {
    /// Queues a record for writing.
    pub fn send(&self, rec: AuditRecord) {
        // Every decision passes here exactly once, so counting here makes
        // the metrics equal the audit lines by construction.
        if let Some(observe) = &self.observer {
            observe(&rec);
        }
        // Only fails after close, when there is no log left to write to.
        let _ = self.tx.send(Msg::Record(Box::new(rec)));
    }

    /// This sink with `observer` called on every record sent through it
    /// (and through its clones).
    pub(crate) fn observed(mut self, observer: Observer) -> AuditSink {
        self.observer = Some(observer);
        self
    }

    pub(crate) fn stats(&self) -> &Arc<AuditStats> {
        &self.stats
    }
}

/// The writer thread; [`AuditWriter::close`] flushes and joins it.
pub struct AuditWriter {
    tx: mpsc::Sender<Msg>,
    thread: Option<JoinHandle<io::Result<u64>>>,
}

impl AuditWriter {
    /// Writes everything queued so far, flushes, and returns the number of
    /// lines written by this writer.
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

/// Opens the log (appending to an existing file and continuing its chain)
/// and starts the writer thread.
pub fn open(target: &AuditTarget) -> io::Result<(AuditSink, AuditWriter)> {
    let (out, prev): (Box<dyn Write + Send>, String) = match target {
        AuditTarget::Stdout => (Box::new(io::stdout()), GENESIS.to_string()),
        AuditTarget::File(path) => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)?;
            }
            let prev = read_last_chain(path)?;
            let f = OpenOptions::new().create(true).append(true).open(path)?;
            (Box::new(f), prev)
        }
    };
    let (tx, rx) = mpsc::channel();
    let stats = Arc::new(AuditStats::default());
    let thread = {
        let stats = stats.clone();
        std::thread::Builder::new()
            .name("mannerly-audit".into())
            .spawn(move || {
                let r = write_loop(rx, out, prev, &stats);
                if let Err(e) = &r {
                    stats.errors.fetch_add(1, Ordering::Relaxed);
                    tracing::error!("audit log write failed, no more lines are written: {e}");
                }
                r
            })?
    };
    Ok((
        AuditSink {
            tx: tx.clone(),
            stats,
            observer: None,
        },
        AuditWriter {
            tx,
            thread: Some(thread),
        },
    ))
}

fn write_loop(
    rx: mpsc::Receiver<Msg>,
    out: Box<dyn Write + Send>,
    mut prev: String,
    stats: &AuditStats,
) -> io::Result<u64> {
    let mut w = BufWriter::with_capacity(64 * 1024, out);
    let mut n = 0u64;
    let mut write =
        |rec: &AuditRecord, w: &mut BufWriter<Box<dyn Write + Send>>| -> io::Result<()> {
            let (line, chain) = chain_line(&prev, &rec.to_json());
            w.write_all(line.as_bytes())?;
            w.write_all(b"\n")?;
            prev = chain;
            n += 1;
            stats.written.fetch_add(1, Ordering::Relaxed);
            Ok(())
        };
    loop {
        let msg = match rx.try_recv() {
            Ok(m) => m,
            Err(mpsc::TryRecvError::Empty) => {
                w.flush()?;
                match rx.recv() {
                    Ok(m) => m,
                    Err(_) => break,
                }
            }
            Err(mpsc::TryRecvError::Disconnected) => break,
        };
        match msg {
            Msg::Record(rec) => write(&rec, &mut w)?,
            Msg::Close => {
                // Records queued before the close are still written.
                while let Ok(Msg::Record(rec)) = rx.try_recv() {
                    write(&rec, &mut w)?;
                }
                break;
            }
        }
    }
    w.flush()?;
    if let Ok(f) = w.into_inner() {
        drop(f);
    }
    Ok(n)
}

/// The chain value of a file's last line, so appending keeps one chain.
fn read_last_chain(path: &Path) -> io::Result<String> {
    let mut f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(GENESIS.to_string()),
        Err(e) => return Err(e),
    };
    let len = f.metadata()?.len();
    if len == 0 {
        return Ok(GENESIS.to_string());
    }
    let start = len.saturating_sub(256 * 1024);
    f.seek(SeekFrom::Start(start))?;
    let mut tail = Vec::new();
    f.take(len - start).read_to_end(&mut tail)?;
    let last = BufReader::new(&tail[..])
        .lines()
        .map_while(Result::ok)
        .filter(|l| !l.trim().is_empty())
        .last();
    match last.as_deref().and_then(last_chain) {
        Some(c) => Ok(c),
        None => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}: last line has no chain field; move the file aside or run `mannerly audit verify` on it",
                path.display()
            ),
        )),
    }
}
