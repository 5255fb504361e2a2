//! What an entry keeps of the library's answers, in memory only: the
//! revalidation [`Plan`] and the [`NotModifiedMemo`] of a 304 that changed
//! only per-answer fields. Apart from the entry, the plan and the merge
//! that make them: the entry holds them, and they read the entry.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::StatusCode;

use super::canonical::{owned, without_hop_by_hop};

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

/// Header fields a 304 refreshes on every answer, whose stored value no later
/// revalidation uses (each 304 brings its own).
pub(super) const PER_ANSWER_FIELDS: [HeaderName; 3] = [header::DATE, header::AGE, header::EXPIRES];

/// The lines of `m` but for [`PER_ANSWER_FIELDS`], in order.
pub(super) fn lasting_lines(m: &HeaderMap) -> impl Iterator<Item = (&HeaderName, &HeaderValue)> {
    m.iter()
        .filter(|(name, _)| !PER_ANSWER_FIELDS.contains(name))
}

/// The merge of a 304 that refreshed no field but [`PER_ANSWER_FIELDS`],
/// kept in the entry: a crawl asks the same page again and again, and its
/// origin answers each time with the same 304 but for its `Date`. The
/// library's merge of such a 304 is the same each time but for those
/// fields, whose values `repair_merge` (not_modified.rs) takes from the 304, else from the
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
    /// depending on the time, and which lines `repair_merge` (not_modified.rs) keeps then
    /// changes.
    pub(super) fn new(answer: &HeaderMap, stored: &HeaderMap, merged: &HeaderMap) -> Option<Self> {
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

    /// The memo the library's merge of `answer` (hop-by-hop fields
    /// removed) would leave, when `answer` only repeats what is stored:
    /// each of its lines but [`PER_ANSWER_FIELDS`] is a line the stored
    /// response has, field by field in the same order. An entry read from
    /// disk has no memo, and its first merge by the library is a tenth of
    /// a re-crawl's CPU, for a result known beforehand in this case:
    /// - the 304's validators are the stored ones, so it selects the
    ///   stored response;
    /// - the library keeps the stored field names (it drops its own
    ///   hop-by-hop list, which a stored response has none of here, and
    ///   adds Date and Age), and `repair_merge` (not_modified.rs) fills each from the 304
    ///   where it has the field, lines that are the stored ones but for
    ///   per-answer fields;
    /// - no cookie is stored, and no Warning is in play.
    ///
    /// So the merge is the stored response with the 304's per-answer
    /// fields, nothing to write. `None`: the library's merge decides. A
    /// test holds this to the library's merge.
    pub(super) fn echoing(answer: &HeaderMap, stored: &HeaderMap) -> Option<Self> {
        let dropped_by_library = |name: &HeaderName| {
            *name == header::WARNING
                || *name == header::SET_COOKIE
                || LIBRARY_HOP_BY_HOP.contains(name)
        };
        if answer.contains_key(header::WARNING) || stored.keys().any(dropped_by_library) {
            return None;
        }
        let repeated = answer
            .keys()
            .filter(|name| !PER_ANSWER_FIELDS.contains(name))
            .all(|name| answer.get_all(name).iter().eq(stored.get_all(name)));
        if !repeated {
            return None;
        }
        let mut merged = stored.clone();
        for name in PER_ANSWER_FIELDS {
            merged.remove(name);
        }
        Some(NotModifiedMemo {
            answer: lasting_lines(answer)
                .map(|(n, v)| (n.clone(), owned(v)))
                .collect(),
            merged,
        })
    }

    /// Whether `answer`, read past its hop-by-hop fields `doomed`, is the
    /// 304 this was made from, but for per-answer fields.
    pub(super) fn answered(&self, answer: &HeaderMap, doomed: &[HeaderName]) -> bool {
        // A Warning is one of those lines, and the memo has none.
        lasting_lines(answer)
            .filter(|(n, _)| !doomed.contains(n))
            .eq(self.answer.iter().map(|(n, v)| (n, v)))
    }

    /// The merge for `answer` (read past `doomed`): the per-answer fields
    /// from it, else from the stored response.
    pub(super) fn headers(
        &self,
        answer: &HeaderMap,
        doomed: &[HeaderName],
        stored: &HeaderMap,
    ) -> HeaderMap {
        let mut out = self.merged.clone();
        for name in PER_ANSWER_FIELDS {
            let source = if answer.contains_key(&name) && !doomed.contains(&name) {
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

/// Fields the library's merge leaves out of the stored response
/// (http-cache-semantics 3, `HOP_BY_HOP_HEADERS` but `Date`, which it
/// writes again).
const LIBRARY_HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];
