//! What the callers' threads and the disk store's writer share.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Mutex, MutexGuard};

use redb::{Database, ReadableDatabase, ReadableTable};

use super::tables::{READS, SEQS};
use crate::responses::index::{Index, Row};
use crate::responses::{Counters, StoreError, StoreLimits};

/// The database and what is held in memory about it.
pub(super) struct Inner {
    pub(super) db: Database,
    pub(super) limits: StoreLimits,
    pub(super) index: Mutex<Index>,
    pub(super) counters: Counters,
    /// Body bytes handed to the writer and not yet written.
    pub(super) queued: AtomicU64,
    /// Set by `DiskStore::hold_commit`: where the next commit waits.
    pub(super) commit_gate: Mutex<Option<CommitGate>>,
}

/// The writer's side of a `CommitHold`.
pub(super) struct CommitGate {
    pub(super) reached: mpsc::Sender<()>,
    pub(super) release: mpsc::Receiver<()>,
}

impl CommitGate {
    /// Says the commit is reached, then waits for the hold to be dropped.
    pub(super) fn wait(self) {
        let _ = self.reached.send(());
        while self.release.recv().is_ok() {}
    }
}

impl Inner {
    pub(super) fn index(&self) -> Result<MutexGuard<'_, Index>, StoreError> {
        self.index.lock().map_err(|_| StoreError::Poisoned)
    }

    /// Every stored variant, as the disk lists it.
    pub(super) fn rows(&self) -> Result<Vec<Row>, StoreError> {
        let txn = self.db.begin_read()?;
        let reads = txn.open_table(READS)?;
        let mut last_read = std::collections::HashMap::new();
        for row in reads.iter()? {
            let (seq, tick) = row?;
            last_read.insert(seq.value(), tick.value());
        }
        let seqs = txn.open_table(SEQS)?;
        let mut rows = Vec::new();
        for row in seqs.iter()? {
            let (seq, value) = row?;
            let (variant, size) = value.value();
            let read = last_read.get(&seq.value()).copied();
            rows.push(Row {
                variant: variant.to_owned(),
                seq: seq.value(),
                tick: read.unwrap_or(0),
                size,
                read_row: read.is_some(),
            });
        }
        Ok(rows)
    }

    /// Gives back the count of `len` queued body bytes, once written.
    pub(super) fn dequeued(&self, len: usize) {
        let len = u64::try_from(len).unwrap_or(u64::MAX);
        self.queued.fetch_sub(len, Ordering::Relaxed);
    }
}
