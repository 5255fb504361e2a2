//! CPU the disk store spends committing a re-crawl's reads: stores N pages
//! (default 140,000, as many as the bench's recrawl path reads in a run),
//! reads each once, and measures the process's CPU time from the last read
//! until the writer has committed the reads and forced them to disk (the
//! writer waits for reads to pause first; the wall time says how long).
//!
//!     cargo run --release -p mannerly-state --example read_flush [N]

// The example is the store's caller: it reads the clocks and times itself.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use mannerly_policy::conditional::http::{HeaderMap, Method, Request, Response};
use mannerly_policy::conditional::{storable, CacheKey, CacheParams};
use mannerly_state::responses::{DiskStore, ResponseStore, StoreLimits};
use mannerly_test_support::poll::poll_until;

/// User and system time of this process, in seconds (`/proc/self/stat`).
fn cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

fn wait_until(what: &str, done: impl FnMut() -> bool) {
    poll_until(
        what,
        Duration::from_secs(120),
        Duration::from_millis(5),
        done,
    );
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(140_000);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let limits = StoreLimits {
        max_body: 1 << 20,
        max_size: 1 << 40,
    };
    let store = DiskStore::open(dir.path().join("store.redb"), limits, Instant::now)
        .expect("the store opens");
    let (req, _) = Request::builder()
        .method(Method::GET)
        .uri("/")
        .body(())
        .expect("a request")
        .into_parts();
    let (resp, _) = Response::builder()
        .status(200)
        .header("etag", "\"e\"")
        .body(())
        .expect("a response")
        .into_parts();
    let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let keys: Vec<CacheKey> = (0..n)
        .map(|i| {
            CacheKey::new(
                &Method::GET,
                &format!("http://127.0.0.1:8080/page?n={i:08}"),
            )
            .expect("a key")
        })
        .collect();
    for (i, key) in keys.iter().enumerate() {
        let meta = storable(&req, key, &resp, &CacheParams::default(), at).expect("storable");
        store.put_then(meta, Bytes::from_static(&[b'x'; 1024]), Box::new(|_| {}));
        // Within the writer's queue, which refuses pages beyond 64 MiB.
        wait_until("the writer", || {
            store.stats().entries as usize + 10_000 >= i
        });
    }
    wait_until("the pages", || store.stats().entries as usize == n);
    // Every page committed and forced before the reads start.
    let mut last = (0, 0);
    wait_until("the writer to rest", || {
        std::thread::sleep(Duration::from_millis(300));
        let s = store.stats();
        std::mem::replace(&mut last, (s.commits, s.forced_commits)) == last
    });
    let none = HeaderMap::new();
    for key in &keys {
        assert!(
            store.get(key, &none).ok().flatten().is_some(),
            "a page went missing"
        );
    }
    let (reads, forced) = (store.stats().read_commits, store.stats().forced_commits);
    let (cpu, wall) = (cpu_s(), Instant::now());
    wait_until("the reads' commit", || {
        let s = store.stats();
        s.read_commits > reads && s.forced_commits > forced
    });
    println!(
        "{n} reads committed: {:.3} s of CPU, {:.3} s after the last read",
        cpu_s() - cpu,
        wall.elapsed().as_secs_f64()
    );
}
