//! Merkle trees as Certificate Transparency has them (RFC 9162 §2.1): a
//! leaf is `SHA-256(0x00 ‖ entry)`, a node `SHA-256(0x01 ‖ left ‖ right)`,
//! and a tree of `n` leaves splits at the largest power of two below `n`.
//! Built level by level, pairing neighbours and carrying an odd last node up
//! unchanged, a tree has that same shape, so its audit paths are RFC 9162's
//! and verify with §2.1.3.2's algorithm.

use sha2::{Digest, Sha256};

/// A node or leaf hash.
pub(crate) type Hash = [u8; 32];

/// The head of a tree with no leaves: SHA-256 of nothing.
pub(crate) fn empty_root() -> Hash {
    Sha256::digest([]).into()
}

/// The hash of one leaf entry.
pub(crate) fn leaf_hash(entry: &[u8]) -> Hash {
    leaf_hash_of(&[entry])
}

/// The hash of the leaf entry that is `parts` one after the other.
pub(crate) fn leaf_hash_of(parts: &[&[u8]]) -> Hash {
    let mut h = Sha256::new();
    h.update([0u8]);
    for part in parts {
        h.update(part);
    }
    h.finalize().into()
}

/// The format-5 leaf of a line: its chain value (which hashed the line
/// after the chain before it), as a leaf. One block to hash, where the
/// line itself was a dozen: the chain already covers every byte of it.
pub(crate) fn chain_leaf(chain: &str) -> Hash {
    let b = chain.as_bytes();
    let nibble = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut raw = [0u8; 32];
    let decoded = b.len() == 64
        && raw.iter_mut().enumerate().all(|(i, out)| {
            match (nibble(b[2 * i]), nibble(b[2 * i + 1])) {
                (Some(hi), Some(lo)) => {
                    *out = hi << 4 | lo;
                    true
                }
                _ => false,
            }
        });
    if decoded {
        leaf_hash(&raw)
    } else {
        // Not a chain value (a line `split_line` refused never gets here):
        // a leaf no chain value has.
        leaf_hash_of(&[b"not a chain value\n", b])
    }
}

/// The hash of an inner node.
pub(crate) fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// An append-only tree that keeps only what its head needs: the roots of
/// the perfect subtrees its size decomposes into (at most 64 hashes).
#[derive(Clone, Debug, Default)]
pub(crate) struct Frontier {
    size: u64,
    /// Subtree roots, largest (leftmost) first.
    peaks: Vec<Hash>,
}

impl Frontier {
    /// Appends one leaf hash.
    pub(crate) fn push(&mut self, leaf: Hash) {
        let mut node = leaf;
        // Every trailing one bit of the old size is a full subtree that the
        // new leaf completes into a larger one.
        let mut merges = self.size.trailing_ones();
        while merges > 0 {
            let left = self.peaks.pop().unwrap_or_default();
            node = node_hash(&left, &node);
            merges -= 1;
        }
        self.peaks.push(node);
        self.size += 1;
    }

    /// Leaves so far.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// The tree head over every leaf so far.
    pub(crate) fn root(&self) -> Hash {
        let mut peaks = self.peaks.iter().rev();
        let Some(last) = peaks.next() else {
            return empty_root();
        };
        peaks.fold(*last, |acc, left| node_hash(left, &acc))
    }
}

/// A tree whose leaves can change: every level is kept, and the nodes over
/// changed leaves are recomputed when the head is asked for, so a change
/// costs one path, not the tree.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tree {
    /// `levels[0]` are the leaves; each level above pairs the one below.
    levels: Vec<Vec<Hash>>,
    dirty: Vec<usize>,
}

impl Tree {
    /// A tree over `leaves`.
    pub(crate) fn from_leaves(leaves: Vec<Hash>) -> Tree {
        let mut t = Tree {
            levels: vec![leaves],
            dirty: Vec::new(),
        };
        t.rebuild();
        t
    }

    fn rebuild(&mut self) {
        self.levels.truncate(1);
        while self.levels[self.levels.len() - 1].len() > 1 {
            let below = &self.levels[self.levels.len() - 1];
            let up = below
                .chunks(2)
                .map(|p| {
                    if p.len() == 2 {
                        node_hash(&p[0], &p[1])
                    } else {
                        p[0]
                    }
                })
                .collect();
            self.levels.push(up);
        }
        self.dirty.clear();
    }

    /// Leaves in the tree.
    pub(crate) fn size(&self) -> usize {
        self.levels.first().map_or(0, Vec::len)
    }

    /// Appends a leaf; returns its index.
    pub(crate) fn push(&mut self, leaf: Hash) -> usize {
        if self.levels.is_empty() {
            self.levels.push(Vec::new());
        }
        self.levels[0].push(leaf);
        let i = self.levels[0].len() - 1;
        self.dirty.push(i);
        i
    }

    /// Replaces leaf `i` (which must exist).
    pub(crate) fn set(&mut self, i: usize, leaf: Hash) {
        if let Some(slot) = self.levels.first_mut().and_then(|l| l.get_mut(i)) {
            *slot = leaf;
            self.dirty.push(i);
        }
    }

    fn refresh(&mut self) {
        if self.dirty.is_empty() {
            return;
        }
        let mut changed = std::mem::take(&mut self.dirty);
        let mut level = 0;
        while self.levels[level].len() > 1 {
            if self.levels.len() == level + 1 {
                self.levels.push(Vec::new());
            }
            let width = self.levels[level].len().div_ceil(2);
            self.levels[level + 1].resize(width, [0; 32]);
            changed.iter_mut().for_each(|i| *i /= 2);
            changed.sort_unstable();
            changed.dedup();
            for &p in &changed {
                let below = &self.levels[level];
                let node = match below.get(2 * p + 1) {
                    Some(right) => node_hash(&below[2 * p], right),
                    None => below[2 * p],
                };
                self.levels[level + 1][p] = node;
            }
            level += 1;
        }
        self.levels.truncate(level + 1);
    }

    /// The tree head.
    pub(crate) fn root(&mut self) -> Hash {
        self.refresh();
        match self.levels.last() {
            Some(top) if top.len() == 1 => top[0],
            _ => empty_root(),
        }
    }

    /// The audit path of leaf `i`, bottom up (RFC 9162 §2.1.3.1).
    pub(crate) fn proof(&mut self, i: usize) -> Vec<Hash> {
        self.refresh();
        let mut path = Vec::new();
        let mut at = i;
        for level in &self.levels {
            if level.len() <= 1 {
                break;
            }
            let sibling = at ^ 1;
            if sibling < level.len() {
                path.push(level[sibling]);
            }
            at /= 2;
        }
        path
    }
}

/// Whether `path` proves that `leaf` is leaf `index` of the tree of `size`
/// leaves whose head is `root` (RFC 9162 §2.1.3.2).
pub(crate) fn verify_inclusion(
    index: u64,
    size: u64,
    leaf: &Hash,
    path: &[Hash],
    root: &Hash,
) -> bool {
    if index >= size {
        return false;
    }
    let (mut fn_, mut sn) = (index, size - 1);
    let mut r = *leaf;
    for p in path {
        if sn == 0 {
            return false;
        }
        if fn_ & 1 == 1 || fn_ == sn {
            r = node_hash(p, &r);
            if fn_ & 1 == 0 {
                while fn_ & 1 == 0 && fn_ != 0 {
                    fn_ >>= 1;
                    sn >>= 1;
                }
            }
        } else {
            r = node_hash(&r, p);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    sn == 0 && r == *root
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::checkpoint::hex;

    /// RFC 9162 §2.1.1, word for word: the definition the trees must equal.
    fn mth(leaves: &[Hash]) -> Hash {
        match leaves.len() {
            0 => empty_root(),
            1 => leaves[0],
            n => {
                let k = 1 << (usize::BITS - (n - 1).leading_zeros() - 1);
                node_hash(&mth(&leaves[..k]), &mth(&leaves[k..]))
            }
        }
    }

    fn leaves(n: usize) -> Vec<Hash> {
        (0..n)
            .map(|i| leaf_hash(format!("line {i}").as_bytes()))
            .collect()
    }

    /// The inputs of the RFC 6962 reference test vectors (the
    /// certificate-transparency project's merkle tree tests).
    fn reference_inputs() -> Vec<Vec<u8>> {
        vec![
            vec![],
            vec![0x00],
            vec![0x10],
            vec![0x20, 0x21],
            vec![0x30, 0x31],
            vec![0x40, 0x41, 0x42, 0x43],
            vec![0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57],
            (0x60..=0x6f).collect(),
        ]
    }

    #[test]
    fn heads_match_the_reference_vectors() {
        let roots = [
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
            "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
            "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
            "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
            "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
        ];
        let inputs = reference_inputs();
        let mut f = Frontier::default();
        for (i, input) in inputs.iter().enumerate() {
            f.push(leaf_hash(input));
            assert_eq!(hex(&f.root()), roots[i], "size {}", i + 1);
        }
        assert_eq!(
            hex(&empty_root()),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn every_tree_shape_agrees_with_the_definition_and_every_path_verifies() {
        for n in 0..70 {
            let l = leaves(n);
            let want = mth(&l);
            let mut f = Frontier::default();
            l.iter().for_each(|h| f.push(*h));
            assert_eq!(f.root(), want, "frontier, size {n}");
            let mut t = Tree::from_leaves(l.clone());
            assert_eq!(t.root(), want, "tree, size {n}");
            let mut grown = Tree::default();
            l.iter().for_each(|h| {
                grown.push(*h);
            });
            assert_eq!(grown.root(), want, "grown, size {n}");
            for (i, leaf) in l.iter().enumerate() {
                let path = t.proof(i);
                let (i64_, n64) = (i as u64, n as u64);
                assert!(
                    verify_inclusion(i64_, n64, leaf, &path, &want),
                    "{i} of {n}"
                );
                let other = leaf_hash(b"another line");
                assert!(!verify_inclusion(i64_, n64, &other, &path, &want));
                // (A path can fit another size too: the size is what the
                // checkpoint signs, not what the path proves.)
                if n > 1 {
                    assert!(!verify_inclusion((i64_ + 1) % n64, n64, leaf, &path, &want));
                }
            }
        }
    }

    #[test]
    fn a_changed_leaf_changes_only_its_path_and_the_head_follows() {
        let mut l = leaves(37);
        let mut t = Tree::from_leaves(l.clone());
        t.root();
        for i in [0, 5, 36, 17, 5] {
            l[i] = leaf_hash(format!("changed {i}").as_bytes());
            t.set(i, l[i]);
            let pushed = leaf_hash(format!("new after {i}").as_bytes());
            l.push(pushed);
            t.push(pushed);
            assert_eq!(t.root(), mth(&l));
            let path = t.proof(i);
            assert!(verify_inclusion(
                i as u64,
                l.len() as u64,
                &l[i],
                &path,
                &mth(&l)
            ));
        }
    }
}
