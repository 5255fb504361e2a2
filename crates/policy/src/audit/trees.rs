//! What a checkpoint commits to, kept per file by the writer and
//! recomputed by every verifier: a Merkle tree over the file's lines (so one
//! line can be shown to be in the sealed file without the others), and a
//! tree with one leaf per host (its line count and last line, so a site
//! can be shown that none of its lines was left out).
//!
//! A host's entry also holds the chain value of its last line, which no one
//! without that line knows: the entries of other hosts, shown as hashes in a
//! site's proofs, cannot be matched against guessed host names.
//!
//! Since checkpoint format 4 each leaf also carries the host's key
//! (SHA-256 of its name) and the next key in key order (the largest
//! wraps round to the smallest), as DNSSEC's NSEC records do: one leaf
//! whose key and next key enclose a site's key proves that the file holds
//! no line of that site, so "none of my lines" and "my lines were left
//! out" are told apart. Format 3's tree (entries alone, in order of first
//! appearance) is still recomputed where old checkpoints are verified.

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::merkle::{chain_leaf, leaf_hash, leaf_hash_of, Frontier, Hash, Tree};

/// A host's entry in the host tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostEntry {
    /// Position of the host's leaf (hosts in the order they first appear).
    pub position: usize,
    /// Lines of this host in the file so far.
    pub seq: u64,
    /// 0-based index (in the file) of the host's last line.
    pub last_index: u64,
    /// The host's key: SHA-256 of its name.
    pub key: Hash,
    /// The next key among the file's hosts, in key order (wrapping).
    pub next: Hash,
    /// The format-3 leaf: name, count, last line and its chain, hashed.
    pub entry: Hash,
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

/// A host's key in the format-4 host tree.
pub(crate) fn host_key(host: &str) -> Hash {
    let mut h = Sha256::new();
    h.update(b"mannerly host key\n");
    h.update(host.as_bytes());
    h.finalize().into()
}

/// The format-4 leaf of a host: its key, the next key, its entry.
pub(crate) fn linked_leaf(key: &Hash, next: &Hash, entry: &Hash) -> Hash {
    leaf_hash_of(&[b"host4\n", key, next, entry])
}

/// Whether a format-4 leaf with `key` and `next` leaves no room for a host
/// whose key is `x`: `x` falls strictly between them, or, on the leaf that
/// wraps from the largest key to the smallest, above the one or below the
/// other.
pub(crate) fn encloses(key: &Hash, next: &Hash, x: &Hash) -> bool {
    if key < next {
        key < x && x < next
    } else {
        x > key || x < next
    }
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
    /// Head of the host tree (format 4: linked by key).
    pub hosts_tree: Hash,
}

/// The trees of one file, fed its lines in order.
#[derive(Clone, Debug, Default)]
pub struct FileTrees {
    /// The line tree (format 5): a leaf per line, its chain value.
    lines: Frontier,
    /// Formats 3 and 4's line tree (a leaf per line, its text), kept
    /// only where old checkpoints are checked.
    texts: Option<Frontier>,
    /// Position of each host's entry. Looked in for every line written,
    /// so hashed with foldhash, seeded at random per map as the proxy's
    /// host-keyed maps are (`mannerly_state::FastMap`).
    names: HashMap<String, usize, foldhash::fast::RandomState>,
    entries: Vec<HostEntry>,
    /// Positions by key, to find a new host's neighbour.
    order: BTreeMap<Hash, usize>,
    host_tree: Tree,
    /// Format 3's host tree, kept only where old checkpoints are checked.
    format3: Option<Tree>,
    /// Hosts with lines since their leaf was last made: position, name
    /// and last chain value. A leaf is made when a head or proof is asked
    /// for ([`FileTrees::settle`]): a busy host's lines between two
    /// checkpoints cost its leaf once, not once per line.
    stale: Vec<(usize, String, String)>,
    /// Per host position: its place in `stale`, or [`FRESH`].
    stale_at: Vec<u32>,
}

/// A host whose leaf is up to date (see `FileTrees::stale_at`).
const FRESH: u32 = u32::MAX;

/// The fields of a record line the trees need.
#[derive(Deserialize)]
struct HostOf<'a> {
    #[serde(borrow, default)]
    host: std::borrow::Cow<'a, str>,
}

impl FileTrees {
    /// Trees that also keep format 3's host tree, for a verifier of logs
    /// an older version sealed.
    pub fn verifying() -> FileTrees {
        FileTrees {
            texts: Some(Frontier::default()),
            format3: Some(Tree::default()),
            ..FileTrees::default()
        }
    }

    /// The `host_seq` the next line of `host` carries.
    pub fn next_seq(&self, host: &str) -> u64 {
        self.host(host).map_or(1, |e| e.seq + 1)
    }

    /// Adds a record line of `host` (as written, with its chain value).
    pub fn record(&mut self, host: &str, line: impl AsRef<[u8]>, chain: &str) {
        let index = self.lines.size();
        self.push_line(line.as_ref(), chain);
        // One look for the host: a new one's entry starts at seq 0.
        let position = match self.names.get(host) {
            Some(&p) => p,
            None => self.add_host(host),
        };
        let e = &mut self.entries[position];
        (e.seq, e.last_index) = (e.seq + 1, index);
        match self.stale_at[position] {
            FRESH => {
                self.stale_at[position] = self.stale.len() as u32;
                self.stale
                    .push((position, host.to_string(), chain.to_string()));
            }
            at => {
                let last = &mut self.stale[at as usize].2;
                last.clear();
                last.push_str(chain);
            }
        }
    }

    /// Makes the leaves of the hosts with lines since they were last made:
    /// their entries, and their leaves in the host trees.
    fn settle(&mut self) {
        for (position, host, chain) in std::mem::take(&mut self.stale) {
            let e = &mut self.entries[position];
            let entry = host_leaf(&host, e.seq, e.last_index, &chain);
            e.entry = entry;
            self.host_tree
                .set(position, linked_leaf(&e.key, &e.next, &entry));
            if let Some(t) = self.format3.as_mut() {
                t.set(position, entry);
            }
            self.stale_at[position] = FRESH;
        }
    }

    /// Gives a new host its place: after the host with the next smaller
    /// key (or the largest, wrapping), whose next key becomes its own.
    fn add_host(&mut self, host: &str) -> usize {
        let key = host_key(host);
        let position = self.entries.len();
        let before = self
            .order
            .range(..key)
            .next_back()
            .or_else(|| self.order.iter().next_back())
            .map(|(_, &p)| p);
        let next = match before {
            Some(p) => {
                let b = &mut self.entries[p];
                let next = std::mem::replace(&mut b.next, key);
                self.host_tree
                    .set(p, linked_leaf(&b.key, &b.next, &b.entry));
                next
            }
            None => key,
        };
        self.entries.push(HostEntry {
            position,
            seq: 0,
            last_index: 0,
            key,
            next,
            entry: [0; 32],
        });
        self.host_tree.push([0; 32]);
        self.stale_at.push(FRESH);
        if let Some(t) = self.format3.as_mut() {
            t.push([0; 32]);
        }
        self.order.insert(key, position);
        self.names.insert(host.to_string(), position);
        position
    }

    /// Adds a checkpoint line, with its chain value (in the line tree only).
    pub fn checkpoint(&mut self, line: &str, chain: &str) {
        self.push_line(line.as_bytes(), chain);
    }

    fn push_line(&mut self, line: &[u8], chain: &str) {
        self.lines.push(chain_leaf(chain));
        if let Some(t) = self.texts.as_mut() {
            t.push(leaf_hash(line));
        }
    }

    /// Adds a line read back from a file: a checkpoint or a record.
    /// `chain` is the line's chain value. Returns the host of a record.
    pub fn line(&mut self, line: &str, content: &str, chain: &str) -> Option<String> {
        if is_checkpoint(content) {
            self.checkpoint(line, chain);
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

    /// Hosts with lines so far.
    pub fn hosts(&self) -> usize {
        self.entries.len()
    }

    /// A host's entry; its `entry` hash is that of the last head or proof
    /// asked for (the other fields are up to date).
    pub fn host(&self, host: &str) -> Option<&HostEntry> {
        self.names.get(host).map(|&p| &self.entries[p])
    }

    /// The entry of the host whose leaf encloses `host`'s key (format 4),
    /// which proves `host` has no line in the file; `None` when it has.
    pub fn enclosing(&mut self, host: &str) -> Option<&HostEntry> {
        if self.names.contains_key(host) {
            return None;
        }
        self.settle();
        let key = host_key(host);
        let p = self
            .order
            .range(..key)
            .next_back()
            .or_else(|| self.order.iter().next_back())?
            .1;
        Some(&self.entries[*p])
    }

    /// The audit path of a host's leaf in the host tree as it stands.
    pub fn host_proof(&mut self, position: usize) -> Vec<Hash> {
        self.settle();
        self.host_tree.proof(position)
    }

    /// The audit path of a host's leaf in format 3's host tree, where it
    /// is kept ([`FileTrees::verifying`]).
    pub fn format3_proof(&mut self, position: usize) -> Vec<Hash> {
        self.settle();
        self.format3
            .as_mut()
            .map_or_else(Vec::new, |t| t.proof(position))
    }

    /// Head of format 3's host tree, where it is kept.
    pub fn format3_head(&mut self) -> Option<Hash> {
        self.settle();
        self.format3.as_mut().map(Tree::root)
    }

    /// The head of the line tree a checkpoint of `format` signs: from
    /// format 5 over the lines' chain values, before over their text
    /// (kept by [`FileTrees::verifying`] alone).
    pub fn line_head(&self, format: u32) -> Hash {
        match (&self.texts, format) {
            (Some(t), ..=4) => t.root(),
            (None, ..=4) => super::merkle::empty_root(),
            _ => self.lines.root(),
        }
    }

    /// The heads over everything so far, as this version signs them.
    pub fn heads(&mut self) -> Heads {
        self.settle();
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
        t.checkpoint("cp", "c3");
        let heads = t.heads();
        assert_eq!(heads.hosts, 2);
        let a = t.host("a.test").cloned().unwrap();
        assert_eq!((a.position, a.seq, a.last_index), (0, 2, 2));
        let path = t.host_proof(a.position);
        let linked = |seq, index, chain| {
            linked_leaf(&a.key, &a.next, &host_leaf("a.test", seq, index, chain))
        };
        assert!(verify_inclusion(
            0,
            2,
            &linked(2, 2, "c2"),
            &path,
            &heads.hosts_tree
        ));
        // A count one short (a line left out) is not what was committed.
        assert!(!verify_inclusion(
            0,
            2,
            &linked(1, 0, "c0"),
            &path,
            &heads.hosts_tree
        ));
    }

    /// Every absent name is enclosed by exactly one leaf, whose proof
    /// holds; a present name by none; whatever order hosts came in.
    #[test]
    fn the_leaves_link_every_key_so_one_leaf_proves_a_host_absent() {
        let names: Vec<String> = (0..40).map(|i| format!("h{i}.test")).collect();
        let mut t = FileTrees::default();
        assert!(
            t.enclosing("x.test").is_none(),
            "no hosts: nothing encloses"
        );
        for (i, n) in names.iter().enumerate() {
            t.record(n, format!("l{i}"), &format!("c{i}"));
            let heads = t.heads();
            // The links form one ring over every key present.
            let mut keys: Vec<Hash> = names[..=i].iter().map(|n| host_key(n)).collect();
            keys.sort();
            for (j, k) in keys.iter().enumerate() {
                let e = t.entries[t.order[k]].clone();
                assert_eq!(e.next, keys[(j + 1) % keys.len()], "after {i} hosts");
            }
            for absent in ["a.test", "zzz.test", "h99.test", "m.test"] {
                let e = t.enclosing(absent).cloned().unwrap();
                let x = host_key(absent);
                assert!(encloses(&e.key, &e.next, &x), "{absent} after {i} hosts");
                let leaf = linked_leaf(&e.key, &e.next, &e.entry);
                let path = t.host_proof(e.position);
                let size = heads.hosts;
                assert!(verify_inclusion(
                    e.position as u64,
                    size,
                    &leaf,
                    &path,
                    &heads.hosts_tree
                ));
                let others = keys.iter().filter(|k| **k != e.key);
                assert!(others
                    .clone()
                    .all(|k| !encloses(k, &t.entries[t.order[k]].next, &x)));
            }
            assert!(t.enclosing(n).is_none());
            let own = t.host(n).cloned().unwrap();
            assert!(keys
                .iter()
                .all(|k| !encloses(k, &t.entries[t.order[k]].next, &own.key)));
        }
    }
}
