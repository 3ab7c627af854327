//! The keyed hash every filter in this crate is built on.
//!
//! Items are reduced to a 64-bit [`KeyHash`] under a per-filter seed. Two paths
//! lead there and agree with each other byte for byte:
//!
//! * [`KeyedHasher`], a `core::hash::Hasher` (and `hash32::Hasher`) for any
//!   `Hash` item, used by firmware and userspace;
//! * [`hash_words`], a fixed three-word version with no data-dependent loop,
//!   used for network keys (see [`crate::NetKey`]) on the XDP fast path, where
//!   the eBPF verifier must see a bounded, branch-light program.
//!
//! The construction is a multiply-rotate absorb per 64-bit little-endian
//! word, with the state's own product XORed in (so that a difference in
//! the top bit of one word cannot be undone by a fixed difference in the
//! next, whatever the seed), and the MurmurHash3 64-bit finalizer. An
//! input of at most 8 bytes (an integer key) takes a shorter path instead:
//! two 64x64 -> 128-bit folded multiplies of the word, its halves swapped
//! and the seed, as wyhash finishes a short input, where the long path
//! would take three dependent 64-bit multiplies; a lookup's bucket loads
//! wait on the hash, so this is what a lookup of an integer key gains
//! (`BENCHMARKS-filter-core.md`).
//! Longer inputs, network keys among them, keep the long path, which the
//! XDP program computes without a 128-bit product.
//!
//! Both are fast and well distributed, so the measured false-positive rates
//! match theory; neither is a cryptographic PRF, so the seed makes
//! collisions unpredictable to a casual sender but is no defence against an
//! attacker who can query the filter adaptively. Integers are absorbed
//! little-endian on every target, so a hash (and so a snapshot) means the
//! same thing on x86, Cortex-M and BPF; Rust's `u128` gives the short path's
//! product exactly on every target (one instruction on x86-64, a routine
//! over 32-bit halves on Cortex-M).

/// The 64-bit hash of an item under a filter's seed.
///
/// Filters derive their indices from it: the cuckoo filter takes the
/// fingerprint from the low 32 bits and the bucket from the high 32 bits, so
/// the two are independent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct KeyHash(pub u64);

impl KeyHash {
    /// Low 32 bits (fingerprint source).
    #[inline(always)]
    pub const fn low(self) -> u32 {
        self.0 as u32
    }

    /// High 32 bits (bucket source).
    #[inline(always)]
    pub const fn high(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

const SEED_MIX: u64 = 0x243f_6a88_85a3_08d3;
const ABSORB_MUL: u64 = 0x9e37_79b9_7f4a_7c15;
/// Multiplies the state beside each absorbed word (xxHash64's second
/// prime): see [`absorb`].
const STATE_MUL: u64 = 0xc2b2_ae3d_27d4_eb4f;

#[inline(always)]
const fn initial_state(seed: u64) -> u64 {
    seed ^ SEED_MIX
}

/// Absorbs one word: the state XOR the word, multiplied and rotated, XOR
/// the state multiplied by another constant.
///
/// The second product is what keeps keys that differ in two bits apart.
/// The top bit of a product depends on the top bit of its factor alone, so
/// without it a difference in bit 63 of one word would reach the state as
/// a difference in bit 28 alone, whatever the seed, and the same
/// difference in the next word would cancel it: IPv6 keys one bit apart in
/// each half hashed alike (layout version 3). The state's own product
/// carries that difference on in a form that depends on the state's value,
/// which no fixed difference in a word undoes. It is computed beside the
/// first product, not after it, so a word costs one step more of latency,
/// not a multiply more.
#[inline(always)]
const fn absorb(state: u64, word: u64) -> u64 {
    (state ^ word).wrapping_mul(ABSORB_MUL).rotate_left(29) ^ state.wrapping_mul(STATE_MUL)
}

/// MurmurHash3's 64-bit finalizer: every input bit affects every output bit.
#[inline(always)]
pub const fn fmix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// MurmurHash3's 32-bit finalizer.
#[inline(always)]
pub const fn fmix32(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x85eb_ca6b);
    x ^= x >> 13;
    x = x.wrapping_mul(0xc2b2_ae35);
    x ^ (x >> 16)
}

/// Hashes exactly three little-endian words: the same value [`KeyedHasher`]
/// gives for the 24 bytes `w[0] ‖ w[1] ‖ w[2]`, with no loop at all.
#[inline(always)]
pub const fn hash_words(seed: u64, words: &[u64; 3]) -> KeyHash {
    let state = absorb(
        absorb(absorb(initial_state(seed), words[0]), words[1]),
        words[2],
    );
    KeyHash(fmix64(state ^ 24))
}

/// The 64x64 -> 128-bit product of `a` and `b`, its low half XOR its high half.
#[inline(always)]
const fn folded_multiply(a: u64, b: u64) -> u64 {
    let product = (a as u128) * (b as u128);
    (product as u64) ^ ((product >> 64) as u64)
}

/// Odd 64-bit constants with about half their bits set (wyhash's secrets).
const SHORT_MUL: u64 = 0xa076_1d64_78bd_642f;
const SHORT_FOLD: u64 = 0xe703_7ed1_a0b4_28db;

/// Hashes an input of at most 8 bytes: `word` is its bytes little-endian,
/// `len` their count, `state` the hasher's initial state (the seed mixed).
/// The first product multiplies the word by itself with its halves
/// swapped, so every input bit reaches the high half; the second spreads
/// that over all 64 output bits under the seed again.
#[inline(always)]
const fn hash_short(state: u64, word: u64, len: u64) -> KeyHash {
    let mixed = folded_multiply(word ^ state, word.rotate_left(32) ^ SHORT_MUL);
    KeyHash(folded_multiply(mixed ^ SHORT_FOLD ^ len, state ^ SHORT_MUL))
}

/// A seeded streaming hasher for any `core::hash::Hash` item.
///
/// Bytes are gathered into little-endian 64-bit words; `write_u16`/`u32`/`u64`
/// and friends are absorbed little-endian on every target, so results do not
/// depend on the machine (beyond what an item's own `Hash` impl writes:
/// `usize` is as wide as the target's pointer, so prefer fixed-width keys).
/// The last word is absorbed only when more bytes follow or at the end, so
/// an input of at most 8 bytes takes the short path.
#[derive(Clone, Debug)]
pub struct KeyedHasher {
    state: u64,
    tail: u64,
    tail_len: u32,
    total_len: u64,
}

impl KeyedHasher {
    /// A hasher keyed with `seed`.
    pub const fn new(seed: u64) -> Self {
        Self {
            state: initial_state(seed),
            tail: 0,
            tail_len: 0,
            total_len: 0,
        }
    }

    /// Hashes one item.
    pub fn hash_item<T: core::hash::Hash + ?Sized>(seed: u64, item: &T) -> KeyHash {
        let mut hasher = Self::new(seed);
        item.hash(&mut hasher);
        hasher.key_hash()
    }

    /// The hash of everything written so far.
    pub const fn key_hash(&self) -> KeyHash {
        if self.total_len <= 8 {
            return hash_short(self.state, self.tail, self.total_len);
        }
        let state = if self.tail_len > 0 {
            absorb(self.state, self.tail)
        } else {
            self.state
        };
        KeyHash(fmix64(state ^ self.total_len))
    }

    /// Absorbs a full tail before more bytes arrive.
    #[inline(always)]
    fn make_room(&mut self) {
        if self.tail_len == 8 {
            self.state = absorb(self.state, self.tail);
            self.tail = 0;
            self.tail_len = 0;
        }
    }

    #[inline(always)]
    fn push_byte(&mut self, byte: u8) {
        self.make_room();
        self.tail |= u64::from(byte) << (8 * self.tail_len);
        self.tail_len += 1;
    }
}

impl core::hash::Hasher for KeyedHasher {
    fn finish(&self) -> u64 {
        self.key_hash().0
    }

    fn write(&mut self, bytes: &[u8]) {
        self.total_len = self.total_len.wrapping_add(bytes.len() as u64);
        let mut rest = bytes;
        if matches!(self.tail_len, 0 | 8) && !rest.is_empty() {
            self.make_room();
            // Every whole word but the last one of `bytes` (kept as the
            // tail) is absorbed at once.
            let keep = (rest.len() - 1) % 8 + 1;
            let (words, last) = rest
                .split_at_checked(rest.len() - keep)
                .unwrap_or((&[], rest));
            for word in words.chunks_exact(8) {
                let mut le = [0u8; 8];
                le.copy_from_slice(word);
                self.state = absorb(self.state, u64::from_le_bytes(le));
            }
            rest = last;
        }
        for &byte in rest {
            self.push_byte(byte);
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.write(&[i]);
    }

    fn write_u16(&mut self, i: u16) {
        self.write(&i.to_le_bytes());
    }

    fn write_u32(&mut self, i: u32) {
        self.write(&i.to_le_bytes());
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        if matches!(self.tail_len, 0 | 8) {
            self.make_room();
            self.total_len = self.total_len.wrapping_add(8);
            self.tail = i;
            self.tail_len = 8;
        } else {
            self.write(&i.to_le_bytes());
        }
    }

    fn write_u128(&mut self, i: u128) {
        self.write(&i.to_le_bytes());
    }

    fn write_usize(&mut self, i: usize) {
        self.write(&i.to_le_bytes());
    }
}

impl hash32::Hasher for KeyedHasher {
    fn finish32(&self) -> u32 {
        let hash = self.key_hash();
        hash.low() ^ hash.high()
    }
}
