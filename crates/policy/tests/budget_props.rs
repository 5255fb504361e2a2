//! Invariants of the per-host budget under any sequence of events.

// Each case starts its hand-moved clock from one real instant.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mannerly_policy::budget::{BudgetParams, HostBudget, HostParams, Reservation, Start};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Event {
    Advance(u64),
    Admit,
    TryStart,
    Finish,
    Response(u16, Option<&'static str>, f64),
    CrawlDelay(Option<f64>),
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        3 => (0u64..5_000).prop_map(Event::Advance),
        4 => Just(Event::Admit),
        2 => Just(Event::TryStart),
        1 => Just(Event::Finish),
        4 => (
            prop::sample::select(vec![200u16, 304, 404, 429, 429, 500, 503]),
            prop::sample::select(vec![None, Some("0"), Some("3"), Some("soon"), Some("100000")]),
            0.0f64..1.0,
        )
            .prop_map(|(s, ra, j)| Event::Response(s, ra, j)),
        1 => prop::option::of(prop::sample::select(vec![0.5f64, 2.0, 10.0, -1.0]))
            .prop_map(Event::CrawlDelay),
    ]
}

fn params() -> impl Strategy<Value = HostParams> {
    (
        1u32..4,
        1u32..4,
        prop::sample::select(vec![1.0f64, 2.0, 8.0]),
        0u32..8,
    )
        .prop_map(|(burst, concurrency, max_rate, queue_limit)| {
            let p = BudgetParams {
                burst,
                concurrency,
                max_rate,
                start_rate: 1.0,
                queue_limit,
                ..Default::default()
            };
            p.validate().unwrap().for_host("example.com")
        })
}

proptest! {
    #[test]
    fn rate_stays_under_ceiling_and_slots_never_go_back(
        p in params(),
        events in prop::collection::vec(event(), 1..200),
    ) {
        let t0 = Instant::now();
        let wall0 = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut b = HostBudget::new(&p, t0);
        let mut now = t0;
        let mut last_slot = t0;
        let floor = p.floor_rate;
        for e in events {
            let wall: SystemTime = wall0 + (now - t0);
            let slot = match e {
                Event::Advance(ms) => { now += Duration::from_millis(ms); None }
                Event::Admit => match b.admit(&p, now) {
                    Reservation::Go => Some(now),
                    Reservation::Wait(d) => {
                        prop_assert!(d <= p.max_hold());
                        Some(now + d)
                    }
                    Reservation::Refuse(_) => None,
                },
                Event::TryStart => match b.try_start(&p, now, p.max_hold()) {
                    Start::Wait(d) => Some(now + d),
                    _ => None,
                },
                Event::Finish => { b.finish(&p, now); None }
                Event::Response(status, ra, jitter) => {
                    let r = b.on_response(&p, now, wall, status, ra, jitter);
                    // As the in-process store does after a success.
                    if let mannerly_policy::budget::Reaction::Ok { .. } = r {
                        b.bring_forward(&p, now);
                    }
                    prop_assert!(r.rate() <= r.ceiling());
                    if matches!(
                        r,
                        mannerly_policy::budget::Reaction::Throttled(_)
                            | mannerly_policy::budget::Reaction::Distressed(
                                mannerly_policy::budget::Strain { pause: Some(_), .. }
                            )
                    ) {
                        // Slots promised before a throttle (or a pause for
                        // distress) are given up and reserved again
                        // (`try_start_since`): the new schedule starts at
                        // the pause's end.
                        last_slot = now;
                    }
                    // An answer that raised the rate may have brought the
                    // slot reserved behind its send forward: the schedule
                    // goes on from there.
                    if let Some(w) = b.reserved_wait(now) {
                        last_slot = last_slot.min(now + w);
                    }
                    None
                }
                Event::CrawlDelay(d) => { b.set_crawl_delay(&p, now, d); None }
            };
            if let Some(slot) = slot {
                prop_assert!(slot >= last_slot, "slot went back: {:?} < {:?}", slot, last_slot);
                last_slot = slot;
            }
            let v = b.view(&p, now);
            prop_assert!(v.rate <= v.ceiling, "{v:?}");
            prop_assert!(v.ceiling <= p.max_rate, "{v:?}");
            prop_assert!(v.rate > 0.0);
            if v.crawl_delay.is_none() {
                prop_assert!(v.rate >= floor, "{v:?}");
            }
            prop_assert!(v.concurrency >= 1 && v.concurrency <= p.concurrency);
        }
    }

    /// What lets a caller skip `set_crawl_delay(None)` on a budget without a
    /// delay: the budget that gets those calls before every event answers
    /// every event as the one that never gets them.
    #[test]
    fn lifting_no_delay_changes_nothing(
        p in params(),
        events in prop::collection::vec(event(), 1..200),
    ) {
        let t0 = Instant::now();
        let wall0 = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut plain = HostBudget::new(&p, t0);
        let mut lifted = HostBudget::new(&p, t0);
        let mut now = t0;
        let mut skippable = 0;
        for e in events {
            if !lifted.has_crawl_delay() {
                lifted.set_crawl_delay(&p, now, None);
                skippable += 1;
            }
            let wall: SystemTime = wall0 + (now - t0);
            let answers: Vec<String> = [&mut plain, &mut lifted]
                .into_iter()
                .map(|b| match &e {
                    Event::Advance(_) => String::new(),
                    Event::Admit => format!("{:?}", b.admit(&p, now)),
                    Event::TryStart => format!("{:?}", b.try_start(&p, now, p.max_hold())),
                    Event::Finish => format!("{:?}", b.finish(&p, now)),
                    Event::Response(status, ra, jitter) => {
                        format!("{:?}", b.on_response(&p, now, wall, *status, *ra, *jitter))
                    }
                    Event::CrawlDelay(d) => {
                        b.set_crawl_delay(&p, now, *d);
                        String::new()
                    }
                })
                .collect();
            prop_assert_eq!(&answers[0], &answers[1], "after {:?}", e);
            prop_assert_eq!(
                format!("{:?}", plain.view(&p, now)),
                format!("{:?}", lifted.view(&p, now))
            );
            prop_assert_eq!(plain.has_crawl_delay(), lifted.has_crawl_delay());
            if let Event::Advance(ms) = e {
                now += Duration::from_millis(ms);
            }
        }
        prop_assert!(skippable > 0);
    }
}
