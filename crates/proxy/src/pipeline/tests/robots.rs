//! Step 1, robots: the site's robots.txt, fetched once from a test origin
//! on 127.0.0.1, allows, refuses (with the rule), or cannot be known; its
//! Crawl-delay reaches the budget and its Content-Signal the crawl's
//! declared purposes. Real time: these send over sockets.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request};
use mannerly_policy::robots::Purpose;
use mannerly_policy::Outcome;

use super::origin::{reply, Origin};
use super::{request, stopped, Fixture, Step};
use crate::config::Config;
use crate::error::Source;
use crate::pipeline::Exchange;

/// An origin whose robots.txt is `rules`; every other path is a page.
async fn site(rules: &'static str) -> Origin {
    Origin::start(move |path| match path {
        "/robots.txt" => Some(reply("200 OK", &[("content-type", "text/plain")], rules)),
        _ => Some(reply("200 OK", &[], "page")),
    })
    .await
}

/// `GET path` on `origin` walked through the robots step.
async fn check(f: &Fixture, origin: &Origin, path: &str) -> (Exchange, Step<()>) {
    let parts = request(Method::GET, &origin.url(path), &[]);
    let mut x = f.begin(&parts);
    let checked = x.robots(&Request::from_parts(parts, ())).await;
    (x, checked)
}

/// How many times `origin` was asked for its robots.txt.
fn robots_fetches(origin: &Origin) -> usize {
    let asked = origin.heads();
    asked
        .iter()
        .filter(|h| h.starts_with("GET /robots.txt "))
        .count()
}

const PRIVATE: &str = "User-agent: *\nDisallow: /private\n";

#[tokio::test]
async fn a_disallowed_path_is_refused_with_its_rule_and_an_allowed_one_passes() {
    let origin = site(PRIVATE).await;
    let f = Fixture::local(Config::default()).await;
    let (x, checked) = check(&f, &origin, "/private/report").await;
    let stop = stopped(checked, Outcome::Disallowed, 403, Source::Policy);
    assert_eq!(
        stop.reason(),
        "robots.txt: disallowed by Disallow: /private (line 2, group *)"
    );
    let details = vec![
        ("rule", "Disallow: /private".to_string()),
        ("line", "2".to_string()),
        ("group", "*".to_string()),
    ];
    assert_eq!(stop.details(), details);
    assert_eq!(
        x.rec.rule.as_deref(),
        Some("disallowed by Disallow: /private (line 2, group *)")
    );

    let (x, checked) = check(&f, &origin, "/public").await;
    assert!(checked.is_ok());
    assert_eq!(x.rec.would, None);
    assert_eq!(robots_fetches(&origin), 1, "fetched once for both");
}

#[tokio::test]
async fn observe_mode_lets_a_disallowed_path_through_and_says_what_would_be() {
    let origin = site(PRIVATE).await;
    let mut cfg = Config::default();
    cfg.policy.enforce = false;
    let f = Fixture::local(cfg).await;
    let (x, checked) = check(&f, &origin, "/private/report").await;
    assert!(checked.is_ok());
    assert_eq!(x.rec.would, Some(Outcome::Disallowed));
}

#[tokio::test]
async fn robots_txt_itself_is_never_checked_against_itself() {
    let origin = site(PRIVATE).await;
    let f = Fixture::local(Config::default()).await;
    let (_, checked) = check(&f, &origin, "/robots.txt").await;
    assert!(checked.is_ok());
    assert!(origin.heads().is_empty(), "nothing was fetched");
}

#[tokio::test]
async fn a_robots_txt_that_fails_refuses_everything_until_its_retry() {
    let origin = Origin::start(|_| Some(reply("503 Service Unavailable", &[], ""))).await;
    let f = Fixture::local(Config::default()).await;
    let (_, checked) = check(&f, &origin, "/page").await;
    let stop = stopped(checked, Outcome::RobotsUnavailable, 503, Source::Policy);
    let retry = f.shared.cfg.robots.retry_min_secs;
    assert_eq!(stop.retry_after(), Some(retry as u64));
    assert!(
        stop.reason()
            .ends_with("; the site's rules cannot be known, so nothing is fetched"),
        "{}",
        stop.reason()
    );
}

#[tokio::test]
async fn a_robots_txt_answered_429_is_fetched_again_after_the_pause() {
    // A limiter without a burst refuses robots.txt when it comes right
    // after another request of the site: the 429 says "not so soon", not
    // "unreachable", so the page waiting on it is not refused for it.
    let asked = Arc::new(AtomicUsize::new(0));
    let count = asked.clone();
    let origin = Origin::start(move |path| match path {
        "/robots.txt" if count.fetch_add(1, Ordering::SeqCst) == 0 => {
            Some(reply("429 Too Many Requests", &[("retry-after", "1")], ""))
        }
        "/robots.txt" => Some(reply("200 OK", &[], PRIVATE)),
        _ => Some(reply("200 OK", &[], "page")),
    })
    .await;
    let f = Fixture::local(Config::default()).await;
    let (_, checked) = check(&f, &origin, "/public").await;
    assert!(checked.is_ok());
    assert_eq!(robots_fetches(&origin), 2, "the 429, then the file");
    let (_, checked) = check(&f, &origin, "/private/x").await;
    stopped(checked, Outcome::Disallowed, 403, Source::Policy);
    // A 5xx is the site unreachable: fetched once, everything refused.
    let broken = Origin::start(|_| Some(reply("503 Service Unavailable", &[], ""))).await;
    let (_, checked) = check(&f, &broken, "/page").await;
    stopped(checked, Outcome::RobotsUnavailable, 503, Source::Policy);
    assert_eq!(robots_fetches(&broken), 1);
}

#[tokio::test]
async fn a_crawl_delay_reaches_the_hosts_budget() {
    let origin = site("User-agent: *\nCrawl-delay: 3\n").await;
    let f = Fixture::local(Config::default()).await;
    let (_, checked) = check(&f, &origin, "/page").await;
    assert!(checked.is_ok());
    let host = f.shared.budgets.view("127.0.0.1").expect("known host");
    assert_eq!(host.crawl_delay, Some(Duration::from_secs(3)));
}

#[tokio::test]
async fn a_content_signal_refusing_the_declared_purpose_is_refused() {
    let origin = site("User-agent: *\nContent-Signal: ai-train=no\n").await;
    let mut cfg = Config::default();
    cfg.crawler.purposes = vec![Purpose::AiTrain];
    let f = Fixture::local(cfg).await;
    let (x, checked) = check(&f, &origin, "/page").await;
    let stop = stopped(checked, Outcome::SignalRefused, 403, Source::Policy);
    let details = vec![
        ("purpose", "ai-train".to_string()),
        ("line", "2".to_string()),
    ];
    assert_eq!(stop.details(), details);
    assert!(
        x.rec.prefs.is_some(),
        "the site's preferences are on the line"
    );
}
