//! TDMRep (W3C TDM Reservation Protocol, Community Group final report): a
//! site reserves its text-and-data-mining rights, the opt-out of the EU DSM
//! Directive's Article 4, with the response headers `tdm-reservation: 1`
//! and, optionally, `tdm-policy: <URL>` naming the licence it offers, or
//! site-wide in `/.well-known/tdmrep.json` ([`TdmFile`], `tdmrep/file.rs`).
//! The two are combined as every preference is (any reservation wins):
//! the report lets a header supersede the file, but a header
//! `tdm-reservation: 0` on a page the file reserves is a site contradicting
//! itself, and a crawler does not settle that in its own favour.
//!
//! What a reservation refuses: the purposes that are text and data mining
//! ("any automated analytical technique aimed at analysing text and data
//! in digital form in order to generate information", Art. 2(2)), which
//! are `ai-train` (the information generated is a model) and `ai-input`
//! (it is an answer composed from the page). `search` is not refused: an
//! index with links and short excerpts is the use TDMRep sites expect to
//! keep (the protocol's own examples reserve mining, not discovery), and a
//! site that wants no search says so in robots.txt.
//!
//! `tdm-reservation: 0` reserves nothing; any other value, or a value
//! written twice with different meanings, is read as the strictest one
//! that parses (any reservation wins). The `tdm-policy` URL is recorded,
//! not fetched: whether its licence covers the crawl is for a person to
//! decide, so the refusal stands until the operator says otherwise.

mod file;

pub use file::{TdmFile, TdmRule, TDMREP_PATH};

use super::{Place, PrefsRecord, PrefsRefusal, Purpose, ResponsePrefs, Said, Stance, Vocabulary};

/// The purposes a TDM reservation refuses.
pub const TDM_PURPOSES: [Purpose; 2] = [Purpose::AiTrain, Purpose::AiInput];

/// Judges a response's `tdm-reservation` and `tdm-policy` field values
/// against the crawl's declared purposes.
pub fn judge_tdm<'a>(
    reservation: &[&'a str],
    policy: &[&str],
    purposes: &[Purpose],
) -> ResponsePrefs<'a> {
    let mut record = PrefsRecord::default();
    let mut reserved: Option<Said<'a>> = None;
    for &value in reservation {
        let said = Said {
            vocabulary: Vocabulary::TdmRep,
            place: Place::Header,
            text: value,
        };
        let stance = match value.trim_matches([' ', '\t']) {
            "1" => Stance::Disallowed,
            "0" => Stance::Allowed,
            _ => continue,
        };
        record.add_source(&said);
        for purpose in TDM_PURPOSES {
            record.add(purpose, stance);
        }
        if stance == Stance::Disallowed {
            reserved.get_or_insert(said);
        }
    }
    // The report: `tdm-policy` beside `tdm-reservation: 0` is not to be
    // processed.
    if reserved.is_some() {
        record.tdm_policy = policy
            .iter()
            .map(|p| p.trim_matches([' ', '\t']))
            .find(|p| !p.is_empty())
            .map(str::to_string);
    }
    let refusal = reserved.and_then(|said| {
        purposes
            .iter()
            .find(|p| TDM_PURPOSES.contains(p))
            .map(|&purpose| PrefsRefusal::Purpose { purpose, said })
    });
    ResponsePrefs { record, refusal }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reservation_refuses_the_tdm_purposes_and_records_the_policy() {
        // The report's example: rights reserved, a policy offered.
        let judged = judge_tdm(
            &["1"],
            &["https://provider.com/policies/policy.json"],
            &[Purpose::Search, Purpose::AiTrain],
        );
        assert_eq!(
            judged.refusal.map(|r| r.to_string()).as_deref(),
            Some("ai-train refused by tdm-reservation (header tdm-reservation: 1)")
        );
        let r = &judged.record;
        assert_eq!(
            (r.search, r.ai_input, r.ai_train),
            (Stance::Unknown, Stance::Disallowed, Stance::Disallowed)
        );
        assert_eq!(
            r.tdm_policy.as_deref(),
            Some("https://provider.com/policies/policy.json")
        );
        // A search crawl is not refused by a TDM reservation.
        assert_eq!(judge_tdm(&["1"], &[], &[Purpose::Search]).refusal, None);
        assert_eq!(
            judge_tdm(&["1"], &[], &[Purpose::AiInput])
                .refusal
                .map(|r| r.what()),
            Some("ai-input")
        );
    }

    #[test]
    fn zero_reserves_nothing_and_other_values_say_nothing() {
        let judged = judge_tdm(&["0"], &["https://x.example/p.json"], &[Purpose::AiTrain]);
        assert_eq!(judged.refusal, None);
        assert_eq!(judged.record.ai_train, Stance::Allowed);
        assert_eq!(judged.record.tdm_policy, None, "no policy beside a 0");
        for odd in ["yes", "2", "", "true"] {
            let judged = judge_tdm(&[odd], &["https://x.example/p.json"], &[Purpose::AiTrain]);
            assert_eq!(judged.refusal, None, "{odd}");
            assert!(judged.record.is_empty(), "{odd}");
            assert_eq!(judged.record.tdm_policy, None, "{odd}");
        }
        // Two lines, 0 and 1: any reservation wins.
        let judged = judge_tdm(&["0", "1"], &[], &[Purpose::AiTrain]);
        assert!(judged.refusal.is_some());
        assert_eq!(judged.record.ai_train, Stance::Disallowed);
    }
}
