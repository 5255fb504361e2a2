//! Benchmark origin for conditional requests: 500 distinct pages
//! `/page/0` … `/page/499`, 4–64 KiB each, with `ETag` and `Last-Modified`,
//! answering `If-None-Match` / `If-Modified-Since` with 304. `/robots.txt` is
//! 404. It counts every byte it writes to its sockets (heads and bodies), so
//! the benchmark can compare what crossed the wire upstream of the proxy.
//!
//!     cargo run --release --example cache_origin -- 127.0.0.1:18090 127.0.0.1:18091
//!
//! The second address serves `GET /stats` (never counted):
//! `bytes=<n> responses=<n> not_modified=<n>`. Loopback only.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

const PAGES: usize = 500;
const LAST_MODIFIED: &str = "Tue, 01 Sep 2026 10:00:00 GMT";

#[derive(Default)]
struct Stats {
    bytes: AtomicU64,
    responses: AtomicU64,
    not_modified: AtomicU64,
}

/// Page `i`: a size spread over 4–64 KiB and content that differs per page
/// and per byte, so a mixed-up or torn copy cannot pass for the original.
fn page(i: usize) -> Bytes {
    let len = 4096 + (i * 7919) % (60 * 1024 + 1);
    let mut x = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let body: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b'a' + (x % 26) as u8
        })
        .collect();
    Bytes::from(body)
}

fn answer(req: &Request<Incoming>, pages: &[Bytes], stats: &Stats) -> Response<Full<Bytes>> {
    stats.responses.fetch_add(1, Ordering::Relaxed);
    let index = req
        .uri()
        .path()
        .strip_prefix("/page/")
        .and_then(|n| n.parse::<usize>().ok())
        .filter(|n| *n < PAGES);
    let Some(i) = index else {
        let mut r = Response::new(Full::new(Bytes::from_static(b"not found\n")));
        *r.status_mut() = StatusCode::NOT_FOUND;
        return r;
    };
    let etag = format!("\"page-{i}-v1\"");
    let header = |name| {
        req.headers()
            .get(name)
            .and_then(|v: &hyper::header::HeaderValue| v.to_str().ok())
    };
    let unchanged = match header(hyper::header::IF_NONE_MATCH) {
        Some(tags) => tags.split(',').any(|t| t.trim() == etag),
        None => header(hyper::header::IF_MODIFIED_SINCE) == Some(LAST_MODIFIED),
    };
    let mut r = if unchanged {
        stats.not_modified.fetch_add(1, Ordering::Relaxed);
        let mut r = Response::new(Full::new(Bytes::new()));
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        Response::new(Full::new(pages[i].clone()))
    };
    let h = r.headers_mut();
    h.insert(hyper::header::CONTENT_TYPE, "text/plain".parse().unwrap());
    h.insert(hyper::header::CACHE_CONTROL, "max-age=0".parse().unwrap());
    h.insert(hyper::header::LAST_MODIFIED, LAST_MODIFIED.parse().unwrap());
    if let Ok(v) = etag.parse() {
        h.insert(hyper::header::ETAG, v);
    }
    r
}

/// A socket that adds every byte written to a counter.
struct Counted {
    inner: TcpStream,
    stats: Arc<Stats>,
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &polled {
            self.stats.bytes.fetch_add(*n as u64, Ordering::Relaxed);
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

fn loopback(arg: Option<String>, default: &str) -> Result<SocketAddr, String> {
    let arg = arg.unwrap_or_else(|| default.to_string());
    let addr: SocketAddr = arg
        .parse()
        .map_err(|e| format!("cache_origin: bad address {arg:?}: {e}"))?;
    if !addr.ip().is_loopback() {
        return Err(format!(
            "cache_origin: refusing non-loopback address {addr}"
        ));
    }
    Ok(addr)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr = loopback(args.next(), "127.0.0.1:18090")?;
    let stats_addr = loopback(args.next(), "127.0.0.1:18091")?;
    let pages: Arc<Vec<Bytes>> = Arc::new((0..PAGES).map(page).collect());
    let stats = Arc::new(Stats::default());
    let listener = TcpListener::bind(addr).await?;
    let stats_listener = TcpListener::bind(stats_addr).await?;
    eprintln!("cache_origin listening on http://{addr} ({PAGES} pages, 4-64 KiB); stats on http://{stats_addr}/stats");

    let s = stats.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = stats_listener.accept().await else {
                continue;
            };
            let s = s.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |_req: Request<Incoming>| {
                    let line = format!(
                        "bytes={} responses={} not_modified={}\n",
                        s.bytes.load(Ordering::Relaxed),
                        s.responses.load(Ordering::Relaxed),
                        s.not_modified.load(Ordering::Relaxed)
                    );
                    async move { Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(line)))) }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });

    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("cache_origin: accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let (pages, stats) = (pages.clone(), stats.clone());
        tokio::spawn(async move {
            let io = Counted {
                inner: stream,
                stats: stats.clone(),
            };
            let svc = service_fn(move |req: Request<Incoming>| {
                let resp = answer(&req, &pages, &stats);
                async move { Ok::<_, Infallible>(resp) }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(io), svc)
                .await;
        });
    }
}
