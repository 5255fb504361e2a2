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
    let (arrived, gate) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let (a2, g2) = (arrived.clone(), gate.clone());
    let origin = Origin::http(handler(move |req| {
        let (arrived, gate) = (a2.clone(), g2.clone());
        async move {
            match req.uri().path() {
                "/robots.txt" => text(404, "none\n"),
                "/held" => {
                    arrived.notify_one();
                    gate.notified().await;
                    text(200, "held\n")
                }
                _ => text(200, "ok\n"),
            }
        }
    }))
    .await;
    let shared = |cfg: &mut mannerly_proxy::Config| {
        cfg.state.backend = StateBackend::Redis;
        cfg.state.redis_url = url.clone();
        cfg.state.key_prefix = String::from("wake:");
        // A loaded test machine must not look like an unreachable Redis.
        cfg.state.command_timeout_ms = 1000.0;
        cfg.budget.start_rate = 50.0;
        cfg.budget.max_rate = 50.0;
        cfg.budget.burst = 5;
        cfg.budget.concurrency = 1;
        cfg.admin.listen = "127.0.0.1:0".into();
    };
    let a = TestProxy::start(shared).await;
    let b = TestProxy::start(shared).await;
    let admin_b = format!("http://{}", b.admin.expect("admin listener"));
    let metric = |name: &'static str| {
        let admin = admin_b.clone();
        async move {
            let m = crate::e2e::admin::series(&crate::e2e::admin::metrics_text(&admin).await);
            m[name]
        }
    };
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
    // Bounded so that a subscriber that never comes up fails, not hangs.
    for _ in 0..200 {
        if metric("mannerly_state_redis_wakes_live").await == 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(metric("mannerly_state_redis_wakes_live").await, 1.0);
    assert_eq!(
        metric("mannerly_state_redis_woken_by_message_total").await,
        0.0
    );

    let held = tokio::spawn(get(a.client(), "/held"));
    arrived.notified().await;
    let waiting = tokio::spawn(get(b.client(), "/after"));
    // B must be waiting for the slot when A gives it back. Its first look
    // comes well within this; should it not, the count below stays 0 and
    // the test fails rather than passes by chance.
    tokio::time::sleep(Duration::from_millis(500)).await;
    gate.notify_one();
    held.await.expect("A's request");
    waiting.await.expect("B's request");
    assert!(
        metric("mannerly_state_redis_woken_by_message_total").await >= 1.0,
        "B's waiter was woken by A's release message"
    );
}
