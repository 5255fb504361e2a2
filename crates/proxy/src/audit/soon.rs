//! Writing at the end of the runtime's turn: the lines of the answers a
//! serving thread completes together share one `write`.
//!
//! One `write` per line was the largest system call cost of a forwarded
//! request after the sockets' own (about 5 µs of kernel time on ext4, of
//! some 45 µs per plain request; bench/README, "Peers"). A line is queued
//! "soon" only where its answer waits for it before hyper sees the answer
//! (the head's gate, and a whole answer read ahead in
//! `audit::line_written`): there the wait costs nothing more. An answer
//! streaming to the client is not held back for a later write, because its
//! last frame held would make hyper send it in a write of its own.
//!
//! A record queued on a runtime thread schedules one flush task there; it
//! runs after the tasks already ready on that thread, which queue their
//! lines meanwhile. A record queued off the runtime (the store's writer
//! thread, releasing the lines of a commit) has its flush spawned on the
//! runtime its committer was made on, so a commit of many pages costs one
//! `write`.
//! The timer thread writes what is queued on each tick, so a flush that
//! never runs delays a line by at most that tick; one dropped unrun (its
//! runtime shutting down) writes as it drops.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::runtime::Handle;

use super::Log;

thread_local! {
    /// Per log (by address), whether a flush this thread spawned has not
    /// run yet; the flag is shared with the flush, which may run (and
    /// clear it) on another thread of a work-stealing runtime.
    static DUE: RefCell<Vec<(usize, Arc<AtomicBool>)>> = const { RefCell::new(Vec::new()) };
}

impl Log {
    /// Writes what is queued once the ready tasks of this thread's runtime
    /// have run, or at once where no runtime can take the flush.
    pub(super) fn write_soon(self: &Arc<Self>) {
        let (handle, due) = match Handle::try_current() {
            Ok(handle) => {
                self.note_runtime();
                (handle, self.due_here())
            }
            Err(_) => match self.soon.runtime.get() {
                Some(handle) => (handle.clone(), self.soon.remote_due.clone()),
                None => return self.write_queued(),
            },
        };
        if !due.swap(true, Ordering::AcqRel) {
            let flush = Flush {
                log: self.clone(),
                due,
            };
            handle.spawn(async move { drop(flush) });
        }
    }

    /// Remembers the current runtime for flushes asked for off it, unless
    /// one is known already.
    pub(super) fn note_runtime(&self) {
        if self.soon.runtime.get().is_none() {
            if let Ok(handle) = Handle::try_current() {
                let _ = self.soon.runtime.set(handle);
            }
        }
    }

    /// This thread's flag for this log.
    fn due_here(&self) -> Arc<AtomicBool> {
        let id = std::ptr::from_ref(self) as usize;
        DUE.with(|d| {
            let mut d = d.borrow_mut();
            if let Some((_, f)) = d.iter().find(|(x, _)| *x == id) {
                return f.clone();
            }
            // A log at the address of a dropped one takes over its flag,
            // which is clear: a pending flush keeps its log alive.
            let f = Arc::new(AtomicBool::new(false));
            d.push((id, f.clone()));
            f
        })
    }
}

/// Writes its log's queue when dropped: when its task runs, or when a
/// runtime shutting down drops the task unrun.
struct Flush {
    log: Arc<Log>,
    due: Arc<AtomicBool>,
}

impl Drop for Flush {
    fn drop(&mut self) {
        // Cleared before writing: a record queued after the write took the
        // queue schedules a flush of its own.
        self.due.store(false, Ordering::Release);
        self.log.write_queued();
    }
}
