//! Sites that charge, through the proxy: a 402 reaches the client with its
//! price in `Mannerly-Decision`, is recorded, and is neither paid nor sent
//! again. Origins answer as Pay Per Crawl and x402 (v2 header, v1 body) do.

use super::support::*;

/// x402 v2 requirements, base64 as the `PAYMENT-REQUIRED` header carries
/// them:
/// `{"x402Version":2,"resource":{"url":"http://paid.test/premium"},"accepts":[{"scheme":"exact","network":"eip155:84532","amount":"10000","asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","payTo":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","maxTimeoutSeconds":60}]}`
const X402_V2_HEADER: &str = "eyJ4NDAyVmVyc2lvbiI6MiwicmVzb3VyY2UiOnsidXJsIjoiaHR0cDovL3BhaWQudGVzdC9wcmVtaXVtIn0sImFjY2VwdHMiOlt7InNjaGVtZSI6ImV4YWN0IiwibmV0d29yayI6ImVpcDE1NTo4NDUzMiIsImFtb3VudCI6IjEwMDAwIiwiYXNzZXQiOiIweDAzNkNiRDUzODQyYzU0MjY2MzRlNzkyOTU0MWVDMjMxOGYzZENGN2UiLCJwYXlUbyI6IjB4MjA5NjkzQmM2YWZjMEM1MzI4YkEzNkZhRjAzQzUxNEVGMzEyMjg3QyIsIm1heFRpbWVvdXRTZWNvbmRzIjo2MH1dfQ==";

const X402_V1: &str = r#"{"x402Version":1,"error":"X-PAYMENT header is required","accepts":[{"scheme":"exact","network":"base-sepolia","maxAmountRequired":"1000","asset":"0xA","payTo":"0xB","resource":"http://paid.test/v1","maxTimeoutSeconds":60}]}"#;

fn priced_origin() -> Handler {
    handler(|req| async move {
        let path = req.uri().path().to_string();
        match path.as_str() {
            "/robots.txt" => text(404, ""),
            "/crawl" => {
                let mut r = text(402, "this page costs money");
                r.headers_mut()
                    .insert("crawler-price", "USD 0.01".parse().unwrap());
                r
            }
            "/premium" => {
                let mut r = text(402, "");
                r.headers_mut()
                    .insert("payment-required", X402_V2_HEADER.parse().unwrap());
                r
            }
            "/v1" => text(402, X402_V1),
            _ => text(200, "free"),
        }
    })
}

#[tokio::test]
async fn a_402_is_answered_with_its_price_recorded_and_never_paid_or_retried() {
    let origin = Origin::http(priced_origin()).await;
    let mut proxy = TestProxy::start(|_| {}).await;
    let c = proxy.client();
    let base = format!("http://127.0.0.1:{}", origin.port());
    let cases = [
        (
            "/crawl",
            "payment_required; waited_ms=0; price=\"USD 0.01\"; scheme=pay-per-crawl",
            "USD 0.01",
            "pay-per-crawl",
        ),
        (
            "/premium",
            "payment_required; waited_ms=0; price=\"exact 10000 of 0x036CbD53842c5426634e7929541eC2318f3dCF7e on eip155:84532 to 0x209693Bc6afc0C5328bA36FaF03C514EF312287C\"; scheme=x402",
            "exact 10000 of 0x036CbD53842c5426634e7929541eC2318f3dCF7e on eip155:84532 to 0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
            "x402",
        ),
        (
            "/v1",
            "payment_required; waited_ms=0; price=\"exact 1000 of 0xA on base-sepolia to 0xB\"; scheme=x402",
            "exact 1000 of 0xA on base-sepolia to 0xB",
            "x402",
        ),
    ];
    for (path, said, _, _) in cases {
        let r = c.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(r.status(), 402, "{path}");
        assert_eq!(decision(&r), said, "{path}");
        let body = r.text().await.unwrap();
        if path == "/v1" {
            assert_eq!(
                body, X402_V1,
                "the body read for its price is passed on whole"
            );
        }
    }
    for (path, _, _, _) in cases {
        assert_eq!(
            origin.seen.count(path),
            1,
            "{path} was asked once, not paid and sent again"
        );
    }
    let lines = proxy.stop().await;
    let paid = with_outcome(&lines, "payment_required");
    assert_eq!(paid.len(), 3, "{lines:#?}");
    for (path, _, price, scheme) in cases {
        let line = paid
            .iter()
            .find(|l| l["url"].as_str().is_some_and(|u| u.ends_with(path)))
            .unwrap();
        assert_eq!(line["status"], 402);
        assert_eq!(line["price"], price, "{path}");
        assert_eq!(line["pay_scheme"], scheme, "{path}");
    }
}
