//! Which budget a request belongs to: its site (the registrable domain by
//! the Public Suffix List, private section included), its host name, the
//! address it resolves to, or a group the operator names.
//!
//! A site that serves `www.`, `shop.` and a hundred customer names from one
//! set of servers limits them together (nginx `limit_req_zone`, HAProxy
//! stick tables, Cloudflare zones); a budget per name would send it twenty
//! times the pace over twenty names. robots.txt is not grouped: it stays
//! per origin (RFC 9309).
//!
//! Every name gets a group, never an error:
//!
//! | the name | its group under `site` |
//! |---|---|
//! | `www.example.co.uk` | `example.co.uk` |
//! | `alice.blogspot.com` (a private suffix) | `alice.blogspot.com` |
//! | `a.site.test` (a suffix not on the list) | `site.test` (the list's default rule `*`) |
//! | `co.uk`, `blogspot.com` (a suffix itself), `localhost` (one label) | the name itself |
//! | `192.0.2.1`, `[2001:db8::1]` (an IP literal) | the address |
//!
//! Named groups come first (a host pattern, else an address block), then a
//! host with its own `[budget.hosts."name"]` numbers is its own group, then
//! `budget.group_by`.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use serde::Serialize;

pub use super::params::{GroupBy, NamedGroup};
use super::{host_key, BudgetParams, HostOverride};
use crate::{parse_host_ip, Cidr, ParamError};

/// The prefix of a named group's key: no host name has a colon outside
/// IPv6 brackets, so it never meets a host's or a site's key.
pub const NAMED_PREFIX: &str = "group:";

/// What a group's key names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupKind {
    /// A registrable domain.
    Site,
    /// One host name: `group_by = "host"`, a host with its own numbers, or
    /// a name with no registrable domain.
    Host,
    /// An address.
    Ip,
    /// A group of `budget.groups`.
    Named,
}

/// The budget a request belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// The budget's key: `example.com`, `www.example.com`, `192.0.2.1`,
    /// `[2001:db8::1]` or `group:NAME`.
    pub key: String,
    /// What the key names.
    pub kind: GroupKind,
}

impl fmt::Display for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key)
    }
}

/// The registrable domain of `host` (lower case, no trailing dot; an
/// internationalised name in its `xn--` form): `None` for an IP literal, a
/// single label, or a name that is a public suffix itself. A suffix the
/// list does not know is one label (the list's default rule).
pub fn registrable_domain(host: &str) -> Option<String> {
    let host = ascii_name(host)?;
    if parse_host_ip(&host).is_some() || host.starts_with('[') {
        return None;
    }
    if host.split('.').any(str::is_empty) {
        return None;
    }
    let domain = psl::domain(host.as_bytes())?;
    std::str::from_utf8(domain.as_bytes())
        .ok()
        .map(str::to_owned)
}

/// `host` as the budget keys it (see [`host_key`]), an internationalised
/// name in its ASCII (`xn--`) form, so that both spellings share a budget;
/// `None` when it cannot be written so.
fn ascii_name(host: &str) -> Option<String> {
    let key = host_key(host);
    if key.is_ascii() {
        return Some(key.into_owned());
    }
    idna::domain_to_ascii(&key).ok()
}

/// The group key of an address: as a host name would write it.
fn ip_key(ip: IpAddr) -> String {
    match ip.to_canonical() {
        // By hand rather than `to_string`: every request to an address
        // takes one, and `Display` formats through `fmt` twice.
        IpAddr::V4(v4) => {
            let mut out = String::with_capacity(15);
            let mut digits = itoa::Buffer::new();
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push('.');
                }
                out.push_str(digits.format(octet));
            }
            out
        }
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

/// How long a request to a host with a robots.txt Crawl-delay waits, inside
/// a group shared with other hosts, after that host's last send: the delay
/// is the host's own, whatever its group's pace allows (the group's turn
/// comes after this wait).
pub fn crawl_delay_wait(
    last_sent: Option<std::time::Instant>,
    delay: std::time::Duration,
    now: std::time::Instant,
) -> std::time::Duration {
    last_sent.map_or(std::time::Duration::ZERO, |sent| {
        (sent + delay).saturating_duration_since(now)
    })
}

// === impl BudgetParams: groups ===

impl BudgetParams {
    /// The group of a request to `host` (any case, port ignored), whose
    /// name resolved to `addr` when that is known. Never fails: a name
    /// with no registrable domain is its own group.
    pub fn group_of(&self, host: &str, addr: Option<IpAddr>) -> Group {
        let name = ascii_name(host).unwrap_or_else(|| host_key(host).into_owned());
        let literal = parse_host_ip(&name);
        let addr = literal.or(addr);
        for (group, g) in &self.groups {
            let by_name = g.hosts.iter().any(|p| pattern_matches(p, &name));
            let by_addr = addr.is_some_and(|a| g.nets.iter().any(|n| n.contains(a)));
            if by_name || by_addr {
                return Group {
                    key: format!("{NAMED_PREFIX}{group}"),
                    kind: GroupKind::Named,
                };
            }
        }
        let own = |kind| Group {
            key: name.clone(),
            kind,
        };
        if let Some(ip) = literal {
            return Group {
                key: ip_key(ip),
                kind: GroupKind::Ip,
            };
        }
        if self.hosts.contains_key(&name) {
            return own(GroupKind::Host);
        }
        match self.group_by {
            GroupBy::Host => own(GroupKind::Host),
            GroupBy::Ip => match addr {
                Some(ip) => Group {
                    key: ip_key(ip),
                    kind: GroupKind::Ip,
                },
                None => own(GroupKind::Host),
            },
            GroupBy::Site => match registrable_domain(&name) {
                Some(key) => Group {
                    key,
                    kind: GroupKind::Site,
                },
                None => own(GroupKind::Host),
            },
        }
    }

    /// Whether `group` is one host's alone: a host name, or an IP
    /// literal when names are not grouped by address. Such a budget may
    /// carry that host's robots.txt Crawl-delay; a shared one may not.
    pub fn alone(&self, group: &Group) -> bool {
        match group.kind {
            GroupKind::Host => true,
            GroupKind::Ip => self.group_by != GroupBy::Ip,
            GroupKind::Site | GroupKind::Named => false,
        }
    }

    /// Whether the group of a name can depend on its address: then the
    /// proxy resolves it before asking [`BudgetParams::group_of`]. When
    /// not, the address changes no group (a test holds this), and the
    /// proxy keeps a placed host's group until the rules change.
    pub fn groups_by_address(&self) -> bool {
        self.group_by == GroupBy::Ip || self.groups.values().any(|g| !g.addresses.is_empty())
    }

    /// The numbers of a named group, by its key.
    pub(crate) fn group_override(&self, key: &str) -> Option<HostOverride> {
        let g = self.groups.get(key.strip_prefix(NAMED_PREFIX)?)?;
        Some(group_numbers(g))
    }

    /// Checks and normalises `budget.groups`: names, patterns, blocks, and
    /// no two groups (nor a group and a host with its own numbers) that
    /// could claim one request, both named in the error.
    pub(crate) fn validate_groups(&mut self) -> Result<(), ParamError> {
        let mut groups = BTreeMap::new();
        for (name, mut g) in std::mem::take(&mut self.groups) {
            let prefix = format!("budget.groups.{name:?}");
            let named_ok = name.starts_with(|c: char| c.is_ascii_alphabetic())
                && name.len() <= 64
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
            if !named_ok {
                let why = "a group name is a letter then up to 63 letters, digits, '-', '_' or '.'";
                return Err(ParamError::new(prefix, why));
            }
            if g.hosts.is_empty() && g.addresses.is_empty() {
                let why = "names no hosts and no addresses";
                return Err(ParamError::new(prefix, why));
            }
            g.hosts = g
                .hosts
                .iter()
                .map(|p| {
                    normal_pattern(p).map_err(|why| ParamError::new(format!("{prefix}.hosts"), why))
                })
                .collect::<Result<_, _>>()?;
            g.nets = g
                .addresses
                .iter()
                .map(|a| {
                    Cidr::parse(a)
                        .map_err(|why| ParamError::new(format!("{prefix}.addresses"), why))
                })
                .collect::<Result<_, _>>()?;
            self.check_override(&group_numbers(&g), &prefix)?;
            groups.insert(name, g);
        }
        check_overlaps(&groups, self.hosts.keys())?;
        self.groups = groups;
        Ok(())
    }
}

/// A named group's numbers, as an override of the `[budget]` table.
fn group_numbers(g: &NamedGroup) -> HostOverride {
    HostOverride {
        start_rate: g.start_rate,
        max_rate: g.max_rate,
        concurrency: g.concurrency,
        burst: g.burst,
        ..HostOverride::default()
    }
}

/// Refuses two groups that could claim the same request, naming both.
fn check_overlaps<'a>(
    groups: &BTreeMap<String, NamedGroup>,
    own_hosts: impl Iterator<Item = &'a String>,
) -> Result<(), ParamError> {
    let clash = |a: &str, b: &str, what: String| {
        ParamError::new(
            format!("budget.groups.{a:?}"),
            format!("overlaps {b}: {what}; a request must belong to one group"),
        )
    };
    let list: Vec<_> = groups.iter().collect();
    for (i, (a, ga)) in list.iter().enumerate() {
        for (b, gb) in &list[i + 1..] {
            for p in &ga.hosts {
                if let Some(q) = gb.hosts.iter().find(|q| patterns_overlap(p, q)) {
                    let b = format!("budget.groups.{b:?}");
                    return Err(clash(a, &b, format!("{p:?} and {q:?}")));
                }
            }
            for (n, text) in ga.nets.iter().zip(&ga.addresses) {
                if let Some(k) = gb.nets.iter().position(|m| n.overlaps(m)) {
                    let b = format!("budget.groups.{b:?}");
                    let what = format!("{text:?} and {:?}", gb.addresses[k]);
                    return Err(clash(a, &b, what));
                }
            }
        }
    }
    for host in own_hosts {
        for (a, g) in groups {
            if let Some(p) = g.hosts.iter().find(|p| pattern_matches(p, host)) {
                let b =
                    format!("budget.hosts.{host:?} (a host with its own numbers is its own group)");
                return Err(clash(a, &b, format!("{p:?} matches {host:?}")));
            }
        }
    }
    Ok(())
}

/// A host pattern as matched: lower case, ASCII, no port or trailing dot;
/// `*.` only as its first label.
fn normal_pattern(p: &str) -> Result<String, String> {
    let (wild, rest) = match p.trim().strip_prefix("*.") {
        Some(rest) => ("*.", rest),
        None => ("", p.trim()),
    };
    let name = ascii_name(rest).unwrap_or_default();
    let bad = |b: u8| !(b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if name.is_empty() || name.bytes().any(bad) || name.split('.').any(str::is_empty) {
        return Err(format!(
            "{p:?} is not a host name or *.domain (an address belongs in addresses)"
        ));
    }
    Ok(format!("{wild}{name}"))
}

/// Whether pattern `p` (normalised) matches host name `name`.
fn pattern_matches(p: &str, name: &str) -> bool {
    match p.strip_prefix("*.") {
        Some(domain) => name
            .strip_suffix(domain)
            .is_some_and(|head| head.ends_with('.') && head.len() > 1),
        None => p == name,
    }
}

/// Whether some host name matches both patterns.
fn patterns_overlap(p: &str, q: &str) -> bool {
    match (p.strip_prefix("*."), q.strip_prefix("*.")) {
        (None, None) => p == q,
        (None, Some(_)) => pattern_matches(q, p),
        (Some(_), None) => pattern_matches(p, q),
        (Some(a), Some(b)) => a == b || pattern_matches(p, b) || pattern_matches(q, a),
    }
}

#[cfg(test)]
mod tests;
