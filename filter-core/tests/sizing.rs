//! Sizing math and the small `const fn` numerics under it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use filter_core::math::{exp, ln};
use filter_core::sizing::{cuckoo_min_fingerprint_bits, cuckoo_params, CuckooParams};
use filter_core::StaticCuckooFilter;

#[test]
fn ln_and_exp_match_std() {
    for x in [
        1e-12, 1e-6, 0.01, 0.5, 0.999_999, 1.0, 1.000_2, 2.0, 10.0, 12345.678,
    ] {
        assert!(
            (ln(x) - x.ln()).abs() <= 1e-13 * x.ln().abs().max(1.0),
            "ln({x})"
        );
    }
    for x in [-700.0, -20.0, -1.0, -1e-9, 0.0, 0.3, 1.0, 5.5, 100.0] {
        assert!((exp(x) - x.exp()).abs() <= 1e-13 * x.exp(), "exp({x})");
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
    assert_eq!(cuckoo_params(1000, 0.04, 4).unwrap().fingerprint_bits, 8);
    assert_eq!(cuckoo_params(1000, 1e-7, 4).unwrap().fingerprint_bits, 32);
    assert_eq!(cuckoo_params(1000, 1e-12, 4), None);
    assert_eq!(cuckoo_params(1000, 0.01, 3), None);
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
    for bits in [0, 1, 0x00ff_ffff, 0x0100_0000, u32::MAX - 1, u32::MAX] {
        assert_ne!(u8::from_hash(bits), 0);
        assert_ne!(u16::from_hash(bits), 0);
        assert_ne!(u32::from_hash(bits), 0);
    }
    assert_eq!(u8::from_hash(u32::MAX), u8::MAX);
    assert_eq!(u32::from_hash(u32::MAX), u32::MAX);
}
