//! Exact tests of the per-host budget on a hand-moved clock.

// Each test starts its hand-moved clock from one real instant.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mannerly_policy::budget::{
    BudgetParams, HostBudget, HostParams, PersistedHost, Reaction, Refusal, Reservation, Start,
    Throttle,
};
use mannerly_policy::Outcome;

const HOLD: Duration = Duration::from_secs(30);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn wall() -> SystemTime {
    UNIX_EPOCH + secs(1_700_000_000)
}

fn defaults() -> HostParams {
    BudgetParams::default()
        .validate()
        .unwrap()
        .for_host("example.com")
}

fn with(f: impl FnOnce(&mut BudgetParams)) -> HostParams {
    let mut p = BudgetParams::default();
    f(&mut p);
    p.validate().unwrap().for_host("example.com")
}

/// A response at `t`, with the wall clock moving along with the monotonic one.
fn respond(
    b: &mut HostBudget,
    p: &HostParams,
    t0: Instant,
    at: Duration,
    status: u16,
    ra: Option<&str>,
) -> Reaction {
    b.on_response(p, t0 + at, wall() + at, status, ra, 0.0)
}

fn throttled(r: Reaction) -> Throttle {
    match r {
        Reaction::Throttled(t) => t,
        other => panic!("expected a throttle, got {other:?}"),
    }
}

fn ok_rate(r: Reaction) -> (f64, f64) {
    match r {
        Reaction::Ok { rate, ceiling } => (rate, ceiling),
        other => panic!("expected Ok, got {other:?}"),
    }
}

#[test]
fn rate_and_ceiling_follow_a_scripted_sequence() {
    // Small steps, so the climb back under the ceiling shows step by step.
    let p = with(|p| p.recovery_step = 0.05);
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);

    let t = throttled(respond(&mut b, &p, t0, secs(0), 429, Some("1")));
    assert_eq!(
        t,
        Throttle {
            pause: secs(1),
            retry_after: Some(secs(1)),
            retry_after_raw: Some("1".into()),
            rate_before: 1.0,
            rate: 0.5,
            ceiling: 0.8,
            concurrency: 1,
            breaker_opened: false,
        }
    );

    // Additive recovery, 0.05 per success, while the ceiling relaxes by
    // (8 − 0.8) / 21600 s = 0.000333… per second.
    let mut rates = Vec::new();
    for s in 1..=9 {
        rates.push(ok_rate(respond(&mut b, &p, t0, secs(s), 200, None)));
    }
    assert_eq!(
        rates,
        [
            (0.55, 0.800333),
            (0.60, 0.800666),
            (0.65, 0.801),
            (0.70, 0.801333),
            (0.75, 0.801666),
            (0.80, 0.802),
            (0.802333, 0.802333), // capped by the ceiling, not 0.85
            (0.802666, 0.802666),
            (0.803, 0.803),
        ]
    );

    // A second 429, without Retry-After: 3 s backoff (first strike since the
    // last success), ceiling 80% of the 0.803 that drew it.
    let t = throttled(respond(&mut b, &p, t0, secs(10), 429, None));
    assert_eq!((t.rate_before, t.rate, t.ceiling), (0.803, 0.4015, 0.6424));
    assert_eq!((t.pause, t.retry_after), (secs(3), None));

    let mut rates = Vec::new();
    for s in 15..=19 {
        rates.push(ok_rate(respond(&mut b, &p, t0, secs(s), 200, None)).0);
    }
    assert_eq!(rates, [0.4515, 0.5015, 0.5515, 0.6015, 0.645465]);
}

#[test]
fn recovery_from_the_start_rate_stops_at_max_rate() {
    let p = defaults();
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    for i in 0..200 {
        respond(&mut b, &p, t0, ms(i * 125), 200, None);
    }
    assert_eq!(b.view(&p, t0 + secs(25)).rate, 8.0);
}

#[test]
fn the_ceiling_relaxes_over_hours_not_minutes() {
    let p = defaults();
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    throttled(respond(&mut b, &p, t0, secs(0), 429, Some("1")));

    assert_eq!(b.view(&p, t0 + secs(60)).ceiling, 0.82);
    assert_eq!(
        b.view(&p, t0 + secs(60)).ceiling_relaxes_in,
        Some(secs(6 * 3600 - 60))
    );
    assert_eq!(b.view(&p, t0 + secs(3 * 3600)).ceiling, 4.4);
    assert_eq!(b.view(&p, t0 + secs(6 * 3600)).ceiling, 8.0);
    assert_eq!(b.view(&p, t0 + secs(6 * 3600)).ceiling_relaxes_in, None);
    // The rate itself only climbs with successes.
    assert_eq!(b.view(&p, t0 + secs(6 * 3600)).rate, 0.5);

    assert!(b.persist(&p, t0 + secs(3 * 3600), wall()).is_some());
    assert!(!b.forgettable(&p, t0 + secs(3 * 3600)));
    assert!(b.persist(&p, t0 + secs(6 * 3600), wall()).is_none());
    // The slowed rate is remembered for a relaxation period of idleness
    // after the last slot (the end of the pause, 1 s).
    assert!(!b.forgettable(&p, t0 + secs(6 * 3600)));
    assert!(b.forgettable(&p, t0 + secs(6 * 3600 + 1)));
}

#[test]
fn five_429s_inside_60s_open_the_breaker_for_300s() {
    let p = defaults();
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    let mut trail = Vec::new();
    for s in [0, 10, 20, 30] {
        let t = throttled(respond(&mut b, &p, t0, secs(s), 429, Some("1")));
        assert!(!t.breaker_opened);
        trail.push((t.rate, t.ceiling));
    }
    // Halved each time down to floor_rate 0.1; the ceiling never below it.
    assert_eq!(trail, [(0.5, 0.8), (0.25, 0.4), (0.125, 0.2), (0.1, 0.1)]);

    let t = throttled(respond(&mut b, &p, t0, secs(40), 429, Some("1")));
    assert!(t.breaker_opened);
    assert_eq!(t.pause, secs(300));
    let v = b.view(&p, t0 + secs(40));
    assert_eq!(
        (v.breaker_open_for, v.paused_for),
        (Some(secs(300)), Some(secs(300)))
    );

    assert_eq!(
        b.admit(&p, t0 + secs(41)),
        Reservation::Refuse(Refusal::BreakerOpen {
            retry_after: secs(299)
        })
    );
    // Held once the breaker closes within max_hold; the next one would wait
    // a further 10 s (rate 0.1) and is refused.
    assert_eq!(b.admit(&p, t0 + secs(310)), Reservation::Wait(secs(30)));
    assert_eq!(
        b.admit(&p, t0 + secs(310)),
        Reservation::Refuse(Refusal::QueueFull {
            retry_after: secs(40)
        })
    );

    let v = b.view(&p, t0 + secs(340));
    assert_eq!((v.breaker_open_for, v.paused_for), (None, None));
    // History starts afresh: one more 429 does not reopen it.
    let t = throttled(respond(&mut b, &p, t0, secs(341), 429, Some("1")));
    assert!(!t.breaker_opened);
    assert_eq!(t.pause, secs(1));
}

#[test]
fn the_breaker_window_is_exactly_60s() {
    let p = defaults();
    let t0 = Instant::now();

    let mut b = HostBudget::new(&p, t0);
    for at in [0, 15_000, 30_000, 45_000] {
        respond(&mut b, &p, t0, ms(at), 429, Some("0"));
    }
    assert!(throttled(respond(&mut b, &p, t0, ms(59_999), 429, Some("0"))).breaker_opened);

    let mut b = HostBudget::new(&p, t0);
    for at in [0, 15_000, 30_000, 45_000] {
        respond(&mut b, &p, t0, ms(at), 429, Some("0"));
    }
    assert!(!throttled(respond(&mut b, &p, t0, ms(60_000), 429, Some("0"))).breaker_opened);
    assert_eq!(b.view(&p, t0 + ms(60_000)).recent_throttles, 4);
}

#[test]
fn reservations_are_fifo_and_spaced_at_one_over_rate() {
    let t0 = Instant::now();

    let p = defaults();
    let mut b = HostBudget::new(&p, t0);
    let got: Vec<_> = (0..4).map(|_| b.admit(&p, t0)).collect();
    // A new host's first slot is lent to the second; the third pays for
    // both, so three requests still take two intervals.
    assert_eq!(
        got,
        [
            Reservation::Go,
            Reservation::Go,
            Reservation::Wait(secs(2)),
            Reservation::Wait(secs(3))
        ]
    );
    assert_eq!(b.view(&p, t0).queued, 3);
    let more: Vec<_> = (0..2).map(|_| b.admit(&p, t0)).collect();
    assert_eq!(
        more,
        [Reservation::Wait(secs(4)), Reservation::Wait(secs(5))]
    );

    let p = with(|p| p.start_rate = 8.0);
    let mut b = HostBudget::new(&p, t0);
    assert_eq!(b.admit(&p, t0), Reservation::Go);
    assert_eq!(b.admit(&p, t0 + ms(30)), Reservation::Go);
    assert_eq!(b.admit(&p, t0 + ms(30)), Reservation::Wait(ms(220)));
    // An idle host's bucket refills: no wait after a gap.
    assert_eq!(b.admit(&p, t0 + ms(2000)), Reservation::Go);

    let p = with(|p| p.burst = 3);
    let mut b = HostBudget::new(&p, t0);
    let got: Vec<_> = (0..5).map(|_| b.admit(&p, t0)).collect();
    assert_eq!(
        got,
        [
            Reservation::Go,
            Reservation::Go,
            Reservation::Go,
            Reservation::Wait(secs(1)),
            Reservation::Wait(secs(2))
        ]
    );
}

#[test]
fn a_wait_beyond_max_hold_or_the_queue_bound_is_refused_and_reserves_nothing() {
    let t0 = Instant::now();
    let p = defaults();
    let mut b = HostBudget::new(&p, t0);
    for i in 0..=30 {
        // The second goes on the first slot's loan.
        let want = if i <= 1 {
            Reservation::Go
        } else {
            Reservation::Wait(secs(i))
        };
        assert_eq!(b.admit(&p, t0), want);
    }
    let full = Reservation::Refuse(Refusal::QueueFull {
        retry_after: secs(31),
    });
    assert_eq!(b.admit(&p, t0), full);
    assert_eq!(b.admit(&p, t0), full);
    assert_eq!(
        Refusal::QueueFull {
            retry_after: secs(31)
        }
        .status(),
        503
    );
    assert_eq!(
        Refusal::QueueFull {
            retry_after: secs(31)
        }
        .outcome(),
        Outcome::QueueFull
    );

    let p = with(|p| p.queue_limit = 2);
    let mut b = HostBudget::new(&p, t0);
    let got: Vec<_> = (0..4).map(|_| b.admit(&p, t0)).collect();
    assert_eq!(
        got,
        [
            Reservation::Go,
            Reservation::Go,
            Reservation::Wait(secs(2)),
            Reservation::Refuse(Refusal::QueueFull {
                retry_after: secs(3)
            })
        ]
    );
}

#[test]
fn a_paused_host_holds_what_fits_in_max_hold_and_refuses_the_rest() {
    let p = defaults();
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    throttled(respond(&mut b, &p, t0, secs(0), 429, Some("60")));

    let paused = Refusal::Paused {
        retry_after: secs(60),
    };
    assert_eq!(b.admit(&p, t0), Reservation::Refuse(paused));
    assert_eq!((paused.status(), paused.outcome()), (429, Outcome::Paused));
    // The first slot is the end of the pause, then one per 2 s (rate 0.5).
    assert_eq!(b.admit(&p, t0 + secs(31)), Reservation::Wait(secs(29)));
    assert_eq!(
        b.admit(&p, t0 + secs(31)),
        Reservation::Refuse(Refusal::QueueFull {
            retry_after: secs(31)
        })
    );
    assert_eq!(b.admit(&p, t0 + secs(32)), Reservation::Wait(secs(30)));
    assert_eq!(b.view(&p, t0 + secs(32)).queued, 2);
}

#[test]
fn a_woken_waiter_rechecks_the_pause() {
    let p = defaults();
    let t0 = Instant::now();
    for (ra, want) in [
        ("10", Start::Wait(ms(8500))),
        (
            "40",
            Start::Refuse(Refusal::Paused {
                retry_after: ms(38_500),
            }),
        ),
    ] {
        let mut b = HostBudget::new(&p, t0);
        assert_eq!(b.admit(&p, t0), Reservation::Go);
        assert_eq!(b.try_start(&p, t0, HOLD), Start::Go);
        assert_eq!(b.admit(&p, t0), Reservation::Go, "on the first's loan");
        assert_eq!(b.admit(&p, t0), Reservation::Wait(secs(2)));
        // The first request draws a 429 while the third sleeps.
        throttled(respond(&mut b, &p, t0, ms(500), 429, Some(ra)));
        assert_eq!(b.try_start(&p, t0 + secs(2), HOLD - secs(2)), want);
    }
}

#[test]
fn the_concurrency_gate_halves_on_429_with_min_1_and_recovers() {
    let t0 = Instant::now();
    let p = with(|p| p.burst = 4);
    let mut b = HostBudget::new(&p, t0);
    for _ in 0..3 {
        assert_eq!(b.admit(&p, t0), Reservation::Go);
    }
    assert_eq!(b.try_start(&p, t0, HOLD), Start::Go);
    assert_eq!(b.try_start(&p, t0, HOLD), Start::Go);
    assert_eq!(b.try_start(&p, t0, HOLD), Start::WaitConcurrency);
    assert!(b.finish(&p, t0 + ms(10)));
    assert_eq!(b.try_start(&p, t0 + ms(10), HOLD), Start::Go);
    assert_eq!(b.view(&p, t0 + ms(10)).in_flight, 2);

    let p = with(|p| p.concurrency = 5);
    let mut b = HostBudget::new(&p, t0);
    let c: Vec<_> = (0..3)
        .map(|i| throttled(respond(&mut b, &p, t0, secs(i), 429, Some("0"))).concurrency)
        .collect();
    assert_eq!(c, [2, 1, 1]);
    for i in 0..19 {
        respond(&mut b, &p, t0, secs(10 + i), 200, None);
    }
    assert_eq!(b.view(&p, t0 + secs(30)).concurrency, 1);
    respond(&mut b, &p, t0, secs(30), 200, None);
    assert_eq!(b.view(&p, t0 + secs(30)).concurrency, 2);
}

#[test]
fn crawl_delay_caps_the_rate_at_one_over_delay() {
    let p = defaults();
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    b.set_crawl_delay(&p, t0, Some(4.0));
    assert_eq!(b.view(&p, t0).rate, 0.25);
    assert_eq!(b.view(&p, t0).crawl_delay, Some(secs(4)));
    let got: Vec<_> = (0..3).map(|_| b.admit(&p, t0)).collect();
    assert_eq!(
        got,
        [
            Reservation::Go,
            Reservation::Wait(secs(4)),
            Reservation::Wait(secs(8))
        ]
    );
    for i in 0..10 {
        assert_eq!(ok_rate(respond(&mut b, &p, t0, secs(i), 200, None)).0, 0.25);
    }

    // A Crawl-delay looser than the rate changes nothing.
    let mut b = HostBudget::new(&p, t0);
    b.set_crawl_delay(&p, t0, Some(0.5));
    assert_eq!(b.view(&p, t0).rate, 1.0);
    // Nonsense lifts the cap.
    b.set_crawl_delay(&p, t0, Some(f64::NAN));
    assert_eq!(b.view(&p, t0).crawl_delay, None);
}

#[test]
fn server_errors_slow_down_mildly_and_503_with_retry_after_throttles() {
    let p = defaults();
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    assert_eq!(
        respond(&mut b, &p, t0, secs(0), 500, None),
        Reaction::SlowedDown {
            rate: 0.75,
            ceiling: 8.0
        }
    );
    // A 503 without Retry-After is distress: cut, not yet paused.
    match respond(&mut b, &p, t0, secs(1), 503, None) {
        Reaction::Distressed(s) => assert_eq!((s.rate, s.ceiling, s.pause), (0.5625, 8.0, None)),
        other => panic!("expected distress, got {other:?}"),
    }
    assert_eq!(b.admit(&p, t0 + secs(1)), Reservation::Go);

    let t = throttled(respond(&mut b, &p, t0, secs(2), 503, Some("5")));
    assert_eq!(
        (t.pause, t.rate_before, t.rate, t.ceiling),
        (secs(5), 0.5625, 0.28125, 0.45)
    );
}

#[test]
fn backoff_without_retry_after_doubles_up_to_its_maximum() {
    let p = defaults();
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    // 400 s apart: never five inside the breaker window, and each after the
    // previous pause (a 429 during a pause is the same episode).
    let pauses: Vec<_> = (0..8)
        .map(|i| {
            throttled(respond(&mut b, &p, t0, secs(400 * i), 429, None))
                .pause
                .as_secs()
        })
        .collect();
    assert_eq!(pauses, [3, 6, 12, 24, 48, 96, 192, 300]);

    let mut b = HostBudget::new(&p, t0);
    let t = throttled(b.on_response(&p, t0, wall(), 429, None, 0.5));
    assert_eq!(t.pause, ms(2250));
}

#[test]
fn retry_after_forms_reach_the_pause() {
    let p = defaults();
    let t0 = Instant::now();
    let date = httpdate::fmt_http_date(wall() + secs(120));
    for (raw, pause, used) in [
        (date.as_str(), secs(120), Some(secs(120))),
        ("7200", secs(3600), Some(secs(3600))),
        ("soon", secs(3), None),
        ("-5", secs(3), None),
        ("99999999999", secs(3), None),
    ] {
        let mut b = HostBudget::new(&p, t0);
        let t = throttled(b.on_response(&p, t0, wall(), 429, Some(raw), 0.0));
        assert_eq!((t.pause, t.retry_after), (pause, used), "{raw:?}");
        assert_eq!(t.retry_after_raw.as_deref(), Some(raw));
        assert_eq!(b.view(&p, t0).paused_for, Some(pause));
    }
}

#[test]
fn persisted_state_survives_a_restart_with_wall_clock_deadlines() {
    let p = defaults();
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    throttled(respond(&mut b, &p, t0, secs(0), 429, Some("60")));

    let saved = b.persist(&p, t0 + secs(10), wall() + secs(10)).unwrap();
    let wall_ms = 1_700_000_000_000;
    assert_eq!(saved.paused_until_ms, Some(wall_ms + 60_000));
    assert_eq!(saved.throttled_at_ms, Some(wall_ms));
    let json = serde_json::to_string(&saved).unwrap();
    let saved: PersistedHost = serde_json::from_str(&json).unwrap();

    // The new process has its own monotonic clock; 30 s of wall time passed.
    let t1 = t0 + secs(5000);
    let r = HostBudget::restore(&p, &saved, t1, wall() + secs(30));
    let v = r.view(&p, t1);
    let before = b.view(&p, t0 + secs(30));
    assert_eq!(v.paused_for, Some(secs(30)));
    assert_eq!(
        (v.rate, v.ceiling, v.concurrency),
        (before.rate, before.ceiling, before.concurrency)
    );
    assert_eq!(v.ceiling, 0.81);
    let mut r = r;
    assert_eq!(r.admit(&p, t1), Reservation::Wait(secs(30)));

    // Nothing is persisted for a host with nothing to remember.
    assert!(HostBudget::new(&p, t0).persist(&p, t0, wall()).is_none());
}

#[test]
fn an_idle_host_is_forgettable_once_its_bucket_has_refilled() {
    let p = defaults();
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    assert_eq!(b.admit(&p, t0), Reservation::Go);
    assert_eq!(b.try_start(&p, t0, HOLD), Start::Go);
    assert!(!b.is_idle(t0 + secs(2)));
    ok_rate(respond(&mut b, &p, t0, ms(200), 200, None));
    // The first slot's loan is owed for one interval (834 ms at 1.2/s):
    // forgotten before, a fresh budget would lend again.
    assert!(!b.forgettable(&p, t0 + ms(833)));
    assert!(b.forgettable(&p, t0 + ms(834)));
}

#[test]
fn a_429_during_a_pause_is_the_same_episode() {
    let p = defaults();
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    let first = throttled(respond(&mut b, &p, t0, secs(0), 429, Some("2")));
    assert_eq!(
        (first.rate_before, first.rate, first.ceiling),
        (1.0, 0.5, 0.8)
    );
    // The other request that was in flight comes back 429 too: the pause may
    // grow, the rate is not halved again, the breaker does not count it.
    let echo = throttled(respond(&mut b, &p, t0, ms(300), 429, Some("5")));
    assert_eq!((echo.rate, echo.pause), (0.5, ms(5000)));
    // Unchanged but for the slow relaxation of the ceiling (6 h back to 8/s).
    assert!(echo.ceiling < 0.801, "{}", echo.ceiling);
    assert!(!echo.breaker_opened);
    let shorter = throttled(respond(&mut b, &p, t0, ms(400), 429, Some("1")));
    assert_eq!(
        shorter.pause,
        ms(4900),
        "a shorter Retry-After does not cut the pause"
    );
    assert_eq!(b.view(&p, t0 + ms(400)).recent_throttles, 1);
}

#[test]
fn slots_promised_before_a_throttle_are_reserved_again_at_the_lowered_rate() {
    let p = with(|p| {
        p.start_rate = 4.0;
        p.max_rate = 4.0;
        p.concurrency = 10;
    });
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    // Four waiters promised slots 250 ms apart at 4/s, the second on the
    // first slot's loan.
    let promised: Vec<_> = (0..4)
        .map(|_| match b.admit(&p, t0) {
            Reservation::Go => Duration::ZERO,
            Reservation::Wait(d) => d,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(promised, [ms(0), ms(0), ms(500), ms(750)]);
    assert_eq!(b.try_start(&p, t0, HOLD), Start::Go);
    let t = throttled(respond(&mut b, &p, t0, ms(100), 429, Some("1")));
    assert_eq!((t.rate, t.pause), (2.0, secs(1)));
    // The waiter promised 250 ms wakes then, inside the pause: new slot at its end.
    assert_eq!(
        b.try_start_since(&p, t0 + ms(250), HOLD, t0),
        Start::Wait(ms(850))
    );
    // The one promised 750 ms wakes, still in the pause: the next slot, 500 ms later.
    assert_eq!(
        b.try_start_since(&p, t0 + ms(750), HOLD, t0),
        Start::Wait(ms(850))
    );
    // A waiter reserved after the throttle keeps its slot.
    assert_eq!(
        b.try_start_since(&p, t0 + ms(1100), HOLD, t0 + ms(250)),
        Start::Go
    );
}

#[test]
fn a_request_out_of_hold_is_told_about_the_pause_or_the_breaker() {
    let p = defaults();
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    assert_eq!(
        b.view(&p, t0).hold_refusal(),
        Refusal::QueueFull {
            retry_after: secs(1)
        }
    );
    throttled(respond(&mut b, &p, t0, secs(0), 429, Some("60")));
    assert_eq!(
        b.view(&p, t0 + secs(10)).hold_refusal(),
        Refusal::Paused {
            retry_after: secs(50)
        }
    );

    let mut b = HostBudget::new(&p, t0);
    // Five 429s two seconds apart, each after the previous 1 s pause.
    for k in 0..5 {
        throttled(respond(&mut b, &p, t0, secs(2 * k), 429, Some("1")));
    }
    assert_eq!(
        b.view(&p, t0 + secs(8)).hold_refusal(),
        Refusal::BreakerOpen {
            retry_after: secs(300)
        }
    );
}

/// The fetch of a new host's robots.txt, as the proxy makes it: reserved,
/// started and answered like any request, the rules then applied.
fn robots_fetch(b: &mut HostBudget, p: &HostParams, t0: Instant, delay: Option<f64>) {
    assert_eq!(b.admit(p, t0), Reservation::Go);
    assert_eq!(b.try_start(p, t0, HOLD), Start::Go);
    assert_eq!(ok_rate(respond(b, p, t0, ms(10), 200, None)).0, 1.2);
    b.set_crawl_delay(p, t0 + ms(10), delay);
}

#[test]
fn a_new_hosts_robots_fetch_lends_its_slot_to_the_first_page() {
    let p = defaults();
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    robots_fetch(&mut b, &p, t0, None);
    // The origin counts robots.txt, and the page goes at once on its
    // slot's loan...
    assert_eq!(b.admit(&p, t0 + ms(10)), Reservation::Go);
    send(&mut b, &p, t0, ms(10));
    assert_eq!(ok_rate(respond(&mut b, &p, t0, ms(20), 200, None)).0, 1.44);
    // ...and the second page repays it: two intervals at 1.2/s (834 ms,
    // rounded up to whole milliseconds) after robots.txt, then one at
    // 1.44/s (695 ms).
    assert_eq!(b.admit(&p, t0 + ms(20)), Reservation::Wait(ms(1648)));
    // Looking the rules up again changes nothing.
    b.set_crawl_delay(&p, t0 + ms(20), None);
    assert_eq!(b.admit(&p, t0 + ms(20)), Reservation::Wait(ms(1648 + 695)));
}

#[test]
fn a_429_on_the_loan_is_two_requests_in_a_second() {
    // A limit with no burst (nginx limit_req without burst) refuses the
    // page sent 5 ms after robots.txt: the origin saw two requests in that
    // second, not 200/s.
    let p = defaults();
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    robots_fetch(&mut b, &p, t0, None);
    assert_eq!(b.admit(&p, t0 + ms(15)), Reservation::Go);
    send(&mut b, &p, t0, ms(15));
    let t = throttled(respond(&mut b, &p, t0, ms(20), 429, Some("1")));
    // The pace the origin saw is halved, not the rate (1.2/s) it never
    // refused; and the ceiling is left alone: the site refused a pair's
    // spacing, not a rate, and 80% of 2/s would hold a site that allows
    // 3/s at 1.6 for hours.
    assert_eq!((t.rate_before, t.ceiling, t.rate), (2.0, 8.0, 1.0));
    // Nothing is lent again: the next page waits the pause's end.
    assert_eq!(b.admit(&p, t0 + ms(20)), Reservation::Wait(ms(1000)));
    assert_eq!(b.admit(&p, t0 + ms(20)), Reservation::Wait(ms(2000)));
}

#[test]
fn nothing_is_lent_under_a_crawl_delay_or_a_burst() {
    let p = defaults();
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    b.set_crawl_delay(&p, t0, Some(2.0));
    assert_eq!(b.admit(&p, t0), Reservation::Go);
    assert_eq!(b.admit(&p, t0), Reservation::Wait(secs(2)));
    // A burst of two already lets two go together; the loan adds none.
    let p = with(|p| p.burst = 2);
    let mut b = HostBudget::new(&p, t0);
    let got: Vec<_> = (0..3).map(|_| b.admit(&p, t0)).collect();
    assert_eq!(
        got,
        [Reservation::Go, Reservation::Go, Reservation::Wait(secs(1))]
    );
}

#[test]
fn a_crawl_delay_in_the_robots_txt_just_fetched_holds_the_first_page() {
    let p = defaults();
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    robots_fetch(&mut b, &p, t0, Some(5.0));
    // Five seconds after robots.txt was sent (at t0), then every five.
    assert_eq!(b.admit(&p, t0 + ms(10)), Reservation::Wait(ms(4990)));
    // The same Crawl-delay seen again (every lookup applies it) does not
    // push the schedule further.
    b.set_crawl_delay(&p, t0 + ms(20), Some(5.0));
    assert_eq!(b.admit(&p, t0 + ms(20)), Reservation::Wait(ms(9980)));
}

/// A send at `at`, without its answer yet.
fn send(b: &mut HostBudget, p: &HostParams, t0: Instant, at: Duration) {
    assert_eq!(b.try_start(p, t0 + at, HOLD), Start::Go);
}

#[test]
fn slow_start_grows_the_rate_by_a_factor_until_the_first_429() {
    let p = defaults();
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    let mut rates = Vec::new();
    for s in 0..7 {
        rates.push(ok_rate(respond(&mut b, &p, t0, secs(s), 200, None)).0);
    }
    // × 1.2 per success, in whole micro-requests/s.
    assert_eq!(
        rates,
        [1.2, 1.44, 1.728, 2.0736, 2.48832, 2.985984, 3.583181]
    );

    // The first 429 ends slow start: halved, then + 0.2 per success.
    let t = throttled(respond(&mut b, &p, t0, secs(7), 429, Some("1")));
    assert_eq!((t.rate_before, t.rate), (3.583181, 1.791591));
    let mut rates = Vec::new();
    for s in 8..11 {
        rates.push(ok_rate(respond(&mut b, &p, t0, secs(s), 200, None)).0);
    }
    assert_eq!(rates, [1.991591, 2.191591, 2.391591]);
}

#[test]
fn slow_start_never_climbs_slower_than_the_recovery_step_nor_past_max_rate() {
    // At 0.5/s, × 1.2 would add 0.1: the 0.2 step is taken instead.
    let p = with(|p| {
        p.start_rate = 0.5;
        p.max_rate = 1.5;
    });
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    let rates: Vec<f64> = (0..5)
        .map(|s| ok_rate(respond(&mut b, &p, t0, secs(s), 200, None)).0)
        .collect();
    assert_eq!(rates, [0.7, 0.9, 1.1, 1.32, 1.5]);

    // A factor of 1 is the additive climb alone.
    let p = with(|p| p.slow_start_factor = 1.0);
    let mut b = HostBudget::new(&p, t0);
    let rates: Vec<f64> = (0..4)
        .map(|s| ok_rate(respond(&mut b, &p, t0, secs(s), 200, None)).0)
        .collect();
    assert_eq!(rates, [1.2, 1.4, 1.6, 1.8]);
}

/// Sends at each of `at` (ms), each answered 200 at once but the last.
fn sends_then_429(b: &mut HostBudget, p: &HostParams, t0: Instant, at: &[u64]) -> Throttle {
    let (last, before) = at.split_last().unwrap();
    for &a in before {
        send(b, p, t0, ms(a));
        ok_rate(respond(b, p, t0, ms(a), 200, None));
    }
    send(b, p, t0, ms(*last));
    throttled(respond(b, p, t0, ms(*last), 429, Some("2")))
}

#[test]
fn the_rate_that_drew_a_429_is_the_pace_of_the_second_before_it() {
    // The nominal rate (4/s) ran ahead of the sends: 600 ms then 300 ms
    // apart, 2 gaps in 0.9 s. The last gap alone would read 3.33/s.
    let p = with(|p| p.start_rate = 4.0);
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    send(&mut b, &p, t0, ms(0));
    b.finish(&p, t0);
    send(&mut b, &p, t0, ms(600));
    b.finish(&p, t0 + ms(600));
    send(&mut b, &p, t0, ms(900));
    let t = throttled(respond(&mut b, &p, t0, ms(900), 429, Some("2")));
    assert_eq!(
        (t.rate_before, t.rate, t.ceiling),
        (2.222222, 1.111111, 1.777778)
    );
    // Two gaps over more than a second: only the last is inside it, and
    // it is what a limit without burst refuses (500 ms: 2/s). A 500 ms
    // gap refused after a 600 ms one was let through reads, within the
    // slack for the limiter's own arrival times, as one send per 500 ms:
    // the ceiling is 90% of it.
    let mut b = HostBudget::new(&p, t0);
    let t = sends_then_429(&mut b, &p, t0, &[0, 600, 1100]);
    assert_eq!((t.rate_before, t.ceiling), (2.0, 1.8));
}

#[test]
fn a_burst_above_the_rate_is_the_rate_that_drew_the_429_but_the_rate_still_halves() {
    // The nominal rate is 1/s, but two requests went 250 ms apart (say a
    // retry behind another client's page): the origin saw 4/s.
    let p = defaults();
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    send(&mut b, &p, t0, ms(0));
    b.finish(&p, t0);
    send(&mut b, &p, t0, ms(250));
    let t = throttled(respond(&mut b, &p, t0, ms(250), 429, Some("2")));
    assert_eq!((t.rate_before, t.ceiling, t.rate), (4.0, 3.2, 0.5));
}

#[test]
fn a_pace_the_origin_accepted_before_is_judged_over_the_whole_window() {
    // 1/s for two seconds, then 4/s accepted twice over: the 429 at the
    // same 4/s is a volume limit (a burst allowance run out), not a pace
    // limit. Seven sends in 3 s: 6 gaps, 2/s.
    let p = with(|p| p.start_rate = 4.0);
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    let t = sends_then_429(&mut b, &p, t0, &[0, 1000, 2000, 2250, 2500, 2750, 3000]);
    // The sends fit 2 per second too (two accepted in the second before
    // the refusal, at most four in any second accepted): the ceiling is
    // 90% of that rather than 80% of the pace, and the rate goes back to
    // it after the pause instead of halving and climbing again.
    assert_eq!((t.rate_before, t.ceiling, t.rate), (2.0, 1.8, 1.8));
    // The same sends but the last pace never accepted before: it is the
    // pace that drew the 429.
    let mut b = HostBudget::new(&p, t0);
    let t = sends_then_429(&mut b, &p, t0, &[0, 1000, 2000, 2500, 2750]);
    assert_eq!(t.rate_before, 2.666666);
}

#[test]
fn a_429_never_lifts_a_ceiling_already_learned() {
    let p = defaults();
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    let t = sends_then_429(&mut b, &p, t0, &[0, 500, 1000]);
    assert_eq!((t.rate_before, t.ceiling), (2.0, 1.8));
    // After the pause, two sends 100 ms apart (a burst of ours) draw
    // another: 10/s says nothing new of the site's limit.
    let t = sends_then_429(&mut b, &p, t0, &[5000, 5100]);
    assert_eq!(t.rate_before, 10.0);
    // The ceiling stays where it was, relaxed by 4.1 s of its 6 hours.
    assert!(t.ceiling > 1.8 && t.ceiling < 1.802, "{t:?}");
}

#[test]
fn the_long_window_starts_afresh_after_a_429_and_after_a_minute() {
    let p = with(|p| p.start_rate = 4.0);
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    // 4/s accepted, then a 429 at 4/s read over the window: 2 s of
    // history at 1/s before it would make it 2.29/s; since the first 429
    // the window holds only the 4/s sends.
    sends_then_429(&mut b, &p, t0, &[0, 1000, 2000]);
    let t = sends_then_429(&mut b, &p, t0, &[5000, 5250, 5500, 5750, 6000]);
    assert_eq!(t.rate_before, 4.0);
    // A minute after its start the window begins again at the next send.
    let mut b = HostBudget::new(&p, t0);
    let mut at: Vec<u64> = (0..60).map(|s| s * 1000).collect();
    at.extend([60_000, 60_250, 60_500, 60_750]);
    let t = sends_then_429(&mut b, &p, t0, &at);
    assert_eq!(t.rate_before, 4.0);
}

#[test]
fn a_crawl_delay_beyond_the_hold_is_paced_for_the_first_in_line() {
    let t0 = Instant::now();
    let p = defaults();
    let mut b = HostBudget::new(&p, t0);
    b.set_crawl_delay(&p, t0, Some(60.0));
    assert_eq!(b.admit(&p, t0), Reservation::Go);
    let Reservation::Refuse(r) = b.admit(&p, t0) else {
        panic!("a turn 60 s away was not refused");
    };
    assert!(matches!(r, Refusal::Paced { .. }), "{r:?}");
    assert_eq!((r.outcome(), r.status()), (Outcome::Paced, 503));
    // The budget keeps whole milliseconds from its own start: 60 s and a few ms.
    assert!((60..=61).contains(&r.retry_after_secs()), "{r:?}");
    // Later, the same turn is within the 30 s hold and is waited for.
    assert!(matches!(b.admit(&p, t0 + secs(40)), Reservation::Wait(w) if w <= secs(21)));
}

#[test]
fn the_throttles_that_opened_the_breaker_survive_a_restart_with_it() {
    let p = defaults();
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    for s in [0, 10, 20, 30, 40] {
        throttled(respond(&mut b, &p, t0, secs(s), 429, Some("1")));
    }
    let before = b.view(&p, t0 + secs(50));
    assert_eq!(
        (before.recent_throttles, before.throttles_last_hour),
        (1, 5)
    );
    let saved = b.persist(&p, t0 + secs(50), wall() + secs(50)).unwrap();
    let ms = |s: u64| 1_700_000_000_000 + s * 1000;
    assert_eq!(saved.throttled_at_ms, Some(ms(40)));
    assert!(saved.earlier_throttles_ms.is_empty());
    assert_eq!(saved.breaker_throttles_ms, [ms(30), ms(20), ms(10), ms(0)]);
    let json = serde_json::to_string(&saved).unwrap();
    let saved: PersistedHost = serde_json::from_str(&json).unwrap();

    // A new process, 5 s of wall time later.
    let t1 = t0 + secs(5000);
    let mut r = HostBudget::restore(&p, &saved, t1, wall() + secs(55));
    let v = r.view(&p, t1);
    assert_eq!(v.breaker_open_for, Some(secs(285)));
    assert_eq!((v.recent_throttles, v.throttles_last_hour), (1, 5));
    // Counted once: when the breaker has closed, one more 429 does not
    // open it again, in the restored host as in the one that never stopped.
    let after = |b: &mut HostBudget, t: Instant, w: SystemTime| {
        throttled(b.on_response(&p, t, w, 429, Some("1"), 0.0)).breaker_opened
    };
    assert!(!after(&mut r, t1 + secs(300), wall() + secs(355)));
    assert!(!after(&mut b, t0 + secs(355), wall() + secs(355)));
    assert_eq!(r.view(&p, t1 + secs(301)).throttles_last_hour, 5);

    // A record written before the field existed still reads.
    let old = json.replace(
        &format!(
            ",\"breaker_throttles_ms\":[{},{},{},{}]",
            ms(30),
            ms(20),
            ms(10),
            ms(0)
        ),
        "",
    );
    assert_ne!(old, json);
    let old: PersistedHost = serde_json::from_str(&old).unwrap();
    assert!(old.breaker_throttles_ms.is_empty());
}

#[test]
fn a_send_late_on_its_slot_pushes_the_next_one_an_interval_after_it() {
    // At 2/s robots.txt and the page on its loan go at once and the next
    // slot is two intervals on, at 1000 ms; that request started 70 ms
    // after its slot (a busy scheduler). The origin counts the sends: the
    // next goes 500 ms after it went, not 430.
    let p = with(|p| p.start_rate = 2.0);
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    for _ in 0..2 {
        assert_eq!(b.admit(&p, t0), Reservation::Go);
        send(&mut b, &p, t0, ms(0));
        b.finish(&p, t0);
    }
    assert_eq!(b.admit(&p, t0), Reservation::Wait(ms(1000)));
    send(&mut b, &p, t0, ms(1070));
    b.finish(&p, t0 + ms(1070));
    assert_eq!(b.admit(&p, t0 + ms(1070)), Reservation::Wait(ms(500)));
}

#[test]
fn a_429_under_a_limit_already_learned_is_halved_from() {
    // 2 per second learned (ceiling 1.8) and gone back to at once; a send
    // that came too soon all the same (a late one before it) draws a
    // second 429: the margin was not enough, so DESIGN's rule applies,
    // the rate is halved and the ceiling is 80% of the pace that drew it.
    let p = with(|p| p.start_rate = 4.0);
    let t0 = Instant::now();
    let mut b = HostBudget::new(&p, t0);
    let t = sends_then_429(&mut b, &p, t0, &[0, 1000, 2000, 2250, 2500, 2750, 3000]);
    assert_eq!((t.ceiling, t.rate), (1.8, 1.8));
    for at in [5000, 5556, 6112, 6668] {
        send(&mut b, &p, t0, ms(at));
        ok_rate(respond(&mut b, &p, t0, ms(at), 200, None));
    }
    send(&mut b, &p, t0, ms(7100));
    let t = throttled(respond(&mut b, &p, t0, ms(7100), 429, Some("1")));
    assert!((t.rate - 0.9).abs() < 0.01, "{t:?}");
    assert!(t.ceiling < 1.8 && t.ceiling >= 1.6, "{t:?}");
}
