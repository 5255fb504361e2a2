//! The day's spending: what each host has been paid, and what is held for
//! requests in flight. One value, changed whole by [`Ledger::reserve`],
//! [`Ledger::settle`] and [`Ledger::release`], so a store can keep it in a
//! file or under compare-and-set in Redis and every proxy of a cluster
//! counts against one budget.
//!
//! A price is held before the request that may be charged is sent, and the
//! hold counts as spent until it is settled with what the site charged or
//! released: concurrent requests cannot together pass a limit.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Money, Over, PaymentParams};

/// Seconds in a UTC day.
const DAY: u64 = 86_400;

/// One UTC day's charges and the holds in flight.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    /// Days since 1970-01-01 (UTC) that `hosts` counts.
    pub day: u64,
    /// What each host was paid today.
    pub hosts: BTreeMap<String, HostSpend>,
    /// Holds by id.
    pub holds: BTreeMap<String, Hold>,
}

/// What one host was paid in a day.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostSpend {
    /// The sum of its charges.
    pub spent: Money,
    /// How many pages were charged.
    pub bought: u64,
}

/// A price held for a request in flight.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    /// The host it will be paid to.
    pub host: String,
    /// The most it may cost.
    pub amount: Money,
    /// Unix seconds after which it is taken back unsettled.
    pub until: u64,
}

impl Ledger {
    /// Starts the day of `now_unix` (the charges of a day before are
    /// forgotten; holds stand until settled or expired), and drops expired
    /// holds.
    fn refresh(&mut self, now_unix: u64) {
        let today = now_unix / DAY;
        if self.day != today {
            self.day = today;
            self.hosts.clear();
        }
        self.holds.retain(|_, h| h.until > now_unix);
    }

    /// Spent and held today for `host` and in all, in `currency`.
    pub fn spent(&self, host: &str, currency: &str) -> (Money, Money) {
        let mut host_total = Money::zero(currency);
        let mut day_total = Money::zero(currency);
        let add = |sum: &mut Money, m: &Money| {
            // Amounts of another currency were never admitted by `judge`.
            if let Ok(s) = sum.checked_add(m) {
                *sum = s;
            }
        };
        for (h, s) in &self.hosts {
            add(&mut day_total, &s.spent);
            if h == host {
                add(&mut host_total, &s.spent);
            }
        }
        for hold in self.holds.values() {
            add(&mut day_total, &hold.amount);
            if hold.host == host {
                add(&mut host_total, &hold.amount);
            }
        }
        (host_total, day_total)
    }

    /// Holds `amount` for a request to `host` under `id`, if the limits
    /// allow it with everything spent and held today.
    pub fn reserve(
        &mut self,
        params: &PaymentParams,
        host: &str,
        amount: &Money,
        id: &str,
        now_unix: u64,
    ) -> Result<(), Over> {
        self.refresh(now_unix);
        let host = crate::budget::host_key(host).into_owned();
        let (host_spent, day_spent) = self.spent(&host, amount.currency());
        params.judge(&host, amount, &host_spent, &day_spent)?;
        self.holds.insert(
            id.to_string(),
            Hold {
                host,
                amount: amount.clone(),
                until: now_unix.saturating_add(params.hold_secs),
            },
        );
        Ok(())
    }

    /// The hold `id` ends with what the site charged (`None`: nothing).
    /// A charge is recorded even when its hold had expired, or when it is
    /// more than was held: money spent is counted, always.
    pub fn settle(&mut self, id: &str, host: &str, charged: Option<&Money>, now_unix: u64) {
        self.refresh(now_unix);
        self.holds.remove(id);
        let Some(charged) = charged else {
            return;
        };
        let host = crate::budget::host_key(host).into_owned();
        let entry = self.hosts.entry(host).or_insert_with(|| HostSpend {
            spent: Money::zero(charged.currency()),
            bought: 0,
        });
        // A charge in another currency than earlier ones of the day is
        // still a page bought; its amount is in the audit line.
        if let Ok(sum) = entry.spent.checked_add(charged) {
            entry.spent = sum;
        }
        entry.bought += 1;
    }

    /// The hold `id` ends unused (the request failed or was not charged).
    pub fn release(&mut self, id: &str, now_unix: u64) {
        self.refresh(now_unix);
        self.holds.remove(id);
    }
}
