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

/// The filters under comparison, behind one interface. A pass is one call,
/// so a candidate may batch inside it.
trait Candidate {
    fn name(&self) -> String;
    fn build(&mut self, items: usize);
    /// Inserts every key; returns how many the filter refused.
    fn insert_all(&mut self, keys: &[u64]) -> usize;
    /// How many of `keys` the filter reports present.
    fn count_present(&self, keys: &[u64]) -> usize;
    fn bytes(&self) -> usize;
    /// Frees the filter.
    fn drop_filter(&mut self);
}

struct Ours<F: Fingerprint> {
    filter: Option<CuckooFilter<F, 4, Vec<[F; 4]>>>,
    batched: bool,
}

impl<F: Fingerprint> Ours<F> {
    fn new(batched: bool) -> Self {
        Self {
            filter: None,
            batched,
        }
    }
}

impl<F: Fingerprint> Candidate for Ours<F> {
    fn name(&self) -> String {
        let mode = if self.batched { ", batched" } else { "" };
        format!("filter-core u{}{mode}", F::BITS)
    }
    fn build(&mut self, items: usize) {
        let table = vec![[F::EMPTY; 4]; cuckoo_buckets(items)];
        self.filter = Some(CuckooFilter::with_storage(table, 1).unwrap());
    }
    fn insert_all(&mut self, keys: &[u64]) -> usize {
        let filter = self.filter.as_mut().unwrap();
        keys.iter()
            .filter(|&key| filter.insert(key).is_err())
            .count()
    }
    fn count_present(&self, keys: &[u64]) -> usize {
        let filter = self.filter.as_ref().unwrap();
        if self.batched {
            filter.contains_many(keys).filter(|&found| found).count()
        } else {
            keys.iter().filter(|&key| filter.contains(key)).count()
        }
    }
    fn bytes(&self) -> usize {
        self.filter.as_ref().map_or(0, |f| f.capacity() * F::BYTES)
    }
    fn drop_filter(&mut self) {
        self.filter = None;
    }
}

#[derive(Default)]
struct CuckoofilterCrate(Option<cuckoofilter::CuckooFilter<DefaultHasher>>);

impl Candidate for CuckoofilterCrate {
    fn name(&self) -> String {
        "cuckoofilter 0.5 (u8, SipHash)".into()
    }
    fn build(&mut self, items: usize) {
        // Capacity 4·b gives exactly b buckets of 4 slots: the same table.
        self.0 = Some(cuckoofilter::CuckooFilter::with_capacity(
            cuckoo_buckets(items) * 4,
        ));
    }
    fn insert_all(&mut self, keys: &[u64]) -> usize {
        // NotEnoughSpace means the crate dropped a victim: the lookups count
        // what was lost.
        let filter = self.0.as_mut().unwrap();
        keys.iter().filter(|&key| filter.add(key).is_err()).count()
    }
    fn count_present(&self, keys: &[u64]) -> usize {
        let filter = self.0.as_ref().unwrap();
        keys.iter().filter(|&key| filter.contains(key)).count()
    }
    fn bytes(&self) -> usize {
        self.0.as_ref().map_or(0, |f| f.memory_usage())
    }
    fn drop_filter(&mut self) {
        self.0 = None;
    }
}

#[derive(Default)]
struct ScalableCuckoo(Option<scalable_cuckoo_filter::ScalableCuckooFilter<u64>>);

impl Candidate for ScalableCuckoo {
    fn name(&self) -> String {
        "scalable_cuckoo_filter 0.5".into()
    }
    fn build(&mut self, items: usize) {
        self.0 = Some(scalable_cuckoo_filter::ScalableCuckooFilter::new(
            items, TARGET_FPR,
        ));
    }
    fn insert_all(&mut self, keys: &[u64]) -> usize {
        let filter = self.0.as_mut().unwrap();
        for key in keys {
            filter.insert(key);
        }
        0
    }
    fn count_present(&self, keys: &[u64]) -> usize {
        let filter = self.0.as_ref().unwrap();
        keys.iter().filter(|&key| filter.contains(key)).count()
    }
    fn bytes(&self) -> usize {
        self.0.as_ref().map_or(0, |f| (f.bits() / 8) as usize)
    }
    fn drop_filter(&mut self) {
        self.0 = None;
    }
}

#[derive(Default)]
struct QuotientFilter(Option<qfilter::Filter>);

impl Candidate for QuotientFilter {
    fn name(&self) -> String {
        "qfilter 0.3 (quotient filter)".into()
    }
    fn build(&mut self, items: usize) {
        self.0 = Some(qfilter::Filter::new(items as u64, TARGET_FPR).unwrap());
    }
    fn insert_all(&mut self, keys: &[u64]) -> usize {
        let filter = self.0.as_mut().unwrap();
        keys.iter()
            .filter(|&key| filter.insert_duplicated(key).is_err())
            .count()
    }
    fn count_present(&self, keys: &[u64]) -> usize {
        let filter = self.0.as_ref().unwrap();
        keys.iter().filter(|&key| filter.contains(key)).count()
    }
    fn bytes(&self) -> usize {
        self.0.as_ref().map_or(0, |f| f.memory_usage())
    }
    fn drop_filter(&mut self) {
        self.0 = None;
    }
}

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

fn one_pass(candidate: &mut dyn Candidate, keys: &[u64], absent: &[u64]) -> Figures {
    candidate.build(keys.len());
    let started = Instant::now();
    let refused = candidate.insert_all(black_box(keys));
    let insert = million_per_second(keys.len(), started);
    let started = Instant::now();
    let found = black_box(candidate.count_present(black_box(keys)));
    let present = million_per_second(keys.len(), started);
    let started = Instant::now();
    let false_positives = black_box(candidate.count_present(black_box(absent)));
    let absent_rate = million_per_second(absent.len(), started);
    let figures = Figures {
        insert,
        present,
        absent: absent_rate,
        bits_per_item: candidate.bytes() as f64 * 8.0 / keys.len() as f64,
        fpr: false_positives as f64 / absent.len() as f64,
        lost: keys.len() - found,
        refused,
    };
    candidate.drop_filter();
    figures
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
    let mut candidates: Vec<Box<dyn Candidate>> = vec![
        Box::new(Ours::<u16>::new(false)),
        Box::new(Ours::<u16>::new(true)),
        Box::new(Ours::<u8>::new(false)),
        Box::new(CuckoofilterCrate::default()),
        Box::new(ScalableCuckoo::default()),
        Box::new(QuotientFilter::default()),
    ];
    if let Some(only) = &options.only {
        candidates.retain(|candidate| candidate.name().contains(only.as_str()));
    }
    let names: Vec<String> = candidates.iter().map(|c| c.name()).collect();
    for &items in &options.sizes {
        let keys = random_keys(items as u64, items);
        let absent = random_keys(u64::MAX - items as u64, items);
        let mut best = vec![Figures::default(); candidates.len()];
        for round in 1..=options.rounds {
            let mut figures = Vec::new();
            for candidate in candidates.iter_mut() {
                figures.push(one_pass(candidate.as_mut(), &keys, &absent));
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
