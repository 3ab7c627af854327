//! Insert and lookup throughput at 10^3, 10^6 and 10^7 random 64-bit keys:
//! filter-core's cuckoo filter (16-bit fingerprints as specified, and 8-bit
//! to match the `cuckoofilter` crate's only width), the `cuckoofilter`
//! crate, and filter-core's Bloom filter given the same memory as the
//! 16-bit cuckoo table. Before the timings it prints bits per item and the
//! measured false-positive rate of each.
//!
//! Run with `cargo bench -p filter-core --bench filters` (or `./x bench`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::hash_map::DefaultHasher;
use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use filter_core::sizing::bloom_hashes;
use filter_core::{BloomFilter, CuckooFilter, Fingerprint};

const LOOKUP_BATCH: usize = 10_000;
const FPR_PROBES: u64 = 1_000_000;

/// SplitMix64, so every run uses the same keys.
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

/// The filters under comparison, behind one interface.
trait Candidate {
    fn name() -> String;
    fn build(items: usize) -> Self;
    fn add(&mut self, key: u64);
    fn has(&self, key: u64) -> bool;
    fn bytes(&self) -> usize;
}

/// Buckets for `items`, sized as the reference implementation does: a power
/// of two, doubled when the load would exceed 96%. Every cuckoo candidate
/// gets this same table.
const fn cuckoo_buckets(items: usize) -> usize {
    let buckets = items.div_ceil(4).next_power_of_two();
    if items * 100 > buckets * 4 * 96 {
        buckets * 2
    } else {
        buckets
    }
}

struct Ours<F: Fingerprint>(CuckooFilter<F, 4, Vec<[F; 4]>>);

impl<F: Fingerprint> Candidate for Ours<F> {
    fn name() -> String {
        format!("filter-core u{}", F::BITS)
    }
    fn build(items: usize) -> Self {
        Ours(CuckooFilter::with_storage(vec![[F::EMPTY; 4]; cuckoo_buckets(items)], 1).unwrap())
    }
    fn add(&mut self, key: u64) {
        self.0.insert(&key).unwrap();
    }
    fn has(&self, key: u64) -> bool {
        self.0.contains(&key)
    }
    fn bytes(&self) -> usize {
        self.0.capacity() * F::BYTES
    }
}

struct CuckoofilterCrate(cuckoofilter::CuckooFilter<DefaultHasher>);

impl Candidate for CuckoofilterCrate {
    fn name() -> String {
        "cuckoofilter crate".into()
    }
    fn build(items: usize) -> Self {
        // Capacity 4·b gives exactly b buckets of 4 slots: the same table.
        CuckoofilterCrate(cuckoofilter::CuckooFilter::with_capacity(
            cuckoo_buckets(items) * 4,
        ))
    }
    fn add(&mut self, key: u64) {
        // NotEnoughSpace means the crate dropped a victim; the report counts
        // what was lost.
        let _ = self.0.add(&key);
    }
    fn has(&self, key: u64) -> bool {
        self.0.contains(&key)
    }
    fn bytes(&self) -> usize {
        self.0.memory_usage()
    }
}

/// Bloom filter with the 16-bit cuckoo table's memory: one 64-bit word per
/// bucket of four 16-bit slots, with the optimal hash count for that size.
struct Bloom<const HASHES: u32>(BloomFilter<Vec<u64>, HASHES>);

impl<const HASHES: u32> Candidate for Bloom<HASHES> {
    fn name() -> String {
        "filter-core Bloom, same memory".into()
    }
    fn build(items: usize) -> Self {
        Bloom(BloomFilter::with_storage(vec![0; cuckoo_buckets(items)], 1).unwrap())
    }
    fn add(&mut self, key: u64) {
        self.0.insert(&key);
    }
    fn has(&self, key: u64) -> bool {
        self.0.contains(&key)
    }
    fn bytes(&self) -> usize {
        self.0.cell_count() / 8
    }
}

const fn optimal_hashes(items: usize) -> u32 {
    bloom_hashes(cuckoo_buckets(items) * 64, items)
}

type Bloom3 = Bloom<{ optimal_hashes(1_000) }>;
type Bloom6 = Bloom<{ optimal_hashes(1_000_000) }>;
type Bloom7 = Bloom<{ optimal_hashes(10_000_000) }>;

fn filled<C: Candidate>(keys: &[u64]) -> C {
    let mut filter = C::build(keys.len());
    for &key in keys {
        filter.add(key);
    }
    filter
}

fn report<C: Candidate>(keys: &[u64], absent: &[u64]) {
    let filter: C = filled(keys);
    let lost = keys.iter().filter(|&&key| !filter.has(key)).count();
    let positives = absent.iter().filter(|&&key| filter.has(key)).count();
    println!(
        "| {:>10} | {:<32} | {:>9.2} | {:>10.3e} | {:>5} |",
        keys.len(),
        C::name(),
        filter.bytes() as f64 * 8.0 / keys.len() as f64,
        positives as f64 / absent.len() as f64,
        lost
    );
}

fn bench_candidate<C: Candidate>(c: &mut Criterion, keys: &[u64], absent: &[u64]) {
    let items = keys.len();
    let mut group = c.benchmark_group(format!("insert/{items}"));
    group.throughput(Throughput::Elements(items as u64));
    group.sample_size(10);
    group.bench_function(C::name(), |b| {
        b.iter_batched_ref(
            || C::build(items),
            |filter| {
                for &key in keys {
                    filter.add(key);
                }
            },
            BatchSize::PerIteration,
        );
    });
    group.finish();

    let filter: C = filled(keys);
    let present: Vec<u64> = keys
        .iter()
        .copied()
        .cycle()
        .step_by(7)
        .take(LOOKUP_BATCH)
        .collect();
    let absent = &absent[..LOOKUP_BATCH];
    for (kind, probes) in [("lookup-present", &present[..]), ("lookup-absent", absent)] {
        let mut group = c.benchmark_group(format!("{kind}/{items}"));
        group.throughput(Throughput::Elements(LOOKUP_BATCH as u64));
        group.bench_with_input(BenchmarkId::new(C::name(), items), probes, |b, probes| {
            b.iter(|| {
                probes
                    .iter()
                    .filter(|&&key| filter.has(black_box(key)))
                    .count()
            });
        });
        group.finish();
    }
}

fn compare<const N: usize, B: Candidate>(c: &mut Criterion) {
    let keys = random_keys(N as u64, N);
    let absent = random_keys(u64::MAX - N as u64, FPR_PROBES as usize);
    println!("| items      | filter                           | bits/item | FPR        | lost  |");
    report::<Ours<u16>>(&keys, &absent);
    report::<Ours<u8>>(&keys, &absent);
    report::<CuckoofilterCrate>(&keys, &absent);
    report::<B>(&keys, &absent);
    bench_candidate::<Ours<u16>>(c, &keys, &absent);
    bench_candidate::<Ours<u8>>(c, &keys, &absent);
    bench_candidate::<CuckoofilterCrate>(c, &keys, &absent);
    bench_candidate::<B>(c, &keys, &absent);
}

fn thousand(c: &mut Criterion) {
    compare::<1_000, Bloom3>(c);
}

fn million(c: &mut Criterion) {
    compare::<1_000_000, Bloom6>(c);
}

fn ten_million(c: &mut Criterion) {
    compare::<10_000_000, Bloom7>(c);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = thousand, million, ten_million
}
criterion_main!(benches);
