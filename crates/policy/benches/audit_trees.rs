//! What the Merkle trees of format-3 checkpoints cost the audit writer per
//! line: chaining a realistic line alone, against chaining it and adding it
//! to the file's trees (leaf hash, host count, host leaf), with a
//! checkpoint's heads every 1000 lines, over 100,000 hosts.
//!
//! `cargo bench -p mannerly-policy --bench audit_trees`

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use mannerly_policy::{chain_line, AuditRecord, FileTrees, Outcome, GENESIS};

const HOSTS: usize = 100_000;
const LINES: usize = 10_000;

fn records() -> Vec<AuditRecord> {
    (0..LINES)
        .map(|i| AuditRecord {
            ts: "2026-12-01T12:00:00.123Z".into(),
            id: format!("m-{i}"),
            client: Some("127.0.0.1:50000".into()),
            method: "GET".into(),
            url: format!(
                "https://host{}.example/articles/{i}?page=2",
                i * 7919 % HOSTS
            ),
            host: format!("host{}.example", i * 7919 % HOSTS),
            agent: Some("MyBot".into()),
            outcome: Some(Outcome::Fetched),
            status: Some(200),
            waited_ms: Some(12),
            upstream_ms: Some(80),
            rate: Some(1.0),
            ceiling: Some(4.0),
            bytes: Some(18_000),
            cache: Some("stored"),
            ..Default::default()
        })
        .collect()
}

/// A file's trees with every host seen once, as deep into a crawl.
fn warm() -> FileTrees {
    let mut t = FileTrees::default();
    for h in 0..HOSTS {
        t.record(&format!("host{h}.example"), "x", GENESIS);
    }
    t.heads();
    t
}

fn write(c: &mut Criterion) {
    let recs = records();
    let mut g = c.benchmark_group("audit_line");
    g.throughput(Throughput::Elements(LINES as u64));
    g.sample_size(20);
    g.bench_function("chain_only", |b| {
        b.iter(|| {
            let mut prev = GENESIS.to_string();
            for r in &recs {
                let (line, chain) = chain_line(&prev, &r.to_json());
                black_box(line);
                prev = chain;
            }
        })
    });
    g.bench_function("chain_and_trees", |b| {
        b.iter_batched(
            warm,
            |mut trees| {
                let mut prev = GENESIS.to_string();
                for (i, r) in recs.iter().enumerate() {
                    let mut r = r.clone();
                    r.host_seq = Some(trees.next_seq(&r.host));
                    let (line, chain) = chain_line(&prev, &r.to_json());
                    trees.record(&r.host, &line, &chain);
                    if i % 1000 == 999 {
                        black_box(trees.heads());
                    }
                    prev = chain;
                }
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(5)).warm_up_time(Duration::from_secs(1));
    targets = write
}
criterion_main!(benches);
