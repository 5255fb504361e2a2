//! The client's request body on its way to the origin. A body is read
//! before the request takes the host's turn, so a client that trickles its
//! body holds nothing of the host's (its slot, its place in line): whole
//! in memory up to [`IN_MEMORY`], past that into a spool file in the data
//! dir (unlinked at once, so nothing is left behind by a crash), up to
//! [`SPOOL_MAX`]; only what is past that streams while the turn is held.
//! Either way a silence longer than the idle
//! limit, or a body that is not valid HTTP framing, is the client's error
//! ([`ClientBodyError`]), answered 408 or 400 with `source: client`, never
//! blamed on the origin.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::io::{AsyncRead, AsyncSeekExt, AsyncWriteExt};
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

/// Bodies up to this size are kept in memory, whole, before the budget
/// step (and can be sent twice).
pub(crate) const IN_MEMORY: usize = 1 << 20;

/// Past [`IN_MEMORY`], a body is spooled to disk before the budget step up
/// to this size; the rest streams (a client that fast is no trickle).
pub(crate) const SPOOL_MAX: u64 = 64 << 20;

/// The request body, read ahead when small, and whether it can be sent
/// twice (a throttled read is sent again after the pause).
pub(crate) struct ClientBody {
    body: Option<ProxyBody>,
    resendable: bool,
    buffered: Option<Bytes>,
}

impl ClientBody {
    /// No body, as a GET has.
    pub(crate) fn empty() -> ClientBody {
        ClientBody {
            body: None,
            resendable: true,
            buffered: Some(Bytes::new()),
        }
    }

    /// Reads `body` before the turn: whole into memory when it fits in
    /// [`IN_MEMORY`], else spooled to a file in `data_dir/spool` up to
    /// [`SPOOL_MAX`], waiting at most `idle` between its frames.
    pub(crate) async fn read(
        body: Incoming,
        pace: Pace,
        received: Received,
        data_dir: &Path,
    ) -> Result<ClientBody, ClientBodyError> {
        if body.is_end_stream() {
            return Ok(ClientBody::empty());
        }
        let mut body = Idle::new(body, pace, received);
        let mut mem = BytesMut::new();
        let mut file: Option<tokio::fs::File> = None;
        let mut spooled = 0u64;
        let whole = loop {
            if spooled >= SPOOL_MAX {
                break false;
            }
            let Some(frame) = body.frame().await else {
                break true;
            };
            let Ok(data) = frame?.into_data() else {
                continue;
            };
            if file.is_none() && mem.len() + data.len() <= IN_MEMORY {
                mem.extend_from_slice(&data);
                continue;
            }
            let f = match file.as_mut() {
                Some(f) => f,
                None => file.insert(open_spool(&data_dir.join("spool"))?),
            };
            f.write_all(&data).await.map_err(spool_error)?;
            spooled += data.len() as u64;
        };
        // Without a spool file the body ended in memory: only spooled
        // bytes stop the loop before the end.
        let Some(mut f) = file else {
            return Ok(ClientBody {
                body: None,
                resendable: true,
                buffered: Some(mem.freeze()),
            });
        };
        f.flush().await.map_err(spool_error)?;
        f.seek(std::io::SeekFrom::Start(0))
            .await
            .map_err(spool_error)?;
        Ok(ClientBody {
            body: Some(boxed(Spooled {
                head: Some(mem.freeze()).filter(|b| !b.is_empty()),
                file: Some(f),
                rest: (!whole).then_some(body),
            })),
            resendable: false,
            buffered: None,
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

/// A spool file of its own in `dir` (created 0700 on first use), unlinked
/// at once: the open handle is all that keeps it.
fn open_spool(dir: &Path) -> Result<tokio::fs::File, ClientBodyError> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(spool_error)?;
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let path = dir.join(format!("body-{}-{n}", std::process::id()));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(spool_error)?;
    std::fs::remove_file(&path).map_err(spool_error)?;
    Ok(tokio::fs::File::from_std(f))
}

fn spool_error(e: std::io::Error) -> ClientBodyError {
    ClientBodyError::Spool(e.to_string())
}

/// A body read ahead: the part kept in memory, the spool file, and the
/// rest still coming from the client, in that order.
struct Spooled {
    head: Option<Bytes>,
    file: Option<tokio::fs::File>,
    rest: Option<Idle>,
}

/// How much of the spool file one frame carries.
const SPOOL_CHUNK: usize = 64 * 1024;

impl Body for Spooled {
    type Data = Bytes;
    type Error = ClientBodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ClientBodyError>>> {
        let this = &mut *self;
        if let Some(head) = this.head.take() {
            return Poll::Ready(Some(Ok(Frame::data(head))));
        }
        if let Some(f) = this.file.as_mut() {
            let mut buf = vec![0u8; SPOOL_CHUNK];
            let mut rb = tokio::io::ReadBuf::new(&mut buf);
            match Pin::new(f).poll_read(cx, &mut rb) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(spool_error(e)))),
                Poll::Ready(Ok(())) if rb.filled().is_empty() => this.file = None,
                Poll::Ready(Ok(())) => {
                    let n = rb.filled().len();
                    buf.truncate(n);
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from(buf)))));
                }
            }
        }
        match this.rest.as_mut() {
            Some(rest) => Pin::new(rest).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.head.is_none()
            && self.file.is_none()
            && self.rest.as_ref().is_none_or(|r| r.is_end_stream())
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
