//! The blocklist program on frames given to BPF_PROG_TEST_RUN: verdict and
//! counters for hits and misses, VLAN tags and stacks of them, prefix lengths, allowlist,
//! modes, policies, non-IP, every truncation, and the block prefilter
//! (unmarked blocks miss, only the lengths marked in a block are probed,
//! short keys mark every block they span, the bytes of IPv6 blocks, live bit
//! updates from the plan). Needs root.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use cfctl::plan::{ActiveLengths, KeyDiff, KeyPlan, PlanLimits};
use cfctl::xdp::maps::filter_profile;
use cfctl::xdp::test_run::XdpAction::{Drop, Pass};
use cfctl::xdp::{FilterProgram, FilterTable, LoadOptions, XdpError};
use cfctl::{Family, FilterShape, MalformedAction, MatchAddress, Mode, Outcome, Policy};
use cfxdp::packet::MAX_VLAN_TAGS;
use cfxdp::prefilter::{ipv4_block, ipv6_block, ipv6_block_of_byte, Prefilter, PrefilterBit};
use common::{
    blocklist_with, expect_verdict, family_of, net, require_root, udp_frame, Tags, DESTINATION_MAC,
    SOURCE_MAC, TAG_PROTOCOLS, TARGET_V4,
};
use etherparse::{EtherType, Ethernet2Header};
use filter_core::{AddressFamily, CuckooFilter, NetKey};
use ipnet::IpNet;

/// The plan of `entries` with the default limits.
fn plan_of(entries: &[IpNet]) -> KeyPlan {
    KeyPlan::build(entries.iter().copied(), PlanLimits::default()).expect("a plan")
}

fn v4(text: &str) -> IpAddr {
    IpAddr::V4(text.parse::<Ipv4Addr>().expect("an IPv4 address"))
}

fn v6(text: &str) -> IpAddr {
    IpAddr::V6(text.parse::<Ipv6Addr>().expect("an IPv6 address"))
}

/// Checks one UDP frame from `source` with `tags`.
fn check(blocklist: &FilterProgram, source: IpAddr, tags: Tags, listed: bool) {
    let (action, outcome) = if listed {
        (Drop, Outcome::Dropped)
    } else {
        (Pass, Outcome::Passed)
    };
    expect_verdict(
        blocklist,
        &udp_frame(source, tags),
        action,
        outcome,
        family_of(source),
    );
}

#[test]
fn hits_and_misses_ipv4_and_ipv6() {
    let blocklist = blocklist_with(&[net(v4("198.18.0.10"), 32), net(v6("2001:db8::10"), 128)]);
    check(&blocklist, v4("198.18.0.10"), Tags::None, true);
    check(&blocklist, v4("198.18.0.11"), Tags::None, false);
    check(&blocklist, v6("2001:db8::10"), Tags::None, true);
    check(&blocklist, v6("2001:db8::11"), Tags::None, false);
}

#[test]
fn ipv4_and_ipv6_keys_do_not_collide() {
    // 198.18.0.10 is 0xc612000a; the IPv6 address whose first 32 bits are
    // the same, at prefix /32, must not match the IPv4 key, and vice versa.
    let blocklist = blocklist_with(&[net(v4("198.18.0.10"), 32)]);
    check(&blocklist, v6("c612:a::"), Tags::None, false);
    let blocklist = blocklist_with(&[net(v6("c612:a::"), 32)]);
    check(&blocklist, v4("198.18.0.10"), Tags::None, false);
}

#[test]
fn one_and_two_vlan_tags() {
    let blocklist = blocklist_with(&[net(v4("198.18.0.10"), 32), net(v6("2001:db8::10"), 128)]);
    for tags in [Tags::One, Tags::Two] {
        check(&blocklist, v4("198.18.0.10"), tags, true);
        check(&blocklist, v4("198.18.0.11"), tags, false);
        check(&blocklist, v6("2001:db8::10"), tags, true);
        check(&blocklist, v6("2001:db8::11"), tags, false);
    }
}

#[test]
fn hits_at_several_prefix_lengths() {
    let blocklist = blocklist_with(&[
        net(v4("198.18.0.0"), 16),
        net(v4("198.19.128.0"), 24),
        net(v4("198.19.0.7"), 32),
        net(v6("2001:db8:1::"), 48),
        net(v6("2001:db8:2:3::"), 64),
        net(v6("2001:db8:9::9"), 128),
    ]);
    for listed in [
        "198.18.0.1",
        "198.18.255.254",
        "198.19.128.77",
        "198.19.0.7",
    ] {
        check(&blocklist, v4(listed), Tags::None, true);
    }
    for unlisted in ["198.19.0.8", "198.19.129.1", "198.19.127.255"] {
        check(&blocklist, v4(unlisted), Tags::None, false);
    }
    for listed in [
        "2001:db8:1::1",
        "2001:db8:1:ffff::5",
        "2001:db8:2:3:4::",
        "2001:db8:9::9",
    ] {
        check(&blocklist, v6(listed), Tags::None, true);
    }
    for unlisted in ["2001:db8:2::1", "2001:db8:9::8", "2001:db8:2:4::1"] {
        check(&blocklist, v6(unlisted), Tags::None, false);
    }
}

#[test]
fn allowlist_wins_over_the_blocklist() {
    let mut blocklist = blocklist_with(&[net(v4("198.18.0.0"), 16), net(v6("2001:db8::"), 32)]);
    blocklist
        .maps_mut()
        .allow(v4("198.18.7.0"), 24)
        .expect("allowlisting");
    blocklist
        .maps_mut()
        .allow(v6("2001:db8:7::"), 48)
        .expect("allowlisting");
    for (source, family) in [
        (v4("198.18.7.9"), Family::Ipv4),
        (v6("2001:db8:7::9"), Family::Ipv6),
    ] {
        expect_verdict(
            &blocklist,
            &udp_frame(source, Tags::None),
            Pass,
            Outcome::Allowlisted,
            family,
        );
    }
    check(&blocklist, v4("198.18.8.1"), Tags::None, true);
    check(&blocklist, v6("2001:db8:8::1"), Tags::None, true);
    blocklist
        .maps_mut()
        .disallow(v4("198.18.7.0"), 24)
        .expect("removing from the allowlist");
    check(&blocklist, v4("198.18.7.9"), Tags::None, true);
    // The config counts each family's entries; the program skips the
    // lookup of an empty allowlist.
    let config = blocklist.maps().config();
    assert_eq!(
        (config.allowlist_ipv4_entries, config.allowlist_ipv6_entries),
        (0, 1)
    );
    blocklist
        .maps_mut()
        .set_allowlist(&[(v4("198.18.7.0"), 24), (v4("198.18.9.0"), 24)])
        .expect("replacing the allowlist");
    let config = blocklist.maps().config();
    assert_eq!(
        (config.allowlist_ipv4_entries, config.allowlist_ipv6_entries),
        (2, 0)
    );
    expect_verdict(
        &blocklist,
        &udp_frame(v4("198.18.9.1"), Tags::None),
        Pass,
        Outcome::Allowlisted,
        Family::Ipv4,
    );
    check(&blocklist, v6("2001:db8:7::9"), Tags::None, true);
}

#[test]
fn monitor_mode_passes_and_counts_would_drop() {
    let blocklist = blocklist_with(&[net(v4("198.18.0.10"), 32), net(v6("2001:db8::10"), 128)]);
    blocklist.maps().set_mode(Mode::Monitor);
    for source in [v4("198.18.0.10"), v6("2001:db8::10")] {
        expect_verdict(
            &blocklist,
            &udp_frame(source, Tags::None),
            Pass,
            Outcome::WouldDrop,
            family_of(source),
        );
    }
    check(&blocklist, v4("198.18.0.11"), Tags::None, false);
    blocklist.maps().set_mode(Mode::Enforce);
    check(&blocklist, v4("198.18.0.10"), Tags::None, true);
}

#[test]
fn allow_policy_drops_everything_not_allowlisted() {
    let mut blocklist = blocklist_with(&[]);
    blocklist
        .maps_mut()
        .allow(v4("198.18.7.0"), 24)
        .expect("allowlisting");
    blocklist.maps().set_policy(Policy::Allow);
    expect_verdict(
        &blocklist,
        &udp_frame(v4("198.18.7.1"), Tags::None),
        Pass,
        Outcome::Allowlisted,
        Family::Ipv4,
    );
    expect_verdict(
        &blocklist,
        &udp_frame(v4("198.19.0.1"), Tags::None),
        Drop,
        Outcome::Dropped,
        Family::Ipv4,
    );
    expect_verdict(
        &blocklist,
        &udp_frame(v6("2001:db8::1"), Tags::One),
        Drop,
        Outcome::Dropped,
        Family::Ipv6,
    );
    expect_verdict(
        &blocklist,
        &arp_frame(),
        Pass,
        Outcome::NonIp,
        Family::Other,
    );
    blocklist.maps().set_mode(Mode::Monitor);
    expect_verdict(
        &blocklist,
        &udp_frame(v4("198.19.0.1"), Tags::None),
        Pass,
        Outcome::WouldDrop,
        Family::Ipv4,
    );
    blocklist.maps().set_policy(Policy::Deny);
    check(&blocklist, v4("198.19.0.1"), Tags::None, false);
}

fn arp_frame() -> Vec<u8> {
    let mut frame = Ethernet2Header {
        source: SOURCE_MAC,
        destination: DESTINATION_MAC,
        ether_type: EtherType::ARP,
    }
    .to_bytes()
    .to_vec();
    frame.extend_from_slice(&[0; 28]);
    frame
}

#[test]
fn non_ip_frames_pass() {
    let blocklist = blocklist_with(&[net(v4("198.18.0.10"), 32)]);
    expect_verdict(
        &blocklist,
        &arp_frame(),
        Pass,
        Outcome::NonIp,
        Family::Other,
    );
}

/// Stacks of priority tags (VLAN id 0), which the kernel strips one after
/// another and delivers to IP: every stack the parser follows, of either
/// outer tag protocol, hides no address, and one tag more is malformed
/// (dropped or passed by the malformed setting), never passed as not IP.
#[test]
fn stacked_priority_tags_are_followed_and_one_too_many_is_malformed() {
    let blocklist = blocklist_with(&[net(v4("198.18.0.10"), 32), net(v6("2001:db8::10"), 128)]);
    for outer in TAG_PROTOCOLS {
        for count in 0..=MAX_VLAN_TAGS {
            let tags = Tags::Priority { count, outer };
            check(&blocklist, v4("198.18.0.10"), tags, true);
            check(&blocklist, v4("198.18.0.11"), tags, false);
            check(&blocklist, v6("2001:db8::10"), tags, true);
            check(&blocklist, v6("2001:db8::11"), tags, false);
        }
        let too_many = Tags::Priority {
            count: MAX_VLAN_TAGS + 1,
            outer,
        };
        for (action, verdict) in [(MalformedAction::Drop, Drop), (MalformedAction::Pass, Pass)] {
            blocklist.maps().set_malformed_action(action);
            for source in [v4("198.18.0.11"), v6("2001:db8::10")] {
                expect_verdict(
                    &blocklist,
                    &udp_frame(source, too_many),
                    verdict,
                    Outcome::Malformed,
                    Family::Other,
                );
            }
        }
    }
}

#[test]
fn bad_ip_headers_are_malformed() {
    let blocklist = blocklist_with(&[net(v4("198.18.0.10"), 32)]);
    let frame = udp_frame(v4("198.18.0.10"), Tags::None);
    for version_ihl in [0x44, 0x55, 0x65, 0x4f] {
        // IHL 4 is too short, versions 5 and 6 are wrong, IHL 15 (60 bytes)
        // does not fit the 48 bytes after the Ethernet header.
        let mut bad = frame.clone();
        bad[14] = version_ihl;
        expect_verdict(&blocklist, &bad, Pass, Outcome::Malformed, Family::Ipv4);
    }
    let mut bad = udp_frame(v6("2001:db8::10"), Tags::None);
    bad[14] = 0x45;
    expect_verdict(&blocklist, &bad, Pass, Outcome::Malformed, Family::Ipv6);
}

/// Every length from the Ethernet header (the kernel's minimum for a test
/// run) to the whole frame: malformed until the IP header is complete,
/// listed from then on.
#[test]
fn every_truncation_of_ipv4_ipv6_and_vlan_frames() {
    let blocklist = blocklist_with(&[net(v4("198.18.0.10"), 32), net(v6("2001:db8::10"), 128)]);
    for malformed_action in [MalformedAction::Pass, MalformedAction::Drop] {
        blocklist.maps().set_malformed_action(malformed_action);
        let malformed_verdict = match malformed_action {
            MalformedAction::Pass => Pass,
            MalformedAction::Drop => Drop,
        };
        for (source, ip_header_len) in [(v4("198.18.0.10"), 20), (v6("2001:db8::10"), 40)] {
            for (tags, link_len) in [(Tags::None, 14), (Tags::One, 18), (Tags::Two, 22)] {
                let frame = udp_frame(source, tags);
                for len in 14..=frame.len() {
                    let truncated = &frame[..len];
                    if len < link_len {
                        expect_verdict(
                            &blocklist,
                            truncated,
                            malformed_verdict,
                            Outcome::Malformed,
                            Family::Other,
                        );
                    } else if len < link_len + ip_header_len {
                        expect_verdict(
                            &blocklist,
                            truncated,
                            malformed_verdict,
                            Outcome::Malformed,
                            family_of(source),
                        );
                    } else {
                        expect_verdict(
                            &blocklist,
                            truncated,
                            Drop,
                            Outcome::Dropped,
                            family_of(source),
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn destination_match_mode() {
    require_root();
    let options = LoadOptions {
        match_address: MatchAddress::Destination,
        ..LoadOptions::for_capacity(FilterShape::Fingerprint16, 100).expect("a small filter")
    };
    let mut blocklist = FilterProgram::load(&options).expect("loading the blocklist program");
    blocklist
        .live()
        .install(&plan_of(&[net(IpAddr::V4(TARGET_V4), 32)]))
        .expect("filling the filter");
    // Every test frame goes to TARGET_V4, whatever its source.
    check(&blocklist, v4("198.18.0.77"), Tags::None, true);
    check(&blocklist, v6("2001:db8::77"), Tags::None, false);
}

#[test]
fn every_filter_shape_loads_and_matches() {
    require_root();
    for shape in FilterShape::ALL {
        let options = LoadOptions::for_capacity(shape, 100).expect("a small filter");
        let mut blocklist = FilterProgram::load(&options).expect("loading the blocklist program");
        blocklist
            .live()
            .install(&plan_of(&[net(v4("198.18.3.0"), 24)]))
            .expect("filling the filter");
        check(&blocklist, v4("198.18.3.3"), Tags::One, true);
    }
}

#[test]
fn whole_filter_replacement_swaps_keys_and_keeps_the_table_size() {
    let mut blocklist = blocklist_with(&[net(v4("198.18.0.10"), 32)]);
    check(&blocklist, v4("198.18.0.10"), Tags::None, true);
    blocklist
        .live()
        .install(&plan_of(&[net(v6("2001:db8::20"), 128)]))
        .expect("replacing the filter");
    let maps = blocklist.maps();
    assert_eq!(
        maps.live_profile().seed,
        common::SEED,
        "the seed it was loaded with"
    );
    assert_eq!(maps.live_profile().ipv4_length_count, 0);
    check(&blocklist, v4("198.18.0.10"), Tags::None, false);
    check(&blocklist, v6("2001:db8::20"), Tags::None, true);
    let other_size = FilterTable::<u16, 4>::create(2 * common::BUCKETS).expect("a table");
    let lengths = ActiveLengths::new(&[32], &[]).expect("valid lengths");
    let profile = filter_profile(1, 2 * common::BUCKETS, &lengths).expect("a profile");
    let error = blocklist
        .maps_mut()
        .install(other_size.map(), &profile, &Prefilter::EMPTY)
        .expect_err("a table of another size is refused");
    assert!(
        matches!(error, XdpError::TableSize { expected, found } if expected == common::BUCKETS && found == 2 * common::BUCKETS),
        "unexpected error {error}"
    );
    check(&blocklist, v6("2001:db8::20"), Tags::None, true);
}

/// The bit of the `length_index`-th active IPv4 length in the block of the
/// address `text`.
fn v4_bit(text: &str, length_index: u8) -> PrefilterBit {
    let IpAddr::V4(address) = v4(text) else {
        unreachable!("v4 gives IPv4 addresses")
    };
    PrefilterBit {
        family: AddressFamily::Ipv4,
        block: ipv4_block(u32::from(address)),
        length_index,
    }
}

/// The bit of the `length_index`-th active IPv6 length in the IPv6 /32
/// block whose first 32 bits are `block`.
fn v6_bit(block: u32, length_index: u8) -> PrefilterBit {
    PrefilterBit {
        family: AddressFamily::Ipv6,
        block: ipv6_block(block),
        length_index,
    }
}

/// Makes the live table and profile live again with `prefilter` instead of
/// the prefilter of its keys.
fn reinstall_with(blocklist: &mut FilterProgram, prefilter: &Prefilter) {
    let maps = blocklist.maps_mut();
    let profile = maps.live_profile();
    let table = maps.live_table_map().expect("the live table");
    maps.install(&table, &profile, prefilter)
        .expect("reinstalling the live table");
}

#[test]
fn a_listed_key_in_an_unmarked_block_is_a_counted_miss() {
    let mut blocklist = blocklist_with(&[net(v4("198.18.0.10"), 32), net(v6("2001:db8::10"), 128)]);
    check(&blocklist, v4("198.18.0.10"), Tags::None, true);
    check(&blocklist, v6("2001:db8::10"), Tags::None, true);
    // The keys stay in the table, but no block is marked: the program
    // stops before probing, passes and counts a pass.
    reinstall_with(&mut blocklist, &Prefilter::EMPTY);
    check(&blocklist, v4("198.18.0.10"), Tags::None, false);
    check(&blocklist, v6("2001:db8::10"), Tags::None, false);
    // Marking each key's block makes it a hit again.
    let mut marked = Prefilter::EMPTY;
    marked.set(v4_bit("198.18.0.10", 0));
    marked.set(v6_bit(0x2001_0db8, 0));
    reinstall_with(&mut blocklist, &marked);
    check(&blocklist, v4("198.18.0.10"), Tags::One, true);
    check(&blocklist, v6("2001:db8::10"), Tags::Two, true);
    // Marking a neighbouring block does not.
    let mut neighbours = Prefilter::EMPTY;
    neighbours.set(v4_bit("198.19.0.10", 0));
    neighbours.set(v6_bit(0x2001_0db9, 0));
    reinstall_with(&mut blocklist, &neighbours);
    check(&blocklist, v4("198.18.0.10"), Tags::None, false);
    check(&blocklist, v6("2001:db8::10"), Tags::None, false);
}

#[test]
fn only_the_lengths_marked_in_a_block_are_probed() {
    // Active IPv4 lengths [32, 24]: bit 0 is /32, bit 1 is /24.
    let mut blocklist = blocklist_with(&[net(v4("198.18.0.10"), 32), net(v4("198.18.0.0"), 24)]);
    assert_eq!(blocklist.maps().live_prefilter().ipv4[0xc612], 0b11);
    check(&blocklist, v4("198.18.0.10"), Tags::None, true);
    check(&blocklist, v4("198.18.0.99"), Tags::None, true);
    // Only /32 marked: the /24 key is not probed.
    let mut only_32 = Prefilter::EMPTY;
    only_32.set(v4_bit("198.18.0.0", 0));
    reinstall_with(&mut blocklist, &only_32);
    check(&blocklist, v4("198.18.0.10"), Tags::None, true);
    check(&blocklist, v4("198.18.0.99"), Tags::None, false);
    // Only /24 marked: the /24 key still covers both.
    let mut only_24 = Prefilter::EMPTY;
    only_24.set(v4_bit("198.18.0.0", 1));
    reinstall_with(&mut blocklist, &only_24);
    check(&blocklist, v4("198.18.0.10"), Tags::None, true);
    check(&blocklist, v4("198.18.0.99"), Tags::None, true);
    check(&blocklist, v4("198.18.1.99"), Tags::None, false);
}

#[test]
fn the_filter_marks_exactly_the_blocks_of_its_keys() {
    let mut blocklist = blocklist_with(&[
        net(v4("198.18.0.10"), 32),
        net(v4("198.19.7.0"), 24),
        net(v6("2001:db8:1::"), 48),
    ]);
    let prefilter = blocklist.maps().live_prefilter();
    let mut expected = Prefilter::EMPTY;
    // Active IPv4 lengths [32, 24]; IPv6 [48].
    expected.set(v4_bit("198.18.0.0", 0));
    expected.set(v4_bit("198.19.0.0", 1));
    expected.set(v6_bit(0x2001_0db8, 0));
    assert_eq!(*prefilter, expected);
    check(&blocklist, v4("198.19.7.200"), Tags::None, true);
    // Unmarked blocks miss; the filter keeps answering inside marked ones.
    check(&blocklist, v4("198.20.7.200"), Tags::None, false);
    check(&blocklist, v4("198.19.8.1"), Tags::None, false);
    check(&blocklist, v6("2001:db8:1:2::3"), Tags::None, true);
    check(&blocklist, v6("2001:db8:2::3"), Tags::None, false);
    blocklist
        .live()
        .install(&plan_of(&[]))
        .expect("emptying the filter");
    assert_eq!(*blocklist.maps().live_prefilter(), Prefilter::EMPTY);
}

#[test]
fn keys_shorter_than_a_block_mark_every_block_they_span() {
    let blocklist = blocklist_with(&[net(v4("198.16.0.0"), 14), net(v6("2001:db8::"), 30)]);
    let prefilter = blocklist.maps().live_prefilter();
    for (block, inside) in ["198.16.0.0", "198.17.0.0", "198.18.0.0", "198.19.0.0"]
        .into_iter()
        .zip(["198.16.1.2", "198.17.200.3", "198.18.0.4", "198.19.255.254"])
    {
        assert!(prefilter.contains(v4_bit(block, 0)), "{block}/16 is marked");
        check(&blocklist, v4(inside), Tags::None, true);
    }
    for outside in ["198.15.255.255", "198.20.0.0"] {
        let address: Ipv4Addr = outside.parse().expect("an IPv4 address");
        assert_eq!(
            prefilter.ipv4_mask(u32::from(address)),
            0,
            "{outside}/16 is not marked"
        );
        check(&blocklist, v4(outside), Tags::None, false);
    }
    for (block, inside) in (0x2001_0db8..=0x2001_0dbb).zip([
        "2001:db8::1",
        "2001:db9:ffff::2",
        "2001:dba:1::3",
        "2001:dbb::4",
    ]) {
        assert!(
            prefilter.contains(v6_bit(block, 0)),
            "{block:#x}/32 is marked"
        );
        check(&blocklist, v6(inside), Tags::None, true);
    }
    let v6_marked = prefilter.ipv6.iter().filter(|&&mask| mask != 0).count();
    assert_eq!(
        v6_marked, 4,
        "a /30 marks the bytes of its four blocks, a run of four"
    );
}

#[test]
fn ipv6_keys_of_a_sixteenth_or_shorter_mark_every_bit() {
    let blocklist = blocklist_with(&[net(v6("2001::"), 16)]);
    let prefilter = blocklist.maps().live_prefilter();
    assert!(prefilter.ipv6.iter().all(|&mask| mask == 1));
    assert!(prefilter.ipv4.iter().all(|&mask| mask == 0));
    check(&blocklist, v6("2001:ffff::1"), Tags::None, true);
    check(&blocklist, v6("2002::1"), Tags::None, false);
}

#[test]
fn ipv6_blocks_map_to_bytes_as_userspace_computes() {
    // 2001:db8::/32 and 2001:db9::/32 differ only in their last bit: other
    // bytes. The program looks a key up under its own block's bit,
    // computed as userspace computes it, and a block of another first
    // group can share that byte.
    let (first, second) = (v6_bit(0x2001_0db8, 0), v6_bit(0x2001_0db9, 0));
    assert_ne!(first, second);
    let sharing = ipv6_block_of_byte(0x3fff, second.block);
    assert_eq!(v6_bit(sharing, 0), second);
    let sharing_address = Ipv6Addr::from(u128::from(sharing) << 96 | 1);
    let mut blocklist = blocklist_with(&[
        net(v6("2001:db8::"), 64),
        net(v6("2001:db9::"), 64),
        net(IpAddr::V6(sharing_address), 64),
    ]);
    let mut only_second = Prefilter::EMPTY;
    only_second.set(second);
    reinstall_with(&mut blocklist, &only_second);
    check(&blocklist, v6("2001:db8::1"), Tags::None, false);
    check(&blocklist, v6("2001:db9::1"), Tags::None, true);
    check(&blocklist, IpAddr::V6(sharing_address), Tags::None, true);
}

fn nets(texts: &[&str]) -> Vec<IpNet> {
    texts
        .iter()
        .map(|text| text.parse().expect("a CIDR"))
        .collect()
}

/// Writes a diff of a plan of every listed entry into the live filter in
/// the order that keeps listed keys listed: bits to set, inserts, removes,
/// bits to clear. Swapping the lists writes the reverse diff.
fn write_diff(
    blocklist: &mut FilterProgram,
    set_bits: &[PrefilterBit],
    insert: &[NetKey],
    remove: &[NetKey],
    clear_bits: &[PrefilterBit],
) {
    let maps = blocklist.maps_mut();
    maps.set_prefilter_bits(set_bits);
    let table = maps.live_table::<u16, 4>().expect("the live table");
    let mut filter = CuckooFilter::with_storage(table, common::SEED).expect("a valid table");
    for key in insert {
        filter
            .insert_hash(key.hash(common::SEED))
            .expect("room in the filter");
    }
    for key in remove {
        assert!(
            filter.remove_hash(key.hash(common::SEED)),
            "removing {key:?}"
        );
    }
    maps.clear_prefilter_bits(clear_bits);
}

fn apply(blocklist: &mut FilterProgram, diff: &KeyDiff) {
    write_diff(
        blocklist,
        &diff.set_bits,
        &diff.insert,
        &diff.remove,
        &diff.clear_bits,
    );
}

#[test]
fn live_updates_set_bits_before_keys_and_clear_them_after_the_last_key() {
    let mut blocklist = blocklist_with(&[]);
    let mut plan = KeyPlan::build(
        nets(&["198.18.0.0/24", "2001:db8::/48"]),
        PlanLimits::default(),
    )
    .expect("a plan");
    blocklist.live().install(&plan).expect("installing");
    assert_eq!(blocklist.maps().live_prefilter(), plan.prefilter());
    let block = v4_bit("198.19.0.0", 0);

    // A new block: its bit is in the diff's bits to set.
    let diff = plan
        .update(&nets(&["198.19.5.0/24"]), &[])
        .expect("an incremental add");
    assert_eq!(diff.set_bits, [block]);
    apply(&mut blocklist, &diff);
    assert!(blocklist.maps().live_prefilter().contains(block));
    check(&blocklist, v4("198.19.5.1"), Tags::None, true);

    // A second key in the same block sets nothing.
    let diff = plan
        .update(&nets(&["198.19.6.0/24"]), &[])
        .expect("an incremental add");
    assert!(diff.set_bits.is_empty(), "{diff:?}");
    apply(&mut blocklist, &diff);

    // Deleting one of the two keeps the bit: the other needs it.
    let diff = plan
        .update(&[], &nets(&["198.19.5.0/24"]))
        .expect("an incremental delete");
    assert!(diff.clear_bits.is_empty(), "{diff:?}");
    apply(&mut blocklist, &diff);
    assert!(blocklist.maps().live_prefilter().contains(block));
    check(&blocklist, v4("198.19.6.1"), Tags::None, true);
    check(&blocklist, v4("198.19.5.1"), Tags::None, false);

    // Deleting the last one clears it.
    let diff = plan
        .update(&[], &nets(&["198.19.6.0/24"]))
        .expect("an incremental delete");
    assert_eq!(diff.clear_bits, [block]);
    apply(&mut blocklist, &diff);
    assert!(!blocklist.maps().live_prefilter().contains(block));
    assert_eq!(blocklist.maps().live_prefilter(), plan.prefilter());
    check(&blocklist, v4("198.19.6.1"), Tags::None, false);
    check(&blocklist, v4("198.18.0.1"), Tags::None, true);

    // The reverse of a delete sets the bit again before the key returns.
    let diff = plan
        .update(&[], &nets(&["2001:db8::/48"]))
        .expect("an incremental delete");
    assert_eq!(diff.clear_bits, [v6_bit(0x2001_0db8, 0)]);
    apply(&mut blocklist, &diff);
    check(&blocklist, v6("2001:db8::1"), Tags::None, false);
    write_diff(
        &mut blocklist,
        &diff.clear_bits,
        &diff.remove,
        &diff.insert,
        &diff.set_bits,
    );
    assert!(blocklist
        .maps()
        .live_prefilter()
        .contains(v6_bit(0x2001_0db8, 0)));
    check(&blocklist, v6("2001:db8::1"), Tags::None, true);
}

#[test]
fn control_plane_diffs_set_the_bits_of_new_keys() {
    let mut blocklist = blocklist_with(&[]);
    let mut plan = KeyPlan::build(
        nets(&["198.18.0.0/24", "2001:db9::/48"]),
        PlanLimits::default(),
    )
    .expect("a plan");
    blocklist.live().install(&plan).expect("installing");
    let diff = plan
        .update(&nets(&["198.19.5.0/24", "2001:db8::/48"]), &[])
        .expect("an incremental add");
    let live = blocklist.live();
    live.insert(&diff.insert).expect("inserting");
    live.remove(&diff.remove).expect("removing");
    check(&blocklist, v4("198.19.5.1"), Tags::None, true);
    check(&blocklist, v6("2001:db8::1"), Tags::None, true);
    let live = blocklist.maps().live_prefilter();
    assert!(diff.set_bits.iter().all(|&bit| live.contains(bit)));
}
