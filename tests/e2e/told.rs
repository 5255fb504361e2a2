//! What the budget tells the crawler, through the proxy: RateLimit fields
//! whose figures are the budget's (its configured rate, a learned pause),
//! Retry-After on every "not now", `Prefer: wait` (RFC 7240) and its
//! configured default, and the next turn on `/hosts/{host}`.

use std::time::{Duration, Instant};

use super::admin::{admin_client, get_json};
use super::support::*;

/// `/limit` draws a 429 with Retry-After: 60; `/robots.txt` asks for a
/// Crawl-delay when the test wants one; anything else is a page.
fn origin_handler(robots: &'static str) -> Handler {
    handler(move |req| async move {
        match req.uri().path() {
            "/robots.txt" => text(200, robots),
            "/limit" => {
                let mut r = text(429, "slow down");
                r.headers_mut().insert("retry-after", "60".parse().unwrap());
                r
            }
            p => text(200, format!("page {p}")),
        }
    })
}

fn header(r: &reqwest::Response, name: &str) -> String {
    let values: Vec<_> = r
        .headers()
        .get_all(name)
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    values.join(", ")
}

/// `"host";r=1;t=0` → (1, 0).
fn limit_figures(field: &str) -> (u64, u64) {
    let ours = field
        .split(',')
        .map(str::trim)
        .find(|m| m.starts_with("\"host\""))
        .unwrap_or_else(|| panic!("no \"host\" member in {field:?}"));
    let param = |k: &str| -> u64 {
        ours.split(';')
            .find_map(|p| p.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("no {k} in {ours:?}"))
            .parse()
            .unwrap()
    };
    (param("r"), param("t"))
}

/// Pauses the origin's host for 60 s: the 429 is answered to the client
/// (the pause is past the hold), and the budget holds the pause.
async fn pause_host(c: &reqwest::Client, port: u16) {
    let r = c
        .get(format!("http://127.0.0.1:{port}/limit"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429, "{}", decision(&r));
}

fn paced_config(c: &mut mannerly_proxy::Config) {
    c.budget.start_rate = 2.0;
    c.budget.max_rate = 2.0;
    c.budget.burst = 1;
    c.budget.concurrency = 4;
    c.budget.max_hold_secs = 5.0;
}

#[tokio::test]
async fn ratelimit_fields_carry_the_configured_rate_and_the_learned_pause() {
    let origin = Origin::http(origin_handler("User-agent: *\nAllow: /\n")).await;
    let mut proxy = TestProxy::start(paced_config).await;
    let c = proxy.client();
    let port = origin.port();
    let r = c
        .get(format!("http://127.0.0.1:{port}/a"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // 2 requests/s is 2 per 1 s window.
    assert_eq!(header(&r, "ratelimit-policy"), "\"host\";q=2;w=1");
    let (remaining, reset) = limit_figures(&header(&r, "ratelimit"));
    // robots.txt and the page went on the first slot and its loan: the
    // next slot is at most one interval (500 ms) away, told as 1 s.
    assert!(remaining <= 1 && reset <= 1, "{remaining} {reset}");
    assert_eq!(remaining == 0, reset == 1, "none left means a turn ahead");

    pause_host(&c, port).await;
    let r = c
        .get(format!("http://127.0.0.1:{port}/b"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    let retry_after: u64 = header(&r, "retry-after").parse().unwrap();
    let policy = header(&r, "ratelimit-policy");
    let (remaining, reset) = limit_figures(&header(&r, "ratelimit"));
    assert_eq!(remaining, 0, "nothing goes while paused");
    assert!((58..=60).contains(&reset), "the pause's end: {reset}");
    assert!(reset.abs_diff(retry_after) <= 1, "{reset} vs {retry_after}");
    // The quota is the rate the 429 left (its line's `rate`), never faster.
    let lines = proxy.stop().await;
    let rate = with_outcome(&lines, "throttled")[0]["rate"]
        .as_f64()
        .unwrap();
    assert!(rate < 2.0, "the 429 slowed the host: {rate}");
    let expected = if rate >= 1.0 {
        format!("\"host\";q={};w=1", rate.floor())
    } else {
        format!("\"host\";q=1;w={}", (1.0 / rate).ceil())
    };
    assert_eq!(policy, expected);
}

#[tokio::test]
async fn an_origins_own_ratelimit_fields_stay_and_ours_follow() {
    let h = handler(|req| async move {
        // robots.txt announces nothing: the page is sent at once.
        if req.uri().path() == "/robots.txt" {
            return text(404, "");
        }
        let mut r = text(200, "page");
        let h = r.headers_mut();
        h.insert(
            "ratelimit-policy",
            "\"day\";q=1000;w=86400".parse().unwrap(),
        );
        h.insert("ratelimit", "\"day\";r=999;t=3600".parse().unwrap());
        r
    });
    let origin = Origin::http(h).await;
    let mut proxy = TestProxy::start(paced_config).await;
    let r = proxy
        .client()
        .get(format!("http://127.0.0.1:{}/x", origin.port()))
        .send()
        .await
        .unwrap();
    // The budget paces under the announced quota at once (95% of
    // 1000/day is one per 91 s), and says so beside the origin's.
    assert_eq!(
        header(&r, "ratelimit-policy"),
        "\"day\";q=1000;w=86400, \"host\";q=1;w=91"
    );
    assert!(header(&r, "ratelimit").starts_with("\"day\";r=999;t=3600, \"host\";r="));
    proxy.stop().await;
}

#[tokio::test]
async fn prefer_wait_0_to_a_paused_host_is_answered_at_once_with_503_and_retry_after() {
    let origin = Origin::http(origin_handler("User-agent: *\nAllow: /\n")).await;
    // A hold longer than the pause: without the preference the request
    // would be held the whole 60 s.
    let mut proxy = TestProxy::start(|c| {
        paced_config(c);
        c.budget.max_hold_secs = 120.0;
    })
    .await;
    let c = proxy.client();
    let port = origin.port();
    let r = c
        .get(format!("http://127.0.0.1:{port}/limit"))
        .header("prefer", "wait=0")
        .send()
        .await
        .unwrap();
    // The origin's own 429, passed on: its retry after the pause is not
    // waited for.
    assert_eq!(r.status(), 429, "{}", decision(&r));
    let started = Instant::now();
    let r = c
        .get(format!("http://127.0.0.1:{port}/page"))
        .header("prefer", "wait=0")
        .send()
        .await
        .unwrap();
    let took = started.elapsed();
    eprintln!("Prefer: wait=0 to a paused host answered in {took:?}");
    assert_eq!(r.status(), 503);
    let retry_after: u64 = header(&r, "retry-after").parse().unwrap();
    assert!((58..=60).contains(&retry_after), "{retry_after}");
    assert_eq!(header(&r, "preference-applied"), "wait=0");
    let d = decision(&r);
    assert!(d.starts_with("paused;"), "{d}");
    assert!(d.contains("wait=0; wait_by=client"), "{d}");
    // Loose on purpose: the pause is 60 s and the hold 120 s.
    assert!(took < Duration::from_secs(1), "{took:?}");
    let lines = proxy.stop().await;
    let line = lines
        .iter()
        .find(|l| l["url"].as_str().is_some_and(|u| u.ends_with("/page")))
        .unwrap();
    assert_eq!(line["outcome"], "paused");
    assert_eq!(line["status"], 503);
    assert_eq!(line["wait_s"], 0);
    assert_eq!(line["wait_by"], "client");
}

#[tokio::test]
async fn prefer_wait_caps_the_hold_of_a_paced_host_and_a_configured_default_does_too() {
    let origin = Origin::http(origin_handler("User-agent: *\nCrawl-delay: 3\n")).await;
    let mut proxy = TestProxy::start(|c| {
        paced_config(c);
        c.proxy.prefer_wait.insert("127.0.0.1".into(), 1);
    })
    .await;
    let c = proxy.client();
    let port = origin.port();
    let url = format!("http://127.0.0.1:{port}/a");
    // The request's own preference wins over the default: held for the
    // Crawl-delay after robots.txt, and sent.
    let r = c
        .get(&url)
        .header("prefer", "wait=10")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "preference-applied"), "wait=10");
    // The next turn is 3 s away: within the 5 s hold, past the client's
    // configured 1 s.
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 503, "{}", decision(&r));
    assert!(decision(&r).contains("wait=1; wait_by=config"));
    assert_eq!(
        header(&r, "preference-applied"),
        "",
        "the client asked nothing"
    );
    let ra: u64 = header(&r, "retry-after").parse().unwrap();
    assert!((2..=3).contains(&ra), "{ra}");
    let lines = proxy.stop().await;
    let refused = with_outcome(&lines, "paced");
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0]["wait_by"], "config");
    let fetched = with_outcome(&lines, "fetched");
    assert!(fetched.iter().all(|l| l.get("wait_by").is_none()));
}

#[tokio::test]
async fn every_not_now_carries_retry_after() {
    let robots_down = handler(|req| async move {
        match req.uri().path() {
            "/robots.txt" => text(503, "down"),
            _ => text(200, "page"),
        }
    });
    let down = Origin::http(robots_down).await;
    let paced = Origin::http(origin_handler("User-agent: *\nCrawl-delay: 30\n")).await;
    let paused = Origin::http(origin_handler("User-agent: *\nAllow: /\n")).await;
    // Hosts of their own: a budget is per host name, whatever the port.
    let names = [
        ("down.test", down.port()),
        ("paced.test", paced.port()),
        ("paused.test", paused.port()),
    ];
    let mut proxy = TestProxy::start(|c| {
        paced_config(c);
        for (name, port) in names {
            resolve_to_loopback(c, &format!("{name}:{port}"), port);
        }
    })
    .await;
    let c = proxy.client();
    let get =
        |name: &str, port: u16, path: &str| c.get(format!("http://{name}:{port}{path}")).send();
    let r = get("paused.test", paused.port(), "/limit").await.unwrap();
    assert_eq!(r.status(), 429);
    // Takes the turn the Crawl-delay then spaces the next one from.
    get("paced.test", paced.port(), "/a").await.unwrap();
    // Each one ends with the same names and wording as the failure table.
    let cases = [
        (
            get("down.test", down.port(), "/a").await.unwrap(),
            "robots_unavailable",
        ),
        (
            get("paced.test", paced.port(), "/b").await.unwrap(),
            "paced",
        ),
        (
            get("paused.test", paused.port(), "/c").await.unwrap(),
            "paused",
        ),
    ];
    for (r, outcome) in cases {
        assert!(decision(&r).starts_with(outcome), "{}", decision(&r));
        let ra: u64 = header(&r, "retry-after")
            .parse()
            .unwrap_or_else(|_| panic!("{outcome}: no Retry-After"));
        assert!(ra >= 1, "{outcome}");
        assert!(!header(&r, "ratelimit").is_empty(), "{outcome}");
    }
    proxy.stop().await;
}

#[tokio::test]
async fn hosts_host_says_when_the_next_turn_is_and_why() {
    let origin = Origin::http(origin_handler("User-agent: *\nAllow: /\n")).await;
    let mut proxy = TestProxy::start(|c| {
        paced_config(c);
        c.admin.listen = "127.0.0.1:0".into();
    })
    .await;
    let admin = format!("http://{}", proxy.admin.expect("admin listener"));
    let c = proxy.client();
    let port = origin.port();
    assert_eq!(
        c.get(format!("http://127.0.0.1:{port}/a"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let (s, host) = get_json(&format!("{admin}/hosts/127.0.0.1")).await;
    assert_eq!(s, 200);
    assert!(
        ["now", "paced"].contains(&host["next_turn"].as_str().unwrap()),
        "{host}"
    );
    // The third request after the loan waits two intervals (1 s) from
    // the first.
    assert!(host["next_turn_in_s"].as_f64().unwrap() <= 1.0, "{host}");
    pause_host(&c, port).await;
    let (_, host) = get_json(&format!("{admin}/hosts/127.0.0.1")).await;
    assert_eq!(host["next_turn"], "paused");
    let left = host["next_turn_in_s"].as_f64().unwrap();
    assert!((55.0..=60.0).contains(&left), "{left}");
    assert!(host["next_turn_at"].as_str().unwrap().ends_with('Z'));
    let r = admin_client()
        .get(format!("{admin}/hosts/127.0.0.1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-type"], "application/json");
    proxy.stop().await;
}

#[test]
fn a_prefer_wait_key_no_client_can_have_or_a_wait_past_a_day_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    for (table, named) in [
        ("{ \"a b\" = 0 }", "proxy.prefer_wait.a b"),
        ("{ \"*\" = 86401 }", "proxy.prefer_wait.*"),
    ] {
        let cfg = dir.path().join("mannerly.toml");
        std::fs::write(&cfg, format!("[proxy]\nprefer_wait = {table}\n")).unwrap();
        let data = dir.path().join("data").display().to_string();
        let (code, out) = mannerly(
            &["run"],
            &[
                ("MANNERLY_CONFIG", cfg.to_str().unwrap()),
                ("MANNERLY_DATA_DIR", &data),
                ("MANNERLY_PROXY__LISTEN", "127.0.0.1:0"),
                ("MANNERLY_ADMIN__LISTEN", ""),
            ],
        );
        assert_ne!(code, 0, "{out}");
        assert!(out.contains(named), "{out}");
    }
}
