//! Step 1a, visit times: a robots.txt `Visit-time` window and the
//! operator's quiet hours, on paused time from the fixture's wall clock
//! (22:13:20 UTC): a host that opens within the hold is waited for exactly
//! that long, one that opens later is answered with when.

use std::time::Duration;

use http::Method;
use mannerly_policy::robots::Robots;
use mannerly_policy::visit::QuietHours;
use mannerly_policy::Outcome;
use tokio::time::Instant;

use super::Fixture;
use crate::config::Config;

const URL: &str = "http://a.test/page";

/// A window opening at 22:14, 40 s after the fixture's wall clock.
const SOON: &str = "User-agent: *\nVisit-time: 2214-2300\nDisallow: /x\n";

fn holding(secs: f64) -> Config {
    let mut cfg = Config::default();
    cfg.budget.max_hold_secs = secs;
    cfg
}

#[tokio::test(start_paused = true)]
async fn a_window_opening_within_the_hold_is_waited_for_exactly() {
    let f = Fixture::new(holding(60.0)).await;
    let mut x = f.exchange(Method::GET, URL);
    let start = Instant::now();
    let stop = x.visit(&Robots::parse(SOON.as_bytes())).await;
    assert_eq!(stop, None);
    assert_eq!(start.elapsed(), Duration::from_secs(40));
    assert_eq!(x.rec.waited_ms, Some(40_000));
    assert_eq!(
        x.rec.reason.as_deref(),
        Some("held 40 s: outside robots.txt line 2: Visit-time: 2214-2300 (22:14-23:00 UTC)")
    );
}

#[tokio::test(start_paused = true)]
async fn a_window_opening_past_the_hold_is_answered_with_when() {
    let f = Fixture::new(holding(30.0)).await;
    let mut x = f.exchange(Method::GET, URL);
    let start = Instant::now();
    let stop = x
        .visit(&Robots::parse(SOON.as_bytes()))
        .await
        .expect("closed");
    assert_eq!(start.elapsed(), Duration::ZERO, "nothing is waited for");
    assert_eq!((stop.outcome(), stop.status()), (Outcome::Paced, 503));
    assert_eq!(stop.retry_after(), Some(40));
    assert!(
        stop.reason().contains("Visit-time: 2214-2300"),
        "{}",
        stop.reason()
    );
}

#[tokio::test(start_paused = true)]
async fn quiet_hours_close_the_hosts_they_name_and_observe_mode_only_says_so() {
    let mut cfg = holding(30.0);
    cfg.budget.quiet_hours = vec![QuietHours {
        hosts: vec!["*.test".into()],
        from: "22:00".into(),
        to: "23:00".into(),
    }];
    let f = Fixture::new(cfg.clone()).await;
    let none = Robots::parse(b"User-agent: *\nDisallow:\n");
    let mut x = f.exchange(Method::GET, URL);
    let stop = x.visit(&none).await.expect("quiet");
    // 22:13:20 to 23:00.
    assert_eq!(stop.retry_after(), Some(2800));
    assert!(stop
        .reason()
        .contains("budget.quiet_hours[0] (22:00-23:00 UTC)"));
    let mut other = f.exchange(Method::GET, "http://a.example/page");
    assert_eq!(other.visit(&none).await, None, "not a host it names");

    cfg.policy.enforce = false;
    let f = Fixture::new(cfg).await;
    let mut x = f.exchange(Method::GET, URL);
    let start = Instant::now();
    let stop = x.visit(&none).await.expect("recorded as would");
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "observe mode holds nothing"
    );
    assert_eq!(x.enforced(Some(stop)), Ok(()));
    assert_eq!(x.rec.would, Some(Outcome::Paced));
}
