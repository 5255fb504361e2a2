//! Step 3, [`merge_not_modified`]: a 304 to our validators refreshes the
//! stored response, which the client is then given.

use std::sync::OnceLock;
use std::time::SystemTime;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{request, response, StatusCode};
use http_cache_semantics::AfterResponse;

use super::canonical::{
    canonical_request, for_library, policy_for, response_head, without_hop_by_hop,
};
use super::fields::text;
use super::storage::keepable;
use super::{CacheEntryMeta, CacheParams, NoStore};

/// The stored response, refreshed by a 304 (RFC 9111 §4.3.4).
#[derive(Clone, Debug)]
pub struct Revalidated {
    /// The status to send the client: the stored one.
    pub status: StatusCode,
    /// The headers to send the client with the stored body.
    pub headers: HeaderMap,
    /// What becomes of the stored entry.
    pub write: WriteBack,
}

/// What a 304 does to the stored entry. The refreshed response passes the
/// same storability rule as a first store ([`storable`](super::storable)):
/// a `Set-Cookie` the 304 carried goes to the client that asked and is
/// never written, and a 304 that makes the response one we may not keep
/// (`no-store`, `private`, `Vary: *`, a changed `Vary`) removes it.
#[derive(Clone, Debug)]
pub enum WriteBack {
    /// Nothing a later request uses changed: nothing to write. With
    /// `serve_fresh` off every later request revalidates anyway, so a 304
    /// that changed only `Date`, `Age` and `Expires` is this.
    Unchanged,
    /// Write this refreshed entry (same body) over the stored one. With
    /// `serve_fresh` on, always (freshness starts again).
    Replace(Box<CacheEntryMeta>),
    /// The refreshed response may not be kept: remove the stored entry.
    Remove(NoStore),
}

impl WriteBack {
    /// The entry to write, if any.
    pub fn entry(&self) -> Option<&CacheEntryMeta> {
        match self {
            WriteBack::Replace(meta) => Some(meta),
            _ => None,
        }
    }
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
/// `Content-MD5` (RFC 1864, obsolete but still sent) is a digest of the
/// stored body: a 304's would describe another body.
const BODY_FIELDS: [HeaderName; 5] = [
    header::CONTENT_LENGTH,
    header::CONTENT_ENCODING,
    header::TRANSFER_ENCODING,
    header::CONTENT_RANGE,
    HeaderName::from_static("content-md5"),
];

/// Applies an upstream 304 (answer to our
/// [`Plan::Revalidate`](super::Plan::Revalidate) validators) to the stored
/// entry: which stored response it selects and which fields it replaces are
/// the library's (RFC 9111 §4.3.4).
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
                    write: WriteBack::Unchanged,
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
    let seen = for_library(&answer.headers).map(|h| response_head(answer.status, h));
    let library_merge =
        match stored
            .policy
            .after_response(&canonical, seen.as_ref().unwrap_or(&answer), now)
        {
            AfterResponse::NotModified(_, parts) => parts.headers,
            AfterResponse::Modified(..) => return Err(NotModifiedMismatch),
        };
    // What is kept has no cookie (an entry written before this rule may
    // have one); the client that asked gets the 304's own.
    let mut kept = repair_merge(&library_merge, &stored.headers, &answer.headers);
    kept.remove(header::SET_COOKIE);
    let worth_storing = params.serve_fresh || !same_apart_from_per_answer(&stored.headers, &kept);
    // Judging the refreshed response costs as much as the rest of the
    // merge; it is only needed when the entry is written back, and only
    // then are the client's and the written headers copies of each other.
    let write = if worth_storing {
        refreshed_entry(stored, req, &canonical, kept.clone(), params, now)
    } else {
        WriteBack::Unchanged
    };
    let mut headers = kept;
    for cookie in answer.headers.get_all(header::SET_COOKIE) {
        headers.append(header::SET_COOKIE, cookie.clone());
    }
    if !worth_storing {
        if let Some(memo) = NotModifiedMemo::new(&not_modified.headers, &stored.headers, &headers) {
            let _ = stored.not_modified.set(memo);
        }
    }
    Ok(Revalidated {
        status: stored.status,
        headers,
        write,
    })
}

/// The stored entry with the refreshed headers, if it may still be kept.
fn refreshed_entry(
    stored: &CacheEntryMeta,
    req: &request::Parts,
    canonical: &request::Parts,
    headers: HeaderMap,
    params: &CacheParams,
    now: SystemTime,
) -> WriteBack {
    match keepable(req, stored.status, &headers, params) {
        Ok(vary) if vary == stored.vary => {}
        Ok(_) => return WriteBack::Remove(NoStore::VaryChanged),
        Err(why) => return WriteBack::Remove(why),
    }
    let head = response_head(stored.status, headers);
    let policy = policy_for(canonical, &head, now, params.options());
    if !policy.is_storable() {
        return WriteBack::Remove(NoStore::NotStorable);
    }
    WriteBack::Replace(Box::new(CacheEntryMeta {
        etag: text(&head.headers, header::ETAG),
        last_modified: text(&head.headers, header::LAST_MODIFIED),
        headers: head.headers,
        stored_at: now,
        policy,
        revalidation: OnceLock::new(),
        not_modified: OnceLock::new(),
        ..stored.clone()
    }))
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

fn weak_eq(a: &str, b: &str) -> bool {
    a.trim().trim_start_matches("W/") == b.trim().trim_start_matches("W/")
}
