//! One pass over 10^6 and 10^7 random 64-bit keys, as a user meets a large
//! filter: every key inserted once into an empty filter, then every present
//! key and as many absent keys looked up once each. No key is looked up
//! twice in a pass, so the buckets a lookup touches are as cold as the
//! table's size makes them (2 MiB at 10^6 keys, 32 MiB at 10^7 for 16-bit
//! fingerprints).
//!
//! Candidates, side by side in each round (interleaved, so a busy machine
//! slows them alike): filter-core with 16-bit fingerprints, one key at a
//! time and batched ([`CuckooFilter::contains_many`]), filter-core with
//! 8-bit fingerprints (the `cuckoofilter` crate's only width), and the
//! deletable filters from crates.io: `cuckoofilter`, `scalable_cuckoo_filter`
//! and `qfilter` (a quotient filter). Every plain cuckoo candidate gets the
//! same table, sized as Fan et al.'s reference implementation sizes it; the
//! other two are asked for filter-core u16's false-positive rate.
//!
//! Each round prints one table; the last table is the best of all rounds
//! per cell (throughput, million operations per second), with bits per
//! item, the false-positive rate measured on the absent pass, keys lost
//! (inserted but no longer found) and the machine's load average.
//!
//! `cargo bench -p filter-core --bench filters -- [--rounds N] [--sizes
//! 1000000,10000000] [--only NAME]` (or `./x bench ...`); defaults: 5
//! rounds, both sizes, every candidate (`--only` keeps those whose name
//! contains NAME).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::hash_map::DefaultHasher;
use std::hint::black_box;
use std::time::Instant;

use filter_core::{CuckooFilter, Fingerprint};

/// The false-positive rate asked of the candidates sized by one: about
/// filter-core u16's at 95% load (`2 * 4 * 0.95 / 65535`).
const TARGET_FPR: f64 = 1.2e-4;

/// SplitMix64, so every run (and the reference C++ driver) uses the same
/// keys.
fn random_keys(seed: u64, count: usize) -> Vec<u64> {
    let mut state = seed;
    (0..count)
        .map(|_| {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        })
        .collect()
}

/// Buckets for `items`, sized as the reference implementation does: a power
/// of two, doubled when the load would exceed 96%. Every plain cuckoo
/// candidate gets this same table.
const fn cuckoo_buckets(items: usize) -> usize {
    let buckets = items.div_ceil(4).next_power_of_two();
    if items * 100 > buckets * 4 * 96 {
        buckets * 2
    } else {
        buckets
    }
}

/// A filter under test, one key at a time.
trait Keyed {
    /// Inserts `key`; false if the filter refused it.
    fn insert_key(&mut self, key: u64) -> bool;
    fn contains_key(&self, key: u64) -> bool;
    fn bytes(&self) -> usize;
}

/// A filter under test, one pass at a time (so a filter may batch, and a
/// pass costs one dynamic call, not one per key).
trait Filter {
    /// Inserts every key; returns how many the filter refused.
    fn insert_all(&mut self, keys: &[u64]) -> usize;
    /// How many of `keys` the filter reports present.
    fn count_present(&self, keys: &[u64]) -> usize;
    fn bytes(&self) -> usize;
}

impl<T: Keyed> Filter for T {
    fn insert_all(&mut self, keys: &[u64]) -> usize {
        keys.iter().filter(|&&key| !self.insert_key(key)).count()
    }
    fn count_present(&self, keys: &[u64]) -> usize {
        keys.iter().filter(|&&key| self.contains_key(key)).count()
    }
    fn bytes(&self) -> usize {
        Keyed::bytes(self)
    }
}

/// A candidate: its name and how to build its filter for a number of keys.
struct Candidate {
    name: &'static str,
    build: fn(usize) -> Box<dyn Filter>,
}

type OurTable<F> = CuckooFilter<F, 4, Vec<[F; 4]>>;

fn our_table<F: Fingerprint>(items: usize) -> OurTable<F> {
    CuckooFilter::with_storage(vec![[F::EMPTY; 4]; cuckoo_buckets(items)], 1).unwrap()
}

impl<F: Fingerprint> Keyed for OurTable<F> {
    fn insert_key(&mut self, key: u64) -> bool {
        self.insert(&key).is_ok()
    }
    fn contains_key(&self, key: u64) -> bool {
        self.contains(&key)
    }
    fn bytes(&self) -> usize {
        self.capacity() * F::BYTES
    }
}

/// filter-core looking keys up with `contains_many`.
struct Batched(OurTable<u16>);

impl Filter for Batched {
    fn insert_all(&mut self, keys: &[u64]) -> usize {
        self.0.insert_all(keys)
    }
    fn count_present(&self, keys: &[u64]) -> usize {
        self.0.contains_many(keys).filter(|&found| found).count()
    }
    fn bytes(&self) -> usize {
        Keyed::bytes(&self.0)
    }
}

impl Keyed for cuckoofilter::CuckooFilter<DefaultHasher> {
    fn insert_key(&mut self, key: u64) -> bool {
        // NotEnoughSpace means the crate dropped a victim: the lookups
        // count what was lost.
        self.add(&key).is_ok()
    }
    fn contains_key(&self, key: u64) -> bool {
        self.contains(&key)
    }
    fn bytes(&self) -> usize {
        self.memory_usage()
    }
}

impl Keyed for scalable_cuckoo_filter::ScalableCuckooFilter<u64> {
    fn insert_key(&mut self, key: u64) -> bool {
        self.insert(&key);
        true
    }
    fn contains_key(&self, key: u64) -> bool {
        self.contains(&key)
    }
    fn bytes(&self) -> usize {
        (self.bits() / 8) as usize
    }
}

impl Keyed for qfilter::Filter {
    fn insert_key(&mut self, key: u64) -> bool {
        self.insert_duplicated(key).is_ok()
    }
    fn contains_key(&self, key: u64) -> bool {
        self.contains(key)
    }
    fn bytes(&self) -> usize {
        self.memory_usage()
    }
}

const CANDIDATES: [Candidate; 6] = [
    Candidate {
        name: "filter-core u16",
        build: |items| Box::new(our_table::<u16>(items)),
    },
    Candidate {
        name: "filter-core u16, batched",
        build: |items| Box::new(Batched(our_table(items))),
    },
    Candidate {
        name: "filter-core u8",
        build: |items| Box::new(our_table::<u8>(items)),
    },
    Candidate {
        name: "cuckoofilter 0.5 (u8, SipHash)",
        // Capacity 4·b gives exactly b buckets of 4 slots: the same table.
        build: |items| {
            Box::new(cuckoofilter::CuckooFilter::<DefaultHasher>::with_capacity(
                cuckoo_buckets(items) * 4,
            ))
        },
    },
    Candidate {
        name: "scalable_cuckoo_filter 0.5",
        build: |items| {
            Box::new(scalable_cuckoo_filter::ScalableCuckooFilter::<u64>::new(
                items, TARGET_FPR,
            ))
        },
    },
    Candidate {
        name: "qfilter 0.3 (quotient filter)",
        build: |items| Box::new(qfilter::Filter::new(items as u64, TARGET_FPR).unwrap()),
    },
];

/// One candidate's figures at one size.
#[derive(Clone, Copy, Default)]
struct Figures {
    insert: f64,
    present: f64,
    absent: f64,
    bits_per_item: f64,
    fpr: f64,
    lost: usize,
    refused: usize,
}

impl Figures {
    fn best(self, other: Figures) -> Figures {
        Figures {
            insert: self.insert.max(other.insert),
            present: self.present.max(other.present),
            absent: self.absent.max(other.absent),
            ..other
        }
    }
}

fn million_per_second(operations: usize, started: Instant) -> f64 {
    operations as f64 / started.elapsed().as_secs_f64() / 1e6
}

fn one_pass(candidate: &Candidate, keys: &[u64], absent: &[u64]) -> Figures {
    let mut filter = (candidate.build)(keys.len());
    let started = Instant::now();
    let refused = filter.insert_all(black_box(keys));
    let insert = million_per_second(keys.len(), started);
    let started = Instant::now();
    let found = black_box(filter.count_present(black_box(keys)));
    let present = million_per_second(keys.len(), started);
    let started = Instant::now();
    let false_positives = black_box(filter.count_present(black_box(absent)));
    let absent_rate = million_per_second(absent.len(), started);
    Figures {
        insert,
        present,
        absent: absent_rate,
        bits_per_item: filter.bytes() as f64 * 8.0 / keys.len() as f64,
        fpr: false_positives as f64 / absent.len() as f64,
        lost: keys.len() - found,
        refused,
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "unknown".into())
}

fn print_table(title: &str, items: usize, names: &[String], figures: &[Figures]) {
    println!("\n{title}: {items} keys, load average {}", load_average());
    println!(
        "| filter | insert M/s | present M/s | absent M/s | bits/item | FPR | lost | refused |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (name, f) in names.iter().zip(figures) {
        println!(
            "| {name} | {:.1} | {:.1} | {:.1} | {:.2} | {:.3e} | {} | {} |",
            f.insert, f.present, f.absent, f.bits_per_item, f.fpr, f.lost, f.refused
        );
    }
}

struct Options {
    rounds: usize,
    sizes: Vec<usize>,
    only: Option<String>,
}

fn options() -> Options {
    let mut options = Options {
        rounds: 5,
        sizes: vec![1_000_000, 10_000_000],
        only: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--rounds" => options.rounds = args.next().and_then(|v| v.parse().ok()).unwrap(),
            "--sizes" => {
                options.sizes = args
                    .next()
                    .unwrap()
                    .split(',')
                    .map(|size| size.parse().unwrap())
                    .collect()
            }
            "--only" => options.only = args.next(),
            // cargo bench passes --bench; anything else is a mistake.
            "--bench" => {}
            other => panic!("unknown argument {other}; use --rounds N, --sizes A,B, --only NAME"),
        }
    }
    options
}

fn main() {
    let options = options();
    let candidates: Vec<&Candidate> = CANDIDATES
        .iter()
        .filter(|candidate| {
            options
                .only
                .as_ref()
                .is_none_or(|only| candidate.name.contains(only.as_str()))
        })
        .collect();
    let names: Vec<String> = candidates.iter().map(|c| c.name.to_string()).collect();
    for &items in &options.sizes {
        let keys = random_keys(items as u64, items);
        let absent = random_keys(u64::MAX - items as u64, items);
        let mut best = vec![Figures::default(); candidates.len()];
        for round in 1..=options.rounds {
            let mut figures = Vec::new();
            for candidate in &candidates {
                figures.push(one_pass(candidate, &keys, &absent));
            }
            print_table(&format!("round {round}"), items, &names, &figures);
            for (best, round) in best.iter_mut().zip(figures) {
                *best = best.best(round);
            }
        }
        print_table(
            &format!("best of {} rounds", options.rounds),
            items,
            &names,
            &best,
        );
    }
}
