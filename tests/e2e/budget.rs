//! Per-host budgets through the proxy: spacing at the rate, the concurrency
//! limit, pauses that keep requests away from the origin, other hosts
//! untouched, throttled reads retried into a 200, the breaker.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::support::*;

/// An origin that records when each request arrived (robots.txt too: the
/// origin counts it like any request), how many pages were in flight at
/// once, and answers 429 to the first `throttle_first` requests of a path
/// starting with `/flaky` and to every request of `/limit`.
struct Recorder {
    arrivals: Mutex<Vec<Instant>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    flaky_left: AtomicUsize,
}

fn recorder(
    delay_ms: u64,
    throttle_first: usize,
    retry_after: &'static str,
) -> (Arc<Recorder>, Handler) {
    let r = Arc::new(Recorder {
        arrivals: Mutex::new(Vec::new()),
        in_flight: AtomicUsize::new(0),
        max_in_flight: AtomicUsize::new(0),
        flaky_left: AtomicUsize::new(throttle_first),
    });
    let r2 = r.clone();
    let h = handler(move |req| {
        let r = r2.clone();
        async move {
            let path = req.uri().path().to_string();
            r.arrivals.lock().unwrap().push(Instant::now());
            if path == "/robots.txt" {
                return text(404, "");
            }
            let now = r.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            r.max_in_flight.fetch_max(now, Ordering::SeqCst);
            // A slow origin on purpose: requests overlap while it works.
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            r.in_flight.fetch_sub(1, Ordering::SeqCst);
            let throttle = path == "/limit"
                || (path.starts_with("/flaky")
                    && r.flaky_left
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok());
            if throttle {
                let mut resp = text(429, "slow down");
                resp.headers_mut()
                    .insert("retry-after", retry_after.parse().unwrap());
                return resp;
            }
            text(200, format!("page {path}"))
        }
    });
    (r, h)
}

#[tokio::test]
async fn held_requests_are_spaced_at_the_rate_and_all_delivered() {
    let (rec, h) = recorder(0, 0, "1");
    let origin = Origin::http(h).await;
    let mut proxy = TestProxy::start(|c| {
        c.budget.start_rate = 5.0;
        c.budget.max_rate = 5.0;
        c.budget.burst = 1;
    })
    .await;
    let c = proxy.client();
    let mut tasks = Vec::new();
    for i in 0..6 {
        let c = c.clone();
        let url = format!("http://127.0.0.1:{}/p{i}", origin.port());
        tasks.push(tokio::spawn(async move {
            c.get(url).send().await.unwrap().status()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200, "held, not refused");
    }
    let mut at = rec.arrivals.lock().unwrap().clone();
    at.sort();
    assert_eq!(at.len(), 7);
    // 5/s: robots.txt and six pages span six 200 ms slots. The exact
    // spacing is proven on paused time (crates/proxy/src/budget/tests.rs);
    // over real sockets only that they were held, with room for a loaded
    // machine delaying single arrivals (unpaced, all arrive within a few ms).
    let span = at[6] - at[0];
    assert!(span >= Duration::from_millis(1000), "{span:?}");
    let lines = proxy.stop().await;
    let fetched = with_outcome(&lines, "fetched");
    assert_eq!(fetched.len(), 6);
    let max_wait = fetched
        .iter()
        .map(|l| l["waited_ms"].as_u64().unwrap())
        .max()
        .unwrap();
    assert!(
        max_wait >= 900,
        "the last request waited for its slot: {max_wait}"
    );
    assert!(fetched.iter().all(|l| l["rate"].as_f64().unwrap() <= 5.0));
}

#[tokio::test]
async fn a_burst_of_three_lets_robots_txt_and_two_pages_go_at_once() {
    let (rec, h) = recorder(0, 0, "1");
    let origin = Origin::http(h).await;
    // One slot each 2 s, three at once: robots.txt takes the first, so two
    // pages go without waiting and the third waits for a slot. Each page's
    // robots check (which lifts a Crawl-delay the site does not set) used
    // to take one of the three.
    let mut proxy = TestProxy::start(|c| {
        c.budget.start_rate = 0.5;
        c.budget.max_rate = 0.5;
        c.budget.burst = 3;
    })
    .await;
    let c = proxy.client();
    for i in 0..3 {
        let url = format!("http://127.0.0.1:{}/b{i}", origin.port());
        assert_eq!(c.get(url).send().await.unwrap().status(), 200);
    }
    assert_eq!(
        rec.arrivals.lock().unwrap().len(),
        4,
        "robots.txt and 3 pages"
    );
    let lines = proxy.stop().await;
    let waited: Vec<u64> = with_outcome(&lines, "fetched")
        .iter()
        .map(|l| l["waited_ms"].as_u64().unwrap())
        .collect();
    assert_eq!(waited.len(), 3);
    assert!(waited[0] < 1000 && waited[1] < 1000, "{waited:?}");
    assert!(
        waited[2] >= 1000,
        "the third page waits for a slot: {waited:?}"
    );
}

#[tokio::test]
async fn the_concurrency_limit_holds() {
    let (rec, h) = recorder(300, 0, "1");
    let origin = Origin::http(h).await;
    let mut proxy = TestProxy::start(|c| c.budget.concurrency = 2).await;
    let c = proxy.client();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let c = c.clone();
        let url = format!("http://127.0.0.1:{}/c{i}", origin.port());
        tasks.push(tokio::spawn(async move {
            c.get(url).send().await.unwrap().status()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    assert_eq!(rec.max_in_flight.load(Ordering::SeqCst), 2);
    assert_eq!(rec.arrivals.lock().unwrap().len(), 1 + 8);
    proxy.stop().await;
}

#[tokio::test]
async fn a_paused_host_gets_429_with_retry_after_and_other_hosts_keep_going() {
    let (rec, h) = recorder(0, 0, "60");
    let limited = Origin::http(h).await;
    let (_, h2) = recorder(0, 0, "60");
    let other = Origin::http(h2).await;
    let lport = limited.port();
    let oport = other.port();
    let mut proxy = TestProxy::start(move |c| {
        c.budget.max_hold_secs = 2.0;
        // The limited host runs at 4/s (robots.txt, then the page, a slot
        // apart), so the 429 is drawn at that pace.
        c.budget.hosts.insert(
            "limited.test".into(),
            mannerly_policy::budget::HostOverride {
                start_rate: Some(4.0),
                max_rate: Some(4.0),
                burst: Some(1),
                ..Default::default()
            },
        );
        for (name, port) in [("limited.test", lport), ("other.test", oport)] {
            resolve_to_loopback(c, &format!("{name}:{port}"), port);
        }
    })
    .await;
    let c = proxy.client();

    // The origin's own 429: its pause (60 s) is longer than the hold, so it
    // is passed on as it came, Retry-After included.
    let r = c
        .get(format!("http://limited.test:{lport}/limit"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert!(decision(&r).starts_with("throttled"), "{}", decision(&r));
    assert_eq!(r.headers()["retry-after"], "60");
    assert_eq!(
        rec.arrivals.lock().unwrap().len(),
        2,
        "robots.txt and /limit"
    );

    // Now the proxy answers by itself, and nothing reaches the origin.
    for path in ["/limit", "/other-page"] {
        let r = c
            .get(format!("http://limited.test:{lport}{path}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 429);
        assert!(decision(&r).starts_with("paused"), "{}", decision(&r));
        let ra: u64 = r.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((55..=60).contains(&ra), "{ra}");
        assert!(r.text().await.unwrap().contains("paused"));
    }
    assert_eq!(rec.arrivals.lock().unwrap().len(), 2);

    // Another host is not slowed at all.
    for i in 0..5 {
        let r = c
            .get(format!("http://other.test:{oport}/o{i}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(decision(&r), "fetched; waited_ms=0");
    }

    let lines = proxy.stop().await;
    let throttled = with_outcome(&lines, "throttled");
    assert_eq!(throttled.len(), 1);
    assert_eq!(throttled[0]["retry_after"], "60");
    assert_eq!(throttled[0]["pause_s"], 60.0);
    // The page went on robots.txt's loan, right behind it: the pace the
    // origin saw is read as two requests in that second (2/s, or less on
    // a loaded machine) and halved; the ceiling is left alone, since the
    // site refused the pair, not a rate.
    let rate = throttled[0]["rate"].as_f64().unwrap();
    let ceiling = throttled[0]["ceiling"].as_f64().unwrap();
    assert_eq!(ceiling, 4.0, "the host's max_rate");
    assert!(rate <= 1.0, "half of at most 2/s: {rate}");
    assert_eq!(with_outcome(&lines, "paused").len(), 2);
}

#[tokio::test]
async fn a_throttled_get_is_retried_after_the_pause_and_reaches_the_client_as_200() {
    let (rec, h) = recorder(0, 1, "1");
    let origin = Origin::http(h).await;
    let mut proxy = TestProxy::start(|_| {}).await;
    let c = proxy.client();
    let started = Instant::now();
    let r = c
        .get(format!("http://127.0.0.1:{}/flaky", origin.port()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "waited out Retry-After: 1"
    );
    assert_eq!(r.text().await.unwrap(), "page /flaky");
    assert_eq!(
        rec.arrivals.lock().unwrap().len(),
        3,
        "robots.txt, 429, 200"
    );

    // A POST is not sent twice: the client gets the 429 itself.
    let r = c
        .post(format!("http://127.0.0.1:{}/limit", origin.port()))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);

    let lines = proxy.stop().await;
    let throttled = with_outcome(&lines, "throttled");
    assert_eq!(throttled.len(), 2);
    assert!(throttled[0]["reason"]
        .as_str()
        .unwrap()
        .contains("sent again"));
    let fetched = with_outcome(&lines, "fetched");
    assert_eq!(fetched.len(), 1);
    assert!(fetched[0]["waited_ms"].as_u64().unwrap() >= 900);
}

#[tokio::test]
async fn five_429s_in_a_minute_open_the_breaker() {
    let (rec, h) = recorder(0, 0, "0");
    let origin = Origin::http(h).await;
    let mut proxy = TestProxy::start(|c| {
        c.budget.max_hold_secs = 1.0;
        c.budget.retry_attempts = 0;
        c.budget.backoff_base_secs = 0.05;
        c.budget.backoff_max_secs = 0.05;
    })
    .await;
    let c = proxy.client();
    let url = format!("http://127.0.0.1:{}/limit", origin.port());
    for _ in 0..4 {
        let r = c.get(&url).send().await.unwrap();
        assert_eq!(r.status(), 429);
        assert!(decision(&r).starts_with("throttled"));
        // Time passing is what is tested: the 0.05 s backoff is over, so
        // the next request reaches the origin and earns its own 429.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The fifth 429 opens the breaker: the client is told so, with the
    // breaker's time, not the origin's Retry-After: 0.
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 429);
    let d = decision(&r);
    assert!(d.starts_with("breaker_open; "), "{d}");
    assert!(d.contains("origin_retry_after=0"), "{d}");
    let ra: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((290..=300).contains(&ra), "{ra}");
    // Past the 0.05 s backoff: what holds the request now is the breaker.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert!(decision(&r).starts_with("breaker_open"), "{}", decision(&r));
    let ra: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((290..=300).contains(&ra), "{ra}");
    assert_eq!(rec.arrivals.lock().unwrap().len(), 1 + 5);
    let lines = proxy.stop().await;
    let opened: Vec<_> = with_outcome(&lines, "breaker_open")
        .into_iter()
        .filter(|l| l["sent"].is_string())
        .collect();
    assert_eq!(opened.len(), 1, "{lines:?}");
    assert_eq!(opened[0]["status"], 429);
    let why = opened[0]["reason"].as_str().unwrap_or_default();
    assert!(why.contains("opened the breaker"), "{why}");
    // Every throttle line says why, whether it was sent again or not.
    for l in with_outcome(&lines, "throttled") {
        assert!(l["reason"].as_str().is_some_and(|r| !r.is_empty()), "{l}");
    }
}

#[tokio::test]
async fn crawl_delay_caps_the_rate() {
    let h = handler(|req| async move {
        if req.uri().path() == "/robots.txt" {
            return text(200, "User-agent: *\nCrawl-delay: 0.5\nAllow: /\n");
        }
        text(200, "ok")
    });
    let origin = Origin::http(h).await;
    let mut proxy = TestProxy::start(|_| {}).await;
    let c = proxy.client();
    for i in 0..3 {
        get_ok(&c, &format!("http://127.0.0.1:{}/d{i}", origin.port())).await;
    }
    let lines = proxy.stop().await;
    let fetched = with_outcome(&lines, "fetched");
    assert!(
        fetched.iter().all(|l| l["rate"].as_f64().unwrap() <= 2.0),
        "{fetched:#?}"
    );
    let waited: u64 = fetched
        .iter()
        .map(|l| l["waited_ms"].as_u64().unwrap())
        .sum();
    assert!(waited >= 900, "three requests at 2/s: {waited}");
}

/// Budgets are per host name: a 429 from one port of 127.0.0.1 pauses its
/// other ports too, and the paused answer names the origin that asked.
#[tokio::test]
async fn a_paused_answer_names_the_origin_whose_429_paused_the_host() {
    let (_, h) = recorder(0, 0, "60");
    let limited = Origin::http(h).await;
    let (other_rec, h2) = recorder(0, 0, "60");
    let other = Origin::http(h2).await;
    let mut proxy = TestProxy::start(|c| c.budget.max_hold_secs = 2.0).await;
    let c = proxy.client();
    let throttling = format!("http://127.0.0.1:{}/", limited.port());
    let r = c.get(format!("{throttling}limit")).send().await.unwrap();
    assert_eq!(r.status(), 429);

    let r = c
        .get(format!("http://127.0.0.1:{}/page", other.port()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    let said = decision(&r);
    assert!(said.starts_with("paused; origin="), "{said}");
    assert!(said.contains(&throttling), "{said}");
    let body = r.text().await.unwrap();
    assert!(
        body.contains(&format!(
            "({throttling} answered it; all ports of a host share its budget)"
        )),
        "{body}"
    );
    assert_eq!(other_rec.arrivals.lock().unwrap().len(), 0);
    let lines = proxy.stop().await;
    assert_eq!(with_outcome(&lines, "paused").len(), 1);
}
