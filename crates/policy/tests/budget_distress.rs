//! Exact tests of what a struggling site shows the budget: timeouts,
//! resets, 502/503/504 without Retry-After, runs of 500s, slow answers.

// Each test starts its hand-moved clock from one real instant.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mannerly_policy::budget::{
    BudgetParams, Distress, Failure, HostBudget, HostParams, Reaction, Refusal, Reservation, Start,
    Strain,
};
use mannerly_policy::Outcome;

const HOLD: Duration = Duration::from_secs(30);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn wall() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

fn with(f: impl FnOnce(&mut BudgetParams)) -> HostParams {
    let mut p = BudgetParams::default();
    f(&mut p);
    p.validate().unwrap().for_host("example.com")
}

fn strain(r: Option<Reaction>) -> Strain {
    match r {
        Some(Reaction::Distressed(s)) => s,
        other => panic!("expected distress, got {other:?}"),
    }
}

fn sent(b: &mut HostBudget, p: &HostParams, at: Instant) {
    assert_eq!(b.admit(p, at), Reservation::Go);
    assert_eq!(b.try_start(p, at, HOLD), Start::Go);
}

#[test]
fn a_timeout_cuts_the_pace_and_a_second_pauses_the_host_and_refuses_at_once() {
    let p = with(|_| {});
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    sent(&mut b, &p, t0);
    sent(&mut b, &p, t0);
    let timeout = Failure::Distress(Distress::FirstByteTimeout);

    let first = strain(b.on_failure(&p, t0 + ms(2000), timeout, 0.0));
    assert_eq!((first.pause, first.rate, first.ceiling), (None, 0.75, 8.0));

    let second = strain(b.on_failure(&p, t0 + ms(3000), timeout, 0.0));
    assert_eq!(
        (second.pause, second.rate, second.breaker_opened),
        (Some(ms(2000)), 0.5625, false)
    );
    // Held 30 s, the 2 s pause would be waited out; a host in distress
    // is answered at once instead.
    let refused = b.admit(&p, t0 + ms(3500));
    let Reservation::Refuse(r) = refused else {
        panic!("expected a refusal, got {refused:?}")
    };
    assert_eq!(
        r,
        Refusal::Distressed {
            retry_after: ms(1500),
            event: Distress::FirstByteTimeout,
            breaker: false
        }
    );
    assert_eq!((r.status(), r.outcome()), (503, Outcome::Distressed));
    let v = b.view(&p, t0 + ms(3500));
    assert_eq!(v.distress, Some(Distress::FirstByteTimeout));
    assert_eq!(v.hold_refusal(), r);
    // At the pause's end the host is open again, one slot at a time.
    assert_eq!(b.admit(&p, t0 + ms(5000)), Reservation::Go);
    assert_eq!(b.view(&p, t0 + ms(5000)).distress, None);
}

#[test]
fn distress_before_a_success_doubles_the_pause_and_opens_the_breaker_on_the_fifth() {
    let p = with(|_| {});
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    let mut at = 0;
    let mut pauses = Vec::new();
    for _ in 0..6 {
        sent(&mut b, &p, t0 + ms(at));
        let s = strain(Some(b.on_response(&p, t0 + ms(at), wall(), 503, None, 0.0)));
        pauses.push((s.pause, s.breaker_opened));
        at += s.pause.map_or(1000, |d| d.as_millis() as u64);
    }
    assert_eq!(
        pauses,
        [
            (None, false),
            (Some(ms(2000)), false),
            (Some(ms(4000)), false),
            (Some(ms(8000)), false),
            (Some(ms(16_000)), false),
            // Five pauses within 60 s: the breaker's 300 s.
            (Some(ms(300_000)), true),
        ]
    );
    let r = b.admit(&p, t0 + ms(at - 1000));
    assert!(
        matches!(
            r,
            Reservation::Refuse(Refusal::Distressed {
                event: Distress::Unavailable,
                breaker: true,
                ..
            })
        ),
        "{r:?}"
    );
}

#[test]
fn a_success_between_two_pauses_starts_the_backoff_afresh() {
    let p = with(|_| {});
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    for at in [0, 1000] {
        sent(&mut b, &p, t0 + ms(at));
        b.on_response(&p, t0 + ms(at), wall(), 504, None, 0.0);
    }
    sent(&mut b, &p, t0 + ms(3000));
    assert!(matches!(
        b.on_response(&p, t0 + ms(3000), wall(), 200, None, 0.0),
        Reaction::Ok { .. }
    ));
    // One event after the success, outside nothing: the window still
    // holds the two before, so it is one too many, but a first strike.
    sent(&mut b, &p, t0 + ms(5000));
    let s = strain(Some(b.on_response(
        &p,
        t0 + ms(5000),
        wall(),
        502,
        None,
        0.0,
    )));
    assert_eq!((s.event, s.pause), (Distress::BadGateway, None));
    sent(&mut b, &p, t0 + ms(8000));
    let s = strain(Some(b.on_response(
        &p,
        t0 + ms(8000),
        wall(),
        502,
        None,
        0.0,
    )));
    assert_eq!(s.pause, Some(ms(2000)));
}

#[test]
fn jitter_takes_up_to_half_the_distress_pause_off() {
    let p = with(|p| p.distress_threshold = 1);
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    sent(&mut b, &p, t0);
    let s = strain(b.on_failure(&p, t0, Failure::Distress(Distress::Reset), 0.5));
    assert_eq!(s.pause, Some(ms(1500)));
}

#[test]
fn an_answer_to_a_request_sent_before_the_pause_neither_lengthens_nor_counts() {
    let p = with(|p| p.distress_threshold = 1);
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    sent(&mut b, &p, t0);
    sent(&mut b, &p, t0);
    let s = strain(b.on_failure(&p, t0, Failure::Distress(Distress::Reset), 0.0));
    assert_eq!((s.pause, s.rate), (Some(ms(2000)), 0.75));
    let echo = strain(b.on_failure(&p, t0 + ms(500), Failure::Distress(Distress::Reset), 0.0));
    assert_eq!((echo.pause, echo.rate), (Some(ms(1500)), 0.75));
    assert_eq!(b.view(&p, t0 + ms(500)).recent_throttles, 1);
}

#[test]
fn a_run_of_500s_is_one_event_and_a_success_breaks_the_run() {
    let p = with(|_| {});
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    let answer = |b: &mut HostBudget, at: u64, status: u16| {
        sent(b, &p, t0 + ms(at));
        b.on_response(&p, t0 + ms(at), wall(), status, None, 0.0)
    };
    assert!(matches!(
        answer(&mut b, 0, 500),
        Reaction::SlowedDown { .. }
    ));
    assert!(matches!(
        answer(&mut b, 2000, 500),
        Reaction::SlowedDown { .. }
    ));
    assert!(matches!(answer(&mut b, 4000, 200), Reaction::Ok { .. }));
    assert!(matches!(
        answer(&mut b, 6000, 500),
        Reaction::SlowedDown { .. }
    ));
    assert!(matches!(
        answer(&mut b, 8000, 500),
        Reaction::SlowedDown { .. }
    ));
    let s = strain(Some(answer(&mut b, 10_000, 500)));
    assert_eq!((s.event, s.pause), (Distress::ServerErrors, None));
    assert_eq!(
        b.view(&p, t0 + ms(10_000)).last_distress,
        Some(Distress::ServerErrors)
    );
}

#[test]
fn slow_answers_cut_rate_and_cap_once_a_second_and_quick_ones_lift_the_cap() {
    let p = with(|p| p.start_rate = 8.0);
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    let at = |n| t0 + ms(n);
    assert_eq!(b.note_latency(&p, at(0), 50), None);
    // Slow is past 2 × 50 and 50 + 100 ms: the average (3 × 50 + 300) / 4
    // = 112 ms is not yet; the next, (3 × 112 + 300) / 4 = 159, is.
    assert_eq!(b.note_latency(&p, at(1000), 300), None);
    let s = b.note_latency(&p, at(1500), 300).expect("a cut");
    assert_eq!(
        (s.event, s.rate, s.ceiling, s.pause),
        (Distress::Slow, 6.0, 6.0, None)
    );
    // Within the second: no second cut.
    assert_eq!(b.note_latency(&p, at(2000), 300), None);
    let s = b.note_latency(&p, at(2600), 300).expect("a second cut");
    assert_eq!((s.rate, s.ceiling), (4.5, 4.5));
    let v = b.view(&p, at(2600));
    assert_eq!((v.latency_baseline_ms, v.latency_ms), (Some(54), Some(220)));
    // Quick answers: the average comes down; the cap climbs only once it
    // is within half-way of the baseline, 0.2 a step.
    let caps: Vec<f64> = (0..8)
        .map(|i| {
            assert_eq!(b.note_latency(&p, at(3000 + 500 * i), 50), None);
            b.view(&p, at(3000 + 500 * i)).ceiling
        })
        .collect();
    assert_eq!(caps, [4.5, 4.5, 4.5, 4.5, 4.7, 4.9, 5.1, 5.3]);
    // Never above the learned ceiling: a 429 later still rules.
    assert!(b.view(&p, at(7000)).rate <= 5.3);
}

#[test]
fn jitter_on_a_quick_origin_is_not_slowness() {
    let p = with(|p| p.start_rate = 8.0);
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    assert_eq!(b.note_latency(&p, t0, 3), None);
    // Ten times the baseline, yet 30 ms: well within 100 ms of it.
    for i in 1..=20 {
        assert_eq!(b.note_latency(&p, t0 + ms(1000 * i), 30), None);
    }
}

#[test]
fn one_slow_first_answer_does_not_become_the_baseline() {
    let p = with(|p| p.start_rate = 8.0);
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    assert_eq!(b.note_latency(&p, t0, 2000), None);
    for i in 1..=6 {
        assert_eq!(b.note_latency(&p, t0 + ms(100 * i), 50), None);
    }
    let v = b.view(&p, t0 + ms(600));
    assert!(v.latency_baseline_ms.unwrap() < 100, "{v:?}");
    // Now a real slowdown is seen as one.
    let mut cut = None;
    for i in 0..4 {
        cut = cut.or(b.note_latency(&p, t0 + ms(2000 + 100 * i), 400));
    }
    assert_eq!(cut.map(|s| s.rate), Some(6.0));
}

#[test]
fn an_abandoned_request_counts_as_at_least_that_slow() {
    let p = with(|p| p.start_rate = 8.0);
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    sent(&mut b, &p, t0);
    assert_eq!(b.note_latency(&p, t0, 50), None);
    b.finish(&p, t0);
    sent(&mut b, &p, t0 + ms(1000));
    let s = strain(b.on_failure(
        &p,
        t0 + ms(3000),
        Failure::Abandoned { after_ms: 2000 },
        0.0,
    ));
    assert_eq!((s.event, s.rate), (Distress::Slow, 6.0));
    assert_eq!(b.view(&p, t0 + ms(3000)).in_flight, 0);
    // Nothing the site showed: only the slot comes back.
    sent(&mut b, &p, t0 + ms(4000));
    assert_eq!(b.on_failure(&p, t0 + ms(4000), Failure::Nothing, 0.0), None);
}

#[test]
fn distress_survives_the_shared_encoding() {
    let p = with(|p| p.distress_threshold = 1);
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    sent(&mut b, &p, t0);
    b.note_latency(&p, t0, 80);
    b.on_failure(
        &p,
        t0 + ms(10),
        Failure::Distress(Distress::ConnectTimeout),
        0.0,
    );
    let bytes = b.encode(t0 + ms(10), wall());
    let c = HostBudget::decode(&p, &bytes, 0, t0 + ms(10), wall()).unwrap();
    assert_eq!(c.view(&p, t0 + ms(10)), b.view(&p, t0 + ms(10)));
    let v = c.view(&p, t0 + ms(10));
    assert_eq!(v.distress, Some(Distress::ConnectTimeout));
    assert_eq!(v.latency_baseline_ms, Some(80));
}

#[test]
fn a_distress_pause_survives_a_restart_and_is_still_answered_at_once() {
    let p = with(|p| p.distress_threshold = 1);
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    sent(&mut b, &p, t0);
    b.on_failure(&p, t0, Failure::Distress(Distress::Reset), 0.0);
    let saved = b.persist(&p, t0, wall()).expect("a live pause is kept");
    assert_eq!(saved.distress, Some(Distress::Reset));
    let json = serde_json::to_string(&saved).unwrap();
    assert!(json.contains("\"distress\":\"reset\""), "{json}");
    let t1 = t0 + ms(500);
    let mut r = HostBudget::restore(&p, &saved, t1, wall() + ms(500));
    assert!(matches!(
        r.admit(&p, t1),
        Reservation::Refuse(Refusal::Distressed {
            event: Distress::Reset,
            ..
        })
    ));
}
