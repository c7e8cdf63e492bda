//! The server's table of upstream clients: a fixed number of slots, allocated when the server
//! is made, so that no stream of client keys — one-off source addresses included — costs more
//! memory or more than a bounded probe per request, and a new key never displaces a client
//! that is still sending.
//!
//! A key is hashed with a key the process draws at random (SipHash, std's `RandomState`), so
//! a sender cannot choose addresses that crowd one part of the table, and looked for in a
//! window of [`WINDOW`] slots from its hash. A new key takes a free slot of its window, else
//! the slot of the client heard from least recently there if that one is evictable (the
//! caller says which are); else it is not tracked at all.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

/// Slots a key may occupy: the probe of every request is at most this long.
pub(super) const WINDOW: usize = 8;

/// Bytes of a key kept (an IPv6 address with brackets and port is 47). A longer key is told
/// apart from others by its hash, its length and these first bytes.
pub(super) const KEY_BYTES: usize = super::CLIENT_KEY_BYTES;

/// One slot: a client's key and what the server keeps for it.
#[derive(Clone, Debug)]
pub(super) struct Slot<S> {
    /// 0: free (hashes are made odd, so never 0).
    hash: u64,
    len: usize,
    key: [u8; KEY_BYTES],
    pub(super) state: S,
}

/// The table (see the module documentation).
#[derive(Debug)]
pub(super) struct Clients<S> {
    slots: Box<[Slot<S>]>,
    mask: usize,
    hasher: RandomState,
    len: usize,
}

impl<S: Clone + Default> Clients<S> {
    /// A table for at least `capacity` clients (rounded up to a power of two, at least
    /// [`WINDOW`]).
    pub(super) fn new(capacity: usize) -> Clients<S> {
        let n = capacity.max(WINDOW).next_power_of_two();
        let free = Slot {
            hash: 0,
            len: 0,
            key: [0; KEY_BYTES],
            state: S::default(),
        };
        Clients {
            slots: vec![free; n].into_boxed_slice(),
            mask: n - 1,
            hasher: RandomState::new(),
            len: 0,
        }
    }
}

impl<S> Clients<S> {
    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key) | 1
    }

    fn matches(slot: &Slot<S>, hash: u64, key: &[u8]) -> bool {
        let kept = key.len().min(KEY_BYTES);
        slot.hash == hash && slot.len == key.len() && slot.key[..kept] == key[..kept]
    }

    /// The slot holding `key`, if any.
    pub(super) fn find(&self, key: &[u8]) -> Option<usize> {
        let hash = self.hash(key);
        (0..WINDOW)
            .map(|i| (hash as usize).wrapping_add(i) & self.mask)
            .find(|&at| Self::matches(&self.slots[at], hash, key))
    }

    /// A slot for the new `key` (not in the table): a free one of its window, else the one
    /// whose client `last_seen` says was heard from least recently among those `evictable`
    /// allows (its state is replaced by `fresh`). `None`: the window is full of clients that
    /// stay.
    pub(super) fn insert(
        &mut self,
        key: &[u8],
        fresh: S,
        last_seen: impl Fn(&S) -> u64,
        evictable: impl Fn(&S) -> bool,
    ) -> Option<usize> {
        let hash = self.hash(key);
        let window = (0..WINDOW).map(|i| (hash as usize).wrapping_add(i) & self.mask);
        let at = window
            .clone()
            .find(|&at| self.slots[at].hash == 0)
            .or_else(|| {
                window
                    .filter(|&at| evictable(&self.slots[at].state))
                    .min_by_key(|&at| last_seen(&self.slots[at].state))
            })?;
        let slot = &mut self.slots[at];
        if slot.hash == 0 {
            self.len += 1;
        }
        let kept = key.len().min(KEY_BYTES);
        slot.hash = hash;
        slot.len = key.len();
        slot.key = [0; KEY_BYTES];
        slot.key[..kept].copy_from_slice(&key[..kept]);
        slot.state = fresh;
        Some(at)
    }

    /// The state in slot `at` (a slot [`Clients::find`] or [`Clients::insert`] returned).
    pub(super) fn get_mut(&mut self, at: usize) -> &mut S {
        &mut self.slots[at].state
    }

    /// Frees every slot whose state `keep` refuses.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&S) -> bool) {
        for slot in self.slots.iter_mut() {
            if slot.hash != 0 && !keep(&slot.state) {
                slot.hash = 0;
                self.len -= 1;
            }
        }
    }

    /// Clients in the table.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Every client: its key (at most [`KEY_BYTES`] of it) and state, in slot order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&[u8], &S)> {
        self.slots
            .iter()
            .filter(|s| s.hash != 0)
            .map(|s| (&s.key[..s.len.min(KEY_BYTES)], &s.state))
    }

    /// Every client's state, in slot order.
    pub(super) fn states_mut(&mut self) -> impl Iterator<Item = &mut S> {
        self.slots
            .iter_mut()
            .filter(|s| s.hash != 0)
            .map(|s| &mut s.state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_found_again_and_a_full_window_refuses_what_may_not_go() {
        let mut t: Clients<u64> = Clients::new(8);
        let mut at = Vec::new();
        for k in 0..8u64 {
            let key = k.to_be_bytes();
            assert_eq!(t.find(&key), None);
            at.push(t.insert(&key, k, |s| *s, |_| false).expect("a free slot"));
        }
        assert_eq!(t.len(), 8);
        for k in 0..8u64 {
            assert_eq!(t.find(&k.to_be_bytes()), Some(at[k as usize]));
        }
        // Full (eight slots, a window of eight): nothing may go, so a new key is refused...
        assert_eq!(t.insert(b"new", 100, |s| *s, |_| false), None);
        // ...or takes the least recently seen of those that may.
        let slot = t
            .insert(b"new", 100, |s| *s, |s| *s >= 3)
            .expect("evictable");
        assert_eq!(slot, at[3]);
        assert_eq!(t.find(&3u64.to_be_bytes()), None);
        assert_eq!(t.find(b"new"), Some(slot));
        assert_eq!(t.len(), 8);
        t.retain(|s| *s != 100);
        assert_eq!((t.len(), t.find(b"new")), (7, None));
    }

    #[test]
    fn long_keys_are_told_apart() {
        let mut t: Clients<u8> = Clients::new(64);
        let a = [b'a'; 100];
        let mut b = a;
        b[99] = b'b';
        let sa = t.insert(&a, 1, |_| 0, |_| false).expect("free");
        assert_eq!(t.find(&b), None);
        let sb = t.insert(&b, 2, |_| 0, |_| false).expect("free");
        assert_ne!(sa, sb);
        assert_eq!((t.find(&a), t.find(&b)), (Some(sa), Some(sb)));
        assert_eq!(t.iter().count(), 2);
        assert!(t.iter().all(|(k, _)| k.len() == KEY_BYTES));
    }
}
