use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderValue, StatusCode};

use super::pay::{self, Charge, Pay, Scheme, Unheld};
use super::*;
use crate::budget::AnnouncedBy;
use crate::identity::AskedSignature;
use crate::payment::{Asked, Money, Offer, Over, PaymentParams, X402Asset};

fn head(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(*k, HeaderValue::from_str(v).unwrap());
    }
    h
}

fn wall() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

/// A plain GET: its body (none) can be sent again, nothing else known.
fn get() -> Sent {
    Sent {
        resendable: true,
        ..Sent::default()
    }
}

fn usd(s: &str) -> Money {
    Money::parse(&format!("USD {s}")).unwrap()
}

fn status(n: u16) -> StatusCode {
    StatusCode::from_u16(n).unwrap()
}

fn then(r: &Reading) -> &Then {
    match &r.route {
        Route::Learn(l) => &l.then,
        other => panic!("not learned from: {other:?}"),
    }
}

fn learned(r: Reading) -> Learn {
    match r.route {
        Route::Learn(l) => l,
        other => panic!("not learned from: {other:?}"),
    }
}

// === the budget's part ===

#[test]
fn the_budget_hears_the_status_retry_after_and_announced_limit_as_sent() {
    let h = head(&[
        ("retry-after", "7"),
        ("x-ratelimit-limit", "100"),
        ("x-ratelimit-remaining", "0"),
        ("x-ratelimit-reset", "1700000030"),
    ]);
    let r = read(StatusCode::TOO_MANY_REQUESTS, &h, &get(), wall());
    assert_eq!(
        r.budget,
        ForBudget {
            status: 429,
            retry_after: Some("7".into()),
            announced: Some(Announced {
                by: AnnouncedBy::XRatelimit,
                limit: Some(100),
                window_s: None,
                remaining: Some(0),
                reset_s: Some(30),
            }),
        }
    );
    let plain = read(StatusCode::OK, &HeaderMap::new(), &get(), wall());
    assert_eq!(
        plain.budget,
        ForBudget {
            status: 200,
            retry_after: None,
            announced: None,
        }
    );
}

#[test]
fn behind_a_provider_the_budget_and_the_store_read_the_targets_status() {
    let sent = Sent {
        target_status: Some(503),
        ..get()
    };
    let r = read(StatusCode::OK, &HeaderMap::new(), &sent, wall());
    assert_eq!(r.budget.status, 503);
    // The provider's 200 around the target's 503 is not the page.
    assert_eq!(
        then(&r),
        &Then::Page {
            targets_page: false
        }
    );
    let same = Sent {
        target_status: Some(200),
        ..get()
    };
    let r = read(StatusCode::OK, &HeaderMap::new(), &same, wall());
    assert_eq!(then(&r), &Then::Page { targets_page: true });
}

#[test]
fn retry_after_that_is_not_text_is_not_heard() {
    let mut h = HeaderMap::new();
    h.insert("retry-after", HeaderValue::from_bytes(b"\xff").unwrap());
    let r = read(StatusCode::TOO_MANY_REQUESTS, &h, &get(), wall());
    assert_eq!(r.budget.retry_after, None);
}

// === where the request goes ===

#[test]
fn a_sites_crawler_error_wins_over_everything_even_a_402() {
    let h = head(&[
        ("crawler-error", "PaymentFailed"),
        ("crawler-price", "USD 0.01"),
    ]);
    let r = read(StatusCode::PAYMENT_REQUIRED, &h, &get(), wall());
    let failed = Route::PaymentFailed {
        code: "PaymentFailed".into(),
        price: Some("USD 0.01".into()),
    };
    assert_eq!(r.route, failed);
    let r = read(StatusCode::OK, &h, &get(), wall());
    assert_eq!(r.route, failed);
    let h = head(&[("crawler-error", "InvalidCrawlerMaxPrice")]);
    assert_eq!(
        read(StatusCode::BAD_REQUEST, &h, &get(), wall()).route,
        Route::PaymentFailed {
            code: "InvalidCrawlerMaxPrice".into(),
            price: None,
        }
    );
}

#[test]
fn a_402_may_be_paid_once_and_only_with_its_body_there() {
    let h = HeaderMap::new();
    let at = |sent: Sent| read(StatusCode::PAYMENT_REQUIRED, &h, &sent, wall()).route;
    assert_eq!(at(get()), Route::PaymentRequired { may_pay: true });
    let paid = Sent {
        paid_again: true,
        ..get()
    };
    assert_eq!(at(paid), Route::PaymentRequired { may_pay: false });
    assert_eq!(
        at(Sent::default()),
        Route::PaymentRequired { may_pay: false }
    );
}

#[test]
fn statuses_lead_where_they_should() {
    let h = HeaderMap::new();
    let revalidating = Sent {
        revalidating: true,
        ..get()
    };
    let gone = Sent {
        revalidating: true,
        resendable: false,
        ..Sent::default()
    };
    for (n, sent, want) in [
        (101, get(), Then::Fail(502, UNASKED_101)),
        (304, get(), Then::Unchanged),
        (
            304,
            revalidating,
            Then::Revalidated {
                unmatched: Unmatched::Refetch,
            },
        ),
        (
            304,
            gone,
            Then::Revalidated {
                unmatched: Unmatched::Fail(502, UNMATCHED_304),
            },
        ),
        (200, revalidating, Then::Page { targets_page: true }),
        (404, get(), Then::Page { targets_page: true }),
        (429, get(), Then::Page { targets_page: true }),
    ] {
        assert_eq!(then(&read(status(n), &h, &sent, wall())), &want, "{n}");
    }
}

#[test]
fn a_throttle_is_not_sent_again_without_its_body() {
    let h = HeaderMap::new();
    let l = learned(read(status(429), &h, &get(), wall()));
    assert_eq!(l.throttle_veto, None);
    assert_eq!(l.challenge, None);
    let l = learned(read(status(429), &h, &Sent::default(), wall()));
    assert_eq!(l.throttle_veto, Some(BODY_GONE));
}

// === what it asks of our signature ===

#[test]
fn accept_signature_is_read_only_when_we_sign() {
    let h = head(&[(
        "accept-signature",
        r#"sig1=("@method" "@authority");nonce="n1""#,
    )]);
    let unsigned = learned(read(status(403), &h, &get(), wall()));
    assert_eq!(unsigned.challenge, None);
    assert_eq!(unsigned.then, Then::Page { targets_page: true });
    let signing = Sent {
        signing: true,
        ..get()
    };
    let l = learned(read(status(403), &h, &signing, wall()));
    let asked = AskedSignature {
        components: vec!["@method".into()],
        nonce: Some("n1".into()),
    };
    assert_eq!(l.challenge, Some(Challenge::Resend(asked)));
    assert_eq!(l.then, Then::SignAsAsked);
    assert_eq!(l.throttle_veto, None);
}

#[test]
fn a_second_accept_signature_is_passed_on_and_vetoes_a_resend() {
    let h = head(&[("accept-signature", r#"sig1=("@method")"#)]);
    let again = Sent {
        signing: true,
        signed_as_asked: true,
        ..get()
    };
    let l = learned(read(status(429), &h, &again, wall()));
    assert_eq!(l.challenge, Some(Challenge::AskedAgain));
    assert_eq!(l.throttle_veto, Some(ASKED_AGAIN));
    assert_eq!(l.then, Then::Page { targets_page: true });
    // Asked with a 200: no challenge at all.
    let l = learned(read(StatusCode::OK, &h, &again, wall()));
    assert_eq!(l.challenge, None);
    assert_eq!(l.throttle_veto, None);
}

#[test]
fn accept_signature_on_a_request_whose_body_is_gone_is_passed_on() {
    let h = head(&[("accept-signature", r#"sig1=("@method")"#)]);
    let sent = Sent {
        signing: true,
        ..Sent::default()
    };
    let l = learned(read(status(401), &h, &sent, wall()));
    assert_eq!(
        l.challenge,
        Some(Challenge::PassOn(
            "Accept-Signature not answered: the request's body cannot be sent again".into()
        ))
    );
    assert_eq!(l.throttle_veto, Some(BODY_GONE));
    assert_eq!(l.then, Then::Page { targets_page: true });
}

#[test]
fn the_price_field_joins_the_signed_components_once() {
    assert_eq!(signed_as(None, None), None);
    let asked = AskedSignature {
        components: vec!["@method".into()],
        nonce: Some("n".into()),
    };
    assert_eq!(signed_as(Some(&asked), None), Some(asked.clone()));
    assert_eq!(
        signed_as(None, Some("crawler-max-price")),
        Some(AskedSignature {
            components: vec!["crawler-max-price".into()],
            nonce: None,
        })
    );
    let with = signed_as(Some(&asked), Some("crawler-exact-price")).unwrap();
    assert_eq!(with.components, ["@method", "crawler-exact-price"]);
    assert_eq!(with.nonce.as_deref(), Some("n"));
    // Asked for already: not twice.
    assert_eq!(
        signed_as(Some(&with), Some("crawler-exact-price")),
        Some(with)
    );
}

// === paying ===

fn paid(offer: Offer) -> PaymentParams {
    PaymentParams {
        hosts: vec!["paid.example".into()],
        max_price: Some(usd("0.05")),
        max_per_day: Some(usd("1")),
        offer,
        ..PaymentParams::default()
    }
    .validate()
    .unwrap()
}

#[test]
fn the_standing_offer_goes_to_paid_hosts_but_never_to_robots_txt() {
    let p = paid(Offer::MaxPrice);
    assert_eq!(
        pay::standing_offer(&p, "paid.example", "/page"),
        Some(&usd("0.05"))
    );
    assert_eq!(pay::standing_offer(&p, "paid.example", "/robots.txt"), None);
    assert_eq!(pay::standing_offer(&p, "other.example", "/page"), None);
    let exact = paid(Offer::ExactPrice);
    assert_eq!(pay::standing_offer(&exact, "paid.example", "/page"), None);
}

#[test]
fn an_offer_that_cannot_be_held_refuses_all_but_a_revalidation() {
    assert_eq!(pay::unheld(true), Unheld::SendWithout);
    assert_eq!(pay::unheld(false), Unheld::Refuse);
}

#[test]
fn a_402_body_is_read_for_a_price_only_when_small_and_the_head_has_none() {
    let unpriced = Asked::Unpriced("none".into());
    let max = pay::PRICE_BODY_MAX as u64;
    assert!(pay::price_in_body(&unpriced, Some(max)));
    assert!(!pay::price_in_body(&unpriced, Some(max + 1)));
    assert!(!pay::price_in_body(&unpriced, None));
    let priced = Asked::PayPerCrawl(usd("0.01"));
    assert!(!pay::price_in_body(&priced, Some(10)));
}

fn x402(amount: &str) -> Asked {
    let raw = serde_json::json!({"scheme": "exact", "network": "base", "amount": amount, "asset": "0xa", "payTo": "0xb"});
    Asked::X402 {
        version: 2,
        accepts: vec![crate::payment::X402Requirement {
            scheme: "exact".into(),
            network: "base".into(),
            amount: amount.into(),
            asset: "0xa".into(),
            pay_to: "0xb".into(),
            raw,
        }],
        resource: serde_json::json!({"url": "https://paid.example/a"}),
    }
}

#[test]
fn a_402_is_paid_only_to_a_paid_host_once_and_as_the_offer_says() {
    let ppc = Asked::PayPerCrawl(usd("0.01"));
    let exact = paid(Offer::ExactPrice);
    let plan = |p: &PaymentParams, host, asked: &Asked, may_pay, sign| {
        pay::plan(p, host, asked, may_pay, sign)
    };
    assert_eq!(
        plan(&exact, "paid.example", &ppc, true, false),
        Pay::Exact(usd("0.01"))
    );
    assert_eq!(plan(&exact, "paid.example", &ppc, false, true), Pay::Pass);
    assert_eq!(plan(&exact, "other.example", &ppc, true, true), Pay::Pass);
    // A standing offer was refused already: its 402 is passed on.
    let max = paid(Offer::MaxPrice);
    assert_eq!(plan(&max, "paid.example", &ppc, true, true), Pay::Pass);
    let unpriced = Asked::Unpriced("none".into());
    assert_eq!(
        plan(&exact, "paid.example", &unpriced, true, true),
        Pay::Pass
    );
}

#[test]
fn x402_is_paid_with_a_signer_in_an_asset_the_limits_price() {
    let mut p = paid(Offer::MaxPrice);
    let asked = x402("20000");
    assert_eq!(
        pay::plan(&p, "paid.example", &asked, true, false),
        Pay::Pass
    );
    assert_eq!(
        pay::plan(&p, "paid.example", &asked, true, true),
        Pay::Refuse(Over::NotPayable(
            "0xa on base is not an asset payment.x402_assets names".into()
        ))
    );
    p.x402_assets = vec![X402Asset {
        network: "base".into(),
        asset: "0xa".into(),
        currency: "USD".into(),
        decimals: 6,
    }];
    let Pay::X402 {
        money,
        field,
        input,
    } = pay::plan(&p, "paid.example", &asked, true, true)
    else {
        panic!("not paid");
    };
    assert_eq!((money, field), (usd("0.02"), "payment-signature"));
    let input: serde_json::Value = serde_json::from_str(&input).unwrap();
    assert_eq!(input["x402Version"], 2);
    assert_eq!(input["resource"]["url"], "https://paid.example/a");
    assert_eq!(input["accepted"]["amount"], "20000");
}

#[test]
fn a_402_passed_on_says_its_price_and_terms() {
    assert_eq!(
        pay::passed(&Asked::PayPerCrawl(usd("0.01"))),
        [
            ("price", "USD 0.01".to_string()),
            ("scheme", "pay-per-crawl".to_string())
        ]
    );
    let details = pay::passed(&x402("20000"));
    assert_eq!(
        details[1..],
        [
            ("scheme", "x402".to_string()),
            ("amount", "20000".to_string()),
            ("asset", "0xa".to_string()),
            ("network", "base".to_string()),
            ("pay_to", "0xb".to_string()),
        ]
    );
}

#[test]
fn pay_per_crawl_counts_its_charge_and_an_unreadable_one_as_the_most_offered() {
    let held = usd("0.05");
    let ok = head(&[("crawler-charged", "USD 0.01")]);
    assert_eq!(
        pay::charge(Scheme::PayPerCrawl, StatusCode::OK, &ok, &held),
        Charge {
            settled: Some(usd("0.01")),
            charged: Some("USD 0.01".into()),
            error: None,
            transaction: None,
        }
    );
    let odd = head(&[("crawler-charged", "free")]);
    assert_eq!(
        pay::charge(Scheme::PayPerCrawl, StatusCode::OK, &odd, &held),
        Charge {
            settled: Some(usd("0.05")),
            charged: Some("free".into()),
            error: Some(
                "crawler-charged \"free\": expected a currency code and an amount, e.g. \"USD 0.01\""
                    .into()
            ),
            transaction: None,
        }
    );
    assert_eq!(
        pay::charge(
            Scheme::PayPerCrawl,
            StatusCode::OK,
            &HeaderMap::new(),
            &held
        ),
        Charge::default()
    );
}

#[test]
fn x402_counts_what_was_paid_on_success_only() {
    let held = usd("0.02");
    // base64 of {"transaction":"0xabc"}
    let h = head(&[("payment-response", "eyJ0cmFuc2FjdGlvbiI6IjB4YWJjIn0=")]);
    assert_eq!(
        pay::charge(Scheme::X402, StatusCode::OK, &h, &held),
        Charge {
            settled: Some(usd("0.02")),
            charged: Some("USD 0.02".into()),
            error: None,
            transaction: Some("0xabc".into()),
        }
    );
    assert_eq!(
        pay::charge(Scheme::X402, StatusCode::PAYMENT_REQUIRED, &h, &held),
        Charge::default()
    );
}

#[test]
fn a_page_is_stored_when_it_is_the_targets_and_the_site_allows_keeping_it() {
    let keep = |own, immediate, had| keep(own, immediate, had);
    assert_eq!(
        keep(true, false, true),
        Keep {
            drop_stored: false,
            store: true
        }
    );
    // use=immediate: not kept, and what was kept before goes.
    assert_eq!(
        keep(true, true, true),
        Keep {
            drop_stored: true,
            store: false
        }
    );
    assert_eq!(
        keep(true, true, false),
        Keep {
            drop_stored: false,
            store: false
        }
    );
    // A provider's answer around the target's error is not the page.
    assert_eq!(
        keep(false, false, true),
        Keep {
            drop_stored: false,
            store: false
        }
    );
}

#[test]
fn a_client_cannot_send_a_price_or_payment_of_its_own() {
    let mut h = head(&[
        ("crawler-max-price", "USD 9"),
        ("crawler-exact-price", "USD 9"),
        ("payment-signature", "x"),
        ("x-payment", "y"),
        ("accept", "*/*"),
    ]);
    pay::strip_paying_fields(&mut h);
    assert_eq!(h, head(&[("accept", "*/*")]));
    for one in [
        "crawler-max-price",
        "crawler-exact-price",
        "payment-signature",
        "x-payment",
    ] {
        let mut h = head(&[("accept", "*/*"), (one, "USD 1")]);
        pay::strip_paying_fields(&mut h);
        assert_eq!(h, head(&[("accept", "*/*")]), "{one}");
    }
    let mut none = head(&[("accept", "*/*"), ("x-other", "1")]);
    pay::strip_paying_fields(&mut none);
    assert_eq!(none, head(&[("accept", "*/*"), ("x-other", "1")]));
}

#[test]
fn a_bought_page_served_stored_drops_its_charge_and_says_what_it_saved() {
    let mut h = head(&[("crawler-charged", "usd 0.010"), ("etag", "\"a\"")]);
    assert_eq!(pay::saved_charge(&mut h), Some("USD 0.01".into()));
    assert_eq!(h, head(&[("etag", "\"a\"")]));
    let mut odd = head(&[("crawler-charged", "free")]);
    assert_eq!(pay::saved_charge(&mut odd), Some("free".into()));
    assert_eq!(pay::saved_charge(&mut HeaderMap::new()), None);
}
