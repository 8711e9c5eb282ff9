//! A small, fast, seedable generator (SplitMix64). Every random choice in the simulator
//! draws from one of these, seeded from the run's `seed`, so that a run is reproducible
//! byte for byte on any machine (no dependence on a library's algorithm changing).

/// SplitMix64's output function (a bijective 64-bit mixer).
#[inline]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

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
    ///
    /// The starting state is a hash of both: with `seed ^ stream * gamma`, streams whose
    /// numbers differ by a small amount started a few steps apart on the same sequence
    /// (threads 0 and 1 of a workload drew nearly the same random addresses, one draw
    /// apart).
    pub fn derive(seed: u64, stream: u64) -> Self {
        SplitMix64::new(mix(seed ^ mix(stream.wrapping_add(0x6A09_E667_F3BC_C909))))
    }
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.state)
    }
    /// Uniform in `0..n` (n > 0), by multiply-shift (Lemire), without a division.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Neighbouring streams share no draws (they used to be the same sequence one step apart).
    #[test]
    fn derived_streams_are_unrelated() {
        let draws = |stream: u64| -> Vec<u64> {
            let mut r = SplitMix64::derive(1, stream);
            (0..64).map(|_| r.next_u64()).collect()
        };
        let (a, b) = (draws(0x7468_7264), draws(0x7468_7265));
        assert!(a.iter().all(|x| !b.contains(x)));
    }
}
