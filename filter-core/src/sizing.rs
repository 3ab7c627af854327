//! Sizing math: how big a filter must be for a capacity and a target
//! false-positive rate. All `const fn`, so sizes can be computed at compile
//! time for a `static` filter.
//!
//! Cuckoo filter: a bucket of `b` slots with `f`-bit fingerprints gives
//! `eps ≈ 2b / 2^f` at full load, and inserts start failing at about 50%,
//! 84%, 95% and 98% load for `b` = 1, 2, 4, 8 ([`achievable_load`]).
//! Bloom filter: `m = -n ln(eps) / ln(2)^2` bits, `k = (m / n) ln 2` hashes.

use crate::math::{ceil_to_u64, ln};

/// Load factor at which inserts start failing, by slots per bucket.
pub const fn achievable_load(slots: usize) -> f64 {
    match slots {
        1 => 0.50,
        2 => 0.84,
        4 => 0.95,
        8 => 0.98,
        _ => 0.0,
    }
}

/// Fewest fingerprint bits (1..=32) for which `2b / 2^f <= fpr`; `None` if
/// more than 32 would be needed or `fpr` is not in `(0, 1)`.
pub const fn cuckoo_min_fingerprint_bits(slots: usize, fpr: f64) -> Option<u32> {
    if !(fpr > 0.0 && fpr < 1.0) {
        return None;
    }
    let mut bits = 1;
    let mut values = 2.0;
    while bits <= 32 {
        if 2.0 * slots as f64 / values <= fpr {
            return Some(bits);
        }
        bits += 1;
        values *= 2.0;
    }
    None
}

/// The fingerprint type width (8, 16 or 32) that meets `fpr`.
pub const fn cuckoo_fingerprint_bits(slots: usize, fpr: f64) -> Option<u32> {
    match cuckoo_min_fingerprint_bits(slots, fpr) {
        Some(bits) if bits <= 8 => Some(8),
        Some(bits) if bits <= 16 => Some(16),
        Some(_) => Some(32),
        None => None,
    }
}

/// Buckets (a power of two) for `capacity` items at the achievable load of
/// `slots`-slot buckets; `None` for an unsupported slot count or overflow.
pub const fn cuckoo_buckets(capacity: usize, slots: usize) -> Option<usize> {
    let load = achievable_load(slots);
    if load == 0.0 {
        return None;
    }
    let needed = ceil_to_u64(capacity as f64 / (slots as f64 * load));
    let needed = if needed == 0 { 1 } else { needed };
    match needed.checked_next_power_of_two() {
        Some(buckets) if buckets <= usize::MAX as u64 => Some(buckets as usize),
        _ => None,
    }
}

/// Parameters of a cuckoo filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct CuckooParams {
    /// Number of buckets (a power of two).
    pub buckets: usize,
    /// Slots per bucket.
    pub slots: usize,
    /// Fingerprint width: 8, 16 or 32.
    pub fingerprint_bits: u32,
}

impl CuckooParams {
    /// Table size in bytes.
    pub const fn bytes(&self) -> usize {
        self.buckets
            .saturating_mul(self.slots)
            .saturating_mul(self.fingerprint_bits as usize / 8)
    }
}

/// Buckets and fingerprint width for `capacity` items at false-positive rate
/// `fpr` with `slots`-slot buckets.
pub const fn cuckoo_params(capacity: usize, fpr: f64, slots: usize) -> Option<CuckooParams> {
    match (
        cuckoo_buckets(capacity, slots),
        cuckoo_fingerprint_bits(slots, fpr),
    ) {
        (Some(buckets), Some(fingerprint_bits)) => Some(CuckooParams {
            buckets,
            slots,
            fingerprint_bits,
        }),
        _ => None,
    }
}

/// Bloom filter size in bits for `capacity` items at `fpr`.
pub const fn bloom_bits(capacity: usize, fpr: f64) -> usize {
    let ln2 = core::f64::consts::LN_2;
    ceil_to_u64(-(capacity as f64) * ln(fpr) / (ln2 * ln2)) as usize
}

/// Optimal number of hash functions for `bits` bits and `capacity` items
/// (at least 1).
pub const fn bloom_hashes(bits: usize, capacity: usize) -> u32 {
    if capacity == 0 {
        return 1;
    }
    let k = (bits as f64 / capacity as f64 * core::f64::consts::LN_2 + 0.5) as u32;
    if k == 0 {
        1
    } else {
        k
    }
}

/// Bloom filter size in 64-bit words (the `WORDS` parameter of
/// [`crate::BloomFilter`]) for `capacity` items at `fpr`.
pub const fn bloom_words(capacity: usize, fpr: f64) -> usize {
    bloom_bits(capacity, fpr).div_ceil(64)
}
