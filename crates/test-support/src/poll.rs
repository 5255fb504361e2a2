//! Waiting on threads, not tasks: for tests and examples of synchronous
//! code (the disk store's writer, a Redis Cluster forming).

use std::time::{Duration, Instant};

/// Polls `ok` every `every` until it holds; past `timeout` it panics
/// naming `what`. What a test then asserts is the state, never the time it
/// took.
pub fn poll_until(what: &str, timeout: Duration, every: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(every);
    }
}
