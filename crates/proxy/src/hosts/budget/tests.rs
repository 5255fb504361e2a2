//! The waits of `Budgets::acquire`, on tokio's paused time: exact numbers,
//! no sleeping.

// The tests measure waits on the paused clock they run on.
#![allow(clippy::disallowed_methods)]

use std::sync::Arc;
use std::time::Duration;

use mannerly_policy::budget::{BudgetParams, Refusal};
use mannerly_state::hosts::MemoryHosts;
use tokio::time::Instant;

use mannerly_policy::site::GroupKind;

use super::Budgets;
use crate::clock::Clock;

fn budgets(params: BudgetParams) -> Arc<Budgets> {
    let hosts = MemoryHosts::new(params.clone()).expect("valid test parameters");
    Budgets::new(Arc::new(hosts), Clock::system(), params)
}

fn hold(secs: u64) -> Instant {
    Instant::now() + Duration::from_secs(secs)
}

#[tokio::test(start_paused = true)]
async fn requests_above_the_rate_wait_one_interval_each_in_arrival_order() {
    let b = budgets(BudgetParams::default()); // 1 request/s, burst 1
    let t0 = Instant::now();
    let first = b.acquire("example.org", hold(30)).await.expect("first");
    assert_eq!(Instant::now() - t0, Duration::ZERO);
    // A new host lends its first slot to the second request (a robots.txt
    // fetch and the page behind it); the third pays for both.
    let second = b.acquire("example.org", hold(30)).await.expect("second");
    assert_eq!(Instant::now() - t0, Duration::ZERO);
    first.respond(200, None, None, None).await;
    second.respond(200, None, None, None).await;
    let third = b.acquire("example.org", hold(30)).await.expect("third");
    assert_eq!(Instant::now() - t0, Duration::from_secs(2));
    third.respond(200, None, None, None).await;
    // Another host has its own budget: no wait.
    let t1 = Instant::now();
    let other = b.acquire("other.example", hold(30)).await.expect("other");
    assert_eq!(Instant::now() - t1, Duration::ZERO);
    drop(other);
}

#[tokio::test(start_paused = true)]
async fn a_429_with_retry_after_holds_the_next_request_for_the_pause() {
    let b = budgets(BudgetParams::default());
    let p = b.acquire("example.org", hold(30)).await.expect("first");
    let t0 = Instant::now();
    p.respond(429, Some("7"), None, None).await;
    let next = b.acquire("example.org", hold(30)).await.expect("held");
    assert_eq!(Instant::now() - t0, Duration::from_secs(7));
    drop(next);
}

#[tokio::test(start_paused = true)]
async fn a_pause_longer_than_the_hold_is_refused_at_once_with_its_remaining_time() {
    let b = budgets(BudgetParams::default());
    let p = b.acquire("example.org", hold(30)).await.expect("first");
    p.respond(429, Some("120"), None, None).await;
    tokio::time::advance(Duration::from_secs(20)).await;
    let t0 = Instant::now();
    let refused = b.acquire("example.org", hold(30)).await.map(drop);
    assert_eq!(Instant::now(), t0, "refused without waiting");
    assert_eq!(
        refused,
        Err(Refusal::Paused {
            retry_after: Duration::from_secs(100)
        })
    );
}

#[tokio::test(start_paused = true)]
async fn the_concurrency_limit_holds_a_request_until_a_slot_is_freed() {
    let params = BudgetParams {
        start_rate: 8.0,
        burst: 8,
        concurrency: 1,
        ..BudgetParams::default()
    };
    let b = budgets(params);
    let first = b.acquire("example.org", hold(30)).await.expect("first");
    let t0 = Instant::now();
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            let p = b.acquire("example.org", hold(30)).await;
            (Instant::now() - t0, p.is_ok())
        })
    };
    tokio::time::advance(Duration::from_millis(2500)).await;
    tokio::task::yield_now().await;
    assert!(!waiter.is_finished(), "held while the only slot is taken");
    first.respond(200, None, None, None).await;
    let (waited, ok) = waiter.await.expect("waiter task");
    assert!(ok);
    assert_eq!(waited, Duration::from_millis(2500));
}

#[tokio::test(start_paused = true)]
async fn a_request_still_waiting_when_its_hold_ends_gets_queue_full() {
    let params = BudgetParams {
        concurrency: 1,
        ..BudgetParams::default()
    };
    let b = budgets(params);
    let _busy = b.acquire("example.org", hold(30)).await.expect("first");
    let t0 = Instant::now();
    let refused = b.acquire("example.org", hold(5)).await.map(drop);
    assert_eq!(Instant::now() - t0, Duration::from_secs(5));
    assert!(
        matches!(refused, Err(Refusal::QueueFull { .. })),
        "{refused:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn names_of_one_site_take_turns_in_one_budget() {
    let b = budgets(BudgetParams::default()); // group_by = "site", 1 request/s
    let t0 = Instant::now();
    let names = ["www.example.org", "shop.example.org", "img.example.org"];
    for name in names {
        // Released unanswered: only the pace counts here.
        drop(b.acquire(name, hold(30)).await.expect("turn"));
    }
    // The first slot is lent to the second request; the third waits two
    // intervals, as three requests to one host would.
    assert_eq!(Instant::now() - t0, Duration::from_secs(2));
    assert_eq!(b.group("shop.example.org").key, "example.org");
    assert_eq!(b.views().len(), 1);
    // Only a request's guard step places a host (by its address too).
    for name in names {
        b.place(name, None);
    }
    let members = ["img.example.org", "shop.example.org", "www.example.org"];
    let group = &b.members()["example.org"];
    assert_eq!(group.kind, GroupKind::Site);
    assert_eq!(group.hosts, members);
    assert_eq!(b.key_for("WWW.example.org"), "example.org");
}

#[tokio::test(start_paused = true)]
async fn names_grouped_by_host_each_have_their_own_budget() {
    let params = BudgetParams {
        group_by: mannerly_policy::site::GroupBy::Host,
        ..BudgetParams::default()
    };
    let b = budgets(params);
    let t0 = Instant::now();
    for name in ["www.example.org", "shop.example.org", "img.example.org"] {
        drop(b.acquire(name, hold(30)).await.expect("turn"));
    }
    assert_eq!(Instant::now() - t0, Duration::ZERO);
    assert_eq!(b.views().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_crawl_delay_inside_a_group_spaces_its_host_only() {
    let params = BudgetParams {
        start_rate: 8.0,
        ..BudgetParams::default()
    };
    let b = budgets(params);
    b.set_crawl_delay("slow.example.org", Some(5.0));
    let t0 = Instant::now();
    drop(
        b.acquire("slow.example.org", hold(30))
            .await
            .expect("first"),
    );
    drop(
        b.acquire("www.example.org", hold(30))
            .await
            .expect("sibling"),
    );
    // The sibling waits for the group's pace only (8/s, on the loan).
    assert_eq!(Instant::now() - t0, Duration::ZERO);
    drop(
        b.acquire("slow.example.org", hold(30))
            .await
            .expect("second"),
    );
    // The slow host waits its own 5 s after its own last send.
    assert_eq!(Instant::now() - t0, Duration::from_secs(5));
    // A delay longer than the hold is refused with the time it would take.
    b.set_crawl_delay("slow.example.org", Some(60.0));
    let refused = b.acquire("slow.example.org", hold(30)).await.err();
    assert!(
        matches!(refused, Some(Refusal::Paced { retry_after }) if retry_after == Duration::from_secs(60))
    );
    // The group's own budget carries no delay; its member's shows.
    assert_eq!(b.view("example.org").map(|v| v.crawl_delay), Some(None));
    b.place("slow.example.org", None);
    let group = &b.members()["example.org"];
    assert_eq!(group.crawl_delay, Some(Duration::from_secs(60)));
}

#[tokio::test(start_paused = true)]
async fn lines_no_request_holds_are_bounded_and_a_held_one_stays() {
    let b = budgets(BudgetParams::default());
    let held = b.line("held.test");
    for i in 0..3 * super::LINES_MAX {
        drop(b.line(&format!("h{i}.test")));
    }
    assert!(
        b.lines.len() <= super::LINES_MAX + 1,
        "{} lines kept",
        b.lines.len()
    );
    // The line a request holds was never dropped: it is still the one
    // the next request of its host takes.
    assert!(Arc::ptr_eq(&held, &b.line("held.test")));
    // A real request through it leaves no line behind it past the bound.
    let p = b.acquire("example.org", hold(30)).await.expect("admitted");
    p.respond(200, None, None, None).await;
    assert!(b.lines.len() <= super::LINES_MAX + 1);
}

/// Before a first 429 each success raises the rate by the slow-start
/// factor, but the request behind one in flight reserved its slot when
/// that one went, at the rate before its answer: without bringing the
/// slot forward each step of the climb lags a request behind.
#[tokio::test(start_paused = true)]
async fn an_answer_that_raises_the_rate_brings_the_waiting_slot_forward() {
    let b = budgets(BudgetParams::default()); // 1/s, x1.2 a success
    let robots = b.acquire("example.org", hold(30)).await.expect("robots");
    let page = b
        .acquire("example.org", hold(30))
        .await
        .expect("on the loan");
    robots.respond(200, None, None, None).await;
    page.respond(200, None, None, None).await; // 1.44/s
    let third = b.acquire("example.org", hold(30)).await.expect("third");
    let t3 = Instant::now();
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            let p = b.acquire("example.org", hold(30)).await;
            (Instant::now() - t3, p.map(drop).is_ok())
        })
    };
    tokio::time::advance(Duration::from_millis(10)).await;
    tokio::task::yield_now().await;
    assert!(!waiter.is_finished(), "the fourth waits its interval");
    third.respond(200, None, None, None).await; // 1.728/s: 579 ms
    let (waited, ok) = waiter.await.expect("waiter task");
    assert!(ok);
    assert_eq!(waited, Duration::from_millis(579), "not 1.44/s's 695 ms");
}
