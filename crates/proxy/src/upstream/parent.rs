//! The parent proxy of `upstream.proxy` (a corporate egress proxy, a proxy
//! provider): plain HTTP targets go to it in absolute form with
//! `Proxy-Authorization`, HTTPS targets through a CONNECT tunnel with TLS to
//! the target inside. The guard still judges the target; the parent's own
//! address is allowed because the operator named it.
//!
//! The rules (NO_PROXY matching, whose answer a response is) are in
//! `mannerly_policy::parent`; this module only carries bytes.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::header::PROXY_AUTHORIZATION;
use http::{HeaderName, HeaderValue, Request};
use hyper_util::client::legacy::connect::{Connected, Connection};
use mannerly_policy::parent::{
    connect_refused_words, judge_parent_answer, NoProxy, ParentUrl, ParentVerdict,
};
use rustls::RootCertStore;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

use crate::config::{parent_settings, UpstreamConfig};
use crate::error::ConfigError;
use crate::error::ConnectError;
use crate::upstream::conns::{Conns, Tracked};
use crate::upstream::{connect_any, Guard};

/// Largest CONNECT answer head read from the parent.
const MAX_CONNECT_HEAD: usize = 16 * 1024;

/// The parent proxy and which targets it serves.
pub(crate) struct Parent {
    url: ParentUrl,
    /// `Basic …`, marked sensitive so that no header dump shows it.
    auth: Option<HeaderValue>,
    no_proxy: NoProxy,
    status_header: Option<HeaderName>,
    /// TLS to the parent itself, for `https://` parents.
    tls: Option<(tokio_rustls::TlsConnector, ServerName<'static>)>,
}

impl std::fmt::Debug for Parent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Parent({})", self.url)
    }
}

impl Parent {
    /// The parent of the `[upstream]` section, if one is set; `roots` are
    /// trusted for an `https://` parent's certificate.
    pub(crate) fn from_config(
        cfg: &UpstreamConfig,
        roots: &RootCertStore,
    ) -> Result<Option<Parent>, ConfigError> {
        let Some(s) = parent_settings(cfg)? else {
            return Ok(None);
        };
        let tls = s.tls_name.map(|name| {
            let mut tls = rustls::ClientConfig::builder()
                .with_root_certificates(roots.clone())
                .with_no_client_auth();
            // Absolute-form requests and CONNECT are HTTP/1.1 things.
            tls.alpn_protocols = vec![b"http/1.1".to_vec()];
            (tokio_rustls::TlsConnector::from(Arc::new(tls)), name)
        });
        Ok(Some(Parent {
            url: s.url,
            auth: s.auth,
            no_proxy: s.no_proxy,
            status_header: s.status_header,
            tls,
        }))
    }

    /// Whether `host:port` is reached through the parent (not in `no_proxy`).
    pub(crate) fn serves(&self, host: &str, port: u16) -> bool {
        !self
            .no_proxy
            .matches(host.trim_start_matches('[').trim_end_matches(']'), port)
    }

    /// The parent as logs may show it (password hidden).
    pub(crate) fn shown(&self) -> String {
        self.url.to_string()
    }

    /// Adds the parent's credentials to a plain-HTTP request it will carry.
    /// The client's own `Proxy-Authorization` (for mannerly) is gone by now
    /// with the other hop-by-hop headers.
    pub(crate) fn authorize<B>(&self, req: &mut Request<B>) {
        if let Some(auth) = &self.auth {
            req.headers_mut().insert(PROXY_AUTHORIZATION, auth.clone());
        }
    }

    /// Whose answer a response through the parent is.
    pub(crate) fn judge(&self, status: u16, headers: &http::HeaderMap) -> ParentVerdict {
        judge_parent_answer(status, headers, self.status_header.as_ref())
    }

    /// A connection for a request to `host:port`: to the parent, and with
    /// `tunnel` a CONNECT to the target through it. The target is judged by
    /// the guard first, so that the parent cannot reach what mannerly
    /// itself may not.
    pub(crate) async fn open(
        &self,
        guard: &Guard,
        conns: &Arc<Conns>,
        host: &str,
        port: u16,
        tunnel: bool,
        timeout: Duration,
    ) -> Result<Link, ConnectError> {
        guard.resolve(host, port).await?;
        let unreachable = |why: String| ConnectError::Parent {
            why: format!("the parent proxy {} is unreachable: {why}", self.url),
        };
        let addrs = guard
            .lookup(&self.url.host, self.url.port)
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        let stream = match connect_any(&self.url.host, &addrs, timeout).await {
            Ok(s) => s,
            Err(e @ ConnectError::ProxyBusy { .. }) => return Err(e),
            Err(e) => return Err(unreachable(e.to_string())),
        };
        let tracked = conns.track(stream);
        let mut io = match &self.tls {
            None => LinkIo::Tcp(tracked),
            Some((tls, name)) => {
                let handshake = tls.connect(name.clone(), tracked);
                match tokio::time::timeout(timeout, handshake).await {
                    Ok(Ok(s)) => LinkIo::Tls(Box::new(s)),
                    Ok(Err(e)) => return Err(unreachable(format!("TLS with the parent: {e}"))),
                    Err(_) => return Err(unreachable("TLS handshake timed out".into())),
                }
            }
        };
        if tunnel {
            let authority = mannerly_policy::parent::authority(host, port);
            let asked = self.connect(&mut io, &authority);
            match tokio::time::timeout(timeout, asked).await {
                Ok(r) => r?,
                Err(_) => {
                    return Err(ConnectError::Parent {
                        why: format!(
                            "the parent proxy {} did not answer CONNECT {authority} in time",
                            self.url
                        ),
                    })
                }
            }
        }
        Ok(Link {
            io,
            proxied: !tunnel,
        })
    }

    /// Asks the parent for a tunnel and reads its answer head.
    async fn connect(&self, io: &mut LinkIo, authority: &str) -> Result<(), ConnectError> {
        let fail = |why: String| ConnectError::Parent { why };
        let mut head = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n");
        if let Some(auth) = self.auth.as_ref().and_then(|a| a.to_str().ok()) {
            head.push_str("Proxy-Authorization: ");
            head.push_str(auth);
            head.push_str("\r\n");
        }
        head.push_str("\r\n");
        io.write_all(head.as_bytes())
            .await
            .map_err(|e| fail(format!("the parent proxy {} closed: {e}", self.url)))?;
        io.flush()
            .await
            .map_err(|e| fail(format!("the parent proxy {} closed: {e}", self.url)))?;
        let mut buf = Vec::with_capacity(1024);
        loop {
            let mut chunk = [0u8; 1024];
            let n = io
                .read(&mut chunk)
                .await
                .map_err(|e| fail(format!("reading the parent's CONNECT answer: {e}")))?;
            if n == 0 {
                return Err(fail(format!(
                    "the parent proxy {} closed the connection instead of answering CONNECT",
                    self.url
                )));
            }
            buf.extend_from_slice(&chunk[..n]);
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut resp = httparse::Response::new(&mut headers);
            match resp.parse(&buf) {
                Ok(httparse::Status::Complete(len)) => {
                    let code = resp.code.unwrap_or(0);
                    if !(200..300).contains(&code) {
                        return Err(fail(connect_refused_words(code, resp.reason.unwrap_or(""))));
                    }
                    // The tunnel is ours to speak first; bytes already
                    // here would be lost to the TLS handshake.
                    if len != buf.len() {
                        return Err(fail(
                            "the parent proxy sent data into the tunnel before it was used".into(),
                        ));
                    }
                    return Ok(());
                }
                Ok(httparse::Status::Partial) if buf.len() < MAX_CONNECT_HEAD => {}
                Ok(httparse::Status::Partial) => {
                    return Err(fail("the parent's CONNECT answer head is too large".into()))
                }
                Err(e) => {
                    return Err(fail(format!(
                        "the parent's CONNECT answer is not HTTP: {e}"
                    )))
                }
            }
        }
    }
}

/// A connection towards an origin: direct, or through the parent.
pub(crate) struct Link {
    io: LinkIo,
    /// Requests on it go in absolute form (plain HTTP through the parent).
    proxied: bool,
}

enum LinkIo {
    Tcp(Tracked),
    Tls(Box<tokio_rustls::client::TlsStream<Tracked>>),
}

impl Link {
    /// A direct connection to the origin.
    pub(crate) fn direct(stream: Tracked) -> Link {
        Link {
            io: LinkIo::Tcp(stream),
            proxied: false,
        }
    }
}

impl Connection for Link {
    fn connected(&self) -> Connected {
        let tcp = match &self.io {
            LinkIo::Tcp(t) => t,
            LinkIo::Tls(t) => t.get_ref().0,
        };
        tcp.connected().proxy(self.proxied)
    }
}

impl AsyncRead for Link {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Link {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

impl AsyncRead for LinkIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            LinkIo::Tcp(t) => Pin::new(t).poll_read(cx, buf),
            LinkIo::Tls(t) => Pin::new(t.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for LinkIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            LinkIo::Tcp(t) => Pin::new(t).poll_write(cx, buf),
            LinkIo::Tls(t) => Pin::new(t.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            LinkIo::Tcp(t) => Pin::new(t).poll_flush(cx),
            LinkIo::Tls(t) => Pin::new(t.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            LinkIo::Tcp(t) => Pin::new(t).poll_shutdown(cx),
            LinkIo::Tls(t) => Pin::new(t.as_mut()).poll_shutdown(cx),
        }
    }
}
