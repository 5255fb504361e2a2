//! Three proxies sharing host state through a real Redis Cluster (three
//! masters, three replicas, on loopback), one master killed mid-crawl.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mannerly_proxy::StateBackend;

use super::redis_cluster::RedisCluster;
use super::support::*;

const PROXIES: usize = 3;
/// The host's shared rate; each proxy alone (degraded) gets a third.
const RATE: f64 = 6.0;

/// When the origin served each path.
#[derive(Default)]
struct Served(Mutex<Vec<(String, Instant)>>);

impl Served {
    fn at(&self, path: &str) -> Option<Instant> {
        let s = self.0.lock().unwrap();
        s.iter().find(|(p, _)| p == path).map(|(_, t)| *t)
    }

    /// Most requests served inside any window of `w`.
    fn most_in(&self, w: Duration) -> usize {
        let mut t: Vec<Instant> = self.0.lock().unwrap().iter().map(|(_, t)| *t).collect();
        t.sort();
        let mut best = 0;
        let mut from = 0;
        for i in 0..t.len() {
            while t[i].duration_since(t[from]) >= w {
                from += 1;
            }
            best = best.max(i + 1 - from);
        }
        best
    }
}

fn on_cluster(cfg: &mut mannerly_proxy::Config, url: &str) {
    cfg.state.backend = StateBackend::Redis;
    cfg.state.redis_url = url.to_string();
    cfg.state.key_prefix = String::from("e2e:");
    cfg.state.instances_hint = PROXIES as u32;
    // A loaded test machine must not look like an unreachable Redis; a
    // dead master must (its slots answer nothing until the failover).
    cfg.state.command_timeout_ms = 500.0;
    cfg.budget.start_rate = RATE;
    cfg.budget.max_rate = RATE;
    cfg.budget.burst = 1;
    cfg.budget.concurrency = 4;
    cfg.budget.max_hold_secs = 120.0;
}

fn states<'a>(lines: &'a [serde_json::Value], part: &str) -> Vec<(&'a str, String)> {
    lines
        .iter()
        .filter(|l| l["outcome"] == "fetched")
        .filter_map(|l| {
            let url = l["url"].as_str()?;
            let path = url.split_once("//")?.1.split_once('/')?.1;
            url.contains(part)
                .then(|| (l["state"].as_str().unwrap_or("none"), format!("/{path}")))
        })
        .collect()
}

/// Each client fetches `n` pages of `phase` through its proxy, one after
/// another; every one must be a 200.
async fn crawl(clients: Vec<reqwest::Client>, port: u16, phase: String, n: usize) {
    let runs: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(k, c)| {
            let phase = phase.clone();
            tokio::spawn(async move {
                for i in 0..n {
                    let url = format!("http://127.0.0.1:{port}/p{k}/{phase}/{i}");
                    let r = c.get(url).send().await.expect("no request fails");
                    assert_eq!(r.status(), 200, "p{k} {phase} {i}: {}", decision(&r));
                }
            })
        })
        .collect();
    for r in runs {
        r.await.expect("every page of the phase is a 200");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_dies_mid_crawl_and_the_cluster_fails_over_without_a_failed_request() {
    let Some(mut cluster) = RedisCluster::start(
        "a_master_dies_mid_crawl_and_the_cluster_fails_over_without_a_failed_request",
    ) else {
        return;
    };
    let served = Arc::new(Served::default());
    let s = served.clone();
    let origin = Origin::http(handler(move |req| {
        let s = s.clone();
        async move {
            let path = req.uri().path().to_string();
            s.0.lock().unwrap().push((path.clone(), Instant::now()));
            if path == "/robots.txt" {
                return text(200, "User-agent: *\nAllow: /\n");
            }
            text(200, "ok\n")
        }
    }))
    .await;
    let url = cluster.url();
    let mut proxies = Vec::new();
    for _ in 0..PROXIES {
        proxies.push(TestProxy::start(|cfg| on_cluster(cfg, &url)).await);
    }
    let clients: Vec<reqwest::Client> = proxies.iter().map(TestProxy::client).collect();
    let port = origin.port();
    let crawl = |phase: String, n: usize| crawl(clients.clone(), port, phase, n);
    crawl("before".into(), 4).await;
    // The master that holds the host's budget dies; its replica takes over
    // once the other masters agree it is gone.
    let key = "e2e:{127.0.0.1}:h";
    let dead = cluster.master_of(key);
    cluster.kill(dead);
    crawl("failover".into(), 8).await;
    let promoted = cluster.wait_taken_over(key, dead);
    assert_ne!(promoted, dead, "a replica took over the host's slot");

    // Shared again: a probe gets through to the promoted replica.
    let mut shared_again = false;
    for round in 0..40 {
        let phase = format!("after{round}");
        crawl(phase.clone(), 1).await;
        let all_shared = proxies.iter().all(|p| {
            let lines = audit_lines(&p.audit_path);
            states(&lines, &format!("/{phase}/"))
                .iter()
                .all(|(s, _)| *s == "shared")
        });
        if all_shared {
            shared_again = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let exists = cluster.cli(promoted, &["EXISTS", key]);

    let mut logs = Vec::new();
    for mut p in proxies {
        logs.push(p.stop().await);
    }
    assert!(shared_again, "every proxy shares the budget again");
    assert_eq!(
        exists.trim(),
        "1",
        "the budget lives on the promoted master"
    );
    let mut degraded_seen = 0;
    for (k, lines) in logs.iter().enumerate() {
        assert!(
            lines.iter().all(|l| l["outcome"] != "error"),
            "p{k}: no request failed"
        );
        let before = states(lines, "/before/");
        assert_eq!(before.len(), 4);
        assert!(
            before.iter().all(|(s, _)| *s == "shared"),
            "p{k}: {before:?}"
        );
        // Alone, a proxy keeps to a third of the shared rate: its degraded
        // requests span at least (n - 1) such intervals.
        let degraded: Vec<Instant> = states(lines, "/failover/")
            .iter()
            .filter(|(s, _)| *s == "degraded")
            .filter_map(|(_, path)| served.at(path))
            .collect();
        degraded_seen += degraded.len();
        if degraded.len() >= 2 {
            let n = degraded.len();
            let span = degraded[n - 1].duration_since(degraded[0]).as_secs_f64();
            let least = (n - 1) as f64 / (RATE / PROXIES as f64) - 0.1;
            assert!(
                span >= least,
                "p{k}: {n} degraded requests in {span:.3}s, the degraded pace allows no less than {least:.3}s"
            );
        }
    }
    assert!(
        degraded_seen > 0,
        "the dead master was noticed: some requests were decided alone"
    );
    // The cluster as a whole never went above the shared rate: at most
    // RATE per second, plus the one burst slot each proxy's stand-in
    // starts with.
    let most = served.most_in(Duration::from_secs(2));
    let allowed = (2.0 * RATE) as usize + PROXIES + 1;
    assert!(
        most <= allowed,
        "{most} requests in 2 s, the shared pace allows {allowed}"
    );
}
