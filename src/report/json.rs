//! The conduct report as JSON: the same figures as the table and the HTML
//! page, each with the audit lines it comes from (`file` indexes `files`,
//! `line` is 1-based, `id` the line's id).

use serde_json::{json, Value};

use super::stats::{ChainResult, HostStats, Overall, Report, EPISODES, MAX_AGE_S, WINDOW_S};
use super::time::format_ts;

pub fn report(r: &Report) -> Value {
    let files: Vec<Value> = r
        .files
        .iter()
        .map(|(name, c)| match c {
            ChainResult::Intact { lines } => json!({"name": name, "lines": lines, "chain": "intact"}),
            ChainResult::Broken { lines, line, why } => {
                json!({"name": name, "lines": lines, "chain": "broken", "broken_at": line, "why": why})
            }
        })
        .collect();
    let hosts: Vec<Value> = r.sorted().into_iter().map(|(n, h)| host(n, h)).collect();
    let mut out = json!({
        "period": {
            "from": r.first.map(format_ts),
            "to": r.last.map(format_ts),
        },
        "files": files,
        "definitions": "docs/audit.md#the-conduct-report",
        "window_s": WINDOW_S,
        "robots_max_age_s": MAX_AGE_S,
        "hosts": hosts,
    });
    match &r.only {
        Some(h) => out["site"] = Value::from(h.as_str()),
        None => out["all_hosts"] = overall(&r.overall()),
    }
    out
}

fn overall(o: &Overall) -> Value {
    json!({
        "requests": o.requests,
        "sent": o.sent,
        "robots_refused": o.robots_refused,
        "throttles": o.throttles,
        "stayed_below": o.stayed_below,
        "not_below": o.not_below,
        "repeated": o.repeated,
        "breaker_openings": o.breaker_openings,
        "revalidation_share": o.revalidation_share(),
        "saved_bytes": o.saved_bytes,
    })
}

pub fn host(name: &str, h: &HostStats) -> Value {
    let f = &h.feedback;
    let listed = f.episodes.len() as u64;
    let mut out = json!({
        "host": name,
        "crawler": { "agents": h.agents, "keyids": h.keyids },
        "from": format_ts(h.first),
        "to": format_ts(h.last),
        "requests": h.requests,
        "sent": h.sent,
        "errors": h.errors,
        "operator_resets": h.resets,
        "robots": h.robots,
        "feedback": {
            "throttles": f.throttles,
            "status_429": h.status_429,
            "stayed_below": f.stayed_below,
            "not_below": f.not_below,
            "repeated": f.repeated,
            "mean_next_429_s": f.mean_next_gap(),
            "min_next_429_s": f.next_gap_min,
            "breaker_openings": h.breaker_openings,
            "paused_refusals": h.paused_refusals,
            "breaker_refusals": h.breaker_refusals,
            "distress": h.distress,
            "collapsed": h.collapsed,
            "revalidation": {
                "share": h.revalidation_share(),
                "fetched": h.fetched,
                "revalidated": h.revalidated,
                "saved_bytes": h.saved_bytes,
            },
            "episodes": f.episodes,
            "episodes_listed": listed,
            "episodes_limit": EPISODES,
        },
    });
    // With `--by group`, the row is a group: its hosts.
    if !h.members.is_empty() {
        out["members"] = json!(h.members);
        out["more_members"] = json!(h.more_members);
    }
    out
}
