//! Wake-ups across proxies, heard only where someone waits, by the one
//! proxy that acts next. A change of a host's shared budget is told from
//! inside the budget script (so it costs no round trip), with the new copy
//! and what changed (a lease given back, a pause ended early), to one
//! proxy waiting on that host: the one that acts on it next, on its own
//! channel for the host ([`own_channel`]); see `hosts/redis/op.lua`. The
//! proxy fetching an origin's robots.txt publishes on the origin's channel
//! ([`channel`]) when its copy is stored (`robots`), heard by every proxy
//! waiting for that copy: once per waiter, as each needs it. Both publish
//! only when someone listens (`PUBSUB NUMSUB`, or `SHARDNUMSUB` on a
//! Cluster, asked inside the same script).
//!
//! A proxy listens on a channel only while it holds a [`Hearing`] of it:
//! a request waiting for something another proxy may end (a slot it holds,
//! its robots.txt fetch, a pause it may reset), or of a host other proxies
//! share with it lately. Hearings are counted per channel: the first takes
//! the subscription (`SUBSCRIBE`, or `SSUBSCRIBE` on the channel's own
//! node of a Cluster, so a message stays on its slot's node), and the
//! subscription is dropped within [`LINGER`] after the last one went, so that a
//! host crawled steadily is not subscribed again for every page. No
//! pattern subscription: a message is delivered to a proxy that waits for
//! it, not to the fleet.
//!
//! Without a subscription, or while it is down, waiters look again by
//! themselves (the callers' polling fallback).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dashmap::DashMap;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind, Value};
use tokio::sync::Notify;

use crate::link::{cluster_nodes, tagged};

/// The channel on which changes of `host`'s budget (or of an origin's
/// robots.txt copy) are announced. Hash-tagged like its keys, so that on a
/// Cluster it lives on their node.
pub fn channel(prefix: &str, host: &str) -> String {
    tagged(prefix, host, "w")
}

/// The channel on which the proxy `instance` is told of changes of
/// `host`'s budget while it waits on the host: [`channel`] followed by
/// `:` and the instance, so the same hash tag, node and slot.
pub fn own_channel(prefix: &str, host: &str, instance: &str) -> String {
    format!("{}:{instance}", channel(prefix, host))
}

/// How long the subscriber waits before dialling again after losing Redis.
const REDIAL: Duration = Duration::from_millis(500);

/// How long a channel stays subscribed after its last hearing went: a
/// host crawled steadily keeps its subscription between pages.
pub const LINGER: Duration = Duration::from_secs(2);

/// The subscriber of one proxy, alive while this is held.
#[derive(Debug)]
pub struct Wakes {
    inner: Arc<Inner>,
    task: tokio::task::AbortHandle,
}

type OnHost = dyn Fn(&str, &[u8]) + Send + Sync;

struct Inner {
    prefix: String,
    live: AtomicBool,
    messages: AtomicU64,
    /// Waiters for a message on a channel ([`Waiters`]), by the name in
    /// its tag.
    waiting: DashMap<String, Arc<Notify>>,
    /// Waiters woken by a message.
    woken: AtomicU64,
    /// Waiters asleep now until a message or their next look.
    asleep: AtomicU64,
    /// The channels wanted or held, by channel.
    subs: Mutex<HashMap<String, Sub>>,
    /// Tells the subscriber task that `subs` wants something done.
    nudge: Notify,
    on_host: Box<OnHost>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("prefix", &self.prefix)
            .field("live", &self.live)
            .finish_non_exhaustive()
    }
}

/// One channel's subscription and who needs it.
struct Sub {
    /// [`Hearing`]s held now.
    holders: usize,
    /// Ticks of the subscriber task (every half [`LINGER`]) since the last
    /// hearing went: dropped at the second.
    idle_ticks: u8,
    state: SubState,
    /// Signalled when the subscription is confirmed.
    ready: Arc<Notify>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum SubState {
    /// Not subscribed: the task subscribes while it has holders.
    Off,
    /// Asked for, not yet confirmed.
    Asked,
    /// Confirmed by Redis: messages on it come.
    On,
}

/// Waiting for a message on one channel (by the host or origin its tag
/// names), e.g. for another proxy's robots.txt copy. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Waiters {
    inner: Arc<Inner>,
}

/// A hold on one channel's subscription; see [`Waiters::hear`].
#[derive(Debug)]
pub struct Hearing {
    inner: Arc<Inner>,
    /// The channel.
    name: String,
}

impl Wakes {
    /// A subscriber on the Redis at `url` (a node, or `redis+cluster://`
    /// seeds) for the channels under `prefix`, calling `on_host` with the
    /// host (or robots.txt origin) of each message and its payload. It
    /// listens to nothing until a [`Hearing`] is taken. Dials in the
    /// background and again whenever the connection drops. Needs a tokio
    /// runtime.
    pub fn subscribe(
        url: &str,
        prefix: &str,
        timeout: Duration,
        on_host: impl Fn(&str, &[u8]) + Send + Sync + 'static,
    ) -> Result<Wakes, redis::RedisError> {
        let target = Target::of(url)?;
        let inner = Arc::new(Inner {
            prefix: prefix.to_string(),
            live: AtomicBool::new(false),
            messages: AtomicU64::new(0),
            waiting: DashMap::new(),
            woken: AtomicU64::new(0),
            asleep: AtomicU64::new(0),
            subs: Mutex::new(HashMap::new()),
            nudge: Notify::new(),
            on_host: Box::new(on_host),
        });
        let state = inner.clone();
        let task = tokio::spawn(async move {
            loop {
                match target.connect(&state, timeout).await {
                    Ok(conn) => tend(conn, &state, timeout).await,
                    Err(e) => tracing::debug!("wake-up subscriber: {e}"),
                }
                state.lost();
                tokio::time::sleep(REDIAL).await;
            }
        });
        Ok(Wakes {
            inner,
            task: task.abort_handle(),
        })
    }

    /// Whether the subscriber's connection is up now: a channel heard will
    /// bring its messages.
    pub fn is_live(&self) -> bool {
        self.inner.live.load(Ordering::SeqCst)
    }

    /// Messages received and handed on since the start.
    pub fn messages(&self) -> u64 {
        self.inner.messages.load(Ordering::Relaxed)
    }

    /// Channels subscribed now.
    pub fn channels(&self) -> usize {
        self.inner
            .subs()
            .values()
            .filter(|s| s.state == SubState::On)
            .count()
    }

    /// A handle for waiting on single channels of this subscriber.
    pub fn waiters(&self) -> Waiters {
        Waiters {
            inner: self.inner.clone(),
        }
    }
}

// === impl Waiters ===

impl Waiters {
    /// Whether the subscriber's connection is up now.
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

    /// Listens on `name`'s channel ([`channel`]) while the returned
    /// hearing is held (and up to [`LINGER`] after the last one goes).
    pub fn hear(&self, name: &str) -> Hearing {
        self.hear_channel(channel(&self.inner.prefix, name))
    }

    /// Listens on the channel on which `instance` is told of `name`'s
    /// changes ([`own_channel`]), as [`hear`](Self::hear).
    pub fn hear_own(&self, name: &str, instance: &str) -> Hearing {
        self.hear_channel(own_channel(&self.inner.prefix, name, instance))
    }

    fn hear_channel(&self, chan: String) -> Hearing {
        let mut subs = self.inner.subs();
        let s = subs.entry(chan.clone()).or_insert_with(|| Sub {
            holders: 0,
            idle_ticks: 0,
            state: SubState::Off,
            ready: Arc::new(Notify::new()),
        });
        s.holders += 1;
        let first = s.holders == 1 && s.state == SubState::Off;
        drop(subs);
        if first {
            self.inner.nudge.notify_one();
        }
        Hearing {
            inner: self.inner.clone(),
            name: chan,
        }
    }

    /// Starts waiting for `name`'s channel: the next message on it
    /// signals what this returns (hold it while waiting). Listens on the
    /// channel meanwhile.
    pub fn watch(&self, name: &str) -> Watch {
        let hearing = self.hear(name);
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
            hearing,
        }
    }
}

// === impl Hearing ===

impl Hearing {
    /// Resolves once the subscription is confirmed (at once if it is), or
    /// after `limit`: from then on a message on the channel is not missed.
    pub async fn ready(&self, limit: Duration) -> bool {
        let wait = async {
            loop {
                let ready = {
                    let subs = self.inner.subs();
                    match subs.get(&self.name) {
                        Some(s) if s.state == SubState::On => return,
                        Some(s) => s.ready.clone(),
                        None => return,
                    }
                };
                let n = ready.notified();
                tokio::pin!(n);
                n.as_mut().enable();
                if self.is_on() {
                    return;
                }
                n.await;
            }
        };
        tokio::time::timeout(limit, wait).await.is_ok() && self.is_on()
    }

    fn is_on(&self) -> bool {
        self.inner
            .subs()
            .get(&self.name)
            .is_some_and(|s| s.state == SubState::On)
    }
}

impl Drop for Hearing {
    fn drop(&mut self) {
        let mut subs = self.inner.subs();
        if let Some(s) = subs.get_mut(&self.name) {
            s.holders = s.holders.saturating_sub(1);
            if s.holders == 0 {
                s.idle_ticks = 0;
                if s.state == SubState::Off {
                    subs.remove(&self.name);
                }
            }
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
    hearing: Hearing,
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

    /// See [`Hearing::ready`].
    pub async fn ready(&self, limit: Duration) -> bool {
        self.hearing.ready(limit).await
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

// === impl Inner ===

impl Inner {
    fn subs(&self) -> std::sync::MutexGuard<'_, HashMap<String, Sub>> {
        // A panic elsewhere while holding it leaves a usable table.
        self.subs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The connection went: every channel is to be subscribed again.
    fn lost(&self) {
        self.live.store(false, Ordering::SeqCst);
        for s in self.subs().values_mut() {
            s.state = SubState::Off;
        }
    }

    fn pushed(&self, info: PushInfo) {
        match info.kind {
            PushKind::Message | PushKind::SMessage => {}
            PushKind::Disconnection => {
                self.lost();
                self.nudge.notify_one();
                return;
            }
            _ => return,
        }
        let (Some(Value::BulkString(chan)), Some(Value::BulkString(payload))) =
            (info.data.first(), info.data.get(1))
        else {
            return;
        };
        let Some((host, own)) = std::str::from_utf8(chan)
            .ok()
            .and_then(|c| host_of(&self.prefix, c))
        else {
            return;
        };
        self.messages.fetch_add(1, Ordering::Relaxed);
        // Watchers wait on the shared channel (a robots.txt copy).
        if !own {
            if let Some(n) = self.waiting.get(host) {
                n.notify_waiters();
            }
        }
        (self.on_host)(host, payload);
    }
}

/// Where the subscriber dials.
enum Target {
    Node(redis::Client),
    Cluster(Vec<String>),
}

/// A subscriber connection: RESP3, messages pushed to [`Inner::pushed`].
enum Conn {
    Node(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Target {
    fn of(url: &str) -> Result<Target, redis::RedisError> {
        if let Some(nodes) = cluster_nodes(url)? {
            return Ok(Target::Cluster(nodes));
        }
        let client = redis::Client::open(url)?;
        let info = client.get_connection_info().clone();
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(redis::ProtocolVersion::RESP3);
        Ok(Target::Node(redis::Client::open(
            info.set_redis_settings(settings),
        )?))
    }

    async fn connect(&self, state: &Arc<Inner>, timeout: Duration) -> Result<Conn, String> {
        let pushes = {
            let state = state.clone();
            move |info: PushInfo| -> Result<(), std::convert::Infallible> {
                state.pushed(info);
                Ok(())
            }
        };
        let dial = async {
            match self {
                Target::Node(client) => {
                    let config = ConnectionManagerConfig::new()
                        .set_connection_timeout(Some(timeout))
                        .set_response_timeout(Some(timeout))
                        .set_push_sender(pushes);
                    ConnectionManager::new_with_config(client.clone(), config)
                        .await
                        .map(Conn::Node)
                }
                Target::Cluster(nodes) => ClusterClientBuilder::new(nodes.clone())
                    .use_protocol(redis::ProtocolVersion::RESP3)
                    .push_sender(pushes)
                    .connection_timeout(timeout)
                    .response_timeout(timeout)
                    .build()?
                    .get_async_connection()
                    .await
                    .map(Conn::Cluster),
            }
        };
        tokio::time::timeout(timeout, dial)
            .await
            .map_err(|_| format!("no connection within {timeout:?}"))?
            .map_err(|e| e.to_string())
    }
}

impl Conn {
    /// Subscribes to `chans`: in one command on a node; one by one on a
    /// Cluster, each on its own slot's node.
    async fn subscribe(&mut self, chans: &[String]) -> redis::RedisResult<()> {
        match self {
            Conn::Node(c) => c.subscribe(chans).await,
            Conn::Cluster(c) => {
                for ch in chans {
                    c.ssubscribe(ch).await?;
                }
                Ok(())
            }
        }
    }

    async fn unsubscribe(&mut self, chans: &[String]) -> redis::RedisResult<()> {
        match self {
            Conn::Node(c) => c.unsubscribe(chans).await,
            Conn::Cluster(c) => {
                for ch in chans {
                    c.sunsubscribe(ch).await?;
                }
                Ok(())
            }
        }
    }
}

/// Keeps the subscriptions what the hearings ask for, until the
/// connection fails.
async fn tend(mut conn: Conn, state: &Inner, timeout: Duration) {
    state.live.store(true, Ordering::SeqCst);
    // Ticks on the runtime's clock (the state crate reads none itself).
    let mut ticks = tokio::time::interval(LINGER / 2);
    let mut aging = false;
    loop {
        let nudged = state.nudge.notified();
        tokio::pin!(nudged);
        nudged.as_mut().enable();
        let (wanted, idle) = state.due(std::mem::take(&mut aging));
        if !wanted.is_empty() {
            let done = tokio::time::timeout(timeout, conn.subscribe(&wanted)).await;
            if !matches!(done, Ok(Ok(()))) {
                tracing::debug!("wake-up subscriber: subscribing failed");
                return;
            }
            state.live.store(true, Ordering::SeqCst);
            state.confirm(&wanted);
        }
        if !idle.is_empty() {
            let done = tokio::time::timeout(timeout, conn.unsubscribe(&idle)).await;
            if !matches!(done, Ok(Ok(()))) {
                return;
            }
        }
        if !state.live.load(Ordering::SeqCst) {
            // The connection went (a pushed disconnection) with nothing to
            // subscribe again: dial afresh.
            return;
        }
        tokio::select! {
            _ = &mut nudged => {}
            _ = ticks.tick() => aging = true,
        }
    }
}

impl Inner {
    /// The channels to subscribe now (marked asked) and those to drop
    /// (taken out of the table); `aging` on a tick, when idle channels
    /// grow older.
    fn due(&self, aging: bool) -> (Vec<String>, Vec<String>) {
        let mut subs = self.subs();
        let mut wanted = Vec::new();
        let mut idle = Vec::new();
        subs.retain(|name, s| {
            if s.holders > 0 {
                if s.state == SubState::Off {
                    s.state = SubState::Asked;
                    wanted.push(name.clone());
                }
                return true;
            }
            if aging {
                s.idle_ticks = s.idle_ticks.saturating_add(1);
            }
            if s.idle_ticks < 2 {
                return true;
            }
            if s.state != SubState::Off {
                idle.push(name.clone());
            }
            false
        });
        (wanted, idle)
    }

    fn confirm(&self, chans: &[String]) {
        let mut subs = self.subs();
        for ch in chans {
            if let Some(s) = subs.get_mut(ch) {
                if s.state == SubState::Asked {
                    s.state = SubState::On;
                    s.ready.notify_waiters();
                }
            }
        }
    }
}

/// The host named by a [`channel`] or an [`own_channel`], and whether it
/// is the latter.
fn host_of<'a>(prefix: &str, channel: &'a str) -> Option<(&'a str, bool)> {
    let (host, rest) = channel
        .strip_prefix(prefix)?
        .strip_prefix('{')?
        .split_once("}:w")?;
    match rest {
        "" => Some((host, false)),
        r if r.starts_with(':') => Some((host, true)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_channel_names_its_host_back() {
        let c = channel("m:", "a.example");
        assert_eq!(c, "m:{a.example}:w");
        assert_eq!(host_of("m:", &c), Some(("a.example", false)));
        assert_eq!(host_of("other:", &c), None);
        assert_eq!(host_of("m:", "m:{a.example}:h"), None);
        assert_eq!(host_of("m:", "m:{a.example}:wx"), None);
        let own = own_channel("m:", "a.example", "box:12:ab");
        assert_eq!(own, "m:{a.example}:w:box:12:ab");
        assert_eq!(host_of("m:", &own), Some(("a.example", true)));
    }
}
