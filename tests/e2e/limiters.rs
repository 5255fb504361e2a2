//! Real rate limiters count every request a client sends, robots.txt and
//! its redirects included: Debian's nginx `limit_req`, Flask-Limiter in its
//! three strategies, express-rate-limit and Apache mod_qos (started here as
//! their users start them, see `examples/limiters.rs`), and a strict "one
//! request per 500 ms" origin. The proxy runs on the default budget; the
//! tests check conduct as the limiter logged it and what the budget
//! learned, not timings.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::limiters_bench::{impatient, Limit, Limiter, Strategy};
use super::support::*;

const PAGES: usize = 20;

/// An impatient client (`PAGES` GETs at 5/s, nothing done about 429s)
/// through the proxy on its default budget, against nginx with `limit`.
async fn crawl_nginx(limit: Limit) {
    if !have_tool("nginx", "nginx-light") {
        return;
    }
    let limiter = Limiter::start(limit).expect("nginx starts");
    let mut proxy = TestProxy::start(|c| c.budget = Default::default()).await;
    let base = format!("http://127.0.0.1:{}", limiter.port);
    let crawl = impatient(&proxy.client(), &base, PAGES).await;
    let lines = proxy.stop().await;
    let served = limiter.served();

    // Every page delivered, robots.txt fetched once and counted by nginx.
    assert_eq!((crawl.delivered, crawl.refused), (PAGES, 0), "{served:?}");
    assert_eq!((served.robots, served.pages), (1, PAGES), "{served:?}");
    assert_eq!(served.statuses[0], ("/robots.txt".to_string(), 200));
    // The first page went on robots.txt's slot, at once: a limit with a
    // burst lets it in, one without refuses it, and the proxy learns two
    // requests a second from that (the page is sent again after the pause).
    let first = match limit {
        Limit::NginxBurst5 => 200,
        _ => 429,
    };
    assert_eq!(
        served.statuses[1],
        ("/page/0".to_string(), first),
        "{served:?}"
    );
    // At most the goal's two 429s, each one learned from.
    assert!(served.throttled <= 2, "{served:?}");
    assert_eq!(with_outcome(&lines, "throttled").len(), served.throttled);
    assert_eq!(with_outcome(&lines, "robots_fetched").len(), 1);
}

/// Whether `limit`'s limiter is installed; a test that needs a missing one
/// skips with a message, and fails when CI is set.
fn have_limiter(limit: Limit) -> bool {
    let found = match limit {
        Limit::Nginx(_) | Limit::NginxBurst5 => return have_tool("nginx", "nginx-light"),
        Limit::Flask(..) => std::process::Command::new("python3")
            .args(["-c", "import flask_limiter"])
            .output()
            .is_ok_and(|o| o.status.success()),
        Limit::Express(_) => std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/limiters/node_modules/express-rate-limit")
            .exists(),
        Limit::Qos(_) => std::path::Path::new("/usr/lib/apache2/modules/mod_qos.so").exists(),
    };
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "{} is needed by this test: {}",
            limit.name(),
            limit.install()
        );
        eprintln!(
            "skipped: {} not installed ({})",
            limit.name(),
            limit.install()
        );
    }
    found
}

/// The impatient client (`LEARN_PAGES` GETs at 5/s) through the proxy on
/// its default budget against `limit`: every page delivered, robots.txt
/// fetched once and counted, at most `most_429s` upstream 429s, and the
/// ceiling the budget ends on between 80% and 100% of the limit.
async fn learn_the_limit(limit: Limit, most_429s: usize) {
    const LEARN_PAGES: usize = 40;
    if !have_limiter(limit) {
        return;
    }
    let limiter = Limiter::start(limit).expect("the limiter starts");
    let mut proxy = TestProxy::start(|c| c.budget = Default::default()).await;
    let base = format!("http://127.0.0.1:{}", limiter.port);
    let crawl = impatient(&proxy.client(), &base, LEARN_PAGES).await;
    let lines = proxy.stop().await;
    let served = limiter.served();
    eprintln!(
        "{}: {}/{LEARN_PAGES} delivered, {} upstream 429s, {:.2} pages/s",
        limit.name(),
        crawl.delivered,
        served.throttled,
        crawl.pages_per_s()
    );
    assert_eq!(
        (crawl.delivered, crawl.refused),
        (LEARN_PAGES, 0),
        "{served:?}"
    );
    assert_eq!(
        (served.robots, served.pages),
        (1, LEARN_PAGES),
        "{served:?}"
    );
    assert!(served.throttled <= most_429s, "{served:?}");
    assert_eq!(with_outcome(&lines, "throttled").len(), served.throttled);
    let rate = f64::from(limit.rate());
    let ceiling = lines
        .iter()
        .rev()
        .filter(|l| l["outcome"] == "fetched")
        .find_map(|l| l["ceiling"].as_f64())
        .unwrap_or(0.0);
    // Once a 429 has been drawn the ceiling is what was learned from it;
    // a limiter that announces its limit may draw none, and is paced under
    // the announcement instead (`announced` on the lines).
    if served.throttled > 0 {
        assert!(
            (0.8 * rate..=rate).contains(&ceiling),
            "ceiling {ceiling} against {rate}/s: {served:?}"
        );
    } else {
        assert!(
            lines.iter().any(|l| l.get("announced").is_some()),
            "{served:?}"
        );
    }
}

#[tokio::test]
async fn flask_limiter_fixed_window_is_learned() {
    learn_the_limit(Limit::Flask(Strategy::Fixed, 2), 3).await;
}

#[tokio::test]
async fn flask_limiter_moving_window_is_learned() {
    learn_the_limit(Limit::Flask(Strategy::Moving, 3), 2).await;
}

#[tokio::test]
async fn flask_limiter_sliding_window_counter_is_learned() {
    learn_the_limit(Limit::Flask(Strategy::SlidingCounter, 2), 2).await;
}

#[tokio::test]
async fn express_rate_limit_is_paced_by_what_it_announces_or_learned() {
    learn_the_limit(Limit::Express(3), 2).await;
}

/// mod_qos counts 2 s windows from the client's first request and refuses
/// the request that reaches its count: a fixed window whose edges the climb
/// runs past, so a third 429 can come before its window is learned (the
/// goal of two is not met here: bench/README.md).
#[tokio::test]
async fn apache_mod_qos_is_learned() {
    learn_the_limit(Limit::Qos(2), 3).await;
}

/// mod_qos at 6 per 2 s: the climb's six pass in under a second, the
/// sends fit 6 per 1 s (faster than the pace let through) as well as 6 per
/// 2 s, and the guess above that pace (3/s) is held at 90%; at other
/// phases of the clock the second 429 is read weighed by the phases
/// (docs/budgets.md). nginx `burst=5`'s climb looks the same and puts its
/// limit below the pace: `nginx_limit_req_with_a_burst_is_probed_past_at_most_twice`
/// is the guess's other side.
#[tokio::test]
async fn apache_mod_qos_six_per_two_seconds_is_guessed_from_the_pace() {
    learn_the_limit(Limit::Qos(3), 2).await;
}

#[tokio::test]
async fn nginx_limit_req_without_burst_sees_robots_txt_and_pages_in_its_pace() {
    crawl_nginx(Limit::NO_BURST).await;
}

#[tokio::test]
async fn nginx_limit_req_with_a_burst_is_probed_past_at_most_twice() {
    crawl_nginx(Limit::NginxBurst5).await;
}

/// The operator's burst against the site's own: nginx `limit_req 2r/s
/// burst=5 nodelay` lets six requests in at once. A budget of 2/s with a
/// burst of 5 sends robots.txt and four pages at once, nginx refuses none,
/// and only the pages past the burst wait for a slot. (Each page's robots
/// check used to take a slot of the burst: the second page waited.)
#[tokio::test]
async fn a_burst_below_nginx_limit_req_burst_goes_at_once_and_draws_no_429() {
    if !have_tool("nginx", "nginx-light") {
        return;
    }
    let limiter = Limiter::start(Limit::NginxBurst5).expect("nginx starts");
    let mut proxy = TestProxy::start(|c| {
        c.budget = Default::default();
        c.budget.start_rate = 2.0;
        c.budget.max_rate = 2.0;
        c.budget.burst = 5;
    })
    .await;
    let c = proxy.client();
    for i in 0..6 {
        let url = format!("http://127.0.0.1:{}/page/{i}", limiter.port);
        let r = c.get(url).send().await.unwrap();
        assert_eq!(r.status(), 200, "{}", decision(&r));
    }
    let lines = proxy.stop().await;
    let served = limiter.served();
    assert_eq!(
        (served.robots, served.pages, served.throttled),
        (1, 6, 0),
        "{served:?}"
    );
    let waited: Vec<u64> = with_outcome(&lines, "fetched")
        .iter()
        .map(|l| l["waited_ms"].as_u64().unwrap())
        .collect();
    assert_eq!(waited.len(), 6);
    // A slot each 500 ms: the four pages in the burst do not wait for one,
    // the fifth does.
    assert!(waited[..4].iter().all(|&w| w < 250), "{waited:?}");
    assert!(waited[4] >= 250, "{waited:?}");
}

/// Answers 429 to any request less than 500 ms after the last one it let
/// in (what `limit_req rate=2r/s` without a burst does); robots.txt is a
/// redirect to /robots-real.txt.
fn strict_origin(log: Arc<Mutex<Vec<(String, u16)>>>) -> Handler {
    let last: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    handler(move |req| {
        let (log, last) = (log.clone(), last.clone());
        async move {
            let path = req.uri().path().to_string();
            let now = Instant::now();
            let status = {
                let mut last = last.lock().unwrap();
                match *last {
                    Some(t) if now.duration_since(t).as_millis() < 500 => 429,
                    _ => {
                        *last = Some(now);
                        if path == "/robots.txt" {
                            301
                        } else {
                            200
                        }
                    }
                }
            };
            log.lock().unwrap().push((path.clone(), status));
            let mut r = text(status, "");
            if status == 301 {
                r.headers_mut()
                    .insert("location", "/robots-real.txt".parse().unwrap());
            }
            r
        }
    })
}

#[tokio::test]
async fn each_redirect_of_a_robots_txt_fetch_takes_its_own_turn() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let origin = Origin::http(strict_origin(log.clone())).await;
    let mut proxy = TestProxy::start(|c| c.budget = Default::default()).await;
    let r = proxy
        .client()
        .get(format!("http://127.0.0.1:{}/page", origin.port()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", decision(&r));
    let seen = log.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            ("/robots.txt".to_string(), 301),
            ("/robots-real.txt".to_string(), 200),
            ("/page".to_string(), 200),
        ]
    );
    let lines = proxy.stop().await;
    assert_eq!(with_outcome(&lines, "robots_fetched").len(), 1);
}
