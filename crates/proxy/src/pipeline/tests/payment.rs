//! Paying an x402 site through the operator's signer, step by step: the
//! 402's requirement goes to the signer, its answer is the
//! `PAYMENT-SIGNATURE` of the one retry, and the 200 is settled in the
//! ledger at the requirement's amount. The signer here is a stand-in
//! wallet (a shell that answers with base64 of what it was given), so the
//! test sees exactly what a real one would receive.

use base64::Engine as _;
use http::Method;
use mannerly_policy::payment::{Money, PaymentParams, X402Asset};
use mannerly_policy::Outcome;

use super::origin::{answer, reply};
use super::{ask, request, Fixture};
use crate::body::empty;
use crate::config::Config;
use crate::pipeline::Learned;

const URL: &str = "http://example.org/premium";
const ASSET: &str = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";

fn x402_config(signer: &[&str]) -> Config {
    let payment = PaymentParams {
        hosts: vec!["example.org".into()],
        max_price: Money::parse("USD 0.05").ok(),
        max_per_day: Money::parse("USD 1").ok(),
        x402_signer: signer.iter().map(|s| s.to_string()).collect(),
        x402_assets: vec![X402Asset {
            network: "eip155:84532".into(),
            asset: ASSET.into(),
            currency: "USD".into(),
            decimals: 6,
        }],
        ..PaymentParams::default()
    };
    Config {
        payment,
        ..Config::default()
    }
}

/// The x402 v2 specification's example 402: 10000 units (USD 0.01 of a
/// 6-decimal token) on Base Sepolia.
fn payment_required() -> String {
    let json = format!(
        r#"{{"x402Version":2,"resource":{{"url":"{URL}"}},"accepts":[{{"scheme":"exact","network":"eip155:84532","amount":"10000","asset":"{ASSET}","payTo":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","maxTimeoutSeconds":60}}]}}"#
    );
    let b64 = base64::engine::general_purpose::STANDARD.encode(json);
    reply("402 Payment Required", &[("payment-required", &b64)], "")
}

#[tokio::test]
async fn an_x402_requirement_within_limits_is_signed_sent_once_and_settled() {
    let f = Fixture::new(x402_config(&["sh", "-c", "base64 -w0"])).await;
    let parts = request(Method::GET, URL, &[]);
    let mut x = f.begin(&parts);
    let mut cache = ask(&mut x, &parts).await;
    let permit = x.budget().await.expect("turn");
    let learned = x
        .learn(
            &parts,
            &mut cache,
            permit,
            answer(&payment_required()).await,
            true,
        )
        .await;
    assert!(matches!(learned, Ok(Learned::PayAndRetry)));
    assert_eq!(x.rec.offered.as_deref(), Some("USD 0.01"));

    let out = x.outgoing(&parts, empty(), &cache).expect("request");
    let sig = out.headers()["payment-signature"].to_str().unwrap();
    let given = base64::engine::general_purpose::STANDARD
        .decode(sig)
        .unwrap();
    let given: serde_json::Value = serde_json::from_slice(&given).unwrap();
    assert_eq!(given["x402Version"], 2);
    assert_eq!(given["resource"]["url"], URL);
    assert_eq!(given["accepted"]["amount"], "10000");
    assert_eq!(
        given["accepted"]["payTo"],
        "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
    );

    let receipt = base64::engine::general_purpose::STANDARD
        .encode(r#"{"success":true,"transaction":"0xfeed","network":"eip155:84532"}"#);
    let ok = reply("200 OK", &[("payment-response", &receipt)], "premium");
    let permit = x.budget().await.expect("turn");
    let learned = x
        .learn(&parts, &mut cache, permit, answer(&ok).await, true)
        .await;
    assert!(matches!(learned, Ok(Learned::Answer(_))));
    let ledger = std::fs::read(f.shared.cfg.data_dir.join("payments.json")).unwrap();
    let ledger: serde_json::Value = serde_json::from_slice(&ledger).unwrap();
    assert_eq!(ledger["hosts"]["example.org"]["spent"], "USD 0.01");
    assert_eq!(ledger["hosts"]["example.org"]["bought"], 1);
    assert_eq!(ledger["holds"], serde_json::json!({}));

    // A second 402 on the same request is never paid again.
    let permit = x.budget().await.expect("turn");
    let mut x2 = f.begin(&parts);
    x2.paid_again = true;
    let again = x2
        .learn(
            &parts,
            &mut cache,
            permit,
            answer(&payment_required()).await,
            true,
        )
        .await;
    assert!(matches!(again, Ok(Learned::Answer(_))));
}

#[tokio::test]
async fn without_a_signer_or_with_a_failing_one_nothing_is_paid() {
    let f = Fixture::new(x402_config(&[])).await;
    let parts = request(Method::GET, URL, &[]);
    let mut x = f.begin(&parts);
    let mut cache = ask(&mut x, &parts).await;
    let permit = x.budget().await.expect("turn");
    let learned = x
        .learn(
            &parts,
            &mut cache,
            permit,
            answer(&payment_required()).await,
            true,
        )
        .await;
    assert!(
        matches!(learned, Ok(Learned::Answer(_))),
        "passed on unpaid"
    );

    let f = Fixture::new(x402_config(&["sh", "-c", "echo locked >&2; exit 1"])).await;
    let mut x = f.begin(&parts);
    let mut cache = ask(&mut x, &parts).await;
    let permit = x.budget().await.expect("turn");
    let learned = x
        .learn(
            &parts,
            &mut cache,
            permit,
            answer(&payment_required()).await,
            true,
        )
        .await;
    let Err(stop) = learned else {
        panic!("a failed signature is a stop");
    };
    assert_eq!(stop.outcome(), Outcome::PaymentFailed);
    assert_eq!(
        stop.reason(),
        "payment signer failed (exit status: 1): locked"
    );
    // The hold was given back (in the background, as the request ended).
    drop(x);
    let path = f.shared.cfg.data_dir.join("payments.json");
    let mut holds = serde_json::Value::Null;
    for _ in 0..100 {
        let ledger: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        holds = ledger["holds"].clone();
        if holds == serde_json::json!({}) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(holds, serde_json::json!({}));
}

/// Pay Per Crawl never charges robots.txt, whatever query it is asked
/// with: the offer is held for a page, and not for `/robots.txt?x`.
#[tokio::test]
async fn a_standing_offer_is_held_for_a_page_and_never_for_robots_txt_with_a_query() {
    let cfg = Config {
        payment: PaymentParams {
            hosts: vec!["example.org".into()],
            max_price: Money::parse("USD 0.05").ok(),
            max_per_day: Money::parse("USD 1").ok(),
            ..PaymentParams::default()
        },
        ..Config::default()
    };
    let f = Fixture::new(cfg).await;
    for (url, offered) in [
        ("http://example.org/page?x", Some("USD 0.05")),
        ("http://example.org/robots.txt", None),
        ("http://example.org/robots.txt?x", None),
        ("http://example.org/robots.txt?", None),
    ] {
        let parts = request(Method::GET, url, &[]);
        let mut x = f.begin(&parts);
        let cache = ask(&mut x, &parts).await;
        x.offer(&cache).await.expect("within limits");
        assert_eq!(x.rec.offered.as_deref(), offered, "{url}");
    }
}
