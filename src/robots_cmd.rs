//! `mannerly robots check`: one decision against a robots.txt, for people
//! and for scripts (exit 0 allowed, 1 disallowed, 2 error).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use mannerly_policy::robots::Robots;

#[derive(Args)]
pub struct CheckArgs {
    /// Read robots.txt from this file.
    #[arg(long, conflicts_with = "fetch")]
    robots_file: Option<PathBuf>,
    /// Fetch robots.txt for the URL's origin (URL must then be absolute).
    #[arg(long)]
    fetch: bool,
    /// The crawler's product token; "" means none (only `*` groups apply).
    #[arg(long)]
    agent: String,
    /// A path (`/a?b`) or a full URL.
    url: String,
}

pub fn check(config: Option<PathBuf>, args: CheckArgs) -> ExitCode {
    let body = match (&args.robots_file, args.fetch) {
        (Some(path), _) => match std::fs::read(path) {
            Ok(b) => b,
            Err(e) => return fail(&format!("{}: {e}", path.display())),
        },
        (None, true) => match crate::robots_fetch::fetch(config, &args.url) {
            Ok(Some(b)) => b,
            Ok(None) => {
                println!("allowed: robots.txt is absent (4xx), no rules apply");
                return ExitCode::SUCCESS;
            }
            Err(e) => return fail(&format!("{e:#}")),
        },
        (None, false) => return fail("give --robots-file FILE or --fetch"),
    };
    let robots = Robots::parse(&body);
    let verdict = robots.check(&args.agent, &args.url);
    println!("{verdict}");
    if let Some(delay) = robots.crawl_delay(&args.agent) {
        println!("crawl-delay: {delay} s");
    }
    if verdict.allowed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn fail(msg: &str) -> ExitCode {
    eprintln!("mannerly robots check: {msg}");
    ExitCode::from(2)
}
