//! The pipeline's steps one at a time, each asserted on what it returns
//! (the `Stop` that ends the walk, or the value the next step gets) and on
//! the audit record it fills in, never on the audit file: a step decides,
//! the funnel writes. A real `Shared` (CA, store, audit log in a temporary
//! directory) with a fixed wall clock; paused time where no socket is in
//! play, real time with short bounded waits where a test origin is.

// The tests measure waits on the paused clock they run on.
#![allow(clippy::disallowed_methods)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, Method, Request, Response};
use http_body_util::BodyExt;
use mannerly_policy::conditional::{storable, CacheKey};
use mannerly_policy::Outcome;

use super::{CacheStep, Exchange, Lookup, Step};
use crate::answer::Stop;
use crate::audit::{open, AuditWriter};
use crate::body::{empty, ProxyBody};
use crate::clock::Clock;
use crate::config::Config;
use crate::error::Source;
use crate::identity::KeyStore;
use crate::shared::Shared;
use crate::target::Target;
use crate::tls::CertificateAuthority;

mod budget;
mod client_body;
mod conditional;
mod guard;
mod identity;
mod learn;
mod origin;
mod outgoing;
mod payment;
mod robots;
mod upstream;
mod visit;

/// The wall clock's reading when a fixture starts: signatures and stored
/// pages carry it, so their values are exact.
const WALL: u64 = 1_700_000_000;

struct Fixture {
    shared: Arc<Shared>,
    _writer: AuditWriter,
    _dir: tempfile::TempDir,
}

impl Fixture {
    /// A `Shared` for `cfg` in a fresh data dir; with `[identity]` enabled,
    /// a signing key is made there first.
    async fn new(cfg: Config) -> Fixture {
        let dir = tempfile::tempdir().expect("temp dir");
        let cfg = Config {
            data_dir: dir.path().to_path_buf(),
            ..cfg
        }
        .validate()
        .expect("valid config");
        if cfg.identity.enabled {
            KeyStore::of(&cfg).init(false).expect("identity key");
        }
        let ca = CertificateAuthority::load_or_create(dir.path(), 8).expect("CA");
        let (sink, writer) = open(&cfg).expect("audit");
        let clock = Clock::starting_at(UNIX_EPOCH + Duration::from_secs(WALL));
        let shared = Shared::start(cfg, clock, Arc::new(ca), |_| Ok(sink))
            .await
            .expect("shared state");
        Fixture {
            shared: Arc::new(shared),
            _writer: writer,
            _dir: dir,
        }
    }

    /// A fixture whose upstream client may reach the test origins on
    /// 127.0.0.1.
    async fn local(mut cfg: Config) -> Fixture {
        cfg.upstream.allow_private = true;
        Fixture::new(cfg).await
    }

    /// The walk of a request as the proxy received it.
    fn begin(&self, parts: &Parts) -> Exchange {
        let req = Request::from_parts(parts.clone(), ());
        let target = Target::from_absolute(req.uri()).expect("target");
        let client: SocketAddr = "127.0.0.1:40000".parse().expect("addr");
        Exchange::begin(self.shared.clone(), &req, target, client, None)
    }

    /// The walk of a plain `method url` request.
    fn exchange(&self, method: Method, url: &str) -> Exchange {
        self.begin(&request(method, url, &[]))
    }

    /// The walk of `GET url` up to the origin's request: steps 3 and
    /// outgoing, with the client's `headers`.
    async fn prepared(
        &self,
        url: &str,
        headers: &[(&str, &str)],
    ) -> (Exchange, Request<ProxyBody>) {
        let parts = request(Method::GET, url, headers);
        let mut x = self.begin(&parts);
        let cache = ask(&mut x, &parts).await;
        let out = x.outgoing(&parts, empty(), &cache).expect("request");
        (x, out)
    }

    /// Puts `body` in the store as the origin's 200 answer to `GET url`
    /// with `headers`, as `learn` would have.
    fn store(&self, url: &str, headers: &[(&str, &str)], body: &str) -> CacheKey {
        let key = CacheKey::new(&Method::GET, url).expect("key");
        let mut head = Response::builder().status(200);
        for (name, value) in headers {
            head = head.header(*name, *value);
        }
        let (head, ()) = head.body(()).expect("response").into_parts();
        let cache = &self.shared.cache;
        let req = request(Method::GET, url, &[]);
        let now = self.shared.clock.wall();
        let meta = storable(&req, &key, &head, cache.params(), now).expect("storable");
        cache.store().put(&meta, body.as_bytes()).expect("stored");
        key
    }

    /// What the store holds for `key` once its background writes are done.
    async fn stored(&self, key: &CacheKey) -> Option<Bytes> {
        let cache = &self.shared.cache;
        cache.drain(Duration::from_secs(5)).await;
        let found = cache.store().get(key, &HeaderMap::new()).expect("store");
        found.map(|s| s.body.clone())
    }

    /// The signing key of an `[identity]` fixture, read from its file.
    fn signing_key(&self) -> ed25519_dalek::SigningKey {
        KeyStore::of(&self.shared.cfg).load().expect("key")
    }
}

/// A client's request head: `method url` with a User-Agent and `headers`.
fn request(method: Method, url: &str, headers: &[(&str, &str)]) -> Parts {
    let mut req = Request::builder()
        .method(method)
        .uri(url)
        .header("user-agent", "StepBot/1.0");
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    req.body(()).expect("request").into_parts().0
}

/// What the conditional step asks the origin with.
async fn ask(x: &mut Exchange, parts: &Parts) -> CacheStep {
    match x.conditional(parts).await {
        Ok(Lookup::Ask(step)) => step,
        Ok(Lookup::Stored(_)) => panic!("answered from the store"),
        Err(stop) => panic!("stopped: {stop:?}"),
    }
}

/// The stop a step ended the walk with, which must be `outcome` with
/// `status`, by `source`'s doing.
#[track_caller]
fn stopped<T>(step: Step<T>, outcome: Outcome, status: u16, source: Source) -> Stop {
    let Err(stop) = step else {
        panic!("the step went on");
    };
    assert_eq!(
        (stop.outcome(), stop.status(), stop.source()),
        (outcome, status, source),
        "{stop:?}"
    );
    stop
}

/// The `Mannerly-Decision` header of an answer.
fn decision(resp: &Response<ProxyBody>) -> &str {
    resp.headers()["mannerly-decision"]
        .to_str()
        .expect("decision text")
}

/// The whole body of an answer, as the client reads it.
async fn body_text(resp: Response<ProxyBody>) -> String {
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    String::from_utf8(bytes.to_vec()).expect("utf-8 body")
}
