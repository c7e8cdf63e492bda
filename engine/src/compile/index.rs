//! Where rules are found: per header field, the tries and maps of their anchors, and the
//! entry encoding that lets the common rule be checked without reading it.

use super::identity::*;
use super::trie::{DigitTrie, TrieBuilder};
use crate::hash::FxHashMap;
use crate::policy::Field;
use crate::uri::{self, Canonical, Parts, PeekedNumber, SipUserNumbers};

/// Where the anchors of one header field are indexed. Entries are
/// `rule << ENTRY_RULE_SHIFT | method << 1 | sufficient` (see [`entry`]): `sufficient` says a hit
/// alone proves the rule's call-identity matches (the hit identity has no excepts or parameters
/// to compare, and its `<sip>` block tests no other field); `method` lets the common rule be
/// checked from the entry alone, without reading the rule.
///
/// A numeric prefix is found through the tries both ways it can match: by the number's digits
/// (a walk) and by a local number's phone-context naming exactly the prefix (an exact lookup
/// of the context's digits), so only domain prefixes need the `context` map.
#[derive(Debug, Default)]
pub(super) struct FieldIndex {
    pub(super) exact: FxHashMap<Box<[u8]>, Vec<u32>>,
    pub(super) domain: FxHashMap<Box<[u8]>, Vec<u32>>,
    pub(super) context: FxHashMap<Box<[u8]>, Vec<u32>>,
    pub(super) global: DigitTrie,
    pub(super) local: DigitTrie,
}

#[derive(Debug, Default)]
pub(super) struct FieldIndexBuilder {
    pub(super) exact: FxHashMap<Box<[u8]>, Vec<u32>>,
    pub(super) domain: FxHashMap<Box<[u8]>, Vec<u32>>,
    pub(super) context: FxHashMap<Box<[u8]>, Vec<u32>>,
    pub(super) global: TrieBuilder,
    pub(super) local: TrieBuilder,
}

pub(super) fn push_unique(map: &mut FxHashMap<Box<[u8]>, Vec<u32>>, key: &[u8], entry: u32) {
    let list = map.entry(key.into()).or_default();
    if list.last() != Some(&entry) {
        list.push(entry);
    }
}

impl FieldIndexBuilder {
    pub(super) fn insert(&mut self, identity: &CompiledIdentity, entry: u32) {
        match identity {
            CompiledIdentity::One(u) => push_unique(&mut self.exact, &u.key, entry),
            CompiledIdentity::Many {
                domain: Some(d), ..
            } => push_unique(&mut self.domain, d, entry),
            CompiledIdentity::Many { domain: None, .. } => {}
            // Not indexable (see `indexable`): checked for every request.
            CompiledIdentity::ManyTel { prefix: None, .. } => {}
            CompiledIdentity::ManyTel {
                prefix: Some(prefix),
                ..
            } => match prefix.digits() {
                Some(d) if prefix.global => self.global.insert(d, entry),
                Some(d) => self.local.insert(d, entry),
                None => push_unique(&mut self.context, &prefix.context, entry),
            },
        }
    }

    pub(super) fn build(self) -> FieldIndex {
        FieldIndex {
            exact: self.exact,
            domain: self.domain,
            context: self.context,
            global: self.global.build(),
            local: self.local.build(),
        }
    }
}

impl FieldIndex {
    /// How the URIs of a field indexed here may be looked at before they are parsed, given
    /// `parts`, the parts of its canonical form the policy reads on every request.
    pub(super) fn probe(&self, parts: Parts) -> Probe {
        let host = Parts {
            host: true,
            ..Parts::default()
        };
        let number = Parts {
            number: true,
            ..Parts::default()
        };
        let by_host = self.exact.is_empty()
            && self.context.is_empty()
            && self.global.is_empty()
            && self.local.is_empty();
        // Keys, if any, of no number: a number is found by its digits alone.
        let by_global_number = self.domain.is_empty()
            && self.context.is_empty()
            && self.local.is_empty()
            && !self.exact.keys().any(|k| k.starts_with(b"tel:"));
        if by_host && parts == host {
            Probe::Host
        } else if by_global_number
            && (parts == number
                || parts
                    == Parts {
                        key: true,
                        ..number
                    })
        {
            Probe::GlobalNumber
        } else {
            Probe::Parse
        }
    }

    /// What `probe` reads of the URI `text` without parsing it, looked up here: for
    /// [`Peeked::Found`], the entries a lookup of its canonical form would add are added to
    /// `candidates` (valid only if the URI parses). `buf` is scratch space.
    #[inline]
    pub(super) fn peek(
        &self,
        probe: Probe,
        text: &str,
        numbers: SipUserNumbers,
        buf: &mut Vec<u8>,
        candidates: &mut Vec<u32>,
    ) -> Peeked {
        let known = |known: bool| {
            if known {
                Peeked::Parse
            } else {
                Peeked::Nothing
            }
        };
        match probe {
            Probe::Parse => Peeked::Parse,
            Probe::Host => match uri::peek_host(text) {
                Some((host, true)) => known(self.domain.contains_key(host)),
                Some((host, false)) => {
                    buf.clear();
                    buf.extend(host.iter().map(u8::to_ascii_lowercase));
                    known(self.domain.contains_key(&buf[..]))
                }
                None => Peeked::Parse,
            },
            Probe::GlobalNumber => match uri::peek_number(text, numbers) {
                // Found by its key, if at all, which parsing gives.
                PeekedNumber::None => known(!self.exact.is_empty()),
                PeekedNumber::Global(written) => {
                    // A number's key is no key here: its digits find all there is.
                    let before = candidates.len();
                    let complete = self
                        .global
                        .walk_written(written.as_bytes(), |l| candidates.extend_from_slice(l));
                    if !complete {
                        candidates.truncate(before);
                        Peeked::Parse
                    } else if candidates.len() > before {
                        Peeked::Found
                    } else {
                        Peeked::Nothing
                    }
                }
                PeekedNumber::Unsure => Peeked::Parse,
            },
        }
    }

    #[inline]
    pub(super) fn lookup(&self, c: &Canonical<'_, '_>, out: &mut Vec<u32>) {
        if !self.exact.is_empty()
            && let Some(l) = self.exact.get(c.key)
        {
            out.extend_from_slice(l);
        }
        if let Some(host) = c.host
            && !self.domain.is_empty()
            && let Some(l) = self.domain.get(host)
        {
            out.extend_from_slice(l);
        }
        if let Some(n) = c.number {
            if n.global {
                self.global.walk(n.digits, |l| out.extend_from_slice(l));
            } else {
                self.local.walk(n.digits, |l| out.extend_from_slice(l));
                match n.context {
                    Some([b'+', digits @ ..]) => {
                        self.global.exact(digits, |l| out.extend_from_slice(l));
                    }
                    Some(ctx) => {
                        self.local.exact(ctx, |l| out.extend_from_slice(l));
                        if let Some(l) = self.context.get(ctx) {
                            out.extend_from_slice(l);
                        }
                    }
                    None => {}
                }
            }
        }
    }
}

/// How a field's URIs are looked at before they are parsed ([`FieldIndex::probe`]): a URI
/// whose index cannot find a rule by what is read of it brings no candidate, parsed or not,
/// so it is parsed only when a candidate found through another field reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Probe {
    /// Parsed: the field's index finds rules by more than the host or a global number.
    Parse,
    /// Only `many` look at the field (they read the host alone) and its index finds rules by
    /// host alone: the host is read ([`uri::peek_host`]).
    Host,
    /// Only `many-tel` (and `one`) look at the field, and its index finds rules by global
    /// numbers (and keys of URIs that are no number): the number is read
    /// ([`uri::peek_number`]), and a URI without one is parsed if the index has keys.
    GlobalNumber,
}

/// What [`FieldIndex::peek`] tells of a URI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Peeked {
    /// Parse it and look its canonical form up.
    Parse,
    /// It brings no candidate, parsed or not.
    Nothing,
    /// Its candidates were added; they stand if it parses.
    Found,
}

/// The hot part of a rule for candidate checks.
#[derive(Clone, Copy, Debug)]
pub(super) struct RuleMeta {
    /// Bit per [`method_code`] the rule applies to.
    pub(super) methods: u16,
    /// The rule names an extension method (compared as a string).
    pub(super) other_method: bool,
    pub(super) never: bool,
    /// Has validity or a target: check those on the rule itself.
    pub(super) slow: bool,
}

/// A small code per well-known method (bit positions in [`RuleMeta::methods`]).
pub(super) fn method_code(method: &str) -> Option<u8> {
    Some(match method {
        "INVITE" => 0,
        "MESSAGE" => 1,
        "REGISTER" => 2,
        "SUBSCRIBE" => 3,
        "OPTIONS" => 4,
        "PUBLISH" => 5,
        "ACK" => 6,
        "BYE" => 7,
        "CANCEL" => 8,
        "NOTIFY" => 9,
        "INFO" => 10,
        "PRACK" => 11,
        "UPDATE" => 12,
        "REFER" => 13,
        _ => return None,
    })
}

/// The default set (INVITE … PUBLISH) as method bits.
pub(super) const DEFAULT_METHOD_BITS: u16 = 0b11_1111;

/// Where the rule index starts in an index entry.
pub(super) const ENTRY_RULE_SHIFT: u32 = 5;
/// Rules past this index are not indexed (they are checked for every request instead): their
/// index does not fit an entry. No real policy comes near (134 million rules).
pub(super) const ENTRY_MAX_RULE: u32 = u32::MAX >> ENTRY_RULE_SHIFT;
/// Entry method code: the rule applies to the default methods and nothing else is to check.
pub(super) const ENTRY_DEFAULT_METHODS: u32 = 14;
/// Entry method code: check the rule's conditions in full (an extension method, validity, a
/// target, or a rule that never matches).
pub(super) const ENTRY_CHECK: u32 = 15;
// Codes 0..=13 are one well-known method (`method_code`): they must stay below the two above.
const _: () = assert!(13 < ENTRY_DEFAULT_METHODS && ENTRY_CHECK < 1 << (ENTRY_RULE_SHIFT - 1));

/// The index entry of rule `rule` (at most [`ENTRY_MAX_RULE`]) with `meta`: what a candidate
/// check needs when the rule is plain (a well-known method or the default ones, no validity,
/// no target), so that checking it reads no per-rule data.
pub(super) fn entry(rule: u32, meta: &RuleMeta, sufficient: bool) -> u32 {
    let plain = !meta.never && !meta.other_method && !meta.slow;
    let code = match meta.methods {
        _ if !plain => ENTRY_CHECK,
        DEFAULT_METHOD_BITS => ENTRY_DEFAULT_METHODS,
        m if m.count_ones() == 1 => m.trailing_zeros(),
        _ => ENTRY_CHECK,
    };
    rule << ENTRY_RULE_SHIFT | code << 1 | u32::from(sufficient)
}

/// Whether a request with method code `request` passes the method test of an entry with
/// `code`; `None` when the entry says to check the rule in full.
#[inline]
pub(super) fn entry_method_ok(code: u32, request: Option<u8>) -> Option<bool> {
    match code {
        ENTRY_CHECK => None,
        ENTRY_DEFAULT_METHODS => Some(request.is_some_and(|c| DEFAULT_METHOD_BITS & (1 << c) != 0)),
        one => Some(request.is_some_and(|c| u32::from(c) == one)),
    }
}

pub(super) fn field_slot(f: Field) -> usize {
    match f {
        Field::From => 0,
        Field::To => 1,
        Field::RequestUri => 2,
        Field::PAssertedIdentity => 3,
    }
}
