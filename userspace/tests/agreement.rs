//! The XDP program and filter-core agree: on filter-core's cross-target
//! test vectors, on where random keys live (behind random stacks of VLAN
//! tags), and on the verdict for 100,000
//! random addresses against the same table memory and the plan's block
//! prefilter; and live single-bucket updates through filter-core, with
//! each new key's prefilter bits set first, keep every listed key listed.
//! Needs root.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use std::collections::HashSet;

use cfctl::plan::{ActiveLengths, KeyPlan, PlanLimits};
use cfctl::xdp::maps::filter_profile;
use cfctl::xdp::test_run::XdpAction;
use cfctl::xdp::{FilterProgram, FilterTable, LoadOptions};
use cfctl::FilterShape;
use cfxdp::packet::MAX_VLAN_TAGS;
use cfxdp::prefilter::skip_bit;
use cfxdp::FilterProfile;
use common::locate::Locator;
use common::{blocklist_with, net_key, udp_frame, Tags, SEED, TAG_PROTOCOLS};
use filter_core::layout::locate;
use filter_core::{AddressFamily, CuckooFilter, Fingerprint, KeyHash, NetKey};
use ipnet::IpNet;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// One `net:` row of filter-core/tests/vectors.csv.
struct Vector {
    seed: u64,
    address: IpAddr,
    prefix_len: u8,
    bucket_count: usize,
    fingerprint_bits: u32,
    hash: u64,
    fingerprint: u32,
    primary: u32,
    alternate: u32,
}

fn parse_hex(text: &str) -> u64 {
    u64::from_str_radix(text.trim_start_matches("0x"), 16).expect("a 0x-prefixed hex number")
}

fn read_vectors() -> Vec<Vector> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../filter-core/tests/vectors.csv");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("cannot read the test vectors {}: {error}", path.display()));
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(',').collect();
            let [seed, key, bucket_count, bits, hash, fingerprint, primary, alternate] = fields[..]
            else {
                panic!("a vectors.csv row has 8 columns: {line}");
            };
            let (address, prefix_len) = key.strip_prefix("net:")?.split_once('/')?;
            Some(Vector {
                seed: parse_hex(seed),
                address: address.parse().expect("an IP address"),
                prefix_len: prefix_len.parse().expect("a prefix length"),
                bucket_count: bucket_count.parse().expect("a bucket count"),
                fingerprint_bits: bits.parse().expect("fingerprint bits"),
                hash: parse_hex(hash),
                fingerprint: fingerprint.parse().expect("a fingerprint"),
                primary: primary.parse().expect("a bucket"),
                alternate: alternate.parse().expect("a bucket"),
            })
        })
        .collect()
}

/// A profile of `seed`, `bucket_count` buckets and `prefix_len` first for
/// the family of `address`.
fn profile(seed: u64, bucket_count: usize, address: IpAddr, prefix_len: u8) -> FilterProfile {
    let (ipv4, ipv6) = match address {
        IpAddr::V4(_) => (vec![prefix_len], vec![]),
        IpAddr::V6(_) => (vec![], vec![prefix_len]),
    };
    let lengths = ActiveLengths::new(&ipv4, &ipv6).expect("valid lengths");
    filter_profile(seed, bucket_count, &lengths).expect("a valid profile")
}

#[test]
fn program_reproduces_filter_core_test_vectors() {
    let vectors = read_vectors();
    assert!(
        vectors.len() >= 100,
        "expected the net: rows of vectors.csv, found {}",
        vectors.len()
    );
    let locator = Locator::load();
    for vector in &vectors {
        let profile = profile(
            vector.seed,
            vector.bucket_count,
            vector.address,
            vector.prefix_len,
        );
        let report = locator
            .locate(&udp_frame(vector.address, Tags::One), &profile)
            .expect("a report for an IP frame");
        let width = match vector.fingerprint_bits {
            8 => 0,
            16 => 1,
            32 => 2,
            bits => panic!("unexpected fingerprint width {bits}"),
        };
        let what = format!(
            "{}/{} seed {:#x} buckets {} bits {}",
            vector.address,
            vector.prefix_len,
            vector.seed,
            vector.bucket_count,
            vector.fingerprint_bits
        );
        assert_eq!(report.hash, vector.hash, "hash of {what}");
        assert_eq!(
            report.fingerprint[width], vector.fingerprint,
            "fingerprint of {what}"
        );
        assert_eq!(
            report.primary[width], vector.primary,
            "primary bucket of {what}"
        );
        assert_eq!(
            report.alternate[width], vector.alternate,
            "alternate bucket of {what}"
        );
    }
}

fn random_address(rng: &mut StdRng) -> IpAddr {
    if rng.random_bool(0.5) {
        IpAddr::V4(Ipv4Addr::from(rng.random::<u32>()))
    } else {
        IpAddr::V6(Ipv6Addr::from(rng.random::<u128>()))
    }
}

fn host_location<F: Fingerprint>(hash: KeyHash, bucket_count: usize) -> (u32, u32, u32) {
    let location = locate::<F>(hash, bucket_count - 1);
    (
        location.fingerprint.to_u32(),
        location.primary as u32,
        location.alternate as u32,
    )
}

#[test]
fn program_locates_random_keys_like_filter_core() {
    let mut rng = StdRng::seed_from_u64(3);
    let locator = Locator::load();
    for _ in 0..300 {
        let address = random_address(&mut rng);
        let max_len = match address {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        let prefix_len = rng.random_range(0..=max_len);
        let seed = rng.random::<u64>();
        let bucket_count = 1usize << rng.random_range(0..=24);
        let profile = profile(seed, bucket_count, address, prefix_len);
        // Behind any stack of tags the parser follows, of either protocol.
        let tags = Tags::Priority {
            count: rng.random_range(0..=MAX_VLAN_TAGS),
            outer: TAG_PROTOCOLS[rng.random_range(0..TAG_PROTOCOLS.len())],
        };
        let report = locator
            .locate(&udp_frame(address, tags), &profile)
            .expect("a report for an IP frame");
        let hash = net_key(address, prefix_len).hash(seed);
        assert_eq!(report.hash, hash.0, "hash of {address}/{prefix_len}");
        let host = [
            host_location::<u8>(hash, bucket_count),
            host_location::<u16>(hash, bucket_count),
            host_location::<u32>(hash, bucket_count),
        ];
        for (width, (fingerprint, primary, alternate)) in host.into_iter().enumerate() {
            assert_eq!(
                (
                    report.fingerprint[width],
                    report.primary[width],
                    report.alternate[width]
                ),
                (fingerprint, primary, alternate),
                "location of {address}/{prefix_len} at width index {width}"
            );
        }
    }
}

/// Distinct keys of many lengths, a tenth of them IPv6.
fn random_keys(rng: &mut StdRng, count: usize) -> Vec<NetKey> {
    const IPV4_LENGTHS: [u8; 4] = [32, 24, 20, 16];
    const IPV6_LENGTHS: [u8; 3] = [128, 64, 48];
    let mut seen = HashSet::new();
    let mut keys = Vec::with_capacity(count);
    while keys.len() < count {
        let key = if keys.len() % 10 == 0 {
            let len = IPV6_LENGTHS[rng.random_range(0..IPV6_LENGTHS.len())];
            net_key(IpAddr::V6(Ipv6Addr::from(rng.random::<u128>())), len)
        } else {
            let len = IPV4_LENGTHS[rng.random_range(0..IPV4_LENGTHS.len())];
            net_key(IpAddr::V4(Ipv4Addr::from(rng.random::<u32>())), len)
        };
        if seen.insert(key) {
            keys.push(key);
        }
    }
    keys
}

fn family_of(address: IpAddr) -> AddressFamily {
    match address {
        IpAddr::V4(_) => AddressFamily::Ipv4,
        IpAddr::V6(_) => AddressFamily::Ipv6,
    }
}

/// Whether filter-core finds `address` on the live table at one of the
/// active lengths whose bits are set in `marked_lengths`, the prefilter
/// byte of its block, or at any active length when the live profile skips
/// the family's prefilter.
fn core_says_listed(
    blocklist: &FilterProgram,
    filter: &CuckooFilter<u16, 4, FilterTable<u16, 4>>,
    marked_lengths: u8,
    address: IpAddr,
) -> bool {
    let profile = blocklist.maps().live_profile();
    let family = family_of(address);
    let marked_lengths = if profile.prefilter_skipped & skip_bit(family) != 0 {
        u8::MAX
    } else {
        marked_lengths
    };
    (0..).zip(profile.lengths(family)).any(|(position, &len)| {
        marked_lengths & 1 << position != 0
            && filter.contains_hash(net_key(address, len).hash(profile.seed))
    })
}

fn xdp_says_listed(blocklist: &FilterProgram, address: IpAddr) -> bool {
    let run = blocklist
        .test_run(&udp_frame(address, Tags::None), 1)
        .expect("BPF_PROG_TEST_RUN");
    match run.action {
        XdpAction::Drop => true,
        XdpAction::Pass => false,
        other => panic!("unexpected verdict {other:?} for {address}"),
    }
}

/// An address inside `key`'s prefix (random host bits).
fn address_in(rng: &mut StdRng, key: &NetKey) -> IpAddr {
    let [_, high, low] = *key.words();
    let len = u32::from(key.prefix_len());
    match key.family() {
        filter_core::AddressFamily::Ipv4 => {
            let host_mask = u32::MAX.checked_shr(len).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(
                high as u32 | (rng.random::<u32>() & host_mask),
            ))
        }
        filter_core::AddressFamily::Ipv6 => {
            let network = u128::from(high) << 64 | u128::from(low);
            let host_mask = u128::MAX.checked_shr(len).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(network | (rng.random::<u128>() & host_mask)))
        }
    }
}

/// The entries of `keys` as networks.
fn nets_of(keys: &[NetKey]) -> Vec<IpNet> {
    keys.iter()
        .map(|key| {
            let [_, high, low] = *key.words();
            let address = match key.family() {
                filter_core::AddressFamily::Ipv4 => IpAddr::V4(Ipv4Addr::from(high as u32)),
                filter_core::AddressFamily::Ipv6 => {
                    IpAddr::V6(Ipv6Addr::from(u128::from(high) << 64 | u128::from(low)))
                }
            };
            IpNet::new(address, key.prefix_len()).expect("a valid prefix length")
        })
        .collect()
}

#[test]
fn verdicts_agree_with_filter_core_on_100000_addresses() {
    let mut rng = StdRng::seed_from_u64(7);
    let keys = random_keys(&mut rng, 12_000);
    let plan = KeyPlan::build(nets_of(&keys), PlanLimits::default()).expect("a plan");
    let mut blocklist = blocklist_with(&[]);
    blocklist
        .live()
        .install(&plan)
        .expect("installing the plan");
    assert_eq!(
        blocklist.maps().live_prefilter(),
        plan.prefilter(),
        "the live prefilter is the plan's"
    );
    let table = blocklist
        .maps_mut()
        .live_table::<u16, 4>()
        .expect("the live table");
    let filter = CuckooFilter::<u16, 4, _>::with_storage(table, SEED).expect("a valid table");
    assert_eq!(
        filter.len(),
        plan.key_count(),
        "every key is in the live table"
    );
    let (mut listed, mut false_positives, mut unmarked) = (0, 0, 0);
    for round in 0..100_000 {
        // Half the addresses inside listed prefixes, half anywhere.
        let address = if round % 2 == 0 {
            let key = keys[rng.random_range(0..keys.len())];
            address_in(&mut rng, &key)
        } else {
            random_address(&mut rng)
        };
        let marked = plan.prefilter_mask(address);
        let expected = core_says_listed(&blocklist, &filter, marked, address);
        assert_eq!(
            xdp_says_listed(&blocklist, address),
            expected,
            "verdict for {address} (lengths marked in its block: {marked:#010b})"
        );
        let covered = !plan.covering_entries(address).is_empty();
        assert!(
            expected || !covered,
            "{address} is inside a listed entry and must be listed"
        );
        unmarked += usize::from(marked == 0);
        if expected {
            listed += 1;
            false_positives += usize::from(!covered);
        }
    }
    assert!(
        listed >= 50_000,
        "every address inside a listed prefix is listed ({listed})"
    );
    assert!(
        false_positives < 2_000,
        "unlisted addresses are rarely listed ({false_positives})"
    );
    assert!(
        unmarked > 10_000,
        "many random addresses stop at the prefilter ({unmarked})"
    );
    assert_eq!(
        blocklist.maps().live_profile().prefilter_skipped,
        0,
        "a prefilter that stops most addresses is read"
    );
}

#[test]
fn verdicts_agree_when_the_prefilter_marks_every_block_and_is_skipped() {
    // 200,000 random addresses leave about 5% of the IPv4 /16 blocks
    // unmarked: the prefilter would save 0.05 probes a packet, so the
    // loader tells the program not to read it.
    let mut rng = StdRng::seed_from_u64(13);
    let keys: Vec<NetKey> = (0..200_000)
        .map(|_| net_key(IpAddr::V4(Ipv4Addr::from(rng.random::<u32>())), 32))
        .collect();
    let plan = KeyPlan::build(nets_of(&keys), PlanLimits::default()).expect("a plan");
    let options = LoadOptions {
        seed: SEED,
        bucket_count: 1 << 16,
        ..LoadOptions::for_capacity(FilterShape::Fingerprint16, 1000).expect("a small filter")
    };
    let mut blocklist = FilterProgram::load(&options).expect("loading the blocklist program");
    blocklist
        .live()
        .install(&plan)
        .expect("installing the plan");
    let profile = blocklist.maps().live_profile();
    assert_ne!(
        profile.prefilter_skipped & skip_bit(AddressFamily::Ipv4),
        0,
        "the IPv4 prefilter saves {:.3} probes a packet and is skipped",
        plan.prefilter()
            .saved_probes(AddressFamily::Ipv4, profile.ipv4_length_count)
    );
    let table = blocklist
        .maps_mut()
        .live_table::<u16, 4>()
        .expect("the live table");
    let filter = CuckooFilter::<u16, 4, _>::with_storage(table, SEED).expect("a valid table");
    for round in 0..20_000 {
        let address = if round % 2 == 0 {
            IpAddr::V4(Ipv4Addr::from(
                keys[rng.random_range(0..keys.len())].words()[1] as u32,
            ))
        } else {
            IpAddr::V4(Ipv4Addr::from(rng.random::<u32>()))
        };
        let expected = core_says_listed(&blocklist, &filter, plan.prefilter_mask(address), address);
        assert!(expected || round % 2 == 1, "{address} is listed");
        assert_eq!(
            xdp_says_listed(&blocklist, address),
            expected,
            "verdict for {address}"
        );
    }
}

#[test]
fn live_inserts_and_removes_keep_listed_keys_listed() {
    let mut rng = StdRng::seed_from_u64(11);
    let keys = random_keys(&mut rng, 14_000);
    let (initial, added) = keys.split_at(10_000);
    let mut blocklist = blocklist_with(&nets_of(initial));
    let table = blocklist
        .maps_mut()
        .live_table::<u16, 4>()
        .expect("the live table");
    let mut filter = CuckooFilter::<u16, 4, _>::with_storage(table, SEED).expect("a valid table");
    let load = filter.load_factor();
    assert!(
        load > 0.5,
        "the table is loaded enough to relocate ({load})"
    );
    // Single-bucket updates on the live memory, through filter-core, each
    // key's prefilter bits set before it goes in.
    for key in added {
        blocklist.maps().mark_keys(std::slice::from_ref(key));
        filter
            .insert_hash(key.hash(SEED))
            .expect("room in the filter");
    }
    for key in &initial[..2_000] {
        assert!(
            filter.remove_hash(key.hash(SEED)),
            "removing an inserted key"
        );
    }
    for key in initial[2_000..].iter().chain(added) {
        let address = address_in(&mut rng, key);
        assert!(
            xdp_says_listed(&blocklist, address),
            "{address} inside a listed key passes"
        );
    }
}

#[test]
fn live_updates_of_single_keys_keep_every_key_in_a_nearly_full_table() {
    // 2^16 buckets (512 KiB): an update of up to four keys maps only the
    // pages of their candidate buckets; at this load many of the new keys
    // find both full and need relocations, so the whole table.
    const BUCKET_COUNT: usize = 1 << 16;
    let mut rng = StdRng::seed_from_u64(17);
    // Host keys only, so that no entry covers another and each is one key.
    let mut seen = HashSet::new();
    let keys: Vec<NetKey> = std::iter::repeat_with(|| match rng.random_range(0..10) {
        0 => net_key(IpAddr::V6(Ipv6Addr::from(rng.random::<u128>())), 128),
        _ => net_key(IpAddr::V4(Ipv4Addr::from(rng.random::<u32>())), 32),
    })
    .filter(|key| seen.insert(*key))
    .take(243_000)
    .collect();
    let (initial, added) = keys.split_at(240_000);
    let (single, in_threes) = added.split_at(1_500);
    let options = LoadOptions {
        seed: SEED,
        bucket_count: BUCKET_COUNT,
        ..LoadOptions::for_capacity(FilterShape::Fingerprint16, 1000).expect("a small filter")
    };
    let mut blocklist = FilterProgram::load(&options).expect("loading the blocklist program");
    let plan = KeyPlan::build(nets_of(initial), PlanLimits::default()).expect("a plan");
    let live = blocklist.live();
    live.install(&plan).expect("filling the filter");
    let load = live.summary().expect("a summary").load_factor;
    assert!(load > 0.9, "the table is nearly full ({load})");

    for key in single {
        live.insert(std::slice::from_ref(key))
            .expect("room for one key");
    }
    for keys in in_threes.chunks(3) {
        live.insert(keys).expect("room for three keys");
    }
    let (removed, kept) = initial.split_at(2_000);
    for key in removed {
        live.remove(std::slice::from_ref(key))
            .expect("removing one key");
    }

    let summary = live.summary().expect("a summary");
    assert_eq!(
        summary.fingerprints,
        kept.len() + added.len(),
        "one fingerprint per listed key, none lost or doubled"
    );
    let listed: Vec<NetKey> = kept.iter().chain(added).copied().collect();
    let missing = live
        .contains(&listed)
        .expect("looking the keys up")
        .iter()
        .filter(|&&contained| !contained)
        .count();
    assert_eq!(missing, 0, "listed keys the live filter lacks");
    for key in added.iter().step_by(10).chain(kept.iter().step_by(500)) {
        let address = address_in(&mut rng, key);
        assert!(
            xdp_says_listed(&blocklist, address),
            "{address} inside a listed key passes"
        );
    }
}
