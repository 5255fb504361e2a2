//! `mannerly hosts list|show|reset`: the admin listener's hosts API from a
//! terminal. Exit 0 done, 1 the host is not tracked, 2 error.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use serde_json::Value;

use crate::settings;

#[derive(Args)]
pub struct HostsArgs {
    /// Admin listener address (default: `admin.listen` of the configuration).
    #[arg(long, global = true)]
    admin: Option<String>,
    /// Bearer token (default: `admin.token` of the configuration).
    #[arg(
        long,
        global = true,
        env = "MANNERLY_ADMIN_TOKEN",
        hide_env_values = true
    )]
    token: Option<String>,
    /// Print the JSON the listener answered instead of a table.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: HostsCommand,
}

#[derive(Subcommand)]
enum HostsCommand {
    /// Tracked hosts, most recently active first.
    List {
        /// Page (50 hosts a page).
        #[arg(long, default_value_t = 1)]
        page: usize,
        /// Only hosts whose name contains this.
        #[arg(long)]
        filter: Option<String>,
        /// Only paused hosts.
        #[arg(long)]
        paused: bool,
    },
    /// One host: its group's budget, pause, robots status and last decisions.
    Show {
        /// Host name (no port), or a group's key (`example.com`,
        /// `group:NAME`).
        host: String,
    },
    /// Clear the learned pause, ceiling and breaker of a host's group, for
    /// every member (robots rules stay).
    Reset {
        /// Host name (no port), or a group's key.
        host: String,
    },
}

pub fn run(config: Option<PathBuf>, args: HostsArgs) -> Result<ExitCode> {
    let (addr, token) = target(config, &args)?;
    let (method, path) = match &args.command {
        HostsCommand::List {
            page,
            filter,
            paused,
        } => {
            let mut p = format!("/hosts?page={page}");
            if let Some(f) = filter {
                p.push_str(&format!("&q={}", encode(f)));
            }
            if *paused {
                p.push_str("&paused=1");
            }
            ("GET", p)
        }
        HostsCommand::Show { host } => ("GET", format!("/hosts/{}", encode(host))),
        HostsCommand::Reset { host } => ("POST", format!("/hosts/{}/reset", encode(host))),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let reply = rt
        .block_on(mannerly_proxy::admin_call(
            &addr,
            method,
            &path,
            token.as_deref(),
        ))
        .map_err(anyhow::Error::msg)?;
    let v: Value = serde_json::from_str(&reply.body)
        .with_context(|| format!("admin listener answered {}: {}", reply.status, reply.body))?;
    match reply.status {
        200 => {}
        404 => {
            eprintln!("mannerly: {}", v["error"].as_str().unwrap_or("not found"));
            return Ok(ExitCode::from(1));
        }
        s => bail!(
            "admin listener answered {s}: {}",
            v["error"].as_str().unwrap_or(&reply.body)
        ),
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    match args.command {
        HostsCommand::List { .. } => print_list(&v),
        HostsCommand::Show { .. } => print_show(&v),
        HostsCommand::Reset { .. } => print_reset(&v),
    }
    Ok(ExitCode::SUCCESS)
}

fn target(config: Option<PathBuf>, args: &HostsArgs) -> Result<(String, Option<String>)> {
    let cfg = settings::load(config.as_deref())?;
    let addr = match &args.admin {
        Some(a) => a.clone(),
        None => {
            let Some(a) = cfg.admin.addr()? else {
                bail!("admin.listen is empty (the admin listener is off); pass --admin ADDR");
            };
            // A listener on every interface is reached on loopback.
            if a.ip().is_unspecified() {
                format!("127.0.0.1:{}", a.port())
            } else {
                a.to_string()
            }
        }
    };
    let token = args
        .token
        .clone()
        .or_else(|| (!cfg.admin.token.is_empty()).then(|| cfg.admin.token.clone()));
    Ok((addr, token))
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn num(v: &Value, digits: usize) -> String {
    v.as_f64().map_or("-".into(), |f| format!("{f:.digits$}"))
}

fn print_list(v: &Value) {
    print!("{}", list_text(v));
}

/// The `hosts list` table. Every cell is a string before it is padded:
/// `serde_json::Value`'s `Display` ignores widths.
fn list_text(v: &Value) -> String {
    let row = |cells: [&str; 9]| {
        format!(
            "{:<32} {:>8} {:>8} {:>6} {:>6} {:>10} {:>6} {:>7} {:>9}\n",
            cells[0],
            cells[1],
            cells[2],
            cells[3],
            cells[4],
            cells[5],
            cells[6],
            cells[7],
            cells[8]
        )
    };
    let mut out = row([
        "HOST",
        "RATE/s",
        "CEILING",
        "FLIGHT",
        "QUEUE",
        "PAUSED",
        "429/h",
        "ROBOTS",
        "DECISIONS",
    ]);
    for h in v["hosts"].as_array().into_iter().flatten() {
        let paused = match h["paused_for_s"].as_f64() {
            Some(s) if h["breaker_open"] == true => format!("{s:.0}s brk"),
            Some(s) => format!("{s:.0}s"),
            None => "-".into(),
        };
        let robots = match &h["robots"] {
            Value::Null => "-".to_string(),
            r => r["status"]
                .as_u64()
                .map_or("none".into(), |s| s.to_string()),
        };
        out.push_str(&row([
            h["host"].as_str().unwrap_or("?"),
            &num(&h["rate"], 2),
            &num(&h["ceiling"], 2),
            &h["in_flight"].to_string(),
            &h["queued"].to_string(),
            &paused,
            &h["throttles_last_hour"].to_string(),
            &robots,
            &h["decisions"].to_string(),
        ]));
    }
    out.push_str(&format!(
        "page {} of {} ({} hosts matching, {} tracked; {} paused)\n",
        v["page"], v["pages"], v["total"], v["hosts_tracked"], v["totals"]["paused"]
    ));
    out
}

fn print_show(h: &Value) {
    let line = |k: &str, val: String| println!("{k:<22} {val}");
    line("host", h["host"].as_str().unwrap_or("?").into());
    if let Some(group) = h["group"]
        .as_str()
        .filter(|g| Some(*g) != h["host"].as_str())
    {
        line("group", group.into());
    }
    if let Some(members) = h["members"].as_array().filter(|m| m.len() > 1) {
        let names: Vec<&str> = members.iter().filter_map(Value::as_str).collect();
        line("group members", names.join(", "));
    }
    line(
        "rate",
        format!(
            "{} req/s (ceiling {}, max {})",
            num(&h["rate"], 3),
            num(&h["ceiling"], 3),
            num(&h["max_rate"], 3)
        ),
    );
    if let Some(s) = h["ceiling_relaxes_in_s"].as_f64() {
        line("ceiling relaxes in", format!("{s:.0} s"));
    }
    line(
        "concurrency",
        format!(
            "{} ({} in flight, {} queued)",
            h["concurrency"], h["in_flight"], h["queued"]
        ),
    );
    match h["paused_for_s"].as_f64() {
        Some(s) => line(
            "paused",
            format!(
                "{s:.1} s more, until {} — {}",
                h["paused_until"].as_str().unwrap_or("?"),
                h["pause_reason"].as_str().unwrap_or("")
            ),
        ),
        None => line("paused", "no".into()),
    }
    line(
        "breaker",
        if h["breaker_open"] == true {
            "open".into()
        } else {
            "closed".into()
        },
    );
    line(
        "429s in the last hour",
        h["throttles_last_hour"].to_string(),
    );
    line(
        "crawl-delay",
        h["crawl_delay_s"]
            .as_f64()
            .map_or("-".into(), |s| format!("{s} s")),
    );
    line(
        "robots.txt",
        match &h["robots"] {
            Value::Null => "not fetched by this process".into(),
            r => format!(
                "status {} ({}), fetched {} s ago",
                r["status"],
                if r["ok"] == true {
                    "usable"
                } else {
                    "unavailable"
                },
                num(&r["age_s"], 0)
            ),
        },
    );
    print_last_decisions(h);
}

/// The host's last decisions, one line each, oldest first as `/hosts` gives them.
fn print_last_decisions(h: &Value) {
    println!("last decisions:");
    for d in h["last_decisions"].as_array().into_iter().flatten() {
        println!(
            "  {} {:<18} {:>4} {} {}",
            d["ts"].as_str().unwrap_or(""),
            d["outcome"].as_str().unwrap_or(""),
            d["status"].as_u64().map_or("-".into(), |s| s.to_string()),
            d["method"].as_str().unwrap_or(""),
            d["url"].as_str().unwrap_or("")
        );
    }
}

fn print_reset(v: &Value) {
    let b = &v["before"];
    let paused = b["paused_for"]
        .as_f64()
        .map_or("not paused".into(), |s| format!("paused {s:.1} s"));
    let name = v["host"].as_str().unwrap_or("?");
    let group = match v["group"].as_str() {
        Some(g) if g != name => format!(" (group {g})"),
        _ => String::new(),
    };
    println!(
        "{name}{group}: reset (was {paused}, rate {} req/s, ceiling {} req/s); audit id {}",
        num(&b["rate"], 3),
        num(&b["ceiling"], 3),
        v["audit_id"].as_str().unwrap_or("?"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_column_of_hosts_list_lines_up_with_its_header() {
        let v = serde_json::json!({
            "hosts": [{
                "host": "example.org", "rate": 1.5, "ceiling": 2.0, "in_flight": 3,
                "queued": 12, "paused_for_s": 40.0, "breaker_open": false,
                "throttles_last_hour": 2, "robots": {"status": 200}, "decisions": 1234
            }],
            "page": 1, "pages": 1, "total": 1, "hosts_tracked": 1, "totals": {"paused": 1}
        });
        let text = list_text(&v);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0].len(), lines[1].len(), "{text}");
        // Right-aligned columns end where their header ends.
        for (header, value) in [
            ("FLIGHT", "3"),
            ("QUEUE", "12"),
            ("429/h", "2"),
            ("DECISIONS", "1234"),
        ] {
            let end = lines[0].find(header).unwrap() + header.len();
            assert_eq!(&lines[1][end - value.len()..end], value, "{header}: {text}");
        }
    }
}
