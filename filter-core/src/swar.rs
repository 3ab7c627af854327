//! Branch-free matching of one fingerprint against every slot of a bucket:
//! SWAR ("SIMD within a register") over the bucket's 64-bit words.
//!
//! A bucket of `S` fingerprints of `F::BITS` bits is read as
//! `ceil(S * F::BYTES / 8)` little-endian 64-bit words, `64 / F::BITS` lanes
//! each (the layout of [`crate::layout`], so on little-endian targets the
//! packing compiles to plain word loads). Each word is XORed with the
//! fingerprint repeated in every lane, which turns the slots that hold it
//! into zero lanes, and the zero lanes are found with an exact test:
//!
//! ```text
//! low  = every lane's bits but its top bit  (0x7f7f…, 0x7fff…, 0x7fffffff…)
//! tops = the top bit of every lane that holds a slot
//! zero = !(((x & low) + low) | x) & tops
//! ```
//!
//! `(x & low) + low` cannot carry out of a lane (at most `2·low < 2^BITS`),
//! and its top bit is set exactly when the lane's low bits are not all zero;
//! OR-ing `x` adds the lane's own top bit. So bit `BITS - 1` of a lane of
//! `zero` is set if and only if that lane of `x` is zero, whatever the
//! neighbouring lanes hold. (The classic `(x - 0x01…) & !x & 0x80…` is exact
//! only for "is there any zero lane": a borrow out of a zero lane can mark
//! the lane above it, which would miscount and mislocate slots.) `tops`
//! keeps only those top bits, and leaves out the lanes past the bucket's
//! last slot when it fills less than a word, so searching for the empty
//! fingerprint never reports padding.
//!
//! Everything is straight-line code over constants known at compile time:
//! no branch depends on the bucket's contents, which is what lets a lookup
//! load both of its buckets before looking at either, and what keeps the
//! eBPF verifier's path count low.

use crate::fingerprint::Fingerprint;

/// Words of the widest bucket: 8 slots of 32 bits.
const MAX_WORDS: usize = 4;

/// Which slots of a bucket matched: the top bit of each matching lane, per
/// word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlotMatches<F> {
    lanes: [u64; MAX_WORDS],
    fingerprint: core::marker::PhantomData<F>,
}

/// Number of 64-bit words a bucket of `slots` fingerprints spans.
#[inline(always)]
const fn word_count(bits: u32, slots: usize) -> usize {
    (slots * bits as usize).div_ceil(64)
}

/// Bit 0 of every lane.
#[inline(always)]
const fn lane_ones(bits: u32) -> u64 {
    u64::MAX / (u64::MAX >> (64 - bits))
}

/// The top bit of each lane that holds a slot of the bucket, in any of its
/// words: a bucket of under 64 bits fills the low part of one word, a
/// larger one whole words (slots are 1, 2, 4 or 8 of 8, 16 or 32 bits).
#[inline(always)]
const fn slot_lane_tops(bits: u32, slots: usize) -> u64 {
    let tops = lane_ones(bits) << (bits - 1);
    let used_bits = slots * bits as usize;
    if used_bits >= 64 {
        tops
    } else {
        tops & ((1u64 << used_bits) - 1)
    }
}

/// The bucket as little-endian words (slot `i` at bits `i * BITS ..`).
#[inline(always)]
fn bucket_words<F: Fingerprint, const S: usize>(bucket: &[F; S]) -> [u64; MAX_WORDS] {
    let mut words = [0u64; MAX_WORDS];
    for (index, slot) in bucket.iter().enumerate() {
        let bit = index * F::BITS as usize;
        if let Some(word) = words.get_mut(bit / 64) {
            *word |= u64::from(slot.to_u32()) << (bit % 64);
        }
    }
    words
}

/// The slots of `bucket` holding `fingerprint` (which may be `F::EMPTY`, to
/// find free slots).
#[inline(always)]
pub(crate) fn slot_matches<F: Fingerprint, const S: usize>(
    bucket: &[F; S],
    fingerprint: F,
) -> SlotMatches<F> {
    let ones = lane_ones(F::BITS);
    let low = !(ones << (F::BITS - 1));
    let tops = slot_lane_tops(F::BITS, S);
    let repeated = ones.wrapping_mul(u64::from(fingerprint.to_u32()));
    let mut lanes = [0u64; MAX_WORDS];
    let words = bucket_words(bucket);
    for (lane, word) in lanes.iter_mut().zip(words).take(word_count(F::BITS, S)) {
        let x = word ^ repeated;
        *lane = !(((x & low).wrapping_add(low)) | x) & tops;
    }
    SlotMatches {
        lanes,
        fingerprint: core::marker::PhantomData,
    }
}

impl<F: Fingerprint> SlotMatches<F> {
    /// The matches of two buckets together (for [`Self::any`]).
    #[inline(always)]
    pub(crate) fn or(self, other: Self) -> Self {
        let mut lanes = self.lanes;
        for (lane, other) in lanes.iter_mut().zip(other.lanes) {
            *lane |= other;
        }
        Self { lanes, ..self }
    }

    /// Whether any slot matched.
    #[inline(always)]
    pub(crate) fn any(self) -> bool {
        self.lanes.iter().fold(0, |all, &word| all | word) != 0
    }

    /// How many slots matched.
    #[inline(always)]
    pub(crate) fn count(self) -> usize {
        self.lanes
            .iter()
            .map(|word| word.count_ones() as usize)
            .sum()
    }

    /// The first matching slot.
    #[inline(always)]
    pub(crate) fn first(self) -> Option<usize> {
        let lanes_per_word = (64 / F::BITS) as usize;
        self.lanes
            .iter()
            .position(|&word| word != 0)
            .and_then(|index| {
                let word = self.lanes.get(index)?;
                Some(index * lanes_per_word + (word.trailing_zeros() / F::BITS) as usize)
            })
    }
}
