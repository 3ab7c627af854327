//! Helpers shared by the integration tests: the root check, frames built
//! with etherparse, keys, and the counter check; test networks
//! ([`netns`]), the cfctl binary ([`cli`]), the QEMU firmware
//! ([`qemu`]), a tap into it from a namespace ([`tap`]) and a serial line
//! in front of it ([`serial_line`]), and raw
//! frames sent from a namespace ([`raw_frames`]); binaries of Debian
//! packages unpacked for the tests ([`unpacked_bin`]).

#![allow(dead_code)] // each test binary uses its own subset

pub mod agent;
pub mod cli;
pub mod feed_server;
pub mod locate;
pub mod netns;
pub mod qemu;
pub mod raw_frames;
pub mod serial_line;
pub mod tap;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use cfctl::plan::{KeyPlan, PlanLimits};
use cfctl::xdp::test_run::XdpAction;
use cfctl::xdp::{Counters, FilterProgram, LoadOptions};
use cfctl::{Family, FilterShape, Outcome, Setting};
use cfxdp::Counter;
use etherparse::{ip_number, IpHeaders, Ipv4Header, Ipv6Header, PacketBuilder, VlanId};
use filter_core::NetKey;
use ipnet::IpNet;

/// Binary `name` of Debian package `package`, where `./x setup` unpacks it
/// (target/PACKAGE/usr/bin); the test fails if it is missing.
pub fn unpacked_bin(package: &str, name: &str) -> std::path::PathBuf {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target")
        .join(package)
        .join("usr/bin")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: run ./x setup",
        path.display()
    );
    path
}

/// Fails the test, with a clear message, unless it runs as root (loading
/// BPF programs needs it; CI runs as root).
pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "this test loads XDP programs into the kernel and must run as root (euid is {euid})"
    );
}

pub const SOURCE_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 1];
pub const DESTINATION_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 2];
pub const TARGET_V4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
pub const TARGET_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
pub const PAYLOAD: &[u8] = b"cuckoo";

/// VLAN tags in front of the IP header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tags {
    None,
    /// One 802.1Q tag.
    One,
    /// An 802.1ad outer and an 802.1Q inner tag.
    Two,
    /// `count` priority tags (VLAN id 0, which the kernel strips one after
    /// another): the outer one with the tag protocol `outer` (0x8100 or
    /// 0x88a8), the others 802.1Q.
    Priority {
        count: usize,
        outer: u16,
    },
}

/// 802.1Q and 802.1ad, the tag protocols the kernel strips.
pub const TAG_PROTOCOLS: [u16; 2] = [0x8100, 0x88a8];

/// A UDP frame from `source` to TARGET_V4 or TARGET_V6.
pub fn udp_frame(source: IpAddr, tags: Tags) -> Vec<u8> {
    let ip = match source {
        IpAddr::V4(source) => IpHeaders::Ipv4(
            Ipv4Header::new(0, 64, ip_number::UDP, source.octets(), TARGET_V4.octets())
                .expect("an empty payload fits"),
            Default::default(),
        ),
        IpAddr::V6(source) => IpHeaders::Ipv6(
            Ipv6Header {
                next_header: ip_number::UDP,
                hop_limit: 64,
                source: source.octets(),
                destination: TARGET_V6.octets(),
                ..Default::default()
            },
            Default::default(),
        ),
    };
    let ethernet = PacketBuilder::ethernet2(SOURCE_MAC, DESTINATION_MAC);
    let vlan = |id| VlanId::try_new(id).expect("a valid VLAN id");
    let builder = match tags {
        Tags::None | Tags::Priority { .. } => ethernet.ip(ip),
        Tags::One => ethernet.single_vlan(vlan(7)).ip(ip),
        Tags::Two => ethernet.double_vlan(vlan(100), vlan(7)).ip(ip),
    }
    .udp(40000, 4242);
    let mut frame = Vec::with_capacity(builder.size(PAYLOAD.len()));
    builder
        .write(&mut frame, PAYLOAD)
        .expect("writing to a Vec");
    match tags {
        Tags::Priority { count, outer } => with_priority_tags(&frame, count, outer),
        _ => frame,
    }
}

/// `frame` (untagged) with `count` priority tags after its MAC addresses,
/// the outer one of protocol `outer`.
pub fn with_priority_tags(frame: &[u8], count: usize, outer: u16) -> Vec<u8> {
    let (addresses, rest) = frame.split_at(12);
    let mut tagged = addresses.to_vec();
    for index in 0..count {
        let protocol = if index == 0 { outer } else { 0x8100 };
        tagged.extend_from_slice(&protocol.to_be_bytes());
        tagged.extend_from_slice(&[0, 0]);
    }
    tagged.extend_from_slice(rest);
    tagged
}

/// The key of `address/prefix_len`.
pub fn net_key(address: IpAddr, prefix_len: u8) -> NetKey {
    match address {
        IpAddr::V4(address) => NetKey::ipv4_octets(address.octets(), prefix_len),
        IpAddr::V6(address) => NetKey::ipv6_octets(address.octets(), prefix_len),
    }
    .expect("a valid prefix length")
}

pub fn family_of(address: IpAddr) -> Family {
    match address {
        IpAddr::V4(_) => Family::Ipv4,
        IpAddr::V6(_) => Family::Ipv6,
    }
}

pub const BUCKETS: usize = 1 << 12;
pub const SEED: u64 = 0x0123_4567_89ab_cdef;

/// `address/prefix_len` as an entry.
pub fn net(address: IpAddr, prefix_len: u8) -> IpNet {
    IpNet::new(address, prefix_len).expect("a valid prefix length")
}

/// A loaded blocklist with 16-bit fingerprints, `BUCKETS` buckets, `SEED`,
/// listing `entries` as the control plane lists them: planned with the
/// default limits and installed as a whole table.
pub fn blocklist_with(entries: &[IpNet]) -> FilterProgram {
    require_root();
    let options = LoadOptions {
        seed: SEED,
        bucket_count: BUCKETS,
        ..LoadOptions::for_capacity(FilterShape::Fingerprint16, 1000).expect("a small filter")
    };
    let mut blocklist = FilterProgram::load(&options).expect("loading the blocklist program");
    let plan = KeyPlan::build(entries.iter().copied(), PlanLimits::default()).expect("a plan");
    blocklist.live().install(&plan).expect("filling the filter");
    blocklist
}

/// Runs `frame` through the program once and checks the verdict and that
/// exactly the counter of `outcome`/`family` went up by one packet of the
/// frame's length.
pub fn expect_verdict(
    blocklist: &FilterProgram,
    frame: &[u8],
    action: XdpAction,
    outcome: Outcome,
    family: Family,
) {
    let before = blocklist.maps().counters().expect("reading counters");
    let run = blocklist.test_run(frame, 1).expect("BPF_PROG_TEST_RUN");
    let after = blocklist.maps().counters().expect("reading counters");
    assert_eq!(
        run.action,
        action,
        "verdict for a {}-byte frame",
        frame.len()
    );
    assert_counted(&before, &after, outcome, family, frame.len());
}

/// Checks that only `outcome`/`family` moved between `before` and
/// `after`, by one packet of `len` bytes.
pub fn assert_counted(
    before: &Counters,
    after: &Counters,
    outcome: Outcome,
    family: Family,
    len: usize,
) {
    for &counted_outcome in Outcome::ALL {
        for &counted_family in Family::ALL {
            let (old, new) = (
                before.get(counted_outcome, counted_family),
                after.get(counted_outcome, counted_family),
            );
            let expected = if (counted_outcome, counted_family) == (outcome, family) {
                Counter {
                    packets: old.packets + 1,
                    bytes: old.bytes + len as u64,
                }
            } else {
                old
            };
            assert_eq!(
                new, expected,
                "counter {counted_outcome:?}/{counted_family:?} for a {len}-byte frame expected to count {outcome:?}/{family:?}"
            );
        }
    }
}

/// Runs `body` while another thread calls `probe` over and over, and
/// returns what `body` returns once the prober has stopped. The prober
/// stops when `body` ends, also when it panics (which then goes on), so
/// a failed assertion never leaves a test waiting for it.
pub fn while_probing<T>(mut probe: impl FnMut() + Send, body: impl FnOnce() -> T) -> T {
    use std::sync::atomic::{AtomicBool, Ordering};
    /// Tells the prober to stop when dropped.
    struct StopOnDrop<'a>(&'a AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !stop.load(Ordering::SeqCst) {
                probe();
            }
        });
        let _stop = StopOnDrop(&stop);
        body()
    })
}
