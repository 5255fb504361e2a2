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
