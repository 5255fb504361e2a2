//! What a format-3 checkpoint commits to, kept per file by the writer and
//! recomputed by every verifier: a Merkle tree over the file's lines (so one
//! line can be shown to be in the sealed file without the others), and a
//! tree with one leaf per host (its line count and last line, so a site
//! can be shown that none of its lines was left out).
//!
//! A host's leaf also holds the chain value of its last line, which no one
//! without that line knows: the leaves of other hosts, shown as hashes in a
//! site's proofs, cannot be matched against guessed host names.

use std::collections::HashMap;

use serde::Deserialize;

use super::merkle::{leaf_hash, leaf_hash_of, Frontier, Hash, Tree};

/// A host's entry in the host tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostEntry {
    /// Position of the host's leaf (hosts in the order they first appear).
    pub position: usize,
    /// Lines of this host in the file so far.
    pub seq: u64,
    /// 0-based index (in the file) of the host's last line.
    pub last_index: u64,
}

/// The leaf of a host: its name, line count, last line and that line's chain.
pub(crate) fn host_leaf(host: &str, seq: u64, last_index: u64, last_chain: &str) -> Hash {
    // The name is length-prefixed, so no host name can pose as another's
    // fields whatever bytes it holds. The entry's parts are hashed as they
    // are made, numbers by `itoa`: this runs for every line the proxy
    // writes, and `write!` into a buffer cost half a hash.
    let (mut len, mut seq_text, mut index) = (
        itoa::Buffer::new(),
        itoa::Buffer::new(),
        itoa::Buffer::new(),
    );
    leaf_hash_of(&[
        len.format(host.len()).as_bytes(),
        b":",
        host.as_bytes(),
        b"\n",
        seq_text.format(seq).as_bytes(),
        b"\n",
        index.format(last_index).as_bytes(),
        b"\n",
        last_chain.as_bytes(),
    ])
}

/// Whether a line's content is a checkpoint's (a record's strings have
/// their quotes escaped, so only a checkpoint has this field).
pub(crate) fn is_checkpoint(content: &str) -> bool {
    content.contains("\"outcome\":\"checkpoint\"")
}

/// The heads a checkpoint signs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Heads {
    /// Head of the tree over the lines before the checkpoint.
    pub tree: Hash,
    /// Hosts with lines in the file.
    pub hosts: u64,
    /// Head of the host tree.
    pub hosts_tree: Hash,
}

/// The trees of one file, fed its lines in order.
#[derive(Clone, Debug, Default)]
pub struct FileTrees {
    lines: Frontier,
    hosts: HashMap<String, HostEntry>,
    host_tree: Tree,
}

/// The fields of a record line the trees need.
#[derive(Deserialize)]
struct HostOf<'a> {
    #[serde(borrow, default)]
    host: std::borrow::Cow<'a, str>,
}

impl FileTrees {
    /// The `host_seq` the next line of `host` carries.
    pub fn next_seq(&self, host: &str) -> u64 {
        self.hosts.get(host).map_or(1, |e| e.seq + 1)
    }

    /// Adds a record line of `host` (as written, with its chain value).
    pub fn record(&mut self, host: &str, line: impl AsRef<[u8]>, chain: &str) {
        let index = self.lines.size();
        self.lines.push(leaf_hash(line.as_ref()));
        let seq = self.next_seq(host);
        let leaf = host_leaf(host, seq, index, chain);
        match self.hosts.get_mut(host) {
            Some(e) => {
                e.seq = seq;
                e.last_index = index;
                self.host_tree.set(e.position, leaf);
            }
            None => {
                let position = self.host_tree.push(leaf);
                let entry = HostEntry {
                    position,
                    seq,
                    last_index: index,
                };
                self.hosts.insert(host.to_string(), entry);
            }
        }
    }

    /// Adds a checkpoint line (in the line tree only).
    pub fn checkpoint(&mut self, line: &str) {
        self.lines.push(leaf_hash(line.as_bytes()));
    }

    /// Adds a line read back from a file: a checkpoint or a record.
    /// `chain` is the line's chain value. Returns the host of a record.
    pub fn line(&mut self, line: &str, content: &str, chain: &str) -> Option<String> {
        if is_checkpoint(content) {
            self.checkpoint(line);
            return None;
        }
        let host = serde_json::from_str::<HostOf<'_>>(content)
            .map(|h| h.host.into_owned())
            .unwrap_or_default();
        self.record(&host, line, chain);
        Some(host)
    }

    /// Lines so far.
    pub fn lines(&self) -> u64 {
        self.lines.size()
    }

    /// A host's entry.
    pub fn host(&self, host: &str) -> Option<&HostEntry> {
        self.hosts.get(host)
    }

    /// The audit path of a host's leaf in the host tree as it stands.
    pub fn host_proof(&mut self, position: usize) -> Vec<Hash> {
        self.host_tree.proof(position)
    }

    /// The heads over everything so far.
    pub fn heads(&mut self) -> Heads {
        Heads {
            tree: self.lines.root(),
            hosts: self.host_tree.size() as u64,
            hosts_tree: self.host_tree.root(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::merkle::verify_inclusion;

    /// The leaf is hashed part by part: for short and long names, small
    /// and large numbers, it is the hash of the bytes the format names.
    #[test]
    fn a_host_leaf_hashes_the_same_entry_whatever_the_names_length() {
        for host in ["a.test".to_string(), "h".repeat(600)] {
            for (seq, index) in [(7, 41), (0, 0), (u64::MAX, 1_000_000_007)] {
                let chain = "c".repeat(64);
                let entry = format!("{}:{host}\n{seq}\n{index}\n{chain}", host.len());
                let leaf = host_leaf(&host, seq, index, &chain);
                assert_eq!(leaf, leaf_hash(entry.as_bytes()), "{} {seq}", host.len());
            }
        }
    }

    #[test]
    fn a_host_leaf_follows_its_last_line_and_proves_its_count() {
        let mut t = FileTrees::default();
        t.record("a.test", "l0", "c0");
        t.record("b.test", "l1", "c1");
        assert_eq!(t.next_seq("a.test"), 2);
        t.record("a.test", "l2", "c2");
        t.checkpoint("cp");
        let heads = t.heads();
        assert_eq!(heads.hosts, 2);
        let a = t.host("a.test").cloned().unwrap();
        assert_eq!((a.position, a.seq, a.last_index), (0, 2, 2));
        let path = t.host_proof(a.position);
        let leaf = host_leaf("a.test", 2, 2, "c2");
        assert!(verify_inclusion(0, 2, &leaf, &path, &heads.hosts_tree));
        // A count one short (a line left out) is not what was committed.
        let short = host_leaf("a.test", 1, 0, "c0");
        assert!(!verify_inclusion(0, 2, &short, &path, &heads.hosts_tree));
    }
}
