//! Broad crawls: many host names, one page each. Wildcard name overrides,
//! a new host's first page one interval behind its robots.txt fetch, a global
//! cap on idle upstream connections, and running out of file descriptors
//! without falling over.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::support::*;

/// An origin that counts the connections open to it right now; every
/// path answers 200 "page <host>", robots.txt 404 with a short body.
async fn counting_origin(close: bool) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let live = Arc::new(AtomicUsize::new(0));
    let live2 = live.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let live = live2.clone();
            live.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let svc = service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| async move {
                        let host = req
                            .headers()
                            .get("host")
                            .and_then(|h| h.to_str().ok())
                            .unwrap_or("")
                            .to_string();
                        let (status, body) = if req.uri().path() == "/robots.txt" {
                            (404, "none".to_string())
                        } else {
                            (200, format!("page {host}"))
                        };
                        let mut r = hyper::Response::new(Full::new(Bytes::from(body)));
                        *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
                        if close {
                            r.headers_mut().insert(
                                "connection",
                                hyper::header::HeaderValue::from_static("close"),
                            );
                        }
                        Ok::<_, Infallible>(r)
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
                live.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    (addr, live)
}

#[tokio::test]
async fn many_names_share_one_origin_and_idle_connections_stay_under_the_total_cap() {
    let (origin, live) = counting_origin(false).await;
    let mut p = TestProxy::start(|c| {
        c.upstream.resolve = BTreeMap::from([(format!("*.test:{}", origin.port()), origin)]);
        c.upstream.pool_max_idle_total = 4;
        // The default budget: one request per second to start, burst 1.
        c.budget = Default::default();
    })
    .await;
    let client = p.client();
    let mut pages = Vec::new();
    for i in 0..20 {
        let url = format!("http://h{i}.test:{}/page", origin.port());
        pages.push(client.get(&url).send());
    }
    for (i, resp) in futures_join(pages).await.into_iter().enumerate() {
        let resp = resp.unwrap();
        assert_eq!(resp.status(), 200);
        // Each new host's page went on the slot its robots.txt fetch lent
        // it: no wait.
        assert_eq!(decision(&resp), "fetched; waited_ms=0", "host {i}");
        let body = resp.text().await.unwrap();
        assert_eq!(body, format!("page h{i}.test:{}", origin.port()));
    }
    // Every page has been passed on; the idle connections left are capped.
    let mut open = live.load(Ordering::SeqCst);
    for _ in 0..100 {
        if open <= 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        open = live.load(Ordering::SeqCst);
    }
    assert!(open <= 4, "{open} connections open to the origin, cap 4");
    let lines = p.stop().await;
    assert_eq!(with_outcome(&lines, "robots_fetched").len(), 20);
    assert_eq!(with_outcome(&lines, "fetched").len(), 20);
}

/// The same cap over TLS: the first reads of an upstream connection are
/// its handshake's, in the task that connects, and the close of an idle
/// one must wake hyper's connection task, which reads after them.
#[tokio::test]
async fn idle_tls_connections_stay_under_the_total_cap_too() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let page = handler(|req| async move {
        match req.uri().path() {
            "/robots.txt" => text(404, "none"),
            _ => text(200, "page"),
        }
    });
    let origin = Origin::https(page, &ca, &["*.tls.test"]).await;
    let mut p = crawl_twelve_tls_hosts(&ca, origin.port()).await;
    let seen = origin.seen.clone();
    until("at most 4 TLS connections open to the origin", || {
        let open = seen.live.load(Ordering::SeqCst);
        async move { open <= 4 }
    })
    .await;
    assert!(origin.seen.connections.load(Ordering::SeqCst) >= 12);
    let lines = p.stop().await;
    assert_eq!(with_outcome(&lines, "fetched").len(), 12);
}

/// The cap against nginx over TLS and h2, the origin users meet: the
/// connections counted are the ones the kernel shows established to
/// nginx's port, not an origin of ours counting itself.
#[tokio::test]
async fn idle_tls_connections_to_nginx_stay_under_the_total_cap() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let site = r#"location = /robots.txt { return 404; }
    location / { return 200 "page"; }"#;
    let Some(nginx) = Nginx::start_tls(&ca, "*.tls.test", site) else {
        return;
    };
    let port = nginx.port;
    let mut p = crawl_twelve_tls_hosts(&ca, port).await;
    until("at most 4 connections established to nginx", || {
        let open = established_to(port);
        async move { open <= 4 }
    })
    .await;
    let lines = p.stop().await;
    assert_eq!(with_outcome(&lines, "fetched").len(), 12);
}

/// A proxy trusting `ca`, with `*.tls.test:443` at `port` and at most 4
/// idle upstream connections, after one page "page" from each of twelve
/// hosts through interception.
async fn crawl_twelve_tls_hosts(ca: &TestCa, port: u16) -> TestProxy {
    let roots = ca.pem_path.clone();
    let p = TestProxy::start(move |c| {
        c.upstream.extra_roots = vec![roots];
        resolve_to_loopback(c, "*.tls.test:443", port);
        c.upstream.pool_max_idle_total = 4;
        // Only the cap closes a connection within the wait after, not the
        // pool's idle timeout.
        c.upstream.pool_idle = Duration::from_secs(600);
        c.budget = Default::default();
    })
    .await;
    let client = p.client();
    let pages = (0..12).map(|i| client.get(format!("https://h{i}.tls.test/page")).send());
    for (i, resp) in futures_join(pages.collect()).await.into_iter().enumerate() {
        let resp = resp.unwrap();
        assert_eq!(resp.status(), 200, "host {i}");
        assert_eq!(resp.text().await.unwrap(), "page", "host {i}");
    }
    p
}

/// TCP connections established to 127.0.0.1:`port`, as the kernel counts
/// them (the server's end of each).
fn established_to(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let local = format!("0100007F:{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[1] == local && f[3] == "01"
        })
        .count()
}

async fn futures_join<F: std::future::Future>(fs: Vec<F>) -> Vec<F::Output> {
    let handles: Vec<_> = fs.into_iter().map(Box::pin).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await);
    }
    out
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[tokio::test]
async fn out_of_descriptors_upstream_gets_503_and_service_resumes() {
    if std::process::Command::new("prlimit")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(std::env::var_os("CI").is_none(), "prlimit is needed in CI");
        eprintln!("SKIP: prlimit (util-linux) not installed");
        return;
    }
    // The origin closes every connection, so each page needs a new one.
    let (origin, _) = counting_origin(true).await;
    let dir = tempfile::tempdir().unwrap();
    let mut proxy = RunningBinary::start(
        dir.path(),
        &[("MANNERLY_PROXY__HEADER_READ_TIMEOUT_SECS", "120")],
    );
    let pid = proxy.child.id();
    let url = format!("http://127.0.0.1:{}/page", origin.port());
    let paddr = proxy.addr.clone();
    let first = tokio::task::spawn_blocking(move || {
        let mut c = std::net::TcpStream::connect(&paddr).unwrap();
        let answer = raw_get(&mut c, &url).to_lowercase();
        (c, answer)
    })
    .await
    .unwrap();
    let (held_first, answer) = first;
    assert!(answer.starts_with("http/1.1 200"), "{answer}");
    // Leave the proxy three descriptors, then take them with idle clients.
    let limit = open_fds(pid) + 3;
    let set = std::process::Command::new("prlimit")
        .args([
            "--pid",
            &pid.to_string(),
            &format!("--nofile={limit}:{limit}"),
        ])
        .status()
        .unwrap();
    assert!(set.success());
    let paddr = proxy.addr.clone();
    let url = format!("http://127.0.0.1:{}/page", origin.port());
    let (mut c, held) = tokio::task::spawn_blocking(move || {
        let c = std::net::TcpStream::connect(&paddr).unwrap();
        let held: Vec<_> = (0..20)
            .map(|_| std::net::TcpStream::connect(&paddr).unwrap())
            .collect();
        (c, held)
    })
    .await
    .unwrap();
    // Once the proxy has accepted clients up to its limit, `c`'s request
    // needs one descriptor more, for the origin.
    until("the proxy's descriptors all taken", || {
        let open = open_fds(pid);
        async move { open >= limit }
    })
    .await;
    let (c, answer) = tokio::task::spawn_blocking(move || {
        let answer = raw_get(&mut c, &url).to_lowercase();
        (c, answer)
    })
    .await
    .unwrap();
    let mut held: Vec<_> = std::iter::once(c).chain(held).collect();
    assert!(answer.starts_with("http/1.1 503"), "{answer}");
    assert!(answer.contains("retry-after: 1"), "{answer}");
    assert!(answer.contains("mannerly-decision: error"), "{answer}");
    // Descriptors free up: the proxy accepts and forwards again.
    held.clear();
    drop(held_first);
    let paddr = proxy.addr.clone();
    let url = format!("http://127.0.0.1:{}/page", origin.port());
    let resumed = tokio::task::spawn_blocking(move || {
        for _ in 0..100 {
            // A poll interval: a 200 through the proxy is what is waited on.
            std::thread::sleep(Duration::from_millis(50));
            let Ok(mut c) = std::net::TcpStream::connect(&paddr) else {
                continue;
            };
            let answer = raw_get(&mut c, &url).to_lowercase();
            if answer.starts_with("http/1.1 200") {
                return answer;
            }
        }
        String::new()
    })
    .await
    .unwrap();
    assert!(
        resumed.starts_with("http/1.1 200"),
        "service did not resume"
    );
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let status = proxy.child.wait().unwrap();
    assert!(status.success(), "the proxy exited with {status}");
    let lines = audit_lines(&dir.path().join("audit.jsonl"));
    let busy: Vec<_> = lines
        .iter()
        .filter(|l| l["status"] == 503 && l["source"] == "proxy")
        .collect();
    assert!(
        !busy.is_empty(),
        "no 503 with source proxy in the audit log"
    );
    assert!(busy[0]["reason"]
        .as_str()
        .unwrap()
        .contains("out of file descriptors"));
}

#[tokio::test]
async fn budgets_past_max_hosts_go_least_recently_used_first() {
    const HOSTS: usize = 40;
    const MAX: usize = 8;
    let (origin, _) = counting_origin(false).await;
    let mut p = TestProxy::start(|c| {
        c.upstream.resolve = BTreeMap::from([(format!("*.test:{}", origin.port()), origin)]);
        c.admin.listen = "127.0.0.1:0".into();
        c.budget.group_by = mannerly_policy::site::GroupBy::Host;
        c.budget.max_hosts = MAX;
        // A millisecond's spacing: a host is idle (nothing reserved ahead)
        // by the time the next host's request comes, so it may go.
        c.budget.start_rate = 1000.0;
        c.budget.max_rate = 1000.0;
    })
    .await;
    let client = p.client();
    for i in 0..HOSTS {
        let url = format!("http://h{i}.test:{}/page", origin.port());
        let resp = client.get(&url).send().await.unwrap();
        assert_eq!(resp.status(), 200, "host {i}");
    }
    let admin = format!("http://{}", p.admin.unwrap());
    let m = super::admin::series(&super::admin::metrics_text(&admin).await);
    let tracked = m["mannerly_hosts_tracked"];
    // Past 8, a pass frees an eighth of the bound: 7 or 8 are left.
    assert!(
        (MAX - MAX / 8..=MAX).contains(&(tracked as usize)),
        "{tracked} budgets held, bound {MAX}"
    );
    let idle = m["mannerly_budget_evicted_total{held=\"idle\"}"];
    assert_eq!(idle + tracked, HOSTS as f64, "every host held or dropped");
    assert_eq!(m["mannerly_budget_evicted_total{held=\"learned\"}"], 0.0);
    // The hosts kept are the ones crawled last.
    let (_, hosts) = super::admin::get_json(&format!("{admin}/hosts")).await;
    let names: Vec<String> = hosts["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["host"].as_str().unwrap().to_owned())
        .collect();
    for i in HOSTS - (MAX - MAX / 8)..HOSTS {
        assert!(names.contains(&format!("h{i}.test")), "h{i} in {names:?}");
    }
    let lines = p.stop().await;
    assert_eq!(with_outcome(&lines, "fetched").len(), HOSTS);
}
