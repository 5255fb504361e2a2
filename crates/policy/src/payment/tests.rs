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
    let Asked::X402 { version, accepts } = &a else {
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
