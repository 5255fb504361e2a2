//! Which addresses a crawler may reach: the guard against being turned on the
//! machine's own network (loopback, private ranges, cloud metadata).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The kind of an IP address, for the decision to connect to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressClass {
    /// Routable on the public internet.
    Public,
    /// 127.0.0.0/8, ::1.
    Loopback,
    /// RFC 1918, RFC 6598 shared space, IPv6 unique local.
    Private,
    /// 169.254.0.0/16, fe80::/10.
    LinkLocal,
    /// 0.0.0.0/8, ::.
    Unspecified,
    /// Cloud metadata services (169.254.169.254, fd00:ec2::254, 100.100.100.200).
    Metadata,
    /// Multicast, broadcast, documentation and other reserved ranges.
    Reserved,
}

impl AddressClass {
    /// True for anything but [`AddressClass::Public`].
    pub fn is_internal(self) -> bool {
        self != AddressClass::Public
    }

    /// Plain name for refusal messages.
    pub fn as_str(self) -> &'static str {
        match self {
            AddressClass::Public => "public",
            AddressClass::Loopback => "loopback",
            AddressClass::Private => "private",
            AddressClass::LinkLocal => "link-local",
            AddressClass::Unspecified => "unspecified",
            AddressClass::Metadata => "metadata",
            AddressClass::Reserved => "reserved",
        }
    }
}

/// Classifies an address; IPv4 embedded in IPv6 (mapped, compatible, NAT64)
/// is judged by its IPv4 part, since that is where the packets end up.
pub fn classify_ip(ip: IpAddr) -> AddressClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    let o = ip.octets();
    if ip == Ipv4Addr::new(169, 254, 169, 254) || ip == Ipv4Addr::new(100, 100, 100, 200) {
        return AddressClass::Metadata;
    }
    match o {
        [0, ..] => AddressClass::Unspecified,
        [127, ..] => AddressClass::Loopback,
        [10, ..] | [192, 168, ..] => AddressClass::Private,
        [172, b, ..] if (16..=31).contains(&b) => AddressClass::Private,
        [100, b, ..] if (64..=127).contains(&b) => AddressClass::Private,
        [169, 254, ..] => AddressClass::LinkLocal,
        [192, 0, 0, _] | [192, 0, 2, _] | [198, 51, 100, _] | [203, 0, 113, _] => {
            AddressClass::Reserved
        }
        [198, b, ..] if b == 18 || b == 19 => AddressClass::Reserved,
        [a, ..] if a >= 224 => AddressClass::Reserved,
        _ => AddressClass::Public,
    }
}

fn classify_v6(ip: Ipv6Addr) -> AddressClass {
    if ip.is_unspecified() {
        return AddressClass::Unspecified;
    }
    if ip.is_loopback() {
        return AddressClass::Loopback;
    }
    let s = ip.segments();
    if let Some(v4) = ip.to_ipv4_mapped() {
        return classify_v4(v4);
    }
    // IPv4-compatible (::a.b.c.d, deprecated), SIIT (::ffff:0:a.b.c.d,
    // RFC 6052 / 7915) and NAT64 (64:ff9b::/96): the last 32 bits.
    if s[..6] == [0, 0, 0, 0, 0, 0]
        || s[..6] == [0, 0, 0, 0, 0xffff, 0]
        || s[..6] == [0x64, 0xff9b, 0, 0, 0, 0]
    {
        let v4 = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
        return classify_v4(v4);
    }
    // 6to4 (2002::/16, RFC 3056): the IPv4 address is bits 16..48.
    if s[0] == 0x2002 {
        let v4 = Ipv4Addr::new((s[1] >> 8) as u8, s[1] as u8, (s[2] >> 8) as u8, s[2] as u8);
        let class = classify_v4(v4);
        if class.is_internal() {
            return class;
        }
    }
    // Teredo (2001::/32, RFC 4380): the client's IPv4 address is the
    // bitwise NOT of the last 32 bits, and the relay delivers to it.
    if s[..2] == [0x2001, 0] {
        let (hi, lo) = (!s[6], !s[7]);
        let v4 = Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
        let class = classify_v4(v4);
        if class.is_internal() {
            return class;
        }
    }
    if ip == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
        return AddressClass::Metadata;
    }
    // Local-use NAT64 (64:ff9b:1::/48, RFC 8215): a translator of this
    // network's own, wherever in the suffix it puts the IPv4 address.
    if s[..3] == [0x64, 0xff9b, 1] {
        return AddressClass::Private;
    }
    // Discard-only (100::/64, RFC 6666): nothing answers there.
    if s[..4] == [0x100, 0, 0, 0] {
        return AddressClass::Reserved;
    }
    match s[0] {
        x if x & 0xfe00 == 0xfc00 => AddressClass::Private,
        // Site-local (fec0::/10, deprecated by RFC 3879): still routed
        // inside some networks as their private space.
        x if x & 0xffc0 == 0xfec0 => AddressClass::Private,
        x if x & 0xffc0 == 0xfe80 => AddressClass::LinkLocal,
        x if x & 0xff00 == 0xff00 => AddressClass::Reserved,
        0x2001 if s[1] == 0x0db8 => AddressClass::Reserved,
        _ => AddressClass::Public,
    }
}

/// Reads a URL host as an IP address the way resolvers and browsers do,
/// including the shorthand forms an attacker uses to slip past a naive check:
/// `127.1`, `2130706433`, `0x7f.0.0.1`, `0177.0.0.1`, and `[::1]`.
/// Returns `None` for a host name.
pub fn parse_host_ip(host: &str) -> Option<IpAddr> {
    // Every form below is written with these bytes alone (`+`: the radix
    // parse takes a sign); a name has some other byte almost always, and is
    // then no address without three parsers and an allocation trying it
    // (hosts are read as addresses several times a request).
    let address_bytes = |b: u8| b.is_ascii_hexdigit() || b".:[]xX+".contains(&b);
    if !host.bytes().all(address_bytes) {
        return None;
    }
    let h = host.trim_end_matches('.');
    if let Some(inner) = h.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        return inner.parse::<Ipv6Addr>().ok().map(IpAddr::V6);
    }
    if let Ok(ip) = h.parse::<IpAddr>() {
        return Some(ip);
    }
    parse_inet_aton(h).map(IpAddr::V4)
}

/// inet_aton(3): one to four parts, each decimal, octal (leading 0) or hex
/// (0x); the last part fills the remaining bytes.
fn parse_inet_aton(h: &str) -> Option<Ipv4Addr> {
    if h.is_empty() {
        return None;
    }
    let parts: Vec<&str> = h.split('.').collect();
    if parts.len() > 4 {
        return None;
    }
    let mut nums = Vec::with_capacity(parts.len());
    for p in &parts {
        nums.push(parse_part(p)?);
    }
    let (last, init) = nums.split_last()?;
    let mut value: u64 = 0;
    for (i, n) in init.iter().enumerate() {
        if *n > 255 {
            return None;
        }
        value |= n << (8 * (3 - i));
    }
    let room = 8 * (4 - init.len() as u32);
    if room < 64 && *last >= (1u64 << room) {
        return None;
    }
    value |= last;
    u32::try_from(value).ok().map(Ipv4Addr::from)
}

fn parse_part(p: &str) -> Option<u64> {
    if p.is_empty() {
        return None;
    }
    let (digits, radix) = if let Some(x) = p.strip_prefix("0x").or_else(|| p.strip_prefix("0X")) {
        (x, 16)
    } else if p.len() > 1 && p.starts_with('0') {
        (&p[1..], 8)
    } else {
        (p, 10)
    };
    if digits.is_empty() {
        return if radix == 16 { Some(0) } else { None };
    }
    if digits.len() > 12 {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn siit_and_6to4_with_an_internal_ipv4_are_internal() {
        let c = |a: &str| classify_ip(a.parse().expect("address"));
        assert_eq!(c("::ffff:0:127.0.0.1"), AddressClass::Loopback);
        assert_eq!(c("::ffff:0:10.1.2.3"), AddressClass::Private);
        assert_eq!(c("::ffff:0:169.254.169.254"), AddressClass::Metadata);
        assert_eq!(c("2002:7f00:1::1"), AddressClass::Loopback);
        assert_eq!(c("2002:c0a8:101::"), AddressClass::Private);
        assert_eq!(c("2002:a9fe:a9fe::1"), AddressClass::Metadata);
        assert_eq!(c("2002:5db8:d70e::1"), AddressClass::Public);
        assert_eq!(c("::ffff:0:93.184.215.14"), AddressClass::Public);
    }

    #[test]
    fn teredo_nat64_local_use_discard_and_site_local_are_classified() {
        let c = |a: &str| classify_ip(a.parse().expect("address"));
        // Teredo: the client address is NOT(last 32 bits). 80ff:fffe is
        // 127.0.0.1; f5ff:fffe is 10.0.0.1; a2ca:28f1 is 93.53.215.14.
        assert_eq!(
            c("2001:0:4136:e378:8000:63bf:80ff:fffe"),
            AddressClass::Loopback
        );
        assert_eq!(
            c("2001:0:4136:e378:8000:63bf:f5ff:fffe"),
            AddressClass::Private
        );
        assert_eq!(
            c("2001:0:4136:e378:8000:63bf:5601:5601"),
            AddressClass::Metadata
        );
        assert_eq!(
            c("2001:0:4136:e378:8000:63bf:a2ca:28f1"),
            AddressClass::Public
        );
        // 2001:db8::/32 stays documentation, 2001:4860:: stays public.
        assert_eq!(c("2001:db8::1"), AddressClass::Reserved);
        assert_eq!(c("2001:4860:4860::8888"), AddressClass::Public);
        assert_eq!(c("64:ff9b:1::a00:1"), AddressClass::Private);
        assert_eq!(c("64:ff9b:1:ffff::5db8:d70e"), AddressClass::Private);
        assert_eq!(c("100::1"), AddressClass::Reserved);
        assert_eq!(c("100::ffff:ffff:ffff:ffff"), AddressClass::Reserved);
        assert_eq!(c("100:0:0:1::1"), AddressClass::Public);
        assert_eq!(c("fec0::1"), AddressClass::Private);
        assert_eq!(c("feff:ffff::1"), AddressClass::Private);
    }

    use super::*;

    fn class(host: &str) -> AddressClass {
        classify_ip(parse_host_ip(host).unwrap_or_else(|| panic!("{host} is an IP")))
    }

    #[test]
    fn every_encoding_of_loopback_is_loopback() {
        for h in [
            "127.0.0.1",
            "127.1",
            "2130706433",
            "0x7f.0.0.1",
            "0177.0.0.1",
            "0x7f000001",
            "[::1]",
            "[::ffff:127.0.0.1]",
            "[::ffff:7f00:1]",
            "127.0.0.1.",
            "0X7F.0.0.1",
            "127.+1",
        ] {
            assert_eq!(class(h), AddressClass::Loopback, "{h}");
        }
    }

    #[test]
    fn private_link_local_metadata_and_unspecified() {
        assert_eq!(class("10.1.2.3"), AddressClass::Private);
        assert_eq!(class("172.16.0.1"), AddressClass::Private);
        assert_eq!(class("172.31.255.255"), AddressClass::Private);
        assert_eq!(class("192.168.1.1"), AddressClass::Private);
        assert_eq!(class("100.64.0.1"), AddressClass::Private);
        assert_eq!(class("[fd12::1]"), AddressClass::Private);
        assert_eq!(class("169.254.1.1"), AddressClass::LinkLocal);
        assert_eq!(class("[fe80::1]"), AddressClass::LinkLocal);
        assert_eq!(class("169.254.169.254"), AddressClass::Metadata);
        assert_eq!(class("[fd00:ec2::254]"), AddressClass::Metadata);
        assert_eq!(class("0.0.0.0"), AddressClass::Unspecified);
        assert_eq!(class("0"), AddressClass::Unspecified);
        assert_eq!(class("[::]"), AddressClass::Unspecified);
        assert_eq!(class("[64:ff9b::10.0.0.1]"), AddressClass::Private);
    }

    #[test]
    fn public_addresses_and_names() {
        assert_eq!(class("93.184.215.14"), AddressClass::Public);
        assert_eq!(class("172.32.0.1"), AddressClass::Public);
        assert_eq!(class("[2606:4700::1111]"), AddressClass::Public);
        assert_eq!(parse_host_ip("example.org"), None);
        assert_eq!(parse_host_ip("1.2.3.4.5"), None);
        assert_eq!(parse_host_ip("256.1.1.1"), None);
        assert_eq!(parse_host_ip("08.1.1.1"), None);
        assert_eq!(parse_host_ip(""), None);
        // Names made of address bytes alone go through the parsers; others
        // are no address at the first byte outside them.
        assert_eq!(parse_host_ip("dead.beef"), None);
        assert_eq!(parse_host_ip("localhost"), None);
        assert_eq!(parse_host_ip("127.0.0.1z"), None);
    }
}
