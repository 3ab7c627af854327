//! Tests of [`super`] (plan).

use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

use super::*;
use cfxdp::prefilter::PREFILTER_BLOCKS;

/// Active lengths four apart, so that every entry length expands to at
/// most 8 keys.
fn lengths() -> ActiveLengths {
    ActiveLengths::new(
        &[32, 28, 24, 20, 16, 12, 8, 4],
        &[64, 48, 32, 28, 24, 20, 16, 12],
    )
    .expect("valid lengths")
}

/// Entries crowded into a few regions, so that they share blocks: IPv4
/// from /4 to /32 in 198.0.0.0/8; IPv6 from /12 to /32 (runs of bytes,
/// every bit at /16 and shorter) and /48, /64 in 2001:db8::/29.
fn entry() -> impl Strategy<Value = IpNet> {
    let v4 = (0u32..1 << 24, 4u8..=32).prop_map(|(offset, len)| {
        IpNet::new(IpAddr::V4(Ipv4Addr::from(0xc600_0000 | offset)), len)
            .expect("a valid length")
            .trunc()
    });
    let v6_len = prop_oneof![12u8..=32, Just(48u8), Just(64u8)];
    let v6 = (0u128..1 << 20, v6_len).prop_map(|(offset, len)| {
        let address = 0x2001_0db8u128 << 96 | offset << 80;
        IpNet::new(IpAddr::V6(Ipv6Addr::from(address)), len)
            .expect("a valid length")
            .trunc()
    });
    prop_oneof![2 => v4, 1 => v6]
}

/// The prefilter recomputed from the plan's keys.
fn recomputed(plan: &KeyPlan) -> Box<Prefilter> {
    let mut prefilter = Box::new(Prefilter::EMPTY);
    for key in plan.keys() {
        prefilter.mark(key, plan.lengths().get(key.family()));
    }
    prefilter
}

fn clear(prefilter: &mut Prefilter, bit: PrefilterBit) {
    prefilter.masks_mut(bit.family)[bit.block as usize] &= !bit.mask();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Applying each diff's bits to the live prefilter (set, then clear)
    /// keeps it equal to the prefilter of the remaining keys; a diff
    /// sets only unset bits and clears only set ones.
    #[test]
    fn diff_bits_keep_the_prefilter_equal_to_the_keys(
        steps in prop::collection::vec(
            (
                prop::collection::vec(entry(), 0..5),
                prop::collection::vec(any::<prop::sample::Index>(), 0..4),
            ),
            1..12,
        )
    ) {
        let mut plan = KeyPlan::with_lengths([], lengths(), PlanLimits::default())
            .expect("a plan");
        let mut live = Box::new(Prefilter::EMPTY);
        for (added, removed) in steps {
            let mut entries: Vec<IpNet> = plan.entries.iter().copied().collect();
            entries.sort();
            let removed: Vec<IpNet> = if entries.is_empty() {
                Vec::new()
            } else {
                removed.iter().map(|index| *index.get(&entries)).collect()
            };
            let diff = plan.update(&added, &removed).expect("an update within the lengths");
            for &bit in &diff.set_bits {
                prop_assert!(!live.contains(bit), "{:?} set twice", bit);
                live.set(bit);
            }
            for &bit in &diff.clear_bits {
                prop_assert!(live.contains(bit), "{:?} cleared while clear", bit);
                prop_assert_eq!(plan.bit_references(bit), 0);
                clear(&mut live, bit);
            }
            let expected = recomputed(&plan);
            prop_assert!(*live == *expected, "the live prefilter drifted from the keys");
            prop_assert!(*plan.prefilter() == *expected, "the plan's prefilter drifted");
        }
    }
}

#[test]
fn a_bit_stays_set_until_its_last_key_goes() {
    let nets = |texts: &[&str]| -> Vec<IpNet> {
        texts
            .iter()
            .map(|text| text.parse().expect("a CIDR"))
            .collect()
    };
    let mut plan = KeyPlan::with_lengths([], lengths(), PlanLimits::default()).unwrap();
    // /24 is the third active length.
    let block = PrefilterBit {
        family: AddressFamily::Ipv4,
        block: 0xc612,
        length_index: 2,
    };
    let diff = plan
        .update(&nets(&["198.18.1.0/24", "198.18.2.0/24"]), &[])
        .unwrap();
    assert_eq!(diff.set_bits, [block]);
    assert_eq!(plan.bit_references(block), 2);
    let diff = plan.update(&[], &nets(&["198.18.1.0/24"])).unwrap();
    assert!(diff.clear_bits.is_empty());
    let diff = plan.update(&[], &nets(&["198.18.2.0/24"])).unwrap();
    assert_eq!(diff.clear_bits, [block]);
    // Added and removed in one update: neither set nor cleared.
    let diff = plan
        .update(&nets(&["198.18.3.0/24"]), &nets(&["198.18.3.0/24"]))
        .unwrap();
    assert!(diff.set_bits.is_empty() && diff.clear_bits.is_empty() && diff.insert.is_empty());
    // A /14 (expanded to /16, the fifth length) marks its four /16
    // blocks.
    let diff = plan.update(&nets(&["198.16.0.0/14"]), &[]).unwrap();
    let mut blocks: Vec<u32> = diff.set_bits.iter().map(|bit| bit.block).collect();
    blocks.sort_unstable();
    assert_eq!(blocks, [0xc610, 0xc611, 0xc612, 0xc613]);
    assert!(diff.set_bits.iter().all(|bit| bit.length_index == 4));
    // A /24 beside it marks the same block at another length.
    let diff = plan.update(&nets(&["198.17.5.0/24"]), &[]).unwrap();
    assert_eq!(diff.set_bits.len(), 1);
    assert_eq!(
        plan.prefilter_mask("198.17.0.1".parse().unwrap()),
        1 << 2 | 1 << 4
    );
    assert_eq!(plan.prefilter_mask("198.16.0.1".parse().unwrap()), 1 << 4);
    assert_eq!(plan.prefilter_mask("198.20.0.1".parse().unwrap()), 0);
}

#[test]
fn short_ipv6_keys_mark_every_bit_once() {
    let mut plan = KeyPlan::with_lengths([], lengths(), PlanLimits::default()).unwrap();
    let diff = plan.update(&["2001::/16".parse().unwrap()], &[]).unwrap();
    assert_eq!(diff.set_bits.len(), PREFILTER_BLOCKS);
    // /16 is the seventh active IPv6 length.
    assert!(plan.prefilter().ipv6.iter().all(|&mask| mask == 1 << 6));
    // A /20 spans 4,096 /32 blocks: an aligned run of 4,096 bytes, each
    // listed and counted once per key.
    let mut plan = KeyPlan::with_lengths([], lengths(), PlanLimits::default()).unwrap();
    let wide: IpNet = "2001::/20".parse().unwrap();
    let diff = plan.update(&[wide], &[]).unwrap();
    let distinct: HashSet<PrefilterBit> = diff.set_bits.iter().copied().collect();
    assert_eq!(distinct.len(), diff.set_bits.len());
    assert_eq!(diff.set_bits.len(), 1 << 12);
    let first = diff.set_bits.iter().map(|bit| bit.block).min().unwrap();
    assert_eq!(first % (1 << 12), 0, "an aligned run");
    assert!(diff
        .set_bits
        .iter()
        .all(|&bit| plan.bit_references(bit) == 1));
    let diff = plan.update(&[], &[wide]).unwrap();
    assert_eq!(diff.clear_bits.len(), distinct.len());
    assert_eq!(*plan.prefilter(), Prefilter::EMPTY);
}
