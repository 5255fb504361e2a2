//! Contention on one host against a real redis-server. Another proxy that
//! writes between this one's read and its compare-and-set is played by a
//! few lines of Lua run inside the script, just before it compares: the
//! interleaving that is a race between real proxies happens on every round.

// Tests take their instants and wall times from the system clocks.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant, SystemTime};

use mannerly_policy::budget::{BudgetParams, HostBudget, HostView, Reaction, Reservation, Start};

use super::*;

use mannerly_test_support::redis_server;

use redis_server::RedisServer;

/// A new request's hold.
const HOLD: Duration = Duration::from_secs(30);
const HOT: &str = "hot.example";
const COLD: &str = "cold.example";
/// Where the other proxy's next copy of `HOT` waits.
const NEXT_COPY: &str = "test:{hot.example}:next-copy";

fn store(server: &RedisServer) -> RedisHosts {
    let mut s = RedisSettings::new(server.url());
    s.key_prefix = String::from("test:");
    // A loaded test machine must not look like an unreachable Redis.
    s.command_timeout = Duration::from_secs(2);
    RedisHosts::new(BudgetParams::default(), s, SystemTime::now()).expect("store")
}

/// The budget script, behind a prologue in which another proxy swaps
/// `HOT`'s copy with the one waiting in `NEXT_COPY` (two valid copies that
/// differ), so every round on `HOT` finds the copy changed.
fn losing_on_hot() -> redis::Script {
    redis::Script::new(&format!(
        "if KEYS[1] == 'test:{{{HOT}}}:h' then
           local cur = redis.call('GET', KEYS[1])
           redis.call('SET', KEYS[1], redis.call('GET', '{NEXT_COPY}'))
           redis.call('SET', '{NEXT_COPY}', cur)
         end
         {SCRIPT}"
    ))
}

/// The other proxy writes `budget` as `HOT`'s copy, and keeps a second copy
/// of it ready for the swap: the same budget encoded against a wall clock
/// 1 ms later, so other bytes.
async fn other_proxy_writes(s: &RedisHosts, budget: &HostBudget) {
    let (now, wall) = (Instant::now(), SystemTime::now());
    let copy = budget.encode(now, wall);
    let next = budget.encode(now, wall + Duration::from_millis(1));
    assert_ne!(copy, next);
    let mut conn = s.connection();
    let () = redis::cmd("MSET")
        .arg(format!("test:{{{HOT}}}:h"))
        .arg(copy)
        .arg(NEXT_COPY)
        .arg(next)
        .query_async(&mut conn)
        .await
        .expect("MSET");
}

/// `HOT`'s stand-in in `s`, if it has one.
fn stand_in(s: &RedisHosts) -> Option<HostView> {
    s.fallback.view(HOT, &s.params(HOT), Instant::now())
}

async fn exists(s: &RedisHosts, key: &str) -> bool {
    let mut conn = s.connection();
    let n: i64 = redis::cmd("EXISTS")
        .arg(key)
        .query_async(&mut conn)
        .await
        .expect("EXISTS");
    n == 1
}

#[tokio::test]
async fn contention_on_one_host_decides_that_step_alone_and_the_store_stays_shared() {
    let Some(server) = RedisServer::start(
        "contention_on_one_host_decides_that_step_alone_and_the_store_stays_shared",
    ) else {
        return;
    };
    // Another proxy drew a 429 on HOT: the cluster pauses it for a minute.
    let mut a = store(&server);
    let (p, now, wall) = (a.params(HOT), Instant::now(), SystemTime::now());
    let mut paused = HostBudget::new(&p, now);
    let Reaction::Throttled(t) = paused.on_answer(&p, now, wall, 429, Some("60"), None, 0.0) else {
        panic!("a 429 throttles");
    };
    other_proxy_writes(&a, &paused).await;

    a.script = losing_on_hot();
    let d = a
        .admit(HOT, Instant::now(), SystemTime::now(), Duration::ZERO)
        .await;
    assert_eq!(d.basis, Basis::Contended);
    // Decided on the newest copy Redis answered: the pause another proxy
    // learned holds here too (a new host's budget would have let it go).
    assert!(
        matches!(d.value, Reservation::Refuse(_)),
        "paused for the cluster: {:?}",
        d.value
    );
    let st = a.stats();
    assert_eq!(
        st.round_trips.load(Ordering::Relaxed),
        u64::from(MAX_ROUNDS)
    );
    assert_eq!(st.conflicts.load(Ordering::Relaxed), u64::from(MAX_ROUNDS));
    assert_eq!(st.contended_ops.load(Ordering::Relaxed), 1);
    assert_eq!(st.degraded_ops.load(Ordering::Relaxed), 0);
    // At the floor rate: the shared rate over `instances_hint`.
    let local_rate = stand_in(&a).map(|v| v.rate).expect("a stand-in for HOT");
    assert!(
        local_rate <= t.rate / f64::from(a.settings.instances_hint) + 1e-9,
        "stand-in rate {local_rate} vs shared {}",
        t.rate
    );

    // Nothing else is local: the store is shared, and the next host is
    // decided in Redis with one round trip.
    assert!(!a.is_degraded());
    assert!(!exists(&a, &format!("test:{{{COLD}}}:h")).await);
    let d = a
        .admit(COLD, Instant::now(), SystemTime::now(), Duration::ZERO)
        .await;
    assert_eq!(d.basis, Basis::Shared);
    assert!(exists(&a, &format!("test:{{{COLD}}}:h")).await);
    assert_eq!(
        a.stats().round_trips.load(Ordering::Relaxed),
        u64::from(MAX_ROUNDS) + 1
    );
    assert_eq!(a.stats().degraded_ops.load(Ordering::Relaxed), 0);

    // Once the other proxy stops writing, HOT is shared again and its
    // stand-in is gone (a later fallback starts from the newest copy).
    a.script = redis::Script::new(SCRIPT);
    let d = a
        .admit(HOT, Instant::now(), SystemTime::now(), Duration::ZERO)
        .await;
    assert_eq!(d.basis, Basis::Shared);
    assert!(matches!(d.value, Reservation::Refuse(_)), "{:?}", d.value);
    assert!(stand_in(&a).is_none());
}

#[tokio::test]
async fn a_request_started_under_contention_teaches_the_cluster_its_429() {
    let Some(server) =
        RedisServer::start("a_request_started_under_contention_teaches_the_cluster_its_429")
    else {
        return;
    };
    let other = store(&server);
    let mut a = store(&server);
    let p = a.params(HOT);
    other_proxy_writes(&a, &HostBudget::new(&p, Instant::now())).await;

    a.script = losing_on_hot();
    let hold = p.max_hold();
    let now = Instant::now();
    let st = a
        .try_start_since(HOT, now, SystemTime::now(), hold, now)
        .await;
    assert_eq!(st.basis, Basis::Contended);
    let (Start::Go, Some(lease)) = st.value else {
        panic!("expected to start, got {:?}", st.value);
    };
    assert_eq!(lease, Lease::Local);

    // The answer comes back when Redis is no longer contended: what it
    // teaches is the cluster's, not this proxy's stand-in's.
    a.script = redis::Script::new(SCRIPT);
    let r = a
        .on_response(
            HOT,
            &lease,
            Instant::now(),
            SystemTime::now(),
            429,
            Some("60"),
            None,
            None,
            0.0,
        )
        .await;
    assert_eq!(r.basis, Basis::Shared);
    assert!(matches!(r.value, Reaction::Throttled(_)), "{:?}", r.value);
    let paused = other
        .admit(HOT, Instant::now(), SystemTime::now(), Duration::ZERO)
        .await;
    assert_eq!(paused.basis, Basis::Shared);
    assert!(
        matches!(paused.value, Reservation::Refuse(_)),
        "the other proxy sees the pause: {:?}",
        paused.value
    );
    // The stand-in's slot came back with the answer, and the stand-in went.
    assert!(stand_in(&a).is_none());
}

#[tokio::test]
async fn a_lease_given_back_on_one_proxy_wakes_the_other_by_message() {
    let Some(server) =
        RedisServer::start("a_lease_given_back_on_one_proxy_wakes_the_other_by_message")
    else {
        return;
    };
    let a = store(&server);
    let other = std::sync::Arc::new(store(&server));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, super::Heard)>();
    let hears = other.clone();
    let b = crate::wake::Wakes::subscribe(&server.url(), "test:", Duration::from_secs(2), {
        move |host, payload| {
            let heard = hears.heard(host, payload, Instant::now(), SystemTime::now());
            let _ = tx.send((host.to_string(), heard));
        }
    })
    .expect("subscriber");
    // Bounded so that a subscriber that never comes up fails, not hangs.
    for _ in 0..200 {
        if b.is_live() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(b.is_live(), "the subscriber never came up");
    other.listen_with(b.waiters());
    // The other proxy listens on both hosts' channels (as a waiting
    // request makes it); `a` listens on none.
    let hearings = [HOT, COLD].map(|h| b.waiters().hear(h));
    for h in &hearings {
        assert!(h.ready(Duration::from_secs(10)).await, "subscribed");
    }

    let hold = a.params(HOT).max_hold();
    // The other proxy alone on the host: its change is told to no one.
    let admitted = other
        .admit(HOT, Instant::now(), SystemTime::now(), hold)
        .await;
    assert_eq!(admitted.basis, Basis::Shared);
    let now = Instant::now();
    let st = a
        .try_start_since(HOT, now, SystemTime::now(), hold, now)
        .await;
    let (Start::Go, Some(lease)) = st.value else {
        panic!("expected to start, got {:?}", st.value);
    };
    assert!(matches!(lease, Lease::Shared(_)));
    // Now two proxies share it: taking a lease is told, frees nothing, and
    // the other proxy's copy has it in flight without asking.
    let (host, heard) = next(&mut rx).await;
    assert_eq!((host.as_str(), heard), (HOT, super::Heard::default()));
    // (Its own admit's slot was now: it started too, and holds a lease.)
    let seen = other.view(HOT, Instant::now()).expect("seen");
    assert_eq!(seen.in_flight, 2);

    a.finish(HOT, &lease, Instant::now(), SystemTime::now())
        .await;
    let (host, heard) = next(&mut rx).await;
    assert_eq!(host, HOT);
    assert!(heard.released, "the freed slot is told");
    assert_eq!(b.messages(), 2);
    // Giving the same lease back again removes nothing and tells no one.
    a.finish(HOT, &lease, Instant::now(), SystemTime::now())
        .await;
    // A host `a` drives alone: only the release is told.
    let cold = a
        .try_start_since(
            COLD,
            Instant::now(),
            SystemTime::now(),
            hold,
            Instant::now(),
        )
        .await;
    let (Start::Go, Some(cold_lease)) = cold.value else {
        panic!("expected to start, got {:?}", cold.value);
    };
    a.finish(COLD, &cold_lease, Instant::now(), SystemTime::now())
        .await;
    let (host, heard) = next(&mut rx).await;
    assert_eq!(host, COLD, "no third message for HOT");
    assert!(heard.released, "COLD's take was told to no one");
    assert_eq!(b.messages(), 3);
}

async fn next(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<(String, super::Heard)>,
) -> (String, super::Heard) {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("a message")
        .expect("the subscriber lives")
}

#[tokio::test]
async fn a_paused_copy_dropped_for_room_is_read_again_from_redis() {
    let Some(server) =
        RedisServer::start("a_paused_copy_dropped_for_room_is_read_again_from_redis")
    else {
        return;
    };
    let mut s = RedisSettings::new(server.url());
    s.key_prefix = String::from("test:");
    s.command_timeout = Duration::from_secs(2);
    let params = BudgetParams {
        max_hosts: 2,
        ..BudgetParams::default()
    };
    let a = RedisHosts::new(params, s, SystemTime::now()).expect("store");
    // Another proxy drew a 429 on HOT: the cluster pauses it for a minute.
    let (p, now, wall) = (a.params(HOT), Instant::now(), SystemTime::now());
    let mut paused = HostBudget::new(&p, now);
    paused.on_answer(&p, now, wall, 429, Some("60"), None, 0.0);
    let mut conn = a.connection();
    let () = redis::cmd("SET")
        .arg(format!("test:{{{HOT}}}:h"))
        .arg(paused.encode(now, wall))
        .query_async(&mut conn)
        .await
        .expect("SET");
    let refused = |d: &Decided<Reservation>| matches!(d.value, Reservation::Refuse(_));
    let d = a.admit(HOT, Instant::now(), SystemTime::now(), HOLD).await;
    assert!(refused(&d), "paused for the cluster: {:?}", d.value);
    assert!(a.seen.contains_key(HOT));

    // Two hosts with a request started each (a lease held): both stay, so
    // HOT's copy, the least recently used, goes.
    for host in ["one.example", "two.example"] {
        let d = a.admit(host, Instant::now(), SystemTime::now(), HOLD).await;
        assert_eq!(d.value, Reservation::Go);
    }
    assert_eq!(a.len(), 2);
    assert!(!a.seen.contains_key(HOT));
    assert_eq!(a.evicted().learned, 1);

    // HOT's next request reads the pause from Redis again.
    let d = a.admit(HOT, Instant::now(), SystemTime::now(), HOLD).await;
    assert_eq!(d.basis, Basis::Shared);
    assert!(refused(&d), "still paused: {:?}", d.value);
    // Its copy goes again at once: the other two still hold their leases.
    assert!(!a.seen.contains_key(HOT));
    assert_eq!(a.evicted().learned, 2);
    assert_eq!(a.len(), 2);
}
