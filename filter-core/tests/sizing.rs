//! Sizing math and the small `const fn` numerics under it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use filter_core::math::{bloom_fpr, ceil_to_u64, cuckoo_fpr, exp, exp_m1, ln, powi};
use filter_core::sizing::{
    achievable_load, cuckoo_buckets, cuckoo_min_fingerprint_bits, cuckoo_params, CuckooParams,
};
use filter_core::StaticCuckooFilter;

/// `n` points spread evenly on a log scale from `low` to `high` (> 0).
fn log_grid(low: f64, high: f64, n: usize) -> impl Iterator<Item = f64> {
    (0..=n).map(move |i| low * (high / low).powf(i as f64 / n as f64))
}

fn assert_close(got: f64, want: f64, what: &str) {
    assert!(
        (got - want).abs() <= 1e-13 * want.abs().max(f64::MIN_POSITIVE),
        "{what}: {got} against std's {want}"
    );
}

#[test]
fn the_numerics_match_std_on_a_dense_grid_and_at_each_branch() {
    // ln: every binade; around 1, where the result is tiny and must stay
    // precise relative to itself; both sides of the mantissa's halving at
    // sqrt(2).
    let around_one = [
        1.0 - 1e-15,
        1.0,
        1.0 + 2e-16,
        0.998_999,
        0.999,
        0.999_000_1,
        0.9995,
        1.0005,
        1.000_999_9,
        1.001,
        1.001_01,
    ];
    let sqrt2 = std::f64::consts::SQRT_2;
    for x in log_grid(1e-300, 1e300, 6000).chain(around_one).chain([
        sqrt2 * (1.0 - 1e-15),
        sqrt2,
        sqrt2 * (1.0 + 1e-15),
        2.0 * sqrt2,
    ]) {
        assert_close(ln(x), x.ln(), &format!("ln({x})"));
    }
    assert_eq!(ln(0.0), f64::NEG_INFINITY);
    assert_eq!(ln(-1.0), f64::NEG_INFINITY);
    // exp over its whole finite range, and the ends.
    for x in (0..=14_160).map(|i| -708.0 + i as f64 * 0.1).chain([709.0]) {
        assert_close(exp(x), x.exp(), &format!("exp({x})"));
    }
    assert_eq!(exp(-708.5), 0.0);
    assert_eq!(exp(709.5), f64::INFINITY);
    // exp_m1: the series below 0.01 and exp beyond, on both sides.
    for x in log_grid(1e-12, 50.0, 3000)
        .flat_map(|x| [x, -x])
        .chain([0.0099, 0.01, -0.01])
    {
        assert_close(exp_m1(x), x.exp_m1(), &format!("exp_m1({x})"));
    }
    for (base, exponent) in [(2.0, 0), (2.0, 16), (0.5, 7), (-3.0, 3), (1.000_1, 32)] {
        assert_close(
            powi(base, exponent),
            f64::powi(base, exponent as i32),
            "powi",
        );
    }
    // The formulas, against the same formulas in std's functions.
    for (bits, slots, load) in [
        (8, 4, 0.95),
        (16, 4, 0.5),
        (16, 2, 0.84),
        (32, 8, 1.0),
        (12, 1, 0.3),
    ] {
        let values = 2f64.powi(bits as i32) - 1.0;
        let want = -(2.0 * slots as f64 * load * (1.0 - 1.0 / values).ln()).exp_m1();
        assert_close(cuckoo_fpr(bits, slots, load), want, "cuckoo_fpr");
    }
    for (bits, hashes, items) in [(958_528, 7, 100_000), (64, 1, 1), (1 << 20, 3, 1 << 18)] {
        let fill = -(-(hashes as f64) * items as f64 / bits as f64).exp_m1();
        assert_close(
            bloom_fpr(bits, hashes, items),
            fill.powi(hashes as i32),
            "bloom_fpr",
        );
    }
    for (x, want) in [
        (0.0, 0),
        (1.0, 1),
        (1.000_000_1, 2),
        (41.5, 42),
        (1e18, 1_000_000_000_000_000_000),
    ] {
        assert_eq!(ceil_to_u64(x), want, "ceil_to_u64({x})");
    }
}

#[test]
fn cuckoo_sizing_picks_the_fingerprint_and_bucket_count() {
    // eps ~ 2b/2^f: 0.1% with b = 4 needs f >= 13, so u16.
    assert_eq!(cuckoo_min_fingerprint_bits(4, 0.001), Some(13));
    // 1e6 items / (4 * 0.95) = 263,158 buckets -> 2^19.
    assert_eq!(
        cuckoo_params(1_000_000, 0.001, 4),
        Some(CuckooParams {
            buckets: 1 << 19,
            slots: 4,
            fingerprint_bits: 16
        })
    );
    assert_eq!(cuckoo_params(1_000_000, 0.001, 4).unwrap().bytes(), 4 << 20);
    assert_eq!(cuckoo_params(1000, 0.04, 4).unwrap().fingerprint_bits, 8);
    assert_eq!(cuckoo_params(1000, 0.04, 4).unwrap().bytes(), 512 * 4);
    assert_eq!(cuckoo_params(1000, 1e-7, 4).unwrap().fingerprint_bits, 32);
    assert_eq!(cuckoo_params(1000, 1e-12, 4), None);
    assert_eq!(cuckoo_params(1000, 0.01, 3), None);
}

#[test]
fn every_slot_count_has_its_load_and_others_none() {
    for (slots, load, buckets_for_1000) in [
        (1, 0.50, 2048),
        (2, 0.84, 1024),
        (4, 0.95, 512),
        (8, 0.98, 128),
    ] {
        assert_eq!(achievable_load(slots), load, "{slots} slots");
        assert_eq!(
            cuckoo_buckets(1000, slots),
            Some(buckets_for_1000),
            "{slots} slots"
        );
    }
    for slots in [0, 3, 16] {
        assert_eq!(achievable_load(slots), 0.0, "{slots} slots");
        assert_eq!(cuckoo_buckets(1000, slots), None, "{slots} slots");
    }
    assert_eq!(cuckoo_buckets(0, 4), Some(1));
}

#[test]
fn a_rate_outside_zero_to_one_needs_no_fingerprint() {
    for fpr in [0.0, 1.0, 2.0, -0.5, f64::NAN, f64::INFINITY] {
        assert_eq!(cuckoo_min_fingerprint_bits(4, fpr), None, "fpr {fpr}");
    }
    // Just inside: 2b / 2^f <= fpr.
    assert_eq!(cuckoo_min_fingerprint_bits(4, 0.999), Some(4));
    assert_eq!(cuckoo_min_fingerprint_bits(1, 0.5), Some(2));
    assert_eq!(cuckoo_min_fingerprint_bits(4, 2f64.powi(-29)), Some(32));
    assert_eq!(cuckoo_min_fingerprint_bits(4, 2f64.powi(-30)), None);
}

#[test]
fn sizes_can_be_computed_at_compile_time() {
    const PARAMS: CuckooParams = match cuckoo_params(3_000, 0.001, 4) {
        Some(params) => params,
        None => panic!("unreachable sizing"),
    };
    static FILTER: std::sync::Mutex<StaticCuckooFilter<u16, 4, { PARAMS.buckets }>> =
        std::sync::Mutex::new(StaticCuckooFilter::new(0));
    let mut filter = FILTER.lock().unwrap();
    for key in 0..3_000u64 {
        filter.insert(&key).unwrap();
    }
    assert_eq!(filter.capacity(), 4096);
}

#[test]
fn fingerprints_are_never_the_empty_value() {
    use filter_core::Fingerprint;
    for bits in [
        0,
        1,
        0x0001_0000,
        0x00ff_ffff,
        0x0100_0000,
        u32::MAX - 1,
        u32::MAX,
    ] {
        assert_ne!(u8::from_hash(bits), 0);
        assert_ne!(u16::from_hash(bits), 0);
        assert_ne!(u32::from_hash(bits), 0);
    }
    assert_eq!(u8::from_hash(u32::MAX), u8::MAX);
    assert_eq!(u32::from_hash(u32::MAX), u32::MAX);
}
