//! What the steps read off the client's request: the product token
//! decisions are made for, robots.txt's verdict on the path, and the
//! origin's request made from the client's.

use http::header::USER_AGENT;
use http::request::Parts;
use http::uri::{Authority, PathAndQuery};
use http::{HeaderMap, HeaderValue, Request, Uri, Version};

use mannerly_policy::robots_cache::Rules;
use mannerly_policy::{set_origin_host, strip_hop_by_hop, AuditRecord};

use super::identities::Identities;
use super::prefs;
use crate::answer::{failure, Stop};
use crate::body::ProxyBody;
use crate::config::Config;
use crate::shared::Shared;
use crate::target::{Scheme, Target};

/// The origin's URI: `url` (the target's root and the request's path),
/// put together from the parts already parsed (the target's authority,
/// the request's own path) rather than by parsing `url` whole again, which
/// was 0.5% of a request. A path that is not one (`OPTIONS *`) takes the
/// parse, and its verdict.
pub(super) fn origin_uri(parts: &Parts, target: &Target, url: &str) -> Result<Uri, String> {
    let whole = || {
        url.parse::<Uri>()
            .map_err(|e| format!("cannot forward {url}: {e}"))
    };
    let path = match parts.uri.path_and_query() {
        Some(p) if p.as_str().starts_with('/') => p.clone(),
        Some(_) => return whole(),
        None => PathAndQuery::from_static("/"),
    };
    // The client's own authority when it is already the target's (the
    // usual case): a clone shares its bytes, where parsing the target's
    // text again validated and copied them.
    let authority = match parts.uri.authority() {
        Some(given) if given.as_str() == target.authority() => given.clone(),
        _ => match target.authority().parse::<Authority>() {
            Ok(parsed) => parsed,
            Err(_) => return whole(),
        },
    };
    let mut uri = http::uri::Parts::default();
    uri.scheme = Some(match target.scheme {
        crate::target::Scheme::Http => http::uri::Scheme::HTTP,
        crate::target::Scheme::Https => http::uri::Scheme::HTTPS,
    });
    uri.authority = Some(authority);
    uri.path_and_query = Some(path);
    Uri::from_parts(uri).or_else(|_| whole())
}

/// What robots.txt says about this request: `None` to go on, or the
/// refusal. With `crawler.agents`, `said` gets the token that bound it.
pub(super) fn robots_verdict(
    shared: &Shared,
    live: &Config,
    rules: &Rules,
    at: (&str, &str),
    rec: &mut AuditRecord,
    said: &mut Vec<(&'static str, String)>,
) -> Option<Stop> {
    // Lent out of the record, not copied: the record's other fields are
    // written while the agent is read.
    let agent = rec.agent.take();
    let ids = Identities::of(live, agent.as_deref().unwrap_or(""));
    let stop = judge(shared, live, rules, at, ids, rec, said);
    rec.agent = agent;
    stop
}

fn judge(
    shared: &Shared,
    live: &Config,
    rules: &Rules,
    (host, path): (&str, &str),
    ids: Identities<'_>,
    rec: &mut AuditRecord,
    said: &mut Vec<(&'static str, String)>,
) -> Option<Stop> {
    let robots = match rules {
        Rules::Known(r) => r,
        Rules::Unavailable { reason, retry_in } => {
            return Some(failure::robots_unavailable(reason, *retry_in))
        }
    };
    // Request-rate paces as Crawl-delay does; the slower of the two binds.
    let delay = robots.crawl_delay_of(ids.tokens());
    let rate = robots.request_interval(ids.tokens());
    let paced_by = rate.filter(|(i, _)| delay.is_none_or(|d| *i > d));
    let delay = paced_by.map(|(i, _)| i).or(delay);
    shared.budgets.set_crawl_delay(host, delay);
    let (token, verdict) = robots.check_each(ids.tokens(), path)?;
    rec.rule = Some(match paced_by {
        Some((_, source)) => format!("{verdict}; paced by {source}"),
        None => verdict.to_string(),
    });
    if ids.named() {
        said.push(("agent", token.to_string()));
    }
    if !verdict.allowed {
        let agent = ids.named().then_some(token);
        return Some(failure::disallowed(&verdict, agent));
    }
    prefs::robots_refusal(live, robots, ids, path, rec)
}

/// The product token decisions are made for: configured, else the
/// crawler's User-Agent's (`crawler.user_agent`), else the first token of
/// the client's User-Agent.
pub(super) fn agent(live: &Config, headers: &HeaderMap) -> String {
    if !live.crawler.agent.is_empty() {
        return live.crawler.agent.clone();
    }
    if let Some(ua) = live.crawler.ua_policy() {
        return ua.token().to_string();
    }
    let ua = headers
        .get(USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    mannerly_policy::robots::product_token(ua).to_string()
}

/// Turns the client's request into the origin's, its Host the target's
/// ([`origin_host`]).
pub(super) fn upstream_request(
    parts: &Parts,
    body: ProxyBody,
    target: &Target,
    url: &str,
    via: HeaderValue,
) -> Result<Request<ProxyBody>, String> {
    // Made afresh, not from a clone of `parts`: the client's extensions
    // (hyper's upgrade handle, the 1xx lane) are not the origin's, and
    // the client's URI is replaced anyway.
    let mut out = Request::new(body);
    *out.uri_mut() = origin_uri(parts, target, url)?;
    *out.method_mut() = parts.method.clone();
    *out.version_mut() = Version::HTTP_11;
    let headers = out.headers_mut();
    *headers = parts.headers.clone();
    strip_hop_by_hop(headers);
    headers.append(http::header::VIA, via);
    origin_host(headers, target);
    Ok(out)
}

/// The origin's Host ([`set_origin_host`]). Which protocol an https origin
/// speaks is known only once ALPN has picked, so there the pool
/// (`upstream/pool.rs`) writes Host from the URI over HTTP/1.1, and none
/// over h2 (a strict h2 origin answers 400 to both at once). An http origin
/// always gets HTTP/1.1: its Host is set here, once, from the target.
fn origin_host(headers: &mut HeaderMap, target: &Target) {
    let http = target.scheme == Scheme::Http;
    set_origin_host(headers, http.then(|| target.authority()));
}
