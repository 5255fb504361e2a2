//! Usage preferences in the request path: the robots step asks whether the
//! site's robots.txt refuses what the crawl declares; the TDMRep step asks
//! the same of `/.well-known/tdmrep.json`; the learn step asks it of the
//! response's `Content-Usage` / `Content-Signal` headers and TDMRep's
//! `tdm-reservation` / `tdm-policy`. The rules are the policy crate's
//! (`mannerly_policy::prefs`); this module only turns them into stops and
//! audit fields.

use std::borrow::Cow;

use http::{HeaderMap, HeaderName, HeaderValue};
use mannerly_policy::prefs::page::{
    judge_page, MetaScan, MetaTag, Origin, Statement, ROBOTS_FIELDS,
};
use mannerly_policy::prefs::{
    judge_response, judge_tdm, PrefsRecord, ResponsePreferences, TdmFile, TDM_PURPOSES,
};
use mannerly_policy::robots::{Purpose, Robots};
use mannerly_policy::robots_cache::Rules;
use mannerly_policy::AuditRecord;

use super::identities::Identities;
use crate::answer::{failure, header_text, Stop};
use crate::config::Config;

/// The header an annotated response carries.
pub(crate) const PREFERENCES: &str = "mannerly-preferences";

/// Robots step: the site's preferences for this URL go on the audit line;
/// a declared purpose or use they refuse is the answer.
pub(crate) fn robots_refusal(
    cfg: &Config,
    robots: &Robots,
    ids: Identities<'_>,
    path: &str,
    rec: &mut AuditRecord,
) -> Option<Stop> {
    // Each identity is judged by the lines of its own group, for its own
    // purposes; the first refusal binds.
    let mut refused = None;
    for (token, purposes) in ids.iter() {
        let prefs = robots.preferences(token, path);
        note(rec, &prefs.record());
        if refused.is_none() {
            refused = prefs.refusal(purposes, cfg.crawler.usage);
        }
    }
    let refusal = refused?;
    let said = refusal.said();
    rec.rule = Some(said.to_string());
    Some(failure::refused_in_robots(&refusal))
}

/// What the learn step does with a response, by its preference headers.
pub(crate) enum OnResponse {
    /// Nothing refused: pass it on.
    Pass,
    /// Refused, and `annotate` is configured: pass it on with this header.
    Annotate(HeaderValue),
    /// Refused, and `withhold` is configured: this is the client's answer.
    Withhold(Stop),
}

/// Learn step: judges a response's `Content-Usage` / `Content-Signal`
/// headers, records them on the audit line (combined with robots.txt's),
/// and says what the client gets.
pub(crate) fn judge(
    cfg: &Config,
    headers: &HeaderMap,
    meta: Option<&MetaScan>,
    rec: &mut AuditRecord,
) -> OnResponse {
    // Made at compile time: looked up by `&str`, each name was parsed
    // again on every response.
    const CONTENT_USAGE: HeaderName = HeaderName::from_static("content-usage");
    const CONTENT_SIGNAL: HeaderName = HeaderName::from_static("content-signal");
    const TDM_RESERVATION: HeaderName = HeaderName::from_static("tdm-reservation");
    const TDM_POLICY: HeaderName = HeaderName::from_static("tdm-policy");
    let stated = [CONTENT_USAGE, CONTENT_SIGNAL, TDM_RESERVATION, TDM_POLICY];
    // Nearly every answer carries none of them: one pass over its names
    // compares them, where six lookups hashed each name (and parsed the
    // two robots fields' from text first), some 1,700 instructions.
    let carried = headers
        .keys()
        .any(|n| stated.contains(n) || ROBOTS_FIELDS.iter().any(|r| n.as_str() == *r));
    if !carried && meta.is_none_or(|m| m.tags.is_empty()) {
        ignored_only(meta, rec);
        return OnResponse::Pass;
    }
    let values = |name: HeaderName| -> Vec<&str> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect()
    };
    let (usage, signal) = (values(CONTENT_USAGE), values(CONTENT_SIGNAL));
    let (tdm, tdm_policy) = (values(TDM_RESERVATION), values(TDM_POLICY));
    let page = page_statements(headers, meta);
    if usage.is_empty() && signal.is_empty() && tdm.is_empty() && page.is_empty() {
        ignored_only(meta, rec);
        return OnResponse::Pass;
    }
    let purposes = request_purposes(cfg, rec);
    let mut judged = judge_response(&usage, &signal, &purposes, cfg.crawler.usage);
    let reserved = judge_tdm(&tdm, &tdm_policy, &purposes);
    judged.record.merge(&reserved.record);
    judged.refusal = judged.refusal.or(reserved.refusal);
    // Page-level directives, for each identity the request speaks for.
    let ids = Identities::of(cfg, rec.agent.as_deref().unwrap_or(""));
    let ids: Vec<(&str, &[Purpose])> = ids.iter().collect();
    let mut directed = judge_page(&page, &ids, is_image(headers));
    if let Some(scan) = meta {
        directed.record.ignored.extend(scan.ignored.iter().cloned());
    }
    judged.record.merge(&directed.record);
    judged.refusal = judged.refusal.or(directed.refusal);
    note(rec, &judged.record);
    let Some(refusal) = judged.refusal else {
        return OnResponse::Pass;
    };
    rec.rule = Some(refusal.said().to_string());
    match cfg.policy.response_preferences {
        ResponsePreferences::Annotate => {
            OnResponse::Annotate(header_text(&format!("refused; {refusal}")))
        }
        ResponsePreferences::Withhold => OnResponse::Withhold(failure::withheld(&refusal)),
    }
}

/// An answer stating no preference: the line notes only the `<meta>` tags
/// the scan ignored, if any.
fn ignored_only(meta: Option<&MetaScan>, rec: &mut AuditRecord) {
    if let Some(scan) = meta.filter(|m| !m.ignored.is_empty()) {
        let record = PrefsRecord {
            ignored: scan.ignored.clone(),
            ..PrefsRecord::default()
        };
        note(rec, &record);
    }
}

/// The page-level statements of a response: its robots-tag field lines,
/// then the robots `<meta>` tags of its head.
fn page_statements<'a>(headers: &'a HeaderMap, meta: Option<&'a MetaScan>) -> Vec<Statement<'a>> {
    let mut out = Vec::new();
    for name in ROBOTS_FIELDS {
        for value in headers.get_all(name) {
            // A value that is not text says nothing readable.
            if let Ok(text) = value.to_str() {
                out.push(Statement {
                    origin: Origin::Field(name),
                    name: None,
                    text,
                });
            }
        }
    }
    out.extend(
        meta.into_iter()
            .flat_map(|m| m.tags.iter().map(MetaTag::statement)),
    );
    out
}

fn is_image(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().to_ascii_lowercase().starts_with("image/"))
}

/// The purposes of the identities the request speaks for (its line's
/// `agent` selects them).
fn request_purposes<'a>(cfg: &'a Config, rec: &'a AuditRecord) -> Cow<'a, [Purpose]> {
    Identities::of(cfg, rec.agent.as_deref().unwrap_or("")).purposes()
}

/// Adds what a judgement read to the line's `prefs` (robots.txt's, the
/// file's and the headers' combine: any no wins).
fn note(rec: &mut AuditRecord, record: &PrefsRecord) {
    match &mut rec.prefs {
        Some(mine) => mine.merge(record),
        None if !record.is_empty() => rec.prefs = Some(record.clone()),
        None => {}
    }
}

/// What `/.well-known/tdmrep.json` says of this request's path: its rule on
/// the line, and a refusal when it reserves a declared TDM purpose or
/// cannot be read.
/// The stop comes with the words an annotated answer carries instead.
fn tdm_file_refusal(
    cfg: &Config,
    rules: &Rules<TdmFile>,
    path: &str,
    rec: &mut AuditRecord,
) -> Option<(Stop, String)> {
    let purposes = request_purposes(cfg, rec).into_owned();
    let file = match rules {
        Rules::Known(file) => file,
        Rules::Unavailable { reason, retry_in } => {
            let purpose = purposes.iter().find(|p| TDM_PURPOSES.contains(p))?;
            let stop = failure::tdmrep_unavailable(reason, *retry_in, purpose.as_str());
            return Some((
                stop,
                format!("unknown; {reason}: {purpose} may be reserved"),
            ));
        }
    };
    let judged = file.judge(path, &purposes);
    note(rec, &judged.record);
    let refusal = judged.refusal?;
    rec.rule = Some(refusal.said().to_string());
    Some((
        failure::refused_in_tdmrep(&refusal),
        format!("refused; {refusal}"),
    ))
}

mod head;
mod steps;
