//! Parses every real blocklist in the shared data directory: formats are
//! detected, every entry line becomes an entry, comments are kept, and the
//! prefix plan of the largest list fits the data plane's probe budget.

use std::collections::HashSet;
use std::fs;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

use cfctl::netlist::{parse_file, ListFormat, ParseOptions, ParsedList};
use cfctl::plan::{KeyPlan, PlanLimits};
use ipnet::IpNet;

fn blocklists_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/blocklists")
}

fn parse(name: &str) -> ParsedList {
    let list = parse_file(&blocklists_dir().join(name), ParseOptions::default())
        .unwrap_or_else(|error| panic!("{error}"));
    assert!(list.skipped.is_empty());
    list
}

/// Lines that are neither blank nor comments, counted independently of the
/// parser.
fn entry_lines(name: &str, comment_marker: char) -> usize {
    fs::read_to_string(blocklists_dir().join(name))
        .unwrap()
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with(comment_marker))
        .count()
}

#[test]
fn every_shared_blocklist_parses_completely() {
    let mut names: Vec<String> = fs::read_dir(blocklists_dir())
        .expect("the shared blocklists directory")
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert!(names.len() >= 5, "{names:?}");
    for name in &names {
        let list = parse(name);
        let marker = if list.format == ListFormat::Spamhaus {
            ';'
        } else {
            '#'
        };
        assert_eq!(list.entries.len(), entry_lines(name, marker), "{name}");
        assert!(list.source.ends_with(name.as_str()));
        for entry in &list.entries {
            assert_eq!(entry.net, entry.net.trunc(), "{name}:{}", entry.line);
        }
    }
}

#[test]
fn firehol_lists_are_netsets() {
    let level1 = parse("firehol_level1.netset");
    assert_eq!(level1.format, ListFormat::Netset);
    // The header says "2744 subnets".
    assert_eq!(level1.entries.len(), 2744);
    assert_eq!(level1.entries[0].net.to_string(), "0.0.0.0/8");
    assert_eq!(level1.entries[0].line, 34);
    assert!(level1.entries.iter().all(|entry| entry.comment.is_none()));

    let dshield = parse("dshield_top_1000.ipset");
    assert_eq!(dshield.format, ListFormat::Netset);
    assert_eq!(dshield.entries.len(), 1000);
    assert!(dshield
        .entries
        .iter()
        .all(|entry| entry.net.prefix_len() == 32));

    // A list whose feed was empty that day: only a header.
    let feodo = parse("feodo_badips.ipset");
    assert!(feodo.entries.is_empty());

    let drop = parse("spamhaus_drop.netset");
    assert_eq!(drop.format, ListFormat::Netset);
    let drop_nets: HashSet<_> = drop.entries.iter().map(|entry| entry.net).collect();
    let level1_nets: HashSet<_> = level1.entries.iter().map(|entry| entry.net).collect();
    assert!(drop_nets.len() > 900);
    // firehol_level1 includes spamhaus_drop (of the same day or so).
    assert!(drop_nets.intersection(&level1_nets).count() > drop_nets.len() * 9 / 10);
}

#[test]
fn spamhaus_ipv6_entries_keep_their_sbl_ids() {
    let list = parse("spamhaus_dropv6.txt");
    assert_eq!(list.format, ListFormat::Spamhaus);
    assert_eq!(list.entries.len(), 56);
    let first = &list.entries[0];
    assert_eq!(first.net.to_string(), "2803:8700::/32");
    assert_eq!(first.comment.as_deref(), Some("SBL389795"));
    assert_eq!(first.line, 5);
    for entry in &list.entries {
        assert!(entry.net.addr().is_ipv6());
        assert!(entry
            .comment
            .as_deref()
            .is_some_and(|id| id.starts_with("SBL")));
    }
}

#[test]
fn firehol_level1_plans_within_the_default_budget() {
    let level1 = parse("firehol_level1.netset");
    let limits = PlanLimits::default();
    let plan = KeyPlan::build(level1.entries.iter().map(|entry| entry.net), limits).unwrap();
    let lengths = plan.lengths().ipv4();
    assert!(lengths.len() <= limits.ipv4_lengths, "{lengths:?}");
    assert!(plan.lengths().ipv6().is_empty());
    assert_eq!(lengths.first(), Some(&32));
    println!(
        "firehol_level1: {} entries, active IPv4 lengths {:?}, {} expanded keys",
        plan.entry_count(),
        lengths,
        plan.key_count()
    );
    assert_eq!(plan.entry_count(), 2744);
    assert!(plan.key_count() < 200_000, "{} keys", plan.key_count());

    // Every entry's first and last address, and the addresses just outside
    // it, are covered by keys exactly when some entry covers them.
    for entry in &level1.entries {
        let IpNet::V4(net) = entry.net else {
            panic!("firehol_level1 is IPv4");
        };
        let (first, last) = (u32::from(net.network()), u32::from(net.broadcast()));
        for address in [first.wrapping_sub(1), first, last, last.wrapping_add(1)] {
            let address = IpAddr::from(Ipv4Addr::from(address));
            let covered = !plan.covering_entries(address).is_empty();
            let keyed = plan
                .probe_keys(address)
                .iter()
                .any(|key| plan.key_references(key) > 0);
            assert_eq!(covered, keyed, "{address}");
        }
    }
}
