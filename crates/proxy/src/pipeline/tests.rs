//! The pipeline's steps one at a time, on tokio's paused time, with a real
//! `Shared` (CA, store and audit log in a temporary directory).

// The tests measure waits on the paused clock they run on.
#![allow(clippy::disallowed_methods)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request};
use mannerly_policy::conditional::CacheOutcome;
use mannerly_policy::Outcome;
use tokio::time::Instant;

use super::{Exchange, Lookup, Step};
use crate::answer::Stop;
use crate::audit::{open, AuditWriter};
use crate::clock::Clock;
use crate::config::Config;
use crate::error::Source;
use crate::shared::Shared;
use crate::target::Target;
use crate::tls::CertificateAuthority;

struct Fixture {
    shared: Arc<Shared>,
    writer: AuditWriter,
    dir: PathBuf,
}

impl Fixture {
    async fn new(cfg: Config) -> Fixture {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("mannerly-steps-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let cfg = Config {
            data_dir: dir.clone(),
            ..cfg
        }
        .validate()
        .expect("valid config");
        let ca = CertificateAuthority::load_or_create(&dir, 8).expect("CA");
        let (sink, writer) = open(&cfg).expect("audit");
        let shared = Shared::start(cfg, Clock::system(), Arc::new(ca), sink)
            .await
            .expect("shared state");
        Fixture {
            shared: Arc::new(shared),
            writer,
            dir,
        }
    }

    fn exchange(&self, method: Method, url: &str) -> Exchange {
        let req = Request::builder()
            .method(method)
            .uri(url)
            .header("user-agent", "StepBot/1.0")
            .body(())
            .expect("request");
        let target = Target::from_absolute(req.uri()).expect("target");
        let client: SocketAddr = "127.0.0.1:40000".parse().expect("addr");
        Exchange::begin(self.shared.clone(), &req, target, client, None)
    }

    /// Closes the log and returns its lines as JSON.
    fn lines(self) -> Vec<serde_json::Value> {
        let Fixture {
            shared,
            writer,
            dir,
        } = self;
        drop(shared);
        writer.close().expect("audit close");
        let text = std::fs::read_to_string(dir.join("audit.jsonl")).expect("audit file");
        let _ = std::fs::remove_dir_all(&dir);
        // Decision lines only: the signed checkpoint of the close is left out.
        text.lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("JSON line"))
            .filter(|v| v["outcome"] != "checkpoint")
            .collect()
    }
}

/// The stop a step ended the walk with.
fn stopped<T>(step: Step<T>) -> Stop {
    match step {
        Ok(_) => panic!("the step went on"),
        Err(stop) => stop,
    }
}

#[tokio::test(start_paused = true)]
async fn budget_step_records_the_wait_and_answers_a_long_pause_with_429() {
    let f = Fixture::new(Config::default()).await;
    let mut first = f.exchange(Method::GET, "http://example.org/a");
    let permit = first.budget().await.expect("first goes").expect("enforced");
    assert_eq!(first.rec.waited_ms, Some(0));
    permit.respond(200, None, None).await;

    let mut second = f.exchange(Method::GET, "http://example.org/b");
    let t0 = Instant::now();
    let permit = second
        .budget()
        .await
        .expect("second goes")
        .expect("enforced");
    assert_eq!(Instant::now() - t0, Duration::from_secs(1));
    assert_eq!(second.rec.waited_ms, Some(1000));
    permit.respond(429, Some("600"), None).await;

    let mut third = f.exchange(Method::GET, "http://example.org/c");
    let stop = stopped(third.budget().await);
    assert_eq!(stop.outcome, Outcome::Paused);
    assert_eq!(stop.status, 429);
    assert_eq!(stop.retry_after, Some(600));
    assert_eq!(stop.source, Source::Policy);
    assert!(
        f.lines().is_empty(),
        "a step decides; only the funnel writes"
    );
}

#[tokio::test(start_paused = true)]
async fn guard_step_refuses_a_loopback_target_before_anything_is_sent() {
    let f = Fixture::new(Config::default()).await;
    let mut x = f.exchange(Method::GET, "http://127.0.0.1:9/secret");
    let stop = stopped(x.guard().await);
    assert_eq!(stop.outcome, Outcome::Blocked);
    assert_eq!(stop.status, 403);
    assert_eq!(stop.source, Source::Policy);
    let why = "127.0.0.1 resolves to 127.0.0.1, a loopback address; set upstream.allow_private to allow it";
    assert_eq!(stop.reason, why);
    assert_eq!(stop.details, vec![("reason", why.to_string())]);
    let mut public = f.exchange(Method::GET, "http://93.184.215.14/page");
    assert!(public.guard().await.is_ok());
    assert!(f.lines().is_empty());
}

#[tokio::test(start_paused = true)]
async fn conditional_step_leaves_a_post_alone_and_looks_up_a_get() {
    let f = Fixture::new(Config::default()).await;
    let mut post = f.exchange(Method::POST, "http://example.org/form");
    let (parts, ()) = Request::post("http://example.org/form")
        .body(())
        .expect("request")
        .into_parts();
    let Ok(Lookup::Ask(step)) = post.conditional(&parts).await else {
        panic!("a POST is sent on");
    };
    assert!(step.key.is_none());
    assert_eq!(step.outcome, CacheOutcome::Bypass);

    let mut get = f.exchange(Method::GET, "http://example.org/page");
    let (parts, ()) = Request::get("http://example.org/page")
        .body(())
        .expect("request")
        .into_parts();
    let Ok(Lookup::Ask(step)) = get.conditional(&parts).await else {
        panic!("nothing is stored to serve");
    };
    assert!(step.key.is_some());
    assert_eq!(step.outcome, CacheOutcome::Miss);
    assert!(step.validators.is_none(), "nothing stored yet");
    assert!(f.lines().is_empty(), "no decision was made yet");
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
