//! robots.txt fetched once per origin for a whole cluster, through Redis.
//!
//! Keys: `{prefix}{origin}:r` holds the last fetch (its result, its head:
//! validators and own age, and its unix-ms fetch time, so that its expiry
//! is the same on every proxy, and the proxy that fetches once it has
//! expired asks conditionally, whichever proxy fetched it before);
//! `{prefix}{origin}:rl` (same hash tag, so same Cluster slot) is a short
//! lock (`SET NX PX`) held by the proxy that fetches. The others wait for
//! the copy: the fetching proxy publishes on the origin's channel
//! (`{prefix}{origin}:w`, [`crate::wake::channel`]) in the same pipeline
//! that stores it, and a waiter hearing that channel ([`Waiters`]) looks
//! again at once, else every [`WAIT_HEARD`] in case a message was lost;
//! every [`WAIT_STEP`] while the subscription is down. Redis out of reach
//! means every proxy fetches for itself, as a lone proxy does.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mannerly_policy::robots_cache::{FetchResult, Head, Validators};
use redis::AsyncCommands;

use crate::link::{tagged, Link};
use crate::wake::Waiters;

/// How often a proxy waiting for another's fetch looks for the copy when
/// it cannot hear the copy's message.
pub const WAIT_STEP: Duration = Duration::from_millis(50);

/// The same while it hears the origin's channel: only a lost message makes
/// this look find anything.
pub const WAIT_HEARD: Duration = Duration::from_secs(1);

/// The cluster's robots.txt copies.
#[derive(Clone)]
pub struct SharedRobots {
    conn: Link,
    prefix: String,
    timeout: Duration,
    waiters: Option<Waiters>,
}

/// A fetch as a proxy publishes it for the others.
#[derive(Clone, Copy, Debug)]
pub struct Fetched<'a> {
    /// How it ended.
    pub result: &'a FetchResult,
    /// The head of the copy it leaves (after a 304, the copy's, refreshed).
    pub head: &'a Head,
    /// The validators it sent: a 304 refreshes the cluster's copy only
    /// when that copy is the one they name.
    pub asked: Option<&'a Validators>,
}

/// What a proxy about to fetch robots.txt should do.
#[derive(Debug, PartialEq)]
pub enum Claim {
    /// Another proxy fetched it: use this result, fetched `age` ago.
    Copy {
        /// The fetch result.
        result: FetchResult,
        /// How long ago it was fetched.
        age: Duration,
        /// Its validators and own age.
        head: Head,
    },
    /// Fetch it; `locked` when this proxy holds the cluster's lock (then
    /// [`SharedRobots::publish`] must follow).
    Fetch {
        /// This proxy holds the lock.
        locked: bool,
    },
}

impl std::fmt::Debug for SharedRobots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedRobots")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl SharedRobots {
    /// Copies under `prefix` on `conn`; a command slower than `timeout`
    /// counts as Redis being out of reach.
    pub fn new(conn: Link, prefix: &str, timeout: Duration) -> SharedRobots {
        SharedRobots {
            conn,
            prefix: prefix.to_string(),
            timeout,
            waiters: None,
        }
    }

    /// Waits for other proxies' copies by the message on the origin's
    /// channel, heard through `waiters`.
    pub fn hearing(mut self, waiters: Waiters) -> SharedRobots {
        self.waiters = Some(waiters);
        self
    }

    /// Uses a copy younger than `max_age`, else takes the lock for
    /// `lock_ttl`, else waits for the lock holder's copy until `until`.
    /// Time is the caller's: `now` and `until` on tokio's clock (so paused
    /// time drives the wait) and `wall` for the copies' fetch times.
    pub async fn claim(
        &self,
        origin: &str,
        max_age: Duration,
        lock_ttl: Duration,
        until: tokio::time::Instant,
        now: impl Fn() -> tokio::time::Instant,
        wall: impl Fn() -> SystemTime,
    ) -> Claim {
        let copy_key = tagged(&self.prefix, origin, "r");
        let lock_key = tagged(&self.prefix, origin, "rl");
        let watch = self.waiters.as_ref().map(|w| w.watch(origin));
        loop {
            // Before the look, so that a copy stored after it is heard.
            let stored = watch.as_ref().map(|w| w.next());
            match self.copy(&copy_key, max_age, wall()).await {
                Ok(Some(claim)) => return claim,
                Ok(None) => {}
                Err(()) => return Claim::Fetch { locked: false },
            }
            let mut conn = self.conn.clone();
            let mut set = redis::cmd("SET");
            set.arg(&lock_key)
                .arg(std::process::id())
                .arg("NX")
                .arg("PX")
                .arg(ms(lock_ttl));
            let lock = set.query_async::<Option<String>>(&mut conn);
            match tokio::time::timeout(self.timeout, lock).await {
                Ok(Ok(Some(_))) => return Claim::Fetch { locked: true },
                Ok(Ok(None)) => {}
                _ => return Claim::Fetch { locked: false },
            }
            let heard = self.waiters.as_ref().is_some_and(Waiters::is_live);
            let next = now() + if heard { WAIT_HEARD } else { WAIT_STEP };
            let _asleep = self.waiters.as_ref().map(Waiters::sleeping);
            let (Some(stored), Some(watch)) = (stored, &watch) else {
                if next >= until {
                    return Claim::Fetch { locked: false };
                }
                tokio::time::sleep_until(next).await;
                continue;
            };
            tokio::select! {
                _ = stored => watch.woken(),
                _ = tokio::time::sleep_until(next.min(until)) => {
                    if next >= until {
                        return Claim::Fetch { locked: false };
                    }
                }
            }
        }
    }

    /// Stores this proxy's fetch, made at `fetched` (wall time), for the
    /// others (for `keep`) and lifts its lock. A 304 restarts the age of
    /// the copy stored when that copy is the one whose validators were sent;
    /// otherwise it stores nothing, and the next proxy fetches for itself.
    pub async fn publish(
        &self,
        origin: &str,
        fetch: Fetched<'_>,
        fetched: SystemTime,
        keep: Duration,
        locked: bool,
    ) {
        let copy_key = tagged(&self.prefix, origin, "r");
        let lock_key = tagged(&self.prefix, origin, "rl");
        let payload = match fetch.result {
            FetchResult::NotModified => self.stored_payload(&copy_key, fetch.asked).await,
            result => Some(encode(result)),
        };
        let mut pipe = redis::pipe();
        if let Some(payload) = payload {
            let mut value = unix_ms(fetched).to_le_bytes().to_vec();
            value.extend(encode_head(fetch.head));
            value.extend(payload);
            pipe.cmd("SET")
                .arg(&copy_key)
                .arg(value)
                .arg("PX")
                .arg(ms(keep))
                .ignore();
        }
        if locked {
            pipe.cmd("DEL").arg(&lock_key).ignore();
        }
        // Routed with the keys' slot on a Cluster; heard on every node.
        pipe.cmd("PUBLISH")
            .arg(crate::wake::channel(&self.prefix, origin))
            .arg("")
            .ignore();
        let mut conn = self.conn.clone();
        let _ = tokio::time::timeout(self.timeout, pipe.query_async::<()>(&mut conn)).await;
    }

    /// The encoded result of the copy stored, when its validators are
    /// `asked` (a 304 to them says that copy still stands).
    async fn stored_payload(&self, key: &str, asked: Option<&Validators>) -> Option<Vec<u8>> {
        let asked = asked.filter(|v| !v.is_empty())?;
        let mut conn = self.conn.clone();
        let got = tokio::time::timeout(self.timeout, conn.get::<_, Option<Vec<u8>>>(key)).await;
        let bytes = got.ok()?.ok()??;
        let (_, rest) = bytes.split_first_chunk::<8>()?;
        let (head, payload) = decode_head(rest)?;
        (&head.validators == asked && payload.first() == Some(&b'B')).then(|| payload.to_vec())
    }

    async fn copy(
        &self,
        key: &str,
        max_age: Duration,
        now: SystemTime,
    ) -> Result<Option<Claim>, ()> {
        let mut conn = self.conn.clone();
        let got = tokio::time::timeout(self.timeout, conn.get::<_, Option<Vec<u8>>>(key)).await;
        let bytes = match got {
            Ok(Ok(b)) => b,
            _ => return Err(()),
        };
        let Some(bytes) = bytes else {
            return Ok(None);
        };
        let Some((at, rest)) = bytes.split_first_chunk::<8>() else {
            return Ok(None);
        };
        let fetched = u64::from_le_bytes(*at);
        let age = Duration::from_millis(unix_ms(now).saturating_sub(fetched));
        let Some((head, rest)) = decode_head(rest) else {
            return Ok(None);
        };
        if age >= head.declared_age.map_or(max_age, |a| a.min(max_age)) {
            return Ok(None);
        }
        Ok(decode(rest).map(|result| Claim::Copy { result, age, head }))
    }
}

fn encode(r: &FetchResult) -> Vec<u8> {
    match r {
        FetchResult::Body(b) => [&[b'B'][..], b].concat(),
        FetchResult::Status(s) => [&[b'S'][..], &s.to_le_bytes()].concat(),
        FetchResult::TooManyRedirects => vec![b'R'],
        FetchResult::Failed(why) => [&[b'F'][..], why.as_bytes()].concat(),
        // A 304 answered one proxy's validators: to another proxy, whose
        // copy may be another, it says nothing (lone proxies alone revalidate).
        FetchResult::NotModified => [&[b'S'][..], &304u16.to_le_bytes()].concat(),
    }
}

/// The head goes before the result, tagged `H` (no result's tag), so that
/// a copy stored before heads were (none) still reads, with an empty head.
fn encode_head(h: &Head) -> Vec<u8> {
    let mut out = vec![b'H'];
    let age = h.declared_age.map_or(u64::MAX, |a| a.as_secs());
    out.extend(age.to_le_bytes());
    for v in [&h.validators.etag, &h.validators.last_modified] {
        let v = v.as_deref().unwrap_or("").as_bytes();
        // Validators are at most MAX_VALIDATOR (1 KiB) long.
        let len = u16::try_from(v.len()).unwrap_or(0);
        out.extend(len.to_le_bytes());
        out.extend(&v[..usize::from(len)]);
    }
    out
}

fn decode_head(b: &[u8]) -> Option<(Head, &[u8])> {
    let Some(rest) = b.strip_prefix(b"H") else {
        return Some((Head::default(), b));
    };
    let (age, mut rest) = rest.split_first_chunk::<8>()?;
    let age = u64::from_le_bytes(*age);
    let mut text = || -> Option<Option<String>> {
        let (len, after) = rest.split_first_chunk::<2>()?;
        let len = usize::from(u16::from_le_bytes(*len));
        let v = after.get(..len)?;
        rest = &after[len..];
        Some((len > 0).then(|| String::from_utf8_lossy(v).into_owned()))
    };
    let etag = text()?;
    let last_modified = text()?;
    let head = Head {
        validators: Validators {
            etag,
            last_modified,
        },
        declared_age: (age != u64::MAX).then(|| Duration::from_secs(age)),
    };
    Some((head, rest))
}

fn decode(b: &[u8]) -> Option<FetchResult> {
    let (tag, rest) = b.split_first()?;
    Some(match tag {
        b'B' => FetchResult::Body(rest.to_vec()),
        b'S' => FetchResult::Status(u16::from_le_bytes(rest.try_into().ok()?)),
        b'R' => FetchResult::TooManyRedirects,
        b'F' => FetchResult::Failed(String::from_utf8_lossy(rest).into_owned()),
        _ => return None,
    })
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_result_survives_the_trip() {
        for r in [
            FetchResult::Body(b"User-agent: *\nDisallow: /x\n".to_vec()),
            FetchResult::Status(404),
            FetchResult::TooManyRedirects,
            FetchResult::Failed(String::from("timed out")),
        ] {
            assert_eq!(decode(&encode(&r)), Some(r));
        }
        // A 304 to one proxy's validators reaches the others as a plain
        // 304, which says nothing of a copy they may hold.
        assert_eq!(
            decode(&encode(&FetchResult::NotModified)),
            Some(FetchResult::Status(304))
        );
        assert_eq!(decode(b""), None);
        assert_eq!(decode(b"S1"), None);
    }

    #[test]
    fn a_copy_carries_its_head_and_one_stored_without_reads_as_before() {
        let head = Head {
            validators: Validators::read(Some("\"r1\""), Some("Sat, 05 Dec 2026 10:00:00 GMT")),
            declared_age: Some(Duration::from_secs(300)),
        };
        let body = FetchResult::Body(b"User-agent: *\nDisallow: /x\n".to_vec());
        let value = [encode_head(&head), encode(&body)].concat();
        let (read, rest) = decode_head(&value).unwrap();
        assert_eq!(read, head);
        assert_eq!(decode(rest), Some(body.clone()));
        let bare = Head::default();
        let value = [encode_head(&bare), encode(&body)].concat();
        assert_eq!(decode_head(&value).unwrap().0, bare);
        // Written before heads were stored.
        let old = encode(&body);
        let (read, rest) = decode_head(&old).unwrap();
        assert_eq!((read, decode(rest)), (Head::default(), Some(body)));
        // Cut short: no copy, not a panic.
        assert_eq!(decode_head(b"H\x01\x02"), None);
        assert_eq!(decode_head(b"H\0\0\0\0\0\0\0\0\x09\0ab"), None);
    }
}
