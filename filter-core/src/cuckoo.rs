//! The cuckoo filter (Fan, Andersen, Kaminsky, Mitzenmacher, CoNEXT 2014).
//!
//! [`CuckooFilter`] runs the same code on any [`BucketStorage`]: a static
//! array ([`StaticCuckooFilter`], built by a `const fn` so it can be a
//! `static`), a heap or mapped slice, or storage that writes into live BPF
//! map memory.
//!
//! # Inserts never lose an item, and never hide one
//!
//! When both buckets of a new fingerprint are full, the insert first
//! *searches* for a relocation path with a random walk, reading the table
//! but not writing it (a walk that comes back to a slot already on its path
//! cuts the cycle off). Each step looks one move ahead: the other buckets
//! of all occupants of the current bucket are read together, and an
//! occupant that can move straight into a free slot ends the walk. Only
//! when the walk ends at an empty slot are the moves applied, from the far
//! end backwards: each fingerprint is written to its new slot before its
//! old slot is overwritten. So
//!
//! * a failed insert returns [`InsertError::Full`] and leaves the table
//!   exactly as it was: no victim is dropped;
//! * at every instant of a successful insert, every stored fingerprint is in
//!   one of its two buckets, so a reader of live memory (an XDP program)
//!   never sees a listed item disappear.
//!
//! The path is kept on the stack (`4 * KICK_PATH_CAPACITY` bytes), only in
//! the relocation branch of an insert.

use core::marker::PhantomData;
use core::num::NonZeroU16;

use crate::fingerprint::Fingerprint;
use crate::hash::{fmix32, KeyHash, KeyedHasher};
use crate::layout::{
    alternate_bucket, bucket_count, buckets_contain, find_slot, locate, BucketStorage, Location,
};
use crate::math;

/// Default bound on relocation steps per insert (as in the reference
/// implementation).
pub const DEFAULT_MAX_KICKS: u16 = 500;

/// Longest relocation path an insert can apply (1 KiB of stack);
/// [`CuckooFilter::set_max_kicks`] clamps to it. With the walk's look-ahead,
/// 256 steps fill 4-slot tables beyond 97% (the test in `tests/model.rs`),
/// as 512 did.
pub const KICK_PATH_CAPACITY: usize = 256;

/// A cuckoo filter with fingerprints `F`, `SLOTS` slots per bucket and
/// buckets in `B`.
#[derive(Clone, Debug)]
pub struct CuckooFilter<F: Fingerprint, const SLOTS: usize, B> {
    buckets: B,
    seed: u64,
    len: usize,
    /// `None` means [`DEFAULT_MAX_KICKS`]; kept so that a new static filter
    /// is all zero bytes (and so in `.bss`, costing no flash).
    max_kicks: Option<NonZeroU16>,
    random_state: u32,
    fingerprint: PhantomData<F>,
}

/// A cuckoo filter over a `[[F; SLOTS]; BUCKETS]` array, constructible in a
/// `const` context.
pub type StaticCuckooFilter<F, const SLOTS: usize, const BUCKETS: usize> =
    CuckooFilter<F, SLOTS, [[F; SLOTS]; BUCKETS]>;

/// An insert that found no room.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum InsertError {
    /// Both buckets are full and no relocation path was found within the
    /// kick budget. The filter is unchanged.
    Full,
}

impl core::fmt::Display for InsertError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("cuckoo filter is full: no room for the item (the filter is unchanged)")
    }
}

impl core::error::Error for InsertError {}

/// Storage that cannot hold a filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum StorageError {
    /// The storage has no room at all.
    Empty,
    /// The bucket count is zero or not a power of two.
    BucketCountNotPowerOfTwo(usize),
    /// More than 2^32 slots (cuckoo) or cells (Bloom) in all.
    TooLarge(usize),
}

impl core::fmt::Display for StorageError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            StorageError::Empty => f.write_str("the storage is empty"),
            StorageError::BucketCountNotPowerOfTwo(n) => {
                write!(f, "bucket count {n} is not a power of two")
            }
            StorageError::TooLarge(n) => write!(f, "{n} buckets or words are more than 2^32 cells"),
        }
    }
}

impl core::error::Error for StorageError {}

impl<F: Fingerprint, const SLOTS: usize, const BUCKETS: usize>
    StaticCuckooFilter<F, SLOTS, BUCKETS>
{
    const BUCKETS_ARE_VALID: () = {
        assert!(
            BUCKETS.is_power_of_two(),
            "the number of buckets must be a power of two"
        );
        assert!(
            (BUCKETS as u64).saturating_mul(SLOTS as u64) <= 1 << 32,
            "at most 2^32 slots"
        );
    };

    /// An empty filter keyed with `seed`.
    ///
    /// For a large `static`, pass seed 0 and call [`CuckooFilter::reseed`] at
    /// boot: an all-zero filter is placed in `.bss` and costs no flash.
    pub const fn new(seed: u64) -> Self {
        let () = Self::BUCKETS_ARE_VALID;
        let () = Self::SLOTS_ARE_VALID;
        Self {
            buckets: [[F::EMPTY; SLOTS]; BUCKETS],
            seed,
            len: 0,
            max_kicks: None,
            random_state: 0,
            fingerprint: PhantomData,
        }
    }
}

impl<F: Fingerprint, const SLOTS: usize, B: BucketStorage<F, SLOTS>> CuckooFilter<F, SLOTS, B> {
    const SLOTS_ARE_VALID: () = assert!(
        matches!(SLOTS, 1 | 2 | 4 | 8),
        "slots per bucket must be 1, 2, 4 or 8"
    );

    /// A filter over existing storage (a heap slice, mapped memory). Items
    /// already in the storage are counted, so a table restored from memory
    /// keeps working; their hashes must have used `seed`.
    pub fn with_storage(buckets: B, seed: u64) -> Result<Self, StorageError> {
        let mut filter = Self::with_storage_and_len(buckets, seed, 0)?;
        filter.len = filter.count_occupied();
        Ok(filter)
    }

    /// Like [`Self::with_storage`], but takes the number of stored items
    /// from the caller instead of counting them, which reads every bucket:
    /// for a short-lived handle on a large table, such as one update of a
    /// live BPF map. A wrong `len` only makes [`Self::len`],
    /// [`Self::load_factor`] and [`Self::expected_fpr`] wrong; lookups,
    /// inserts and removes do not depend on it.
    pub fn with_storage_and_len(buckets: B, seed: u64, len: usize) -> Result<Self, StorageError> {
        let () = Self::SLOTS_ARE_VALID;
        let count = buckets.bucket_count();
        if !count.is_power_of_two() {
            return Err(StorageError::BucketCountNotPowerOfTwo(count));
        }
        if (count as u64).saturating_mul(SLOTS as u64) > 1 << 32 {
            return Err(StorageError::TooLarge(count));
        }
        Ok(Self {
            buckets,
            seed,
            len,
            max_kicks: None,
            random_state: 0,
            fingerprint: PhantomData,
        })
    }

    /// The storage, for reading the raw table.
    pub fn storage(&self) -> &B {
        &self.buckets
    }

    /// Gives the storage back.
    pub fn into_storage(self) -> B {
        self.buckets
    }

    /// The hash seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Empties the filter and keys it with a new seed.
    pub fn reseed(&mut self, seed: u64) {
        self.clear();
        self.seed = seed;
    }

    /// Maximum relocation steps per insert.
    pub fn max_kicks(&self) -> u16 {
        self.max_kicks.map_or(DEFAULT_MAX_KICKS, NonZeroU16::get)
    }

    /// Sets the relocation budget, clamped to `1..=KICK_PATH_CAPACITY`;
    /// returns the value in force.
    pub fn set_max_kicks(&mut self, max_kicks: u16) -> u16 {
        self.max_kicks = NonZeroU16::new(max_kicks.clamp(1, KICK_PATH_CAPACITY as u16));
        self.max_kicks()
    }

    /// Number of buckets.
    #[inline(always)]
    pub fn bucket_count(&self) -> usize {
        self.buckets.bucket_count()
    }

    #[inline(always)]
    fn bucket_mask(&self) -> usize {
        self.bucket_count().wrapping_sub(1)
    }

    /// Number of fingerprints stored (each insert counts, duplicates too).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.bucket_count().saturating_mul(SLOTS)
    }

    /// Fraction of slots in use.
    pub fn load_factor(&self) -> f64 {
        self.len as f64 / self.capacity() as f64
    }

    /// The false-positive rate expected at the current load:
    /// `1 - (1 - 1/(2^f - 1))^(2·b·α)`, about `2·b·α / 2^f`.
    pub fn expected_fpr(&self) -> f64 {
        math::cuckoo_fpr(F::BITS, SLOTS, self.load_factor())
    }

    /// Removes everything (the seed stays).
    pub fn clear(&mut self) {
        for bucket in 0..self.bucket_count() {
            for slot in 0..SLOTS {
                self.buckets.set_slot(bucket, slot, F::EMPTY);
            }
        }
        self.len = 0;
    }

    /// The hash of `item` under this filter's seed.
    #[inline]
    pub fn hash<T: core::hash::Hash + ?Sized>(&self, item: &T) -> KeyHash {
        KeyedHasher::hash_item(self.seed, item)
    }

    /// Where a hash lives in this filter.
    #[inline(always)]
    pub fn locate(&self, hash: KeyHash) -> Location<F> {
        locate(hash, self.bucket_mask())
    }

    /// Adds `item` (again, if it is present: see [`Self::insert_unique`]).
    pub fn insert<T: core::hash::Hash + ?Sized>(&mut self, item: &T) -> Result<(), InsertError> {
        self.insert_hash(self.hash(item))
    }

    /// Adds `item` only if it is not already reported present (RedisBloom's
    /// `CF.ADDNX`). `Ok(false)` when it was (or a false positive said so).
    pub fn insert_unique<T: core::hash::Hash + ?Sized>(
        &mut self,
        item: &T,
    ) -> Result<bool, InsertError> {
        self.insert_unique_hash(self.hash(item))
    }

    /// Whether `item` may be present (no false negatives).
    pub fn contains<T: core::hash::Hash + ?Sized>(&self, item: &T) -> bool {
        self.contains_hash(self.hash(item))
    }

    /// Removes one copy of `item`; `false` if none was found. Only remove
    /// items that were inserted, or another item's fingerprint may go.
    pub fn remove<T: core::hash::Hash + ?Sized>(&mut self, item: &T) -> bool {
        self.remove_hash(self.hash(item))
    }

    /// How many copies of `item`'s fingerprint are stored (RedisBloom's
    /// `CF.COUNT`: an upper bound on the copies of `item`).
    pub fn count<T: core::hash::Hash + ?Sized>(&self, item: &T) -> usize {
        self.count_hash(self.hash(item))
    }

    /// [`Self::contains`] for a precomputed hash. Loads both buckets, then
    /// compares them without a branch.
    #[inline]
    pub fn contains_hash(&self, hash: KeyHash) -> bool {
        self.contains_location(self.locate(hash))
    }

    /// Whether either bucket of `location` holds its fingerprint.
    #[inline(always)]
    pub(crate) fn contains_location(&self, location: Location<F>) -> bool {
        let [primary, alternate] = self.both_buckets(location);
        buckets_contain(&primary, &alternate, location.fingerprint)
    }

    /// Asks for both buckets of `location` to be brought into the cache
    /// (see [`BucketStorage::prefetch_bucket`]).
    #[inline(always)]
    pub(crate) fn prefetch_buckets(&self, location: Location<F>) {
        self.buckets.prefetch_bucket(location.primary);
        self.buckets.prefetch_bucket(location.alternate);
    }

    /// [`Self::count`] for a precomputed hash.
    pub fn count_hash(&self, hash: KeyHash) -> usize {
        let location = self.locate(hash);
        let [primary, alternate] = self.both_buckets(location);
        // When both indices are one bucket, its copies count once.
        let distinct = usize::from(location.alternate != location.primary);
        bucket_count(&primary, location.fingerprint)
            + distinct * bucket_count(&alternate, location.fingerprint)
    }

    /// [`Self::insert_unique`] for a precomputed hash.
    pub fn insert_unique_hash(&mut self, hash: KeyHash) -> Result<bool, InsertError> {
        if self.contains_hash(hash) {
            return Ok(false);
        }
        self.insert_hash(hash).map(|()| true)
    }

    /// [`Self::remove`] for a precomputed hash.
    pub fn remove_hash(&mut self, hash: KeyHash) -> bool {
        let location = self.locate(hash);
        match self.first_slot_of_either(location, location.fingerprint) {
            Some((bucket, slot)) => {
                self.buckets.set_slot(bucket, slot, F::EMPTY);
                self.len = self.len.saturating_sub(1);
                true
            }
            None => false,
        }
    }

    /// [`Self::insert`] for a precomputed hash.
    #[inline]
    pub fn insert_hash(&mut self, hash: KeyHash) -> Result<(), InsertError> {
        let location = self.locate(hash);
        match self.place(location) {
            true => Ok(()),
            false => self.insert_by_relocation(location),
        }
    }

    /// Inserts `hash` into a free slot of one of its two buckets, reading
    /// and writing no other bucket; `false`, and nothing changed, when both
    /// are full (only [`Self::insert_hash`]'s relocations make room then).
    /// For storage of which only some buckets are at hand.
    pub fn insert_hash_in_place(&mut self, hash: KeyHash) -> bool {
        self.place(self.locate(hash))
    }

    /// Puts `location`'s fingerprint in the first free slot of its primary
    /// bucket, else of its alternate one; whether there was one.
    #[inline(always)]
    fn place(&mut self, location: Location<F>) -> bool {
        match self.first_slot_of_either(location, F::EMPTY) {
            Some((bucket, slot)) => {
                self.buckets.set_slot(bucket, slot, location.fingerprint);
                self.len = self.len.saturating_add(1);
                true
            }
            None => false,
        }
    }

    /// Both candidate buckets of `location`, loaded before either is looked
    /// at, so their cache misses overlap.
    #[inline(always)]
    pub(crate) fn both_buckets(&self, location: Location<F>) -> [[F; SLOTS]; 2] {
        [
            self.buckets.bucket(location.primary),
            self.buckets.bucket(location.alternate),
        ]
    }

    /// The first slot holding `fingerprint` in the primary bucket, else in
    /// the alternate one, as `(bucket, slot)`.
    #[inline(always)]
    fn first_slot_of_either(
        &self,
        location: Location<F>,
        fingerprint: F,
    ) -> Option<(usize, usize)> {
        let [primary, alternate] = self.both_buckets(location);
        let in_primary = find_slot(&primary, fingerprint).map(|slot| (location.primary, slot));
        let in_alternate =
            find_slot(&alternate, fingerprint).map(|slot| (location.alternate, slot));
        in_primary.or(in_alternate)
    }

    fn slot_value(&self, global_slot: u32) -> F {
        let (bucket, slot) = Self::split(global_slot);
        self.buckets
            .bucket(bucket)
            .get(slot)
            .copied()
            .unwrap_or(F::EMPTY)
    }

    #[inline(always)]
    fn split(global_slot: u32) -> (usize, usize) {
        let global_slot = global_slot as usize;
        (global_slot / SLOTS, global_slot % SLOTS)
    }

    fn next_random(&mut self) -> u32 {
        self.random_state = self.random_state.wrapping_add(0x9e37_79b9);
        fmix32(self.random_state)
    }

    /// Both buckets are full: search a path of moves ending in an empty slot,
    /// then apply it back to front (see the module documentation).
    ///
    /// The walk stands on a full bucket and first looks one step ahead: the
    /// other buckets of all its occupants are loaded together, and if one
    /// has a free slot, that occupant moves there and the search ends. Only
    /// otherwise does a random occupant move on. So each step costs one
    /// round of memory latency for `SLOTS` reads, and finds a free slot
    /// about `SLOTS` times as often as a walk that reads one bucket a step.
    #[inline(never)]
    fn insert_by_relocation(&mut self, location: Location<F>) -> Result<(), InsertError> {
        let mask = self.bucket_mask();
        let mut path = [0u32; KICK_PATH_CAPACITY];
        let mut path_len = 0usize;
        let mut bucket = if self.next_random() & 1 == 0 {
            location.primary
        } else {
            location.alternate
        };

        for _ in 0..self.max_kicks() {
            let visited = path.get(..path_len).unwrap_or(&[]);
            let next_buckets = self
                .buckets
                .bucket(bucket)
                .map(|occupant| alternate_bucket(bucket, occupant, mask));
            let next_contents = next_buckets.map(|next| self.buckets.bucket(next));
            let first_slot = bucket * SLOTS;
            let step_to_free_slot = next_contents
                .iter()
                .zip(next_buckets)
                .enumerate()
                .filter_map(|(slot, (contents, next))| {
                    find_slot(contents, F::EMPTY).map(|free| (slot, next, free))
                })
                .find(|&(slot, _, _)| !visited.contains(&((first_slot + slot) as u32)));
            let slot = match step_to_free_slot {
                Some((slot, _, _)) => slot,
                None => self.next_random() as usize % SLOTS,
            };
            let global_slot = (first_slot + slot) as u32;
            if let Some(position) = visited.iter().position(|&s| s == global_slot) {
                // A cycle: go back to the state in which this slot was first
                // chosen (same bucket, shorter path) and choose again.
                path_len = position;
                continue;
            }
            let Some(entry) = path.get_mut(path_len) else {
                break;
            };
            *entry = global_slot;
            path_len += 1;
            if let Some((_, free_bucket, free_slot)) = step_to_free_slot {
                let path = path.get(..path_len).unwrap_or(&[]);
                self.apply_path(path, free_bucket, free_slot, location);
                self.len = self.len.saturating_add(1);
                return Ok(());
            }
            bucket = next_buckets.get(slot).copied().unwrap_or(bucket);
        }
        Err(InsertError::Full)
    }

    /// Moves the occupant of each path slot one step on, starting with the
    /// last one (into the free slot) so nothing is ever absent.
    fn apply_path(
        &mut self,
        path: &[u32],
        free_bucket: usize,
        free_slot: usize,
        location: Location<F>,
    ) {
        let mut destination = (free_bucket, free_slot);
        for &source in path.iter().rev() {
            let moving = self.slot_value(source);
            self.buckets.set_slot(destination.0, destination.1, moving);
            destination = Self::split(source);
        }
        self.buckets
            .set_slot(destination.0, destination.1, location.fingerprint);
    }

    fn count_occupied(&self) -> usize {
        (0..self.bucket_count())
            .map(|bucket| SLOTS - bucket_count(&self.buckets.bucket(bucket), F::EMPTY))
            .sum()
    }

    /// The fingerprint in slot `index` of the whole table (bucket-major).
    pub(crate) fn global_slot(&self, index: usize) -> F {
        self.slot_value(index as u32)
    }

    /// Writes slot `index` of the whole table (bucket-major), without
    /// bookkeeping: [`Self::finish_load`] recounts afterwards.
    pub(crate) fn set_global_slot(&mut self, index: usize, fingerprint: F) {
        self.buckets
            .set_slot(index / SLOTS, index % SLOTS, fingerprint);
    }

    /// Completes a bulk load: adopts `seed` and recounts the items.
    pub(crate) fn finish_load(&mut self, seed: u64) {
        self.seed = seed;
        self.len = self.count_occupied();
    }
}
