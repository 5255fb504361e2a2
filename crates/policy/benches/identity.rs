//! Cost of one Web Bot Auth signature: what every request sent upstream
//! pays when `[identity]` is enabled (headers replaced, base built,
//! Ed25519 signed).
//!
//! `cargo bench -p mannerly-policy --bench identity`

use std::hint::black_box;
use std::time::{Duration, UNIX_EPOCH};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use mannerly_policy::identity::{key_from_pem, key_to_pem, Forms, Identity};

fn sign(c: &mut Criterion) {
    let key = key_from_pem(&key_to_pem(&[42u8; 32]).unwrap()).unwrap();
    let id = Identity::new(
        key,
        "https://crawler.example",
        Duration::from_secs(300),
        &[],
        Forms::default(),
    )
    .unwrap();
    let mut headers = http::HeaderMap::new();
    headers.insert(http::header::USER_AGENT, "MyBot/1.0".parse().unwrap());
    let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let mut g = c.benchmark_group("identity");
    g.throughput(Throughput::Elements(1));
    g.bench_function("sign_headers", |b| {
        b.iter(|| black_box(id.sign_headers(&mut headers, black_box("example.com:8443"), now)))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = sign
}
criterion_main!(benches);
