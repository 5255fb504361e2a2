//! Origins for the steps that send: a canned HTTP/1.1 server on
//! 127.0.0.1:0 (robots, upstream), and an origin's answer handed over by
//! hyper from an in-memory pipe (client body, learn), which needs no
//! socket and so runs on paused time.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

/// What an origin answers to a request for a path: the raw response, or
/// `None` to say nothing and keep the connection open.
type Answers = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// A raw HTTP/1.1 response closing its connection, with `Content-Length`.
pub(super) fn reply(status: &str, headers: &[(&str, &str)], body: &str) -> String {
    let mut head = format!("HTTP/1.1 {status}\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    let len = body.len();
    format!("{head}content-length: {len}\r\nconnection: close\r\n\r\n{body}")
}

/// A test origin on 127.0.0.1, with every request head it was sent.
pub(super) struct Origin {
    pub(super) addr: SocketAddr,
    heads: Arc<Mutex<Vec<String>>>,
}

impl Origin {
    /// Serves `answers` until the test ends.
    pub(super) async fn start(
        answers: impl Fn(&str) -> Option<String> + Send + Sync + 'static,
    ) -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let heads = Arc::new(Mutex::new(Vec::new()));
        let answers: Answers = Arc::new(answers);
        let seen = heads.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (answers, seen) = (answers.clone(), seen.clone());
                tokio::spawn(serve(stream, answers, seen));
            }
        });
        Origin { addr, heads }
    }

    /// The absolute URL of `path` on this origin.
    pub(super) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The request heads received so far, in order.
    pub(super) fn heads(&self) -> Vec<String> {
        self.heads.lock().expect("heads").clone()
    }
}

/// The origin's answer to one request, as hyper gives it to the pipeline:
/// `raw` is written to an in-memory connection that then stays open, so a
/// body shorter than its length stalls rather than ends.
pub(super) async fn answer(raw: &str) -> Response<Incoming> {
    let (near, far) = tokio::io::duplex(64 * 1024);
    let raw = raw.to_owned();
    let answers: Answers = Arc::new(move |_: &str| Some(raw.clone()));
    tokio::spawn(serve(far, answers, Arc::default()));
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(near))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let req = Request::get("/")
        .body(Empty::<Bytes>::new())
        .expect("request");
    send.send_request(req).await.expect("origin's answer")
}

/// Answers the requests of one connection; after a silence or a response
/// that closes, holds the connection open until the test ends.
async fn serve(
    mut io: impl AsyncRead + AsyncWrite + Unpin,
    answers: Answers,
    seen: Arc<Mutex<Vec<String>>>,
) {
    while let Some(head) = read_head(&mut io).await {
        let target = head.split_whitespace().nth(1).unwrap_or("/");
        let path = match target.parse::<http::Uri>() {
            Ok(uri) => uri.path().to_string(),
            Err(_) => target.to_string(),
        };
        seen.lock().expect("heads").push(head.clone());
        let Some(raw) = answers(&path) else { break };
        if io.write_all(raw.as_bytes()).await.is_err() {
            return;
        }
        if raw.contains("connection: close") {
            let _ = io.shutdown().await;
            return;
        }
    }
    std::future::pending::<()>().await;
}

/// One request head, up to its blank line (the tests send no bodies).
async fn read_head(io: &mut (impl AsyncRead + Unpin)) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if io.read(&mut byte).await.ok()? == 0 {
            return None;
        }
        head.push(byte[0]);
    }
    String::from_utf8(head).ok()
}
