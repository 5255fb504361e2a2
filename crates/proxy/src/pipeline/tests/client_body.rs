//! The client's body: a small one read whole before the host's turn (and
//! so sent again after a throttle), a large one spooled to the data dir
//! before the turn and sent once, a silent one answered 408 after exactly
//! the idle limit.

use std::time::Duration;

use http::Method;
use http_body_util::BodyExt;
use mannerly_policy::Outcome;
use tokio::time::Instant;

use super::origin::answer;
use super::{stopped, Fixture};
use crate::config::Config;
use crate::error::Source;

/// A body of `len` bytes, `sent` of them written before it goes silent.
async fn body(len: usize, sent: &str) -> hyper::body::Incoming {
    let raw = format!("HTTP/1.1 200 OK\r\ncontent-length: {len}\r\n\r\n{sent}");
    answer(&raw).await.into_body()
}

#[tokio::test(start_paused = true)]
async fn a_small_body_is_read_ahead_and_can_be_sent_twice() {
    let f = Fixture::new(Config::default()).await;
    let mut x = f.exchange(Method::POST, "http://example.org/form");
    let mut read = x.client_body(body(5, "hello").await).await.expect("read");
    assert!(read.resendable());
    for _ in 0..2 {
        let sent = read.take().collect().await.expect("body").to_bytes();
        assert_eq!(sent, "hello");
    }
}

/// Past what is kept in memory, the body is spooled to the data dir, all
/// of it before the turn, and comes out whole; the spool file is gone
/// from the directory at once.
#[tokio::test]
async fn a_body_over_a_mib_is_spooled_before_the_turn_and_sent_whole() {
    let f = Fixture::new(Config::default()).await;
    let mut x = f.exchange(Method::POST, "http://example.org/upload");
    let len = crate::clients::body::IN_MEMORY + 100_001;
    let sent: String = (0..len)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let mut read = x.client_body(body(len, &sent).await).await.expect("read");
    assert!(!read.resendable());
    let spool = f.shared.cfg.data_dir.join("spool");
    assert_eq!(std::fs::read_dir(&spool).expect("spool dir").count(), 0);
    let out = read.take().collect().await.expect("body").to_bytes();
    assert_eq!(out.len(), len);
    assert!(out == sent.as_bytes(), "the body as the client sent it");
}

#[tokio::test(start_paused = true)]
async fn a_body_silent_past_the_idle_limit_is_the_clients_408() {
    let mut cfg = Config::default();
    cfg.proxy.body_idle_timeout = Duration::from_secs(4);
    let f = Fixture::new(cfg).await;
    let mut x = f.exchange(Method::POST, "http://example.org/form");
    let trickle = body(10, "abc").await;
    let t0 = Instant::now();
    let read = x.client_body(trickle).await;
    let stop = stopped(read, Outcome::Error, 408, Source::Client);
    assert_eq!(Instant::now() - t0, Duration::from_secs(4));
    assert_eq!(stop.reason(), "no request body data from the client for 4s");
    assert!(stop.closes(), "a client that stalls loses its connection");
}
