//! Writes a chained audit log for benchmarks: `gen_audit OUT SIZE_MB HOSTS`.
//! Lines look like the proxy's (every field present); hosts take turns, a
//! few requests draw a 429, some are revalidated, some refused by robots.

use std::io::{BufWriter, Write};

use mannerly_policy::{chain_line, AuditRecord, Outcome, GENESIS};

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let out = args.get(1).map_or("audit.jsonl", String::as_str);
    let size_mb: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1024);
    let hosts: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(2000);
    let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(out)?);
    let mut prev = GENESIS.to_string();
    let (mut written, mut i) = (0u64, 0u64);
    let start = 1_738_324_800u64; // 2025-01-31T12:00:00Z
    while written < size_mb * 1_000_000 {
        let h = i % hosts;
        let n = i / hosts;
        let ms = start * 1000 + i * 10;
        let ts = format!(
            "2025-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
            1 + (ms / 1000 - start) / 86_400 / 28 % 12,
            1 + (ms / 1000 - start) / 86_400 % 28,
            (ms / 1000) / 3600 % 24,
            (ms / 1000) / 60 % 60,
            (ms / 1000) % 60,
            ms % 1000
        );
        let (outcome, status, pause, cache, saved) = match n % 500 {
            0 if n > 0 => (Outcome::Throttled, 429, Some(30.0), Some("miss"), None),
            7 => (Outcome::Disallowed, 403, None, None, None),
            m if m % 5 == 0 => (
                Outcome::Revalidated,
                200,
                None,
                Some("revalidated"),
                Some(5120),
            ),
            _ => (Outcome::Fetched, 200, None, Some("stored"), None),
        };
        let rec = AuditRecord {
            ts,
            id: format!("18f2a9c3b-{i}"),
            client: Some("127.0.0.1:52344".into()),
            method: "GET".into(),
            url: format!("https://host-{h}.example.org/articles/{n}?page=2&sort=recent"),
            host: format!("host-{h}.example.org"),
            agent: Some("ExampleBot".into()),
            outcome: Some(outcome),
            status: Some(status),
            waited_ms: Some(120),
            upstream_ms: Some(48),
            rate: Some(1.6),
            ceiling: Some(8.0),
            pause_s: pause,
            bytes: Some(5120),
            saved_bytes: saved,
            cache,
            ..AuditRecord::default()
        };
        let (line, chain) = chain_line(&prev, &rec.to_json());
        prev = chain;
        w.write_all(line.as_bytes())?;
        w.write_all(b"\n")?;
        written += line.len() as u64 + 1;
        i += 1;
    }
    w.flush()?;
    eprintln!("{out}: {i} lines, {written} bytes, {hosts} hosts");
    Ok(())
}
