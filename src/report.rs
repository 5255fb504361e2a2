//! `mannerly report`: a conduct report from audit logs, streamed line by
//! line with bounded state per host, as a terminal table, a self-contained
//! HTML page with one SVG chart per host, and JSON; for all hosts or for
//! one site alone (`--host`). The figures are defined in docs/audit.md.

mod html;
mod json;
mod payments;
mod stats;
mod time;

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;

use stats::Report;

#[derive(Args)]
pub struct ReportArgs {
    /// Audit log files, oldest first (a log continued across files is
    /// checked as one chain).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Also write a self-contained HTML page (SVG charts, no JavaScript).
    #[arg(long)]
    html: Option<PathBuf>,
    /// Only decisions at or after this time: RFC 3339 (`2025-01-31T12:00:00Z`)
    /// or an age (`2h`, `7d`). The chain is still checked over every line.
    #[arg(long)]
    since: Option<String>,
    /// Charts in the HTML page, hosts with 429s first, then the busiest.
    #[arg(long, default_value_t = 500)]
    max_charts: usize,
    /// Also write the figures as JSON, every one with the audit lines it
    /// comes from.
    #[arg(long)]
    json: Option<PathBuf>,
    /// One site's record alone (its host name, or with `--by group` its
    /// group's key): no other host is read or named.
    #[arg(long)]
    host: Option<String>,
    /// What a row is: a `host`, or the `group` whose budget the request
    /// took its turn in (the audit line's `group`: a site, an address or
    /// a named group), so that a 429 and the pace after it are read over
    /// every name a site's limiter counts together.
    #[arg(long, value_enum, default_value_t = stats::By::Host)]
    by: stats::By,
}

pub fn run(args: ReportArgs) -> Result<ExitCode> {
    let since = match &args.since {
        None => None,
        Some(s) => Some(time::parse_since(s).with_context(|| format!("--since {s}"))?),
    };
    let total: u64 = args
        .files
        .iter()
        .map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0))
        .sum();
    let bar = progress(total);
    let mut report = Report::new(since, args.host.clone(), args.by);
    for path in &args.files {
        let f = File::open(path).with_context(|| format!("{}", path.display()))?;
        let mut r = BufReader::with_capacity(1 << 20, f);
        let mut line = String::new();
        let mut pending = 0u64;
        report.start_file(path.display().to_string());
        loop {
            line.clear();
            let n = r
                .read_line(&mut line)
                .with_context(|| format!("reading {}", path.display()))?;
            if n == 0 {
                break;
            }
            report.line(line.trim_end_matches(['\n', '\r']));
            pending += n as u64;
            if pending >= 1 << 20 {
                bar.inc(pending);
                pending = 0;
            }
        }
        bar.inc(pending);
        report.end_file();
    }
    bar.finish_and_clear();
    report.finish();
    if let Some(h) = &args.host {
        if report.counted == 0 {
            bail!("no audit lines for the host {h} in the given files");
        }
    }
    let out = std::io::stdout();
    let mut out = out.lock();
    report.write_text(&mut out)?;
    if let Some(path) = &args.html {
        let mut f = std::io::BufWriter::new(
            File::create(path).with_context(|| format!("{}", path.display()))?,
        );
        let cited = cited_lines(&args.files, &report.cited())?;
        html::write(&report, args.max_charts, &cited, &mut f)
            .and_then(|_| f.flush())
            .with_context(|| format!("writing {}", path.display()))?;
        writeln!(out, "HTML report: {}", path.display())?;
    }
    if let Some(path) = &args.json {
        let mut f = std::io::BufWriter::new(
            File::create(path).with_context(|| format!("{}", path.display()))?,
        );
        serde_json::to_writer_pretty(&mut f, &json::report(&report))
            .map_err(std::io::Error::from)
            .and_then(|_| f.flush())
            .with_context(|| format!("writing {}", path.display()))?;
        writeln!(out, "JSON report: {}", path.display())?;
    }
    if report.lines == 0 && report.unreadable == 0 {
        bail!("no audit lines in the given files");
    }
    Ok(if report.chain_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The bar for reading `total` bytes, hidden when stderr is no terminal.
fn progress(total: u64) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let b = indicatif::ProgressBar::new(total);
    b.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} {bytes}/{total_bytes} {wide_bar} {bytes_per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    b
}

/// The text of the lines the report cites (file index, line number), read
/// in a second pass so that the first keeps no line it does not need.
fn cited_lines(
    files: &[PathBuf],
    wanted: &HashSet<(u16, u64)>,
) -> Result<HashMap<(u16, u64), String>> {
    let mut found = HashMap::new();
    for (i, path) in files.iter().enumerate() {
        let Ok(i) = u16::try_from(i) else { break };
        if !wanted.iter().any(|(f, _)| *f == i) {
            continue;
        }
        let f = File::open(path).with_context(|| format!("{}", path.display()))?;
        let mut n = 0u64;
        for line in BufReader::with_capacity(1 << 20, f).lines() {
            let line = line.with_context(|| format!("reading {}", path.display()))?;
            if line.trim().is_empty() {
                continue;
            }
            n += 1;
            if wanted.contains(&(i, n)) {
                found.insert((i, n), line);
            }
        }
    }
    Ok(found)
}
