//! The budget script ([`SCRIPT`]) and one call of it: a compare-and-set of
//! one host's encoded budget, and a change to its concurrency leases, in one
//! round trip.

use std::time::Duration;

use mannerly_policy::budget::{Reservation, Start};
use redis::Value;

use super::settings::RedisSettings;
use crate::link::{tagged, Link};

/// The Lua script every budget operation runs (see the file for its contract).
pub const SCRIPT: &str = include_str!("op.lua");

/// An admit that must wait is kept unstored only on a host whose copy no
/// other proxy changed under this one for this long. Defined here, not in
/// `redis.rs` which applies it, because the script's sharing window is the
/// same spell and the script must not read its parent.
pub(super) const QUIET: Duration = Duration::from_secs(10);

/// A proxy that called a host this recently shares it: the host's changes
/// are published for it to keep its copy current. As long as the quiet
/// spell after which an admit may be kept unstored ([`QUIET`]).
const SHARING: Duration = QUIET;

/// What a call does to the host's leases.
pub(super) enum LeaseChange {
    None,
    /// Takes a new lease by this id.
    Take(String),
    /// Gives back the lease by this id.
    Release(String),
}

/// What the request at the head of the caller's line for the host does
/// after a decision: the script registers it as a waiter, to be told the
/// changes it acts on next (see `op.lua`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Waiting {
    /// Not a step of the line's head (a response): as it was.
    Unchanged,
    /// It went, or gave up: no longer a waiter.
    Left,
    /// It waits for a concurrency slot.
    Slot,
    /// It waits this long for its slot's time.
    Time(Duration),
}

impl Waiting {
    /// After an admit answered `r`.
    pub(crate) fn after_admit(r: &Reservation) -> Waiting {
        match r {
            Reservation::Wait(d) => Waiting::Time(*d),
            Reservation::Go | Reservation::Refuse(_) => Waiting::Left,
        }
    }

    /// After a start answered `s`, with the next request's admit decided
    /// in the same call (`next`: its wait) when one waits in line.
    pub(crate) fn after_start(s: &Start, next: Option<Duration>) -> Waiting {
        match (*s, next) {
            (Start::Go, Some(d)) | (Start::Wait(d), _) => Waiting::Time(d),
            (Start::WaitConcurrency, _) => Waiting::Slot,
            (Start::Go | Start::Refuse(_), _) => Waiting::Left,
        }
    }

    fn arg(self) -> String {
        match self {
            Waiting::Unchanged => String::new(),
            Waiting::Left => String::from("x"),
            Waiting::Slot => String::from("c"),
            Waiting::Time(d) => format!("t{}", d.as_millis()),
        }
    }
}

/// One call: the copy the caller decided on, and what it decided.
pub(super) struct Ask<'a> {
    /// The host's budget key.
    pub(super) host: &'a str,
    /// The encoded budget decided on (empty: none yet).
    pub(super) seen: &'a [u8],
    /// The live leases decided on (after the caller's own release);
    /// `None` when the decision does not depend on them.
    pub(super) leases: Option<u32>,
    /// The encoded budget after the decision; `None`: unchanged, nothing
    /// to write.
    pub(super) new: Option<&'a [u8]>,
    pub(super) lease: &'a LeaseChange,
    /// This proxy's instance id, named in the change it publishes.
    pub(super) instance: &'a str,
    /// The decision ends a pause early: waiters elsewhere ask again.
    pub(super) announce: bool,
    /// What the request at the head of this proxy's line does now.
    pub(super) waiting: Waiting,
}

/// What the script answered.
pub(super) enum Answer {
    /// The copy decided on was current: the decision is stored.
    Stored {
        leases: u32,
        version: u64,
        shared: bool,
    },
    /// Another proxy changed the copy meanwhile: decide again on `current`
    /// (empty: it holds none now).
    Changed {
        leases: u32,
        current: Vec<u8>,
        version: u64,
        shared: bool,
    },
}

/// Runs `script` once for `ask`. `Err` says why Redis counts as out of
/// reach: no answer within the command timeout, or not one the script gives.
pub(super) async fn call(
    script: &redis::Script,
    conn: &Link,
    settings: &RedisSettings,
    ask: Ask<'_>,
) -> Result<Answer, String> {
    let (sign, id) = match ask.lease {
        LeaseChange::None => ("", ""),
        LeaseChange::Take(id) => ("+", id.as_str()),
        LeaseChange::Release(id) => ("-", id.as_str()),
    };
    // Every key and channel carries the host as hash tag: one slot on a
    // Redis Cluster.
    let mut inv = script.key(tagged(&settings.key_prefix, ask.host, "h"));
    inv.key(tagged(&settings.key_prefix, ask.host, "l"))
        .key(tagged(&settings.key_prefix, ask.host, "c"))
        .key(tagged(&settings.key_prefix, ask.host, "ws"))
        .key(tagged(&settings.key_prefix, ask.host, "wt"))
        .arg(ask.seen)
        .arg(ask.leases.map(|n| n.to_string()).unwrap_or_default())
        .arg(ask.new.unwrap_or(&[]))
        .arg(ms(settings.budget_ttl))
        .arg(sign)
        .arg(id)
        .arg(ms(settings.lease_ttl))
        .arg(crate::wake::channel(&settings.key_prefix, ask.host))
        .arg(ask.instance)
        .arg(if ask.announce { "r" } else { "" })
        .arg(ms(SHARING))
        .arg(if conn.is_cluster() { "s" } else { "" })
        .arg(crate::wake::own_channel(&settings.key_prefix, ask.host, ""))
        .arg(ask.waiting.arg());
    let mut conn = conn.clone();
    let answer: Vec<Value> =
        match tokio::time::timeout(settings.command_timeout, inv.invoke_async(&mut conn)).await {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => return Err(format!("no answer within {:?}", settings.command_timeout)),
        };
    let leases = match answer.get(1) {
        Some(Value::Int(n)) => u32::try_from(*n).unwrap_or(u32::MAX),
        _ => return Err(String::from("unexpected answer from the budget script")),
    };
    if matches!(answer.first(), Some(Value::Int(1))) {
        let version = version_of(answer.get(2));
        let shared = matches!(answer.get(3), Some(Value::Int(1)));
        return Ok(Answer::Stored {
            leases,
            version,
            shared,
        });
    }
    let current = match answer.get(2) {
        Some(Value::BulkString(b)) => b.clone(),
        _ => Vec::new(),
    };
    let version = version_of(answer.get(3));
    Ok(Answer::Changed {
        leases,
        current,
        version,
        shared: matches!(answer.get(4), Some(Value::Int(1))),
    })
}

/// The server time (µs) the script answered at; 0 when absent (a script
/// of an earlier version), which any later change outdates.
fn version_of(v: Option<&Value>) -> u64 {
    match v {
        Some(Value::BulkString(b)) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
        _ => 0,
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}
