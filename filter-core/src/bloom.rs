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

use crate::cuckoo::StorageError;
use crate::hash::{KeyHash, KeyedHasher};
use crate::math::{ln, powi};

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

const fn check_hashes(hashes: u32) {
    assert!(hashes >= 1 && hashes <= 32, "HASHES must be in 1..=32");
}

/// Checks a table of `words` words of `cells_per_word` cells each.
const fn check_words(words: usize, cells_per_word: usize) -> Result<(), StorageError> {
    if words == 0 {
        return Err(StorageError::Empty);
    }
    if (words as u64).saturating_mul(cells_per_word as u64) > 1 << 32 {
        return Err(StorageError::TooLarge(words));
    }
    Ok(())
}

const fn assert_words(words: usize, cells_per_word: usize) {
    assert!(
        check_words(words, cells_per_word).is_ok(),
        "between 1 word and 2^32 cells"
    );
}

/// A Bloom filter of `64 · words` bits and `HASHES` hash functions over
/// word storage `W` (an array, a `Vec<u64>`, a slice of mapped memory).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BloomFilter<W, const HASHES: u32> {
    words: W,
    seed: u64,
}

/// A Bloom filter over a `[u64; WORDS]` array (`64 · WORDS` bits),
/// constructible in a `const` context.
pub type StaticBloomFilter<const WORDS: usize, const HASHES: u32> =
    BloomFilter<[u64; WORDS], HASHES>;

impl<const WORDS: usize, const HASHES: u32> StaticBloomFilter<WORDS, HASHES> {
    const WORDS_ARE_VALID: () = assert_words(WORDS, 64);

    /// An empty filter keyed with `seed`.
    pub const fn new(seed: u64) -> Self {
        let () = Self::WORDS_ARE_VALID;
        let () = Self::HASHES_ARE_VALID;
        Self {
            words: [0; WORDS],
            seed,
        }
    }
}

impl<W: AsRef<[u64]> + AsMut<[u64]>, const HASHES: u32> BloomFilter<W, HASHES> {
    const HASHES_ARE_VALID: () = check_hashes(HASHES);

    /// A filter over existing word storage (its bits are kept).
    pub fn with_storage(words: W, seed: u64) -> Result<Self, StorageError> {
        let () = Self::HASHES_ARE_VALID;
        check_words(words.as_ref().len(), 64)?;
        Ok(Self { words, seed })
    }

    /// The storage, for reading the raw bits.
    pub fn storage(&self) -> &W {
        &self.words
    }

    /// Size in bits.
    pub fn bit_count(&self) -> usize {
        self.words.as_ref().len() * 64
    }

    /// Bits set.
    pub fn ones(&self) -> usize {
        self.words
            .as_ref()
            .iter()
            .map(|w| w.count_ones() as usize)
            .sum()
    }

    /// False-positive rate at the current fill: `(ones / bits)^k`.
    pub fn expected_fpr(&self) -> f64 {
        powi(self.ones() as f64 / self.bit_count() as f64, HASHES)
    }

    /// Estimated number of distinct items inserted, from the fill
    /// (Swamidass and Baldi): `-(m / k) ln(1 - ones / m)`.
    pub fn estimated_len(&self) -> f64 {
        let bits = self.bit_count() as f64;
        -(bits / f64::from(HASHES)) * ln(1.0 - self.ones() as f64 / bits)
    }

    /// Empties the filter.
    pub fn clear(&mut self) {
        self.words.as_mut().fill(0);
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
        let bits = self.bit_count();
        let words = self.words.as_mut();
        for position in probe_positions(hash, bits, HASHES) {
            if let Some(word) = words.get_mut(position / 64) {
                *word |= 1 << (position % 64);
            }
        }
    }

    /// [`Self::contains`] for a precomputed hash.
    #[inline]
    pub fn contains_hash(&self, hash: KeyHash) -> bool {
        let words = self.words.as_ref();
        probe_positions(hash, words.len() * 64, HASHES).all(|position| {
            words
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

/// Value at which a counter saturates and sticks.
pub const COUNTER_MAX: u8 = 15;

/// A counting Bloom filter of `16 · words` four-bit counters and `HASHES`
/// hash functions over word storage `W`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CountingBloomFilter<W, const HASHES: u32> {
    words: W,
    seed: u64,
}

/// A counting Bloom filter over a `[u64; WORDS]` array (`16 · WORDS`
/// counters), constructible in a `const` context.
pub type StaticCountingBloomFilter<const WORDS: usize, const HASHES: u32> =
    CountingBloomFilter<[u64; WORDS], HASHES>;

impl<const WORDS: usize, const HASHES: u32> StaticCountingBloomFilter<WORDS, HASHES> {
    const WORDS_ARE_VALID: () = assert_words(WORDS, 16);

    /// An empty filter keyed with `seed`.
    pub const fn new(seed: u64) -> Self {
        let () = Self::WORDS_ARE_VALID;
        let () = Self::HASHES_ARE_VALID;
        Self {
            words: [0; WORDS],
            seed,
        }
    }
}

impl<W: AsRef<[u64]> + AsMut<[u64]>, const HASHES: u32> CountingBloomFilter<W, HASHES> {
    const HASHES_ARE_VALID: () = check_hashes(HASHES);

    /// A filter over existing word storage (its counters are kept).
    pub fn with_storage(words: W, seed: u64) -> Result<Self, StorageError> {
        let () = Self::HASHES_ARE_VALID;
        check_words(words.as_ref().len(), 16)?;
        Ok(Self { words, seed })
    }

    /// Number of counters.
    pub fn counter_count(&self) -> usize {
        self.words.as_ref().len() * 16
    }

    /// Empties the filter (saturated counters too).
    pub fn clear(&mut self) {
        self.words.as_mut().fill(0);
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
            .as_ref()
            .get(index / 16)
            .map_or(0, |word| ((word >> (4 * (index % 16))) & 0xf) as u8)
    }

    fn set_counter(&mut self, index: usize, value: u8) {
        if let Some(word) = self.words.as_mut().get_mut(index / 16) {
            let shift = 4 * (index % 16);
            *word = (*word & !(0xf << shift)) | (u64::from(value & 0xf) << shift);
        }
    }

    /// The item's counter positions, each once (two hash functions may pick
    /// the same counter; it then counts the item once).
    fn distinct_positions(&self, hash: KeyHash) -> ([usize; 32], usize) {
        let mut positions = [0usize; 32];
        let mut count = 0;
        for position in probe_positions(hash, self.counter_count(), HASHES) {
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
        let (positions, count) = self.distinct_positions(hash);
        for &position in positions.get(..count).unwrap_or(&[]) {
            let counter = self.counter(position);
            if counter < COUNTER_MAX {
                self.set_counter(position, counter + 1);
            }
        }
    }

    /// [`Self::contains`] for a precomputed hash.
    pub fn contains_hash(&self, hash: KeyHash) -> bool {
        probe_positions(hash, self.counter_count(), HASHES)
            .all(|position| self.counter(position) > 0)
    }

    /// [`Self::remove`] for a precomputed hash.
    pub fn remove_hash(&mut self, hash: KeyHash) -> Result<(), RemoveError> {
        let (positions, count) = self.distinct_positions(hash);
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
