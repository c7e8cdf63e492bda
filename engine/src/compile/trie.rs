//! A digit trie for telephone-number prefixes: an arena of small, path-compressed nodes.
//!
//! Walking a number reports the entries stored at every prefix of it, so lookup cost grows
//! with the number's length, never with the number of prefixes. Carrier policies hold
//! thousands of long prefixes that share a few country codes and then run apart, so most of the
//! tree is single-child chains; [`TrieBuilder::build`] folds each chain into the label of the
//! node it leads to. A walk then visits one node per branching point (typically 4–5 for a
//! 10,000-prefix policy) instead of one per digit.
//!
//! What a walk costs on a large policy is cache misses, one per node below the few top levels
//! that stay cached, so nodes are small: 16 bytes, four to a cache line. A node's children sit
//! next to each other in the arena, found from one index and a bitmap of the digits present
//! (`first_child + popcount(mask below d)`); the label holds up to `MAX_LABEL` digits, four
//! bits each; a prefix's single entry is stored in the node itself, and only prefixes with
//! several entries point into a side list. A 10,000-prefix trie is then about 200 KB instead of
//! 800 KB with one-line nodes of ten 32-bit child slots, and a walk touches no line outside the
//! nodes for the usual one entry per prefix.
//!
//! Characters other than 0–9 end a walk (`*`, `#` and hex digits never start a stored prefix
//! here, since policy prefixes are checked to be decimal).

use crate::uri::{is_visual_separator, leading_decimal_digits};

/// No entries at a node (see [`Node::entries`]).
const NONE: u32 = u32::MAX;
/// Set in [`Node::entries`]: the rest is a position in [`DigitTrie::lists`].
const LIST: u32 = 1 << 31;
/// Digits a node's label holds (four bits each in [`Node::label`]).
const MAX_LABEL: usize = 10;

/// A run of sorted items (start in the digit arena, length, value).
type Items<'a> = &'a [(u32, u8, u32)];

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
            nodes: vec![Node::EMPTY],
            lists: Vec::new(),
        };
        self.fill(&mut trie, &items, 0, 0);
        trie.nodes.shrink_to_fit();
        trie.lists.shrink_to_fit();
        trie
    }

    /// Fills node `index` (already in the arena, its label set) for `items` (sorted, sharing
    /// their first `depth` digits, none shorter): its entries, then its children, placed next
    /// to each other at the end of the arena.
    fn fill(&self, trie: &mut DigitTrie, items: &[(u32, u8, u32)], depth: usize, index: usize) {
        let ends_here = items
            .iter()
            .take_while(|it| usize::from(it.1) == depth)
            .count();
        // The entries, deduplicated, as a list; folded into the node when there is one.
        let at = trie.lists.len();
        trie.lists.push(0);
        for it in &items[..ends_here] {
            if trie.lists.len() == at + 1 || trie.lists.last() != Some(&it.2) {
                trie.lists.push(it.2);
            }
        }
        trie.nodes[index].entries = match trie.lists[at + 1..] {
            [] => NONE,
            [one] if one & LIST == 0 => one,
            _ => {
                trie.lists[at] = (trie.lists.len() - at - 1) as u32;
                LIST | at as u32
            }
        };
        if trie.nodes[index].entries & LIST == 0 || trie.nodes[index].entries == NONE {
            trie.lists.truncate(at);
        }
        // Group the rest by their next digit; each group becomes a child, the run of digits
        // every prefix in the group shares (and none ends inside) folded into its label.
        let rest = &items[ends_here..];
        // At most one group per digit: (digit, the group, depth after the child's label).
        let mut groups: [(u8, Items<'_>, usize); 10] = [(0, &[], 0); 10];
        let mut count = 0;
        let mut i = 0;
        while i < rest.len() {
            let slot = self.key(&rest[i])[depth];
            let j = i + rest[i..]
                .iter()
                .take_while(|it| self.key(it)[depth] == slot)
                .count();
            let group = &rest[i..j];
            let mut k = depth + 1;
            while k - (depth + 1) < MAX_LABEL && group.iter().all(|it| usize::from(it.1) > k) {
                let c = self.key(&group[0])[k];
                if !group.iter().all(|it| self.key(it)[k] == c) {
                    break;
                }
                k += 1;
            }
            groups[count] = (slot, group, k);
            count += 1;
            i = j;
        }
        let first = trie.nodes.len();
        let mut mask = 0u16;
        let groups = &groups[..count];
        for &(slot, group, k) in groups {
            mask |= 1 << slot;
            let mut child = Node::EMPTY;
            let label = &self.key(&group[0])[depth + 1..k];
            child.label_len = label.len() as u8;
            for (n, &d) in label.iter().enumerate() {
                child.label[n / 2] |= d << (4 * (n % 2));
            }
            trie.nodes.push(child);
        }
        trie.nodes[index].first_child = first as u32;
        trie.nodes[index].mask = mask;
        for (n, &(_, group, k)) in groups.iter().enumerate() {
            self.fill(trie, group, k, first + n);
        }
    }
}

/// One node, 16 bytes: where its children are, which digits they are for, its entries, and
/// the digits every path through it must match first (the folded chain).
#[derive(Clone, Copy, Debug)]
#[repr(C, align(16))]
struct Node {
    /// Index of the child for the lowest digit in `mask`; the others follow in digit order.
    first_child: u32,
    /// [`NONE`]; the one entry stored here; or [`LIST`] | position in [`DigitTrie::lists`]
    /// of a count followed by the entries.
    entries: u32,
    /// Bit `d` set: a child for digit `d`.
    mask: u16,
    label_len: u8,
    /// Label digit `n` in bits `4 * (n % 2)` of byte `n / 2`.
    label: [u8; MAX_LABEL / 2],
}

impl Node {
    const EMPTY: Node = Node {
        first_child: 0,
        entries: NONE,
        mask: 0,
        label_len: 0,
        label: [0; MAX_LABEL / 2],
    };

    /// Matches the label against `number` from `*i` on, advancing `*i`; false on a mismatch or
    /// when the number ends first.
    #[inline(always)]
    fn label_matches(&self, number: &[u8], i: &mut usize) -> bool {
        for n in 0..usize::from(self.label_len) {
            let want = (self.label[n / 2] >> (4 * (n % 2))) & 0xf;
            match number.get(*i) {
                Some(&got) if got.wrapping_sub(b'0') == want => *i += 1,
                _ => return false,
            }
        }
        true
    }
}

/// The number of bits set in each 10-bit child mask: `count_ones` is a dozen and a half
/// instructions on the baseline x86-64 target (no `popcnt`), a table lookup one.
static CHILDREN_BELOW: [u8; 1 << 10] = {
    let mut t = [0; 1 << 10];
    let mut m = 0;
    while m < t.len() {
        t[m] = (m as u32).count_ones() as u8;
        m += 1;
    }
    t
};

/// Prefix → rule indices, packed for lookups.
#[derive(Clone, Debug)]
pub struct DigitTrie {
    /// The root first.
    nodes: Vec<Node>,
    /// For prefixes with several entries: a count, then the entries.
    lists: Vec<u32>,
}

impl Default for DigitTrie {
    fn default() -> Self {
        TrieBuilder::default().build()
    }
}

impl DigitTrie {
    /// No prefix is stored.
    pub fn is_empty(&self) -> bool {
        self.nodes.iter().all(|n| n.entries == NONE)
    }

    #[inline]
    fn report(&self, node: &Node, found: &mut impl FnMut(&[u32])) {
        match node.entries {
            NONE => {}
            e if e & LIST == 0 => found(std::slice::from_ref(&node.entries)),
            e => {
                let at = (e & !LIST) as usize;
                let n = self.lists.get(at).map_or(0, |&n| n as usize);
                if let Some(list) = self.lists.get(at + 1..at + 1 + n) {
                    found(list);
                }
            }
        }
    }

    /// The child of `node` for the ASCII digit `d`, if any.
    #[inline]
    fn child(&self, node: &Node, d: u8) -> Option<&Node> {
        let d = d.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        let bit = 1u16 << d;
        if node.mask & bit == 0 {
            return None;
        }
        let k = CHILDREN_BELOW[usize::from(node.mask & (bit - 1))];
        self.nodes.get(node.first_child as usize + usize::from(k))
    }

    /// Calls `found` with the entries of every stored prefix of `number` (shortest first).
    /// Returns how many digits it read: all of `number` when a stored prefix could have gone
    /// on past it.
    #[inline]
    pub fn walk(&self, number: &[u8], mut found: impl FnMut(&[u32])) -> usize {
        let Some(mut node) = self.nodes.first() else {
            return 0;
        };
        self.report(node, &mut found);
        let mut i = 0;
        while let Some(&d) = number.get(i) {
            let Some(next) = self.child(node, d) else {
                return i;
            };
            node = next;
            i += 1;
            // A mismatch leaves `i` at the digit that differs; running out leaves it at the end.
            if !node.label_matches(number, &mut i) {
                return i;
            }
            self.report(node, &mut found);
        }
        i
    }

    /// [`DigitTrie::walk`] over a number as written (`uri::PeekedNumber::Global`): RFC 3966
    /// visual separators are skipped, and the number ends with `written` or at a `;`. False
    /// when another byte came before the walk ended: then what follows it is unknown and the
    /// walk may have missed longer prefixes; true when the walk saw every prefix there is.
    #[inline]
    pub fn walk_written(&self, written: &[u8], found: impl FnMut(&[u32])) -> bool {
        // The digits, gathered first (runs of them eight at a time: a word is copied whole and
        // as many of its bytes kept as lead with digits), then walked as a canonical number.
        const MAX: usize = 64;
        let mut digits = [0u8; MAX + 8];
        let (mut n, mut r) = (0, 0);
        let read_all = loop {
            if n <= MAX
                && let Some(word) = written
                    .get(r..r + 8)
                    .and_then(|w| <[u8; 8]>::try_from(w).ok())
            {
                digits[n..n + 8].copy_from_slice(&word);
                let k = leading_decimal_digits(u64::from_le_bytes(word));
                n += k;
                r += k;
                if k == 8 {
                    continue;
                }
            }
            match written.get(r) {
                None | Some(b';') => break true,
                Some(&c) if c.is_ascii_digit() && n < MAX => {
                    digits[n] = c;
                    n += 1;
                }
                Some(&c) if is_visual_separator(c) => {}
                Some(_) => break false,
            }
            r += 1;
        };
        // Digits past the first MAX count as a byte the walk could not read.
        let (n, read_all) = if n > MAX { (MAX, false) } else { (n, read_all) };
        let walked = self.walk(&digits[..n], found);
        read_all || walked < n
    }

    /// Calls `found` with the entries stored under exactly `digits` (nothing when `digits`
    /// holds anything but 0–9 or is not stored).
    #[inline]
    pub fn exact(&self, digits: &[u8], mut found: impl FnMut(&[u32])) {
        let Some(mut node) = self.nodes.first() else {
            return;
        };
        let mut i = 0;
        while let Some(&d) = digits.get(i) {
            let Some(next) = self.child(node, d) else {
                return;
            };
            node = next;
            i += 1;
            if !node.label_matches(digits, &mut i) {
                return;
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

    /// Nested prefixes (1, 1212 twice, 1212555) and another country (44).
    fn nested() -> DigitTrie {
        let mut b = TrieBuilder::default();
        b.insert(b"1212", 1);
        b.insert(b"1", 2);
        b.insert(b"1212555", 3);
        b.insert(b"44", 4);
        b.insert(b"1212", 5);
        b.build()
    }

    #[test]
    fn walk_reports_every_stored_prefix_in_order() {
        let t = nested();
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

    /// A walk over a number as written reports what a walk over its digits reports; it says
    /// it saw every prefix unless a byte other than a digit or separator came while prefixes
    /// could still go on.
    #[test]
    fn written_numbers_walk_as_their_digits() {
        let t = nested();
        let written = |n: &[u8]| {
            let mut seen = Vec::new();
            let complete = t.walk_written(n, |e| seen.extend_from_slice(e));
            (seen, complete)
        };
        assert_eq!(written(b"1-212-555-1234"), (walk(&t, b"12125551234"), true));
        assert_eq!(written(b"(121)2.555"), (vec![2, 1, 5, 3], true));
        assert_eq!(written(b"1212;isub=555"), (vec![2, 1, 5], true));
        assert_eq!(
            written(b"4420%31"),
            (vec![4], true),
            "no prefix goes on past 4420"
        );
        assert_eq!(
            written(b"1212%35"),
            (vec![2, 1, 5], false),
            "1212555 might follow"
        );
        assert_eq!(written(b"12:pw"), (vec![2], false));
        assert_eq!(written(b"33"), (vec![], true));
        assert_eq!(written(b""), (vec![], true));
        // Longer than the walk reads: complete only if no prefix went on that far.
        let mut long = TrieBuilder::default();
        long.insert(&[b'1'; 70], 9);
        let long = long.build();
        let mut seen = Vec::new();
        assert!(!long.walk_written(&[b'1'; 72], |e| seen.extend_from_slice(e)));
        assert!(long.walk_written(&[b'2'; 72], |e| seen.extend_from_slice(e)));
        assert!(seen.is_empty());
    }

    #[test]
    fn chains_are_folded_and_long_chains_split() {
        let mut b = TrieBuilder::default();
        b.insert(b"49301234567890123456", 7);
        b.insert(b"493", 8);
        let t = b.build();
        // root → "4"+"93" → "0"+10 digits → "1"+"23456".
        assert_eq!(t.nodes.len(), 4);
        assert_eq!(walk(&t, b"4930123456789012345678"), [8, 7]);
        assert_eq!(walk(&t, b"493012345678901234"), [8]);
    }

    #[test]
    fn nodes_are_a_quarter_of_a_cache_line() {
        assert_eq!(std::mem::size_of::<Node>(), 16);
        assert_eq!(std::mem::align_of::<Node>(), 16);
    }

    #[test]
    fn entries_inline_listed_and_never_truncated() {
        let mut b = TrieBuilder::default();
        b.insert(b"12", 5);
        // A value with the list bit set cannot be folded into the node.
        b.insert(b"13", LIST | 9);
        // More entries under one prefix than a 16-bit count holds.
        for v in 0..70_000 {
            b.insert(b"14", v);
        }
        let t = b.build();
        assert_eq!(walk(&t, b"125"), [5]);
        assert_eq!(walk(&t, b"13"), [LIST | 9]);
        let many = walk(&t, b"149");
        assert_eq!(many.len(), 70_000);
        assert!(many.iter().copied().eq(0..70_000));
        // Only the two that cannot be inline take list space: (1 + 1) + (1 + 70,000) words.
        assert_eq!(t.lists.len(), 70_003);
    }

    #[test]
    fn packed_agrees_with_a_scan_on_random_prefixes() {
        // Dense and short (many branch points, nested prefixes) …
        agrees_with_a_scan(0x1234_5678, 2000, 9, 4);
        // … and sparse and long (chains longer than a label, split over several nodes).
        agrees_with_a_scan(0x9e37_79b9, 300, 30, 10);
    }

    /// `count` random prefixes of 1..=`max_len` digits below `radix`: every walk and exact
    /// lookup reports what a linear scan finds.
    fn agrees_with_a_scan(seed: u64, count: usize, max_len: u64, radix: u64) {
        let mut state = seed;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let prefixes: Vec<Vec<u8>> = (0..count)
            .map(|_| {
                let len = 1 + next() % max_len;
                (0..len).map(|_| b'0' + (next() % radix) as u8).collect()
            })
            .collect();
        let mut b = TrieBuilder::default();
        for (i, p) in prefixes.iter().enumerate() {
            b.insert(p, i as u32);
        }
        let t = b.build();
        for q in 0..4000 {
            // Half the numbers extend a stored prefix, so long walks are exercised too.
            let mut number: Vec<u8> = if q % 2 == 0 {
                prefixes[(next() % count as u64) as usize].clone()
            } else {
                Vec::new()
            };
            let len = next() % (max_len + 3);
            number.extend((0..len).map(|_| b'0' + (next() % radix) as u8));
            let mut want: Vec<u32> = prefixes
                .iter()
                .enumerate()
                .filter(|(_, p)| number.starts_with(p))
                .map(|(i, _)| i as u32)
                .collect();
            let mut got = walk(&t, &number);
            // The same number written with visual separators walks the same.
            let written: Vec<u8> = number
                .iter()
                .flat_map(|&d| {
                    if next() % 3 == 0 {
                        vec![b'-', d]
                    } else {
                        vec![d]
                    }
                })
                .collect();
            let mut seen = Vec::new();
            assert!(t.walk_written(&written, |e| seen.extend_from_slice(e)));
            assert_eq!(seen, got, "{}", String::from_utf8_lossy(&written));
            want.sort_unstable();
            got.sort_unstable();
            assert_eq!(got, want, "{}", String::from_utf8_lossy(&number));
            let mut want_exact: Vec<u32> = prefixes
                .iter()
                .enumerate()
                .filter(|(_, p)| **p == number)
                .map(|(i, _)| i as u32)
                .collect();
            let mut got_exact = Vec::new();
            t.exact(&number, |e| got_exact.extend_from_slice(e));
            want_exact.sort_unstable();
            got_exact.sort_unstable();
            assert_eq!(
                got_exact,
                want_exact,
                "{}",
                String::from_utf8_lossy(&number)
            );
        }
    }
}
