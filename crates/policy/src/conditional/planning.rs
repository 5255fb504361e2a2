//! Step 2, [`plan`]: with what the store returned, whether to fetch, add our
//! validators, or answer from the store.

use std::sync::OnceLock;
use std::time::SystemTime;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{request, Method};
use http_cache_semantics::BeforeRequest;

use super::admission::CLIENT_VALIDATORS;
use super::canonical::canonical_request;
use super::memo::Plan;
use super::{is_variant, CacheEntryMeta, CacheKey, CacheParams};

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
    if &meta.key != key || !is_variant(&meta.variant, key, &meta.vary, &req.headers) {
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
    //
    // One pass over the few fields a request has, comparing standard names
    // as numbers, where a lookup of each of the seven names hashed it.
    let memo = (!params.serve_fresh
        && !req
            .headers
            .keys()
            .any(|name| CLIENT_VALIDATORS.contains(name) || PLAN_INPUTS.contains(name)))
    .then_some(&meta.revalidation);
    if let Some(plan) = memo.and_then(OnceLock::get) {
        return plan.clone();
    }
    let plan = memo
        .filter(|_| req.method == Method::GET)
        .and_then(|_| stored_validators(meta))
        .unwrap_or_else(|| library_plan(req, key, meta, params, now));
    if let Some(memo) = memo {
        let _ = memo.set(plan.clone());
    }
    plan
}

/// Request fields the library's revalidation request depends on, beyond
/// those [`plan`] matches itself and [`CLIENT_VALIDATORS`] (which never
/// reach `plan` through [`admit`](super::admit), but `plan` does not rely on it).
const PLAN_INPUTS: [HeaderName; 3] = [header::ACCEPT_RANGES, header::IF_RANGE, header::RANGE];

/// [`library_plan`]'s answer for a GET that may use the memo, found
/// without the library: an entry read from disk has no memo, and asking
/// the library costs 5% of a re-crawl. That request carries `no-cache`, so
/// the library (http-cache-semantics 3, `revalidation_request`) goes
/// straight to revalidation, and for a GET with none of the fields `plan`
/// leaves to it, sends the stored ETag as If-None-Match and the stored
/// Last-Modified as If-Modified-Since, taken from the stored response as
/// they are. The key matched, so the stored request was a GET of the same
/// URL. `None`: a case left to the library (a policy it would not store
/// by, `Vary: *`). A test holds this to the library's answer.
fn stored_validators(meta: &CacheEntryMeta) -> Option<Plan> {
    if !meta.policy.is_storable() || meta.vary.iter().any(|name| name == "*") {
        return None;
    }
    let mut validators = HeaderMap::new();
    for (from, to) in [
        (header::ETAG, header::IF_NONE_MATCH),
        (header::LAST_MODIFIED, header::IF_MODIFIED_SINCE),
    ] {
        if let Some(value) = meta.headers.get(from).filter(|v| v.to_str().is_ok()) {
            validators.insert(to, value.clone());
        }
    }
    Some(if validators.is_empty() {
        Plan::Fetch
    } else {
        Plan::Revalidate { validators }
    })
}

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

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::conditional::test_heads::{get, response, URL};
    use crate::conditional::{admit, storable, variant_key, Admission};

    #[test]
    fn the_stored_validators_are_the_librarys_plan() {
        let params = CacheParams::default();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let lm = ("last-modified", "Tue, 14 Nov 2023 22:00:00 GMT");
        let stored_heads: [&[(&str, &str)]; 6] = [
            &[("etag", "\"v1\"")],
            &[lm],
            &[("etag", "W/\"v1\""), lm, ("cache-control", "max-age=60")],
            &[("etag", "\"v1\""), ("vary", "accept-encoding"), lm],
            &[("etag", "\"v1\""), ("cache-control", "no-cache")],
            &[
                lm,
                ("expires", "Tue, 14 Nov 2023 23:00:00 GMT"),
                ("age", "abc"),
            ],
        ];
        let requests: [&[(&str, &str)]; 5] = [
            &[],
            &[("user-agent", "a"), ("accept", "text/html")],
            &[("cache-control", "max-age=0")],
            &[("pragma", "no-cache")],
            &[("accept-encoding", "gzip")],
        ];
        let mut compared = 0;
        for stored_head in stored_heads {
            let resp = response(200, stored_head);
            let storing = get(&[("accept-encoding", "gzip")]);
            let Admission::Lookup(key) = admit(&storing, URL, &params) else {
                panic!("a plain GET looks up");
            };
            let meta = storable(&storing, &key, &resp, &params, t0).expect("storable");
            for headers in requests {
                let req = get(headers);
                if meta.variant != variant_key(&key, &meta.vary, &req.headers) {
                    continue;
                }
                let ours = stored_validators(&meta).expect("left to the library");
                for later in [0, 86_400, 400 * 86_400] {
                    let now = t0 + Duration::from_secs(later);
                    let library = library_plan(&req, &key, &meta, &params, now);
                    assert_eq!(ours, library, "{stored_head:?} / {headers:?}");
                    assert_eq!(plan(&req, &key, Some(&meta), &params, now), library);
                }
                compared += 1;
            }
        }
        // Every request against each stored head, but the four that do not
        // send the Accept-Encoding the Vary-ing head was stored for.
        assert_eq!(compared, 6 * 5 - 4);
    }

    #[test]
    fn a_request_with_a_field_the_library_reads_neither_uses_nor_fills_the_memo() {
        let params = CacheParams::default();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let resp = response(200, &[("etag", "\"v1\"")]);
        let fields = [
            ("if-none-match", "\"v0\""),
            ("if-modified-since", "Tue, 14 Nov 2023 22:00:00 GMT"),
            ("if-match", "\"v1\""),
            ("if-unmodified-since", "Tue, 14 Nov 2023 22:00:00 GMT"),
            ("accept-ranges", "bytes"),
            ("if-range", "\"v1\""),
            ("range", "bytes=0-1"),
        ];
        for (name, value) in fields {
            let storing = get(&[]);
            let Admission::Lookup(key) = admit(&storing, URL, &params) else {
                panic!("a plain GET looks up");
            };
            let meta = storable(&storing, &key, &resp, &params, t0).expect("storable");
            // Among other fields, as a request has them.
            let req = get(&[("user-agent", "a"), (name, value), ("accept", "*/*")]);
            let planned = plan(&req, &key, Some(&meta), &params, t0);
            assert_eq!(
                planned,
                library_plan(&req, &key, &meta, &params, t0),
                "{name}"
            );
            assert!(meta.revalidation.get().is_none(), "{name} filled the memo");
            plan(&get(&[("user-agent", "a")]), &key, Some(&meta), &params, t0);
            assert!(meta.revalidation.get().is_some(), "{name}");
        }
    }
}
