//! Benchmark origin: a tiny HTTP/1.1 server that answers every path with the
//! same 1 KiB body, and `/robots.txt` with 404 (so a polite proxy's robots.txt
//! step allows everything). Used by `bench/forwarding.sh`.
//!
//!     cargo run --release --example bench_origin -- 127.0.0.1:18080
//!
//! Only loopback addresses are accepted: this is a load target, not a server.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

const BODY_LEN: usize = 1024;

async fn answer(req: Request<Incoming>, page: Bytes) -> Result<Response<Full<Bytes>>, Infallible> {
    let mut resp = if req.uri().path() == "/robots.txt" {
        let mut r = Response::new(Full::new(Bytes::from_static(b"not found\n")));
        *r.status_mut() = StatusCode::NOT_FOUND;
        r
    } else {
        Response::new(Full::new(page))
    };
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain"),
    );
    Ok(resp)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arg = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:18080".to_string());
    let addr: SocketAddr = arg
        .parse()
        .map_err(|e| format!("bench_origin: bad address {arg:?}: {e}"))?;
    if !addr.ip().is_loopback() {
        return Err(format!("bench_origin: refusing non-loopback address {addr}").into());
    }
    let listener = TcpListener::bind(addr).await?;
    let page = Bytes::from(vec![b'x'; BODY_LEN]);
    eprintln!(
        "bench_origin listening on http://{} ({BODY_LEN}-byte body; /robots.txt is 404)",
        listener.local_addr()?
    );
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                // Out of file descriptors and the like: back off, keep serving.
                eprintln!("bench_origin: accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let page = page.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| answer(req, page.clone()));
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}
