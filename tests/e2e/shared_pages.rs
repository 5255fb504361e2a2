//! Three replicas behind round-robin sharing one page store through Redis:
//! a page one of them stored is revalidated by whichever gets the re-crawl.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mannerly_proxy::StateBackend;

use super::redis_server::RedisServer;
use super::support::*;

const REPLICAS: usize = 3;
const PAGES: usize = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_one_replica_stored_is_revalidated_by_any() {
    let Some(redis) = RedisServer::start("a_page_one_replica_stored_is_revalidated_by_any") else {
        return;
    };
    let not_modified = Arc::new(AtomicUsize::new(0));
    let full = Arc::new(AtomicUsize::new(0));
    let (nm, fu) = (not_modified.clone(), full.clone());
    let origin = Origin::http(handler(move |req| {
        let (nm, fu) = (nm.clone(), fu.clone());
        async move {
            let path = req.uri().path().to_string();
            if path == "/robots.txt" {
                return text(404, "");
            }
            let etag = format!("\"{}\"", path.len() * 7 + path.matches('1').count());
            let matches = req
                .headers()
                .get("if-none-match")
                .is_some_and(|v| v.to_str().ok() == Some(etag.as_str()));
            let mut r = if matches {
                nm.fetch_add(1, Ordering::SeqCst);
                text(304, "")
            } else {
                fu.fetch_add(1, Ordering::SeqCst);
                text(200, format!("the page at {path}\n"))
            };
            r.headers_mut().insert("etag", etag.parse().unwrap());
            r.headers_mut()
                .insert("cache-control", "max-age=0".parse().unwrap());
            r
        }
    }))
    .await;
    let url = redis.url();
    let mut replicas = Vec::new();
    for _ in 0..REPLICAS {
        replicas.push(
            TestProxy::start(|cfg| {
                cfg.state.backend = StateBackend::Redis;
                cfg.state.redis_url = url.clone();
                cfg.state.key_prefix = String::from("pages:");
                cfg.state.share_pages = true;
                // A loaded test machine must not look like an unreachable Redis.
                cfg.state.command_timeout_ms = 1000.0;
            })
            .await,
        );
    }
    let clients: Vec<reqwest::Client> = replicas.iter().map(TestProxy::client).collect();
    let port = origin.port();
    // Round-robin, shifted by `shift`: page i goes to replica (i + shift) % 3.
    let crawl = |shift: usize| {
        let clients = clients.clone();
        async move {
            let mut tasks = Vec::new();
            for i in 0..PAGES {
                let c = clients[(i + shift) % REPLICAS].clone();
                tasks.push(tokio::spawn(async move {
                    let r = c
                        .get(format!("http://127.0.0.1:{port}/page/{i}"))
                        .send()
                        .await
                        .expect("answered");
                    assert_eq!(r.status(), 200);
                    r.text().await.expect("a body")
                }));
                if tasks.len() == 30 {
                    for t in tasks.drain(..) {
                        t.await.expect("a page");
                    }
                }
            }
            let mut bodies = Vec::new();
            for t in tasks {
                bodies.push(t.await.expect("a page"));
            }
            bodies
        }
    };
    crawl(0).await;
    assert_eq!(full.load(Ordering::SeqCst), PAGES);
    // Each page was stored by the one replica that fetched it; its copy
    // reaches Redis once the body has gone to the client.
    let mut shared = 0;
    for _ in 0..200 {
        shared = redis
            .cli(&["EVAL", "return #redis.call('KEYS', 'pages:p:*')", "0"])
            .trim()
            .parse::<usize>()
            .unwrap_or(0);
        if shared == PAGES {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(shared, PAGES, "every stored page is in the shared store");

    // The re-crawl: every page goes to a replica that did not fetch it.
    crawl(1).await;
    let revalidated = not_modified.load(Ordering::SeqCst);
    let refetched = full.load(Ordering::SeqCst) - PAGES;
    eprintln!("re-crawl: {revalidated}/{PAGES} answered 304, {refetched} fetched whole");

    // Redis gone: each replica answers from its own store alone, and a
    // page it never held is fetched whole; nothing fails.
    let mut redis = redis;
    redis.kill();
    let before = (
        not_modified.load(Ordering::SeqCst),
        full.load(Ordering::SeqCst),
    );
    for (c, page) in [(&clients[1], 0), (&clients[2], 3)] {
        let r = c
            .get(format!("http://127.0.0.1:{port}/page/{page}"))
            .send()
            .await
            .expect("answered");
        assert_eq!(r.status(), 200, "{}", decision(&r));
        assert_eq!(
            r.text().await.unwrap(),
            format!("the page at /page/{page}\n")
        );
    }
    // Page 0 went to replicas 0 and 1 (it is in 1's store): 304; page 3
    // went to 0 and 1 only, so replica 2 fetches it whole.
    assert_eq!(
        (
            not_modified.load(Ordering::SeqCst) - before.0,
            full.load(Ordering::SeqCst) - before.1
        ),
        (1, 1)
    );
    for mut r in replicas {
        let lines = r.stop().await;
        assert!(lines.iter().all(|l| l["outcome"] != "error"));
    }
    assert!(
        revalidated * 100 >= PAGES * 95,
        "{revalidated} of {PAGES} re-crawled pages answered 304 ({refetched} fetched whole)"
    );
}
