//! The cuckoo filter's bookkeeping and the relocation walk on tables set up
//! by hand: emptiness, reseeding, the storage sizes accepted, the errors'
//! texts, the kick budget's clamping, and the walk's first step from either
//! bucket (an insert whose only way out is through one of its two buckets
//! succeeds after a few tries either way).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use filter_core::cuckoo::{DEFAULT_MAX_KICKS, KICK_PATH_CAPACITY};
use filter_core::layout::alternate_bucket;
use filter_core::{
    BucketStorage, CuckooFilter, InsertError, KeyHash, StaticCuckooFilter, StorageError,
};

#[test]
fn a_filter_is_empty_until_an_insert_and_after_the_last_remove() {
    let mut filter = StaticCuckooFilter::<u16, 4, 64>::new(7);
    assert!(filter.is_empty());
    filter.insert(&1u64).unwrap();
    assert!(!filter.is_empty());
    assert!(filter.remove(&1u64));
    assert!(filter.is_empty());
}

#[test]
fn reseeding_empties_the_filter_and_changes_its_key() {
    let mut filter = StaticCuckooFilter::<u16, 4, 64>::new(7);
    filter.insert(&1u64).unwrap();
    let before = filter.hash(&1u64);
    filter.reseed(8);
    assert!(filter.is_empty());
    assert_eq!(filter.seed(), 8);
    assert!(!filter.contains(&1u64));
    assert_ne!(filter.hash(&1u64), before);
}

#[test]
fn the_load_factor_is_the_share_of_slots_in_use_until_a_clear() {
    let mut filter = StaticCuckooFilter::<u16, 4, 64>::new(7);
    assert_eq!(filter.capacity(), 256);
    assert_eq!(filter.load_factor(), 0.0);
    for item in 0..64u64 {
        filter.insert(&item).unwrap();
    }
    assert_eq!(filter.len(), 64);
    assert_eq!(filter.load_factor(), 0.25);
    filter.clear();
    assert!(filter.is_empty());
    assert_eq!(filter.load_factor(), 0.0);
    assert!((0..64u64).all(|item| !filter.contains(&item)));
}

#[test]
fn count_says_how_many_copies_of_an_item_are_stored() {
    let mut filter = StaticCuckooFilter::<u16, 4, 64>::new(7);
    for copies in 0..4u64 {
        for _ in 0..copies {
            filter.insert(&copies).unwrap();
        }
    }
    for copies in 0..4u64 {
        assert_eq!(filter.count(&copies), copies as usize, "item {copies}");
    }
    assert!(filter.remove(&3u64));
    assert_eq!(filter.count(&3u64), 2);
}

#[test]
fn an_insert_in_place_fills_a_free_candidate_slot_or_changes_nothing() {
    let mut filter = StaticCuckooFilter::<u16, 4, 2>::new(7);
    let mut placed = Vec::new();
    for item in 0..64u64 {
        let hash = filter.hash(&item);
        let before = *filter.storage();
        if filter.insert_hash_in_place(hash) {
            placed.push(item);
            assert_eq!(filter.len(), placed.len());
        } else {
            assert_eq!(
                *filter.storage(),
                before,
                "a refused insert changed the table"
            );
        }
    }
    // Two buckets of four slots, and every item's candidates are both.
    assert_eq!(placed.len(), 8);
    assert!(placed.iter().all(|item| filter.contains(item)));
}

/// Storage that only has a size: enough to check what sizes a filter takes.
struct SizeOnly(usize);

impl BucketStorage<u16, 4> for SizeOnly {
    fn bucket_count(&self) -> usize {
        self.0
    }
    fn bucket(&self, _index: usize) -> [u16; 4] {
        [0; 4]
    }
    fn set_slot(&mut self, _index: usize, _slot: usize, _fingerprint: u16) {}
}

#[test]
fn storage_of_up_to_2_pow_32_slots_in_a_power_of_two_of_buckets_is_taken() {
    let filter = |buckets| CuckooFilter::<u16, 4, _>::with_storage_and_len(SizeOnly(buckets), 1, 0);
    assert!(filter(1 << 30).is_ok(), "2^32 slots");
    assert_eq!(filter(1 << 31).err(), Some(StorageError::TooLarge(1 << 31)));
    assert_eq!(
        filter(3 << 10).err(),
        Some(StorageError::BucketCountNotPowerOfTwo(3 << 10))
    );
}

#[test]
fn errors_say_what_went_wrong() {
    assert!(InsertError::Full.to_string().contains("full"));
    assert_eq!(StorageError::Empty.to_string(), "the storage is empty");
    assert!(StorageError::BucketCountNotPowerOfTwo(12)
        .to_string()
        .contains("12"));
    assert!(StorageError::TooLarge(1 << 31)
        .to_string()
        .contains(&(1u64 << 31).to_string()));
}

#[test]
fn the_kick_budget_is_clamped_and_reported() {
    let mut filter = StaticCuckooFilter::<u16, 4, 64>::new(7);
    assert_eq!(filter.max_kicks(), DEFAULT_MAX_KICKS);
    assert_eq!(filter.set_max_kicks(0), 1);
    assert_eq!(filter.max_kicks(), 1);
    assert_eq!(filter.set_max_kicks(37), 37);
    assert_eq!(filter.max_kicks(), 37);
    let most = KICK_PATH_CAPACITY as u16;
    assert_eq!(filter.set_max_kicks(u16::MAX), most);
    assert_eq!(filter.max_kicks(), most);
}

/// One slot per bucket, eight buckets.
type Table = [[u16; 1]; 8];
const MASK: usize = 7;

/// A fingerprint whose other bucket, seen from `bucket`, is not in `taken`.
fn fingerprint_leaving(bucket: usize, taken: &[usize]) -> (u16, usize) {
    (1..=u16::MAX)
        .map(|fingerprint| (fingerprint, alternate_bucket(bucket, fingerprint, MASK)))
        .find(|(_, other)| !taken.contains(other))
        .expect("some fingerprint leads elsewhere")
}

/// Inserts `hash` with a budget of one kick into a table where the
/// occupant of one of its buckets (`open`) can move on into a free bucket
/// and the occupant of the other (`blocked`) cannot; returns the attempts
/// it took, and panics after 32. A failed attempt must leave the table as
/// it was.
fn attempts_through(open_is_primary: bool) -> usize {
    let probe = CuckooFilter::<u16, 1, Table>::with_storage([[0; 1]; 8], 0).unwrap();
    let hash = (0..)
        .map(KeyHash)
        .find(|&hash| {
            let location = probe.locate(hash);
            location.primary != location.alternate
        })
        .unwrap();
    let location = probe.locate(hash);
    let (open, blocked) = if open_is_primary {
        (location.primary, location.alternate)
    } else {
        (location.alternate, location.primary)
    };
    let (stuck, wall) = fingerprint_leaving(blocked, &[open, blocked]);
    let (movable, free) = fingerprint_leaving(open, &[open, blocked, wall]);
    let mut table: Table = [[0; 1]; 8];
    table[blocked] = [stuck];
    table[wall] = [0x5eed];
    table[open] = [movable];
    let mut filter = CuckooFilter::<u16, 1, Table>::with_storage(table, 0).unwrap();
    filter.set_max_kicks(1);
    for attempt in 1..=32 {
        match filter.insert_hash(hash) {
            Ok(()) => {
                let stored = filter.storage();
                assert_eq!(stored[free], [movable], "the occupant moved on");
                assert_eq!(stored[open], [location.fingerprint]);
                assert_eq!(stored[blocked], [stuck]);
                assert_eq!(filter.len(), 4);
                return attempt;
            }
            Err(InsertError::Full) => assert_eq!(filter.storage(), &table),
        }
    }
    let open = if open_is_primary {
        "primary"
    } else {
        "alternate"
    };
    panic!("no insert in 32 attempts with the way out through the {open} bucket");
}

#[test]
fn the_relocation_walk_starts_from_either_bucket() {
    for open_is_primary in [true, false] {
        let attempts = attempts_through(open_is_primary);
        eprintln!("open primary {open_is_primary}: {attempts} attempts");
    }
}
