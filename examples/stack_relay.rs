//! A reverse relay made of mannerly's stack and nothing else: the `stack`
//! peer of `bench/peers.sh` and `bench/callgrind.sh`. hyper-util's server
//! (HTTP/1.1, and h2 by ALPN over TLS) on a current-thread tokio runtime,
//! hyper-util's pooled client with hyper-rustls towards the origin, rustls
//! on both sides, mimalloc: the parts mannerly's serving thread is built
//! from, set up as mannerly sets them up, with no policy, no store and no
//! audit line. mannerly keeps origin connections in a pool of its own
//! over hyper's `client::conn` now (`upstream/pool.rs`, cheaper per
//! request); this relay keeps hyper-util's, the floor issue 52 defined.
//!
//!     cargo build --release --example stack_relay
//!     target/release/examples/stack_relay --listen 127.0.0.1:8080 \
//!         --origin http://127.0.0.1:8081 \
//!         [--tls-listen 127.0.0.1:8443 --cert origin.pem --key origin.key \
//!          --tls-origin https://localhost:8444 --cacert origin-ca.pem]
//!
//! Beside nginx as a relay (the floor in C), it says what forwarding costs
//! on the stack mannerly must use, so that mannerly's own work per request
//! (robots.txt, budget, store, audit line) is what is left of its CPU time
//! when this one's is taken off. Each request's path and query go to the
//! origin as they came; the answer streams back. Loopback only, by what it
//! is given.

use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::combinators::BoxBody;
use http_body_util::BodyExt;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode, Uri};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;

#[path = "../src/alloc.rs"]
mod alloc;

#[global_allocator]
static GLOBAL: alloc::Mimalloc = alloc::Mimalloc;

type Error = Box<dyn std::error::Error + Send + Sync>;
type Body = BoxBody<Bytes, hyper::Error>;
type Upstream = Client<HttpsConnector<HttpConnector>, Incoming>;

#[derive(Default)]
struct Args {
    listen: Option<SocketAddr>,
    origin: Option<Uri>,
    tls_listen: Option<SocketAddr>,
    cert: Option<String>,
    key: Option<String>,
    tls_origin: Option<Uri>,
    cacert: Option<String>,
}

fn args() -> Result<Args, Error> {
    let mut a = Args::default();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--listen" => a.listen = Some(value.parse()?),
            "--origin" => a.origin = Some(value.parse()?),
            "--tls-listen" => a.tls_listen = Some(value.parse()?),
            "--cert" => a.cert = Some(value),
            "--key" => a.key = Some(value),
            "--tls-origin" => a.tls_origin = Some(value.parse()?),
            "--cacert" => a.cacert = Some(value),
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    if a.listen.is_some() != a.origin.is_some() {
        return Err("--listen and --origin go together".into());
    }
    let tls = [
        a.tls_listen.is_some(),
        a.cert.is_some(),
        a.key.is_some(),
        a.tls_origin.is_some(),
        a.cacert.is_some(),
    ];
    if tls.iter().any(|&t| t) && !tls.iter().all(|&t| t) {
        return Err("--tls-listen, --cert, --key, --tls-origin and --cacert go together".into());
    }
    if a.listen.is_none() && a.tls_listen.is_none() {
        return Err("--listen or --tls-listen is required".into());
    }
    Ok(a)
}

/// The client towards the origins, configured as mannerly's
/// (`crates/proxy/src/upstream.rs`): ALPN h2 and http/1.1, a pool per
/// host, hyper's timer.
fn upstream(cacert: Option<&str>) -> Result<Upstream, Error> {
    let mut roots = rustls::RootCertStore::empty();
    if let Some(path) = cacert {
        for cert in CertificateDer::pem_file_iter(path)? {
            roots.add(cert?)?;
        }
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let connector = HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .pool_max_idle_per_host(32)
        .build(connector))
}

/// `req` sent on to `origin` with its own path and query.
async fn relay(
    client: Upstream,
    origin: Uri,
    req: Request<Incoming>,
) -> Result<Response<Body>, hyper::Error> {
    let (mut parts, body) = req.into_parts();
    let mut to = origin.into_parts();
    to.path_and_query = parts.uri.path_and_query().cloned();
    let Ok(uri) = Uri::from_parts(to) else {
        return Ok(plain(
            StatusCode::BAD_REQUEST,
            "a target the relay cannot join",
        ));
    };
    parts.uri = uri;
    // The client's version is not the origin's: the pool speaks what ALPN
    // chose (and refuses an h2 request on an HTTP/1.1 connection).
    parts.version = hyper::Version::HTTP_11;
    parts.headers.remove(hyper::header::HOST);
    match client.request(Request::from_parts(parts, body)).await {
        Ok(resp) => Ok(resp.map(|b| b.boxed())),
        Err(e) => Ok(plain(StatusCode::BAD_GATEWAY, &format!("origin: {e}"))),
    }
}

fn plain(status: StatusCode, why: &str) -> Response<Body> {
    let body = http_body_util::Full::new(Bytes::from(why.to_owned()))
        .map_err(|never| match never {})
        .boxed();
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    resp
}

/// Serves every connection `listener` accepts, through TLS when `tls` is
/// given.
async fn serve(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    client: Upstream,
    origin: Uri,
) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            // Out of descriptors, say: spinning on accept would be CPU time
            // counted against the relay.
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let (client, origin, tls) = (client.clone(), origin.clone(), tls.clone());
        tokio::spawn(async move {
            let service =
                hyper::service::service_fn(move |req| relay(client.clone(), origin.clone(), req));
            let mut http = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            http.http1().timer(TokioTimer::new());
            let _ = match tls {
                Some(tls) => {
                    let Ok(stream) = tls.accept(tcp).await else {
                        return;
                    };
                    // As mannerly's tunnels: rustls makes a record of each
                    // buffer it is given, so head and body go as one.
                    http.http1().writev(false);
                    if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
                        http = http.http2_only();
                    }
                    http.serve_connection(TokioIo::new(stream), service).await
                }
                None => http.serve_connection(TokioIo::new(tcp), service).await,
            };
        });
    }
}

fn main() -> Result<(), Error> {
    let args = args()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let mut tasks = Vec::new();
        if let (Some(listen), Some(origin)) = (args.listen, args.origin.clone()) {
            let listener = TcpListener::bind(listen).await?;
            tasks.push(tokio::spawn(serve(listener, None, upstream(None)?, origin)));
        }
        if let Some(listen) = args.tls_listen {
            let (Some(cert), Some(key), Some(origin)) = (&args.cert, &args.key, &args.tls_origin)
            else {
                return Err::<(), Error>("the TLS flags go together".into());
            };
            let chain = CertificateDer::pem_file_iter(cert)?.collect::<Result<Vec<_>, _>>()?;
            let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, PrivateKeyDer::from_pem_file(key)?)?;
            config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
            let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
            let listener = TcpListener::bind(listen).await?;
            let client = upstream(args.cacert.as_deref())?;
            tasks.push(tokio::spawn(serve(
                listener,
                Some(acceptor),
                client,
                origin.clone(),
            )));
        }
        for t in tasks {
            t.await?;
        }
        Ok(())
    })
}
