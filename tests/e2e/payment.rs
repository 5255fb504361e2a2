//! Sites that charge, through the proxy. Unpaid: a 402 reaches the client
//! with its price in `Mannerly-Decision`, is recorded, and is neither paid
//! nor sent again (origins answer as Pay Per Crawl and x402 v2 header / v1
//! body do). Paid within limits: an in-process origin that implements the
//! Pay Per Crawl flow (402 with `crawler-price`, the retry with
//! `crawler-exact-price` or a standing `crawler-max-price`, 200 with
//! `crawler-charged`, `crawler-error`s, 304s that cost nothing) and keeps
//! its own ledger of what it charged.

use std::sync::{Arc, Mutex};

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
            "payment_required; waited_ms=0; price=\"exact 10000 of 0x036CbD53842c5426634e7929541eC2318f3dCF7e on eip155:84532 to 0x209693Bc6afc0C5328bA36FaF03C514EF312287C\"; scheme=x402; amount=10000; asset=0x036CbD53842c5426634e7929541eC2318f3dCF7e; network=\"eip155:84532\"; pay_to=0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
            "exact 10000 of 0x036CbD53842c5426634e7929541eC2318f3dCF7e on eip155:84532 to 0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
            "x402",
        ),
        (
            "/v1",
            "payment_required; waited_ms=0; price=\"exact 1000 of 0xA on base-sepolia to 0xB\"; scheme=x402; amount=1000; asset=0xA; network=base-sepolia; pay_to=0xB",
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

// === Pay Per Crawl within limits ===

/// What the Pay Per Crawl origin charged, in hundredths of a dollar (its
/// own ledger, kept apart from the proxy's), and each request it saw.
#[derive(Default)]
struct Billing {
    /// (path, cents) of every charge.
    charges: Mutex<Vec<(String, u64)>>,
}

impl Billing {
    fn cents(&self) -> u64 {
        self.charges.lock().unwrap().iter().map(|(_, c)| c).sum()
    }
    fn count(&self) -> usize {
        self.charges.lock().unwrap().len()
    }
}

/// `USD 0.01` as cents, the only shape this origin prices in.
fn cents(v: &str) -> Option<u64> {
    let amount = v.strip_prefix("USD ")?;
    let (int, frac) = amount.split_once('.').unwrap_or((amount, ""));
    if frac.len() > 2 {
        return None;
    }
    let frac = format!("{frac:0<2}");
    Some(int.parse::<u64>().ok()? * 100 + frac.parse::<u64>().ok()?)
}

/// Pay Per Crawl as Cloudflare documents it for crawlers: pages cost
/// `crawler-price` (`/p/N` 1 cent, `/dear/N` 5 cents); a price header must be
/// covered by the Web Bot Auth signature; `crawler-exact-price` must equal
/// the price, `crawler-max-price` reach it; both at once is an error;
/// `/fail/N` cannot be paid (`PaymentFailed`). Only a 200 is charged, and a
/// request whose validators match is a 304, free.
fn pay_per_crawl_origin(billing: Arc<Billing>) -> Handler {
    handler(move |req| {
        let billing = billing.clone();
        async move {
            let path = req.uri().path().to_string();
            if path == "/robots.txt" {
                return text(404, "");
            }
            let h = req.headers();
            let get = |n: &str| h.get(n).and_then(|v| v.to_str().ok()).map(String::from);
            let price = if path.starts_with("/dear/") { 5 } else { 1 };
            let etag = format!("\"{}\"", path);
            let error = |status: u16, code: &str| {
                let mut r = text(status, code.to_string());
                r.headers_mut()
                    .insert("crawler-error", code.parse().unwrap());
                if status == 402 {
                    let p = format!("USD 0.0{price}");
                    r.headers_mut().insert("crawler-price", p.parse().unwrap());
                }
                r
            };
            if get("if-none-match").as_deref() == Some(etag.as_str()) {
                let mut r = text(304, "");
                r.headers_mut().insert("etag", etag.parse().unwrap());
                return r;
            }
            let (exact, max) = (get("crawler-exact-price"), get("crawler-max-price"));
            let offered = match (&exact, &max) {
                (None, None) => {
                    let mut r = text(402, "payment required");
                    let p = format!("USD 0.0{price}");
                    r.headers_mut().insert("crawler-price", p.parse().unwrap());
                    return r;
                }
                (Some(_), Some(_)) => return error(400, "ConflictingPriceHeaders"),
                (Some(e), None) => ("crawler-exact-price", e),
                (None, Some(m)) => ("crawler-max-price", m),
            };
            let covered = get("signature-input")
                .is_some_and(|i| i.contains(&format!("\"{}\"", offered.0)))
                && get("signature").is_some();
            if !covered {
                return error(400, "StrongAuthRequired");
            }
            let Some(offer) = cents(offered.1) else {
                return error(400, "InvalidCrawlerPriceValue");
            };
            if exact.is_some() && offer != price {
                return error(402, "InvalidCrawlerExactPrice");
            }
            if max.is_some() && offer < price {
                return error(402, "InvalidCrawlerMaxPrice");
            }
            if path.starts_with("/fail/") {
                return error(403, "PaymentFailed");
            }
            billing.charges.lock().unwrap().push((path.clone(), price));
            let mut r = text(200, format!("bought {path}"));
            let hs = r.headers_mut();
            hs.insert(
                "crawler-charged",
                format!("USD 0.0{price}").parse().unwrap(),
            );
            hs.insert("etag", etag.parse().unwrap());
            hs.insert("cache-control", "max-age=0".parse().unwrap());
            r
        }
    })
}

const AGENT: &str = "https://crawler.example/.well-known/http-message-signatures-directory";

/// Pays `paid.test` at most `max` a request and `day` a day, signed.
fn paying(c: &mut mannerly_proxy::Config, port: u16, max: &str, day: &str) {
    resolve_to_loopback(c, &format!("paid.test:{port}"), port);
    resolve_to_loopback(c, &format!("unpaid.test:{port}"), port);
    c.payment.hosts = vec!["paid.test".into()];
    c.payment.max_price = Some(mannerly_policy::payment::Money::parse(max).unwrap());
    c.payment.max_per_day = Some(mannerly_policy::payment::Money::parse(day).unwrap());
    c.identity.enabled = true;
    c.identity.signature_agent = AGENT.into();
    if !c.identity_key_path().exists() {
        mannerly_proxy::KeyStore::of(c).init(false).unwrap();
    }
}

fn sum_cents(lines: &[&serde_json::Value], field: &str) -> u64 {
    lines
        .iter()
        .filter_map(|l| l[field].as_str())
        .map(|v| cents(v).unwrap())
        .sum()
}

/// The issue's goal: 100 priced pages, a day's limit of 50 of them. Exactly
/// 50 are bought, the other 50 refused before anything is sent, the
/// proxy's 50 recorded charges add up to the origin's own ledger, and a
/// re-crawl of the 50 bought pays nothing (304s).
#[tokio::test]
async fn a_crawl_of_100_priced_pages_with_a_limit_of_50_pays_for_exactly_50_and_a_recrawl_pays_0() {
    let billing = Arc::new(Billing::default());
    let origin = Origin::http(pay_per_crawl_origin(billing.clone())).await;
    let port = origin.port();
    let mut proxy = TestProxy::start(|c| {
        paying(c, port, "USD 0.01", "USD 0.50");
        c.admin.listen = "127.0.0.1:0".into();
    })
    .await;
    let c = proxy.client();
    // Eight at a time: the holds, not the order of requests, keep the limit.
    let crawl = |paths: Vec<String>| {
        let c = c.clone();
        async move {
            let gate = Arc::new(tokio::sync::Semaphore::new(8));
            let mut set = tokio::task::JoinSet::new();
            for p in paths {
                let (c, gate) = (c.clone(), gate.clone());
                set.spawn(async move {
                    let _turn = gate.acquire_owned().await.unwrap();
                    let r = c
                        .get(format!("http://paid.test:{port}{p}"))
                        .send()
                        .await
                        .unwrap();
                    let (status, said) = (r.status().as_u16(), decision(&r));
                    let charged = r.headers().get("crawler-charged").is_some();
                    let body = r.text().await.unwrap();
                    (p, status, said, charged, body)
                });
            }
            set.join_all().await
        }
    };
    let first = crawl((0..100).map(|i| format!("/p/{i}")).collect()).await;
    let bought: Vec<String> = first
        .iter()
        .filter(|r| r.1 == 200)
        .map(|r| r.0.clone())
        .collect();
    assert_eq!(bought.len(), 50, "{first:#?}");
    for (path, status, said, charged, body) in &first {
        if *status == 200 {
            assert!(said.starts_with("fetched;"), "{path}: {said}");
            assert!(*charged, "{path}: the client sees what it cost");
            assert_eq!(body, &format!("bought {path}"));
        } else {
            assert_eq!(*status, 402, "{path}: {said}");
            assert!(
                said.starts_with("payment_refused;")
                    && said.contains("limit=per_day")
                    && said.contains("price=\"USD 0.01\""),
                "{path}: {said}"
            );
        }
    }
    let sent: Vec<_> = origin
        .seen
        .all()
        .into_iter()
        .filter(|r| r.path != "/robots.txt")
        .collect();
    assert_eq!(sent.len(), 50, "the refused 50 were never sent");
    for r in &sent {
        assert_eq!(r.headers["crawler-max-price"], "USD 0.01", "{}", r.path);
        assert!(r.headers.get("crawler-exact-price").is_none());
    }
    assert_eq!((billing.count(), billing.cents()), (50, 50));

    let again = crawl(bought.clone()).await;
    for (path, status, said, charged, body) in &again {
        assert_eq!(*status, 200, "{path}: {said}");
        assert!(said.starts_with("revalidated;"), "{path}: {said}");
        assert!(!*charged, "{path}: nothing was charged this time");
        assert_eq!(body, &format!("bought {path}"));
    }
    assert_eq!(
        (billing.count(), billing.cents()),
        (50, 50),
        "the re-crawl paid 0"
    );
    assert_eq!(
        origin
            .seen
            .all()
            .into_iter()
            .filter(|r| r.path != "/robots.txt")
            .count(),
        100
    );

    let admin = format!("http://{}", proxy.admin.unwrap());
    let metrics = super::admin::metrics_text(&admin).await;
    for want in [
        "mannerly_payment_spent{host=\"paid.test\",currency=\"USD\"} 0.5",
        "mannerly_payment_spent_all{currency=\"USD\"} 0.5",
        "mannerly_payment_pages_bought_total{host=\"paid.test\"} 50",
        "mannerly_payment_pages_saved_total{host=\"paid.test\"} 50",
    ] {
        assert!(metrics.contains(want), "{want} in {metrics}");
    }
    let lines = proxy.stop().await;
    let charged: Vec<_> = lines.iter().filter(|l| l["charged"].is_string()).collect();
    assert_eq!(charged.len(), 50);
    assert_eq!(
        sum_cents(&charged, "charged"),
        billing.cents(),
        "the proxy's record is the origin's ledger"
    );
    for l in &charged {
        assert_eq!(l["offered"], "USD 0.01");
        assert_eq!(l["signed"], true);
        assert_eq!(l["cache"], "stored");
    }
    let refused = with_outcome(&lines, "payment_refused");
    assert_eq!(refused.len(), 50);
    assert!(refused
        .iter()
        .all(|l| l["pay_limit"] == "per_day" && l["status"] == 402));
    let saved = with_outcome(&lines, "revalidated");
    assert_eq!(saved.len(), 50);
    assert_eq!(sum_cents(&saved, "saved_charge"), 50);

    let (code, out) = mannerly(&["report", proxy.audit_path.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{out}");
    let row = |name: &str| {
        out.lines()
            .find(|l| l.starts_with(name) && l.contains("USD"))
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .unwrap_or_else(|| panic!("no {name} payments row in {out}"))
    };
    // host, spent (currency, amount), bought, saved, refused
    assert_eq!(
        row("paid.test"),
        ["paid.test", "USD", "0.5", "50", "50", "50"],
        "{out}"
    );
    assert_eq!(
        row("ALL HOSTS")[2..],
        ["USD", "0.5", "50", "50", "50"],
        "{out}"
    );
}

/// `offer = "exact_price"`: a 402 within limits is sent once more with
/// `crawler-exact-price` (signed, never beside `crawler-max-price`) and its
/// charge recorded; a price over `max_price` is refused without sending
/// again; a `crawler-error` is passed on, not retried; a host not in
/// `payment.hosts` gets its 402 back unpaid.
#[tokio::test]
async fn a_402_within_limits_is_paid_once_with_the_exact_price_and_errors_are_not_retried() {
    let billing = Arc::new(Billing::default());
    let origin = Origin::http(pay_per_crawl_origin(billing.clone())).await;
    let port = origin.port();
    let mut proxy = TestProxy::start(|c| {
        paying(c, port, "USD 0.01", "USD 1");
        c.payment.offer = mannerly_policy::payment::Offer::ExactPrice;
    })
    .await;
    let c = proxy.client();
    let get = |host: &'static str, path: &'static str| {
        let c = c.clone();
        async move {
            let r = c
                .get(format!("http://{host}:{port}{path}"))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), decision(&r))
        }
    };
    let (status, said) = get("paid.test", "/p/1").await;
    assert_eq!(
        (status, said.starts_with("fetched;")),
        (200, true),
        "{said}"
    );
    let tries: Vec<_> = origin
        .seen
        .all()
        .into_iter()
        .filter(|r| r.path == "/p/1")
        .collect();
    assert_eq!(tries.len(), 2, "asked, then paid");
    assert!(tries[0].headers.get("crawler-exact-price").is_none());
    assert_eq!(tries[1].headers["crawler-exact-price"], "USD 0.01");
    assert!(tries[1].headers.get("crawler-max-price").is_none());
    assert_eq!(billing.cents(), 1);

    let (status, said) = get("paid.test", "/dear/1").await;
    assert_eq!(status, 402);
    assert!(
        said.starts_with("payment_refused;")
            && said.contains("limit=per_request")
            && said.contains("price=\"USD 0.05\""),
        "{said}"
    );
    assert_eq!(
        origin.seen.count("/dear/1"),
        1,
        "over the limit: not sent again"
    );

    let (status, said) = get("paid.test", "/fail/1").await;
    assert_eq!(status, 403);
    assert!(
        said.starts_with("payment_failed;") && said.contains("crawler_error=PaymentFailed"),
        "{said}"
    );
    assert_eq!(
        origin.seen.count("/fail/1"),
        2,
        "asked, paid once, not retried"
    );

    let (status, said) = get("unpaid.test", "/p/2").await;
    assert_eq!(status, 402);
    assert!(said.starts_with("payment_required;"), "{said}");
    assert_eq!(origin.seen.count("/p/2"), 1);
    assert_eq!(billing.cents(), 1);

    let lines = proxy.stop().await;
    let paid = lines
        .iter()
        .find(|l| l["url"].as_str().unwrap().ends_with("/p/1"))
        .unwrap();
    assert_eq!(
        (paid["charged"].as_str(), paid["offered"].as_str()),
        (Some("USD 0.01"), Some("USD 0.01"))
    );
    let failed = with_outcome(&lines, "payment_failed");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["pay_error"], "PaymentFailed");
    let refused = with_outcome(&lines, "payment_refused");
    assert_eq!(refused[0]["pay_limit"], "per_request");
    assert_eq!(refused[0]["price"], "USD 0.05");
}

/// A standing offer below the site's price draws `InvalidCrawlerMaxPrice`:
/// passed on as it came, nothing charged, the hold released (the day's
/// whole limit is still there for the next page).
#[tokio::test]
async fn a_standing_offer_below_the_price_is_answered_with_the_sites_error() {
    let billing = Arc::new(Billing::default());
    let origin = Origin::http(pay_per_crawl_origin(billing.clone())).await;
    let port = origin.port();
    let mut proxy = TestProxy::start(|c| paying(c, port, "USD 0.01", "USD 0.01")).await;
    let c = proxy.client();
    let r = c
        .get(format!("http://paid.test:{port}/dear/1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 402);
    let said = decision(&r);
    assert!(
        said.starts_with("payment_failed;")
            && said.contains("crawler_error=InvalidCrawlerMaxPrice"),
        "{said}"
    );
    // The day's limit is one page: it was not spent on the refusal.
    let r = c
        .get(format!("http://paid.test:{port}/p/1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", decision(&r));
    assert_eq!(billing.cents(), 1);
    let lines = proxy.stop().await;
    let failed = with_outcome(&lines, "payment_failed");
    assert_eq!(failed[0]["pay_error"], "InvalidCrawlerMaxPrice");
    assert_eq!(failed[0]["price"], "USD 0.05");
}

/// Charges survive a restart: a second proxy on the same data dir counts
/// what the first one paid today against the same limit.
#[tokio::test]
async fn charges_survive_a_restart() {
    let billing = Arc::new(Billing::default());
    let origin = Origin::http(pay_per_crawl_origin(billing.clone())).await;
    let port = origin.port();
    let data = tempfile::tempdir().unwrap();
    let run = |n: usize, from: usize| {
        let dir = data.path().to_path_buf();
        async move {
            let mut proxy = TestProxy::start(|c| {
                c.data_dir = dir.clone();
                c.audit.path = dir
                    .join(format!("audit-{from}.jsonl"))
                    .display()
                    .to_string();
                paying(c, port, "USD 0.01", "USD 0.05");
            })
            .await;
            let c = proxy.client();
            let mut statuses = Vec::new();
            for i in from..from + n {
                let r = c
                    .get(format!("http://paid.test:{port}/p/{i}"))
                    .send()
                    .await
                    .unwrap();
                statuses.push(r.status().as_u16());
            }
            proxy.stop().await;
            statuses
        }
    };
    assert_eq!(run(3, 0).await, vec![200; 3]);
    assert_eq!(
        run(4, 10).await,
        vec![200, 200, 402, 402],
        "3 of 5 were paid before the restart"
    );
    assert_eq!(billing.cents(), 5);
    let ledger: serde_json::Value =
        serde_json::from_slice(&std::fs::read(data.path().join("payments.json")).unwrap()).unwrap();
    assert_eq!(ledger["hosts"]["paid.test"]["spent"], "USD 0.05");
    assert_eq!(ledger["hosts"]["paid.test"]["bought"], 5);
}

/// With the Redis backend the ledger is the cluster's: two proxies crawling
/// at once, each with the whole day's limit of 10 pages in its config,
/// together buy exactly 10 and refuse the rest unsent.
#[tokio::test]
async fn two_proxies_sharing_redis_share_one_days_limit() {
    let Some(redis) =
        super::redis_server::RedisServer::start("two_proxies_sharing_redis_share_one_days_limit")
    else {
        return;
    };
    let billing = Arc::new(Billing::default());
    let origin = Origin::http(pay_per_crawl_origin(billing.clone())).await;
    let port = origin.port();
    let start = || {
        TestProxy::start(|c| {
            paying(c, port, "USD 0.01", "USD 0.10");
            c.state.backend = mannerly_proxy::StateBackend::Redis;
            c.state.redis_url = redis.url();
            // A loaded test machine must not look like an unreachable Redis.
            c.state.command_timeout_ms = 2000.0;
        })
    };
    let (mut a, mut b) = (start().await, start().await);
    let crawl = |c: reqwest::Client, from: usize| {
        tokio::spawn(async move {
            let mut statuses = Vec::new();
            for i in from..from + 15 {
                let r = c
                    .get(format!("http://paid.test:{port}/p/{i}"))
                    .send()
                    .await
                    .unwrap();
                statuses.push(r.status().as_u16());
            }
            statuses
        })
    };
    let (ra, rb) = (crawl(a.client(), 0), crawl(b.client(), 100));
    let mut all = ra.await.unwrap();
    all.extend(rb.await.unwrap());
    assert_eq!(all.iter().filter(|s| **s == 200).count(), 10, "{all:?}");
    assert_eq!(all.iter().filter(|s| **s == 402).count(), 20, "{all:?}");
    assert_eq!((billing.count(), billing.cents()), (10, 10));
    let sent = origin
        .seen
        .all()
        .into_iter()
        .filter(|r| r.path != "/robots.txt")
        .count();
    assert_eq!(sent, 10, "the refused 20 were never sent");
    let mut lines = a.stop().await;
    lines.extend(b.stop().await);
    let charged: Vec<_> = lines.iter().filter(|l| l["charged"].is_string()).collect();
    assert_eq!(sum_cents(&charged, "charged"), 10);
}

// === Money that may have been spent ===

/// The Pay Per Crawl origin, with `/slow/N` held until `go` is notified
/// (it says `arrived` first), `/eur/N` charged in euros, and `/break/N`
/// making the proxy's ledger unwritable (a directory where its temporary
/// file goes) before it answers.
fn awkward_origin(
    billing: Arc<Billing>,
    arrived: Arc<tokio::sync::Notify>,
    go: Arc<tokio::sync::Notify>,
    ledger_dir: std::path::PathBuf,
) -> Handler {
    let inner = pay_per_crawl_origin(billing);
    handler(move |req| {
        let (inner, arrived, go) = (inner.clone(), arrived.clone(), go.clone());
        let ledger_dir = ledger_dir.clone();
        async move {
            let path = req.uri().path().to_string();
            if path.starts_with("/slow/") {
                arrived.notify_one();
                go.notified().await;
            }
            if path.starts_with("/break/") {
                let tmp = ledger_dir.join("payments.json.tmp");
                std::fs::create_dir_all(tmp.join("in-the-way")).unwrap();
            }
            let mut r = inner(req).await;
            if path.starts_with("/eur/") && r.status() == 200 {
                r.headers_mut()
                    .insert("crawler-charged", "EUR 0.01".parse().unwrap());
            }
            r
        }
    })
}

/// [`awkward_origin`] whose `/slow/` pages nobody waits on.
async fn unheld_awkward_origin(ledger_dir: &std::path::Path) -> Origin {
    let n = || Arc::new(tokio::sync::Notify::new());
    let billing = Arc::new(Billing::default());
    Origin::http(awkward_origin(billing, n(), n(), ledger_dir.to_path_buf())).await
}

async fn priced(c: &reqwest::Client, port: u16, path: &str) -> (u16, String) {
    let r = c
        .get(format!("http://paid.test:{port}{path}"))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), decision(&r))
}

/// A client that gives up on a priced request after it reached the site
/// leaves the hold standing (the site may charge it): the day's limit of
/// one page is spent, and the next page is refused unsent.
#[tokio::test]
async fn a_priced_request_abandoned_after_it_was_sent_keeps_its_hold() {
    let billing = Arc::new(Billing::default());
    let (arrived, go) = (
        Arc::new(tokio::sync::Notify::new()),
        Arc::new(tokio::sync::Notify::new()),
    );
    let data = tempfile::tempdir().unwrap();
    let origin = Origin::http(awkward_origin(
        billing.clone(),
        arrived.clone(),
        go.clone(),
        data.path().to_path_buf(),
    ))
    .await;
    let port = origin.port();
    let mut proxy = TestProxy::start(|c| paying(c, port, "USD 0.01", "USD 0.01")).await;
    let c = proxy.client();
    let slow = {
        let c = c.clone();
        tokio::spawn(async move { priced(&c, port, "/slow/1").await })
    };
    arrived.notified().await;
    slow.abort();
    let gone = line_where(&proxy.audit_path, |l| {
        l["url"].as_str().is_some_and(|u| u.ends_with("/slow/1")) && l["source"] == "client"
    })
    .await;
    assert!(gone.is_some(), "the abandoned request's line");
    let (status, said) = priced(&c, port, "/p/2").await;
    assert_eq!(status, 402, "{said}");
    assert!(
        said.starts_with("payment_refused;") && said.contains("limit=per_day"),
        "{said}"
    );
    go.notify_waiters();
    proxy.stop().await;
    assert_eq!(origin.seen.count("/p/2"), 0, "refused unsent");
}

/// A charge in another currency is on the line, counted as the price held,
/// and the host is paid no more today.
#[tokio::test]
async fn a_charge_in_another_currency_is_recorded_and_refused() {
    let data = tempfile::tempdir().unwrap();
    let origin = unheld_awkward_origin(data.path()).await;
    let port = origin.port();
    let mut proxy = TestProxy::start(|c| paying(c, port, "USD 0.01", "USD 0.05")).await;
    let c = proxy.client();
    assert_eq!(priced(&c, port, "/eur/1").await.0, 200);
    let (status, said) = priced(&c, port, "/p/2").await;
    assert_eq!(status, 402, "{said}");
    assert!(said.contains("limit=currency"), "{said}");
    let lines = proxy.stop().await;
    let eur = lines
        .iter()
        .find(|l| l["url"].as_str().is_some_and(|u| u.ends_with("/eur/1")))
        .unwrap();
    assert_eq!(eur["charged"], "EUR 0.01", "{eur}");
    assert_eq!(eur["pay_limit"], "currency", "{eur}");
    assert!(
        eur["pay_error"]
            .as_str()
            .unwrap()
            .contains("another currency"),
        "{eur}"
    );
    let ledger: serde_json::Value =
        serde_json::from_slice(&std::fs::read(proxy.dir.path().join("payments.json")).unwrap())
            .unwrap();
    assert_eq!(
        ledger["hosts"]["paid.test"]["spent"], "USD 0.01",
        "{ledger}"
    );
    assert_eq!(
        ledger["hosts"]["paid.test"]["foreign"], "EUR 0.01",
        "{ledger}"
    );
    assert_eq!(origin.seen.count("/p/2"), 0, "refused unsent");
}

/// A settlement the ledger cannot take stops all further paying, said on
/// the request's line and on `/readyz`.
#[tokio::test]
async fn a_settlement_that_cannot_be_written_stops_paying() {
    let data = tempfile::tempdir().unwrap();
    let origin = unheld_awkward_origin(data.path()).await;
    let port = origin.port();
    let mut proxy = TestProxy::start(|c| {
        c.data_dir = data.path().to_path_buf();
        c.audit.path = data.path().join("audit.jsonl").display().to_string();
        c.admin.listen = "127.0.0.1:0".into();
        paying(c, port, "USD 0.01", "USD 0.05");
    })
    .await;
    let c = proxy.client();
    assert_eq!(priced(&c, port, "/p/1").await.0, 200);
    assert_eq!(priced(&c, port, "/break/2").await.0, 200);
    let (status, said) = priced(&c, port, "/p/3").await;
    assert_eq!(status, 402, "{said}");
    assert!(said.contains("limit=ledger"), "{said}");
    let ready = reqwest::get(format!("http://{}/readyz", proxy.admin.unwrap()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let ready: serde_json::Value = serde_json::from_str(&ready).unwrap();
    assert!(
        ready["payments"]
            .as_str()
            .unwrap()
            .starts_with("stopped: a settlement could not be written"),
        "{ready}"
    );
    let lines = proxy.stop().await;
    let broke = lines
        .iter()
        .find(|l| l["url"].as_str().is_some_and(|u| u.ends_with("/break/2")))
        .unwrap();
    assert!(
        broke["pay_error"]
            .as_str()
            .unwrap()
            .contains("paying is stopped"),
        "{broke}"
    );
    assert_eq!(origin.seen.count("/p/3"), 0, "refused unsent");
}
