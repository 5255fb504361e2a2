//! Body types: one boxed body for everything the proxy sends, and the
//! wrapper that counts bytes, enforces the idle timeout and writes the
//! request's audit line exactly once, when the body ends or is dropped.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use mannerly_policy::AuditRecord;
use tokio::time::Sleep;

use crate::audit::AuditSink;

/// Errors inside bodies.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body of every request and response the proxy sends.
pub(crate) type ProxyBody = BoxBody<Bytes, BoxError>;

/// A body with fixed contents.
pub(crate) fn full(bytes: impl Into<Bytes>) -> ProxyBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// An empty body.
pub(crate) fn empty() -> ProxyBody {
    Empty::new().map_err(|never| match never {}).boxed()
}

/// Boxes any body whose error converts to [`BoxError`].
pub(crate) fn boxed<B>(body: B) -> ProxyBody
where
    B: Body<Data = Bytes> + Send + Sync + 'static,
    B::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed()
}

#[derive(Debug, thiserror::Error)]
#[error("no body data from the origin for {0:?}")]
struct IdleTimeout(Duration);

/// Wraps a response body: counts the bytes passed to the client and sends
/// the audit record when the body is done, failed or dropped.
pub(crate) struct AuditedBody {
    inner: ProxyBody,
    record: Option<AuditRecord>,
    sink: AuditSink,
    bytes: u64,
    idle: Option<Duration>,
    sleep: Option<Pin<Box<Sleep>>>,
    on_finish: Option<FinishHook>,
}

/// Takes over sending the audit record when the body is done, for a line
/// that can only be completed later (whether a stored copy was written).
pub(crate) type FinishHook = Box<dyn FnOnce(AuditRecord, AuditSink) + Send + Sync>;

impl AuditedBody {
    /// `idle`: the longest silence allowed between two frames.
    pub(crate) fn new(
        inner: ProxyBody,
        record: AuditRecord,
        sink: AuditSink,
        idle: Option<Duration>,
    ) -> Self {
        AuditedBody {
            inner,
            record: Some(record),
            sink,
            bytes: 0,
            idle,
            sleep: None,
            on_finish: None,
        }
    }

    /// Hands the finished record to `hook` instead of sending it.
    pub(crate) fn on_finish(mut self, hook: FinishHook) -> Self {
        self.on_finish = Some(hook);
        self
    }

    fn finish(&mut self, failure: Option<String>) {
        if let Some(mut rec) = self.record.take() {
            rec.bytes = Some(self.bytes);
            if let Some(why) = failure {
                rec.reason = Some(match rec.reason.take() {
                    Some(r) => format!("{r}; {why}"),
                    None => why,
                });
            }
            match self.on_finish.take() {
                Some(hook) => hook(rec, self.sink.clone()),
                None => self.sink.send(rec),
            }
        }
    }
}

impl Body for AuditedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.bytes += data.len() as u64;
                }
                this.sleep = None;
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.finish(Some(format!("body failed after {} bytes: {e}", this.bytes)));
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => {
                this.finish(None);
                Poll::Ready(None)
            }
            Poll::Pending => {
                let Some(idle) = this.idle else {
                    return Poll::Pending;
                };
                let sleep = this
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
                if sleep.as_mut().poll(cx).is_ready() {
                    this.finish(Some(format!(
                        "origin idle for {idle:?} after {} bytes",
                        this.bytes
                    )));
                    return Poll::Ready(Some(Err(Box::new(IdleTimeout(idle)))));
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

impl Drop for AuditedBody {
    fn drop(&mut self) {
        if self.record.is_some() {
            let done = self.inner.is_end_stream();
            self.finish(if done {
                None
            } else {
                Some(format!("client went away after {} bytes", self.bytes))
            });
        }
    }
}

use std::future::Future as _;
