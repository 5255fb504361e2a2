//! Address blocks (`10.0.0.0/8`, `2001:db8::/32`): who may use the proxy
//! (`proxy.allow`) and which origins share a budget (`budget.groups`).

use std::net::IpAddr;

/// An address block: a network address and a prefix length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    bits: u8,
}

impl Cidr {
    /// `10.0.0.0/8`, `::1/128`, or a single address.
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let (ip, bits) = match s.trim().split_once('/') {
            Some((ip, bits)) => (ip, Some(bits)),
            None => (s.trim(), None),
        };
        let net: IpAddr = ip
            .parse()
            .map_err(|_| format!("{s:?} is not an address or address/prefix"))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let bits = match bits {
            None => max,
            Some(b) => b
                .parse::<u8>()
                .ok()
                .filter(|b| *b <= max)
                .ok_or_else(|| format!("{s:?}: prefix length must be 0..={max}"))?,
        };
        Ok(Cidr { net, bits })
    }

    /// The block of `net` with a prefix of `bits` (at most the address's
    /// length).
    pub(crate) fn new(net: IpAddr, bits: u8) -> Cidr {
        let max = if net.is_ipv4() { 32 } else { 128 };
        Cidr {
            net,
            bits: bits.min(max),
        }
    }

    /// Whether `ip` is inside the block.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.contains_within(ip, self.bits)
    }

    /// Whether the two blocks share an address: one holds the other's
    /// network address within the shorter of the two prefixes.
    pub fn overlaps(&self, other: &Cidr) -> bool {
        self.contains_within(other.net, self.bits.min(other.bits))
    }

    fn contains_within(&self, ip: IpAddr, bits: u8) -> bool {
        match (self.net, ip.to_canonical()) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Cidr;

    #[test]
    fn blocks_contain_and_overlap() {
        let a = Cidr::parse("10.0.0.0/8").unwrap();
        let b = Cidr::parse("10.1.2.0/24").unwrap();
        let c = Cidr::parse("192.0.2.1").unwrap();
        assert!(a.contains("10.200.0.1".parse().unwrap()));
        assert!(a.overlaps(&b) && b.overlaps(&a));
        assert!(!a.overlaps(&c) && !c.overlaps(&b));
        let v6 = Cidr::parse("2001:db8::/32").unwrap();
        assert!(!v6.overlaps(&a));
        assert!(v6.overlaps(&Cidr::parse("2001:db8:1::1").unwrap()));
        assert!(Cidr::parse("10.0.0.0/33").is_err());
        assert!(Cidr::parse("ten").is_err());
    }
}
