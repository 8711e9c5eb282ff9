//! A fast, deterministic hasher for the engine's maps keyed by small integers (address
//! space, page, core): the multiply-rotate hash rustc uses (FxHash). std's default SipHash
//! resists hash flooding, which a simulator's own keys do not need, at several times the
//! cost per lookup; and its per-process random seed makes iteration order differ between
//! runs, which a deterministic simulator must never depend on.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// FxHash: per word, rotate, xor, multiply.
#[derive(Default, Clone, Copy)]
pub struct FxHasher {
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
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(b));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }
    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.add(i as u64);
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(i as u64);
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
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

/// A `HashMap` with [`FxHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;
/// A `HashSet` with [`FxHasher`].
pub type FastSet<K> = HashSet<K, BuildHasherDefault<FxHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_behave_like_std_maps() {
        // Against std's map as the obviously correct model, on colliding-prone keys
        // (pages of one address space at 2 MiB strides).
        let mut fast: FastMap<(u32, u64), u64> = FastMap::default();
        let mut model: HashMap<(u32, u64), u64> = HashMap::new();
        for i in 0..10_000u64 {
            let k = ((i % 7) as u32, (i * 512) % 40_000);
            if i % 3 == 0 {
                assert_eq!(fast.remove(&k), model.remove(&k));
            } else {
                assert_eq!(fast.insert(k, i), model.insert(k, i));
            }
        }
        assert_eq!(fast.len(), model.len());
        for (k, v) in &model {
            assert_eq!(fast.get(k), Some(v));
        }
    }

    #[test]
    fn the_hash_is_the_same_in_every_process() {
        let mut h = FxHasher::default();
        h.write_u32(3);
        h.write_u64(0x1234);
        h.write(b"abcdefghij");
        // Fixed by the algorithm, not by a per-process seed.
        let mut again = FxHasher::default();
        again.write_u32(3);
        again.write_u64(0x1234);
        again.write(b"abcdefghij");
        assert_eq!(h.finish(), again.finish());
        assert_ne!(h.finish(), 0);
    }
}
