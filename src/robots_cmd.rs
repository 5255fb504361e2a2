//! `mannerly robots check`: one decision against a robots.txt, for people
//! and for scripts (exit 0 allowed, 1 disallowed or refused, 2 error).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use mannerly_policy::prefs::{DeclaredUse, Purpose};
use mannerly_policy::robots::{split_url, Robots};

#[derive(Args)]
pub struct CheckArgs {
    /// Read robots.txt from this file.
    #[arg(long, conflicts_with = "fetch")]
    robots_file: Option<PathBuf>,
    /// Fetch robots.txt for the URL's origin (URL must then be http(s)://).
    #[arg(long)]
    fetch: bool,
    /// The crawler's product token; "" means none (only `*` groups apply).
    #[arg(long)]
    agent: String,
    /// A declared purpose, checked against the site's Content-Signal and
    /// Content-Usage lines: search, ai-input, ai-train (or the AI
    /// Preferences names search, ai-use, train-ai). Repeat for several.
    #[arg(long = "purpose", value_name = "P", value_parser = parse_purpose)]
    purposes: Vec<Purpose>,
    /// How much of a page the crawl reproduces: immediate, reference or full (checked
    /// against the site's Content-Signal `use`).
    #[arg(long = "use", value_name = "U", value_parser = parse_use, default_value = "")]
    usage: DeclaredUse,
    /// A path (`/a?b`) or a full URL of any scheme (`https://…`, `ftp://…`).
    url: String,
}

fn parse_purpose(s: &str) -> Result<Purpose, String> {
    Purpose::from_signal_key(s)
        .or_else(|| Purpose::from_aipref_key(s))
        .ok_or_else(|| format!("unknown purpose {s:?}: expected search, ai-input or ai-train"))
}

fn parse_use(s: &str) -> Result<DeclaredUse, String> {
    DeclaredUse::parse(s)
        .ok_or_else(|| format!("unknown use {s:?}: expected immediate, reference or full"))
}

pub fn check(config: Option<PathBuf>, args: CheckArgs) -> ExitCode {
    let url = match split_url(&args.url) {
        Ok(url) => url,
        Err(e) => return fail(&e.to_string()),
    };
    let body = match (&args.robots_file, args.fetch) {
        (Some(path), _) => match std::fs::read(path) {
            Ok(b) => b,
            Err(e) => return fail(&format!("{}: {e}", path.display())),
        },
        (None, true) => {
            let web = url
                .scheme
                .is_some_and(|s| s.eq_ignore_ascii_case("http") || s.eq_ignore_ascii_case("https"));
            if !web {
                return fail("--fetch needs an http:// or https:// URL");
            }
            match crate::robots_fetch::fetch(config, &args.url) {
                Ok(Some(b)) => b,
                Ok(None) => {
                    println!("allowed: robots.txt is absent (4xx), no rules apply");
                    return ExitCode::SUCCESS;
                }
                Err(e) => return fail(&format!("{e:#}")),
            }
        }
        (None, false) => return fail("give --robots-file FILE or --fetch"),
    };
    let robots = Robots::parse(&body);
    let path = url.path_and_query.as_ref();
    let verdict = robots.check(&args.agent, path);
    println!("{verdict}");
    if let Some(delay) = robots.crawl_delay(&args.agent) {
        println!("crawl-delay: {delay} s");
    }
    if let Some((interval, source)) = robots.request_interval([args.agent.as_str()]) {
        println!("request-rate: one request per {interval} s ({source})");
    }
    for window in robots.visit_times([args.agent.as_str()]).iter().flatten() {
        println!("visit-time: {} ({})", window.window, window.source);
    }
    for why in robots.ignored() {
        println!("ignored: {why}");
    }

    let prefs = robots.preferences(&args.agent, path);
    let record = prefs.record();
    let asked = !args.purposes.is_empty() || args.usage != DeclaredUse::Undeclared;
    let refusal = prefs.refusal(&args.purposes, args.usage);
    if asked || !record.is_empty() {
        println!("preferences: {record}");
        for source in &record.sources {
            println!("  from {source}");
        }
    }
    match &refusal {
        Some(refusal) => println!("refused: {refusal}"),
        None if asked => println!("preferences: nothing declared is refused"),
        None => {}
    }
    if verdict.allowed && refusal.is_none() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn fail(msg: &str) -> ExitCode {
    eprintln!("mannerly robots check: {msg}");
    ExitCode::from(2)
}
