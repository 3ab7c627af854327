//! Filter operations for every [`FilterShape`](crate::FilterShape), on the live table of an
//! attached blocklist or on a table built in process memory.
//!
//! The loader works on one shape at a time (`FilterTable<F, S>`); the
//! control plane only knows the shape at run time. `by_shape!` picks the
//! generic instance for a shape, and the functions here are the generic
//! bodies: fill a new table and block prefilter from a [`KeyPlan`] and swap
//! them in, write a [`KeyDiff`] into the live table (the prefilter bits of
//! the new keys first, then the inserts, each insert's relocations
//! destination-first, so no listed key is ever absent; then the removes;
//! undone in full when the filter is full), probe keys, and summarise the
//! table. They neither read nor write the store.
//!
//! [`apply_diff`] sets bits and never clears them: the control plane plans
//! a small change with a plan of only the entries around it, whose
//! [`KeyDiff::clear_bits`] (and `set_bits`) cannot know the other keys that
//! mark a bit. So the bits set are every bit of every inserted key, and the
//! control plane clears bits itself once it has checked them against every
//! entry that can mark them. A stale bit costs a packet of its block one
//! probe, never a wrong answer.

use blocklist_ebpf::prefilter::key_bits;
use filter_core::{CuckooFilter, NetKey};

use crate::filter_table::{FilterTable, TableFingerprint};
use crate::loader::{filter_profile, BlocklistMaps, LoaderError};
use crate::plan::{KeyDiff, KeyPlan};

/// Calls `function::<F, S>(args)` for the fingerprint type and bucket
/// size of `shape`.
macro_rules! by_shape {
    ($shape:expr, $function:ident($($arg:expr),* $(,)?)) => {
        match $shape {
            blocklist_ebpf::FilterShape::Fingerprint8 => $function::<u8, 8>($($arg),*),
            blocklist_ebpf::FilterShape::Fingerprint16 => $function::<u16, 4>($($arg),*),
            blocklist_ebpf::FilterShape::Fingerprint32 => $function::<u32, 4>($($arg),*),
        }
    };
}
pub(crate) use by_shape;

/// Why a filter operation failed.
#[derive(Debug, thiserror::Error)]
pub enum TableOpError {
    /// The loader or the kernel failed.
    #[error(transparent)]
    Loader(#[from] LoaderError),
    /// A table the filter code cannot run on.
    #[error("the filter table is unusable: {0}")]
    Storage(String),
    /// The table cannot hold the keys; nothing was changed. (The control
    /// plane adds the way out, which depends on what it was doing.)
    #[error("the filter is full: {wanted} filter keys do not fit in its {slots} slots")]
    Full {
        /// Keys the table would have had to hold.
        wanted: usize,
        /// Slots of the table.
        slots: usize,
    },
}

/// Occupancy of a filter table.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
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

/// Builds a table holding every key of `plan` in process memory, copies it
/// into a new map and makes it live with the plan's active lengths, in one
/// atomic swap. On error the live filter is unchanged.
pub fn install_plan(
    maps: &mut BlocklistMaps,
    plan: &KeyPlan,
    seed: u64,
) -> Result<(), TableOpError> {
    by_shape!(maps.shape(), install_plan_as(maps, plan, seed))
}

fn install_plan_as<F: TableFingerprint, const S: usize>(
    maps: &mut BlocklistMaps,
    plan: &KeyPlan,
    seed: u64,
) -> Result<(), TableOpError> {
    let bucket_count = maps.bucket_count();
    let full = || TableOpError::Full {
        wanted: plan.key_count(),
        slots: bucket_count * S,
    };
    let mut filter = CuckooFilter::<F, S, _>::with_storage(vec![[F::EMPTY; S]; bucket_count], seed)
        .map_err(|_| full())?;
    for key in plan.keys() {
        filter.insert_hash(key.hash(seed)).map_err(|_| full())?;
    }
    let lengths = plan.lengths();
    let profile = filter_profile(seed, bucket_count, lengths.ipv4(), lengths.ipv6())?;
    let mut table = FilterTable::<F, S>::create(bucket_count).map_err(LoaderError::from)?;
    table.fill(filter.storage()).map_err(LoaderError::from)?;
    maps.install(table.map(), &profile, &plan.prefilter())?;
    Ok(())
}

/// Writes `diff` into the live table: the bits of every key to insert,
/// every insert, then every remove (see the module documentation for the
/// bits). If an insert finds the table full, the keys this call inserted
/// are removed again and the filter holds what it held before.
pub fn apply_diff(maps: &mut BlocklistMaps, diff: &KeyDiff) -> Result<(), TableOpError> {
    by_shape!(
        maps.shape(),
        apply_diff_as(maps, &diff.insert, &diff.remove)
    )
}

/// Reverses a diff that [`apply_diff`] wrote: re-inserts what it removed,
/// then removes what it inserted.
pub fn revert_diff(maps: &mut BlocklistMaps, diff: &KeyDiff) -> Result<(), TableOpError> {
    by_shape!(
        maps.shape(),
        apply_diff_as(maps, &diff.remove, &diff.insert)
    )
}

fn apply_diff_as<F: TableFingerprint, const S: usize>(
    maps: &mut BlocklistMaps,
    insert: &[NetKey],
    remove: &[NetKey],
) -> Result<(), TableOpError> {
    maps.mark_keys(insert);
    let mut filter = live_filter::<F, S>(maps, Occupancy::Unknown)?;
    let seed = filter.seed();
    for (inserted, key) in insert.iter().enumerate() {
        if filter.insert_hash(key.hash(seed)).is_err() {
            for undone in insert[..inserted].iter().rev() {
                filter.remove_hash(undone.hash(seed));
            }
            let summary = live_summary_as::<F, S>(maps)?;
            return Err(TableOpError::Full {
                wanted: summary.fingerprints + insert.len(),
                slots: summary.slots,
            });
        }
    }
    for key in remove {
        filter.remove_hash(key.hash(seed));
    }
    Ok(())
}

/// Whether the live filter holds each of `keys` and its prefilter marks
/// every block of the key (else packets of an unmarked block miss it).
pub fn live_contains(maps: &mut BlocklistMaps, keys: &[NetKey]) -> Result<Vec<bool>, TableOpError> {
    by_shape!(maps.shape(), live_contains_as(maps, keys))
}

fn live_contains_as<F: TableFingerprint, const S: usize>(
    maps: &mut BlocklistMaps,
    keys: &[NetKey],
) -> Result<Vec<bool>, TableOpError> {
    let prefilter = maps.live_prefilter();
    let profile = maps.live_profile();
    let filter = live_filter::<F, S>(maps, Occupancy::Unknown)?;
    let seed = filter.seed();
    Ok(keys
        .iter()
        .map(|key| {
            let lengths = profile.lengths(key.family());
            lengths.contains(&key.prefix_len())
                && key_bits(key, lengths).all(|bit| prefilter.contains(bit))
                && filter.contains_hash(key.hash(seed))
        })
        .collect())
}

/// Occupancy of the live table.
pub fn live_summary(maps: &mut BlocklistMaps) -> Result<TableSummary, TableOpError> {
    by_shape!(maps.shape(), live_summary_as(maps))
}

fn live_summary_as<F: TableFingerprint, const S: usize>(
    maps: &mut BlocklistMaps,
) -> Result<TableSummary, TableOpError> {
    let filter = live_filter::<F, S>(maps, Occupancy::Counted)?;
    Ok(TableSummary {
        buckets: filter.bucket_count(),
        slots: filter.capacity(),
        fingerprints: filter.len(),
        load_factor: filter.load_factor(),
        expected_fpr: filter.expected_fpr(),
        bytes: filter.storage().bytes(),
    })
}

/// Whether a handle on the live table knows how many fingerprints it holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Occupancy {
    /// Counted: reads every bucket, so every page of the mapping.
    Counted,
    /// Not counted (`len` starts at zero): for updates and lookups, which
    /// touch a few buckets of a table of up to hundreds of megabytes.
    Unknown,
}

/// The live table as a filter keyed with the live seed.
fn live_filter<F: TableFingerprint, const S: usize>(
    maps: &mut BlocklistMaps,
    occupancy: Occupancy,
) -> Result<CuckooFilter<F, S, FilterTable<F, S>>, TableOpError> {
    let seed = maps.live_profile().seed;
    let table = maps.live_table::<F, S>()?;
    match occupancy {
        Occupancy::Counted => CuckooFilter::with_storage(table, seed),
        Occupancy::Unknown => CuckooFilter::with_storage_and_len(table, seed, 0),
    }
    .map_err(|error| TableOpError::Storage(format!("{error:?}")))
}
