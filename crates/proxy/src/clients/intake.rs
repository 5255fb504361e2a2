//! Reading the first request head of a client connection ourselves, before
//! hyper sees it: malformed heads, smuggling-shaped framing (Content-Length
//! with Transfer-Encoding, conflicting lengths) and oversize heads get a
//! plain answer with `Mannerly-Decision` and an audit line, and the
//! connection is closed. `heads.rs` applies the same `check` to every later
//! head of a kept-alive connection.

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};

/// What was wrong with a request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadHead {
    /// Status to answer with.
    pub status: u16,
    /// Plain words for the client and the audit log.
    pub reason: String,
    /// Method, if the request line got that far.
    pub method: String,
    /// Request target, if the request line got that far.
    pub target: String,
}

/// The first read of a connection.
pub(crate) enum Intake {
    /// A complete, acceptable head; the bytes read so far (head and any body
    /// that came with it) must be replayed to the HTTP parser.
    Ready(BytesMut),
    /// The client closed or sent nothing before the timeout: nothing to answer.
    Gone,
    /// A head we refuse.
    Bad(BadHead),
}

/// Reads until a complete head, the size limit or the deadline.
pub(crate) async fn read_head<S: AsyncRead + Unpin>(
    stream: &mut S,
    max_bytes: usize,
    max_headers: usize,
    now: tokio::time::Instant,
    timeout: Duration,
) -> Intake {
    let mut buf = BytesMut::with_capacity(4096);
    let deadline = now + timeout;
    loop {
        match check(&buf, max_bytes, max_headers) {
            Check::Complete { .. } => return Intake::Ready(buf),
            Check::Bad(b) => return Intake::Bad(b),
            Check::Partial => {}
        }
        let read = tokio::time::timeout_at(deadline, stream.read_buf(&mut buf)).await;
        match read {
            Ok(Ok(0)) | Ok(Err(_)) => return Intake::Gone,
            Ok(Ok(_)) => {}
            Err(_) if buf.is_empty() => return Intake::Gone,
            Err(_) => {
                return Intake::Bad(BadHead {
                    status: 408,
                    reason: format!("request head not complete within {timeout:?}"),
                    method: String::new(),
                    target: String::new(),
                })
            }
        }
    }
}

/// How a request's body is delimited (RFC 9112 §6.3), as far as the next
/// head is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body: the next head follows.
    None,
    /// This many bytes of body.
    Length(u64),
    /// Chunked.
    Chunked,
    /// CONNECT: what follows its head is not HTTP/1 from here on.
    Tunnel,
}

pub(crate) enum Check {
    /// A complete, acceptable head of `len` bytes.
    Complete {
        len: usize,
        framing: Framing,
    },
    Partial,
    Bad(BadHead),
}

fn bad(status: u16, reason: impl Into<String>, req: &httparse::Request<'_, '_>) -> Check {
    Check::Bad(BadHead {
        status,
        reason: reason.into(),
        method: req.method.unwrap_or("").to_string(),
        target: req.path.unwrap_or("").to_string(),
    })
}

/// What the intake makes of `buf` as a first request head: `None` while
/// incomplete, `Some(Ok(()))` when accepted, `Some(Err(status))` when
/// refused. For fuzzing and property tests.
pub fn check_request_head(
    buf: &[u8],
    max_bytes: usize,
    max_headers: usize,
) -> Option<Result<(), u16>> {
    match check(buf, max_bytes, max_headers) {
        Check::Complete { .. } => Some(Ok(())),
        Check::Partial => None,
        Check::Bad(b) => Some(Err(b.status)),
    }
}

/// Header slots kept on the stack when `max_headers` is at most this
/// (the default is 100).
const HEADERS_ON_STACK: usize = 128;

/// Checks the head at the start of `buf`.
pub(crate) fn check(buf: &[u8], max_bytes: usize, max_headers: usize) -> Check {
    if buf.is_empty() {
        return Check::Partial;
    }
    // The slots httparse fills, left uninitialised and on the stack for
    // the usual limit: a zeroed `Vec` of `max_headers` was an allocation
    // and a 3 KiB fill for every head, most of which have a dozen lines.
    let mut on_stack = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; HEADERS_ON_STACK];
    let mut on_heap = Vec::new();
    let slots = if max_headers <= HEADERS_ON_STACK {
        &mut on_stack[..max_headers]
    } else {
        on_heap.resize_with(max_headers, MaybeUninit::uninit);
        &mut on_heap[..]
    };
    let mut req = httparse::Request::new(&mut []);
    let parsed = req.parse_with_uninit_headers(buf, slots);
    match parsed {
        Ok(httparse::Status::Partial) => {
            if buf.len() > max_bytes {
                return bad(
                    431,
                    format!("request head larger than {max_bytes} bytes"),
                    &req,
                );
            }
            Check::Partial
        }
        Err(httparse::Error::TooManyHeaders) => {
            bad(431, format!("more than {max_headers} header lines"), &req)
        }
        Err(e) => bad(400, format!("malformed request head: {e}"), &req),
        Ok(httparse::Status::Complete(len)) => {
            if len > max_bytes {
                return bad(
                    431,
                    format!("request head larger than {max_bytes} bytes"),
                    &req,
                );
            }
            // hyper would answer a target it cannot parse with a bare 400
            // (no decision, no id): refused here, it gets both and a line.
            let target = req.path.unwrap_or("");
            if target.parse::<http::Uri>().is_err() {
                let why = format!("request target {target:?} is not a valid URI");
                return bad(400, why, &req);
            }
            framing(&req, len)
        }
    }
}

/// RFC 9112 §6.3: a request with both Content-Length and Transfer-Encoding,
/// or with disagreeing lengths, is how requests get smuggled past a proxy.
fn framing(req: &httparse::Request<'_, '_>, len: usize) -> Check {
    let mut length: Option<&[u8]> = None;
    let mut te = false;
    let mut te_chunked_only = false;
    // Only CONNECT turns the connection into a tunnel. An `Upgrade` header
    // does not: it is hop-by-hop, never forwarded, and an origin's 101 is
    // answered 502, so HTTP/1 goes on after it and its heads are checked.
    let connect = req
        .method
        .is_some_and(|m| m.eq_ignore_ascii_case("CONNECT"));
    for h in req.headers.iter() {
        if is_framing_lookalike(h.name) {
            // A server that reads `_` as `-` (as CGI and some frameworks
            // do) would frame the body by it: refused, not guessed at.
            let why = format!("header {:?} is a framing field with an underscore", h.name);
            return bad(400, why, req);
        }
        if h.name.eq_ignore_ascii_case("content-length") {
            for part in h.value.split(|b| *b == b',') {
                let v = part.trim_ascii();
                if v.is_empty() || !v.iter().all(u8::is_ascii_digit) || v.len() > 18 {
                    return bad(400, "invalid Content-Length", req);
                }
                match length {
                    Some(prev) if prev != v => {
                        return bad(400, "conflicting Content-Length values", req)
                    }
                    _ => length = Some(v),
                }
            }
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            if te {
                return bad(501, "more than one Transfer-Encoding field", req);
            }
            te = true;
            let last = h.value.rsplit(|b| *b == b',').next().unwrap_or(b"");
            if !last.trim_ascii().eq_ignore_ascii_case(b"chunked") {
                return bad(400, "Transfer-Encoding does not end in chunked", req);
            }
            // Any other coding would be dropped on the way to the origin
            // (RFC 9112 §6.1: a server that does not understand a coding
            // answers 501).
            te_chunked_only = h.value.trim_ascii().eq_ignore_ascii_case(b"chunked");
        }
    }
    if te && length.is_some() {
        return bad(400, "both Content-Length and Transfer-Encoding", req);
    }
    if te && !te_chunked_only {
        return bad(
            501,
            "Transfer-Encoding other than chunked is not supported",
            req,
        );
    }
    let framing = match (te, length) {
        _ if connect => Framing::Tunnel,
        (true, _) => Framing::Chunked,
        (false, Some(v)) => match std::str::from_utf8(v).ok().and_then(|v| v.parse().ok()) {
            Some(0) | None => Framing::None,
            Some(n) => Framing::Length(n),
        },
        (false, None) => Framing::None,
    };
    Check::Complete { len, framing }
}

/// `Transfer_Encoding`, `content_length`: a framing field's name with an
/// underscore for a hyphen.
pub(crate) fn is_framing_lookalike(name: &str) -> bool {
    name.contains('_')
        && ["transfer-encoding", "content-length"].iter().any(|f| {
            f.len() == name.len()
                && f.bytes()
                    .zip(name.bytes())
                    .all(|(a, b)| a == b.to_ascii_lowercase() || (a == b'-' && b == b'_'))
        })
}

/// A stream that first yields bytes already read from it.
pub(crate) struct Prefixed<S> {
    prefix: BytesMut,
    inner: S,
}

impl<S> Prefixed<S> {
    /// `prefix` is replayed before reading from `inner`.
    pub(crate) fn new(prefix: BytesMut, inner: S) -> Self {
        Prefixed { prefix, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix[..n]);
            self.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

/// `AsyncWrite` for a read-side wrapper `$ty<S>` with the stream in field
/// `inner`: writes go straight through.
macro_rules! write_through {
    ($ty:ident) => {
        impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for $ty<S> {
            fn poll_write(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
            }

            fn poll_write_vectored(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                bufs: &[std::io::IoSlice<'_>],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                self.inner.is_write_vectored()
            }

            fn poll_flush(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.inner).poll_flush(cx)
            }

            fn poll_shutdown(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
            }
        }
    };
}
pub(crate) use write_through;

write_through!(Prefixed);

#[cfg(test)]
mod tests {
    use super::*;

    fn status(head: &str) -> Option<u16> {
        match check(head.as_bytes(), 1024, 8) {
            Check::Complete { .. } => None,
            Check::Partial => Some(0),
            Check::Bad(b) => Some(b.status),
        }
    }

    #[test]
    fn good_heads_pass() {
        assert_eq!(
            status("GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n"),
            None
        );
        assert_eq!(
            status(
                "POST http://a.test/ HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc"
            ),
            None
        );
        assert_eq!(
            status("POST http://a.test/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            None
        );
        assert_eq!(
            status("POST http://a.test/ HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"),
            Some(501)
        );
        assert_eq!(status("GET http://a.test/ HTTP/1.1\r\nHost: a"), Some(0));
    }

    #[test]
    fn smuggling_shapes_and_garbage_are_refused() {
        assert_eq!(
            status("POST http://a.test/ HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Some(400)
        );
        assert_eq!(
            status(
                "POST http://a.test/ HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n"
            ),
            Some(400)
        );
        assert_eq!(
            status("POST http://a.test/ HTTP/1.1\r\nContent-Length: 3, 4\r\n\r\n"),
            Some(400)
        );
        assert_eq!(
            status("POST http://a.test/ HTTP/1.1\r\nContent-Length: -1\r\n\r\n"),
            Some(400)
        );
        assert_eq!(
            status("POST http://a.test/ HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n"),
            Some(400)
        );
        assert_eq!(status("GARBAGE\x01 / HTTP/1.1\r\n\r\n"), Some(400));
        assert_eq!(status("GET / HTTP/1.1\r\nBad Header: x\r\n\r\n"), Some(400));
        let underscore =
            "POST / HTTP/1.1\r\nTransfer_Encoding: chunked\r\nContent-Length: 3\r\n\r\n";
        assert_eq!(status(underscore), Some(400));
        assert_eq!(
            status("GET / HTTP/1.1\r\ncontent_length: 3\r\n\r\n"),
            Some(400)
        );
        // Other names with underscores are left alone.
        assert_eq!(status("GET / HTTP/1.1\r\nX_Trace: 1\r\n\r\n"), None);
        for target in [
            "http://127.0.0.1%2e/",
            "http://%31%32%37.0.0.1/",
            "http://127.0.0.1:18080:80/",
            "http://①②⑦.0.0.1/",
            "http://127。0。0。1/",
        ] {
            let head = format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n");
            assert_eq!(status(&head), Some(400), "{target}");
        }
    }

    #[test]
    fn oversize_heads_get_431() {
        let many: String = (0..9).map(|i| format!("X-{i}: v\r\n")).collect();
        assert_eq!(status(&format!("GET / HTTP/1.1\r\n{many}\r\n")), Some(431));
        let long = "a".repeat(2000);
        assert_eq!(status(&format!("GET / HTTP/1.1\r\nX: {long}")), Some(431));
    }

    /// The header limit holds on both sides of the slots kept on the stack,
    /// and the fields parsed on the heap are the ones framing reads.
    #[test]
    fn the_header_limit_holds_above_the_slots_on_the_stack() {
        let head = |n: usize, last: &str| {
            let many: String = (0..n).map(|i| format!("X-{i}: v\r\n")).collect();
            format!("POST / HTTP/1.1\r\n{many}{last}\r\n")
        };
        let check_at = |head: &str, limit: usize| match check(head.as_bytes(), 1 << 20, limit) {
            Check::Complete { framing, .. } => Ok(framing),
            Check::Partial => Err(0),
            Check::Bad(b) => Err(b.status),
        };
        for limit in [HEADERS_ON_STACK, HEADERS_ON_STACK + 1, 300] {
            let fits = head(limit - 1, "Content-Length: 5\r\n");
            assert!(
                matches!(check_at(&fits, limit), Ok(Framing::Length(5))),
                "{limit} lines within a limit of {limit}"
            );
            let over = head(limit, "Content-Length: 5\r\n");
            assert_eq!(check_at(&over, limit).err(), Some(431), "over {limit}");
        }
        let smuggled = head(200, "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n");
        assert_eq!(check_at(&smuggled, 300).err(), Some(400));
    }
}

#[cfg(test)]
mod props {
    use super::check_request_head;
    use proptest::prelude::*;

    proptest! {
        // The cargo-fuzz target `request_head` runs this without bounds.
        #[test]
        fn any_head_is_accepted_waited_for_or_refused_with_a_4xx(
            data in proptest::collection::vec(any::<u8>(), 0..512),
            prefix in prop::sample::select(vec![&b""[..], b"GET http://a.test/ HTTP/1.1\r\n", b"CONNECT a.test:443 HTTP/1.1\r\nhost: a\r\n"]),
        ) {
            let mut buf = prefix.to_vec();
            buf.extend(&data);
            for (max_bytes, max_headers) in [(65536, 100), (1024, 4)] {
                if let Some(Err(status)) = check_request_head(&buf, max_bytes, max_headers) {
                    prop_assert!((400..500).contains(&status), "{}", status);
                }
            }
        }
    }
}
