//! A slot freed on one proxy wakes the request waiting for it on another,
//! by a message through the shared redis-server rather than its next look.

use std::sync::Arc;
use std::time::Duration;

use mannerly_proxy::StateBackend;
use tokio::sync::Notify;

use super::redis_cluster::RedisCluster;
use super::redis_server::RedisServer;
use super::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_freed_on_one_proxy_wakes_the_waiter_on_another_by_message() {
    let Some(redis) =
        RedisServer::start("a_slot_freed_on_one_proxy_wakes_the_waiter_on_another_by_message")
    else {
        return;
    };
    wakes_across(redis.url()).await;
}

/// The same on a Redis Cluster: the release is published on the host's
/// shard, the subscriber listens on whichever seed node it reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_redis_cluster_a_freed_slot_wakes_the_waiter_on_another_proxy() {
    let Some(cluster) =
        RedisCluster::start("on_a_redis_cluster_a_freed_slot_wakes_the_waiter_on_another_proxy")
    else {
        return;
    };
    wakes_across(cluster.url()).await;
}

async fn wakes_across(url: String) {
    // `/held` answers only when the test opens the gate: it keeps the
    // host's one slot taken on proxy A.
    let (origin, arrived, gate) = gated("/held", "held\n").await;
    let base = sharing(&url, "wake:");
    let shared = |cfg: &mut mannerly_proxy::Config| {
        base(cfg);
        cfg.budget.start_rate = 50.0;
        cfg.budget.max_rate = 50.0;
        cfg.budget.burst = 5;
        cfg.budget.concurrency = 1;
    };
    let a = TestProxy::start(shared).await;
    let b = TestProxy::start(shared).await;
    let port = origin.port();
    let get = |c: reqwest::Client, path: &'static str| async move {
        let r = c
            .get(format!("http://127.0.0.1:{port}{path}"))
            .send()
            .await
            .expect("no request fails");
        assert_eq!(r.status(), 200, "{path}: {}", decision(&r));
    };
    // robots.txt is settled through both proxies before the slot is held.
    get(a.client(), "/warm").await;
    get(b.client(), "/warm").await;
    until_heard(&b).await;
    let woken = "mannerly_state_redis_woken_by_message_total";
    assert_eq!(metric(&b, woken).await, 0.0);

    let held = tokio::spawn(get(a.client(), "/held"));
    arrived.notified().await;
    let waiting = tokio::spawn(get(b.client(), "/after"));
    // B must be waiting for the slot when A gives it back.
    until_metric(&b, "mannerly_requests_asleep", 1.0).await;
    gate.notify_one();
    held.await.expect("A's request");
    waiting.await.expect("B's request");
    assert!(
        metric(&b, woken).await >= 1.0,
        "B's waiter was woken by A's release message"
    );
}

/// robots.txt being fetched by one proxy: another proxy's request to the
/// same origin waits for the copy and is woken by the message the fetching
/// proxy publishes when it stores it, not by its next look.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_robots_txt_stored_by_one_proxy_wakes_the_waiter_on_another_by_message() {
    let Some(redis) = RedisServer::start(
        "a_robots_txt_stored_by_one_proxy_wakes_the_waiter_on_another_by_message",
    ) else {
        return;
    };
    robots_wakes_across(redis.url()).await;
}

/// The same on a Redis Cluster: published with the copy's slot, heard on
/// whichever node the subscriber reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_redis_cluster_a_stored_robots_txt_wakes_the_waiter_on_another_proxy() {
    let Some(cluster) = RedisCluster::start(
        "on_a_redis_cluster_a_stored_robots_txt_wakes_the_waiter_on_another_proxy",
    ) else {
        return;
    };
    robots_wakes_across(cluster.url()).await;
}

async fn robots_wakes_across(url: String) {
    // robots.txt answers only when the test opens the gate: proxy A holds
    // the cluster's fetch lock meanwhile.
    let (origin, arrived, gate) = gated("/robots.txt", "User-agent: *\nDisallow: /private\n").await;
    let a = TestProxy::start(sharing(&url, "robotswake:")).await;
    let mut b = TestProxy::start(sharing(&url, "robotswake:")).await;
    until_heard(&b).await;
    let woken = "mannerly_state_redis_robots_woken_by_message_total";
    assert_eq!(metric(&b, woken).await, 0.0);

    let port = origin.port();
    let get = move |c: reqwest::Client, path: &'static str| send(c, port, path);
    let first = tokio::spawn(get(a.client(), "/page"));
    arrived.notified().await;
    let second = tokio::spawn(get(b.client(), "/private/x"));
    // B must be waiting for A's copy when A stores it.
    until_metric(&b, "mannerly_state_redis_robots_asleep", 1.0).await;
    gate.notify_one();
    assert_eq!(first.await.expect("A's request").status(), 200);
    let refused = second.await.expect("B's request");
    // B obeyed the copy A fetched: its rules, and no fetch of its own.
    assert_eq!(refused.status(), 403, "{}", decision(&refused));
    assert_eq!(origin.seen.count("/robots.txt"), 1);
    assert_eq!(metric(&b, woken).await, 1.0, "B was woken by A's message");
    b.stop().await;
}

/// An operator's reset of a paused host on one proxy ends the pause early:
/// the request another proxy holds until the pause's end is woken by the
/// reset's message and asks again at once (one timer otherwise: it sleeps
/// to the end it was told).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_on_one_proxy_wakes_the_request_another_holds_for_the_pause() {
    let Some(redis) =
        RedisServer::start("a_reset_on_one_proxy_wakes_the_request_another_holds_for_the_pause")
    else {
        return;
    };
    let throttled = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let t = throttled.clone();
    let origin = Origin::http(handler(move |req| {
        let t = t.clone();
        async move {
            match req.uri().path() {
                "/robots.txt" => text(404, "none\n"),
                "/limit" if !t.swap(true, std::sync::atomic::Ordering::SeqCst) => {
                    let mut r = text(429, "slow down\n");
                    r.headers_mut()
                        .insert("retry-after", "40".parse().expect("header"));
                    r
                }
                _ => text(200, "ok\n"),
            }
        }
    }))
    .await;
    let url = redis.url();
    let base = sharing(&url, "resetwake:");
    let shared = |cfg: &mut mannerly_proxy::Config| {
        base(cfg);
        // The pause is held, not answered with a 429.
        cfg.budget.max_hold_secs = 120.0;
    };
    let a = TestProxy::start(shared).await;
    let mut b = TestProxy::start(shared).await;
    until_heard(&b).await;
    let woken = "mannerly_state_redis_woken_by_reset_total";
    assert_eq!(metric(&b, woken).await, 0.0);
    let port = origin.port();
    let get = move |c: reqwest::Client, path: &'static str| send(c, port, path);
    // B has seen the host, so the pause A learns reaches its copy.
    assert_eq!(get(b.client(), "/warm").await.status(), 200);

    // A draws the 429: a 40 s pause for the whole cluster; its own request
    // is held for the retry.
    let held_a = tokio::spawn(get(a.client(), "/limit"));
    for _ in 0..200 {
        if throttled.load(std::sync::atomic::Ordering::SeqCst) {
            break;
        }
        // A poll interval: the origin's flag is what is waited on.
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(throttled.load(std::sync::atomic::Ordering::SeqCst));
    let held_b = tokio::spawn(get(b.client(), "/after"));
    // B must be asleep in the pause when the reset comes.
    until_metric(&b, "mannerly_requests_asleep", 1.0).await;
    let r = crate::e2e::admin::admin_client()
        .post(format!(
            "http://{}/hosts/127.0.0.1/reset",
            a.admin.expect("admin listener")
        ))
        .send()
        .await
        .expect("reset");
    assert_eq!(r.status(), 200);
    assert_eq!(held_b.await.expect("B's request").status(), 200);
    assert_eq!(metric(&b, woken).await, 1.0, "B was woken by A's reset");
    assert_eq!(held_a.await.expect("A's request").status(), 200);
    b.stop().await;
}

/// A config sharing the Redis at `url` under `prefix`, with an admin
/// listener for the counters.
pub(super) fn sharing<'a>(
    url: &'a str,
    prefix: &'a str,
) -> impl Fn(&mut mannerly_proxy::Config) + 'a {
    move |cfg| {
        cfg.state.backend = StateBackend::Redis;
        cfg.state.redis_url = url.to_string();
        cfg.state.key_prefix = prefix.to_string();
        // A loaded test machine must not look like an unreachable Redis.
        cfg.state.command_timeout_ms = 1000.0;
        cfg.admin.listen = "127.0.0.1:0".into();
    }
}

/// The counter or gauge `name` of `proxy`.
pub(super) async fn metric(proxy: &TestProxy, name: &str) -> f64 {
    let admin = format!("http://{}", proxy.admin.expect("admin listener"));
    crate::e2e::admin::series(&crate::e2e::admin::metrics_text(&admin).await)[name]
}

/// Waits until `proxy` hears the hosts' channels.
async fn until_heard(proxy: &TestProxy) {
    until_metric(proxy, "mannerly_state_redis_wakes_live", 1.0).await;
}

/// Waits until `proxy`'s gauge `name` reads `value`; bounded, so that what
/// never comes fails, not hangs.
async fn until_metric(proxy: &TestProxy, name: &str, value: f64) {
    for _ in 0..400 {
        if metric(proxy, name).await == value {
            return;
        }
        // A poll interval: the gauge is what is waited on.
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(metric(proxy, name).await, value, "{name}");
}

/// An origin whose `path` answers `body` only when the test opens the
/// gate (told when a request for it arrived); robots.txt is a 404 unless
/// it is `path`, every other path a 200.
async fn gated(path: &'static str, body: &'static str) -> (Origin, Arc<Notify>, Arc<Notify>) {
    let (arrived, gate) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let (a2, g2) = (arrived.clone(), gate.clone());
    let origin = Origin::http(handler(move |req| {
        let (arrived, gate) = (a2.clone(), g2.clone());
        async move {
            match req.uri().path() {
                p if p == path => {
                    arrived.notify_one();
                    gate.notified().await;
                    text(200, body)
                }
                "/robots.txt" => text(404, "none\n"),
                _ => text(200, "ok\n"),
            }
        }
    }))
    .await;
    (origin, arrived, gate)
}

/// A GET of `path` on the loopback origin at `port`; no request may fail.
async fn send(c: reqwest::Client, port: u16, path: &'static str) -> reqwest::Response {
    c.get(format!("http://127.0.0.1:{port}{path}"))
        .send()
        .await
        .expect("no request fails")
}
