//! What a site operator reads about the crawler (cbcp-01 §5, §6; the
//! verified-bot programs ask for the same): a public page saying what it
//! is for, how to block it, whom to contact, where its keys and its IP
//! ranges are; and those ranges in the JAFAR format
//! (draft-illyes-webbotauth-jafar-00), linked from the page with
//! `rel="client-ranges"`.

use std::fmt::Write as _;
use std::net::IpAddr;

use sha2::{Digest, Sha256};

/// Where the admin listener serves the page.
pub const ABOUT_PATH: &str = "/bot";
/// Where it serves the ranges, linked from the page.
pub const RANGES_PATH: &str = "/bot/ranges.json";
/// The link relation of the ranges.
pub const RANGES_REL: &str = "client-ranges";

/// An egress IP range, CIDR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    addr: IpAddr,
    len: u8,
}

impl Prefix {
    /// `198.51.100.0/24` or `2001:db8::/32`; an address alone is its own
    /// /32 or /128. Host bits must be zero (a range, written as one).
    pub fn parse(s: &str) -> Result<Prefix, String> {
        let (ip, len) = s.trim().split_once('/').unwrap_or((s.trim(), ""));
        let addr: IpAddr = ip
            .parse()
            .map_err(|_| format!("{s:?} is not an IP address or CIDR range"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match len {
            "" => max,
            l => l
                .parse::<u8>()
                .ok()
                .filter(|l| *l <= max)
                .ok_or_else(|| format!("{s:?}: the prefix length must be 0..={max}"))?,
        };
        let bits = match addr {
            IpAddr::V4(a) => u128::from(u32::from(a)) << 96,
            IpAddr::V6(a) => u128::from(a),
        };
        let host = if len == 0 { bits } else { bits << len };
        if host != 0 {
            return Err(format!("{s:?}: bits are set after the /{len} prefix"));
        }
        Ok(Prefix { addr, len })
    }
}

impl std::fmt::Display for Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// The JAFAR file for `prefixes`, each tagged with `service` (the product
/// token), generated at `creation_time` (RFC 3339, UTC, `Z`). `synctoken`
/// changes with the prefixes only.
pub fn jafar_json(prefixes: &[Prefix], service: &str, creation_time: &str) -> String {
    let listed: Vec<serde_json::Value> = prefixes
        .iter()
        .map(|p| {
            let key = if p.addr.is_ipv4() {
                "ipv4Prefix"
            } else {
                "ipv6Prefix"
            };
            serde_json::json!({ key: p.to_string(), "service": service })
        })
        .collect();
    let mut digest = Sha256::new();
    for p in prefixes {
        digest.update(p.to_string().as_bytes());
        digest.update(b"\n");
    }
    let sync = crate::hex(&digest.finalize()[..8]);
    let doc = serde_json::json!({
        "formatVersion": "1.0",
        "synctoken": sync,
        "creationTime": creation_time,
        "notes": format!("Egress IP ranges of {service}."),
        "prefixes": listed,
    });
    serde_json::to_string_pretty(&doc).unwrap_or_default()
}

/// What the page says.
#[derive(Debug, Clone, Default)]
pub struct AboutCrawler<'a> {
    /// The whole User-Agent product (`ExampleBot/1.0 (+https://…)`).
    pub product: &'a str,
    /// Its product token, for robots.txt.
    pub token: &'a str,
    /// The contact URL.
    pub contact: &'a str,
    /// What the crawl is for, in the operator's words.
    pub purpose: &'a str,
    /// The declared purposes (`search`, `ai-train`, …).
    pub purposes: Vec<&'a str>,
    /// The key directory URL, when requests are signed.
    pub directory: Option<&'a str>,
    /// The egress ranges.
    pub ranges: &'a [Prefix],
}

/// Text made safe inside HTML elements and quoted attributes.
pub fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The page, HTML with no script and no outside resource.
pub fn about_html(a: &AboutCrawler<'_>) -> String {
    let (token, contact) = (html_escape(a.token), html_escape(a.contact));
    let mut h = String::new();
    let _ = write!(
        h,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>{token}: about this crawler</title>\
         <link rel=\"{RANGES_REL}\" href=\"{RANGES_PATH}\" type=\"application/json\">\
         <style>body{{font:16px/1.5 system-ui,sans-serif;max-width:46em;margin:2em auto;padding:0 1em}}\
         pre{{background:#f4f4f4;padding:.6em}}</style></head><body>\n\
         <h1 id=\"name\">{token}</h1>\n<p>Requests from this crawler carry the User-Agent \
         <code id=\"user-agent\">{}</code>.</p>\n",
        html_escape(a.product)
    );
    let purposes = match a.purposes.is_empty() {
        true => String::new(),
        false => format!(
            " Declared purposes: {}.",
            html_escape(&a.purposes.join(", "))
        ),
    };
    let _ = write!(
        h,
        "<h2>What it is for</h2>\n<p id=\"purpose\">{}{purposes}</p>\n\
         <p>It honours robots.txt (RFC 9309), paces itself per site, backs off on 429 and 503, \
         and asks again only for pages that changed.</p>\n",
        html_escape(a.purpose)
    );
    let _ = write!(
        h,
        "<h2>How to block it</h2>\n<p>Add this to your robots.txt:</p>\n\
         <pre id=\"robots\">User-agent: {token}\nDisallow: /</pre>\n"
    );
    let _ = write!(
        h,
        "<h2>Contact</h2>\n<p><a id=\"contact\" href=\"{contact}\">{contact}</a></p>\n"
    );
    if let Some(dir) = a.directory {
        let dir = html_escape(dir);
        let _ = write!(
            h,
            "<h2>Signed requests</h2>\n<p>Requests are signed (Web Bot Auth, HTTP Message \
             Signatures); the keys are at <a id=\"directory\" href=\"{dir}\">{dir}</a>.</p>\n"
        );
    }
    let _ = write!(
        h,
        "<h2>IP ranges</h2>\n<p>Requests come from these ranges \
         (<a id=\"ranges\" rel=\"{RANGES_REL}\" href=\"{RANGES_PATH}\">JSON</a>):</p>\n<ul id=\"range-list\">"
    );
    if a.ranges.is_empty() {
        h.push_str("<li>none published</li>");
    }
    for r in a.ranges {
        let _ = write!(h, "<li><code>{r}</code></li>");
    }
    h.push_str("</ul>\n</body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_ranges_written_as_ranges() {
        assert_eq!(
            Prefix::parse("198.51.100.0/24").unwrap().to_string(),
            "198.51.100.0/24"
        );
        assert_eq!(
            Prefix::parse("2001:db8::/32").unwrap().to_string(),
            "2001:db8::/32"
        );
        assert_eq!(
            Prefix::parse("192.0.2.7").unwrap().to_string(),
            "192.0.2.7/32"
        );
        assert_eq!(Prefix::parse("0.0.0.0/0").unwrap().to_string(), "0.0.0.0/0");
        for bad in [
            "198.51.100.1/24",
            "10.0.0.0/33",
            "nope/8",
            "2001:db8::1/32",
            "1.2.3.0/x",
        ] {
            assert!(Prefix::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_jafar_file_has_every_required_field() {
        let p = [
            Prefix::parse("198.51.100.0/24").unwrap(),
            Prefix::parse("2001:db8::/32").unwrap(),
        ];
        let t = "2026-05-28T20:26:40Z";
        let doc: serde_json::Value =
            serde_json::from_str(&jafar_json(&p, "ExampleBot", t)).unwrap();
        assert_eq!(doc["formatVersion"], "1.0");
        assert_eq!(doc["creationTime"], "2026-05-28T20:26:40Z");
        assert_eq!(doc["prefixes"][0]["ipv4Prefix"], "198.51.100.0/24");
        assert_eq!(doc["prefixes"][1]["ipv6Prefix"], "2001:db8::/32");
        assert_eq!(doc["prefixes"][1]["service"], "ExampleBot");
        let later = jafar_json(&p, "ExampleBot", "2026-05-29T20:26:40Z");
        let later: serde_json::Value = serde_json::from_str(&later).unwrap();
        assert_eq!(
            doc["synctoken"], later["synctoken"],
            "same prefixes, same token"
        );
        let other: serde_json::Value =
            serde_json::from_str(&jafar_json(&p[..1], "ExampleBot", t)).unwrap();
        assert_ne!(doc["synctoken"], other["synctoken"]);
    }

    #[test]
    fn the_page_escapes_what_the_operator_wrote() {
        let html = about_html(&AboutCrawler {
            product: "B/1 (+https://b.example/?a=1&b=2)",
            token: "B",
            contact: "https://b.example/?a=1&b=2",
            purpose: "<script>x</script>",
            ..AboutCrawler::default()
        });
        assert!(html.contains("&lt;script&gt;x&lt;/script&gt;"));
        assert!(html.contains("href=\"https://b.example/?a=1&amp;b=2\""));
        assert!(html.contains("User-agent: B\nDisallow: /"));
        assert!(html.contains("<link rel=\"client-ranges\" href=\"/bot/ranges.json\""));
    }
}
