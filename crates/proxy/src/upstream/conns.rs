//! Global bounds on upstream connections, which the pool (`pool.rs`) does
//! not keep (it caps idle connections per origin only): a broad crawl touches
//! thousands of origins once each, and one idle connection per origin
//! would run the process out of file descriptors.
//!
//! - at most `upstream.max_connecting` connections are being opened at
//!   once; more wait their turn within the connect timeout;
//! - at most `upstream.pool_max_idle_total` idle connections are kept over
//!   all origins; when one more goes idle, the one idle the longest is
//!   closed (LRU).
//!
//! Every upstream TCP stream is a [`Tracked`] stream. It is busy from the
//! moment a request is written on it until the pipeline has passed the
//! whole response on ([`Conns::release`] through the [`ConnHandle`] that
//! the pool copies into each response's extensions). Only idle streams
//! are ever closed. Closing one makes its reads end and its writes fail, so
//! hyper's connection task ends and the pool forgets it.

use std::collections::BTreeMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use hyper_util::client::legacy::connect::{Connected, Connection};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The bounds, shared by every upstream connection.
pub(crate) struct Conns {
    connecting: Arc<Semaphore>,
    max_idle: usize,
    idle: Mutex<Idle>,
    open: AtomicUsize,
}

/// Idle connections, oldest first.
#[derive(Default)]
struct Idle {
    next: u64,
    by_age: BTreeMap<u64, Arc<ConnState>>,
}

/// One connection as the bounds see it.
#[derive(Default)]
struct ConnState {
    inner: Mutex<StateInner>,
    /// `inner.closed`, for reads to see without the lock (they come
    /// several times a request, and a lock is two locked instructions).
    closed: AtomicBool,
    /// What `inner.reader` wakes (`Waker::data`): a read by the same task
    /// keeps it without the lock. The first reads of a TLS connection are
    /// the handshake's, in the task that connects; hyper's connection task
    /// reads after, and is the one a close must wake.
    reader_id: AtomicUsize,
}

#[derive(Default)]
struct StateInner {
    /// Writes with data so far: a response's handle remembers the count,
    /// so that a release that comes after the connection was taken for the
    /// next request does not mark it idle.
    writes: u64,
    /// Its key in [`Idle::by_age`] while idle.
    idle_since: Option<u64>,
    closed: bool,
    /// hyper's connection task, to be woken when the stream is closed.
    reader: Option<Waker>,
}

/// Which connection a response came on, and how many writes it had seen
/// when the response head arrived.
#[derive(Clone)]
pub(crate) struct ConnHandle {
    conns: Arc<Conns>,
    state: Arc<ConnState>,
    writes: u64,
}

/// Given to the pool as the connection's "extra": the pool clones it
/// into each response's extensions when the response head has arrived,
/// before the connection can go back to the pool, and the clone is the
/// snapshot a [`ConnHandle`] needs.
pub(crate) struct ConnExtra(ConnHandle);

impl Clone for ConnExtra {
    fn clone(&self) -> Self {
        let mut h = self.0.clone();
        h.writes = lock(&h.state.inner).writes;
        ConnExtra(h)
    }
}

impl ConnHandle {
    /// The connection `resp` came on, when it came through a tracked one.
    pub(crate) fn of<B>(resp: &http::Response<B>) -> Option<ConnHandle> {
        resp.extensions().get::<ConnExtra>().map(|e| e.0.clone())
    }
}

impl Conns {
    pub(crate) fn new(max_connecting: usize, max_idle: usize) -> Arc<Conns> {
        Arc::new(Conns {
            connecting: Arc::new(Semaphore::new(max_connecting.max(1))),
            max_idle,
            idle: Mutex::new(Idle::default()),
            open: AtomicUsize::new(0),
        })
    }

    /// A turn to open a connection, waited for at most `within`.
    pub(crate) async fn connecting(&self, within: Duration) -> Option<OwnedSemaphorePermit> {
        tokio::time::timeout(within, self.connecting.clone().acquire_owned())
            .await
            .ok()
            .and_then(Result::ok)
    }

    /// Wraps a freshly connected stream.
    pub(crate) fn track(self: &Arc<Self>, stream: TcpStream) -> Tracked {
        self.open.fetch_add(1, Ordering::Relaxed);
        Tracked {
            stream,
            handle: ConnHandle {
                conns: self.clone(),
                state: Arc::new(ConnState::default()),
                writes: 0,
            },
        }
    }

    /// Upstream connections open now (busy and idle).
    #[cfg(test)]
    pub(crate) fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Idle upstream connections now.
    #[cfg(test)]
    pub(crate) fn idle(&self) -> usize {
        lock(&self.idle).by_age.len()
    }

    /// The response that came on `handle`'s connection has been passed on
    /// whole: the connection is idle, and the oldest idle ones beyond the
    /// cap are closed.
    pub(crate) fn release(handle: &ConnHandle) {
        let conns = &handle.conns;
        let mut idle = lock(&conns.idle);
        {
            let mut s = lock(&handle.state.inner);
            if s.closed || s.idle_since.is_some() || s.writes != handle.writes {
                return;
            }
            let at = idle.next;
            idle.next += 1;
            s.idle_since = Some(at);
            idle.by_age.insert(at, handle.state.clone());
        }
        while idle.by_age.len() > conns.max_idle {
            let Some((_, oldest)) = idle.by_age.pop_first() else {
                break;
            };
            let mut s = lock(&oldest.inner);
            s.idle_since = None;
            s.closed = true;
            oldest.closed.store(true, Ordering::Release);
            if let Some(w) = s.reader.take() {
                w.wake();
            }
        }
    }

    fn busy(&self, state: &ConnState) {
        let mut idle = lock(&self.idle);
        let mut s = lock(&state.inner);
        if let Some(at) = s.idle_since.take() {
            idle.by_age.remove(&at);
        }
    }

    fn forget(&self, state: &ConnState) {
        self.open.fetch_sub(1, Ordering::Relaxed);
        let mut idle = lock(&self.idle);
        let s = lock(&state.inner);
        if let Some(at) = s.idle_since {
            idle.by_age.remove(&at);
        }
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// An upstream TCP stream under the global bounds.
pub(crate) struct Tracked {
    stream: TcpStream,
    handle: ConnHandle,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.handle.conns.forget(&self.handle.state);
    }
}

impl Tracked {
    /// Before a write: refused on a closed stream; with data, the stream is
    /// busy (a request is going out).
    fn writing(&self, data: bool) -> io::Result<()> {
        let was_idle = {
            let mut s = lock(&self.handle.state.inner);
            if s.closed {
                return Err(closed_error());
            }
            if !data {
                return Ok(());
            }
            s.writes += 1;
            s.idle_since.is_some()
        };
        if was_idle {
            self.handle.conns.busy(&self.handle.state);
        }
        Ok(())
    }
}

impl Connection for Tracked {
    fn connected(&self) -> Connected {
        // Not the stream's own: hyper-util's `HttpInfo` (the two addresses)
        // would be its extra too, copied into every response's extensions
        // (a box, and the map grown for it), and nothing reads it.
        Connected::new().extra(ConnExtra(self.handle.clone()))
    }
}

fn closed_error() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "idle upstream connection closed to stay within upstream.pool_max_idle_total",
    )
}

impl AsyncRead for Tracked {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let state = &this.handle.state;
        let reader = cx.waker().data() as usize;
        if state.reader_id.load(Ordering::Acquire) != reader {
            lock(&state.inner).reader = Some(cx.waker().clone());
            state.reader_id.store(reader, Ordering::Release);
        }
        // Checked after the waker is kept: a close after this check wakes
        // the reader, which then sees it.
        if state.closed.load(Ordering::Acquire) {
            // End of stream: hyper's connection task finishes.
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Err(e) = this.writing(!buf.is_empty()) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Err(e) = this.writing(bufs.iter().any(|b| !b.is_empty())) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// A response body that marks its connection idle once it has been read
/// to the end (see [`Conns::release`]).
pub(crate) struct ReleaseOnEnd<B> {
    inner: B,
    handle: Option<ConnHandle>,
}

impl<B: http_body::Body + Unpin> ReleaseOnEnd<B> {
    pub(crate) fn new(inner: B, handle: Option<ConnHandle>) -> Self {
        let mut body = ReleaseOnEnd { inner, handle };
        body.release_if_done();
        body
    }

    fn release_if_done(&mut self) {
        if self.inner.is_end_stream() {
            if let Some(h) = self.handle.take() {
                Conns::release(&h);
            }
        }
    }
}

impl<B: http_body::Body + Unpin> http_body::Body for ReleaseOnEnd<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => {
                if let Some(h) = this.handle.take() {
                    Conns::release(&h);
                }
            }
            Poll::Ready(Some(Ok(_))) => this.release_if_done(),
            // An error or a body given up: hyper does not pool the connection.
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    async fn pair(conns: &Arc<Conns>, l: &TcpListener) -> (Tracked, TcpStream) {
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        (conns.track(c), s)
    }

    #[tokio::test]
    async fn the_oldest_idle_connection_is_closed_beyond_the_cap_and_busy_ones_never() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let conns = Conns::new(4, 2);
        let (mut a, _sa) = pair(&conns, &l).await;
        let (mut b, _sb) = pair(&conns, &l).await;
        let (mut c, _sc) = pair(&conns, &l).await;
        let (mut d, _sd) = pair(&conns, &l).await;
        assert_eq!(conns.open(), 4);
        for t in [&mut a, &mut b, &mut c, &mut d] {
            t.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        }
        // A response head arrived on each.
        let [ha, hb, hc, hd] = [&a, &b, &c, &d].map(|t| ConnExtra(t.handle.clone()).clone().0);
        // `d` stays busy; a, b, c go idle in that order: a is closed.
        Conns::release(&ha);
        Conns::release(&hb);
        Conns::release(&hc);
        assert_eq!(conns.idle(), 2);
        let mut buf = [0u8; 8];
        assert_eq!(a.read(&mut buf).await.unwrap(), 0, "closed: end of stream");
        assert!(a.write_all(b"x").await.is_err());
        // b is used again (busy), so c is the next to go, then d's turn
        // to be idle does not close b.
        b.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        assert_eq!(conns.idle(), 1);
        // A late release of b's earlier response leaves it busy.
        Conns::release(&hb);
        assert_eq!(conns.idle(), 1);
        Conns::release(&hd);
        assert_eq!(conns.idle(), 2);
        assert!(!lock(&b.handle.state.inner).closed);
        assert!(!lock(&c.handle.state.inner).closed);
        drop(a);
        drop(c);
        assert_eq!(conns.open(), 2);
        assert_eq!(conns.idle(), 1);
    }
}
