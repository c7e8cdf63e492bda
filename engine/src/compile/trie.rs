//! A digit trie for telephone-number prefixes: an arena of fixed-fanout, path-compressed nodes.
//!
//! Walking a number reports the entries stored at every prefix of it, so lookup cost grows
//! with the number's length, never with the number of prefixes. Carrier policies hold
//! thousands of long prefixes that share a few country codes and then run apart, so most of the
//! tree is single-child chains; [`TrieBuilder::build`] folds each chain into the label of the
//! node it leads to. A walk then visits one node per branching point (typically 4–5 for a
//! 10,000-prefix policy) instead of one per digit, and each node is one cache line, which is
//! what the walk costs on a large policy: one cache miss per node.
//!
//! Characters other than 0–9 end a walk (`*`, `#` and hex digits never start a stored prefix
//! here, since policy prefixes are checked to be decimal).

const NONE: u32 = u32::MAX;
const MAX_LABEL: usize = 14;

/// Collects prefixes; [`TrieBuilder::build`] packs them.
#[derive(Clone, Debug)]
pub struct TrieBuilder {
    nodes: Vec<BuildNode>,
}

#[derive(Clone, Debug)]
struct BuildNode {
    children: [u32; 10],
    entries: Vec<u32>,
}

impl BuildNode {
    fn new() -> Self {
        Self {
            children: [NONE; 10],
            entries: Vec::new(),
        }
    }
}

impl Default for TrieBuilder {
    fn default() -> Self {
        Self {
            nodes: vec![BuildNode::new()],
        }
    }
}

impl TrieBuilder {
    /// Stores `value` under `digits` (decimal digits only; anything else is skipped).
    pub fn insert(&mut self, digits: &[u8], value: u32) {
        let mut at = 0usize;
        for d in digits.iter().filter(|d| d.is_ascii_digit()) {
            let slot = usize::from(d - b'0');
            let next = self.nodes[at].children[slot];
            at = if next == NONE {
                let n = self.nodes.len();
                self.nodes.push(BuildNode::new());
                self.nodes[at].children[slot] = n as u32;
                n
            } else {
                next as usize
            };
        }
        let entries = &mut self.nodes[at].entries;
        if entries.last() != Some(&value) {
            entries.push(value);
        }
    }

    /// Packs the prefixes into a path-compressed [`DigitTrie`].
    pub fn build(self) -> DigitTrie {
        let mut trie = DigitTrie {
            nodes: Vec::new(),
            entries: Vec::new(),
        };
        let root = trie.push(&self.nodes[0], &[]);
        debug_assert_eq!(root, 0);
        // (build node, packed node) pairs whose children still need packing.
        let mut work = vec![(0usize, 0usize)];
        while let Some((b, p)) = work.pop() {
            for slot in 0..10 {
                let mut child = self.nodes[b].children[slot];
                if child == NONE {
                    continue;
                }
                // Follow the single-child chain below this edge, collecting its digits.
                let mut label = Vec::new();
                loop {
                    let node = &self.nodes[child as usize];
                    let mut kids = node
                        .children
                        .iter()
                        .enumerate()
                        .filter(|(_, c)| **c != NONE);
                    let only = match (kids.next(), kids.next()) {
                        (Some((d, &c)), None) => Some((d, c)),
                        _ => None,
                    };
                    match only {
                        Some((d, c)) if node.entries.is_empty() && label.len() < MAX_LABEL => {
                            label.push(d as u8);
                            child = c;
                        }
                        _ => break,
                    }
                }
                let packed = trie.push(&self.nodes[child as usize], &label);
                trie.nodes[p].children[slot] = packed as u32;
                work.push((child as usize, packed));
            }
        }
        trie
    }
}

/// One node: its children by next digit, the digits every path through it must match first
/// (the folded chain), and where its entries are.
#[derive(Clone, Debug)]
#[repr(align(64))]
struct Node {
    children: [u32; 10],
    entries_start: u32,
    entries_len: u16,
    label_len: u8,
    label: [u8; MAX_LABEL],
}

/// Prefix → rule indices, packed for lookups.
#[derive(Clone, Debug)]
pub struct DigitTrie {
    nodes: Vec<Node>,
    entries: Vec<u32>,
}

impl Default for DigitTrie {
    fn default() -> Self {
        TrieBuilder::default().build()
    }
}

impl DigitTrie {
    fn push(&mut self, from: &BuildNode, label: &[u8]) -> usize {
        let mut packed = Node {
            children: [NONE; 10],
            entries_start: self.entries.len() as u32,
            entries_len: from.entries.len().min(usize::from(u16::MAX)) as u16,
            label_len: label.len() as u8,
            label: [0; MAX_LABEL],
        };
        packed.label[..label.len()].copy_from_slice(label);
        self.entries
            .extend_from_slice(&from.entries[..usize::from(packed.entries_len)]);
        self.nodes.push(packed);
        self.nodes.len() - 1
    }

    #[inline]
    fn report(&self, node: &Node, found: &mut impl FnMut(&[u32])) {
        if node.entries_len > 0 {
            let start = node.entries_start as usize;
            found(&self.entries[start..start + usize::from(node.entries_len)]);
        }
    }

    /// Calls `found` with the entries of every stored prefix of `number` (shortest first).
    #[inline]
    pub fn walk(&self, number: &[u8], mut found: impl FnMut(&[u32])) {
        let mut node = &self.nodes[0];
        self.report(node, &mut found);
        let mut i = 0;
        while let Some(&d) = number.get(i) {
            if !d.is_ascii_digit() {
                return;
            }
            let next = node.children[usize::from(d - b'0')];
            if next == NONE {
                return;
            }
            node = &self.nodes[next as usize];
            i += 1;
            let label = &node.label[..usize::from(node.label_len)];
            for &want in label {
                match number.get(i) {
                    Some(&got) if got.wrapping_sub(b'0') == want => i += 1,
                    _ => return,
                }
            }
            self.report(node, &mut found);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walk(t: &DigitTrie, n: &[u8]) -> Vec<u32> {
        let mut seen = Vec::new();
        t.walk(n, |e| seen.extend_from_slice(e));
        seen
    }

    #[test]
    fn walk_reports_every_stored_prefix_in_order() {
        let mut b = TrieBuilder::default();
        b.insert(b"1212", 1);
        b.insert(b"1", 2);
        b.insert(b"1212555", 3);
        b.insert(b"44", 4);
        b.insert(b"1212", 5);
        let t = b.build();
        assert_eq!(walk(&t, b"12125551234"), [2, 1, 5, 3]);
        assert_eq!(walk(&t, b"4420"), [4]);
        assert!(walk(&t, b"33").is_empty());
        assert_eq!(walk(&t, b"12*12"), [2]);
        // Stops inside a folded chain.
        assert_eq!(walk(&t, b"121255"), [2, 1, 5]);
        assert_eq!(walk(&t, b"1212556"), [2, 1, 5]);
        assert!(walk(&DigitTrie::default(), b"123").is_empty());
    }

    #[test]
    fn chains_are_folded_and_long_chains_split() {
        let mut b = TrieBuilder::default();
        b.insert(b"49301234567890123456", 7);
        b.insert(b"493", 8);
        let t = b.build();
        // root → "4"+"93" → "0"+14 digits → "3456" …
        assert!(t.nodes.len() <= 5, "{}", t.nodes.len());
        assert_eq!(walk(&t, b"4930123456789012345678"), [8, 7]);
        assert_eq!(walk(&t, b"493012345678901234"), [8]);
    }

    #[test]
    fn packed_agrees_with_a_scan_on_random_prefixes() {
        let mut state = 0x1234_5678_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let prefixes: Vec<Vec<u8>> = (0..2000)
            .map(|_| {
                let len = 1 + next() % 9;
                (0..len).map(|_| b'0' + (next() % 4) as u8).collect()
            })
            .collect();
        let mut b = TrieBuilder::default();
        for (i, p) in prefixes.iter().enumerate() {
            b.insert(p, i as u32);
        }
        let t = b.build();
        for _ in 0..2000 {
            let len = next() % 12;
            let number: Vec<u8> = (0..len).map(|_| b'0' + (next() % 4) as u8).collect();
            let mut want: Vec<u32> = prefixes
                .iter()
                .enumerate()
                .filter(|(_, p)| number.starts_with(p))
                .map(|(i, _)| i as u32)
                .collect();
            let mut got = walk(&t, &number);
            want.sort_unstable();
            got.sort_unstable();
            assert_eq!(got, want, "{}", String::from_utf8_lossy(&number));
        }
    }
}
