//! An operator's reset of one host, on a hand-moved clock.

// Each test starts its hand-moved clock from one real instant.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant, UNIX_EPOCH};

use mannerly_policy::budget::{BudgetParams, HostBudget, Reservation};

#[test]
fn reset_clears_pause_breaker_and_ceiling_but_keeps_crawl_delay() {
    let p = BudgetParams::default()
        .validate()
        .unwrap()
        .for_host("example.com");
    let t0 = Instant::now();
    let wall = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let mut b = HostBudget::new(&p, t0);
    b.set_crawl_delay(&p, t0, Some(0.5));
    // Five 429s inside a minute, each after the previous pause (1 s):
    // paused, breaker open, ceiling lowered.
    for i in 0..5u64 {
        let at = Duration::from_secs(2 * i);
        let _ = b.on_response(&p, t0 + at, wall + at, 429, Some("1"), 0.0);
    }
    let now = t0 + Duration::from_secs(9);
    let report = b.reset(&p, now);
    assert!(report.before.paused_for.is_some());
    assert!(report.before.breaker_open_for.is_some());
    assert!(report.before.ceiling < p.max_rate);
    assert_eq!(report.after.paused_for, None);
    assert_eq!(report.after.breaker_open_for, None);
    assert_eq!(report.after.ceiling, p.max_rate);
    assert_eq!(report.after.recent_throttles, 0);
    assert_eq!(report.after.concurrency, p.concurrency);
    // The rate is back to the start rate, still capped by Crawl-delay (2/s).
    assert_eq!(report.after.rate, p.start_rate.min(2.0));
    assert_eq!(report.after.crawl_delay, Some(Duration::from_millis(500)));
    assert_eq!(b.view(&p, now), report.after);
    assert_eq!(report.after.free_slots, 1, "a turn is free now");
    // And a new request goes now instead of after the breaker's five minutes.
    assert_eq!(b.admit(&p, now), Reservation::Go);
}
