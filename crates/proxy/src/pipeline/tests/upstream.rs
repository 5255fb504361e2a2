//! Step 5, upstream: the send, timed, to a test origin on 127.0.0.1; an
//! origin that fails or stays silent, and a parent proxy that refuses,
//! each end the walk with their own answer.

use std::time::Duration;

use hyper::body::Incoming;
use mannerly_policy::Outcome;

use super::origin::{reply, Origin};
use super::{stopped, Fixture, Step};
use crate::config::Config;
use crate::error::Source;
use crate::pipeline::Exchange;

/// `GET url` walked through the send.
async fn send(f: &Fixture, url: &str) -> (Exchange, Step<http::Response<Incoming>>) {
    let (mut x, out) = f.prepared(url, &[]).await;
    let sent = x.upstream(out, &mut None).await;
    (x, sent)
}

#[tokio::test]
async fn the_origins_answer_is_handed_on_with_the_time_it_took() {
    let origin = Origin::start(|_| Some(reply("200 OK", &[], "page"))).await;
    let f = Fixture::local(Config::default()).await;
    let (x, sent) = send(&f, &origin.url("/page")).await;
    assert_eq!(sent.expect("answer").status(), 200);
    let took = x.rec.upstream_ms.expect("timed");
    assert!(took < 5_000, "{took} ms");
    let heads = origin.heads();
    assert_eq!(heads.len(), 1);
    let head = heads[0].to_ascii_lowercase();
    assert!(head.starts_with("get /page http/1.1\r\n"), "{head}");
    let host = format!("host: {}\r\n", origin.addr);
    assert_eq!(head.matches("host: ").count(), 1, "{head}");
    assert!(head.contains(&host), "{head}");
    assert!(head.contains("via: 1.1 mannerly-"), "{head}");
}

// Paused time over a socket: the first timer due is the first-byte
// timeout itself, so however early the idle clock jumps, the answer and
// the time taken are the same.
#[tokio::test(start_paused = true)]
async fn an_origin_silent_past_the_first_byte_timeout_is_a_504() {
    let origin = Origin::start(|_| None).await;
    let mut cfg = Config::default();
    cfg.upstream.first_byte_timeout = Duration::from_secs(5);
    let f = Fixture::local(cfg).await;
    let (x, sent) = send(&f, &origin.url("/slow")).await;
    let stop = stopped(sent, Outcome::Error, 504, Source::Upstream);
    assert_eq!(stop.reason(), "no response from the origin within 5s");
    assert_eq!(stop.details(), vec![("reason", stop.reason().to_string())]);
    assert_eq!(x.rec.upstream_ms, Some(5_000));
}

#[tokio::test]
async fn a_refused_connection_is_the_origins_502() {
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = closed.local_addr().expect("addr");
    drop(closed);
    let f = Fixture::local(Config::default()).await;
    let (_, sent) = send(&f, &format!("http://{addr}/page")).await;
    let stop = stopped(sent, Outcome::Error, 502, Source::Upstream);
    assert!(
        stop.reason().starts_with("connect to 127.0.0.1: "),
        "{}",
        stop.reason()
    );
    assert!(stop.reason().contains("refused"), "{}", stop.reason());
}

/// A fixture sending everything through `parent`.
async fn behind(parent: &Origin, status_header: &str) -> Fixture {
    let mut cfg = Config::default();
    cfg.upstream.proxy = format!("http://{}", parent.addr);
    cfg.upstream.status_header = status_header.into();
    // The target's name is still checked here; no DNS in the tests.
    let public = "93.184.215.14:80".parse().expect("addr");
    cfg.upstream.resolve.insert("example.org:80".into(), public);
    Fixture::new(cfg).await
}

#[tokio::test]
async fn a_parents_own_refusal_is_the_parents_error() {
    let parent = Origin::start(|_| Some(reply("407 Proxy Authentication Required", &[], ""))).await;
    let f = behind(&parent, "").await;
    let (_, sent) = send(&f, "http://example.org/page").await;
    let stop = stopped(sent, Outcome::Error, 502, Source::Parent);
    let why = "the parent proxy refused our credentials (407 Proxy Authentication Required); check the user and password in upstream.proxy";
    assert_eq!(stop.reason(), why);
    let head = &parent.heads()[0];
    assert!(
        head.starts_with("GET http://example.org/page HTTP/1.1\r\n"),
        "{head}"
    );
}

#[tokio::test]
async fn the_target_status_a_parent_carries_is_recorded() {
    let carried = [("original-status", "429")];
    let parent = Origin::start(move |_| Some(reply("200 OK", &carried, "page"))).await;
    let f = behind(&parent, "original-status").await;
    let (x, sent) = send(&f, "http://example.org/page").await;
    assert_eq!(sent.expect("the target's answer").status(), 200);
    assert_eq!(
        x.rec.target_status,
        Some(429),
        "what the budget learns from"
    );
}
