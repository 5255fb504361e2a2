//! Every request head of an HTTP/1 client connection gets the checks the
//! first one gets (`intake::check`): framing, size, header count, and the
//! time a client has to finish a head. [`Heads`] sits between the socket
//! and hyper and follows the message boundaries (Content-Length, chunked);
//! each head is handed to hyper only once it is complete and acceptable.
//!
//! A head it refuses is not answered from here, where hyper may still be
//! writing the previous response: it is replaced by a one-off request that
//! hyper parses and routes like any other, and the connection's service
//! answers it with the refusal ([`Refused::take`]), in order, with its
//! audit line, and closes the connection.

use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use http::Request;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::time::Sleep;

use crate::clients::intake::{check, BadHead, Check, Framing};

/// Path of the stand-in request for a refused head.
const STAND_IN_PATH: &str = "/.mannerly/refused-head";
/// Header carrying the connection's token on the stand-in request.
const TOKEN_HEADER: &str = "mannerly-refused-head";
/// Longest chunk-size or trailer line followed.
const MAX_CHUNK_LINE: usize = 4096;

/// The limits every head is held to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub(crate) max_bytes: usize,
    pub(crate) max_headers: usize,
    /// Time to complete a head once its first byte came.
    pub(crate) timeout: Duration,
}

/// The refusal waiting for its stand-in request, shared with the
/// connection's service.
#[derive(Clone)]
pub(crate) struct Refused {
    token: String,
    bad: Arc<Mutex<Option<BadHead>>>,
}

impl Refused {
    fn new() -> Refused {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(0x6d61_6e6e_6572_6c79);
        Refused {
            token: format!("{:016x}", h.finish()),
            bad: Arc::new(Mutex::new(None)),
        }
    }

    /// The refused head, when `req` is its stand-in.
    pub(crate) fn take<B>(&self, req: &Request<B>) -> Option<BadHead> {
        let ours = req.uri().path() == STAND_IN_PATH
            && req
                .headers()
                .get(TOKEN_HEADER)
                .is_some_and(|v| v.as_bytes() == self.token.as_bytes());
        if !ours {
            return None;
        }
        self.bad.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

#[derive(Debug)]
enum State {
    /// Gathering a head.
    Head,
    /// This many body bytes to pass.
    Body(u64),
    /// A chunked body.
    Chunked(Chunk),
    /// Nothing more is read after a refused head: its stand-in ends the
    /// connection once answered.
    Done { stand_in: bool },
}

impl State {
    /// What follows a head framed so.
    fn after_head(framing: Framing) -> State {
        match framing {
            Framing::None => State::Head,
            Framing::Length(n) => State::Body(n),
            Framing::Chunked => State::Chunked(Chunk::Size),
            // hyper hands the raw stream on after a CONNECT.
            Framing::Tunnel => State::Body(u64::MAX),
        }
    }
}

#[derive(Debug)]
enum Chunk {
    /// Reading a chunk-size line.
    Size,
    /// This many data bytes, then CRLF.
    Data(u64),
    /// The CRLF after a chunk's data.
    DataEnd,
    /// Trailer lines after the last chunk, until an empty one.
    Trailers,
}

/// A client stream whose heads are checked before hyper reads them.
pub(crate) struct Heads<S> {
    inner: S,
    limits: Limits,
    state: State,
    /// Bytes of the head being gathered (or chunk line being read).
    pending: BytesMut,
    /// Checked bytes for hyper.
    ready: BytesMut,
    timer: Option<Pin<Box<Sleep>>>,
    refused: Refused,
}

impl<S> Heads<S> {
    /// Wraps `inner`; `first` holds bytes already read from it.
    pub(crate) fn new(inner: S, first: BytesMut, limits: Limits) -> (Heads<S>, Refused) {
        let refused = Refused::new();
        let mut heads = Heads {
            inner,
            limits,
            state: State::Head,
            pending: BytesMut::new(),
            ready: BytesMut::new(),
            timer: None,
            refused: refused.clone(),
        };
        heads.feed(&first);
        (heads, refused)
    }

    /// Starts a head's clock at its first byte. Between requests nothing
    /// is timed here: a request still being answered must not lose its
    /// connection, and idle kept-alive connections are hyper's to close.
    fn arm(&mut self) {
        if self.timer.is_none() && !self.pending.is_empty() {
            self.timer = Some(Box::pin(tokio::time::sleep(self.limits.timeout)));
        }
    }

    /// Runs `bytes` through the framing state machine.
    fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            match &mut self.state {
                State::Done { .. } => return,
                State::Head => {
                    self.pending.extend_from_slice(bytes);
                    bytes = &[];
                    // The head's clock starts at its first byte: armed here
                    // only if it is not whole (`next_head` arms it when it
                    // stays partial), not made and dropped for every head
                    // that came in one read.
                    self.next_head();
                    if !matches!(self.state, State::Head) {
                        // The rest of what was gathered belongs to the body.
                        let rest = std::mem::take(&mut self.pending);
                        self.feed(&rest);
                    }
                }
                State::Body(n) => {
                    let (take, done) = take_counted(n, bytes.len());
                    self.ready.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if done {
                        self.head_next();
                    }
                }
                State::Chunked(_) => {
                    let used = self.chunked(bytes);
                    self.ready.extend_from_slice(&bytes[..used]);
                    bytes = &bytes[used..];
                }
            }
        }
    }

    /// How much of `bytes`, read straight into hyper's buffer with nothing
    /// gathered or waiting before them, hyper may have as it is: whole
    /// acceptable heads and the bodies they frame. It stops at a head that
    /// is partial or refused; the caller feeds the rest (`feed`), which
    /// gathers or refuses it as before. Most reads are one whole head, and
    /// so are never copied here.
    fn pass(&mut self, bytes: &[u8]) -> usize {
        let mut i = 0;
        while i < bytes.len() {
            match &mut self.state {
                State::Head => {
                    let l = self.limits;
                    let Check::Complete { len, framing } =
                        check(&bytes[i..], l.max_bytes, l.max_headers)
                    else {
                        return i;
                    };
                    i += len;
                    self.timer = None;
                    self.state = State::after_head(framing);
                }
                State::Body(n) => {
                    let (take, done) = take_counted(n, bytes.len() - i);
                    i += take;
                    if done {
                        self.head_next();
                    }
                }
                State::Chunked(_) => i += self.chunked(&bytes[i..]),
                State::Done { .. } => return i,
            }
        }
        i
    }

    /// Checks the gathered head; moves to its body when it is complete.
    fn next_head(&mut self) {
        let l = self.limits;
        match check(&self.pending, l.max_bytes, l.max_headers) {
            Check::Partial => self.arm(),
            Check::Complete { len, framing } => {
                let head = self.pending.split_to(len);
                self.ready.extend_from_slice(&head);
                self.timer = None;
                self.state = State::after_head(framing);
                if matches!(self.state, State::Head) && !self.pending.is_empty() {
                    self.next_head();
                }
            }
            Check::Bad(bad) => self.refuse(bad),
        }
    }

    fn head_next(&mut self) {
        self.state = State::Head;
        self.timer = None;
    }

    /// Follows a chunked body over `bytes`; returns how many belong to it
    /// (the rest starts the next head). A body that is not valid chunked
    /// coding is passed on as it is: hyper refuses it, and that error is
    /// the client's (`body::ClientBody`).
    fn chunked(&mut self, bytes: &[u8]) -> usize {
        let mut i = 0;
        while i < bytes.len() {
            let State::Chunked(c) = &mut self.state else {
                return i;
            };
            match c {
                Chunk::Data(n) => {
                    let (take, done) = take_counted(n, bytes.len() - i);
                    i += take;
                    if done {
                        *c = Chunk::DataEnd;
                    }
                }
                Chunk::Size | Chunk::DataEnd | Chunk::Trailers => {
                    let b = bytes[i];
                    i += 1;
                    if b != b'\n' {
                        if self.pending.len() >= MAX_CHUNK_LINE {
                            self.give_up();
                            return bytes.len();
                        }
                        self.pending.extend_from_slice(&[b]);
                        continue;
                    }
                    let line = std::mem::take(&mut self.pending);
                    let line = line.strip_suffix(b"\r").unwrap_or(&line);
                    match c {
                        Chunk::DataEnd if line.is_empty() => *c = Chunk::Size,
                        Chunk::Size => match chunk_size(line) {
                            Some(0) => *c = Chunk::Trailers,
                            Some(n) => *c = Chunk::Data(n),
                            None => {
                                self.give_up();
                                return bytes.len();
                            }
                        },
                        Chunk::Trailers if line.is_empty() => {
                            self.head_next();
                            return i;
                        }
                        Chunk::Trailers => {}
                        _ => {
                            self.give_up();
                            return bytes.len();
                        }
                    }
                }
            }
        }
        i
    }

    /// A body we cannot follow: pass everything through from here and let
    /// hyper's parser end the connection.
    fn give_up(&mut self) {
        self.state = State::Body(u64::MAX);
        self.pending.clear();
    }

    /// Replaces the refused head by its stand-in and stops reading.
    fn refuse(&mut self, bad: BadHead) {
        *self.refused.bad.lock().unwrap_or_else(|p| p.into_inner()) = Some(bad);
        let stand_in = format!(
            "GET {STAND_IN_PATH} HTTP/1.1\r\nhost: mannerly\r\n{TOKEN_HEADER}: {}\r\nconnection: close\r\n\r\n",
            self.refused.token
        );
        self.ready.extend_from_slice(stand_in.as_bytes());
        self.pending.clear();
        self.timer = None;
        self.state = State::Done { stand_in: true };
    }
}

/// Takes what it can of `available` bytes off a run of `left` (a body's
/// length, a chunk's data): how many, and whether the run is used up.
fn take_counted(left: &mut u64, available: usize) -> (usize, bool) {
    let take = usize::try_from(*left).unwrap_or(usize::MAX).min(available);
    *left -= take as u64;
    (take, *left == 0)
}

fn chunk_size(line: &[u8]) -> Option<u64> {
    let hex = line.split(|b| *b == b';').next()?.trim_ascii();
    if hex.is_empty() || hex.len() > 15 || !hex.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
}

impl<S: AsyncRead + Unpin> Heads<S> {
    /// Reads into hyper's buffer, with nothing gathered before, and keeps
    /// there what `pass` lets through; the rest is fed as bytes read into
    /// a buffer of ours would be. `None`: nothing for hyper yet, so read
    /// again. No head's clock runs here: one is armed only while part of a
    /// head is gathered.
    fn read_in_place(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Option<Poll<io::Result<()>>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {}
            other => return Some(other),
        }
        let got = buf.filled().len() - before;
        if got == 0 {
            // The client closed.
            return Some(Poll::Ready(Ok(())));
        }
        let passed = self.pass(&buf.filled()[before..]);
        if passed < got {
            self.feed(&buf.filled()[before + passed..]);
            buf.set_filled(before + passed);
        }
        (passed > 0).then_some(Poll::Ready(Ok(())))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Heads<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if !this.ready.is_empty() {
                let n = this.ready.len().min(buf.remaining());
                buf.put_slice(&this.ready[..n]);
                this.ready.advance(n);
                return Poll::Ready(Ok(()));
            }
            match this.state {
                // An end of stream now would make hyper drop the stand-in it
                // has buffered but not yet answered; its answer closes the
                // connection instead.
                State::Done { stand_in: true } => return Poll::Pending,
                State::Done { stand_in: false } => return Poll::Ready(Ok(())),
                _ => {}
            }
            if this.pending.is_empty() && buf.remaining() > 0 {
                match this.read_in_place(cx, buf) {
                    Some(done) => return done,
                    None => continue,
                }
            }
            // Left uninitialised: a zeroed one cost a memset of its whole
            // size on every read, most of which find one short head or
            // nothing at all.
            let mut chunk = [const { MaybeUninit::<u8>::uninit() }; 8192];
            let mut rb = ReadBuf::uninit(&mut chunk);
            match Pin::new(&mut this.inner).poll_read(cx, &mut rb) {
                Poll::Ready(Ok(())) if rb.filled().is_empty() => {
                    // The client closed; a head it did not finish is dropped.
                    return Poll::Ready(Ok(()));
                }
                Poll::Ready(Ok(())) => this.feed(rb.filled()),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    let expired = matches!(this.state, State::Head)
                        && this
                            .timer
                            .as_mut()
                            .is_some_and(|t| t.as_mut().poll(cx).is_ready());
                    if !expired {
                        return Poll::Pending;
                    }
                    let timeout = this.limits.timeout;
                    this.refuse(BadHead {
                        status: 408,
                        reason: format!("request head not complete within {timeout:?}"),
                        method: String::new(),
                        target: String::new(),
                    });
                }
            }
        }
    }
}

crate::clients::intake::write_through!(Heads);

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    const LIMITS: Limits = Limits {
        max_bytes: 1024,
        max_headers: 16,
        timeout: Duration::from_secs(10),
    };

    /// Everything `heads` passes on until it ends the stream or, after a
    /// refusal, waits for the stand-in's answer to close the connection.
    async fn drain<S: AsyncRead + Unpin>(heads: &mut Heads<S>) -> Vec<u8> {
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let read = tokio::time::timeout(Duration::from_secs(30), heads.read(&mut buf)).await;
            match read {
                Ok(Ok(0)) | Err(_) => return out,
                Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
                Ok(Err(e)) => panic!("read: {e}"),
            }
        }
    }

    async fn through(input: &[u8]) -> (String, Option<BadHead>) {
        let (mut h, refused) = Heads::new(input, BytesMut::new(), LIMITS);
        let out = drain(&mut h).await;
        let bad = refused.bad.lock().expect("lock").take();
        (String::from_utf8_lossy(&out).into_owned(), bad)
    }

    #[tokio::test(start_paused = true)]
    async fn good_requests_pass_unchanged_across_bodies() {
        let input = "POST http://a.test/ HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello\
            POST http://a.test/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: 1\r\n\r\n\
            GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n";
        let (out, bad) = through(input.as_bytes()).await;
        assert_eq!(out, input);
        assert_eq!(bad, None);
    }

    /// What hyper reads `window` bytes at a time from `h`, the connection's
    /// token written as `TOKEN`, and the refusal's status.
    async fn read_by<S: AsyncRead + Unpin>(
        mut h: Heads<S>,
        refused: Refused,
        window: usize,
    ) -> (String, Option<u16>) {
        let mut out = Vec::new();
        let mut buf = vec![0u8; window];
        loop {
            let read = tokio::time::timeout(Duration::from_secs(30), h.read(&mut buf)).await;
            match read {
                Ok(Ok(0)) | Err(_) => break,
                Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
                Ok(Err(e)) => panic!("read: {e}"),
            }
        }
        let out = String::from_utf8_lossy(&out).replace(&refused.token, "TOKEN");
        let bad = refused.bad.lock().expect("lock").take();
        (out, bad.map(|b| b.status))
    }

    // Whole heads are checked in hyper's own buffer and the rest gathered
    // here: wherever a read ends (inside a head, a body, a chunk line) and
    // however small hyper's buffer, hyper gets the bytes and the refusal
    // that gathering everything first gives.
    #[tokio::test(start_paused = true)]
    async fn heads_split_across_reads_pass_as_gathered() {
        let good = "POST http://a.test/ HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello\
            POST http://a.test/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: 1\r\n\r\n\
            GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n";
        let bad = format!(
            "GET http://a.test/1 HTTP/1.1\r\n\r\nGET http://a.test/2 HTTP/1.1\r\nX: {}\r\n\r\n",
            "a".repeat(1100)
        );
        // Both framings at once, the smuggler's head: refused whichever
        // read it ends in.
        let smuggled = "GET http://a.test/1 HTTP/1.1\r\n\r\nPOST http://a.test/2 HTTP/1.1\r\n\
            Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabcGET http://a.test/3 HTTP/1.1\r\n\r\n";
        for input in [good.as_bytes(), bad.as_bytes(), smuggled.as_bytes()] {
            let (h, refused) = Heads::new(&[][..], BytesMut::from(input), LIMITS);
            let gathered = read_by(h, refused, 4096).await;
            for window in [7, 64, 4096] {
                for at in 0..=input.len() {
                    let source = AsyncReadExt::chain(&input[..at], &input[at..]);
                    let (h, refused) = Heads::new(source, BytesMut::new(), LIMITS);
                    let split = read_by(h, refused, window).await;
                    assert_eq!(split, gathered, "split at {at}, window {window}");
                }
            }
        }
        let (h, refused) = Heads::new(smuggled.as_bytes(), BytesMut::new(), LIMITS);
        let (out, status) = read_by(h, refused, 4096).await;
        assert_eq!(status, Some(400));
        assert!(
            !out.contains("a.test/2") && !out.contains("a.test/3"),
            "{out}"
        );
        let (h, refused) = Heads::new(bad.as_bytes(), BytesMut::new(), LIMITS);
        let (out, status) = read_by(h, refused, 4096).await;
        assert_eq!(status, Some(431));
        assert!(
            out.starts_with("GET http://a.test/1 HTTP/1.1\r\n\r\nGET /.mannerly/refused-head"),
            "{out}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_bad_later_head_becomes_the_stand_in_and_reading_stops() {
        let first = "GET http://a.test/1 HTTP/1.1\r\nHost: a.test\r\n\r\n";
        let second = "POST http://a.test/2 HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc";
        let input = format!("{first}{second}GET http://a.test/3 HTTP/1.1\r\n\r\n");
        let (out, bad) = through(input.as_bytes()).await;
        assert!(out.starts_with(first));
        assert!(out[first.len()..].starts_with(&format!("GET {STAND_IN_PATH} HTTP/1.1\r\n")));
        assert!(
            !out.contains("a.test/2") && !out.contains("a.test/3"),
            "{out}"
        );
        let bad = bad.expect("refused");
        assert_eq!(bad.status, 400);
        assert_eq!(bad.target, "http://a.test/2");
    }

    #[tokio::test(start_paused = true)]
    async fn the_stand_in_is_only_recognised_with_the_connection_token() {
        let input = "GET http://a.test/ HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n";
        let (mut h, refused) = Heads::new(input.as_bytes(), BytesMut::new(), LIMITS);
        drain(&mut h).await;
        let forged = Request::get(STAND_IN_PATH)
            .header(TOKEN_HEADER, "0000000000000000")
            .body(())
            .expect("request");
        assert!(refused.take(&forged).is_none());
        let real = Request::get(STAND_IN_PATH)
            .header(TOKEN_HEADER, refused.token.as_str())
            .body(())
            .expect("request");
        assert_eq!(refused.take(&real).map(|b| b.status), Some(501));
        assert!(refused.take(&real).is_none(), "answered once");
    }

    #[tokio::test(start_paused = true)]
    async fn bytes_after_a_connect_head_are_the_tunnel_s() {
        let input =
            b"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n\x16\x03\x01\x00\xa5garbage";
        let (out, bad) = through(input).await;
        assert_eq!(
            out.as_bytes(),
            &String::from_utf8_lossy(input).into_owned().into_bytes()[..]
        );
        assert_eq!(bad, None);
    }

    #[tokio::test(start_paused = true)]
    async fn an_upgrade_header_does_not_stop_the_checks_of_later_heads() {
        let first =
            "GET http://a.test/ HTTP/1.1\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n";
        let big = format!(
            "GET http://a.test/ HTTP/1.1\r\nX: {}\r\n\r\n",
            "a".repeat(2000)
        );
        let (_, bad) = through(format!("{first}{big}").as_bytes()).await;
        assert_eq!(bad.map(|b| b.status), Some(431));
    }

    #[tokio::test(start_paused = true)]
    async fn an_oversize_second_head_is_431() {
        let first = "GET http://a.test/ HTTP/1.1\r\n\r\n";
        let big = format!(
            "GET http://a.test/ HTTP/1.1\r\nX: {}\r\n\r\n",
            "a".repeat(2000)
        );
        let (_, bad) = through(format!("{first}{big}").as_bytes()).await;
        assert_eq!(bad.map(|b| b.status), Some(431));
    }

    #[tokio::test(start_paused = true)]
    async fn a_head_not_finished_in_time_is_408_and_silence_between_requests_is_not_timed() {
        let (client, server) = tokio::io::duplex(4096);
        let (mut h, refused) = Heads::new(server, BytesMut::new(), LIMITS);
        let mut client = client;
        tokio::io::AsyncWriteExt::write_all(&mut client, b"GET http://a.test/ HTTP/1.1\r\nHo")
            .await
            .expect("write");
        let out = drain(&mut h).await;
        assert!(String::from_utf8_lossy(&out).contains(STAND_IN_PATH));
        assert_eq!(
            refused.bad.lock().expect("lock").take().map(|b| b.status),
            Some(408)
        );

        // Between requests nothing is timed: a request being answered keeps
        // its connection however long the budget holds it.
        let (_client, server) = tokio::io::duplex(4096);
        let (mut idle, refused) = Heads::new(server, BytesMut::new(), LIMITS);
        let mut buf = [0u8; 16];
        let read = tokio::time::timeout(Duration::from_secs(3600), idle.read(&mut buf)).await;
        assert!(read.is_err(), "still open after an hour of silence");
        assert!(refused.bad.lock().expect("lock").is_none());
    }
}
