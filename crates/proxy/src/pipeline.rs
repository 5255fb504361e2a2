//! The one path every request walks (DESIGN §1), top to bottom. Each step
//! asks the policy crate for a decision and acts on it; no rule lives here.
//!
//! A step returns what the next one needs, or `Err(Stop)`: a decision that
//! ends the walk (outcome, status, source, reason), not a response. `handle`
//! reads as the diagram and ends in one funnel, [`Exchange::stopped`], that
//! turns a `Stop` into the client's answer and its audit line; what each
//! kind of failure means is `answer::failure`. Everything a step needs to
//! remember is in [`Exchange`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::USER_AGENT;
use http::request::Parts;
use http::uri::PathAndQuery;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body::Body as _;
use hyper::body::Incoming;
use mannerly_policy::answer;
use mannerly_policy::budget::{Distress, Failure, Refusal};
use mannerly_policy::conditional::{self, Admission, CacheKey, CacheOutcome, Plan};
use mannerly_policy::encoding;
use mannerly_policy::identity::AskedSignature;
use mannerly_policy::robots_cache::{Rules, SiteFile};
use mannerly_policy::{parse_host_ip, AuditRecord, Outcome};
use mannerly_state::responses::StoredResponse;
use tokio::time::{timeout, Instant};

use crate::answer::{failure, Stop};
use crate::body::ProxyBody;
use crate::clients::body::{ClientBody, Pace, Received};
use crate::clients::interim::Lane;
use crate::config::Config;
use crate::error::ConnectError;
use crate::flights::{FlightKey, Joined, Landed};
use crate::hosts::budget::Permit;
use crate::hosts::robots::{self, RobotsCache, Unfetched};
use crate::shared::Shared;
use crate::target::Target;
use crate::upstream::conns::{ConnHandle, Conns};

mod agent;
mod answers;
mod chained;
mod identities;
mod learn;
mod payment;
pub(crate) mod prefs;
mod request;
#[cfg(test)]
mod tests;
mod told;
mod visit;

/// What a step gives the next one, or the decision that ends the walk.
type Step<T> = Result<T, Stop>;

/// Carries one request through the pipeline and answers it.
pub(crate) async fn handle(
    shared: Arc<Shared>,
    mut req: Request<Incoming>,
    target: Target,
    client: SocketAddr,
    user: Option<String>,
    lane: Option<Lane>,
) -> Response<ProxyBody> {
    let mut x = Exchange::begin(shared, &req, target, client, user);
    x.lane = lane;
    let walked: Step<Response<ProxyBody>> = async {
        x.guard().await?; // 0. a target the proxy may reach
        x.user_agent(req.headers_mut())?; // 0b. the crawler's User-Agent
        x.robots(&req).await?; // 1. robots.txt: allowed, signals, Crawl-delay
        x.tdmrep(&req).await?; // 1b. tdmrep.json, for a crawl declaring a TDM purpose
        let (parts, body) = req.into_parts();
        let mut cache = match x.conditional(&parts).await? {
            Lookup::Ask(cache) => cache, // 3. validators to send
            Lookup::Stored(page) => return Ok(x.stored_answer(page)), // fresh, not asked
        };
        let flight = match x.collapse(&parts, &cache).await {
            Joined::Alone(flight) => flight, // the origin is asked by this request
            Joined::Shared(page) => return Ok(x.collapsed(page)), // or answered an identical one
        };
        let mut body = x.client_body(body).await?; // small bodies read before the turn
        loop {
            x.offer(&cache).await?; // a price held before the send, or refused unsent
            let mut permit = x.budget().await?; // 2. the host's turn
            let mut out = x.outgoing(&parts, body.take(), &cache)?;
            x.identity(&mut out); // 4. Web Bot Auth signature
            let resp = x.upstream(out, &mut permit).await?; // 5. send
            let resendable = body.resendable();
            match x
                .learn(&parts, &mut cache, permit, resp, resendable)
                .await?
            {
                Learned::Answer(answer) => return Ok(x.landed(flight, answer)), // 6.-7. learn, audit
                Learned::RetryAfterThrottle | Learned::SignAsAsked | Learned::PayAndRetry => {
                    continue
                }
                Learned::RefetchWithoutValidators => cache.drop_validators(),
            }
        }
    }
    .await;
    let mut answer = walked.unwrap_or_else(|stop| x.stopped(stop)); // the one funnel
    x.tell(&mut answer); // what the budget knows, and the client's wait
    answer
}

/// One request on its way: where it goes, its audit record, its hold.
struct Exchange {
    shared: Arc<Shared>,
    target: Target,
    client: SocketAddr,
    rec: Box<AuditRecord>,
    /// The reloadable configuration as the request found it: one snapshot
    /// for the whole walk, taken once (each look takes a lock and a count).
    live: Arc<Config>,
    enforce: bool,
    /// The longest the request may be held, robots.txt fetch included.
    deadline: Instant,
    /// One reading of both clocks when the request came in: later wall
    /// times of the request follow from monotonic readings taken anyway
    /// (a clock read costs 50-70 ns on a virtual machine, and a request
    /// took 24 of them).
    began: (Instant, SystemTime),
    /// When the origin's answer head came in (monotonic).
    answered: Instant,
    /// Time spent waiting for the budget so far, over every attempt.
    waited: Duration,
    /// Sends after a throttle so far.
    retries: u32,
    /// The origin's Retry-After of the last throttle, as sent.
    retry_after: Option<String>,
    /// Where the walk was when it was last seen: what the line of a
    /// request the client abandons says (see `impl Drop for Exchange`).
    at: Stage,
    /// Body bytes read from the client so far.
    received: Received,
    /// What the origin asked our signature to cover (`Accept-Signature`),
    /// once it has: the next send is signed so, and is not asked again.
    asked: Option<AskedSignature>,
    /// What `tdmrep.json` refuses, when `annotate` lets the request go: the
    /// answer's `Mannerly-Preferences`.
    annotation: Option<http::HeaderValue>,
    /// The price held for the next send and the field that offers it.
    paying: Option<payment::Paying>,
    /// A 402 was answered with a payment once: never twice.
    paid_again: bool,
    /// The client takes identity only and we ask for `gzip, br` for it:
    /// what comes back coded is decoded for it (`crawler.compression`).
    decode_for_client: bool,
    /// What the walk found that the decision header of a forwarded answer
    /// says too (the agent token that bound the robots verdict, page-level
    /// directives).
    said: Vec<(&'static str, String)>,
    /// The key of the budget the target's host belongs to, once placed.
    group: Option<String>,
    /// How long the request prefers to be held at most, and who chose it.
    wait: Option<told::Wait>,
    /// Where the origin's 1xx answers go on to the client (HTTP/1.1
    /// clients only).
    lane: Option<Lane>,
}

/// How far a request got; a client that goes away mid-walk leaves a line
/// saying where.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Stage {
    /// Not yet sent: robots.txt, the store, the body, the budget's turn.
    Before,
    /// Sent to the origin (or on its way): the origin may have it.
    AtOrigin,
    /// The record was taken for the one answer.
    Answered,
}

/// What `learn` made of the origin's answer.
enum Learned {
    /// The client's answer.
    Answer(Response<ProxyBody>),
    /// The origin throttled a request that may be sent again once the pause
    /// is over: back to the budget.
    RetryAfterThrottle,
    /// Our validators drew a 304 that is not for the stored page: send the
    /// request once more, without them.
    RefetchWithoutValidators,
    /// The origin refused with a 403 asking for a signature we can give
    /// (`Accept-Signature`): back to the budget, signed as asked.
    SignAsAsked,
    /// A 402 whose price the limits cover: back to the budget, with the
    /// payment (`crawler-exact-price`, an x402 signature).
    PayAndRetry,
}

/// What step 3 found.
enum Lookup {
    /// Ask the origin, with what the store had.
    Ask(CacheStep),
    /// A stored page fresh enough to answer without asking (`serve_fresh`).
    Stored(StoredPage),
}

/// A stored page as the client gets it.
struct StoredPage {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
    /// The store's entry the body is from, whose `<meta>` tags are read
    /// once for every time it is served.
    entry: Option<Arc<StoredResponse>>,
}

/// What step 3 found, carried to step 6.
struct CacheStep {
    /// The request's cache key; `None` when the store is left alone.
    key: Option<CacheKey>,
    /// The stored response our validators were taken from.
    stored: Option<Arc<StoredResponse>>,
    /// Validators added to the upstream request.
    validators: Option<HeaderMap>,
    /// Something was stored for the key (usable or not).
    had_entry: bool,
    /// The audit `cache` value unless the answer is stored or revalidated.
    outcome: CacheOutcome,
}

impl CacheStep {
    fn new(key: Option<CacheKey>, outcome: CacheOutcome) -> CacheStep {
        CacheStep {
            key,
            stored: None,
            validators: None,
            had_entry: false,
            outcome,
        }
    }

    /// After a 304 that did not match: the next send is unconditional.
    fn drop_validators(&mut self) {
        self.validators = None;
        self.stored = None;
    }
}

// === impl Exchange: the steps ===

impl Exchange {
    /// Wall time at the monotonic reading `at`, taken during the request.
    fn wall_at(&self, at: Instant) -> SystemTime {
        self.began.1 + at.saturating_duration_since(self.began.0)
    }

    /// The request's path and query: the URL after its origin (`/` when
    /// the request named none).
    fn path(&self) -> &str {
        &self.rec.url[self.target.root().len() - 1..]
    }

    fn begin<B>(
        shared: Arc<Shared>,
        req: &Request<B>,
        target: Target,
        client: SocketAddr,
        user: Option<String>,
    ) -> Exchange {
        let url = target.url(req.uri().path_and_query());
        // Looked up once for the record and the hold (each look hashes
        // the host's key in two maps).
        let group = shared.budgets.group(&target.host).key;
        let max_hold = shared.budgets.key_params(&group).max_hold();
        let method = req.method().as_str();
        let began = (shared.clock.now(), shared.clock.wall());
        let mut rec = shared.record_in(method, url, &target.host, group, client, began.1);
        let live = shared.live();
        let wait = told::preferred(&live, req.headers(), client, user.as_deref());
        rec.user = user;
        rec.agent = Some(request::agent(&live, req.headers()));
        let start = began.0;
        let decode_for_client = live.crawler.compression && encoding::ask_for(req.headers());
        let mut x = Exchange {
            enforce: live.policy.enforce,
            live,
            shared,
            target,
            client,
            deadline: start,
            began,
            answered: start,
            rec,
            waited: Duration::ZERO,
            retries: 0,
            retry_after: None,
            at: Stage::Before,
            received: Received::default(),
            asked: None,
            annotation: None,
            paying: None,
            paid_again: false,
            decode_for_client,
            said: Vec::new(),
            group: None,
            wait,
            lane: None,
        };
        let hold = x.hold(max_hold);
        x.deadline += hold;
        x
    }

    /// Step 0: the target must be one the proxy may reach, by a name that
    /// resolves. The connector checks every address again when it connects;
    /// checking here too means a blocked or unknown target is answered as
    /// such, before robots.txt is fetched.
    /// The name's group is placed here too, by its address when the
    /// grouping asks for one (`budget.group_by = "ip"`, address blocks).
    async fn guard(&mut self) -> Step<()> {
        let (guard, host, port) = (&self.shared.guard, &self.target.host, self.target.port);
        let budgets = &self.shared.budgets;
        let mut addr = None;
        let reachable = match parse_host_ip(host) {
            Some(ip) => guard.check(host, &[SocketAddr::new(ip, port)]),
            None if budgets.groups_by_address() => guard.resolve(host, port).await.map(|a| {
                // The lowest, so that a name whose resolver rotates its
                // answers stays in one group.
                addr = a.iter().map(SocketAddr::ip).min();
            }),
            None => guard.check_name(host, port).await,
        };
        let group = budgets.place(host, addr).key;
        self.rec.group = Some(group.clone());
        self.group = Some(group);
        match reachable {
            Err(e @ (ConnectError::Blocked { .. } | ConnectError::Resolve { .. })) => {
                Err(failure::connect(&e))
            }
            // Anything else is met again, and answered, when connecting.
            _ => Ok(()),
        }
    }

    /// Step 1: robots.txt. Its own URL is always allowed and never waits for itself.
    async fn robots<B>(&mut self, req: &Request<B>) -> Step<()> {
        if mannerly_policy::url::is_robots_txt(req.uri().path()) {
            return Ok(());
        }
        let fetched = self.site_file(|s| &s.robots, req).await;
        let (shared, host) = (&self.shared, &self.target.host);
        let refusal = match fetched {
            Ok(rules) => {
                let (rec, said) = (&mut self.rec, &mut self.said);
                let path = req.uri().path_and_query().map_or("/", PathAndQuery::as_str);
                let at = (host.as_str(), path);
                match (
                    request::robots_verdict(shared, &self.live, &rules, at, rec, said),
                    rules,
                ) {
                    (None, Rules::Known(robots)) => self.visit(&robots).await,
                    (stop, _) => stop,
                }
            }
            Err(Unfetched::Budget(r)) => {
                let by = shared.throttled_by.get(&shared.budgets.group(host).key);
                let why = "robots.txt cannot be fetched: ";
                Some(failure::budget(&r, why, by.as_deref()))
            }
            Err(Unfetched::Stopped(stop)) => return Err(stop),
        };
        self.enforced(refusal)
    }

    /// A file the target's origin keeps to say what it wants (robots.txt,
    /// tdmrep.json), from its cache: a cold origin's one fetch takes the
    /// host's turn and writes a line of its own.
    async fn site_file<F: SiteFile, B>(
        &mut self,
        cache: impl Fn(&Shared) -> &RobotsCache<F>,
        req: &Request<B>,
    ) -> Result<Rules<F>, Unfetched> {
        let shared = self.shared.clone();
        if let Some(rules) = cache(&shared).fresh(self.target.root()) {
            return Ok(rules);
        }
        if cache(&shared).would_fetch(self.target.root()) {
            if let Some(stop) = self.quiet_before_fetch().await {
                return Err(Unfetched::Stopped(stop));
            }
        }
        let since = shared.clock.now();
        let rules = self.site_file_from(&shared, cache(&shared), req).await;
        let took = shared
            .clock
            .now()
            .saturating_duration_since(since)
            .as_millis();
        if took > 0 {
            let before = self.rec.robots_ms.unwrap_or(0);
            self.rec.robots_ms = Some(before + u64::try_from(took).unwrap_or(u64::MAX));
        }
        rules
    }

    async fn site_file_from<F: SiteFile, B>(
        &self,
        shared: &Shared,
        cache: &RobotsCache<F>,
        req: &Request<B>,
    ) -> Result<Rules<F>, Unfetched> {
        let (host, client) = (&self.target.host, self.client);
        cache
            .rules(
                &shared.client,
                &shared.budgets,
                &self.target,
                self.deadline,
                req.headers().get(USER_AGENT),
                |report| {
                    let r = shared.record("GET", &report.url, host, client);
                    shared.audit.send(robots::fetch_record::<F>(r, report));
                },
            )
            .await
    }

    /// Step 3: conditional. Looked up before the budget wait, so that a stored
    /// answer served without asking the origin (serve_fresh) does not take
    /// the host's turn.
    async fn conditional(&mut self, parts: &Parts) -> Step<Lookup> {
        let cache = &self.shared.cache;
        let ask = |key, outcome| Ok(Lookup::Ask(CacheStep::new(key, outcome)));
        let key = match conditional::admit_under(parts, self.target.root(), cache.params()) {
            Admission::Bypass(_) => return ask(None, CacheOutcome::Bypass),
            Admission::PassThrough(key) => return ask(Some(key), CacheOutcome::Bypass),
            Admission::Lookup(key) => key,
        };
        let found = match cache.get(&key, &parts.headers).await {
            Ok(found) => found,
            Err(e) => {
                cache.failed("read", &e);
                return ask(None, CacheOutcome::Error);
            }
        };
        let meta = found.as_ref().map(|f| &f.meta);
        let now = self.shared.clock.wall();
        let plan = conditional::plan(parts, &key, meta, cache.params(), now);
        let mut step = CacheStep::new(Some(key), CacheOutcome::Miss);
        step.had_entry = found.is_some();
        match plan {
            Plan::Fetch => {}
            Plan::Revalidate { validators } => {
                step.validators = Some(validators);
                step.stored = found;
            }
            Plan::ServeStored {
                status,
                mut headers,
            } => {
                self.saved_charge(&mut headers);
                let body = found.as_ref().map(|f| f.body.clone()).unwrap_or_default();
                self.rec.cache(CacheOutcome::Hit);
                let page = StoredPage {
                    status,
                    headers,
                    body,
                    entry: found,
                };
                return Ok(Lookup::Stored(page));
            }
        }
        Ok(Lookup::Ask(step))
    }

    /// One request per resource at a time: an identical request already
    /// at the origin (same method, cache key and fields, nothing private)
    /// answers this one too.
    async fn collapse(&mut self, parts: &Parts, cache: &CacheStep) -> Joined {
        let key = cache
            .key
            .as_ref()
            .filter(|_| cache.outcome != CacheOutcome::Bypass && self.enforce)
            .and_then(|k| FlightKey::of(&parts.method, k.as_str(), &parts.headers));
        let since = self.shared.clock.now();
        let joined = self.shared.flights.join(key, self.deadline).await;
        if let Joined::Shared(_) = joined {
            self.waited += self.shared.clock.now().saturating_duration_since(since);
            self.rec.waited(self.waited);
        }
        joined
    }

    /// The answer of the identical request that went: this request's own
    /// line, `collapsed` into that one's.
    fn collapsed(&mut self, page: Arc<Landed>) -> Response<ProxyBody> {
        self.rec.outcome = Some(Outcome::Collapsed);
        self.rec.collapsed_into = Some(page.id.clone());
        self.stored_answer(StoredPage {
            status: page.status,
            headers: page.headers.clone(),
            body: page.body.clone(),
            entry: None,
        })
    }

    /// This request's answer, which identical requests that waited for it
    /// get as well.
    fn landed(
        &self,
        flight: Option<crate::flights::Flight>,
        answer: Response<ProxyBody>,
    ) -> Response<ProxyBody> {
        let id = answer.headers().get(crate::answer::ID);
        match (flight, id.and_then(|v| v.to_str().ok())) {
            (Some(f), Some(id)) => {
                let id = id.to_owned();
                f.land(answer, id)
            }
            _ => answer,
        }
    }

    /// The client's body: read (in memory, or spooled to the data dir)
    /// before the host's turn, so that a slow client does not hold it; a
    /// silence past the idle limit is a 408.
    async fn client_body(&mut self, body: Incoming) -> Step<ClientBody> {
        // Most requests have none: no clock read for a pace never kept.
        if body.is_end_stream() {
            return Ok(ClientBody::empty());
        }
        let p = &self.shared.cfg.proxy;
        let pace = Pace {
            idle: p.body_idle_timeout,
            min_rate: p.body_min_rate,
            grace: p.body_rate_grace,
            start: self.shared.clock.now(),
        };
        ClientBody::read(body, pace, self.received.clone(), &self.shared.cfg.data_dir)
            .await
            .map_err(|e| failure::client_body(&e))
    }

    /// Step 2: the host's turn: a rate slot, the end of a pause, a free
    /// concurrency slot. Observe mode does not hold requests.
    async fn budget(&mut self) -> Step<Option<Permit>> {
        if !self.enforce {
            return Ok(None);
        }
        let since = self.shared.clock.now();
        let permit = self
            .shared
            .budgets
            .acquire(&self.target.host, self.deadline)
            .await;
        self.waited += self.shared.clock.now().saturating_duration_since(since);
        self.rec.waited(self.waited);
        self.rec.state = permit
            .as_ref()
            .map_or(self.shared.budgets.state(), |p| p.state());
        match permit {
            Ok(p) => Ok(Some(p)),
            Err(r) => {
                if let Refusal::Distressed { event, .. } = r {
                    self.rec.distress = Some(event.as_str());
                }
                let group = self.shared.budgets.group(&self.target.host);
                let by = self.shared.throttled_by.get(&group.key);
                let stop = failure::budget(&r, "", by.as_deref());
                Err(self.chose_not_to_wait(stop, &r))
            }
        }
    }

    /// The origin's request: absolute URI, HTTP/1.1 (the client upgrades to
    /// h2 by ALPN), hop-by-hop headers gone, Host set to the target, our
    /// validators added.
    fn outgoing(
        &mut self,
        parts: &Parts,
        body: ProxyBody,
        cache: &CacheStep,
    ) -> Step<Request<ProxyBody>> {
        let via = self.shared.via.value();
        let mut r = request::upstream_request(parts, body, &self.target, &self.rec.url, via)
            .map_err(failure::bad_request)?;
        if let Some(validators) = &cache.validators {
            // Ours replace any the client sent, as `extend` with the map
            // would, without a copy of the map for it.
            let headers = r.headers_mut();
            for name in validators.keys() {
                let mut values = validators.get_all(name).iter();
                if let Some(first) = values.next() {
                    headers.insert(name.clone(), first.clone());
                }
                for value in values {
                    headers.append(name.clone(), value.clone());
                }
            }
        }
        if self.decode_for_client {
            let (name, value) = encoding::asked();
            r.headers_mut().insert(name, value);
        }
        // 1xx interim answers go on to an HTTP/1.1 client (RFC 9110
        // §15.2); hyper's client hands them over (HTTP/1 origins only).
        if let Some(lane) = &self.lane {
            lane.watch(parts.version, &mut r);
        }
        payment::put_offer(r.headers_mut(), self.paying.as_ref());
        Ok(r)
    }

    /// Step 4: identity, Web Bot Auth signature headers. Signed here, after
    /// the budget's turn, so `created` is the send time; a retry signs anew.
    fn identity(&mut self, out: &mut Request<ProxyBody>) {
        if let Some(signer) = &self.shared.identity {
            let now = self.shared.clock.wall();
            let authority = self.target.authority();
            let price = self.paying.as_ref().and_then(|p| p.signed_field());
            let asked = answer::signed_as(self.asked.as_ref(), price);
            let keyid = match &asked {
                None => signer.sign_headers(out.headers_mut(), authority, now),
                Some(asked) => {
                    let (method, uri) = (out.method().to_string(), out.uri().clone());
                    let headers = out.headers_mut();
                    let id = signer.identity();
                    id.sign_as_asked(headers, &method, &uri, authority, asked, now)
                }
            };
            self.rec.signed = keyid.is_some();
            self.rec.keyid = keyid.map(|k| k.to_string());
        }
    }

    /// Step 5: send, with the first-byte timeout. A timeout or a reset is
    /// the site's distress, which its budget hears as the slot is given
    /// back.
    async fn upstream(
        &mut self,
        out: Request<ProxyBody>,
        permit: &mut Option<Permit>,
    ) -> Step<Response<Incoming>> {
        let first_byte = self.shared.cfg.upstream.first_byte_timeout;
        let sending = self.shared.clock.now();
        self.rec.sent = Some(crate::clock::stamp(self.wall_at(sending)));
        self.at = Stage::AtOrigin;
        if let Some(p) = self.paying.as_mut() {
            p.sent();
        }
        // Pinned where made: by value, the send's 1.2 KiB was copied twice.
        let sent = timeout(first_byte, std::pin::pin!(self.shared.client.request(out))).await;
        self.answered = self.shared.clock.now();
        let took = self.answered.saturating_duration_since(sending);
        self.rec.upstream_ms = Some(took.as_millis() as u64);
        match sent {
            Ok(Ok(resp)) => {
                // A response without a body frees its connection at once,
                // whichever way the pipeline goes on.
                if resp.body().is_end_stream() {
                    if let Some(conn) = ConnHandle::of(&resp) {
                        Conns::release(&conn);
                    }
                }
                self.through_parent(resp)
            }
            Ok(Err(e)) => {
                Box::pin(self.failed(permit.take(), failure::distress(&e))).await;
                Err(failure::upstream(&e))
            }
            Err(_) => {
                let timeout = Failure::Distress(Distress::FirstByteTimeout);
                Box::pin(self.failed(permit.take(), timeout)).await;
                Err(failure::no_first_byte(first_byte))
            }
        }
    }

    /// Gives back the turn of a request that got no response, with what
    /// the site showed; the line says what the budget made of it.
    async fn failed(&mut self, permit: Option<Permit>, failure: Failure) {
        let Some(permit) = permit else { return };
        if let Some(r) = permit.failed(failure).await {
            self.rec.budget(&r);
        }
    }

    /// A policy refusal ends the walk when enforcing; in observe mode it
    /// passes and the line says what `would` have been decided.
    fn enforced(&mut self, refusal: Option<Stop>) -> Step<()> {
        match refusal {
            Some(stop) if self.enforce => Err(stop),
            Some(stop) => {
                self.rec.would = Some(stop.outcome());
                Ok(())
            }
            None => Ok(()),
        }
    }
}
