//! The first bytes of an HTML body, read before the answer goes on so that
//! its `<meta name="robots">` can decide it, then given back in front of
//! the rest: the client gets every byte and frame the origin sent.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_ENCODING, CONTENT_TYPE};
use http::Response;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use mannerly_policy::conditional::CacheEntryMeta;
use mannerly_policy::prefs::page::{head_closed, scan_meta, MetaScan};

/// A body whose first frames were read already.
pub(crate) struct Prefixed {
    read: VecDeque<Frame<Bytes>>,
    failed: Option<hyper::Error>,
    rest: Incoming,
}

impl Prefixed {
    /// `rest` as it is: nothing read.
    pub(crate) fn untouched(rest: Incoming) -> Prefixed {
        Prefixed {
            read: VecDeque::new(),
            failed: None,
            rest,
        }
    }
}

impl Body for Prefixed {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        if let Some(frame) = self.read.pop_front() {
            return Poll::Ready(Some(Ok(frame)));
        }
        if let Some(e) = self.failed.take() {
            return Poll::Ready(Some(Err(e)));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.read.is_empty() && self.failed.is_none() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let read: u64 = self
            .read
            .iter()
            .filter_map(|f| f.data_ref().map(|d| d.len() as u64))
            .sum();
        let rest = self.rest.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower() + read);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + read);
        }
        hint
    }
}

/// Reads up to `limit` bytes of an HTML body for its `<meta>` tags (less
/// once its head is closed), each frame within `idle`. `None` for a body
/// that is not HTML, or not readable as sent (compressed).
pub(crate) async fn read_meta(
    resp: Response<Incoming>,
    limit: usize,
    idle: Duration,
) -> (Response<Prefixed>, Option<MetaScan>) {
    let (head, rest) = resp.into_parts();
    let mut body = Prefixed::untouched(rest);
    match readable(head.status, &head.headers, limit) {
        Readable::No => return (Response::from_parts(head, body), None),
        Readable::Encoded(scan) => return (Response::from_parts(head, body), Some(scan)),
        Readable::Yes => {}
    }
    let mut seen: Vec<u8> = Vec::new();
    let (mut judged, mut whole) = (0, false);
    while seen.len() < limit && !head_closed(&seen, judged) {
        judged = seen.len();
        match tokio::time::timeout(idle, body.rest.frame()).await {
            Ok(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let room = limit - seen.len();
                    seen.extend_from_slice(&data[..data.len().min(room)]);
                }
                body.read.push_back(frame);
            }
            Ok(Some(Err(e))) => {
                body.failed = Some(e);
                break;
            }
            Ok(None) => {
                whole = true;
                break;
            }
            // A silent origin: what came so far is judged, the rest
            // streams on as it comes.
            Err(_) => break,
        }
    }
    let scan = scan_meta(&seen, whole);
    (Response::from_parts(head, body), Some(scan))
}

/// The `<meta>` tags of a stored page, read as [`read_meta`] reads a
/// fetched one's: once per store entry, when the body is `entry`'s.
pub(crate) fn stored_meta(
    status: http::StatusCode,
    headers: &http::HeaderMap,
    body: &Bytes,
    limit: usize,
    entry: Option<&CacheEntryMeta>,
) -> Option<MetaScan> {
    match readable(status, headers, limit) {
        Readable::No => None,
        Readable::Encoded(scan) => Some(scan),
        Readable::Yes => Some(match entry {
            Some(e) => e.body_meta(body, limit),
            None => {
                let seen = &body[..body.len().min(limit)];
                scan_meta(seen, seen.len() == body.len())
            }
        }),
    }
}

enum Readable {
    /// Not an HTML page's body, or reading is off.
    No,
    /// HTML, but compressed: what the line says instead.
    Encoded(MetaScan),
    Yes,
}

fn readable(status: http::StatusCode, headers: &http::HeaderMap, limit: usize) -> Readable {
    let html = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim_start().to_ascii_lowercase())
        .is_some_and(|v| v.starts_with("text/html") || v.starts_with("application/xhtml+xml"));
    if limit == 0 || !html || !status.is_success() {
        return Readable::No;
    }
    let encoding = headers
        .get(CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.trim().eq_ignore_ascii_case("identity"));
    match encoding {
        Some(encoding) => Readable::Encoded(MetaScan {
            tags: Vec::new(),
            ignored: vec![format!(
                "the page is {encoding}-encoded: its <meta> is not read"
            )],
        }),
        None => Readable::Yes,
    }
}
