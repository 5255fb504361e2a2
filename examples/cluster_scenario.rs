//! The cluster scenario of the shared-state issue, as a rerunnable benchmark:
//! three mannerly proxies, one origin limited to 2 requests/s (sliding 1 s
//! window over every request, robots.txt included; `Retry-After: 2` on a
//! 429), three impatient clients — one per proxy — each sending 40 GETs at
//! 5/s and doing nothing about 429s.
//!
//! The proxies may hold a request up to 300 s (`budget.max_hold_secs`), so
//! that a page is late rather than refused.
//!
//! Run three times: proxies on their own (`memory`), sharing one
//! redis-server (`redis`, started here on a free loopback port and stopped
//! at the end), and sharing a Redis Cluster of three masters and three
//! replicas (`cluster`, six redis-servers started here the same way).
//! Reports pages delivered, upstream 429s, the origin's aggregate rate, the
//! most requests it served in any 5-second window, and for redis the budget
//! script calls and the PUBLISHes and SPUBLISHes (each delivered to the
//! proxies listening on the host; on a Cluster counted on every live node,
//! replicas included) per delivered page (from `INFO commandstats`).
//!
//!     cargo run --release --example cluster_scenario
//!
//! `CLUSTER_RUNS=redis,cluster` picks runs by name. `CLUSTER_SITE_NAMES=3`
//! spreads the GETs over that many names of one site (`n0.site.test`, …,
//! resolved to the origin through `upstream.resolve`), so the proxies
//! share the site's budget group rather than one host's (one robots.txt
//! per name).

use mannerly_test_support::cluster::*;
use mannerly_test_support::redis_cluster::RedisCluster;
use mannerly_test_support::redis_server::RedisServer;

#[tokio::main]
async fn main() {
    let total = PROXIES * PAGES;
    println!(
        "cluster scenario: {PROXIES} proxies, {PROXIES} clients × {PAGES} GETs at 5/s, origin limit {LIMIT_PER_SEC}/s with Retry-After: 2"
    );
    println!(
        "{:<8} {:>10} {:>13} {:>9} {:>12} {:>14} {:>18} {:>16}",
        "state",
        "delivered",
        "upstream 429s",
        "pages/s",
        "max in 5 s",
        "robots fetches",
        "script calls/page",
        "publishes/page"
    );
    let redis = RedisServer::start("cluster_scenario");
    let cluster = RedisCluster::start("cluster_scenario");
    let mut runs: Vec<(&str, Shared<'_>)> = vec![("memory", Shared::Alone)];
    match &redis {
        Some(r) => runs.push(("redis", Shared::Node(r))),
        None => println!("(redis run skipped: no redis-server)"),
    }
    if let Some(c) = &cluster {
        runs.push(("cluster", Shared::Cluster(c)));
    }
    if let Ok(only) = std::env::var("CLUSTER_RUNS") {
        runs.retain(|(name, _)| only.split(',').any(|o| o == *name));
    }
    if std::env::var_os("CLUSTER_ONLY_REDIS").is_some() {
        runs.retain(|(name, _)| *name != "memory");
    }
    for (name, r) in runs {
        let rep = run(r, site_names(), |_| {}).await;
        let rate = if rep.seconds > 0.0 {
            rep.delivered as f64 / rep.seconds
        } else {
            0.0
        };
        let per_page = |n: Option<u64>| {
            n.map(|c| format!("{:.2}", c as f64 / rep.delivered.max(1) as f64))
                .unwrap_or_else(|| "-".into())
        };
        println!(
            "{:<8} {:>6}/{total} {:>13} {:>9.2} {:>12} {:>14} {:>18} {:>16}",
            name,
            rep.delivered,
            rep.upstream_429,
            rate,
            rep.max_5s,
            rep.robots_fetches,
            per_page(rep.script_calls),
            per_page(rep.publishes)
        );
    }
}
