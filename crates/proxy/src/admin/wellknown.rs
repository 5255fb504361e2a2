//! What the admin listener serves without its token, for verifiers of the
//! crawler's signatures: the key directory at
//! `/.well-known/http-message-signatures-directory`, signed (Web Bot Auth
//! -01, Appendix B), and the Signature Agent Card beside it. Put behind the
//! `Signature-Agent` host by a reverse proxy (README, "Signing requests").
//! And for site operators: the page about the crawler (`/bot`) and its
//! egress ranges in the JAFAR format (`/bot/ranges.json`), linked from the
//! page and its `Link` field with `rel="client-ranges"`.

use std::sync::Arc;

use http::{header, HeaderValue, Request, StatusCode};
use hyper::body::Incoming;
use mannerly_policy::identity::{
    about_html, card_json, jafar_json, jwks_url, AboutCrawler, DIRECTORY_MEDIA_TYPE, RANGES_PATH,
    RANGES_REL,
};

use super::reply::{answer, error, Answer};
use crate::shared::Shared;

/// How long a verifier may keep the directory. Short: a key removed from
/// it keeps verifying until caches expire, and the draft gives no other
/// way to retire a key.
const DIRECTORY_MAX_AGE: &str = "max-age=300";

fn not_signing() -> Answer {
    error(
        StatusCode::NOT_FOUND,
        "this proxy does not sign requests (identity.enabled = false)",
    )
}

/// `GET /.well-known/http-message-signatures-directory`.
pub(super) async fn directory(shared: &Arc<Shared>, req: &Request<Incoming>) -> Answer {
    let Some(signer) = shared.identity.clone() else {
        return not_signing();
    };
    let authority = request_authority(req);
    let now = shared.clock.wall();
    let signed = tokio::task::spawn_blocking(move || signer.directory(&authority, now)).await;
    let signed = match signed {
        Ok(Ok(d)) => d,
        Ok(Err(e)) => return error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    };
    let mut r = answer(StatusCode::OK, DIRECTORY_MEDIA_TYPE, signed.body);
    let h = r.headers_mut();
    public(h);
    for (name, value) in [
        ("content-digest", signed.content_digest),
        ("signature-input", signed.signature_input),
        ("signature", signed.signature),
    ] {
        // Base64, integers and a thumbprint: always a valid value.
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(name, v);
        }
    }
    r
}

/// `GET /.well-known/signature-agent-card`: its rate expectations are the
/// `[budget]` in force now (reloaded by SIGHUP), not the start-up one.
pub(super) fn card(shared: &Shared) -> Answer {
    if shared.identity.is_none() {
        return not_signing();
    }
    let live = shared.live();
    let body = card_json(
        &shared.cfg.identity.signature_agent,
        &live.crawler.agent,
        &live.crawler.purposes,
        &live.budget,
    );
    let mut r = answer(StatusCode::OK, "application/json", body);
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(DIRECTORY_MAX_AGE),
    );
    r
}

/// Cached briefly, readable from any page: public keys and ranges that a
/// browser-based verifier may fetch (the directory draft, "CORS").
fn public(h: &mut http::HeaderMap) {
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(DIRECTORY_MAX_AGE),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
}

fn no_page() -> Answer {
    error(
        StatusCode::NOT_FOUND,
        "no page about the crawler: crawler.user_agent is not set",
    )
}

/// `GET /bot`: who the crawler is, what it is for, how to block it, whom
/// to contact, its keys and its ranges.
pub(super) fn about(shared: &Shared) -> Answer {
    let live = shared.live();
    let Some(ua) = live.crawler.ua_policy() else {
        return no_page();
    };
    let directory = match shared.identity.is_some() {
        true => jwks_url(&shared.cfg.identity.signature_agent).ok(),
        false => None,
    };
    let ranges = live.crawler.ranges();
    let purposes: Vec<&str> = live.crawler.purposes.iter().map(|p| p.as_str()).collect();
    let html = about_html(&AboutCrawler {
        product: ua.product(),
        token: ua.token(),
        contact: ua.contact(),
        purpose: &live.crawler.about,
        purposes,
        directory: directory.as_deref(),
        ranges: &ranges,
    });
    let mut r = answer(StatusCode::OK, "text/html; charset=utf-8", html);
    let h = r.headers_mut();
    let link = format!("<{RANGES_PATH}>; rel=\"{RANGES_REL}\"; type=\"application/json\"");
    if let Ok(v) = HeaderValue::from_str(&link) {
        h.insert(header::LINK, v);
    }
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; style-src 'unsafe-inline'"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(DIRECTORY_MAX_AGE),
    );
    r
}

/// `GET /bot/ranges.json`: the egress ranges, JAFAR
/// (draft-illyes-webbotauth-jafar-00).
pub(super) fn ranges(shared: &Shared) -> Answer {
    let live = shared.live();
    let Some(ua) = live.crawler.ua_policy() else {
        return no_page();
    };
    let created = humantime::format_rfc3339_seconds(shared.clock.wall()).to_string();
    let body = jafar_json(&live.crawler.ranges(), ua.token(), &created);
    let mut r = answer(StatusCode::OK, "application/json", body);
    public(r.headers_mut());
    r
}

/// RFC 9421 `@authority` of the request that fetched the directory: its
/// `Host` (what a reverse proxy passes on), lower case, without the https
/// default port.
fn request_authority(req: &Request<Incoming>) -> String {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| req.uri().authority().map(|a| a.as_str()))
        .unwrap_or("");
    mannerly_policy::url::strip_default_port("https", host).to_ascii_lowercase()
}
