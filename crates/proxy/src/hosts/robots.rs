//! The robots.txt cache: one entry per (scheme, host, port), filled by a
//! single fetch however many requests arrive for a cold origin, through the
//! same guarded upstream client as every request. What a fetch result means
//! is decided by `mannerly_policy::robots_cache`. The same cache, over
//! another [`SiteFile`], holds `/.well-known/tdmrep.json`: fetched, paced,
//! signed, retried and evicted exactly as robots.txt is.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mannerly_policy::identity::KeyId;

use bytes::{Bytes, BytesMut};
use dashmap::DashMap;
use http::header::{HeaderValue, LOCATION, USER_AGENT};
use http::{Method, Request, Uri};
use http_body_util::BodyExt;
use mannerly_policy::budget::{Announced, Refusal};
use mannerly_policy::robots::Robots;
use mannerly_policy::robots::MAX_ROBOTS_BYTES;
use mannerly_policy::robots_cache::{
    fetch_reason_of, FetchResult, Lookup, RobotsEntry, RobotsParams, Rules, SiteFile,
};
use mannerly_policy::{AuditRecord, Outcome};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::answer::{failure, Stop};
use crate::body::empty;
use crate::clock::Clock;
use crate::error::Source;
use crate::hosts::budget::{Budgets, Permit};
use crate::identity::Signer;
use crate::target::Target;
use crate::upstream::conns::{ConnHandle, ReleaseOnEnd};
use crate::upstream::UpstreamClient;
use mannerly_policy::parent::ParentVerdict;

mod cluster;

struct Slot<F> {
    entry: std::sync::RwLock<Option<RobotsEntry<F>>>,
    /// `RobotsCache::epoch` when the slot was last used: eviction takes the
    /// least recently used first.
    used: AtomicU64,
    /// Body bytes of the entry, counted in `RobotsCache::bytes`.
    bytes: AtomicU64,
    // Held while fetching, so concurrent requests to a cold origin wait for
    // the one fetch instead of starting their own.
    fetching: Mutex<()>,
}

/// One fetch as it happened, for its `robots_fetched` audit line.
pub(crate) struct FetchReport {
    pub url: String,
    pub status: Option<u16>,
    pub retry_after: Option<String>,
    /// The response head, for the limit it may announce.
    pub headers: http::HeaderMap,
    pub bytes: u64,
    /// The Web Bot Auth key the (last) request was signed with.
    pub keyid: Option<KeyId>,
    pub result: FetchResult,
    /// The answer of the request that waited for this fetch, when the
    /// failure is its own and not the site's: the guard refused the address
    /// the name resolved to at connect time (DNS rebinding), or the parent
    /// proxy failed and the site was never asked.
    pub stop: Option<Stop>,
    /// When the fetch's first request was sent (audit `sent`).
    pub sent: Option<std::time::SystemTime>,
}

/// Why `rules` has no rules to give.
pub(crate) enum Unfetched {
    /// The host's budget would not hold the fetch (a policy refusal, which
    /// observe mode only records).
    Budget(Refusal),
    /// The fetch ended in the request's own answer ([`FetchReport::stop`]).
    Stopped(Stop),
}

/// robots.txt (or another [`SiteFile`]) per origin.
pub(crate) struct RobotsCache<F: SiteFile = Robots> {
    params: RobotsParams,
    clock: Clock,
    identity: Option<Arc<Signer>>,
    slots: DashMap<String, Arc<Slot<F>>>,
    /// Body bytes of every entry held (`robots.max_bytes`).
    bytes: AtomicU64,
    /// Moves on with every new slot. A slot used in the same epoch as
    /// another ties with it; a tick per request would make every request
    /// write one shared counter, where a hot origin's slot now changes only
    /// when a new origin came in since its last use.
    epoch: AtomicU64,
}

impl<F: SiteFile> RobotsCache<F> {
    pub(crate) fn new(params: RobotsParams, clock: Clock, identity: Option<Arc<Signer>>) -> Self {
        RobotsCache {
            params,
            clock,
            identity,
            slots: DashMap::new(),
            bytes: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
        }
    }

    /// The rules for `target`, fetching robots.txt first when needed.
    /// `on_fetch` is called for every fetch actually made (for its audit line).
    /// Each request of the fetch (redirects included) takes a turn of its
    /// host's budget like any request, so the page behind it waits its
    /// interval; a host that is paused longer than `deadline` allows gives
    /// the budget's refusal.
    pub(crate) async fn rules(
        &self,
        client: &UpstreamClient,
        budgets: &Arc<Budgets>,
        target: &Target,
        deadline: Instant,
        user_agent: Option<&HeaderValue>,
        on_fetch: impl FnOnce(&FetchReport),
    ) -> Result<Rules<F>, Unfetched> {
        let slot = self.slot(target.root());
        if let Some(rules) = self.cached(&slot) {
            return Ok(rules);
        }
        // Boxed: the fetch's future is most of this one's size, and every
        // request's future of this step is moved whole into the next, so
        // unboxed it cost each cached answer a copy of the fetch's.
        let fetching = self.fetch_rules(
            slot, client, budgets, target, deadline, user_agent, on_fetch,
        );
        Box::pin(fetching).await
    }

    /// [`rules`](Self::rules) once the cache had no answer: one fetch per
    /// slot at a time, its result installed.
    #[allow(clippy::too_many_arguments)]
    async fn fetch_rules(
        &self,
        slot: Arc<Slot<F>>,
        client: &UpstreamClient,
        budgets: &Arc<Budgets>,
        target: &Target,
        deadline: Instant,
        user_agent: Option<&HeaderValue>,
        on_fetch: impl FnOnce(&FetchReport),
    ) -> Result<Rules<F>, Unfetched> {
        let key = target.root();
        let _fetching = slot.fetching.lock().await;
        // Another request may have fetched while this one waited.
        if let Some(rules) = self.cached(&slot) {
            return Ok(rules);
        }
        let url = format!("{key}{}", F::PATH);
        // robots.txt keeps the cluster key it always had, its origin.
        let shared_key = if F::PATH == Robots::PATH { key } else { &url };
        // With shared state one proxy of the cluster fetches; the others
        // take its copy.
        let now = self.clock.now_std();
        let claim = match cluster::claim(budgets, shared_key, &self.params, deadline, now).await {
            cluster::Next::Use(result, fetched_at) => {
                return Ok(self.install(key, &slot, &result, fetched_at));
            }
            cluster::Next::Fetch(claim) => claim,
        };
        let permit = budgets
            .acquire(&target.host, deadline)
            .await
            .map_err(Unfetched::Budget)?;
        let mut pacing = Pacing {
            budgets,
            deadline,
            permit: Some(permit),
            refused: None,
        };
        let timeout = Duration::from_secs_f64(self.params.fetch_timeout_secs);
        let sent = self.clock.wall();
        let mut report = match tokio::time::timeout(
            timeout,
            fetch(
                client,
                &url,
                user_agent,
                self.params.max_redirects,
                self.identity.as_deref().map(|s| (s, &self.clock)),
                Some(&mut pacing),
            ),
        )
        .await
        {
            Ok(r) => r,
            Err(_) => FetchReport {
                url: url.clone(),
                status: None,
                retry_after: None,
                headers: http::HeaderMap::new(),
                bytes: 0,
                keyid: None,
                result: FetchResult::Failed(format!("no complete answer within {timeout:?}")),
                stop: None,
                sent: None,
            },
        };
        // A fetch the guard or the parent stopped never reached the site.
        if report.stop.is_none() {
            report.sent = Some(sent);
        }
        match (report.status, pacing.permit.take()) {
            (Some(status), Some(permit)) => {
                let announced = Announced::from_headers(&report.headers, self.clock.wall());
                let ra = report.retry_after.as_deref();
                permit.respond(status, ra, announced.as_ref(), None).await;
            }
            (_, permit) => drop(permit),
        }
        on_fetch(&report);
        if let Some(refusal) = pacing.refused {
            // A redirect the budget would not hold: the rules are unknown
            // for now, as when the first request is refused.
            return Err(Unfetched::Budget(refusal));
        }
        let wall = self.clock.wall();
        cluster::publish(claim, shared_key, &report.result, &self.params, wall).await;
        let rules = self.install(key, &slot, &report.result, self.clock.now_std());
        match report.stop {
            Some(stop) => Err(Unfetched::Stopped(stop)),
            None => Ok(rules),
        }
    }

    /// Puts the result of a fetch made at `fetched_at` (here, or by another
    /// proxy of the cluster) into the slot of `key`, counting its body
    /// against `robots.max_bytes`.
    fn install(
        &self,
        key: &str,
        slot: &Slot<F>,
        result: &FetchResult,
        fetched_at: std::time::Instant,
    ) -> Rules<F> {
        let new = match result {
            FetchResult::Body(body) => body.len() as u64,
            _ => 0,
        };
        // Counted only while the slot is in the map (whose shard lock keeps
        // `evict` out meanwhile): a slot evicted while its fetch ran still
        // answers the requests that waited for it, but nothing would ever
        // subtract its bytes again.
        let over = match self.slots.get(key) {
            Some(listed) if std::ptr::eq(&**listed, slot) => {
                let old = slot.bytes.swap(new, Ordering::Relaxed);
                self.bytes.fetch_add(new, Ordering::Relaxed);
                self.bytes.fetch_sub(old, Ordering::Relaxed);
                self.bytes.load(Ordering::Relaxed) > self.params.max_bytes
            }
            _ => false,
        };
        if over {
            self.evict(Some(slot));
        }
        let now = self.clock.now_std();
        let mut guard = slot.entry.write().unwrap_or_else(|p| p.into_inner());
        let entry = RobotsEntry::after_fetch(guard.as_ref(), result, &self.params, fetched_at);
        let rules = entry.rules_now(now);
        *guard = Some(entry);
        rules
    }

    fn cached(&self, slot: &Slot<F>) -> Option<Rules<F>> {
        let now = self.clock.now_std();
        let guard = slot.entry.read().unwrap_or_else(|p| p.into_inner());
        match guard.as_ref()?.lookup(&self.params, now) {
            Lookup::Use(rules) => Some(rules),
            Lookup::Fetch => None,
        }
    }

    fn slot(&self, key: &str) -> Arc<Slot<F>> {
        if let Some(s) = self.slots.get(key) {
            let now = self.epoch.load(Ordering::Relaxed);
            if s.used.load(Ordering::Relaxed) != now {
                s.used.store(now, Ordering::Relaxed);
            }
            return s.clone();
        }
        if self.slots.len() >= self.params.max_entries {
            self.evict(None);
        }
        self.slots
            .entry(key.to_string())
            .or_insert_with(|| {
                Arc::new(Slot {
                    entry: std::sync::RwLock::new(None),
                    used: AtomicU64::new(self.epoch.fetch_add(1, Ordering::Relaxed)),
                    bytes: AtomicU64::new(0),
                    fetching: Mutex::new(()),
                })
            })
            .clone()
    }

    // Stale entries go first; if every entry is live, the least recently
    // used half goes, which bounds memory at the cost of refetches. The
    // byte bound works the same way, on the bodies' sizes, and then goes on
    // (least recently used first) while the bodies left still pass it.
    // `keep` is the entry being installed: its slot holds no live entry yet,
    // and evicting it would drop the fetch just paid for and leave its
    // origin to fetch again on its next request.
    fn evict(&self, keep: Option<&Slot<F>>) {
        let now = self.clock.now_std();
        let kept = |s: &Arc<Slot<F>>| keep.is_some_and(|k| std::ptr::eq(&**s, k));
        self.slots.retain(|_, s| {
            let keep = kept(s)
                || s.entry
                    .read()
                    .map(|e| e.as_ref().is_some_and(|e| e.is_live(&self.params, now)))
                    .unwrap_or(false);
            if !keep {
                self.bytes
                    .fetch_sub(s.bytes.swap(0, Ordering::Relaxed), Ordering::Relaxed);
            }
            keep
        });
        let over_bytes = || self.bytes.load(Ordering::Relaxed) > self.params.max_bytes;
        if self.slots.len() < self.params.max_entries && !over_bytes() {
            return;
        }
        let mut by_use: Vec<(u64, String)> = self
            .slots
            .iter()
            .filter(|e| !kept(e.value()))
            .map(|e| (e.value().used.load(Ordering::Relaxed), e.key().clone()))
            .collect();
        by_use.sort_unstable();
        let half = self.slots.len() / 2 + 1;
        let mut oldest = by_use.into_iter().map(|(_, key)| key);
        for k in oldest.by_ref().take(half) {
            self.remove(&k);
        }
        // Ends under the cap: the entry kept is one body, at most
        // MAX_ROBOTS_BYTES, which `robots.max_bytes` is never below.
        for k in oldest {
            if !over_bytes() {
                break;
            }
            self.remove(&k);
        }
    }

    fn remove(&self, key: &str) {
        if let Some((_, s)) = self.slots.remove(key) {
            self.bytes
                .fetch_sub(s.bytes.swap(0, Ordering::Relaxed), Ordering::Relaxed);
        }
    }
}

/// The budget turns of one robots.txt fetch: the permit of the request in
/// flight, and a refusal that ended the fetch.
pub(crate) struct Pacing<'a> {
    budgets: &'a Arc<Budgets>,
    deadline: Instant,
    permit: Option<Permit>,
    refused: Option<Refusal>,
}

impl Pacing<'_> {
    /// Gives back the turn of a hop answered `status` and takes one of the
    /// host `next` points at: the origin counts a redirect like any request.
    /// `false` when the budget would not hold the next hop.
    async fn next_hop(&mut self, status: u16, next: &Uri) -> bool {
        if let Some(permit) = self.permit.take() {
            permit.respond(status, None, None, None).await;
        }
        let Some(host) = next.host() else {
            return true;
        };
        match self.budgets.acquire_own(host, self.deadline).await {
            Ok(p) => {
                self.permit = Some(p);
                true
            }
            Err(r) => {
                self.refused = Some(r);
                false
            }
        }
    }
}

/// Fetches `url`, following redirects; the guard applies to every hop
/// because every hop goes through the same connector. With `pacing`, each
/// redirect waits for its host's turn.
pub(crate) async fn fetch(
    client: &UpstreamClient,
    url: &str,
    user_agent: Option<&HeaderValue>,
    max_redirects: u32,
    identity: Option<(&Signer, &Clock)>,
    pacing: Option<&mut Pacing<'_>>,
) -> FetchReport {
    let mut keyid = None;
    let hops = Hops {
        max_redirects,
        identity,
        pacing,
    };
    let mut report = fetch_hops(client, url, user_agent, hops, &mut keyid).await;
    report.keyid = keyid;
    report
}

/// How a fetch follows its redirects.
struct Hops<'a, 'p> {
    max_redirects: u32,
    identity: Option<(&'a Signer, &'a Clock)>,
    pacing: Option<&'a mut Pacing<'p>>,
}

async fn fetch_hops(
    client: &UpstreamClient,
    url: &str,
    user_agent: Option<&HeaderValue>,
    mut how: Hops<'_, '_>,
    keyid: &mut Option<KeyId>,
) -> FetchReport {
    let (max_redirects, identity) = (how.max_redirects, how.identity);
    let mut current = url.to_string();
    let mut hops = 0;
    loop {
        let uri: Uri = match current.parse() {
            Ok(u) => u,
            Err(e) => {
                let why = format!("bad URL {current}: {e}");
                return report(url, None, FetchResult::Failed(why));
            }
        };
        match fetch_hop(client, url, &uri, user_agent, identity, keyid).await {
            Hop::Done(report) => return *report,
            Hop::Redirect { status, to } => match to {
                Some(next) if hops < max_redirects => {
                    hops += 1;
                    if let (Some(pacing), Ok(next_uri)) = (how.pacing.as_mut(), next.parse()) {
                        if !pacing.next_hop(status, &next_uri).await {
                            let why =
                                format!("the host's budget would not hold the redirect to {next}");
                            return report(url, Some(status), FetchResult::Failed(why));
                        }
                    }
                    current = next;
                }
                Some(_) => return report(url, Some(status), FetchResult::TooManyRedirects),
                None => return report(url, Some(status), FetchResult::Status(status)),
            },
        }
    }
}

/// What one request of a robots.txt fetch came to.
enum Hop {
    /// The fetch's report (`url` is the first URL asked for).
    Done(Box<FetchReport>),
    /// A 3xx, and where it points when it says.
    Redirect { status: u16, to: Option<String> },
}

/// One request of a fetch: `uri` asked for, signed as the crawler's.
async fn fetch_hop(
    client: &UpstreamClient,
    url: &str,
    uri: &Uri,
    user_agent: Option<&HeaderValue>,
    identity: Option<(&Signer, &Clock)>,
    keyid: &mut Option<KeyId>,
) -> Hop {
    let mut req = Request::builder().method(Method::GET).uri(uri.clone());
    if let Some(ua) = user_agent {
        req = req.header(USER_AGENT, ua.clone());
    }
    let mut req = match req.body(empty()) {
        Ok(r) => r,
        Err(e) => {
            return Hop::Done(Box::new(report(
                url,
                None,
                FetchResult::Failed(e.to_string()),
            )))
        }
    };
    // robots.txt fetches are the crawler's requests too: signed, each hop.
    if let (Some((signer, clock)), Some(authority)) = (identity, uri.authority()) {
        let authority = normalized_authority(uri.scheme_str(), authority);
        *keyid = signer.sign_headers(req.headers_mut(), &authority, clock.wall());
    }
    let resp = match client.request(req).await {
        Ok(r) => r,
        Err(e) => {
            let stop = failure::upstream(&e);
            let mut r = report(url, None, FetchResult::Failed(stop.reason.clone()));
            // Any other failure is the site's rules being unknown.
            let own = stop.outcome == Outcome::Blocked || stop.source == Source::Parent;
            r.stop = own.then_some(stop);
            return Hop::Done(Box::new(r));
        }
    };
    // Through a parent: its own refusal says nothing about the site's rules
    // (a 407 is not a 4xx from the site), and a provider's 200 may carry the
    // site's status in a header.
    let verdict = client
        .parent_for(uri)
        .map(|p| p.judge(resp.status().as_u16(), resp.headers()));
    let status = match verdict {
        Some(ParentVerdict::Parent { why }) => {
            drain_small(resp).await;
            let mut r = report(url, None, FetchResult::Failed(why.clone()));
            r.stop = Some(failure::parent(&why));
            return Hop::Done(Box::new(r));
        }
        Some(ParentVerdict::Target { status, .. }) => status,
        None => resp.status().as_u16(),
    };
    if (300..400).contains(&status) {
        let to = resp
            .headers()
            .get(LOCATION)
            .and_then(|l| l.to_str().ok())
            .and_then(|l| resolve_location(uri, l));
        return Hop::Redirect { status, to };
    }
    if !(200..300).contains(&status) {
        let headers = resp.headers().clone();
        drain_small(resp).await;
        let mut r = report(url, Some(status), FetchResult::Status(status));
        r.retry_after = headers
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        r.headers = headers;
        return Hop::Done(Box::new(r));
    }
    Hop::Done(Box::new(read_body(url, status, resp).await))
}

/// A 2xx robots.txt's body: only the first 500 KiB are parsed, so only that
/// much is read.
async fn read_body(
    url: &str,
    status: u16,
    resp: http::Response<hyper::body::Incoming>,
) -> FetchReport {
    let headers = resp.headers().clone();
    let conn = ConnHandle::of(&resp);
    let mut body = ReleaseOnEnd::new(resp.into_body(), conn);
    let mut buf = BytesMut::new();
    while buf.len() < MAX_ROBOTS_BYTES {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    buf.extend_from_slice(&data);
                }
            }
            Some(Err(e)) => {
                return report(url, Some(status), FetchResult::Failed(format!("body: {e}")))
            }
            None => break,
        }
    }
    buf.truncate(MAX_ROBOTS_BYTES);
    let body: Bytes = buf.freeze();
    FetchReport {
        url: url.to_string(),
        status: Some(status),
        retry_after: None,
        headers,
        bytes: body.len() as u64,
        keyid: None,
        result: FetchResult::Body(body.to_vec()),
        stop: None,
        sent: None,
    }
}

/// Reads a short error body to its end, so that the connection goes back
/// to the pool for the page that asked for robots.txt (a 404 is the common
/// answer); a long one is dropped, and its connection with it.
async fn drain_small(resp: http::Response<hyper::body::Incoming>) {
    const DRAIN_MAX: u64 = 16 * 1024;
    let conn = ConnHandle::of(&resp);
    let small = http_body::Body::size_hint(resp.body())
        .upper()
        .is_some_and(|n| n <= DRAIN_MAX);
    if small {
        let body = ReleaseOnEnd::new(resp.into_body(), conn);
        let _ = body.collect().await;
    }
}

/// `host[:port]` as the Host header carries it: the scheme's default port
/// left out, as RFC 9421's `@authority` wants.
fn normalized_authority(scheme: Option<&str>, a: &http::uri::Authority) -> String {
    let default = match scheme {
        Some("https") => Some(443),
        Some("http") => Some(80),
        _ => None,
    };
    match a.port_u16() {
        Some(p) if Some(p) == default => a.host().to_ascii_lowercase(),
        _ => a.as_str().to_ascii_lowercase(),
    }
}

/// A fetch report with nothing but its URL, status and result.
pub(crate) fn report(url: &str, status: Option<u16>, result: FetchResult) -> FetchReport {
    FetchReport {
        url: url.to_string(),
        status,
        retry_after: None,
        headers: http::HeaderMap::new(),
        bytes: 0,
        keyid: None,
        result,
        stop: None,
        sent: None,
    }
}

fn resolve_location(base: &Uri, location: &str) -> Option<String> {
    if location.starts_with("http://") || location.starts_with("https://") {
        return Some(location.to_string());
    }
    let scheme = base.scheme_str()?;
    let authority = base.authority()?;
    if let Some(rest) = location.strip_prefix("//") {
        return Some(format!("{scheme}://{rest}"));
    }
    if location.starts_with('/') {
        return Some(format!("{scheme}://{authority}{location}"));
    }
    let path = base.path();
    let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
    Some(format!("{scheme}://{authority}{dir}{location}"))
}

/// Fills the audit record of a fetch of `F` (`robots_fetched`,
/// `tdmrep_fetched`).
pub(crate) fn fetch_record<F: SiteFile>(
    mut rec: Box<AuditRecord>,
    r: &FetchReport,
) -> Box<AuditRecord> {
    rec.outcome = Some(F::FETCHED);
    rec.sent = r.sent.map(crate::clock::stamp);
    rec.status = r.status;
    rec.bytes = Some(r.bytes);
    rec.retry_after = r.retry_after.clone();
    rec.signed = r.keyid.is_some();
    rec.keyid = r.keyid.as_ref().map(|k| k.to_string());
    rec.source = r.stop.as_ref().map(|s| s.source.as_str());
    rec.reason = fetch_reason_of::<F>(&r.result);
    rec
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `robots.max_bytes` at its smallest: room for two 200 kB bodies.
    const CAP: u64 = MAX_ROBOTS_BYTES as u64;
    const BODY: usize = 200_000;

    fn cache() -> RobotsCache {
        let params = RobotsParams {
            max_bytes: CAP,
            ..RobotsParams::default()
        }
        .validate()
        .expect("valid");
        RobotsCache::new(params, Clock::system(), None)
    }

    /// A robots.txt of `len` bytes fetched for `origin` and put in the cache.
    fn fetched(c: &RobotsCache, origin: &str, len: usize) {
        let slot = c.slot(origin);
        let mut body = format!("User-agent: *\nDisallow: /private\n# {origin}\n").into_bytes();
        body.resize(len, b'#');
        c.install(origin, &slot, &FetchResult::Body(body), c.clock.now_std());
    }

    fn held(c: &RobotsCache, origin: &str) -> bool {
        c.slots.get(origin).is_some_and(|s| c.cached(&s).is_some())
    }

    /// What the cache counts against the cap, and what its listed entries hold.
    fn counted_and_held(c: &RobotsCache) -> (u64, u64) {
        let held = c
            .slots
            .iter()
            .map(|s| s.bytes.load(Ordering::Relaxed))
            .sum();
        (c.bytes.load(Ordering::Relaxed), held)
    }

    #[test]
    fn the_byte_cap_evicts_older_entries_and_keeps_the_one_just_fetched() {
        let c = cache();
        fetched(&c, "http://a.test/", BODY);
        fetched(&c, "http://b.test/", BODY);
        assert!(held(&c, "http://a.test/") && held(&c, "http://b.test/"));
        assert_eq!(counted_and_held(&c), (2 * BODY as u64, 2 * BODY as u64));

        // A third body would pass the cap: the older ones make room.
        fetched(&c, "http://c.test/", BODY);
        assert!(held(&c, "http://c.test/"), "the newest entry is kept");
        assert!(!held(&c, "http://a.test/") && !held(&c, "http://b.test/"));
        let (counted, held_bytes) = counted_and_held(&c);
        assert_eq!(counted, held_bytes);
        assert!(counted <= CAP, "{counted} bytes held over a cap of {CAP}");
    }

    #[test]
    fn the_byte_cap_holds_through_many_fetches_of_any_size() {
        let c = cache();
        for (i, len) in [
            150_000, 300_000, 20_000, 500_000, 90_000, 260_000, 400_000, 10,
        ]
        .into_iter()
        .cycle()
        .take(40)
        .enumerate()
        {
            let origin = format!("http://o{i}.test/");
            fetched(&c, &origin, len);
            assert!(held(&c, &origin), "{origin} is kept");
            let (counted, held_bytes) = counted_and_held(&c);
            assert_eq!(counted, held_bytes, "after {origin}");
            assert!(counted <= CAP, "{counted} bytes over {CAP} after {origin}");
        }
    }

    #[test]
    fn the_byte_cap_holds_when_evicting_half_is_not_enough() {
        let c = cache();
        for i in 0..5 {
            fetched(&c, &format!("http://o{i}.test/"), 100_000);
        }
        // 4 of the 5 go in the first pass, whichever they are; the one left
        // and the new body still pass the cap, so it goes too.
        fetched(&c, "http://big.test/", MAX_ROBOTS_BYTES);
        assert!(held(&c, "http://big.test/"));
        assert_eq!(c.slots.len(), 1);
        assert_eq!(counted_and_held(&c), (CAP, CAP));
    }

    #[test]
    fn an_entry_evicted_while_its_fetch_ran_holds_no_bytes() {
        let c = cache();
        // A fetch for x starts; while it runs, others fill the cache over
        // the cap and x's empty slot is evicted.
        let x = c.slot("http://x.test/");
        fetched(&c, "http://a.test/", BODY);
        fetched(&c, "http://b.test/", BODY);
        fetched(&c, "http://c.test/", BODY);
        assert!(c.slots.get("http://x.test/").is_none());
        // Its answer still serves the requests that waited for it, but
        // counts against the cap only if it is in the cache.
        let x_body = FetchResult::Body(vec![b'#'; BODY]);
        c.install("http://x.test/", &x, &x_body, c.clock.now_std());
        let (counted, held_bytes) = counted_and_held(&c);
        assert_eq!(counted, held_bytes);
    }

    #[test]
    fn the_entry_cap_evicts_the_least_recently_used_half() {
        let params = RobotsParams {
            max_entries: 4,
            ..RobotsParams::default()
        }
        .validate()
        .expect("valid");
        let c = RobotsCache::new(params, Clock::system(), None);
        for o in ["a", "b", "c", "d"] {
            fetched(&c, &format!("http://{o}.test/"), 100);
        }
        // a is used again after every other came in; d came in last.
        c.slot("http://a.test/");
        fetched(&c, "http://e.test/", 100);
        for (o, kept) in [("a", true), ("b", false), ("c", false), ("d", false)] {
            assert_eq!(held(&c, &format!("http://{o}.test/")), kept, "{o}");
        }
        assert!(held(&c, "http://e.test/"));
        // b and c come back; e is used again after them, so a, b and c
        // are the least recently used when f comes in.
        fetched(&c, "http://b.test/", 100);
        fetched(&c, "http://c.test/", 100);
        c.slot("http://e.test/");
        fetched(&c, "http://f.test/", 100);
        assert!(held(&c, "http://e.test/") && held(&c, "http://f.test/"));
        assert!(!held(&c, "http://a.test/") && !held(&c, "http://b.test/"));
    }

    #[test]
    fn locations_resolve_against_the_request() {
        let base: Uri = "http://a.test/robots.txt".parse().unwrap();
        assert_eq!(resolve_location(&base, "/r2").unwrap(), "http://a.test/r2");
        assert_eq!(resolve_location(&base, "r3").unwrap(), "http://a.test/r3");
        assert_eq!(
            resolve_location(&base, "//b.test/x").unwrap(),
            "http://b.test/x"
        );
        assert_eq!(
            resolve_location(&base, "https://c.test/y").unwrap(),
            "https://c.test/y"
        );
    }
}
