//! A digit trie for telephone-number prefixes: an arena of fixed-fanout nodes.
//!
//! Walking a number visits one node per digit and reports the entries stored at every prefix
//! of it, so lookup cost grows with the number's length, never with the number of prefixes.
//! Characters other than 0–9 end the walk (`*`, `#` and hex digits never start a stored prefix
//! here, since policy prefixes are checked to be decimal).

const NONE: u32 = u32::MAX;

#[derive(Clone, Debug)]
struct Node {
    children: [u32; 10],
    /// Index into `lists`, or `NONE`.
    entries: u32,
}

impl Node {
    const EMPTY: Node = Node {
        children: [NONE; 10],
        entries: NONE,
    };
}

/// Prefix → rule indices.
#[derive(Clone, Debug)]
pub struct DigitTrie {
    nodes: Vec<Node>,
    lists: Vec<Vec<u32>>,
}

impl Default for DigitTrie {
    fn default() -> Self {
        Self {
            nodes: vec![Node::EMPTY],
            lists: Vec::new(),
        }
    }
}

impl DigitTrie {
    /// Stores `value` under `digits` (decimal digits only; anything else is skipped).
    pub fn insert(&mut self, digits: &[u8], value: u32) {
        let mut at = 0usize;
        for d in digits.iter().filter(|d| d.is_ascii_digit()) {
            let slot = usize::from(d - b'0');
            let next = self.nodes[at].children[slot];
            at = if next == NONE {
                let n = self.nodes.len();
                self.nodes.push(Node::EMPTY);
                self.nodes[at].children[slot] = n as u32;
                n
            } else {
                next as usize
            };
        }
        let list = self.nodes[at].entries;
        if list == NONE {
            self.nodes[at].entries = self.lists.len() as u32;
            self.lists.push(vec![value]);
        } else {
            let l = &mut self.lists[list as usize];
            if l.last() != Some(&value) {
                l.push(value);
            }
        }
    }

    /// Calls `found` with the entries of every stored prefix of `number` (shortest first).
    #[inline]
    pub fn walk(&self, number: &[u8], mut found: impl FnMut(&[u32])) {
        let mut node = &self.nodes[0];
        if node.entries != NONE {
            found(&self.lists[node.entries as usize]);
        }
        for &d in number {
            if !d.is_ascii_digit() {
                return;
            }
            let next = node.children[usize::from(d - b'0')];
            if next == NONE {
                return;
            }
            node = &self.nodes[next as usize];
            if node.entries != NONE {
                found(&self.lists[node.entries as usize]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walk_reports_every_stored_prefix_in_order() {
        let mut t = DigitTrie::default();
        t.insert(b"1212", 1);
        t.insert(b"1", 2);
        t.insert(b"1212555", 3);
        t.insert(b"44", 4);
        t.insert(b"1212", 5);
        let mut seen = Vec::new();
        t.walk(b"12125551234", |e| seen.extend_from_slice(e));
        assert_eq!(seen, [2, 1, 5, 3]);
        seen.clear();
        t.walk(b"4420", |e| seen.extend_from_slice(e));
        assert_eq!(seen, [4]);
        seen.clear();
        t.walk(b"33", |e| seen.extend_from_slice(e));
        assert!(seen.is_empty());
        seen.clear();
        t.walk(b"12*12", |e| seen.extend_from_slice(e));
        assert_eq!(seen, [2]);
    }
}
