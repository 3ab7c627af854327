//! Bloom and counting Bloom filters, for when deletions are not needed (or
//! are rare) and a fixed, tiny, `static` bit array is what fits.
//!
//! Both are one type, [`PackedBloom`]: `HASHES` counters per item, packed
//! `COUNTER_BITS` to a cell in 64-bit words. With 1-bit counters it is the
//! plain [`BloomFilter`]; with 4-bit counters (16 to a word) it is the
//! [`CountingBloomFilter`]. A counter that reaches its maximum (1, or 15)
//! saturates and then *sticks*: it is never decremented again, as its true
//! count is unknown, so a removal can never create a false negative.
//! Removing an item any of whose counters is zero fails and changes nothing.
//!
//! Positions come from one [`KeyHash`] by enhanced double hashing (Kirsch
//! and Mitzenmacher): `g_i = h1 + i·h2 + i(i-1)/2`, reduced to the table size
//! by multiply-shift, so any size works, not only powers of two.

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

const fn check_parameters(hashes: u32, counter_bits: u32) {
    assert!(hashes >= 1 && hashes <= 32, "HASHES must be in 1..=32");
    assert!(
        counter_bits == 1 || counter_bits == 4,
        "counters are 1 or 4 bits wide"
    );
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

/// `HASHES` counters per item of `COUNTER_BITS` bits each, packed in the
/// 64-bit words of `W` (an array, a `Vec<u64>`, a slice of mapped memory).
///
/// The parameters are checked at compile time: 1 to 32 hashes, counters
/// of 1 or 4 bits, and an array of at least one word.
///
/// ```
/// use filter_core::bloom::{PackedBloom, StaticBloomFilter};
/// let _ = StaticBloomFilter::<1, 32>::new(7);
/// let _ = PackedBloom::<[u64; 1], 1, 4>::new(7);
/// ```
/// ```compile_fail
/// # use filter_core::bloom::StaticBloomFilter;
/// let _ = StaticBloomFilter::<1, 0>::new(7); // no hash
/// ```
/// ```compile_fail
/// # use filter_core::bloom::StaticBloomFilter;
/// let _ = StaticBloomFilter::<1, 33>::new(7); // more than 32 hashes
/// ```
/// ```compile_fail
/// # use filter_core::bloom::PackedBloom;
/// let _ = PackedBloom::<[u64; 1], 3, 2>::new(7); // 2-bit counters
/// ```
/// ```compile_fail
/// # use filter_core::bloom::StaticBloomFilter;
/// let _ = StaticBloomFilter::<0, 3>::new(7); // no word
/// ```
///
/// The largest tables hold 2^32 cells; one word more does not build (the
/// constructors are compiled here, the tables not made):
/// ```
/// # use filter_core::bloom::{StaticBloomFilter, StaticCountingBloomFilter};
/// let bloom: fn(u64) -> _ = StaticBloomFilter::<{ 1 << 26 }, 3>::new; // 2^32 bits
/// let counting: fn(u64) -> _ = StaticCountingBloomFilter::<{ 1 << 28 }, 3>::new; // 2^32 counters
/// std::hint::black_box((bloom, counting));
/// ```
/// ```compile_fail
/// # use filter_core::bloom::StaticBloomFilter;
/// let _ = StaticBloomFilter::<{ (1 << 26) + 1 }, 3>::new(7);
/// ```
/// ```compile_fail
/// # use filter_core::bloom::StaticCountingBloomFilter;
/// let _ = StaticCountingBloomFilter::<{ (1 << 28) + 1 }, 3>::new(7);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedBloom<W, const HASHES: u32, const COUNTER_BITS: u32> {
    words: W,
    seed: u64,
}

/// A Bloom filter: one bit per cell, `64 · words` cells.
pub type BloomFilter<W, const HASHES: u32> = PackedBloom<W, HASHES, 1>;

/// A counting Bloom filter: 4-bit sticky counters, `16 · words` cells.
pub type CountingBloomFilter<W, const HASHES: u32> = PackedBloom<W, HASHES, 4>;

/// A Bloom filter over a `[u64; WORDS]` array, constructible in a `const`
/// context.
pub type StaticBloomFilter<const WORDS: usize, const HASHES: u32> =
    BloomFilter<[u64; WORDS], HASHES>;

/// A counting Bloom filter over a `[u64; WORDS]` array, constructible in a
/// `const` context.
pub type StaticCountingBloomFilter<const WORDS: usize, const HASHES: u32> =
    CountingBloomFilter<[u64; WORDS], HASHES>;

/// Value at which a counting filter's counter saturates and sticks.
pub const COUNTER_MAX: u8 = 15;

impl<const WORDS: usize, const HASHES: u32, const COUNTER_BITS: u32>
    PackedBloom<[u64; WORDS], HASHES, COUNTER_BITS>
{
    const WORDS_ARE_VALID: () = assert_words(WORDS, 64 / COUNTER_BITS as usize);

    /// An empty filter keyed with `seed`.
    pub const fn new(seed: u64) -> Self {
        let () = Self::WORDS_ARE_VALID;
        let () = Self::PARAMETERS_ARE_VALID;
        Self {
            words: [0; WORDS],
            seed,
        }
    }
}

impl<W: AsRef<[u64]> + AsMut<[u64]>, const HASHES: u32, const COUNTER_BITS: u32>
    PackedBloom<W, HASHES, COUNTER_BITS>
{
    const PARAMETERS_ARE_VALID: () = check_parameters(HASHES, COUNTER_BITS);
    const CELLS_PER_WORD: usize = 64 / COUNTER_BITS as usize;
    const CELL_MASK: u64 = (1 << COUNTER_BITS) - 1;

    /// A filter over existing word storage (its counters are kept).
    pub fn with_storage(words: W, seed: u64) -> Result<Self, StorageError> {
        let () = Self::PARAMETERS_ARE_VALID;
        check_words(words.as_ref().len(), Self::CELLS_PER_WORD)?;
        Ok(Self { words, seed })
    }

    /// The storage, for reading the raw words.
    pub fn storage(&self) -> &W {
        &self.words
    }

    /// Number of counters (bits, for a plain Bloom filter).
    pub fn cell_count(&self) -> usize {
        self.words.as_ref().len() * Self::CELLS_PER_WORD
    }

    /// Empties the filter (saturated counters too).
    pub fn clear(&mut self) {
        self.words.as_mut().fill(0);
    }

    /// The counter at `index` (0 when out of range).
    pub fn counter(&self, index: usize) -> u8 {
        self.words
            .as_ref()
            .get(index / Self::CELLS_PER_WORD)
            .map_or(0, |word| {
                let shift = COUNTER_BITS as usize * (index % Self::CELLS_PER_WORD);
                ((word >> shift) & Self::CELL_MASK) as u8
            })
    }

    fn set_counter(&mut self, index: usize, value: u8) {
        if let Some(word) = self.words.as_mut().get_mut(index / Self::CELLS_PER_WORD) {
            let shift = COUNTER_BITS as usize * (index % Self::CELLS_PER_WORD);
            // The cleared word and the new counter are disjoint fields, so
            // their sum is their union.
            *word = (*word & !(Self::CELL_MASK << shift))
                + ((u64::from(value) & Self::CELL_MASK) << shift);
        }
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

    /// The item's counter positions, each once: two hash functions may pick
    /// the same counter, which then counts the item once.
    fn distinct_positions(&self, hash: KeyHash) -> ([usize; 32], usize) {
        let mut positions = [0usize; 32];
        let mut count = 0;
        for position in probe_positions(hash, self.cell_count(), HASHES) {
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
        let max = Self::CELL_MASK as u8;
        if COUNTER_BITS == 1 {
            // Setting a bit twice is harmless: no need to find duplicates.
            for position in probe_positions(hash, self.cell_count(), HASHES) {
                self.set_counter(position, max);
            }
            return;
        }
        let (positions, count) = self.distinct_positions(hash);
        for &position in positions.get(..count).unwrap_or(&[]) {
            let counter = self.counter(position);
            if counter < max {
                self.set_counter(position, counter + 1);
            }
        }
    }

    /// [`Self::contains`] for a precomputed hash.
    #[inline]
    pub fn contains_hash(&self, hash: KeyHash) -> bool {
        probe_positions(hash, self.cell_count(), HASHES).all(|position| self.counter(position) > 0)
    }
}

impl<W: AsRef<[u64]> + AsMut<[u64]>, const HASHES: u32> BloomFilter<W, HASHES> {
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
        powi(self.ones() as f64 / self.cell_count() as f64, HASHES)
    }

    /// Estimated number of distinct items inserted, from the fill
    /// (Swamidass and Baldi): `-(m / k) ln(1 - ones / m)`.
    pub fn estimated_len(&self) -> f64 {
        let bits = self.cell_count() as f64;
        -(bits / f64::from(HASHES)) * ln(1.0 - self.ones() as f64 / bits)
    }
}

impl<W: AsRef<[u64]> + AsMut<[u64]>, const HASHES: u32> CountingBloomFilter<W, HASHES> {
    /// Removes one insertion of `item`.
    pub fn remove<T: core::hash::Hash + ?Sized>(&mut self, item: &T) -> Result<(), RemoveError> {
        self.remove_hash(self.hash(item))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_holds_from_one_word_to_two_to_the_32_cells() {
        // Checked without the memory: 2^26 words of 64 one-bit cells.
        assert_eq!(check_words(1 << 26, 64), Ok(()));
        assert_eq!(
            check_words((1 << 26) + 1, 64),
            Err(StorageError::TooLarge((1 << 26) + 1))
        );
        assert_eq!(check_words(1 << 28, 16), Ok(()));
        assert_eq!(check_words(1, 64), Ok(()));
        assert_eq!(check_words(0, 64), Err(StorageError::Empty));
    }
}
