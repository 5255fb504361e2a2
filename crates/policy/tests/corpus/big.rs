//! The corpus's largest file, 1.4 MB, made here rather than committed: a
//! shop's generated robots.txt with one rule per catalogue item, as large
//! sites write them. Shared by `tests/robots_corpus.rs` and
//! `benches/robots.rs`.

/// Size of the generated file, at least.
pub const BIG_BYTES: usize = 1_400_000;

/// A 1.4 MB robots.txt: a few named groups, then `*` with tens of thousands
/// of rules; the last line, `Disallow: /after-the-cap/`, lies far beyond the
/// 500 KiB a parser reads.
pub fn big_robots() -> String {
    let mut s = String::with_capacity(BIG_BYTES + 4096);
    s.push_str("# Catalogue rules, generated nightly. Do not edit.\n");
    for bot in ["GPTBot", "CCBot", "Bytespider"] {
        s.push_str(&format!("User-agent: {bot}\nDisallow: /\n\n"));
    }
    s.push_str("User-agent: *\nCrawl-delay: 1\nDisallow: /checkout/\nAllow: /catalog/\n");
    let mut i = 0u32;
    while s.len() < BIG_BYTES {
        s.push_str(&format!("Disallow: /catalog/item-{i:06}/reviews?sort=*\n"));
        if i.is_multiple_of(50) {
            s.push_str(&format!("Disallow: /catalog/*/variant-{i}$\n"));
        }
        i += 1;
    }
    s.push_str("Disallow: /after-the-cap/\n");
    s
}

/// URLs for the big file: items early and late in the file, variants,
/// misses, full URLs.
pub fn big_urls() -> Vec<String> {
    let mut v = Vec::new();
    for i in [0u32, 7, 1_000, 5_000, 9_999, 12_000, 20_000, 29_000] {
        v.push(format!("/catalog/item-{i:06}/reviews?sort=asc"));
        v.push(format!("/catalog/item-{i:06}/"));
        v.push(format!(
            "https://shop.example/catalog/x/variant-{}",
            i - i % 50
        ));
    }
    v.extend(
        [
            "/",
            "/checkout/pay",
            "/after-the-cap/page",
            "/catalog/",
            "/about/%7Eteam",
        ]
        .map(String::from),
    );
    v
}
