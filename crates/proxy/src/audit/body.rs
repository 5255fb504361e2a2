//! The wrapper that counts the bytes of an answer, enforces the idle
//! timeout and writes the request's audit line exactly once, when the body
//! ends or is dropped. The end of the body (its last frame, or the end of a
//! chunked body) is held back until the line has been written, so no client
//! has a complete answer whose line could still be lost.
//!
//! Before hyper sees an answer, [`read_ahead`] polls its body once: an
//! answer whose whole body is already at hand (a page from the store, a
//! small page from the origin) then ends there, its line is written with
//! the others of the runtime's turn (`soon.rs`), and hyper gets the head
//! and the whole body at once, one `write` to the client. A head with no
//! body to hold back waits for its line at its [`gate`]; the connection
//! code awaits both through [`line_written`].

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use mannerly_policy::AuditRecord;
use tokio::time::Sleep;

use super::{AuditSink, Committer, Written};
use crate::body::{boxed, empty, BoxError, ProxyBody};

#[derive(Debug, thiserror::Error)]
#[error("no body data from the origin for {0:?}")]
struct IdleTimeout(Duration);

/// Wraps a response body: counts the bytes passed to the client and sends
/// the audit record when the body is done, failed or dropped.
pub(crate) struct AuditedBody {
    inner: ProxyBody,
    record: Option<Box<AuditRecord>>,
    sink: AuditSink,
    bytes: u64,
    idle: Option<Duration>,
    sleep: Option<Pin<Box<Sleep>>>,
    on_finish: Option<FinishHook>,
    /// The end of the body, held until its line is written.
    held: Option<(Option<Frame<Bytes>>, Written)>,
    ahead: Ahead,
}

/// What an [`AuditedBody`] and [`read_ahead`] share, in the response's
/// extensions until the read.
#[derive(Clone, Default)]
pub(crate) struct Ahead(Arc<AheadState>);

#[derive(Default)]
struct AheadState {
    /// The body is being polled ahead of hyper: a line completed now may
    /// wait for the end of the turn.
    reading: AtomicBool,
    /// The body's end is held until its line (queued soon) is written.
    held: AtomicBool,
}

/// Takes over sending the audit record when the body is done, for a line
/// that can only be completed later (whether a stored copy was written).
/// The end of the body waits until the committer has sent it.
pub(crate) type FinishHook = Box<dyn FnOnce(Box<AuditRecord>, Committer) + Send + Sync>;

#[derive(Debug, thiserror::Error)]
#[error("the audit log cannot be written, so the answer is not completed")]
struct AuditFailed;

impl AuditedBody {
    /// `idle`: the longest silence allowed between two frames.
    pub(crate) fn new(
        inner: ProxyBody,
        record: impl Into<Box<AuditRecord>>,
        sink: AuditSink,
        idle: Option<Duration>,
    ) -> Self {
        AuditedBody {
            inner,
            record: Some(record.into()),
            sink,
            bytes: 0,
            idle,
            sleep: None,
            on_finish: None,
            held: None,
            ahead: Ahead::default(),
        }
    }

    /// The response with this body. A body that is already over (HEAD,
    /// 304, empty) is never polled, so its line is written now and the
    /// head waits for it instead.
    pub(crate) fn respond(mut self, parts: http::response::Parts) -> http::Response<ProxyBody> {
        if self.inner.is_end_stream() {
            let written = self.finish_committed(None, true);
            let mut resp = http::Response::from_parts(parts, boxed(self));
            if let Some(w) = written {
                gate(&mut resp, w);
            }
            return resp;
        }
        let mut parts = parts;
        parts.extensions.insert(self.ahead.clone());
        http::Response::from_parts(parts, boxed(self))
    }

    /// Hands the finished record to `hook` instead of sending it.
    pub(crate) fn on_finish(mut self, hook: FinishHook) -> Self {
        self.on_finish = Some(hook);
        self
    }

    /// Completes the record and sends it with an acknowledgement; `soon`
    /// only where the answer waits for the line before hyper sees it.
    fn finish_committed(&mut self, failure: Option<String>, soon: bool) -> Option<Written> {
        let rec = self.complete(failure)?;
        let (committer, written) = self.sink.committer(soon);
        match self.on_finish.take() {
            Some(hook) => hook(rec, committer),
            None => committer.send(rec),
        }
        Some(written)
    }

    fn complete(&mut self, failure: Option<String>) -> Option<Box<AuditRecord>> {
        let mut rec = self.record.take()?;
        rec.bytes = Some(self.bytes);
        if let Some(why) = failure {
            rec.reason = Some(match rec.reason.take() {
                Some(r) => format!("{r}; {why}"),
                None => why,
            });
        }
        Some(rec)
    }

    /// The held end of the body, once its line is written. Polled at once
    /// when the end is first held: the line is usually written by then
    /// (the completing task writes it), and answering Pending would make
    /// hyper flush the head alone, one more write and TCP segment per
    /// response.
    fn poll_held(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let Some((_, written)) = &mut self.held else {
            return Poll::Ready(None);
        };
        let ok = std::task::ready!(Pin::new(written).poll(cx));
        let frame = self.held.take().and_then(|(f, _)| f);
        if !ok {
            tracing::error!("audit line not written; answer cut short");
            return Poll::Ready(Some(Err(Box::new(AuditFailed))));
        }
        Poll::Ready(frame.map(Ok))
    }

    /// Sends the record without waiting: nothing more reaches the client.
    fn finish(&mut self, failure: Option<String>) {
        if let Some(rec) = self.complete(failure) {
            let (committer, _) = self.sink.committer(false);
            match self.on_finish.take() {
                Some(hook) => hook(rec, committer),
                None => committer.send(rec),
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
        if this.held.is_some() {
            return this.poll_held(cx);
        }
        if this.record.is_none() && this.on_finish.is_none() && this.inner.is_end_stream() {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.bytes += data.len() as u64;
                }
                this.sleep = None;
                // hyper stops polling a body that says it has ended, so the
                // last frame of a sized body is where its line is written.
                if this.inner.is_end_stream() {
                    if let Some(w) = this.finish_committed(None, this.ahead.hold()) {
                        this.held = Some((Some(frame), w));
                        return this.poll_held(cx);
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.finish(Some(format!("body failed after {} bytes: {e}", this.bytes)));
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => {
                if let Some(w) = this.finish_committed(None, this.ahead.hold()) {
                    this.held = Some((None, w));
                    return this.poll_held(cx);
                }
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
        self.held.is_none() && self.record.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        match &self.held {
            Some((Some(frame), _)) => with_frame(self.inner.size_hint(), frame),
            _ => self.inner.size_hint(),
        }
    }
}

impl Drop for AuditedBody {
    fn drop(&mut self) {
        if let Some((Some(_), _)) = &self.held {
            // Dropped while its end was held: the line is on its way, but
            // the client did not get the whole answer.
            return;
        }
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

impl Ahead {
    /// Whether a line completed now may be written soon; if so, the body's
    /// end is marked held for [`read_ahead`].
    fn hold(&self) -> bool {
        let reading = self.0.reading.load(Ordering::Relaxed);
        if reading {
            self.0.held.store(true, Ordering::Relaxed);
        }
        reading
    }
}

/// A line an answer's head must wait for (refusals, bodiless answers), kept
/// in the response's extensions until the connection code awaits it.
#[derive(Clone)]
pub(crate) struct LineGate(Arc<Mutex<Option<Written>>>);

/// Makes `resp` wait for `written` before it is sent.
pub(crate) fn gate<B>(resp: &mut http::Response<B>, written: Written) {
    resp.extensions_mut()
        .insert(LineGate(Arc::new(Mutex::new(Some(written)))));
}

/// Waits for the line `resp` records, if it has one to wait for. If the
/// line could not be written the answer becomes a 503: nothing is answered
/// without its line.
pub(crate) async fn line_written(resp: &mut http::Response<ProxyBody>) {
    let pending = resp
        .extensions_mut()
        .remove::<LineGate>()
        .and_then(|g| g.0.lock().ok().and_then(|mut w| w.take()));
    if let Some(w) = pending {
        if !w.await {
            *resp = crate::answer::failure::audit_unwritable().into_response("");
            return;
        }
    }
    if let Some(ahead) = resp.extensions_mut().remove::<Ahead>() {
        read_ahead(resp, ahead).await;
    }
}

/// Polls the body of `resp` once before hyper does. If that was its end
/// (held until its line is written with the others of this turn), waits
/// for the line, so hyper writes the head and the whole body at once; a
/// line that could not be written makes the answer a 503, as for a gated
/// head. Any frame read is put back in front of the rest of the body.
pub(crate) async fn read_ahead(resp: &mut http::Response<ProxyBody>, ahead: Ahead) {
    use http_body_util::BodyExt;
    let body = resp.body_mut();
    ahead.0.reading.store(true, Ordering::Relaxed);
    let first = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *body).poll_frame(cx))).await;
    ahead.0.reading.store(false, Ordering::Relaxed);
    let held = ahead.0.held.load(Ordering::Relaxed);
    let first = match first {
        Poll::Ready(f) => f,
        Poll::Pending if held => body.frame().await,
        Poll::Pending => return,
    };
    match first {
        None => {}
        Some(Err(_)) if held => {
            *resp = crate::answer::failure::audit_unwritable().into_response("");
        }
        Some(first) => {
            let rest = std::mem::replace(body, empty());
            *body = boxed(Prepended {
                first: Some(first),
                rest,
            });
        }
    }
}

/// A frame already read, then the rest of the body.
struct Prepended {
    first: Option<Result<Frame<Bytes>, BoxError>>,
    rest: ProxyBody,
}

impl Body for Prepended {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(f) = self.first.take() {
            return Poll::Ready(Some(f));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        match &self.first {
            Some(Ok(frame)) => with_frame(self.rest.size_hint(), frame),
            _ => self.rest.size_hint(),
        }
    }
}

/// `hint` grown by the data of a frame read but not yet handed on.
fn with_frame(mut hint: SizeHint, frame: &Frame<Bytes>) -> SizeHint {
    let n = frame.data_ref().map_or(0, |d| d.len() as u64);
    // Upper first: set_lower asserts lower <= upper, and a body that has
    // ended says upper 0.
    if let Some(u) = hint.upper() {
        hint.set_upper(u + n);
    }
    hint.set_lower(hint.lower() + n);
    hint
}

use std::future::Future as _;

#[cfg(test)]
mod tests {
    use std::task::{Context, Poll};

    use http_body::Body;
    use mannerly_policy::AuditRecord;

    use super::AuditedBody;
    use crate::body::full;
    use crate::config::Config;

    /// A sized body's last frame goes out in the same poll once its line
    /// is written (a file target writes it on the polling thread): held
    /// back, hyper would flush the head alone first, an extra write and
    /// TCP segment per answer.
    #[test]
    fn the_last_frame_is_not_held_once_its_line_is_written() {
        let dir = tempfile::tempdir().expect("temp dir");
        let cfg = Config {
            data_dir: dir.path().to_path_buf(),
            ..Config::default()
        }
        .validate()
        .expect("valid config");
        let (sink, writer) = crate::audit::open(&cfg).expect("audit");
        let rec = AuditRecord {
            id: "one".into(),
            ..AuditRecord::default()
        };
        let mut body = AuditedBody::new(full("page"), rec, sink.clone(), None);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let first = std::pin::Pin::new(&mut body).poll_frame(&mut cx);
        let Poll::Ready(Some(Ok(frame))) = first else {
            panic!("the last frame was held: {first:?}");
        };
        assert_eq!(frame.into_data().ok().as_deref(), Some(&b"page"[..]));
        assert!(body.is_end_stream());
        drop(body);
        drop(sink);
        assert!(writer.close().expect("close") >= 1);
        let log = std::fs::read_to_string(dir.path().join("audit.jsonl")).expect("log");
        assert!(log.contains(r#""id":"one""#), "{log}");
    }

    /// A whole answer is read ahead of hyper: its line is in the file once
    /// `line_written` returns, and hyper then gets the whole body in one
    /// frame that ends it.
    #[tokio::test]
    async fn a_whole_answer_reaches_hyper_with_its_line_written() {
        let dir = tempfile::tempdir().expect("temp dir");
        let cfg = Config {
            data_dir: dir.path().to_path_buf(),
            ..Config::default()
        }
        .validate()
        .expect("valid config");
        let (sink, writer) = crate::audit::open(&cfg).expect("audit");
        let mut answers = Vec::new();
        for id in ["first", "second"] {
            let rec = AuditRecord {
                id: id.into(),
                ..AuditRecord::default()
            };
            let (parts, ()) = http::Response::new(()).into_parts();
            answers.push(AuditedBody::new(full(id), rec, sink.clone(), None).respond(parts));
        }
        let mut b = answers.pop().expect("second answer");
        let mut a = answers.pop().expect("first answer");
        tokio::join!(
            crate::audit::line_written(&mut a),
            crate::audit::line_written(&mut b)
        );
        let log = std::fs::read_to_string(dir.path().join("audit.jsonl")).expect("log");
        assert!(log.contains(r#""id":"first""#), "{log}");
        assert!(log.contains(r#""id":"second""#), "{log}");
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let body = a.body_mut();
        let Poll::Ready(Some(Ok(frame))) = std::pin::Pin::new(&mut *body).poll_frame(&mut cx)
        else {
            panic!("the body read ahead was not handed on whole");
        };
        assert_eq!(frame.into_data().ok().as_deref(), Some(&b"first"[..]));
        assert!(body.is_end_stream());
        drop((a, b, sink));
        assert!(writer.close().expect("close") >= 2);
    }
}
