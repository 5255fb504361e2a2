//! Where the day's charges live between requests and across restarts: a
//! [`Ledger`] in a file of the data dir ([`ChargeStore::file`]), or in Redis
//! for every proxy of a cluster ([`ChargeStore::redis`]), one budget for
//! all. The rules (holds, limits, the day) are
//! [`mannerly_policy::payment::Ledger`]'s; a store applies one change at a
//! time to the whole ledger.
//!
//! # Atomicity
//!
//! The file store changes the ledger under a lock and writes it (temporary
//! file, `fsync`, rename) before the change is reported. The Redis store
//! reads the ledger, applies the change, and stores it with a
//! compare-and-set script ([`SCRIPT`]); a ledger another proxy changed
//! meanwhile is read again and the change applied anew, so two holds can
//! never both pass a limit only one of them fits.
//!
//! # Failure
//!
//! A change that cannot be stored is an error, and the caller pays
//! nothing: money is never spent on a count that may be lost.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::link::Link;
use mannerly_policy::payment::Ledger;
use redis::Value;

/// The compare-and-set of the Redis ledger (see the file for its contract).
pub const SCRIPT: &str = include_str!("charges/cas.lua");

/// Rounds of compare-and-set before a change gives up (other proxies kept
/// changing the ledger every time).
const MAX_ROUNDS: u32 = 32;

/// How long Redis keeps a ledger nobody changes: past the day it counts.
const LEDGER_TTL_SECS: u64 = 3 * 86_400;

/// Why the ledger could not be read or stored.
#[derive(Debug, thiserror::Error)]
pub enum ChargeError {
    /// The file could not be read or written.
    #[error("{path}: {why}")]
    File {
        /// The ledger file.
        path: PathBuf,
        /// What failed.
        why: String,
    },
    /// Redis did not answer, or answered what the script never does.
    #[error("redis: {0}")]
    Redis(String),
    /// Other proxies changed the ledger on every round.
    #[error("the shared ledger changed on each of {MAX_ROUNDS} tries")]
    Contended,
}

/// The day's charges, in a file or in Redis.
#[derive(Clone)]
pub struct ChargeStore(Backend);

#[derive(Clone)]
enum Backend {
    File(Arc<FileLedger>),
    Redis(Arc<RedisLedger>),
}

struct FileLedger {
    path: PathBuf,
    ledger: Mutex<Ledger>,
}

struct RedisLedger {
    conn: Link,
    key: String,
    script: redis::Script,
    timeout: Duration,
    /// One change of this process at a time: its own requests queue here
    /// instead of racing each other in Redis, so a conflict is always
    /// another proxy's change.
    turn: tokio::sync::Mutex<()>,
}

impl ChargeStore {
    /// The ledger kept in `path` (created 0600 at the first change).
    pub fn file(path: &Path) -> Result<ChargeStore, ChargeError> {
        let err = |why: String| ChargeError::File {
            path: path.to_path_buf(),
            why,
        };
        let ledger = match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| err(e.to_string()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ledger::default(),
            Err(e) => return Err(err(e.to_string())),
        };
        Ok(ChargeStore(Backend::File(Arc::new(FileLedger {
            path: path.to_path_buf(),
            ledger: Mutex::new(ledger),
        }))))
    }

    /// The cluster's ledger under `{key_prefix}pay:ledger`.
    pub fn redis(conn: Link, key_prefix: &str, timeout: Duration) -> ChargeStore {
        ChargeStore(Backend::Redis(Arc::new(RedisLedger {
            conn,
            key: format!("{key_prefix}pay:ledger"),
            script: redis::Script::new(SCRIPT),
            timeout,
            turn: tokio::sync::Mutex::new(()),
        })))
    }

    /// The cluster's ledger on the Redis the budgets share, under their
    /// key prefix.
    pub fn shared_with(hosts: &crate::hosts::RedisHosts, timeout: Duration) -> ChargeStore {
        ChargeStore::redis(hosts.connection(), &hosts.settings().key_prefix, timeout)
    }

    /// Applies `change` to the ledger and stores the result; its answer
    /// once stored. `change` may run more than once (Redis, on a conflict),
    /// each time on the newest ledger.
    pub async fn update<R, F>(&self, change: F) -> Result<R, ChargeError>
    where
        F: FnMut(&mut Ledger) -> R + Send + 'static,
        R: Send + 'static,
    {
        match &self.0 {
            Backend::File(f) => {
                let f = f.clone();
                tokio::task::spawn_blocking(move || f.update(change))
                    .await
                    .map_err(|e| ChargeError::Redis(format!("ledger task: {e}")))?
            }
            Backend::Redis(r) => r.update(change).await,
        }
    }

    /// The ledger as it stands.
    pub async fn snapshot(&self) -> Result<Ledger, ChargeError> {
        match &self.0 {
            Backend::File(f) => Ok(f.ledger.lock().unwrap_or_else(|p| p.into_inner()).clone()),
            Backend::Redis(r) => r.read().await.map(|(_, l)| l),
        }
    }
}

// === impl FileLedger ===

impl FileLedger {
    fn update<R>(&self, mut change: impl FnMut(&mut Ledger) -> R) -> Result<R, ChargeError> {
        let mut ledger = self.ledger.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = ledger.clone();
        let answer = change(&mut next);
        if next != *ledger {
            self.write(&next).map_err(|e| ChargeError::File {
                path: self.path.clone(),
                why: e.to_string(),
            })?;
            *ledger = next;
        }
        Ok(answer)
    }

    /// Writes the ledger whole: a crash leaves the old file or the new one.
    fn write(&self, ledger: &Ledger) -> std::io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let bytes = serde_json::to_vec(ledger)?;
        let tmp = self.path.with_extension("json.tmp");
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }
}

// === impl RedisLedger ===

impl RedisLedger {
    async fn read(&self) -> Result<(Vec<u8>, Ledger), ChargeError> {
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("GET");
        cmd.arg(&self.key);
        let get = cmd.query_async::<Option<Vec<u8>>>(&mut conn);
        let bytes = self.timed(get).await?.unwrap_or_default();
        Ok((bytes.clone(), decode(&bytes)?))
    }

    async fn update<R>(&self, mut change: impl FnMut(&mut Ledger) -> R) -> Result<R, ChargeError> {
        let _turn = self.turn.lock().await;
        let (mut seen, mut ledger) = self.read().await?;
        for _ in 0..MAX_ROUNDS {
            let answer = change(&mut ledger);
            let new = serde_json::to_vec(&ledger).map_err(|e| ChargeError::Redis(e.to_string()))?;
            let mut conn = self.conn.clone();
            let mut inv = self.script.key(&self.key);
            inv.arg(&seen).arg(&new).arg(LEDGER_TTL_SECS);
            let reply: Vec<Value> = self.timed(inv.invoke_async(&mut conn)).await?;
            match reply.as_slice() {
                [Value::Int(1)] => return Ok(answer),
                [Value::Int(0), current] => {
                    seen = match current {
                        Value::BulkString(b) => b.clone(),
                        _ => Vec::new(),
                    };
                    ledger = decode(&seen)?;
                }
                _ => {
                    return Err(ChargeError::Redis(
                        "unexpected answer from the ledger script".into(),
                    ))
                }
            }
        }
        Err(ChargeError::Contended)
    }

    async fn timed<T>(
        &self,
        call: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, ChargeError> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(ChargeError::Redis(e.to_string())),
            Err(_) => Err(ChargeError::Redis(format!(
                "no answer within {:?}",
                self.timeout
            ))),
        }
    }
}

fn decode(bytes: &[u8]) -> Result<Ledger, ChargeError> {
    if bytes.is_empty() {
        return Ok(Ledger::default());
    }
    serde_json::from_slice(bytes).map_err(|e| ChargeError::Redis(format!("the shared ledger: {e}")))
}
