//! TDMRep's `/.well-known/tdmrep.json` through the proxy: fetched once per
//! origin (and only for a crawl declaring a text-and-data-mining purpose),
//! paced by the host's budget, its reservations refusing before anything is
//! sent (or annotating, or observed), its failures handled as robots.txt's.

use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mannerly_policy::prefs::ResponsePreferences;
use mannerly_policy::robots::Purpose;

use super::support::*;

/// The report's second example, word for word (the policy crate's tests
/// read the same file).
const THREE_GROUPS: &str =
    include_str!("../../crates/policy/tests/corpus/tdmrep/three-groups.json");

const TDMREP: &str = "/.well-known/tdmrep.json";

/// An origin whose tdmrep.json answers `status` (the example with 200,
/// `Retry-After: 120` with 429) and whose pages all answer 200.
async fn origin(status: Arc<AtomicU16>) -> (Origin, Arc<Seen>) {
    let h = handler(move |req| {
        let status = status.load(Ordering::SeqCst);
        async move {
            match req.uri().path() {
                "/robots.txt" => text(200, "User-agent: *\nAllow: /\n"),
                TDMREP if status == 200 => {
                    let mut r = text(200, THREE_GROUPS);
                    r.headers_mut()
                        .insert("content-type", "application/json".parse().unwrap());
                    r
                }
                TDMREP if status == 429 => {
                    let mut r = text(status, "no");
                    r.headers_mut()
                        .insert("retry-after", "120".parse().unwrap());
                    r
                }
                TDMREP => text(status, "no"),
                _ => text(200, "a page"),
            }
        }
    });
    let origin = Origin::http(h).await;
    let seen = origin.seen.clone();
    (origin, seen)
}

fn purposes(c: &mut mannerly_proxy::Config, p: &[Purpose]) {
    c.crawler.purposes = p.to_vec();
}

/// One GET of `url` through a proxy declaring `declared`: its status and
/// the proxy's audit lines.
async fn one_get(declared: &[Purpose], url: &str) -> (u16, Vec<serde_json::Value>) {
    let mut proxy = TestProxy::start(|c| purposes(c, declared)).await;
    let r = proxy.client().get(url).send().await.unwrap();
    (r.status().as_u16(), proxy.stop().await)
}

#[tokio::test]
async fn the_files_reservations_refuse_before_sending_and_it_is_fetched_once() {
    let (origin, seen) = origin(Arc::new(AtomicU16::new(200))).await;
    let base = format!("http://127.0.0.1:{}", origin.port());
    let mut proxy = TestProxy::start(|c| purposes(c, &[Purpose::Search, Purpose::AiTrain])).await;
    let client = proxy.client();

    let r = client
        .get(format!("{base}/directory-a/report.pdf"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(decision(&r), "signal_refused; purpose=ai-train; rule=1");
    let body = r.text().await.unwrap();
    assert!(
        body.contains("ai-train refused by tdm-reservation (tdmrep.json rule 1: location /directory-a/, tdm-reservation 1)"),
        "{body}"
    );
    let r = client
        .get(format!("{base}/directory-b/html/index.html"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(decision(&r), "signal_refused; purpose=ai-train; rule=2");
    for (path, want) in [
        ("/directory-b/images/photo.jpg", 200),
        ("/directory-b/images/photo.png", 200),
        ("/elsewhere", 200),
    ] {
        let r = client.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(r.status().as_u16(), want, "{path}");
        assert_eq!(r.text().await.unwrap(), "a page");
    }
    assert_eq!(seen.count(TDMREP), 1, "fetched once for the origin");
    assert_eq!(seen.count("/directory-a/report.pdf"), 0, "nothing was sent");
    assert_eq!(seen.count("/directory-b/html/index.html"), 0);
    assert_eq!(seen.count("/directory-b/images/photo.jpg"), 1);
    // robots.txt first, then the file, then the pages.
    let order: Vec<String> = seen.all().iter().map(|r| r.path.clone()).collect();
    assert_eq!(&order[..2], ["/robots.txt", TDMREP], "{order:?}");

    let lines = proxy.stop().await;
    let fetch = with_outcome(&lines, "tdmrep_fetched");
    assert_eq!(fetch.len(), 1);
    assert_eq!(fetch[0]["status"], 200);
    assert_eq!(fetch[0]["url"], format!("{base}{TDMREP}"));
    assert_eq!(with_outcome(&lines, "robots_fetched").len(), 1);
    let refused = with_outcome(&lines, "signal_refused");
    assert_eq!(refused.len(), 2);
    assert_eq!(
        refused[0]["rule"],
        "tdmrep.json rule 1: location /directory-a/, tdm-reservation 1"
    );
    assert_eq!(refused[0]["prefs"]["ai-train"], "disallowed");
    assert!(
        refused[0]["prefs"].get("tdm_policy").is_none(),
        "no policy in rule 1"
    );
    assert_eq!(
        refused[1]["prefs"]["tdm_policy"],
        "https://provider.com/policies/policy.json"
    );
    let fetched = with_outcome(&lines, "fetched");
    assert_eq!(fetched.len(), 3);
    assert_eq!(fetched[0]["prefs"]["ai-train"], "allowed", "rule 3 says 0");
    assert!(
        fetched[1]["prefs"].is_null(),
        "no rule: nothing said: {}",
        fetched[1]
    );
}

#[tokio::test]
async fn a_crawl_without_a_tdm_purpose_never_asks_for_the_file() {
    let (origin, seen) = origin(Arc::new(AtomicU16::new(200))).await;
    let base = format!("http://127.0.0.1:{}", origin.port());
    for declared in [&[][..], &[Purpose::Search][..]] {
        let (status, lines) = one_get(declared, &format!("{base}/directory-a/report.pdf")).await;
        assert_eq!(status, 200, "{declared:?}");
        assert!(with_outcome(&lines, "tdmrep_fetched").is_empty());
    }
    assert_eq!(seen.count(TDMREP), 0);
    assert_eq!(seen.count("/directory-a/report.pdf"), 2);
}

#[tokio::test]
async fn annotate_passes_reserved_pages_on_and_observe_records_would() {
    let (origin, seen) = origin(Arc::new(AtomicU16::new(200))).await;
    let url = format!("http://127.0.0.1:{}/directory-a/report.pdf", origin.port());
    let mut proxy = TestProxy::start(|c| {
        purposes(c, &[Purpose::AiInput]);
        c.policy.response_preferences = ResponsePreferences::Annotate;
    })
    .await;
    let r = proxy.client().get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["mannerly-preferences"],
        "refused; ai-input refused by tdm-reservation (tdmrep.json rule 1: location /directory-a/, tdm-reservation 1)"
    );
    assert_eq!(r.text().await.unwrap(), "a page");
    let lines = proxy.stop().await;
    let fetched = with_outcome(&lines, "fetched");
    assert_eq!(fetched[0]["prefs"]["ai-input"], "disallowed");

    let mut proxy = TestProxy::start(|c| {
        purposes(c, &[Purpose::AiTrain]);
        c.policy.enforce = false;
    })
    .await;
    let r = proxy.client().get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let lines = proxy.stop().await;
    let fetched = with_outcome(&lines, "fetched");
    assert_eq!(fetched[0]["would"], "signal_refused");
    assert_eq!(
        fetched[0]["rule"],
        "tdmrep.json rule 1: location /directory-a/, tdm-reservation 1"
    );
    assert_eq!(seen.count("/directory-a/report.pdf"), 2);
}

#[tokio::test]
async fn a_404_means_no_reservation_and_a_5xx_refuses_tdm_for_now() {
    let status = Arc::new(AtomicU16::new(404));
    let (origin, seen) = origin(status.clone()).await;
    let base = format!("http://127.0.0.1:{}", origin.port());
    let (status_seen, lines) = one_get(&[Purpose::AiTrain], &format!("{base}/directory-a/x")).await;
    assert_eq!(status_seen, 200, "no file: nothing reserved");
    let fetch = with_outcome(&lines, "tdmrep_fetched");
    assert_eq!(fetch[0]["status"], 404);
    assert_eq!(
        fetch[0]["reason"],
        "status 404: no rules, everything allowed"
    );

    status.store(503, Ordering::SeqCst);
    let mut proxy = TestProxy::start(|c| purposes(c, &[Purpose::AiTrain])).await;
    let client = proxy.client();
    let r = client
        .get(format!("{base}/directory-a/y"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(
        decision(&r),
        "robots_unavailable; file=tdmrep.json; purpose=ai-train"
    );
    assert!(r.headers().contains_key("retry-after"));
    let body = r.text().await.unwrap();
    assert!(body.contains("tdmrep.json answered 503"), "{body}");
    assert_eq!(seen.count("/directory-a/y"), 0);
    // The file comes back: once the retry time (0.2 s here) is past, it is
    // fetched again and read.
    status.store(200, Ordering::SeqCst);
    // Time passing is what is tested: a request inside the retry time
    // would rightly be refused without a fetch.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let r = client
        .get(format!("{base}/directory-a/y"))
        .send()
        .await
        .unwrap();
    assert_eq!(decision(&r), "signal_refused; purpose=ai-train; rule=1");
    let r = client
        .get(format!("{base}/directory-b/images/a.jpg"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let lines = proxy.stop().await;
    let statuses: Vec<_> = with_outcome(&lines, "tdmrep_fetched")
        .iter()
        .map(|l| l["status"].clone())
        .collect();
    assert_eq!(statuses, [503, 200]);
}

#[tokio::test]
async fn the_fetch_takes_the_hosts_turn_and_a_429_pauses_the_host() {
    let (origin, seen) = origin(Arc::new(AtomicU16::new(429))).await;
    let base = format!("http://127.0.0.1:{}", origin.port());
    let mut proxy = TestProxy::start(|c| purposes(c, &[Purpose::AiTrain])).await;
    let client = proxy.client();
    let r = client.get(format!("{base}/a")).send().await.unwrap();
    assert_eq!(r.status(), 503);
    assert!(decision(&r).starts_with("robots_unavailable; file=tdmrep.json"));
    // The 429 paused the host for 120 s: the next fetch of the file waits
    // for the host's turn like any request, and the pause is longer than
    // the hold. Time passing is what is tested: the file's retry time
    // (0.2 s) is over, so the next request asks for it again.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let r = client.get(format!("{base}/b")).send().await.unwrap();
    assert_eq!(r.status(), 429, "{}", decision(&r));
    assert!(decision(&r).starts_with("paused"), "{}", decision(&r));
    let body = r.text().await.unwrap();
    assert!(body.contains("tdmrep.json cannot be fetched"), "{body}");
    assert_eq!(seen.count(TDMREP), 1);
    assert_eq!(seen.count("/a") + seen.count("/b"), 0);
    let lines = proxy.stop().await;
    let fetch = with_outcome(&lines, "tdmrep_fetched");
    assert_eq!(fetch.len(), 1);
    assert_eq!(fetch[0]["status"], 429);
    assert_eq!(fetch[0]["retry_after"], "120");
}

/// The binary, with a crawl that declares `ai-train` in its environment,
/// against Python's `http.server` serving the report's example from disk.
#[tokio::test]
async fn the_binary_reads_a_static_tdmrep_json_from_a_real_server() {
    if !have_tool("python3", "python3") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let www = dir.path().join("www");
    std::fs::create_dir_all(www.join(".well-known")).unwrap();
    std::fs::create_dir_all(www.join("directory-a")).unwrap();
    std::fs::create_dir_all(www.join("open")).unwrap();
    std::fs::write(www.join(".well-known/tdmrep.json"), THREE_GROUPS).unwrap();
    std::fs::write(www.join("directory-a/report.pdf"), "reserved").unwrap();
    std::fs::write(www.join("open/page.html"), "open page").unwrap();
    let port = free_port();
    let log_path = dir.path().join("server.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut server = std::process::Command::new("python3")
        .args(["-m", "http.server", "--bind", "127.0.0.1"])
        .arg(port.to_string())
        .arg("--directory")
        .arg(&www)
        .stderr(log)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "http.server did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let bin = RunningBinary::start(&data, &[("MANNERLY_CRAWLER__PURPOSES", "ai-train")]);
    let c = bin.client();
    let base = format!("http://127.0.0.1:{port}");
    let r = c
        .get(format!("{base}/directory-a/report.pdf"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(decision(&r), "signal_refused; purpose=ai-train; rule=1");
    let r = c
        .get(format!("{base}/open/page.html"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "open page");
    bin.signal("TERM");
    let mut bin = bin;
    bin.child.wait().unwrap();
    let _ = server.kill();
    let _ = server.wait();

    let served = std::fs::read_to_string(&log_path).unwrap();
    assert_eq!(
        served
            .matches("\"GET /.well-known/tdmrep.json HTTP/1.1\" 200")
            .count(),
        1,
        "{served}"
    );
    assert!(
        served.contains("\"GET /robots.txt HTTP/1.1\" 404"),
        "{served}"
    );
    assert!(
        !served.contains("report.pdf"),
        "refused before sending: {served}"
    );
    let lines = audit_lines(&data.join("audit.jsonl"));
    let fetch = with_outcome(&lines, "tdmrep_fetched");
    assert_eq!(fetch.len(), 1);
    assert_eq!(fetch[0]["status"], 200);
    let refused = with_outcome(&lines, "signal_refused");
    assert_eq!(
        refused[0]["rule"],
        "tdmrep.json rule 1: location /directory-a/, tdm-reservation 1"
    );
}
