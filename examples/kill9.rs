//! `kill -9` under load: are all completely answered requests in the audit
//! log? Starts an origin on loopback and `mannerly run`, drives it with many
//! keep-alive clients (each request a unique URL), kills the proxy with
//! SIGKILL at a random moment once load is flowing, then checks that every
//! request whose answer a client received completely has its line, and that
//! `mannerly audit verify --pubkey` finds the chain intact (the last lines
//! unsealed, at most one checkpoint interval).
//!
//!     cargo build --release --bin mannerly --example kill9
//!     target/release/examples/kill9 target/release/mannerly [RUNS] [CLIENTS]
//!
//! Defaults: 10 runs, 200 clients. Exit 1 if any run lost a line.
//! The e2e test `kill9_under_load_loses_no_answered_line` runs the same code.

use std::path::PathBuf;
use std::time::Duration;

use mannerly_test_support::kill9::{origin, run_once};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let mannerly = PathBuf::from(
        args.get(1)
            .ok_or("usage: kill9 PATH/TO/mannerly [RUNS] [CLIENTS]")?,
    );
    let runs: usize = args.get(2).map_or(Ok(10), |s| s.parse())?;
    let clients: usize = args.get(3).map_or(Ok(200), |s| s.parse())?;
    let origin = origin().await?;
    let mut lost_runs = 0;
    let mut lost = 0;
    for run in 1..=runs {
        let dir = tempfile::tempdir()?;
        // Spread the kill over the first 1.5 s of full load.
        let kill_after = Duration::from_millis((run as u64 * 337) % 1500);
        let r = run_once(&mannerly, dir.path(), origin, clients, 2000, kill_after).await?;
        let sealed = match r.verify_code {
            0 => "sealed",
            3 => "intact, tail unsealed",
            _ => "BROKEN",
        };
        println!(
            "run {run:2}: kill after {:4} ms: {:6} answered, {:6} lines, {} answered without a line, verify: {sealed}",
            kill_after.as_millis(),
            r.answered,
            r.lines,
            r.missing.len()
        );
        if !r.missing.is_empty() || !matches!(r.verify_code, 0 | 3) {
            lost_runs += 1;
            lost += r.missing.len();
            print!("{}", r.verify_out);
        }
    }
    println!("{runs} runs, {clients} clients: {lost_runs} runs lost lines or broke the chain ({lost} answered requests without a line)");
    if lost_runs > 0 {
        std::process::exit(1);
    }
    Ok(())
}
