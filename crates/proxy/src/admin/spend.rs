//! What was paid to each host since start, from the audit lines: exact
//! sums (`Money`), which `/metrics` shows as gauges (Prometheus holds
//! floats; the exact figures are the audit log's, `mannerly report`).

use std::collections::BTreeMap;
use std::sync::Mutex;

use mannerly_policy::payment::Money;
use mannerly_policy::AuditRecord;

/// Per host: spent (by currency), pages bought, pages saved from a second
/// charge by a 304.
#[derive(Default)]
pub(super) struct Spend(Mutex<BTreeMap<String, HostSpent>>);

#[derive(Default, Clone)]
pub(super) struct HostSpent {
    pub(super) spent: BTreeMap<String, Money>,
    pub(super) bought: u64,
    pub(super) saved: u64,
}

impl Spend {
    /// Counts one line's charge or saved charge.
    pub(super) fn observe(&self, rec: &AuditRecord) {
        if rec.charged.is_none() && rec.saved_charge.is_none() {
            return;
        }
        let mut hosts = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let h = hosts.entry(rec.host.clone()).or_default();
        if let Some(charged) = &rec.charged {
            h.bought += 1;
            if let Ok(m) = Money::parse(charged) {
                let sum = h
                    .spent
                    .entry(m.currency().to_string())
                    .or_insert_with(|| Money::zero(m.currency()));
                if let Ok(s) = sum.checked_add(&m) {
                    *sum = s;
                }
            }
        }
        if rec.saved_charge.is_some() {
            h.saved += 1;
        }
    }

    /// Every host's figures, sorted by host.
    pub(super) fn hosts(&self) -> Vec<(String, HostSpent)> {
        let hosts = self.0.lock().unwrap_or_else(|p| p.into_inner());
        hosts.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}

/// A sum as Prometheus takes it (a float: for graphs, not for accounts).
pub(super) fn as_gauge(m: &Money) -> f64 {
    m.to_string()
        .split_once(' ')
        .and_then(|(_, amount)| amount.parse().ok())
        .unwrap_or(0.0)
}
