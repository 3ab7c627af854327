//! A cuckoo filter that grows by adding levels, with RedisBloom's
//! `CF.RESERVE … EXPANSION e` semantics, over storage the caller provides
//! for each level (so the crate stays allocator-free).
//!
//! [`GrowableCuckooFilter`] is a stack of [`CuckooFilter`] levels that share
//! one seed, so a key is hashed once and located in every level.
//!
//! * **Growth.** When an insert finds no room in any level, a level is
//!   added whose capacity is the last level's times the expansion factor,
//!   rounded up to a power of two (expansion 3 on 4 buckets: 16, then 64).
//!   Expansion 0 never grows: the filter reports [`GrowError::Full`], as a
//!   plain filter would. The first level holds `capacity` items rounded up
//!   to a power of two of buckets (RedisBloom's rule).
//! * **Inserts** use the unused room of earlier levels first: a free slot
//!   in one of the key's two buckets, oldest level first; then a
//!   relocating insert, oldest level first, in every level but those known
//!   to be full (a relocating insert failed in them since the last removal
//!   from them); the newest level is always tried. Only when that fails
//!   too is a level added. So a grown filter does not pay a failing kick
//!   walk per old level on each insert, as RedisBloom's does not.
//! * **Lookups** (`contains`, `count`) check every level; the
//!   false-positive rate is the sum of the levels' rates
//!   ([`GrowableCuckooFilter::expected_fpr`]).
//! * **Removes** take one copy from the newest level that holds the
//!   fingerprint (as RedisBloom's `CF.DEL`).
//! * **A failed insert loses nothing.** Every level's insert leaves its
//!   table unchanged when it fails (see [`crate::cuckoo`]), and a level is
//!   only added once its storage is at hand; when it is not
//!   ([`GrowError::NoStorage`]), the level limit is reached
//!   ([`GrowError::LevelLimit`]) or the next level would be too large
//!   ([`GrowError::TooLarge`]), the error names the reason, the item given
//!   is the one not inserted, and every table is exactly as before.
//!
//! Storage comes from a [`LevelStorage`]: [`ArenaLevels`] carves levels out
//! of one caller-provided slice (no allocator), and with feature `alloc`,
//! [`HeapLevels`] allocates a `Vec` per level ([`VecGrowableCuckooFilter`]).
//!
//! # Snapshot format (growable, version 1, integers little-endian)
//!
//! A 40-byte header, then each level's snapshot in the plain
//! [snapshot format](crate::snapshot), oldest level first, each with its own
//! header and CRC:
//!
//! | offset | size | field                                              |
//! |--------|------|----------------------------------------------------|
//! | 0      | 4    | magic `b"CFGW"`                                     |
//! | 4      | 2    | format version, 1                                   |
//! | 6      | 1    | fingerprint bits (8, 16, 32)                        |
//! | 7      | 1    | slots per bucket (1, 2, 4, 8)                       |
//! | 8      | 1    | log2 of the first level's bucket count              |
//! | 9      | 1    | number of levels (at most 64)                       |
//! | 10     | 2    | relocation budget (max kicks)                       |
//! | 12     | 4    | expansion factor (0: never grows)                   |
//! | 16     | 8    | hash seed (every level's)                           |
//! | 24     | 8    | bit `i` set: level `i` is known to be full          |
//! | 32     | 4    | reserved, zero                                      |
//! | 36     | 4    | CRC-32 (as in the plain format) of bytes 0..36       |
//!
//! Level `i`'s bucket count follows from the header by the growth rule, so
//! the header alone gives the whole length, and each level's own header
//! must agree. [`GrowableCuckooFilter::load_snapshot`] checks everything
//! before it changes anything; [`GrowableSnapshotLoader`] takes chunks into
//! a staging filter and [`GrowableSnapshotExporter`] produces them.
//!
//! ```
//! use filter_core::growable::{ArenaLevels, GrowableCuckooFilter, ReserveParams};
//!
//! // Room for levels of 16, 32 and 64 buckets of four 16-bit fingerprints.
//! let mut arena = [[0u16; 4]; 112];
//! let params = ReserveParams::new(64).with_expansion(2);
//! let mut filter =
//!     GrowableCuckooFilter::<u16, 4, _, 3>::new(ArenaLevels::new(&mut arena), 7, params)
//!         .unwrap();
//! for key in 0..300u32 {
//!     filter.insert(&key).unwrap();
//! }
//! assert_eq!(filter.level_count(), 3);
//! assert!((0..300u32).all(|key| filter.contains(&key)));
//! assert!(filter.remove(&5u32));
//! assert_eq!(filter.len(), 299);
//! ```

use crate::cuckoo::{CuckooFilter, InsertError, DEFAULT_MAX_KICKS, KICK_PATH_CAPACITY};
use crate::fingerprint::Fingerprint;
use crate::hash::{KeyHash, KeyedHasher};
use crate::layout::BucketStorage;
use crate::snapshot::{
    parse_snapshot, Parameter, SnapshotError, SnapshotExporter, SnapshotHeader, SnapshotLoader,
    CRC32, HEADER_LEN as LEVEL_HEADER_LEN, TRAILER_LEN as LEVEL_TRAILER_LEN,
};

/// The default most levels of a [`GrowableCuckooFilter`].
pub const DEFAULT_MAX_LEVELS: usize = 32;
/// The most levels any growable filter can have (a snapshot records which
/// levels are full in a 64-bit mask).
pub const LEVEL_LIMIT: usize = 64;
/// The default expansion factor: RedisBloom's (each new level as large as
/// the last).
pub const DEFAULT_EXPANSION: u32 = 1;

/// First four bytes of a growable filter's snapshot.
pub const MAGIC: [u8; 4] = *b"CFGW";
/// The growable snapshot format version this crate writes and reads.
pub const FORMAT_VERSION: u16 = 1;
/// Header size of a growable snapshot in bytes.
pub const HEADER_LEN: usize = 40;

/// Hands out the storage of each level of a [`GrowableCuckooFilter`].
pub trait LevelStorage<F: Fingerprint, const S: usize> {
    /// The storage of one level.
    type Buckets: BucketStorage<F, S>;

    /// Storage of exactly `buckets` buckets (a power of two) for level
    /// `level`, or `None` when there is none. Its slots should be empty;
    /// the filter empties storage that is not.
    fn allocate(&mut self, level: usize, buckets: usize) -> Option<Self::Buckets>;

    /// Takes back the storage of a level the filter no longer uses (after a
    /// snapshot with fewer or other levels is loaded). Dropped by default.
    fn release(&mut self, level: usize, buckets: Self::Buckets) {
        let _ = (level, buckets);
    }
}

impl<F: Fingerprint, const S: usize, P: LevelStorage<F, S> + ?Sized> LevelStorage<F, S> for &mut P {
    type Buckets = P::Buckets;

    fn allocate(&mut self, level: usize, buckets: usize) -> Option<Self::Buckets> {
        (**self).allocate(level, buckets)
    }

    fn release(&mut self, level: usize, buckets: Self::Buckets) {
        (**self).release(level, buckets);
    }
}

/// Levels carved, in order, out of one caller-provided slice of buckets:
/// growth without an allocator. Released levels are not reused (the arena
/// only moves forward); make a new arena to start over.
#[derive(Debug)]
pub struct ArenaLevels<'a, F, const S: usize> {
    free: &'a mut [[F; S]],
}

impl<'a, F: Fingerprint, const S: usize> ArenaLevels<'a, F, S> {
    /// An arena over `buckets`.
    pub fn new(buckets: &'a mut [[F; S]]) -> Self {
        Self { free: buckets }
    }

    /// Buckets not handed out yet.
    pub fn remaining(&self) -> usize {
        self.free.len()
    }
}

impl<'a, F: Fingerprint, const S: usize> LevelStorage<F, S> for ArenaLevels<'a, F, S> {
    type Buckets = &'a mut [[F; S]];

    fn allocate(&mut self, _level: usize, buckets: usize) -> Option<Self::Buckets> {
        if buckets > self.free.len() {
            return None;
        }
        let free = core::mem::take(&mut self.free);
        let (level, rest) = free.split_at_mut_checked(buckets)?;
        self.free = rest;
        level.fill([F::EMPTY; S]);
        Some(level)
    }
}

/// A `Vec` per level, allocated when the filter grows (feature `alloc`).
/// An allocation that fails is reported as [`GrowError::NoStorage`].
#[cfg(feature = "alloc")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct HeapLevels;

#[cfg(feature = "alloc")]
impl<F: Fingerprint, const S: usize> LevelStorage<F, S> for HeapLevels {
    type Buckets = alloc::vec::Vec<[F; S]>;

    fn allocate(&mut self, _level: usize, buckets: usize) -> Option<Self::Buckets> {
        let mut storage = alloc::vec::Vec::new();
        storage.try_reserve_exact(buckets).ok()?;
        storage.resize(buckets, [F::EMPTY; S]);
        Some(storage)
    }
}

/// A growable filter whose levels are `Vec`s (feature `alloc`).
#[cfg(feature = "alloc")]
pub type VecGrowableCuckooFilter<F, const S: usize> =
    GrowableCuckooFilter<F, S, HeapLevels, DEFAULT_MAX_LEVELS>;

#[cfg(feature = "alloc")]
impl<F: Fingerprint, const S: usize> VecGrowableCuckooFilter<F, S> {
    /// RedisBloom's `CF.RESERVE key capacity BUCKETSIZE S MAXITERATIONS
    /// max_kicks EXPANSION expansion`, keyed with `seed`.
    ///
    /// ```
    /// use filter_core::growable::VecGrowableCuckooFilter;
    ///
    /// let mut filter = VecGrowableCuckooFilter::<u16, 2>::reserve(9, 1000, 20, 2).unwrap();
    /// for key in 0..5000u32 {
    ///     filter.insert(&key).unwrap();
    /// }
    /// assert!(filter.level_count() > 1);
    /// assert!((0..5000u32).all(|key| filter.contains(&key)));
    /// ```
    pub fn reserve(
        seed: u64,
        capacity: usize,
        max_kicks: u16,
        expansion: u32,
    ) -> Result<Self, GrowError> {
        let params = ReserveParams::new(capacity)
            .with_max_kicks(max_kicks)
            .with_expansion(expansion);
        Self::new(HeapLevels, seed, params)
    }
}

/// How a [`GrowableCuckooFilter`] starts and grows (RedisBloom's
/// `CF.RESERVE` arguments; the bucket size is the filter type's `S`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ReserveParams {
    /// Items the first level holds: `capacity / S` buckets, rounded up to a
    /// power of two (at least one).
    pub capacity: usize,
    /// Relocation budget of every level (clamped as by
    /// [`CuckooFilter::set_max_kicks`]).
    pub max_kicks: u16,
    /// Each new level's capacity is the last one's times this, rounded up
    /// to a power of two; 0 never grows.
    pub expansion: u32,
}

impl ReserveParams {
    /// `capacity` items in the first level, the default relocation budget
    /// ([`DEFAULT_MAX_KICKS`], clamped to [`KICK_PATH_CAPACITY`]) and
    /// [`DEFAULT_EXPANSION`].
    pub const fn new(capacity: usize) -> Self {
        Self {
            capacity,
            max_kicks: DEFAULT_MAX_KICKS,
            expansion: DEFAULT_EXPANSION,
        }
    }

    /// With expansion factor `expansion` (0: never grows).
    pub const fn with_expansion(self, expansion: u32) -> Self {
        Self { expansion, ..self }
    }

    /// With relocation budget `max_kicks`.
    pub const fn with_max_kicks(self, max_kicks: u16) -> Self {
        Self { max_kicks, ..self }
    }
}

/// An insert (or a construction) that found no room. Every level is
/// unchanged; the item given is the one not inserted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum GrowError {
    /// Every level is full and the filter does not grow (expansion 0).
    Full,
    /// Every level is full and the filter has its most levels.
    LevelLimit {
        /// Levels in the filter.
        levels: usize,
    },
    /// Every level is full and the next level would have more than 2^32
    /// slots.
    TooLarge {
        /// The level that would have been added.
        level: usize,
    },
    /// Every level is full and the storage had none for the next level.
    NoStorage {
        /// The level that would have been added.
        level: usize,
        /// Its bucket count.
        buckets: usize,
    },
}

impl core::fmt::Display for GrowError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            GrowError::Full => f.write_str(
                "cuckoo filter is full and does not grow (expansion 0); the filter is unchanged",
            ),
            GrowError::LevelLimit { levels } => write!(
                f,
                "cuckoo filter is full at its limit of {levels} levels; the filter is unchanged"
            ),
            GrowError::TooLarge { level } => write!(
                f,
                "cuckoo filter is full and level {level} would exceed 2^32 slots; \
                 the filter is unchanged"
            ),
            GrowError::NoStorage { level, buckets } => write!(
                f,
                "cuckoo filter is full and there is no storage for level {level} \
                 ({buckets} buckets); the filter is unchanged"
            ),
        }
    }
}

impl core::error::Error for GrowError {}

impl From<InsertError> for GrowError {
    fn from(InsertError::Full: InsertError) -> Self {
        GrowError::Full
    }
}

/// Why a growable snapshot was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum GrowableSnapshotError {
    /// The growable header, the length or the framing: magic, version,
    /// dimensions ([`SnapshotError::ParameterMismatch`]), header CRC,
    /// truncation, trailing bytes, a short output buffer.
    Container(SnapshotError),
    /// A level's snapshot was rejected.
    Level {
        /// Which level.
        level: usize,
        /// Why.
        error: SnapshotError,
    },
    /// The snapshot has more levels than the target can hold.
    TooManyLevels {
        /// Levels in the snapshot.
        levels: usize,
        /// The target's most levels.
        max: usize,
    },
    /// A level's seed is not the header's.
    SeedMismatch {
        /// Which level.
        level: usize,
    },
    /// The target's storage had none for a level.
    NoStorage {
        /// Which level.
        level: usize,
        /// Its bucket count.
        buckets: usize,
    },
}

impl core::fmt::Display for GrowableSnapshotError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            GrowableSnapshotError::Container(error) => error.fmt(f),
            GrowableSnapshotError::Level { level, error } => write!(f, "level {level}: {error}"),
            GrowableSnapshotError::TooManyLevels { levels, max } => write!(
                f,
                "snapshot has {levels} levels, the target filter at most {max}"
            ),
            GrowableSnapshotError::SeedMismatch { level } => {
                write!(f, "level {level}'s seed is not the snapshot's")
            }
            GrowableSnapshotError::NoStorage { level, buckets } => write!(
                f,
                "no storage for level {level} ({buckets} buckets) of the snapshot"
            ),
        }
    }
}

impl core::error::Error for GrowableSnapshotError {}

impl From<SnapshotError> for GrowableSnapshotError {
    fn from(error: SnapshotError) -> Self {
        GrowableSnapshotError::Container(error)
    }
}

/// One level: a filter and whether a relocating insert failed in it since
/// the last removal from it.
#[derive(Clone, Debug)]
struct Level<F: Fingerprint, const S: usize, B> {
    filter: CuckooFilter<F, S, B>,
    full: bool,
}

/// A cuckoo filter of up to `LEVELS` levels that grows when full (see the
/// [module documentation](self)), with storage from `P`.
#[derive(Clone, Debug)]
pub struct GrowableCuckooFilter<
    F: Fingerprint,
    const S: usize,
    P: LevelStorage<F, S>,
    const LEVELS: usize = DEFAULT_MAX_LEVELS,
> {
    storage: P,
    /// Levels `0..level_count()` are `Some`, the rest `None`.
    levels: [Option<Level<F, S, P::Buckets>>; LEVELS],
    seed: u64,
    base_buckets: usize,
    expansion: u32,
    max_kicks: u16,
}

/// Buckets for `capacity` items in buckets of `slots` (RedisBloom's rule).
fn initial_buckets(capacity: usize, slots: usize) -> Option<usize> {
    capacity
        .div_ceil(slots.max(1))
        .max(1)
        .checked_next_power_of_two()
}

/// The bucket count of the level after one of `last` buckets; `None` when
/// it overflows.
fn grown_buckets(last: usize, expansion: u32) -> Option<usize> {
    last.checked_mul(usize::try_from(expansion).ok()?)?
        .checked_next_power_of_two()
}

/// Whether a level of `buckets` buckets is one a filter can have.
fn level_fits(buckets: usize, slots: usize) -> bool {
    buckets.is_power_of_two() && (buckets as u64).saturating_mul(slots as u64) <= 1 << 32
}

impl<F: Fingerprint, const S: usize, P: LevelStorage<F, S>, const LEVELS: usize>
    GrowableCuckooFilter<F, S, P, LEVELS>
{
    const LEVELS_ARE_VALID: () = assert!(
        LEVELS >= 1 && LEVELS <= LEVEL_LIMIT,
        "a growable filter has 1 to 64 levels"
    );

    /// A filter keyed with `seed` whose first level (from `storage`) holds
    /// `params.capacity` items; errors when that level cannot be had.
    pub fn new(storage: P, seed: u64, params: ReserveParams) -> Result<Self, GrowError> {
        let () = Self::LEVELS_ARE_VALID;
        let base_buckets =
            initial_buckets(params.capacity, S).ok_or(GrowError::TooLarge { level: 0 })?;
        let mut filter = Self {
            storage,
            levels: core::array::from_fn(|_| None),
            seed,
            base_buckets,
            expansion: params.expansion,
            // As `CuckooFilter::set_max_kicks` clamps it.
            max_kicks: params.max_kicks.clamp(1, KICK_PATH_CAPACITY as u16),
        };
        filter.push_level(base_buckets)?;
        Ok(filter)
    }

    fn levels_iter(&self) -> impl DoubleEndedIterator<Item = &Level<F, S, P::Buckets>> {
        self.levels.iter().flatten()
    }

    fn levels_iter_mut(&mut self) -> impl Iterator<Item = &mut Level<F, S, P::Buckets>> {
        self.levels.iter_mut().flatten()
    }

    /// The levels, oldest (smallest) first.
    pub fn levels(&self) -> impl DoubleEndedIterator<Item = &CuckooFilter<F, S, P::Buckets>> {
        self.levels_iter().map(|level| &level.filter)
    }

    /// Level `index`, if the filter has it.
    pub fn level(&self, index: usize) -> Option<&CuckooFilter<F, S, P::Buckets>> {
        self.levels_iter().nth(index).map(|level| &level.filter)
    }

    /// Whether a relocating insert failed in level `index` since the last
    /// removal from it (inserts then only use free slots there).
    pub fn level_is_full(&self, index: usize) -> bool {
        self.levels_iter()
            .nth(index)
            .is_some_and(|level| level.full)
    }

    /// Number of levels.
    pub fn level_count(&self) -> usize {
        self.levels_iter().count()
    }

    /// The most levels this filter can have.
    pub const fn max_levels(&self) -> usize {
        LEVELS
    }

    /// The level storage provider.
    pub fn storage(&self) -> &P {
        &self.storage
    }

    /// The hash seed of every level.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The expansion factor (0: never grows).
    pub fn expansion(&self) -> u32 {
        self.expansion
    }

    /// The relocation budget of every level.
    pub fn max_kicks(&self) -> u16 {
        self.max_kicks
    }

    /// The bucket count of the first level.
    pub fn base_bucket_count(&self) -> usize {
        self.base_buckets
    }

    /// The bucket count the next level would have; `None` when the filter
    /// does not grow (expansion 0) or the count overflows.
    pub fn next_level_buckets(&self) -> Option<usize> {
        match self.levels_iter().next_back() {
            None => Some(self.base_buckets),
            Some(_) if self.expansion == 0 => None,
            Some(last) => grown_buckets(last.filter.bucket_count(), self.expansion),
        }
    }

    /// Adds an empty level of `buckets` buckets from the storage, or
    /// changes nothing.
    fn push_level(&mut self, buckets: usize) -> Result<(), GrowError> {
        let level = self.level_count();
        if level >= LEVELS {
            return Err(GrowError::LevelLimit { levels: level });
        }
        if !level_fits(buckets, S) {
            return Err(GrowError::TooLarge { level });
        }
        let no_storage = GrowError::NoStorage { level, buckets };
        let storage = self.storage.allocate(level, buckets).ok_or(no_storage)?;
        if storage.bucket_count() != buckets {
            self.storage.release(level, storage);
            return Err(no_storage);
        }
        // Cannot fail: the bucket count was checked above.
        let mut filter = CuckooFilter::with_storage(storage, self.seed)
            .map_err(|_| GrowError::TooLarge { level })?;
        if !filter.is_empty() {
            filter.clear();
        }
        filter.set_max_kicks(self.max_kicks);
        let slot = self.levels.get_mut(level);
        match slot {
            Some(slot) => {
                *slot = Some(Level {
                    filter,
                    full: false,
                });
                Ok(())
            }
            None => {
                self.storage.release(level, filter.into_storage());
                Err(GrowError::LevelLimit { levels: level })
            }
        }
    }

    /// Gives the storage of levels `from..` back to the provider.
    fn truncate_levels(&mut self, from: usize) {
        for (index, slot) in self.levels.iter_mut().enumerate().skip(from) {
            if let Some(level) = slot.take() {
                self.storage.release(index, level.filter.into_storage());
            }
        }
    }

    /// Number of fingerprints stored in all levels.
    pub fn len(&self) -> usize {
        self.levels().map(CuckooFilter::len).sum()
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.levels().all(CuckooFilter::is_empty)
    }

    /// Slots in all levels.
    pub fn capacity(&self) -> usize {
        self.levels().map(CuckooFilter::capacity).sum()
    }

    /// Fraction of all slots in use.
    pub fn load_factor(&self) -> f64 {
        match self.capacity() {
            0 => 0.0,
            capacity => self.len() as f64 / capacity as f64,
        }
    }

    /// The false-positive rate expected at the current loads: the sum of the
    /// levels' rates (a lookup that misses checks every level).
    pub fn expected_fpr(&self) -> f64 {
        self.levels().map(CuckooFilter::expected_fpr).sum()
    }

    /// Empties every level; the levels and their storage stay.
    pub fn clear(&mut self) {
        for level in self.levels_iter_mut() {
            level.filter.clear();
            level.full = false;
        }
    }

    /// Empties every level and keys the filter with a new seed.
    pub fn reseed(&mut self, seed: u64) {
        self.seed = seed;
        for level in self.levels_iter_mut() {
            level.filter.reseed(seed);
            level.full = false;
        }
    }

    /// The hash of `item` under this filter's seed (the same in every level).
    #[inline]
    pub fn hash<T: core::hash::Hash + ?Sized>(&self, item: &T) -> KeyHash {
        KeyedHasher::hash_item(self.seed, item)
    }

    /// Adds `item` (again, if it is present), growing the filter when no
    /// level has room. On error nothing changed and `item` is not in.
    pub fn insert<T: core::hash::Hash + ?Sized>(&mut self, item: &T) -> Result<(), GrowError> {
        self.insert_hash(self.hash(item))
    }

    /// Adds `item` only if it is not already reported present (`CF.ADDNX`);
    /// `Ok(false)` when it was.
    pub fn insert_unique<T: core::hash::Hash + ?Sized>(
        &mut self,
        item: &T,
    ) -> Result<bool, GrowError> {
        self.insert_unique_hash(self.hash(item))
    }

    /// Whether `item` may be present in some level (no false negatives).
    pub fn contains<T: core::hash::Hash + ?Sized>(&self, item: &T) -> bool {
        self.contains_hash(self.hash(item))
    }

    /// Removes one copy of `item` from the newest level that holds its
    /// fingerprint; `false` if none does. Only remove items that were
    /// inserted, or another item's fingerprint may go.
    pub fn remove<T: core::hash::Hash + ?Sized>(&mut self, item: &T) -> bool {
        self.remove_hash(self.hash(item))
    }

    /// Copies of `item`'s fingerprint in all levels (`CF.COUNT`: an upper
    /// bound on the copies of `item`).
    pub fn count<T: core::hash::Hash + ?Sized>(&self, item: &T) -> usize {
        self.count_hash(self.hash(item))
    }

    /// [`Self::contains`] for a precomputed hash.
    pub fn contains_hash(&self, hash: KeyHash) -> bool {
        self.levels().any(|level| level.contains_hash(hash))
    }

    /// [`Self::count`] for a precomputed hash.
    pub fn count_hash(&self, hash: KeyHash) -> usize {
        self.levels().map(|level| level.count_hash(hash)).sum()
    }

    /// [`Self::insert_unique`] for a precomputed hash.
    pub fn insert_unique_hash(&mut self, hash: KeyHash) -> Result<bool, GrowError> {
        if self.contains_hash(hash) {
            return Ok(false);
        }
        self.insert_hash(hash).map(|()| true)
    }

    /// [`Self::remove`] for a precomputed hash.
    pub fn remove_hash(&mut self, hash: KeyHash) -> bool {
        for level in self.levels.iter_mut().rev().flatten() {
            if level.filter.remove_hash(hash) {
                level.full = false;
                return true;
            }
        }
        false
    }

    /// [`Self::insert`] for a precomputed hash.
    pub fn insert_hash(&mut self, hash: KeyHash) -> Result<(), GrowError> {
        // A free slot in one of the two buckets, oldest level first.
        if self
            .levels_iter_mut()
            .any(|level| level.filter.insert_hash_in_place(hash))
        {
            return Ok(());
        }
        // Relocation, oldest level first, skipping old levels known full.
        let newest = self.level_count().saturating_sub(1);
        for (index, level) in self.levels_iter_mut().enumerate() {
            if level.full && index != newest {
                continue;
            }
            match level.filter.insert_hash(hash) {
                Ok(()) => return Ok(()),
                Err(InsertError::Full) => level.full = true,
            }
        }
        let buckets = match self.next_level_buckets() {
            Some(buckets) => buckets,
            None if self.expansion == 0 => return Err(GrowError::Full),
            None => {
                return Err(GrowError::TooLarge {
                    level: self.level_count(),
                })
            }
        };
        self.push_level(buckets)?;
        match self.levels_iter_mut().last() {
            // An empty level always has room.
            Some(level) => level.filter.insert_hash(hash).map_err(GrowError::from),
            None => Err(GrowError::Full),
        }
    }

    /// The dimensions each level's snapshot header must have.
    fn level_dimensions(&self, buckets: usize) -> SnapshotHeader {
        SnapshotHeader {
            fingerprint_bits: F::BITS as u8,
            slots: S as u8,
            bucket_count_log2: buckets.trailing_zeros() as u8,
            seed: self.seed,
            item_count: 0,
        }
    }

    /// The header of this filter's snapshot.
    pub fn snapshot_header(&self) -> GrowableSnapshotHeader {
        let full_levels = self
            .levels_iter()
            .enumerate()
            .filter(|(_, level)| level.full)
            .fold(0u64, |mask, (index, _)| {
                mask | 1u64.checked_shl(index as u32).unwrap_or(0)
            });
        GrowableSnapshotHeader {
            fingerprint_bits: F::BITS as u8,
            slots: S as u8,
            base_bucket_count_log2: self.base_buckets.trailing_zeros() as u8,
            levels: self.level_count() as u8,
            max_kicks: self.max_kicks,
            expansion: self.expansion,
            seed: self.seed,
            full_levels,
        }
    }

    /// Size of this filter's snapshot in bytes.
    pub fn snapshot_len(&self) -> u64 {
        self.snapshot_header().total_len()
    }

    /// Writes the whole snapshot into `out`; returns its length.
    pub fn write_snapshot(&self, out: &mut [u8]) -> Result<usize, GrowableSnapshotError> {
        let needed = self.snapshot_len();
        let Some(out) = usize::try_from(needed)
            .ok()
            .and_then(|needed| out.get_mut(..needed))
        else {
            return Err(SnapshotError::BufferTooSmall { needed }.into());
        };
        let mut exporter = GrowableSnapshotExporter::new(self);
        Ok(exporter.next_chunk(self, out))
    }

    /// Checks a snapshot's header against this filter's type: fingerprint
    /// width, slots per bucket and level limit.
    fn check_fits(&self, header: &GrowableSnapshotHeader) -> Result<(), GrowableSnapshotError> {
        let checks = [
            (
                Parameter::FingerprintBits,
                F::BITS as u8,
                header.fingerprint_bits,
            ),
            (Parameter::SlotsPerBucket, S as u8, header.slots),
        ];
        for (parameter, expected, found) in checks {
            if expected != found {
                return Err(SnapshotError::ParameterMismatch {
                    parameter,
                    expected: u64::from(expected),
                    found: u64::from(found),
                }
                .into());
            }
        }
        let levels = usize::from(header.levels);
        if levels > LEVELS {
            return Err(GrowableSnapshotError::TooManyLevels {
                levels,
                max: LEVELS,
            });
        }
        Ok(())
    }

    /// Adopts a snapshot header's settings (not its levels).
    fn adopt(&mut self, header: &GrowableSnapshotHeader) {
        self.seed = header.seed;
        self.base_buckets = header.base_bucket_count();
        self.expansion = header.expansion;
        self.max_kicks = header.max_kicks.clamp(1, KICK_PATH_CAPACITY as u16);
    }

    /// Makes level `index` an empty-or-garbage level of `buckets` buckets:
    /// reuses it if it has that size, else replaces it and the levels after
    /// it with new storage.
    fn prepare_level(&mut self, index: usize, buckets: usize) -> Result<(), GrowableSnapshotError> {
        let reusable = self
            .level(index)
            .is_some_and(|level| level.bucket_count() == buckets);
        if !reusable {
            self.truncate_levels(index);
            self.push_level(buckets)
                .map_err(|_| GrowableSnapshotError::NoStorage {
                    level: index,
                    buckets,
                })?;
        }
        Ok(())
    }

    /// Replaces this filter's levels, contents and settings with a whole
    /// snapshot. Everything is checked, and the storage of every level that
    /// is not reused (a level of the same index and size is) is allocated,
    /// before anything changes: on any error the filter is left exactly as
    /// it was. Levels beyond the snapshot's go back to the storage.
    pub fn load_snapshot(&mut self, bytes: &[u8]) -> Result<(), GrowableSnapshotError> {
        let received = bytes.len() as u64;
        let header_bytes: &[u8; HEADER_LEN] = bytes
            .get(..HEADER_LEN)
            .and_then(|h| h.try_into().ok())
            .ok_or(SnapshotError::Truncated {
                expected: HEADER_LEN as u64,
                received,
            })?;
        let header = GrowableSnapshotHeader::decode(header_bytes)?;
        self.check_fits(&header)?;
        let expected = header.total_len();
        if received < expected {
            return Err(SnapshotError::Truncated { expected, received }.into());
        }
        if received > expected {
            return Err(SnapshotError::TooLong { expected }.into());
        }
        let levels = usize::from(header.levels);
        // Check every level.
        let mut rest = bytes.get(HEADER_LEN..).unwrap_or(&[]);
        for index in 0..levels {
            let buckets = header.level_bucket_count(index).unwrap_or(0);
            let (level_bytes, after) = rest
                .split_at_checked(level_len::<F, S>(buckets))
                .ok_or(SnapshotError::Truncated { expected, received })?;
            rest = after;
            let (level_header, _) =
                parse_snapshot::<F>(level_bytes, &self.level_dimensions(buckets)).map_err(
                    |error| GrowableSnapshotError::Level {
                        level: index,
                        error,
                    },
                )?;
            if level_header.seed != header.seed {
                return Err(GrowableSnapshotError::SeedMismatch { level: index });
            }
        }
        // Storage for every level that cannot be reused.
        let mut fresh: [Option<CuckooFilter<F, S, P::Buckets>>; LEVELS] =
            core::array::from_fn(|_| None);
        for (index, slot) in fresh.iter_mut().enumerate().take(levels) {
            let buckets = header.level_bucket_count(index).unwrap_or(0);
            if self
                .level(index)
                .is_some_and(|level| level.bucket_count() == buckets)
            {
                continue;
            }
            let storage = self
                .storage
                .allocate(index, buckets)
                .filter(|storage| storage.bucket_count() == buckets)
                .and_then(|storage| CuckooFilter::with_storage_and_len(storage, 0, 0).ok());
            match storage {
                Some(filter) => *slot = Some(filter),
                None => {
                    for (index, slot) in fresh.iter_mut().enumerate() {
                        if let Some(filter) = slot.take() {
                            self.storage.release(index, filter.into_storage());
                        }
                    }
                    return Err(GrowableSnapshotError::NoStorage {
                        level: index,
                        buckets,
                    });
                }
            }
        }
        // Nothing can fail from here on.
        self.adopt(&header);
        let mut rest = bytes.get(HEADER_LEN..).unwrap_or(&[]);
        for (index, fresh) in fresh.iter_mut().enumerate().take(levels) {
            let buckets = header.level_bucket_count(index).unwrap_or(0);
            let (level_bytes, after) = rest
                .split_at_checked(level_len::<F, S>(buckets))
                .unwrap_or((rest, &[]));
            rest = after;
            let payload = level_bytes
                .get(LEVEL_HEADER_LEN..level_bytes.len().saturating_sub(LEVEL_TRAILER_LEN))
                .unwrap_or(&[]);
            if let Some(filter) = fresh.take() {
                if let Some(old) = self.levels.get_mut(index).and_then(Option::take) {
                    self.storage.release(index, old.filter.into_storage());
                }
                if let Some(slot) = self.levels.get_mut(index) {
                    *slot = Some(Level {
                        filter,
                        full: false,
                    });
                }
            }
            if let Some(level) = self.levels.get_mut(index).and_then(Option::as_mut) {
                level.filter.load_payload(payload, header.seed);
                level.filter.set_max_kicks(header.max_kicks);
                level.full = header.level_is_full(index);
            }
        }
        self.truncate_levels(levels);
        Ok(())
    }
}

/// Bytes of a level snapshot of `buckets` buckets.
fn level_len<F: Fingerprint, const S: usize>(buckets: usize) -> usize {
    buckets
        .saturating_mul(S)
        .saturating_mul(F::BYTES)
        .saturating_add(LEVEL_HEADER_LEN + LEVEL_TRAILER_LEN)
}

/// The decoded header of a growable filter's snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct GrowableSnapshotHeader {
    /// Fingerprint width in bits.
    pub fingerprint_bits: u8,
    /// Slots per bucket.
    pub slots: u8,
    /// log2 of the first level's bucket count.
    pub base_bucket_count_log2: u8,
    /// Number of levels.
    pub levels: u8,
    /// Relocation budget.
    pub max_kicks: u16,
    /// Expansion factor.
    pub expansion: u32,
    /// Hash seed.
    pub seed: u64,
    /// Bit `i` set: level `i` is known to be full.
    pub full_levels: u64,
}

impl GrowableSnapshotHeader {
    /// The first level's bucket count.
    pub fn base_bucket_count(&self) -> usize {
        1usize
            .checked_shl(u32::from(self.base_bucket_count_log2))
            .unwrap_or(0)
    }

    /// Level `index`'s bucket count by the growth rule; `None` past the
    /// last level or when it overflows.
    pub fn level_bucket_count(&self, index: usize) -> Option<usize> {
        if index >= usize::from(self.levels) {
            return None;
        }
        let mut buckets = self.base_bucket_count();
        for _ in 0..index {
            buckets = grown_buckets(buckets, self.expansion)?;
        }
        Some(buckets).filter(|&b| b > 0)
    }

    /// Whether level `index` is marked full.
    pub fn level_is_full(&self, index: usize) -> bool {
        u32::try_from(index)
            .ok()
            .and_then(|index| self.full_levels.checked_shr(index))
            .is_some_and(|bits| bits & 1 == 1)
    }

    /// Bytes of level `index`'s snapshot (0 past the last level).
    fn level_total_len(&self, index: usize) -> u64 {
        match self.level_bucket_count(index) {
            Some(buckets) => (buckets as u64)
                .saturating_mul(u64::from(self.slots))
                .saturating_mul(u64::from(self.fingerprint_bits / 8))
                .saturating_add((LEVEL_HEADER_LEN + LEVEL_TRAILER_LEN) as u64),
            None => 0,
        }
    }

    /// Whole snapshot size in bytes.
    pub fn total_len(&self) -> u64 {
        (0..usize::from(self.levels))
            .map(|index| self.level_total_len(index))
            .fold(HEADER_LEN as u64, u64::saturating_add)
    }

    /// The header's bytes, its CRC included.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        let fields: [(usize, &[u8]); 11] = [
            (0, &MAGIC),
            (4, &FORMAT_VERSION.to_le_bytes()),
            (6, &[self.fingerprint_bits]),
            (7, &[self.slots]),
            (8, &[self.base_bucket_count_log2]),
            (9, &[self.levels]),
            (10, &self.max_kicks.to_le_bytes()),
            (12, &self.expansion.to_le_bytes()),
            (16, &self.seed.to_le_bytes()),
            (24, &self.full_levels.to_le_bytes()),
            (32, &[0; 4]),
        ];
        for (offset, bytes) in fields {
            for (dst, src) in out.iter_mut().skip(offset).zip(bytes) {
                *dst = *src;
            }
        }
        let crc = CRC32
            .checksum(out.get(..HEADER_LEN - 4).unwrap_or(&[]))
            .to_le_bytes();
        for (dst, src) in out.iter_mut().skip(HEADER_LEN - 4).zip(crc) {
            *dst = src;
        }
        out
    }

    /// Parses and checks a header.
    pub fn decode(bytes: &[u8; HEADER_LEN]) -> Result<Self, SnapshotError> {
        let [m0, m1, m2, m3, v0, v1, fingerprint_bits, slots, base_bucket_count_log2, levels, k0, k1, e0, e1, e2, e3, s0, s1, s2, s3, s4, s5, s6, s7, f0, f1, f2, f3, f4, f5, f6, f7, r0, r1, r2, r3, c0, c1, c2, c3] =
            *bytes;
        if [m0, m1, m2, m3] != MAGIC {
            return Err(SnapshotError::BadMagic);
        }
        let version = u16::from_le_bytes([v0, v1]);
        if version != FORMAT_VERSION {
            return Err(SnapshotError::UnsupportedVersion(version));
        }
        let stored = u32::from_le_bytes([c0, c1, c2, c3]);
        let computed = CRC32.checksum(bytes.get(..HEADER_LEN - 4).unwrap_or(&[]));
        if stored != computed {
            return Err(SnapshotError::CrcMismatch { stored, computed });
        }
        let header = Self {
            fingerprint_bits,
            slots,
            base_bucket_count_log2,
            levels,
            max_kicks: u16::from_le_bytes([k0, k1]),
            expansion: u32::from_le_bytes([e0, e1, e2, e3]),
            seed: u64::from_le_bytes([s0, s1, s2, s3, s4, s5, s6, s7]),
            full_levels: u64::from_le_bytes([f0, f1, f2, f3, f4, f5, f6, f7]),
        };
        let level_count = usize::from(levels);
        let sizes_ok = (0..level_count).all(|index| {
            header
                .level_bucket_count(index)
                .is_some_and(|buckets| level_fits(buckets, usize::from(slots)))
        });
        let mask_ok = header
            .full_levels
            .checked_shr(u32::from(levels))
            .unwrap_or(0)
            == 0;
        let valid = [r0, r1, r2, r3] == [0; 4]
            && matches!(fingerprint_bits, 8 | 16 | 32)
            && matches!(slots, 1 | 2 | 4 | 8)
            && base_bucket_count_log2 <= 32
            && level_count <= LEVEL_LIMIT
            && (level_count <= 1 || header.expansion != 0)
            && sizes_ok
            && mask_ok;
        if !valid {
            return Err(SnapshotError::InvalidHeader);
        }
        Ok(header)
    }
}

/// Produces a growable filter's snapshot in chunks of any size. The filter
/// must not change between the first and the last chunk.
pub struct GrowableSnapshotExporter {
    header: [u8; HEADER_LEN],
    levels: usize,
    position: u64,
    total: u64,
    level: usize,
    inner: Option<SnapshotExporter>,
}

impl GrowableSnapshotExporter {
    /// Starts exporting `filter`.
    pub fn new<F: Fingerprint, const S: usize, P: LevelStorage<F, S>, const L: usize>(
        filter: &GrowableCuckooFilter<F, S, P, L>,
    ) -> Self {
        let header = filter.snapshot_header();
        Self {
            header: header.encode(),
            levels: usize::from(header.levels),
            position: 0,
            total: header.total_len(),
            level: 0,
            inner: None,
        }
    }

    /// Bytes in the whole snapshot.
    pub fn total_len(&self) -> u64 {
        self.total
    }

    /// Bytes produced so far.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Whether every byte has been produced.
    pub fn is_done(&self) -> bool {
        self.position >= self.total
    }

    /// Fills `out` with the next bytes of the snapshot; returns how many (0
    /// when done).
    pub fn next_chunk<F: Fingerprint, const S: usize, P: LevelStorage<F, S>, const L: usize>(
        &mut self,
        filter: &GrowableCuckooFilter<F, S, P, L>,
        out: &mut [u8],
    ) -> usize {
        let mut written = 0;
        while let Some(rest) = out.get_mut(written..).filter(|rest| !rest.is_empty()) {
            if self.position < HEADER_LEN as u64 {
                let header = self.header.get(self.position as usize..).unwrap_or(&[]);
                let n = header.len().min(rest.len());
                for (dst, src) in rest.iter_mut().zip(header) {
                    *dst = *src;
                }
                written += n;
                self.position += n as u64;
                continue;
            }
            if self.level >= self.levels {
                break;
            }
            let Some(level) = filter.level(self.level) else {
                break;
            };
            let inner = self
                .inner
                .get_or_insert_with(|| SnapshotExporter::new(level));
            let n = inner.next_chunk(level, rest);
            written += n;
            self.position += n as u64;
            if inner.is_done() {
                self.inner = None;
                self.level += 1;
            } else if n == 0 {
                break;
            }
        }
        written
    }
}

/// Takes a growable snapshot chunk by chunk into a staging filter.
///
/// The staging filter's levels are reused where their sizes match and
/// otherwise replaced with storage from its provider as the levels arrive;
/// it is meaningful only once [`Self::finish`] returns `Ok`. After any
/// error the loader refuses further chunks with the same error.
pub struct GrowableSnapshotLoader {
    header_bytes: [u8; HEADER_LEN],
    header: Option<GrowableSnapshotHeader>,
    position: u64,
    level: usize,
    level_start: u64,
    inner: Option<SnapshotLoader>,
    failure: Option<GrowableSnapshotError>,
}

impl Default for GrowableSnapshotLoader {
    fn default() -> Self {
        Self::new()
    }
}

impl GrowableSnapshotLoader {
    /// A loader waiting for the first chunk.
    pub fn new() -> Self {
        Self {
            header_bytes: [0; HEADER_LEN],
            header: None,
            position: 0,
            level: 0,
            level_start: HEADER_LEN as u64,
            inner: None,
            failure: None,
        }
    }

    /// Bytes accepted so far.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// The header, once it has arrived.
    pub fn header(&self) -> Option<GrowableSnapshotHeader> {
        self.header
    }

    /// Feeds the next chunk into `staging`.
    pub fn feed<F: Fingerprint, const S: usize, P: LevelStorage<F, S>, const L: usize>(
        &mut self,
        staging: &mut GrowableCuckooFilter<F, S, P, L>,
        chunk: &[u8],
    ) -> Result<(), GrowableSnapshotError> {
        if let Some(failure) = self.failure {
            return Err(failure);
        }
        let result = self.feed_inner(staging, chunk);
        if let Err(failure) = result {
            self.failure = Some(failure);
        }
        result
    }

    fn feed_inner<F: Fingerprint, const S: usize, P: LevelStorage<F, S>, const L: usize>(
        &mut self,
        staging: &mut GrowableCuckooFilter<F, S, P, L>,
        mut chunk: &[u8],
    ) -> Result<(), GrowableSnapshotError> {
        while !chunk.is_empty() {
            let Some(header) = self.header else {
                let offset = self.position as usize;
                let wanted = HEADER_LEN.saturating_sub(offset).min(chunk.len());
                let (now, later) = chunk.split_at_checked(wanted).unwrap_or((chunk, &[]));
                for (dst, src) in self.header_bytes.iter_mut().skip(offset).zip(now) {
                    *dst = *src;
                }
                self.position += now.len() as u64;
                chunk = later;
                if self.position == HEADER_LEN as u64 {
                    let header = GrowableSnapshotHeader::decode(&self.header_bytes)?;
                    staging.check_fits(&header)?;
                    staging.adopt(&header);
                    self.header = Some(header);
                }
                continue;
            };
            let Some(buckets) = header.level_bucket_count(self.level) else {
                return Err(SnapshotError::TooLong {
                    expected: header.total_len(),
                }
                .into());
            };
            let level_total = header.level_total_len(self.level);
            if self.inner.is_none() {
                staging.prepare_level(self.level, buckets)?;
                self.inner = Some(SnapshotLoader::new());
            }
            let level_index = self.level;
            let level_error = |error| GrowableSnapshotError::Level {
                level: level_index,
                error,
            };
            let done = self.position - self.level_start;
            let wanted = usize::try_from(level_total.saturating_sub(done))
                .unwrap_or(usize::MAX)
                .min(chunk.len());
            let (now, later) = chunk.split_at_checked(wanted).unwrap_or((chunk, &[]));
            let Some(Some(level)) = staging.levels.get_mut(self.level) else {
                return Err(GrowableSnapshotError::NoStorage {
                    level: self.level,
                    buckets,
                });
            };
            if let Some(inner) = self.inner.as_mut() {
                inner.feed(&mut level.filter, now).map_err(level_error)?;
            }
            self.position += now.len() as u64;
            chunk = later;
            if self.position - self.level_start == level_total {
                if let Some(inner) = self.inner.take() {
                    inner.finish(&mut level.filter).map_err(level_error)?;
                }
                if level.filter.seed() != header.seed {
                    return Err(GrowableSnapshotError::SeedMismatch { level: self.level });
                }
                level.filter.set_max_kicks(header.max_kicks);
                level.full = header.level_is_full(self.level);
                self.level += 1;
                self.level_start = self.position;
            }
        }
        Ok(())
    }

    /// Checks that the snapshot is whole and intact, and makes `staging`
    /// ready to use (levels beyond the snapshot's go back to its storage).
    /// On error `staging` holds garbage: discard it.
    pub fn finish<F: Fingerprint, const S: usize, P: LevelStorage<F, S>, const L: usize>(
        self,
        staging: &mut GrowableCuckooFilter<F, S, P, L>,
    ) -> Result<(), GrowableSnapshotError> {
        if let Some(failure) = self.failure {
            return Err(failure);
        }
        let Some(header) = self.header else {
            return Err(SnapshotError::Truncated {
                expected: HEADER_LEN as u64,
                received: self.position,
            }
            .into());
        };
        if self.level < usize::from(header.levels) {
            return Err(SnapshotError::Truncated {
                expected: header.total_len(),
                received: self.position,
            }
            .into());
        }
        staging.truncate_levels(usize::from(header.levels));
        staging.adopt(&header);
        Ok(())
    }
}
