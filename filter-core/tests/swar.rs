//! The branch-free bucket compares (`layout::bucket_contains`,
//! `bucket_count`, `find_slot`, `buckets_contain`) against the plain
//! slot-by-slot compare, for every fingerprint width and slot count, on
//! buckets built to trip lane tests up: fingerprints with the top bit set,
//! all-ones and all-zero lanes, a fingerprint's near neighbours (top bit or
//! low bit flipped), and the same fingerprint repeated.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use filter_core::layout::{bucket_contains, bucket_count, buckets_contain, find_slot};
use filter_core::Fingerprint;
use proptest::prelude::*;

/// A width's tricky values, as `u32` (truncated to the width on use).
trait Lanes: Fingerprint + Arbitrary {
    const MAX: Self;
    const TOP: Self;
    fn from_u32(value: u32) -> Self;
}

macro_rules! lanes {
    ($($ty:ty),*) => {$(
        impl Lanes for $ty {
            const MAX: Self = <$ty>::MAX;
            const TOP: Self = 1 << (<$ty>::BITS - 1);
            fn from_u32(value: u32) -> Self {
                value as $ty
            }
        }
    )*};
}
lanes!(u8, u16, u32);

/// The value a choice stands for, relative to the fingerprint looked for.
fn pick<F: Lanes>(choice: u8, fingerprint: F, random: F) -> F {
    let fp = fingerprint.to_u32();
    match choice % 10 {
        0 | 1 => fingerprint,
        2 => F::EMPTY,
        3 => F::MAX,
        4 => F::TOP,
        5 => F::from_u32(fp ^ F::TOP.to_u32()),
        6 => F::from_u32(fp ^ 1),
        7 => F::from_u32(fp.wrapping_add(1)),
        8 => F::from_u32(fp.wrapping_sub(1)),
        _ => random,
    }
}

fn fingerprint<F: Lanes>() -> impl Strategy<Value = F> {
    prop_oneof![
        any::<F>(),
        Just(F::EMPTY),
        Just(F::MAX),
        Just(F::TOP),
        Just(F::from_u32(1)),
        Just(F::from_u32(F::TOP.to_u32() - 1)),
        Just(F::from_u32(F::TOP.to_u32() | 1)),
    ]
}

fn bucket<F: Lanes, const S: usize>(fingerprint: F, choices: &[u8], random: F) -> [F; S] {
    core::array::from_fn(|i| pick(choices[i], fingerprint, random))
}

fn check<F: Lanes, const S: usize>(primary: [F; S], alternate: [F; S], fingerprint: F) {
    let plain_count = |bucket: &[F; S]| bucket.iter().filter(|&&s| s == fingerprint).count();
    let plain_first = |bucket: &[F; S]| bucket.iter().position(|&s| s == fingerprint);
    for bucket in [&primary, &alternate] {
        assert_eq!(
            bucket_contains(bucket, fingerprint),
            plain_count(bucket) > 0,
            "contains {fingerprint:?} in {bucket:?}"
        );
        assert_eq!(
            bucket_count(bucket, fingerprint),
            plain_count(bucket),
            "count {fingerprint:?} in {bucket:?}"
        );
        assert_eq!(
            find_slot(bucket, fingerprint),
            plain_first(bucket),
            "first {fingerprint:?} in {bucket:?}"
        );
    }
    assert_eq!(
        buckets_contain(&primary, &alternate, fingerprint),
        plain_count(&primary) + plain_count(&alternate) > 0,
        "either {fingerprint:?} in {primary:?} {alternate:?}"
    );
}

fn run<F: Lanes, const S: usize>(fingerprint: F, primary: &[u8], alternate: &[u8], random: (F, F)) {
    check::<F, S>(
        bucket(fingerprint, primary, random.0),
        bucket(fingerprint, alternate, random.1),
        fingerprint,
    );
}

macro_rules! agreement {
    ($($name:ident: $ty:ty, $slots:literal;)*) => {
        proptest! {
            #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]
            $(
                #[test]
                fn $name(
                    fingerprint in fingerprint::<$ty>(),
                    primary in proptest::collection::vec(any::<u8>(), $slots),
                    alternate in proptest::collection::vec(any::<u8>(), $slots),
                    random in any::<($ty, $ty)>(),
                ) {
                    run::<$ty, $slots>(fingerprint, &primary, &alternate, random);
                }
            )*
        }
    };
}

agreement! {
    u8_one_slot: u8, 1;
    u8_two_slots: u8, 2;
    u8_four_slots: u8, 4;
    u8_eight_slots: u8, 8;
    u16_one_slot: u16, 1;
    u16_two_slots: u16, 2;
    u16_four_slots: u16, 4;
    u16_eight_slots: u16, 8;
    u32_one_slot: u32, 1;
    u32_two_slots: u32, 2;
    u32_four_slots: u32, 4;
    u32_eight_slots: u32, 8;
}

/// The cases a lane test most often gets wrong, spelled out, so they run
/// on every build whatever proptest draws.
#[test]
fn known_traps() {
    // A borrow out of a zero lane must not mark the lane above it.
    check::<u8, 8>([0, 1, 0, 1, 0, 1, 0, 1], [1; 8], 0);
    check::<u8, 8>([5, 4, 5, 4, 5, 4, 5, 4], [0x85; 8], 5);
    check::<u16, 4>([0x8000, 0, 0x7fff, 0xffff], [0x8001; 4], 0x8000);
    check::<u16, 4>([0xffff, 0xfffe, 0xffff, 0], [0; 4], 0xffff);
    check::<u32, 2>([u32::MAX, 0x8000_0000], [0x7fff_ffff, 1], 0x8000_0000);
    check::<u32, 8>([1, 1, 1, 1, 1, 1, 1, 0], [1; 8], 0);
    // Padding lanes (a bucket narrower than a word) never match, not even
    // the empty fingerprint.
    check::<u8, 2>([1, 2], [3, 4], 0);
    check::<u16, 1>([9], [9], 0);
    check::<u32, 1>([u32::MAX], [0], 0);
}

/// Every 8-bit fingerprint against every 8-bit slot value, in every
/// position of every bucket size, beside neighbours that provoke a borrow
/// (zero lanes) or a carry (all-ones lanes).
#[test]
fn every_byte_pair_in_every_position() {
    for fingerprint in 0..=u8::MAX {
        for value in 0..=u8::MAX {
            for neighbour in [fingerprint, fingerprint ^ 0x80, 0, 0xff, 0x7f] {
                for position in 0..8 {
                    let mut bucket = [neighbour; 8];
                    bucket[position] = value;
                    check::<u8, 8>(bucket, [neighbour; 8], fingerprint);
                    if position < 4 {
                        let four = [bucket[0], bucket[1], bucket[2], bucket[3]];
                        check::<u8, 4>(four, four, fingerprint);
                    }
                    if position < 2 {
                        check::<u8, 2>([bucket[0], bucket[1]], [value; 2], fingerprint);
                    }
                    if position == 0 {
                        check::<u8, 1>([value], [neighbour], fingerprint);
                    }
                }
            }
        }
    }
}
