//! The HTML conduct report: one self-contained page, inline CSS and SVG,
//! readable without JavaScript.

use std::io::{self, Write};

use std::collections::HashMap;

use super::stats::{
    crawler_text, Cited, Episode, HostStats, LineRef, Overall, Report, Window, WINDOW_S,
};
use super::time::format_ts;

const W: f64 = 640.0;
const H: f64 = 140.0;
const PAD_L: f64 = 46.0;
const PAD_B: f64 = 18.0;
const PAD_T: f64 = 12.0;
/// Width (and height) of a 429 marker.
const MARK_W: f64 = 8.0;

fn esc(s: &str) -> String {
    mannerly_policy::identity::html_escape(s)
}

fn opt(v: Option<f64>, unit: &str, digits: usize) -> String {
    v.map_or("–".into(), |v| format!("{v:.digits$}{unit}"))
}

fn figures_row(out: &mut impl Write, name: &str, h: &Overall, anchor: bool) -> io::Result<()> {
    let name = if anchor {
        format!("<a href=\"#h-{0}\">{0}</a>", esc(name))
    } else {
        format!("<b>{}</b>", esc(name))
    };
    writeln!(
        out,
        "<tr><td>{name}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}/{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        h.requests,
        h.sent,
        h.robots_refused,
        h.throttles,
        h.stayed_below,
        h.stayed_below + h.not_below,
        if h.repeated > 0 {
            format!("<span class=flag>{}</span>", h.repeated)
        } else {
            "0".into()
        },
        h.breaker_openings,
        opt(h.mean_next_gap(), " s", 1),
        opt(h.next_gap_min, " s", 1),
        opt(h.revalidation_share().map(|s| s * 100.0), " %", 1),
        h.saved_bytes,
    )
}

/// Where a host's chart puts its buckets and values: bucket `i` spans
/// `bw` from `x(i)`, and the y axis runs from 0 to `ymax` requests/s.
struct Scale {
    bw: f64,
    ymax: f64,
    bucket_width: f64,
}

impl Scale {
    fn new(h: &HostStats) -> Scale {
        let n = h.buckets.len().max(1);
        let mut s = Scale {
            bw: (W - PAD_L) / n as f64,
            ymax: 0.0,
            bucket_width: h.bucket_width,
        };
        // Headroom above the highest bar or rate; the floor keeps the axis
        // of a host with no sends and no rate from being 0 (`y` divides by it).
        s.ymax = h
            .buckets
            .iter()
            .map(|b| s.pace(b.sends).max(f64::from(b.rate.unwrap_or(0.0))))
            .fold(0.0f64, f64::max)
            .max(0.1)
            * 1.1;
        s
    }

    /// Sends in a bucket as requests/s.
    fn pace(&self, sends: u32) -> f64 {
        f64::from(sends) / self.bucket_width
    }

    fn y(&self, v: f64) -> f64 {
        PAD_T + (H - PAD_T - PAD_B) * (1.0 - v / self.ymax)
    }

    /// The left edge of bucket `i`.
    fn x(&self, i: usize) -> f64 {
        PAD_L + i as f64 * self.bw
    }

    /// The middle of bucket `i`.
    fn mid(&self, i: usize) -> f64 {
        PAD_L + (i as f64 + 0.5) * self.bw
    }
}

/// One host's rate over time as SVG: sends as bars on paused spans, the
/// budget's rate as a line, a marker at each 429.
fn chart(out: &mut impl Write, name: &str, h: &HostStats) -> io::Result<()> {
    let s = Scale::new(h);
    writeln!(
        out,
        "<svg class=chart data-host=\"{}\" viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" role=img aria-label=\"rate over time for {}\">",
        esc(name),
        esc(name)
    )?;
    writeln!(
        out,
        "<rect x=\"{PAD_L}\" y=\"{PAD_T}\" width=\"{}\" height=\"{}\" fill=\"#fafafa\" stroke=\"#ddd\"/>",
        W - PAD_L,
        H - PAD_T - PAD_B
    )?;
    bars(out, &s, h)?;
    rate_line(out, &s, h)?;
    throttle_marks(out, h)?;
    axis_labels(out, &s, h)?;
    writeln!(out, "</svg>")
}

/// Paused spans behind, sends per second in front.
fn bars(out: &mut impl Write, s: &Scale, h: &HostStats) -> io::Result<()> {
    let bw = s.bw;
    for (i, b) in h.buckets.iter().enumerate() {
        let x = s.x(i);
        if b.paused {
            writeln!(
                out,
                "<rect class=paused x=\"{x:.1}\" y=\"{PAD_T}\" width=\"{bw:.1}\" height=\"{:.1}\" fill=\"#ffe3b3\"/>",
                H - PAD_T - PAD_B
            )?;
        }
        if b.sends > 0 {
            let top = s.y(s.pace(b.sends));
            writeln!(
                out,
                "<rect x=\"{x:.1}\" y=\"{top:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#9ab8d8\"/>",
                (bw - 0.5).max(0.5),
                (H - PAD_B - top).max(0.0)
            )?;
        }
    }
    Ok(())
}

/// The budget's rate, through the buckets that logged one.
fn rate_line(out: &mut impl Write, s: &Scale, h: &HostStats) -> io::Result<()> {
    let mut pts = String::new();
    for (i, b) in h.buckets.iter().enumerate() {
        if let Some(r) = b.rate {
            pts.push_str(&format!("{:.1},{:.1} ", s.mid(i), s.y(f64::from(r))));
        }
    }
    if pts.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "<polyline points=\"{pts}\" fill=\"none\" stroke=\"#1f5fa8\" stroke-width=\"1.5\"/>"
    )
}

/// A marker at the send time of each 429; markers closer than their
/// width are stacked in rows, so none hides another.
fn throttle_marks(out: &mut impl Write, h: &HostStats) -> io::Result<()> {
    let (start, end) = (h.bucket_start, h.bucket_end().max(h.bucket_start + 1.0));
    let mut rows: Vec<f64> = Vec::new();
    for &t in &h.feedback.marks {
        let x = PAD_L + (t - start) / (end - start) * (W - PAD_L);
        let row = match rows.iter().position(|&last| x - last >= MARK_W) {
            Some(r) => r,
            None => {
                rows.push(f64::NEG_INFINITY);
                rows.len() - 1
            }
        };
        rows[row] = x;
        writeln!(
            out,
            "<path class=t429 d=\"M{x:.1} {:.1} l-{half} -{MARK_W} h{MARK_W} z\" fill=\"#c0392b\"><title>429 sent at {}</title></path>",
            PAD_T + row as f64 * (MARK_W + 1.0),
            format_ts(t),
            half = MARK_W / 2.0,
        )?;
    }
    Ok(())
}

/// The times at both ends of the x axis, the top and 0 of the y axis.
fn axis_labels(out: &mut impl Write, s: &Scale, h: &HostStats) -> io::Result<()> {
    let end = h.bucket_end();
    writeln!(
        out,
        "<text x=\"{PAD_L}\" y=\"{}\" font-size=\"10\">{}</text><text x=\"{W}\" y=\"{}\" font-size=\"10\" text-anchor=\"end\">{}</text>",
        H - 4.0,
        format_ts(h.bucket_start),
        H - 4.0,
        format_ts(end)
    )?;
    writeln!(
        out,
        "<text x=\"{}\" y=\"{}\" font-size=\"10\" text-anchor=\"end\">{:.2}/s</text><text x=\"{}\" y=\"{}\" font-size=\"10\" text-anchor=\"end\">0</text>",
        PAD_L - 3.0,
        PAD_T + 8.0,
        s.ymax,
        PAD_L - 3.0,
        H - PAD_B
    )
}

/// Writes the whole page: period, audit chain, a figures table, then for
/// each host (up to `max_charts`) its chart, its robots.txt consistency and
/// its response to feedback, and last the audit lines the figures cite
/// (`cited`, by file index and line number), each figure linking to them.
pub fn write(
    r: &Report,
    max_charts: usize,
    cited: &HashMap<(u16, u64), String>,
    out: &mut impl Write,
) -> io::Result<()> {
    page_head(out)?;
    if let Some(h) = &r.only {
        writeln!(
            out,
            "<p id=site>Conduct record for the site <b>{}</b>.</p>",
            esc(h)
        )?;
    }
    if let (Some(f), Some(l)) = (r.first, r.last) {
        writeln!(
            out,
            "<p>Period: {} to {} UTC.</p>",
            format_ts(f),
            format_ts(l)
        )?;
    }
    chain(out, r)?;
    let sorted = r.sorted();
    figures(out, r, &sorted)?;
    distress(out, &sorted)?;
    charts(out, &sorted, max_charts)?;
    appendix(out, r, cited)?;
    writeln!(out, "</body></html>")
}

fn page_head(out: &mut impl Write) -> io::Result<()> {
    writeln!(
        out,
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>mannerly conduct report</title><style>\n\
body{{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222}}\n\
table{{border-collapse:collapse;margin:8px 0}}td,th{{border-bottom:1px solid #ddd;padding:3px 8px;text-align:right}}\n\
td:first-child,th:first-child{{text-align:left}}th{{background:#f3f3f3}}\n\
.flag{{color:#fff;background:#c0392b;padding:0 5px;border-radius:3px}}.ok{{color:#1e7b34}}.bad{{color:#c0392b}}\n\
section.host{{margin:18px 0;padding-top:6px;border-top:1px solid #eee}}.legend span{{margin-right:14px}}\n\
</style></head><body>"
    )?;
    writeln!(out, "<h1>mannerly conduct report</h1>")
}

/// The chain check of each file, marked good or bad.
fn chain(out: &mut impl Write, r: &Report) -> io::Result<()> {
    writeln!(out, "<h2>Audit chain</h2><ul id=chain>")?;
    for (c, ok) in r.chain_text().iter().zip(
        r.files
            .iter()
            .map(|(_, res)| matches!(res, super::stats::ChainResult::Intact { .. })),
    ) {
        writeln!(
            out,
            "<li class={}>{}</li>",
            if ok { "ok" } else { "bad" },
            esc(c)
        )?;
    }
    writeln!(out, "</ul>")
}

/// One row for all hosts together, then one per host, linked to its chart.
fn figures(out: &mut impl Write, r: &Report, sorted: &[(&String, &HostStats)]) -> io::Result<()> {
    writeln!(out, "<h2>Figures</h2><table id=figures><tr><th>host</th><th>requests</th><th>sent</th><th>refused by robots</th><th>429s</th><th>pace stayed below after 429</th><th>repeated pattern</th><th>breaker openings</th><th>mean to next 429</th><th>shortest to next 429</th><th>revalidated</th><th>bytes saved</th></tr>")?;
    if r.only.is_none() {
        figures_row(out, "all hosts", &r.overall(), false)?;
    }
    for (name, h) in sorted {
        figures_row(out, name, &Overall::of(h), true)?;
    }
    writeln!(out, "</table>")?;
    writeln!(
        out,
        "<p><i>sent</i>: requests the origin received (robots.txt and every attempt included), timed when they were sent. <i>pace stayed below</i>: 429s after which the pace of the next {WINDOW} s stayed below the pace of the {WINDOW} s before (of those where both are known). <i>repeated pattern</i>: 429s drawn at about (within 25%) the pace that drew the previous one. Definitions: docs/audit.md, “The conduct report”.</p>",
        WINDOW = WINDOW_S
    )
}

/// What sites showed without a 429, for the hosts that showed any.
fn distress(out: &mut impl Write, sorted: &[(&String, &HostStats)]) -> io::Result<()> {
    let shown: Vec<_> = sorted
        .iter()
        .filter(|(_, h)| h.distress.shown() > 0 || h.collapsed > 0)
        .collect();
    if shown.is_empty() {
        return Ok(());
    }
    writeln!(out, "<h2>Distress</h2><table id=distress><tr><th>host</th><th>timeouts and resets</th><th>5xx without Retry-After</th><th>slow answers</th><th>answered at once</th><th>collapsed</th></tr>")?;
    for (name, h) in shown {
        let d = &h.distress;
        writeln!(
            out,
            "<tr><td><a href=\"#h-{0}\">{0}</a></td><td>{1}</td><td>{2}</td><td>{3}</td><td>{4}</td><td>{5}</td></tr>",
            esc(name),
            d.timeouts,
            d.server_errors,
            d.slow,
            d.answered_at_once,
            h.collapsed
        )?;
    }
    writeln!(out, "</table><p>What sites showed without asking to slow down (cbcp-01 §3), and the requests answered at once while a host was paused for it; <i>collapsed</i>: requests answered with an identical request's answer. Definitions: docs/budgets.md, “Distress”.</p>")
}

/// A section per charted host, for at most `max_charts` hosts (the page
/// stays small on a broad crawl): hosts with 429s first, then the busiest.
fn charts(
    out: &mut impl Write,
    sorted: &[(&String, &HostStats)],
    max_charts: usize,
) -> io::Result<()> {
    let mut charted = sorted.to_vec();
    charted.sort_by(|a, b| {
        b.1.feedback
            .throttles
            .cmp(&a.1.feedback.throttles)
            .then(b.1.requests.cmp(&a.1.requests))
            .then_with(|| a.0.cmp(b.0))
    });
    charted.truncate(max_charts);
    writeln!(
        out,
        "<h2>Per site</h2><p class=legend><span style=\"color:#9ab8d8\">■ requests sent per second</span><span style=\"color:#1f5fa8\">— budget rate</span><span style=\"color:#c0392b\">▼ 429 (at its send time)</span><span style=\"color:#e0a040\">■ paused</span></p>"
    )?;
    if charted.len() < sorted.len() {
        writeln!(
            out,
            "<p>Charts for {} of {} hosts (hosts with 429s first, then the busiest; <code>--max-charts</code>).</p>",
            charted.len(),
            sorted.len()
        )?;
    }
    for (name, h) in charted {
        writeln!(
            out,
            "<section class=host id=\"h-{}\"><h3>{}</h3><p class=crawler>Crawler: {}</p>",
            esc(name),
            esc(name),
            esc(&crawler_text(h))
        )?;
        chart(out, name, h)?;
        robots(out, h)?;
        feedback(out, h)?;
        writeln!(out, "</section>")?;
    }
    Ok(())
}

/// Links to the lines behind a figure.
fn links(lines: &[LineRef]) -> String {
    let mut s = String::new();
    for l in lines {
        s.push_str(&format!(
            " <a class=line href=\"#L{}-{}\">{}</a>",
            l.file,
            l.line,
            esc(if l.id.is_empty() { "line" } else { &l.id })
        ));
    }
    s
}

fn cited(c: &Cited) -> String {
    let more = c.count.saturating_sub(c.lines.len() as u64);
    let more = if more > 0 {
        format!(" (and {more} more)")
    } else {
        String::new()
    };
    format!("{}{}{more}", c.count, links(&c.lines))
}

/// robots.txt consistency: copies no older than a day, disallowed paths
/// fetched, refusals by rule.
fn robots(out: &mut impl Write, h: &HostStats) -> io::Result<()> {
    let r = &h.robots;
    writeln!(out, "<h4>robots.txt consistency</h4><table class=robots>")?;
    let rows = [
        ("requests checked against robots.txt", r.checked.to_string()),
        (
            "of those, against a copy at most 24 h old",
            r.fresh.to_string(),
        ),
        ("against an older copy", cited(&r.stale)),
        (
            "against a copy fetched before this log",
            cited(&r.age_unknown),
        ),
        ("disallowed paths fetched", cited(&r.disallowed_fetched)),
        ("refused: robots.txt unavailable", cited(&r.unavailable)),
        ("robots.txt fetches", cited(&r.fetches)),
        ("fetches with no usable copy", r.failed_fetches.to_string()),
    ];
    for (k, v) in rows {
        writeln!(out, "<tr><td>{k}</td><td>{v}</td></tr>")?;
    }
    for b in &r.by_rule {
        writeln!(
            out,
            "<tr class=rule><td>refused ({}) by {}</td><td>{}</td></tr>",
            esc(&b.outcome),
            esc(&b.rule),
            cited(&b.refused)
        )?;
    }
    for d in &r.directives {
        writeln!(
            out,
            "<tr class=rule><td>pages marked {} (X-Robots-Tag, &lt;meta&gt;)</td><td>{}</td></tr>",
            esc(&d.directive),
            cited(&d.pages)
        )?;
    }
    if r.directives_ignored.count > 0 {
        let c = cited(&r.directives_ignored);
        writeln!(
            out,
            "<tr><td>page directives ignored (unreadable)</td><td>{c}</td></tr>"
        )?;
    }
    writeln!(out, "</table>")
}

fn window(w: &Window) -> String {
    match w.pace {
        Some(p) => format!(
            "{p:.2}/s <small>({} in {:.1} s)</small>{}",
            w.sends,
            w.span_s,
            links(&w.lines)
        ),
        None => "–".into(),
    }
}

fn seconds(v: Option<f64>, line: &Option<LineRef>) -> String {
    match v {
        Some(v) => format!("{v:.1} s{}", links(line.as_slice())),
        None => "–".into(),
    }
}

/// Response to feedback: each 429 with the pace around it, then breaker
/// openings and the revalidation share.
fn feedback(out: &mut impl Write, h: &HostStats) -> io::Result<()> {
    let f = &h.feedback;
    writeln!(out, "<h4>Response to feedback</h4><table class=feedback>")?;
    let share = h
        .revalidation_share()
        .map_or(String::new(), |s| format!(", {:.1} %", s * 100.0));
    writeln!(
        out,
        "<tr><td>breaker openings</td><td>{}</td></tr><tr><td>pages revalidated (304 to our validators)</td><td>{} of {}{share}</td></tr></table>",
        cited(&h.breaker_openings),
        cited(&h.revalidated),
        h.fetched + h.revalidated.count,
    )?;
    if f.episodes.is_empty() {
        return Ok(());
    }
    writeln!(out, "<table class=episodes><tr><th>429 sent at</th><th>status</th><th>pace before</th><th>pace after</th><th>pause</th><th>next request after</th><th>next 429 after</th><th></th></tr>")?;
    for e in &f.episodes {
        episode(out, e)?;
    }
    writeln!(out, "</table>")
}

fn episode(out: &mut impl Write, e: &Episode) -> io::Result<()> {
    writeln!(
        out,
        "<tr><td>{}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        format_ts(e.at),
        links(std::slice::from_ref(&e.line)),
        e.status,
        window(&e.before),
        window(&e.after),
        opt(e.pause_s, " s", 1),
        seconds(e.next_request_s, &e.next_request),
        seconds(e.next_429_s, &e.next_429),
        match (e.repeated, e.stayed_below) {
            (true, _) => "<span class=flag>repeated pattern</span>",
            (false, Some(true)) => "pace stayed below",
            (false, Some(false)) => "<span class=bad>pace did not stay below</span>",
            (false, None) => "",
        }
    )
}

/// The audit lines the figures cite, as written.
fn appendix(
    out: &mut impl Write,
    r: &Report,
    cited: &HashMap<(u16, u64), String>,
) -> io::Result<()> {
    if cited.is_empty() {
        return Ok(());
    }
    let mut keys: Vec<_> = cited.keys().copied().collect();
    keys.sort_unstable();
    writeln!(out, "<h2>Audit lines cited</h2><div id=lines>")?;
    for (file, line) in keys {
        let name = r.files.get(usize::from(file)).map_or("", |f| f.0.as_str());
        writeln!(
            out,
            "<pre class=line id=\"L{file}-{line}\"><b>{}:{line}</b> {}</pre>",
            esc(name),
            esc(&cited[&(file, line)])
        )?;
    }
    writeln!(out, "</div>")
}
