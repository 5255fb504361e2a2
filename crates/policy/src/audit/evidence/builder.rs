//! How [`EvidenceBuilder`] reads a log: each file's trees rebuilt line by
//! line, the host's lines kept with the chain value before each, and at
//! the file's end the proofs against its last checkpoint.

use super::super::checkpoint::{hex, Checkpoint};
use super::super::merkle::{chain_leaf, leaf_hash, Tree};
use super::super::midstate::chain_state;
use super::super::split_line;
use super::super::trees::{is_checkpoint, FileTrees, HostEntry};
use super::{
    AbsentProof, Building, Evidence, EvidenceBuilder, EvidenceFile, HostProof, IndexedLine,
    ProvenLine, EVIDENCE_FORMAT,
};

impl EvidenceBuilder {
    /// A builder for `host`.
    pub fn new(host: &str) -> EvidenceBuilder {
        EvidenceBuilder {
            host: host.to_string(),
            key: None,
            files: Vec::new(),
            cur: None,
        }
    }

    /// Begins the next file of the log.
    pub fn start_file(&mut self, name: &str) -> Result<(), String> {
        self.end_file()?;
        self.cur = Some(Building {
            name: name.to_string(),
            leaves: Vec::new(),
            texts: Vec::new(),
            trees: FileTrees::verifying(),
            prev: None,
            mine: Vec::new(),
            last: None,
        });
        Ok(())
    }

    /// Reads one line (without its newline). The log is taken as it is:
    /// `audit verify` is what checks it; a line the trees cannot take is
    /// an error naming it.
    pub fn line(&mut self, text: &str) -> Result<(), String> {
        let host = self.host.clone();
        let Some(b) = self.cur.as_mut() else {
            return Err("no file started".into());
        };
        let index = b.leaves.len() as u64;
        let at = |name: &str| format!("{name}: line {}", index + 1);
        let (content, chain) =
            split_line(text).ok_or_else(|| format!("{}: not an audit line", at(&b.name)))?;
        if is_checkpoint(&content) {
            let cp: Checkpoint = serde_json::from_str(&content)
                .map_err(|e| format!("{}: checkpoint does not parse: {e}", at(&b.name)))?;
            let head = b.trees.line_head(cp.format);
            if cp.format >= 3 && cp.tree.as_deref() != Some(hex(&head).as_str()) {
                return Err(format!(
                    "{}: the checkpoint's tree head is not that of the lines before it; run `mannerly audit verify`",
                    at(&b.name)
                ));
            }
            let (leaf, absent) = proofs(&mut b.trees, &host, cp.format);
            self.key = Some(cp.key.clone());
            b.last = Some((
                IndexedLine {
                    index,
                    line: text.to_string(),
                },
                leaf,
                absent,
            ));
            b.trees.checkpoint(text, chain);
        } else if b.trees.line(text, &content, chain).as_deref() == Some(host.as_str()) {
            b.mine.push((index, text.to_string(), b.prev.clone()));
        }
        b.leaves.push(chain_leaf(chain));
        b.texts.push(leaf_hash(text.as_bytes()));
        b.prev = Some(chain.to_string());
        Ok(())
    }

    fn end_file(&mut self) -> Result<(), String> {
        let Some(b) = self.cur.take() else {
            return Ok(());
        };
        let Some((checkpoint, host_leaf, absent)) = b.last else {
            return Err(format!(
                "{}: no checkpoint: nothing in it is sealed",
                b.name
            ));
        };
        let cp: Option<Checkpoint> =
            split_line(&checkpoint.line).and_then(|(c, _)| serde_json::from_str(&c).ok());
        if cp.as_ref().map_or(0, |c| c.format) < 3 {
            return Err(format!(
                "{}: its last checkpoint (line {}) has no Merkle heads (written before checkpoint format 3); evidence can be given for files sealed since",
                b.name,
                checkpoint.index + 1
            ));
        }
        let sealed = checkpoint.index as usize;
        let (format, continues) = cp.map_or((0, None), |c| (c.format, c.continues));
        let leaves = if format >= 5 { b.leaves } else { b.texts };
        let mut tree = Tree::from_leaves(leaves[..sealed].to_vec());
        let lines = b
            .mine
            .iter()
            .filter(|(i, ..)| *i < sealed as u64)
            .map(|(i, l, prev)| ProvenLine {
                index: *i,
                line: l.clone(),
                proof: tree.proof(*i as usize).iter().map(|h| hex(h)).collect(),
                state: (format >= 5)
                    .then(|| {
                        prev.as_ref()
                            .or(continues.as_ref())
                            .and_then(|p| chain_state(p))
                    })
                    .flatten()
                    .map(|s| hex(&s)),
            })
            .collect();
        let unsealed = b.mine.iter().filter(|(i, ..)| *i > sealed as u64).count() as u64;
        self.files.push(EvidenceFile {
            name: b.name,
            checkpoint,
            lines,
            host_leaf,
            absent,
            unsealed,
        });
        Ok(())
    }

    /// The evidence.
    pub fn finish(mut self) -> Result<Evidence, String> {
        self.end_file()?;
        Ok(Evidence {
            format: EVIDENCE_FORMAT.to_string(),
            host: self.host,
            key: self.key.unwrap_or_default(),
            files: self.files,
        })
    }
}

/// The host's leaf and its audit path in the host tree of a checkpoint
/// of `format`, or, from format 4, the leaf that proves it has none.
fn proofs(
    trees: &mut FileTrees,
    host: &str,
    format: u32,
) -> (Option<HostProof>, Option<AbsentProof>) {
    let path = |trees: &mut FileTrees, e: &HostEntry| -> Vec<String> {
        let path = match format {
            3 => trees.format3_proof(e.position),
            _ => trees.host_proof(e.position),
        };
        path.iter().map(|h| hex(h)).collect()
    };
    if let Some(e) = trees.host(host).cloned() {
        let leaf = HostProof {
            position: e.position as u64,
            seq: e.seq,
            last_index: e.last_index,
            proof: path(trees, &e),
            next: (format >= 4).then(|| hex(&e.next)),
        };
        return (Some(leaf), None);
    }
    let absent = trees.enclosing(host).cloned().filter(|_| format >= 4);
    let absent = absent.map(|e| AbsentProof {
        position: e.position as u64,
        key: hex(&e.key),
        next: hex(&e.next),
        entry: hex(&e.entry),
        proof: path(trees, &e),
    });
    (None, absent)
}
