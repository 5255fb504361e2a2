//! robots.txt through the proxy: refusals that name the rule and send
//! nothing to the origin, RFC 9309 status handling, one fetch per origin.

use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::support::*;

/// An origin with a scripted robots.txt (status, body, delay) and pages.
struct Site {
    status: AtomicU16,
    body: std::sync::Mutex<String>,
    delay_ms: AtomicUsize,
}

fn site(status: u16, body: &str) -> (Arc<Site>, Handler) {
    let s = Arc::new(Site {
        status: AtomicU16::new(status),
        body: std::sync::Mutex::new(body.to_string()),
        delay_ms: AtomicUsize::new(0),
    });
    let s2 = s.clone();
    let h = handler(move |req| {
        let s = s2.clone();
        async move {
            match req.uri().path() {
                "/robots.txt" => {
                    let delay = s.delay_ms.load(Ordering::SeqCst) as u64;
                    // A slow robots.txt on purpose (single-flight tests).
                    tokio::time::sleep(Duration::from_millis(delay)).await;
                    let status = s.status.load(Ordering::SeqCst);
                    if (300..400).contains(&status) {
                        let mut r = text(status, "");
                        r.headers_mut()
                            .insert("location", "/robots.txt".parse().unwrap());
                        return r;
                    }
                    let body = s.body.lock().unwrap().clone();
                    text(status, body)
                }
                p => text(200, format!("page {p}")),
            }
        }
    });
    (s, h)
}

const RULES: &str =
    "User-agent: *\nDisallow: /private/\nAllow: /private/open\n\nUser-agent: ShyBot\nDisallow: /\n";

#[tokio::test]
async fn a_disallowed_path_is_refused_naming_the_rule_and_never_reaches_the_origin() {
    let (_, h) = site(200, RULES);
    let origin = Origin::http(h).await;
    let mut proxy = TestProxy::start(|_| {}).await;
    let c = proxy.client();
    let base = format!("http://127.0.0.1:{}", origin.port());

    let r = c.get(format!("{base}/private/x")).send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(
        decision(&r),
        "disallowed; rule=\"Disallow: /private/\"; line=2; group=*"
    );
    let body = r.text().await.unwrap();
    assert!(
        body.contains("Disallow: /private/ (line 2, group *)"),
        "{body}"
    );

    let r = c.get(format!("{base}/private/open")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "page /private/open");

    let r = c
        .get(format!("{base}/public"))
        .header("user-agent", "ShyBot/2.0 (+https://shy.test)")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(decision(&r).contains("group=ShyBot"), "{}", decision(&r));

    assert_eq!(origin.seen.count("/private/x"), 0);
    assert_eq!(origin.seen.count("/public"), 0);
    assert_eq!(origin.seen.count("/robots.txt"), 1);
    let lines = proxy.stop().await;
    let refused = with_outcome(&lines, "disallowed");
    assert_eq!(refused.len(), 2);
    assert_eq!(refused[0]["status"], 403);
    assert_eq!(
        refused[0]["rule"],
        "disallowed by Disallow: /private/ (line 2, group *)"
    );
    assert_eq!(refused[1]["agent"], "ShyBot");
    let fetched = with_outcome(&lines, "robots_fetched");
    assert_eq!(fetched.len(), 1);
    assert_eq!(fetched[0]["status"], 200);
}

#[tokio::test]
async fn the_configured_agent_wins_over_the_user_agent() {
    let (_, h) = site(200, RULES);
    let origin = Origin::http(h).await;
    let mut proxy = TestProxy::start(|c| c.crawler.agent = "shybot".into()).await;
    let r = proxy
        .client()
        .get(format!("http://127.0.0.1:{}/anything", origin.port()))
        .header("user-agent", "Mozilla/5.0")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(
        decision(&r).contains("rule=\"Disallow: /\"; line=6"),
        "{}",
        decision(&r)
    );
    proxy.stop().await;
}

#[tokio::test]
async fn robots_404_means_everything_is_allowed() {
    let (_, h) = site(404, "");
    let origin = Origin::http(h).await;
    let mut proxy = TestProxy::start(|_| {}).await;
    let r = proxy
        .client()
        .get(format!("http://127.0.0.1:{}/private/x", origin.port()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let lines = proxy.stop().await;
    let f = with_outcome(&lines, "robots_fetched");
    assert_eq!(f[0]["status"], 404);
    assert!(f[0]["reason"].as_str().unwrap().contains("no rules"));
}

#[tokio::test]
async fn robots_500_refuses_everything_until_the_origin_heals() {
    let (s, h) = site(500, "");
    let origin = Origin::http(h).await;
    let mut proxy = TestProxy::start(|_| {}).await;
    let c = proxy.client();
    let url = format!("http://127.0.0.1:{}/page", origin.port());
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 503);
    assert!(decision(&r).starts_with("robots_unavailable"));
    assert!(r.headers().contains_key("retry-after"));
    assert!(r.text().await.unwrap().contains("robots.txt answered 500"));
    assert_eq!(origin.seen.count("/page"), 0);

    s.status.store(200, Ordering::SeqCst);
    *s.body.lock().unwrap() = "User-agent: *\nDisallow: /nope\n".into();
    // Time passing is what is tested: the failure is kept for its retry
    // time (0.2 s, `test_config`), then the file is asked again. A poll
    // would send requests inside the window and change what is counted.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200, "recovered after the origin healed");
    assert_eq!(origin.seen.count("/page"), 1);
    let lines = proxy.stop().await;
    assert_eq!(with_outcome(&lines, "robots_unavailable").len(), 1);
    assert_eq!(with_outcome(&lines, "robots_fetched").len(), 2);
}

#[tokio::test]
async fn an_unreachable_origin_refuses_until_it_comes_back() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut proxy = TestProxy::start(|_| {}).await;
    let c = proxy.client();
    let url = format!("http://127.0.0.1:{port}/page");
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 503);
    assert!(decision(&r).starts_with("robots_unavailable"));
    assert!(r.text().await.unwrap().contains("unreachable"));

    let (_, h) = site(404, "");
    let origin = Origin::http_on(h, port).await;
    // Time passing is what is tested: the failure is kept for its retry
    // time (0.2 s, `test_config`), then the origin is tried again.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(origin.seen.count("/page"), 1);
    proxy.stop().await;
}

#[tokio::test]
async fn a_redirect_loop_makes_robots_unavailable() {
    let (_, h) = site(301, "");
    let origin = Origin::http(h).await;
    let mut proxy = TestProxy::start(|_| {}).await;
    let r = proxy
        .client()
        .get(format!("http://127.0.0.1:{}/page", origin.port()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("redirected too many times"));
    // The first request and five redirects: six fetches, then it gave up.
    assert_eq!(origin.seen.count("/robots.txt"), 6);
    assert_eq!(origin.seen.count("/page"), 0);
    proxy.stop().await;
}

#[tokio::test]
async fn only_the_first_500_kib_of_a_2_mib_file_count() {
    let mut body = String::from("User-agent: *\nDisallow: /early\n");
    while body.len() < 600 * 1024 {
        body.push_str("# filler filler filler filler filler filler filler filler\n");
    }
    body.push_str("Disallow: /late\n");
    while body.len() < 2 * 1024 * 1024 {
        body.push_str("# more filler more filler more filler more filler more\n");
    }
    let (_, h) = site(200, &body);
    let origin = Origin::http(h).await;
    let mut proxy = TestProxy::start(|_| {}).await;
    let c = proxy.client();
    let base = format!("http://127.0.0.1:{}", origin.port());
    assert_eq!(
        c.get(format!("{base}/early"))
            .send()
            .await
            .unwrap()
            .status(),
        403
    );
    assert_eq!(
        c.get(format!("{base}/late")).send().await.unwrap().status(),
        200
    );
    let lines = proxy.stop().await;
    let f = with_outcome(&lines, "robots_fetched");
    assert!(f[0]["bytes"].as_u64().unwrap() <= 600 * 1024, "{}", f[0]);
}

#[tokio::test]
async fn an_expired_copy_is_fetched_again() {
    let (s, h) = site(200, "User-agent: *\nDisallow: /a\n");
    let origin = Origin::http(h).await;
    let mut proxy = TestProxy::start(|c| c.robots.max_age_secs = 0.3).await;
    let c = proxy.client();
    let base = format!("http://127.0.0.1:{}", origin.port());
    assert_eq!(
        c.get(format!("{base}/a")).send().await.unwrap().status(),
        403
    );
    *s.body.lock().unwrap() = "User-agent: *\nDisallow: /b\n".into();
    assert_eq!(
        c.get(format!("{base}/a")).send().await.unwrap().status(),
        403,
        "cached"
    );
    // Time passing is what is tested: the copy's age (0.4 s) past
    // `max_age_secs` (0.3 s).
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        c.get(format!("{base}/a")).send().await.unwrap().status(),
        200
    );
    assert_eq!(
        c.get(format!("{base}/b")).send().await.unwrap().status(),
        403
    );
    assert_eq!(origin.seen.count("/robots.txt"), 2);
    proxy.stop().await;
}

#[tokio::test]
async fn fifty_concurrent_first_requests_share_one_fetch() {
    let (s, h) = site(200, "User-agent: *\nDisallow: /no\n");
    s.delay_ms.store(200, Ordering::SeqCst);
    let origin = Origin::http(h).await;
    let mut proxy = TestProxy::start(|_| {}).await;
    let c = proxy.client();
    let mut tasks = Vec::new();
    for i in 0..50 {
        let c = c.clone();
        let url = format!("http://127.0.0.1:{}/p{i}", origin.port());
        tasks.push(tokio::spawn(async move {
            c.get(url).send().await.unwrap().status()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    assert_eq!(origin.seen.count("/robots.txt"), 1);
    // Known now: the next request does not wait for it.
    let later = format!("http://127.0.0.1:{}/later", origin.port());
    assert_eq!(c.get(later).send().await.unwrap().status(), 200);
    let lines = proxy.stop().await;
    assert_eq!(with_outcome(&lines, "robots_fetched").len(), 1);
    let fetched = with_outcome(&lines, "fetched");
    assert_eq!(fetched.len(), 51);
    // Each line says how long its request waited behind the one fetch.
    for l in &fetched {
        let robots_ms = l["robots_ms"].as_u64();
        if l["url"].as_str().unwrap().ends_with("/later") {
            assert_eq!(robots_ms, None, "{l}");
        } else {
            assert!(robots_ms.is_some_and(|ms| ms >= 150), "{l}");
        }
    }
}

#[tokio::test]
async fn content_signal_refuses_a_declared_purpose_the_site_rejects() {
    let body = "User-agent: *\nContent-Signal: search=yes, ai-train=no\nAllow: /\n";
    let (_, h) = site(200, body);
    let origin = Origin::http(h).await;
    let url = format!("http://127.0.0.1:{}/article", origin.port());

    let mut trainer = TestProxy::start(|c| {
        c.crawler.purposes = vec![mannerly_policy::robots::Purpose::AiTrain];
    })
    .await;
    let r = trainer.client().get(&url).send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(decision(&r), "signal_refused; purpose=ai-train; line=2");
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("Content-Signal: search=yes, ai-train=no"));
    let lines = trainer.stop().await;
    assert_eq!(with_outcome(&lines, "signal_refused").len(), 1);

    let mut indexer = TestProxy::start(|c| {
        c.crawler.purposes = vec![mannerly_policy::robots::Purpose::Search];
    })
    .await;
    assert_eq!(
        indexer.client().get(&url).send().await.unwrap().status(),
        200
    );
    indexer.stop().await;
    assert_eq!(origin.seen.count("/article"), 1);
}

#[tokio::test]
async fn observe_mode_forwards_and_logs_what_would_have_been_refused() {
    let (_, h) = site(200, RULES);
    let origin = Origin::http(h).await;
    let mut proxy = TestProxy::start(|c| c.policy.enforce = false).await;
    let r = proxy
        .client()
        .get(format!("http://127.0.0.1:{}/private/x", origin.port()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(origin.seen.count("/private/x"), 1);
    let lines = proxy.stop().await;
    let f = with_outcome(&lines, "fetched");
    assert_eq!(f[0]["would"], "disallowed");
}

fn robots_check(args: &[&str]) -> (i32, String) {
    let mut all = vec!["robots", "check"];
    all.extend_from_slice(args);
    mannerly(&all, &[("MANNERLY_UPSTREAM__ALLOW_PRIVATE", "true")])
}

#[tokio::test]
async fn robots_check_cli_prints_the_decision_and_exits_0_1_2() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("robots.txt");
    std::fs::write(
        &file,
        "User-agent: *\nCrawl-delay: 2.5\nDisallow: /private/\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();

    let (code, out) = robots_check(&["--robots-file", f, "--agent", "MyBot", "/private/a?b"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("disallowed by Disallow: /private/ (line 3, group *)"),
        "{out}"
    );
    assert!(out.contains("crawl-delay: 2.5 s"), "{out}");

    let (code, out) = robots_check(&["--robots-file", f, "--agent", "", "https://x.test/public"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("allowed"), "{out}");

    let (code, out) = robots_check(&["--robots-file", "/no/such/file", "--agent", "a", "/"]);
    assert_eq!(code, 2, "{out}");

    let (_, h) = site(200, RULES);
    let origin = Origin::http(h).await;
    let url = format!("http://127.0.0.1:{}/private/x", origin.port());
    let (code, out) =
        tokio::task::spawn_blocking(move || robots_check(&["--fetch", "--agent", "x", &url]))
            .await
            .unwrap();
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("line 2"), "{out}");
}

#[test]
fn robots_check_cli_reads_any_scheme_and_refuses_what_is_no_url() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("robots.txt");
    std::fs::write(&file, "User-agent: *\nDisallow: /foo\n").unwrap();
    let f = file.to_str().unwrap();

    let (code, out) = robots_check(&[
        "--robots-file",
        f,
        "--agent",
        "a",
        "ftp://example.net/foo.html",
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("disallowed by Disallow: /foo (line 2, group *)"),
        "{out}"
    );
    let (code, out) = robots_check(&[
        "--robots-file",
        f,
        "--agent",
        "a",
        "ftp://example.net/bar.html",
    ]);
    assert_eq!(code, 0, "{out}");

    for bad in [
        "example.net/foo.html",
        "ftp:/foo",
        "mailto:a@example.net",
        "ftp:///foo",
    ] {
        let (code, out) = robots_check(&["--robots-file", f, "--agent", "a", bad]);
        assert_eq!(code, 2, "{bad}: {out}");
        assert!(out.contains("mannerly robots check:"), "{bad}: {out}");
    }
    let (code, out) = robots_check(&["--fetch", "--agent", "a", "ftp://127.0.0.1/foo"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("http:// or https://"), "{out}");
}

#[test]
fn robots_check_cli_prints_the_preference_verdict_next_to_the_robots_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("robots.txt");
    std::fs::write(
        &file,
        "User-agent: *\nContent-Signal: search=yes, ai-train=no, use=reference\nContent-Usage: /articles/ ai-use=n\nDisallow: /private/\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();

    let (code, out) = robots_check(&[
        "--robots-file",
        f,
        "--agent",
        "a",
        "--purpose",
        "search",
        "--purpose",
        "ai-input",
        "https://x.test/articles/1",
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.starts_with("allowed: no rule matched (group *)"),
        "{out}"
    );
    assert!(
        out.contains(
            "preferences: search=allowed ai-input=disallowed ai-train=disallowed use=reference"
        ),
        "{out}"
    );
    assert!(
        out.contains("refused: ai-input refused by Content-Usage (robots.txt line 3: Content-Usage: /articles/ ai-use=n)"),
        "{out}"
    );

    let (code, out) = robots_check(&[
        "--robots-file",
        f,
        "--agent",
        "a",
        "--purpose",
        "ai-input",
        "https://x.test/other",
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("preferences: nothing declared is refused"),
        "{out}"
    );

    let (code, out) = robots_check(&[
        "--robots-file",
        f,
        "--agent",
        "a",
        "--purpose",
        "search",
        "--use",
        "full",
        "/other",
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("refused: use=full refused by Content-Signal (robots.txt line 2"),
        "{out}"
    );

    let (code, out) = robots_check(&["--robots-file", f, "--agent", "a", "--use", "most", "/"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("unknown use"), "{out}");
}

/// RFC 3986 §5.2: a redirect of robots.txt to `?v=2` stays on
/// `/robots.txt`, and `HTTP://` is a scheme like `http://`. Both origins'
/// rules are read, so the page they disallow is refused unsent.
#[tokio::test]
async fn a_robots_txt_redirect_to_a_query_or_an_upper_case_scheme_is_followed_as_written() {
    let rules = handler(|req| async move {
        let path = req.uri().path_and_query().map_or("", |p| p.as_str());
        match path {
            "/robots.txt" => {
                let mut r = text(301, "");
                r.headers_mut().insert("location", "?v=2".parse().unwrap());
                r
            }
            "/robots.txt?v=2" => text(200, "User-agent: *\nDisallow: /private\n"),
            p => text(200, format!("page {p}")),
        }
    });
    let queried = Origin::http(rules).await;
    let target = queried.port();
    let upper = Origin::http(handler(move |req| async move {
        if req.uri().path() == "/robots.txt" {
            let mut r = text(302, "");
            let to = format!("HTTP://127.0.0.1:{target}/robots.txt?v=2");
            r.headers_mut().insert("location", to.parse().unwrap());
            return r;
        }
        text(200, "page")
    }))
    .await;
    let mut proxy = TestProxy::start(|_| {}).await;
    let c = proxy.client();
    for origin in [&queried, &upper] {
        let url = format!("http://127.0.0.1:{}/private/x", origin.port());
        let r = c.get(&url).send().await.unwrap();
        assert_eq!(r.status(), 403, "{url}");
        assert_eq!(origin.seen.count("/private/x"), 0, "{url}");
    }
    assert_eq!(queried.seen.count("/robots.txt?v=2"), 2);
    assert_eq!(queried.seen.count("/?v=2"), 0);
    proxy.stop().await;
}
