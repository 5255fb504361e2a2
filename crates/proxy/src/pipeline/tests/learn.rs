//! Step 6, learn: what an origin's answer becomes. A throttle goes back to
//! the budget, a 304 to our validators is the stored page, a 304 that is
//! not for it is asked again without them (or refused when the request
//! cannot be sent again), a 101 is refused, refused preferences withhold
//! the page, and a storable page is stored once the client has it. The
//! answers come through hyper from an in-memory origin, on paused time.

use std::time::Duration;

use http::request::Parts;
use http::{Method, Response};
use mannerly_policy::robots::Purpose;
use mannerly_policy::Outcome;
use tokio::time::Instant;

use super::origin::{answer, reply};
use super::{ask, body_text, decision, request, stopped, Fixture, Step};
use crate::body::ProxyBody;
use crate::config::Config;
use crate::error::Source;
use crate::hosts::budget::Permit;
use crate::pipeline::{CacheStep, Exchange, Learned};

const URL: &str = "http://example.org/page";

/// A request walked to the send: its head, its walk, what step 3 found
/// and its turn.
struct Sent {
    parts: Parts,
    x: Exchange,
    cache: CacheStep,
    permit: Option<Permit>,
}

impl Sent {
    async fn new(f: &Fixture, method: Method) -> Sent {
        let parts = request(method, URL, &[]);
        let mut x = f.begin(&parts);
        let cache = ask(&mut x, &parts).await;
        let permit = x.budget().await.expect("the host's turn");
        Sent {
            parts,
            x,
            cache,
            permit,
        }
    }

    /// What learn makes of the raw answer `raw`.
    async fn learn(&mut self, raw: &str, resendable: bool) -> Step<Learned> {
        let resp = answer(raw).await;
        let permit = self.permit.take();
        let Sent {
            parts, x, cache, ..
        } = self;
        x.learn(parts, cache, permit, resp, resendable).await
    }
}

/// The client's answer learn ended in.
fn answered(learned: Step<Learned>) -> Response<ProxyBody> {
    match learned {
        Ok(Learned::Answer(resp)) => resp,
        Ok(Learned::RetryAfterThrottle) => panic!("sent again after a throttle"),
        Ok(Learned::RefetchWithoutValidators) => panic!("sent again without validators"),
        Ok(Learned::SignAsAsked) => panic!("sent again, signed as the origin asked"),
        Ok(Learned::PayAndRetry) => panic!("sent again, paid"),
        Err(stop) => panic!("stopped: {stop:?}"),
    }
}

/// A fixture with a page stored under `URL` with ETag "v1".
async fn with_stored_page() -> Fixture {
    let f = Fixture::new(Config::default()).await;
    f.store(URL, &[("etag", "\"v1\"")], "stored page");
    f
}

/// A 304 carrying `etag` and a new Cache-Control.
fn not_modified(etag: &str) -> String {
    reply(
        "304 Not Modified",
        &[("etag", etag), ("cache-control", "max-age=60")],
        "",
    )
}

#[tokio::test(start_paused = true)]
async fn a_throttled_get_is_sent_again_after_exactly_its_pause() {
    let f = Fixture::new(Config::default()).await;
    let mut sent = Sent::new(&f, Method::GET).await;
    let throttle = reply("429 Too Many Requests", &[("retry-after", "2")], "");
    let first = sent.x.rec.id.clone();
    let Ok(Learned::RetryAfterThrottle) = sent.learn(&throttle, true).await else {
        panic!("a throttled GET goes back to the budget");
    };
    let x = &mut sent.x;
    assert_eq!(x.retries, 1);
    assert_eq!(x.retry_after.as_deref(), Some("2"));
    // The retry's line is its own: a new id naming the throttled one's,
    // and nothing of the throttle's answer.
    assert_ne!(x.rec.id, first);
    assert_eq!(x.rec.retry_of.as_deref(), Some(first.as_str()));
    assert_eq!(x.rec.attempt, Some(2));
    assert_eq!((x.rec.pause_s, x.rec.sent.as_deref()), (None, None));
    let t0 = Instant::now();
    x.budget().await.expect("its turn after the pause");
    assert_eq!(Instant::now() - t0, Duration::from_secs(2));
    assert_eq!(x.rec.waited_ms, Some(2_000), "over every attempt");
}

#[tokio::test(start_paused = true)]
async fn a_throttle_that_cannot_be_resent_is_the_clients_answer() {
    for (method, resendable) in [(Method::POST, true), (Method::GET, false)] {
        let f = Fixture::new(Config::default()).await;
        let mut sent = Sent::new(&f, method.clone()).await;
        let throttle = reply(
            "429 Too Many Requests",
            &[("retry-after", "2")],
            "slow down",
        );
        let resp = answered(sent.learn(&throttle, resendable).await);
        assert_eq!(resp.status(), 429, "{method}");
        assert_eq!(resp.headers()["retry-after"], "2");
        assert_eq!(decision(&resp), "throttled; waited_ms=0");
        assert_eq!(body_text(resp).await, "slow down");
        assert_eq!(sent.x.retries, 0);
    }
}

#[tokio::test(start_paused = true)]
async fn a_304_to_our_validators_is_the_stored_page_refreshed() {
    let f = with_stored_page().await;
    let mut sent = Sent::new(&f, Method::GET).await;
    let resp = answered(sent.learn(&not_modified("\"v1\""), true).await);
    assert_eq!(resp.status(), 200);
    assert_eq!(decision(&resp), "revalidated; waited_ms=0");
    assert_eq!(resp.headers()["etag"], "\"v1\"");
    assert_eq!(resp.headers()["cache-control"], "max-age=60", "refreshed");
    assert_eq!(body_text(resp).await, "stored page");
}

#[tokio::test(start_paused = true)]
async fn a_304_for_another_version_is_asked_again_without_validators() {
    let f = with_stored_page().await;
    let mut sent = Sent::new(&f, Method::GET).await;
    let key = sent.cache.key.clone().expect("key");
    let Ok(Learned::RefetchWithoutValidators) = sent.learn(&not_modified("\"v2\""), true).await
    else {
        panic!("a mismatched 304 is sent again");
    };
    assert!(sent.cache.stored.is_none());
    assert!(!sent.cache.had_entry);
    assert_eq!(f.stored(&key).await, None, "the page it no longer matches");
}

#[tokio::test(start_paused = true)]
async fn a_304_for_another_version_that_cannot_be_resent_is_a_502() {
    let f = with_stored_page().await;
    let mut sent = Sent::new(&f, Method::GET).await;
    let learned = sent.learn(&not_modified("\"v2\""), false).await;
    let stop = stopped(learned, Outcome::Error, 502, Source::Upstream);
    assert_eq!(
        stop.reason(),
        "the origin's 304 does not match the stored page, and the request cannot be sent again"
    );
}

#[tokio::test(start_paused = true)]
async fn a_304_to_the_clients_own_validators_goes_back_as_is() {
    let f = Fixture::new(Config::default()).await;
    let mut sent = Sent::new(&f, Method::GET).await;
    let resp = answered(sent.learn(&not_modified("\"mine\""), true).await);
    assert_eq!(resp.status(), 304);
    assert_eq!(decision(&resp), "unchanged; waited_ms=0");
}

#[tokio::test(start_paused = true)]
async fn an_unasked_switch_of_protocols_is_a_502() {
    let f = Fixture::new(Config::default()).await;
    let mut sent = Sent::new(&f, Method::GET).await;
    let switch = "HTTP/1.1 101 Switching Protocols\r\nupgrade: h2c\r\nconnection: upgrade\r\n\r\n";
    let learned = sent.learn(switch, true).await;
    let stop = stopped(learned, Outcome::Error, 502, Source::Upstream);
    assert_eq!(
        stop.reason(),
        "the origin switched protocols (101) without being asked to"
    );
}

#[tokio::test(start_paused = true)]
async fn a_storable_page_is_passed_on_and_stored_once_read() {
    let f = Fixture::new(Config::default()).await;
    let mut sent = Sent::new(&f, Method::GET).await;
    let key = sent.cache.key.clone().expect("key");
    let page = reply("200 OK", &[("etag", "\"v1\"")], "fresh page");
    let resp = answered(sent.learn(&page, true).await);
    assert_eq!(resp.status(), 200);
    assert_eq!(decision(&resp), "fetched; waited_ms=0");
    assert_eq!(body_text(resp).await, "fresh page");
    assert_eq!(f.stored(&key).await.as_deref(), Some(&b"fresh page"[..]));
}

/// A crawl declaring `ai-train`, with `[policy]` as `set` leaves it.
fn training(set: impl FnOnce(&mut crate::config::PolicyConfig)) -> Config {
    let mut cfg = Config::default();
    cfg.crawler.purposes = vec![Purpose::AiTrain];
    set(&mut cfg.policy);
    cfg
}

/// What the preferences judge makes of [`refusing_page`].
const REFUSED: &str = "ai-train refused by Content-Signal (header Content-Signal: ai-train=no)";

/// A page whose Content-Signal refuses AI training.
fn refusing_page() -> String {
    reply("200 OK", &[("content-signal", "ai-train=no")], "page")
}

#[tokio::test(start_paused = true)]
async fn a_page_refusing_the_declared_purpose_is_withheld() {
    let f = Fixture::new(training(|_| {})).await;
    let mut sent = Sent::new(&f, Method::GET).await;
    let key = sent.cache.key.clone().expect("key");
    let learned = sent.learn(&refusing_page(), true).await;
    let stop = stopped(learned, Outcome::SignalRefused, 403, Source::Policy);
    assert_eq!(
        stop.reason(),
        format!("the response is withheld: {REFUSED}")
    );
    assert_eq!(stop.details(), vec![("purpose", "ai-train".to_string())]);
    assert_eq!(f.stored(&key).await, None, "neither delivered nor stored");
}

#[tokio::test(start_paused = true)]
async fn annotate_passes_a_refusing_page_on_with_what_it_refuses() {
    use mannerly_policy::prefs::ResponsePreferences;
    let annotate = |p: &mut crate::config::PolicyConfig| {
        p.response_preferences = ResponsePreferences::Annotate;
    };
    let f = Fixture::new(training(annotate)).await;
    let mut sent = Sent::new(&f, Method::GET).await;
    let resp = answered(sent.learn(&refusing_page(), true).await);
    assert_eq!(resp.status(), 200);
    let note = resp.headers()["mannerly-preferences"]
        .to_str()
        .expect("text");
    assert_eq!(note, format!("refused; {REFUSED}"));
    assert_eq!(body_text(resp).await, "page");
}

#[tokio::test(start_paused = true)]
async fn observe_mode_passes_a_refusing_page_and_records_what_would_be() {
    let f = Fixture::new(training(|p| p.enforce = false)).await;
    let mut x = f.exchange(Method::GET, URL);
    let resp = x
        .preferences(answer(&refusing_page()).await)
        .await
        .expect("observe mode passes it");
    assert_eq!(resp.status(), 200);
    assert_eq!(x.rec.would, Some(Outcome::SignalRefused));
    assert_eq!(
        x.rec.rule.as_deref(),
        Some("header Content-Signal: ai-train=no")
    );
    assert_eq!(x.rec.outcome, None, "nothing was refused");
}
