//! Scheduling of the threads that write behind the serving ones.
//!
//! The response store's writer is woken by every response queued for it.
//! Sharing a CPU with a serving thread, it took that CPU after each
//! response, committed the one page, and handed the CPU back: a commit and
//! two context switches per page (6 pages per commit in the pinned
//! benchmark, bench/README "Peers"). Under `SCHED_BATCH` a woken thread
//! does not preempt the running one; it runs when the serving thread waits
//! or its slice ends, finds many responses queued and commits them
//! together (28 pages per commit, 10% less CPU per stored page). It still
//! gets its fair share of the CPU: the policy changes when it runs, not
//! how much.

/// Puts the calling thread under `SCHED_BATCH`; where that is refused or
/// not Linux, it keeps the normal policy.
pub(crate) fn yield_to_serving() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: sched_setscheduler reads one `sched_param` through a
        // valid pointer; pid 0 is the calling thread.
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) } != 0 {
            tracing::debug!(
                "SCHED_BATCH not set for a background thread: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #[test]
    fn a_thread_asked_to_yield_runs_under_sched_batch() {
        let policy = std::thread::spawn(|| {
            super::yield_to_serving();
            // SAFETY: sched_getscheduler takes no pointer; pid 0 is this thread.
            unsafe { libc::sched_getscheduler(0) }
        })
        .join()
        .unwrap();
        assert_eq!(policy, libc::SCHED_BATCH);
        // SAFETY: as above, for the test's own thread, which was not asked.
        assert_ne!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_BATCH);
    }
}
