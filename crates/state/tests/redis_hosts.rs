//! The Redis host store against a real redis-server: two stores stand for
//! two proxies of one cluster.

// Tests take their instants and wall times from the system clocks.
#![allow(clippy::disallowed_methods)]

use mannerly_test_support::redis_server;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use mannerly_policy::budget::{BudgetParams, Reaction, Reservation, Start};
use mannerly_state::hosts::{Basis, Lease, RedisHosts, RedisSettings};
use redis_server::RedisServer;

const HOST: &str = "example.com";

fn store(server: &RedisServer, lease_ttl: Duration) -> RedisHosts {
    let mut s = RedisSettings::new(server.url());
    s.key_prefix = String::from("test:");
    s.lease_ttl = lease_ttl;
    // A loaded test machine must not look like an unreachable Redis.
    s.command_timeout = Duration::from_secs(2);
    RedisHosts::new(BudgetParams::default(), s, SystemTime::now()).expect("store")
}

async fn send(s: &RedisHosts, status: u16, retry_after: Option<&str>) -> Reaction {
    let now = Instant::now();
    let wall = SystemTime::now();
    let hold = s.params(HOST).max_hold();
    let a = s.admit(HOST, now, wall, hold).await;
    assert_eq!(a.basis, Basis::Shared);
    if let Reservation::Wait(d) = a.value {
        tokio::time::sleep(d).await;
    }
    let now = Instant::now();
    let st = s
        .try_start_since(HOST, now, SystemTime::now(), hold, now)
        .await;
    let (Start::Go, Some(lease)) = st.value else {
        panic!("expected to start, got {:?}", st.value);
    };
    let r = s
        .on_response(
            HOST,
            &lease,
            Instant::now(),
            SystemTime::now(),
            status,
            retry_after,
            None,
            None,
            0.0,
        )
        .await;
    assert_eq!(r.basis, Basis::Shared);
    r.value
}

#[tokio::test]
async fn one_429_slows_the_whole_cluster_once() {
    let Some(server) = RedisServer::start("one_429_slows_the_whole_cluster_once") else {
        return;
    };
    let a = store(&server, Duration::from_secs(30));
    let b = store(&server, Duration::from_secs(30));
    let ok = send(&a, 200, None).await;
    let before = ok.rate();
    // `a` sends a request that is still out when `b`'s 429 comes.
    let hold = a.params(HOST).max_hold();
    let now = Instant::now();
    if let Reservation::Wait(d) = a.admit(HOST, now, SystemTime::now(), hold).await.value {
        tokio::time::sleep(d).await;
    }
    let now = Instant::now();
    let (Start::Go, Some(early)) = a
        .try_start_since(HOST, now, SystemTime::now(), hold, now)
        .await
        .value
    else {
        panic!("a starts");
    };

    let Reaction::Throttled(t) = send(&b, 429, Some("1")).await else {
        panic!("a 429 throttles");
    };
    assert!(t.rate < before, "the rate was lowered");
    // The other proxy sees the same pause and rate without any response of
    // its own.
    let refused = a
        .admit(HOST, Instant::now(), SystemTime::now(), Duration::ZERO)
        .await;
    assert!(
        matches!(refused.value, Reservation::Refuse(_)),
        "paused for the whole cluster: {:?}",
        refused.value
    );
    let va = a.view(HOST, Instant::now()).expect("a saw the host");
    assert_eq!(va.rate, t.rate);
    assert_eq!(va.recent_throttles, 1);

    // The 429 to `a`'s early request is the same episode: the rate is not
    // lowered a second time and the breaker does not count it.
    let echo = a
        .on_response(
            HOST,
            &early,
            Instant::now(),
            SystemTime::now(),
            429,
            Some("1"),
            None,
            None,
            0.0,
        )
        .await;
    let Reaction::Throttled(e) = echo.value else {
        panic!("still a throttle");
    };
    assert_eq!(e.rate, t.rate);
    let vb = b.view(HOST, Instant::now());
    let va = a.view(HOST, Instant::now()).expect("view");
    assert_eq!(va.recent_throttles, 1);
    assert!(vb.is_some());
}

#[tokio::test]
async fn a_lone_proxy_pays_two_round_trips_per_page() {
    let Some(server) = RedisServer::start("a_lone_proxy_pays_two_round_trips_per_page") else {
        return;
    };
    let a = store(&server, Duration::from_secs(30));
    let calls = || server_script_calls(&server);
    // Loaded beforehand, so that no first EVALSHA is refused and repeated.
    server.cli(&["SCRIPT", "LOAD", mannerly_state::hosts::SCRIPT]);
    let before = calls();
    // A new host's first slot is now (admit and start in one call); the
    // next ones wait (the admit rides on the next call).
    for _ in 0..5 {
        send(&a, 200, None).await;
    }
    let st = a.stats();
    assert_eq!(st.ops.load(Ordering::Relaxed), 15);
    assert_eq!(st.round_trips.load(Ordering::Relaxed), 10);
    assert_eq!(st.conflicts.load(Ordering::Relaxed), 0);
    // Counted by the server too.
    assert_eq!(calls() - before, 10);
}

/// Script calls the server has run (`INFO commandstats`).
fn server_script_calls(server: &RedisServer) -> u64 {
    let info = server.cli(&["INFO", "commandstats"]);
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

#[tokio::test]
async fn a_reservation_kept_unstored_is_reserved_again_when_another_proxy_moved() {
    let Some(server) = RedisServer::start(
        "a_reservation_kept_unstored_is_reserved_again_when_another_proxy_moved",
    ) else {
        return;
    };
    let a = store(&server, Duration::from_secs(30));
    let b = store(&server, Duration::from_secs(30));
    send(&a, 200, None).await;
    // The second request goes on the first slot's loan.
    send(&a, 200, None).await;
    // `a`'s next slot must wait: kept here, not in Redis.
    let hold = a.params(HOST).max_hold();
    let t0 = Instant::now();
    let Reservation::Wait(d) = a.admit(HOST, t0, SystemTime::now(), hold).await.value else {
        panic!("the second slot waits");
    };
    // Meanwhile `b` reserves what Redis shows as the next slot: the same.
    let rb = b.admit(HOST, Instant::now(), SystemTime::now(), hold).await;
    assert!(matches!(rb.value, Reservation::Wait(_)), "{:?}", rb.value);
    tokio::time::sleep(d).await;
    let now = Instant::now();
    let st = a
        .try_start_since(HOST, now, SystemTime::now(), hold, t0)
        .await;
    // `a`'s slot was never stored, so it is `b`'s: `a` reserves again,
    // after it, rather than sending in the same slot.
    assert_eq!(st.basis, Basis::Shared);
    assert!(
        matches!(st.value, (Start::Wait(w), None) if w > Duration::ZERO),
        "a must not take b's slot: {:?}",
        st.value
    );
    assert!(a.stats().conflicts.load(Ordering::Relaxed) >= 1);
}

#[tokio::test]
async fn leases_of_a_dead_proxy_expire() {
    let Some(server) = RedisServer::start("leases_of_a_dead_proxy_expire") else {
        return;
    };
    let ttl = Duration::from_secs(1);
    let dead = store(&server, ttl);
    let alive = store(&server, ttl);
    let limit = dead.params(HOST).concurrency;
    let hold = Duration::from_secs(60);
    // The doomed proxy takes every slot and never gives one back.
    for _ in 0..limit {
        let now = Instant::now();
        let _ = dead.admit(HOST, now, SystemTime::now(), hold).await;
        loop {
            let now = Instant::now();
            let st = dead
                .try_start_since(HOST, now, SystemTime::now(), hold, now)
                .await;
            match st.value {
                (Start::Go, Some(Lease::Shared(_))) => break,
                (Start::Wait(d), _) => tokio::time::sleep(d).await,
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    drop(dead);
    let now = Instant::now();
    let st = alive
        .try_start_since(HOST, now, SystemTime::now(), hold, now)
        .await;
    assert_eq!(st.value.0, Start::WaitConcurrency, "all slots are leased");
    // Once the leases have expired the full concurrency is back.
    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    let mut started = Vec::new();
    for _ in 0..limit {
        loop {
            let now = Instant::now();
            let st = alive
                .try_start_since(HOST, now, SystemTime::now(), hold, now)
                .await;
            match st.value {
                (Start::Go, Some(l)) => {
                    started.push(l);
                    break;
                }
                (Start::Wait(d), _) => tokio::time::sleep(d).await,
                other => panic!("a stuck lease: {other:?}"),
            }
        }
    }
    assert_eq!(started.len() as u32, limit);
}

#[tokio::test]
async fn without_redis_decides_alone_at_a_quarter_then_shares_again() {
    let Some(mut server) =
        RedisServer::start("without_redis_decides_alone_at_a_quarter_then_shares_again")
    else {
        return;
    };
    let mut settings = RedisSettings::new(server.url());
    settings.command_timeout = Duration::from_millis(200);
    settings.probe_every = Duration::from_millis(100);
    let a = RedisHosts::new(BudgetParams::default(), settings, SystemTime::now()).expect("store");
    let shared_rate = send(&a, 200, None).await.rate();

    server.kill();
    let now = Instant::now();
    let hold = a.params(HOST).max_hold();
    // A slot that must wait is kept here on the copy seen last, as Redis
    // is not asked; the next step that asks finds it gone.
    let d = a.admit(HOST, now, SystemTime::now(), hold).await;
    if matches!(d.value, Reservation::Wait(_)) && d.basis == Basis::Shared {
        let now = Instant::now();
        let st = a
            .try_start_since(HOST, now, SystemTime::now(), hold, now)
            .await;
        assert_eq!(st.basis, Basis::Degraded, "decided alone");
        assert!(
            !matches!(st.value.0, Start::Go),
            "the kept slot is reserved again on the stand-in: {:?}",
            st.value
        );
    } else {
        assert_eq!(d.basis, Basis::Degraded, "decided alone");
    }
    assert!(a.is_degraded());
    let v = a.view(HOST, Instant::now()).expect("local view");
    assert!(
        v.rate <= shared_rate / 4.0 + 1e-9,
        "degraded rate {} vs shared {shared_rate}",
        v.rate
    );
    // A request started alone is given back alone.
    let now = Instant::now();
    let st = a
        .try_start_since(HOST, now, SystemTime::now(), hold, now)
        .await;
    if let (Start::Go, Some(lease)) = st.value {
        assert_eq!(lease, Lease::Local);
        let r = a
            .on_response(
                HOST,
                &lease,
                Instant::now(),
                SystemTime::now(),
                200,
                None,
                None,
                None,
                0.0,
            )
            .await;
        assert_eq!(r.basis, Basis::Degraded);
        assert!(r.value.rate() <= shared_rate / 4.0 + 1e-9);
    }

    server.restart();
    tokio::time::sleep(Duration::from_millis(150)).await;
    // The connection comes back within a few probes.
    let mut shared = false;
    for _ in 0..50 {
        let now = Instant::now();
        let d = a.admit(HOST, now, SystemTime::now(), hold).await;
        if d.basis == Basis::Shared {
            shared = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(shared, "back to shared state once Redis answers");
    assert!(!a.is_degraded());
}

/// A start that goes while another request waits behind it reserves that
/// request's slot in the same call: the next request picks it up without
/// a round trip, and other proxies queue behind it.
#[tokio::test]
async fn a_start_reserves_the_next_requests_slot_in_the_same_call() {
    let Some(server) =
        RedisServer::start("a_start_reserves_the_next_requests_slot_in_the_same_call")
    else {
        return;
    };
    let a = store(&server, Duration::from_secs(30));
    let b = store(&server, Duration::from_secs(30));
    let hold = a.params(HOST).max_hold();
    // The first slot and the one on its loan.
    send(&a, 200, None).await;
    send(&a, 200, None).await;
    let t0 = Instant::now();
    let Reservation::Wait(d) = a.admit(HOST, t0, SystemTime::now(), hold).await.value else {
        panic!("the third slot waits");
    };
    tokio::time::sleep(d).await;
    let trips = || a.stats().round_trips.load(Ordering::Relaxed);
    let before = trips();
    let now = Instant::now();
    let st = a
        .try_start_then_admit(HOST, now, SystemTime::now(), hold, t0, Some(hold))
        .await;
    assert!(matches!(st.value, (Start::Go, Some(_))), "{:?}", st.value);
    assert_eq!(
        trips() - before,
        1,
        "the start and the next admit: one call"
    );

    let (next, reserved) = a
        .take_early_admit(HOST, Instant::now(), hold)
        .expect("the next request's slot");
    assert_eq!(next.basis, Basis::Shared);
    assert_eq!(reserved, now);
    let Reservation::Wait(w) = next.value else {
        panic!("the next slot is one interval on: {:?}", next.value);
    };
    assert_eq!(trips() - before, 1, "picked up without a call");
    assert!(a.take_early_admit(HOST, Instant::now(), hold).is_none());
    // The slot is in the shared copy: another proxy queues behind it.
    let Reservation::Wait(wb) = b
        .admit(HOST, Instant::now(), SystemTime::now(), hold)
        .await
        .value
    else {
        panic!("b waits");
    };
    assert!(wb > w, "b's slot ({wb:?}) comes after a's next ({w:?})");
}

/// Another proxy's change, told to this proxy as the next to act on the
/// host (its request waits for its slot), replaces this proxy's copy: its
/// next step is stored in one round, where it would have found the copy
/// changed and decided again.
#[tokio::test]
async fn a_change_heard_from_another_proxy_spares_the_next_step_a_lost_round() {
    let Some(server) =
        RedisServer::start("a_change_heard_from_another_proxy_spares_the_next_step_a_lost_round")
    else {
        return;
    };
    let a = store(&server, Duration::from_secs(30));
    let b = std::sync::Arc::new(store(&server, Duration::from_secs(30)));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let hears = b.clone();
    let wakes = mannerly_state::wake::Wakes::subscribe(
        &server.url(),
        "test:",
        Duration::from_secs(2),
        move |host, payload| {
            hears.heard(host, payload, Instant::now(), SystemTime::now());
            let _ = tx.send(host.to_string());
        },
    )
    .expect("subscriber");
    for _ in 0..200 {
        if wakes.is_live() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(wakes.is_live(), "the subscriber never came up");
    b.listen_with(wakes.waiters());
    let hearings = [
        b.hear(HOST).expect("a subscriber"),
        wakes.waiters().hear("marker"),
    ];
    for h in &hearings {
        assert!(h.ready(Duration::from_secs(10)).await, "subscribed");
    }
    let hold = a.params(HOST).max_hold();
    // Both proxies call the host: it is shared; `b`'s request waits for
    // its slot, the next to come.
    send(&a, 200, None).await;
    // (Admits that are never kept unstored: a wait is registered in the
    // call that decides it.)
    let mut waits = b
        .admit_own(HOST, Instant::now(), SystemTime::now(), hold)
        .await;
    if waits.value == Reservation::Go {
        // The host's first slot was free: the next one waits.
        waits = b
            .admit_own(HOST, Instant::now(), SystemTime::now(), hold)
            .await;
    }
    assert!(matches!(waits.value, Reservation::Wait(_)), "{waits:?}");
    // Messages come in order on the one connection: past a marker sent
    // now, every change told so far has been taken in.
    server.cli(&["PUBLISH", "test:{marker}:w", ""]);
    loop {
        let got = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await;
        if got.expect("the marker comes").as_deref() == Some("marker") {
            break;
        }
    }
    let conflicts = || b.stats().conflicts.load(Ordering::Relaxed);
    let before = conflicts();

    // `a` reserves a slot, after `b`'s; `b`, which acts first, is told
    // the new copy before its own step.
    let _ = a.admit(HOST, Instant::now(), SystemTime::now(), hold).await;
    let heard = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("a's change is told");
    assert_eq!(heard.as_deref(), Some(HOST));
    let trips = b.stats().round_trips.load(Ordering::Relaxed);
    let r = b
        .admit_own(HOST, Instant::now(), SystemTime::now(), hold)
        .await;
    assert_eq!(r.basis, Basis::Shared);
    assert_eq!(b.stats().round_trips.load(Ordering::Relaxed) - trips, 1);
    assert_eq!(conflicts() - before, 0, "b decided on the copy it heard");
}

/// The budget script of the earlier wake scheme, whose proxies listen on
/// every host by one pattern and publish every change plainly.
const EARLIER_SCRIPT: &str = include_str!("fixtures/op_before_issue_49.lua");

/// A rolling upgrade on one Redis node. Proxies of the earlier schemes
/// listen on the host's channel: by one pattern over every host (the
/// first), or by a subscription per waited-on host (the second). This
/// scheme's script still tells them every release there while one
/// listens. The other way, an earlier script tells only the host's
/// channel, where no proxy of this scheme listens: this scheme's waiter
/// takes the slot at its next look (docs/cluster.md, "Upgrading").
#[tokio::test]
async fn earlier_wake_schemes_still_hear_releases_and_current_waiters_look_again() {
    let Some(server) = RedisServer::start(
        "earlier_wake_schemes_still_hear_releases_and_current_waiters_look_again",
    ) else {
        return;
    };
    let client = redis::Client::open(server.url()).expect("client");
    let mut first = client.get_async_pubsub().await.expect("pubsub");
    first.psubscribe("test:{*}:w").await.expect("psubscribe");
    let mut second = client.get_async_pubsub().await.expect("pubsub");
    second
        .subscribe("test:{example.com}:w")
        .await
        .expect("subscribe");
    let (mut first, mut second) = (first.into_on_message(), second.into_on_message());

    // Current -> earlier: a release by a current proxy reaches both.
    let other = store(&server, Duration::from_secs(30));
    let now = Instant::now();
    let hold = other.params(HOST).max_hold();
    let st = other
        .try_start_since(HOST, now, SystemTime::now(), hold, now)
        .await;
    let (Start::Go, Some(lease)) = st.value else {
        panic!("expected to start, got {:?}", st.value);
    };
    other
        .finish(HOST, &lease, Instant::now(), SystemTime::now())
        .await;
    for earlier in [&mut first, &mut second] {
        let channel = next_release(earlier).await;
        assert_eq!(channel, "test:{example.com}:w");
    }

    // Earlier -> current: the current proxy waits for the one slot the
    // earlier script holds, listening on its own channel.
    let mut s = RedisSettings::new(server.url());
    s.key_prefix = String::from("test:");
    s.command_timeout = Duration::from_secs(2);
    let one_slot = BudgetParams {
        concurrency: 1,
        ..BudgetParams::default()
    };
    let current =
        std::sync::Arc::new(RedisHosts::new(one_slot, s, SystemTime::now()).expect("store"));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let hears = current.clone();
    let wakes = mannerly_state::wake::Wakes::subscribe(
        &server.url(),
        "test:",
        Duration::from_secs(2),
        move |host, payload| {
            let heard = hears.heard(host, payload, Instant::now(), SystemTime::now());
            let _ = tx.send((host.to_string(), heard));
        },
    )
    .expect("subscriber");
    current.listen_with(wakes.waiters());
    let hearings = [
        current.hear(HOST).expect("a subscriber"),
        wakes.waiters().hear("marker"),
    ];
    for h in &hearings {
        assert!(h.ready(Duration::from_secs(10)).await, "subscribed");
    }
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connection");
    earlier_lease(&mut conn, "+").await;
    let look = || async {
        let now = Instant::now();
        current
            .try_start_since(HOST, now, SystemTime::now(), hold, now)
            .await
            .value
    };
    assert_eq!(look().await.0, Start::WaitConcurrency);
    earlier_lease(&mut conn, "-").await;
    // Told nothing on its own channel (the marker comes first) ...
    server.cli(&["PUBLISH", "test:{marker}:w", ""]);
    let (host, _) = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("the marker comes")
        .expect("the subscriber lives");
    assert_eq!(host, "marker");
    // ... its next look finds the slot free.
    let (Start::Go, Some(lease)) = look().await else {
        panic!("the current proxy takes the slot the earlier one gave back");
    };
    current
        .finish(HOST, &lease, Instant::now(), SystemTime::now())
        .await;
}

/// The earlier script takes (`+`) or gives back (`-`) its lease on `HOST`.
async fn earlier_lease(conn: &mut redis::aio::MultiplexedConnection, sign: &str) {
    let (h, l, c) = (
        "test:{example.com}:h",
        "test:{example.com}:l",
        "test:{example.com}:c",
    );
    let budget: Option<Vec<u8>> = redis::cmd("GET")
        .arg(h)
        .query_async(conn)
        .await
        .expect("GET");
    let _: redis::Value = redis::Script::new(EARLIER_SCRIPT)
        .key(h)
        .key(l)
        .key(c)
        .arg(budget.unwrap_or_default())
        .arg("")
        .arg("")
        .arg(60_000)
        .arg(sign)
        .arg("earlier-lease")
        .arg(30_000)
        .arg("test:{example.com}:w")
        .arg("earlier-proxy")
        .arg("")
        .arg(10_000)
        .invoke_async(conn)
        .await
        .expect("the earlier script runs");
}

/// The channel of the next release an earlier-scheme subscriber hears.
async fn next_release(
    earlier: &mut (impl futures_core::Stream<Item = redis::Msg> + Unpin),
) -> String {
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let m = std::future::poll_fn(|cx| {
                futures_core::Stream::poll_next(std::pin::Pin::new(&mut *earlier), cx)
            })
            .await
            .expect("the earlier subscriber lives");
            if m.get_payload_bytes().starts_with(b"-") {
                return m.get_channel_name().to_string();
            }
        }
    })
    .await
    .expect("the earlier proxy hears the release")
}
