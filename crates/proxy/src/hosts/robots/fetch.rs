//! One fetch of a site file: each hop a request of its own (signed,
//! conditional on the copy held, paced through [`Pacing`]), redirects
//! followed, a 2xx body read up to 500 KiB, a 304 to our validators the
//! copy kept.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http::header::{HeaderValue, IF_MODIFIED_SINCE, IF_NONE_MATCH, LOCATION, USER_AGENT};
use http::{Method, Request, Uri};
use http_body_util::BodyExt;
use mannerly_policy::budget::Refusal;
use mannerly_policy::identity::KeyId;
use mannerly_policy::parent::ParentVerdict;
use mannerly_policy::robots::MAX_ROBOTS_BYTES;
use mannerly_policy::robots_cache::{FetchResult, Validators};
use mannerly_policy::Outcome;
use tokio::time::Instant;

use crate::answer::failure;
use crate::answer::Stop;
use crate::body::{empty, ProxyBody};
use crate::clock::Clock;
use crate::error::Source;
use crate::hosts::budget::{Budgets, Permit};
use crate::identity::Signer;
use crate::upstream::conns::{ConnHandle, ReleaseOnEnd};
use crate::upstream::UpstreamClient;

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

/// The budget turns of one robots.txt fetch: the permit of the request in
/// flight, and a refusal that ended the fetch.
pub(crate) struct Pacing<'a> {
    pub(super) budgets: &'a Arc<Budgets>,
    pub(super) deadline: Instant,
    pub(super) permit: Option<Permit>,
    pub(super) refused: Option<Refusal>,
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
    validators: Option<&Validators>,
) -> FetchReport {
    let mut keyid = None;
    let hops = Hops {
        max_redirects,
        identity,
        pacing,
        validators,
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
    /// Of the copy held: sent with every hop, so that the final one can
    /// answer 304 (a redirect ignores them).
    validators: Option<&'a Validators>,
}

async fn fetch_hops(
    client: &UpstreamClient,
    url: &str,
    user_agent: Option<&HeaderValue>,
    mut how: Hops<'_, '_>,
    keyid: &mut Option<KeyId>,
) -> FetchReport {
    let (max_redirects, identity, validators) = (how.max_redirects, how.identity, how.validators);
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
        let ask = Ask {
            user_agent,
            identity,
            validators,
        };
        match fetch_hop(client, url, &uri, ask, keyid).await {
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

/// What every request of a fetch carries.
#[derive(Clone, Copy)]
struct Ask<'a> {
    user_agent: Option<&'a HeaderValue>,
    identity: Option<(&'a Signer, &'a Clock)>,
    validators: Option<&'a Validators>,
}

impl Ask<'_> {
    /// The request for `uri`: the crawler's User-Agent, the copy's
    /// validators, signed as the crawler's (robots.txt fetches are its
    /// requests too: signed, each hop).
    fn request(&self, uri: &Uri, keyid: &mut Option<KeyId>) -> Result<Request<ProxyBody>, String> {
        let mut req = Request::builder().method(Method::GET).uri(uri.clone());
        if let Some(ua) = self.user_agent {
            req = req.header(USER_AGENT, ua.clone());
        }
        for (name, value) in self.validators.map(conditional_fields).unwrap_or_default() {
            req = req.header(name, value);
        }
        let mut req = req.body(empty()).map_err(|e| e.to_string())?;
        if let (Some((signer, clock)), Some(authority)) = (self.identity, uri.authority()) {
            let authority = normalized_authority(uri.scheme_str(), authority);
            *keyid = signer.sign_headers(req.headers_mut(), &authority, clock.wall());
        }
        Ok(req)
    }
}

/// One request of a fetch: `uri` asked for, signed as the crawler's.
async fn fetch_hop(
    client: &UpstreamClient,
    url: &str,
    uri: &Uri,
    ask: Ask<'_>,
    keyid: &mut Option<KeyId>,
) -> Hop {
    let req = match ask.request(uri, keyid) {
        Ok(r) => r,
        Err(e) => return Hop::Done(Box::new(report(url, None, FetchResult::Failed(e)))),
    };
    let conditional = ask.validators.is_some_and(|v| !v.is_empty());
    let resp = match client.request(req).await {
        Ok(r) => r,
        Err(e) => {
            let stop = failure::upstream(&e);
            let mut r = report(url, None, FetchResult::Failed(stop.reason().to_string()));
            // Any other failure is the site's rules being unknown.
            let own = stop.outcome() == Outcome::Blocked || stop.source() == Source::Parent;
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
    if status == 304 && conditional {
        drain_small(resp).await;
        return Hop::Done(Box::new(report(url, Some(304), FetchResult::NotModified)));
    }
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

/// `If-None-Match` / `If-Modified-Since` from a copy's validators; a value
/// that is no header value (it came from a header, so only a stored copy
/// gone wrong) is left out.
fn conditional_fields(v: &Validators) -> Vec<(http::HeaderName, HeaderValue)> {
    [
        (IF_NONE_MATCH, v.etag.as_deref()),
        (IF_MODIFIED_SINCE, v.last_modified.as_deref()),
    ]
    .into_iter()
    .filter_map(|(name, value)| Some((name, HeaderValue::from_str(value?).ok()?)))
    .collect()
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
    mannerly_policy::url::strip_default_port(scheme.unwrap_or(""), a.as_str()).to_ascii_lowercase()
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

/// Where a redirect of `base` points (RFC 9110 §10.2.2: `Location` is a
/// reference resolved against the request's URL).
pub(super) fn resolve_location(base: &Uri, location: &str) -> Option<String> {
    mannerly_policy::url::join_target(&base.to_string(), location)
}
