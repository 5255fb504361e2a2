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
use std::sync::atomic::{AtomicBool, Ordering};
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
pub(crate) struct Lane(Arc<LaneState>);

/// The flags are read and set on every read, write and flush of the
/// connection, so they are atomics, read and written without a lock (a
/// locked instruction costs tens of nanoseconds here, and a mutex took two
/// on each of some six calls a request); the lock is taken only when
/// something is queued, and once a request to keep the waker.
#[derive(Default)]
struct LaneState {
    /// `held.queue` is not empty.
    queued: AtomicBool,
    /// hyper has written nothing since its last flush: its buffer is empty.
    clean: AtomicBool,
    /// The current request's final answer has been handed to hyper.
    answered: AtomicBool,
    /// hyper has written since the final answer was handed to it.
    wrote_after_answer: AtomicBool,
    /// The current request has no waker kept yet.
    wants_waker: AtomicBool,
    held: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    /// Interim heads not yet written, in the order they came.
    queue: BytesMut,
    /// Some of `queue` has been written: the rest goes before anything
    /// hyper writes.
    started: bool,
    /// The connection task, woken to write what came in while hyper waits.
    /// One task drives the connection, so one waker a request serves.
    waker: Option<Waker>,
}

impl LaneState {
    fn held(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn clear(&self, held: &mut Held) {
        held.queue.clear();
        held.started = false;
        self.queued.store(false, Ordering::Release);
    }
}

impl Lane {
    /// A new request of the connection is being served: anything left for
    /// an earlier one is dropped.
    pub(crate) fn begin(&self) {
        let s = &self.0;
        if s.queued.load(Ordering::Acquire) {
            s.clear(&mut s.held());
        }
        s.answered.store(false, Ordering::Release);
        s.wrote_after_answer.store(false, Ordering::Release);
        s.wants_waker.store(true, Ordering::Release);
    }

    /// The final answer is about to be handed to hyper.
    pub(crate) fn answered(&self) {
        self.0.answered.store(true, Ordering::Release);
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
        let s = &self.0;
        let mut held = s.held();
        if s.answered.load(Ordering::Acquire) || held.queue.len() + bytes.len() > MAX_QUEUED {
            return;
        }
        held.queue.extend_from_slice(bytes);
        s.queued.store(true, Ordering::Release);
        // Kept, not taken: the waker is kept once a request, and a later
        // interim answer of the same request must wake the task too.
        if let Some(w) = &held.waker {
            w.wake_by_ref();
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
        lane.0.clean.store(true, Ordering::Release);
        (
            Interim {
                inner,
                lane: lane.clone(),
            },
            lane,
        )
    }
}

impl<S: AsyncWrite + Unpin> Interim<S> {
    /// Writes what is queued if it may go now. Ready once nothing queued
    /// stands before hyper's next bytes.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let s = &*self.lane.0;
        if !s.queued.load(Ordering::Acquire) {
            return Poll::Ready(Ok(()));
        }
        let mut held = s.held();
        if held.queue.is_empty() {
            return Poll::Ready(Ok(()));
        }
        if !held.started {
            if s.answered.load(Ordering::Acquire) && s.wrote_after_answer.load(Ordering::Acquire) {
                // The final head may be out already: too late.
                s.clear(&mut held);
                return Poll::Ready(Ok(()));
            }
            if !s.clean.load(Ordering::Acquire) {
                // hyper holds bytes of its own (an earlier response's
                // tail): wait for its next flush.
                return Poll::Ready(Ok(()));
            }
        }
        while !held.queue.is_empty() {
            held.started = true;
            match Pin::new(&mut self.inner).poll_write(cx, &held.queue) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => held.queue.advance(n),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        s.clear(&mut held);
        Poll::Ready(Ok(()))
    }

    /// Drains what may go, then notes that hyper is about to write bytes
    /// of its own.
    fn before_hyper_writes(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.drain(cx))?;
        let s = &self.lane.0;
        s.clean.store(false, Ordering::Release);
        if s.answered.load(Ordering::Acquire) {
            s.wrote_after_answer.store(true, Ordering::Release);
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
        let s = &this.lane.0;
        // A load and a store, not a swap: only this stream clears it.
        if s.wants_waker.load(Ordering::Acquire) {
            s.wants_waker.store(false, Ordering::Release);
            s.held().waker = Some(cx.waker().clone());
        }
        if let Poll::Ready(Err(e)) = this.drain(cx) {
            return Poll::Ready(Err(e));
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
        // hyper flushes the socket only once its own buffer is empty.
        self.lane.0.clean.store(true, Ordering::Release);
        std::task::ready!(self.drain(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let s = &self.lane.0;
        s.clear(&mut s.held());
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

    /// Counts its wakes.
    struct Wakes(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn every_interim_answer_of_a_request_wakes_the_waiting_reader() {
        let (_client, server) = tokio::io::duplex(4096);
        let (mut io, lane) = Interim::new(server);
        let wakes = Arc::new(Wakes(std::sync::atomic::AtomicUsize::new(0)));
        let waker = Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        lane.begin();
        let mut buf = [0u8; 16];
        let mut read = ReadBuf::new(&mut buf);
        // hyper waits on the read side while the request is at the origin;
        // woken by each interim answer, it polls again and writes it.
        for woken in 1..=2 {
            assert!(Pin::new(&mut io).poll_read(&mut cx, &mut read).is_pending());
            lane.push(&hint());
            assert_eq!(wakes.0.load(Ordering::SeqCst), woken);
        }
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
