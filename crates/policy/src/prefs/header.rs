//! `Content-Usage` and `Content-Signal` response headers: the fetch has
//! happened, so they decide what the client is given.
//!
//! Each field line is one statement; several lines (or both fields) combine
//! by the rule of the module root (any no wins). A `Content-Signal` header's
//! path, should it carry one, is ignored: the header speaks for this response.

use super::{
    split_path, DeclaredUse, Place, PrefsRecord, PrefsRefusal, Purpose, Said, SignalStatement,
    SignalUse, Stance, UsageStatement, Vocabulary,
};

/// What a response's headers say, and whether they refuse the crawl.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponsePrefs<'a> {
    /// Combined per purpose, with the header lines that stated anything.
    pub record: PrefsRecord,
    /// The first declared purpose the headers refuse (in the order declared),
    /// else a site's `use` below `crawler.use`.
    pub refusal: Option<PrefsRefusal<'a>>,
}

/// Judges a response's `Content-Usage` and `Content-Signal` field values
/// (one entry per field line) against the crawl's declared purposes and use.
pub fn judge_response<'a>(
    content_usage: &[&'a str],
    content_signal: &[&'a str],
    purposes: &[Purpose],
    declared: DeclaredUse,
) -> ResponsePrefs<'a> {
    let mut record = PrefsRecord::default();
    // Per purpose, the first header line that said no.
    let mut first_no: [Option<Said<'a>>; 3] = [None; 3];
    // The most restrictive `use` said, and where.
    let mut strictest: Option<(SignalUse, Said<'a>)> = None;

    let mut note = |record: &mut PrefsRecord, said: Said<'a>, values: [Option<bool>; 3]| {
        let mut stated = false;
        for purpose in Purpose::ALL {
            let value = values[purpose.index()];
            stated |= value.is_some();
            record.add(purpose, Stance::from_value(value));
            if value == Some(false) && first_no[purpose.index()].is_none() {
                first_no[purpose.index()] = Some(said);
            }
        }
        if stated {
            record.add_source(&said);
        }
    };

    for &value in content_usage {
        let said = Said {
            vocabulary: Vocabulary::ContentUsage,
            place: Place::Header,
            text: value,
        };
        let statement = UsageStatement::parse(value);
        note(&mut record, said, Purpose::ALL.map(|p| statement.get(p)));
    }
    for &value in content_signal {
        let said = Said {
            vocabulary: Vocabulary::ContentSignal,
            place: Place::Header,
            text: value,
        };
        let (_path, pairs) = split_path(value);
        let signal = SignalStatement::parse(pairs);
        note(&mut record, said, Purpose::ALL.map(|p| signal.get(p)));
        if let Some(usage) = signal.usage {
            record.add_source(&said);
            // The more restrictive `use`: once said, it stands.
            if strictest
                .as_ref()
                .is_none_or(|(best, _)| usage.stricter_than(best))
            {
                record.usage = Some(usage.as_str().to_string());
                strictest = Some((usage, said));
            }
        }
    }

    let refusal = purposes
        .iter()
        .find_map(|&purpose| {
            first_no[purpose.index()].map(|said| PrefsRefusal::Purpose { purpose, said })
        })
        .or_else(|| {
            strictest
                .filter(|(usage, _)| usage.refuses(declared))
                .map(|(_, said)| PrefsRefusal::Use { declared, said })
        });
    ResponsePrefs { record, refusal }
}
