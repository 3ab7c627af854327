//! cfctl end to end, on the real kernel: the `cfctl` binary attached to the
//! host end of a veth pair whose peer is in a namespace (addresses in
//! 198.18.0.0/15 and 2001:db8::/32 only). Shared blocklists imported, real
//! packets from listed and unlisted sources, add/del from further cfctl
//! processes without reloading, detach and attach again; a hammer of live
//! updates under continuous BPF_PROG_TEST_RUN probes; cfctl killed in the
//! middle of imports; every bad input refused with one line, changing
//! nothing; a `cfctl batch` answering line by line beside other cfctl
//! commands; and the generated man pages and completions. Needs root,
//! iproute2, ping and setpriv.

mod common;

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use aya::programs::Xdp;
use aya_obj::programs::XdpAttachType;
use cfctl::control::{Change, Control, NoProgress, StoreUse};
use cfctl::netlist::{parse_file, ParseOptions};
use cfctl::store::{ListKind, NewEntry};
use cfctl::xdp::test_run::{run_xdp, XdpAction};
use cfctl::xdp::FilterMaps;
use cfxdp::prefilter::{ipv6_block, ipv6_block_of_byte};
use common::cli::{attached, expect_one_error_line, Cfctl};
use common::netns::{check_traffic, TestNetwork, DATAGRAMS, PINGS};
use common::{udp_frame, Tags};
use ipnet::IpNet;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

fn shared_list(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data/blocklists")
        .join(name)
}

fn path_arg(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

fn entry_count(cfctl: &Cfctl) -> u64 {
    cfctl.json(&["status"])["entries"]
        .as_u64()
        .expect("an entry count")
}

#[test]
fn shared_lists_real_traffic_second_process_updates_and_reattach() {
    let (network, cfctl) = attached(111, "e2e", "20000", "native");
    let host = network.host_link.as_str();

    // The shared lists, imported one after the other, accumulate.
    let mut expected = HashSet::new();
    for name in [
        "spamhaus_drop.netset",
        "spamhaus_dropv6.txt",
        "dshield_top_1000.ipset",
        "feodo_badips.ipset",
    ] {
        let path = shared_list(name);
        let list = parse_file(&path, ParseOptions::default()).expect("a shared list parses");
        expected.extend(list.entries.iter().map(|entry| entry.net));
        cfctl.ok(&["import", path_arg(&path)]);
    }
    assert_eq!(entry_count(&cfctl), expected.len() as u64);
    cfctl.ok(&["verify"]);
    check_traffic(&network, false);

    // Another cfctl process lists the peer's .3 / ::3: no reload.
    let (listed_v4, listed_v6) = (network.v4(3).to_string(), network.v6(3).to_string());
    cfctl.ok(&["add", &listed_v4, &listed_v6, "--comment", "test peer"]);
    check_traffic(&network, true);
    for family in ["ipv4", "ipv6"] {
        assert_eq!(
            cfctl.packets("dropped", family),
            DATAGRAMS + PINGS,
            "{family} packets dropped"
        );
    }
    let check = cfctl.check(&listed_v4);
    assert_eq!(check["verdict"], "listed");
    assert_eq!(check["covering"][0]["sources"][0]["comment"], "test peer");
    assert_eq!(
        cfctl.check(&network.v4(2).to_string())["verdict"],
        "not_listed"
    );

    // A resize swaps in a larger program that counts on from the old
    // program's counts.
    cfctl.ok(&["resize", "--capacity", "40000"]);
    cfctl.ok(&["verify"]);
    for family in ["ipv4", "ipv6"] {
        assert_eq!(
            cfctl.packets("dropped", family),
            DATAGRAMS + PINGS,
            "{family} packets dropped before the resize"
        );
    }
    check_traffic(&network, true);
    for family in ["ipv4", "ipv6"] {
        assert_eq!(
            cfctl.packets("dropped", family),
            2 * (DATAGRAMS + PINGS),
            "{family} packets dropped before and after the resize"
        );
    }

    // And deletes them again, then adds them back.
    cfctl.ok(&["del", &listed_v4, &listed_v6]);
    check_traffic(&network, false);
    cfctl.ok(&["add", &listed_v4, &listed_v6]);

    // Detach keeping the state: the program and maps stay pinned, and the
    // next attach reuses them.
    cfctl.ok(&["detach", host, "--keep-state"]);
    assert!(
        cfctl.pin_dir().join("program").exists(),
        "--keep-state unpinned"
    );
    check_traffic(&network, false);
    assert_eq!(cfctl.json(&["attach", host])["loaded"], false);
    check_traffic(&network, true);

    // Detach: nothing is filtered, nothing stays pinned; attach again (in
    // SKB mode): the same list, filtering again.
    let exported = cfctl.ok(&["export"]);
    cfctl.ok(&["detach", "--all"]);
    assert!(!cfctl.pin_dir().exists(), "detach left pins behind");
    check_traffic(&network, false);
    cfctl.ok(&["attach", host, "--mode", "skb"]);
    assert_eq!(cfctl.ok(&["export"]), exported);
    cfctl.ok(&["verify"]);
    check_traffic(&network, true);
    let status = cfctl.json(&["status"]);
    assert_eq!(status["interfaces"][0]["mode"], "skb");
    assert_eq!(status["entries"], expected.len() as u64 + 2);

    // FireHOL level 1 lists the whole benchmarking range: replacing the
    // list with it blocks the unlisted peer too, until it is allowlisted.
    let unlisted = network.v4(2);
    cfctl.ok(&[
        "import",
        "--replace",
        path_arg(&shared_list("firehol_level1.netset")),
    ]);
    let check = cfctl.check(&unlisted.to_string());
    assert_eq!(check["verdict"], "listed");
    assert_eq!(check["covering"][0]["net"], "198.18.0.0/15");
    assert!(
        !network.ping(unlisted, network.v4(1)),
        "ping from {unlisted}"
    );
    cfctl.ok(&["allow", "add", &unlisted.to_string()]);
    assert!(
        network.ping(unlisted, network.v4(1)),
        "ping from allowlisted {unlisted}"
    );
    cfctl.ok(&["verify"]);
}

/// Addresses inside the hammer's fixed entries, probed all the time.
const FIXED: [&str; 5] = [
    "198.18.112.0/24",
    "198.18.113.7/32",
    "198.19.0.0/16",
    "2001:db8:112::/64",
    "2001:db8:112:1::9/128",
];
const PROBED: [&str; 8] = [
    "198.18.112.1",
    "198.18.112.254",
    "198.18.113.7",
    "198.19.200.9",
    "2001:db8:112::1",
    "2001:db8:112::ffff:1",
    "2001:db8:112:1::9",
    "198.19.0.0",
];

/// A random entry other than the fixed ones: mostly lengths that are
/// active (incremental updates), some that overlap the fixed entries when
/// expanded (shared keys), a few that need a rebuild (/28).
fn random_other(rng: &mut StdRng) -> IpNet {
    let v4 = |rng: &mut StdRng, len: u8| {
        let address = Ipv4Addr::from(0xc612_0000 | rng.random_range(0..0x2_0000u32));
        IpNet::new(IpAddr::V4(address), len)
            .expect("a length")
            .trunc()
    };
    let v6 = |rng: &mut StdRng, len: u8| {
        let low: u128 = rng.random_range(0..1 << 20) << rng.random_range(0..100u32);
        let address = Ipv6Addr::from((0x2001_0db8u128 << 96) | (low & ((1 << 96) - 1)));
        IpNet::new(IpAddr::V6(address), len)
            .expect("a length")
            .trunc()
    };
    match rng.random_range(0..100) {
        0..=49 => v4(rng, 32),
        50..=64 => v4(rng, 24),
        65..=69 => "198.18.112.0/23".parse().expect("a CIDR"),
        70..=72 => "198.18.0.0/15".parse().expect("a CIDR"),
        73 => v4(rng, 28),
        74..=89 => v6(rng, 128),
        90..=96 => v6(rng, 64),
        _ => "2001:db8:112::/63".parse().expect("a CIDR"),
    }
}

#[test]
fn hammer_of_live_updates_never_hides_a_listed_address() {
    const OPERATIONS: u64 = 100_000;
    const BATCH: usize = 100;
    let (_network, cfctl) = attached(112, "hammer", "8000", "native");
    let mut args = vec!["add"];
    args.extend(FIXED);
    cfctl.ok(&args);
    let fixed: HashSet<IpNet> = FIXED
        .iter()
        .map(|net| net.parse().expect("a CIDR"))
        .collect();

    let program = Xdp::from_pin(cfctl.pin_dir().join("program"), XdpAttachType::Interface)
        .expect("opening the pinned program");
    let frames: Vec<Vec<u8>> = PROBED
        .iter()
        .map(|address| udp_frame(address.parse().expect("an address"), Tags::None))
        .collect();
    let (probes, misses) = (AtomicU64::new(0), AtomicU64::new(0));
    let mut control = Control::open(cfctl.pin_dir(), cfctl.state_dir(), StoreUse::Existing)
        .expect("opening the control plane");
    let mut rng = StdRng::seed_from_u64(0x4a33e7);
    let mut present: Vec<IpNet> = Vec::new();
    let mut operations = 0u64;
    let fd = program.fd().expect("the program's fd");
    let probe = || {
        for frame in &frames {
            let run = run_xdp(fd.as_fd(), frame, 1).expect("BPF_PROG_TEST_RUN");
            probes.fetch_add(1, Ordering::Relaxed);
            if run.action != XdpAction::Drop {
                misses.fetch_add(1, Ordering::Relaxed);
            }
        }
    };
    common::while_probing(probe, || {
        while operations < OPERATIONS {
            // Keep about a thousand other entries: add a batch, delete one.
            let mut batch = HashSet::new();
            while batch.len() < BATCH {
                let net = random_other(&mut rng);
                if !fixed.contains(&net) && !present.contains(&net) {
                    batch.insert(net);
                }
            }
            let added: Vec<IpNet> = batch.into_iter().collect();
            let entries: Vec<NewEntry<'_>> = added
                .iter()
                .map(|&net| NewEntry {
                    net,
                    comment: None,
                    expires: None,
                })
                .collect();
            let add = Change::Add {
                source: "hammer",
                entries: &entries,
            };
            control
                .change(ListKind::Blocklist, add, &NoProgress)
                .expect("adding a batch");
            present.extend(added);
            let deleting = if present.len() > 1000 {
                BATCH
            } else {
                BATCH / 2
            };
            let mut deleted = Vec::with_capacity(deleting);
            for _ in 0..deleting {
                deleted.push(present.swap_remove(rng.random_range(0..present.len())));
            }
            let delete = Change::Delete {
                source: Some("hammer"),
                nets: &deleted,
            };
            control
                .change(ListKind::Blocklist, delete, &NoProgress)
                .expect("deleting a batch");
            operations += (BATCH + deleting) as u64;
        }
    });
    let (probes, misses) = (probes.into_inner(), misses.into_inner());
    assert!(probes >= 1000, "only {probes} probes ran");
    assert_eq!(
        misses, 0,
        "{misses} of {probes} probes of listed addresses passed"
    );
    let report = control.verify().expect("verifying");
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(report.entries, present.len() + FIXED.len());
    assert_eq!(
        report.stale_prefilter_bits, 0,
        "the live prefilter is exactly the entries'"
    );
    drop(control);
    cfctl.ok(&["verify"]);
}

#[test]
fn deletes_clear_the_prefilter_bits_no_entry_needs() {
    let (_network, cfctl) = attached(116, "bits", "1000", "native");
    let stale_bits = || {
        cfctl.json(&["verify"])["stale_prefilter_bits"]
            .as_u64()
            .expect("a count")
    };
    let ipv4_block = |block: usize| {
        FilterMaps::open_pinned(cfctl.pin_dir())
            .expect("the pinned maps")
            .live_prefilter()
            .ipv4[block]
    };
    // Active IPv4 lengths [32, 24, 16]: bits 0, 1 and 2. Block 198.18/16
    // holds a /32 and a /24 key.
    cfctl.ok(&[
        "add",
        "198.18.1.0/24",
        "198.18.2.7",
        "198.19.0.0/16",
        "2001:db8:1::/48",
        "2001:db8:2::/48",
    ]);
    assert_eq!(ipv4_block(0xc612), 0b011);
    cfctl.ok(&["del", "198.18.1.0/24"]);
    assert_eq!(ipv4_block(0xc612), 0b001, "the /24 bit is cleared");
    cfctl.ok(&["del", "198.18.2.7"]);
    assert_eq!(ipv4_block(0xc612), 0, "the block is clear");
    assert_eq!(ipv4_block(0xc613), 0b100, "198.19.0.0/16 keeps its bit");
    // Both IPv6 entries are in one /32 block: its byte keeps the /48 bit
    // until the second goes.
    cfctl.ok(&["del", "2001:db8:1::/48"]);
    assert_eq!(stale_bits(), 0);
    let ipv6_bits = || {
        FilterMaps::open_pinned(cfctl.pin_dir())
            .expect("the pinned maps")
            .live_prefilter()
            .ipv6
            .iter()
            .map(|mask| mask.count_ones())
            .sum::<u32>()
    };
    assert_eq!(ipv6_bits(), 1);
    cfctl.ok(&["del", "2001:db8:2::/48"]);
    assert_eq!(ipv6_bits(), 0);
    assert_eq!(stale_bits(), 0);
    assert!(cfctl.ok(&["check", "198.19.7.7"]).contains("listed"));
}

/// The live IPv6 prefilter byte of the /32 block whose first 32 address
/// bits are `block`.
fn live_ipv6_byte(cfctl: &Cfctl, block: u32) -> u8 {
    FilterMaps::open_pinned(cfctl.pin_dir())
        .expect("the pinned maps")
        .live_prefilter()
        .ipv6[ipv6_block(block) as usize]
}

fn stale_prefilter_bits(cfctl: &Cfctl) -> u64 {
    let verify = cfctl.json(&["verify"]);
    verify["stale_prefilter_bits"].as_u64().expect("a count")
}

#[test]
fn ipv6_bits_are_cleared_exactly_past_a_hundred_thousand_ipv6_entries() {
    let (_network, cfctl) = attached(171, "v6-many", "250000", "native");
    // 65,536 /48s in 2001:db8::/32 and ten in each of the 4,096 /32 blocks
    // of 3fff::/20: 106,496 IPv6 entries in two first groups.
    let db8 = 0x2001_0db8u32;
    let block_net = |block: u32, index: u32| {
        let address = Ipv6Addr::from(u128::from(block) << 96 | u128::from(index) << 80);
        IpNet::new_assert(IpAddr::V6(address), 48)
    };
    let blocks_3fff = (0..0x1000).map(|second| 0x3fff_0000 | second);
    let mut text = String::new();
    for index in 0..1 << 16 {
        text.push_str(&format!("{}\n", block_net(db8, index)));
    }
    for block in blocks_3fff.clone() {
        for index in 0..10 {
            text.push_str(&format!("{}\n", block_net(block, index)));
        }
    }
    let lists = tempfile::tempdir().expect("a directory for lists");
    let list = lists.path().join("many-v6.txt");
    std::fs::write(&list, text).expect("writing the list");
    cfctl.ok(&["import", "--source", "many", path_arg(&list)]);
    assert_eq!(entry_count(&cfctl), 106_496);
    assert_eq!(stale_prefilter_bits(&cfctl), 0);

    // One block's last entries go: its byte (shared with no other listed
    // block) is cleared, found by reading one /32 per first group.
    let target = 0x3fff_0123;
    let byte_users: Vec<u32> = blocks_3fff
        .clone()
        .chain([db8])
        .filter(|&block| ipv6_block(block) == ipv6_block(target))
        .collect();
    assert_eq!(byte_users, [target], "a byte of its own");
    assert_ne!(live_ipv6_byte(&cfctl, target), 0);
    let mut deleted: Vec<String> = (0..9)
        .map(|index| block_net(target, index).to_string())
        .collect();
    let mut args: Vec<&str> = vec!["del"];
    args.extend(deleted.iter().map(String::as_str));
    cfctl.ok(&args);
    assert_ne!(
        live_ipv6_byte(&cfctl, target),
        0,
        "one entry still marks it"
    );
    cfctl.ok(&["del", &block_net(target, 9).to_string()]);
    assert_eq!(
        live_ipv6_byte(&cfctl, target),
        0,
        "the last entry's bit is cleared"
    );
    assert_eq!(stale_prefilter_bits(&cfctl), 0);

    // Emptying 256 blocks at once: too many bytes to look up per first
    // group, so every IPv6 entry is read once; still exact.
    let emptied: Vec<u32> = (0x3fff_0200..0x3fff_0300).collect();
    deleted = emptied
        .iter()
        .flat_map(|&block| (0..10).map(move |index| block_net(block, index).to_string()))
        .collect();
    let mut args: Vec<&str> = vec!["del"];
    args.extend(deleted.iter().map(String::as_str));
    cfctl.ok(&args);
    assert_eq!(entry_count(&cfctl), 106_496 - 10 - 2_560);
    assert_eq!(stale_prefilter_bits(&cfctl), 0);
    let kept = FilterMaps::open_pinned(cfctl.pin_dir())
        .expect("the pinned maps")
        .live_prefilter();
    for block in emptied {
        if ipv6_block(block) != ipv6_block(db8) {
            assert_eq!(kept.ipv6[ipv6_block(block) as usize], 0, "{block:#x}");
        }
    }
    let listed = IpAddr::V6(Ipv6Addr::from(u128::from(db8) << 96 | 7));
    assert_eq!(cfctl.pinned_verdict()(listed), XdpAction::Drop);
}

#[test]
fn deleting_one_of_two_ipv6_entries_sharing_a_byte_keeps_its_bit() {
    let (network, cfctl) = attached(172, "v6-shared", "10000", "native");
    // 2001:db8:ac::/48 holds the peer's address; an entry of another first
    // group whose /32 block has the same byte.
    let kept: IpNet = "2001:db8:ac::/48".parse().expect("a CIDR");
    let kept_block = 0x2001_0db8;
    let other_block = ipv6_block_of_byte(0x3fff, ipv6_block(kept_block));
    assert_eq!(ipv6_block(other_block), ipv6_block(kept_block));
    let other = IpNet::new_assert(
        IpAddr::V6(Ipv6Addr::from(u128::from(other_block) << 96)),
        48,
    );
    // 2,048 IPv4 entries beside them make the list long enough that the
    // one /32 block of the byte in each first group is read, not the whole
    // list.
    let lists = tempfile::tempdir().expect("a directory for lists");
    let filler = lists.path().join("filler.txt");
    let text: String = (0..2048u32)
        .map(|host| format!("{}\n", Ipv4Addr::from(0xc613_0000 | host)))
        .collect();
    std::fs::write(&filler, text).expect("writing the list");
    cfctl.ok(&["import", "--source", "filler", path_arg(&filler)]);
    cfctl.ok(&["add", &kept.to_string(), &other.to_string()]);
    let marked = live_ipv6_byte(&cfctl, kept_block);
    assert_ne!(marked, 0);
    cfctl.ok(&["del", &other.to_string()]);
    assert_eq!(
        live_ipv6_byte(&cfctl, kept_block),
        marked,
        "{kept} still marks the byte"
    );
    assert_eq!(stale_prefilter_bits(&cfctl), 0);
    let peer = network.v6(2);
    assert!(kept.contains(&peer));
    assert_eq!(cfctl.pinned_verdict()(peer), XdpAction::Drop, "{peer}");
    assert_eq!(cfctl.check(&peer.to_string())["verdict"], "listed");
    cfctl.ok(&["del", &kept.to_string()]);
    assert_eq!(live_ipv6_byte(&cfctl, kept_block), 0);
    assert_eq!(stale_prefilter_bits(&cfctl), 0);
    assert_eq!(cfctl.pinned_verdict()(peer), XdpAction::Pass, "{peer}");
}

/// Asserts that the attach that ended with `output` succeeded and that
/// `cfctl status` shows its program on `interface`.
fn assert_attached(cfctl: &Cfctl, output: &std::process::Output, interface: &str) {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        cfctl.json(&["status"])["interfaces"][0]["interface"],
        interface
    );
}

#[test]
fn attach_under_ip_netns_exec_is_refused_with_the_way_out() {
    let network = TestNetwork::new(117);
    let cfctl = Cfctl::new("netns-exec");
    let in_namespace = |runner: &str, runner_args: &[&str], args: &[&str]| {
        let command = cfctl.command(args);
        std::process::Command::new(runner)
            .args(runner_args)
            .arg(command.get_program())
            .args(command.get_args())
            .output()
            .expect("running cfctl in the namespace")
    };
    // `ip netns exec` mounts a new /sys: a bpffs cfctl mounted there would
    // vanish with it, and the attachment too.
    let namespace = network.namespace.as_str();
    let output = in_namespace(
        "ip",
        &["netns", "exec", namespace],
        &["attach", &network.peer_link],
    );
    let line = expect_one_error_line(&output, "attach under ip netns exec");
    let way_out = format!("nsenter --net=/run/netns/{namespace} cfctl");
    assert!(line.contains(&way_out), "{line}");
    assert!(!cfctl.pin_dir().exists(), "a refused attach left pins");
    // The way out: nsenter enters only the network namespace.
    let entered = format!("--net=/run/netns/{namespace}");
    let output = in_namespace("nsenter", &[&entered], &["attach", &network.peer_link]);
    assert_attached(&cfctl, &output, &network.peer_link);
    let output = in_namespace("nsenter", &[&entered], &["detach", "--all"]);
    assert!(output.status.success());
}

#[test]
fn attach_waits_for_an_interface_that_appears_and_names_one_that_never_does() {
    let cfctl = Cfctl::new("wait-for-interface");
    let output = cfctl.run(&["attach", "cfnone0", "--wait-for-interface", "1s"]);
    let line = expect_one_error_line(&output, "attach to an interface that never appears");
    assert!(
        line.contains("no network interface named 'cfnone0' appeared in 1s"),
        "{line}"
    );
    assert!(!cfctl.pin_dir().exists(), "a refused attach left pins");

    // The attach unit's way at boot: started before its interface exists.
    let subnet = 201;
    let interface = TestNetwork::host_link_of(subnet);
    let waiting = cfctl
        .command(&["attach", &interface, "--wait-for-interface", "60s"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running cfctl attach");
    let network = TestNetwork::new(subnet);
    let output = waiting.wait_with_output().expect("cfctl attach ends");
    assert_attached(&cfctl, &output, &network.host_link);
    cfctl.ok(&["detach", &network.host_link]);
}

/// `count` distinct entries for crash round `round`: IPv4 hosts in
/// 198.18.0.0/15, IPv6 hosts in 2001:db8::/32.
fn crash_list(dir: &Path, round: usize, count: usize) -> (PathBuf, HashSet<IpNet>) {
    let mut rng = StdRng::seed_from_u64(round as u64);
    let mut nets = HashSet::with_capacity(count);
    while nets.len() < count {
        let address = if rng.random_bool(0.8) {
            IpAddr::V4(Ipv4Addr::from(
                0xc612_0000 | rng.random_range(0..0x2_0000u32),
            ))
        } else {
            let low: u64 = rng.random();
            IpAddr::V6(Ipv6Addr::from(
                (0x2001_0db8u128 << 96) | (round as u128) << 64 | u128::from(low),
            ))
        };
        nets.insert(IpNet::from(address));
    }
    let text: String = nets.iter().map(|net| format!("{net}\n")).collect();
    let path = dir.join(format!("crash-{round}.txt"));
    std::fs::write(&path, text).expect("writing a list");
    (path, nets)
}

fn exported_set(cfctl: &Cfctl) -> HashSet<IpNet> {
    cfctl
        .ok(&["export"])
        .lines()
        .filter(|line| !line.starts_with('#'))
        .map(|line| line.parse().expect("an exported CIDR"))
        .collect()
}

#[test]
fn killed_imports_leave_a_consistent_store_and_reattach_repairs_the_filter() {
    let (network, cfctl) = attached(113, "crash", "500000", "native");
    let host = network.host_link.as_str();
    let lists = tempfile::tempdir().expect("a directory for lists");
    let mut committed: HashSet<IpNet> = HashSet::new();
    let mut rng = StdRng::seed_from_u64(0xdead);
    for round in 0..6 {
        // Small imports write keys into the live table one by one, large
        // ones build a new table and swap it in.
        let count = if round % 2 == 0 { 60_000 } else { 200_000 };
        let (path, nets) = crash_list(lists.path(), round, count);
        let mut child = cfctl
            .command(&["import", path_arg(&path)])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("starting cfctl import");
        std::thread::sleep(Duration::from_millis(rng.random_range(1..400)));
        child.kill().expect("kill -9 of cfctl by PID");
        child.wait().expect("reaping cfctl");

        // All or nothing in the store.
        let stored = exported_set(&cfctl);
        let with_import: HashSet<IpNet> = committed.union(&nets).copied().collect();
        assert!(
            stored == committed || stored == with_import,
            "round {round}: the store holds {} entries, neither {} nor {}",
            stored.len(),
            committed.len(),
            with_import.len()
        );
        committed = stored;

        // Attaching again rebuilds the filter from the store.
        cfctl.ok(&["attach", host]);
        cfctl.ok(&["verify"]);
    }
}

#[test]
fn reattach_makes_the_live_allowlist_match_the_store() {
    let (network, cfctl) = attached(115, "allowsync", "1000", "native");
    cfctl.ok(&["add", "198.18.0.0/16", "2001:db8::/32"]);
    cfctl.ok(&["allow", "add", "198.18.0.10", "2001:db8::10"]);
    let program = Xdp::from_pin(cfctl.pin_dir().join("program"), XdpAttachType::Interface)
        .expect("opening the pinned program");
    let fd = program.fd().expect("the program's fd");
    let verdict = |address: &str| {
        let frame = udp_frame(address.parse().expect("an address"), Tags::None);
        run_xdp(fd.as_fd(), &frame, 1)
            .expect("BPF_PROG_TEST_RUN")
            .action
    };

    // Make the kernel's allowlist disagree with the store, as a crash
    // between an allowlist map write and its commit would.
    let mut maps = FilterMaps::open_pinned(cfctl.pin_dir()).expect("opening the pinned maps");
    maps.disallow(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 10)), 32)
        .expect("removing a stored allowlist entry from the map");
    maps.allow(IpAddr::V4(Ipv4Addr::new(198, 18, 9, 0)), 24)
        .expect("adding an entry the store does not have");
    drop(maps);
    assert_eq!(verdict("198.18.0.10"), XdpAction::Drop);
    assert_eq!(verdict("198.18.9.1"), XdpAction::Pass);

    cfctl.ok(&["attach", &network.host_link]);
    assert_eq!(verdict("198.18.0.10"), XdpAction::Pass);
    assert_eq!(verdict("2001:db8::10"), XdpAction::Pass);
    assert_eq!(verdict("198.18.9.1"), XdpAction::Drop);
}

/// The state a bad command must not change: the list and the live keys.
fn snapshot(cfctl: &Cfctl) -> (String, Value) {
    let status = cfctl.json(&["status"]);
    (
        cfctl.ok(&["export"]),
        status["filter"]["fingerprints"].clone(),
    )
}

#[test]
fn bad_input_is_refused_with_one_line_and_changes_nothing() {
    // 64 slots: easy to fill.
    let (network, cfctl) = attached(114, "badinput", "60", "native");
    let host = network.host_link.as_str();
    cfctl.ok(&["add", "198.18.0.0/24", "2001:db8::/48"]);
    let before = snapshot(&cfctl);
    let dir = tempfile::tempdir().expect("a directory for lists");
    let bad_list = dir.path().join("bad.txt");
    std::fs::write(&bad_list, "198.18.1.1\n# fine\nnonsense\n198.18.1.2\n").expect("writing");
    let bad_list_text = format!(
        "{}:3: not an IP address or CIDR: 'nonsense'",
        bad_list.display()
    );
    let many: Vec<String> = (0..100).map(|host| format!("198.18.9.{host}")).collect();
    let mut add_many = vec!["add"];
    add_many.extend(many.iter().map(String::as_str));
    let big_list = dir.path().join("big.txt");
    let big: String = (0..1000)
        .map(|host| format!("198.18.{}.{}\n", 20 + host / 256, host % 256))
        .collect();
    std::fs::write(&big_list, big).expect("writing");

    let cases: Vec<(Vec<&str>, String)> = vec![
        (
            vec!["add", "198.18.0.300"],
            "'198.18.0.300': not an IP address or CIDR".into(),
        ),
        (
            vec!["add", "198.18.1.1", "10.1.2.3/8"],
            "'10.1.2.3/8': host bits are set beyond the prefix length (the network is 10.0.0.0/8)"
                .into(),
        ),
        (
            vec!["add", "198.18.1.1", "--timeout", "500000000000y"],
            "'500000000000y' is longer than 100 years".into(),
        ),
        (
            vec!["del", "2001:db8::/129"],
            "'2001:db8::/129': prefix length out of range".into(),
        ),
        (vec!["import", path_arg(&bad_list)], bad_list_text),
        (
            vec!["import", "/nonexistent/list.txt"],
            "/nonexistent/list.txt: cannot read the list".into(),
        ),
        (
            vec!["import", "--format", "csv", "x"],
            "invalid value 'csv' for '--format <FORMAT>'".into(),
        ),
        (
            vec!["check", "not-an-ip"],
            "'not-an-ip': not an IP address".into(),
        ),
        (
            vec!["attach", "cfnosuchif"],
            "no network interface named 'cfnosuchif'".into(),
        ),
        (
            vec!["attach", host, "--fpr", "1e-30"],
            "no filter reaches a false-positive rate of 1e-30".into(),
        ),
        (
            vec!["attach", host, "--fingerprint-bits", "8"],
            "the attached filter has 16-bit fingerprints".into(),
        ),
        (add_many.clone(), "the filter is full".into()),
        (
            vec!["import", path_arg(&big_list)],
            "the filter is full".into(),
        ),
        (vec!["save"], "`cfctl save` needs --device".into()),
        (
            vec!["detach", "cfnosuchif"],
            "cfctl is not attached to 'cfnosuchif'".into(),
        ),
    ];
    for (args, expected) in &cases {
        let line = cfctl.fails(args);
        assert!(
            line.starts_with("cfctl: ") && line.contains(expected.as_str()),
            "cfctl {}: got {line:?}, expected it to contain {expected:?}",
            args.join(" ")
        );
        assert_eq!(
            snapshot(&cfctl),
            before,
            "cfctl {} changed something",
            args.join(" ")
        );
    }
    let full = cfctl.fails(&add_many);
    assert!(full.contains("cfctl resize"), "{full}");

    // Another XDP program holds the interface: a second cfctl with its
    // own pins.
    let other = Cfctl::new("badinput-other");
    let busy = other.fails(&["attach", host, "--mode", "skb"]);
    assert!(
        busy.contains(&format!("'{host}' already has another XDP program")),
        "{busy}"
    );
    assert!(
        !other.pin_dir().exists(),
        "a refused attach left pins behind"
    );

    // Without root.
    let output = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_cfctl"))
        .arg("--pin-dir")
        .arg(cfctl.pin_dir())
        .arg("--state-dir")
        .arg(cfctl.state_dir())
        .arg("status")
        .output()
        .expect("running setpriv (util-linux)");
    let line = expect_one_error_line(&output, "status as nobody");
    assert!(line.contains("cfctl needs root"), "{line}");

    // A delete of an unlisted entry warns and changes nothing.
    let output = cfctl.run(&["del", "198.18.77.0/24"]);
    assert!(output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("198.18.77.0/24 was not listed"));
    assert_eq!(snapshot(&cfctl), before);

    // Made larger, the filter takes them, with no gap.
    cfctl.ok(&["resize", "--capacity", "5000"]);
    cfctl.ok(&add_many);
    cfctl.ok(&["verify"]);
    assert_eq!(entry_count(&cfctl), 102);
}

/// Malformed frames (a cut IPv4 header, one VLAN tag more than the parser
/// follows) are dropped by default, passed after `cfctl malformed pass`,
/// and the setting is stored: a new attach keeps it, `--malformed` sets
/// it, `status` shows it.
#[test]
fn the_malformed_frame_setting_is_stored_switched_and_shown() {
    let (network, cfctl) = attached(160, "malformed", "1000", "skb");
    let host = &network.host_link;
    let source = network.v4(2);
    let cut = udp_frame(source, Tags::None)[..14 + 19].to_vec();
    let too_many_tags = udp_frame(
        source,
        Tags::Priority {
            count: cfctl::MAX_VLAN_TAGS + 1,
            outer: 0x88a8,
        },
    );
    let expect = |action: XdpAction, setting: &str| {
        let verdict = cfctl.pinned_frame_verdict();
        for frame in [&cut, &too_many_tags] {
            assert_eq!(verdict(frame), action, "with malformed {setting}");
        }
        assert_eq!(verdict(&udp_frame(source, Tags::None)), XdpAction::Pass);
        assert_eq!(cfctl.json(&["status"])["malformed"], setting);
    };
    expect(XdpAction::Drop, "drop");
    cfctl.ok(&["malformed", "pass"]);
    expect(XdpAction::Pass, "pass");
    assert!(cfctl.ok(&["status"]).contains("malformed frames passed"));
    cfctl.ok(&["detach", "--all"]);
    cfctl.ok(&["attach", host, "--mode", "skb"]);
    expect(XdpAction::Pass, "pass");
    cfctl.ok(&["attach", host, "--malformed", "drop"]);
    expect(XdpAction::Drop, "drop");
    // Monitor mode passes them, counted as malformed.
    cfctl.ok(&["mode", "monitor"]);
    expect(XdpAction::Pass, "drop");
}

#[test]
fn man_pages_and_completions_are_generated() {
    let run = |args: &[&str]| {
        let output = common::cli::binary()
            .args(args)
            .output()
            .expect("running cfctl");
        assert!(output.status.success(), "cfctl {}", args.join(" "));
        String::from_utf8(output.stdout).expect("UTF-8 output")
    };
    let page = run(&["man"]);
    assert!(
        page.contains(".TH cfctl 1") && page.contains("attach"),
        "{page}"
    );
    for shell in ["bash", "zsh", "fish"] {
        assert!(run(&["completions", shell]).contains("import"), "{shell}");
    }
    let dir = tempfile::tempdir().expect("a directory");
    run(&["man", "--out", dir.path().to_str().expect("a UTF-8 path")]);
    for page in [
        "cfctl.1",
        "cfctl-attach.1",
        "cfctl-import.1",
        "cfctl-allow-add.1",
    ] {
        assert!(dir.path().join(page).exists(), "{page} not written");
    }
}

/// A `cfctl batch` of its own, its input and answers piped.
struct Batch {
    child: std::process::Child,
    input: std::process::ChildStdin,
    answers: std::io::BufReader<std::process::ChildStdout>,
}

impl Batch {
    fn start(cfctl: &Cfctl, global: &[&str]) -> Self {
        let mut args = global.to_vec();
        args.push("batch");
        let mut child = cfctl
            .command(&args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("starting cfctl batch");
        let input = child.stdin.take().expect("the batch's input");
        let answers = std::io::BufReader::new(child.stdout.take().expect("its answers"));
        Self {
            child,
            input,
            answers,
        }
    }

    /// Writes `lines` at once, then reads an answer for each that is not
    /// blank or a comment.
    fn send(&mut self, lines: &[String]) -> Vec<String> {
        use std::io::{BufRead, Write};
        let text: String = lines.iter().map(|line| format!("{line}\n")).collect();
        self.input
            .write_all(text.as_bytes())
            .expect("writing to the batch");
        let commands = lines
            .iter()
            .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
            .count();
        (0..commands)
            .map(|_| {
                let mut answer = String::new();
                self.answers.read_line(&mut answer).expect("an answer");
                assert!(answer.ends_with('\n'), "the batch ended: {answer:?}");
                answer.trim_end().to_owned()
            })
            .collect()
    }

    /// Ends the input; returns the exit status and standard error.
    fn end(self) -> (std::process::ExitStatus, String) {
        drop(self.input);
        let output = self.child.wait_with_output().expect("the batch ends");
        (
            output.status,
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }
}

#[test]
fn a_batch_answers_each_line_shares_the_store_and_reaches_the_filter() {
    let (network, cfctl) = attached(202, "batch", "4096", "skb");
    let verdict = cfctl.pinned_verdict();
    let listed = network.v4(3);
    let mut batch = Batch::start(&cfctl, &[]);
    let answers = batch.send(&[format!("add {listed} --source script --timeout 1h")]);
    assert!(
        answers[0].starts_with("ok: 1 added (live filter"),
        "{answers:?}"
    );
    assert_eq!(verdict(listed), XdpAction::Drop);
    assert_eq!(
        cfctl
            .listing_expiry("script", &listed.to_string())
            .map(|e| e.is_some()),
        Some(true)
    );

    // Between lines the batch does not hold the store: another cfctl
    // changes it meanwhile (it would wait for ever otherwise).
    let by_hand = network.v4(9);
    let output = cfctl.run_to_end(&["add", &by_hand.to_string()]);
    assert!(output.status.success(), "{output:?}");

    // A bad line is answered with its number and why; the batch goes on.
    // Blank lines and comments get no answer but count as lines.
    let answers = batch.send(&[
        String::new(),
        "# a comment".to_owned(),
        "add 198.18.0.1/33".to_owned(),
        "list".to_owned(),
        "add 198.18.0.7 --comment \"two words".to_owned(),
        format!("del {listed} --source script"),
    ]);
    assert!(
        answers[0].starts_with("error: line 4: '198.18.0.1/33': prefix length out of range"),
        "{answers:?}"
    );
    assert!(
        answers[1].starts_with("error: line 5: `list` is not a change"),
        "{answers:?}"
    );
    assert!(
        answers[2].starts_with("error: line 6: unbalanced quotes"),
        "{answers:?}"
    );
    assert!(
        answers[3].starts_with("ok: 1 deleted (live filter"),
        "{answers:?}"
    );
    assert_eq!(verdict(listed), XdpAction::Pass);
    assert_eq!(verdict(by_hand), XdpAction::Drop);

    // A burst of lines (the store kept while they wait): every one applied.
    let burst: Vec<IpAddr> = (0..300u32)
        .map(|index| IpAddr::V4(Ipv4Addr::from(0xc613_4000 + index))) // 198.19.64.0/23
        .collect();
    let lines: Vec<String> = burst
        .iter()
        .map(|address| format!("add {address} --source burst"))
        .collect();
    let answers = batch.send(&lines);
    assert!(
        answers
            .iter()
            .all(|answer| answer.starts_with("ok: 1 added")),
        "{answers:?}"
    );
    assert!(burst
        .iter()
        .all(|&address| verdict(address) == XdpAction::Drop));
    let (status, stderr) = batch.end();
    assert_eq!(status.code(), Some(1));
    assert_eq!(stderr.trim_end(), "cfctl: 3 of 305 commands failed");

    // With --json, an object a line.
    let mut batch = Batch::start(&cfctl, &["--json"]);
    let answers = batch.send(&[
        "import --replace --source burst /dev/null".to_owned(),
        "del".to_owned(),
    ]);
    let done: Value = serde_json::from_str(&answers[0]).expect("JSON");
    assert_eq!(
        (done["line"].as_u64(), done["ok"].as_bool()),
        (Some(1), Some(true))
    );
    assert_eq!(done["report"]["deleted"], 300);
    let refused: Value = serde_json::from_str(&answers[1]).expect("JSON");
    assert_eq!(refused["ok"], false);
    assert!(refused["error"]
        .as_str()
        .is_some_and(|error| error.contains("required")));
    assert!(burst
        .iter()
        .all(|&address| verdict(address) == XdpAction::Pass));
    assert_eq!(batch.end().0.code(), Some(1));
}
