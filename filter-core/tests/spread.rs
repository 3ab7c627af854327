//! Keys that differ little spread over a table like random ones: runs of
//! consecutive integers, every address of a few IPv4 /24s, IPv6 addresses
//! one bit apart, consecutive IPv6 addresses of one /64, and consecutive
//! IPv6 /64s and /48s. Each set is placed in a table with a few keys
//! per bucket and compared with what uniform random placement gives:
//! occupied buckets and the chi-square of the bucket counts (for primary
//! and alternate buckets and for the fingerprints' top bits) within five
//! standard deviations, and (bucket, fingerprint) pairs about as rarely
//! shared as chance allows. Every set and seed is fixed, so the test is
//! deterministic; a hash that keeps the keys' structure fails it.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::collections::BTreeSet;

use filter_core::hash::hash_words;
use filter_core::layout::locate;
use filter_core::{KeyHash, KeyedHasher, NetKey};

const SEEDS: [u64; 3] = [0, 0x5eed, 0x9c3a_61f0_2b7d_e845];
/// Standard deviations a statistic may stray from its random expectation.
const SIGMAS: f64 = 5.0;

/// How far `value` is from a random placement's `mean`, in standard
/// deviations.
fn deviation(value: f64, mean: f64, variance: f64) -> f64 {
    (value - mean).abs() / variance.sqrt()
}

/// Checks `n` values drawn from `classes` equally likely ones: the classes
/// hit and the chi-square of the counts.
fn check_uniform(what: &str, values: impl Iterator<Item = usize>, classes: usize) {
    let mut counts = vec![0u64; classes];
    let mut n = 0u64;
    for value in values {
        counts[value] += 1;
        n += 1;
    }
    let (n, k) = (n as f64, classes as f64);
    let expected = n / k;
    let chi_square: f64 = counts
        .iter()
        .map(|&count| (count as f64 - expected).powi(2) / expected)
        .sum();
    let chi_deviation = deviation(chi_square, k - 1.0, 2.0 * (k - 1.0));
    assert!(
        chi_deviation <= SIGMAS,
        "{what}: chi-square {chi_square:.0} over {classes} classes, {chi_deviation:.1} sd from random"
    );
    // Occupancy: each class is empty with probability q = (1 - 1/k)^n.
    let q = (1.0 - 1.0 / k).powf(n);
    let q2 = (1.0 - 2.0 / k).powf(n);
    let occupied = counts.iter().filter(|&&count| count > 0).count() as f64;
    let variance = k * q * (1.0 - q) + k * (k - 1.0) * (q2 - q * q);
    let occupied_deviation = deviation(occupied, k * (1.0 - q), variance);
    assert!(
        occupied_deviation <= SIGMAS,
        "{what}: {occupied} of {classes} classes hit, {occupied_deviation:.1} sd from random"
    );
}

/// Places `hashes` in a table of `buckets` buckets of 16-bit fingerprints
/// and compares the placement with a random one.
fn check_spread(what: &str, hashes: &[KeyHash], buckets: usize) {
    let mask = buckets - 1;
    let locations: Vec<_> = hashes
        .iter()
        .map(|&hash| locate::<u16>(hash, mask))
        .collect();
    check_uniform(
        &format!("{what}, primary buckets"),
        locations.iter().map(|l| l.primary),
        buckets,
    );
    check_uniform(
        &format!("{what}, alternate buckets"),
        locations.iter().map(|l| l.alternate),
        buckets,
    );
    check_uniform(
        &format!("{what}, fingerprints' top byte"),
        locations.iter().map(|l| usize::from(l.fingerprint >> 8)),
        256,
    );
    // Two keys sharing bucket and fingerprint cannot be told apart.
    let mut pairs: Vec<_> = locations
        .iter()
        .map(|l| (l.primary, l.fingerprint))
        .collect();
    pairs.sort_unstable();
    let shared = pairs.windows(2).filter(|w| w[0] == w[1]).count() as f64;
    let n = hashes.len() as f64;
    let expected = n * (n - 1.0) / 2.0 / (buckets as f64 * 65535.0);
    // A Poisson count: five deviations above its mean, and at least 3.
    let bound = (expected + SIGMAS * expected.sqrt()).max(3.0);
    assert!(
        shared <= bound,
        "{what}: {shared} keys share bucket and fingerprint with another, expected {expected:.2}"
    );
}

fn integer_hashes(seed: u64, keys: impl Iterator<Item = u64>) -> Vec<KeyHash> {
    keys.map(|key| KeyedHasher::hash_item(seed, &key)).collect()
}

#[test]
fn consecutive_integers_spread_like_random_keys() {
    for seed in SEEDS {
        for start in [0u64, 1 << 32, u64::MAX - 8192] {
            let hashes = integer_hashes(seed, start..start + 8192);
            check_spread(&format!("seed {seed:#x}, 8192 from {start}"), &hashes, 2048);
        }
    }
}

#[test]
fn integers_a_power_of_two_apart_spread_like_random_keys() {
    for seed in SEEDS {
        for shift in [8u32, 16, 32] {
            let hashes = integer_hashes(seed, (0..4096u64).map(|i| i << shift));
            check_spread(&format!("seed {seed:#x}, i << {shift}"), &hashes, 1024);
        }
    }
}

#[test]
fn every_address_of_sixteen_ipv4_slash_24s_spreads_like_random_keys() {
    for seed in SEEDS {
        // 198.18.0.0 to 198.18.15.255: sixteen neighbouring /24s.
        let hashes: Vec<KeyHash> = (0..4096u32)
            .map(|i| NetKey::ipv4(0xc612_0000 + i, 32).unwrap().hash(seed))
            .collect();
        check_spread(&format!("seed {seed:#x}, 198.18.0.0/20"), &hashes, 1024);
    }
}

#[test]
fn ipv4_prefixes_of_every_length_over_one_address_spread_like_random_keys() {
    for seed in SEEDS {
        // Each address of 198.18.0.0/24 at every prefix length from /24 to
        // /32: keys that differ in the prefix length alone, or in one bit.
        let hashes: Vec<KeyHash> = (0..256u32)
            .flat_map(|i| (24..=32).map(move |len| (i, len)))
            .filter_map(|(i, len)| NetKey::ipv4(0xc612_0000 + i, len))
            .map(|key| *key.words())
            .collect::<BTreeSet<[u64; 3]>>()
            .iter()
            .map(|words| hash_words(seed, words))
            .collect();
        check_spread(&format!("seed {seed:#x}, /24 to /32"), &hashes, 256);
    }
}

#[test]
fn ipv6_addresses_one_bit_apart_spread_like_random_keys() {
    for seed in SEEDS {
        // 2001:db8::1 and 2001:db8::1 with each one of its 128 bits flipped,
        // for sixteen neighbouring base addresses.
        let hashes: Vec<KeyHash> = (0..16u64)
            .flat_map(|base| {
                let (high, low) = (0x2001_0db8_0000_0000u64, 1 + (base << 16));
                (0..=128u32).map(move |bit| match bit {
                    128 => (high, low),
                    0..64 => (high, low ^ (1 << bit)),
                    _ => (high ^ (1 << (bit - 64)), low),
                })
            })
            .map(|(high, low)| NetKey::ipv6(high, low, 128).unwrap())
            .map(|key| *key.words())
            .collect::<BTreeSet<[u64; 3]>>()
            .iter()
            .map(|words| hash_words(seed, words))
            .collect();
        assert!(
            hashes.len() >= 2000,
            "only {} distinct hashes",
            hashes.len()
        );
        check_spread(&format!("seed {seed:#x}, IPv6 one bit apart"), &hashes, 512);
    }
}

/// The hashes of IPv6 keys: `(first 64 bits, last 64 bits, prefix length)`.
fn ipv6_hashes(seed: u64, keys: impl Iterator<Item = (u64, u64, u8)>) -> Vec<KeyHash> {
    keys.map(|(high, low, len)| NetKey::ipv6(high, low, len).unwrap().hash(seed))
        .collect()
}

#[test]
fn consecutive_ipv6_addresses_of_one_slash_64_spread_like_random_keys() {
    for seed in SEEDS {
        let hashes = ipv6_hashes(seed, (0..8192u64).map(|i| (0x2001_0db8_0000_0000, i, 128)));
        check_spread(&format!("seed {seed:#x}, 2001:db8::/64"), &hashes, 2048);
        let hashes = ipv6_hashes(
            seed,
            (0..4096u64).map(|i| (0x2001_0db8_0000_0000, i << 8, 128)),
        );
        check_spread(
            &format!("seed {seed:#x}, 2001:db8::/64, i << 8"),
            &hashes,
            1024,
        );
    }
}

#[test]
fn consecutive_ipv6_slash_64s_and_slash_48s_spread_like_random_keys() {
    for seed in SEEDS {
        let hashes = ipv6_hashes(
            seed,
            (0..8192u64).map(|i| (0x2001_0db8_0000_0000 + i, 0, 64)),
        );
        check_spread(
            &format!("seed {seed:#x}, /64s of 2001:db8::/51"),
            &hashes,
            2048,
        );
        let hashes = ipv6_hashes(
            seed,
            (0..8192u64).map(|i| (0x2001_0db8_0000_0000 + (i << 16), 0, 48)),
        );
        check_spread(
            &format!("seed {seed:#x}, /48s of 2001:db8::/35"),
            &hashes,
            2048,
        );
    }
}
