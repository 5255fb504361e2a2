//! Evidence for one site: its lines of a log, each with an RFC 9162
//! inclusion proof against the last signed checkpoint of its file, and the
//! host tree's leaf for the site (its line count and last line) with its
//! own proof, so the site's owner can check, with the audit public key
//! alone, that every line is in the sealed log and that none was left out,
//! while the lines of other hosts appear only as hashes.
//!
//! A period is a run of whole files of one log (a rotation set, or its
//! current file), each ending at its last checkpoint.

use ed25519_dalek::VerifyingKey;
use serde::{Deserialize, Serialize};

use super::checkpoint::{hex, unhex, Checkpoint, SealReason};
use super::merkle::{chain_leaf, leaf_hash, verify_inclusion, Hash};
use super::midstate::chain_from_state;
use super::trees::{encloses, host_key, host_leaf, linked_leaf, FileTrees};
use super::{digest, split_line, GENESIS};

/// What the evidence file says it is: 2 since lines under format-5
/// checkpoints carry their [`ProvenLine::state`].
pub(crate) const EVIDENCE_FORMAT: &str = "mannerly-evidence-2";

/// Evidence files this version reads (1 has no `state`, and no format-5
/// checkpoints).
const READS: [&str; 2] = ["mannerly-evidence-1", EVIDENCE_FORMAT];

/// The evidence for one host, as written to the file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// Always [`EVIDENCE_FORMAT`].
    pub format: String,
    /// The host the evidence is for.
    pub host: String,
    /// The key that signed the checkpoints, hex (the verifier is given the
    /// key on its own, and checks against that one).
    pub key: String,
    /// The log's files, oldest first.
    pub files: Vec<EvidenceFile>,
}

/// One file of the period.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvidenceFile {
    /// The file's name where the evidence was made.
    pub name: String,
    /// The file's last checkpoint, which every proof is against.
    pub checkpoint: IndexedLine,
    /// The host's lines before that checkpoint, in order.
    pub lines: Vec<ProvenLine>,
    /// The host's leaf in the checkpoint's host tree; absent when the host
    /// has no line in the file.
    pub host_leaf: Option<HostProof>,
    /// When the host has no line in the file (checkpoint format 4): the
    /// leaf whose key and next key enclose the host's, which proves it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub absent: Option<AbsentProof>,
    /// The host's lines after the checkpoint, which nothing seals yet.
    pub unsealed: u64,
}

/// A line and its 0-based index in its file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IndexedLine {
    /// 0-based index in the file.
    pub index: u64,
    /// The line as written, without its newline.
    pub line: String,
}

/// A line of the host with its audit path in the line tree.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProvenLine {
    /// 0-based index in the file.
    pub index: u64,
    /// The line as written, without its newline.
    pub line: String,
    /// The audit path, bottom up, hex.
    pub proof: Vec<String>,
    /// Under a format-5 checkpoint (whose line tree has the chain values
    /// as leaves): SHA-256's state after the chain value before this line,
    /// hex, from which this line's chain is recomputed without showing
    /// that value (`audit/midstate.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
}

/// The host's leaf in the host tree and its audit path.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostProof {
    /// Position of the leaf.
    pub position: u64,
    /// The host's line count the checkpoint commits to.
    pub seq: u64,
    /// Index of the host's last line before the checkpoint.
    pub last_index: u64,
    /// The audit path, bottom up, hex.
    pub proof: Vec<String>,
    /// Checkpoint format 4: the next host key after the host's, hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// Another host's leaf in the host tree, whose key and next key enclose
/// the site's key: the file holds no line of the site. Only hashes: the
/// keys are SHA-256 of the names (a guessed name can be tested against
/// these two), the entry hides its name behind a chain value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AbsentProof {
    /// Position of the leaf.
    pub position: u64,
    /// Its key, hex.
    pub key: String,
    /// The next key, hex.
    pub next: String,
    /// Its entry's hash, hex.
    pub entry: String,
    /// The audit path, bottom up, hex.
    pub proof: Vec<String>,
}

/// Why evidence does not hold. Lines are 1-based line numbers in the file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvidenceProblem {
    /// Not an evidence file of this format.
    #[error("not mannerly evidence ({0})")]
    Format(String),
    /// A line or checkpoint that does not parse.
    #[error("{file}: line {line}: {why}")]
    Malformed {
        /// File name as in the evidence.
        file: String,
        /// 1-based line number.
        line: u64,
        /// What is wrong.
        why: String,
    },
    /// The checkpoint's signature does not verify with the key given.
    #[error("{file}: line {line}: checkpoint signature does not verify with the given key")]
    BadSignature {
        /// File name as in the evidence.
        file: String,
        /// 1-based line number of the checkpoint.
        line: u64,
    },
    /// A line whose proof does not lead to the signed tree head.
    #[error("{file}: line {line} (id {id}): not in the sealed log (edited, moved, or not from this log)")]
    NotInLog {
        /// File name as in the evidence.
        file: String,
        /// 1-based line number.
        line: u64,
        /// The line's `id`.
        id: String,
    },
    /// A line of another host.
    #[error("{file}: line {line}: a line of another host, not of {host}")]
    OtherHost {
        /// File name as in the evidence.
        file: String,
        /// 1-based line number.
        line: u64,
        /// The host the evidence is for.
        host: String,
    },
    /// A gap in the host's numbering: lines between were left out.
    #[error("{file}: line {line}: host_seq {found} where {expected} was due: line(s) {expected}..{} of the host were left out", found - 1)]
    LeftOut {
        /// File name as in the evidence.
        file: String,
        /// 1-based line number of the line after the gap.
        line: u64,
        /// The number due.
        expected: u64,
        /// The number the line has.
        found: u64,
    },
    /// The evidence holds fewer (or more) lines than the checkpoint counts.
    #[error("{file}: the checkpoint (line {line}) counts {committed} lines of the host, the evidence holds {given}: {}", if committed > given { "the last ones were left out" } else { "lines were added" })]
    Count {
        /// File name as in the evidence.
        file: String,
        /// 1-based line number of the checkpoint.
        line: u64,
        /// What the checkpoint's host tree says.
        committed: u64,
        /// Lines in the evidence.
        given: u64,
    },
    /// The host's leaf is not in the signed host tree.
    #[error("{file}: the host's count and last line (line {line}) are not what the checkpoint commits to")]
    HostLeaf {
        /// File name as in the evidence.
        file: String,
        /// 1-based line number of the host's last line.
        line: u64,
    },
    /// No line of the host and no proof that the file has none, where its
    /// checkpoint allows one: the host's lines of that file were removed.
    #[error("{file}: the evidence holds no line of {host} and no proof that the file has none, which its checkpoint (line {line}) would give: the host's lines of this file were left out")]
    NotShownAbsent {
        /// File name as in the evidence.
        file: String,
        /// 1-based line number of the checkpoint.
        line: u64,
        /// The host the evidence is for.
        host: String,
    },
    /// The witness holds a later checkpoint than the evidence reaches.
    #[error("the witness holds a {why} checkpoint of {ts} sealing {lines} lines of {file}, later than the checkpoint the evidence stops at (line {line}): the lines between were left out")]
    EndsEarly {
        /// File name as in the evidence.
        file: String,
        /// 1-based line number of the evidence's checkpoint.
        line: u64,
        /// Lines the witness's checkpoint seals.
        lines: u64,
        /// Its time.
        ts: String,
        /// Its kind, in words.
        why: String,
    },
    /// The witness's newest checkpoint is of a file the evidence lacks.
    #[error("the witness holds a {why} checkpoint of {ts} of a file the evidence does not hold: the log goes on past the evidence's last file")]
    WitnessBeyond {
        /// Its time.
        ts: String,
        /// Its kind, in words.
        why: String,
    },
    /// A file that does not continue the one before it.
    #[error("{file}: does not continue the file before it in the evidence (a file is missing between them, or they are out of order)")]
    NotContinued {
        /// File name as in the evidence.
        file: String,
    },
}

/// What verified evidence shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EvidenceSummary {
    /// The host.
    pub host: String,
    /// Lines proven, over all files.
    pub lines: u64,
    /// Per file: name, lines, the checkpoint's time and kind.
    pub files: Vec<(String, u64, String, SealReason)>,
    /// The first file starts the log (it continues no earlier file).
    pub starts_log: bool,
    /// Files without a line of the host whose checkpoint (format 3)
    /// cannot prove that there is none: there the evidence shows none,
    /// and cannot tell that from lines removed.
    pub empty_files: Vec<String>,
    /// Files proven to hold no line of the host.
    pub absent_files: Vec<String>,
    /// The kind of the last file's checkpoint: only a shutdown or
    /// rotation seal ends where the log did; after an interval one the
    /// proxy was running or stopped uncleanly, or later checkpoints were
    /// left out (a witness tells which: [`Evidence::witnessed`]).
    pub end: Option<SealReason>,
    /// Lines after the last checkpoints, not proven.
    pub unsealed: u64,
}

/// Builds the evidence for one host from a log read in order.
pub struct EvidenceBuilder {
    host: String,
    key: Option<String>,
    files: Vec<EvidenceFile>,
    cur: Option<Building>,
}

struct Building {
    name: String,
    /// The line tree's leaves: from format 5 the chain values'.
    leaves: Vec<Hash>,
    /// The leaves of formats 3 and 4: the lines' text.
    texts: Vec<Hash>,
    trees: FileTrees,
    /// The chain value of the line before the next one; none before the
    /// file's first (a checkpoint's `continues` says it).
    prev: Option<String>,
    /// The host's lines: index, text, the chain value before it.
    mine: Vec<(u64, String, Option<String>)>,
    /// The last checkpoint seen: index, line, the host's leaf then (or
    /// the proof that it has none).
    last: Option<(IndexedLine, Option<HostProof>, Option<AbsentProof>)>,
}

/// A proven line's leaf in the line tree of a checkpoint of `format`:
/// from format 5 its chain value, once finishing the hash from its
/// `state` over its content gives the chain it carries; before, its text.
fn line_leaf(pl: &ProvenLine, format: u32, content: &str, chain: &str) -> Option<Hash> {
    if format < 5 {
        return Some(leaf_hash(pl.line.as_bytes()));
    }
    let state = unhex::<32>(pl.state.as_deref()?)?;
    let ours = chain_from_state(&state, content.as_bytes());
    (hex(&ours) == chain).then(|| chain_leaf(chain))
}

fn hashes(list: &[String]) -> Option<Vec<Hash>> {
    list.iter().map(|h| unhex::<32>(h)).collect()
}

impl Evidence {
    /// Checks every proof against checkpoints signed with `key`.
    pub fn verify(&self, key: &VerifyingKey) -> Result<EvidenceSummary, EvidenceProblem> {
        if !READS.contains(&self.format.as_str()) {
            return Err(EvidenceProblem::Format(self.format.clone()));
        }
        let mut summary = EvidenceSummary {
            host: self.host.clone(),
            lines: 0,
            files: Vec::new(),
            starts_log: false,
            empty_files: Vec::new(),
            absent_files: Vec::new(),
            end: None,
            unsealed: 0,
        };
        // The chain value of the previous file's last checkpoint, and
        // whether it sealed that file for rotation.
        let mut before: Option<(String, bool)> = None;
        for f in &self.files {
            let (cp, chain) = self.checkpoint(f, key)?;
            match &before {
                None => summary.starts_log = cp.continues.as_deref() == Some(GENESIS),
                Some((prev, rotated)) => {
                    if !rotated || cp.continues.as_deref() != Some(prev.as_str()) {
                        return Err(EvidenceProblem::NotContinued {
                            file: f.name.clone(),
                        });
                    }
                }
            }
            let proven_absent = self.file_lines(f, &cp)?;
            summary.lines += f.lines.len() as u64;
            summary.unsealed += f.unsealed;
            if proven_absent {
                summary.absent_files.push(f.name.clone());
            } else if f.lines.is_empty() {
                summary.empty_files.push(f.name.clone());
            }
            summary.end = Some(cp.why);
            summary
                .files
                .push((f.name.clone(), f.lines.len() as u64, cp.ts.clone(), cp.why));
            before = Some((chain, cp.why == SealReason::Rotation));
        }
        Ok(summary)
    }

    /// The file's checkpoint, signed with `key`, and its own chain value.
    fn checkpoint(
        &self,
        f: &EvidenceFile,
        key: &VerifyingKey,
    ) -> Result<(Checkpoint, String), EvidenceProblem> {
        let line = f.checkpoint.index + 1;
        let bad = |why: &str| EvidenceProblem::Malformed {
            file: f.name.clone(),
            line,
            why: why.to_string(),
        };
        let (content, chain) =
            split_line(&f.checkpoint.line).ok_or_else(|| bad("not an audit line"))?;
        let cp: Checkpoint = serde_json::from_str(&content).map_err(|_| bad("not a checkpoint"))?;
        if !cp.verify(key) {
            return Err(EvidenceProblem::BadSignature {
                file: f.name.clone(),
                line,
            });
        }
        if cp.format < 3 || cp.lines != f.checkpoint.index || digest(&cp.sealed, &content) != chain
        {
            return Err(bad("not a checkpoint with Merkle heads at this place"));
        }
        Ok((cp, chain.to_string()))
    }

    /// Checks the lines of one file and the host's leaf; true when the
    /// file is proven to hold no line of the host.
    fn file_lines(&self, f: &EvidenceFile, cp: &Checkpoint) -> Result<bool, EvidenceProblem> {
        let (Some(tree), Some(hosts_tree)) = (cp.tree_head(), cp.hosts_head()) else {
            return Err(EvidenceProblem::Malformed {
                file: f.name.clone(),
                line: f.checkpoint.index + 1,
                why: "checkpoint without tree heads".into(),
            });
        };
        let last = self.checked_lines(f, cp, &tree)?;
        let given = f.lines.len() as u64;
        let cp_line = f.checkpoint.index + 1;
        let Some(leaf) = &f.host_leaf else {
            if given > 0 {
                return Err(EvidenceProblem::Count {
                    file: f.name.clone(),
                    line: cp_line,
                    committed: 0,
                    given,
                });
            }
            return self.absence(f, cp, &hosts_tree);
        };
        if leaf.seq != given {
            return Err(EvidenceProblem::Count {
                file: f.name.clone(),
                line: cp_line,
                committed: leaf.seq,
                given,
            });
        }
        let fits = self.leaf_fits(leaf, cp, last.as_ref(), &hosts_tree);
        if !fits {
            return Err(EvidenceProblem::HostLeaf {
                file: f.name.clone(),
                line: leaf.last_index + 1,
            });
        }
        Ok(false)
    }

    /// Each line of one file: in order, proven in the file's tree, the
    /// host's, numbered without a gap. The last line's index and chain.
    fn checked_lines(
        &self,
        f: &EvidenceFile,
        cp: &Checkpoint,
        tree: &[u8; 32],
    ) -> Result<Option<(u64, String)>, EvidenceProblem> {
        let mut last: Option<(u64, String)> = None;
        for (k, pl) in f.lines.iter().enumerate() {
            let line = pl.index + 1;
            let (content, chain) =
                split_line(&pl.line).ok_or_else(|| EvidenceProblem::Malformed {
                    file: f.name.clone(),
                    line,
                    why: "not an audit line".into(),
                })?;
            let v: serde_json::Value = serde_json::from_str(&content).unwrap_or_default();
            let id = v["id"].as_str().unwrap_or("?").to_string();
            let in_order = last.as_ref().is_none_or(|(i, _)| pl.index > *i);
            let proven = in_order
                && line_leaf(pl, cp.format, &content, chain).is_some_and(|leaf| {
                    hashes(&pl.proof).is_some_and(|path| {
                        verify_inclusion(pl.index, cp.lines, &leaf, &path, tree)
                    })
                });
            if !proven {
                return Err(EvidenceProblem::NotInLog {
                    file: f.name.clone(),
                    line,
                    id,
                });
            }
            if v["host"].as_str() != Some(self.host.as_str()) {
                return Err(EvidenceProblem::OtherHost {
                    file: f.name.clone(),
                    line,
                    host: self.host.clone(),
                });
            }
            let expected = k as u64 + 1;
            // Lines written before `host_seq` existed are numbered by place.
            if let Some(found) = v["host_seq"].as_u64().filter(|s| *s != expected) {
                return Err(EvidenceProblem::LeftOut {
                    file: f.name.clone(),
                    line,
                    expected,
                    found,
                });
            }
            last = Some((pl.index, chain.to_string()));
        }
        Ok(last)
    }

    /// Whether the host's leaf commits to `last`, the file's last line of
    /// the host, in the checkpoint's host tree.
    fn leaf_fits(
        &self,
        leaf: &HostProof,
        cp: &Checkpoint,
        last: Option<&(u64, String)>,
        hosts_tree: &[u8; 32],
    ) -> bool {
        last.is_some_and(|(index, chain)| {
            *index == leaf.last_index
                && hashes(&leaf.proof).is_some_and(|path| {
                    let entry = host_leaf(&self.host, leaf.seq, leaf.last_index, chain);
                    let h = match cp.format {
                        3 => Some(entry),
                        _ => leaf
                            .next
                            .as_deref()
                            .and_then(unhex::<32>)
                            .map(|next| linked_leaf(&host_key(&self.host), &next, &entry)),
                    };
                    h.is_some_and(|h| {
                        verify_inclusion(
                            leaf.position,
                            cp.hosts.unwrap_or(0),
                            &h,
                            &path,
                            hosts_tree,
                        )
                    })
                })
        })
    }

    /// A file where the evidence holds no line of the host: from format 4
    /// its checkpoint proves that (a leaf enclosing the host's key, or no
    /// host at all), or the lines were removed; format 3 cannot tell.
    fn absence(
        &self,
        f: &EvidenceFile,
        cp: &Checkpoint,
        hosts_tree: &Hash,
    ) -> Result<bool, EvidenceProblem> {
        if cp.format < 4 {
            return Ok(false);
        }
        let hosts = cp.hosts.unwrap_or(0);
        let own = host_key(&self.host);
        let proven = hosts == 0
            || f.absent.as_ref().is_some_and(|a| {
                let (Some(key), Some(next), Some(entry), Some(path)) = (
                    unhex::<32>(&a.key),
                    unhex::<32>(&a.next),
                    unhex::<32>(&a.entry),
                    hashes(&a.proof),
                ) else {
                    return false;
                };
                encloses(&key, &next, &own)
                    && verify_inclusion(
                        a.position,
                        hosts,
                        &linked_leaf(&key, &next, &entry),
                        &path,
                        hosts_tree,
                    )
            });
        if !proven {
            return Err(EvidenceProblem::NotShownAbsent {
                file: f.name.clone(),
                line: f.checkpoint.index + 1,
                host: self.host.clone(),
            });
        }
        Ok(true)
    }
}

mod builder;
mod witnessed;

#[cfg(test)]
#[path = "evidence/tests.rs"]
mod tests;
