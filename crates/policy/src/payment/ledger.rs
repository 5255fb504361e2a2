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
    /// Holds that expired unsettled (a request sent and abandoned, or a
    /// proxy killed mid-request): the site may have charged them, so their
    /// amounts are counted in `spent`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub possibly: u64,
    /// A charge in another currency than the limits: recorded here, its
    /// hold's amount counted instead, and the host paid no more today.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foreign: Option<Money>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// How a charge went into the ledger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settled {
    /// Counted as charged (or nothing was charged).
    Counted,
    /// In another currency than the hold: the hold's amount is counted
    /// (`None` when the hold had already expired, and was counted then),
    /// the charge recorded, the host refused for the rest of the day.
    Foreign(Option<Money>),
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
    /// forgotten; holds stand until settled or expired), and counts
    /// expired holds as possibly charged: nothing said the site did not
    /// charge them, and money that may be spent is counted.
    fn refresh(&mut self, now_unix: u64) {
        let today = now_unix / DAY;
        if self.day != today {
            self.day = today;
            self.hosts.clear();
        }
        let (live, expired) = std::mem::take(&mut self.holds)
            .into_iter()
            .partition(|(_, h)| h.until > now_unix);
        self.holds = live;
        for (_, hold) in expired {
            let entry = self.host_entry(&hold.host, &hold.amount);
            if let Ok(sum) = entry.spent.checked_add(&hold.amount) {
                entry.spent = sum;
            }
            entry.possibly += 1;
        }
    }

    fn host_entry(&mut self, host: &str, like: &Money) -> &mut HostSpend {
        self.hosts
            .entry(host.to_string())
            .or_insert_with(|| HostSpend {
                spent: Money::zero(like.currency()),
                bought: 0,
                possibly: 0,
                foreign: None,
            })
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
        if let Some(price) = self.hosts.get(&host).and_then(|h| h.foreign.clone()) {
            return Err(Over::Currency {
                price,
                limits: amount.currency().to_string(),
            });
        }
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
    /// more than was held: money spent is counted, always. A charge in
    /// another currency cannot be added up: the hold's amount is counted
    /// in its place, the charge kept in `foreign`, and the host refused
    /// for the rest of the day.
    pub fn settle(
        &mut self,
        id: &str,
        host: &str,
        charged: Option<&Money>,
        now_unix: u64,
    ) -> Settled {
        self.refresh(now_unix);
        let hold = self.holds.remove(id);
        let Some(charged) = charged else {
            return Settled::Counted;
        };
        let host = crate::budget::host_key(host).into_owned();
        let like = hold.as_ref().map_or(charged, |h| &h.amount).clone();
        let entry = self.host_entry(&host, &like);
        entry.bought += 1;
        if let Ok(sum) = entry.spent.checked_add(charged) {
            entry.spent = sum;
            return Settled::Counted;
        }
        entry.foreign = Some(charged.clone());
        let counted = hold.map(|h| h.amount);
        if let Some(sum) = counted
            .as_ref()
            .and_then(|m| entry.spent.checked_add(m).ok())
        {
            entry.spent = sum;
        }
        Settled::Foreign(counted)
    }

    /// The hold `id` ends unused (the request failed or was not charged).
    pub fn release(&mut self, id: &str, now_unix: u64) {
        self.refresh(now_unix);
        self.holds.remove(id);
    }
}
