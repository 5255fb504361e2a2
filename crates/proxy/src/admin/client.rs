//! A small HTTP/1.1 client for the admin listener, used by
//! `mannerly hosts list|show|reset`.

use bytes::Bytes;
use http::{header, Method, Request};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// The admin listener's answer.
#[derive(Debug, Clone)]
pub struct AdminReply {
    /// HTTP status.
    pub status: u16,
    /// The body as text.
    pub body: String,
}

/// Sends one request to the admin listener at `addr` (`127.0.0.1:9128`,
/// with or without `http://`), with the Bearer `token` if given.
pub async fn call(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
) -> Result<AdminReply, String> {
    let authority = addr
        .trim()
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let method: Method = method.parse().map_err(|_| format!("bad method {method}"))?;
    let stream = TcpStream::connect(&authority).await.map_err(|e| {
        format!("admin listener at {authority}: {e} (is `mannerly run` up, and admin.listen set?)")
    })?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("admin listener at {authority}: {e}"))?;
    tokio::spawn(conn);
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, &authority)
        .header(header::ACCEPT, "application/json");
    if let Some(t) = token.filter(|t| !t.is_empty()) {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let req = req
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("request: {e}"))?;
    let resp = send
        .send_request(req)
        .await
        .map_err(|e| format!("admin listener at {authority}: {e}"))?;
    let status = resp.status().as_u16();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("reading the answer: {e}"))?
        .to_bytes();
    Ok(AdminReply {
        status,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}
