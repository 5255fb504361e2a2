//! The HTML conduct report: one self-contained page, inline CSS and SVG,
//! readable without JavaScript.

use std::io::{self, Write};

use super::stats::{HostStats, Report};
use super::time::format_ts;

const W: f64 = 640.0;
const H: f64 = 140.0;
const PAD_L: f64 = 46.0;
const PAD_B: f64 = 18.0;
const PAD_T: f64 = 12.0;

fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

fn opt(v: Option<f64>, unit: &str, digits: usize) -> String {
    v.map_or("–".into(), |v| format!("{v:.digits$}{unit}"))
}

fn figures_row(out: &mut impl Write, name: &str, h: &HostStats, anchor: bool) -> io::Result<()> {
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
        h.slowed,
        h.slowed + h.not_slowed,
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
    throttle_marks(out, &s, h)?;
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

/// A marker above each bucket with 429s, their number in its tooltip.
fn throttle_marks(out: &mut impl Write, s: &Scale, h: &HostStats) -> io::Result<()> {
    for (i, b) in h.buckets.iter().enumerate() {
        if b.throttles > 0 {
            writeln!(
                out,
                "<path class=t429 d=\"M{:.1} {PAD_T} l-4 -8 h8 z\" fill=\"#c0392b\"><title>{} × 429</title></path>",
                s.mid(i),
                b.throttles
            )?;
        }
    }
    Ok(())
}

/// The times at both ends of the x axis, the top and 0 of the y axis.
fn axis_labels(out: &mut impl Write, s: &Scale, h: &HostStats) -> io::Result<()> {
    let end = h.bucket_start + h.buckets.len() as f64 * h.bucket_width;
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

/// Writes the whole page: period, audit chain, a figures table, then a
/// chart and the 429 episodes of each host, up to `max_charts` hosts.
pub fn write(r: &Report, max_charts: usize, out: &mut impl Write) -> io::Result<()> {
    page_head(out)?;
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
    charts(out, &sorted, max_charts)?;
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
    writeln!(out, "<h2>Figures</h2><table id=figures><tr><th>host</th><th>requests</th><th>sent</th><th>refused by robots</th><th>429s</th><th>slowed after 429</th><th>repeated pattern</th><th>breaker openings</th><th>mean to next 429</th><th>shortest to next 429</th><th>revalidated</th><th>bytes saved</th></tr>")?;
    figures_row(out, "all hosts", &r.overall(), false)?;
    for (name, h) in sorted {
        figures_row(out, name, h, true)?;
    }
    writeln!(out, "</table>")?;
    writeln!(
        out,
        "<p><i>sent</i>: requests that reached the origin. <i>slowed after 429</i>: 429s after which real sends were slower than the pace that drew them (of those where both paces are known). <i>repeated pattern</i>: 429s drawn again at about (within 25%) the pace that drew the previous one.</p>"
    )
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
        b.1.throttles
            .cmp(&a.1.throttles)
            .then(b.1.requests.cmp(&a.1.requests))
            .then_with(|| a.0.cmp(b.0))
    });
    charted.truncate(max_charts);
    writeln!(
        out,
        "<h2>Rate over time</h2><p class=legend><span style=\"color:#9ab8d8\">■ requests sent per second</span><span style=\"color:#1f5fa8\">— budget rate</span><span style=\"color:#c0392b\">▼ 429</span><span style=\"color:#e0a040\">■ paused</span></p>"
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
            "<section class=host id=\"h-{}\"><h3>{}</h3>",
            esc(name),
            esc(name)
        )?;
        chart(out, name, h)?;
        episodes(out, h)?;
        writeln!(out, "</section>")?;
    }
    Ok(())
}

/// What happened around each 429 of the host (none: no table).
fn episodes(out: &mut impl Write, h: &HostStats) -> io::Result<()> {
    if h.episodes.is_empty() {
        return Ok(());
    }
    writeln!(out, "<table class=episodes><tr><th>429 at</th><th>status</th><th>pace before</th><th>pace after</th><th>pause</th><th>next 429 after</th><th></th></tr>")?;
    for e in &h.episodes {
        writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            format_ts(e.at),
            e.status,
            opt(e.pace_before, "/s", 2),
            opt(e.pace_after, "/s", 2),
            opt(e.pause_s, " s", 1),
            opt(e.next_after, " s", 1),
            match (e.repeated, e.slowed()) {
                (true, _) => "<span class=flag>repeated pattern</span>",
                (false, Some(true)) => "slowed down",
                (false, Some(false)) => "did not slow down",
                (false, None) => "",
            }
        )?;
    }
    writeln!(out, "</table>")
}
