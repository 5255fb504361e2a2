//! The report's payments table: what each host was paid (exact sums of
//! the audit lines' `charged`), pages bought, pages saved from a second
//! charge (`saved_charge`: a 304 or a stored copy instead of buying again),
//! and prices refused.

use std::collections::BTreeMap;
use std::io::{self, Write};

use mannerly_policy::payment::Money;

#[derive(Default)]
pub struct Payments {
    hosts: BTreeMap<String, Paid>,
}

#[derive(Default, Clone)]
struct Paid {
    /// By currency.
    spent: BTreeMap<String, Money>,
    bought: u64,
    saved: u64,
    refused: u64,
}

impl Paid {
    fn add(&mut self, other: &Paid) {
        for m in other.spent.values() {
            add_money(&mut self.spent, m);
        }
        self.bought += other.bought;
        self.saved += other.saved;
        self.refused += other.refused;
    }
}

fn add_money(sums: &mut BTreeMap<String, Money>, m: &Money) {
    let sum = sums
        .entry(m.currency().to_string())
        .or_insert_with(|| Money::zero(m.currency()));
    if let Ok(s) = sum.checked_add(m) {
        *sum = s;
    }
}

impl Payments {
    /// One decision line's part in the payments.
    pub fn record(
        &mut self,
        host: &str,
        outcome: &str,
        charged: Option<&str>,
        saved: Option<&str>,
    ) {
        let refused = outcome == "payment_refused";
        if charged.is_none() && saved.is_none() && !refused {
            return;
        }
        let p = self.hosts.entry(host.to_string()).or_default();
        if let Some(c) = charged {
            p.bought += 1;
            if let Ok(m) = Money::parse(c) {
                add_money(&mut p.spent, &m);
            }
        }
        p.saved += u64::from(saved.is_some());
        p.refused += u64::from(refused);
    }

    /// The table, when anything was paid, saved or refused.
    pub fn write_text(&self, out: &mut impl Write) -> io::Result<()> {
        if self.hosts.is_empty() {
            return Ok(());
        }
        writeln!(out)?;
        let head = ("PAID HOST", "SPENT", "BOUGHT", "SAVED", "REFUSED");
        writeln!(
            out,
            "{:<32} {:>20} {:>7} {:>7} {:>8}",
            head.0, head.1, head.2, head.3, head.4
        )?;
        let row = |out: &mut dyn Write, name: &str, p: &Paid| {
            let spent = match p.spent.len() {
                0 => "-".to_string(),
                _ => p
                    .spent
                    .values()
                    .map(Money::to_string)
                    .collect::<Vec<_>>()
                    .join(" + "),
            };
            writeln!(
                out,
                "{:<32} {:>20} {:>7} {:>7} {:>8}",
                name, spent, p.bought, p.saved, p.refused
            )
        };
        let mut all = Paid::default();
        for (host, p) in &self.hosts {
            row(out, host, p)?;
            all.add(p);
        }
        row(out, "ALL HOSTS", &all)?;
        writeln!(
            out,
            "SPENT: the sum of crawler-charged (and x402 payments). SAVED: bought pages \
             revalidated or served stored instead of bought again. REFUSED: prices over a limit, not sent."
        )
    }
}
