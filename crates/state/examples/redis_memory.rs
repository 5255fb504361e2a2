//! Bytes per host that shared budgets take in Redis: starts a redis-server
//! on a free loopback port, gives 100 000 hosts one admitted request each
//! through `RedisHosts`, and reads `used_memory` from `INFO memory` before
//! and after.
//!
//!     cargo run --release -p mannerly-state --example redis_memory

// The example is the store's caller: it reads the system clocks and
// passes them in, as the proxy does, and times itself.
#![allow(clippy::disallowed_methods)]

#[allow(dead_code)]
#[path = "../tests/support/redis_server.rs"]
mod redis_server;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use mannerly_policy::budget::BudgetParams;
use mannerly_state::hosts::{RedisHosts, RedisSettings};

const HOSTS: usize = 100_000;
const TASKS: usize = 32;

fn used_memory(s: &redis_server::RedisServer) -> u64 {
    s.cli(&["INFO", "memory"])
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
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
    let after = used_memory(&server);
    let keys = server.cli(&["DBSIZE"]);
    println!(
        "{HOSTS} hosts ({} keys): used_memory {} -> {} bytes, {:.1} bytes/host (host names of 24 bytes, 63-byte budgets); {:.0} admits/s over {TASKS} tasks",
        keys.trim(),
        before,
        after,
        after.saturating_sub(before) as f64 / HOSTS as f64,
        HOSTS as f64 / took.as_secs_f64()
    );
}
