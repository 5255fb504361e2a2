//! Decisions per second on a realistic robots.txt: a few hundred rules across
//! several groups, a good share with `*` / `$`, and a mix of URLs (plain,
//! with queries, percent-encoded, full URLs) that hit and miss.
//!
//! Also the corpus's largest file (1.4 MB, `tests/corpus/big.rs`): decisions
//! per second once it is parsed (its first 500 KiB, ~11,000 rules).
//!
//! `cargo bench -p mannerly-policy --bench robots`

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use mannerly_policy::robots::{Purpose, Robots};

#[path = "../tests/corpus/big.rs"]
mod big;

const SECTIONS: &[&str] = &[
    "account", "admin", "api", "archive", "blog", "cart", "checkout", "search", "tag", "user",
    "wiki", "media", "static", "print", "export", "feeds", "lang", "help", "shop", "news",
];

fn realistic_robots() -> String {
    let mut s = String::from(
        "# generated for the robots bench\nSitemap: https://example.com/sitemap.xml\n\n",
    );
    for bot in ["GPTBot", "CCBot", "Bytespider", "ClaudeBot", "Amazonbot"] {
        s.push_str(&format!("User-agent: {bot}\nDisallow: /\n\n"));
    }
    s.push_str("User-agent: Googlebot\nUser-agent: Bingbot\nAllow: /\nDisallow: /search\nDisallow: /*?sessionid=\nCrawl-delay: 1\n\n");
    s.push_str("User-agent: *\nContent-Signal: search=yes, ai-train=no\nCrawl-delay: 2\n");
    for (i, section) in SECTIONS.iter().enumerate() {
        s.push_str(&format!("Disallow: /{section}/\n"));
        s.push_str(&format!("Allow: /{section}/public/\n"));
        s.push_str(&format!("Disallow: /{section}/*/edit$\n"));
        s.push_str(&format!("Disallow: /{section}/*?*sort=\n"));
        s.push_str(&format!("Disallow: /{section}/*.json$\n"));
        s.push_str(&format!("Allow: /{section}/public/*.html$\n"));
        s.push_str(&format!("Disallow: /{section}/private-{i}/\n"));
        s.push_str(&format!("Disallow: /{section}/%E2%9C%93/\n"));
        for page in 0..4 {
            s.push_str(&format!("Disallow: /{section}/page-{page}-draft\n"));
        }
    }
    s.push_str("Disallow: /*.pdf$\nDisallow: /*/print/\nDisallow: /*?replytocom=\nAllow: /$\n");
    s
}

fn urls() -> Vec<String> {
    let mut v = Vec::new();
    for (i, section) in SECTIONS.iter().enumerate() {
        v.push(format!("/{section}/public/article-{i}.html"));
        v.push(format!("/{section}/item/{i}/edit"));
        v.push(format!("/{section}/list?page=2&sort=asc"));
        v.push(format!(
            "https://example.com/{section}/page-{}-draft-v2",
            i % 4
        ));
        v.push(format!("/{section}/public/%7Euser/notes"));
        v.push(format!("/{section}/✓/x"));
    }
    v.extend(
        [
            "/",
            "/index.html",
            "/about/team",
            "/docs/manual.pdf",
            "/blog/2024/01/01/hello-world?replytocom=12",
            "/robots.txt",
            "https://example.com/deeply/nested/path/that/matches/nothing/at/all?x=1",
        ]
        .map(String::from),
    );
    v
}

fn bench(c: &mut Criterion) {
    let body = realistic_robots();
    let robots = Robots::parse(body.as_bytes());
    assert!(
        robots.rules().len() >= 200,
        "bench file has {} rules",
        robots.rules().len()
    );
    let urls = urls();

    let mut group = c.benchmark_group("robots");
    group.measurement_time(Duration::from_secs(5));
    group.throughput(Throughput::Elements(urls.len() as u64));
    group.bench_function("check_star_group", |b| {
        b.iter(|| {
            for url in &urls {
                black_box(robots.check(black_box("MyCrawler"), black_box(url)));
            }
        })
    });
    group.bench_function("check_named_group", |b| {
        b.iter(|| {
            for url in &urls {
                black_box(robots.check(black_box("bingbot"), black_box(url)));
            }
        })
    });
    group.bench_function("signal_check", |b| {
        b.iter(|| {
            for url in &urls {
                black_box(robots.signal_check(
                    black_box("MyCrawler"),
                    black_box(url),
                    &[Purpose::Search, Purpose::AiTrain],
                ));
            }
        })
    });
    group.finish();

    let mut group = c.benchmark_group("robots_parse");
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.bench_function("parse", |b| {
        b.iter(|| black_box(Robots::parse(black_box(body.as_bytes()))))
    });
    group.finish();
}

fn bench_largest(c: &mut Criterion) {
    let body = big::big_robots();
    let robots = Robots::parse(body.as_bytes());
    let urls = big::big_urls();
    let mut group = c.benchmark_group("robots_largest_file");
    group.measurement_time(Duration::from_secs(5));
    group.throughput(Throughput::Elements(urls.len() as u64));
    group.bench_function("check", |b| {
        b.iter(|| {
            for url in &urls {
                black_box(robots.check(black_box("MyCrawler"), black_box(url)));
            }
        })
    });
    group.bench_function("preferences", |b| {
        b.iter(|| {
            for url in &urls {
                black_box(robots.preferences(black_box("MyCrawler"), black_box(url)));
            }
        })
    });
    group.finish();

    let mut group = c.benchmark_group("robots_largest_file_parse");
    group.sample_size(20);
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.bench_function("parse", |b| {
        b.iter(|| black_box(Robots::parse(black_box(body.as_bytes()))))
    });
    group.finish();
}

criterion_group!(benches, bench, bench_largest);
criterion_main!(benches);
