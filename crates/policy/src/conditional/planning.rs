//! Step 2, [`plan`]: with what the store returned, whether to fetch, add our
//! validators, or answer from the store.

use std::sync::OnceLock;
use std::time::SystemTime;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{request, StatusCode};
use http_cache_semantics::BeforeRequest;

use super::admission::CLIENT_VALIDATORS;
use super::canonical::canonical_request;
use super::{variant_key, CacheEntryMeta, CacheKey, CacheParams};

/// What to do with a request the store was read for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Nothing usable is stored: forward the request as is. Audit `miss` (or
    /// `stored` if the answer is then stored).
    Fetch,
    /// Add these headers (`If-None-Match` and/or `If-Modified-Since`) to the
    /// upstream request. A 304 goes to
    /// [`merge_not_modified`](super::merge_not_modified); a 200 replaces the
    /// entry through [`storable`](super::storable).
    Revalidate {
        /// The validators to add; never empty.
        validators: HeaderMap,
    },
    /// Fresh per RFC 9111 and `serve_fresh` is on: answer with the stored body
    /// and these status and headers, without asking the origin. Audit `hit`.
    ServeStored {
        /// The stored status.
        status: StatusCode,
        /// The stored headers with `Age` brought up to date.
        headers: HeaderMap,
    },
}

/// Plans a request that [`admit`](super::admit) returned `Lookup(key)` for.
/// `stored` is the entry the store returned for `(key, req.headers)`, if any.
pub fn plan(
    req: &request::Parts,
    key: &CacheKey,
    stored: Option<&CacheEntryMeta>,
    params: &CacheParams,
    now: SystemTime,
) -> Plan {
    let Some(meta) = stored else {
        return Plan::Fetch;
    };
    if &meta.key != key || meta.variant != variant_key(key, &meta.vary, &req.headers) {
        return Plan::Fetch;
    }
    // Written before every write passed the storability rule: a cookie
    // is never replayed, so the page is fetched again (and replaced).
    if meta.headers.contains_key(header::SET_COOKIE) {
        return Plan::Fetch;
    }
    // Always revalidating, the library's answer is the same for every
    // request that gets this far without the request fields it reads: the
    // request-side no-cache makes the entry stale at any time, the URL,
    // method and Vary-named fields were matched above, and `Host` is not
    // part of the canonical request. So it is asked once per entry; a
    // revalidated page is planned again on every crawl of it.
    let memo = (!params.serve_fresh
        && !CLIENT_VALIDATORS
            .iter()
            .chain(&PLAN_INPUTS)
            .any(|name| req.headers.contains_key(name)))
    .then_some(&meta.revalidation);
    if let Some(plan) = memo.and_then(OnceLock::get) {
        return plan.clone();
    }
    let plan = library_plan(req, key, meta, params, now);
    if let Some(memo) = memo {
        let _ = memo.set(plan.clone());
    }
    plan
}

/// Request fields the library's revalidation request depends on, beyond
/// those [`plan`] matches itself and [`CLIENT_VALIDATORS`] (which never
/// reach `plan` through [`admit`](super::admit), but `plan` does not rely on it).
const PLAN_INPUTS: [HeaderName; 3] = [header::ACCEPT_RANGES, header::IF_RANGE, header::RANGE];

/// [`plan`] as the library answers it, for a stored entry that matches
/// the request's key and variant.
fn library_plan(
    req: &request::Parts,
    key: &CacheKey,
    meta: &CacheEntryMeta,
    params: &CacheParams,
    now: SystemTime,
) -> Plan {
    let Some(mut canonical) = canonical_request(req, key, &meta.vary, false) else {
        return Plan::Fetch;
    };
    if !params.serve_fresh {
        // The library only hands out validators for a response it considers
        // stale; a request-side no-cache makes every stored response so,
        // which is exactly "always revalidate".
        canonical
            .headers
            .append(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    }
    match meta.policy.before_request(&canonical, now) {
        BeforeRequest::Fresh(parts) => {
            let mut headers = meta.headers.clone();
            if let Some(age) = parts.headers.get(header::AGE) {
                headers.insert(header::AGE, age.clone());
            }
            Plan::ServeStored {
                status: meta.status,
                headers,
            }
        }
        BeforeRequest::Stale {
            request,
            matches: true,
        } => {
            let mut validators = HeaderMap::new();
            for name in [header::IF_NONE_MATCH, header::IF_MODIFIED_SINCE] {
                if let Some(value) = request.headers.get(&name) {
                    validators.insert(name, value.clone());
                }
            }
            if validators.is_empty() {
                Plan::Fetch
            } else {
                Plan::Revalidate { validators }
            }
        }
        BeforeRequest::Stale { matches: false, .. } => Plan::Fetch,
    }
}
