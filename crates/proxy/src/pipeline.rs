//! The one path every request walks (DESIGN §1), top to bottom. Each step
//! asks the policy crate for a decision and acts on it; no rule lives here.
//!
//! A step returns what the next one needs, or `Err(answer)`: the response
//! the client gets, its audit line already on its way. `handle` reads as the
//! diagram; everything a step needs to remember is in [`Exchange`].

// The answer in `Err` is not boxed: it is what the walk exists to produce,
// moved once, and boxing it would cost every request an allocation.
#![allow(clippy::result_large_err)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HOST, RETRY_AFTER, USER_AGENT};
use http::request::Parts;
use http::uri::{Authority, PathAndQuery};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, Uri, Version};
use http_body::Body as _;
use hyper::body::Incoming;
use mannerly_policy::budget::{host_key, Announced, Reaction, Refusal as BudgetRefusal};
use mannerly_policy::conditional::{self, Admission, CacheKey, CacheOutcome, Plan};
use mannerly_policy::robots_cache::{FetchResult, Rules};
use mannerly_policy::{parse_host_ip, strip_hop_by_hop, AuditRecord, Outcome};
use mannerly_state::responses::StoredResponse;
use tokio::time::Instant;

use crate::body::{boxed, full, AuditedBody, ProxyBody};
use crate::budget::Permit;
use crate::cache::Tee;
use crate::client_body::ClientBody;
use crate::conns::{ConnHandle, Conns, ReleaseOnEnd};
use crate::error::Source;
use crate::respond::{decision_value, header_text, Answer, DECISION, ID};
use crate::robots;
use crate::shared::Shared;
use crate::target::Target;
use crate::upstream::{connect_error, explain, ConnectError};

/// What a step gives the next one, or the answer that ends the walk.
type Step<T> = Result<T, Response<ProxyBody>>;

/// Carries one request through the pipeline and answers it.
pub(crate) async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
    target: Target,
    client: SocketAddr,
) -> Response<ProxyBody> {
    let mut x = Exchange::begin(shared, &req, target, client);
    let walked: Step<Response<ProxyBody>> = async {
        x.guard().await?; // 0. a target the proxy may reach
        x.robots(&req).await?; // 1. robots.txt: allowed, signals, Crawl-delay
        let (parts, body) = req.into_parts();
        let mut cache = x.conditional(&parts).await?; // 3. stored page or validators
        let mut body = x.client_body(body).await?; // small bodies read before the turn
        loop {
            let permit = x.budget().await?; // 2. the host's turn
            let mut out = x.outgoing(&parts, body.take(), &cache)?;
            x.identity(&mut out); // 4. Web Bot Auth signature
            let resp = x.upstream(out).await?; // 5. send
            match x
                .learn(&parts, &mut cache, permit, resp, body.resendable())
                .await
            {
                Learned::Answer(answer) => return Ok(answer), // 6.-7. learn, audit
                Learned::RetryAfterThrottle => continue,
                Learned::RefetchWithoutValidators => cache.drop_validators(),
            }
        }
    }
    .await;
    walked.unwrap_or_else(|answer| answer)
}

/// One request on its way: where it goes, its audit record, its hold.
struct Exchange {
    shared: Arc<Shared>,
    target: Target,
    client: SocketAddr,
    url: String,
    path: String,
    rec: AuditRecord,
    enforce: bool,
    /// The longest the request may be held, robots.txt fetch included.
    deadline: Instant,
    /// Time spent waiting for the budget so far, over every attempt.
    waited: Duration,
    /// Sends after a throttle so far.
    retries: u32,
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
    fn begin<B>(
        shared: Arc<Shared>,
        req: &Request<B>,
        target: Target,
        client: SocketAddr,
    ) -> Exchange {
        let url = target.url(req.uri().path_and_query());
        let mut rec = shared.record(req.method().as_str(), &url, &target.host, client);
        rec.user = shared.auth.user_for(client);
        rec.agent = Some(agent(&shared, req.headers()));
        let deadline = shared.clock.now() + shared.budgets.max_hold(&target.host);
        Exchange {
            enforce: shared.live().policy.enforce,
            path: req
                .uri()
                .path_and_query()
                .map_or("/", PathAndQuery::as_str)
                .to_string(),
            shared,
            target,
            client,
            url,
            rec,
            deadline,
            waited: Duration::ZERO,
            retries: 0,
        }
    }

    /// Step 0: the target must be one the proxy may reach, by a name that
    /// resolves. The connector checks every address again when it connects;
    /// checking here too means a blocked or unknown target is answered as
    /// such, before robots.txt is fetched.
    async fn guard(&mut self) -> Step<()> {
        let (guard, host, port) = (&self.shared.guard, &self.target.host, self.target.port);
        let reachable = match parse_host_ip(host) {
            Some(ip) => guard.check(host, &[SocketAddr::new(ip, port)]),
            None => guard.check_name(host, port).await,
        };
        match reachable {
            Ok(()) => Ok(()),
            Err(e @ ConnectError::Blocked { .. }) => {
                Err(self.answer(Answer::new(Outcome::Blocked, e.to_string()), Source::Policy))
            }
            // A name that does not resolve is the request's own error, not
            // a robots.txt that cannot be fetched.
            Err(e @ ConnectError::Resolve { .. }) => {
                let a = Answer::new(Outcome::Error, e.to_string())
                    .status(502)
                    .detail("reason", "name not resolved");
                Err(self.answer(a, Source::Upstream))
            }
            Err(_) => Ok(()),
        }
    }

    /// Step 1: robots.txt. Its own URL is always allowed and never waits for itself.
    async fn robots<B>(&mut self, req: &Request<B>) -> Step<()> {
        if req.uri().path() == "/robots.txt" {
            return Ok(());
        }
        let shared = &self.shared;
        let ua = req.headers().get(USER_AGENT);
        let (host, client) = (&self.target.host, self.client);
        let mut blocked = None;
        let fetched = shared
            .robots
            .rules(
                &shared.client,
                &shared.budgets,
                &self.target,
                self.deadline,
                ua,
                |report| {
                    let r = shared.record("GET", &report.url, host, client);
                    shared.audit.send(robots::fetch_record(r, report));
                    if let (true, FetchResult::Failed(why)) = (report.blocked, &report.result) {
                        blocked =
                            Some((Answer::new(Outcome::Blocked, why.clone()), Source::Policy));
                    }
                    if let (true, FetchResult::Failed(why)) = (report.parent, &report.result) {
                        blocked = Some((chained::parent_answer(why), Source::Parent));
                    }
                },
            )
            .await;
        if let Some((a, source)) = blocked {
            return Err(self.answer(a, source));
        }
        let refusal = match fetched {
            Ok(rules) => robots_verdict(shared, &rules, host, &self.path, &mut self.rec),
            Err(budget) => Some(budget_answer(&budget, "robots.txt cannot be fetched: ")),
        };
        match refusal {
            Some(refusal) if self.enforce => Err(self.answer(refusal, Source::Policy)),
            Some(refusal) => {
                self.rec.would = Some(refusal.outcome);
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Step 3: conditional. Looked up before the budget wait, so that a stored
    /// answer served without asking the origin (serve_fresh) does not take
    /// the host's turn.
    async fn conditional(&mut self, parts: &Parts) -> Step<CacheStep> {
        let cache = &self.shared.cache;
        let key = match conditional::admit(parts, &self.url, cache.params()) {
            Admission::Bypass(_) => return Ok(CacheStep::new(None, CacheOutcome::Bypass)),
            Admission::PassThrough(key) => {
                return Ok(CacheStep::new(Some(key), CacheOutcome::Bypass))
            }
            Admission::Lookup(key) => key,
        };
        let found = match cache.get(&key, &parts.headers).await {
            Ok(found) => found,
            Err(e) => {
                cache.failed("read", &e);
                return Ok(CacheStep::new(None, CacheOutcome::Error));
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
            Plan::ServeStored { status, headers } => {
                let body = found.map(|f| f.body.clone()).unwrap_or_default();
                self.rec.cache(CacheOutcome::Hit);
                return Err(self.stored_answer(status, headers, body));
            }
        }
        Ok(step)
    }

    /// The client's body: read whole when small, so that a slow client does
    /// not hold the host's turn; a silence past the idle limit is a 408.
    async fn client_body(&mut self, body: Incoming) -> Step<ClientBody> {
        let idle = self.shared.cfg.proxy.body_idle_timeout;
        match ClientBody::read(body, idle).await {
            Ok(b) => Ok(b),
            Err(e) => {
                let a = Answer::new(Outcome::Error, e.to_string())
                    .status(e.status())
                    .close();
                Err(self.answer(a, Source::Client))
            }
        }
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
            Err(r) => Err(self.answer(budget_answer(&r, ""), Source::Policy)),
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
        match upstream_request(parts, body, &self.target, &self.url, via) {
            Ok(mut r) => {
                if let Some(validators) = &cache.validators {
                    r.headers_mut().extend(validators.clone());
                }
                Ok(r)
            }
            Err(why) => {
                let a = Answer::new(Outcome::Error, why).status(400);
                Err(self.answer(a, Source::Client))
            }
        }
    }

    /// Step 4: identity, Web Bot Auth signature headers. Signed here, after
    /// the budget's turn, so `created` is the send time; a retry signs anew.
    fn identity(&mut self, out: &mut Request<ProxyBody>) {
        if let Some(signer) = &self.shared.identity {
            let now = self.shared.clock.wall();
            let keyid = signer.sign_headers(out.headers_mut(), &self.target.authority(), now);
            self.rec.signed = keyid.is_some();
            self.rec.keyid = keyid.map(|k| k.to_string());
        }
    }

    /// Step 5: send, with the first-byte timeout.
    async fn upstream(&mut self, out: Request<ProxyBody>) -> Step<Response<Incoming>> {
        let first_byte = self.shared.cfg.upstream.first_byte_timeout;
        let sending = self.shared.clock.now();
        let sent = tokio::time::timeout(first_byte, self.shared.client.request(out)).await;
        let took = self.shared.clock.now().saturating_duration_since(sending);
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
            Ok(Err(e)) => Err(self.upstream_failure(&e)),
            Err(_) => {
                let why = format!("no response from the origin within {first_byte:?}");
                let a = Answer::new(Outcome::Error, why).status(504);
                Err(self.answer(a, Source::Upstream))
            }
        }
    }

    /// Step 6: learn. The budget from every answer; a throttle is waited out and
    /// sent again when it may be; a 304 to our validators is the stored
    /// page; any other answer may become the stored page. Step 7, audit: the
    /// line is written when the body has been passed on.
    async fn learn(
        &mut self,
        parts: &Parts,
        cache: &mut CacheStep,
        permit: Option<Permit>,
        resp: Response<Incoming>,
        resendable: bool,
    ) -> Learned {
        let retry_after = resp
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok());
        let announced = Announced::from_headers(resp.headers(), self.shared.clock.wall());
        let reaction = match permit {
            // Behind a provider, the target's status as it carried it.
            Some(p) => {
                let status = self.rec.target_status.unwrap_or(resp.status().as_u16());
                Some(p.respond(status, retry_after, announced.as_ref()).await)
            }
            None => None,
        };
        self.rec.announced = announced;
        if let Some(r) = &reaction {
            self.rec.budget(r);
        }
        match reaction {
            Some(Reaction::Throttled(t)) => {
                self.throttled(parts, resp, t.pause, cache.outcome, resendable)
            }
            _ => self.learn_page(parts, cache, resp, resendable),
        }
    }

    /// A throttled answer: the stored page is left alone (a throttle says
    /// nothing about it). Sent again after the pause when the method, the
    /// body and the hold allow; else the client gets the origin's answer,
    /// Retry-After included.
    fn throttled(
        &mut self,
        parts: &Parts,
        resp: Response<Incoming>,
        pause: Duration,
        cache: CacheOutcome,
        resendable: bool,
    ) -> Learned {
        self.rec.cache(cache);
        self.shared.save_budgets.notify_one();
        let hold_left = self
            .deadline
            .saturating_duration_since(self.shared.clock.now());
        let params = self.shared.budgets.params(&host_key(&self.target.host));
        if !(resendable && params.may_retry(&parts.method, self.retries, pause, hold_left)) {
            return Learned::Answer(self.forward(resp, Outcome::Throttled));
        }
        self.retries += 1;
        let mut line = self.rec.clone();
        line.id = self.shared.next_id();
        line.reason = Some(format!(
            "origin throttled; host paused {:.1} s, request sent again after the pause (attempt {})",
            pause.as_secs_f64(),
            self.retries + 1
        ));
        line.source = Some(Source::Upstream.as_str());
        line.decided(Outcome::Throttled, resp.status().as_u16());
        self.shared.audit.send(line);
        Learned::RetryAfterThrottle
    }

    /// An answer that is not a throttle, and the response store.
    fn learn_page(
        &mut self,
        parts: &Parts,
        cache: &mut CacheStep,
        resp: Response<Incoming>,
        resendable: bool,
    ) -> Learned {
        if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
            // Upgrade is a hop-by-hop field we never forward, so no 101 was
            // asked for: the origin is speaking something else.
            let why = "the origin switched protocols (101) without being asked to";
            let a = Answer::new(Outcome::Error, why).status(502);
            return Learned::Answer(self.answer(a, Source::Upstream));
        }
        let shared = self.shared.clone();
        let params = shared.cache.params();
        let now = shared.clock.wall();
        if resp.status() == StatusCode::NOT_MODIFIED && cache.validators.is_some() {
            let stored = cache.stored.take();
            let key = cache.key.clone();
            let (head, _) = resp.into_parts();
            let merged = stored
                .as_ref()
                .map(|s| conditional::merge_not_modified(&s.meta, parts, &head, params, now));
            return match (merged, stored) {
                (Some(Ok(fresh)), Some(stored)) => {
                    let body = stored.body.clone();
                    if let Some(meta) = fresh.meta {
                        shared.cache.write_back(meta, body.clone());
                    }
                    self.rec.cache(CacheOutcome::Revalidated);
                    self.rec.saved_bytes = Some(body.len() as u64);
                    self.rec.outcome = Some(Outcome::Revalidated);
                    Learned::Answer(self.stored_answer(fresh.status, fresh.headers, body))
                }
                _ if !resendable => {
                    let why = "the origin's 304 does not match the stored page, and the request cannot be sent again";
                    let a = Answer::new(Outcome::Error, why).status(502);
                    Learned::Answer(self.answer(a, Source::Upstream))
                }
                _ => {
                    if let Some(key) = key {
                        shared.cache.remove_later(key);
                    }
                    cache.had_entry = false;
                    Learned::RefetchWithoutValidators
                }
            };
        }
        let resp = match self.preferences(resp) {
            Ok(resp) => resp,
            Err(withheld) => return Learned::Answer(withheld),
        };
        self.rec.cache(cache.outcome);
        if resp.status() == StatusCode::NOT_MODIFIED {
            // The client's own validators: its 304 goes back as is.
            return Learned::Answer(self.forward(resp, Outcome::Unchanged));
        }
        let own = conditional::is_targets_page(self.rec.target_status, resp.status());
        let Some(key) = cache.key.clone().filter(|_| own) else {
            return Learned::Answer(self.forward(resp, Outcome::Fetched));
        };
        let (head, body) = resp.into_parts();
        let verdict = conditional::storable(parts, &key, &head, params, now);
        let resp = Response::from_parts(head, body);
        match verdict {
            Ok(meta) => Learned::Answer(self.forward_and_store(resp, meta)),
            Err(_) => {
                if cache.had_entry && conditional::invalidates_stored(resp.status()) {
                    shared.cache.remove_later(key);
                }
                Learned::Answer(self.forward(resp, Outcome::Fetched))
            }
        }
    }
}

impl Exchange {
    /// Step 6, usage preferences: a response whose headers refuse a declared
    /// purpose is withheld (neither delivered nor stored) or annotated, by
    /// config; in observe mode it passes and the line says `would`.
    fn preferences(&mut self, mut resp: Response<Incoming>) -> Step<Response<Incoming>> {
        match crate::prefs::judge(&self.shared.live(), resp.headers(), &mut self.rec) {
            crate::prefs::OnResponse::Pass => Ok(resp),
            crate::prefs::OnResponse::Annotate(value) => {
                resp.headers_mut().insert(crate::prefs::PREFERENCES, value);
                Ok(resp)
            }
            crate::prefs::OnResponse::Withhold(answer) if self.enforce => {
                Err(self.answer(answer, Source::Policy))
            }
            crate::prefs::OnResponse::Withhold(answer) => {
                self.rec.would = Some(answer.outcome);
                Ok(resp)
            }
        }
    }
}

// === impl Exchange: answers ===

impl Exchange {
    /// The audit record, taken for the one answer of this request.
    fn take_record(&mut self) -> AuditRecord {
        std::mem::take(&mut self.rec)
    }

    /// An answer the proxy makes itself.
    fn answer(&mut self, a: Answer, source: Source) -> Response<ProxyBody> {
        let rec = self.take_record();
        self.shared.refuse(rec, a, source)
    }

    /// Passes an origin response on, with the decision header and the audit
    /// line attached to the end of its body.
    fn forward(&mut self, resp: Response<Incoming>, outcome: Outcome) -> Response<ProxyBody> {
        let rec = self.take_record();
        let (parts, body, rec) = forwarded_head(rec, resp, outcome);
        let idle = Some(self.shared.cfg.upstream.idle_timeout);
        AuditedBody::new(body, rec, self.shared.audit.clone(), idle).respond(parts)
    }

    /// Like [`Exchange::forward`], keeping a copy of the body for the
    /// store. The copy is written once the client has had the whole body,
    /// and the audit line waits for that write to say whether it was
    /// `stored`.
    fn forward_and_store(
        &mut self,
        resp: Response<Incoming>,
        meta: conditional::CacheEntryMeta,
    ) -> Response<ProxyBody> {
        let rec = self.take_record();
        let shared = &self.shared;
        let (parts, body, rec) = forwarded_head(rec, resp, Outcome::Fetched);
        let idle = Some(shared.cfg.upstream.idle_timeout);
        let (tee, copy) = Tee::new(body, shared.cache.params().max_body);
        AuditedBody::new(boxed(tee), rec, shared.audit.clone(), idle)
            .on_finish(shared.cache.store_when_done(meta, copy))
            .respond(parts)
    }

    /// Answers with a stored page: after a 304 to our validators
    /// (`revalidated`), or fresh without asking the origin (`serve_fresh`,
    /// audit `cache: "hit"`).
    fn stored_answer(
        &mut self,
        status: StatusCode,
        mut headers: HeaderMap,
        body: Bytes,
    ) -> Response<ProxyBody> {
        let mut rec = self.take_record();
        let outcome = *rec.outcome.get_or_insert(Outcome::Fetched);
        let waited_ms = rec.waited_ms.unwrap_or(0);
        let mut details = vec![("waited_ms", waited_ms.to_string())];
        if outcome == Outcome::Fetched {
            details.push(("cache", CacheOutcome::Hit.as_str().to_string()));
        }
        strip_hop_by_hop(&mut headers);
        headers.insert(DECISION, decision_value(outcome, &details));
        headers.insert(ID, header_text(&rec.id));
        rec.status = Some(status.as_u16());
        rec.saved_bytes = Some(body.len() as u64);
        let audit = self.shared.audit.clone();
        let (mut parts, ()) = Response::new(()).into_parts();
        parts.status = status;
        parts.headers = headers;
        AuditedBody::new(full(body), rec, audit, None).respond(parts)
    }

    fn upstream_failure(&mut self, err: &hyper_util::client::legacy::Error) -> Response<ProxyBody> {
        // The proxy at its own limits (descriptors, connections being
        // opened): not the origin's fault, and soon over.
        if let Some(e @ ConnectError::ProxyBusy { .. }) = connect_error(err) {
            let a = Answer::new(Outcome::Error, e.to_string())
                .status(503)
                .retry_after(1);
            return self.answer(a, Source::Proxy);
        }
        let f = explain(err);
        let (answer, source) = if f.blocked {
            (Answer::new(Outcome::Blocked, f.why), Source::Policy)
        } else if f.client {
            let a = Answer::new(Outcome::Error, f.why).status(f.status).close();
            (a, Source::Client)
        } else if f.parent {
            let a = Answer::new(Outcome::Error, f.why.clone())
                .status(f.status)
                .detail("reason", f.why);
            (a, Source::Parent)
        } else {
            let a = Answer::new(Outcome::Error, f.why.clone())
                .status(f.status)
                .detail("reason", f.why);
            (a, Source::Upstream)
        };
        self.answer(answer, source)
    }
}

/// The answer for a request the budget will not hold.
fn budget_answer(r: &BudgetRefusal, prefix: &str) -> Answer {
    let wait = r.retry_after_secs();
    let why = match r {
        BudgetRefusal::Paused { .. } => {
            format!("{prefix}the host is paused for {wait} s after the origin asked to slow down")
        }
        BudgetRefusal::BreakerOpen { .. } => {
            format!("{prefix}the host drew too many 429s and is left alone for {wait} s")
        }
        BudgetRefusal::QueueFull { .. } => {
            format!("{prefix}too many requests are waiting for this host")
        }
    };
    Answer::new(r.outcome(), why)
        .status(r.status())
        .retry_after(wait)
}

/// What robots.txt says about this request: `None` to go on, or the refusal.
fn robots_verdict(
    shared: &Shared,
    rules: &Rules,
    host: &str,
    path: &str,
    rec: &mut AuditRecord,
) -> Option<Answer> {
    let agent = rec.agent.clone().unwrap_or_default();
    let agent = agent.as_str();
    let robots = match rules {
        Rules::Known(r) => r,
        Rules::Unavailable { reason, retry_in } => {
            let secs = retry_in.as_secs_f64().ceil().max(1.0) as u64;
            return Some(
                Answer::new(
                    Outcome::RobotsUnavailable,
                    format!("{reason}; the site's rules cannot be known, so nothing is fetched"),
                )
                .retry_after(secs),
            );
        }
    };
    shared
        .budgets
        .set_crawl_delay(host, robots.crawl_delay(agent));
    let verdict = robots.check(agent, path);
    rec.rule = Some(verdict.to_string());
    if !verdict.allowed {
        let mut r = Answer::new(Outcome::Disallowed, format!("robots.txt: {verdict}"));
        if let Some(rule) = verdict.rule {
            r = r
                .detail("rule", rule.to_string())
                .detail("line", rule.line.to_string());
        }
        if let Some(group) = verdict.group {
            r = r.detail("group", group);
        }
        return Some(r);
    }
    crate::prefs::robots_refusal(&shared.live(), robots, agent, path, rec)
}

/// The product token decisions are made for: configured, else the first
/// token of the client's User-Agent.
fn agent(shared: &Shared, headers: &HeaderMap) -> String {
    let live = shared.live();
    if !live.crawler.agent.is_empty() {
        return live.crawler.agent.clone();
    }
    let ua = headers
        .get(USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    mannerly_policy::robots::product_token(ua).to_string()
}

/// Turns the client's request into the origin's. The client's Host goes:
/// the client writes it from the URI's authority (`Host` over HTTP/1.1,
/// `:authority` alone over h2, as RFC 9113 §8.3.1 asks; a strict h2 origin
/// answers 400 to both at once).
fn upstream_request(
    parts: &Parts,
    body: ProxyBody,
    target: &Target,
    url: &str,
    via: HeaderValue,
) -> Result<Request<ProxyBody>, String> {
    let mut parts = parts.clone();
    parts.uri = url
        .parse::<Uri>()
        .map_err(|e| format!("cannot forward {url}: {e}"))?;
    Authority::try_from(target.authority())
        .map_err(|e| format!("bad host {}: {e}", target.host))?;
    parts.version = Version::HTTP_11;
    strip_hop_by_hop(&mut parts.headers);
    parts.headers.append(http::header::VIA, via);
    parts.headers.remove(HOST);
    Ok(Request::from_parts(parts, body))
}

/// The head of an origin's response as the client gets it; its body marks
/// the upstream connection idle once read to the end.
fn forwarded_head(
    mut rec: AuditRecord,
    resp: Response<Incoming>,
    outcome: Outcome,
) -> (http::response::Parts, ProxyBody, AuditRecord) {
    let waited_ms = rec.waited_ms.unwrap_or(0);
    let conn = ConnHandle::of(&resp);
    let (mut parts, body) = resp.into_parts();
    let body = boxed(ReleaseOnEnd::new(body, conn));
    strip_hop_by_hop(&mut parts.headers);
    parts.headers.insert(
        DECISION,
        decision_value(outcome, &[("waited_ms", waited_ms.to_string())]),
    );
    parts.headers.insert(ID, header_text(&rec.id));
    rec.decided(outcome, parts.status.as_u16());
    (parts, body, rec)
}

mod chained;
#[cfg(test)]
mod tests;
