//! 1xx interim answers (`103 Early Hints`, `102 Processing`) passed on to
//! an HTTP/1.1 client. RFC 9110 §15.2: a proxy MUST forward them; hyper's
//! server has no way to send one (hyperium/hyper#3815 and #4114 are open),
//! so [`Interim`] sits between the client's socket and hyper and writes
//! them itself, as the raw bytes of an HTTP/1.1 interim head.
//!
//! # Order
//!
//! An interim answer may only go between the previous response's last byte
//! and the final head of the request it belongs to. hyper serves one
//! request of a connection at a time and reads the next head only once the
//! previous response is wholly in its write buffer; that buffer is empty
//! whenever hyper flushes the socket. So the bytes go out only while
//! hyper's buffer is known to be empty (since its last flush hyper wrote
//! nothing), and before anything hyper writes after that. Once the final
//! answer has been handed to hyper and hyper wrote since, an interim still
//! waiting is dropped: late, it would be read as the next response.
//!
//! # Storage
//!
//! Nothing here reaches the store: hyper's client hands an interim answer
//! only to the callback ([`Lane::watch`]), never as the response.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::{Buf, BytesMut};
use http::{Request, StatusCode, Version};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The most interim bytes held for one request; beyond that, later ones
/// are dropped (a hint, not content: losing one costs the client a
/// preload).
const MAX_QUEUED: usize = 64 * 1024;

/// One connection's way for interim answers from the pipeline to the
/// client, shared by [`Interim`] and the request being served.
#[derive(Clone, Default)]
pub(crate) struct Lane(Arc<Mutex<LaneState>>);

#[derive(Default)]
struct LaneState {
    /// Interim heads not yet written, in the order they came.
    queue: BytesMut,
    /// Some of `queue` has been written: the rest goes before anything
    /// hyper writes.
    started: bool,
    /// hyper has written nothing since its last flush: its buffer is empty.
    clean: bool,
    /// The current request's final answer has been handed to hyper.
    answered: bool,
    /// hyper has written since the final answer was handed to it.
    wrote_after_answer: bool,
    /// The connection task, woken to write what came in while hyper waits.
    waker: Option<Waker>,
}

impl Lane {
    fn state(&self) -> MutexGuard<'_, LaneState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new request of the connection is being served: anything left for
    /// an earlier one is dropped.
    pub(crate) fn begin(&self) {
        let mut s = self.state();
        s.queue.clear();
        s.started = false;
        s.answered = false;
        s.wrote_after_answer = false;
    }

    /// The final answer is about to be handed to hyper.
    pub(crate) fn answered(&self) {
        self.state().answered = true;
    }

    /// Passes the interim answers of the origin's reply to `out` on to the
    /// client (HTTP/1.1 clients only: RFC 9110 §15.2, none to HTTP/1.0).
    /// `100 Continue` is not passed on: hyper answers a client's `Expect`
    /// itself, and the proxy asked the origin for its own.
    pub(crate) fn watch<B>(&self, client: Version, out: &mut Request<B>) {
        if client != Version::HTTP_11 {
            return;
        }
        let lane = self.clone();
        hyper::ext::on_informational(out, move |res| {
            let status = res.status();
            if status == StatusCode::CONTINUE || status == StatusCode::SWITCHING_PROTOCOLS {
                return;
            }
            lane.push(&head(status, res.headers()));
        });
    }

    fn push(&self, bytes: &[u8]) {
        let mut s = self.state();
        if s.answered || s.queue.len() + bytes.len() > MAX_QUEUED {
            return;
        }
        s.queue.extend_from_slice(bytes);
        if let Some(w) = s.waker.take() {
            w.wake();
        }
    }
}

/// An interim answer as HTTP/1.1 writes it. Hop-by-hop fields are the
/// origin's connection's, not the client's (RFC 9110 §7.6.1).
fn head(status: StatusCode, headers: &http::HeaderMap) -> Vec<u8> {
    let mut fields = headers.clone();
    mannerly_policy::strip_hop_by_hop(&mut fields);
    let reason = status.canonical_reason().unwrap_or("");
    let mut out = format!("HTTP/1.1 {} {reason}\r\n", status.as_u16()).into_bytes();
    for (name, value) in &fields {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// A client stream that writes the current request's interim answers in
/// their place (see the module's "Order").
pub(crate) struct Interim<S> {
    inner: S,
    lane: Lane,
}

impl<S> Interim<S> {
    pub(crate) fn new(inner: S) -> (Interim<S>, Lane) {
        let lane = Lane::default();
        lane.state().clean = true;
        (
            Interim {
                inner,
                lane: lane.clone(),
            },
            lane,
        )
    }
}

/// Writes what is queued if it may go now, under the lane's lock the
/// caller holds (one lock for this and what the caller does with the
/// state: the lock is taken on every read, write and flush of the
/// connection). Ready once nothing queued stands before hyper's next bytes.
fn drain<S: AsyncWrite + Unpin>(
    inner: &mut S,
    s: &mut LaneState,
    cx: &mut Context<'_>,
) -> Poll<io::Result<()>> {
    if s.queue.is_empty() {
        return Poll::Ready(Ok(()));
    }
    if !s.started {
        if s.answered && s.wrote_after_answer {
            // The final head may be out already: too late.
            s.queue.clear();
            return Poll::Ready(Ok(()));
        }
        if !s.clean {
            // hyper holds bytes of its own (an earlier response's
            // tail): wait for its next flush.
            return Poll::Ready(Ok(()));
        }
    }
    while !s.queue.is_empty() {
        s.started = true;
        match Pin::new(&mut *inner).poll_write(cx, &s.queue) {
            Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
            Poll::Ready(Ok(n)) => s.queue.advance(n),
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        }
    }
    s.started = false;
    Poll::Ready(Ok(()))
}

impl<S: AsyncWrite + Unpin> Interim<S> {
    /// Drains what may go, then notes that hyper is about to write bytes
    /// of its own.
    fn before_hyper_writes(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut s = self.lane.state();
        std::task::ready!(drain(&mut self.inner, &mut s, cx))?;
        s.clean = false;
        if s.answered {
            s.wrote_after_answer = true;
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Interim<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        // While a request is with the origin, hyper waits on the read side
        // (to see the client go): the moment to send what came meanwhile.
        let this = &mut *self;
        {
            let mut s = this.lane.state();
            if !s.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                s.waker = Some(cx.waker().clone());
            }
            if let Poll::Ready(Err(e)) = drain(&mut this.inner, &mut s, cx) {
                return Poll::Ready(Err(e));
            }
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Interim<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        std::task::ready!(self.before_hyper_writes(cx))?;
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        std::task::ready!(self.before_hyper_writes(cx))?;
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        {
            let mut s = this.lane.state();
            // hyper flushes the socket only once its own buffer is empty.
            s.clean = true;
            std::task::ready!(drain(&mut this.inner, &mut s, cx))?;
        }
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.lane.state().queue.clear();
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn hint() -> Vec<u8> {
        let mut h = http::HeaderMap::new();
        h.insert("link", "</s.css>; rel=preload".parse().expect("value"));
        h.insert("connection", "keep-alive".parse().expect("value"));
        head(StatusCode::EARLY_HINTS, &h)
    }

    #[test]
    fn an_interim_head_is_status_line_fields_and_blank_line_without_hop_by_hop() {
        assert_eq!(
            String::from_utf8(hint()).expect("utf-8"),
            "HTTP/1.1 103 Early Hints\r\nlink: </s.css>; rel=preload\r\n\r\n"
        );
    }

    #[tokio::test]
    async fn interim_goes_before_the_final_head_when_hyper_holds_nothing() {
        let (mut client, server) = tokio::io::duplex(4096);
        let (mut io, lane) = Interim::new(server);
        lane.begin();
        lane.push(&hint());
        lane.answered();
        io.write_all(b"HTTP/1.1 200 OK\r\n\r\n")
            .await
            .expect("write");
        io.flush().await.expect("flush");
        drop(io);
        let mut got = String::new();
        client.read_to_string(&mut got).await.expect("read");
        assert_eq!(
            got,
            "HTTP/1.1 103 Early Hints\r\nlink: </s.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\n\r\n"
        );
    }

    #[tokio::test]
    async fn interim_never_splits_an_earlier_response_nor_follows_the_final_head() {
        let (mut client, server) = tokio::io::duplex(4096);
        let (mut io, lane) = Interim::new(server);
        // hyper is mid-way through the previous response (no flush since).
        io.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nab")
            .await
            .expect("write");
        lane.begin();
        lane.push(&hint());
        // Not clean: the tail and then the final head go first...
        io.write_all(b"cd").await.expect("write");
        lane.answered();
        io.write_all(b"HTTP/1.1 204 No Content\r\n\r\n")
            .await
            .expect("write");
        // ...and at the flush the interim is too late: dropped.
        io.flush().await.expect("flush");
        drop(io);
        let mut got = String::new();
        client.read_to_string(&mut got).await.expect("read");
        assert_eq!(
            got,
            "HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nabcdHTTP/1.1 204 No Content\r\n\r\n"
        );
    }

    #[tokio::test]
    async fn interim_waiting_for_a_flush_goes_before_the_final_head() {
        let (mut client, server) = tokio::io::duplex(4096);
        let (mut io, lane) = Interim::new(server);
        io.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nab")
            .await
            .expect("write");
        lane.begin();
        lane.push(&hint());
        io.flush().await.expect("flush");
        lane.answered();
        io.write_all(b"HTTP/1.1 204 No Content\r\n\r\n")
            .await
            .expect("write");
        drop(io);
        let mut got = String::new();
        client.read_to_string(&mut got).await.expect("read");
        assert_eq!(
            got,
            "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nab\
             HTTP/1.1 103 Early Hints\r\nlink: </s.css>; rel=preload\r\n\r\n\
             HTTP/1.1 204 No Content\r\n\r\n"
        );
    }

    #[tokio::test]
    async fn an_interim_for_an_earlier_request_or_after_the_answer_is_dropped() {
        let (mut client, server) = tokio::io::duplex(4096);
        let (mut io, lane) = Interim::new(server);
        lane.begin();
        lane.push(&hint());
        lane.begin(); // the next request: the old one's hint is gone
        lane.answered();
        lane.push(&hint()); // after the final answer: never sent
        io.write_all(b"HTTP/1.1 204 No Content\r\n\r\n")
            .await
            .expect("write");
        drop(io);
        let mut got = String::new();
        client.read_to_string(&mut got).await.expect("read");
        assert_eq!(got, "HTTP/1.1 204 No Content\r\n\r\n");
    }
}
