//! Batched lookups (`contains_many`, `contains_many_hashes`) answer exactly
//! what one-at-a-time `contains` answers, in order, for any number of keys
//! (empty, shorter than the pipeline, not a multiple of its depth), present, absent
//! and false positives alike.
#![allow(clippy::unwrap_used)]

use filter_core::batch::LOOKAHEAD;
use filter_core::{CuckooFilter, Fingerprint, NetKey};
use proptest::prelude::*;

fn filled<F: Fingerprint, const S: usize>(
    buckets: usize,
    seed: u64,
    inserted: &[u64],
) -> CuckooFilter<F, S, Vec<[F; S]>> {
    let mut filter = CuckooFilter::with_storage(vec![[F::EMPTY; S]; buckets], seed).unwrap();
    for key in inserted {
        // A full filter refuses some keys: the comparison holds regardless.
        let _ = filter.insert(key);
    }
    filter
}

fn agrees<F: Fingerprint, const S: usize>(seed: u64, inserted: &[u64], queries: &[u64]) {
    let filter = filled::<F, S>(64, seed, inserted);
    let one_at_a_time: Vec<bool> = queries.iter().map(|key| filter.contains(key)).collect();
    let batched = filter.contains_many(queries);
    assert_eq!(batched.len(), queries.len());
    assert_eq!(batched.collect::<Vec<_>>(), one_at_a_time);
    let hashes = queries.iter().map(|key| filter.hash(key));
    let by_hash: Vec<bool> = filter.contains_many_hashes(hashes).collect();
    assert_eq!(by_hash, one_at_a_time);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    // 8-bit fingerprints in 64 buckets give many false positives, so the
    // batch must reproduce those too, not only the inserted keys.
    #[test]
    fn batched_answers_are_the_single_ones(
        seed: u64,
        inserted in proptest::collection::vec(0u64..1000, 0..300),
        queries in proptest::collection::vec(0u64..2000, 0..(5 * LOOKAHEAD + 3)),
    ) {
        agrees::<u8, 4>(seed, &inserted, &queries);
        agrees::<u16, 4>(seed, &inserted, &queries);
        agrees::<u32, 2>(seed, &inserted, &queries);
        agrees::<u8, 8>(seed, &inserted, &queries);
    }
}

#[test]
fn a_batch_of_network_keys_finds_what_was_inserted() {
    let mut filter = CuckooFilter::<u16, 4, _>::with_storage(vec![[0u16; 4]; 1024], 3).unwrap();
    let listed: Vec<_> = (0..1000u32)
        .map(|i| {
            NetKey::ipv4(0xc612_0000 | i, 32)
                .unwrap()
                .hash(filter.seed())
        })
        .collect();
    for &hash in &listed {
        filter.insert_hash(hash).unwrap();
    }
    assert!(filter
        .contains_many_hashes(listed.iter().copied())
        .all(|found| found));
    assert_eq!(filter.contains_many_hashes([]).count(), 0);
}
