//! The crate's two non-cryptographic hashes, one job each.
//!
//! - [`FxHasher`] (FxHash's mixing), for the compiled indexes and the engine's maps: keys are
//!   inserted only from policies; requests only look up. A request cannot grow a bucket, so
//!   hash flooding by callers is not a concern, and SipHash's cost on every lookup of the hot
//!   path would buy nothing.
//! - [`fnv1a`], for keys that must be the same in every process and every build (a rule's
//!   key in a shared cell table, a next hop's key in the shared hop table): FNV-1a's constants
//!   are fixed by its definition, not by the standard library or a random seed.

use std::hash::{BuildHasherDefault, Hasher};

/// The hasher state.
#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher {
    hash: u64,
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

/// A `HashMap` using [`FxHasher`].
pub(crate) type FxHashMap<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// FNV-1a (64-bit) state: [`Fnv1a::OFFSET`] to start, [`Fnv1a::bytes`] or `write!` to add.
pub(crate) struct Fnv1a(pub(crate) u64);

impl Fnv1a {
    /// The 64-bit offset basis.
    pub(crate) const OFFSET: Fnv1a = Fnv1a(0xcbf2_9ce4_8422_2325);

    #[inline]
    pub(crate) fn bytes(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

impl std::fmt::Write for Fnv1a {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.bytes(s.as_bytes());
        Ok(())
    }
}

/// FNV-1a of `bytes`.
#[inline]
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h = Fnv1a::OFFSET;
    h.bytes(bytes);
    h.0
}

#[cfg(test)]
mod tests {
    #[test]
    fn fnv1a_matches_its_published_test_vectors() {
        // the FNV authors' 64-bit FNV-1a vectors (www.isthe.com/chongo/tech/comp/fnv)
        assert_eq!(super::fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(super::fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(super::fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }
}
