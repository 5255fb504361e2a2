//! Real Scrapy through the proxy with the scrapy-mannerly middleware
//! (clients/scrapy-mannerly), 20 hosts on one local origin, one of them
//! paused by a 429 + Retry-After: the other hosts' pages all arrive while
//! it is paused (no slot waits for it), and its own pages all arrive after
//! the pause, with no 429 but the one that paused it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::support::*;

/// The pause the origin asks for: long enough that the 190 other pages
/// come well inside it on a loaded machine, short enough for a test.
const PAUSE: u64 = 20;
const PAGES: usize = 10;

/// What the origin saw: when, which host, which status.
type Arrivals = Arc<Mutex<Vec<(Instant, String, u16)>>>;

/// `h00.test`'s pages draw 429 + Retry-After until the pause its first
/// one started is over: a request let through early is a second 429.
fn origin(seen: Arrivals) -> Handler {
    let until: Arc<Mutex<Option<Instant>>> = Arc::default();
    handler(move |req| {
        let (seen, until) = (seen.clone(), until.clone());
        async move {
            let now = Instant::now();
            let host = req
                .headers()
                .get("host")
                .and_then(|h| h.to_str().ok())
                .and_then(|h| h.split(':').next())
                .unwrap_or("")
                .to_string();
            if req.uri().path() == "/robots.txt" {
                return text(404, "");
            }
            let mut status = 200;
            if host == "h00.test" {
                let mut u = until.lock().unwrap();
                let end = *u.get_or_insert(now + Duration::from_secs(PAUSE));
                if now < end {
                    status = 429;
                }
            }
            seen.lock().unwrap().push((now, host, status));
            let mut r = text(status, "page");
            if status == 429 {
                r.headers_mut()
                    .insert("retry-after", PAUSE.to_string().parse().unwrap());
            }
            r
        }
    })
}

#[tokio::test]
async fn scrapy_crawls_the_other_hosts_while_one_is_paused_and_that_one_after() {
    if !have_tool("scrapy", "python3-pip (pip install scrapy)") {
        return;
    }
    let seen: Arrivals = Arc::default();
    let o = Origin::http(origin(seen.clone())).await;
    let port = o.port();
    let hosts: Vec<String> = (0..20).map(|i| format!("h{i:02}.test:{port}")).collect();
    let mut proxy = TestProxy::start(|c| {
        for h in &hosts {
            resolve_to_loopback(c, h, port);
        }
    })
    .await;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut cmd = std::process::Command::new("scrapy");
    cmd.arg("runspider")
        .arg(root.join("bench/scrapy_pause.py"))
        .args(["-a", &format!("hosts={}", hosts.join(","))])
        .args(["-a", &format!("pages={PAGES}"), "-a", "paused=h00.test"])
        // Stops by itself should anything go wrong.
        .args(["-s", "CLOSESPIDER_TIMEOUT=180"])
        // The package from the repository, as `pip install` would give it.
        .env("PYTHONPATH", root.join("clients/scrapy-mannerly"))
        .env("http_proxy", proxy.url())
        .env_remove("no_proxy")
        .env_remove("NO_PROXY");
    let stdout = tool_stdout(cmd).await;
    let report = stdout
        .lines()
        .find_map(|l| l.strip_prefix("scrapy: "))
        .unwrap_or_else(|| panic!("no report: {stdout}"));
    let report: serde_json::Value = serde_json::from_str(report).unwrap();
    for h in &hosts {
        let name = h.split(':').next().unwrap();
        assert_eq!(report["pages"][name], PAGES, "{name}: {report}");
    }
    assert!(report["rescheduled"].as_u64().unwrap() > 0, "{report}");

    let seen = seen.lock().unwrap().clone();
    let throttles: Vec<_> = seen.iter().filter(|(_, _, s)| *s == 429).collect();
    assert_eq!(throttles.len(), 1, "no 429 but the one that paused it");
    let pause_end = throttles[0].0 + Duration::from_secs(PAUSE);
    let (paused, others): (Vec<_>, Vec<_>) = seen
        .iter()
        .filter(|(_, _, s)| *s == 200)
        .partition(|(_, h, _)| h == "h00.test");
    assert_eq!(others.len(), 19 * PAGES);
    assert_eq!(paused.len(), PAGES);
    // No slot waited for the paused host: every other page came inside
    // its pause.
    let last_other = others.iter().map(|(t, ..)| *t).max().unwrap();
    assert!(
        last_other < pause_end,
        "the other hosts' last page came {:?} after the pause ended",
        last_other - pause_end
    );
    assert!(paused.iter().all(|(t, ..)| *t >= pause_end));
    let lines = proxy.stop().await;
    let told_at_once = lines
        .iter()
        .filter(|l| l["host"] == "h00.test" && l["wait_by"] == "client" && l["status"] == 503);
    assert!(
        told_at_once.count() > 0,
        "the paused host's requests were answered at once"
    );
}

/// The middleware's own unit tests (the fields it reads), run with the
/// Python the crawl uses.
#[tokio::test]
async fn the_middlewares_field_readers_pass_their_tests() {
    if !have_tool("scrapy", "python3-pip (pip install scrapy)") {
        return;
    }
    let pkg = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/scrapy-mannerly");
    let mut cmd = std::process::Command::new("python3");
    cmd.args(["-m", "unittest", "discover", "-v", "-s"])
        .arg(pkg.join("tests"))
        .env("PYTHONPATH", &pkg);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("Ran 3 tests"), "{said}");
}
