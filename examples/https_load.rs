//! HTTPS load through a forward proxy (CONNECT, then TLS to the origin
//! inside the tunnel), or straight to the origin: the client of the `https`
//! path of `bench/peers.sh`.
//!
//!     cargo build --release --example https_load
//!     target/release/examples/https_load --url https://localhost:8443/page \
//!         --connect 127.0.0.1:8443 --cacert ca.pem [--proxy 127.0.0.1:3128] \
//!         [--requests 20000] [--connections 16] [--rate 30000]
//!
//! curl, the client before, spent more CPU per request than the proxies it
//! measured, on the CPU it shares with the origin in the pinned mode, so
//! the HTTPS rows measured curl. This client keeps `--connections`
//! keep-alive connections (each one tunnel and one TLS session), sends one
//! request at a time on each, reads every body whole, and prints one line:
//!
//!     requests seconds p50_ms p99_ms failed
//!
//! A request that fails, or is answered other than 200, counts as failed;
//! a connection that fails is opened again. Loopback only, by what it is
//! given; it runs on one thread, so `taskset` can place it.
//!
//! With `--rate`, request `i` is not sent before `i / rate` seconds from
//! the start (a schedule the connections share; a request behind it goes
//! at once): peers compared at one rate serve the same offered load, where
//! a closed loop runs each at its own pace and the faster one's loader
//! idles less, so waking it costs the faster peer less.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::Request;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

type Error = Box<dyn std::error::Error + Send + Sync>;

struct Args {
    url: hyper::Uri,
    connect: String,
    proxy: Option<String>,
    cacert: String,
    requests: usize,
    connections: usize,
    /// Requests a second offered, if paced.
    rate: Option<f64>,
}

/// A flag's number, or an error that names the flag.
fn number<T: std::str::FromStr>(flag: &str, v: String) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    v.parse().map_err(|e| format!("{flag} {v}: {e}"))
}

fn args() -> Result<Args, Error> {
    let mut url = None;
    let mut connect = None;
    let mut proxy = None;
    let mut cacert = None;
    let mut requests = 20_000;
    let mut connections = 16;
    let mut rate = None;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--url" => url = Some(value()?.parse::<hyper::Uri>()?),
            "--connect" => connect = Some(value()?),
            "--proxy" => proxy = Some(value()?),
            "--cacert" => cacert = Some(value()?),
            "--requests" => requests = number(&flag, value()?)?,
            "--connections" => connections = number(&flag, value()?)?,
            "--rate" => {
                let r: f64 = number(&flag, value()?)?;
                if !(r.is_finite() && r > 0.0) {
                    return Err(format!("--rate {r}: requests a second above 0").into());
                }
                rate = Some(r);
            }
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let url = url.ok_or("--url is required")?;
    if url.scheme_str() != Some("https") || url.host().is_none() {
        return Err(format!("--url {url}: an https URL with a host is required").into());
    }
    let connect = match connect {
        Some(c) => c,
        None => format!(
            "{}:{}",
            url.host().unwrap_or_default(),
            url.port_u16().unwrap_or(443)
        ),
    };
    Ok(Args {
        url,
        connect,
        proxy,
        cacert: cacert.ok_or("--cacert is required")?,
        requests,
        connections: connections.max(1),
        rate,
    })
}

/// One tunnel (if through a proxy) and TLS session, ready for requests.
async fn open(
    args: &Args,
    tls: &tokio_rustls::TlsConnector,
) -> Result<hyper::client::conn::http1::SendRequest<Empty<Bytes>>, Error> {
    let host = args.url.host().unwrap_or_default().to_owned();
    let port = args.url.port_u16().unwrap_or(443);
    let mut tcp = TcpStream::connect(args.proxy.as_deref().unwrap_or(&args.connect)).await?;
    tcp.set_nodelay(true)?;
    if args.proxy.is_some() {
        let ask = format!("CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n");
        tcp.write_all(ask.as_bytes()).await?;
        // The proxy answers the CONNECT with a head alone; read it byte by
        // byte so nothing of the TLS that follows is taken with it.
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut b = [0u8; 1];
            if tcp.read(&mut b).await? == 0 {
                return Err("the proxy closed the connection after CONNECT".into());
            }
            head.push(b[0]);
            if head.len() > 16 * 1024 {
                return Err("the proxy's answer to CONNECT has no end".into());
            }
        }
        let status = String::from_utf8_lossy(&head);
        if !status.starts_with("HTTP/1.1 200") && !status.starts_with("HTTP/1.0 200") {
            let line = status.lines().next().unwrap_or_default().to_owned();
            return Err(format!("CONNECT refused: {line}").into());
        }
    }
    let name = ServerName::try_from(host)?;
    let stream = tls.connect(name, tcp).await?;
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(send)
}

/// Sends requests on one connection at a time until none are left;
/// returns the latency of each in microseconds and the failures.
async fn worker(
    args: Arc<Args>,
    tls: tokio_rustls::TlsConnector,
    left: Arc<AtomicUsize>,
    start: tokio::time::Instant,
) -> (Vec<u32>, usize) {
    let mut took = Vec::new();
    let mut failed = 0;
    let authority = args
        .url
        .authority()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let path = args
        .url
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let mut conn = None;
    while let Ok(n) = left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
    {
        if let Some(rate) = args.rate {
            let i = (args.requests - n) as f64;
            tokio::time::sleep_until(start + std::time::Duration::from_secs_f64(i / rate)).await;
        }
        let t0 = Instant::now();
        let send = match &mut conn {
            Some(send) => send,
            None => match open(&args, &tls).await {
                Ok(send) => conn.insert(send),
                Err(e) => {
                    eprintln!("https_load: {e}");
                    failed += 1;
                    continue;
                }
            },
        };
        let req = Request::get(path.as_str())
            .header(hyper::header::HOST, authority.as_str())
            .body(Empty::new())
            .expect("a GET with a host is a valid request");
        let ok = match send.send_request(req).await {
            Ok(resp) => {
                let status = resp.status();
                resp.into_body().collect().await.is_ok() && status == hyper::StatusCode::OK
            }
            Err(_) => false,
        };
        if ok {
            took.push(u32::try_from(t0.elapsed().as_micros()).unwrap_or(u32::MAX));
        } else {
            failed += 1;
            conn = None;
        }
    }
    (took, failed)
}

fn main() -> Result<(), Error> {
    let args = Arc::new(args()?);
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(&args.cacert)? {
        roots.add(cert?)?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (mut took, failed, secs) = rt.block_on(async {
        let left = Arc::new(AtomicUsize::new(args.requests));
        let t0 = Instant::now();
        let start = tokio::time::Instant::now();
        let workers: Vec<_> = (0..args.connections)
            .map(|_| tokio::spawn(worker(args.clone(), tls.clone(), left.clone(), start)))
            .collect();
        let (mut took, mut failed) = (Vec::new(), 0);
        for w in workers {
            let (t, f) = w.await.unwrap_or_default();
            took.extend(t);
            failed += f;
        }
        (took, failed, t0.elapsed().as_secs_f64())
    });
    took.sort_unstable();
    let at = |q: f64| {
        let i = ((took.len() as f64 * q).ceil() as usize).clamp(1, took.len().max(1)) - 1;
        took.get(i).map_or(0.0, |us| f64::from(*us) / 1000.0)
    };
    println!(
        "{} {secs:.3} {:.2} {:.2} {failed}",
        took.len(),
        at(0.5),
        at(0.99)
    );
    Ok(())
}
