//! The program's sampled drops on frames given to BPF_PROG_TEST_RUN: each
//! event's contents (address, family, outcome, the prefix length that
//! hit, the frame's length and first bytes cut at the setting), no event
//! for a passed packet, sampling switched off and on at run time, the
//! token bucket's bound, the one-in-N draw, and a full ring (events lost
//! and counted, verdicts and counters untouched). Needs root.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cfctl::xdp::test_run::XdpAction;
use cfctl::xdp::{DropEvents, FilterProgram, PinDir, Sampling};
use cfctl::{Family, MalformedAction, Mode, Outcome, Policy};
use cfxdp::{DropEvent, MAX_EVENT_FRAME_BYTES, NO_PREFIX};
use common::netns::{ensure_bpffs, PinDir as TestPins};
use common::{blocklist_with, net, udp_frame, Tags, DESTINATION_MAC, SOURCE_MAC, TARGET_V4};
use etherparse::PacketBuilder;

const LISTED_V4: Ipv4Addr = Ipv4Addr::new(198, 18, 7, 9);
const LISTED_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 7, 0, 0, 0, 0, 9);
const UNLISTED_V4: Ipv4Addr = Ipv4Addr::new(198, 19, 7, 9);

/// Every drop sampled, as fast as the tests send them.
const EVERY_DROP: Sampling = Sampling {
    rate: 1_000_000,
    burst: 1_000_000,
    one_in: 1,
    frame_bytes: MAX_EVENT_FRAME_BYTES as u32,
};

/// A loaded blocklist listing 198.18.7.0/24 and 2001:db8:7::/48, pinned
/// so that its ring can be read as cfctl reads it.
struct Sampled {
    blocklist: FilterProgram,
    events: DropEvents,
    _pins: TestPins,
}

impl Sampled {
    fn new(sampling: Sampling) -> Self {
        static PINNED: AtomicUsize = AtomicUsize::new(0);
        let mut blocklist = blocklist_with(&[
            net(IpAddr::V4(Ipv4Addr::new(198, 18, 7, 0)), 24),
            net(
                IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 7, 0, 0, 0, 0, 0)),
                48,
            ),
        ]);
        blocklist.maps().set_sampling(&sampling);
        ensure_bpffs();
        let pins = TestPins(PathBuf::from(format!(
            "/sys/fs/bpf/cfxdp-sampling-{}-{}",
            std::process::id(),
            PINNED.fetch_add(1, Ordering::Relaxed)
        )));
        std::fs::create_dir_all(&pins.0).expect("creating the pin directory");
        blocklist.pin(&pins.0).expect("pinning");
        let events = DropEvents::open(&PinDir::new(&pins.0))
            .expect("opening the ring")
            .expect("a pinned program");
        Self {
            blocklist,
            events,
            _pins: pins,
        }
    }

    /// Runs `frame` through the program `repeat` times; its verdict.
    fn run(&self, frame: &[u8], repeat: u32) -> XdpAction {
        self.blocklist
            .test_run(frame, repeat)
            .expect("BPF_PROG_TEST_RUN")
            .action
    }

    /// The events waiting in the ring.
    fn events(&mut self) -> Vec<DropEvent> {
        let mut events = Vec::new();
        self.events
            .poll(Duration::ZERO, |event| events.push(*event))
            .expect("reading the ring");
        events
    }

    fn samplers(&self) -> cfctl::xdp::SamplerCounts {
        self.blocklist
            .maps()
            .sampler_counts()
            .expect("reading the samplers")
    }
}

/// A UDP frame from `source` carrying `payload` bytes.
fn frame_with_payload(source: IpAddr, payload: usize) -> Vec<u8> {
    let builder = PacketBuilder::ethernet2(SOURCE_MAC, DESTINATION_MAC);
    let builder = match source {
        IpAddr::V4(source) => builder.ipv4(source.octets(), TARGET_V4.octets(), 64),
        IpAddr::V6(source) => builder.ipv6(source.octets(), common::TARGET_V6.octets(), 64),
    };
    let builder = builder.udp(40000, 9);
    let payload: Vec<u8> = (0..payload).map(|byte| byte as u8).collect();
    let mut frame = Vec::with_capacity(builder.size(payload.len()));
    builder
        .write(&mut frame, &payload)
        .expect("building a frame");
    frame
}

fn only(events: Vec<DropEvent>) -> DropEvent {
    assert_eq!(events.len(), 1, "one event for one drop: {events:?}");
    events[0]
}

#[test]
fn an_ipv4_drop_carries_its_address_prefix_length_and_first_bytes() {
    let mut sampled = Sampled::new(EVERY_DROP);
    let frame = frame_with_payload(IpAddr::V4(LISTED_V4), 300);
    assert_eq!(sampled.run(&frame, 1), XdpAction::Drop);
    let event = only(sampled.events());
    let mut address = [0; 16];
    address[..4].copy_from_slice(&LISTED_V4.octets());
    assert_eq!(event.address, address);
    assert_eq!(event.family, Family::Ipv4 as u8);
    assert_eq!(event.outcome, Outcome::Dropped as u8);
    assert_eq!(event.prefix_len, 24);
    assert_eq!(event.frame_len as usize, frame.len());
    assert_eq!(event.captured as usize, MAX_EVENT_FRAME_BYTES);
    assert_eq!(event.frame[..], frame[..MAX_EVENT_FRAME_BYTES]);
    assert_ne!(event.timestamp_ns, 0);
    let samplers = sampled.samplers();
    assert_eq!(
        (samplers.sampled, samplers.lost, samplers.skipped),
        (1, 0, 0)
    );
}

#[test]
fn an_ipv6_drop_carries_all_sixteen_bytes_and_its_prefix_length() {
    let mut sampled = Sampled::new(EVERY_DROP);
    let frame = frame_with_payload(IpAddr::V6(LISTED_V6), 8);
    assert_eq!(sampled.run(&frame, 1), XdpAction::Drop);
    let event = only(sampled.events());
    assert_eq!(event.address, LISTED_V6.octets());
    assert_eq!(event.family, Family::Ipv6 as u8);
    assert_eq!(event.prefix_len, 48);
    // A frame shorter than the setting is carried whole.
    assert!(frame.len() < MAX_EVENT_FRAME_BYTES);
    assert_eq!(event.captured as usize, frame.len());
    assert_eq!(event.frame[..frame.len()], frame[..]);
    assert_eq!(event.frame_len as usize, frame.len());
}

#[test]
fn frames_are_cut_at_the_frame_bytes_setting() {
    let frame = frame_with_payload(IpAddr::V4(LISTED_V4), 300);
    for frame_bytes in [0, 1, 14, 64, 127] {
        let mut sampled = Sampled::new(Sampling {
            frame_bytes,
            ..EVERY_DROP
        });
        sampled.run(&frame, 1);
        let event = only(sampled.events());
        assert_eq!(u32::from(event.captured), frame_bytes);
        let captured = frame_bytes as usize;
        assert_eq!(event.frame[..captured], frame[..captured]);
        assert_eq!(event.frame_len as usize, frame.len(), "the original length");
    }
}

#[test]
fn passed_packets_are_never_sampled() {
    let mut sampled = Sampled::new(EVERY_DROP);
    let passed = udp_frame(IpAddr::V4(UNLISTED_V4), Tags::None);
    assert_eq!(sampled.run(&passed, 100), XdpAction::Pass);
    assert!(sampled.events().is_empty());
    assert_eq!(sampled.samplers(), Default::default());
}

#[test]
fn would_drops_in_monitor_mode_and_allow_policy_drops_are_sampled() {
    let mut sampled = Sampled::new(EVERY_DROP);
    sampled.blocklist.maps().set_mode(Mode::Monitor);
    let listed = udp_frame(IpAddr::V4(LISTED_V4), Tags::None);
    assert_eq!(sampled.run(&listed, 1), XdpAction::Pass);
    let event = only(sampled.events());
    assert_eq!(event.outcome, Outcome::WouldDrop as u8);
    assert_eq!(event.prefix_len, 24);

    // Under the allow policy no entry decides: no prefix length.
    sampled.blocklist.maps().set_mode(Mode::Enforce);
    sampled.blocklist.maps().set_policy(Policy::Allow);
    let unlisted = udp_frame(IpAddr::V4(UNLISTED_V4), Tags::None);
    assert_eq!(sampled.run(&unlisted, 1), XdpAction::Drop);
    let event = only(sampled.events());
    assert_eq!(event.outcome, Outcome::Dropped as u8);
    assert_eq!(event.prefix_len, NO_PREFIX);
}

#[test]
fn malformed_drops_are_sampled_without_an_address() {
    let mut sampled = Sampled::new(EVERY_DROP);
    sampled
        .blocklist
        .maps()
        .set_malformed_action(MalformedAction::Drop);
    // An IPv4 frame cut inside its header.
    let frame = udp_frame(IpAddr::V4(LISTED_V4), Tags::None)[..20].to_vec();
    assert_eq!(sampled.run(&frame, 1), XdpAction::Drop);
    let event = only(sampled.events());
    assert_eq!(event.outcome, Outcome::Malformed as u8);
    assert_eq!(event.address, [0; 16]);
    assert_eq!(event.prefix_len, NO_PREFIX);
    assert_eq!(event.captured as usize, frame.len());
}

#[test]
fn sampling_switches_off_and_on_at_run_time() {
    let mut sampled = Sampled::new(EVERY_DROP);
    let listed = udp_frame(IpAddr::V4(LISTED_V4), Tags::None);
    sampled.run(&listed, 5);
    assert_eq!(sampled.events().len(), 5);
    sampled.blocklist.maps().set_sampling(&Sampling {
        rate: 0,
        ..EVERY_DROP
    });
    assert_eq!(sampled.run(&listed, 5), XdpAction::Drop);
    assert!(
        sampled.events().is_empty(),
        "no event while sampling is off"
    );
    let samplers = sampled.samplers();
    assert_eq!(
        (samplers.sampled, samplers.skipped),
        (5, 0),
        "off costs nothing"
    );
    sampled.blocklist.maps().set_sampling(&EVERY_DROP);
    sampled.run(&listed, 5);
    assert_eq!(sampled.events().len(), 5);
    let read_back = sampled.blocklist.maps().sampling();
    assert_eq!(read_back, EVERY_DROP);
}

#[test]
fn the_bucket_bounds_the_samples_and_counts_the_rest() {
    let mut sampled = Sampled::new(Sampling {
        rate: 1,
        burst: 3,
        ..EVERY_DROP
    });
    let listed = udp_frame(IpAddr::V4(LISTED_V4), Tags::None);
    let started = Instant::now();
    assert_eq!(sampled.run(&listed, 50), XdpAction::Drop);
    // One token a second refills: a slow machine may earn one more per
    // second the run took.
    let earned = started.elapsed().as_secs() + 1;
    let samplers = sampled.samplers();
    assert!(
        (3..=3 + earned).contains(&samplers.sampled),
        "a full bucket of 3, then one a second: {samplers:?}"
    );
    assert_eq!(samplers.sampled + samplers.skipped, 50);
    assert_eq!(sampled.events().len() as u64, samplers.sampled);
}

#[test]
fn one_in_n_samples_about_one_drop_in_n() {
    let mut sampled = Sampled::new(Sampling {
        one_in: 10,
        ..EVERY_DROP
    });
    let listed = udp_frame(IpAddr::V4(LISTED_V4), Tags::None);
    sampled.run(&listed, 10_000);
    let samplers = sampled.samplers();
    // Binomial(10^4, 0.1): mean 1,000, standard deviation 30.
    assert!(
        (800..=1200).contains(&samplers.sampled),
        "one in ten of 10,000: {samplers:?}"
    );
    assert_eq!(samplers.sampled + samplers.skipped, 10_000);
    assert_eq!(sampled.events().len() as u64, samplers.sampled);
}

#[test]
fn a_full_ring_loses_events_counted_and_nothing_else() {
    let mut sampled = Sampled::new(EVERY_DROP);
    let listed = frame_with_payload(IpAddr::V4(LISTED_V4), 300);
    let before = sampled.blocklist.maps().counters().expect("counters");
    let sent = 5_000u64;
    assert_eq!(sampled.run(&listed, sent as u32), XdpAction::Drop);
    let after = sampled.blocklist.maps().counters().expect("counters");
    let dropped = after.get(Outcome::Dropped, Family::Ipv4).packets
        - before.get(Outcome::Dropped, Family::Ipv4).packets;
    assert_eq!(dropped, sent, "every packet dropped and counted");
    let samplers = sampled.samplers();
    assert!(
        samplers.lost > 0,
        "the ring holds fewer than {sent}: {samplers:?}"
    );
    assert_eq!(samplers.sampled + samplers.lost, sent);
    assert_eq!(sampled.events().len() as u64, samplers.sampled);
    // Read, the ring takes events again.
    sampled.run(&listed, 1);
    assert_eq!(sampled.events().len(), 1);
    assert_eq!(
        sampled.samplers().lost,
        samplers.lost,
        "nothing lost once read"
    );
}
