use super::*;

fn site(host: &str) -> Group {
    BudgetParams::default().group_of(host, None)
}

fn key(host: &str) -> String {
    site(host).key
}

#[test]
fn a_site_is_its_registrable_domain() {
    assert_eq!(key("www.example.com"), "example.com");
    assert_eq!(key("shop.example.com"), "example.com");
    assert_eq!(key("example.com"), "example.com");
    assert_eq!(key("a.b.c.example.co.uk"), "example.co.uk");
    assert_eq!(site("img.example.co.uk").kind, GroupKind::Site);
}

#[test]
fn private_suffixes_keep_their_customers_apart() {
    assert_eq!(key("alice.blogspot.com"), "alice.blogspot.com");
    assert_eq!(key("bob.blogspot.com"), "bob.blogspot.com");
    assert_eq!(key("www.alice.blogspot.com"), "alice.blogspot.com");
    assert_eq!(key("someone.github.io"), "someone.github.io");
    // A private suffix itself has no registrable domain: its own group.
    assert_eq!(site("blogspot.com").kind, GroupKind::Host);
    assert_eq!(key("blogspot.com"), "blogspot.com");
}

#[test]
fn internationalised_names_share_a_budget_in_either_spelling() {
    assert_eq!(
        key("www.xn--85x722f.xn--55qx5d.cn"),
        "xn--85x722f.xn--55qx5d.cn"
    );
    assert_eq!(key("www.食狮.公司.cn"), "xn--85x722f.xn--55qx5d.cn");
    assert_eq!(key("www.Bücher.de"), "xn--bcher-kva.de");
    assert_eq!(key("shop.xn--bcher-kva.de"), "xn--bcher-kva.de");
}

#[test]
fn ip_literals_are_their_address() {
    let g = site("192.0.2.1");
    assert_eq!((g.key.as_str(), g.kind), ("192.0.2.1", GroupKind::Ip));
    assert_eq!(key("192.0.2.1:8080"), "192.0.2.1");
    assert_eq!(key("[2001:DB8::1]:443"), "[2001:db8::1]");
    // inet_aton spellings name the same address
    assert_eq!(key("0xc0.0.2.1"), "192.0.2.1");
    assert_eq!(key("[::ffff:192.0.2.1]"), "192.0.2.1");
    assert_eq!(registrable_domain("192.0.2.1"), None);
}

#[test]
fn trailing_dots_case_and_ports_do_not_make_another_site() {
    assert_eq!(key("WWW.Example.COM."), "example.com");
    assert_eq!(key("www.example.com.:8443"), "example.com");
    assert_eq!(
        registrable_domain("example.com."),
        Some("example.com".into())
    );
}

#[test]
fn names_without_a_registrable_domain_are_their_own_group() {
    for (name, group) in [
        ("com", "com"),
        ("co.uk", "co.uk"),
        ("localhost", "localhost"),
        ("a..example.com", "a..example.com"),
    ] {
        let g = site(name);
        assert_eq!((g.key.as_str(), g.kind), (group, GroupKind::Host), "{name}");
    }
    // A suffix the list does not know is one label (its default rule).
    assert_eq!(key("n7.site.test"), "site.test");
    assert_eq!(key("deep.n7.site.internal"), "site.internal");
}

#[test]
fn group_by_host_and_by_address() {
    let by = |group_by| BudgetParams {
        group_by,
        ..BudgetParams::default()
    };
    let ip = "192.0.2.7".parse().ok();
    let host = by(GroupBy::Host).group_of("www.Example.com", ip);
    assert_eq!(
        (host.key.as_str(), host.kind),
        ("www.example.com", GroupKind::Host)
    );
    let addr = by(GroupBy::Ip).group_of("www.example.com", ip);
    assert_eq!((addr.key.as_str(), addr.kind), ("192.0.2.7", GroupKind::Ip));
    let v6 = by(GroupBy::Ip).group_of("x.example", "2001:db8::7".parse().ok());
    assert_eq!(v6.key, "[2001:db8::7]");
    // Not resolved (yet): the name stands in.
    assert_eq!(
        by(GroupBy::Ip).group_of("www.example.com", None).key,
        "www.example.com"
    );
    assert!(by(GroupBy::Ip).groups_by_address());
    // Who may carry a host's own Crawl-delay in the group's budget.
    let site = by(GroupBy::Site);
    assert!(site.alone(&site.group_of("192.0.2.1", None)));
    assert!(site.alone(&site.group_of("localhost", None)));
    assert!(!site.alone(&site.group_of("www.example.com", None)));
    assert!(!by(GroupBy::Ip).alone(&addr));
    assert!(by(GroupBy::Host).alone(&host));
    assert!(!by(GroupBy::Site).groups_by_address());
}

fn with_groups(toml_like: serde_json::Value) -> Result<BudgetParams, ParamError> {
    let p: BudgetParams =
        serde_json::from_value(toml_like).map_err(|e| ParamError::new("budget", e.to_string()))?;
    p.validate()
}

#[test]
fn named_groups_claim_hosts_and_addresses_with_their_own_numbers() {
    let p = with_groups(serde_json::json!({
        "groups": {
            "cdn": {"hosts": ["*.cdn.Example.net", "static.example.org"], "max_rate": 20.0, "concurrency": 8},
            "rack": {"addresses": ["198.51.100.0/24"], "max_rate": 0.5, "start_rate": 0.5},
        },
        "hosts": {"slow.example.org": {"max_rate": 0.2, "start_rate": 0.2}},
    }))
    .unwrap();
    let g = p.group_of("img.eu.cdn.example.net", None);
    assert_eq!((g.key.as_str(), g.kind), ("group:cdn", GroupKind::Named));
    assert_eq!(p.group_of("static.example.org", None).key, "group:cdn");
    // `*.` is the names under the domain, not the domain.
    assert_eq!(p.group_of("cdn.example.net", None).key, "example.net");
    assert_eq!(p.group_of("www.example.org", None).key, "example.org");
    let rack = p.group_of("www.other.example", "198.51.100.9".parse().ok());
    assert_eq!(rack.key, "group:rack");
    assert_eq!(p.group_of("198.51.100.10", None).key, "group:rack");
    // A host with its own numbers is its own group.
    let own = p.group_of("slow.example.org", None);
    assert_eq!(
        (own.key.as_str(), own.kind),
        ("slow.example.org", GroupKind::Host)
    );
    assert_eq!(p.for_host("group:cdn").max_rate, 20.0);
    assert_eq!(p.for_host("group:cdn").concurrency, 8);
    assert_eq!(p.for_host("group:rack").max_rate, 0.5);
    assert_eq!(p.for_host("example.net").max_rate, 8.0);
    assert!(p.groups_by_address());
}

#[test]
fn overlapping_groups_are_refused_with_both_named() {
    let e = with_groups(serde_json::json!({"groups": {
        "a": {"hosts": ["*.example.com"]},
        "b": {"hosts": ["shop.example.com"]},
    }}))
    .unwrap_err();
    assert_eq!(e.key, "budget.groups.\"a\"");
    assert!(e.why.contains("budget.groups.\"b\""), "{}", e.why);
    assert!(
        e.why.contains("\"*.example.com\" and \"shop.example.com\""),
        "{}",
        e.why
    );
    let e = with_groups(serde_json::json!({"groups": {
        "a": {"hosts": ["*.eu.example.com"]},
        "b": {"hosts": ["*.example.com"]},
    }}))
    .unwrap_err();
    assert!(e.why.contains("budget.groups.\"b\""), "{}", e.why);
    let e = with_groups(serde_json::json!({"groups": {
        "a": {"addresses": ["10.0.0.0/8"]},
        "b": {"addresses": ["10.1.0.0/16"]},
    }}))
    .unwrap_err();
    assert!(
        e.why.contains("\"10.0.0.0/8\" and \"10.1.0.0/16\""),
        "{}",
        e.why
    );
    let e = with_groups(serde_json::json!({
        "groups": {"a": {"hosts": ["*.example.com"]}},
        "hosts": {"api.example.com": {"max_rate": 1.0}},
    }))
    .unwrap_err();
    assert!(
        e.why.contains("budget.hosts.\"api.example.com\""),
        "{}",
        e.why
    );
    // Neighbours are not an overlap.
    with_groups(serde_json::json!({"groups": {
        "a": {"hosts": ["*.example.com", "example.com"], "addresses": ["10.0.0.0/16"]},
        "b": {"hosts": ["*.example.org"], "addresses": ["10.1.0.0/16"]},
    }}))
    .unwrap();
}

#[test]
fn bad_groups_are_refused_with_their_key() {
    let key = |v| with_groups(v).unwrap_err().key;
    assert_eq!(
        key(serde_json::json!({"groups": {"a b": {"hosts": ["x.example"]}}})),
        "budget.groups.\"a b\""
    );
    assert_eq!(
        key(serde_json::json!({"groups": {"a": {}}})),
        "budget.groups.\"a\""
    );
    // A key of digits after the colon would read as a port.
    assert_eq!(
        key(serde_json::json!({"groups": {"80": {"hosts": ["x.example"]}}})),
        "budget.groups.\"80\""
    );
    assert_eq!(
        key(serde_json::json!({"groups": {"a": {"hosts": ["x.*.example"]}}})),
        "budget.groups.\"a\".hosts"
    );
    assert_eq!(
        key(serde_json::json!({"groups": {"a": {"addresses": ["10.0.0.0/40"]}}})),
        "budget.groups.\"a\".addresses"
    );
    assert_eq!(
        key(serde_json::json!({"groups": {"a": {"hosts": ["x.example"], "concurrency": 0}}})),
        "budget.groups.\"a\".concurrency"
    );
    assert!(with_groups(serde_json::json!({"groups": {"a": {"hostz": []}}})).is_err());
    assert!(with_groups(serde_json::json!({"group_by": "zone"})).is_err());
}

#[test]
// A base instant for the hand-moved clock; nothing reads it again.
#[allow(clippy::disallowed_methods)]
fn a_hosts_crawl_delay_counts_from_its_own_last_send() {
    let t0 = std::time::Instant::now();
    let s = std::time::Duration::from_secs;
    assert_eq!(crawl_delay_wait(None, s(5), t0), s(0));
    assert_eq!(crawl_delay_wait(Some(t0), s(5), t0 + s(2)), s(3));
    assert_eq!(crawl_delay_wait(Some(t0), s(5), t0 + s(7)), s(0));
}

#[test]
fn an_address_key_is_what_display_writes() {
    for a in [
        "0.0.0.0",
        "127.0.0.1",
        "10.20.3.255",
        "255.255.255.255",
        "::ffff:192.0.2.7",
    ] {
        let ip: IpAddr = a.parse().unwrap();
        let shown = match ip.to_canonical() {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => format!("[{v6}]"),
        };
        assert_eq!(ip_key(ip), shown, "{a}");
    }
    assert_eq!(ip_key("2001:db8::1".parse().unwrap()), "[2001:db8::1]");
}

/// The proxy places a host once and keeps its group while the rules do not
/// change, unless `groups_by_address` says so: the address must then make
/// no difference to any host's group.
#[test]
fn without_grouping_by_address_the_address_changes_no_group() {
    let by_name_only = [
        BudgetParams {
            group_by: GroupBy::Host,
            ..BudgetParams::default()
        },
        BudgetParams::default(),
        with_groups(serde_json::json!({
            "groups": {"cdn": {"hosts": ["*.cdn.example.net"], "max_rate": 20.0}},
            "hosts": {"slow.example.org": {"max_rate": 0.2, "start_rate": 0.2}},
        }))
        .unwrap(),
    ];
    let hosts = [
        "www.example.com:8080",
        "img.cdn.example.net",
        "slow.example.org",
        "localhost",
        "192.0.2.1",
        "[2001:db8::1]",
    ];
    let addrs = ["198.51.100.9", "2001:db8::7", "127.0.0.1"];
    for p in &by_name_only {
        assert!(!p.groups_by_address());
        for host in hosts {
            for addr in addrs {
                assert_eq!(
                    p.group_of(host, addr.parse().ok()),
                    p.group_of(host, None),
                    "{host} at {addr}"
                );
            }
        }
    }
}
