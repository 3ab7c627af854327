//! The QEMU firmware in the path of traffic: its emulated LAN9118 bridges
//! VLANs 10 and 20, and the test plays the trunk port of the switch it
//! hangs on (QEMU's `dgram` netdev on 127.0.0.1: one datagram per
//! Ethernet frame, exact bytes both ways). The image built with a key
//! boots in a network namespace, its port on an emulated hub with a tap
//! there too, and `cfctl --device udp:` in the namespace loads Spamhaus'
//! IPv4 and IPv6 DROP lists over the network, through the kernel's UDP;
//! then frames from 10,000 sources (UDP datagrams and pings), half of them
//! inside listed networks, half unlisted (198.18.0.0/15, 2001:db8::/32),
//! cross on VLAN 10 and VLAN 20: every listed one is dropped, every other
//! one comes back once on the other VLAN, unchanged but for its tag, and
//! the device's frame counters (`Traffic`, read over UART0) grow by
//! exactly those frames. Frames under two tags, cut short, not IP,
//! untagged or of another VLAN go where the bridge's rules say.
//! Needs root, iproute2, `qemu-system-arm` and `defmt-print` (`./x setup`).
//!
//! The agreement test gives the same frames (valid ones from listed and
//! unlisted sources under one or two tags, and thousands of mutations of
//! them: bytes changed anywhere past the outer tag, frames cut short) to
//! the firmware's bridge in QEMU and to the XDP program in this kernel
//! (`BPF_PROG_TEST_RUN`), both listing the same networks, and checks
//! that the two builds of the one parser decide every frame alike: what
//! the bridge forwards is what XDP passes, and the counters by outcome and
//! family are equal.
//!
//! The frames never reach a kernel's network stack; the kernel here has
//! no 802.1Q support, so hosts on VLAN interfaces could not ping through
//! the bridge.

mod common;

use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, UdpSocket};
use std::time::Duration;

use cfctl::device::DeviceClient;
use cfctl::netlist::{parse_file, ParseOptions};
use cfctl::xdp::test_run::XdpAction;
use cfctl::{Family, MalformedAction, Outcome};
use common::blocklist_with;
use common::qemu::{firmware_elf, firmware_elf_with_update_key, repo_root, Qemu};
use common::tap::{key_file, TapNamespace, TAP};
use etherparse::PacketBuilder;
use filter_core::protocol::{FrameCount, Item, Prefix, Traffic};
use ipnet::IpNet;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const SOURCES: usize = 10_000;
/// Frames sent before the test waits for what the bridge forwarded: well
/// within the controller's receive FIFO.
const WINDOW: usize = 24;
const VLANS: [u16; 2] = [10, 20];
/// Untagged frames a trunk passes over while it waits for one marker.
const UNTAGGED_AT_MOST: usize = 10_000;
const MAC_A: [u8; 6] = [0x02, 0xcf, 0x0a, 0, 0, 2];
const MAC_B: [u8; 6] = [0x02, 0xcf, 0x14, 0, 0, 1];

/// A UDP datagram from `source` carrying `id` (and zeros: every frame is
/// at least 60 bytes, so that no one pads it), untagged.
fn datagram(source: IpAddr, id: u32) -> Vec<u8> {
    let builder = PacketBuilder::ethernet2(MAC_A, MAC_B);
    let builder = match source {
        IpAddr::V4(source) => builder.ipv4(source.octets(), [198, 18, 197, 1], 64),
        IpAddr::V6(source) => builder.ipv6(
            source.octets(),
            Ipv6Addr::new(0x2001, 0xdb8, 197, 0, 0, 0, 0, 1).octets(),
            64,
        ),
    }
    .udp(40000, 4242);
    let mut payload = [0u8; 20];
    payload[..4].copy_from_slice(&id.to_be_bytes());
    let mut frame = Vec::with_capacity(builder.size(payload.len()));
    builder
        .write(&mut frame, &payload)
        .expect("writing to a Vec");
    frame
}

/// An ICMP echo request (a ping) from `source` with identifier and
/// sequence number from `id` (and zeros, as [`datagram`]), untagged.
fn echo_request(source: IpAddr, id: u32) -> Vec<u8> {
    let builder = PacketBuilder::ethernet2(MAC_A, MAC_B);
    let [identifier, sequence] = [(id >> 16) as u16, id as u16];
    let payload = [0u8; 20];
    let mut frame = Vec::new();
    let written = match source {
        IpAddr::V4(source) => builder
            .ipv4(source.octets(), [198, 18, 197, 1], 64)
            .icmpv4_echo_request(identifier, sequence)
            .write(&mut frame, &payload),
        IpAddr::V6(source) => builder
            .ipv6(
                source.octets(),
                Ipv6Addr::new(0x2001, 0xdb8, 197, 0, 0, 0, 0, 1).octets(),
                64,
            )
            .icmpv6_echo_request(identifier, sequence)
            .write(&mut frame, &payload),
    };
    written.expect("writing to a Vec");
    frame
}

/// `frame` (untagged) with 802.1Q tags of `vlans` (outermost first) after
/// its MAC addresses; the outer tag has priority 5.
fn tagged(frame: &[u8], vlans: &[u16]) -> Vec<u8> {
    let (addresses, rest) = frame.split_at(12);
    let mut out = addresses.to_vec();
    for (index, vlan) in vlans.iter().enumerate() {
        let priority = if index == 0 { 5 << 13 } else { 0 };
        out.extend_from_slice(&0x8100u16.to_be_bytes());
        out.extend_from_slice(&(priority | vlan).to_be_bytes());
    }
    out.extend_from_slice(rest);
    out
}

/// The frame the bridge sends for `frame` on VLAN `from`: the same bytes
/// with the other VLAN id in the outer tag.
fn forwarded(frame: &[u8], from: u16) -> Vec<u8> {
    let to = if from == VLANS[0] { VLANS[1] } else { VLANS[0] };
    let mut out = frame.to_vec();
    let control = u16::from_be_bytes([out[14], out[15]]);
    out[14..16].copy_from_slice(&((control & !0x0fff) | to).to_be_bytes());
    out
}

/// The trunk port: sends frames to the device, collects what it sends.
struct Trunk {
    socket: UdpSocket,
    /// Every frame received so far, with how many times.
    received: HashMap<Vec<u8>, usize>,
    marker_id: u32,
}

impl Trunk {
    fn new(socket: UdpSocket) -> Self {
        socket
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("setting a timeout");
        Self {
            socket,
            received: HashMap::new(),
            marker_id: u32::MAX,
        }
    }

    /// Sends `frames`, then an unlisted marker frame, and receives until
    /// the marker comes back: the device handles frames in order, so by
    /// then it has decided every one before it. Returns the marker's
    /// forwarded frame.
    fn send_window(&mut self, frames: &[Vec<u8>]) -> Vec<u8> {
        for frame in frames {
            self.socket.send(frame).expect("sending a frame");
        }
        self.marker_id -= 1;
        let marker = tagged(
            &datagram(IpAddr::V4(Ipv4Addr::new(198, 19, 255, 254)), self.marker_id),
            &[VLANS[0]],
        );
        self.socket.send(&marker).expect("sending the marker");
        let expected = forwarded(&marker, VLANS[0]);
        let mut buffer = [0u8; 2048];
        // Bounded: every frame of the window and the marker, and as many
        // untagged ones (the device's own answers over UDP, the tap's
        // frames), which are not the bridge's and are passed over.
        let (mut tagged_frames, mut untagged_frames) = (0, 0);
        while tagged_frames <= frames.len() && untagged_frames < UNTAGGED_AT_MOST {
            let len = match self.socket.recv(&mut buffer) {
                Ok(len) => len,
                Err(error)
                    if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) =>
                {
                    panic!("the marker frame did not come back")
                }
                Err(error) => panic!("receiving: {error}"),
            };
            let frame = buffer[..len].to_vec();
            if frame.get(12..14) != Some(&[0x81, 0x00]) {
                untagged_frames += 1;
                continue;
            }
            if frame == expected {
                return frame;
            }
            *self.received.entry(frame).or_default() += 1;
            tagged_frames += 1;
        }
        panic!("more frames came back than were sent");
    }
}

/// Random addresses inside the entries of `list`, `count` of each family
/// that the list has, and as many unlisted ones from the benchmarking
/// ranges (checked with the device: none a false positive).
fn sources(
    list: &[IpNet],
    count: usize,
    rng: &mut StdRng,
    client: &mut DeviceClient<std::os::unix::net::UnixStream>,
) -> (Vec<IpAddr>, Vec<IpAddr>) {
    let inside = |net: &IpNet, rng: &mut StdRng| -> IpAddr {
        match net {
            IpNet::V4(net) => {
                let host = u32::MAX.checked_shr(net.prefix_len().into()).unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from(
                    u32::from(net.network()) | (rng.random::<u32>() & host),
                ))
            }
            IpNet::V6(net) => {
                let host = u128::MAX.checked_shr(net.prefix_len().into()).unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(
                    u128::from(net.network()) | (rng.random::<u128>() & host),
                ))
            }
        }
    };
    let listed: Vec<IpAddr> = (0..count)
        .map(|index| {
            let family_v6 = index % 2 == 1;
            loop {
                let net = list[rng.random_range(0..list.len())];
                if net.addr().is_ipv6() == family_v6 {
                    return inside(&net, rng);
                }
            }
        })
        .collect();
    let mut unlisted = Vec::new();
    while unlisted.len() < count {
        let candidates: Vec<IpAddr> = (0..32)
            .map(|index| {
                if index % 2 == 0 {
                    IpAddr::V4(Ipv4Addr::from(
                        0xc612_0000 | (rng.random::<u32>() & 0x1_fffe),
                    ))
                } else {
                    let host = rng.random::<u128>() >> 32;
                    IpAddr::V6(Ipv6Addr::from((0x2001_0db8u128 << 96) | host))
                }
            })
            .collect();
        let items: Vec<Item> = candidates
            .iter()
            .map(|&address| Item::Net(host_prefix(address)))
            .collect();
        let present = client.check_batch(&items).expect("checking candidates");
        unlisted.extend(
            candidates
                .into_iter()
                .zip(present)
                .filter(|&(_, present)| !present)
                .map(|(address, _)| address),
        );
    }
    unlisted.truncate(count);
    (listed, unlisted)
}

fn host_prefix(address: IpAddr) -> Prefix {
    match address {
        IpAddr::V4(address) => Prefix::V4 {
            address: address.octets(),
            len: 32,
        },
        IpAddr::V6(address) => Prefix::V6 {
            address: address.octets(),
            len: 128,
        },
    }
}

fn count(frames: &[&Vec<u8>]) -> FrameCount {
    FrameCount {
        frames: frames.len() as u64,
        bytes: frames.iter().map(|frame| frame.len() as u64).sum(),
    }
}

#[test]
fn the_bridge_drops_every_listed_source_and_forwards_every_other_frame() {
    let elf = firmware_elf_with_update_key();
    let namespace = TapNamespace::new();
    let trunk_socket = namespace.socket("127.0.0.1:0");
    let free = namespace
        .socket("127.0.0.1:0")
        .local_addr()
        .expect("a free port in the namespace")
        .port();
    let (mut qemu, uart) =
        Qemu::boot_on_tap_with_trunk(&elf, &namespace.name, TAP, &trunk_socket, free);

    // Spamhaus DROP, IPv4 and IPv6, as one list.
    let lists = repo_root().join("../shared/data/blocklists");
    let mut list = Vec::new();
    for name in ["spamhaus_drop.netset", "spamhaus_dropv6.txt"] {
        let path = lists.join(name);
        let parsed = parse_file(&path, ParseOptions::default()).expect("the shared list parses");
        list.extend(parsed.entries.iter().map(|entry| entry.net));
    }
    let text: String = list.iter().map(|net| format!("{net}\n")).collect();
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let combined = scratch.path().join("spamhaus_drop_v4_v6.txt");
    std::fs::write(&combined, text).expect("writing the combined list");
    let key_file = key_file(scratch.path());
    let import = namespace.cfctl(
        &key_file,
        &["import", combined.to_str().expect("a UTF-8 path")],
    );
    assert!(import.status.success(), "import over UDP: {import:?}");
    let report: serde_json::Value = serde_json::from_slice(&import.stdout).expect("JSON");
    let unique: std::collections::HashSet<&IpNet> = list.iter().collect();
    assert_eq!(report["device_entries"], unique.len(), "{report}");

    let mut client = DeviceClient::new(uart, Duration::from_secs(5));
    client.hello().expect("hello");
    // The frames so far: the import's datagrams and ARP, untagged.
    let mut expected_traffic = client.traffic().expect("the frame counters");
    let mut rng = StdRng::seed_from_u64(0x0b21_d9e5);
    let (listed, unlisted) = sources(&list, SOURCES / 2, &mut rng, &mut client);

    // Each source sends one frame, on VLAN 10 or 20 in turn: every third
    // a ping, the others a UDP datagram.
    let mut trunk = Trunk::new(trunk_socket);
    let mut sent = Vec::new();
    for (index, (&source, is_listed)) in listed
        .iter()
        .map(|source| (source, true))
        .chain(unlisted.iter().map(|source| (source, false)))
        .enumerate()
    {
        let vlan = VLANS[index % 2];
        let frame = if index % 3 == 0 {
            tagged(&echo_request(source, index as u32), &[vlan])
        } else {
            tagged(&datagram(source, index as u32), &[vlan])
        };
        let family = if source.is_ipv4() {
            &mut expected_traffic.ipv4
        } else {
            &mut expected_traffic.ipv6
        };
        if is_listed {
            family.dropped.add(frame.len());
        } else {
            family.passed.add(frame.len());
        }
        sent.push((frame, vlan, is_listed));
    }
    // Listed and unlisted interleaved.
    let order: Vec<usize> = {
        let mut order: Vec<usize> = (0..sent.len()).collect();
        rand::seq::SliceRandom::shuffle(order.as_mut_slice(), &mut rng);
        order
    };
    let mut markers = Vec::new();
    for window in order.chunks(WINDOW) {
        let frames: Vec<Vec<u8>> = window.iter().map(|&index| sent[index].0.clone()).collect();
        markers.push(trunk.send_window(&frames));
    }
    for (frame, vlan, is_listed) in &sent {
        let times = trunk.received.remove(&forwarded(frame, *vlan)).unwrap_or(0);
        let expected = usize::from(!is_listed);
        assert_eq!(
            times, expected,
            "times forwarded: {frame:02x?} on VLAN {vlan}"
        );
    }
    assert!(
        trunk.received.is_empty(),
        "frames no one sent: {:?}",
        trunk.received.keys()
    );

    // Beyond plain IP: two tags, a cut header, ARP, untagged, VLAN 30.
    let listed_v4 = *listed
        .iter()
        .find(|source| source.is_ipv4())
        .expect("an IPv4 source");
    let unlisted_v4 = *unlisted
        .iter()
        .find(|source| source.is_ipv4())
        .expect("an IPv4 source");
    let double_listed = tagged(&datagram(listed_v4, 1), &[VLANS[0], 7]);
    let double_unlisted = tagged(&datagram(unlisted_v4, 2), &[VLANS[0], 7]);
    // An IPv4 header that says it is 60 bytes long, in a shorter frame.
    let mut cut = tagged(&datagram(unlisted_v4, 3), &[VLANS[1]]);
    cut[18] = 0x4f;
    let mut arp = tagged(&datagram(unlisted_v4, 4), &[VLANS[1]]);
    arp[16..18].copy_from_slice(&0x0806u16.to_be_bytes());
    let untagged = datagram(unlisted_v4, 5);
    let other_vlan = tagged(&datagram(unlisted_v4, 6), &[30]);
    let frames = [
        double_listed.clone(),
        double_unlisted.clone(),
        cut.clone(),
        arp.clone(),
        untagged.clone(),
        other_vlan.clone(),
    ];
    markers.push(trunk.send_window(&frames));
    let mut came_back: Vec<Vec<u8>> = trunk.received.drain().map(|(frame, _)| frame).collect();
    came_back.sort();
    let mut expected_back = vec![
        forwarded(&double_unlisted, VLANS[0]),
        forwarded(&arp, VLANS[1]),
    ];
    expected_back.sort();
    assert_eq!(came_back, expected_back, "what crossed besides plain IP");
    expected_traffic.ipv4.dropped.add(double_listed.len());
    expected_traffic.ipv4.passed.add(double_unlisted.len());
    expected_traffic.ipv4.malformed.add(cut.len());
    expected_traffic.non_ip.add(arp.len());
    let ignored = count(&[&untagged, &other_vlan]);
    expected_traffic.ignored.frames += ignored.frames;
    expected_traffic.ignored.bytes += ignored.bytes;
    // Every marker is an unlisted IPv4 datagram, passed.
    let markers: Vec<&Vec<u8>> = markers.iter().collect();
    let marker_count = count(&markers);
    expected_traffic.ipv4.passed.frames += marker_count.frames;
    expected_traffic.ipv4.passed.bytes += marker_count.bytes;

    assert_eq!(
        client.traffic().expect("the frame counters"),
        expected_traffic
    );
    drop(client);
    let log = qemu.stop_and_decode_log(&elf);
    assert!(!log.contains("no LAN9118"), "{log}");
    drop(qemu);
    drop(namespace);
}

/// Networks both data planes list in the agreement test.
fn agreement_list() -> Vec<IpNet> {
    [
        "198.18.64.0/18",
        "198.19.7.0/24",
        "198.19.200.17/32",
        "2001:db8:40::/48",
        "2001:db8:9:1::/64",
        "2001:db8::77/128",
    ]
    .iter()
    .map(|net| net.parse().expect("a network"))
    .collect()
}

/// The agreement test's frames, all on VLAN 10 under an 802.1Q outer tag
/// (so that the bridge takes each one): datagrams from listed and
/// unlisted sources under one tag, two tags, and an 802.1ad tag inside
/// the outer one, and `MUTANTS` mutations of each
/// (one to three bytes past the outer tag set at random, and one in three
/// also cut short, never below 60 bytes, which no one pads), without
/// duplicates.
fn agreement_frames(rng: &mut StdRng) -> Vec<Vec<u8>> {
    const MUTANTS: usize = 24;
    let sources: Vec<IpAddr> = [
        "198.18.64.1",
        "198.18.127.254",
        "198.19.7.9",
        "198.19.200.17",
        "198.19.200.18",
        "198.18.1.1",
        "2001:db8:40::1",
        "2001:db8:40:ffff::9",
        "2001:db8:9:1::1",
        "2001:db8::77",
        "2001:db8::78",
        "2001:db8:41::1",
    ]
    .iter()
    .map(|address| address.parse().expect("an address"))
    .collect();
    let mut frames = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut keep = |frame: Vec<u8>, frames: &mut Vec<Vec<u8>>| {
        if seen.insert(frame.clone()) {
            frames.push(frame);
        }
    };
    for (index, &source) in sources.iter().enumerate() {
        let plain = datagram(source, index as u32);
        let mut inner_ad = tagged(&plain, &[VLANS[0], 7]);
        inner_ad[16..18].copy_from_slice(&0x88a8u16.to_be_bytes());
        for base in [
            tagged(&plain, &[VLANS[0]]),
            tagged(&plain, &[VLANS[0], 7]),
            inner_ad,
        ] {
            keep(base.clone(), &mut frames);
            for _ in 0..MUTANTS {
                let mut mutant = base.clone();
                for _ in 0..rng.random_range(1..=3) {
                    let at = rng.random_range(16..mutant.len().min(80));
                    mutant[at] = rng.random();
                }
                if rng.random_range(0..3) == 0 && mutant.len() > 60 {
                    let len = rng.random_range(60..mutant.len());
                    mutant.truncate(len);
                }
                keep(mutant, &mut frames);
            }
        }
    }
    frames
}

#[test]
fn the_firmware_bridge_and_the_xdp_program_decide_every_frame_alike() {
    let list = agreement_list();
    let mut xdp = blocklist_with(&list);
    // As cfctl attaches it (the bridge drops malformed frames too).
    xdp.live().set_malformed_action(MalformedAction::Drop);
    let elf = firmware_elf();
    let (mut qemu, stream, port) = Qemu::boot_with_ethernet(&elf);
    let mut client = DeviceClient::new(stream, Duration::from_secs(5));
    client.hello().expect("hello");
    let items: Vec<Item> = list
        .iter()
        .map(|net| {
            Item::Net(match net {
                IpNet::V4(net) => Prefix::V4 {
                    address: net.addr().octets(),
                    len: net.prefix_len(),
                },
                IpNet::V6(net) => Prefix::V6 {
                    address: net.addr().octets(),
                    len: net.prefix_len(),
                },
            })
        })
        .collect();
    assert_eq!(client.add_batch(&items).expect("listing"), list.len());

    let mut rng = StdRng::seed_from_u64(0xa9_2ee5);
    let frames = agreement_frames(&mut rng);
    assert!(frames.len() > 800, "{} frames", frames.len());
    let mut trunk = Trunk::new(port);
    let mut markers = Vec::new();
    for window in frames.chunks(WINDOW) {
        markers.push(trunk.send_window(window));
    }
    let mut passed_by_xdp = 0;
    for frame in &frames {
        let action = xdp.test_run(frame, 1).expect("a test run").action;
        let forwarded_times = trunk
            .received
            .remove(&forwarded(frame, VLANS[0]))
            .unwrap_or(0);
        assert!(
            matches!(
                (action, forwarded_times),
                (XdpAction::Pass, 1) | (XdpAction::Drop, 0)
            ),
            "XDP {action:?}, the bridge forwarded it {forwarded_times} times: {frame:02x?}"
        );
        passed_by_xdp += usize::from(action == XdpAction::Pass);
    }
    assert!(trunk.received.is_empty(), "frames no one sent came back");
    assert!(
        passed_by_xdp > 0 && passed_by_xdp < frames.len(),
        "the corpus has frames of both verdicts ({passed_by_xdp} passed)"
    );

    // The counters, but for the markers (unlisted IPv4, passed), which
    // only the bridge saw.
    let mut traffic = client.traffic().expect("the frame counters");
    let markers: Vec<&Vec<u8>> = markers.iter().collect();
    let marker_count = count(&markers);
    traffic.ipv4.passed.frames -= marker_count.frames;
    traffic.ipv4.passed.bytes -= marker_count.bytes;
    let counters = xdp.maps().counters().expect("the XDP counters");
    let xdp_count = |outcome, family| {
        let counter = counters.get(outcome, family);
        FrameCount {
            frames: counter.packets,
            bytes: counter.bytes,
        }
    };
    let by_family = |family| filter_core::protocol::FamilyTraffic {
        passed: xdp_count(Outcome::Passed, family),
        dropped: xdp_count(Outcome::Dropped, family),
        malformed: xdp_count(Outcome::Malformed, family),
    };
    let from_xdp = Traffic {
        ipv4: by_family(Family::Ipv4),
        ipv6: by_family(Family::Ipv6),
        non_ip: xdp_count(Outcome::NonIp, Family::Other),
        malformed: xdp_count(Outcome::Malformed, Family::Other),
        ignored: FrameCount::default(),
    };
    assert_eq!(
        traffic, from_xdp,
        "the bridge's counters and the XDP program's"
    );
    drop(client);
    qemu.stop_and_decode_log(&elf);
}
