//! What the budget tells a client, on a hand-moved clock, with exact
//! numbers: the RateLimit fields, the next turn, `Prefer: wait`.

// Each test starts its hand-moved clock from one real instant.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mannerly_policy::budget::{
    prefer_wait, BudgetParams, HostBudget, HostParams, Reservation, Start, Told, TurnWhy,
};

const HOLD: Duration = Duration::from_secs(30);

fn params(f: impl FnOnce(&mut BudgetParams)) -> HostParams {
    let mut p = BudgetParams::default();
    f(&mut p);
    p.validate().unwrap().for_host("example.com")
}

fn wall() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

#[test]
fn a_fresh_host_at_two_per_second_tells_its_quota_and_one_free_turn() {
    let p = params(|p| p.start_rate = 2.0);
    let t0 = Instant::now();
    let b = HostBudget::new(&p, t0);
    let told = Told::of(&b.view(&p, t0));
    assert_eq!(told.policy_item(), "\"host\";q=2;w=1");
    assert_eq!(told.limit_item(), "\"host\";r=1;t=0");
}

#[test]
fn a_used_slot_leaves_nothing_until_the_next_one() {
    let p = params(|p| {
        p.start_rate = 0.5;
        p.floor_rate = 0.1;
    });
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    // A fresh host lends its first slot to the second request (robots.txt
    // and the page behind it); the third waits two intervals.
    assert_eq!(b.admit(&p, t0), Reservation::Go);
    assert_eq!(b.view(&p, t0).next_turn().why, TurnWhy::Now);
    assert_eq!(b.admit(&p, t0), Reservation::Go);
    let view = b.view(&p, t0 + Duration::from_millis(500));
    assert_eq!(view.next_turn().why, TurnWhy::Paced);
    assert_eq!(view.next_turn().in_, Duration::from_millis(3500));
    let told = Told::of(&view);
    // 0.5/s is one request every 2 s; the next turn 3.5 s away is told as 4.
    assert_eq!((told.quota, told.window_s), (1, 2));
    assert_eq!((told.remaining, told.reset_s), (0, 4));
    assert_eq!(
        b.admit(&p, t0 + Duration::from_millis(500)),
        Reservation::Wait(Duration::from_millis(3500)),
        "the turn told is the turn given"
    );
    // At the slot after that one, one is free again.
    let told = Told::of(&b.view(&p, t0 + Duration::from_secs(6)));
    assert_eq!((told.remaining, told.reset_s), (1, 0));
}

#[test]
fn a_burst_tells_what_is_left_of_it() {
    let p = params(|p| {
        p.burst = 3;
        p.concurrency = 8;
        p.start_rate = 1.0;
    });
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    assert_eq!(Told::of(&b.view(&p, t0)).remaining, 3);
    assert_eq!(b.admit_own_within(&p, t0, HOLD), Reservation::Go);
    assert_eq!(Told::of(&b.view(&p, t0)).remaining, 2);
}

#[test]
fn a_rate_of_a_fraction_is_written_never_faster_than_it() {
    let p = params(|p| {
        p.start_rate = 0.3;
        p.floor_rate = 0.1;
    });
    let t0 = Instant::now();
    let told = Told::of(&HostBudget::new(&p, t0).view(&p, t0));
    // 1 per 4 s = 0.25/s <= 0.3/s; 1 per 3 s would be faster.
    assert_eq!((told.quota, told.window_s), (1, 4));
}

#[test]
fn a_learned_pause_is_the_reset_and_nothing_remains() {
    let p = params(|_| {});
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    assert_eq!(b.admit(&p, t0), Reservation::Go);
    assert_eq!(b.try_start(&p, t0, HOLD), Start::Go);
    b.on_response(&p, t0, wall(), 429, Some("60"), 0.0);
    let view = b.view(&p, t0 + Duration::from_millis(10_500));
    let turn = view.next_turn();
    assert_eq!(turn.why, TurnWhy::Paused);
    assert_eq!(turn.in_, Duration::from_millis(49_500));
    let told = Told::of(&view);
    assert_eq!(told.limit_item(), "\"host\";r=0;t=50");
    // The rate was halved by the 429: 1/s to 0.5/s, one per 2 s.
    assert_eq!(told.policy_item(), "\"host\";q=1;w=2");
}

#[test]
fn every_concurrency_slot_taken_is_busy_with_nothing_remaining() {
    let p = params(|p| {
        p.concurrency = 1;
        p.start_rate = 8.0;
    });
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    assert_eq!(b.admit(&p, t0), Reservation::Go);
    assert_eq!(b.try_start(&p, t0, HOLD), Start::Go);
    let view = b.view(&p, t0 + Duration::from_secs(1));
    assert_eq!(view.next_turn().why, TurnWhy::Busy);
    assert_eq!(Told::of(&view).remaining, 0);
}

#[test]
fn prefer_wait_is_read_as_rfc_7240_writes_it() {
    let read = |v: &[&str]| prefer_wait(v.iter().map(|s| s.as_bytes()));
    assert_eq!(read(&["wait=0"]), Some(0));
    assert_eq!(read(&["respond-async, WAIT=10"]), Some(10));
    assert_eq!(read(&["handling=lenient", "wait=\"5\""]), Some(5));
    assert_eq!(read(&["wait=5;foo=bar"]), Some(5));
    assert_eq!(read(&["return=minimal"]), None);
    assert_eq!(read(&["wait=soon"]), None);
    assert_eq!(read(&[]), None);
}
