//! The witness: every checkpoint line, as written, is POSTed to an HTTP
//! endpoint the operator names (`audit.witness`), outside the log's
//! machine, so that `mannerly audit verify --witness` can later tell a log
//! cut after a checkpoint from one that ends where the proxy stopped: the
//! witness holds a newer head than the cut log has.
//!
//! # Failure
//!
//! A witness never holds up the proxy. Heads wait in a bounded queue (the
//! oldest dropped first: a newer head says more than an older one) and a
//! thread of its own sends them, retrying with backoff and logging the
//! first failure of a run and the recovery. At shutdown the thread has
//! [`CLOSE_GRACE`] to deliver the last heads, then gives up, saying so.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::clock::Clock;

/// Heads kept while the witness is out of reach.
const QUEUE: usize = 1024;
/// How long one POST may take.
const TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait between tries.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long a closing proxy keeps trying to deliver its last heads.
pub(crate) const CLOSE_GRACE: Duration = Duration::from_secs(5);

#[derive(Default)]
struct Queue {
    heads: VecDeque<String>,
    closing: bool,
    dropped: u64,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
}

impl Shared {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The sender of checkpoint heads to the witness.
pub(crate) struct Witness {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Witness {
    /// Starts the sender for `url` (checked by the config's validation).
    pub(crate) fn start(url: &str, clock: Clock) -> std::io::Result<Witness> {
        let shared = Arc::new(Shared::default());
        let (s, url) = (shared.clone(), url.to_string());
        let thread = std::thread::Builder::new()
            .name("mannerly-witness".into())
            .spawn(move || send_loop(&s, &url, &clock))?;
        Ok(Witness {
            shared,
            thread: Some(thread),
        })
    }

    /// Queues a checkpoint line (without its newline); never blocks on the
    /// network.
    pub(crate) fn offer(&self, line: &str) {
        let mut q = self.shared.queue();
        q.heads.push_back(line.to_string());
        if q.heads.len() > QUEUE {
            q.heads.pop_front();
            q.dropped += 1;
        }
        drop(q);
        self.shared.wake.notify_one();
    }

    /// The heads waiting to be delivered.
    #[cfg(test)]
    pub(crate) fn queued(&self) -> Vec<String> {
        self.shared.queue().heads.iter().cloned().collect()
    }

    /// Delivers what is queued within [`CLOSE_GRACE`], then stops.
    pub(crate) fn close(mut self) {
        self.shared.queue().closing = true;
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Witness {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.shared.queue().closing = true;
            self.shared.wake.notify_one();
        }
    }
}

fn send_loop(shared: &Shared, url: &str, clock: &Clock) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("audit witness: no runtime ({e}); checkpoint heads are not sent");
            return;
        }
    };
    let client = client();
    let mut backoff = Duration::from_millis(250);
    let mut failing = false;
    let mut deadline: Option<std::time::Instant> = None;
    loop {
        let head = {
            let mut q = shared.queue();
            while q.heads.is_empty() && !q.closing {
                q = shared
                    .wake
                    .wait(q)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            if q.dropped > 0 {
                tracing::warn!(
                    "audit witness {url}: {} older checkpoint heads dropped while it was out of reach",
                    q.dropped
                );
                q.dropped = 0;
            }
            if q.closing && deadline.is_none() {
                deadline = Some(clock.now_std() + CLOSE_GRACE);
            }
            match q.heads.front() {
                Some(h) => h.clone(),
                None => return,
            }
        };
        if deadline.is_some_and(|d| clock.now_std() >= d) {
            let left = shared.queue().heads.len();
            tracing::error!(
                "audit witness {url}: {left} checkpoint heads not delivered before shutdown"
            );
            return;
        }
        match rt.block_on(post(&client, url, head)) {
            Ok(()) => {
                shared.queue().heads.pop_front();
                if failing {
                    tracing::info!("audit witness {url}: reachable again, heads delivered");
                }
                failing = false;
                backoff = Duration::from_millis(250);
            }
            Err(e) => {
                if !failing {
                    tracing::warn!("audit witness {url}: {e}; heads are kept and sent again");
                }
                failing = true;
                let q = shared.queue();
                // Closing: try again at once until the grace ends.
                let wait = if q.closing {
                    Duration::from_millis(100)
                } else {
                    backoff
                };
                let _ = shared.wake.wait_timeout(q, wait);
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

type HttpsClient = Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Full<Bytes>,
>;

fn client() -> HttpsClient {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let tls = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .build();
    Client::builder(TokioExecutor::new()).build(connector)
}

async fn post(client: &HttpsClient, url: &str, head: String) -> Result<(), String> {
    let req = Request::builder()
        .method(Method::POST)
        .uri(url)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(head)))
        .map_err(|e| format!("request: {e}"))?;
    let resp = tokio::time::timeout(TIMEOUT, client.request(req))
        .await
        .map_err(|_| format!("no answer within {} s", TIMEOUT.as_secs()))?
        .map_err(|e| format!("{e}"))?;
    if !resp.status().is_success() {
        return Err(format!("answered {}", resp.status()));
    }
    Ok(())
}

/// The heads a witness holds: `GET url`, one checkpoint line per line of
/// the answer (for `mannerly audit verify --witness`).
pub async fn fetch_heads(url: &str) -> Result<Vec<String>, String> {
    let req = Request::builder()
        .method(Method::GET)
        .uri(url)
        .header(header::ACCEPT, "application/jsonl, application/json")
        .body(Full::new(Bytes::new()))
        .map_err(|e| format!("{url}: {e}"))?;
    let resp = tokio::time::timeout(TIMEOUT, client().request(req))
        .await
        .map_err(|_| format!("{url}: no answer within {} s", TIMEOUT.as_secs()))?
        .map_err(|e| format!("{url}: {e}"))?;
    if !resp.status().is_success() {
        return Err(format!("{url}: answered {}", resp.status()));
    }
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("{url}: reading the answer: {e}"))?
        .to_bytes();
    Ok(String::from_utf8_lossy(&body)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
}
