//! The in-memory host store: isolation, key normalisation, sweeping, restarts.

// Tests start from real instants and wall times; the store gets them passed in.
#![allow(clippy::disallowed_methods)]

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mannerly_policy::budget::{BudgetParams, HostOverride, Reaction, Refusal, Reservation, Start};
use mannerly_state::hosts::{HostStore, MemoryHosts};

const HOLD: Duration = Duration::from_secs(30);

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn wall() -> SystemTime {
    UNIX_EPOCH + secs(1_700_000_000)
}

#[test]
fn a_throttled_host_does_not_slow_another() {
    let store = MemoryHosts::default();
    let t0 = Instant::now();
    assert_eq!(store.admit("a.example", t0, HOLD), Reservation::Go);
    assert_eq!(store.try_start("a.example", t0, HOLD), Start::Go);
    let r = store.on_response("a.example", t0, wall(), 429, Some("120"), None, None, 0.0);
    assert!(matches!(r, Reaction::Throttled(ref t) if t.pause == secs(120)));

    assert_eq!(
        store.admit("a.example", t0, HOLD),
        Reservation::Refuse(Refusal::Paused {
            retry_after: secs(120)
        })
    );
    // b's first slot is lent to its second request; the third repays.
    assert_eq!(store.admit("b.example", t0, HOLD), Reservation::Go);
    assert_eq!(store.admit("b.example", t0, HOLD), Reservation::Go);
    assert_eq!(
        store.admit("b.example", t0, HOLD),
        Reservation::Wait(secs(2))
    );
    assert_eq!(store.view("b.example", t0).unwrap().rate, 1.0);
    assert_eq!(store.view("a.example", t0).unwrap().rate, 0.5);
    assert_eq!(store.len(), 2);
}

#[test]
fn the_key_is_the_host_name_without_port_or_case() {
    let store = MemoryHosts::default();
    let t0 = Instant::now();
    // One budget: the second goes on the first slot's loan, the third
    // repays it, the fourth follows one interval later.
    assert_eq!(store.admit("Example.COM:443", t0, HOLD), Reservation::Go);
    assert_eq!(store.admit("EXAMPLE.com", t0, HOLD), Reservation::Go);
    assert_eq!(
        store.admit("example.com:8080", t0, HOLD),
        Reservation::Wait(secs(2))
    );
    assert_eq!(
        store.admit("example.com.", t0, HOLD),
        Reservation::Wait(secs(3))
    );
    assert_eq!(store.len(), 1);
    assert_eq!(store.views(t0, 10)[0].0, "example.com");
}

#[test]
fn per_host_overrides_apply_to_that_host_only() {
    let mut p = BudgetParams::default();
    p.hosts.insert(
        "Slow.Example".into(),
        HostOverride {
            start_rate: Some(0.25),
            max_rate: Some(0.5),
            ..Default::default()
        },
    );
    let store = MemoryHosts::new(p).unwrap();
    let t0 = Instant::now();
    assert_eq!(store.admit("slow.example", t0, HOLD), Reservation::Go);
    assert_eq!(store.admit("slow.example", t0, HOLD), Reservation::Go);
    assert_eq!(
        store.admit("slow.example", t0, HOLD),
        Reservation::Wait(secs(8))
    );
    assert_eq!(store.params("slow.example").max_rate, 0.5);
    assert_eq!(store.params("fast.example").max_rate, 8.0);

    let bad = BudgetParams {
        max_rate: -1.0,
        ..Default::default()
    };
    assert_eq!(MemoryHosts::new(bad).unwrap_err().key, "budget.max_rate");
}

#[test]
fn sweep_drops_idle_hosts_and_keeps_paused_ones() {
    let store = MemoryHosts::default();
    let t0 = Instant::now();
    for host in ["idle.example", "busy.example", "paused.example"] {
        assert_eq!(store.admit(host, t0, HOLD), Reservation::Go);
        assert_eq!(store.try_start(host, t0, HOLD), Start::Go);
    }
    store.on_response("idle.example", t0, wall(), 200, None, None, None, 0.0);
    store.on_response(
        "paused.example",
        t0,
        wall(),
        429,
        Some("600"),
        None,
        None,
        0.0,
    );
    // busy.example is still in flight.

    assert_eq!(store.sweep(t0 + secs(2)), 1);
    assert!(store.view("idle.example", t0).is_none());
    assert!(store.view("busy.example", t0).is_some());
    assert!(store.view("paused.example", t0).is_some());

    // The pause ends, but the lowered ceiling is remembered for hours.
    store.finish("busy.example", t0 + secs(3));
    assert_eq!(store.sweep(t0 + secs(700)), 1);
    assert_eq!(store.len(), 1);
    assert_eq!(store.sweep(t0 + secs(6 * 3600)), 0);
    assert_eq!(store.sweep(t0 + secs(6 * 3600 + 600)), 1);
    assert!(store.is_empty());
}

#[test]
fn persisted_hosts_round_trip_through_a_restart() {
    let store = MemoryHosts::default();
    let t0 = Instant::now();
    store.on_response(
        "paused.example",
        t0,
        wall(),
        429,
        Some("600"),
        None,
        None,
        0.0,
    );
    store.on_response("fine.example", t0, wall(), 200, None, None, None, 0.0);
    store.set_crawl_delay("paused.example", &|| t0, Some(10.0));

    let saved = store.persisted(t0 + secs(100), wall() + secs(100));
    assert_eq!(saved.len(), 1);
    let json = serde_json::to_string(&saved).unwrap();

    // A new process: its own monotonic clock, 60 s of wall time later.
    let restarted = MemoryHosts::default();
    let t1 = t0 + secs(10_000);
    restarted.restore(serde_json::from_str(&json).unwrap(), t1, wall() + secs(160));
    let v = restarted.view("paused.example", t1).unwrap();
    assert_eq!(v.paused_for, Some(secs(440)));
    assert_eq!(v.crawl_delay, Some(secs(10)));
    assert_eq!(v.rate, 0.1);
    assert_eq!(
        v.ceiling,
        store
            .view("paused.example", t0 + secs(160))
            .unwrap()
            .ceiling
    );
    assert_eq!(
        restarted.admit("paused.example", t1, HOLD),
        Reservation::Refuse(Refusal::Paused {
            retry_after: secs(440)
        })
    );
    assert!(restarted.view("fine.example", t1).is_none());
}

#[test]
fn the_store_is_shared_across_threads() {
    let store: Arc<dyn HostStore> = Arc::new(MemoryHosts::default());
    let t0 = Instant::now();
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                (0..10)
                    .map(|_| store.admit("shared.example", t0, HOLD))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let (mut waits, mut refused) = (Vec::new(), 0);
    for a in handles.into_iter().flat_map(|h| h.join().unwrap()) {
        match a {
            Reservation::Go => waits.push(Duration::ZERO),
            Reservation::Wait(d) => waits.push(d),
            Reservation::Refuse(Refusal::QueueFull { .. }) => refused += 1,
            Reservation::Refuse(r) => panic!("refused: {r:?}"),
        }
    }
    waits.sort();
    // 40 requests at one instant, 1/s, 30 s hold: the slot at 0 given twice
    // (the second on the first's loan), then every slot from 2 to 30 s
    // exactly once, the other 9 refused.
    let want: Vec<Duration> = [0, 0].into_iter().chain(2..=30).map(secs).collect();
    assert_eq!(waits, want);
    assert_eq!(refused, 9);
}

#[test]
fn a_reloaded_budget_table_applies_to_known_hosts_and_keeps_what_they_learned() {
    let hosts = MemoryHosts::new(BudgetParams::default()).unwrap();
    let t0 = Instant::now();
    let _ = hosts.admit("a.example", t0, Duration::from_secs(30));
    let _ = hosts.try_start("a.example", t0, Duration::from_secs(30));
    let _ = hosts.on_response("a.example", t0, wall(), 429, Some("600"), None, None, 0.0);
    let paused = hosts.view("a.example", t0).unwrap().paused_for;
    assert!(paused.is_some());
    let lower = BudgetParams {
        start_rate: 0.25,
        max_rate: 0.25,
        ..BudgetParams::default()
    };
    hosts.set_budget_params(lower).unwrap();
    let v = hosts.view("a.example", t0).unwrap();
    assert_eq!(v.ceiling, 0.25, "the new max_rate caps the host");
    assert_eq!(v.paused_for, paused, "the pause it learned stays");
    let bad = BudgetParams {
        max_rate: -1.0,
        ..BudgetParams::default()
    };
    let err = hosts.set_budget_params(bad).unwrap_err();
    assert_eq!(err.key, "budget.max_rate");
    assert_eq!(
        hosts.view("a.example", t0).unwrap().ceiling,
        0.25,
        "a bad table changes nothing"
    );
}

/// One request to `host` at `t`, answered `status`.
fn visit(store: &MemoryHosts, host: &str, t: Instant, status: u16, retry_after: Option<&str>) {
    assert_eq!(store.admit(host, t, HOLD), Reservation::Go);
    assert_eq!(store.try_start(host, t, HOLD), Start::Go);
    store.on_response(host, t, wall(), status, retry_after, None, None, 0.0);
}

fn bounded(max_hosts: usize) -> MemoryHosts {
    MemoryHosts::new(BudgetParams {
        max_hosts,
        ..BudgetParams::default()
    })
    .unwrap()
}

#[test]
fn one_host_past_max_hosts_drops_the_least_recently_used() {
    let store = bounded(4);
    let t0 = Instant::now();
    for i in 0..4 {
        visit(&store, &format!("h{i}"), t0 + secs(10 * i), 200, None);
    }
    // h0 is used again: h1 is the least recently used now.
    visit(&store, "h0", t0 + secs(40), 200, None);
    assert_eq!(store.len(), 4);
    visit(&store, "h4", t0 + secs(50), 200, None);
    assert_eq!(store.len(), 4);
    assert!(store.view("h1", t0 + secs(50)).is_none());
    for h in ["h0", "h2", "h3", "h4"] {
        assert!(store.view(h, t0 + secs(50)).is_some(), "{h} kept");
    }
    let e = store.evicted();
    assert_eq!((e.idle, e.learned), (1, 0));
}

#[test]
fn a_paused_host_is_never_dropped_for_room_and_its_ceiling_goes_last() {
    let store = bounded(2);
    let t0 = Instant::now();
    visit(&store, "paused.example", t0, 429, Some("120"));
    visit(&store, "h1", t0 + secs(10), 200, None);
    visit(&store, "h2", t0 + secs(20), 200, None);
    // Over the bound: the idle h1 goes, older as the paused host is.
    assert!(store.view("h1", t0 + secs(20)).is_none());
    visit(&store, "h3", t0 + secs(30), 200, None);
    assert!(store.view("h2", t0 + secs(30)).is_none());
    let paused = store.view("paused.example", t0 + secs(30)).unwrap();
    assert_eq!(paused.paused_for, Some(secs(90)));
    assert_eq!(store.len(), 2);
    // The pause over, the host keeps only a lowered ceiling: another idle
    // host goes before it...
    visit(&store, "h4", t0 + secs(200), 200, None);
    assert!(store.view("h3", t0 + secs(200)).is_none());
    assert!(store.view("paused.example", t0 + secs(200)).is_some());
    // ...and it goes, counted, once no idle host is left to drop (h4's
    // next request goes on its first slot's loan, to be repaid: a slot
    // reserved ahead).
    let t = t0 + secs(200);
    assert_eq!(store.admit("h4", t, HOLD), Reservation::Go);
    visit(&store, "h5", t, 200, None);
    assert!(store.view("paused.example", t).is_none());
    let e = store.evicted();
    assert_eq!((e.idle, e.learned), (3, 1));
}

#[test]
fn max_hosts_of_zero_is_refused() {
    let err = MemoryHosts::new(BudgetParams {
        max_hosts: 0,
        ..BudgetParams::default()
    })
    .unwrap_err();
    assert!(err.to_string().contains("budget.max_hosts"), "{err}");
}
