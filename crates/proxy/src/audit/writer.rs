//! The writer of a round: chains the queued lines, writes them in one
//! `write`, seals with checkpoints and rotates, on a file or stdout.

use std::fs::File;
use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mannerly_policy::{
    chain_line, chain_onto, AuditRecord, Checkpoint, Commits, FileTrees, SealReason, SigningKey,
};
use tokio::sync::oneshot;

use super::files::{drop_torn_tail, now_rfc3339, rebuild, rotated_name, scan};
use super::witness::Witness;
use crate::clock::Clock;
use crate::config::{AuditConfig, AuditSync, AuditTarget};
use crate::datadir;

/// A record and, if an answer waits for its line, who to tell.
pub(super) type Queued = (Box<AuditRecord>, Option<oneshot::Sender<bool>>);

/// Counters of the writer, for `/metrics`.
#[derive(Debug, Default)]
pub(crate) struct AuditStats {
    /// Lines written (checkpoints included).
    pub written: AtomicU64,
    /// Failed writes.
    pub errors: AtomicU64,
}

pub(super) enum Out {
    File(File),
    Stdout(io::Stdout),
}

impl Out {
    pub(super) fn write_all(&mut self, b: &[u8]) -> io::Result<()> {
        match self {
            Out::File(f) => f.write_all(b),
            Out::Stdout(s) => {
                let mut s = s.lock();
                s.write_all(b)?;
                s.flush()
            }
        }
    }

    pub(super) fn sync(&mut self) -> io::Result<()> {
        match self {
            Out::File(f) => f.sync_data(),
            Out::Stdout(_) => Ok(()),
        }
    }
}

pub(super) struct Writer {
    pub(super) target: AuditTarget,
    pub(super) out: Out,
    pub(super) prev: String,
    /// Lines in the current file.
    pub(super) lines: u64,
    /// Records since the last checkpoint.
    pub(super) since_seal: u64,
    /// Bytes in the current file.
    pub(super) bytes: u64,
    pub(super) opened: Instant,
    pub(super) last_seal: Instant,
    pub(super) last_sync: Instant,
    pub(super) dirty: bool,
    /// Bytes written to the file since its last `fsync` began.
    pub(super) unsynced: u64,
    /// After the shutdown seal: nothing more is written.
    pub(super) closed: bool,
    pub(super) key: SigningKey,
    pub(super) cfg: AuditConfig,
    pub(super) buf: Vec<u8>,
    pub(super) acks: Vec<oneshot::Sender<bool>>,
    pub(super) written: u64,
    pub(super) stats: Arc<AuditStats>,
    pub(super) clock: Clock,
    /// The Merkle trees of the current file, which checkpoints sign.
    pub(super) trees: FileTrees,
    /// The chain value the current file's first line continues.
    pub(super) file_start: String,
    pub(super) witness: Option<Witness>,
    /// Checkpoint lines sealed but not yet written and synced: the witness
    /// hears of them only after, or a crash in between would leave it
    /// holding a head the log lacks, and an honest log would look cut.
    pub(super) unwitnessed: Vec<String>,
}

// Past this, a batch is written even if more records are queued.
pub(super) const BATCH_BYTES: usize = 1 << 20;

impl Writer {
    /// Chains and writes `batch` in one `write`, then releases the answers
    /// waiting for those lines.
    pub(super) fn write_batch(&mut self, batch: Vec<Queued>) {
        if self.closed {
            for (_, ack) in batch {
                if let Some(a) = ack {
                    let _ = a.send(false);
                }
            }
            return;
        }
        for (mut rec, ack) in batch {
            rec.host_seq = Some(self.trees.next_seq(&rec.host));
            // Serialised, chained and hashed where it is written from.
            let start = self.buf.len();
            rec.write_json(&mut self.buf);
            let chain = chain_onto(&self.prev, &mut self.buf, start);
            self.trees.record(&rec.host, &self.buf[start..], &chain);
            self.buf.push(b'\n');
            self.pushed(chain);
            self.since_seal += 1;
            self.written += 1;
            if let Some(a) = ack {
                self.acks.push(a);
            }
            if self.since_seal >= self.cfg.checkpoint_lines {
                self.seal(SealReason::Interval);
            }
            if self.buf.len() >= BATCH_BYTES {
                self.flush();
            }
        }
        self.flush();
        if self.rotation_due() {
            self.rotate(false);
        }
    }

    fn push(&mut self, line: String, chain: String) {
        self.buf.extend_from_slice(line.as_bytes());
        self.buf.push(b'\n');
        self.pushed(chain);
    }

    /// Counts the line just put in the buffer, whose chain value is `chain`.
    fn pushed(&mut self, chain: String) {
        self.stats.written.fetch_add(1, Ordering::Relaxed);
        self.prev = chain;
        self.lines += 1;
    }

    pub(super) fn seal(&mut self, why: SealReason) {
        let cp = Checkpoint::sign(
            &self.key,
            now_rfc3339(&self.clock),
            why,
            self.lines,
            &self.prev,
            self.cfg.checkpoint_lines,
            self.cfg.checkpoint_secs,
            &Commits {
                continues: self.file_start.clone(),
                heads: self.trees.heads(),
            },
        );
        let (line, chain) = chain_line(&self.prev, &cp.to_json());
        self.trees.checkpoint(&line, &chain);
        if self.witness.is_some() {
            self.unwitnessed.push(line.clone());
        }
        self.push(line, chain);
        self.written += 1;
        self.since_seal = 0;
        self.last_seal = self.clock.now_std();
    }

    /// Writes the batch and releases the answers waiting for it.
    pub(super) fn flush(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let mut ok = self.out.write_all(&self.buf).is_ok();
        self.bytes += self.buf.len() as u64;
        self.unsynced += self.buf.len() as u64;
        self.buf.clear();
        let heads = std::mem::take(&mut self.unwitnessed);
        // A head goes to the witness synced whatever `audit.sync` says:
        // one fsync per checkpoint, not per line.
        if ok && (self.cfg.sync == AuditSync::Every || !heads.is_empty()) {
            ok = self.out.sync().is_ok();
            self.synced(self.clock.now_std());
        } else {
            self.dirty = true;
        }
        if !ok {
            self.stats.errors.fetch_add(1, Ordering::Relaxed);
            tracing::error!("audit log write failed; answers waiting for their lines get 503");
        } else if let Some(w) = &self.witness {
            for head in &heads {
                w.offer(head);
            }
        }
        for a in self.acks.drain(..) {
            let _ = a.send(ok);
        }
    }

    pub(super) fn next_deadline(&self) -> Option<Duration> {
        let mut next: Option<Duration> = None;
        let mut at = |since: Instant, every: Duration| {
            let left = every.saturating_sub(self.clock.now_std().saturating_duration_since(since));
            next = Some(next.map_or(left, |n| n.min(left)));
        };
        if self.since_seal > 0 {
            at(
                self.last_seal,
                Duration::from_secs(self.cfg.checkpoint_secs),
            );
        }
        if self.dirty && self.cfg.sync == AuditSync::Batch {
            at(self.last_sync, Duration::from_secs(1));
        }
        if let Some(every) = self.cfg.rotate_every() {
            at(self.opened, every);
        }
        next
    }

    /// Seals and rotates when that is due by time; returns a handle to
    /// `fsync` when the batch sync is due.
    pub(super) fn tick(&mut self) -> Option<File> {
        if self.closed {
            return None;
        }
        let now = self.clock.now_std();
        if self.since_seal > 0
            && now.saturating_duration_since(self.last_seal)
                >= Duration::from_secs(self.cfg.checkpoint_secs)
        {
            self.seal(SealReason::Interval);
            self.flush();
        }
        if self.rotation_due() {
            self.rotate(false);
        }
        if !(self.dirty
            && self.cfg.sync == AuditSync::Batch
            && now.saturating_duration_since(self.last_sync) >= Duration::from_secs(1))
        {
            return None;
        }
        self.synced(now);
        match &self.out {
            Out::File(f) => match f.try_clone() {
                Ok(f) => Some(f),
                Err(_) => {
                    if let Err(e) = self.out.sync() {
                        tracing::error!("audit log fsync failed: {e}");
                    }
                    None
                }
            },
            Out::Stdout(_) => None,
        }
    }

    /// A handle to `fsync` off the writer's lock once the file is in the
    /// last eighth of its rotation size with a sixteenth unsynced. The
    /// rotation's own `fsync` runs under the lock, on whichever thread
    /// writes (the serving thread, as a rule), and before the new file
    /// may take a line: left to it alone, up to a second of dirty pages
    /// (the whole file, at 20k lines a second) stalled every request for
    /// 10-40 ms once per file. Only near the end: each `fsync` costs CPU.
    pub(super) fn early_sync(&mut self) -> Option<File> {
        let eighth = self.cfg.rotate_bytes / 8;
        let Out::File(f) = &self.out else {
            return None;
        };
        let near_end = self.bytes + eighth >= self.cfg.rotate_bytes;
        if eighth == 0 || !near_end || self.unsynced < eighth / 2 {
            return None;
        }
        let f = f.try_clone().ok()?;
        // What the batch `fsync` would cover is covered by this one.
        self.synced(self.clock.now_std());
        Some(f)
    }

    /// An `fsync` of everything written so far began at `now`.
    fn synced(&mut self, now: Instant) {
        self.dirty = false;
        self.last_sync = now;
        self.unsynced = 0;
    }

    pub(super) fn rotation_due(&self) -> bool {
        if !matches!(self.target, AuditTarget::File(_)) || self.lines == 0 {
            return false;
        }
        (self.cfg.rotate_bytes > 0 && self.bytes >= self.cfg.rotate_bytes)
            || self.cfg.rotate_every().is_some_and(|every| {
                self.clock.now_std().saturating_duration_since(self.opened) >= every
            })
    }

    /// Seals the current file and starts a new one at the configured path;
    /// the new file's first line chains from the sealed one's last.
    /// `reopen`: someone else moved the file already (logrotate).
    pub(super) fn rotate(&mut self, reopen: bool) {
        let AuditTarget::File(path) = self.target.clone() else {
            return;
        };
        self.seal(SealReason::Rotation);
        self.flush();
        if let Err(e) = self.out.sync() {
            tracing::error!("audit log fsync before rotation failed: {e}");
        }
        self.synced(self.clock.now_std());
        if !reopen {
            let rotated = rotated_name(&path, &self.clock);
            if let Err(e) = std::fs::rename(&path, &rotated) {
                tracing::error!(
                    "audit log rotation: cannot rename {} to {}: {e}; going on in the same file",
                    path.display(),
                    rotated.display()
                );
                self.opened = self.clock.now_std();
                return;
            }
        }
        match datadir::open_append(&path)
            .map_err(|e| e.to_string())
            .and_then(|mut f| {
                drop_torn_tail(&mut f, &path)
                    .and_then(|_| scan(&mut f))
                    .map(|(n, _)| (f, n))
                    .map_err(|e| e.to_string())
            })
            .and_then(|(f, n)| match n {
                0 => Ok((f, n, (FileTrees::default(), self.prev.clone()))),
                _ => rebuild(&path).map(|t| (f, n, t)).map_err(|e| e.to_string()),
            }) {
            Ok((f, n, (trees, start))) => {
                self.out = Out::File(f);
                self.lines = n;
                self.bytes = 0;
                self.opened = self.clock.now_std();
                (self.trees, self.file_start) = (trees, start);
                if n == 0 {
                    self.seal(SealReason::Continuation);
                    self.flush();
                }
                tracing::info!("audit log: now writing {}", path.display());
            }
            Err(e) => tracing::error!(
                "audit log: cannot open {}: {e}; still writing to the previous file",
                path.display()
            ),
        }
    }
}
