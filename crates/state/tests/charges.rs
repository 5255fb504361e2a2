//! The ledger on disk across a reopen, and shared through a real
//! redis-server by two stores that reserve at once.

use std::time::Duration;

use mannerly_policy::payment::{Money, PaymentParams};
use mannerly_state::charges::ChargeStore;
use redis::aio::ConnectionManager;

use mannerly_test_support::redis_server;

const NOW: u64 = 20_000 * 86_400;

fn usd(s: &str) -> Money {
    Money::parse(&format!("USD {s}")).unwrap()
}

fn params() -> PaymentParams {
    PaymentParams {
        hosts: vec!["paid.example".into()],
        max_price: Some(usd("0.01")),
        max_per_day: Some(usd("0.5")),
        ..PaymentParams::default()
    }
}

/// 100 holds of 0.01 against a day's limit of 0.50, from `stores` at once;
/// each that passes is settled as charged. How many passed.
async fn reserve_100(stores: &[ChargeStore]) -> usize {
    let mut tasks = Vec::new();
    for i in 0..100 {
        let store = stores[i % stores.len()].clone();
        tasks.push(tokio::spawn(async move {
            let id = format!("r{i}");
            let p = params();
            let hold = {
                let id = id.clone();
                store
                    .update(move |l| l.reserve(&p, "paid.example", &usd("0.01"), &id, NOW))
                    .await
                    .unwrap()
            };
            if hold.is_ok() {
                store
                    .update(move |l| l.settle(&id, "paid.example", Some(&usd("0.01")), NOW))
                    .await
                    .unwrap();
            }
            hold.is_ok()
        }));
    }
    let mut passed = 0;
    for t in tasks {
        passed += usize::from(t.await.unwrap());
    }
    passed
}

#[tokio::test]
async fn the_file_ledger_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("payments.json");
    let store = ChargeStore::file(&path).unwrap();
    assert_eq!(reserve_100(std::slice::from_ref(&store)).await, 50);
    drop(store);
    let again = ChargeStore::file(&path).unwrap();
    let l = again.snapshot().await.unwrap();
    assert_eq!(l.hosts["paid.example"].spent, usd("0.5"));
    assert_eq!(l.hosts["paid.example"].bought, 50);
    let p = params();
    let refused = again
        .update(move |l| l.reserve(&p, "paid.example", &usd("0.01"), "late", NOW))
        .await
        .unwrap();
    assert_eq!(refused.unwrap_err().limit(), "per_day");
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[tokio::test]
async fn two_proxies_sharing_redis_never_pass_the_days_limit_together() {
    let Some(server) = redis_server::RedisServer::start("charges redis") else {
        return;
    };
    let conn = || {
        let client = redis::Client::open(server.url()).unwrap();
        let cfg = redis::aio::ConnectionManagerConfig::new();
        async move {
            ConnectionManager::new_with_config(client, cfg)
                .await
                .unwrap()
        }
    };
    let timeout = Duration::from_secs(5);
    let a = ChargeStore::redis(mannerly_state::Link::Node(conn().await), "test:", timeout);
    let b = ChargeStore::redis(mannerly_state::Link::Node(conn().await), "test:", timeout);
    assert_eq!(reserve_100(&[a.clone(), b.clone()]).await, 50);
    let seen_by_b = b.snapshot().await.unwrap();
    assert_eq!(seen_by_b.hosts["paid.example"].spent, usd("0.5"));
    assert_eq!(seen_by_b.hosts["paid.example"].bought, 50);
    assert!(seen_by_b.holds.is_empty());
    assert_eq!(a.snapshot().await.unwrap(), seen_by_b);
}
