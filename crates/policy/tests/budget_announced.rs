//! Announced limits on a hand-moved clock, with exact numbers.

// Each test starts its hand-moved clock from one real instant.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http::HeaderMap;
use mannerly_policy::budget::{
    Announced, BudgetParams, HostBudget, HostParams, Reaction, Refusal, Reservation, Start,
};

const HOLD: Duration = Duration::from_secs(30);

fn wall() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

fn params(f: impl FnOnce(&mut BudgetParams)) -> HostParams {
    let mut p = BudgetParams::default();
    f(&mut p);
    p.validate().unwrap().for_host("example.com")
}

fn announced(pairs: &[(&'static str, &str)]) -> Announced {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(*k, v.parse().unwrap());
    }
    Announced::from_headers(&h, wall()).unwrap()
}

/// The IETF draft fields of one "default" policy: a quota of `q` per `w`
/// seconds, `r` of it remaining, a unit freed in `t` seconds.
fn ietf(q: u32, w: u32, r: u32, t: u32) -> Announced {
    let policy = format!("\"default\";q={q};w={w}");
    let limit = format!("\"default\";r={r};t={t}");
    announced(&[("ratelimit-policy", &policy), ("ratelimit", &limit)])
}

fn answer(b: &mut HostBudget, p: &HostParams, at: Instant, status: u16, a: &Announced) -> Reaction {
    assert_eq!(b.try_start(p, at, HOLD), Start::Go);
    b.on_answer(p, at, wall(), status, None, Some(a), 0.0)
}

#[test]
fn an_announced_quota_sets_the_pace_at_once_under_the_quota() {
    let p = params(|_| {});
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    assert_eq!(b.admit(&p, t0), Reservation::Go);
    let a = ietf(2, 1, 1, 1);
    // 95% of 2/s: the site said what it takes, so no step-by-step probing.
    assert_eq!(answer(&mut b, &p, t0, 200, &a).rate(), 1.9);
    assert_eq!(b.view(&p, t0).announced_rate, Some(1.9));
    // Slots at 1/1.9 s = 527 ms (rounded up) after the one just used, not
    // 1 s as at the start rate.
    assert_eq!(
        b.admit(&p, t0),
        Reservation::Wait(Duration::from_millis(527))
    );
    assert_eq!(
        b.admit(&p, t0),
        Reservation::Wait(Duration::from_millis(1054))
    );
    // Successes do not climb above the announced cap.
    let later = t0 + Duration::from_millis(527);
    assert_eq!(answer(&mut b, &p, later, 200, &a).rate(), 1.9);
}

/// Several connections to a host that has not answered yet: their slots
/// are spaced at the start rate. The announcement that comes with the first
/// answer re-spaces the queue behind the slot already held, at the
/// announced pace (seed scenario over 8 connections: 1.89 → 1.92 pages/s).
#[test]
fn an_announcement_re_spaces_the_queue_behind_a_slot_already_held() {
    let p = params(|_| {});
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    assert_eq!(b.admit(&p, t0), Reservation::Go);
    // A second connection goes on the first slot's loan; a third holds
    // the next slot, 2 s away at the start rate (it repays the loan).
    assert_eq!(b.admit(&p, t0), Reservation::Go);
    assert_eq!(b.admit(&p, t0), Reservation::Wait(Duration::from_secs(2)));
    let a = ietf(2, 1, 1, 1);
    let at = t0 + Duration::from_millis(5);
    assert_eq!(answer(&mut b, &p, at, 200, &a).rate(), 1.9);
    // The held slot stays; the one after it is 527 ms later, not 1 s.
    assert_eq!(
        b.admit(&p, at),
        Reservation::Wait(Duration::from_millis(2522))
    );
    // A lower announcement spaces the next slot behind that one at its pace.
    let lower = ietf(1, 2, 1, 2);
    let at = t0 + Duration::from_millis(1000);
    assert_eq!(answer(&mut b, &p, at, 200, &lower).rate(), 0.475);
    assert_eq!(
        b.admit(&p, at),
        Reservation::Wait(Duration::from_millis(1527 + 2106))
    );
}

#[test]
fn never_above_max_rate_or_a_ceiling_learned_from_a_429() {
    let p = params(|p| p.max_rate = 4.0);
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    let generous = announced(&[("ratelimit-policy", "\"default\";q=600;w=60")]);
    assert_eq!(answer(&mut b, &p, t0, 200, &generous).rate(), 4.0);
    let t = |ms| t0 + Duration::from_millis(ms);
    assert_eq!(answer(&mut b, &p, t(250), 200, &generous).rate(), 4.0);
    // A 429 at 4/s, 250 ms after a send let through 250 ms after the one
    // before: the sends show one per 250 ms (within the slack for jitter),
    // so the ceiling is 90% of 4/s and the rate goes there at once; the
    // announcement does not lift it.
    let t1 = t(500);
    let r = answer(&mut b, &p, t1, 429, &generous);
    assert_eq!((r.rate(), r.ceiling()), (3.6, 3.6));
    // Ten seconds on the ceiling has relaxed by 0.4 × 10 / 21600 only.
    let t2 = t1 + Duration::from_secs(10);
    let r = answer(&mut b, &p, t2, 200, &generous);
    assert_eq!((r.rate(), r.ceiling()), (3.600185, 3.600185));
}

#[test]
fn nothing_remaining_pauses_until_the_reset_without_a_throttle() {
    let p = params(|_| {});
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    let spent = announced(&[
        ("x-ratelimit-limit", "60"),
        ("x-ratelimit-remaining", "0"),
        // A Unix time: 42 s after `wall()`.
        ("x-ratelimit-reset", "1700000042"),
    ]);
    let r = answer(&mut b, &p, t0, 200, &spent);
    // Not a throttle: the rate is not halved, the ceiling not lowered.
    assert_eq!((r.rate(), r.ceiling()), (1.2, 8.0));
    let v = b.view(&p, t0);
    assert_eq!(v.paused_for, Some(Duration::from_secs(42)));
    assert_eq!(v.recent_throttles, 0);
    assert_eq!(v.breaker_open_for, None);
    // Within the hold the next request waits for the reset, beyond it the
    // client is told how long.
    assert_eq!(
        b.admit(&p, t0),
        Reservation::Refuse(Refusal::Paused {
            retry_after: Duration::from_secs(42)
        })
    );
    let t1 = t0 + Duration::from_secs(20);
    assert_eq!(b.admit(&p, t1), Reservation::Wait(Duration::from_secs(22)));
}

#[test]
fn remaining_over_reset_paces_when_no_window_is_named() {
    let p = params(|_| {});
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    let a = announced(&[
        ("x-ratelimit-limit", "5000"),
        ("x-ratelimit-remaining", "90"),
        ("x-ratelimit-reset", "60"),
    ]);
    // 90 left over 60 s: 1.5/s, paced at 95%.
    assert_eq!(answer(&mut b, &p, t0, 200, &a).rate(), 1.425);
}

#[test]
fn switched_off_the_headers_change_nothing() {
    let p = params(|p| p.announced_limits = false);
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    let a = ietf(2, 1, 0, 5);
    assert_eq!(answer(&mut b, &p, t0, 200, &a).rate(), 1.2);
    assert_eq!(b.view(&p, t0).paused_for, None);
    assert_eq!(b.view(&p, t0).announced_rate, None);
}

#[test]
fn the_announced_cap_survives_the_shared_encoding() {
    let p = params(|_| {});
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    let a = announced(&[("ratelimit-policy", "\"default\";q=2;w=1")]);
    answer(&mut b, &p, t0, 200, &a);
    let bytes = b.encode(t0, wall());
    let back = HostBudget::decode(&p, &bytes, 0, t0, wall()).unwrap();
    assert_eq!(back.view(&p, t0).announced_rate, Some(1.9));
}
