//! The prefix plan against an exact model: random overlapping CIDR add and
//! delete sequences keep the filter keys covering exactly the addresses the
//! entries cover, the diffs are exact, and no reference count leaks.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use cfctl::plan::{
    choose_lengths, family_of, ActiveLengths, CheckVerdict, KeyPlan, PlanError, PlanLimits,
    RebuildReason,
};
use filter_core::NetKey;
use ipnet::IpNet;
use proptest::prelude::*;

const V4_BASE: u32 = 0xc612_0000; // 198.18.0.0/15
const V6_BASE: u128 = 0x2001_0db8 << 96; // 2001:db8::/32

fn net(text: &str) -> IpNet {
    text.parse().unwrap()
}

fn v4_net() -> impl Strategy<Value = IpNet> {
    (0u32..1 << 17, 20u8..=32).prop_map(|(offset, len)| {
        IpNet::new(IpAddr::from(Ipv4Addr::from(V4_BASE | offset)), len)
            .unwrap()
            .trunc()
    })
}

fn v6_net() -> impl Strategy<Value = IpNet> {
    (0u128..1 << 14, 116u8..=128).prop_map(|(offset, len)| {
        IpNet::new(IpAddr::from(Ipv6Addr::from(V6_BASE | offset)), len)
            .unwrap()
            .trunc()
    })
}

fn any_net() -> impl Strategy<Value = IpNet> {
    prop_oneof![3 => v4_net(), 1 => v6_net()]
}

#[derive(Clone, Debug)]
struct Step {
    added: Vec<IpNet>,
    removed_existing: Vec<prop::sample::Index>,
    removed_random: Vec<IpNet>,
}

fn step() -> impl Strategy<Value = Step> {
    (
        prop::collection::vec(any_net(), 0..6),
        prop::collection::vec(any::<prop::sample::Index>(), 0..4),
        prop::collection::vec(any_net(), 0..2),
    )
        .prop_map(|(added, removed_existing, removed_random)| Step {
            added,
            removed_existing,
            removed_random,
        })
}

fn address_bits(address: IpAddr) -> u128 {
    match address {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

fn address_of(net: &IpNet, bits: u128) -> IpAddr {
    match net {
        IpNet::V4(_) => IpAddr::from(Ipv4Addr::from(bits as u32)),
        IpNet::V6(_) => IpAddr::from(Ipv6Addr::from(bits)),
    }
}

/// The key of `address`'s prefix of length `len`, built independently of
/// the plan.
fn key_of(address: IpAddr, len: u8) -> NetKey {
    match address {
        IpAddr::V4(v4) => NetKey::ipv4_octets(v4.octets(), len),
        IpAddr::V6(v6) => NetKey::ipv6_octets(v6.octets(), len),
    }
    .unwrap()
}

/// First, last, and just-outside addresses of every network, plus samples.
fn probe_addresses(nets: &HashSet<IpNet>, samples: &[IpNet]) -> Vec<IpAddr> {
    let mut addresses = Vec::new();
    for net in nets.iter().chain(samples) {
        let first = address_bits(net.network());
        let last = address_bits(net.broadcast());
        for bits in [first.wrapping_sub(1), first, last, last.wrapping_add(1)] {
            addresses.push(address_of(net, bits));
        }
        addresses.push(address_of(net, first + (last - first) / 2));
    }
    addresses
}

/// Checks the plan and the filter key set against the model.
fn check_against_model(
    plan: &KeyPlan,
    filter: &HashSet<NetKey>,
    model: &HashSet<IpNet>,
    samples: &[IpNet],
) -> Result<(), TestCaseError> {
    let plan_keys: HashSet<NetKey> = plan.keys().copied().collect();
    prop_assert_eq!(&plan_keys, filter, "the diffs drifted from the plan");
    prop_assert_eq!(plan.entry_count(), model.len());

    for address in probe_addresses(model, samples) {
        let family_lengths = match address {
            IpAddr::V4(_) => plan.lengths().ipv4(),
            IpAddr::V6(_) => plan.lengths().ipv6(),
        };
        let keyed = family_lengths
            .iter()
            .any(|&len| filter.contains(&key_of(address, len)));
        let mut covering: Vec<IpNet> = model
            .iter()
            .filter(|net| net.contains(&address))
            .copied()
            .collect();
        covering.sort_by_key(|net| std::cmp::Reverse(net.prefix_len()));
        prop_assert_eq!(
            keyed,
            !covering.is_empty(),
            "coverage differs at {}",
            address
        );
        prop_assert_eq!(plan.covering_entries(address), covering);
    }

    // Reference counts: every key counts the entries that expand to it, so
    // the counts add up to the sum of the expansions, and no key is kept
    // without a reference.
    let mut expected_references = 0u64;
    for entry in model {
        let lengths = plan.lengths().get(family_of(entry));
        let target = lengths
            .iter()
            .rev()
            .find(|&&len| len >= entry.prefix_len())
            .expect("every entry has an active length");
        expected_references += 1 << (target - entry.prefix_len());
    }
    let references: u64 = filter
        .iter()
        .map(|key| u64::from(plan.key_references(key)))
        .sum();
    prop_assert_eq!(references, expected_references);
    prop_assert!(filter.iter().all(|key| plan.key_references(key) > 0));
    Ok(())
}

fn limits(ipv4_lengths: usize, ipv6_lengths: usize) -> PlanLimits {
    PlanLimits {
        ipv4_lengths,
        ipv6_lengths,
        max_keys: 1 << 16,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn updates_keep_keys_equal_to_the_entries(
        initial in prop::collection::vec(any_net(), 0..12),
        steps in prop::collection::vec(step(), 1..16),
        samples in prop::collection::vec(any_net(), 8),
        ipv4_lengths in 1usize..=4,
        ipv6_lengths in 1usize..=3,
    ) {
        let limits = limits(ipv4_lengths, ipv6_lengths);
        let mut model: HashSet<IpNet> = initial.iter().copied().collect();
        let mut plan = KeyPlan::build(initial, limits).unwrap();
        let mut filter: HashSet<NetKey> = plan.keys().copied().collect();
        let mut rebuilds = 0;
        check_against_model(&plan, &filter, &model, &samples)?;

        for step in steps {
            let current: Vec<IpNet> = model.iter().copied().collect();
            let mut removed: Vec<IpNet> = step
                .removed_existing
                .iter()
                .filter(|_| !current.is_empty())
                .map(|index| *index.get(&current))
                .collect();
            removed.extend(step.removed_random);
            let mut next = model.clone();
            next.extend(step.added.iter().copied());
            for net in &removed {
                next.remove(net);
            }

            match plan.update(&step.added, &removed) {
                Ok(diff) => {
                    for key in &diff.insert {
                        prop_assert!(filter.insert(*key), "inserted a key twice");
                    }
                    for key in &diff.remove {
                        prop_assert!(filter.remove(key), "removed an absent key");
                    }
                    model = next;
                }
                Err(PlanError::RebuildNeeded(_)) => {
                    // Nothing changed; the caller rebuilds from the new set.
                    check_against_model(&plan, &filter, &model, &samples)?;
                    match KeyPlan::build(next.iter().copied(), limits) {
                        Ok(rebuilt) => {
                            plan = rebuilt;
                            filter = plan.keys().copied().collect();
                            model = next;
                            rebuilds += 1;
                        }
                        // The command fails; the old filter stays.
                        Err(PlanError::TooManyKeys { .. }) => {}
                        Err(other) => prop_assert!(false, "unexpected error {}", other),
                    }
                }
                Err(other) => prop_assert!(false, "unexpected error {}", other),
            }
            check_against_model(&plan, &filter, &model, &samples)?;
        }

        // Removing everything leaves nothing behind.
        let everything: Vec<IpNet> = model.iter().copied().collect();
        let diff = plan.update(&[], &everything).unwrap();
        prop_assert!(diff.insert.is_empty());
        prop_assert_eq!(diff.remove.len(), filter.len());
        prop_assert_eq!(plan.key_count(), 0);
        prop_assert_eq!(plan.entry_count(), 0);
        prop_assert!(rebuilds <= 16);
    }

    #[test]
    fn chosen_lengths_are_optimal(
        present in prop::collection::btree_map(0usize..=32, 1u64..50, 1..8),
        budget in 1usize..5,
    ) {
        let mut histogram = vec![0u64; 33];
        for (&len, &count) in &present {
            histogram[len] = count;
        }
        let cost = |active: &[u8]| -> u128 {
            present
                .iter()
                .map(|(&len, &count)| {
                    let target = active.iter().copied().filter(|&a| usize::from(a) >= len).min();
                    u128::from(count) << (target.unwrap() as usize - len)
                })
                .sum()
        };
        let (chosen, keys) = choose_lengths(&histogram, budget).unwrap();
        prop_assert!(chosen.len() <= budget);
        prop_assert!(chosen.windows(2).all(|pair| pair[0] > pair[1]), "not longest first");
        prop_assert_eq!(keys, cost(&chosen));

        // Brute force over every subset of the present lengths that
        // contains the longest one.
        let lengths: Vec<u8> = present.keys().map(|&len| len as u8).collect();
        let longest = *lengths.last().unwrap();
        let others = &lengths[..lengths.len() - 1];
        let mut best = u128::MAX;
        for mask in 0u32..1 << others.len() {
            if mask.count_ones() as usize + 1 > budget {
                continue;
            }
            let mut active: Vec<u8> = (0..others.len())
                .filter(|bit| mask & 1 << bit != 0)
                .map(|bit| others[bit])
                .collect();
            active.push(longest);
            best = best.min(cost(&active));
        }
        prop_assert_eq!(keys, best);
    }
}

#[test]
fn overlapping_entries_share_keys_until_the_last_one_goes() {
    let limits = limits(1, 1);
    let mut plan = KeyPlan::build([net("198.18.0.0/24")], limits).unwrap();
    assert_eq!(plan.lengths().ipv4(), [24]);
    let diff = plan.update(&[net("198.18.0.0/23")], &[]).unwrap();
    // The /23 expands to two /24s, one of which the /24 already holds.
    assert_eq!(diff.insert, [NetKey::ipv4(V4_BASE | 0x100, 24).unwrap()]);
    let shared = NetKey::ipv4(V4_BASE, 24).unwrap();
    assert_eq!(plan.key_references(&shared), 2);

    let diff = plan.update(&[], &[net("198.18.0.0/24")]).unwrap();
    assert_eq!(diff.remove, []);
    assert_eq!(plan.key_references(&shared), 1);
    let diff = plan.update(&[], &[net("198.18.0.0/23")]).unwrap();
    assert_eq!(diff.remove.len(), 2);
    assert_eq!(plan.key_count(), 0);
}

#[test]
fn a_length_longer_than_every_active_one_needs_a_rebuild_and_changes_nothing() {
    let mut plan = KeyPlan::build([net("198.18.0.0/24")], PlanLimits::default()).unwrap();
    let error = plan
        .update(
            &[net("198.18.1.0/24"), net("198.18.2.1/32")],
            &[net("198.18.0.0/24")],
        )
        .unwrap_err();
    assert_eq!(
        error,
        PlanError::RebuildNeeded(RebuildReason::LengthNotActive {
            net: net("198.18.2.1/32"),
            active: vec![24],
        })
    );
    assert_eq!(
        error.to_string(),
        "a full rebuild of the filter is needed: 198.18.2.1/32 is longer than every active IPv4 \
         prefix length (/24)"
    );
    assert_eq!(plan.entry_count(), 1);
    assert_eq!(plan.key_count(), 1);

    // An IPv6 entry when no IPv6 length is active.
    let error = plan.update(&[net("2001:db8::/32")], &[]).unwrap_err();
    assert!(error.to_string().ends_with("(none)"), "{error}");
}

#[test]
fn expansions_over_the_key_limit_are_refused() {
    let limits = PlanLimits {
        ipv4_lengths: 1,
        ipv6_lengths: 1,
        max_keys: 1000,
    };
    let error = KeyPlan::build([net("198.18.0.0/16"), net("198.18.0.1/32")], limits).unwrap_err();
    assert_eq!(
        error.to_string(),
        "the IPv4 entries expand to 65537 filter keys with at most 1 probe lengths, over the \
         limit of 1000 keys (raise the key limit or the probe budget, or list fewer or shorter \
         prefixes)"
    );
    let lengths = ActiveLengths::new(&[32, 8], &[]).unwrap();
    let over_budget = KeyPlan::with_lengths([], lengths.clone(), limits).unwrap_err();
    assert_eq!(
        over_budget.to_string(),
        "2 active IPv4 prefix lengths are more than the probe budget of 1"
    );
    let limits = PlanLimits {
        ipv4_lengths: 2,
        ..limits
    };
    let mut plan = KeyPlan::with_lengths([net("198.18.0.1/32")], lengths, limits).unwrap();
    let error = plan.update(&[net("198.18.0.0/20")], &[]).unwrap_err();
    assert_eq!(
        error,
        PlanError::RebuildNeeded(RebuildReason::TooManyKeys {
            keys: 4097,
            limit: 1000
        })
    );
    assert_eq!(plan.key_count(), 1);
    assert_eq!(ActiveLengths::new(&[33], &[]), None);
}

#[test]
fn check_tells_listed_from_false_positive() {
    let plan = KeyPlan::build(
        [
            net("198.18.0.0/16"),
            net("198.18.7.0/24"),
            net("2001:db8::/48"),
        ],
        PlanLimits::default(),
    )
    .unwrap();
    let listed: IpAddr = "198.18.7.9".parse().unwrap();
    let exact = |key: &NetKey| plan.key_references(key) > 0;

    let report = plan.check(listed, exact);
    assert_eq!(
        report.covering,
        [net("198.18.7.0/24"), net("198.18.0.0/16")]
    );
    assert_eq!(report.filter_hit, Some(key_of(listed, 24)));
    assert_eq!(report.verdict(), CheckVerdict::Listed);

    let unlisted: IpAddr = "198.19.0.1".parse().unwrap();
    assert_eq!(
        plan.check(unlisted, exact).verdict(),
        CheckVerdict::NotListed
    );
    // A filter that answers yes for a key no entry has: a false positive.
    let report = plan.check(unlisted, |key: &NetKey| key.prefix_len() == 16);
    assert_eq!(report.verdict(), CheckVerdict::FalsePositive);
    assert!(report.covering.is_empty());
    // A filter that lost a key.
    let v6: IpAddr = "2001:db8::1".parse().unwrap();
    assert_eq!(
        plan.check(v6, |_: &NetKey| false).verdict(),
        CheckVerdict::MissingFromFilter
    );
    assert_eq!(plan.probe_keys(v6), [key_of(v6, 48)]);
}
