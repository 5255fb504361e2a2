use http::{HeaderMap, HeaderValue};

use super::*;

fn head(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(*k, HeaderValue::from_str(v).unwrap());
    }
    h
}

#[test]
fn a_price_keeps_its_digits_and_reads_back_as_written() {
    let m = Money::parse("USD 0.01").unwrap();
    assert_eq!(m.to_string(), "USD 0.01");
    assert_eq!(m.currency(), "USD");
    assert_eq!(Money::parse("usd 0.010").unwrap(), m);
    assert_eq!(Money::parse("EUR 12").unwrap().to_string(), "EUR 12");
    assert_eq!(Money::parse("EUR 12.50").unwrap().to_string(), "EUR 12.5");
    assert_eq!(Money::parse("USD .5").unwrap().to_string(), "USD 0.5");
    assert_eq!(
        Money::parse("USD 0.000000000000000001")
            .unwrap()
            .to_string(),
        "USD 0.000000000000000001"
    );
}

#[test]
fn a_price_that_is_not_plain_decimal_is_refused_with_why() {
    for (text, err) in [
        ("0.01", MoneyError::Shape),
        ("USD 0.01 extra", MoneyError::Shape),
        ("US 0.01", MoneyError::Currency("US".into())),
        ("U5D 0.01", MoneyError::Currency("U5D".into())),
        ("USD -0.01", MoneyError::Amount("-0.01".into())),
        ("USD 1e-2", MoneyError::Amount("1e-2".into())),
        ("USD 0.0.1", MoneyError::Amount("0.0.1".into())),
        ("USD .", MoneyError::Amount(".".into())),
        (
            "USD 0.0000000000000000001",
            MoneyError::Amount("0.0000000000000000001".into()),
        ),
    ] {
        assert_eq!(Money::parse(text), Err(err), "{text}");
    }
}

#[test]
fn pay_per_crawl_asks_its_crawler_price() {
    let a = asked(&head(&[("crawler-price", "USD 0.01")]), None);
    assert_eq!(a, Asked::PayPerCrawl(Money::parse("USD 0.01").unwrap()));
    assert_eq!(a.scheme(), "pay-per-crawl");
    assert_eq!(a.to_string(), "USD 0.01");
    let a = asked(&head(&[("crawler-price", "free")]), None);
    assert_eq!(a.scheme(), "unknown");
    assert!(a.to_string().contains("crawler-price \"free\""), "{a}");
}

/// The x402 v2 example shape: base64 JSON in PAYMENT-REQUIRED.
#[test]
fn x402_v2_requirements_are_read_from_the_header() {
    let json = r#"{"x402Version":2,"resource":{"url":"https://api.example.com/premium"},
        "accepts":[{"scheme":"exact","network":"eip155:84532","amount":"10000",
        "asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","payTo":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
        "maxTimeoutSeconds":60}]}"#;
    let b64 = base64::engine::general_purpose::STANDARD.encode(json);
    let a = asked(&head(&[("payment-required", &b64)]), None);
    let Asked::X402 {
        version, accepts, ..
    } = &a
    else {
        panic!("{a:?}");
    };
    assert_eq!(*version, 2);
    assert_eq!(accepts.len(), 1);
    assert_eq!(accepts[0].amount, "10000");
    assert_eq!(accepts[0].network, "eip155:84532");
    assert_eq!(
        a.to_string(),
        "exact 10000 of 0x036CbD53842c5426634e7929541eC2318f3dCF7e on eip155:84532 to 0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
    );
}

#[test]
fn x402_v1_requirements_are_read_from_the_body() {
    let body = br#"{"x402Version":1,"error":"X-PAYMENT header is required","accepts":[
        {"scheme":"exact","network":"base-sepolia","maxAmountRequired":"1000","asset":"0xA","payTo":"0xB"},
        {"scheme":"exact","network":"base","maxAmountRequired":"1000","asset":"0xC","payTo":"0xB"}]}"#;
    let a = asked(&HeaderMap::new(), Some(body));
    assert_eq!(a.scheme(), "x402");
    assert_eq!(
        a.to_string(),
        "exact 1000 of 0xA on base-sepolia to 0xB (and 1 more it accepts)"
    );
}

#[test]
fn a_402_without_a_readable_price_says_what_was_there() {
    let a = asked(&HeaderMap::new(), Some(b"pay up"));
    assert_eq!(a.scheme(), "unknown");
    let a = asked(&head(&[("payment-required", "%%%")]), None);
    assert!(
        a.to_string()
            .starts_with("no price: PAYMENT-REQUIRED is not base64"),
        "{a}"
    );
}

fn usd(s: &str) -> Money {
    Money::parse(&format!("USD {s}")).unwrap()
}

#[test]
fn money_adds_and_compares_exactly_across_scales() {
    assert_eq!(usd("0.1").checked_add(&usd("0.2")).unwrap(), usd("0.3"));
    assert_eq!(usd("0.01").checked_add(&usd("12")).unwrap(), usd("12.01"));
    let mut sum = Money::zero("usd");
    for _ in 0..50 {
        sum = sum.checked_add(&usd("0.01")).unwrap();
    }
    assert_eq!(sum.to_string(), "USD 0.5");
    assert_eq!(
        usd("0.5").saturating_sub(&usd("0.01")).unwrap(),
        usd("0.49")
    );
    assert_eq!(usd("0.01").saturating_sub(&usd("1")).unwrap(), usd("0"));
    assert!(usd("0.01").compare(&usd("0.010")).unwrap().is_eq());
    assert!(usd("0.011").compare(&usd("0.01")).unwrap().is_gt());
    let eur = Money::parse("EUR 1").unwrap();
    assert_eq!(
        usd("1").checked_add(&eur),
        Err(SumError::Currencies("USD".into(), "EUR".into()))
    );
    let big = Money::parse(&format!("USD {}", "9".repeat(38))).unwrap();
    assert_eq!(big.checked_add(&usd("1")), Err(SumError::Overflow));
    assert_eq!(
        usd("1")
            .checked_add(&usd("0.000000000000000001"))
            .unwrap()
            .to_string(),
        "USD 1.000000000000000001"
    );
}

#[test]
fn an_x402_amount_is_money_by_the_assets_decimals() {
    let m = Money::from_atomic("USD", "10000", 6).unwrap();
    assert_eq!(m, usd("0.01"));
    assert_eq!(Money::from_atomic("USD", "1", 0).unwrap(), usd("1"));
    assert_eq!(
        Money::from_atomic("USD", "-1", 6),
        Err(MoneyError::Amount("-1".into()))
    );
    assert_eq!(
        Money::from_atomic("USD", "1", 19),
        Err(MoneyError::Amount("1".into()))
    );
}

fn params(hosts: &[&str], max: &str, host_day: Option<&str>, day: &str) -> PaymentParams {
    PaymentParams {
        hosts: hosts.iter().map(|h| h.to_string()).collect(),
        max_price: Some(usd(max)),
        max_per_host_per_day: host_day.map(usd),
        max_per_day: Some(usd(day)),
        ..PaymentParams::default()
    }
    .validate()
    .unwrap()
}

#[test]
fn only_allowed_hosts_are_paid() {
    let p = params(&["paid.example", "*.news.example"], "0.01", None, "1");
    assert!(p.may_pay("paid.example"));
    assert!(p.may_pay("PAID.example:443"));
    assert!(p.may_pay("a.news.example"));
    assert!(!p.may_pay("news.example"));
    assert!(!p.may_pay("xnews.example"));
    assert!(!p.may_pay("other.example"));
    assert!(!PaymentParams::default().may_pay("paid.example"));
    assert_eq!(p.standing_offer("paid.example"), Some(&usd("0.01")));
    assert_eq!(p.standing_offer("other.example"), None);
    let exact = PaymentParams {
        offer: Offer::ExactPrice,
        ..p.clone()
    };
    assert_eq!(exact.standing_offer("paid.example"), None);
}

#[test]
fn a_price_is_judged_against_each_limit_in_turn() {
    let p = params(&["a.example"], "0.02", Some("0.05"), "0.10");
    let z = usd("0");
    assert_eq!(p.judge("a.example", &usd("0.02"), &z, &z), Ok(()));
    assert_eq!(p.judge("b.example", &usd("0.01"), &z, &z), Err(Over::Host));
    assert_eq!(
        p.judge("a.example", &usd("0.021"), &z, &z),
        Err(Over::PerRequest {
            price: usd("0.021"),
            max: usd("0.02")
        })
    );
    // Exactly at a limit is within it.
    assert_eq!(
        p.judge("a.example", &usd("0.02"), &usd("0.03"), &usd("0.03")),
        Ok(())
    );
    assert_eq!(
        p.judge("a.example", &usd("0.02"), &usd("0.04"), &usd("0.04")),
        Err(Over::PerHostPerDay {
            spent: usd("0.04"),
            max: usd("0.05")
        })
    );
    assert_eq!(
        p.judge("a.example", &usd("0.02"), &z, &usd("0.09")),
        Err(Over::PerDay {
            spent: usd("0.09"),
            max: usd("0.1")
        })
    );
    let eur = Money::parse("EUR 0.01").unwrap();
    let over = p.judge("a.example", &eur, &Money::zero("EUR"), &Money::zero("EUR"));
    assert_eq!(
        over,
        Err(Over::Currency {
            price: eur,
            limits: "USD".into()
        })
    );
    assert_eq!(over.unwrap_err().limit(), "currency");
}

#[test]
fn a_payment_table_that_makes_no_sense_is_refused_with_its_key() {
    let mixed = PaymentParams {
        max_price: Some(usd("0.01")),
        max_per_day: Some(Money::parse("EUR 1").unwrap()),
        ..PaymentParams::default()
    };
    assert_eq!(mixed.validate().unwrap_err().key, "payment.max_per_day");
    let no_day = PaymentParams {
        hosts: vec!["a.example".into()],
        max_price: Some(usd("0.01")),
        ..PaymentParams::default()
    };
    assert_eq!(no_day.validate().unwrap_err().key, "payment.hosts");
    let bad_host = PaymentParams {
        hosts: vec!["https://a.example/".into()],
        max_price: Some(usd("0.01")),
        max_per_day: Some(usd("1")),
        ..PaymentParams::default()
    };
    assert_eq!(bad_host.validate().unwrap_err().key, "payment.hosts");
    let p: PaymentParams = serde_json::from_str(
        r#"{"max_price":"USD 0.01","max_per_host_per_day":"","max_per_day":"usd 0.5"}"#,
    )
    .unwrap();
    assert_eq!(p.max_price, Some(usd("0.01")));
    assert_eq!(p.max_per_host_per_day, None);
    assert_eq!(p.max_per_day, Some(usd("0.5")));
    assert!(serde_json::from_str::<PaymentParams>(r#"{"max_price":"0.01"}"#).is_err());
}

const NOW: u64 = 20_000 * 86_400 + 3_600;

#[test]
fn holds_count_as_spent_until_settled_or_released() {
    let p = params(&["a.example", "b.example"], "0.01", Some("0.02"), "0.03");
    let mut l = Ledger::default();
    let m = usd("0.01");
    l.reserve(&p, "a.example", &m, "1", NOW).unwrap();
    l.reserve(&p, "a.example", &m, "2", NOW).unwrap();
    assert_eq!(
        l.reserve(&p, "a.example", &m, "3", NOW),
        Err(Over::PerHostPerDay {
            spent: usd("0.02"),
            max: usd("0.02")
        })
    );
    l.reserve(&p, "b.example", &m, "4", NOW).unwrap();
    assert_eq!(
        l.reserve(&p, "b.example", &m, "5", NOW),
        Err(Over::PerDay {
            spent: usd("0.03"),
            max: usd("0.03")
        })
    );
    l.release("2", NOW);
    l.settle("1", "a.example", Some(&usd("0.005")), NOW);
    assert_eq!(l.spent("a.example", "USD"), (usd("0.005"), usd("0.015")));
    assert_eq!(l.hosts["a.example"].bought, 1);
    l.settle("4", "b.example", None, NOW);
    assert_eq!(l.hosts.get("b.example"), None);
    assert!(l.holds.is_empty());
}

#[test]
fn a_hold_expires_and_a_new_day_starts_from_nothing() {
    let p = params(&["a.example"], "0.01", None, "0.01");
    let mut l = Ledger::default();
    let m = usd("0.01");
    l.reserve(&p, "a.example", &m, "1", NOW).unwrap();
    assert!(l.reserve(&p, "a.example", &m, "2", NOW + 299).is_err());
    // hold_secs (300) later the hold of a request that never came back is
    // counted as possibly charged: the day's limit stays spent.
    assert!(l.reserve(&p, "a.example", &m, "2", NOW + 300).is_err());
    assert!(l.holds.is_empty());
    assert_eq!(l.hosts["a.example"].spent, m);
    assert_eq!(
        (l.hosts["a.example"].possibly, l.hosts["a.example"].bought),
        (1, 0)
    );
    let tomorrow = (NOW / 86_400 + 1) * 86_400;
    l.reserve(&p, "a.example", &m, "3", tomorrow).unwrap();
    assert_eq!(l.day, NOW / 86_400 + 1);
    assert!(l.hosts.is_empty());
    // A charge whose hold expired is still counted.
    l.settle("gone", "a.example", Some(&m), tomorrow);
    assert_eq!(l.hosts["a.example"].spent, m);
    let json = serde_json::to_string(&l).unwrap();
    assert_eq!(serde_json::from_str::<Ledger>(&json).unwrap(), l);
}

#[test]
fn a_charge_in_another_currency_is_recorded_counted_as_held_and_refused() {
    let p = params(&["a.example"], "0.01", None, "0.05");
    let mut l = Ledger::default();
    let m = usd("0.01");
    l.reserve(&p, "a.example", &m, "1", NOW).unwrap();
    let eur = Money::parse("EUR 0.001").unwrap();
    assert_eq!(
        l.settle("1", "a.example", Some(&eur), NOW),
        Settled::Foreign(Some(m.clone()))
    );
    let h = &l.hosts["a.example"];
    assert_eq!(
        (h.spent.clone(), h.bought, h.foreign.clone()),
        (m.clone(), 1, Some(eur.clone()))
    );
    assert_eq!(
        l.reserve(&p, "a.example", &m, "2", NOW),
        Err(Over::Currency {
            price: eur,
            limits: "USD".into()
        })
    );
    let json = serde_json::to_string(&l).unwrap();
    assert_eq!(serde_json::from_str::<Ledger>(&json).unwrap(), l);
}

#[test]
fn what_a_site_charged_or_refused_is_read_from_the_answer() {
    let h = head(&[("crawler-charged", "USD 0.01")]);
    assert_eq!(charged(&h), Some(Ok(usd("0.01"))));
    assert_eq!(charged(&HeaderMap::new()), None);
    let h = head(&[("crawler-charged", "one cent")]);
    assert_eq!(
        charged(&h),
        Some(Err("crawler-charged \"one cent\": \"cent\" is not a decimal amount (digits, one optional point)".into()))
    );
    let h = head(&[("crawler-error", " InvalidCrawlerMaxPrice ")]);
    assert_eq!(crawler_error(&h).as_deref(), Some("InvalidCrawlerMaxPrice"));
}

#[test]
fn an_x402_requirement_is_chosen_by_the_assets_the_operator_priced() {
    let body = br#"{"x402Version":1,"accepts":[
        {"scheme":"upto","network":"base","maxAmountRequired":"5","asset":"0xA","payTo":"0xB"},
        {"scheme":"exact","network":"base","maxAmountRequired":"1000","asset":"0xC","payTo":"0xB","resource":"http://a.example/x"},
        {"scheme":"exact","network":"base","maxAmountRequired":"20000","asset":"0xA","payTo":"0xB"}]}"#;
    let Asked::X402 {
        version,
        accepts,
        resource,
    } = asked(&HeaderMap::new(), Some(body))
    else {
        panic!()
    };
    assert_eq!(resource, serde_json::json!("http://a.example/x"));
    let mut p = params(&["a.example"], "0.01", None, "1");
    assert_eq!(
        x402_choice(&p, &accepts).unwrap_err(),
        Over::NotPayable("0xA on base is not an asset payment.x402_assets names".into())
    );
    p.x402_assets = vec![X402Asset {
        network: "base".into(),
        asset: "0xa".into(),
        currency: "USD".into(),
        decimals: 6,
    }];
    let (r, price) = x402_choice(&p, &accepts).unwrap();
    assert_eq!((r.amount.as_str(), price), ("20000", usd("0.02")));
    let input: serde_json::Value =
        serde_json::from_str(&x402_signer_input(version, &resource, r)).unwrap();
    assert_eq!(input["x402Version"], 1);
    assert_eq!(input["accepted"]["maxAmountRequired"], "20000");
    assert_eq!(x402_payment_header(1), "x-payment");
    assert_eq!(x402_payment_header(2), "payment-signature");
    let receipt = base64::engine::general_purpose::STANDARD
        .encode(r#"{"success":true,"transaction":"0xabc","network":"base"}"#);
    let h = head(&[("payment-response", &receipt)]);
    assert_eq!(x402_transaction(&h).as_deref(), Some("0xabc"));
}
