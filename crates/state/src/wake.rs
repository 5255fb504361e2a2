//! Wake-ups across proxies: every change of a host's shared budget is
//! published on the host's channel ([`channel`], from inside the budget
//! script, so it costs no round trip) with the new copy and what changed
//! (a lease given back, a pause ended early), and every proxy keeps one
//! subscriber connection ([`Wakes`]) that hands each message to a
//! callback: it refreshes the proxy's copy of the host
//! (`RedisHosts::heard`) and wakes the host's local
//! waiters that the change concerns. The proxy fetching an origin's
//! robots.txt publishes on the origin's channel when its copy is stored
//! (`robots`). Without it, a waiter on another proxy learns of a
//! freed slot or a stored copy only when it looks again.
//!
//! Plain `PUBLISH` reaches subscribers on every node of a Redis Cluster, so
//! one pattern subscription on any one node hears every host; `SPUBLISH`
//! would need one subscriber per shard.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use futures_core::Stream;
use tokio::sync::Notify;

use crate::link::{cluster_nodes, tagged};

/// The channel on which changes of `host`'s budget (or of an origin's
/// robots.txt copy) are announced. Hash-tagged like its keys.
pub fn channel(prefix: &str, host: &str) -> String {
    tagged(prefix, host, "w")
}

/// How long the subscriber waits before dialling again after losing Redis.
const REDIAL: Duration = Duration::from_millis(500);

/// One subscriber connection, alive while this is held.
#[derive(Debug)]
pub struct Wakes {
    inner: Arc<Inner>,
    task: tokio::task::AbortHandle,
}

#[derive(Debug, Default)]
struct Inner {
    live: AtomicBool,
    messages: AtomicU64,
    /// Waiters for a message on a channel ([`Waiters`]), by the name in
    /// its tag.
    waiting: DashMap<String, Arc<Notify>>,
    /// Waiters woken by a message.
    woken: AtomicU64,
    /// Waiters asleep now until a message or their next look.
    asleep: AtomicU64,
}

/// Waiting for a message on one channel (by the host or origin its tag
/// names), e.g. for another proxy's robots.txt copy. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Waiters {
    inner: Arc<Inner>,
}

impl Wakes {
    /// Subscribes to every host's channel under `prefix` on the Redis at
    /// `url` (a node or `redis+cluster://` seeds, tried in turn), calling
    /// `on_host` with the host (or robots.txt origin) of each message and
    /// its payload. Dials in the background and again whenever the
    /// connection drops. Needs a tokio runtime.
    pub fn subscribe(
        url: &str,
        prefix: &str,
        timeout: Duration,
        on_host: impl Fn(&str, &[u8]) + Send + Sync + 'static,
    ) -> Result<Wakes, redis::RedisError> {
        let nodes = cluster_nodes(url)?.unwrap_or_else(|| vec![url.to_string()]);
        let clients = nodes
            .iter()
            .map(|n| redis::Client::open(n.as_str()))
            .collect::<Result<Vec<_>, _>>()?;
        let inner = Arc::new(Inner::default());
        let (state, prefix) = (inner.clone(), prefix.to_string());
        let task = tokio::spawn(async move {
            let pattern = format!("{}{{*}}:w", glob_escape(&prefix));
            for client in clients.iter().cycle() {
                if let Err(e) = listen(client, &pattern, &prefix, timeout, &state, &on_host).await {
                    tracing::debug!("wake-up subscriber: {e}");
                }
                state.live.store(false, Ordering::SeqCst);
                tokio::time::sleep(REDIAL).await;
            }
        });
        Ok(Wakes {
            inner,
            task: task.abort_handle(),
        })
    }

    /// Whether the subscription is in place now: a freed slot elsewhere
    /// will wake this proxy's waiters.
    pub fn is_live(&self) -> bool {
        self.inner.live.load(Ordering::SeqCst)
    }

    /// Messages received and handed on since the start.
    pub fn messages(&self) -> u64 {
        self.inner.messages.load(Ordering::Relaxed)
    }

    /// A handle for waiting on single channels of this subscription.
    pub fn waiters(&self) -> Waiters {
        Waiters {
            inner: self.inner.clone(),
        }
    }
}

// === impl Waiters ===

impl Waiters {
    /// Whether the subscription is in place now: a message will come.
    pub fn is_live(&self) -> bool {
        self.inner.live.load(Ordering::SeqCst)
    }

    /// Waiters woken by a message since the start.
    pub fn woken(&self) -> u64 {
        self.inner.woken.load(Ordering::Relaxed)
    }

    /// Waiters asleep now (until a message or their next look): what a
    /// test waits on to know that a message will find one.
    pub fn asleep(&self) -> u64 {
        self.inner.asleep.load(Ordering::SeqCst)
    }

    /// Counts a waiter in [`asleep`](Self::asleep) while what this returns
    /// is held.
    pub fn sleeping(&self) -> Asleep {
        self.inner.asleep.fetch_add(1, Ordering::SeqCst);
        Asleep {
            inner: self.inner.clone(),
        }
    }

    /// Starts waiting for `name`'s channel: the next message on it
    /// signals what this returns (hold it while waiting).
    pub fn watch(&self, name: &str) -> Watch {
        let notify = self
            .inner
            .waiting
            .entry(name.to_string())
            .or_default()
            .clone();
        Watch {
            waiters: self.clone(),
            name: name.to_string(),
            notify,
        }
    }
}

/// One waiter asleep; see [`Waiters::sleeping`].
#[derive(Debug)]
pub struct Asleep {
    inner: Arc<Inner>,
}

impl Drop for Asleep {
    fn drop(&mut self) {
        self.inner.asleep.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One waiter's interest in a channel; see [`Waiters::watch`].
#[derive(Debug)]
pub struct Watch {
    waiters: Waiters,
    name: String,
    notify: Arc<Notify>,
}

impl Watch {
    /// Signalled by the next message on the channel, from the moment this
    /// is called (so call it before looking for what the message tells).
    pub fn next(&self) -> Pin<Box<tokio::sync::futures::Notified<'_>>> {
        let mut n = Box::pin(self.notify.notified());
        // Registered now, not at the first poll: a message between the look
        // and the wait is not missed.
        n.as_mut().enable();
        n
    }

    /// Counts a wake-up by message.
    pub fn woken(&self) {
        self.waiters.inner.woken.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // The last waiter on the channel takes its entry away.
        let waiting = &self.waiters.inner.waiting;
        waiting.remove_if(&self.name, |_, n| Arc::strong_count(n) <= 2);
    }
}

impl Drop for Wakes {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn listen(
    client: &redis::Client,
    pattern: &str,
    prefix: &str,
    timeout: Duration,
    state: &Inner,
    on_host: &(impl Fn(&str, &[u8]) + Send + Sync),
) -> Result<(), String> {
    let mut pubsub = tokio::time::timeout(timeout, client.get_async_pubsub())
        .await
        .map_err(|_| format!("no connection within {timeout:?}"))?
        .map_err(|e| e.to_string())?;
    tokio::time::timeout(timeout, pubsub.psubscribe(pattern))
        .await
        .map_err(|_| format!("no subscription within {timeout:?}"))?
        .map_err(|e| e.to_string())?;
    state.live.store(true, Ordering::SeqCst);
    let mut stream = pubsub.into_on_message();
    while let Some(msg) = std::future::poll_fn(|cx| Pin::new(&mut stream).poll_next(cx)).await {
        if let Some(host) = host_of(prefix, msg.get_channel_name()) {
            state.messages.fetch_add(1, Ordering::Relaxed);
            if let Some(n) = state.waiting.get(host) {
                n.notify_waiters();
            }
            on_host(host, msg.get_payload_bytes());
        }
    }
    Err(String::from("connection closed"))
}

/// The host named by a [`channel`].
fn host_of<'a>(prefix: &str, channel: &'a str) -> Option<&'a str> {
    channel
        .strip_prefix(prefix)?
        .strip_prefix('{')?
        .strip_suffix("}:w")
}

/// `s` with Redis glob characters escaped, so that a prefix matches itself.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_channel_names_its_host_back() {
        let c = channel("m:", "a.example");
        assert_eq!(c, "m:{a.example}:w");
        assert_eq!(host_of("m:", &c), Some("a.example"));
        assert_eq!(host_of("other:", &c), None);
        assert_eq!(host_of("m:", "m:{a.example}:h"), None);
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
