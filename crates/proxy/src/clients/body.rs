//! The client's request body on its way to the origin. A body small enough
//! is read whole before the request takes the host's turn, so a client that
//! trickles its body holds nothing of the host's (its slot, its place in
//! line); a larger one streams. Either way a silence longer than the idle
//! limit, or a body that is not valid HTTP framing, is the client's error
//! ([`ClientBodyError`]), answered 408 or 400 with `source: client`, never
//! blamed on the origin.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::time::{Instant, Sleep};

use crate::body::{boxed, full, BoxError, ProxyBody};
use crate::error::ClientBodyError;

/// Body bytes read from the client so far, shared with the body on its way
/// to the origin (for the line of a request the client abandons).
#[derive(Clone, Default, Debug)]
pub(crate) struct Received(Arc<AtomicU64>);

impl Received {
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    fn add(&self, n: usize) {
        self.0.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Bodies up to this size are read whole before the budget step.
pub(crate) const READ_AHEAD: u64 = 64 * 1024;

/// The request body, read ahead when small, and whether it can be sent
/// twice (a throttled read is sent again after the pause).
pub(crate) struct ClientBody {
    body: Option<ProxyBody>,
    resendable: bool,
    buffered: Option<Bytes>,
}

impl ClientBody {
    /// Reads `body` whole when it is known to be at most [`READ_AHEAD`]
    /// bytes, waiting at most `idle` between its frames.
    pub(crate) async fn read(
        body: Incoming,
        pace: Pace,
        received: Received,
    ) -> Result<ClientBody, ClientBodyError> {
        if body.is_end_stream() {
            return Ok(ClientBody {
                body: None,
                resendable: true,
                buffered: Some(Bytes::new()),
            });
        }
        let small = body.size_hint().upper().is_some_and(|n| n <= READ_AHEAD);
        if !small {
            return Ok(ClientBody {
                body: Some(boxed(Idle::new(body, pace, received.clone()))),
                resendable: false,
                buffered: None,
            });
        }
        let mut body = Idle::new(body, pace, received.clone());
        let mut buf = BytesMut::new();
        while let Some(frame) = body.frame().await {
            let frame = frame?;
            if let Ok(data) = frame.into_data() {
                buf.extend_from_slice(&data);
            }
        }
        Ok(ClientBody {
            body: None,
            resendable: true,
            buffered: Some(buf.freeze()),
        })
    }

    /// The body for one send.
    pub(crate) fn take(&mut self) -> ProxyBody {
        if let Some(b) = &self.buffered {
            return if b.is_empty() {
                crate::body::empty()
            } else {
                full(b.clone())
            };
        }
        self.body.take().unwrap_or_else(crate::body::empty)
    }

    /// Whether the body is gone once sent; which methods may be sent twice
    /// is the budget's rule (`may_retry`).
    pub(crate) fn resendable(&self) -> bool {
        self.resendable
    }
}

/// A client body with an idle limit between frames; its errors are the
/// client's.
struct Idle {
    inner: Incoming,
    pace: Pace,
    sleep: Option<Pin<Box<Sleep>>>,
    /// Fires when the body is behind its minimum rate.
    behind: Pin<Box<Sleep>>,
    received: Received,
}

/// How slow a client's body may come: the longest silence, and the
/// minimum average rate once the grace is over.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pace {
    pub idle: Duration,
    /// Bytes/s; 0: no minimum.
    pub min_rate: u64,
    pub grace: Duration,
    /// When the body began to be read.
    pub start: Instant,
}

impl Pace {
    /// When a body that has sent `got` bytes is behind the minimum rate:
    /// each `min_rate` bytes buy a second more (mod_reqtimeout's MinRate).
    fn behind_at(&self, got: u64) -> Option<Instant> {
        let earned = Duration::from_secs_f64(got as f64 / self.min_rate as f64);
        (self.min_rate > 0).then(|| self.start + self.grace + earned)
    }
}

impl Idle {
    fn new(inner: Incoming, pace: Pace, received: Received) -> Idle {
        let far = pace.start + Duration::from_secs(86_400 * 365);
        let behind = Box::pin(tokio::time::sleep_until(pace.behind_at(0).unwrap_or(far)));
        Idle {
            inner,
            pace,
            sleep: None,
            behind,
            received,
        }
    }
}

impl Body for Idle {
    type Data = Bytes;
    type Error = ClientBodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ClientBodyError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(r) => {
                this.sleep = None;
                if let Some(Ok(data)) = r.as_ref().map(|f| f.as_ref().map(Frame::data_ref)) {
                    this.received.add(data.map_or(0, Bytes::len));
                }
                Poll::Ready(r.map(|f| f.map_err(|e| ClientBodyError::Broken(e.to_string()))))
            }
            Poll::Pending => {
                let idle = this.pace.idle;
                let sleep = this
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
                if sleep.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Some(Err(ClientBodyError::Idle(idle))));
                }
                let got = this.received.get();
                if let Some(at) = this.pace.behind_at(got) {
                    if this.behind.deadline() != at {
                        this.behind.as_mut().reset(at);
                    }
                    if this.behind.as_mut().poll(cx).is_ready() {
                        let (rate, grace) = (this.pace.min_rate, this.pace.grace);
                        return Poll::Ready(Some(Err(ClientBodyError::TooSlow {
                            rate,
                            grace,
                            got,
                        })));
                    }
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

// `BoxError` errors keep their type for `client_body_error`.
const _: fn(ClientBodyError) -> BoxError = |e| Box::new(e);
