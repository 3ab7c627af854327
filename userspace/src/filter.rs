//! Cuckoo filters built in process memory from filter keys, for every
//! [`FilterShape`] the data plane and the devices use: the one builder
//! behind a new XDP table, a device snapshot and the tests, so all three
//! hold the same bytes for the same keys and seed.
//!
//! The shape (fingerprint width and slots per bucket) is known at run time,
//! `filter-core`'s filter type at compile time: [`by_shape!`] calls a
//! generic function with the fingerprint type and slot count of a shape.
//! This module also holds the two things every filter needs whatever it
//! lives in: a fresh seed ([`random_seed`]) and the occupancy summary
//! ([`TableSummary`]). It knows nothing of maps or devices.

use filter_core::{BucketStorage, CuckooFilter, Fingerprint, NetKey};
use serde::Serialize;

pub use cfxdp::FilterShape;

/// Calls `function::<F, S>(args)` for the fingerprint type and bucket
/// size of `shape`.
macro_rules! by_shape {
    ($shape:expr, $function:ident($($arg:expr),* $(,)?)) => {
        match $shape {
            $crate::filter::FilterShape::Fingerprint8 => $function::<u8, 8>($($arg),*),
            $crate::filter::FilterShape::Fingerprint16 => $function::<u16, 4>($($arg),*),
            $crate::filter::FilterShape::Fingerprint32 => $function::<u32, 4>($($arg),*),
        }
    };
}
pub(crate) use by_shape;

/// A filter cannot hold the keys; nothing was changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the filter is full: {wanted} filter keys do not fit in its {slots} slots")]
pub struct FilterFull {
    /// Keys the table would have had to hold.
    pub wanted: usize,
    /// Slots of the table.
    pub slots: usize,
}

/// A filter whose table is a `Vec` in process memory.
pub type MemoryFilter<F, const S: usize> = CuckooFilter<F, S, Vec<[F; S]>>;

/// A filter of `bucket_count` buckets (a power of two) keyed with `seed`,
/// holding every one of `keys`.
pub fn build<'k, F: Fingerprint, const S: usize>(
    keys: impl ExactSizeIterator<Item = &'k NetKey>,
    bucket_count: usize,
    seed: u64,
) -> Result<MemoryFilter<F, S>, FilterFull> {
    let full = FilterFull {
        wanted: keys.len(),
        slots: bucket_count.saturating_mul(S),
    };
    let mut filter =
        CuckooFilter::with_storage(vec![[F::EMPTY; S]; bucket_count], seed).map_err(|_| full)?;
    for key in keys {
        filter.insert_hash(key.hash(seed)).map_err(|_| full)?;
    }
    Ok(filter)
}

/// A seed from the kernel's random source (std's hasher keys).
pub fn random_seed() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64)
}

/// Occupancy of a filter table.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct TableSummary {
    /// Buckets.
    pub buckets: usize,
    /// Slots (buckets times slots per bucket).
    pub slots: usize,
    /// Fingerprints stored.
    pub fingerprints: usize,
    /// `fingerprints / slots`.
    pub load_factor: f64,
    /// False-positive rate per probe expected at this load.
    pub expected_fpr: f64,
    /// Bytes of table memory.
    pub bytes: usize,
}

impl TableSummary {
    /// The summary of `filter`, whose length must be counted.
    pub fn of<F: Fingerprint, const S: usize, T: BucketStorage<F, S>>(
        filter: &CuckooFilter<F, S, T>,
    ) -> Self {
        Self {
            buckets: filter.bucket_count(),
            slots: filter.capacity(),
            fingerprints: filter.len(),
            load_factor: filter.load_factor(),
            expected_fpr: filter.expected_fpr(),
            bytes: filter.bucket_count() * S * F::BYTES,
        }
    }
}
