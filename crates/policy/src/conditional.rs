//! Conditional requests: which responses may be stored and replayed, which
//! validators to send, and how a 304 refreshes a stored response. Sans-IO: the
//! store itself lives in `mannerly-state`, the bytes in the proxy.
//!
//! Freshness, storability, validator choice and the 304 selection rules are
//! [`http_cache_semantics`]'s (RFC 7234/9111); this module adds mannerly's
//! stricter rules (never store or replay with credentials or cookies, always
//! revalidate unless `serve_fresh`) and the plumbing.
//!
//! # How the proxy uses it, for one request
//!
//! 1. [`admit`] the request. `Bypass` → forward untouched, audit `cache: "bypass"`.
//!    `PassThrough` → the client sent its own validators: forward untouched;
//!    its 304 goes back as is (outcome `unchanged`); a 200 may still be stored
//!    (step 4). `Lookup(key)` → read the store (blocking: `spawn_blocking`).
//! 2. [`plan`] with what the store returned:
//!    * `Fetch` → forward as is (a miss);
//!    * `Revalidate { validators }` → add these headers to the upstream request;
//!    * `ServeStored { .. }` → answer from the store without asking the
//!      origin (only with `serve_fresh = true`), audit `hit`.
//! 3. Upstream answered 304 to our validators → [`merge_not_modified`]: send
//!    the client the stored status + refreshed headers + stored body
//!    (`Mannerly-Decision: revalidated`), and write the refreshed meta back
//!    (off the response path) when there is one: a 304 that changed only
//!    `Date`/`Age`/`Expires` gives none. `Err(NotModifiedMismatch)` → remove the entry
//!    and fetch once more without validators.
//! 4. Upstream answered anything else → stream it to the client while
//!    buffering up to `max_body` bytes; when the body completed, if
//!    [`storable`] says `Ok(meta)`, put `(meta, body)` in the store (replacing
//!    the old variant), off the response path. If it says `Err` and an entry
//!    was stored, remove it when [`invalidates_stored`] says so.
//!
//! Store errors at any step only cost the cache: forward as for a miss and
//! audit `cache: "error"`.

use std::sync::OnceLock;
use std::time::SystemTime;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{request, response, Method, Request, StatusCode};
use http_cache_semantics::{AfterResponse, BeforeRequest, CacheOptions, CachePolicy};
use serde::{Deserialize, Serialize};

use crate::ParamError;

mod entry;
mod key;

/// The `http` crate this API speaks, re-exported so callers (the state crate,
/// tests) name the very same `HeaderMap` and `Parts` types.
pub use http;

pub use entry::CacheEntryMeta;
pub use key::{primary_key, variant_key, variant_prefix, vary_names, CacheKey, KeyError};

/// `Mannerly-Decision`-independent cache parameters (`[cache]` in the config).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheParams {
    /// Remember responses and revalidate them. Off: every request bypasses.
    pub enabled: bool,
    /// Largest body stored, in bytes (default 8 MiB); larger ones pass through.
    pub max_body: u64,
    /// Total size of the store, in bytes (default 1 GiB); least recently used
    /// entries are evicted to stay under it.
    pub max_size: u64,
    /// Answer fresh entries (RFC 9111 §4.2) without asking the origin. Off by
    /// default: a crawler wants the current page, so it always revalidates.
    pub serve_fresh: bool,
    /// Evaluate responses as a shared cache (`private` is never stored,
    /// `s-maxage` counts). Leave on: one proxy serves many clients.
    pub shared: bool,
    /// Bytes of recently revalidated entries kept decoded in memory
    /// (default 64 MiB), so that revalidating a page crawled again reads no
    /// disk; a page is held from its second revalidation on. 0: none.
    pub memory_size: u64,
    /// When the store's writes are forced to disk.
    pub sync: CacheSync,
    /// Where a page not held in memory is read from disk.
    pub reads: CacheReads,
}

/// `cache.reads`: which thread reads a stored page that is not held in
/// memory (a page's first revalidation, or any page of a re-crawl).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheReads {
    /// The thread serving the request reads it, as nginx reads files by
    /// default. The default: a read the OS answers from its page cache
    /// costs less than handing it to another thread and back (re-crawl
    /// benchmark: 72 against 109 us of CPU per request, p99 4.8 against
    /// 12.9 ms). While a read waits for the disk, the other connections of
    /// that serving thread wait too.
    #[default]
    Inline,
    /// A thread of the blocking pool reads it, and the serving thread goes
    /// on meanwhile: for a store on a slow or network disk.
    Pool,
}

/// `cache.sync`: when the store's writes are forced to disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheSync {
    /// Writes queued while the previous commit ran are committed together
    /// and forced to disk (`fsync`) before their audit lines say `stored`.
    Batch,
    /// Commits are not forced one by one; a forced commit follows within a
    /// tenth of a second. A crash (of the process or the machine) may lose
    /// the pages stored in that time, never the store's consistency; the
    /// audit line says `stored` once committed (the next request finds the
    /// page). Host records (pauses, breakers, ceilings) are forced anyway.
    /// The default: a page lost in a crash is only fetched again, and an
    /// `fsync` per commit made every new page wait for the disk's slowest
    /// moments (p99 30-160 ms against 4 ms on the benchmark's disk).
    #[default]
    None,
}

impl Default for CacheParams {
    fn default() -> Self {
        CacheParams {
            enabled: true,
            max_body: 8 * 1024 * 1024,
            max_size: 1024 * 1024 * 1024,
            serve_fresh: false,
            shared: true,
            memory_size: 64 * 1024 * 1024,
            sync: CacheSync::None,
            reads: CacheReads::Inline,
        }
    }
}

impl CacheParams {
    /// Checks the parameters, naming the key at fault.
    pub fn validate(self) -> Result<Self, ParamError> {
        if self.max_body == 0 {
            return Err(ParamError::new("cache.max_body", "must be greater than 0"));
        }
        if self.max_size < self.max_body {
            return Err(ParamError::new(
                "cache.max_size",
                format!(
                    "{} is below cache.max_body ({}): nothing could be stored",
                    self.max_size, self.max_body
                ),
            ));
        }
        Ok(self)
    }

    fn options(&self) -> CacheOptions {
        CacheOptions {
            shared: self.shared,
            ..CacheOptions::default()
        }
    }
}

/// The audit line's `cache` field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheOutcome {
    /// Looked up, nothing usable stored; the answer was not stored either.
    Miss,
    /// The origin's answer was stored (new or replacing an older one).
    Stored,
    /// Our validators drew a 304; the stored body was served.
    Revalidated,
    /// Served fresh from the store without asking the origin (`serve_fresh`).
    Hit,
    /// The store was not consulted (see [`BypassReason`]), or the client's own
    /// conditional request passed through.
    Bypass,
    /// The store failed (disk full, I/O, corrupt beyond repair); the request
    /// was served as a pass-through.
    Error,
}

impl CacheOutcome {
    /// The snake_case name used in audit lines.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheOutcome::Miss => "miss",
            CacheOutcome::Stored => "stored",
            CacheOutcome::Revalidated => "revalidated",
            CacheOutcome::Hit => "hit",
            CacheOutcome::Bypass => "bypass",
            CacheOutcome::Error => "error",
        }
    }
}

impl std::fmt::Display for CacheOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

// === admit ===

/// Why a request neither reads nor writes the store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BypassReason {
    /// `cache.enabled = false`.
    Disabled,
    /// Only GET is stored and replayed.
    Method,
    /// The request carries `Authorization`.
    Authorization,
    /// The request carries `Cookie`.
    Cookie,
    /// A `Range` or `If-Range` request: partial content is never stored.
    Range,
    /// The request says `Cache-Control: no-store`.
    NoStore,
    /// The URL cannot be keyed (not absolute http/https).
    InvalidUrl,
}

/// What to do with the store for a request, before reading it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Forward untouched; do not read or write the store. Audit `bypass`.
    Bypass(BypassReason),
    /// The client sent validators of its own: forward untouched, pass its
    /// 304 back (outcome `unchanged`, audit `bypass`). A 200 answer may still
    /// be stored under this key through [`storable`].
    PassThrough(CacheKey),
    /// Read the store under this key, then call [`plan`].
    Lookup(CacheKey),
}

/// Request fields that make a request conditional on the client's behalf.
const CLIENT_VALIDATORS: [HeaderName; 4] = [
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
    header::IF_MATCH,
    header::IF_UNMODIFIED_SINCE,
];

/// Decides whether a request may use the store at all. `absolute_url` is the
/// target in absolute form (`https://host/path?q` also for intercepted HTTPS).
pub fn admit(req: &request::Parts, absolute_url: &str, params: &CacheParams) -> Admission {
    if let Some(reason) = bypass_reason(req, params) {
        return Admission::Bypass(reason);
    }
    let key = match CacheKey::new(&req.method, absolute_url) {
        Ok(key) => key,
        Err(_) => return Admission::Bypass(BypassReason::InvalidUrl),
    };
    if CLIENT_VALIDATORS
        .iter()
        .any(|name| req.headers.contains_key(name))
    {
        return Admission::PassThrough(key);
    }
    Admission::Lookup(key)
}

fn bypass_reason(req: &request::Parts, params: &CacheParams) -> Option<BypassReason> {
    let h = &req.headers;
    if !params.enabled {
        Some(BypassReason::Disabled)
    } else if req.method != Method::GET {
        Some(BypassReason::Method)
    } else if h.contains_key(header::AUTHORIZATION) {
        Some(BypassReason::Authorization)
    } else if h.contains_key(header::COOKIE) {
        Some(BypassReason::Cookie)
    } else if h.contains_key(header::RANGE) || h.contains_key(header::IF_RANGE) {
        Some(BypassReason::Range)
    } else if has_directive(h, header::CACHE_CONTROL, "no-store") {
        Some(BypassReason::NoStore)
    } else {
        None
    }
}

// === plan ===

/// What to do with a request the store was read for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Nothing usable is stored: forward the request as is. Audit `miss` (or
    /// `stored` if the answer is then stored).
    Fetch,
    /// Add these headers (`If-None-Match` and/or `If-Modified-Since`) to the
    /// upstream request. A 304 goes to [`merge_not_modified`]; a 200 replaces
    /// the entry through [`storable`].
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

/// Plans a request that [`admit`] returned `Lookup(key)` for. `stored` is
/// the entry the store returned for `(key, req.headers)`, if any.
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
/// reach `plan` through [`admit`], but `plan` does not rely on it).
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

// === storable ===

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
    if let Some(reason) = bypass_reason(req, params) {
        return Err(NoStore::Bypass(reason));
    }
    let rh = &resp.headers;
    if rh.contains_key(header::SET_COOKIE) {
        return Err(NoStore::SetCookie);
    }
    if has_directive(rh, header::CACHE_CONTROL, "no-store") {
        return Err(NoStore::NoStoreDirective);
    }
    if params.shared && has_directive(rh, header::CACHE_CONTROL, "private") {
        return Err(NoStore::Private);
    }
    if resp.status == StatusCode::PARTIAL_CONTENT || rh.contains_key(header::CONTENT_RANGE) {
        return Err(NoStore::PartialContent);
    }
    let Some(vary) = vary_names(rh) else {
        return Err(NoStore::VaryStar);
    };
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
    let policy = CachePolicy::new_options(&canonical, &head, now, params.options());
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
    })
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

// === merge_not_modified ===

/// The stored response, refreshed by a 304 (RFC 9111 §4.3.4).
#[derive(Clone, Debug)]
pub struct Revalidated {
    /// The status to send the client: the stored one.
    pub status: StatusCode,
    /// The headers to send the client with the stored body.
    pub headers: HeaderMap,
    /// The refreshed entry to write back (same body), when that changes
    /// anything a later request uses. With `serve_fresh` on, always
    /// (freshness starts again). Off, every later request revalidates
    /// anyway, so only a header other than `Date`, `Age` and `Expires` that
    /// the 304 changed is worth a write; otherwise `None`.
    pub meta: Option<CacheEntryMeta>,
}

/// Header fields a 304 refreshes on every answer, whose stored value no later
/// revalidation uses (each 304 brings its own).
const PER_ANSWER_FIELDS: [HeaderName; 3] = [header::DATE, header::AGE, header::EXPIRES];

/// The headers of `a` and `b` are the same apart from [`PER_ANSWER_FIELDS`]
/// (lines of one field in order, fields in any order).
fn same_apart_from_per_answer(a: &HeaderMap, b: &HeaderMap) -> bool {
    fn lines(m: &HeaderMap) -> Vec<(&str, &[u8])> {
        let mut v: Vec<(&str, &[u8])> = lasting_lines(m)
            .map(|(name, value)| (name.as_str(), value.as_bytes()))
            .collect();
        // Stable: the lines of one field keep their order.
        v.sort_by_key(|(name, _)| *name);
        v
    }
    lines(a) == lines(b)
}

/// The lines of `m` but for [`PER_ANSWER_FIELDS`], in order.
fn lasting_lines(m: &HeaderMap) -> impl Iterator<Item = (&HeaderName, &HeaderValue)> {
    m.iter()
        .filter(|(name, _)| !PER_ANSWER_FIELDS.contains(name))
}

/// A 304 that does not belong to the stored response (its validator differs):
/// the stored body must not be served. Remove the entry and fetch again
/// without validators.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("304 validators do not match the stored response")]
pub struct NotModifiedMismatch;

/// Header fields a 304 may not change: they describe the stored body.
const BODY_FIELDS: [HeaderName; 4] = [
    header::CONTENT_LENGTH,
    header::CONTENT_ENCODING,
    header::TRANSFER_ENCODING,
    header::CONTENT_RANGE,
];

/// Applies an upstream 304 (answer to our [`Plan::Revalidate`] validators) to
/// the stored entry: which stored response it selects and which fields it
/// replaces are the library's (RFC 9111 §4.3.4).
pub fn merge_not_modified(
    stored: &CacheEntryMeta,
    req: &request::Parts,
    not_modified: &response::Parts,
    params: &CacheParams,
    now: SystemTime,
) -> Result<Revalidated, NotModifiedMismatch> {
    if !params.serve_fresh {
        if let Some(memo) = stored.not_modified.get() {
            let mut answer = not_modified.headers.clone();
            crate::strip_hop_by_hop(&mut answer);
            if not_modified.status == StatusCode::NOT_MODIFIED && memo.answered(&answer) {
                return Ok(Revalidated {
                    status: stored.status,
                    headers: memo.headers(&answer, &stored.headers),
                    meta: None,
                });
            }
        }
    }
    let canonical =
        canonical_request(req, &stored.key, &stored.vary, true).ok_or(NotModifiedMismatch)?;
    // A 304 need not repeat Last-Modified (RFC 9110 §15.4.5), and the library
    // then refuses to select any stored response. This 304 answers validators
    // taken from this very entry, so a missing validator means "the one you
    // sent"; a different one is a real mismatch.
    let mut answer = response_head(
        not_modified.status,
        without_hop_by_hop(&not_modified.headers),
    );
    for (name, ours) in [
        (header::ETAG, &stored.etag),
        (header::LAST_MODIFIED, &stored.last_modified),
    ] {
        match (text(&answer.headers, name.clone()), ours) {
            (Some(theirs), Some(ours)) if weak_eq(&theirs, ours) => {}
            (Some(_), _) => return Err(NotModifiedMismatch),
            (None, Some(ours)) => {
                let value = HeaderValue::from_str(ours).map_err(|_| NotModifiedMismatch)?;
                answer.headers.insert(name, value);
            }
            (None, None) => {}
        }
    }
    let library_merge = match stored.policy.after_response(&canonical, &answer, now) {
        AfterResponse::NotModified(_, parts) => parts.headers,
        AfterResponse::Modified(..) => return Err(NotModifiedMismatch),
    };
    let headers = repair_merge(&library_merge, &stored.headers, &answer.headers);
    let worth_storing =
        params.serve_fresh || !same_apart_from_per_answer(&stored.headers, &headers);
    if !worth_storing {
        if let Some(memo) = NotModifiedMemo::new(&not_modified.headers, &stored.headers, &headers) {
            let _ = stored.not_modified.set(memo);
        }
    }
    // Judging the refreshed response costs as much as the rest of the
    // merge; it is only needed when the entry is written back.
    let meta = worth_storing.then(|| {
        let head = response_head(stored.status, headers.clone());
        let policy = CachePolicy::new_options(&canonical, &head, now, params.options());
        CacheEntryMeta {
            headers: headers.clone(),
            etag: text(&headers, header::ETAG),
            last_modified: text(&headers, header::LAST_MODIFIED),
            stored_at: now,
            policy,
            revalidation: OnceLock::new(),
            not_modified: OnceLock::new(),
            ..stored.clone()
        }
    });
    Ok(Revalidated {
        status: stored.status,
        headers,
        meta,
    })
}

/// The merge of a 304 that refreshed no field but [`PER_ANSWER_FIELDS`],
/// kept in the entry: a crawl asks the same page again and again, and its
/// origin answers each time with the same 304 but for its `Date`. The
/// library's merge of such a 304 is the same each time but for those
/// fields, whose values [`repair_merge`] takes from the 304, else from the
/// stored response; so it is made once, and then only those fields are
/// filled in. A 304 that differs in any other line goes to the library.
#[derive(Clone, Debug)]
pub(crate) struct NotModifiedMemo {
    /// The 304's lines, hop-by-hop and per-answer fields left out, in order.
    answer: Vec<(HeaderName, HeaderValue)>,
    /// The merged headers, per-answer fields left out.
    merged: HeaderMap,
}

impl NotModifiedMemo {
    /// `None` when `Warning` is in play: the library may add one (113)
    /// depending on the time, and which lines [`repair_merge`] keeps then
    /// changes.
    fn new(answer: &HeaderMap, stored: &HeaderMap, merged: &HeaderMap) -> Option<Self> {
        if [answer, stored, merged]
            .iter()
            .any(|m| m.contains_key(header::WARNING))
        {
            return None;
        }
        let answer = without_hop_by_hop(answer);
        let mut kept = merged.clone();
        for name in PER_ANSWER_FIELDS {
            kept.remove(name);
        }
        Some(NotModifiedMemo {
            answer: lasting_lines(&answer)
                .map(|(n, v)| (n.clone(), v.clone()))
                .collect(),
            merged: kept,
        })
    }

    /// Whether `answer` (hop-by-hop fields removed) is the 304 this was
    /// made from, but for per-answer fields.
    fn answered(&self, answer: &HeaderMap) -> bool {
        // A Warning is one of those lines, and the memo has none.
        lasting_lines(answer).eq(self.answer.iter().map(|(n, v)| (n, v)))
    }

    /// The merge for `answer`: the per-answer fields from it, else from
    /// the stored response.
    fn headers(&self, answer: &HeaderMap, stored: &HeaderMap) -> HeaderMap {
        let mut out = self.merged.clone();
        for name in PER_ANSWER_FIELDS {
            let source = if answer.contains_key(&name) {
                answer
            } else {
                stored
            };
            for value in source.get_all(&name) {
                out.append(name.clone(), value.clone());
            }
        }
        out
    }
}

/// The library builds its merged map with `insert`, which keeps one line per
/// field name and synthesises `Date`/`Age`. Keep its choice of field names,
/// but take every line of each field from the source the library chose (the
/// 304, or the stored response), and add fields the 304 introduced, as RFC
/// 9111 §3.2 asks.
fn repair_merge(library: &HeaderMap, stored: &HeaderMap, fresh: &HeaderMap) -> HeaderMap {
    let updatable = |name: &HeaderName| fresh.contains_key(name) && !BODY_FIELDS.contains(name);
    let mut out = HeaderMap::with_capacity(library.len() + fresh.len());
    for name in library.keys() {
        let source = if updatable(name) { fresh } else { stored };
        for value in source.get_all(name) {
            out.append(name.clone(), value.clone());
        }
    }
    for name in fresh.keys() {
        if !out.contains_key(name) && updatable(name) {
            for value in fresh.get_all(name) {
                out.append(name.clone(), value.clone());
            }
        }
    }
    // The library adds a Date in a non-HTTP format and an Age for the moment
    // of the merge; a field neither source had is not the origin's.
    for name in [header::DATE, header::AGE, header::WARNING] {
        if !stored.contains_key(&name) && !fresh.contains_key(&name) {
            out.remove(name);
        }
    }
    out
}

// === helpers ===

/// The request as the library sees it: absolute normalised URI (so origin-form
/// and absolute-form requests, and entries read back after a restart, compare
/// equal), no `Host` (the URI has it; HTTP/2 has none), no hop-by-hop fields.
/// `Vary`-named fields are spelled as [`variant_key`] reads them, so the
/// library's exact comparison agrees with the store's selection. With `trim`,
/// only the fields a stored policy needs are kept: the `Vary`-named ones and
/// the request's cache directives (nothing else of a client's request is
/// written to disk).
fn canonical_request(
    req: &request::Parts,
    key: &CacheKey,
    vary: &[String],
    trim: bool,
) -> Option<request::Parts> {
    let uri = key.uri()?;
    let (mut parts, ()) = Request::builder()
        .method(req.method.clone())
        .uri(uri)
        .body(())
        .ok()?
        .into_parts();
    let mut headers = without_hop_by_hop(&req.headers);
    headers.remove(header::HOST);
    if trim {
        headers = headers
            .iter()
            .filter(|(name, _)| {
                *name == header::CACHE_CONTROL
                    || *name == header::PRAGMA
                    || vary.iter().any(|k| k == name.as_str())
            })
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect();
    }
    for name in vary {
        let Ok(name) = HeaderName::from_bytes(name.as_bytes()) else {
            continue;
        };
        let joined: Vec<&[u8]> = headers
            .get_all(&name)
            .iter()
            .flat_map(|v| v.as_bytes().split(|b| *b == b','))
            .map(<[u8]>::trim_ascii)
            .collect();
        if joined.is_empty() {
            continue;
        }
        let value = HeaderValue::from_bytes(&joined.join(&b","[..])).ok()?;
        headers.insert(name, value);
    }
    parts.headers = headers;
    Some(parts)
}

fn response_head(status: StatusCode, headers: HeaderMap) -> response::Parts {
    let (mut parts, ()) = http::Response::new(()).into_parts();
    parts.status = status;
    parts.headers = headers;
    parts
}

/// Connection-scoped fields never belong in a stored response or a replay.
///
/// The copy owns its values: a value hyper parsed is a slice of the
/// connection's read buffer, and a stored entry kept in memory would keep
/// that whole buffer alive (heaptrack: 64 MiB of resident entries held
/// over 500 MB of read buffers).
fn without_hop_by_hop(headers: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let mut owned = HeaderValue::from_bytes(value.as_bytes()).unwrap_or_else(|_| value.clone());
        owned.set_sensitive(value.is_sensitive());
        out.append(name.clone(), owned);
    }
    crate::strip_hop_by_hop(&mut out);
    out
}

fn has_directive(headers: &HeaderMap, name: HeaderName, directive: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|d| d.split('=').next().unwrap_or("").trim())
        .any(|d| d.eq_ignore_ascii_case(directive))
}

fn text(headers: &HeaderMap, name: HeaderName) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

fn weak_eq(a: &str, b: &str) -> bool {
    a.trim().trim_start_matches("W/") == b.trim().trim_start_matches("W/")
}
