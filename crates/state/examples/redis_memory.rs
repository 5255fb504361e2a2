//! Bytes per host that shared budgets take in Redis: starts a redis-server
//! on a free loopback port, gives 100 000 hosts one admitted request each
//! through `RedisHosts`, and reads `used_memory` from `INFO memory` before
//! and after. Then the same for 10 000 shared pages of 2 KiB
//! (`SharedPages`), with the bytes each write sends and the lookups per
//! second one node answers.
//!
//!     cargo run --release -p mannerly-state --example redis_memory

// The example is the store's caller: it reads the system clocks and
// passes them in, as the proxy does, and times itself.
#![allow(clippy::disallowed_methods)]

use mannerly_test_support::redis_server;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use mannerly_policy::budget::BudgetParams;
use mannerly_policy::conditional::http::{Method, Request, Response};
use mannerly_policy::conditional::{storable, CacheKey, CacheParams};
use mannerly_state::hosts::{RedisHosts, RedisSettings};
use mannerly_state::responses::SharedPages;

const HOSTS: usize = 100_000;
const TASKS: usize = 32;
const PAGES: usize = 10_000;
const BODY: usize = 2048;

fn used_memory(s: &redis_server::RedisServer) -> u64 {
    s.cli(&["INFO", "memory"])
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Bytes Redis received and sent so far (`INFO stats`).
fn net_bytes(s: &redis_server::RedisServer) -> (u64, u64) {
    let info = s.cli(&["INFO", "stats"]);
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (
        field("total_net_input_bytes:"),
        field("total_net_output_bytes:"),
    )
}

#[tokio::main]
async fn main() {
    let Some(server) = redis_server::RedisServer::start("redis_memory") else {
        return;
    };
    let mut settings = RedisSettings::new(server.url());
    settings.command_timeout = Duration::from_secs(5);
    let store = Arc::new(
        RedisHosts::new(BudgetParams::default(), settings, SystemTime::now()).expect("store"),
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = used_memory(&server);
    let net_before = net_bytes(&server);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for i in (t..HOSTS).step_by(TASKS) {
                let host = format!("host-{i:06}.example.com");
                let d = store
                    .admit(
                        &host,
                        Instant::now(),
                        SystemTime::now(),
                        Duration::from_secs(30),
                    )
                    .await;
                assert!(!d.basis.is_local(), "redis answered");
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let took = started.elapsed();
    let net_after = net_bytes(&server);
    let after = used_memory(&server);
    let keys = server.cli(&["DBSIZE"]);
    println!(
        "budget script call: {:.0} bytes to Redis, {:.0} bytes back (admit of a new host, lease taken)",
        net_after.0.saturating_sub(net_before.0) as f64 / HOSTS as f64,
        net_after.1.saturating_sub(net_before.1) as f64 / HOSTS as f64
    );
    println!(
        "{HOSTS} hosts ({} keys): used_memory {} -> {} bytes, {:.1} bytes/host (host names of 24 bytes, 71-byte budgets, one live lease each); {:.0} admits/s over {TASKS} tasks",
        keys.trim(),
        before,
        after,
        after.saturating_sub(before) as f64 / HOSTS as f64,
        HOSTS as f64 / took.as_secs_f64()
    );
    pages(&server, &store).await;
}

/// Memory and bytes per shared page, and lookups per second.
async fn pages(server: &redis_server::RedisServer, store: &RedisHosts) {
    let shared = Arc::new(SharedPages::new(
        store.connection(),
        "pages:",
        Duration::from_secs(5),
        1 << 20,
        Duration::from_secs(3600),
    ));
    let before = used_memory(server);
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let shared = shared.clone();
        tasks.push(tokio::spawn(async move {
            for i in (t..PAGES).step_by(TASKS) {
                let (_, meta) = page(i);
                let body = bytes::Bytes::from(vec![b'x'; BODY]);
                shared.put(&meta, &body).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let after = used_memory(server);
    let st = shared.stats();
    let written = st.bytes_written.load(std::sync::atomic::Ordering::Relaxed);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let shared = shared.clone();
        tasks.push(tokio::spawn(async move {
            let headers = Default::default();
            for i in (t..PAGES).step_by(TASKS) {
                let (key, _) = page(i);
                assert!(shared.get(&key, &headers).await.is_some(), "stored");
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let took = started.elapsed();
    println!(
        "{PAGES} pages of {BODY} B: used_memory {before} -> {after} bytes, {:.0} bytes/page in Redis; {:.0} bytes sent per write; {:.0} lookups/s over {TASKS} tasks",
        after.saturating_sub(before) as f64 / PAGES as f64,
        written as f64 / PAGES as f64,
        PAGES as f64 / took.as_secs_f64()
    );
}

fn page(i: usize) -> (CacheKey, mannerly_policy::conditional::CacheEntryMeta) {
    let url = format!("https://host-{:04}.example.com/articles/{i:06}", i % 1000);
    let key = CacheKey::new(&Method::GET, &url).expect("a URL");
    let req = Request::builder()
        .uri(url.as_str())
        .body(())
        .expect("request");
    let resp = Response::builder()
        .status(200)
        .header("etag", format!("\"v{i}\""))
        .header("content-type", "text/html; charset=utf-8")
        .header("last-modified", "Mon, 30 Nov 2026 10:00:00 GMT")
        .body(())
        .expect("response");
    let meta = storable(
        &req.into_parts().0,
        &key,
        &resp.into_parts().0,
        &CacheParams::default(),
        SystemTime::now(),
    )
    .expect("storable");
    (key, meta)
}
