//! Several proxies sharing host state through a real redis-server.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mannerly_proxy::StateBackend;

use super::redis_cluster::PROXY_CALLS;
use super::redis_server::RedisServer;
use super::support::*;

fn shared(cfg: &mut mannerly_proxy::Config, redis: &RedisServer, rate: f64) {
    cfg.state.backend = StateBackend::Redis;
    cfg.state.redis_url = redis.url();
    cfg.state.key_prefix = String::from("e2e:");
    cfg.state.instances_hint = 2;
    // A loaded test machine must not look like an unreachable Redis.
    cfg.state.command_timeout_ms = 500.0;
    cfg.budget.start_rate = rate;
    cfg.budget.max_rate = rate;
    cfg.budget.burst = 1;
}

/// Times at which the origin served each proxy's requests (`/a/..`, `/b/..`).
struct Clock(Mutex<Vec<(String, Instant)>>);

impl Clock {
    fn times(&self, prefix: &str, since: Instant) -> Vec<Instant> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, t)| p.starts_with(prefix) && *t >= since)
            .map(|(_, t)| *t)
            .collect()
    }
}

fn states<'a>(lines: &'a [serde_json::Value], path_part: &str) -> Vec<&'a str> {
    lines
        .iter()
        .filter(|l| {
            l["outcome"] == "fetched" && l["url"].as_str().is_some_and(|u| u.contains(path_part))
        })
        .map(|l| l["state"].as_str().unwrap_or("none"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_going_away_slows_each_proxy_and_sharing_resumes() {
    let Some(mut redis) =
        RedisServer::start("redis_going_away_slows_each_proxy_and_sharing_resumes")
    else {
        return;
    };
    let clock = Arc::new(Clock(Mutex::new(Vec::new())));
    let c = clock.clone();
    let origin = Origin::http(handler(move |req| {
        let c = c.clone();
        async move {
            c.0.lock()
                .unwrap()
                .push((req.uri().path().to_string(), Instant::now()));
            text(200, "ok\n")
        }
    }))
    .await;
    let rate = 8.0;
    let mut a = TestProxy::start(|cfg| {
        shared(cfg, &redis, rate);
        cfg.admin.listen = "127.0.0.1:0".into();
    })
    .await;
    let admin = format!("http://{}", a.admin.expect("admin listener"));
    // What an operator sees: the backend, and whether it is degraded.
    let backend = |admin: String| async move {
        let (_, ready) = crate::e2e::admin::get_json(&format!("{admin}/readyz")).await;
        let metrics = crate::e2e::admin::metrics_text(&admin).await;
        let m = crate::e2e::admin::series(&metrics);
        (
            ready["state_backend"].clone(),
            ready["state"].clone(),
            m["mannerly_state_backend_degraded"],
            m["mannerly_state_redis_round_trips_total"] > 0.0,
            m["mannerly_state_redis_degraded_ops_total"] > 0.0,
        )
    };
    let mut b = TestProxy::start(|cfg| shared(cfg, &redis, rate)).await;
    let (ca, cb) = (a.client(), b.client());
    let port = origin.port();
    let fetch = |c: reqwest::Client, who: &'static str, phase: &'static str, n: usize| async move {
        for i in 0..n {
            let url = format!("http://127.0.0.1:{port}/{who}/{phase}/{i}");
            let r = c.get(url).send().await.expect("no request fails");
            assert_eq!(r.status(), 200, "{who} {phase} {i}: {}", decision(&r));
        }
    };

    // Shared: both proxies draw from one budget.
    tokio::join!(
        fetch(ca.clone(), "a", "before", 4),
        fetch(cb.clone(), "b", "before", 4)
    );

    assert_eq!(
        backend(admin.clone()).await,
        ("redis".into(), "shared".into(), 0.0, true, false)
    );

    // Redis gone: every request still gets its page, each proxy alone at
    // rate / instances_hint.
    redis.kill();
    let down = Instant::now();
    let n = 6;
    tokio::join!(
        fetch(ca.clone(), "a", "down", n),
        fetch(cb.clone(), "b", "down", n)
    );
    assert_eq!(
        backend(admin.clone()).await,
        ("redis".into(), "degraded".into(), 1.0, true, true)
    );
    for who in ["/a/down", "/b/down"] {
        let t = clock.times(who, down);
        assert_eq!(t.len(), n);
        let span = t[n - 1].duration_since(t[0]).as_secs_f64();
        // n requests at rate/2 take (n-1) intervals; a few ms of slack for
        // the ms rounding of the budget and the loopback hop.
        let least = (n - 1) as f64 / (rate / 2.0) - 0.05;
        assert!(
            span >= least,
            "{who}: {n} requests in {span:.3}s, degraded pace allows no less than {least:.3}s"
        );
    }

    // Redis back (empty): the proxies share again once a probe gets through.
    redis.restart();
    let mut shared_again = false;
    for i in 0..40 {
        // A poll interval: a probe getting through is what is waited on.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let url = format!("http://127.0.0.1:{port}/a/after/{i}");
        let r = ca.get(url).send().await.expect("no request fails");
        assert_eq!(r.status(), 200);
        let url = format!("http://127.0.0.1:{port}/b/after/{i}");
        let r2 = cb.get(url).send().await.expect("no request fails");
        assert_eq!(r2.status(), 200);
        let la = a.dir.path().join("audit.jsonl");
        let lb = b.dir.path().join("audit.jsonl");
        let (la, lb) = (audit_lines(&la), audit_lines(&lb));
        let sa = states(&la, "/a/after/");
        let sb = states(&lb, "/b/after/");
        if sa.last() == Some(&"shared") && sb.last() == Some(&"shared") {
            shared_again = true;
            break;
        }
    }

    let la = a.stop().await;
    let lb = b.stop().await;
    assert!(
        shared_again,
        "both proxies share state again after Redis is back"
    );
    for (lines, who) in [(&la, "/a/"), (&lb, "/b/")] {
        assert!(states(lines, &format!("{who}before/"))
            .iter()
            .all(|s| *s == "shared"));
        let down = states(lines, &format!("{who}down/"));
        assert_eq!(down.len(), n);
        assert!(down.iter().all(|s| *s == "degraded"), "{who}: {down:?}");
        assert!(lines.iter().all(|l| l["outcome"] != "error"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_killed_mid_request_leaves_no_lease_behind() {
    let Some(redis) = RedisServer::start("a_proxy_killed_mid_request_leaves_no_lease_behind")
    else {
        return;
    };
    // `/hang` never answers (the proxy gives up after 5 s); `/pair` answers once two are in flight at once
    // (the full concurrency of the host), or after 20 s with a 500.
    let in_pair = Arc::new(AtomicUsize::new(0));
    let notify = Arc::new(tokio::sync::Notify::new());
    let (p, n) = (in_pair.clone(), notify.clone());
    let origin = Origin::http(handler(move |req| {
        let (p, n) = (p.clone(), n.clone());
        async move {
            match req.uri().path() {
                "/robots.txt" => text(404, "none\n"),
                "/hang" => {
                    // An origin that never answers, on purpose.
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    text(200, "late\n")
                }
                _ => {
                    if p.fetch_add(1, Ordering::SeqCst) + 1 >= 2 {
                        n.notify_waiters();
                        return text(200, "pair\n");
                    }
                    let waited = tokio::time::timeout(Duration::from_secs(20), n.notified()).await;
                    if waited.is_ok() {
                        text(200, "pair\n")
                    } else {
                        text(500, "alone\n")
                    }
                }
            }
        }
    }))
    .await;
    let port = origin.port();
    let dir = tempfile::tempdir().unwrap();
    let url = redis.url();
    let env = [
        ("MANNERLY_STATE__BACKEND", "redis"),
        ("MANNERLY_STATE__REDIS_URL", url.as_str()),
        ("MANNERLY_STATE__KEY_PREFIX", "kill:"),
        ("MANNERLY_STATE__COMMAND_TIMEOUT_MS", "500"),
        ("MANNERLY_STATE__LEASE_MARGIN_SECS", "1"),
        ("MANNERLY_BUDGET__CONCURRENCY", "2"),
        ("MANNERLY_UPSTREAM__CONNECT_TIMEOUT_SECS", "1"),
        ("MANNERLY_UPSTREAM__FIRST_BYTE_TIMEOUT_SECS", "5"),
    ];
    let doomed = RunningBinary::start(dir.path(), &env);
    let c = doomed.client();
    // Two URLs: identical requests in flight together would be one.
    let hung: Vec<_> = (0..2)
        .map(|i| {
            let (c, u) = (c.clone(), format!("http://127.0.0.1:{port}/hang?{i}"));
            tokio::spawn(async move { c.get(u).send().await.map(|r| r.status()) })
        })
        .collect();
    // Both slots are leased once the origin holds both requests.
    let leases = String::from("kill:{127.0.0.1}:l");
    for _ in 0..200 {
        if redis.cli(&["ZCARD", &leases]).trim() == "2" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        redis.cli(&["ZCARD", &leases]).trim(),
        "2",
        "both slots leased"
    );
    doomed.kill9();
    for h in hung {
        let _ = h.await;
    }

    // The survivor (lease TTL 1 + 5 + 1 = 7 s) gets both slots back.
    let mut alive = TestProxy::start(|cfg| {
        cfg.state.backend = StateBackend::Redis;
        cfg.state.redis_url = url.clone();
        cfg.state.key_prefix = String::from("kill:");
        cfg.state.command_timeout_ms = 500.0;
        cfg.state.lease_margin_secs = 1.0;
        cfg.budget.concurrency = 2;
        cfg.budget.max_hold_secs = 30.0;
        cfg.upstream.connect_timeout = Duration::from_secs(1);
        cfg.upstream.first_byte_timeout = Duration::from_secs(5);
    })
    .await;
    let ac = alive.client();
    let pair = |i: u8| format!("http://127.0.0.1:{port}/pair?{i}");
    let (r1, r2) = tokio::join!(ac.get(pair(1)).send(), ac.get(pair(2)).send());
    let (r1, r2) = (r1.expect("answered"), r2.expect("answered"));
    assert_eq!(r1.status(), 200, "{}", decision(&r1));
    assert_eq!(r2.status(), 200, "{}", decision(&r2));
    let lines = alive.stop().await;
    let waited: Vec<u64> = lines
        .iter()
        .filter(|l| l["url"].as_str().is_some_and(|u| u.contains("/pair?")))
        .filter_map(|l| l["waited_ms"].as_u64())
        .collect();
    assert_eq!(waited.len(), 2);
}

/// Three proxies contending for one host: every step of a page goes to
/// Redis, and the copy of the proxy acting next is kept current by the
/// changes told to it, so a page costs at most three script calls (two
/// when nothing races: the start with the next request's admit, and the
/// response), counted by the server and by the proxies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_proxies_contending_for_one_host_pay_at_most_three_calls_per_page() {
    let Some(redis) = RedisServer::start(
        "three_proxies_contending_for_one_host_pay_at_most_three_calls_per_page",
    ) else {
        return;
    };
    let server_calls =
        || super::redis_cluster::commandstats(&redis.cli(&["INFO", "commandstats"]), PROXY_CALLS);
    let numpat = || number(&redis.cli(&["PUBSUB", "NUMPAT"]));
    contending_calls(redis.url(), server_calls, numpat).await;
}

/// The same on a Redis Cluster of three masters and three replicas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_redis_cluster_three_contending_proxies_pay_at_most_three_calls_per_page() {
    let Some(cluster) = super::redis_cluster::RedisCluster::start(
        "on_a_redis_cluster_three_contending_proxies_pay_at_most_three_calls_per_page",
    ) else {
        return;
    };
    let numpat = || {
        cluster
            .each_node(&["PUBSUB", "NUMPAT"])
            .iter()
            .map(|a| number(a))
            .sum()
    };
    contending_calls(cluster.url(), || cluster.calls(PROXY_CALLS), numpat).await;
}

fn number(answer: &str) -> u64 {
    answer.trim().parse().unwrap_or(u64::MAX)
}

async fn contending_calls(url: String, server_calls: impl Fn() -> u64, numpat: impl Fn() -> u64) {
    const PER_PROXY: usize = 10;
    let origin = Origin::http(handler(|req| async move {
        match req.uri().path() {
            "/robots.txt" => text(404, "none\n"),
            _ => text(200, "ok\n"),
        }
    }))
    .await;
    let base = super::wake::sharing(&url, "contend:");
    let shared = |cfg: &mut mannerly_proxy::Config| {
        base(cfg);
        cfg.state.instances_hint = 3;
        cfg.budget.start_rate = 10.0;
        cfg.budget.max_rate = 10.0;
        cfg.budget.burst = 1;
        cfg.budget.max_hold_secs = 120.0;
    };
    let proxies = [
        TestProxy::start(shared).await,
        TestProxy::start(shared).await,
        TestProxy::start(shared).await,
    ];
    let port = origin.port();
    let get = |c: reqwest::Client, path: String| async move {
        let r = c
            .get(format!("http://127.0.0.1:{port}{path}"))
            .send()
            .await
            .expect("no request fails");
        assert_eq!(r.status(), 200, "{path}: {}", decision(&r));
    };
    // robots.txt settled and the script loaded before counting.
    for (k, p) in proxies.iter().enumerate() {
        get(p.client(), format!("/warm/{k}")).await;
    }
    let summed = |name: &'static str| {
        let proxies = &proxies;
        async move {
            let mut sum = 0.0;
            for p in proxies {
                sum += super::wake::metric(p, name).await;
            }
            sum
        }
    };
    let round_trips = || summed("mannerly_state_redis_round_trips_total");
    let conflicts = || summed("mannerly_state_redis_conflicts_total");
    let heard = || summed("mannerly_state_redis_messages_heard_total");
    let (calls_before, trips_before) = (server_calls(), round_trips().await);
    let heard_before = heard().await;
    let conflicts_before = conflicts().await;
    let seen_before = origin.seen.total();

    let mut pages = Vec::new();
    for i in 0..PER_PROXY {
        for (k, p) in proxies.iter().enumerate() {
            pages.push(tokio::spawn(get(p.client(), format!("/p{k}/{i}"))));
        }
    }
    let mut pages = pages.into_iter();
    if let Some(first) = pages.next() {
        first.await.expect("a page");
    }
    // While the others still crawl: no proxy listens to every host.
    assert_eq!(numpat(), 0, "PUBSUB NUMPAT while crawling");
    let listening = summed("mannerly_state_redis_channels_heard").await;
    for p in pages {
        p.await.expect("a page");
    }
    let delivered = (3 * PER_PROXY) as u64;
    let calls = server_calls() - calls_before;
    let trips = round_trips().await - trips_before;
    let messages = heard().await - heard_before;

    let lost = conflicts().await - conflicts_before;
    eprintln!(
        "{calls} calls ({trips} script calls by the proxies, {lost} of them lost \
         compare-and-sets) and {messages} messages delivered for {delivered} pages; \
         {listening} channels heard mid-crawl"
    );
    assert_eq!(numpat(), 0, "PUBSUB NUMPAT after the crawl");
    // A change is told to one proxy, the one acting on it next: at most
    // one message a script call (no reset here), however many proxies
    // share the host.
    assert!(
        messages <= trips,
        "{messages} messages delivered for {trips} script calls"
    );
    // The host was contended: the origin saw the proxies' pages
    // interleaved, not one proxy's queue after another's.
    let order: Vec<String> = origin.seen.all()[seen_before..]
        .iter()
        .map(|r| r.path.split('/').nth(1).unwrap_or("").to_string())
        .collect();
    assert_eq!(order.len() as u64, delivered);
    let switches = order.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(switches >= 6, "the proxies took turns: {order:?}");
    assert!(
        calls <= 3 * delivered,
        "{calls} calls for {delivered} pages (server count, subscriptions included)"
    );
    assert!(
        trips <= (3 * delivered) as f64,
        "{trips} round trips for {delivered} pages (the proxies' count)"
    );
    for mut p in proxies {
        p.stop().await;
    }
}

/// Two proxies on one Redis, each crawling hosts of its own: nobody waits
/// on another proxy, so nothing is published, no channel is listened on,
/// and a page costs at most two calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxies_on_their_own_hosts_listen_on_nothing_and_pay_two_calls_per_page() {
    const PAGES: usize = 10;
    let Some(redis) = RedisServer::start(
        "proxies_on_their_own_hosts_listen_on_nothing_and_pay_two_calls_per_page",
    ) else {
        return;
    };
    let origin = Origin::http(handler(|req| async move {
        match req.uri().path() {
            "/robots.txt" => text(404, "none\n"),
            _ => text(200, "ok\n"),
        }
    }))
    .await;
    let port = origin.port();
    let url = redis.url();
    let base = super::wake::sharing(&url, "own:");
    let config = |cfg: &mut mannerly_proxy::Config| {
        base(cfg);
        cfg.budget.start_rate = 50.0;
        cfg.budget.max_rate = 50.0;
        resolve_to_loopback(cfg, &format!("a.test:{port}"), port);
        resolve_to_loopback(cfg, &format!("b.test:{port}"), port);
    };
    let proxies = [
        TestProxy::start(config).await,
        TestProxy::start(config).await,
    ];
    let hosts = ["a.test", "b.test"];
    // robots.txt settled and the script loaded before counting.
    for (p, host) in proxies.iter().zip(hosts) {
        get_ok(&p.client(), &format!("http://{host}:{port}/warm")).await;
    }
    let calls =
        || super::redis_cluster::commandstats(&redis.cli(&["INFO", "commandstats"]), PROXY_CALLS);
    let before = calls();
    let published = || {
        let info = redis.cli(&["INFO", "commandstats"]);
        super::redis_cluster::commandstats(&info, &["publish", "spublish"])
    };
    let published_before = published();
    let crawls: Vec<_> = proxies
        .iter()
        .zip(hosts)
        .map(|(p, host)| {
            let c = p.client();
            tokio::spawn(async move {
                for i in 0..PAGES {
                    get_ok(&c, &format!("http://{host}:{port}/p/{i}")).await;
                }
            })
        })
        .collect();
    // While they crawl: nobody listens by pattern.
    let numpat = number(&redis.cli(&["PUBSUB", "NUMPAT"]));
    for c in crawls {
        c.await.expect("a crawl");
    }
    let pages = (2 * PAGES) as u64;
    let calls = calls() - before;
    let mut heard = 0.0;
    let mut channels = 0.0;
    for p in &proxies {
        heard += super::wake::metric(p, "mannerly_state_redis_messages_heard_total").await;
        channels += super::wake::metric(p, "mannerly_state_redis_channels_heard").await;
    }
    eprintln!("{calls} calls, {heard} messages for {pages} pages");
    assert_eq!(numpat, 0, "PUBSUB NUMPAT while crawling");
    assert!(calls <= 2 * pages, "{calls} calls for {pages} pages");
    assert_eq!(published() - published_before, 0, "nothing published");
    assert_eq!(heard, 0.0, "no message delivered");
    assert_eq!(channels, 0.0, "no channel listened on");
    for mut p in proxies {
        p.stop().await;
    }
}
