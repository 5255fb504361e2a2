//! The real web: strict servers and clients we did not write, through the
//! real proxy.

use std::time::Duration;

use crate::e2e::support::*;

const NGINX_SITE: &str = r#"
    location = /robots.txt { return 200 "User-agent: *\nDisallow: /private/\n"; }
    location / { return 200 "hello from nginx\n"; }
"#;

/// A proxy that trusts `ca` for origins and sends `origin.test:port` to
/// the loopback `port`.
async fn proxy_to_origin_test(ca: &TestCa, port: u16) -> TestProxy {
    let ca_path = ca.pem_path.clone();
    TestProxy::start(|c| to_origin_test(c, ca_path, port)).await
}

/// [`proxy_to_origin_test`] set up for a crawl of the site
/// ([`crawl_of_origin_test`]: admin listener, a budget that does not pace).
async fn crawl_proxy_to_origin_test(ca: &TestCa, port: u16) -> TestProxy {
    let ca_path = ca.pem_path.clone();
    TestProxy::start(|c| crawl_of_origin_test(c, ca_path, port)).await
}

/// Trusts `ca_path` for origins and sends `origin.test:port` to the
/// loopback `port`.
pub(super) fn to_origin_test(
    c: &mut mannerly_proxy::Config,
    ca_path: std::path::PathBuf,
    port: u16,
) {
    c.upstream.extra_roots = vec![ca_path];
    c.proxy.connect_ports.push(port);
    resolve_to_loopback(c, &format!("origin.test:{port}"), port);
}

/// [`to_origin_test`] for a crawl of the store's paths: admin on (for
/// `/metrics`), and a budget that does not pace one host's pages.
fn crawl_of_origin_test(c: &mut mannerly_proxy::Config, ca_path: std::path::PathBuf, port: u16) {
    to_origin_test(c, ca_path, port);
    c.admin.listen = "127.0.0.1:0".into();
    c.budget.start_rate = 1000.0;
    c.budget.max_rate = 1000.0;
    c.budget.burst = 100;
}

/// Writes `pages` (file name, body) to `dir`/www and starts nginx with TLS
/// for `origin.test` (certificate from `ca`), serving them as static files
/// (ETag, Last-Modified, 304s) with `directives` in their location;
/// robots.txt is a 404. `None` when nginx is absent (the test skips).
fn static_nginx(
    dir: &std::path::Path,
    ca: &TestCa,
    pages: &[(String, String)],
    directives: &str,
) -> Option<Nginx> {
    let www = dir.join("www");
    std::fs::create_dir(&www).unwrap();
    for (name, body) in pages {
        std::fs::write(www.join(name), body).unwrap();
    }
    let site = format!(
        "location = /robots.txt {{ return 404; }}\n    location / {{ root {}; {directives} }}",
        www.display()
    );
    Nginx::start_tls(ca, "origin.test", &site)
}

/// nginx with `http2` is strict about RFC 9113 §8.3.1: a request with both
/// `:authority` and `Host` is a 400 ("client sent duplicate host header").
#[tokio::test]
async fn https_to_an_h2_nginx_origin_is_forwarded_over_h2() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let Some(nginx) = Nginx::start_tls(&ca, "origin.test", NGINX_SITE) else {
        return;
    };
    let port = nginx.port;
    let mut proxy = proxy_to_origin_test(&ca, port).await;
    let client = proxy.client();
    for _ in 0..3 {
        let r = client
            .get(format!("https://origin.test:{port}/page"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{}", nginx.error_log());
        assert!(decision(&r).starts_with("fetched"), "{}", decision(&r));
        assert_eq!(r.text().await.unwrap(), "hello from nginx\n");
    }
    let r = client
        .get(format!("https://origin.test:{port}/private/x"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(decision(&r).starts_with("disallowed"));

    let log = nginx.access_log_with("\"GET /page HTTP/2.0\" 200", 3);
    assert!(log.contains("\"GET /robots.txt HTTP/2.0\" 200"), "{log}");
    assert_eq!(
        log.matches("\"GET /page HTTP/2.0\" 200").count(),
        3,
        "{log}"
    );
    assert!(!log.contains("/private/"), "refused before sending: {log}");
    assert!(!nginx.error_log().contains("duplicate host"));
    let lines = proxy.stop().await;
    assert_eq!(with_outcome(&lines, "fetched").len(), 3);
    assert_eq!(with_outcome(&lines, "robots_fetched").len(), 1);
    assert_eq!(with_outcome(&lines, "disallowed").len(), 1);
}

/// A test CA in a temporary directory and the h2 nginx with its
/// certificate for `origin.test`, serving [`NGINX_SITE`]. `None` (skipped)
/// without python3 or nginx.
fn python_and_h2_nginx() -> Option<(tempfile::TempDir, TestCa, Nginx)> {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    if !have_tool("python3", "python3") {
        return None;
    }
    let nginx = Nginx::start_tls(&ca, "origin.test", NGINX_SITE)?;
    Some((dir, ca, nginx))
}

/// What a Python script `python` printed, once it exited 0. `None`
/// (skipped) when it exited 3, its way of saying the `packages` it imports
/// are missing; in CI that fails instead, as `.ci/run` installs them.
async fn python_stdout(mut python: std::process::Command, packages: &str) -> Option<String> {
    let out = tokio::task::spawn_blocking(move || python.output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    if out.status.code() == Some(3) {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI needs pip install {packages}"
        );
        eprintln!("skipped: {stdout}");
        return None;
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    Some(stdout)
}

/// Python `requests` and `httpx`, trusting mannerly's CA as the README
/// says, through mannerly to the h2 nginx.
#[tokio::test]
async fn python_requests_and_httpx_reach_an_h2_nginx_through_mannerly() {
    let Some((_dir, ca, nginx)) = python_and_h2_nginx() else {
        return;
    };
    let port = nginx.port;
    let mut proxy = proxy_to_origin_test(&ca, port).await;
    let mannerly_ca = proxy.dir.path().join("ca.pem");
    let script = format!(
        r#"
import sys
url = "https://origin.test:{port}/page"
try:
    import requests
except ImportError:
    requests = None
try:
    import httpx
except ImportError:
    httpx = None
if requests is None or httpx is None:
    print("MISSING requests or httpx")
    sys.exit(3)
r = requests.get(url, timeout=30)
print("requests", r.status_code, r.headers.get("mannerly-decision"), r.text.strip())
with httpx.Client(timeout=30) as c:
    r = c.get(url)
    print("httpx", r.status_code, r.headers.get("mannerly-decision"), r.text.strip())
"#
    );
    let proxy_url = proxy.url();
    let mut python = std::process::Command::new("python3");
    python
        .arg("-c")
        .arg(script)
        .env("HTTPS_PROXY", &proxy_url)
        .env("https_proxy", &proxy_url)
        .env("NO_PROXY", "")
        .env("REQUESTS_CA_BUNDLE", &mannerly_ca)
        .env("SSL_CERT_FILE", &mannerly_ca);
    let Some(stdout) = python_stdout(python, "requests httpx").await else {
        return;
    };
    assert!(
        stdout.contains("requests 200 fetched; waited_ms="),
        "{stdout}"
    );
    assert!(stdout.contains("hello from nginx"), "{stdout}");
    assert!(stdout.contains("httpx 200 fetched; waited_ms="), "{stdout}");
    let log = nginx.access_log_with("\"GET /page HTTP/2.0\" 200", 2);
    assert_eq!(
        log.matches("\"GET /page HTTP/2.0\" 200").count(),
        2,
        "{log}"
    );
    let lines = proxy.stop().await;
    assert_eq!(with_outcome(&lines, "fetched").len(), 2);
}

/// Python's `h2` (httpx's HTTP/2), speaking h2 to mannerly inside the
/// intercepted tunnel, decodes each answer's HPACK block as it came: the
/// `Mannerly-Id`, new on every answer, arrives as a literal never indexed
/// (RFC 7541 §6.2.3), where indexing it evicted entries of the client's
/// table that would repeat; `Mannerly-Decision`, which repeats, is indexed.
#[tokio::test]
async fn an_h2_client_gets_each_id_as_a_literal_never_indexed() {
    let Some((_dir, ca, nginx)) = python_and_h2_nginx() else {
        return;
    };
    let port = nginx.port;
    let mut proxy = proxy_to_origin_test(&ca, port).await;
    let mannerly_ca = proxy.dir.path().join("ca.pem");
    let script = format!(
        r#"
import socket, ssl, sys
try:
    import h2.config, h2.connection, h2.events
    from hpack import NeverIndexedHeaderTuple
except ImportError:
    print("MISSING h2")
    sys.exit(3)
s = socket.create_connection(("127.0.0.1", {proxy_port}), timeout=30)
s.sendall(b"CONNECT origin.test:{port} HTTP/1.1\r\nHost: origin.test:{port}\r\n\r\n")
head = b""
while b"\r\n\r\n" not in head:
    head += s.recv(4096)
assert head.startswith(b"HTTP/1.1 200"), head
ctx = ssl.create_default_context(cafile=sys.argv[1])
ctx.set_alpn_protocols(["h2"])
t = ctx.wrap_socket(s, server_hostname="origin.test")
assert t.selected_alpn_protocol() == "h2", t.selected_alpn_protocol()
c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
c.initiate_connection()
t.sendall(c.data_to_send())
for _ in range(3):
    sid = c.get_next_available_stream_id()
    c.send_headers(sid, [(":method", "GET"), (":path", "/page"), (":scheme", "https"),
                         (":authority", "origin.test:{port}")], end_stream=True)
    t.sendall(c.data_to_send())
    done = False
    while not done:
        data = t.recv(65536)
        if not data:
            sys.exit("connection closed")
        for e in c.receive_data(data):
            if isinstance(e, h2.events.ResponseReceived):
                for h in e.headers:
                    if h[0] in ("mannerly-id", "mannerly-decision"):
                        kind = "never" if isinstance(h, NeverIndexedHeaderTuple) else "indexable"
                        print(h[0], kind, h[1])
            elif isinstance(e, h2.events.DataReceived):
                c.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
            elif isinstance(e, h2.events.StreamEnded):
                done = True
        t.sendall(c.data_to_send())
"#,
        proxy_port = proxy.addr.port(),
    );
    let mut python = std::process::Command::new("python3");
    python.arg("-c").arg(script).arg(&mannerly_ca);
    let Some(stdout) = python_stdout(python, "h2").await else {
        return;
    };
    let field = |name: &str| -> Vec<(String, String)> {
        stdout
            .lines()
            .filter_map(|l| l.strip_prefix(name))
            .filter_map(|rest| rest.trim().split_once(' '))
            .map(|(kind, value)| (kind.to_string(), value.to_string()))
            .collect()
    };
    let ids = field("mannerly-id");
    assert_eq!(ids.len(), 3, "{stdout}");
    assert!(ids.iter().all(|(kind, _)| kind == "never"), "{stdout}");
    let distinct: std::collections::HashSet<_> = ids.iter().map(|(_, v)| v).collect();
    assert_eq!(distinct.len(), 3, "{stdout}");
    let decisions = field("mannerly-decision");
    assert_eq!(decisions.len(), 3, "{stdout}");
    assert!(
        decisions
            .iter()
            .all(|(kind, v)| kind == "indexable" && v.starts_with("fetched")),
        "{stdout}"
    );
    let lines = proxy.stop().await;
    let fetched = with_outcome(&lines, "fetched");
    assert_eq!(fetched.len(), 3, "{lines:#?}");
    for (line, (_, id)) in fetched.iter().zip(&ids) {
        assert_eq!(line["id"].as_str(), Some(id.as_str()), "{line}");
    }
}

/// Node's undici, installed from the npm registry once into cargo's test
/// temp dir. `None` (skipped) where node or npm is missing, or the install
/// fails outside CI.
pub(super) fn undici_dir() -> Option<std::path::PathBuf> {
    if !have_tool("node", "nodejs") || !have_tool("npm", "npm") {
        return None;
    }
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("node-undici");
    if dir.join("node_modules/undici/package.json").exists() {
        return Some(dir);
    }
    npm_install(&dir, &["undici@6"]).then_some(dir)
}

/// undici's `ProxyAgent` sends `CONNECT host:port` for http:// URLs too and
/// speaks plain HTTP inside the tunnel; for https:// it speaks TLS. Both
/// reach the origin through the pipeline, with an audit line each.
#[tokio::test]
async fn node_undici_proxy_agent_fetches_http_and_https_urls() {
    let Some(node_dir) = undici_dir() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let page = |_req| async { text(200, "hello undici") };
    let plain = Origin::http(handler(page)).await;
    let secure = Origin::https(handler(page), &ca, &["secure.test"]).await;
    let (hp, sp) = (plain.port(), secure.port());
    let ca_path = ca.pem_path.clone();
    let mut proxy = TestProxy::start(|c| {
        c.upstream.extra_roots = vec![ca_path];
        c.proxy.connect_ports = vec![hp, sp];
        for (name, port) in [("plain.test", hp), ("secure.test", sp)] {
            resolve_to_loopback(c, &format!("{name}:{port}"), port);
        }
    })
    .await;
    let script = r#"
const { ProxyAgent, fetch } = require('undici');
const fs = require('fs');
const agent = new ProxyAgent({
  uri: process.env.PROXY,
  requestTls: { ca: fs.readFileSync(process.env.MANNERLY_CA) },
});
(async () => {
  for (const url of process.argv.slice(1)) {
    const r = await fetch(url, { dispatcher: agent });
    console.log(url, r.status, r.headers.get('mannerly-decision'), await r.text());
  }
})().catch((e) => { console.error(e); process.exit(1); });
"#;
    let plain_url = format!("http://plain.test:{hp}/a");
    let secure_url = format!("https://secure.test:{sp}/b");
    let ca_pem = proxy.dir.path().join("ca.pem");
    let proxy_url = proxy.url();
    let (u1, u2) = (plain_url.clone(), secure_url.clone());
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("node")
            .arg("-e")
            .arg(script)
            .arg(u1)
            .arg(u2)
            .current_dir(node_dir)
            .env("PROXY", proxy_url)
            .env("MANNERLY_CA", ca_pem)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("{plain_url} 200 fetched; waited_ms=")),
        "{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains(&format!("{secure_url} 200 fetched; waited_ms=")),
        "{stdout}"
    );
    assert_eq!(stdout.matches("hello undici").count(), 2, "{stdout}");
    assert_eq!(plain.seen.count("/a"), 1);
    assert_eq!(secure.seen.count("/b"), 1);
    let lines = proxy.stop().await;
    let fetched: Vec<_> = with_outcome(&lines, "fetched")
        .iter()
        .map(|l| l["url"].as_str().unwrap().to_string())
        .collect();
    assert!(fetched.contains(&plain_url), "{fetched:?}");
    assert!(fetched.contains(&secure_url), "{fetched:?}");
}

/// An HTTP/1.0 origin (Python's `http.server`) answers `HTTP/1.0`; the
/// client is answered in its own HTTP/1.1 and keeps its one connection.
#[tokio::test]
async fn curl_keeps_its_connection_to_pages_of_an_http_1_0_origin() {
    if !have_tool("curl", "curl") || !have_tool("python3", "python3") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for name in ["a", "b", "c"] {
        std::fs::write(dir.path().join(name), format!("page {name}")).unwrap();
    }
    let port = free_port();
    let mut server = std::process::Command::new("python3")
        .args([
            "-m",
            "http.server",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let up = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    if !up {
        let _ = server.kill();
        let _ = server.wait();
        panic!("python3 -m http.server did not start");
    }
    let mut proxy = TestProxy::start(|_| {}).await;
    let mut curl = std::process::Command::new("curl");
    curl.args(["-sS", "-v", "--http1.1", "-x", &proxy.url()]);
    for name in ["a", "b", "c"] {
        curl.arg(format!("http://127.0.0.1:{port}/{name}"));
    }
    let out = tokio::task::spawn_blocking(move || curl.output().unwrap())
        .await
        .unwrap();
    let _ = server.kill();
    let _ = server.wait();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "page apage bpage c");
    assert_eq!(stderr.matches("< HTTP/1.1 200").count(), 3, "{stderr}");
    assert!(!stderr.contains("< HTTP/1.0"), "{stderr}");
    assert_eq!(
        stderr.matches("Connected to").count(),
        1,
        "curl opened more than one connection: {stderr}"
    );
    let lines = proxy.stop().await;
    assert_eq!(with_outcome(&lines, "fetched").len(), 3, "{lines:#?}");
}

/// A host name glibc refuses without asking any DNS server (a label over
/// 63 octets), so the test sends nothing off the machine.
fn unresolvable() -> String {
    format!("{}.test", "a".repeat(70))
}

#[tokio::test]
async fn a_name_that_does_not_resolve_is_a_502_that_says_so() {
    let mut proxy = TestProxy::start(|_| {}).await;
    let r = proxy
        .client()
        .get(format!("http://{}/page", unresolvable()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
    assert_eq!(decision(&r), "error; reason=\"name not resolved\"");
    let lines = proxy.stop().await;
    assert_eq!(lines.len(), 1, "no robots.txt fetch: {lines:?}");
    assert_eq!(lines[0]["outcome"], "error");
    assert_eq!(lines[0]["source"], "upstream");
    assert!(lines[0]["reason"]
        .as_str()
        .unwrap()
        .starts_with("cannot resolve"));
}

#[tokio::test]
async fn an_origin_certificate_that_does_not_verify_names_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let origin = Origin::https(
        handler(|_req| async { text(200, "x") }),
        &ca,
        &["origin.test"],
    )
    .await;
    let port = origin.port();
    // The origin's CA is deliberately not in upstream.extra_roots.
    let mut proxy = TestProxy::start(|c| {
        c.proxy.connect_ports.push(port);
        resolve_to_loopback(c, &format!("origin.test:{port}"), port);
    })
    .await;
    let r = proxy
        .client()
        .get(format!("https://origin.test:{port}/page"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let body = r.text().await.unwrap();
    let fix =
        "origin certificate not trusted (unknown issuer) — add its CA to upstream.extra_roots";
    assert!(body.contains(fix), "{body}");
    let lines = proxy.stop().await;
    let fetch = with_outcome(&lines, "robots_fetched");
    assert_eq!(fetch.len(), 1);
    assert!(
        fetch[0]["reason"].as_str().unwrap().contains(fix),
        "{:?}",
        fetch[0]
    );
}

#[tokio::test]
async fn a_refused_connect_says_why_in_the_decision_header() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut proxy = TestProxy::start(|c| c.proxy.intercept = false).await;
    let mut s = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    s.write_all(b"CONNECT example.org:25 HTTP/1.1\r\nHost: example.org:25\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = s.read(&mut buf).await.unwrap();
    let head = String::from_utf8_lossy(&buf[..n]).to_lowercase();
    assert!(head.starts_with("http/1.1 403"), "{head}");
    assert!(
        head.contains("mannerly-decision: blocked; reason=\"connect to port 25 is not allowed (proxy.connect_ports)\""),
        "{head}"
    );
    let lines = proxy.stop().await;
    assert_eq!(with_outcome(&lines, "blocked").len(), 1);
}

#[tokio::test]
async fn a_client_that_does_not_trust_our_ca_leaves_an_audit_line() {
    let origin = Origin::http(handler(|_req| async { text(200, "x") })).await;
    let port = origin.port();
    let mut proxy = TestProxy::start(|c| c.proxy.connect_ports.push(port)).await;
    // A client with only the public roots: our leaf does not verify.
    let client = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(proxy.url()).unwrap())
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let err = client
        .get(format!("https://localhost:{port}/"))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_connect() || err.is_request(), "{err:?}");
    // The client gave up at the handshake; the proxy's line about it may
    // come a moment later.
    line_where(&proxy.audit_path, |l| l["outcome"] == "error")
        .await
        .expect("an audit line for the refused handshake");
    let lines = proxy.stop().await;
    let errors = with_outcome(&lines, "error");
    assert_eq!(errors.len(), 1, "{lines:?}");
    assert_eq!(errors[0]["source"], "client");
    let reason = errors[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("client rejected our certificate for localhost"),
        "{reason}"
    );
}

/// An origin written with raw sockets: robots.txt is a 404, everything else
/// gets `answer` as bytes, then the connection closes.
async fn raw_origin(answer: &'static str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&buf);
                let reply = if head.starts_with("GET /robots.txt") {
                    "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                } else {
                    answer
                };
                let _ = s.write_all(reply.as_bytes()).await;
                let _ = s.shutdown().await;
            });
        }
    });
    port
}

#[tokio::test]
async fn a_101_nobody_asked_for_is_a_502() {
    let port = raw_origin(
        "HTTP/1.1 101 Switching Protocols\r\nupgrade: something\r\nconnection: upgrade\r\n\r\n",
    )
    .await;
    let mut proxy = TestProxy::start(|_| {}).await;
    let r = proxy
        .client()
        .get(format!("http://127.0.0.1:{port}/page"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
    assert!(decision(&r).starts_with("error"), "{}", decision(&r));
    let lines = proxy.stop().await;
    let errors = with_outcome(&lines, "error");
    assert_eq!(errors.len(), 1, "{lines:#?}");
    assert_eq!(errors[0]["source"], "upstream");
    assert!(errors[0]["reason"].as_str().unwrap().contains("101"));
}

/// SIIT (::ffff:0:a.b.c.d) and 6to4 (2002:AABB:CCDD::) carry an IPv4
/// address inside an IPv6 one: an internal one is refused like the IPv4.
#[tokio::test]
async fn siit_and_6to4_addresses_of_internal_hosts_are_blocked() {
    let mut proxy = TestProxy::start(|c| c.upstream.allow_private = false).await;
    for host in [
        "[::ffff:0:127.0.0.1]",
        "[2002:7f00:1::1]",
        "[2002:a9fe:a9fe::]",
    ] {
        let r = proxy
            .client()
            .get(format!("http://{host}:9/secret"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{host}");
        assert!(
            decision(&r).starts_with("blocked"),
            "{host}: {}",
            decision(&r)
        );
    }
    let lines = proxy.stop().await;
    assert_eq!(with_outcome(&lines, "blocked").len(), 3);
}

/// With interception off, a tunnel nobody uses is closed after
/// `upstream.idle_timeout_secs`, with its `tunneled` line.
#[tokio::test]
async fn an_idle_pass_through_tunnel_is_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    // An origin that accepts and then says nothing.
    let held = tokio::spawn(async move {
        let (s, _) = listener.accept().await.unwrap();
        // Silent on purpose, longer than the proxy's timeout.
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(s);
    });
    let mut proxy = TestProxy::start(|c| {
        c.proxy.intercept = false;
        c.proxy.connect_ports.push(port);
        c.upstream.idle_timeout = Duration::from_millis(700);
    })
    .await;
    let mut s = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    s.write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(15), s.read_to_end(&mut out))
        .await
        .expect("the idle tunnel is closed")
        .unwrap();
    assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 200"));
    let lines = proxy.stop().await;
    let t = with_outcome(&lines, "tunneled");
    assert_eq!(t.len(), 1, "{lines:#?}");
    assert!(t[0]["reason"].as_str().unwrap().contains("without traffic"));
    held.abort();
}

/// With interception off, curl talks TLS and h2 to a real nginx through the
/// tunnel: the pages arrive whole, nginx's own certificate is what curl
/// checks, and the tunnel's line counts the bytes both ways.
#[tokio::test]
async fn curl_reaches_an_h2_nginx_through_a_pass_through_tunnel() {
    if !have_tool("curl", "curl") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let Some(nginx) = Nginx::start_tls(&ca, "origin.test", NGINX_SITE) else {
        return;
    };
    let port = nginx.port;
    let ca_path = ca.pem_path.clone();
    let mut proxy = TestProxy::start(|c| {
        c.proxy.intercept = false;
        c.proxy.connect_ports.push(port);
        resolve_to_loopback(c, &format!("origin.test:{port}"), port);
    })
    .await;
    let proxy_url = proxy.url();
    let url = format!("https://origin.test:{port}/page");
    let mut curl = std::process::Command::new("curl");
    curl.args([
        "-sS",
        "--http2",
        "--noproxy",
        "",
        "-x",
        &proxy_url,
        "--cacert",
    ])
    .arg(&ca_path)
    .args(["-w", "%{http_version} %{http_code}\\n", &url, &url]);
    let stdout = tool_stdout(curl).await;
    assert_eq!(stdout, "hello from nginx\n2 200\nhello from nginx\n2 200\n");
    let lines = proxy.stop().await;
    let t = with_outcome(&lines, "tunneled");
    assert_eq!(t.len(), 1, "{lines:#?}");
    assert!(t[0]["bytes"].as_u64().unwrap() > 0, "{}", t[0]);
    let reason = t[0]["reason"].as_str().unwrap();
    assert!(reason.contains("closed"), "{reason}");
}

/// A pass-through tunnel carries a half-close: a client that sends its
/// request and shuts its write side (as `nc -N` or a one-shot protocol does)
/// still gets the origin's whole reply, which the origin sends only after it
/// has read to the end.
#[tokio::test]
async fn a_pass_through_tunnel_carries_the_reply_after_the_client_half_closes() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let origin = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        let reply = format!(
            "read {} bytes: {}",
            got.len(),
            String::from_utf8_lossy(&got)
        );
        s.write_all(reply.as_bytes()).await.unwrap();
        s.shutdown().await.unwrap();
    });
    let mut proxy = TestProxy::start(|c| {
        c.proxy.intercept = false;
        c.proxy.connect_ports.push(port);
    })
    .await;
    let mut s = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    s.write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = [0u8; 1024];
    let n = s.read(&mut head).await.unwrap();
    let head = String::from_utf8_lossy(&head[..n]).to_string();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.ends_with("\r\n\r\n"),
        "the 200 came in one read: {head:?}"
    );
    s.write_all(b"hello origin").await.unwrap();
    s.shutdown().await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(15), s.read_to_end(&mut out))
        .await
        .expect("the tunnel ends once both sides have closed")
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out), "read 12 bytes: hello origin");
    origin.await.unwrap();
    let lines = proxy.stop().await;
    let t = with_outcome(&lines, "tunneled");
    assert_eq!(t.len(), 1, "{lines:#?}");
    assert_eq!(t[0]["bytes"], 27);
    assert_eq!(
        t[0]["reason"],
        "12 bytes up, 27 bytes down; client closed, then origin"
    );
}

/// A page crawled again from nginx (static file: ETag and Last-Modified,
/// 304s that carry a new Date each time): every later fetch is a 304
/// answered with the stored page, and none of those 304s costs a store
/// write, since they change nothing a later request uses.
#[tokio::test]
async fn a_page_crawled_again_from_nginx_costs_no_store_write_per_304() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let page = "<html><body>".to_string() + &"static page ".repeat(100) + "</body></html>\n";
    std::fs::write(dir.path().join("page.html"), &page).unwrap();
    let site = format!(
        "location = /robots.txt {{ return 404; }}\n    location = /page.html {{ root {}; }}",
        dir.path().display()
    );
    let Some(nginx) = Nginx::start_tls(&ca, "origin.test", &site) else {
        return;
    };
    let port = nginx.port;
    let mut proxy = crawl_proxy_to_origin_test(&ca, port).await;
    let admin = proxy.admin.unwrap();
    let client = proxy.client();
    let url = format!("https://origin.test:{port}/page.html");
    let header = |r: &reqwest::Response, name: &str| {
        r.headers()
            .get(name)
            .map(|v| v.to_str().unwrap_or("").to_string())
    };
    let mut first: Option<(Option<String>, Option<String>, std::time::SystemTime)> = None;
    for i in 0..6 {
        if i == 5 {
            // nginx's Date has whole seconds: the last 304 carries a later
            // one than the stored page, and the answer must carry it, after
            // four 304s merged the same way.
            tokio::time::sleep(Duration::from_millis(1100)).await;
        }
        let r = client.get(&url).send().await.unwrap();
        assert_eq!(r.status(), 200, "{}", nginx.error_log());
        let want = if i == 0 { "fetched" } else { "revalidated" };
        assert!(decision(&r).starts_with(want), "{i}: {}", decision(&r));
        let date = header(&r, "date")
            .and_then(|d| httpdate::parse_http_date(&d).ok())
            .expect("nginx sends a Date");
        let validators = (header(&r, "etag"), header(&r, "last-modified"));
        match &first {
            None => first = Some((validators.0, validators.1, date)),
            Some((etag, lm, stored_date)) => {
                assert_eq!((&validators.0, &validators.1), (etag, lm), "{i}");
                assert!(etag.is_some() && lm.is_some());
                assert!(date >= *stored_date, "{i}");
                if i == 5 {
                    assert!(
                        date > *stored_date,
                        "the last 304's Date, not the stored one"
                    );
                }
            }
        }
        assert_eq!(r.text().await.unwrap(), page);
        if i == 0 {
            // The first copy is stored before the audit line is written.
            wait_cache_lines(&proxy.audit_path, "/page.html", "stored", 1).await;
        }
    }
    let log = nginx.access_log_with("\"GET /page.html HTTP/2.0\" 304", 5);
    assert_eq!(
        log.matches("\"GET /page.html HTTP/2.0\" 304").count(),
        5,
        "{log}"
    );
    let metrics = crate::e2e::admin::metrics_text(&format!("http://{admin}")).await;
    let m = crate::e2e::admin::series(&metrics);
    let value = |name: &str| m.get(name).copied().unwrap_or(f64::NAN);
    assert_eq!(value("mannerly_store_entries"), 1.0, "{metrics}");
    // One write: the first copy. The five 304s wrote nothing.
    assert_eq!(value("mannerly_store_commits_total"), 1.0, "{metrics}");
    // Revalidated from memory: the page is held decoded.
    assert!(value("mannerly_store_resident_bytes") > page.len() as f64);
    let lines = proxy.stop().await;
    assert_eq!(with_outcome(&lines, "revalidated").len(), 5);
    for l in with_outcome(&lines, "revalidated") {
        assert_eq!(l["saved_bytes"], page.len() as u64, "{l}");
    }
}

/// Pages that say `Vary: Accept-Encoding`, as most sites' do, from nginx:
/// each new one is stored under its variant, and crawled again each is
/// revalidated (nginx answers 304) and answered whole from the store.
#[tokio::test]
async fn pages_with_vary_from_nginx_are_stored_and_revalidated_each() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let pages: Vec<(String, String)> = (0..12)
        .map(|i| {
            let body = format!(
                "<html><body>page {i} {}</body></html>\n",
                "text ".repeat(50)
            );
            (format!("p{i}.html"), body)
        })
        .collect();
    let Some(nginx) = static_nginx(dir.path(), &ca, &pages, "add_header Vary Accept-Encoding;")
    else {
        return;
    };
    let port = nginx.port;
    let mut proxy = crawl_proxy_to_origin_test(&ca, port).await;
    let admin = proxy.admin.unwrap();
    let client = proxy.client();
    for round in ["fetched", "revalidated"] {
        for (name, body) in &pages {
            let url = format!("https://origin.test:{port}/{name}");
            let r = client.get(&url).send().await.unwrap();
            assert_eq!(r.status(), 200, "{}", nginx.error_log());
            let vary = r.headers().get("vary").and_then(|v| v.to_str().ok());
            assert_eq!(vary, Some("Accept-Encoding"), "{name}");
            assert!(decision(&r).starts_with(round), "{name}: {}", decision(&r));
            assert_eq!(&r.text().await.unwrap(), body);
        }
        if round == "fetched" {
            // Each copy is stored before its audit line is written.
            let stored = wait_cache_lines(&proxy.audit_path, ".html", "stored", pages.len()).await;
            assert_eq!(stored.len(), pages.len());
        }
    }
    let log = nginx.access_log_with("HTTP/2.0\" 304", pages.len());
    assert_eq!(log.matches("HTTP/2.0\" 304").count(), pages.len(), "{log}");
    let metrics = crate::e2e::admin::metrics_text(&format!("http://{admin}")).await;
    let m = crate::e2e::admin::series(&metrics);
    assert_eq!(
        m.get("mannerly_store_entries").copied(),
        Some(pages.len() as f64),
        "{metrics}"
    );
    let lines = proxy.stop().await;
    assert_eq!(with_outcome(&lines, "revalidated").len(), pages.len());
}

/// Pages of 65 KiB from nginx, stored through the proxy: the store's file
/// holds little more than the pages (1.34x here, redb's own pages and the
/// steps it grows the file by included). Written whole, each took a 128 KiB
/// page of the file (redb rounds a large value up to a power of two): 3.2x.
#[tokio::test]
async fn pages_of_65_kib_from_nginx_take_little_more_than_their_size_on_disk() {
    const PAGES: usize = 200;
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let body = |i: usize| {
        let text: String = (0..).map(|k| format!("{i}.{k} ")).take(16_000).collect();
        text[..65 * 1024].to_string()
    };
    let pages: Vec<_> = (0..PAGES)
        .map(|i| (format!("p{i}.html"), body(i)))
        .collect();
    let Some(nginx) = static_nginx(dir.path(), &ca, &pages, "") else {
        return;
    };
    let port = nginx.port;
    let mut proxy = crawl_proxy_to_origin_test(&ca, port).await;
    let client = proxy.client();
    for (name, body) in &pages {
        let r = client
            .get(format!("https://origin.test:{port}/{name}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{}", nginx.error_log());
        assert_eq!(&r.text().await.unwrap(), body);
    }
    wait_cache_lines(&proxy.audit_path, ".html", "stored", PAGES).await;
    proxy.stop().await;
    let file = std::fs::metadata(proxy.dir.path().join("store.redb"))
        .unwrap()
        .len();
    let pages_bytes = (PAGES * 65 * 1024) as u64;
    assert!(
        file < pages_bytes * 2,
        "store.redb is {file} bytes for {pages_bytes} bytes of pages"
    );
}

/// Limits as nginx announces them (headers added by `add_header`, sent over
/// h2, so lower-case): the host is paced at 95% of the announced quota from
/// the first answer on, and the audit line says what was announced.
#[tokio::test]
async fn a_limit_nginx_announces_paces_the_host_and_is_audited() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let site = r#"
    location = /robots.txt { return 404; }
    location / {
        add_header RateLimit-Policy '"default";q=4;w=2' always;
        add_header RateLimit '"default";r=3;t=2' always;
        return 200 "page\n";
    }"#;
    let Some(nginx) = Nginx::start_tls(&ca, "origin.test", site) else {
        return;
    };
    let port = nginx.port;
    let mut proxy = proxy_to_origin_test(&ca, port).await;
    let c = proxy.client();
    for i in 0..3 {
        get_ok(&c, &format!("https://origin.test:{port}/p{i}")).await;
    }
    let log = nginx.access_log_with("HTTP/2.0\" 200", 3);
    assert_eq!(log.matches("HTTP/2.0\" 200").count(), 3, "{log}");
    let lines = proxy.stop().await;
    let fetched = with_outcome(&lines, "fetched");
    assert_eq!(fetched.len(), 3);
    for l in &fetched {
        assert_eq!(l["rate"].as_f64(), Some(1.9), "{l}");
        assert_eq!(l["announced"]["by"], "ratelimit", "{l}");
        assert_eq!(l["announced"]["limit"], 4);
        assert_eq!(l["announced"]["window_s"], 2);
        assert_eq!(l["announced"]["remaining"], 3);
    }
}

/// A 429 as nginx sends it (its own error page, `Retry-After` added): the
/// host is paused for what it asked, the next request is answered by the
/// proxy with the remaining pause, and nginx sees no second request.
#[tokio::test]
async fn a_429_from_nginx_pauses_the_host_for_its_retry_after() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let site = r#"
    location = /robots.txt { return 404; }
    location / {
        add_header Retry-After 120 always;
        return 429;
    }"#;
    let Some(nginx) = Nginx::start_tls(&ca, "origin.test", site) else {
        return;
    };
    let port = nginx.port;
    let mut proxy = proxy_to_origin_test(&ca, port).await;
    let c = proxy.client();
    let first = c
        .get(format!("https://origin.test:{port}/a"))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 429);
    let second = c
        .get(format!("https://origin.test:{port}/b"))
        .send()
        .await
        .unwrap();
    assert_eq!(second.status(), 429);
    assert!(
        decision(&second).starts_with("paused"),
        "{}",
        decision(&second)
    );
    let ra: u64 = second.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((110..=120).contains(&ra), "{ra}");
    let log = nginx.access_log_with("\" 429 ", 1);
    assert_eq!(log.matches("\" 429 ").count(), 1, "{log}");
    assert!(!log.contains("GET /b"), "{log}");
    let lines = proxy.stop().await;
    let throttled = with_outcome(&lines, "throttled");
    assert_eq!(throttled.len(), 1, "{lines:?}");
    // The header as the origin sent it, and the pause it gave.
    assert_eq!(throttled[0]["retry_after"], "120", "{}", throttled[0]);
    assert_eq!(throttled[0]["pause_s"], 120.0);
    assert_eq!(with_outcome(&lines, "paused").len(), 1);
}

/// Serving threads keep origin connections: curl over four HTTP/1.1
/// client connections (intercepted HTTPS) asks an h2 nginx for 40 pages
/// through a proxy with two serving threads; nginx names the connection
/// each page came over, and at most one per thread carried them all.
#[tokio::test]
async fn curl_over_several_connections_reaches_nginx_over_one_connection_per_serving_thread() {
    if !have_tool("curl", "curl") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let site = r#"
    location = /robots.txt { return 404; }
    location / { return 200 "conn $connection\n"; }
"#;
    let Some(nginx) = Nginx::start_tls(&ca, "origin.test", site) else {
        return;
    };
    let port = nginx.port;
    let roots = ca.pem_path.clone();
    let mut proxy = TestProxy::start(move |c| {
        to_origin_test(c, roots, port);
        c.proxy.threads = 2;
    })
    .await;
    let ca_file = proxy.dir.path().join("ca.pem");
    let proxy_url = proxy.url();
    let pages = dir.path().join("pages");
    std::fs::create_dir(&pages).unwrap();
    let out_pattern = pages.join("p#1").display().to_string();
    let mut curl = std::process::Command::new("curl");
    curl.args(["-sS", "--http1.1", "--parallel", "--parallel-max", "4"])
        .args(["--noproxy", "", "-x", &proxy_url, "--cacert"])
        .arg(&ca_file)
        .args(["-o", &out_pattern])
        .arg(format!("https://origin.test:{port}/p[1-40]"));
    tool_stdout(curl).await;
    let mut conns = std::collections::BTreeSet::new();
    for i in 1..=40 {
        let body = std::fs::read_to_string(pages.join(format!("p{i}"))).unwrap();
        let conn = body.strip_prefix("conn ").expect("a page from nginx");
        conns.insert(conn.trim().to_string());
    }
    assert!(
        (1..=2).contains(&conns.len()),
        "40 pages over nginx connections {conns:?}"
    );
    let lines = proxy.stop().await;
    assert_eq!(with_outcome(&lines, "fetched").len(), 40, "{lines:#?}");
    let clients: std::collections::BTreeSet<_> = with_outcome(&lines, "fetched")
        .iter()
        .map(|l| l["client"].to_string())
        .collect();
    assert!(clients.len() > 1, "curl used one connection: {clients:?}");
}

/// A re-crawl after a restart, as a crawler makes one: curl fetches pages of
/// an h2 nginx through interception, the proxy restarts (nothing held in
/// memory), and curl fetches them again. Each page is revalidated from disk
/// (nginx answers 304) and the same bytes come back, with the disk read on
/// the blocking pool and then on the serving thread (`cache.reads`). A page
/// read once is not held in memory; read again, it is; read before the
/// restart (its tick committed as the proxy stopped), it is held from its
/// first read after. The pages run from 1 KB to 300 KB, so most are stored
/// in pieces (a record past 16 KiB is), and each comes back whole.
#[tokio::test]
async fn a_recrawl_after_a_restart_revalidates_every_page_from_disk_for_curl() {
    use mannerly_policy::conditional::CacheReads;
    if !have_tool("curl", "curl") {
        return;
    }
    const PAGES: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    // Numbers in turn, so that a piece out of place or lost changes the page.
    let page = |i: usize| {
        let len = [900, 5_000, 16_400, 40_000, 65_600, 70_000, 150_000, 300_000][i];
        let text: String = (0..len).map(|k| format!("{k} ")).collect::<String>();
        format!("<html><body>page {i} {}</body></html>\n", &text[..len])
    };
    let pages: Vec<_> = (0..PAGES)
        .map(|i| (format!("p{i}.html"), page(i)))
        .collect();
    let Some(nginx) = static_nginx(dir.path(), &ca, &pages, "") else {
        return;
    };
    let port = nginx.port;
    let data = dir.path().join("data");
    let start = |reads: CacheReads| {
        let (ca_path, data) = (ca.pem_path.clone(), data.clone());
        TestProxy::start(move |c| {
            crawl_of_origin_test(c, ca_path, port);
            c.data_dir = data;
            c.cache.reads = reads;
        })
    };
    let urls: Vec<String> = (0..PAGES)
        .map(|i| format!("https://origin.test:{port}/p{i}.html"))
        .collect();
    // One curl, one connection, every page in turn: each answer's status
    // and decision, then the bodies in a file per page.
    let crawl = |proxy: &TestProxy, round: &str| {
        let mut cmd = std::process::Command::new("curl");
        cmd.args(["-sS", "--noproxy", "", "-x", &proxy.url(), "--cacert"])
            .arg(data.join("ca.pem"))
            .args(["-w", "%{http_code} %header{mannerly-decision}\\n"]);
        for (i, url) in urls.iter().enumerate() {
            let out = dir.path().join(format!("{round}-{i}.html"));
            cmd.arg("-o").arg(out).arg(url);
        }
        tool_stdout(cmd)
    };
    let resident = |admin: std::net::SocketAddr| async move {
        let text = crate::e2e::admin::metrics_text(&format!("http://{admin}")).await;
        crate::e2e::admin::series(&text)["mannerly_store_resident_bytes"]
    };
    let bodies_are_the_pages = |round: &str| {
        for i in 0..PAGES {
            let got = std::fs::read_to_string(dir.path().join(format!("{round}-{i}.html")));
            assert_eq!(got.unwrap(), page(i), "{round}: page {i}");
        }
    };

    let mut proxy = start(CacheReads::default()).await;
    let out = crawl(&proxy, "first").await;
    assert_eq!(out.matches("200 fetched").count(), PAGES, "{out}");
    bodies_are_the_pages("first");
    for i in 0..PAGES {
        wait_cache_lines(&proxy.audit_path, &format!("/p{i}.html"), "stored", 1).await;
    }
    proxy.stop().await;

    for (reads, read_before) in [(CacheReads::Pool, false), (CacheReads::Inline, true)] {
        let mut proxy = start(reads).await;
        let admin = proxy.admin.unwrap();
        for round in ["once", "twice"] {
            let name = format!("{reads:?}-{round}");
            let out = crawl(&proxy, &name).await;
            assert_eq!(
                out.matches("200 revalidated").count(),
                PAGES,
                "{name}: {out}"
            );
            bodies_are_the_pages(&name);
            if round == "once" && !read_before {
                assert_eq!(resident(admin).await, 0.0, "{name}: read once, not held");
            } else if round == "once" {
                assert!(
                    resident(admin).await > 0.0,
                    "{name}: read before the restart, held from its first read after"
                );
            } else {
                assert!(resident(admin).await > 0.0, "{name}: read twice, held");
            }
        }
        let lines = proxy.stop().await;
        assert_eq!(with_outcome(&lines, "revalidated").len(), 2 * PAGES);
    }
    let log = nginx.access_log_with("HTTP/2.0\" 304", 4 * PAGES);
    assert_eq!(log.matches("HTTP/2.0\" 304").count(), 4 * PAGES, "{log}");
}

/// nginx adds a header that changes every millisecond (`$msec`, also on its
/// 304s), so a page's first revalidation writes it back, and curl's next
/// request for it arrives while that write is on its way to disk. Four curls
/// at once, each asking for its pages three times in a row: every third
/// answer is the stored page again, never a full fetch.
#[tokio::test]
async fn curl_asking_for_a_page_while_it_is_written_back_gets_it_revalidated() {
    if !have_tool("curl", "curl") {
        return;
    }
    const CLIENTS: usize = 4;
    const PAGES: usize = 20;
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let page =
        |c: usize, i: usize| format!("<html><body>{c}/{i} {}</body></html>\n", "y".repeat(900));
    let pages: Vec<_> = (0..CLIENTS)
        .flat_map(|c| (0..PAGES).map(move |i| (format!("c{c}p{i}.html"), page(c, i))))
        .collect();
    let Some(nginx) = static_nginx(dir.path(), &ca, &pages, "add_header X-Served $msec always;")
    else {
        return;
    };
    let port = nginx.port;
    let mut proxy = crawl_proxy_to_origin_test(&ca, port).await;
    let crawls: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let mut cmd = std::process::Command::new("curl");
            cmd.args(["-sS", "--noproxy", "", "-x", &proxy.url(), "--cacert"])
                .arg(proxy.dir.path().join("ca.pem"))
                .args([
                    "-w",
                    "%{http_code} %header{x-served} %header{mannerly-decision}\\n",
                ]);
            for i in 0..PAGES {
                for n in 0..3 {
                    let out = dir.path().join(format!("c{c}p{i}-{n}.html"));
                    cmd.arg("-o").arg(out);
                    cmd.arg(format!("https://origin.test:{port}/c{c}p{i}.html"));
                }
            }
            tokio::spawn(tool_stdout(cmd))
        })
        .collect();
    // Pages whose stored copy took the X-Served of a later 304.
    let mut refreshed = 0;
    for (c, crawl) in crawls.into_iter().enumerate() {
        let out = crawl.await.unwrap();
        let answers: Vec<Vec<&str>> = out.lines().map(|l| l.split(' ').collect()).collect();
        assert_eq!(answers.len(), 3 * PAGES, "{out}");
        for (n, answer) in answers.iter().enumerate() {
            let want = if n % 3 == 0 {
                "fetched;"
            } else {
                "revalidated;"
            };
            assert_eq!(answer[0], "200", "client {c}, answer {n}: {answer:?}");
            assert_eq!(answer[2], want, "client {c}, answer {n}: {answer:?}");
            let path = dir.path().join(format!("c{c}p{}-{}.html", n / 3, n % 3));
            let body = std::fs::read_to_string(path);
            assert_eq!(body.unwrap(), page(c, n / 3), "client {c}, answer {n}");
        }
        for p in answers.chunks(3) {
            refreshed += usize::from(p[0][1] != p[2][1]);
        }
    }
    // $msec has millisecond steps: most pages, not all, were written back.
    assert!(refreshed >= CLIENTS * PAGES / 2, "{refreshed} refreshed");
    let lines = proxy.stop().await;
    assert_eq!(
        with_outcome(&lines, "revalidated").len(),
        2 * CLIENTS * PAGES
    );
    // Each first revalidation changed X-Served, so it was written back.
    let log = nginx.access_log_with("HTTP/2.0\" 304", 2 * CLIENTS * PAGES);
    assert_eq!(
        log.matches("HTTP/2.0\" 304").count(),
        2 * CLIENTS * PAGES,
        "{log}"
    );
}
