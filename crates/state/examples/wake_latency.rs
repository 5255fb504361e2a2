//! Added wait of a request queued on one proxy for a host's only slot,
//! held by another proxy: the time from proxy A giving the lease back to
//! proxy B starting. Starts a redis-server on a free loopback port and runs
//! two `RedisHosts` stores on it, each round releasing at a different
//! offset into B's wait. B waits as the proxy does (`hosts/budget.rs`):
//!
//! - `poll`: looking again every 100 ms (no subscription, or one that is
//!   down);
//! - `message`: woken by A's release, told to B as the host's earliest
//!   slot waiter on B's own channel of the host (`Wakes`), with a look
//!   every 1 s as fallback.
//!
//!     cargo run --release -p mannerly-state --example wake_latency

// The example is the store's caller: it reads the system clocks and
// passes them in, as the proxy does, and times itself.
#![allow(clippy::disallowed_methods)]

use mannerly_test_support::redis_server;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use mannerly_policy::budget::{BudgetParams, Start};
use mannerly_state::hosts::{RedisHosts, RedisSettings};
use mannerly_state::wake::Wakes;
use tokio::sync::Notify;

const ROUNDS: u64 = 40;
const HOST: &str = "one-slot.example";

fn store(url: &str) -> RedisHosts {
    let params = BudgetParams {
        concurrency: 1,
        start_rate: 1000.0,
        max_rate: 1000.0,
        burst: 100,
        ..Default::default()
    };
    let mut s = RedisSettings::new(url.to_string());
    s.key_prefix = String::from("bench:");
    s.command_timeout = Duration::from_secs(2);
    RedisHosts::new(params, s, SystemTime::now()).expect("store")
}

/// B's wait for the slot, looking again every `recheck` or when `woken`.
async fn wait_for_slot(b: &RedisHosts, woken: Option<&Notify>, recheck: Duration) -> Instant {
    let hold = Duration::from_secs(30);
    loop {
        let freed = woken.map(|n| n.notified());
        tokio::pin!(freed);
        if let Some(f) = freed.as_mut().as_pin_mut() {
            f.enable();
        }
        let now = Instant::now();
        let st = b
            .try_start_since(HOST, now, SystemTime::now(), hold, now)
            .await;
        match st.value {
            (Start::Go, Some(lease)) => {
                let at = Instant::now();
                b.finish(HOST, &lease, Instant::now(), SystemTime::now())
                    .await;
                return at;
            }
            (Start::WaitConcurrency, _) => {}
            other => panic!("unexpected answer {other:?}"),
        }
        match freed.as_mut().as_pin_mut() {
            Some(f) => {
                let _ = tokio::time::timeout(recheck, f).await;
            }
            None => tokio::time::sleep(recheck).await,
        }
    }
}

async fn run(a: &RedisHosts, b: &Arc<RedisHosts>, woken: Option<Arc<Notify>>) -> Vec<Duration> {
    let recheck = if woken.is_some() {
        Duration::from_secs(1)
    } else {
        Duration::from_millis(100)
    };
    let hold = Duration::from_secs(30);
    let mut added = Vec::new();
    for round in 0..ROUNDS {
        let now = Instant::now();
        let (Start::Go, Some(lease)) = a
            .try_start_since(HOST, now, SystemTime::now(), hold, now)
            .await
            .value
        else {
            panic!("A could not take the slot");
        };
        let (b2, w2) = (b.clone(), woken.clone());
        let waiter = tokio::spawn(async move { wait_for_slot(&b2, w2.as_deref(), recheck).await });
        // Releases land at every phase of B's re-check period.
        tokio::time::sleep(Duration::from_millis(20 + (round * 37) % 100)).await;
        let released = Instant::now();
        a.finish(HOST, &lease, Instant::now(), SystemTime::now())
            .await;
        let started = waiter.await.expect("waiter");
        added.push(started.saturating_duration_since(released));
    }
    added.sort();
    added
}

fn report(name: &str, added: &[Duration]) {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let at = |q: f64| ms(added[((added.len() - 1) as f64 * q).round() as usize]);
    let mean = added.iter().map(|d| ms(*d)).sum::<f64>() / added.len() as f64;
    println!(
        "{name:8} rounds {:3}  added wait ms: median {:6.2}  mean {:6.2}  p90 {:6.2}  max {:6.2}",
        added.len(),
        at(0.5),
        mean,
        at(0.9),
        at(1.0)
    );
}

#[tokio::main]
async fn main() {
    let Some(server) = redis_server::RedisServer::start("wake_latency") else {
        return;
    };
    let url = server.url();
    let a = store(&url);
    let b = Arc::new(store(&url));
    report("poll", &run(&a, &b, None).await);

    let woken = Arc::new(Notify::new());
    let (w, heard_by) = (woken.clone(), b.clone());
    // As the proxy does: B's copy is refreshed by every change, and only a
    // lease given back wakes its waiter.
    let wakes = Wakes::subscribe(
        &url,
        "bench:",
        Duration::from_secs(2),
        move |host, payload| {
            let heard = heard_by.heard(host, payload, Instant::now(), SystemTime::now());
            if host == HOST && heard.released {
                w.notify_one();
            }
        },
    )
    .expect("subscriber");
    b.listen_with(wakes.waiters());
    // B's waiter listens on its own channel of the host, as the proxy's
    // does while it waits.
    let hearing = b.hear(HOST).expect("a subscriber");
    hearing.ready(Duration::from_secs(10)).await;
    let added = run(&a, &b, Some(woken)).await;
    report("message", &added);
    println!("messages received: {}", wakes.messages());
}
