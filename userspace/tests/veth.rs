//! Real traffic: the blocklist attached (native and SKB mode, and pinned)
//! to the host end of a veth pair whose other end is in a network namespace
//! the test creates. UDP datagrams and pings from a listed and an unlisted
//! source, and raw frames behind stacks of VLAN tags; only the unlisted
//! ones arrive, and the counters say so. Only
//! 198.18.0.0/15 and 2001:db8::/32 addresses are used; namespaces, links
//! and pins are removed by guards even when a test fails. Needs root,
//! iproute2 and ping.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;

use aya::programs::links::PinnedLink;
use cfctl::plan::{KeyPlan, PlanLimits};
use cfctl::xdp::program::{attach_pinned_program, detach, detach_pinned};
use cfctl::xdp::{AttachMode, AttachPoint, FilterMaps, FilterProgram, LoadOptions};
use cfctl::{Family, FilterShape, Mode, Outcome};
use cfxdp::packet::MAX_VLAN_TAGS;
use common::netns::{
    check_traffic, ensure_bpffs, receive_until_marker, wait_until_the_path_carries, PinDir,
    TestNetwork, DATAGRAMS, PINGS, PORT,
};
use common::{net, require_root, TAG_PROTOCOLS};

fn dropped(maps: &FilterMaps, family: Family) -> u64 {
    maps.counters()
        .expect("reading counters")
        .get(Outcome::Dropped, family)
        .packets
}

fn listing_blocklist(network: &TestNetwork) -> FilterProgram {
    require_root();
    let options =
        LoadOptions::for_capacity(FilterShape::Fingerprint16, 1000).expect("a small filter");
    let mut blocklist = FilterProgram::load(&options).expect("loading the blocklist program");
    let entries = [net(network.v4(3), 32), net(network.v6(3), 128)];
    let plan = KeyPlan::build(entries, PlanLimits::default()).expect("a plan");
    blocklist.live().install(&plan).expect("filling the filter");
    blocklist
}

fn attached_traffic_is_filtered(subnet: u8, mode: AttachMode) {
    require_root();
    let network = TestNetwork::new(subnet);
    let mut blocklist = listing_blocklist(&network);
    check_traffic(&network, false);
    let link = blocklist
        .attach(network.host_index(), mode)
        .expect("attaching");
    check_traffic(&network, true);
    for family in [Family::Ipv4, Family::Ipv6] {
        assert_eq!(
            dropped(blocklist.maps(), family),
            DATAGRAMS + PINGS,
            "{family:?} packets dropped"
        );
    }
    detach(link).expect("detaching");
    check_traffic(&network, false);
    for family in [Family::Ipv4, Family::Ipv6] {
        assert_eq!(
            dropped(blocklist.maps(), family),
            DATAGRAMS + PINGS,
            "{family:?} packets dropped, none after detaching"
        );
    }
}

#[test]
fn native_mode_drops_listed_sources() {
    attached_traffic_is_filtered(101, AttachMode::Native);
}

#[test]
fn skb_mode_drops_listed_sources() {
    attached_traffic_is_filtered(102, AttachMode::Skb);
}

/// Datagrams behind stacks of priority tags (VLAN id 0), of either outer
/// tag protocol, sent as raw frames from the namespace: the kernel strips
/// the tags and delivers them to the host's socket (the unlisted ones
/// arrive, untouched by the program), and the program drops every one
/// from the listed source, in native and SKB mode, IPv4 and IPv6.
fn stacked_priority_tags_hide_no_listed_source(subnet: u8, mode: AttachMode) {
    require_root();
    let network = TestNetwork::new(subnet);
    let mut blocklist = listing_blocklist(&network);
    let _link = blocklist
        .attach(network.host_index(), mode)
        .expect("attaching");
    for (host, listed, unlisted) in [
        (network.v4(1), network.v4(3), network.v4(2)),
        (network.v6(1), network.v6(3), network.v6(2)),
    ] {
        let receiver = UdpSocket::bind(SocketAddr::new(host, PORT)).expect("binding the receiver");
        let destination = receiver.local_addr().expect("the receiver's address");
        wait_until_the_path_carries(&network, &receiver, unlisted);
        let mut frames = Vec::new();
        let mut sent = 0;
        for outer in TAG_PROTOCOLS {
            for tags in [3, 4, MAX_VLAN_TAGS] {
                for _ in 0..DATAGRAMS {
                    frames.push(network.tagged_datagram(
                        listed,
                        destination,
                        b"listed",
                        tags,
                        outer,
                    ));
                    frames.push(network.tagged_datagram(
                        unlisted,
                        destination,
                        b"unlisted",
                        tags,
                        outer,
                    ));
                    sent += 1;
                }
            }
        }
        frames.push(network.tagged_datagram(unlisted, destination, b"marker", 0, 0));
        network.send_frames(&frames);
        assert_eq!(
            receive_until_marker(&receiver),
            (0, sent),
            "tagged UDP to {host}: (listed, unlisted) received"
        );
    }
}

#[test]
fn stacked_priority_tags_hide_no_listed_source_in_native_mode() {
    stacked_priority_tags_hide_no_listed_source(104, AttachMode::Native);
}

#[test]
fn stacked_priority_tags_hide_no_listed_source_in_skb_mode() {
    stacked_priority_tags_hide_no_listed_source(105, AttachMode::Skb);
}

#[test]
fn pinned_attachment_outlives_the_loader() {
    require_root();
    ensure_bpffs();
    let network = TestNetwork::new(103);
    let pins = PinDir(PathBuf::from(format!(
        "/sys/fs/bpf/cfxdp-test-{}",
        std::process::id()
    )));
    std::fs::create_dir_all(&pins.0).expect("creating the pin directory");
    let link_path = pins.0.join("link");
    {
        let mut blocklist = listing_blocklist(&network);
        blocklist.pin(&pins.0).expect("pinning");
        blocklist
            .attach_pinned(
                &network.host_link,
                network.host_index(),
                AttachPoint::Xdp(AttachMode::Native),
                &link_path,
            )
            .expect("attaching with a pinned link");
    }
    // The loader is gone; the program, its maps and the link are pinned.
    check_traffic(&network, true);
    let maps = FilterMaps::open_pinned(&pins.0).expect("opening the pinned maps");
    assert_eq!(maps.shape(), FilterShape::Fingerprint16);
    assert_eq!(
        dropped(&maps, Family::Ipv4),
        DATAGRAMS + PINGS,
        "IPv4 packets dropped"
    );
    maps.set_mode(Mode::Monitor);
    check_traffic(&network, false);
    assert_eq!(
        maps.counters()
            .expect("reading counters")
            .get(Outcome::WouldDrop, Family::Ipv6)
            .packets,
        DATAGRAMS + PINGS,
        "IPv6 packets that would have been dropped"
    );
    maps.set_mode(Mode::Enforce);
    // Another process holds the link open (a cfctl reading it, a child
    // forked with the loader's descriptors): detaching takes the program
    // off the hook all the same.
    let held = PinnedLink::from_pin(&link_path).expect("opening the pinned link");
    detach_pinned(&link_path, AttachPoint::Xdp(AttachMode::Native))
        .expect("detaching the pinned link");
    check_traffic(&network, false);
    drop(held);
    assert_eq!(
        dropped(&maps, Family::Ipv4),
        DATAGRAMS + PINGS,
        "nothing dropped after detaching"
    );
    // Attach again from the pins alone, as a second process would.
    attach_pinned_program(
        &pins.0,
        &network.host_link,
        network.host_index(),
        AttachPoint::Xdp(AttachMode::Skb),
        &link_path,
    )
    .expect("attaching the pinned program");
    check_traffic(&network, true);
    assert_eq!(
        dropped(&maps, Family::Ipv6),
        2 * (DATAGRAMS + PINGS),
        "IPv6 packets dropped, in both attachments"
    );
    // Another program takes the link over in one step (as a resize does):
    // this one lists nothing, and stays attached after its loader is gone.
    {
        let options =
            LoadOptions::for_capacity(FilterShape::Fingerprint16, 100).expect("a small filter");
        let mut empty = FilterProgram::load(&options).expect("loading the blocklist program");
        empty
            .take_over_pinned_link(&link_path, AttachPoint::Xdp(AttachMode::Skb))
            .expect("taking over the pinned link");
    }
    check_traffic(&network, false);
    detach_pinned(&link_path, AttachPoint::Xdp(AttachMode::Skb))
        .expect("detaching the pinned link");
}
