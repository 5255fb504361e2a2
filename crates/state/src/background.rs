//! What the binary asks of the threads this crate starts for work no
//! request waits on directly (the disk store's writer).
//!
//! The binary sets the hook because what it does takes a system call this
//! crate, free of unsafe code, does not make: it asks the scheduler to let
//! the thread yield to the serving threads (`SCHED_BATCH` on Linux).

use std::sync::OnceLock;

static ON_START: OnceLock<fn()> = OnceLock::new();

/// Sets what each such thread runs first. Only the first call counts.
pub fn on_start(hook: fn()) {
    let _ = ON_START.set(hook);
}

/// Runs the hook, if one was set, on the calling thread.
pub(crate) fn started() {
    if let Some(hook) = ON_START.get() {
        hook();
    }
}
