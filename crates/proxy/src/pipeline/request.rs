//! What the steps read off the client's request: the product token
//! decisions are made for, robots.txt's verdict on the path, and the
//! origin's request made from the client's.

use http::header::{HOST, USER_AGENT};
use http::request::Parts;
use http::{HeaderMap, HeaderValue, Request, Uri, Version};
use mannerly_policy::robots_cache::Rules;
use mannerly_policy::{strip_hop_by_hop, AuditRecord, Outcome};

use crate::answer::{failure, Stop};
use crate::body::ProxyBody;
use crate::config::Config;
use crate::error::Source;
use crate::pipeline::prefs;
use crate::shared::Shared;

/// What robots.txt says about this request: `None` to go on, or the refusal.
pub(super) fn robots_verdict(
    shared: &Shared,
    live: &Config,
    rules: &Rules,
    host: &str,
    path: &str,
    rec: &mut AuditRecord,
) -> Option<Stop> {
    // Lent out of the record, not copied: the record's other fields are
    // written while the agent is read.
    let agent = rec.agent.take();
    let stop = judge(
        shared,
        live,
        rules,
        host,
        path,
        agent.as_deref().unwrap_or(""),
        rec,
    );
    rec.agent = agent;
    stop
}

fn judge(
    shared: &Shared,
    live: &Config,
    rules: &Rules,
    host: &str,
    path: &str,
    agent: &str,
    rec: &mut AuditRecord,
) -> Option<Stop> {
    let robots = match rules {
        Rules::Known(r) => r,
        Rules::Unavailable { reason, retry_in } => {
            return Some(failure::robots_unavailable(reason, *retry_in))
        }
    };
    shared
        .budgets
        .set_crawl_delay(host, robots.crawl_delay(agent));
    let verdict = robots.check(agent, path);
    rec.rule = Some(verdict.to_string());
    if !verdict.allowed {
        let mut r = Stop::new(
            Outcome::Disallowed,
            Source::Policy,
            format!("robots.txt: {verdict}"),
        );
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
    prefs::robots_refusal(live, robots, agent, path, rec)
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

/// Turns the client's request into the origin's. The client's Host goes:
/// the client writes it from the URI's authority (`Host` over HTTP/1.1,
/// `:authority` alone over h2, as RFC 9113 §8.3.1 asks; a strict h2 origin
/// answers 400 to both at once).
pub(super) fn upstream_request(
    parts: &Parts,
    body: ProxyBody,
    url: &str,
    via: HeaderValue,
) -> Result<Request<ProxyBody>, String> {
    let mut parts = parts.clone();
    // The URL is the target's root and the path: parsing it checks the
    // authority too.
    parts.uri = url
        .parse::<Uri>()
        .map_err(|e| format!("cannot forward {url}: {e}"))?;
    parts.version = Version::HTTP_11;
    strip_hop_by_hop(&mut parts.headers);
    parts.headers.append(http::header::VIA, via);
    parts.headers.remove(HOST);
    Ok(Request::from_parts(parts, body))
}
