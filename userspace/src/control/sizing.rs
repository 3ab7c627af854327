//! A filter that sizes itself, and its rules (the resizes themselves are
//! `Control`'s, in `control/resize.rs`).
//!
//! Attached without `--capacity` (or with `--capacity auto`), a filter is
//! sized for what the store holds, at most [`TARGET_LOAD`] full, and
//! follows the store:
//!
//! * a change that does not fit grows the filter first, and is then
//!   applied;
//! * a change that leaves the load above [`HIGH_WATERMARK`] grows it, and
//!   one that leaves it below [`LOW_WATERMARK`] shrinks it (not below
//!   [`MIN_AUTO_CAPACITY`]), each time back to about [`TARGET_LOAD`]. A
//!   rebuilt table knows its keys; after keys written one by one, the
//!   stored entries (a lower bound of the keys: a CIDR may take several)
//!   say whether to count the keys at all.
//!
//! After a resize the load is between a quarter and a half (tables have a
//! power-of-two number of buckets), far from both watermarks, so the size
//! never flaps. Every resize is the gap-free rebuild of `cfctl resize`: a
//! new program filled from the store takes over every link, and the old
//! one holds every entry until it does.
//!
//! `--capacity N` fixes the size: a fixed filter that fills refuses the
//! change, whole, with an error naming `cfctl resize`. Growth stops at
//! `--max-memory` (a ceiling on the table's bytes), and in any case where
//! `check_capacity` does (a table that fits this machine's memory three
//! times over); there a change is refused whole too, and nothing listed is
//! lost. The firmware's filter keeps the static size it is compiled with.

use filter_core::sizing::achievable_load;
use serde::{Deserialize, Serialize};

use crate::FilterShape;

/// Above this share of its slots in use after a change, a filter that
/// sizes itself grows.
pub const HIGH_WATERMARK: f64 = 0.85;
/// Below this share of its slots in use after a change, a filter that
/// sizes itself shrinks (not below [`MIN_AUTO_CAPACITY`]).
pub const LOW_WATERMARK: f64 = 0.1;
/// The share of its slots a filter is sized to use, at most.
pub const TARGET_LOAD: f64 = 0.5;
/// The smallest capacity a filter that sizes itself takes: 4,096 keys, a
/// 16 KiB table of 16-bit fingerprints, which stays in the cache.
pub const MIN_AUTO_CAPACITY: u64 = 4096;

/// Whether the filter sizes itself or keeps the capacity it was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sizing {
    /// Sized for the store and following it.
    Auto,
    /// The capacity given with `--capacity N`.
    Fixed,
}

impl Sizing {
    /// The sizing of settings stored before filters sized themselves: the
    /// capacity they hold was chosen, so it stays.
    pub(super) fn stored_before_auto() -> Self {
        Sizing::Fixed
    }
}

/// A ceiling on the filter table's memory asked for on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryCeiling {
    /// `none`: as much as the machine's memory allows.
    Unbounded,
    /// At most this many bytes.
    Bytes(u64),
}

/// A capacity asked for on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapacityChoice {
    /// `auto`: the filter sizes itself.
    Auto,
    /// This many keys, fixed.
    Keys(u64),
}

/// The last time the filter changed size, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resized {
    /// When, in Unix seconds.
    pub at: u64,
    /// The capacity before, in keys.
    pub from: u64,
    /// The capacity after, in keys.
    pub to: u64,
    /// Why.
    pub reason: String,
}

/// The capacity a filter of `shape` that sizes itself takes for `keys`
/// keys: that of the smallest table in which they are at most
/// [`TARGET_LOAD`] of the slots, at least [`MIN_AUTO_CAPACITY`]. A
/// capacity counts the keys a table holds at the load its inserts reach
/// (`filter_core::sizing::achievable_load`, 95% for 4-slot buckets), so
/// this is the most keys `filter_core::sizing::cuckoo_buckets` sizes that
/// table for, and the table is the one `--capacity` gives for as many keys
/// as the slots, not twice it.
pub fn auto_capacity(keys: usize, shape: FilterShape) -> u64 {
    let slots = shape.slots() as u64;
    let wanted_slots = (keys as f64 / TARGET_LOAD).ceil() as u64;
    let buckets = wanted_slots.div_ceil(slots).next_power_of_two();
    let table_slots = buckets.saturating_mul(slots) as f64;
    let capacity = (table_slots * achievable_load(shape.slots())).floor() as u64;
    capacity.max(MIN_AUTO_CAPACITY)
}

/// Buckets and slots of the table sized for `capacity` keys of `shape`.
fn table_of(capacity: u64, shape: FilterShape) -> Option<(usize, usize)> {
    let capacity = usize::try_from(capacity).ok()?;
    let buckets = filter_core::sizing::cuckoo_buckets(capacity, shape.slots())?;
    Some((buckets, buckets.saturating_mul(shape.slots())))
}

/// The share of its slots `keys` keys take in a table sized for
/// `capacity` keys of `shape`.
pub fn load(keys: usize, capacity: u64, shape: FilterShape) -> f64 {
    table_of(capacity, shape).map_or(1.0, |(_, slots)| keys as f64 / slots.max(1) as f64)
}

/// What a filter sized for `capacity` keys of `shape` that sizes itself
/// and holds `keys` keys should become, and why; `None` while its load is
/// between the watermarks.
pub fn new_capacity(keys: usize, capacity: u64, shape: FilterShape) -> Option<(u64, String)> {
    let load = load(keys, capacity, shape);
    let wanted = auto_capacity(keys, shape);
    let percent = |share: f64| share * 100.0;
    if load > HIGH_WATERMARK {
        let reason = format!(
            "{:.0}% of its slots in use, above the high watermark of {:.0}%",
            percent(load),
            percent(HIGH_WATERMARK)
        );
        return Some((wanted, reason));
    }
    let buckets = |capacity| table_of(capacity, shape).map(|(buckets, _)| buckets);
    let fewer_buckets = buckets(wanted) < buckets(capacity);
    (load < LOW_WATERMARK && fewer_buckets).then(|| {
        let reason = format!(
            "{:.1}% of its slots in use, below the low watermark of {:.0}%",
            percent(load),
            percent(LOW_WATERMARK)
        );
        (wanted, reason)
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Resizes a filter of `capacity` keys of `shape` takes while it holds
    /// each of `keys` in turn, and the capacity it ends with.
    fn resizes(mut capacity: u64, shape: FilterShape, keys: &[usize]) -> (usize, u64) {
        let mut count = 0;
        for &held in keys {
            if let Some((to, _)) = new_capacity(held, capacity, shape) {
                capacity = to;
                count += 1;
            }
        }
        (count, capacity)
    }

    proptest! {
        /// A list whose size swings up to a fifth either way around any
        /// size makes a filter resize at most once: the first resize sizes
        /// it for the list, and no swing then leaves the watermarks.
        #[test]
        fn a_load_swinging_around_a_size_resizes_at_most_once(
            center in 1usize..20_000_000,
            start in MIN_AUTO_CAPACITY..40_000_000,
            swings in proptest::collection::vec(-0.2f64..0.2, 1..200),
            shape in proptest::sample::select(FilterShape::ALL.to_vec()),
        ) {
            let keys: Vec<usize> = swings
                .iter()
                .map(|swing| (center as f64 * (1.0 + swing)) as usize)
                .collect();
            let (count, _) = resizes(start, shape, &keys);
            prop_assert!(count <= 1, "{count} resizes");
        }
    }

    /// A filter of `shape` that sizes itself for `keys` is at most half
    /// full, and more than a quarter (above the smallest size); its table
    /// is the one `--capacity` gives for the same keys when they would
    /// fill that one at most half, else twice it.
    fn assert_sized_for(keys: usize, shape: FilterShape) {
        let capacity = auto_capacity(keys, shape);
        let (buckets, _) = table_of(capacity, shape).expect("a table");
        let loaded = load(keys, capacity, shape);
        assert!(loaded <= TARGET_LOAD, "{keys} keys: load {loaded}");
        let smallest = capacity == MIN_AUTO_CAPACITY;
        assert!(
            loaded > TARGET_LOAD / 2.0 || smallest,
            "{keys} keys: load {loaded}"
        );
        let (fixed, fixed_slots) = table_of(keys as u64, shape).expect("a table");
        if keys as f64 <= fixed_slots as f64 * TARGET_LOAD {
            assert!(
                buckets == fixed || smallest,
                "{keys} keys: {buckets} buckets"
            );
        } else {
            assert!(
                buckets == 2 * fixed || smallest,
                "{keys} keys: {buckets} buckets"
            );
        }
    }

    proptest! {
        #[test]
        fn an_automatic_table_is_at_most_half_full_and_no_larger_than_it_must(
            keys in 1usize..100_000_000,
            shape in proptest::sample::select(FilterShape::ALL.to_vec()),
        ) {
            assert_sized_for(keys, shape);
        }
    }

    /// Where a power of two of keys meets a power-of-two table.
    #[test]
    fn an_automatic_table_is_sized_right_at_every_power_of_two() {
        for shape in FilterShape::ALL {
            for power in 10..30 {
                for keys in [(1 << power) - 1, 1 << power, (1 << power) + 1] {
                    assert_sized_for(keys, shape);
                }
            }
        }
    }

    /// A list growing key by key past the high watermark, then swinging
    /// across the point where it grew, resizes once; shrinking past the
    /// low watermark and swinging there, once more.
    #[test]
    fn each_watermark_is_crossed_once_by_a_list_that_swings_across_it() {
        let shape = FilterShape::Fingerprint16;
        let start = MIN_AUTO_CAPACITY;
        let mut held = 1;
        while new_capacity(held, start, shape).is_none() {
            held += 1;
        }
        let swing: Vec<usize> = (0..1000).map(|step| held - 50 + step % 100).collect();
        let (count, grown) = resizes(start, shape, &swing);
        assert_eq!(count, 1);
        assert!(load(held, grown, shape) < HIGH_WATERMARK);

        while new_capacity(held, grown, shape).is_none() {
            held -= 1;
        }
        let swing: Vec<usize> = (0..1000).map(|step| held + 5 - step % 10).collect();
        assert_eq!(resizes(grown, shape, &swing).0, 1);
    }
}
