//! Bloom and counting Bloom filters, for when deletions are not needed (or
//! are rare) and a fixed, tiny, `static` bit array is what fits.
//!
//! Both derive their `HASHES` positions from one [`KeyHash`] by enhanced
//! double hashing (Kirsch and Mitzenmacher): `g_i = h1 + i·h2 + i(i-1)/2`,
//! reduced to the table size by multiply-shift, so any size works, not only
//! powers of two.
//!
//! The counting filter packs 4-bit counters, 16 to a `u64`. A counter that
//! reaches 15 saturates and then *sticks*: it is never decremented again, as
//! its true count is unknown, so a removal can never create a false negative.
//! Removing an item any of whose counters is zero fails and changes nothing.

use crate::hash::{KeyHash, KeyedHasher};
use crate::math::bloom_fpr;

/// Positions probed for `hash` in a table of `size` cells (`size <= 2^32`).
#[inline(always)]
fn probe_positions(hash: KeyHash, size: usize, hashes: u32) -> impl Iterator<Item = usize> {
    let mut position = hash.low();
    let mut step = hash.high();
    (0..hashes).map(move |i| {
        let reduced = ((u64::from(position) * size as u64) >> 32) as usize;
        position = position.wrapping_add(step);
        step = step.wrapping_add(i);
        reduced
    })
}

const fn check_parameters(words: usize, cells_per_word: usize, hashes: u32) {
    assert!(words > 0, "a Bloom filter needs at least one word");
    assert!(
        (words as u64).saturating_mul(cells_per_word as u64) <= 1 << 32,
        "at most 2^32 cells"
    );
    assert!(hashes >= 1 && hashes <= 32, "HASHES must be in 1..=32");
}

/// A Bloom filter of `64 · WORDS` bits and `HASHES` hash functions.
#[derive(Clone, Debug)]
pub struct BloomFilter<const WORDS: usize, const HASHES: u32> {
    words: [u64; WORDS],
    seed: u64,
    inserted: usize,
}

impl<const WORDS: usize, const HASHES: u32> BloomFilter<WORDS, HASHES> {
    const PARAMETERS_ARE_VALID: () = check_parameters(WORDS, 64, HASHES);
    const BITS: usize = WORDS * 64;

    /// An empty filter keyed with `seed`.
    pub const fn new(seed: u64) -> Self {
        let () = Self::PARAMETERS_ARE_VALID;
        Self {
            words: [0; WORDS],
            seed,
            inserted: 0,
        }
    }

    /// Size in bits.
    pub const fn bit_count(&self) -> usize {
        Self::BITS
    }

    /// Number of inserts since the last clear.
    pub fn len(&self) -> usize {
        self.inserted
    }

    /// Whether nothing was inserted.
    pub fn is_empty(&self) -> bool {
        self.inserted == 0
    }

    /// Expected false-positive rate after the inserts so far.
    pub fn expected_fpr(&self) -> f64 {
        bloom_fpr(Self::BITS, HASHES, self.inserted)
    }

    /// Empties the filter.
    pub fn clear(&mut self) {
        self.words = [0; WORDS];
        self.inserted = 0;
    }

    /// The hash of `item` under this filter's seed.
    pub fn hash<T: core::hash::Hash + ?Sized>(&self, item: &T) -> KeyHash {
        KeyedHasher::hash_item(self.seed, item)
    }

    /// Adds `item`.
    pub fn insert<T: core::hash::Hash + ?Sized>(&mut self, item: &T) {
        self.insert_hash(self.hash(item));
    }

    /// Whether `item` may be present.
    pub fn contains<T: core::hash::Hash + ?Sized>(&self, item: &T) -> bool {
        self.contains_hash(self.hash(item))
    }

    /// [`Self::insert`] for a precomputed hash.
    pub fn insert_hash(&mut self, hash: KeyHash) {
        for position in probe_positions(hash, Self::BITS, HASHES) {
            if let Some(word) = self.words.get_mut(position / 64) {
                *word |= 1 << (position % 64);
            }
        }
        self.inserted = self.inserted.saturating_add(1);
    }

    /// [`Self::contains`] for a precomputed hash.
    #[inline]
    pub fn contains_hash(&self, hash: KeyHash) -> bool {
        probe_positions(hash, Self::BITS, HASHES).all(|position| {
            self.words
                .get(position / 64)
                .is_some_and(|word| word & (1 << (position % 64)) != 0)
        })
    }
}

/// A removal the counting filter refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RemoveError {
    /// One of the item's counters is zero: it was never inserted. Nothing
    /// was changed.
    NotPresent,
}

impl core::fmt::Display for RemoveError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("item is not in the counting Bloom filter (nothing was changed)")
    }
}

impl core::error::Error for RemoveError {}

/// A counting Bloom filter of `16 · WORDS` four-bit counters and `HASHES`
/// hash functions.
#[derive(Clone, Debug)]
pub struct CountingBloomFilter<const WORDS: usize, const HASHES: u32> {
    words: [u64; WORDS],
    seed: u64,
}

/// Value at which a counter saturates and sticks.
pub const COUNTER_MAX: u8 = 15;

impl<const WORDS: usize, const HASHES: u32> CountingBloomFilter<WORDS, HASHES> {
    const PARAMETERS_ARE_VALID: () = check_parameters(WORDS, 16, HASHES);
    const COUNTERS: usize = WORDS * 16;

    /// An empty filter keyed with `seed`.
    pub const fn new(seed: u64) -> Self {
        let () = Self::PARAMETERS_ARE_VALID;
        Self {
            words: [0; WORDS],
            seed,
        }
    }

    /// Number of counters.
    pub const fn counter_count(&self) -> usize {
        Self::COUNTERS
    }

    /// Empties the filter (saturated counters too).
    pub fn clear(&mut self) {
        self.words = [0; WORDS];
    }

    /// The hash of `item` under this filter's seed.
    pub fn hash<T: core::hash::Hash + ?Sized>(&self, item: &T) -> KeyHash {
        KeyedHasher::hash_item(self.seed, item)
    }

    /// Adds `item`.
    pub fn insert<T: core::hash::Hash + ?Sized>(&mut self, item: &T) {
        self.insert_hash(self.hash(item));
    }

    /// Whether `item` may be present.
    pub fn contains<T: core::hash::Hash + ?Sized>(&self, item: &T) -> bool {
        self.contains_hash(self.hash(item))
    }

    /// Removes one insertion of `item`.
    pub fn remove<T: core::hash::Hash + ?Sized>(&mut self, item: &T) -> Result<(), RemoveError> {
        self.remove_hash(self.hash(item))
    }

    /// The counter at `index` (0 when out of range).
    pub fn counter(&self, index: usize) -> u8 {
        self.words
            .get(index / 16)
            .map_or(0, |word| ((word >> (4 * (index % 16))) & 0xf) as u8)
    }

    fn set_counter(&mut self, index: usize, value: u8) {
        if let Some(word) = self.words.get_mut(index / 16) {
            let shift = 4 * (index % 16);
            *word = (*word & !(0xf << shift)) | (u64::from(value & 0xf) << shift);
        }
    }

    /// The item's counter positions, each once (two hash functions may pick
    /// the same counter; it then counts the item once).
    fn distinct_positions(hash: KeyHash) -> ([usize; 32], usize) {
        let mut positions = [0usize; 32];
        let mut count = 0;
        for position in probe_positions(hash, Self::COUNTERS, HASHES) {
            let seen = positions.get(..count).unwrap_or(&[]);
            if !seen.contains(&position) {
                if let Some(slot) = positions.get_mut(count) {
                    *slot = position;
                    count += 1;
                }
            }
        }
        (positions, count)
    }

    /// [`Self::insert`] for a precomputed hash.
    pub fn insert_hash(&mut self, hash: KeyHash) {
        let (positions, count) = Self::distinct_positions(hash);
        for &position in positions.get(..count).unwrap_or(&[]) {
            let counter = self.counter(position);
            if counter < COUNTER_MAX {
                self.set_counter(position, counter + 1);
            }
        }
    }

    /// [`Self::contains`] for a precomputed hash.
    pub fn contains_hash(&self, hash: KeyHash) -> bool {
        probe_positions(hash, Self::COUNTERS, HASHES).all(|position| self.counter(position) > 0)
    }

    /// [`Self::remove`] for a precomputed hash.
    pub fn remove_hash(&mut self, hash: KeyHash) -> Result<(), RemoveError> {
        let (positions, count) = Self::distinct_positions(hash);
        let positions = positions.get(..count).unwrap_or(&[]);
        if positions
            .iter()
            .any(|&position| self.counter(position) == 0)
        {
            return Err(RemoveError::NotPresent);
        }
        for &position in positions {
            let counter = self.counter(position);
            if counter < COUNTER_MAX {
                self.set_counter(position, counter - 1);
            }
        }
        Ok(())
    }
}
