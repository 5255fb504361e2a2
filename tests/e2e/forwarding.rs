//! The forwarding path: HTTP and intercepted HTTPS, streaming, reuse,
//! refusals of internal targets and of bad input.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::support::*;

fn echo() -> Handler {
    handler(|req| async move {
        let method = req.method().to_string();
        let path = req.uri().path().to_string();
        match path.as_str() {
            "/robots.txt" => text(404, "none"),
            "/chunked" => {
                let chunks: Vec<Result<Frame<Bytes>, Box<dyn std::error::Error + Send + Sync>>> =
                    (0..5)
                        .map(|i| Ok(Frame::data(Bytes::from(format!("chunk{i};")))))
                        .collect();
                let body = StreamBody::new(futures_stream(chunks));
                Response::new(body.boxed())
            }
            "/hop" => {
                let mut r = text(200, "hop");
                r.headers_mut()
                    .insert("connection", "X-Resp-Secret".parse().unwrap());
                r.headers_mut()
                    .insert("x-resp-secret", "1".parse().unwrap());
                r
            }
            _ => {
                let body = req.into_body().collect().await.unwrap().to_bytes();
                let mut r = text(
                    200,
                    format!("{method} {path} {}", String::from_utf8_lossy(&body)),
                );
                r.headers_mut().insert("x-origin", "yes".parse().unwrap());
                r
            }
        }
    })
}

type Frames = Vec<Result<Frame<Bytes>, Box<dyn std::error::Error + Send + Sync>>>;

fn futures_stream(
    frames: Frames,
) -> impl futures_core::Stream<Item = Result<Frame<Bytes>, Box<dyn std::error::Error + Send + Sync>>>
       + Send
       + Sync {
    tokio_stream::iter(frames)
}

use hyper::Response;

#[tokio::test]
async fn get_head_post_and_chunked_over_http() {
    let origin = Origin::http(echo()).await;
    let mut proxy = TestProxy::start(|_| {}).await;
    let c = proxy.client();
    let base = format!("http://127.0.0.1:{}", origin.port());

    let r = c.get(format!("{base}/page?q=1")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(decision(&r), "fetched; waited_ms=0");
    assert_eq!(r.headers()["x-origin"], "yes");
    assert_eq!(r.text().await.unwrap(), "GET /page ");

    let r = c.head(format!("{base}/page")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-length"], "11");
    assert_eq!(r.bytes().await.unwrap().len(), 0);

    let r = c
        .post(format!("{base}/form"))
        .body("a=1&b=2")
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "POST /form a=1&b=2");

    let r = c.get(format!("{base}/chunked")).send().await.unwrap();
    assert!(r.headers().get("content-length").is_none());
    assert_eq!(
        r.text().await.unwrap(),
        "chunk0;chunk1;chunk2;chunk3;chunk4;"
    );

    let lines = proxy.stop().await;
    let fetched = with_outcome(&lines, "fetched");
    assert_eq!(fetched.len(), 4, "{lines:#?}");
    assert_eq!(fetched[3]["bytes"], 35);
    assert_eq!(with_outcome(&lines, "robots_fetched").len(), 1);
}

#[tokio::test]
async fn https_is_intercepted_and_reaches_an_h2_origin() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let origin = Origin::https(echo(), &ca, &["secure.test"]).await;
    let port = origin.port();
    let roots = ca.pem_path.clone();
    let mut proxy = TestProxy::start(move |c| {
        c.upstream.extra_roots = vec![roots];
        resolve_to_loopback(c, "secure.test:443", port);
    })
    .await;
    let c = proxy.client();
    for _ in 0..3 {
        let r = c.get("https://secure.test/over-tls").send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(decision(&r), "fetched; waited_ms=0");
        assert_eq!(r.text().await.unwrap(), "GET /over-tls ");
    }
    let seen = origin.seen.all();
    let page: Vec<_> = seen.iter().filter(|r| r.path == "/over-tls").collect();
    assert_eq!(page.len(), 3);
    assert!(
        page.iter().all(|r| r.version == hyper::Version::HTTP_2),
        "{seen:?}"
    );
    assert_eq!(
        origin
            .seen
            .connections
            .load(std::sync::atomic::Ordering::SeqCst),
        1
    );
    let lines = proxy.stop().await;
    let fetched = with_outcome(&lines, "fetched");
    assert_eq!(fetched.len(), 3);
    assert_eq!(fetched[0]["url"], "https://secure.test/over-tls");
}

#[tokio::test]
async fn fifty_mib_body_is_streamed_not_buffered() {
    const CHUNK: usize = 1 << 20;
    const CHUNKS: usize = 50;
    let (first_seen_tx, first_seen_rx) = tokio::sync::watch::channel(false);
    let first_seen_rx = std::sync::Arc::new(first_seen_rx);
    let h = handler(move |req| {
        let mut gate = (*first_seen_rx).clone();
        async move {
            if req.uri().path() == "/robots.txt" {
                return text(404, "");
            }
            let (tx, rx) = tokio::sync::mpsc::channel::<
                Result<Frame<Bytes>, Box<dyn std::error::Error + Send + Sync>>,
            >(2);
            tokio::spawn(async move {
                let chunk = Bytes::from(vec![b'x'; CHUNK]);
                tx.send(Ok(Frame::data(chunk.clone()))).await.unwrap();
                // The rest is sent only once the client holds the first
                // megabyte: a proxy that buffered whole bodies would hang here.
                gate.wait_for(|seen| *seen).await.unwrap();
                for _ in 1..CHUNKS {
                    if tx.send(Ok(Frame::data(chunk.clone()))).await.is_err() {
                        return;
                    }
                }
            });
            let body = StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx));
            Response::new(body.boxed())
        }
    });
    let origin = Origin::http(h).await;
    let mut proxy = TestProxy::start(|_| {}).await;
    let mut r = proxy
        .client()
        .get(format!("http://127.0.0.1:{}/big", origin.port()))
        .send()
        .await
        .unwrap();
    let mut total = 0usize;
    let read = async {
        while let Some(chunk) = r.chunk().await.unwrap() {
            total += chunk.len();
            if total >= CHUNK {
                let _ = first_seen_tx.send(true);
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .expect("body did not stream: the first megabyte never arrived alone");
    assert_eq!(total, CHUNK * CHUNKS);
    let lines = proxy.stop().await;
    assert_eq!(
        with_outcome(&lines, "fetched")[0]["bytes"],
        (CHUNK * CHUNKS) as u64
    );
}

#[tokio::test]
async fn keep_alive_connections_are_reused_both_sides() {
    let origin = Origin::http(echo()).await;
    let mut proxy = TestProxy::start(|_| {}).await;
    let c = proxy.client();
    for i in 0..10 {
        get_ok(&c, &format!("http://127.0.0.1:{}/k{i}", origin.port())).await;
    }
    assert_eq!(
        origin
            .seen
            .connections
            .load(std::sync::atomic::Ordering::SeqCst),
        1
    );
    let lines = proxy.stop().await;
    let fetched = with_outcome(&lines, "fetched");
    assert_eq!(fetched.len(), 10);
    let clients: std::collections::BTreeSet<_> =
        fetched.iter().map(|l| l["client"].to_string()).collect();
    assert_eq!(
        clients.len(),
        1,
        "one client connection carried all requests"
    );
}

/// The Host a real name-based server routes by: curl through the proxy to
/// nginx serving `origin.test` beside a default server that answers 421.
/// With curl's own Host and with a foreign one, nginx sees exactly one Host,
/// the target's, and serves the page.
#[tokio::test]
async fn nginx_routing_by_name_gets_the_targets_host_whatever_curl_sent() {
    if !have_tool("curl", "curl") {
        return;
    }
    let Some(nginx) = Nginx::start_http(
        "origin.test",
        "location = /h { default_type text/plain; return 200 \"right host\"; }",
    ) else {
        return;
    };
    let port = nginx.port;
    let mut proxy = TestProxy::start(move |c| {
        resolve_to_loopback(c, &format!("origin.test:{port}"), port);
    })
    .await;
    let curl = |via: Option<&str>, host: Option<&str>| {
        let mut cmd = std::process::Command::new("curl");
        cmd.args(["-sS", "--noproxy", "", "-w", " %{http_code}"]);
        match via {
            Some(p) => cmd
                .args(["-x", p])
                .arg(format!("http://origin.test:{port}/h")),
            None => cmd.arg(format!("http://127.0.0.1:{port}/h")),
        };
        if let Some(h) = host {
            cmd.args(["-H", &format!("Host: {h}")]);
        }
        tool_stdout(cmd)
    };
    // The set-up tells hosts apart: straight to nginx, a foreign Host is 421.
    assert_eq!(curl(None, Some("evil.test")).await, "not this host 421");
    let via = proxy.url();
    assert_eq!(curl(Some(&via), None).await, "right host 200");
    assert_eq!(curl(Some(&via), Some("evil.test")).await, "right host 200");
    let want = format!("GET /h HTTP/1.1 200 host=[origin.test:{port}]");
    let log = nginx.access_log_with(&want, 2);
    assert_eq!(log.matches(&want).count(), 2, "{log}");
    proxy.stop().await;
}

/// The origin connections the pool keeps, as nginx counts them: six pages
/// asked one after another by six curl runs (six client connections) reach
/// nginx over one kept connection; with `pool_max_idle_per_host = 0` over
/// six.
#[tokio::test]
async fn nginx_gets_a_crawl_over_one_kept_connection_and_over_one_each_with_none_kept() {
    if !have_tool("curl", "curl") {
        return;
    }
    for (kept, connections) in [(32, 1), (0, 6)] {
        let Some(nginx) = Nginx::start_http(
            "origin.test",
            "location /p { default_type text/plain; return 200 \"page\"; }",
        ) else {
            return;
        };
        let port = nginx.port;
        let mut proxy = TestProxy::start(move |c| {
            resolve_to_loopback(c, &format!("origin.test:{port}"), port);
            c.proxy.threads = 1;
            c.upstream.pool_max_idle_per_host = kept;
            // The pages go as fast as curl asks: the budget is not tested.
            c.policy.enforce = false;
        })
        .await;
        for i in 0..6 {
            let page = format!("http://origin.test:{port}/p{i}");
            assert_eq!(curl_page(&proxy, &page, None).await, "page 200");
        }
        let log = nginx.access_log_with("GET /p", 6);
        let pages = page_lines(&log);
        assert_eq!(pages.len(), 6, "{log}");
        assert_eq!(connections_of(&pages), connections, "kept {kept}: {log}");
        proxy.stop().await;
    }
}

/// An https origin that speaks HTTP/1.1 only (nginx without h2): the pool
/// writes the Host the request needs there, the target's, once, and keeps
/// the connection for the next page.
#[tokio::test]
async fn an_https_origin_over_http1_gets_the_targets_host_and_a_kept_connection() {
    if !have_tool("curl", "curl") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let site = "location /p { default_type text/plain; return 200 \"page\"; }";
    let Some(nginx) = Nginx::start_tls_http1(&ca, "origin.test", site) else {
        return;
    };
    let port = nginx.port;
    let roots = ca.pem_path.clone();
    let mut proxy = TestProxy::start(move |c| {
        super::realweb::to_origin_test(c, roots, port);
        c.proxy.threads = 1;
        c.policy.enforce = false;
    })
    .await;
    let ca_file = proxy.dir.path().join("ca.pem");
    for i in 0..2 {
        let page = format!("https://origin.test:{port}/p{i}");
        assert_eq!(curl_page(&proxy, &page, Some(&ca_file)).await, "page 200");
    }
    let log = nginx.access_log_with("GET /p", 2);
    let pages = page_lines(&log);
    let want = format!("HTTP/1.1 200 host=[origin.test:{port}] conn=");
    assert_eq!(pages.len(), 2, "{log}");
    assert!(pages.iter().all(|l| l.contains(&want)), "{log}");
    assert_eq!(connections_of(&pages), 1, "{log}");
    proxy.stop().await;
}

/// curl's body and status for `url` through `proxy` (trusting its CA at
/// `ca_file` for https).
async fn curl_page(proxy: &TestProxy, url: &str, ca_file: Option<&std::path::Path>) -> String {
    let mut curl = std::process::Command::new("curl");
    curl.args([
        "-sS",
        "--noproxy",
        "",
        "-x",
        &proxy.url(),
        "-w",
        " %{http_code}",
    ]);
    if let Some(ca) = ca_file {
        curl.arg("--cacert").arg(ca);
    }
    curl.arg(url);
    tool_stdout(curl).await
}

/// nginx's access-log lines of the pages under `/p`.
fn page_lines(log: &str) -> Vec<&str> {
    log.lines().filter(|l| l.starts_with("GET /p")).collect()
}

/// How many connections (nginx's `$connection`) carried `lines`.
fn connections_of(lines: &[&str]) -> usize {
    let conns: std::collections::BTreeSet<_> = lines
        .iter()
        .filter_map(|l| l.split(" conn=").nth(1))
        .collect();
    conns.len()
}

#[tokio::test]
async fn hop_by_hop_headers_are_stripped_and_host_is_the_target() {
    let origin = Origin::http(echo()).await;
    let port = origin.port();
    let mut proxy = TestProxy::start(move |c| {
        resolve_to_loopback(c, &format!("origin.test:{port}"), port);
    })
    .await;
    let r = proxy
        .client()
        .get(format!("http://origin.test:{port}/h"))
        .header("connection", "X-Secret")
        .header("x-secret", "1")
        .header("x-kept", "1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let seen = origin.seen.all();
    let req = seen.iter().find(|r| r.path == "/h").unwrap();
    assert!(req.headers.get("x-secret").is_none());
    assert!(req.headers.get("proxy-authorization").is_none());
    assert_eq!(req.headers["x-kept"], "1");
    assert_eq!(req.headers["host"], format!("origin.test:{port}").as_str());

    let r = proxy
        .client()
        .get(format!("http://origin.test:{port}/hop"))
        .send()
        .await
        .unwrap();
    assert!(r.headers().get("x-resp-secret").is_none());
    assert_eq!(r.text().await.unwrap(), "hop");
    proxy.stop().await;
}

#[tokio::test]
async fn curl_through_the_proxy_http_and_https() {
    if !have_tool("curl", "curl") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let origin = Origin::https(echo(), &ca, &["secure.test"]).await;
    let plain = Origin::http(echo()).await;
    let port = origin.port();
    let roots = ca.pem_path.clone();
    let mut proxy = TestProxy::start(move |c| {
        c.upstream.extra_roots = vec![roots];
        resolve_to_loopback(c, "secure.test:443", port);
    })
    .await;
    let ca_file = proxy.dir.path().join("ca.pem");
    let proxy_url = proxy.url();
    let plain_url = format!("http://127.0.0.1:{}/via-curl", plain.port());
    let out = tokio::task::spawn_blocking(move || {
        let https = std::process::Command::new("curl")
            .args(["-sS", "-i", "--noproxy", "", "-x", &proxy_url, "--cacert"])
            .arg(&ca_file)
            .arg("https://secure.test/via-curl")
            .output()
            .unwrap();
        let http = std::process::Command::new("curl")
            .args([
                "-sS",
                "-i",
                "--noproxy",
                "",
                "-x",
                &proxy_url,
                "-d",
                "x=1",
                &plain_url,
            ])
            .output()
            .unwrap();
        (https, http)
    })
    .await
    .unwrap();
    let https = String::from_utf8_lossy(&out.0.stdout).to_string();
    assert!(
        out.0.status.success(),
        "{https} {}",
        String::from_utf8_lossy(&out.0.stderr)
    );
    assert!(https.contains("mannerly-decision: fetched"), "{https}");
    assert!(https.ends_with("GET /via-curl "), "{https}");
    let http = String::from_utf8_lossy(&out.1.stdout).to_string();
    assert!(http.ends_with("POST /via-curl x=1"), "{http}");
    proxy.stop().await;
}

#[tokio::test]
async fn internal_targets_are_blocked_by_default() {
    let origin = Origin::http(echo()).await;
    let port = origin.port();
    let mut proxy = TestProxy::start(move |c| {
        c.upstream.allow_private = false;
        resolve_to_loopback(c, &format!("sneaky.test:{port}"), port);
    })
    .await;
    let c = proxy.client();
    for host in [
        "127.0.0.1".to_string(),
        "127.1".into(),
        "2130706433".into(),
        "0x7f.0.0.1".into(),
        "[::ffff:127.0.0.1]".into(),
        "sneaky.test".into(),
        "169.254.169.254".into(),
        "10.0.0.1".into(),
    ] {
        let r = c
            .get(format!("http://{host}:{port}/secret"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{host}");
        assert!(decision(&r).starts_with("blocked"), "{host}");
        let body = r.text().await.unwrap();
        assert!(body.contains("allow_private"), "{body}");
    }
    assert_eq!(origin.seen.total(), 0, "nothing reached the origin");
    let lines = proxy.stop().await;
    assert_eq!(with_outcome(&lines, "blocked").len(), 8, "{lines:#?}");
}

#[tokio::test]
async fn connect_to_a_port_not_allowed_is_blocked() {
    // Only pass-through tunnels are held to the port list.
    let mut proxy = TestProxy::start(|c| c.proxy.intercept = false).await;
    let mut s = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    s.write_all(b"CONNECT example.test:8443 HTTP/1.1\r\nHost: example.test:8443\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0; 1024];
    let n = s.read(&mut buf).await.unwrap();
    let resp = String::from_utf8_lossy(&buf[..n]).to_string();
    assert!(resp.starts_with("HTTP/1.1 403"), "{resp}");
    assert!(resp.contains("mannerly-decision: blocked"), "{resp}");
    assert!(resp.contains("connect_ports"), "{resp}");
    let lines = proxy.stop().await;
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["outcome"], "blocked");
    assert_eq!(lines[0]["method"], "CONNECT");
}

async fn raw(proxy: &TestProxy, request: &[u8]) -> String {
    let mut s = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut out = Vec::new();
    // The proxy closes the connection after a refusal of bad input: reading
    // to the end must finish.
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .expect("connection was not closed")
        .unwrap();
    String::from_utf8_lossy(&out).to_string()
}

#[tokio::test]
async fn bad_input_gets_a_plain_4xx_a_closed_connection_and_an_audit_line() {
    let origin = Origin::http(echo()).await;
    let mut proxy = TestProxy::start(|c| c.proxy.max_header_bytes = 4096).await;
    let target = format!("http://127.0.0.1:{}/x", origin.port());
    let cases: Vec<(Vec<u8>, &str, &str)> = vec![
        (b"GARBAGE\x01LINE\r\n\r\n".to_vec(), "400", "malformed"),
        (
            format!("POST {target} HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n").into_bytes(),
            "400",
            "both Content-Length and Transfer-Encoding",
        ),
        (
            format!("POST {target} HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!").into_bytes(),
            "400",
            "conflicting Content-Length",
        ),
        (
            format!("GET {target} HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\n\r\n", "a".repeat(8000)).into_bytes(),
            "431",
            "larger than 4096",
        ),
        (b"GET /origin-form HTTP/1.1\r\nHost: a\r\n\r\n".to_vec(), "400", "not a proxy request"),
    ];
    for (req, status, words) in &cases {
        let resp = raw(&proxy, req).await;
        assert!(resp.starts_with(&format!("HTTP/1.1 {status}")), "{resp}");
        assert!(resp.contains("mannerly-decision: error"), "{resp}");
        assert!(resp.contains(words), "{words}: {resp}");
    }
    assert_eq!(origin.seen.total(), 0);
    let lines = proxy.stop().await;
    let errors = with_outcome(&lines, "error");
    assert_eq!(errors.len(), cases.len(), "{lines:#?}");
    assert!(errors.iter().all(|l| l["source"] == "client"));
}

#[tokio::test]
async fn origin_failures_are_502_and_504() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    let keep = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            held.push(s);
        }
    });
    let closed_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut proxy = TestProxy::start(|c| {
        c.upstream.first_byte_timeout = std::time::Duration::from_millis(500);
        c.robots.fetch_timeout_secs = 0.5;
        c.policy.enforce = false;
    })
    .await;
    let c = proxy.client();
    let r = c
        .get(format!("http://127.0.0.1:{closed_port}/"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
    assert!(decision(&r).starts_with("error"));
    let r = c
        .get(format!("http://127.0.0.1:{silent_port}/"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 504);
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("no response from the origin"));
    keep.abort();
    proxy.stop().await;
}

/// The second request on a kept-alive connection gets the same checks as
/// the first: framing, size, codings, time.
#[tokio::test]
async fn later_heads_on_a_kept_alive_connection_get_the_same_checks() {
    let origin = Origin::http(echo()).await;
    let mut proxy = TestProxy::start(|c| {
        c.proxy.max_header_bytes = 4096;
        c.proxy.header_read_timeout = Duration::from_millis(600);
    })
    .await;
    let target = format!("http://127.0.0.1:{}/x", origin.port());
    let good = format!("GET {target} HTTP/1.1\r\nHost: a\r\n\r\n");
    let cases: Vec<(String, &str, &str)> = vec![
        (
            format!("POST {target} HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
            "400",
            "both Content-Length and Transfer-Encoding",
        ),
        (
            format!("POST {target} HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"),
            "501",
            "Transfer-Encoding other than chunked",
        ),
        (
            format!("GET {target} HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\n\r\n", "a".repeat(70_000)),
            "431",
            "larger than 4096",
        ),
        // A head that never ends: 408 once the head timeout is over.
        (format!("GET {target} HTTP/1.1\r\nHost: a\r\nX-Slow: "), "408", "not complete within"),
    ];
    for (second, status, words) in &cases {
        let resp = raw(&proxy, format!("{good}{second}").as_bytes()).await;
        assert!(resp.starts_with("HTTP/1.1 200"), "first answered: {resp}");
        let rest = &resp[resp.find("\r\n\r\n").unwrap()..];
        let Some(at) = rest.find("HTTP/1.1 ") else {
            panic!("no second answer: {resp}");
        };
        let second_resp = &rest[at..];
        assert!(
            second_resp.starts_with(&format!("HTTP/1.1 {status}")),
            "{second_resp}"
        );
        assert!(
            second_resp.contains("mannerly-decision: error"),
            "{second_resp}"
        );
        assert!(second_resp.contains(words), "{words}: {second_resp}");
    }
    assert_eq!(
        origin.seen.count("/x"),
        cases.len(),
        "only the good requests"
    );
    let lines = proxy.stop().await;
    let errors = with_outcome(&lines, "error");
    assert_eq!(errors.len(), cases.len(), "{lines:#?}");
    assert!(errors.iter().all(|l| l["source"] == "client"));
    assert_eq!(with_outcome(&lines, "fetched").len(), cases.len());
}

/// A client that trickles its body holds nothing of the host's: another
/// client's GET to the same host (concurrency 1) is answered while the slow
/// body is still coming, and the slow one gets 408 once it goes silent.
#[tokio::test]
async fn a_slow_request_body_does_not_hold_the_host_and_ends_in_408() {
    let origin = Origin::http(echo()).await;
    let mut proxy = TestProxy::start(|c| {
        c.budget.concurrency = 1;
        c.proxy.body_idle_timeout = Duration::from_millis(800);
    })
    .await;
    let target = format!("http://127.0.0.1:{}/slow", origin.port());
    let mut slow = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    slow.write_all(
        format!("POST {target} HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nab").as_bytes(),
    )
    .await
    .unwrap();
    // The slow request's walk has begun: its robots.txt fetch is settled,
    // and nothing but its body stands before its turn.
    let robots = |l: &serde_json::Value| l["outcome"] == "robots_fetched";
    assert!(line_where(&proxy.audit_path, robots).await.is_some());
    let r = proxy
        .client()
        .get(format!("http://127.0.0.1:{}/fast", origin.port()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        origin.seen.count("/slow"),
        0,
        "the slow body is not complete"
    );
    // Nothing more: the body goes silent.
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), slow.read_to_end(&mut out))
        .await
        .expect("the proxy closes the connection")
        .unwrap();
    let resp = String::from_utf8_lossy(&out).to_lowercase();
    assert!(resp.starts_with("http/1.1 408"), "{resp}");
    assert!(resp.contains("mannerly-decision: error"), "{resp}");
    assert_eq!(origin.seen.count("/slow"), 0, "never sent");
    let lines = proxy.stop().await;
    let errors = with_outcome(&lines, "error");
    assert_eq!(errors.len(), 1, "{lines:#?}");
    assert_eq!(errors[0]["source"], "client");
    assert_eq!(errors[0]["status"], 408);
}

/// A broken chunked body is the client's error (400, source client), not
/// an origin failure.
#[tokio::test]
async fn a_bad_chunk_size_in_the_client_body_is_a_400_from_the_client() {
    let origin = Origin::http(echo()).await;
    let mut proxy = TestProxy::start(|_| {}).await;
    let target = format!("http://127.0.0.1:{}/post", origin.port());
    let resp = raw(
        &proxy,
        format!("POST {target} HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n").as_bytes(),
    )
    .await
    .to_lowercase();
    assert!(resp.starts_with("http/1.1 400"), "{resp}");
    assert!(resp.contains("mannerly-decision: error"), "{resp}");
    let lines = proxy.stop().await;
    let errors = with_outcome(&lines, "error");
    assert_eq!(errors.len(), 1, "{lines:#?}");
    assert_eq!(errors[0]["source"], "client");
}

/// An origin on its own thread (not on the test's runtime): 404 for
/// robots.txt, a 2-byte page for anything else, keep-alive.
fn thread_origin() -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut chunk) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                    let head = String::from_utf8_lossy(&buf[..end]).to_string();
                    buf.drain(..end);
                    let answer: &[u8] = if head.starts_with("GET /robots.txt") {
                        b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"
                    } else {
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
                    };
                    if conn.write_all(answer).is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

/// A connection, once accepted, belongs to a serving thread: it is served
/// while the runtime that accepted it is busy. Before, its socket stayed
/// registered with the accepting runtime's reactor, so every readiness of
/// it waited for that runtime (and woke a thread there first).
#[tokio::test]
async fn an_accepted_connection_is_served_while_the_accepting_runtime_is_busy() {
    let port = thread_origin();
    let mut proxy = TestProxy::start(|c| c.proxy.threads = 2).await;
    let url = format!("http://127.0.0.1:{port}/page");
    let addr = proxy.addr;
    let (ask, asked) = std::sync::mpsc::channel::<()>();
    let (tell, told) = std::sync::mpsc::channel::<String>();
    let client = std::thread::spawn(move || {
        let mut conn = std::net::TcpStream::connect(addr).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        tell.send(raw_get(&mut conn, &url)).unwrap();
        // The second request goes out only once the test's runtime (which
        // accepted the connection) is blocked.
        asked.recv().unwrap();
        tell.send(raw_get(&mut conn, &url)).unwrap();
    });
    let first = tokio::task::spawn_blocking({
        let told = told;
        move || (told.recv_timeout(Duration::from_secs(60)), told)
    })
    .await
    .unwrap();
    let (first, told) = (first.0.expect("first answer"), first.1);
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    // Block this runtime's only thread until the second answer comes: with
    // the connection still on this runtime's reactor it never would (the
    // wait ends at 30 s and the test fails).
    ask.send(()).unwrap();
    let second = told.recv_timeout(Duration::from_secs(30));
    let second = second.expect("answered while the accepting runtime was blocked");
    assert!(second.starts_with("HTTP/1.1 200"), "{second}");
    assert!(second.ends_with("ok"), "{second}");
    client.join().unwrap();
    let lines = proxy.stop().await;
    let pages = with_outcome(&lines, "fetched");
    assert_eq!(pages.len(), 2, "{lines:?}");
}
