//! What the operator allows to be paid: the `[payment]` table, and the one
//! rule a price is judged by against what has been spent.

use std::fmt;

use serde::{Deserialize, Deserializer};

use super::Money;
use crate::ParamError;

/// The `[payment]` table. Nothing is paid unless `hosts` names the host and
/// `max_price` and `max_per_day` are set.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PaymentParams {
    /// Hosts that may be paid: `example.org` or `*.example.org`.
    pub hosts: Vec<String>,
    /// The most one request may cost (`USD 0.01`); empty: nothing is paid.
    #[serde(deserialize_with = "optional_money")]
    pub max_price: Option<Money>,
    /// The most one host may be paid in a UTC day; empty: no per-host limit.
    #[serde(deserialize_with = "optional_money")]
    pub max_per_host_per_day: Option<Money>,
    /// The most paid in all in a UTC day; empty: nothing is paid.
    #[serde(deserialize_with = "optional_money")]
    pub max_per_day: Option<Money>,
    /// How a Pay Per Crawl price is accepted.
    pub offer: Offer,
    /// Seconds a reservation is held for a request in flight before it is
    /// taken back (a proxy that died mid-request holds nothing for ever).
    pub hold_secs: u64,
    /// The command that signs an x402 payment (program and arguments);
    /// empty: x402 is never paid.
    pub x402_signer: Vec<String>,
    /// The longest the signer may take, in seconds.
    pub x402_signer_timeout_secs: u64,
    /// The x402 assets that may be paid and what one of their units is worth.
    pub x402_assets: Vec<X402Asset>,
}

/// How a Pay Per Crawl price is accepted (`payment.offer`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Offer {
    /// `crawler-max-price: <max_price>` on every request to a host that may
    /// be paid, reserved before it is sent.
    #[default]
    MaxPrice,
    /// Nothing up front; a 402's `crawler-price` within limits is sent again
    /// once with `crawler-exact-price`.
    ExactPrice,
}

/// An x402 asset mannerly may pay in.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct X402Asset {
    /// `network` as the requirement names it (`eip155:8453`, `base`).
    pub network: String,
    /// `asset` as the requirement names it (a token contract).
    pub asset: String,
    /// The currency the limits count it in (`USD` for USDC).
    pub currency: String,
    /// Decimals of the asset: `amount` 10000 with 6 decimals is 0.01.
    pub decimals: u8,
}

impl Default for PaymentParams {
    fn default() -> Self {
        PaymentParams {
            hosts: Vec::new(),
            max_price: None,
            max_per_host_per_day: None,
            max_per_day: None,
            offer: Offer::MaxPrice,
            hold_secs: 300,
            x402_signer: Vec::new(),
            x402_signer_timeout_secs: 10,
            x402_assets: Vec::new(),
        }
    }
}

fn optional_money<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Money>, D::Error> {
    let text = String::deserialize(d)?;
    match text.trim() {
        "" => Ok(None),
        t => Money::parse(t).map(Some).map_err(serde::de::Error::custom),
    }
}

/// Why a price is not paid: which limit it is over, or why it may not be
/// paid at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Over {
    /// The host is not in `payment.hosts` (or nothing is paid at all).
    Host,
    /// Above `max_price`.
    PerRequest {
        /// The price asked.
        price: Money,
        /// `max_price`.
        max: Money,
    },
    /// It would take the host past `max_per_host_per_day`.
    PerHostPerDay {
        /// Spent and held for the host today.
        spent: Money,
        /// The limit.
        max: Money,
    },
    /// It would take the day past `max_per_day`.
    PerDay {
        /// Spent and held today.
        spent: Money,
        /// The limit.
        max: Money,
    },
    /// The price is in another currency than the limits.
    Currency {
        /// The price asked.
        price: Money,
        /// The limits' currency.
        limits: String,
    },
    /// An x402 requirement with no asset `x402_assets` names, or no signer.
    NotPayable(String),
}

impl Over {
    /// The limit's name as the decision and the audit line say it.
    pub fn limit(&self) -> &'static str {
        match self {
            Over::Host => "host",
            Over::PerRequest { .. } => "per_request",
            Over::PerHostPerDay { .. } => "per_host_per_day",
            Over::PerDay { .. } => "per_day",
            Over::Currency { .. } => "currency",
            Over::NotPayable(_) => "not_payable",
        }
    }
}

impl fmt::Display for Over {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Over::Host => write!(f, "the host is not one payment.hosts allows to be paid"),
            Over::PerRequest { price, max } => {
                write!(f, "{price} is above payment.max_price ({max})")
            }
            Over::PerHostPerDay { spent, max } => write!(
                f,
                "the host has {spent} spent or held today; payment.max_per_host_per_day is {max}"
            ),
            Over::PerDay { spent, max } => write!(
                f,
                "{spent} spent or held today; payment.max_per_day is {max}"
            ),
            Over::Currency { price, limits } => {
                write!(f, "{price} is not in {limits}, the currency of the limits")
            }
            Over::NotPayable(why) => f.write_str(why),
        }
    }
}

impl PaymentParams {
    /// Checks the table: amounts in one currency, paying needs both
    /// `max_price` and `max_per_day`.
    pub fn validate(self) -> Result<PaymentParams, ParamError> {
        let limits = [
            ("payment.max_price", &self.max_price),
            ("payment.max_per_host_per_day", &self.max_per_host_per_day),
            ("payment.max_per_day", &self.max_per_day),
        ];
        let mut currency: Option<&str> = None;
        for (key, m) in limits.iter().filter_map(|(k, m)| Some((*k, m.as_ref()?))) {
            match currency {
                Some(c) if c != m.currency() => {
                    return Err(ParamError::new(
                        key,
                        format!("{m} is not in {c}: every limit is in one currency"),
                    ))
                }
                _ => currency = Some(m.currency()),
            }
        }
        if !self.hosts.is_empty() && (self.max_price.is_none() || self.max_per_day.is_none()) {
            return Err(ParamError::new(
                "payment.hosts",
                "hosts may be paid only with payment.max_price and payment.max_per_day set",
            ));
        }
        if let Some(h) = self.hosts.iter().find(|h| {
            let name = h.strip_prefix("*.").unwrap_or(h);
            name.is_empty() || name.contains(['*', '/', ':', ' '])
        }) {
            return Err(ParamError::new(
                "payment.hosts",
                format!("{h:?} is not a host name or *.suffix"),
            ));
        }
        if self.hold_secs == 0 {
            return Err(ParamError::new("payment.hold_secs", "must be at least 1"));
        }
        for a in &self.x402_assets {
            if Some(a.currency.to_ascii_uppercase().as_str()) != currency {
                return Err(ParamError::new(
                    "payment.x402_assets",
                    format!(
                        "{} on {} is counted in {:?}, not in the limits' currency",
                        a.asset, a.network, a.currency
                    ),
                ));
            }
        }
        Ok(self)
    }

    /// Whether `host` may be paid at all.
    pub fn may_pay(&self, host: &str) -> bool {
        let host = crate::budget::host_key(host);
        self.max_price.is_some()
            && self.max_per_day.is_some()
            && self.hosts.iter().any(|p| match p.strip_prefix("*.") {
                Some(parent) => host
                    .strip_suffix(parent)
                    .is_some_and(|sub| sub.len() > 1 && sub.ends_with('.')),
                None => p.eq_ignore_ascii_case(&host),
            })
    }

    /// The Pay Per Crawl offer sent up front, when `offer = "max_price"`
    /// and the host may be paid.
    pub fn standing_offer(&self, host: &str) -> Option<&Money> {
        match self.offer {
            Offer::MaxPrice if self.may_pay(host) => self.max_price.as_ref(),
            _ => None,
        }
    }

    /// The one rule: `price` may be paid to `host`, which has `host_spent`
    /// spent or held today, out of `day_spent` in all.
    pub fn judge(
        &self,
        host: &str,
        price: &Money,
        host_spent: &Money,
        day_spent: &Money,
    ) -> Result<(), Over> {
        let (Some(max), Some(day_max)) = (&self.max_price, &self.max_per_day) else {
            return Err(Over::Host);
        };
        if !self.may_pay(host) {
            return Err(Over::Host);
        }
        let currency = || Over::Currency {
            price: price.clone(),
            limits: max.currency().to_string(),
        };
        let above = |spent: &Money, limit: &Money| -> Result<bool, Over> {
            let after = spent.checked_add(price).map_err(|_| currency())?;
            Ok(after.compare(limit).map_err(|_| currency())?.is_gt())
        };
        if above(&Money::zero(price.currency()), max)? {
            return Err(Over::PerRequest {
                price: price.clone(),
                max: max.clone(),
            });
        }
        if let Some(host_max) = &self.max_per_host_per_day {
            if above(host_spent, host_max)? {
                return Err(Over::PerHostPerDay {
                    spent: host_spent.clone(),
                    max: host_max.clone(),
                });
            }
        }
        if above(day_spent, day_max)? {
            return Err(Over::PerDay {
                spent: day_spent.clone(),
                max: day_max.clone(),
            });
        }
        Ok(())
    }

    /// The currency every limit is counted in (`None`: nothing is paid).
    pub fn currency(&self) -> Option<&str> {
        self.max_per_day.as_ref().map(Money::currency)
    }

    /// An x402 amount as money, when its asset is one `x402_assets` names.
    pub fn x402_price(&self, network: &str, asset: &str, amount: &str) -> Result<Money, Over> {
        let a = self
            .x402_assets
            .iter()
            .find(|a| a.network == network && a.asset.eq_ignore_ascii_case(asset))
            .ok_or_else(|| {
                Over::NotPayable(format!(
                    "{asset} on {network} is not an asset payment.x402_assets names"
                ))
            })?;
        Money::from_atomic(&a.currency, amount, a.decimals)
            .map_err(|e| Over::NotPayable(format!("x402 amount: {e}")))
    }
}
