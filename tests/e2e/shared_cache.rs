//! The store as a shared cache, through the real binary: what one client's
//! revalidation brought (a cookie, a no-store) never reaches another client.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::support::*;

/// `/page` and `/goes-private`: a 200 with an ETag, then 304s. The first
/// 304 of `/page` sets a cookie (and makes the page fresh for ten
/// minutes); the 304s of `/goes-private` say `no-store`.
fn origin() -> Handler {
    let revalidations = Arc::new(AtomicUsize::new(0));
    handler(move |req| {
        let revalidations = revalidations.clone();
        async move {
            let path = req.uri().path().to_string();
            if path == "/robots.txt" {
                return text(404, "");
            }
            let conditional = req.headers().get("if-none-match").is_some();
            let mut r = if conditional {
                text(304, "")
            } else {
                text(200, format!("the page at {path}"))
            };
            let h = r.headers_mut();
            h.insert("etag", "\"v1\"".parse().unwrap());
            h.insert("cache-control", "max-age=0".parse().unwrap());
            match (path.as_str(), conditional) {
                ("/page", true) => {
                    if revalidations.fetch_add(1, Ordering::SeqCst) == 0 {
                        h.insert("set-cookie", "session=alice".parse().unwrap());
                    }
                    h.insert("cache-control", "max-age=600".parse().unwrap());
                }
                ("/goes-private", true) => {
                    h.insert("cache-control", "no-store".parse().unwrap());
                }
                _ => {}
            }
            r
        }
    })
}

async fn get(c: &reqwest::Client, url: &str) -> (String, Option<String>, String) {
    let r = c.get(url).send().await.unwrap();
    let d = decision(&r);
    let cookie = r
        .headers()
        .get("set-cookie")
        .map(|v| v.to_str().unwrap().to_string());
    (d, cookie, r.text().await.unwrap())
}

/// Stops the binary as an operator would, so that its store writes finish.
fn stop(mut proxy: RunningBinary) {
    proxy.signal("TERM");
    let status = proxy.child.wait().unwrap();
    assert!(status.success(), "{status}");
}

async fn cookie_of_one_client_never_reaches_another(serve_fresh: &str) {
    let origin = Origin::http(origin()).await;
    let dir = tempfile::tempdir().unwrap();
    let env = [("MANNERLY_CACHE__SERVE_FRESH", serve_fresh)];
    let base = format!("http://127.0.0.1:{}", origin.port());
    let (page, private) = (format!("{base}/page"), format!("{base}/goes-private"));

    let proxy = RunningBinary::start(dir.path(), &env);
    let alice = proxy.client();
    for url in [&page, &private] {
        let (d, _, _) = get(&alice, url).await;
        assert!(d.starts_with("fetched"), "{d}");
    }
    let audit = dir.path().join("audit.jsonl");
    assert_eq!(
        wait_cache_lines(&audit, "/page", "stored", 1).await.len(),
        1
    );
    assert_eq!(
        wait_cache_lines(&audit, "/goes-private", "stored", 1)
            .await
            .len(),
        1
    );
    // Alice revalidates: the origin's cookie is hers.
    let (d, cookie, body) = get(&alice, &page).await;
    assert!(d.starts_with("revalidated"), "{d}");
    assert_eq!(cookie.as_deref(), Some("session=alice"));
    assert_eq!(body, "the page at /page");
    // A 304 that says no-store: Alice still gets the page, nothing is kept.
    let (d, _, body) = get(&alice, &private).await;
    assert!(d.starts_with("revalidated"), "{d}");
    assert_eq!(body, "the page at /goes-private");
    // Whatever the store was given is on disk once the proxy has stopped.
    stop(proxy);

    let proxy = RunningBinary::start(dir.path(), &env);
    let bob = proxy.client();
    let (d, cookie, body) = get(&bob, &page).await;
    let expected = if serve_fresh == "true" {
        "fetched; waited_ms=0; cache=hit"
    } else {
        "revalidated"
    };
    assert!(d.starts_with(expected), "{d}");
    assert_eq!(cookie, None, "Alice's cookie replayed to Bob");
    assert_eq!(body, "the page at /page");
    let before = origin.seen.count("/goes-private");
    let (d, _, _) = get(&bob, &private).await;
    assert!(d.starts_with("fetched"), "the no-store page was kept: {d}");
    let last = origin
        .seen
        .all()
        .into_iter()
        .rfind(|r| r.path == "/goes-private");
    assert_eq!(origin.seen.count("/goes-private"), before + 1);
    assert!(
        last.unwrap().headers.get("if-none-match").is_none(),
        "revalidated from a kept copy"
    );
    stop(proxy);
}

#[tokio::test]
async fn a_304s_cookie_and_no_store_stay_with_the_client_that_asked() {
    cookie_of_one_client_never_reaches_another("false").await;
}

#[tokio::test]
async fn a_304s_cookie_and_no_store_stay_with_the_client_that_asked_serving_fresh() {
    cookie_of_one_client_never_reaches_another("true").await;
}

/// A POST, PUT or DELETE that succeeds makes the stored page of its URL
/// stale, and those its `Location` and `Content-Location` name on the same
/// origin; one that fails, or names another origin, does not.
#[tokio::test]
async fn an_unsafe_methods_success_removes_the_stored_pages_it_names() {
    let origin = Origin::http(handler(|req| async move {
        let mut r = match (req.method().as_str(), req.uri().path()) {
            (_, "/robots.txt") => text(404, ""),
            ("GET", path) => text(200, format!("page {path}")),
            (_, "/fails") => text(500, "no"),
            _ => text(201, "done"),
        };
        let h = r.headers_mut();
        h.insert("etag", "\"v1\"".parse().unwrap());
        h.insert("cache-control", "max-age=600".parse().unwrap());
        if req.method() != "GET" {
            h.insert("location", "/made".parse().unwrap());
            h.insert(
                "content-location",
                "http://elsewhere.test/made".parse().unwrap(),
            );
        }
        r
    }))
    .await;
    let mut proxy = TestProxy::start(|c| c.cache.serve_fresh = true).await;
    let c = proxy.client();
    let base = format!("http://127.0.0.1:{}", origin.port());
    let paths = ["/posted", "/made", "/fails"];
    for path in paths {
        c.get(format!("{base}{path}")).send().await.unwrap();
        wait_cache_lines(&proxy.audit_path, path, "stored", 1).await;
    }
    let hit = |path: &'static str| {
        let c = c.clone();
        let url = format!("{base}{path}");
        async move { decision(&c.get(url).send().await.unwrap()).contains("cache=hit") }
    };
    for path in paths {
        assert!(hit(path).await, "{path} stored and fresh");
    }
    for (round, method) in ["POST", "PUT", "DELETE"].into_iter().enumerate() {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        for path in ["/posted", "/fails"] {
            c.request(m.clone(), format!("{base}{path}"))
                .send()
                .await
                .unwrap();
        }
        assert!(!hit("/posted").await, "{method}: the target stayed stored");
        assert!(!hit("/made").await, "{method}: its Location stayed stored");
        assert!(hit("/fails").await, "{method}: a failure removed the page");
        // Fetched again above, so stored again for the next method.
        for path in ["/posted", "/made"] {
            let lines = wait_cache_lines(&proxy.audit_path, path, "stored", round + 2).await;
            assert_eq!(lines.len(), round + 2, "{path} stored again");
        }
    }
    proxy.stop().await;
}

/// An origin that answers every page with a `103 Early Hints` and then,
/// once `gate` gives a permit, the final 200 (fresh for ten minutes).
async fn early_hints_origin(gate: Arc<tokio::sync::Semaphore>) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let gate = gate.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut head = Vec::new();
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                if head.starts_with(b"GET /robots.txt") {
                    let none =
                        b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
                    let _ = conn.write_all(none).await;
                    return;
                }
                let hint = b"HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n";
                if conn.write_all(hint).await.is_err() {
                    return;
                }
                gate.acquire().await.unwrap().forget();
                let page = b"HTTP/1.1 200 OK\r\netag: \"v1\"\r\ncache-control: max-age=600\r\n\
                      content-length: 4\r\nconnection: close\r\n\r\npage";
                let _ = conn.write_all(page).await;
            });
        }
    });
    port
}

/// Reads one response head (or interim head) and, for a final one, its
/// `content-length` body; `None` when the proxy sends nothing for 30 s (a
/// guard against hanging, not a measure of speed).
async fn read_message(conn: &mut tokio::net::TcpStream, carry: &mut Vec<u8>) -> Option<String> {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = carry.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&carry[..end + 4]).into_owned();
            let len: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            if carry.len() >= end + 4 + len {
                let all: Vec<u8> = carry.drain(..end + 4 + len).collect();
                return Some(String::from_utf8_lossy(&all).into_owned());
            }
        }
        let read = tokio::time::timeout(std::time::Duration::from_secs(30), conn.read(&mut buf));
        match read.await {
            Ok(Ok(n)) if n > 0 => carry.extend_from_slice(&buf[..n]),
            _ => return None,
        }
    }
}

/// A 1xx before the final answer is passed on to an HTTP/1.1 client as it
/// comes, before the final answer (RFC 9110 §15.2), and never stored nor
/// taken for the answer: the stored page is answered without it, and an
/// HTTP/1.0 client never gets one.
#[tokio::test]
async fn an_interim_answer_is_passed_on_first_and_never_stored() {
    use tokio::io::AsyncWriteExt;
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let port = early_hints_origin(gate.clone()).await;
    let mut proxy = TestProxy::start(|c| c.cache.serve_fresh = true).await;
    let mut conn = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let get = |path: &str, version: &str| {
        format!("GET http://127.0.0.1:{port}{path} {version}\r\nhost: 127.0.0.1:{port}\r\n\r\n")
    };
    let mut carry = Vec::new();
    conn.write_all(get("/hinted", "HTTP/1.1").as_bytes())
        .await
        .unwrap();
    // The hint arrives while the origin still holds the page back.
    let hint = read_message(&mut conn, &mut carry)
        .await
        .expect("the 103 comes first");
    assert_eq!(
        hint,
        "HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n"
    );
    gate.add_permits(1);
    let first = read_message(&mut conn, &mut carry).await.expect("the 200");
    assert!(first.starts_with("HTTP/1.1 200 OK\r\n"), "{first}");
    assert!(!first.to_ascii_lowercase().contains("\r\nlink:"), "{first}");
    assert!(first.ends_with("\r\n\r\npage"), "{first}");
    let stored = wait_cache_lines(&proxy.audit_path, "/hinted", "stored", 1).await;
    assert_eq!(stored.len(), 1);

    // From the store: the final answer alone, without the hint's field.
    conn.write_all(get("/hinted", "HTTP/1.1").as_bytes())
        .await
        .unwrap();
    let again = read_message(&mut conn, &mut carry)
        .await
        .expect("the stored page");
    assert!(again.starts_with("HTTP/1.1 200 OK\r\n"), "{again}");
    assert!(again.contains("cache=hit"), "{again}");
    assert!(!again.to_ascii_lowercase().contains("\r\nlink:"), "{again}");

    // HTTP/1.0 has no 1xx: the 200 alone.
    gate.add_permits(1);
    let mut old = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    old.write_all(get("/old-client", "HTTP/1.0").as_bytes())
        .await
        .unwrap();
    let mut carry = Vec::new();
    let answer = read_message(&mut old, &mut carry).await.expect("the 200");
    // The first status line is the final one; a hint would have come
    // first. (Matching "103" anywhere would also hit a hex Mannerly-Id.)
    let status = answer.lines().next().unwrap_or_default();
    assert!(
        status.starts_with("HTTP/1.") && status.ends_with(" 200 OK"),
        "{answer}"
    );
    assert!(!answer.contains("Early Hints"), "{answer}");
    proxy.stop().await;
}

/// curl, a real client, shows the origin's 103 before the 200 it got
/// through the proxy: in absolute form, and inside a CONNECT tunnel
/// (`-p`), whose HTTP the proxy serves itself.
#[tokio::test]
async fn curl_sees_the_early_hints_through_the_proxy() {
    if !have_tool("curl", "curl") {
        return;
    }
    let gate = Arc::new(tokio::sync::Semaphore::new(2));
    let port = early_hints_origin(gate).await;
    let mut proxy = TestProxy::start(|_| {}).await;
    for (how, path) in [(None, "/absolute"), (Some("-p"), "/tunnel")] {
        let mut cmd = std::process::Command::new("curl");
        cmd.args(["-sS", "-i", "--max-time", "60", "-x", &proxy.url()])
            .args(how)
            .arg(format!("http://127.0.0.1:{port}{path}"));
        let out = tool_stdout(cmd).await;
        let hint = out.find("HTTP/1.1 103 Early Hints").expect(&out);
        let link = out.find("link: </style.css>; rel=preload").expect(&out);
        let ok = out.rfind("HTTP/1.1 200 OK").expect(&out);
        assert!(hint < link && link < ok, "{out}");
        assert!(out.ends_with("page"), "{out}");
    }
    let lines = proxy.stop().await;
    for path in ["/absolute", "/tunnel"] {
        assert!(
            lines
                .iter()
                .any(|l| l["url"].as_str().is_some_and(|u| u.ends_with(path))
                    && l["outcome"] == "fetched"),
            "{path}: {lines:?}"
        );
    }
}

/// Node's own HTTP server (`res.writeEarlyHints`, as a site on Node sends
/// them), not an origin of ours: its 103 reaches curl through the proxy
/// before the 200, and the stored page served next carries no hint.
#[tokio::test]
async fn curl_sees_the_early_hints_node_sends() {
    use std::io::BufRead;
    if !have_tool("node", "nodejs") || !have_tool("curl", "curl") {
        return;
    }
    // The server prints its port, then answers every page with a hint
    // and a page fresh for ten minutes.
    let script = r#"
        const http = require('http');
        const server = http.createServer((req, res) => {
          if (req.url === '/robots.txt') { res.writeHead(404); res.end(); return; }
          res.writeEarlyHints({ link: '</style.css>; rel=preload' });
          res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'max-age=600', etag: '"n1"' });
          res.end('page from node');
        });
        server.listen(0, '127.0.0.1', () => console.log(server.address().port));
    "#;
    let mut child = std::process::Command::new("node")
        .args(["-e", script])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("node starts");
    let mut port = String::new();
    std::io::BufReader::new(child.stdout.take().expect("node's stdout"))
        .read_line(&mut port)
        .expect("node prints its port");
    struct Stop(std::process::Child);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _node = Stop(child);
    let port = port.trim().to_string();
    let mut proxy = TestProxy::start(|c| c.cache.serve_fresh = true).await;
    let curl = |path: &str| {
        let mut cmd = std::process::Command::new("curl");
        cmd.args(["-sS", "-i", "--max-time", "60", "-x", &proxy.url()])
            .arg(format!("http://127.0.0.1:{port}{path}"));
        cmd
    };
    let out = tool_stdout(curl("/hinted")).await;
    let hint = out.find("HTTP/1.1 103 Early Hints").expect(&out);
    let link = out.find("link: </style.css>; rel=preload").expect(&out);
    let ok = out.rfind("HTTP/1.1 200 OK").expect(&out);
    assert!(hint < link && link < ok, "{out}");
    assert!(out.ends_with("page from node"), "{out}");
    let stored = wait_cache_lines(&proxy.audit_path, "/hinted", "stored", 1).await;
    assert_eq!(stored.len(), 1);
    // Served from the store: the final answer alone.
    let again = tool_stdout(curl("/hinted")).await;
    assert!(!again.contains("103"), "{again}");
    assert!(again.starts_with("HTTP/1.1 200 OK"), "{again}");
    assert!(again.ends_with("page from node"), "{again}");
    let hits = wait_cache_lines(&proxy.audit_path, "/hinted", "hit", 1).await;
    assert_eq!(hits.len(), 1, "the second answer came from the store");
    proxy.stop().await;
}
