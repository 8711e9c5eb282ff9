//! A small, fast, seedable generator (SplitMix64). Every random choice in the simulator
//! draws from one of these, seeded from the run's `seed`, so that a run is reproducible
//! byte for byte on any machine (no dependence on a library's algorithm changing).

#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }
    /// A generator for a named sub-stream, so that adding a consumer of randomness in one
    /// place does not shift the numbers every other place sees.
    pub fn derive(seed: u64, stream: u64) -> Self {
        let mut s = SplitMix64::new(seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        s.next_u64();
        s
    }
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0), by multiply-shift (Lemire), without a division.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}
