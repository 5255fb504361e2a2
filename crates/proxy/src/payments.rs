//! Paying sites within the operator's limits: the day's ledger (a file in
//! the data dir, or Redis shared by the cluster), holds taken before a
//! priced request is sent and settled with what the site charged, and the
//! x402 payment signer the operator provides. The rules are
//! `mannerly_policy::payment`; this is where they meet the clock, the
//! store and the signer process.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use mannerly_policy::payment::{Money, Over, PaymentParams, Settled};
use mannerly_state::charges::ChargeStore;

use crate::clock::Clock;
use crate::config::Config;
use crate::error::StartError;

mod signer;

pub(crate) use signer::X402Signer;

/// The ledger file in the data dir.
pub(crate) const LEDGER_FILE: &str = "payments.json";

/// Why a price was not held.
#[derive(Debug)]
pub(crate) enum Refused {
    /// Over a limit, or not payable at all.
    Over(Over),
    /// The ledger could not be read or stored: nothing is paid on a count
    /// that may be lost.
    Ledger(String),
}

impl Refused {
    /// The limit's name for the decision and the audit line.
    pub(crate) fn limit(&self) -> &'static str {
        match self {
            Refused::Over(o) => o.limit(),
            Refused::Ledger(_) => "ledger",
        }
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Over(o) => write!(f, "{o}"),
            Refused::Ledger(why) => write!(f, "the payment ledger cannot be updated: {why}"),
        }
    }
}

/// What every request shares for paying.
pub(crate) struct Payments {
    pub(crate) params: PaymentParams,
    store: ChargeStore,
    clock: Clock,
    pub(crate) signer: Option<X402Signer>,
    /// Hold ids: unique across the cluster by the process prefix.
    prefix: String,
    next: AtomicU64,
    /// Why paying stopped: a settlement could not be written, so the
    /// ledger may not count money a site took. Fail closed until restart.
    stopped: Mutex<Option<String>>,
}

/// A price held for one request. Settled with what the site charged, or
/// released; dropped unsettled before it was sent (the request failed or
/// was abandoned), it is released in the background. Dropped after it was
/// sent (the client went away before the answer), it stands: the site may
/// have charged, so it counts until it expires, then counts as possibly
/// charged (`payment.hold_secs`).
pub(crate) struct Held {
    payments: Arc<Payments>,
    id: String,
    host: String,
    /// The most it may cost.
    pub(crate) amount: Money,
    done: bool,
    sent: bool,
}

impl Payments {
    /// The ledger the configuration names: Redis with the Redis budget
    /// backend (`conn`), else `payments.json` in the data dir.
    pub(crate) fn start(
        cfg: &Config,
        clock: Clock,
        shared: Option<&mannerly_state::hosts::RedisHosts>,
        prefix: String,
    ) -> Result<Payments, StartError> {
        let store = match shared {
            Some(hosts) => {
                // Counting money may wait longer than a budget step would.
                let timeout = Duration::from_secs_f64(cfg.state.command_timeout_ms / 1000.0)
                    .max(Duration::from_secs(2));
                ChargeStore::shared_with(hosts, timeout)
            }
            None => {
                let path = cfg.data_dir.join(LEDGER_FILE);
                ChargeStore::file(&path).map_err(|e| StartError::Store {
                    path,
                    why: e.to_string(),
                })?
            }
        };
        Ok(Payments {
            signer: X402Signer::from_params(&cfg.payment),
            params: cfg.payment.clone(),
            store,
            clock,
            prefix,
            next: AtomicU64::new(0),
            stopped: Mutex::new(None),
        })
    }

    /// Why paying stopped, if it did (for `/readyz`).
    pub(crate) fn stopped(&self) -> Option<String> {
        self.stopped
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn now_unix(&self) -> u64 {
        self.clock
            .wall()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    }

    /// Holds `amount` for a request to `host`, if the limits allow it.
    pub(crate) async fn hold(
        self: &Arc<Self>,
        host: &str,
        amount: &Money,
    ) -> Result<Held, Refused> {
        if let Some(why) = self.stopped() {
            return Err(Refused::Ledger(format!("paying is stopped: {why}")));
        }
        let id = format!(
            "{}-{}",
            self.prefix,
            self.next.fetch_add(1, Ordering::Relaxed)
        );
        let (p, h, m, i, now) = (
            self.params.clone(),
            host.to_string(),
            amount.clone(),
            id.clone(),
            self.now_unix(),
        );
        self.store
            .update(move |l| l.reserve(&p, &h, &m, &i, now))
            .await
            .map_err(|e| Refused::Ledger(e.to_string()))?
            .map_err(Refused::Over)?;
        Ok(Held {
            payments: self.clone(),
            id,
            host: host.to_string(),
            amount: amount.clone(),
            done: false,
            sent: false,
        })
    }

    /// Ends a hold with what was charged. A ledger that cannot be written
    /// stops all further paying: the next limit would be judged on a count
    /// that may lack money a site took.
    async fn end(
        &self,
        id: String,
        host: String,
        charged: Option<Money>,
    ) -> Result<Settled, String> {
        let now = self.now_unix();
        let ended = self
            .store
            .update(move |l| match &charged {
                Some(_) => l.settle(&id, &host, charged.as_ref(), now),
                None => {
                    l.release(&id, now);
                    Settled::Counted
                }
            })
            .await;
        ended.map_err(|e| {
            let why = format!("a settlement could not be written to the payment ledger ({e})");
            tracing::error!(
                "{why}: paying is stopped until the proxy restarts with a writable ledger"
            );
            *self.stopped.lock().unwrap_or_else(|p| p.into_inner()) = Some(why.clone());
            why
        })
    }
}

impl Held {
    /// The request is going to the site: from here an abandoned request
    /// keeps its hold.
    pub(crate) fn sent(&mut self) {
        self.sent = true;
    }

    /// The request was charged `charged` (`None`: not charged).
    pub(crate) async fn settle(mut self, charged: Option<Money>) -> Result<Settled, String> {
        self.done = true;
        let (id, host) = (std::mem::take(&mut self.id), std::mem::take(&mut self.host));
        self.payments.end(id, host, charged).await
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if self.sent {
            tracing::info!(
                "a priced request to {} was abandoned after it was sent: its hold of {} stands until it expires, then counts as possibly charged",
                self.host,
                self.amount
            );
            return;
        }
        let payments = self.payments.clone();
        let (id, host) = (std::mem::take(&mut self.id), std::mem::take(&mut self.host));
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move { payments.end(id, host, None).await });
        }
    }
}
