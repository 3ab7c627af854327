//! The growable cuckoo filter against an exact model (a multiset of keys):
//! no false negatives, counts at least the copies, `len` the model's size,
//! growth only when no level had room and to the rounded-up sizes, failed
//! inserts that change nothing, and snapshots that restore the filter.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::HashMap;

use filter_core::growable::{
    ArenaLevels, GrowError, GrowableCuckooFilter, GrowableSnapshotError, GrowableSnapshotExporter,
    GrowableSnapshotLoader, LevelStorage, ReserveParams, HEADER_LEN,
};
use filter_core::{Fingerprint, KeyHash, SnapshotError};
use proptest::prelude::*;

/// `Vec` levels, with an optional limit on the buckets handed out in all.
#[derive(Clone, Debug, Default)]
struct Budget {
    remaining: Option<usize>,
    allocations: Vec<(usize, usize)>,
}

impl<F: Fingerprint, const S: usize> LevelStorage<F, S> for Budget {
    type Buckets = Vec<[F; S]>;

    fn allocate(&mut self, level: usize, buckets: usize) -> Option<Vec<[F; S]>> {
        if let Some(remaining) = self.remaining.as_mut() {
            *remaining = remaining.checked_sub(buckets)?;
        }
        self.allocations.push((level, buckets));
        Some(vec![[F::EMPTY; S]; buckets])
    }

    fn release(&mut self, _level: usize, buckets: Vec<[F; S]>) {
        if let Some(remaining) = self.remaining.as_mut() {
            *remaining += buckets.len();
        }
    }
}

type Filter<F, const S: usize, const L: usize> = GrowableCuckooFilter<F, S, Budget, L>;

fn tables<F: Fingerprint, const S: usize, const L: usize>(
    filter: &Filter<F, S, L>,
) -> Vec<Vec<[F; S]>> {
    filter
        .levels()
        .map(|level| level.storage().clone())
        .collect()
}

/// Whether some level has a free slot in one of `hash`'s two buckets.
fn room_in_place<F: Fingerprint, const S: usize, const L: usize>(
    filter: &Filter<F, S, L>,
    hash: KeyHash,
) -> bool {
    filter.levels().any(|level| {
        let location = level.locate(hash);
        [location.primary, location.alternate]
            .iter()
            .any(|&bucket| level.storage()[bucket].contains(&F::EMPTY))
    })
}

fn snapshot_of<F: Fingerprint, const S: usize, const L: usize>(
    filter: &Filter<F, S, L>,
) -> Vec<u8> {
    let mut bytes = vec![0u8; filter.snapshot_len() as usize];
    assert_eq!(filter.write_snapshot(&mut bytes).unwrap(), bytes.len());
    bytes
}

/// SplitMix64: the operation stream of one case.
struct OperationStream(u64);

impl OperationStream {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

struct Checked<F: Fingerprint, const S: usize, const L: usize> {
    filter: Filter<F, S, L>,
    model: HashMap<u64, usize>,
    growths: usize,
    failures: usize,
    absent_removes: usize,
}

impl<F: Fingerprint, const S: usize, const L: usize> Checked<F, S, L> {
    fn new(storage: Budget, seed: u64, params: ReserveParams) -> Self {
        Self {
            filter: Filter::new(storage, seed, params).unwrap(),
            model: HashMap::new(),
            growths: 0,
            failures: 0,
            absent_removes: 0,
        }
    }

    fn check_all(&self) {
        for (&key, &copies) in &self.model {
            if copies > 0 {
                assert!(self.filter.contains(&key), "false negative for {key}");
                assert!(self.filter.count(&key) >= copies, "count below copies");
            }
        }
        let total: usize = self.model.values().sum();
        assert_eq!(self.filter.len(), total, "len disagrees with the model");
        self.check_level_sizes();
    }

    fn check_level_sizes(&self) {
        let expansion = self.filter.expansion() as usize;
        let sizes: Vec<usize> = self.filter.levels().map(|l| l.bucket_count()).collect();
        assert_eq!(sizes[0], self.filter.base_bucket_count());
        for pair in sizes.windows(2) {
            assert_eq!(pair[1], (pair[0] * expansion).next_power_of_two());
        }
        let capacity: usize = sizes.iter().map(|b| b * S).sum();
        assert_eq!(self.filter.capacity(), capacity);
    }

    fn insert(&mut self, key: u64, unique: bool) {
        let hash = self.filter.hash(&key);
        let levels_before = self.filter.level_count();
        let len_before = self.filter.len();
        let room_before = room_in_place(&self.filter, hash);
        let present_before = self.filter.contains(&key);
        let tables_before = tables(&self.filter);
        let result = if unique {
            self.filter.insert_unique(&key)
        } else {
            self.filter.insert(&key).map(|()| true)
        };
        let grown = self.filter.level_count() - levels_before;
        match result {
            Ok(true) => {
                assert!(!(unique && present_before));
                *self.model.entry(key).or_default() += 1;
                assert_eq!(self.filter.len(), len_before + 1);
                assert!(grown <= 1, "grew by {grown} levels");
                if grown == 1 {
                    assert!(!room_before, "grew although a level had a free slot");
                    assert_eq!(self.filter.levels().last().unwrap().len(), 1);
                    self.growths += 1;
                }
            }
            Ok(false) => {
                assert!(unique && present_before);
                assert_eq!((grown, self.filter.len()), (0, len_before));
            }
            Err(error) => {
                assert!(!present_before || !unique);
                assert!(!room_before, "failed although a level had a free slot");
                assert_eq!(grown, 0);
                assert_eq!(self.filter.len(), len_before);
                assert_eq!(
                    tables(&self.filter),
                    tables_before,
                    "a failed insert changed a table"
                );
                match error {
                    GrowError::LevelLimit { levels } => assert_eq!(levels, L),
                    GrowError::Full => assert_eq!(self.filter.expansion(), 0),
                    GrowError::NoStorage { level, buckets } => {
                        assert_eq!(level, levels_before);
                        assert_eq!(Some(buckets), self.filter.next_level_buckets());
                    }
                    GrowError::TooLarge { .. } => panic!("no level here is that large"),
                }
                self.failures += 1;
                if self.failures <= 20 {
                    self.check_all();
                }
            }
        }
    }

    fn remove(&mut self, key: u64) {
        let copies = self.model.entry(key).or_default();
        let len_before = self.filter.len();
        if *copies > 0 {
            assert!(self.filter.remove(&key), "remove of a present key failed");
            *copies -= 1;
            assert_eq!(self.filter.len(), len_before - 1);
        } else if !self.filter.contains(&key) {
            // Never inserted (or all copies gone) and not a false positive:
            // a remove must report it and change nothing.
            assert!(!self.filter.remove(&key), "removed an absent key");
            assert_eq!(self.filter.len(), len_before);
            self.absent_removes += 1;
        }
    }

    fn run(&mut self, stream_seed: u64, key_space: u64, operations: usize) {
        let mut stream = OperationStream(stream_seed);
        for step in 0..operations {
            let r = stream.next();
            let key = (r >> 8) % key_space;
            match r % 16 {
                0..=5 => self.insert(key, false),
                6..=7 => self.insert(key, true),
                8..=10 => self.remove(key),
                11..=12 => {
                    let copies = self.model.get(&key).copied().unwrap_or(0);
                    assert!(self.filter.count(&key) >= copies);
                }
                _ => {
                    if self.model.get(&key).is_some_and(|&c| c > 0) {
                        assert!(self.filter.contains(&key), "false negative for {key}");
                    }
                }
            }
            if step % 2_000 == 0 {
                self.check_all();
            }
        }
        self.check_all();
    }
}

fn run_case<F: Fingerprint, const S: usize, const L: usize>(
    storage: Budget,
    params: ReserveParams,
    seed: u64,
    stream: u64,
    keys: u64,
) -> Checked<F, S, L> {
    let mut checked = Checked::<F, S, L>::new(storage, seed, params);
    checked.run(stream, keys, 20_000);
    checked
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10, ..ProptestConfig::default() })]

    #[test]
    fn u16_four_slots_matches_model(
        seed: u64, stream: u64, keys in 64u64..6000, expansion in 1u32..5,
    ) {
        let params = ReserveParams::new(64).with_expansion(expansion).with_max_kicks(64);
        run_case::<u16, 4, 16>(Budget::default(), params, seed, stream, keys);
    }

    #[test]
    fn u8_two_slots_matches_model(seed: u64, stream: u64, keys in 64u64..3000) {
        let params = ReserveParams::new(32).with_expansion(2);
        run_case::<u8, 2, 16>(Budget::default(), params, seed, stream, keys);
    }

    #[test]
    fn u32_one_slot_with_few_levels_matches_model(
        seed: u64, stream: u64, keys in 64u64..2000, expansion in 0u32..3,
    ) {
        // Three levels at most: runs go through LevelLimit (or Full, for
        // expansion 0) many times.
        let params = ReserveParams::new(64).with_expansion(expansion);
        run_case::<u32, 1, 3>(Budget::default(), params, seed, stream, keys);
    }

    #[test]
    fn a_storage_budget_stops_growth_whole(seed: u64, stream: u64, keys in 1000u64..4000) {
        let storage = Budget { remaining: Some(16 + 32 + 64 + 10), ..Budget::default() };
        let params = ReserveParams::new(64).with_expansion(2);
        let checked = run_case::<u16, 4, 16>(storage, params, seed, stream, keys);
        prop_assert!(checked.filter.level_count() <= 3);
    }
}

#[test]
fn the_model_runs_grow_fail_and_remove_absent_keys() {
    // Guards the property tests against testing only easy loads.
    let params = ReserveParams::new(64).with_expansion(2);
    let grown = run_case::<u16, 4, 16>(Budget::default(), params, 1, 2, 4000);
    assert!(grown.growths >= 3, "{} growths", grown.growths);
    assert!(grown.absent_removes > 100);
    let limited = run_case::<u32, 1, 3>(Budget::default(), params, 1, 2, 2000);
    assert!(limited.failures > 0);
    let storage = Budget {
        remaining: Some(16 + 32 + 10),
        ..Budget::default()
    };
    let starved = run_case::<u16, 4, 16>(storage, params, 3, 4, 3000);
    assert!(starved.failures > 0);
}

#[test]
fn levels_have_the_rounded_up_sizes_of_the_expansion() {
    for (expansion, expected) in [
        (1u32, vec![4usize, 4, 4, 4]),
        (2, vec![4, 8, 16, 32]),
        (3, vec![4, 16, 64, 256]),
        (5, vec![4, 32, 256, 2048]),
    ] {
        // 15 items in 4-slot buckets: 4 buckets.
        let params = ReserveParams::new(15).with_expansion(expansion);
        let mut filter = Filter::<u16, 4, 4>::new(Budget::default(), 3, params).unwrap();
        let mut key = 0u64;
        while filter.insert(&key).is_ok() {
            key += 1;
        }
        let sizes: Vec<usize> = filter.levels().map(|l| l.bucket_count()).collect();
        assert_eq!(sizes, expected, "expansion {expansion}");
        assert_eq!(
            filter.storage().allocations,
            expected.iter().copied().enumerate().collect::<Vec<_>>()
        );
    }
}

#[test]
fn expansion_zero_never_grows_and_reports_full() {
    let params = ReserveParams::new(64).with_expansion(0);
    let mut filter = Filter::<u16, 4, 8>::new(Budget::default(), 5, params).unwrap();
    let mut inserted = Vec::new();
    let mut key = 0u64;
    let error = loop {
        let before = tables(&filter);
        match filter.insert(&key) {
            Ok(()) => inserted.push(key),
            Err(error) => {
                assert_eq!(tables(&filter), before);
                break error;
            }
        }
        key += 1;
    };
    assert_eq!(error, GrowError::Full);
    assert_eq!(filter.level_count(), 1);
    assert!(filter.load_factor() > 0.85);
    assert!(inserted.iter().all(|key| filter.contains(key)));
    assert_eq!(filter.len(), inserted.len());
}

#[test]
fn an_insert_at_the_storage_limit_fails_whole_and_loses_nothing() {
    // An arena for the first two levels (16 and 32 buckets) and a bit more:
    // not enough for the third (64).
    let mut arena = vec![[0u16; 4]; 16 + 32 + 20];
    let params = ReserveParams::new(64).with_expansion(2);
    let mut filter =
        GrowableCuckooFilter::<u16, 4, _, 8>::new(ArenaLevels::new(&mut arena), 11, params)
            .unwrap();
    let mut inserted = Vec::new();
    let mut key = 1000u64;
    let (error, refused) = loop {
        let before: Vec<Vec<[u16; 4]>> = filter.levels().map(|l| l.storage().to_vec()).collect();
        let len = filter.len();
        match filter.insert(&key) {
            Ok(()) => inserted.push(key),
            Err(error) => {
                let after: Vec<Vec<[u16; 4]>> =
                    filter.levels().map(|l| l.storage().to_vec()).collect();
                assert_eq!(after, before, "the failed insert changed a table");
                assert_eq!(filter.len(), len);
                break (error, key);
            }
        }
        key += 1;
    };
    assert_eq!(
        error,
        GrowError::NoStorage {
            level: 2,
            buckets: 64
        }
    );
    assert_eq!(filter.level_count(), 2);
    assert_eq!(filter.storage().remaining(), 20);
    assert_eq!(filter.len(), inserted.len());
    assert!(
        inserted.iter().all(|key| filter.contains(key)),
        "an item was lost"
    );
    assert!(inserted.len() as f64 > 0.9 * filter.capacity() as f64);
    // The refused item is not counted, and the filter keeps working: a
    // removal makes room for it again.
    assert!(filter.remove(&inserted[0]));
    let mut retried = false;
    for victim in &inserted[1..] {
        if filter.insert(&refused).is_ok() {
            retried = true;
            break;
        }
        assert!(filter.remove(victim));
    }
    assert!(retried);
    assert!(filter.contains(&refused));
}

#[test]
fn the_level_limit_is_reported_and_loses_nothing() {
    let params = ReserveParams::new(8).with_expansion(2);
    let mut filter = Filter::<u16, 2, 2>::new(Budget::default(), 1, params).unwrap();
    let mut inserted = Vec::new();
    let error = (0u64..)
        .find_map(|key| match filter.insert(&key) {
            Ok(()) => {
                inserted.push(key);
                None
            }
            Err(error) => Some(error),
        })
        .unwrap();
    assert_eq!(error, GrowError::LevelLimit { levels: 2 });
    assert!(inserted.iter().all(|key| filter.contains(key)));
    assert_eq!(filter.len(), inserted.len());
    assert!(filter.level_is_full(0) && filter.level_is_full(1));
}

#[test]
fn unused_room_in_earlier_levels_is_used_first() {
    let params = ReserveParams::new(256).with_expansion(2);
    let mut filter = Filter::<u16, 4, 8>::new(Budget::default(), 21, params).unwrap();
    let mut key = 0u64;
    while filter.level_count() < 2 {
        filter.insert(&key).unwrap();
        key += 1;
    }
    // Free room in the first level: remove keys only it holds (removes take
    // the newest level's copy first).
    let only_first: Vec<u64> = (0..key)
        .filter(|k| {
            let hash = filter.hash(k);
            filter.level(0).unwrap().contains_hash(hash)
                && !filter.level(1).unwrap().contains_hash(hash)
        })
        .take(100)
        .collect();
    for k in &only_first {
        let first_len = filter.level(0).unwrap().len();
        assert!(filter.remove(k));
        assert_eq!(filter.level(0).unwrap().len(), first_len - 1);
    }
    assert!(!filter.level_is_full(0), "a removal reopens the level");
    let mut went_first = 0;
    for k in (1u64 << 40)..(1u64 << 40) + 200 {
        let hash = filter.hash(&k);
        let location = filter.level(0).unwrap().locate(hash);
        let storage = filter.level(0).unwrap().storage();
        let free =
            storage[location.primary].contains(&0) || storage[location.alternate].contains(&0);
        let first_len = filter.level(0).unwrap().len();
        filter.insert(&k).unwrap();
        if free {
            assert_eq!(filter.level(0).unwrap().len(), first_len + 1);
            went_first += 1;
        }
    }
    assert!(went_first > 10);
    // Relocations fill the first level again before the second takes more.
    assert!(filter.level(0).unwrap().len() >= filter.level(0).unwrap().capacity() * 9 / 10);
}

#[test]
fn the_expected_rate_is_the_sum_of_the_levels_rates() {
    let params = ReserveParams::new(1024).with_expansion(2);
    let mut filter = Filter::<u16, 4, 8>::new(Budget::default(), 2, params).unwrap();
    for key in 0..10_000u64 {
        filter.insert(&key).unwrap();
    }
    let levels = filter.level_count();
    assert!(levels >= 3);
    let sum: f64 = filter.levels().map(|l| l.expected_fpr()).sum();
    assert!((filter.expected_fpr() - sum).abs() < 1e-15);
    // Full levels each give about 2b/2^f: n levels about n times that.
    let base = 2.0 * 4.0 / 65536.0;
    assert!(filter.expected_fpr() > (levels as f64 - 1.0) * base * 0.8);
    assert!(filter.expected_fpr() < levels as f64 * base * 1.05);
    // And a measured rate within the bound.
    let probes = 200_000u64;
    let hits = (1u64 << 50..(1u64 << 50) + probes)
        .filter(|k| filter.contains(k))
        .count();
    assert!((hits as f64 / probes as f64) < 1.5 * filter.expected_fpr());
    assert!(hits > 0);
}

fn grown_filter(seed: u64) -> Filter<u16, 4, 8> {
    let params = ReserveParams::new(60).with_expansion(3).with_max_kicks(40);
    let mut filter = Filter::<u16, 4, 8>::new(Budget::default(), seed, params).unwrap();
    for key in 0..900u64 {
        filter.insert(&key).unwrap();
    }
    for key in (0..900u64).step_by(7) {
        assert!(filter.remove(&key));
    }
    assert!(filter.level_count() >= 3);
    filter
}

fn assert_same(a: &Filter<u16, 4, 8>, b: &Filter<u16, 4, 8>) {
    assert_eq!(tables(a), tables(b));
    assert_eq!(a.len(), b.len());
    assert_eq!(a.seed(), b.seed());
    assert_eq!(a.expansion(), b.expansion());
    assert_eq!(a.max_kicks(), b.max_kicks());
    assert_eq!(a.base_bucket_count(), b.base_bucket_count());
    for level in 0..a.level_count() {
        assert_eq!(a.level_is_full(level), b.level_is_full(level));
        assert_eq!(
            a.level(level).unwrap().max_kicks(),
            b.level(level).unwrap().max_kicks()
        );
    }
    assert_eq!(snapshot_of(a), snapshot_of(b));
}

fn load_chunked(
    bytes: &[u8],
    chunk: usize,
    staging: &mut Filter<u16, 4, 8>,
) -> Result<(), GrowableSnapshotError> {
    let mut loader = GrowableSnapshotLoader::new();
    let mut fed = 0;
    for piece in bytes.chunks(chunk) {
        loader.feed(staging, piece)?;
        fed += piece.len();
        assert_eq!(loader.position(), fed as u64);
        assert_eq!(loader.header().is_some(), fed >= HEADER_LEN);
    }
    loader.finish(staging)
}

#[test]
fn whole_snapshots_restore_an_identical_filter() {
    let source = grown_filter(0xabc);
    assert!(source.level_is_full(0) || source.level_is_full(1) || source.level_count() > 2);
    let bytes = snapshot_of(&source);
    // Into a small fresh filter of other settings, and into a bigger one.
    let mut target = Filter::<u16, 4, 8>::new(Budget::default(), 1, ReserveParams::new(8)).unwrap();
    target.load_snapshot(&bytes).unwrap();
    assert_same(&source, &target);
    let mut bigger = grown_filter(5);
    for key in 0..5000u64 {
        bigger.insert(&key).unwrap();
    }
    assert!(bigger.level_count() > source.level_count());
    bigger.load_snapshot(&bytes).unwrap();
    assert_same(&source, &bigger);
    for key in (0..900u64).filter(|k| k % 7 != 0) {
        assert!(bigger.contains(&key));
    }
    // The restored filter keeps working and growing like the source (the
    // relocation walks' random state is not part of a snapshot, so the
    // tables may differ in where fingerprints sit, as for a plain filter).
    let mut a = source.clone();
    for key in 10_000..14_000u64 {
        a.insert(&key).unwrap();
        bigger.insert(&key).unwrap();
    }
    assert_eq!(a.len(), bigger.len());
    assert!(bigger.level_count() > source.level_count());
    assert!((10_000..14_000u64).all(|key| bigger.contains(&key)));
}

#[test]
fn chunked_snapshots_round_trip_at_any_chunk_size() {
    let source = grown_filter(0x5eed);
    let whole = snapshot_of(&source);
    for chunk in [1, 3, 7, 39, 40, 41, 500, 4096, 1 << 20] {
        let mut exporter = GrowableSnapshotExporter::new(&source);
        assert_eq!(exporter.total_len(), whole.len() as u64);
        let mut exported = Vec::new();
        let mut buffer = vec![0u8; chunk];
        loop {
            let n = exporter.next_chunk(&source, &mut buffer);
            if n == 0 {
                break;
            }
            exported.extend_from_slice(&buffer[..n]);
            assert_eq!(exporter.position(), exported.len() as u64);
        }
        assert!(exporter.is_done());
        assert_eq!(exported, whole, "chunk size {chunk}");
        for staging in [
            Filter::<u16, 4, 8>::new(Budget::default(), 0, ReserveParams::new(8)).unwrap(),
            grown_filter(1),
        ] {
            let mut staging = staging;
            load_chunked(&whole, chunk, &mut staging).unwrap();
            assert_same(&source, &staging);
        }
    }
}

#[test]
fn every_truncation_and_bit_flip_is_rejected_and_a_whole_load_changes_nothing() {
    let source = grown_filter(77);
    let whole = snapshot_of(&source);
    let target = grown_filter(78);
    let expected_tables = tables(&target);
    for cut in (0..whole.len()).step_by(13) {
        let mut t = target.clone();
        assert!(t.load_snapshot(&whole[..cut]).is_err());
        assert_eq!(tables(&t), expected_tables);
        let mut staging = grown_filter(1);
        assert!(load_chunked(&whole[..cut], 64, &mut staging).is_err());
    }
    let mut longer = whole.clone();
    longer.push(0);
    let mut t = target.clone();
    assert!(matches!(
        t.load_snapshot(&longer),
        Err(GrowableSnapshotError::Container(
            SnapshotError::TooLong { .. }
        ))
    ));
    let mut staging = grown_filter(1);
    assert!(load_chunked(&longer, 64, &mut staging).is_err());
    for byte in (0..whole.len()).step_by(5) {
        for bit in [0, 3, 7] {
            let mut corrupt = whole.clone();
            corrupt[byte] ^= 1 << bit;
            let mut t = target.clone();
            assert!(t.load_snapshot(&corrupt).is_err(), "flip at {byte}.{bit}");
            assert_eq!(tables(&t), expected_tables);
            assert_eq!(t.len(), target.len());
            let mut staging = grown_filter(1);
            assert!(
                load_chunked(&corrupt, 100, &mut staging).is_err(),
                "flip at {byte}.{bit}"
            );
        }
    }
}

#[test]
fn snapshots_for_other_dimensions_or_too_many_levels_are_refused() {
    let source = grown_filter(3);
    let bytes = snapshot_of(&source);
    let mut two_slots =
        Filter::<u16, 2, 8>::new(Budget::default(), 0, ReserveParams::new(8)).unwrap();
    assert!(matches!(
        two_slots.load_snapshot(&bytes),
        Err(GrowableSnapshotError::Container(
            SnapshotError::ParameterMismatch { .. }
        ))
    ));
    let mut few = Filter::<u16, 4, 2>::new(Budget::default(), 0, ReserveParams::new(8)).unwrap();
    assert_eq!(
        few.load_snapshot(&bytes),
        Err(GrowableSnapshotError::TooManyLevels {
            levels: source.level_count(),
            max: 2
        })
    );
    // Storage that runs out while loading: the target is unchanged.
    let storage = Budget {
        remaining: Some(20),
        ..Budget::default()
    };
    let mut starved = Filter::<u16, 4, 8>::new(storage, 9, ReserveParams::new(8)).unwrap();
    starved.insert(&1u32).unwrap();
    let before = tables(&starved);
    assert!(matches!(
        starved.load_snapshot(&bytes),
        Err(GrowableSnapshotError::NoStorage { .. })
    ));
    assert_eq!(tables(&starved), before);
    // Only the filter's own first level (2 buckets) is still handed out.
    assert_eq!(starved.storage().remaining, Some(18));
    assert!(starved.contains(&1u32));
}

#[cfg(feature = "alloc")]
#[test]
fn the_vec_filter_reserves_like_redisbloom() {
    use filter_core::VecGrowableCuckooFilter;
    // CF.RESERVE key 1000 BUCKETSIZE 2 MAXITERATIONS 20 EXPANSION 2
    let mut filter = VecGrowableCuckooFilter::<u16, 2>::reserve(4, 1000, 20, 2).unwrap();
    assert_eq!(filter.level(0).unwrap().bucket_count(), 512);
    assert_eq!(filter.max_kicks(), 20);
    for key in 0..5000u64 {
        filter.insert(&key).unwrap();
    }
    let sizes: Vec<usize> = filter.levels().map(|l| l.bucket_count()).collect();
    assert_eq!(&sizes[..3], &[512, 1024, 2048]);
    assert!((0..5000u64).all(|key| filter.contains(&key)));
    let mut bytes = vec![0u8; filter.snapshot_len() as usize];
    filter.write_snapshot(&mut bytes).unwrap();
    let mut restored = VecGrowableCuckooFilter::<u16, 2>::reserve(0, 8, 1, 0).unwrap();
    restored.load_snapshot(&bytes).unwrap();
    assert_eq!(restored.len(), filter.len());
    assert!((0..5000u64).all(|key| restored.contains(&key)));
}
