//! The host's own invariants, on a hand-moved clock.

use super::*;

#[test]
fn a_robots_lookup_between_requests_leaves_the_burst_whole() {
    let p = crate::budget::BudgetParams {
        burst: 3,
        start_rate: 1.0,
        max_rate: 1.0,
        queue_limit: 0,
        ..Default::default()
    }
    .validate()
    .unwrap()
    .for_host("example.com");
    // The test's clock starts from one real instant and is moved by hand.
    #[allow(clippy::disallowed_methods)]
    let now = Instant::now();
    let mut b = HostBudget::new(&p, now);
    for i in 0..3 {
        b.set_crawl_delay(&p, now, None);
        assert!(matches!(b.admit(&p, now), Reservation::Go), "request {i}");
    }
    assert!(
        !matches!(b.admit(&p, now), Reservation::Go),
        "the fourth waits"
    );
}

#[test]
fn a_host_is_152_bytes() {
    assert_eq!(std::mem::size_of::<HostBudget>(), 152);
}
