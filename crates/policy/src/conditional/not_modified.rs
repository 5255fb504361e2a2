//! Step 3, [`merge_not_modified`]: a 304 to our validators refreshes the
//! stored response, which the client is then given.

use std::borrow::Cow;
use std::sync::OnceLock;
use std::time::SystemTime;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{request, response, StatusCode};
use http_cache_semantics::AfterResponse;

use super::canonical::{
    canonical_request, for_library, policy_for, response_head, without_hop_by_hop,
};
use super::fields::text;
use super::memo::{lasting_lines, NotModifiedMemo};
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

/// The headers of `a` and `b` are the same apart from [`PER_ANSWER_FIELDS`](super::memo::PER_ANSWER_FIELDS)
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
    if !params.serve_fresh && not_modified.status == StatusCode::NOT_MODIFIED {
        // The 304 is read past its hop-by-hop fields where it is; a
        // stripped copy is made only for a first merge.
        let answer = &not_modified.headers;
        let doomed = crate::headers::hop_by_hop_names(answer);
        if let Some(memo) = stored.not_modified.get() {
            if memo.answered(answer, &doomed) {
                return Ok(Revalidated {
                    status: stored.status,
                    headers: memo.headers(answer, &doomed, &stored.headers),
                    write: WriteBack::Unchanged,
                });
            }
        }
        let answer = if doomed.is_empty() {
            Cow::Borrowed(answer)
        } else {
            let mut answer = answer.clone();
            for name in &doomed {
                answer.remove(name);
            }
            Cow::Owned(answer)
        };
        if let Some(echo) = NotModifiedMemo::echoing(&answer, &stored.headers) {
            let headers = echo.headers(&answer, &[], &stored.headers);
            let _ = stored.not_modified.set(echo);
            return Ok(Revalidated {
                status: stored.status,
                headers,
                write: WriteBack::Unchanged,
            });
        }
    }
    by_library(stored, req, not_modified, params, now)
}

/// [`merge_not_modified`] by the library's merge, which any 304 may take.
fn by_library(
    stored: &CacheEntryMeta,
    req: &request::Parts,
    not_modified: &response::Parts,
    params: &CacheParams,
    now: SystemTime,
) -> Result<Revalidated, NotModifiedMismatch> {
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
        body_meta: OnceLock::new(),
        ..stored.clone()
    }))
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

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::conditional::test_heads::{get, head, response, URL};
    use crate::conditional::{storable, CacheKey};

    fn t0() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
    }

    const LM: (&str, &str) = ("last-modified", "Tue, 14 Nov 2023 22:00:00 GMT");
    const DATE: (&str, &str) = ("date", "Tue, 14 Nov 2023 22:13:20 GMT");

    /// Stored responses: validators of each kind, per-answer fields or
    /// none, repeated lines, a Vary, body fields.
    fn stored_heads() -> Vec<Vec<(&'static str, &'static str)>> {
        vec![
            vec![("etag", "\"v1\""), ("content-length", "5")],
            vec![LM, ("server", "nginx")],
            vec![
                ("etag", "W/\"v1\""),
                LM,
                DATE,
                ("content-type", "text/html"),
            ],
            vec![
                ("etag", "\"v1\""),
                LM,
                DATE,
                ("expires", "Tue, 14 Nov 2023 23:13:20 GMT"),
                ("cache-control", "max-age=3600"),
                ("link", "</a.css>; rel=preload"),
                ("link", "</b.js>; rel=preload"),
                ("age", "30"),
            ],
            vec![
                ("etag", "\"v1\""),
                ("vary", "accept-encoding"),
                ("content-encoding", "gzip"),
                ("cache-control", "Max-Age=60, Public"),
            ],
        ]
    }

    /// 304s: echoes of some stored lines with new per-answer fields, and
    /// ones that change something, which the echo must leave to the library.
    fn answers() -> Vec<Vec<(&'static str, &'static str)>> {
        vec![
            vec![],
            vec![("etag", "\"v1\"")],
            vec![
                ("etag", "W/\"v1\""),
                ("date", "Wed, 15 Nov 2023 08:00:00 GMT"),
            ],
            vec![LM, ("age", "5"), ("connection", "keep-alive")],
            vec![
                ("server", "nginx"),
                ("expires", "Fri, 17 Nov 2023 08:00:00 GMT"),
                ("keep-alive", "timeout=5"),
            ],
            vec![
                ("link", "</a.css>; rel=preload"),
                ("link", "</b.js>; rel=preload"),
            ],
            vec![("link", "</b.js>; rel=preload")],
            vec![("etag", "\"v2\"")],
            vec![("cache-control", "max-age=60")],
            vec![("x-new", "1")],
            vec![("set-cookie", "a=1")],
            vec![("warning", "110 - \"stale\"")],
            vec![("content-length", "7")],
        ]
    }

    #[test]
    fn an_echoed_304_merges_as_the_librarys_merge_would() {
        let params = CacheParams::default();
        let key = CacheKey::new(&http::Method::GET, URL).unwrap();
        let req = get(&[("accept-encoding", "gzip")]);
        let mut echoed = 0;
        for stored_head in stored_heads() {
            let stored = storable(&req, &key, &response(200, &stored_head), &params, t0())
                .expect("storable");
            for answer_head in answers() {
                let nm = response(304, &answer_head);
                let mut answer = nm.headers.clone();
                crate::strip_hop_by_hop(&mut answer);
                let Some(memo) = NotModifiedMemo::echoing(&answer, &stored.headers) else {
                    continue;
                };
                echoed += 1;
                // A day on, and a year on, where the library adds a Warning.
                for later in [86_400, 400 * 86_400] {
                    let now = t0() + Duration::from_secs(later);
                    let library = by_library(&stored, &req, &nm, &params, now)
                        .unwrap_or_else(|e| panic!("{stored_head:?} / {answer_head:?}: {e}"));
                    assert!(
                        matches!(library.write, WriteBack::Unchanged),
                        "{stored_head:?} / {answer_head:?}"
                    );
                    assert_eq!(library.status, stored.status);
                    assert_eq!(
                        memo.headers(&answer, &[], &stored.headers),
                        library.headers,
                        "{stored_head:?} / {answer_head:?}"
                    );
                    let merged = merge_not_modified(&stored, &req, &nm, &params, now).unwrap();
                    assert_eq!(merged.headers, library.headers);
                }
            }
        }
        // Counted by hand: the empty 304 echoes all 5 stored heads, the
        // strong ETag 3, the weak ETag 1, Last-Modified 3, Server 1, both
        // Link lines 1, one of two Link lines none; the last 6 change a
        // line and echo nothing.
        assert_eq!(echoed, 14, "echoed pairs");
    }

    #[test]
    fn a_304_that_adds_or_changes_a_line_is_left_to_the_library() {
        let stored = head(&[("etag", "\"v1\""), LM, ("server", "nginx")]);
        for changed in [
            &[("etag", "\"v2\"")][..],
            &[("server", "other")],
            &[("x-new", "1")],
            &[("set-cookie", "a=1")],
            &[("warning", "110 - \"stale\"")],
            &[("etag", "\"v1\""), ("etag", "\"v1\"")],
        ] {
            assert!(
                NotModifiedMemo::echoing(&head(changed), &stored).is_none(),
                "{changed:?}"
            );
        }
        for kept_by_library_otherwise in ["proxy-authenticate", "warning", "set-cookie"] {
            let mut with = stored.clone();
            with.append(
                HeaderName::from_static(kept_by_library_otherwise),
                HeaderValue::from_static("x"),
            );
            assert!(NotModifiedMemo::echoing(&head(&[]), &with).is_none());
        }
        assert!(NotModifiedMemo::echoing(&head(&[("server", "nginx")]), &stored).is_some());
    }
}
