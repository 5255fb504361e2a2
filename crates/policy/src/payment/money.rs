//! An amount of money as a site writes it: a currency code and a decimal,
//! kept as digits so that no float ever rounds a price.

use std::fmt;

/// `USD 0.01`: an ISO 4217 code and a non-negative decimal amount.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Money {
    currency: String,
    /// The amount's digits without the point, leading zeros dropped.
    units: u128,
    /// Digits after the point.
    scale: u8,
}

/// Why a price cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MoneyError {
    /// Not `CODE AMOUNT`.
    #[error("expected a currency code and an amount, e.g. \"USD 0.01\"")]
    Shape,
    /// The code is not three letters.
    #[error("{0:?} is not a currency code (three letters, e.g. USD)")]
    Currency(String),
    /// The amount is not plain decimal digits.
    #[error("{0:?} is not a decimal amount (digits, one optional point)")]
    Amount(String),
}

/// More digits than this after the point is no price a site means.
const MAX_SCALE: usize = 18;

impl Money {
    /// Reads `USD 0.01` (the code in any case; the amount as decimal digits
    /// with at most one point, no sign, no exponent).
    pub fn parse(text: &str) -> Result<Money, MoneyError> {
        let mut parts = text.split_ascii_whitespace();
        let (Some(code), Some(amount), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(MoneyError::Shape);
        };
        if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_alphabetic()) {
            return Err(MoneyError::Currency(code.to_string()));
        }
        let bad = || MoneyError::Amount(amount.to_string());
        let (int, frac) = amount.split_once('.').unwrap_or((amount, ""));
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if (int.is_empty() && frac.is_empty()) || !digits(int) || !digits(frac) {
            return Err(bad());
        }
        if frac.len() > MAX_SCALE || int.len() + frac.len() > 38 {
            return Err(bad());
        }
        let units: u128 = format!("{int}{frac}").parse().map_err(|_| bad())?;
        Ok(Money {
            currency: code.to_ascii_uppercase(),
            units,
            scale: frac.len() as u8,
        }
        .normalized())
    }

    /// The currency code, upper case.
    pub fn currency(&self) -> &str {
        &self.currency
    }

    /// Trailing zeros after the point dropped, so equal amounts compare equal.
    fn normalized(mut self) -> Money {
        while self.scale > 0 && self.units.is_multiple_of(10) {
            self.units /= 10;
            self.scale -= 1;
        }
        self
    }
}

impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let digits = format!("{:0>width$}", self.units, width = self.scale as usize + 1);
        let (int, frac) = digits.split_at(digits.len() - self.scale as usize);
        match frac {
            "" => write!(f, "{} {int}", self.currency),
            _ => write!(f, "{} {int}.{frac}", self.currency),
        }
    }
}

/// Why two amounts cannot be added or compared.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SumError {
    /// Amounts in different currencies are never added or compared.
    #[error("{0} and {1} are different currencies")]
    Currencies(String, String),
    /// More than 38 digits (what [`Money::parse`] reads back).
    #[error("the sum has more digits than an amount may have")]
    Overflow,
}

impl Money {
    /// Nothing, in `currency` (three letters; upper-cased).
    pub fn zero(currency: &str) -> Money {
        Money {
            currency: currency.to_ascii_uppercase(),
            units: 0,
            scale: 0,
        }
    }

    /// An amount given in an asset's smallest units (x402's `amount`, e.g.
    /// `10000` of a token with 6 decimals is 0.01): digits only.
    pub fn from_atomic(currency: &str, units: &str, decimals: u8) -> Result<Money, MoneyError> {
        let bad = || MoneyError::Amount(units.to_string());
        if units.is_empty() || !units.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        if usize::from(decimals) > MAX_SCALE {
            return Err(bad());
        }
        let units: u128 = units.parse().map_err(|_| bad())?;
        Ok(Money {
            currency: currency.to_ascii_uppercase(),
            units,
            scale: decimals,
        }
        .normalized())
    }

    /// Whether the amount is nothing.
    pub fn is_zero(&self) -> bool {
        self.units == 0
    }

    /// The two amounts' digits at one scale (the larger), or why not.
    fn aligned(&self, other: &Money) -> Result<(u128, u128, u8), SumError> {
        if self.currency != other.currency {
            return Err(SumError::Currencies(
                self.currency.clone(),
                other.currency.clone(),
            ));
        }
        let scale = self.scale.max(other.scale);
        let widen = |m: &Money| {
            10u128
                .checked_pow(u32::from(scale - m.scale))
                .and_then(|f| m.units.checked_mul(f))
                .ok_or(SumError::Overflow)
        };
        Ok((widen(self)?, widen(other)?, scale))
    }

    /// `self + other`, exactly.
    pub fn checked_add(&self, other: &Money) -> Result<Money, SumError> {
        let (a, b, scale) = self.aligned(other)?;
        let units = a
            .checked_add(b)
            .filter(|u| *u < 10u128.pow(38))
            .ok_or(SumError::Overflow)?;
        Ok(self.with(units, scale))
    }

    /// `self - other`, or nothing when `other` is larger.
    pub fn saturating_sub(&self, other: &Money) -> Result<Money, SumError> {
        let (a, b, scale) = self.aligned(other)?;
        Ok(self.with(a.saturating_sub(b), scale))
    }

    /// How the two amounts compare.
    pub fn compare(&self, other: &Money) -> Result<std::cmp::Ordering, SumError> {
        let (a, b, _) = self.aligned(other)?;
        Ok(a.cmp(&b))
    }

    fn with(&self, units: u128, scale: u8) -> Money {
        Money {
            currency: self.currency.clone(),
            units,
            scale,
        }
        .normalized()
    }
}

impl serde::Serialize for Money {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Money {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Money, D::Error> {
        let text = String::deserialize(d)?;
        Money::parse(&text).map_err(serde::de::Error::custom)
    }
}
