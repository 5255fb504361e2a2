//! Verifying a log: one or more files in order, the chain carried across
//! them, checkpoints checked against a public key when one is given.
//!
//! Fed line by line so a verifier never holds a whole log in memory.

use ed25519_dalek::VerifyingKey;

use super::checkpoint::{hex, Checkpoint, SealReason};
use super::trees::FileTrees;
use super::{digest, split_line, GENESIS};

/// Evidence that a log is not what the proxy wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// The line has no well-formed `chain` field, or a checkpoint that does not parse.
    Malformed {
        /// File name as given.
        file: String,
        /// 1-based line number.
        line: u64,
    },
    /// The chain breaks here: this line was edited, or a line before it removed.
    Broken {
        /// File name as given.
        file: String,
        /// 1-based line number.
        line: u64,
    },
    /// A checkpoint whose signature does not verify with the key given.
    BadSignature {
        /// File name as given.
        file: String,
        /// 1-based line number.
        line: u64,
    },
    /// A checkpoint that seals another chain value or line count than the
    /// log has: lines before it were edited, removed or added and the chain
    /// recomputed.
    Rechained {
        /// File name as given.
        file: String,
        /// 1-based line number of the checkpoint.
        line: u64,
    },
    /// A format-3 checkpoint whose Merkle heads (or the chain value its
    /// file continues) are not those of the lines before it.
    TreeMismatch {
        /// File name as given.
        file: String,
        /// 1-based line number of the checkpoint.
        line: u64,
    },
    /// The first line of a file does not chain from the last line of the
    /// file before it: a file between them is missing, or they are out of order.
    Gap {
        /// The file whose start does not follow.
        file: String,
    },
    /// More lines are unsealed at the end than one checkpoint interval can
    /// leave: a checkpoint, and what followed it, was cut off.
    Truncated {
        /// The last file.
        file: String,
        /// Unsealed lines at its end.
        unsealed: u64,
        /// Why this cannot be a crash.
        why: String,
    },
    /// The last file given ends with a rotation checkpoint: the file that
    /// continued the log is missing.
    NextFileMissing {
        /// The file sealed for rotation.
        file: String,
    },
    /// A whole set was given (a directory, or several files) and its first
    /// file continues an earlier one: the oldest file(s) are missing.
    FirstFileMissing {
        /// The first file given.
        file: String,
    },
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Malformed { file, line } => {
                write!(f, "{file}: line {line}: not an audit line (no chain field, or a checkpoint that does not parse)")
            }
            Problem::Broken { file, line } => write!(
                f,
                "{file}: line {line}: chain does not match (line edited, or a line before it removed)"
            ),
            Problem::BadSignature { file, line } => write!(
                f,
                "{file}: line {line}: checkpoint signature does not verify with the given key (forged checkpoint)"
            ),
            Problem::Rechained { file, line } => write!(
                f,
                "{file}: line {line}: checkpoint seals a different chain or line count: the lines before it were changed and re-chained"
            ),
            Problem::TreeMismatch { file, line } => write!(
                f,
                "{file}: line {line}: checkpoint's Merkle heads are not those of the lines before it (a line was changed, or the checkpoint was made for other lines)"
            ),
            Problem::Gap { file } => write!(
                f,
                "{file}: first line does not follow from the previous file (a file is missing between them, or they are out of order)"
            ),
            Problem::Truncated { file, unsealed, why } => write!(
                f,
                "{file}: the last {unsealed} lines are not sealed and {why}: the log was cut below a checkpoint"
            ),
            Problem::NextFileMissing { file } => write!(
                f,
                "{file}: ends with a rotation checkpoint but no later file was given (the file after it is missing)"
            ),
            Problem::FirstFileMissing { file } => write!(
                f,
                "{file}: continues a file that was not given (the oldest file of the set is missing; give a file alone to check it alone)"
            ),
        }
    }
}

/// What verification found, file by file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// One entry per file, in the order given.
    pub files: Vec<FileReport>,
    /// Tamper evidence; empty for a good log.
    pub problems: Vec<Problem>,
    /// Whether checkpoints were checked against a key.
    pub keyed: bool,
    /// The first file's first line chains from a file that was not given.
    pub starts_mid_log: bool,
    /// Bytes that end the last file without a newline and are not a line:
    /// the start of a line whose `write` the proxy died in (a kill -9
    /// between two pages of one write). No answer waited on it; not a clean
    /// stop, not tampering.
    pub torn: Option<u64>,
}

/// One file of a verified log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileReport {
    /// File name as given.
    pub name: String,
    /// Lines read (up to the first problem in this file).
    pub lines: u64,
    /// Checkpoints found.
    pub checkpoints: u64,
    /// Line number of the last checkpoint (0: none).
    pub sealed_through: u64,
    /// Why the last checkpoint was written.
    pub last_seal: Option<SealReason>,
    /// The format of the last checkpoint (see `Checkpoint::format`).
    pub last_format: u32,
}

impl Report {
    /// Lines at the end of the last file that no checkpoint seals.
    pub fn unsealed_tail(&self) -> u64 {
        self.files
            .last()
            .map_or(0, |f| f.lines.saturating_sub(f.sealed_through))
    }

    /// Whether the log ends on a seal that only a clean end writes: a
    /// shutdown, or (for a file checked alone) a rotation. A log written
    /// since checkpoint format 2 that ends on an interval checkpoint was
    /// not stopped cleanly, or was cut right after that checkpoint; an
    /// older one may end so after a clean stop, and is taken as sealed.
    pub fn ends_sealed(&self) -> bool {
        let Some(last) = self.files.last() else {
            return false;
        };
        self.unsealed_tail() == 0
            && match last.last_seal {
                Some(SealReason::Shutdown | SealReason::Rotation) => true,
                Some(_) => last.last_format < 2,
                None => false,
            }
    }
}

/// Checks a log line by line; call [`Verifier::start_file`] before each file.
pub struct Verifier {
    key: Option<VerifyingKey>,
    prev: Option<String>,
    report: Report,
    line: u64,
    failed_file: bool,
    // For the truncation check: the interval in force and the first
    // unsealed line's time.
    every: Option<(u64, u64)>,
    first_unsealed_ts: Option<String>,
    last_ts: Option<String>,
    whole_set: bool,
    trees: FileTrees,
    /// The chain value the current file's first line continues.
    file_start: Option<String>,
    /// A line without a newline that is not a line: torn if nothing follows.
    unended: Option<u64>,
}

impl Verifier {
    /// A verifier; without a key, checkpoints are checked for consistency
    /// only (a forger can recompute them).
    pub fn new(key: Option<VerifyingKey>) -> Verifier {
        Verifier {
            report: Report {
                keyed: key.is_some(),
                ..Report::default()
            },
            key,
            prev: None,
            line: 0,
            failed_file: false,
            every: None,
            first_unsealed_ts: None,
            last_ts: None,
            whole_set: false,
            trees: FileTrees::verifying(),
            file_start: None,
            unended: None,
        }
    }

    /// The files given are a whole set (a directory, or several files): it
    /// must begin with its first file and not end with a rotation. A file
    /// given alone is checked alone.
    pub fn whole_set(mut self, whole: bool) -> Verifier {
        self.whole_set = whole;
        self
    }

    /// Begins the next file of the log.
    pub fn start_file(&mut self, name: &str) {
        self.not_the_end();
        self.report.files.push(FileReport {
            name: name.to_string(),
            ..FileReport::default()
        });
        self.line = 0;
        self.failed_file = false;
        self.first_unsealed_ts = None;
        self.trees = FileTrees::verifying();
        self.file_start = None;
    }

    fn file(&mut self) -> &mut FileReport {
        if self.report.files.is_empty() {
            self.start_file("-");
        }
        let last = self.report.files.len() - 1;
        &mut self.report.files[last]
    }

    fn fail(&mut self, p: Problem) {
        self.report.problems.push(p);
        self.failed_file = true;
    }

    /// A file's last line when it has no newline: a line like any other,
    /// or, when it is not one, bytes of a torn write, which are tampering
    /// unless they end the log ([`Report::torn`]).
    pub fn unended_line(&mut self, text: &str) {
        if split_line(text).is_some() || self.failed_file {
            self.line(text);
        } else {
            self.unended = Some(text.len() as u64);
        }
    }

    /// Torn bytes followed by more of the log were not a crash's.
    fn not_the_end(&mut self) {
        if self.unended.take().is_some() {
            let (file, line) = (self.file().name.clone(), self.line + 1);
            self.fail(Problem::Malformed { file, line });
        }
    }

    /// Checks one line (without its newline). After the first problem in a
    /// file the rest of that file is skipped; the next file is checked
    /// against the chain as it stood.
    pub fn line(&mut self, text: &str) {
        self.not_the_end();
        if self.failed_file {
            return;
        }
        let name = self.file().name.clone();
        self.line += 1;
        let n = self.line;
        let Some((content, chain)) = split_line(text) else {
            self.fail(Problem::Malformed {
                file: name,
                line: n,
            });
            return;
        };
        let prev = match self.prev.take() {
            Some(p) => p,
            None if digest(GENESIS, &content) == chain => GENESIS.to_string(),
            None => match continued_from(&content) {
                // Older files were not given: the file's first line says
                // (signed) which chain value it continues.
                Some(p) if digest(&p, &content) == chain => {
                    self.report.starts_mid_log = true;
                    p
                }
                _ => {
                    self.fail(Problem::Broken {
                        file: name,
                        line: n,
                    });
                    return;
                }
            },
        };
        if digest(&prev, &content) != chain {
            self.prev = Some(prev);
            if n == 1 && self.report.files.len() > 1 {
                self.fail(Problem::Gap { file: name });
            } else {
                self.fail(Problem::Broken {
                    file: name,
                    line: n,
                });
            }
            return;
        }
        if n == 1 {
            self.file_start = Some(prev.clone());
        }
        self.accept(&name, n, text, (&content, chain), &prev);
    }

    fn accept(
        &mut self,
        name: &str,
        n: u64,
        text: &str,
        (content, chain): (&str, &str),
        prev: &str,
    ) {
        self.prev = Some(chain.to_string());
        self.file().lines = n;
        let ts = ts_of(content);
        if content.contains("\"outcome\":\"checkpoint\"") {
            let Ok(cp) = serde_json::from_str::<Checkpoint>(content) else {
                self.fail(Problem::Malformed {
                    file: name.to_string(),
                    line: n,
                });
                return;
            };
            if let Some(key) = &self.key {
                if !cp.verify(key) {
                    self.fail(Problem::BadSignature {
                        file: name.to_string(),
                        line: n,
                    });
                    return;
                }
            }
            if prev != cp.sealed || cp.lines != n - 1 {
                self.fail(Problem::Rechained {
                    file: name.to_string(),
                    line: n,
                });
                return;
            }
            if cp.format >= 3 && !self.commits_hold(&cp) {
                self.fail(Problem::TreeMismatch {
                    file: name.to_string(),
                    line: n,
                });
                return;
            }
            self.trees.checkpoint(text, chain);
            let f = self.file();
            f.checkpoints += 1;
            f.sealed_through = n;
            f.last_seal = Some(cp.why);
            f.last_format = cp.format;
            self.every = Some((cp.every_lines, cp.every_secs));
            self.first_unsealed_ts = None;
        } else {
            self.trees.line(text, content, chain);
            if self.first_unsealed_ts.is_none() {
                self.first_unsealed_ts = ts.clone();
            }
        }
        if ts.is_some() {
            self.last_ts = ts;
        }
    }

    /// Whether a format-3 checkpoint's heads are those of the file so far.
    fn commits_hold(&mut self, cp: &Checkpoint) -> bool {
        let heads = self.trees.heads();
        let hosts_tree = match cp.format {
            3 => self.trees.format3_head().unwrap_or_default(),
            _ => heads.hosts_tree,
        };
        let tree = self.trees.line_head(cp.format);
        cp.continues.as_deref() == self.file_start.as_deref()
            && cp.tree.as_deref() == Some(hex(&tree).as_str())
            && cp.hosts == Some(heads.hosts)
            && cp.hosts_tree.as_deref() == Some(hex(&hosts_tree).as_str())
    }

    /// The findings. `parse_ts` turns an RFC 3339 time into seconds, for
    /// the check that the unsealed tail spans at most one interval.
    pub fn finish(mut self, parse_ts: impl Fn(&str) -> Option<f64>) -> Report {
        self.report.torn = self.unended.take();
        let Some(last) = self.report.files.last().cloned() else {
            return self.report;
        };
        if self.failed_file {
            return self.report;
        }
        if self.whole_set && self.report.starts_mid_log {
            let first = self.report.files[0].name.clone();
            self.report
                .problems
                .push(Problem::FirstFileMissing { file: first });
        }
        if self.key.is_none() {
            return self.report;
        }
        if self.whole_set
            && last.last_seal == Some(SealReason::Rotation)
            && last.sealed_through == last.lines
        {
            self.report
                .problems
                .push(Problem::NextFileMissing { file: last.name });
            return self.report;
        }
        let unsealed = last.lines - last.sealed_through;
        if unsealed == 0 {
            return self.report;
        }
        let Some((every_lines, every_secs)) = self.every else {
            // No checkpoint at all: nothing says how much may be unsealed.
            return self.report;
        };
        // The writer seals when a line would be the `every_lines`-th after a
        // checkpoint, so a crash leaves fewer than that many.
        let why = if unsealed > every_lines {
            Some(format!(
                "that is more than one interval ({every_lines} lines)"
            ))
        } else {
            let span = self
                .first_unsealed_ts
                .as_deref()
                .and_then(&parse_ts)
                .zip(self.last_ts.as_deref().and_then(&parse_ts))
                .map(|(a, b)| b - a);
            // Two seconds of slack: the writer checks its timer between batches.
            span.filter(|s| *s > every_secs as f64 + 2.0)
                .map(|s| format!("they span {s:.0} s, more than one interval ({every_secs} s)"))
        };
        if let Some(why) = why {
            self.report.problems.push(Problem::Truncated {
                file: last.name,
                unsealed,
                why,
            });
        }
        self.report
    }
}

/// The chain value a continuation checkpoint says its file continues.
fn continued_from(content: &str) -> Option<String> {
    let cp: Checkpoint = serde_json::from_str(content).ok()?;
    (cp.why == SealReason::Continuation).then_some(cp.sealed)
}

/// The `ts` field of a line's content, found without a full parse.
fn ts_of(content: &str) -> Option<String> {
    let rest = content.strip_prefix("{\"ts\":\"")?;
    let end = rest.find('"')?;
    Some(rest[..end].to_string())
}

#[cfg(test)]
mod tests {
    use ed25519_dalek::{Signer, SigningKey};

    use super::*;
    use crate::audit::chain_line;
    use crate::audit::checkpoint::Commits;

    fn commits(trees: &mut FileTrees) -> Commits {
        Commits {
            continues: GENESIS.to_string(),
            heads: trees.heads(),
        }
    }

    /// One record and one interval checkpoint of `format`, the log's end.
    fn ends_on_interval(key: &SigningKey, format: u32) -> Report {
        let content = r#"{"ts":"2026-01-01T00:00:00.000Z","id":"a","host":"a.test"}"#;
        let (first, chain) = chain_line(GENESIS, content);
        let mut trees = FileTrees::verifying();
        trees.line(&first, content, &chain);
        let ts = "2026-01-01T00:00:01.000Z".to_string();
        let c = commits(&mut trees);
        let mut cp = Checkpoint::sign(key, ts, SealReason::Interval, 1, &chain, 10, 60, &c);
        if format < 3 {
            // As the writers of those formats wrote them: no heads.
            cp.format = format;
            (cp.continues, cp.tree, cp.hosts, cp.hosts_tree) = (None, None, None, None);
            cp.sig = hex(&key.sign(cp.message().as_bytes()).to_bytes());
        } else if format < 5 {
            // Formats 3 and 4's line tree: the lines' text.
            cp.format = format;
            cp.tree = Some(hex(&trees.line_head(format)));
            if format == 3 {
                // Format 3's host tree: entries alone, unlinked.
                cp.hosts_tree = trees.format3_head().map(|h| hex(&h));
            }
            cp.sig = hex(&key.sign(cp.message().as_bytes()).to_bytes());
        }
        let (second, _) = chain_line(&chain, &cp.to_json());
        let mut v = Verifier::new(Some(key.verifying_key()));
        v.start_file("audit.jsonl");
        v.line(&first);
        v.line(&second);
        v.finish(|_| None)
    }

    /// Bytes without a newline that are not a line are a crash's torn write
    /// at the end of the log, and tampering anywhere else.
    #[test]
    fn a_torn_line_is_a_crash_only_at_the_end_of_the_log() {
        let content = r#"{"ts":"2026-01-01T00:00:00.000Z","id":"a","host":"a.test"}"#;
        let (first, chain) = chain_line(GENESIS, content);
        let (second, _) = chain_line(&chain, content);
        let torn = &second[..second.len() / 2];
        let read = |files: &[&[(&str, bool)]]| {
            let mut v = Verifier::new(None);
            for (i, lines) in files.iter().enumerate() {
                v.start_file(&format!("f{i}"));
                for (text, ended) in lines.iter() {
                    if *ended {
                        v.line(text);
                    } else {
                        v.unended_line(text);
                    }
                }
            }
            v.finish(|_| None)
        };
        let at_end = read(&[&[(&first, true), (torn, false)]]);
        assert_eq!(at_end.problems, vec![]);
        assert_eq!(at_end.torn, Some(torn.len() as u64));
        assert_eq!(at_end.files[0].lines, 1);
        // A whole line that lost only its newline is a line.
        let whole = read(&[&[(&first, true), (&second, false)]]);
        assert_eq!((whole.problems.clone(), whole.torn), (vec![], None));
        assert_eq!(whole.files[0].lines, 2);
        // Followed by another file: not the log's end.
        let then_more = read(&[&[(&first, true), (torn, false)], &[(&second, true)]]);
        assert_eq!(
            then_more.problems,
            vec![Problem::Malformed {
                file: "f0".into(),
                line: 2
            }]
        );
        assert_eq!(then_more.torn, None);
    }

    #[test]
    fn logs_of_every_format_verify_and_a_wrong_head_is_named() {
        let key = SigningKey::from_bytes(&[7; 32]);
        for format in 1..=5 {
            assert_eq!(
                ends_on_interval(&key, format).problems,
                vec![],
                "format {format}"
            );
        }
        // A checkpoint signed over a tree of another line (another chain).
        let content = r#"{"ts":"2026-01-01T00:00:00.000Z","id":"a","host":"a.test"}"#;
        let (first, chain) = chain_line(GENESIS, content);
        let (_, another) = chain_line(&chain, content);
        let mut other = FileTrees::default();
        other.line(&first, content, &another);
        let c = commits(&mut other);
        let ts = "2026-01-01T00:00:01.000Z".to_string();
        let cp = Checkpoint::sign(&key, ts, SealReason::Shutdown, 1, &chain, 10, 60, &c);
        let (second, _) = chain_line(&chain, &cp.to_json());
        let mut v = Verifier::new(Some(key.verifying_key()));
        v.start_file("audit.jsonl");
        v.line(&first);
        v.line(&second);
        let report = v.finish(|_| None);
        assert_eq!(
            report.problems,
            vec![Problem::TreeMismatch {
                file: "audit.jsonl".into(),
                line: 2
            }]
        );
    }

    #[test]
    fn an_interval_end_is_sealed_only_in_logs_older_than_format_2() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let new = ends_on_interval(&key, 2);
        assert_eq!(new.problems, vec![]);
        assert_eq!(new.unsealed_tail(), 0);
        assert!(!new.ends_sealed());
        let old = ends_on_interval(&key, 1);
        assert_eq!(old.problems, vec![]);
        assert!(old.ends_sealed());
    }

    #[test]
    fn the_format_is_signed() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let ts = "2026-01-01T00:00:01.000Z".to_string();
        let c = commits(&mut FileTrees::default());
        let mut cp = Checkpoint::sign(&key, ts, SealReason::Interval, 1, GENESIS, 10, 60, &c);
        assert!(cp.verify(&key.verifying_key()));
        cp.format = 2;
        assert!(!cp.verify(&key.verifying_key()));
        cp.format = 3;
        cp.hosts = Some(2);
        assert!(!cp.verify(&key.verifying_key()));
    }
}
