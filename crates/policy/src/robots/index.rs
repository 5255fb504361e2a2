//! Per-group rule index: a byte trie over the literal prefix of each pattern,
//! so a check only looks at rules whose prefix the path starts with instead of
//! scanning the whole group.

use crate::pattern::Pattern;

#[derive(Debug, Clone, Default)]
struct Node {
    /// Sorted by byte; tries built from robots.txt paths are sparse.
    children: Vec<(u8, u32)>,
    /// Rules whose literal prefix ends exactly here (indices into the rule table).
    rules: Vec<u32>,
}

/// What the index needs to know about a rule.
pub(crate) trait IndexedRule {
    fn pattern(&self) -> &Pattern;
    fn allow(&self) -> bool;
}

#[derive(Debug, Clone)]
pub(crate) struct RuleIndex {
    nodes: Vec<Node>,
}

impl RuleIndex {
    pub(crate) fn build<R: IndexedRule>(rules: &[R], members: &[u32]) -> RuleIndex {
        let mut nodes = vec![Node::default()];
        for &id in members {
            let Some(rule) = rules.get(id as usize) else {
                continue;
            };
            let mut at = 0usize;
            for &b in rule.pattern().literal_prefix() {
                at = match nodes[at].children.binary_search_by_key(&b, |c| c.0) {
                    Ok(i) => nodes[at].children[i].1 as usize,
                    Err(i) => {
                        let next = nodes.len();
                        nodes.push(Node::default());
                        nodes[at].children.insert(i, (b, next as u32));
                        next
                    }
                };
            }
            nodes[at].rules.push(id);
        }
        RuleIndex { nodes }
    }

    /// The deciding rule for a normalised path: longest pattern wins, Allow
    /// wins a tie, and among equals the earliest line (lowest id) is reported.
    pub(crate) fn decide<R: IndexedRule>(&self, rules: &[R], path: &[u8]) -> Option<u32> {
        let mut best: Option<(usize, bool, u32)> = None;
        let mut at = 0usize;
        let mut depth = 0usize;
        while let Some(node) = self.nodes.get(at) {
            for &id in &node.rules {
                let Some(rule) = rules.get(id as usize) else {
                    continue;
                };
                let len = rule.pattern().specificity();
                let allow = rule.allow();
                let better = match best {
                    None => true,
                    Some((best_len, best_allow, best_id)) => {
                        len > best_len
                            || (len == best_len
                                && ((allow && !best_allow)
                                    || (allow == best_allow && id < best_id)))
                    }
                };
                if better && rule.pattern().matches_after_prefix(path) {
                    best = Some((len, allow, id));
                }
            }
            let Some(&b) = path.get(depth) else {
                break;
            };
            match node.children.binary_search_by_key(&b, |c| c.0) {
                Ok(i) => at = node.children[i].1 as usize,
                Err(_) => break,
            }
            depth += 1;
        }
        best.map(|(_, _, id)| id)
    }
}
