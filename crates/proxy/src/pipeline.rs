//! The one path every request walks (DESIGN §1), top to bottom. Each step
//! asks the policy crate for a decision and acts on it; no rule lives here.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use http::header::{HeaderValue, HOST, RETRY_AFTER, USER_AGENT};
use http::uri::{Authority, PathAndQuery};
use http::{HeaderMap, Request, Response, StatusCode, Uri, Version};
use http_body::Body as _;
use hyper::body::Incoming;
use mannerly_policy::budget::{host_key, Reaction, Refusal as BudgetRefusal};
use mannerly_policy::conditional::{self, Admission, CacheKey, CacheOutcome, Plan};
use mannerly_policy::robots_cache::Rules;
use mannerly_policy::{parse_host_ip, strip_hop_by_hop, AuditRecord, Outcome};
use mannerly_state::responses::StoredResponse;
use tokio::time::Instant;

use crate::body::{boxed, empty, full, AuditedBody, ProxyBody};
use crate::cache::Tee;
use crate::config::secs;
use crate::error::Source;
use crate::respond::{decision_value, header_text, Refusal, DECISION, ID};
use crate::robots;
use crate::server::Shared;
use crate::upstream::{connect_error, ConnectError};

/// http or https.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// Plain HTTP.
    Http,
    /// HTTP over TLS.
    Https,
}

impl Scheme {
    fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

/// Where a request goes: robots.txt scope and budget key derive from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Scheme.
    pub scheme: Scheme,
    /// Lower-case host; IPv6 literals keep their brackets.
    pub host: String,
    /// Port (explicit or the scheme's default).
    pub port: u16,
}

impl Target {
    /// The target of an absolute-form request URI; anything else is an error
    /// in plain words.
    pub fn from_absolute(uri: &Uri) -> Result<Target, String> {
        let scheme = match uri.scheme_str() {
            Some(s) if s.eq_ignore_ascii_case("http") => Scheme::Http,
            Some(s) if s.eq_ignore_ascii_case("https") => Scheme::Https,
            Some(s) => return Err(format!("scheme {s:?} is not proxied (http and https are)")),
            None => {
                return Err(format!(
                    "{uri} is not a proxy request: send absolute-form (GET http://host/path) or use CONNECT"
                ))
            }
        };
        let authority = uri.authority().ok_or("request URI has no host")?;
        if authority.as_str().contains('@') {
            return Err("user info in the request URI is not accepted".into());
        }
        let host = authority.host().to_ascii_lowercase();
        if host.is_empty() {
            return Err("request URI has an empty host".into());
        }
        Ok(Target {
            scheme,
            port: authority.port_u16().unwrap_or(scheme.default_port()),
            host,
        })
    }

    /// `host[:port]`, the port only when it is not the scheme's default.
    pub fn authority(&self) -> String {
        if self.port == self.scheme.default_port() {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The absolute URL of `path` on this target.
    pub fn url(&self, path: Option<&PathAndQuery>) -> String {
        format!(
            "{}://{}{}",
            self.scheme.as_str(),
            self.authority(),
            path.map(PathAndQuery::as_str).unwrap_or("/")
        )
    }
}

/// Carries one request through the pipeline and answers it.
pub(crate) async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
    target: Target,
    client: SocketAddr,
) -> Response<ProxyBody> {
    let url = target.url(req.uri().path_and_query());
    let mut rec = shared.record(req.method().as_str(), &url, &target.host, client);
    rec.user = crate::auth::user_of(&req);
    rec.agent = Some(agent(&shared, &req));
    let enforce = shared.cfg.policy.enforce;
    let held_since = Instant::now();
    let deadline = held_since + shared.budgets.max_hold(&target.host);

    // 0. The target must be one the proxy may reach. The connector checks
    //    every address again when it connects; checking here too means a
    //    blocked target is refused as such, before robots.txt is fetched.
    let reachable = match parse_host_ip(&target.host) {
        Some(ip) => shared
            .guard
            .check(&target.host, &[SocketAddr::new(ip, target.port)]),
        None if !shared.guard.allows_private() => {
            shared.guard.check_name(&target.host, target.port).await
        }
        None => Ok(()),
    };
    if let Err(e @ ConnectError::Blocked { .. }) = reachable {
        let r = Refusal::new(Outcome::Blocked, e.to_string());
        return shared.refuse(rec, r, Source::Policy);
    }

    // 1. robots.txt. Its own URL is always allowed and never waits for itself.
    let path = req
        .uri()
        .path_and_query()
        .map_or("/", PathAndQuery::as_str)
        .to_string();
    if req.uri().path() != "/robots.txt" {
        let ua = req.headers().get(USER_AGENT).cloned();
        let fetched = shared
            .robots
            .rules(
                &shared.client,
                &shared.budgets,
                &target,
                deadline,
                ua.as_ref(),
                |report| {
                    let r = shared.record("GET", &report.url, &target.host, client);
                    shared.audit.send(robots::fetch_record(r, report));
                },
            )
            .await;
        let refusal = match fetched {
            Ok(rules) => robots_step(&shared, &rules, &target.host, &path, &mut rec),
            Err(budget) => Some(budget_refusal(&budget, "robots.txt cannot be fetched: ")),
        };
        if let Some(refusal) = refusal {
            if enforce {
                return shared.refuse(rec, refusal, Source::Policy);
            }
            rec.would = Some(refusal.outcome);
        }
    }

    let (parts, body) = req.into_parts();
    // Which methods may be sent twice is the budget's rule (`may_retry`);
    // here only whether the body is gone once sent.
    let resendable = body.is_end_stream();

    // 3. Conditional. Looked up before the budget wait, so that a stored
    //    answer served without asking the origin (serve_fresh) does not take
    //    the host's turn.
    let mut cache = match conditional::admit(&parts, &url, shared.cache.params()) {
        Admission::Bypass(_) => CacheStep::new(None, CacheOutcome::Bypass),
        Admission::PassThrough(key) => CacheStep::new(Some(key), CacheOutcome::Bypass),
        Admission::Lookup(key) => match shared.cache.get(&key, &parts.headers).await {
            Err(e) => {
                shared.cache.failed("read", &e);
                CacheStep::new(None, CacheOutcome::Error)
            }
            Ok(found) => {
                let meta = found.as_ref().map(|f| &f.meta);
                let params = shared.cache.params();
                let plan = conditional::plan(&parts, &key, meta, params, SystemTime::now());
                let mut step = CacheStep::new(Some(key), CacheOutcome::Miss);
                step.had_entry = found.is_some();
                match plan {
                    Plan::Fetch => {}
                    Plan::Revalidate { validators } => {
                        step.validators = Some(validators);
                        step.stored = found;
                    }
                    Plan::ServeStored { status, headers } => {
                        let body = found.map(|f| f.body).unwrap_or_default();
                        rec.cache = Some(CacheOutcome::Hit.as_str());
                        return answer_from_store(&shared, rec, status, headers, body.into());
                    }
                }
                step
            }
        },
    };

    // 2., 4.-6. Budget, upstream, learn; a throttled read is sent again once
    //    its pause is over, as long as the hold allows.
    let mut body = Some(boxed(body));
    let mut attempts = 0u32;
    let mut waited = std::time::Duration::ZERO;
    loop {
        let waiting_since = Instant::now();
        let permit = if enforce {
            match shared.budgets.acquire(&target.host, deadline).await {
                Ok(p) => Some(p),
                Err(r) => {
                    waited += waiting_since.elapsed();
                    rec.waited_ms = Some(waited.as_millis() as u64);
                    return shared.refuse(rec, budget_refusal(&r, ""), Source::Policy);
                }
            }
        } else {
            None
        };
        waited += waiting_since.elapsed();
        rec.waited_ms = Some(waited.as_millis() as u64);
        let send_body = body.take().unwrap_or_else(empty);
        let upstream_req = match upstream_request(&parts, send_body, &target, &url) {
            Ok(mut r) => {
                if let Some(validators) = &cache.validators {
                    r.headers_mut().extend(validators.clone());
                }
                r
            }
            Err(why) => {
                let r = Refusal::new(Outcome::Error, why).status(400);
                return shared.refuse(rec, r, Source::Client);
            }
        };
        let first_byte = secs(shared.cfg.upstream.first_byte_timeout_secs);
        let sent = tokio::time::timeout(first_byte, shared.client.request(upstream_req)).await;
        let resp = match sent {
            Ok(Ok(resp)) => resp,
            Ok(Err(e)) => return upstream_failure(&shared, rec, &e),
            Err(_) => {
                let r = Refusal::new(
                    Outcome::Error,
                    format!("no response from the origin within {first_byte:?}"),
                )
                .status(504);
                return shared.refuse(rec, r, Source::Upstream);
            }
        };
        let retry_after = resp
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let reaction = permit.map(|p| p.respond(resp.status().as_u16(), retry_after.as_deref()));
        if let Some(r) = &reaction {
            rec.rate = Some(r.rate());
            rec.ceiling = Some(r.ceiling());
        }
        let Some(Reaction::Throttled(t)) = reaction else {
            // 6. Learn: a 304 to our validators is the stored page; any other
            //    answer may become the stored page. 7. Audit: the line is
            //    written when the body has been passed on.
            match learn(&shared, &parts, &mut cache, rec, resp) {
                Learned::Answer(answer) => return answer,
                Learned::FetchAgain(r) if resendable => {
                    rec = *r;
                    continue;
                }
                Learned::FetchAgain(r) => {
                    let why = "the origin's 304 does not match the stored page, and the request cannot be sent again";
                    let refusal = Refusal::new(Outcome::Error, why).status(502);
                    return shared.refuse(*r, refusal, Source::Upstream);
                }
            }
        };
        // The stored page is left alone: a throttle says nothing about it.
        rec.cache = Some(cache.outcome.as_str());
        shared.save_budgets.notify_one();
        rec.retry_after = t.retry_after_raw.clone();
        rec.pause_s = Some(t.pause.as_millis() as f64 / 1000.0);
        let hold_left = deadline.saturating_duration_since(Instant::now());
        let params = shared.budgets.store().params(&host_key(&target.host));
        if !(resendable && params.may_retry(&parts.method, attempts, t.pause, hold_left)) {
            // The client gets the origin's answer, Retry-After included.
            return forward_response(&shared, rec, resp, Outcome::Throttled);
        }
        attempts += 1;
        let mut line = rec.clone();
        line.id = shared.record("", "", "", client).id;
        line.outcome = Some(Outcome::Throttled);
        line.status = Some(resp.status().as_u16());
        line.reason = Some(format!(
            "origin throttled; host paused {:.1} s, request sent again after the pause (attempt {})",
            t.pause.as_secs_f64(),
            attempts + 1
        ));
        line.source = Some(Source::Upstream.as_str());
        shared.audit.send(line);
    }
}

/// What step 3 found, carried to step 6.
struct CacheStep {
    /// The request's cache key; `None` when the store is left alone.
    key: Option<CacheKey>,
    /// The stored response our validators were taken from.
    stored: Option<StoredResponse>,
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
}

enum Learned {
    Answer(Response<ProxyBody>),
    /// Our validators drew a 304 that is not for the stored page: send the
    /// request once more, without them.
    FetchAgain(Box<AuditRecord>),
}

/// Step 6 for an answer that is not a throttle.
fn learn(
    shared: &Arc<Shared>,
    parts: &http::request::Parts,
    cache: &mut CacheStep,
    mut rec: AuditRecord,
    resp: Response<Incoming>,
) -> Learned {
    let params = shared.cache.params();
    let now = SystemTime::now();
    let (head, body) = resp.into_parts();
    if head.status == StatusCode::NOT_MODIFIED && cache.validators.take().is_some() {
        let (Some(stored), Some(key)) = (cache.stored.take(), cache.key.clone()) else {
            return Learned::FetchAgain(Box::new(rec));
        };
        return match conditional::merge_not_modified(&stored.meta, parts, &head, params, now) {
            Ok(fresh) => {
                let body = Bytes::from(stored.body);
                shared.cache.write_back(fresh.meta, body.clone());
                rec.cache = Some(CacheOutcome::Revalidated.as_str());
                rec.saved_bytes = Some(body.len() as u64);
                rec.outcome = Some(Outcome::Revalidated);
                Learned::Answer(answer_from_store(
                    shared,
                    rec,
                    fresh.status,
                    fresh.headers,
                    body,
                ))
            }
            Err(_) => {
                shared.cache.remove_later(key);
                cache.had_entry = false;
                Learned::FetchAgain(Box::new(rec))
            }
        };
    }
    let resp = Response::from_parts(head, body);
    if resp.status() == StatusCode::NOT_MODIFIED {
        // The client's own validators: its 304 goes back as is.
        rec.cache = Some(cache.outcome.as_str());
        return Learned::Answer(forward_response(shared, rec, resp, Outcome::Unchanged));
    }
    let Some(key) = cache.key.clone() else {
        rec.cache = Some(cache.outcome.as_str());
        return Learned::Answer(forward_response(shared, rec, resp, Outcome::Fetched));
    };
    let (head, body) = resp.into_parts();
    let verdict = conditional::storable(parts, &key, &head, params, now);
    let resp = Response::from_parts(head, body);
    match verdict {
        Ok(meta) => Learned::Answer(forward_and_store(shared, rec, resp, meta)),
        Err(_) => {
            if cache.had_entry && conditional::invalidates_stored(resp.status()) {
                shared.cache.remove_later(key);
            }
            rec.cache = Some(cache.outcome.as_str());
            Learned::Answer(forward_response(shared, rec, resp, Outcome::Fetched))
        }
    }
}

/// The answer for a request the budget will not hold.
fn budget_refusal(r: &BudgetRefusal, prefix: &str) -> Refusal {
    let wait = r.retry_after().as_secs_f64().ceil().max(1.0) as u64;
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
    Refusal::new(r.outcome(), why)
        .status(r.status())
        .retry_after(wait)
}

/// What robots.txt says about this request: `None` to go on, or the refusal.
fn robots_step(
    shared: &Shared,
    rules: &Rules,
    host: &str,
    path: &str,
    rec: &mut AuditRecord,
) -> Option<Refusal> {
    let agent = rec.agent.clone().unwrap_or_default();
    let agent = agent.as_str();
    let robots = match rules {
        Rules::Known(r) => r,
        Rules::Unavailable { reason, retry_in } => {
            let secs = retry_in.as_secs_f64().ceil().max(1.0) as u64;
            return Some(
                Refusal::new(
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
        let mut r = Refusal::new(Outcome::Disallowed, format!("robots.txt: {verdict}"));
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
    let purposes = &shared.cfg.crawler.purposes;
    if !purposes.is_empty() {
        if let Some(refusal) = robots.signal_check(agent, path, purposes) {
            rec.rule = Some(format!(
                "Content-Signal line {}: {}",
                refusal.line, refusal.text
            ));
            return Some(
                Refusal::new(Outcome::SignalRefused, format!("robots.txt: {refusal}"))
                    .detail("purpose", refusal.purpose.as_str())
                    .detail("line", refusal.line.to_string()),
            );
        }
    }
    None
}

/// The product token decisions are made for: configured, else the first
/// token of the client's User-Agent.
fn agent(shared: &Shared, req: &Request<Incoming>) -> String {
    if !shared.cfg.crawler.agent.is_empty() {
        return shared.cfg.crawler.agent.clone();
    }
    let ua = req
        .headers()
        .get(USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    mannerly_policy::robots::product_token(ua).to_string()
}

/// Turns the client's request into the origin's: absolute URI, HTTP/1.1
/// (the client upgrades to h2 by ALPN), hop-by-hop headers gone, Host set to
/// the target.
fn upstream_request(
    parts: &http::request::Parts,
    body: ProxyBody,
    target: &Target,
    url: &str,
) -> Result<Request<ProxyBody>, String> {
    let mut parts = parts.clone();
    parts.uri = url
        .parse::<Uri>()
        .map_err(|e| format!("cannot forward {url}: {e}"))?;
    parts.version = Version::HTTP_11;
    strip_hop_by_hop(&mut parts.headers);
    parts
        .headers
        .append(http::header::VIA, crate::limits::via_value());
    let host = Authority::try_from(target.authority())
        .map_err(|e| format!("bad host {}: {e}", target.host))?;
    parts.headers.insert(
        HOST,
        HeaderValue::from_str(host.as_str()).map_err(|e| e.to_string())?,
    );
    Ok(Request::from_parts(parts, body))
}

/// Passes an origin response on, with the decision header and the audit
/// line attached to the end of its body.
fn forward_response(
    shared: &Shared,
    rec: AuditRecord,
    resp: Response<Incoming>,
    outcome: Outcome,
) -> Response<ProxyBody> {
    let (parts, body, rec) = forwarded_head(rec, resp, outcome);
    let idle = Some(secs(shared.cfg.upstream.idle_timeout_secs));
    AuditedBody::new(boxed(body), rec, shared.audit.clone(), idle).respond(parts)
}

/// Like [`forward_response`], keeping a copy of the body for the store.
/// The copy is written once the client has had the whole body, and the
/// audit line waits for that write to say whether it was `stored`.
fn forward_and_store(
    shared: &Arc<Shared>,
    rec: AuditRecord,
    resp: Response<Incoming>,
    meta: conditional::CacheEntryMeta,
) -> Response<ProxyBody> {
    let (parts, body, rec) = forwarded_head(rec, resp, Outcome::Fetched);
    let idle = Some(secs(shared.cfg.upstream.idle_timeout_secs));
    let (tee, copy) = Tee::new(boxed(body), shared.cache.params().max_body);
    AuditedBody::new(boxed(tee), rec, shared.audit.clone(), idle)
        .on_finish(shared.cache.store_when_done(meta, copy))
        .respond(parts)
}

fn forwarded_head(
    mut rec: AuditRecord,
    resp: Response<Incoming>,
    outcome: Outcome,
) -> (http::response::Parts, Incoming, AuditRecord) {
    let waited_ms = rec.waited_ms.unwrap_or(0);
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    parts.headers.insert(
        DECISION,
        decision_value(outcome, &[("waited_ms", waited_ms.to_string())]),
    );
    parts.headers.insert(ID, header_text(&rec.id));
    rec.outcome = Some(outcome);
    rec.status = Some(parts.status.as_u16());
    (parts, body, rec)
}

/// Answers with a stored page: after a 304 to our validators
/// (`revalidated`), or fresh without asking the origin (`serve_fresh`,
/// audit `cache: "hit"`).
fn answer_from_store(
    shared: &Shared,
    mut rec: AuditRecord,
    status: StatusCode,
    mut headers: HeaderMap,
    body: Bytes,
) -> Response<ProxyBody> {
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
    let (mut parts, ()) = Response::new(()).into_parts();
    parts.status = status;
    parts.headers = headers;
    AuditedBody::new(full(body), rec, shared.audit.clone(), None).respond(parts)
}

fn upstream_failure(
    shared: &Shared,
    rec: AuditRecord,
    err: &hyper_util::client::legacy::Error,
) -> Response<ProxyBody> {
    match connect_error(err) {
        Some(e @ ConnectError::Blocked { .. }) => shared.refuse(
            rec,
            Refusal::new(Outcome::Blocked, e.to_string()),
            Source::Policy,
        ),
        Some(e @ ConnectError::Timeout { .. }) => {
            let r = Refusal::new(Outcome::Error, e.to_string()).status(504);
            shared.refuse(rec, r, Source::Upstream)
        }
        Some(e) => {
            let r = Refusal::new(Outcome::Error, e.to_string()).status(502);
            shared.refuse(rec, r, Source::Upstream)
        }
        None => {
            let mut why = err.to_string();
            let mut src = std::error::Error::source(err);
            while let Some(s) = src {
                why.push_str(": ");
                why.push_str(&s.to_string());
                src = s.source();
            }
            let r = Refusal::new(Outcome::Error, format!("origin failed: {why}")).status(502);
            shared.refuse(rec, r, Source::Upstream)
        }
    }
}
