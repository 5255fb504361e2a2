//! The real web: strict servers and clients we did not write, through the
//! real proxy.

use std::time::Duration;

use crate::e2e::support::*;

const NGINX_SITE: &str = r#"
    location = /robots.txt { return 200 "User-agent: *\nDisallow: /private/\n"; }
    location / { return 200 "hello from nginx\n"; }
"#;

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
    let ca_path = ca.pem_path.clone();
    let mut proxy = TestProxy::start(|c| {
        c.upstream.extra_roots = vec![ca_path];
        c.proxy.connect_ports.push(port);
        c.upstream.resolve.insert(
            format!("origin.test:{port}"),
            format!("127.0.0.1:{port}").parse().unwrap(),
        );
    })
    .await;
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

    let log = nginx.access_log();
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

/// Python `requests` and `httpx`, trusting mannerly's CA as the README
/// says, through mannerly to the h2 nginx.
#[tokio::test]
async fn python_requests_and_httpx_reach_an_h2_nginx_through_mannerly() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    if !have_tool("python3", "python3") {
        return;
    }
    let Some(nginx) = Nginx::start_tls(&ca, "origin.test", NGINX_SITE) else {
        return;
    };
    let port = nginx.port;
    let ca_path = ca.pem_path.clone();
    let mut proxy = TestProxy::start(|c| {
        c.upstream.extra_roots = vec![ca_path];
        c.proxy.connect_ports.push(port);
        c.upstream.resolve.insert(
            format!("origin.test:{port}"),
            format!("127.0.0.1:{port}").parse().unwrap(),
        );
    })
    .await;
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
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .arg("-c")
            .arg(script)
            .env("HTTPS_PROXY", &proxy_url)
            .env("https_proxy", &proxy_url)
            .env("NO_PROXY", "")
            .env("REQUESTS_CA_BUNDLE", &mannerly_ca)
            .env("SSL_CERT_FILE", &mannerly_ca)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    if out.status.code() == Some(3) {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI needs pip install requests httpx"
        );
        eprintln!("skipped: {stdout}");
        return;
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("requests 200 fetched; waited_ms="),
        "{stdout}\n{stderr}"
    );
    assert!(stdout.contains("hello from nginx"), "{stdout}");
    assert!(stdout.contains("httpx 200 fetched; waited_ms="), "{stdout}");
    let log = nginx.access_log();
    assert_eq!(
        log.matches("\"GET /page HTTP/2.0\" 200").count(),
        2,
        "{log}"
    );
    let lines = proxy.stop().await;
    assert_eq!(with_outcome(&lines, "fetched").len(), 2);
    tokio::time::sleep(Duration::from_millis(10)).await;
}
