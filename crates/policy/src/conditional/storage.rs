//! Step 4, [`storable`]: whether the origin's answer may be stored, and
//! whether one we may not keep removes what was stored.

use std::sync::OnceLock;
use std::time::SystemTime;

use http::header::{self, HeaderMap};
use http::{request, response, StatusCode};
use serde::Serialize;

use super::admission::bypass_reason;
use super::canonical::{canonical_request, policy_for, response_head, without_hop_by_hop};
use super::entry;
use super::fields::{has_directive, text};
use super::{variant_key, vary_names, BypassReason, CacheEntryMeta, CacheKey, CacheParams};

/// Why a response is not stored. Each is also a reason never to replay.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(rename_all = "snake_case")]
pub enum NoStore {
    /// The request bypasses the store (see [`BypassReason`]).
    #[error("request bypasses the store: {0:?}")]
    Bypass(BypassReason),
    /// The response sets a cookie.
    #[error("response has Set-Cookie")]
    SetCookie,
    /// `Cache-Control: no-store`.
    #[error("response says no-store")]
    NoStoreDirective,
    /// `Cache-Control: private` and the store is shared.
    #[error("response is private and the store is shared")]
    Private,
    /// 206 Partial Content.
    #[error("partial content")]
    PartialContent,
    /// `Vary: *` (or a `Vary` that cannot be read).
    #[error("Vary: *")]
    VaryStar,
    /// A 304 changed the `Vary` the stored entry is selected by: the entry
    /// no longer says which requests it answers.
    #[error("a 304 changed Vary")]
    VaryChanged,
    /// `Content-Length` above `cache.max_body`.
    #[error("body of {length} bytes is above cache.max_body")]
    TooLarge {
        /// The declared length.
        length: u64,
    },
    /// Neither `ETag` nor `Last-Modified`: nothing to revalidate with, and
    /// `serve_fresh` is off, so storing it would be useless.
    #[error("no validator to revalidate with")]
    NoValidator,
    /// RFC 9111 does not allow storing it (status, method, directives).
    #[error("not storable per RFC 9111")]
    NotStorable,
}

/// Decides whether the origin's answer to `req` may be stored under `key`,
/// and if so builds the entry's metadata (the body is the store's business).
///
/// Call it with the response head as received from upstream. The body must
/// then be stored exactly as received, only once it has arrived completely,
/// and only if it is at most `params.max_body` bytes.
pub fn storable(
    req: &request::Parts,
    key: &CacheKey,
    resp: &response::Parts,
    params: &CacheParams,
    now: SystemTime,
) -> Result<CacheEntryMeta, NoStore> {
    let rh = &resp.headers;
    let vary = keepable(req, resp.status, rh, params)?;
    // Most pages without validators stop here, before the copy below.
    if !params.serve_fresh
        && !rh.contains_key(header::ETAG)
        && !rh.contains_key(header::LAST_MODIFIED)
    {
        return Err(NoStore::NoValidator);
    }
    let headers = without_hop_by_hop(rh);
    let etag = text(&headers, header::ETAG);
    let last_modified = text(&headers, header::LAST_MODIFIED);
    if etag.is_none() && last_modified.is_none() && !params.serve_fresh {
        return Err(NoStore::NoValidator);
    }
    if let Some(length) = entry::declared_length(&headers) {
        if length > params.max_body {
            return Err(NoStore::TooLarge { length });
        }
    }
    let canonical = canonical_request(req, key, &vary, true)
        .ok_or(NoStore::Bypass(BypassReason::InvalidUrl))?;
    let head = response_head(resp.status, headers);
    let policy = policy_for(&canonical, &head, now, params.options());
    if !policy.is_storable() {
        return Err(NoStore::NotStorable);
    }
    Ok(CacheEntryMeta {
        key: key.clone(),
        variant: variant_key(key, &vary, &req.headers),
        vary,
        status: resp.status,
        headers: head.headers,
        etag,
        last_modified,
        stored_at: now,
        policy,
        revalidation: OnceLock::new(),
        not_modified: OnceLock::new(),
        body_meta: OnceLock::new(),
    })
}

/// The one storability rule every write of an entry passes, a first store
/// ([`storable`]) or a refresh by a 304
/// ([`merge_not_modified`](super::merge_not_modified)): a request with
/// credentials or cookies, a response that sets a cookie, says `no-store`,
/// is `private` to a shared store, is partial, or varies on `*`, is never
/// written. Gives the `Vary` names the entry is selected by.
pub(super) fn keepable(
    req: &request::Parts,
    status: StatusCode,
    rh: &HeaderMap,
    params: &CacheParams,
) -> Result<Vec<String>, NoStore> {
    if let Some(reason) = bypass_reason(req, params) {
        return Err(NoStore::Bypass(reason));
    }
    if rh.contains_key(header::SET_COOKIE) {
        return Err(NoStore::SetCookie);
    }
    if has_directive(rh, header::CACHE_CONTROL, "no-store") {
        return Err(NoStore::NoStoreDirective);
    }
    if params.shared && has_directive(rh, header::CACHE_CONTROL, "private") {
        return Err(NoStore::Private);
    }
    if status == StatusCode::PARTIAL_CONTENT || rh.contains_key(header::CONTENT_RANGE) {
        return Err(NoStore::PartialContent);
    }
    vary_names(rh).ok_or(NoStore::VaryStar)
}

/// Whether an upstream answer that [`storable`] refused should also remove
/// what was stored for the request: the page changed into something we may not
/// keep. Server errors and 304s leave the entry alone; a transient 503 must
/// not wipe the store.
pub fn invalidates_stored(status: StatusCode) -> bool {
    !(status.is_server_error() || status == StatusCode::NOT_MODIFIED)
}

/// Whether a response is the target's own page, and so may be stored (or
/// remove what is stored) as the URL's: behind a proxy provider that
/// carries the target's status in a header (`upstream.status_header`), a
/// provider's 200 around a target's error is not.
pub fn is_targets_page(target_status: Option<u16>, status: StatusCode) -> bool {
    target_status.is_none_or(|s| s == status.as_u16())
}
