//! Step 2, budget: the host's turn, waited for on paused time, or the
//! policy's refusal when the wait would be too long.

use std::time::Duration;

use http::Method;
use mannerly_policy::Outcome;
use tokio::time::Instant;

use super::{stopped, Fixture};
use crate::config::Config;
use crate::error::Source;

#[tokio::test(start_paused = true)]
async fn the_wait_is_recorded_and_a_long_pause_is_answered_429() {
    let f = Fixture::new(Config::default()).await;
    let mut first = f.exchange(Method::GET, "http://example.org/a");
    let permit = first.budget().await.expect("first goes").expect("enforced");
    assert_eq!(first.rec.waited_ms, Some(0));
    permit.respond(200, None, None, None).await;

    // The second goes on the first slot's loan, the third repays it: two
    // intervals at 1.2/s (834 ms each) after the first.
    let mut second = f.exchange(Method::GET, "http://example.org/b");
    let permit = second
        .budget()
        .await
        .expect("second goes")
        .expect("enforced");
    assert_eq!(second.rec.waited_ms, Some(0));
    permit.respond(200, None, None, None).await;
    let mut third = f.exchange(Method::GET, "http://example.org/c");
    let t0 = Instant::now();
    let permit = third.budget().await.expect("third goes").expect("enforced");
    assert_eq!(Instant::now() - t0, Duration::from_millis(1668));
    assert_eq!(third.rec.waited_ms, Some(1668));
    permit.respond(429, Some("600"), None, None).await;

    let mut fourth = f.exchange(Method::GET, "http://example.org/d");
    let stop = stopped(fourth.budget().await, Outcome::Paused, 429, Source::Policy);
    assert_eq!(stop.retry_after(), Some(600));
    assert_eq!(
        stop.reason(),
        "the host is paused for 600 s after the origin asked to slow down"
    );
}

#[tokio::test(start_paused = true)]
async fn observe_mode_never_holds_a_request() {
    let mut cfg = Config::default();
    cfg.policy.enforce = false;
    let f = Fixture::new(cfg).await;
    for path in ["/a", "/b", "/c"] {
        let mut x = f.exchange(Method::GET, &format!("http://example.org{path}"));
        let t0 = Instant::now();
        assert!(x.budget().await.expect("goes").is_none());
        assert_eq!(Instant::now(), t0);
    }
}

#[tokio::test(start_paused = true)]
async fn prefer_wait_caps_the_hold_and_a_turn_past_it_is_the_clients_503() {
    let mut cfg = Config::default();
    cfg.budget.start_rate = 0.25;
    cfg.budget.floor_rate = 0.1;
    let f = Fixture::new(cfg).await;
    // The first goes, the second on its loan; the third's turn is two
    // intervals after the first (the rate a step up after each 200),
    // 4.446 s away: within the 30 s hold, behind the loan's slot (`queue_full`).
    for path in ["/a", "/b"] {
        let mut x = f.exchange(Method::GET, &format!("http://example.org{path}"));
        let p = x.budget().await.expect("goes").expect("enforced");
        p.respond(200, None, None, None).await;
    }
    let parts = super::request(Method::GET, "http://example.org/c", &[("prefer", "wait=2")]);
    let mut x = f.begin(&parts);
    assert_eq!((x.rec.wait_s, x.rec.wait_by), (Some(2), Some("client")));
    let t0 = Instant::now();
    let stop = stopped(x.budget().await, Outcome::QueueFull, 503, Source::Policy);
    assert_eq!(Instant::now(), t0, "answered at once, not held to the cap");
    assert_eq!(stop.retry_after(), Some(5));
    assert_eq!(
        stop.details(),
        [("wait", "2".to_string()), ("wait_by", "client".to_string())]
    );
    // A preference as long as the turn waits for it, and says nothing.
    let parts = super::request(Method::GET, "http://example.org/c", &[("prefer", "wait=9")]);
    let mut x = f.begin(&parts);
    assert_eq!(x.rec.wait_by, Some("client"));
    let p = x.budget().await.expect("held").expect("enforced");
    // The turn itself, which Retry-After told in whole seconds.
    assert_eq!(Instant::now() - t0, Duration::from_millis(4446));
    p.respond(200, None, None, None).await;
}

#[test]
fn a_wait_is_the_requests_own_else_the_users_else_the_addresss_else_everyones() {
    use super::super::told::{preferred, Wait, WaitBy};
    let mut cfg = Config::default();
    for (who, secs) in [("*", 9), ("127.0.0.1", 3), ("alice", 1)] {
        cfg.proxy.prefer_wait.insert(who.into(), secs);
    }
    let asked = |v: &str| {
        let mut h = http::HeaderMap::new();
        h.insert("prefer", v.parse().unwrap());
        h
    };
    let (local, other): (std::net::SocketAddr, std::net::SocketAddr) = (
        "127.0.0.1:5000".parse().unwrap(),
        "127.0.0.2:5000".parse().unwrap(),
    );
    let none = http::HeaderMap::new();
    let wait = |secs, by| Some(Wait { secs, by });
    assert_eq!(
        preferred(&cfg, &asked("wait=0"), local, Some("alice")),
        wait(0, WaitBy::Client)
    );
    assert_eq!(
        preferred(&cfg, &none, local, Some("alice")),
        wait(1, WaitBy::Config)
    );
    assert_eq!(
        preferred(&cfg, &none, local, Some("bob")),
        wait(3, WaitBy::Config)
    );
    assert_eq!(preferred(&cfg, &none, other, None), wait(9, WaitBy::Config));
    assert_eq!(preferred(&Config::default(), &none, other, None), None);
}
