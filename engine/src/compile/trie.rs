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
///
/// Prefixes are kept in one byte arena and built into the packed trie from sorted order, so
/// building never holds an uncompressed tree (one node per digit would be ~50 MB for 100,000
/// long prefixes).
#[derive(Clone, Debug, Default)]
pub struct TrieBuilder {
    digits: Vec<u8>,
    /// (start in `digits`, length, value), in insertion order.
    items: Vec<(u32, u8, u32)>,
}

impl TrieBuilder {
    /// Stores `value` under `digits` (decimal digits only; anything else is skipped; at most
    /// 255 digits are kept).
    pub fn insert(&mut self, digits: &[u8], value: u32) {
        let start = self.digits.len() as u32;
        self.digits.extend(
            digits
                .iter()
                .filter(|d| d.is_ascii_digit())
                .take(255)
                .map(|d| d - b'0'),
        );
        let len = (self.digits.len() as u32 - start) as u8;
        self.items.push((start, len, value));
    }

    fn key(&self, item: &(u32, u8, u32)) -> &[u8] {
        &self.digits[item.0 as usize..item.0 as usize + usize::from(item.1)]
    }

    /// Packs the prefixes into a path-compressed [`DigitTrie`].
    pub fn build(mut self) -> DigitTrie {
        let mut items = std::mem::take(&mut self.items);
        // Stable: equal prefixes keep their insertion (rule) order.
        items.sort_by(|a, b| self.key(a).cmp(self.key(b)));
        let mut trie = DigitTrie {
            nodes: Vec::new(),
            entries: Vec::new(),
        };
        self.node(&mut trie, &items, 0, &[]);
        trie
    }

    /// Builds the node for `items` (sorted, sharing their first `depth` digits, none shorter),
    /// reached through `label`; returns its index.
    fn node(
        &self,
        trie: &mut DigitTrie,
        items: &[(u32, u8, u32)],
        depth: usize,
        label: &[u8],
    ) -> u32 {
        let ends_here = items
            .iter()
            .take_while(|it| usize::from(it.1) == depth)
            .count();
        let index = trie.nodes.len();
        let start = trie.entries.len();
        for it in &items[..ends_here] {
            if trie.entries.len() == start || trie.entries.last() != Some(&it.2) {
                trie.entries.push(it.2);
            }
        }
        let mut packed = Node {
            children: [NONE; 10],
            entries_start: start as u32,
            entries_len: (trie.entries.len() - start).min(usize::from(u16::MAX)) as u16,
            label_len: label.len() as u8,
            label: [0; MAX_LABEL],
        };
        packed.label[..label.len()].copy_from_slice(label);
        trie.nodes.push(packed);
        let rest = &items[ends_here..];
        let mut i = 0;
        while i < rest.len() {
            let slot = self.key(&rest[i])[depth];
            let j = i + rest[i..]
                .iter()
                .take_while(|it| self.key(it)[depth] == slot)
                .count();
            let group = &rest[i..j];
            // Fold the run of digits every prefix in the group shares (and none ends inside)
            // into the child's label.
            let mut k = depth + 1;
            while k - (depth + 1) < MAX_LABEL && group.iter().all(|it| usize::from(it.1) > k) {
                let c = self.key(&group[0])[k];
                if !group.iter().all(|it| self.key(it)[k] == c) {
                    break;
                }
                k += 1;
            }
            let child_label: Vec<u8> = self.key(&group[0])[depth + 1..k].to_vec();
            let child = self.node(trie, group, k, &child_label);
            trie.nodes[index].children[usize::from(slot)] = child;
            i = j;
        }
        index as u32
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

    /// Calls `found` with the entries stored under exactly `digits` (nothing when `digits`
    /// holds anything but 0–9 or is not stored).
    #[inline]
    pub fn exact(&self, digits: &[u8], mut found: impl FnMut(&[u32])) {
        let mut node = &self.nodes[0];
        let mut i = 0;
        while let Some(&d) = digits.get(i) {
            if !d.is_ascii_digit() {
                return;
            }
            let next = node.children[usize::from(d - b'0')];
            if next == NONE {
                return;
            }
            node = &self.nodes[next as usize];
            i += 1;
            for &want in &node.label[..usize::from(node.label_len)] {
                match digits.get(i) {
                    Some(&got) if got.wrapping_sub(b'0') == want => i += 1,
                    _ => return,
                }
            }
        }
        self.report(node, &mut found);
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
    fn exact_reports_only_the_prefix_itself() {
        let mut b = TrieBuilder::default();
        b.insert(b"1212", 1);
        b.insert(b"1", 2);
        b.insert(b"1212555", 3);
        b.insert(b"1212", 5);
        let t = b.build();
        let exact = |n: &[u8]| {
            let mut seen = Vec::new();
            t.exact(n, |e| seen.extend_from_slice(e));
            seen
        };
        assert_eq!(exact(b"1212"), [1, 5]);
        assert_eq!(exact(b"1"), [2]);
        assert_eq!(exact(b"1212555"), [3]);
        // Ends inside a folded chain, runs past a leaf, or holds a non-digit.
        assert!(exact(b"12125").is_empty());
        assert!(exact(b"12125551").is_empty());
        assert!(exact(b"12a12").is_empty());
        assert!(exact(b"").is_empty());
        assert!(exact(b"9").is_empty());
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
