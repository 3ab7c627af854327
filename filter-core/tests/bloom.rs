//! Bloom and counting Bloom filters: no false negatives, measured rates
//! against theory, and the counting filter's saturation and delete rules.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use filter_core::bloom::COUNTER_MAX;
use filter_core::sizing::{bloom_hashes, bloom_words};
use filter_core::{BloomFilter, RemoveError, StaticCountingBloomFilter, StorageError};

const ITEMS: usize = 100_000;
const WORDS: usize = bloom_words(ITEMS, 0.01);
const HASHES: u32 = bloom_hashes(WORDS * 64, ITEMS);

#[test]
fn bloom_sizing_gives_the_textbook_parameters() {
    // m = -n ln(0.01) / ln(2)^2 = 958,506 bits; k = 7.
    assert_eq!(WORDS, 958_506usize.div_ceil(64));
    assert_eq!(HASHES, 7);
}

#[test]
fn bloom_has_no_false_negatives_and_the_expected_rate() {
    let mut filter = BloomFilter::<_, HASHES>::with_storage(vec![0u64; WORDS], 3).unwrap();
    for key in 0..ITEMS as u64 {
        filter.insert(&key);
    }
    assert!((0..ITEMS as u64).all(|key| filter.contains(&key)));
    let lookups = 1_000_000u64;
    let positives = (1u64 << 40..(1 << 40) + lookups)
        .filter(|key| filter.contains(key))
        .count();
    let measured = positives as f64 / lookups as f64;
    let expected = filter.expected_fpr();
    assert!((expected - 0.01).abs() < 0.001, "expected {expected}");
    let estimated = filter.estimated_len();
    assert!(
        (estimated / ITEMS as f64 - 1.0).abs() < 0.01,
        "estimated {estimated} items"
    );
    assert!(
        (measured / expected - 1.0).abs() < 0.1,
        "measured {measured}, expected {expected}"
    );
}

type Counting = StaticCountingBloomFilter<64, 4>;

fn counters(filter: &Counting) -> Vec<u8> {
    (0..filter.cell_count())
        .map(|i| filter.counter(i))
        .collect()
}

#[test]
fn counting_bloom_insert_and_remove_restore_the_counters() {
    let mut filter = Counting::new(1);
    let empty = counters(&filter);
    for key in 0..50u64 {
        filter.insert(&key);
    }
    assert!((0..50u64).all(|key| filter.contains(&key)));
    for key in 0..50u64 {
        filter.remove(&key).unwrap();
    }
    assert_eq!(counters(&filter), empty);
}

#[test]
fn clear_empties_every_counter_saturated_ones_too() {
    let mut filter = Counting::new(1);
    for _ in 0..40 {
        filter.insert(&7u64);
    }
    filter.insert(&8u64);
    let empty = counters(&Counting::new(1));
    assert_ne!(counters(&filter), empty);
    filter.clear();
    assert_eq!(counters(&filter), empty);
    assert!(!filter.contains(&7u64) && !filter.contains(&8u64));
}

#[test]
fn removing_an_absent_item_fails_and_changes_nothing() {
    let mut filter = Counting::new(1);
    filter.insert(&1u64);
    let before = counters(&filter);
    let absent = (2u64..).find(|key| !filter.contains(key)).unwrap();
    assert_eq!(filter.remove(&absent), Err(RemoveError::NotPresent));
    assert_eq!(counters(&filter), before);
    assert!(filter.contains(&1u64));
}

#[test]
fn counters_saturate_and_then_stick() {
    let mut filter = Counting::new(1);
    for _ in 0..40 {
        filter.insert(&7u64);
    }
    let saturated: Vec<usize> = counters(&filter)
        .iter()
        .enumerate()
        .filter(|(_, &c)| c > 0)
        .map(|(i, &c)| {
            assert_eq!(c, COUNTER_MAX);
            i
        })
        .collect();
    assert!(!saturated.is_empty());
    // A saturated counter's true count is unknown: removals never lower it,
    // so the item (and anything sharing the counters) stays present.
    for _ in 0..100 {
        filter.remove(&7u64).unwrap();
    }
    assert!(filter.contains(&7u64));
    assert!(saturated.iter().all(|&i| filter.counter(i) == COUNTER_MAX));
}

#[test]
fn a_counter_just_below_saturation_still_counts_down() {
    let mut filter = Counting::new(1);
    for _ in 0..COUNTER_MAX - 1 {
        filter.insert(&7u64);
    }
    for _ in 0..COUNTER_MAX - 1 {
        filter.remove(&7u64).unwrap();
    }
    assert!(counters(&filter).iter().all(|&c| c == 0));
    assert_eq!(filter.remove(&7u64), Err(RemoveError::NotPresent));
}

#[test]
fn storage_without_a_word_is_refused_and_errors_say_what_happened() {
    assert_eq!(
        BloomFilter::<_, 3>::with_storage(Vec::<u64>::new(), 1).err(),
        Some(StorageError::Empty)
    );
    assert_eq!(
        RemoveError::NotPresent.to_string(),
        "item is not in the counting Bloom filter (nothing was changed)"
    );
}
