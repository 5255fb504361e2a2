//! Every request the origin saw is on the record (issue 30): a client that
//! gives up, resets its stream or closes mid-walk still leaves a line;
//! answers the proxy makes itself, unparseable targets included, carry a
//! decision, an id and a line; the user of an authenticated client is on
//! every line, inside tunnels too.

use std::time::Duration;

use super::support::*;

/// Waits (bounded) until the origin has seen `path`.
async fn origin_saw(origin: &Origin, path: &str) {
    for _ in 0..300 {
        if origin.seen.count(path) > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the origin never saw {path}: {:?}", origin.seen.all());
}

fn assert_cancelled(line: &serde_json::Value) {
    assert_eq!(line["outcome"], "error", "{line}");
    assert_eq!(line["source"], "client", "{line}");
    assert_eq!(line["status"], serde_json::Value::Null, "{line}");
    assert_eq!(line["bytes"], 0, "{line}");
    assert_eq!(line["received"], 0, "{line}");
    let reason = line["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains("client went away while the request was at the origin"),
        "{line}"
    );
}

fn curl_gives_up(proxy: &str, url: &str, tunnel: bool) -> std::process::Output {
    let mut cmd = std::process::Command::new("curl");
    cmd.args(["-sS", "--noproxy", "", "--max-time", "0.3", "-x", proxy]);
    if tunnel {
        cmd.arg("--proxytunnel");
    }
    cmd.arg(url).output().unwrap()
}

/// `curl --max-time` to a page the origin answers late: the origin has
/// the request, so the log has it too, over plain HTTP/1.1 and inside a
/// CONNECT tunnel, through the real binary.
#[tokio::test]
async fn a_request_the_client_gives_up_on_is_on_the_record() {
    if !have_tool("curl", "curl") {
        return;
    }
    let origin = Origin::http(ok_origin()).await;
    let dir = tempfile::tempdir().unwrap();
    let ports = format!("[{}]", origin.port());
    let bin = RunningBinary::start(dir.path(), &[("MANNERLY_PROXY__CONNECT_PORTS", &ports)]);
    let audit = dir.path().join("audit.jsonl");
    let proxy = format!("http://{}", bin.addr);
    for (path, tunnel) in [("/plain?3000", false), ("/tunnel?3001", true)] {
        let url = format!("http://127.0.0.1:{}{path}", origin.port());
        let (p, u) = (proxy.clone(), url.clone());
        let out = tokio::task::spawn_blocking(move || curl_gives_up(&p, &u, tunnel))
            .await
            .unwrap();
        assert!(!out.status.success(), "curl was answered: {out:?}");
        origin_saw(&origin, path).await;
        let line = line_where(&audit, |l| l["url"] == url.as_str()).await;
        let line = line.unwrap_or_else(|| panic!("no line for {url}: {:?}", audit_lines(&audit)));
        assert_cancelled(&line);
    }
}

/// A client that resets its h2 stream (reqwest dropping a request it timed
/// out) leaves a line; its connection, and the next request on it, go on.
#[tokio::test]
async fn a_reset_h2_stream_is_on_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let origin = Origin::https(ok_origin(), &ca, &["localhost"]).await;
    let roots = format!("[{:?}]", ca.pem_path.display().to_string());
    let data = dir.path().join("proxy");
    let ports = format!("[{}]", origin.port());
    let env = [
        ("MANNERLY_UPSTREAM__EXTRA_ROOTS", roots.as_str()),
        ("MANNERLY_PROXY__CONNECT_PORTS", &ports),
    ];
    let bin = RunningBinary::start(&data, &env);
    let audit = data.join("audit.jsonl");
    let proxy_ca = std::fs::read(data.join("ca.pem")).unwrap();
    let client = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(format!("http://{}", bin.addr)).unwrap())
        .add_root_certificate(reqwest::Certificate::from_pem(&proxy_ca).unwrap())
        .build()
        .unwrap();
    let base = format!("https://localhost:{}", origin.port());
    let first = client.get(format!("{base}/first")).send().await.unwrap();
    assert_eq!(first.version(), reqwest::Version::HTTP_2);
    assert_eq!(first.status(), 200);
    let slow = format!("{base}/slow?3000");
    let gave_up = client
        .get(&slow)
        .timeout(Duration::from_millis(300))
        .send()
        .await;
    assert!(gave_up.is_err_and(|e| e.is_timeout()));
    origin_saw(&origin, "/slow?3000").await;
    let line = line_where(&audit, |l| l["url"] == slow.as_str()).await;
    assert_cancelled(&line.unwrap_or_else(|| panic!("no line: {:?}", audit_lines(&audit))));
    let after = client.get(format!("{base}/after")).send().await.unwrap();
    assert_eq!(after.status(), 200);
    assert_eq!(after.version(), reqwest::Version::HTTP_2);
}

/// Targets hyper's parser cannot read get the proxy's own answer: a
/// decision, an id and a line naming the target (before: a bare 400).
#[tokio::test]
async fn unparseable_targets_get_a_decision_an_id_and_a_line() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let bin = RunningBinary::start(dir.path(), &[]);
    let audit = dir.path().join("audit.jsonl");
    let targets = [
        "127.0.0.1%2e",
        "%31%32%37.0.0.1",
        "127.0.0.1:18080:80",
        "\u{2460}\u{2461}\u{2466}.0.0.1",
        "127\u{3002}0\u{3002}0\u{3002}1",
    ];
    for host in targets {
        let mut conn = std::net::TcpStream::connect(&bin.addr).unwrap();
        write!(conn, "GET http://{host}/ HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
        let mut got = Vec::new();
        conn.read_to_end(&mut got).unwrap();
        let got = String::from_utf8_lossy(&got).to_lowercase();
        assert!(got.starts_with("http/1.1 400"), "{host}: {got}");
        assert!(got.contains("mannerly-decision: error"), "{host}: {got}");
        let id = got
            .lines()
            .find_map(|l| l.strip_prefix("mannerly-id: "))
            .unwrap_or_else(|| panic!("{host}: no id: {got}"))
            .trim()
            .to_string();
        let line = line_where(&audit, |l| l["id"] == id.as_str()).await;
        let line = line.unwrap_or_else(|| panic!("{host}: no line {id}"));
        assert_eq!(line["status"], 400, "{line}");
        assert_eq!(line["source"], "client", "{line}");
        assert_eq!(line["url"], format!("http://{host}/"), "{line}");
        assert!(line["reason"].as_str().unwrap().contains("not a valid URI"));
    }
}

fn add_user(dir: &std::path::Path, name: &str, password: &str) {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_mannerly"))
        .args(["users", "add", name])
        .env("MANNERLY_DATA_DIR", dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "{password}").unwrap();
    assert!(child.wait_with_output().unwrap().status.success());
}

/// HTTPS inside an authenticated CONNECT is the user's, over HTTP/1.1 and
/// h2 (before: `"user": null` once the CONNECT's connection was done).
/// Two Proxy-Authorization fields are refused, not judged by the first.
#[tokio::test]
async fn the_user_is_on_every_line_inside_tunnels_too() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let origin = Origin::https(ok_origin(), &ca, &["localhost"]).await;
    let roots = format!("[{:?}]", ca.pem_path.display().to_string());
    let data = dir.path().join("proxy");
    std::fs::create_dir(&data).unwrap();
    add_user(&data, "alice", "correct horse");
    let ports = format!("[{}]", origin.port());
    let env = [
        ("MANNERLY_UPSTREAM__EXTRA_ROOTS", roots.as_str()),
        ("MANNERLY_PROXY__AUTH", "basic"),
        ("MANNERLY_PROXY__CONNECT_PORTS", &ports),
    ];
    let bin = RunningBinary::start(&data, &env);
    let audit = data.join("audit.jsonl");
    let proxy_ca = std::fs::read(data.join("ca.pem")).unwrap();
    let base = format!("https://localhost:{}", origin.port());
    for (path, h1) in [("/over-h1", true), ("/over-h2", false)] {
        let mut b = reqwest::Client::builder()
            .proxy(
                reqwest::Proxy::all(format!("http://{}", bin.addr))
                    .unwrap()
                    .basic_auth("alice", "correct horse"),
            )
            .add_root_certificate(reqwest::Certificate::from_pem(&proxy_ca).unwrap());
        if h1 {
            b = b.http1_only();
        }
        let c = b.build().unwrap();
        for _ in 0..2 {
            let r = c.get(format!("{base}{path}")).send().await.unwrap();
            assert_eq!(r.status(), 200);
            assert_eq!(r.version() == reqwest::Version::HTTP_2, !h1);
        }
        let url = format!("{base}{path}");
        let n = |l: &serde_json::Value| l["url"] == url.as_str();
        line_where(&audit, |l| n(l) && l["outcome"] == "fetched").await;
        let lines: Vec<_> = audit_lines(&audit).into_iter().filter(n).collect();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines.iter().all(|l| l["user"] == "alice"), "{lines:?}");
    }
    let mut conn = std::net::TcpStream::connect(&bin.addr).unwrap();
    let url = format!("http://127.0.0.1:{}/twice", origin.port());
    // alice's real credentials first, a stranger's second.
    write!(
        conn,
        "GET {url} HTTP/1.1\r\nHost: x\r\nProxy-Authorization: Basic YWxpY2U6Y29ycmVjdCBob3JzZQ==\r\nProxy-Authorization: Basic Ym9iOng=\r\n\r\n"
    )
    .unwrap();
    let mut got = Vec::new();
    conn.read_to_end(&mut got).unwrap();
    let got = String::from_utf8_lossy(&got).to_lowercase();
    assert!(got.starts_with("http/1.1 400"), "{got}");
    assert!(got.contains("mannerly-decision: denied"), "{got}");
    let line = line_where(&audit, |l| l["url"] == url.as_str())
        .await
        .unwrap();
    assert_eq!(line["outcome"], "denied");
    assert_eq!(origin.seen.count("/twice"), 0);
}

/// An origin on a raw socket that answers every page with `answer` (and
/// robots.txt with a 404), one request per connection.
fn raw_origin(answer: Vec<u8>) -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().map_while(Result::ok) {
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).is_ok_and(|n| n == 1) {
                head.push(byte[0]);
            }
            let robots = head.starts_with(b"GET /robots.txt");
            let out: &[u8] = if robots {
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            } else {
                &answer
            };
            let _ = conn.write_all(out);
        }
    });
    port
}

/// One GET through the proxy on a raw socket, read to the close.
fn raw_exchange(proxy: &str, url: &str) -> String {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(proxy).unwrap();
    write!(
        conn,
        "GET {url} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut got = Vec::new();
    let _ = conn.read_to_end(&mut got);
    String::from_utf8_lossy(&got).to_string()
}

/// RFC 9112 §6.3 on the origin's side: Transfer-Encoding wins and the
/// Content-Length is not passed on (before: a complete 200 "hel"); framing
/// that cannot be read and an oversize head are 502 `source: upstream`.
#[tokio::test]
async fn origin_framing_is_judged_not_relayed() {
    let dir = tempfile::tempdir().unwrap();
    let bin = RunningBinary::start(dir.path(), &[]);
    let audit = dir.path().join("audit.jsonl");
    let both = raw_origin(
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
            .to_vec(),
    );
    let url = format!("http://127.0.0.1:{both}/both");
    let got = tokio::task::spawn_blocking({
        let (p, u) = (bin.addr.clone(), url.clone());
        move || raw_exchange(&p, &u)
    })
    .await
    .unwrap();
    let lower = got.to_lowercase();
    assert!(lower.starts_with("http/1.1 200"), "{got}");
    assert!(!lower.contains("content-length: 3"), "{got}");
    assert!(lower.contains("transfer-encoding: chunked"), "{got}");
    assert!(got.ends_with("5\r\nhello\r\n0\r\n\r\n"), "{got}");
    let line = line_where(&audit, |l| l["url"] == url.as_str())
        .await
        .unwrap();
    assert_eq!(line["outcome"], "fetched", "{line}");
    assert_eq!(line["bytes"], 5, "{line}");
    assert_eq!(line["reason"], serde_json::Value::Null, "{line}");

    let mut huge = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n".to_vec();
    for i in 0..2000 {
        huge.extend_from_slice(format!("X-Filler-{i}: {}\r\n", "a".repeat(90)).as_bytes());
    }
    huge.extend_from_slice(b"\r\nok");
    let cases = [
        (
            raw_origin(
                b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 5\r\n\r\nhello".to_vec(),
            ),
            "not valid HTTP/1.1",
        ),
        (raw_origin(huge), "response head is larger than 65536 bytes"),
    ];
    for (port, why) in cases {
        let url = format!("http://127.0.0.1:{port}/bad");
        let got = tokio::task::spawn_blocking({
            let (p, u) = (bin.addr.clone(), url.clone());
            move || raw_exchange(&p, &u)
        })
        .await
        .unwrap();
        assert!(got.starts_with("HTTP/1.1 502"), "{why}: {got}");
        assert!(
            got.to_lowercase().contains("mannerly-decision: error"),
            "{got}"
        );
        let line = line_where(&audit, |l| l["url"] == url.as_str())
            .await
            .unwrap();
        assert_eq!(line["source"], "upstream", "{line}");
        assert!(line["reason"].as_str().unwrap().contains(why), "{line}");
    }
}

/// A Crawl-delay longer than the hold is its own refusal, `paced`, with
/// the time to the host's next turn (before: `queue_full`, "too many
/// requests are waiting", with nothing queued).
#[tokio::test]
async fn a_crawl_delay_beyond_the_hold_is_paced_not_queue_full() {
    let origin = Origin::http(handler(|req| async move {
        match req.uri().path() {
            "/robots.txt" => text(200, "User-agent: *\nCrawl-delay: 60\n"),
            _ => text(200, "page"),
        }
    }))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let bin = RunningBinary::start(dir.path(), &[("MANNERLY_BUDGET__BURST", "1")]);
    let r = bin
        .client()
        .get(format!("http://127.0.0.1:{}/page", origin.port()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert!(decision(&r).starts_with("paced"), "{}", decision(&r));
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((31..=60).contains(&retry), "{retry}");
    let body = r.text().await.unwrap();
    assert!(body.contains("Crawl-delay"), "{body}");
    assert_eq!(origin.seen.count("/page"), 0);
    let audit = dir.path().join("audit.jsonl");
    let line = line_where(&audit, |l| l["outcome"] == "paced")
        .await
        .unwrap();
    assert_eq!(line["status"], 503);
    assert_eq!(line["source"], "policy");
}

/// IPv6 ranges that lead back inside are refused before any connection
/// (before: a connection was attempted): local-use NAT64, discard-only,
/// site-local, and Teredo judged by the IPv4 address it embeds.
#[tokio::test]
async fn inward_ipv6_ranges_are_blocked_before_connecting() {
    let dir = tempfile::tempdir().unwrap();
    let bin = RunningBinary::start(dir.path(), &[("MANNERLY_UPSTREAM__ALLOW_PRIVATE", "false")]);
    let c = bin.client();
    for (host, class) in [
        ("64:ff9b:1::a00:1", "private"),
        ("100::1", "reserved"),
        ("fec0::1", "private"),
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "loopback"),
    ] {
        let r = c.get(format!("http://[{host}]/")).send().await.unwrap();
        assert_eq!(r.status(), 403, "{host}");
        let d = decision(&r);
        assert!(d.starts_with("blocked"), "{host}: {d}");
        let body = r.text().await.unwrap();
        assert!(body.contains(class), "{host}: {body}");
    }
}

/// An origin that answers how many body bytes it got: `got N`.
fn body_counting_origin() -> Handler {
    use http_body_util::BodyExt;
    handler(|req| async move {
        if req.uri().path() == "/robots.txt" {
            return text(404, "");
        }
        let n = req
            .into_body()
            .collect()
            .await
            .map_or(0, |b| b.to_bytes().len());
        text(200, format!("got {n}"))
    })
}

/// A large body (streamed while the request holds the host's turn) that
/// trickles is cut once it falls behind `proxy.body_min_rate` after the
/// grace: 408 `source: client` (before: held until the origin's first-byte
/// timeout, then 504 blamed on the origin), and the host's next request
/// is served.
#[tokio::test]
async fn a_trickling_large_body_is_the_client_s_408() {
    use std::io::{Read, Write};
    let origin = Origin::http(body_counting_origin()).await;
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("MANNERLY_PROXY__BODY_MIN_RATE", "500"),
        ("MANNERLY_PROXY__BODY_RATE_GRACE_SECS", "1"),
        ("MANNERLY_BUDGET__CONCURRENCY", "1"),
    ];
    let bin = RunningBinary::start(dir.path(), &env);
    let url = format!("http://127.0.0.1:{}/upload", origin.port());
    let (addr, u) = (bin.addr.clone(), url.clone());
    let answer = tokio::task::spawn_blocking(move || {
        let mut conn = std::net::TcpStream::connect(&addr).unwrap();
        write!(
            conn,
            "POST {u} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n"
        )
        .unwrap();
        conn.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut got = Vec::new();
        // A byte every 200 ms, 5 B/s, until the proxy answers (bounded).
        for _ in 0..300 {
            if conn.write_all(b"x").is_err() {
                break;
            }
            let mut buf = [0u8; 4096];
            match conn.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    got.extend_from_slice(&buf[..n]);
                    if got.windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
                Err(_) => {}
            }
        }
        String::from_utf8_lossy(&got).to_string()
    })
    .await
    .unwrap();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        answer.to_lowercase().contains("mannerly-decision: error"),
        "{answer}"
    );
    let audit = dir.path().join("audit.jsonl");
    let line = line_where(&audit, |l| l["url"] == url.as_str())
        .await
        .unwrap();
    assert_eq!(line["status"], 408, "{line}");
    assert_eq!(line["source"], "client", "{line}");
    assert!(
        line["reason"]
            .as_str()
            .unwrap()
            .contains("slower than 500 bytes/s"),
        "{line}"
    );
    // The host's one slot is free again.
    let r = bin
        .client()
        .get(format!("http://127.0.0.1:{}/next", origin.port()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

/// A client trickling a 2 MB body (1.2 MB at once, then nothing for as
/// long as the test takes) holds nothing of the host's while it does: with
/// one slot per host, another client's page to the same host is answered
/// at once; then the trickle ends and its body reaches the origin whole.
#[tokio::test]
async fn a_slow_body_does_not_hold_the_hosts_turn_from_another_client() {
    use std::io::{Read, Write};
    let origin = Origin::http(body_counting_origin()).await;
    let proxy = TestProxy::start(|c| {
        c.budget.concurrency = 1;
        c.proxy.body_idle_timeout = Duration::from_secs(120);
    })
    .await;
    let url = format!("http://127.0.0.1:{}/upload", origin.port());
    const LEN: usize = 2_000_000;
    let mut conn = std::net::TcpStream::connect(proxy.addr).unwrap();
    write!(
        conn,
        "POST {url} HTTP/1.1\r\nHost: x\r\nContent-Length: {LEN}\r\n\r\n"
    )
    .unwrap();
    let first = vec![b'x'; 1_200_000];
    let writer = std::thread::spawn(move || {
        conn.write_all(&first).unwrap();
        conn
    });
    // Written: the proxy has read most of it (socket buffers hold far
    // less than 1.2 MB), so the upload is in its hands.
    let mut conn = tokio::task::spawn_blocking(move || writer.join().unwrap())
        .await
        .unwrap();
    let page = proxy
        .client()
        .get(format!("http://127.0.0.1:{}/page", origin.port()))
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .expect("answered while the upload trickles");
    assert_eq!(page.status(), 200, "{}", decision(&page));
    assert_eq!(
        origin.seen.count("/upload"),
        0,
        "the upload is not sent yet"
    );
    let answer = tokio::task::spawn_blocking(move || {
        conn.write_all(&vec![b'y'; LEN - 1_200_000]).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&got).contains(&format!("got {LEN}")) {
            match conn.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        String::from_utf8_lossy(&got).to_string()
    })
    .await
    .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(&format!("got {LEN}")), "{answer}");
}
