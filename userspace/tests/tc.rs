//! The blocklist on the TC hook (tcx links, and clsact filters as on
//! kernels without them): real traffic through a veth
//! whose peer end is in a namespace the test creates, on ingress and on
//! egress, beside other programs on the same hook and beside an XDP
//! program that holds the interface's XDP hook (one of ours, and
//! xdp-tools' xdp-filter); the TC programs' verdicts
//! on exact frames (BPF_PROG_TEST_RUN) against the XDP program's; and a
//! resize under traffic from a listed source, which never gets through.
//! Only 198.18.0.0/15 and 2001:db8::/32 addresses are used; namespaces,
//! links and pins are removed by guards even when a test fails. Needs
//! root, iproute2, ping and xdp-tools.

mod common;

use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cfctl::plan::{KeyPlan, PlanLimits};
use cfctl::xdp::program::detach_pinned;
use cfctl::xdp::test_run::{TcAction, XdpAction};
use cfctl::xdp::{AttachMode, AttachPoint, FilterProgram, LoadOptions, TrafficDirection};
use cfctl::{Family, FilterShape, Outcome, Setting};
use common::cli::Cfctl;
use common::netns::{
    check_traffic, ensure_bpffs, receive_until_marker, PinDir, TestNetwork, DATAGRAMS, PINGS, PORT,
};
use common::{blocklist_with, net, require_root, udp_frame, Tags};

const INGRESS: AttachPoint = AttachPoint::Tc(TrafficDirection::Ingress);

/// The shape of [`listing`]'s filter.
const LISTING_SHAPE: FilterShape = FilterShape::Fingerprint16;

/// A loaded blocklist listing `entries`.
fn listing(entries: &[IpAddr]) -> FilterProgram {
    require_root();
    let options = LoadOptions::for_capacity(LISTING_SHAPE, 1000).expect("a small filter");
    let mut blocklist = FilterProgram::load(&options).expect("loading the blocklist programs");
    let nets = entries
        .iter()
        .map(|&address| net(address, host_bits(address)));
    let plan = KeyPlan::build(nets, PlanLimits::default()).expect("a plan");
    blocklist.live().install(&plan).expect("filling the filter");
    blocklist
}

fn host_bits(address: IpAddr) -> u8 {
    if address.is_ipv4() {
        32
    } else {
        128
    }
}

/// A pin directory of its own for this test.
fn pin_dir(name: &str) -> PinDir {
    ensure_bpffs();
    let pins = PinDir(PathBuf::from(format!(
        "/sys/fs/bpf/cftc-test-{}-{name}",
        std::process::id()
    )));
    std::fs::create_dir_all(&pins.0).expect("creating the pin directory");
    pins
}

fn counted(blocklist: &FilterProgram, outcome: Outcome, family: Family) -> u64 {
    blocklist
        .maps()
        .counters()
        .expect("reading counters")
        .get(outcome, family)
        .packets
}

#[test]
fn tc_ingress_drops_listed_sources_and_its_link_outlives_the_loader() {
    let network = TestNetwork::new(192);
    let pins = pin_dir("ingress");
    let link = pins.0.join("link");
    let mut blocklist = listing(&[network.v4(3), network.v6(3)]);
    blocklist
        .attach_pinned(&network.host_link, network.host_index(), INGRESS, &link)
        .expect("attaching to TC ingress");
    check_traffic(&network, true);
    for family in [Family::Ipv4, Family::Ipv6] {
        assert_eq!(
            counted(&blocklist, Outcome::Dropped, family),
            DATAGRAMS + PINGS,
            "{family:?} packets dropped on TC ingress"
        );
    }
    drop(blocklist);
    check_traffic(&network, true);
    // Another program takes the tcx link over in one step, as a resize
    // does: it lists nothing.
    listing(&[])
        .take_over_pinned_link(&link, INGRESS)
        .expect("taking over the tcx link");
    check_traffic(&network, false);
    detach_pinned(&link, INGRESS).expect("detaching the tcx link");
    check_traffic(&network, false);
}

#[test]
fn tc_ingress_hands_what_it_passes_to_the_programs_after_it() {
    let network = TestNetwork::new(193);
    let pins = pin_dir("chain");
    let (listing_link, passing_link) = (pins.0.join("listing"), pins.0.join("passing"));
    let (host, index) = (network.host_link.as_str(), network.host_index());
    let mut listing_blocklist = listing(&[network.v4(3), network.v6(3)]);
    let mut passing_blocklist = listing(&[]);
    listing_blocklist
        .attach_pinned(host, index, INGRESS, &listing_link)
        .expect("attaching the listing blocklist");
    // Attached second, it runs first, and passes every packet on.
    passing_blocklist
        .attach_pinned(host, index, INGRESS, &passing_link)
        .expect("attaching the passing blocklist");
    check_traffic(&network, true);
    assert_eq!(
        counted(&listing_blocklist, Outcome::Dropped, Family::Ipv4),
        DATAGRAMS + PINGS,
        "IPv4 packets dropped by the program second in the chain"
    );
    // Only the test sends IPv4 (the neighbours are static): every packet
    // the first program passed reached the second.
    let seen_second = counted(&listing_blocklist, Outcome::Passed, Family::Ipv4)
        + counted(&listing_blocklist, Outcome::Dropped, Family::Ipv4);
    assert_eq!(
        counted(&passing_blocklist, Outcome::Passed, Family::Ipv4),
        seen_second,
        "IPv4 packets passed by the first program and seen by the second"
    );
    assert_eq!(
        counted(&passing_blocklist, Outcome::Dropped, Family::Ipv4),
        0
    );
    // Either program detaches alone; the other runs on.
    detach_pinned(&listing_link, INGRESS).expect("detaching the listing blocklist");
    check_traffic(&network, false);
    listing_blocklist
        .attach_pinned(host, index, INGRESS, &listing_link)
        .expect("attaching the listing blocklist again");
    detach_pinned(&passing_link, INGRESS).expect("detaching the passing blocklist");
    let passed_before = counted(&passing_blocklist, Outcome::Passed, Family::Ipv4);
    check_traffic(&network, true);
    assert_eq!(
        counted(&passing_blocklist, Outcome::Passed, Family::Ipv4),
        passed_before,
        "the detached program saw no more packets"
    );
    detach_pinned(&listing_link, INGRESS).expect("detaching the listing blocklist");
}

#[test]
fn tc_programs_decide_exact_frames_as_the_xdp_program_does() {
    let listed = [
        IpAddr::V4(Ipv4Addr::new(198, 18, 0, 10)),
        "2001:db8::10".parse().expect("an IPv6 address"),
    ];
    let blocklist = blocklist_with(&listed.map(|address| net(address, host_bits(address))));
    let unlisted: [IpAddr; 2] = [
        IpAddr::V4(Ipv4Addr::new(198, 18, 0, 11)),
        "2001:db8::11".parse().expect("an IPv6 address"),
    ];
    let mut frames = Vec::new();
    for source in listed.into_iter().chain(unlisted) {
        for tags in [Tags::None, Tags::One, Tags::Two] {
            frames.push(udp_frame(source, tags));
        }
    }
    // Cut inside the IP header behind a tag (malformed: dropped by
    // default; the kernel refuses to test-run a TC program on an untagged
    // IP frame cut short), and an ARP-like frame (not IP: passed).
    let mut cut = udp_frame(listed[0], Tags::One);
    cut.truncate(14 + 4 + 10);
    frames.push(cut);
    let mut arp = udp_frame(unlisted[0], Tags::None);
    arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    frames.push(arp);
    for frame in &frames {
        let before = blocklist.maps().counters().expect("counters");
        let xdp = blocklist.test_run(frame, 1).expect("XDP test run").action;
        let after_xdp = blocklist.maps().counters().expect("counters");
        let tc = blocklist
            .test_run_tc(TrafficDirection::Ingress, frame, 1)
            .expect("TC test run")
            .action;
        let after_tc = blocklist.maps().counters().expect("counters");
        let expected = match xdp {
            XdpAction::Drop => TcAction::Drop,
            XdpAction::Pass => TcAction::Next,
            other => panic!("XDP verdict {other:?}"),
        };
        assert_eq!(tc, expected, "TC ingress verdict for {frame:02x?}");
        for &outcome in Outcome::ALL {
            for &family in Family::ALL {
                let xdp_counted =
                    after_xdp.get(outcome, family).packets - before.get(outcome, family).packets;
                let tc_counted =
                    after_tc.get(outcome, family).packets - after_xdp.get(outcome, family).packets;
                assert_eq!(
                    xdp_counted, tc_counted,
                    "{outcome:?}/{family:?} counted by XDP and by TC for {frame:02x?}"
                );
            }
        }
    }
    // On egress the program matches destinations: a frame to a listed
    // address is dropped, one from it passes on.
    for (listed, unlisted) in listed.into_iter().zip(unlisted) {
        let mut to_listed = udp_frame(unlisted, Tags::None);
        let mut from_listed = udp_frame(listed, Tags::None);
        let (source, destination) = if listed.is_ipv4() {
            (14 + 12..14 + 16, 14 + 16..14 + 20)
        } else {
            (14 + 8..14 + 24, 14 + 24..14 + 40)
        };
        let listed_source = to_listed[source.clone()].to_vec();
        to_listed[destination.clone()].copy_from_slice(&from_listed[source.clone()]);
        from_listed[destination].copy_from_slice(&listed_source);
        for (frame, action) in [(to_listed, TcAction::Drop), (from_listed, TcAction::Next)] {
            let run = blocklist
                .test_run_tc(TrafficDirection::Egress, &frame, 1)
                .expect("TC test run");
            assert_eq!(run.action, action, "TC egress verdict for {frame:02x?}");
        }
    }
}

/// Sockets made inside the test network's namespace (a socket stays in
/// the namespace it was made in, whichever thread uses it).
struct PeerSockets {
    /// Dual-stack: IPv4 and IPv6 datagrams.
    udp: UdpSocket,
    /// Listening on every address; the kernel completes handshakes into
    /// its backlog, so nothing needs to accept.
    _tcp: TcpListener,
}

fn peer_sockets(network: &TestNetwork) -> PeerSockets {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                network.enter();
                PeerSockets {
                    udp: UdpSocket::bind(("::", PORT)).expect("binding UDP"),
                    _tcp: TcpListener::bind(("::", PORT)).expect("listening on TCP"),
                }
            })
            .join()
            .expect("making the peer's sockets")
    })
}

/// UDP from the host to the listed (.3) and unlisted (.2) peers of each
/// family, and a TCP connect to each: what reaches a listed peer is as
/// `listed_blocked` says, the unlisted ones always.
fn check_outgoing(network: &TestNetwork, peer: &PeerSockets, listed_blocked: bool) {
    let sender = UdpSocket::bind(("::", 0)).expect("binding the sender");
    for (listed, unlisted) in [
        (network.v4(3), network.v4(2)),
        (network.v6(3), network.v6(2)),
    ] {
        let (listed, unlisted) = (
            SocketAddr::new(mapped(listed), PORT),
            SocketAddr::new(mapped(unlisted), PORT),
        );
        for _ in 0..DATAGRAMS {
            send(&sender, b"listed", listed);
            send(&sender, b"unlisted", unlisted);
        }
        send(&sender, b"marker", unlisted);
        let expected_listed = if listed_blocked { 0 } else { DATAGRAMS };
        assert_eq!(
            receive_until_marker(&peer.udp),
            (expected_listed, DATAGRAMS),
            "UDP to {listed} and {unlisted}: (listed, unlisted) received"
        );
        TcpStream::connect_timeout(
            &SocketAddr::new(unlisted.ip(), PORT),
            Duration::from_secs(5),
        )
        .unwrap_or_else(|error| panic!("TCP connect to unlisted {unlisted}: {error}"));
        // A SYN dropped on the way out is never answered: the connect
        // times out (a connect that goes through fails the test at once).
        let connect =
            TcpStream::connect_timeout(&SocketAddr::new(listed.ip(), PORT), Duration::from_secs(1));
        match (connect, listed_blocked) {
            (Err(error), true) => assert_eq!(error.kind(), ErrorKind::TimedOut, "{error}"),
            (Ok(_), false) => {}
            (connect, _) => panic!("TCP connect to listed {listed}: {connect:?}"),
        }
    }
}

/// An IPv4 address as the IPv4-mapped IPv6 one a dual-stack socket sends
/// to.
fn mapped(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(v4) => IpAddr::V6(v4.to_ipv6_mapped()),
        v6 => v6,
    }
}

fn send(socket: &UdpSocket, payload: &[u8], to: SocketAddr) {
    socket
        .send_to(payload, to)
        .unwrap_or_else(|error| panic!("sending to {to}: {error}"));
}

#[test]
fn egress_keeps_the_host_from_reaching_listed_addresses() {
    both_directions_on_the_tc_hook(194, "tcx");
}

#[test]
fn a_clsact_filter_serves_both_directions_as_a_tcx_link_does() {
    both_directions_on_the_tc_hook(200, "clsact");
}

/// The filters cfctl put on the host end's clsact qdisc, as `tc filter
/// show` lists them.
fn clsact_filters(network: &TestNetwork, direction: &str) -> String {
    let output = std::process::Command::new("tc")
        .args(["filter", "show", "dev", &network.host_link, direction])
        .output()
        .expect("running tc (iproute2)");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|line| line.contains("handle 0xcfc1"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A filter after cfctl's on the clsact qdisc's ingress chain (a blocklist
/// listing the unlisted peer .2, added with `tc filter ... pinned`) drops
/// that peer's pings, which cfctl's filter passes on to it.
fn filters_after_cfctls_see_what_it_passes(network: &TestNetwork) {
    let host = network.host_link.as_str();
    let mut after = listing(&[network.v4(2)]);
    let pins = pin_dir("after-cfctl");
    after.pin(&pins.0).expect("pinning the second blocklist");
    let program = pins.0.join("program-tc-ingress");
    let tc = |args: &[&str]| {
        let status = std::process::Command::new("tc")
            .args(args)
            .status()
            .expect("running tc (iproute2)");
        assert!(status.success(), "tc {}: {status}", args.join(" "));
    };
    let program = program.to_str().expect("a UTF-8 path");
    tc(&[
        "filter", "add", "dev", host, "ingress", "pref", "2", "bpf", "da", "pinned", program,
    ]);
    let answered = network.ping(network.v4(2), network.v4(1));
    tc(&["filter", "del", "dev", host, "ingress", "pref", "2"]);
    assert!(
        !answered,
        "the filter after cfctl's saw the unlisted peer's pings"
    );
    assert!(
        network.ping(network.v4(2), network.v4(1)),
        "ping from unlisted answered without the filter after cfctl's"
    );
}

/// Egress, then ingress beside it, on the TC hook attached in `mode`
/// (`tcx` or `clsact`), through cfctl: what each direction drops, status,
/// a refused XDP attach, a resize under traffic, detaching one direction
/// and then the other.
fn both_directions_on_the_tc_hook(subnet: u8, mode: &str) {
    let network = TestNetwork::new(subnet);
    let cfctl = Cfctl::new(&format!("tc-egress-{mode}"));
    let host = network.host_link.as_str();
    let peer = peer_sockets(&network);
    check_outgoing(&network, &peer, false);
    let tc = ["--hook", "tc", "--mode", mode];
    cfctl.ok(&[&["attach", host, "--direction", "egress"], &tc[..]].concat());
    if mode == "clsact" {
        let filters = clsact_filters(&network, "egress");
        assert!(filters.contains("cftc_out_"), "tc filter show: {filters}");
    }
    cfctl.ok(&[
        "add",
        &network.v4(3).to_string(),
        &network.v6(3).to_string(),
    ]);
    check_outgoing(&network, &peer, true);
    // What it drops leaving is counted, and sampled, as egress on TC.
    assert!(cfctl.packets_in("egress", "dropped", "ipv4") > 0);
    assert_eq!(cfctl.packets_in("ingress", "dropped", "ipv4"), 0);
    let by_interface = cfctl.stats_by_during("interface", 1, || {
        check_outgoing(&network, &peer, true);
    });
    let row = &by_interface["interfaces"][0];
    assert_eq!(
        (&row["interface"], &row["direction"], &row["hook"]),
        (&host.into(), &"egress".into(), &"tc".into()),
        "{by_interface}"
    );
    // Pings from a listed peer arrive, and their replies are dropped.
    assert!(
        !network.ping(network.v4(3), network.v4(1)),
        "ping from listed answered"
    );
    assert!(
        network.ping(network.v4(2), network.v4(1)),
        "ping from unlisted answered"
    );
    let status = cfctl.json(&["status", "--json"]);
    let link = &status["interfaces"][0];
    assert_eq!(
        (&link["hook"], &link["direction"], &link["mode"]),
        (&"tc".into(), &"egress".into(), &mode.into()),
        "{status}"
    );
    let point = if mode == "tcx" { "tc" } else { mode };
    let status = cfctl.ok(&["status"]);
    assert!(
        status.contains(&format!("attached to  {host} ({point}-egress)\n")),
        "{status}"
    );

    // The same list on ingress too, beside egress.
    cfctl.ok(&[&["attach", host], &tc[..]].concat());
    if mode == "clsact" {
        filters_after_cfctls_see_what_it_passes(&network);
    }
    check_traffic(&network, true);
    let links: Vec<_> = cfctl.json(&["status", "--json"])["interfaces"]
        .as_array()
        .expect("the links")
        .iter()
        .map(|link| link["direction"].as_str().expect("a direction").to_owned())
        .collect();
    assert_eq!(links, ["egress", "ingress"]);
    // An ingress link elsewhere is refused while there is one.
    let refused = cfctl.fails(&["attach", host, "--mode", "skb"]);
    assert!(
        refused.contains(&format!("already has the blocklist on ingress (tc {mode})")),
        "{refused}"
    );

    // A resize takes both links over while a listed peer sends.
    resize_under_traffic(&network, &cfctl);
    check_outgoing(&network, &peer, true);

    // (While ingress is checked, a listed peer's answers are dropped
    // there: a TCP connect to it fails on either link.)
    cfctl.ok(&["detach", host, "--direction", "ingress"]);
    let receiver = UdpSocket::bind((network.v4(1), PORT)).expect("binding the receiver");
    let destination = receiver.local_addr().expect("the receiver's address");
    network.send_udp(network.v4(3), destination, b"listed", DATAGRAMS);
    network.send_udp(network.v4(2), destination, b"marker", 1);
    assert_eq!(
        receive_until_marker(&receiver),
        (DATAGRAMS, 0),
        "datagrams from the listed peer arrive with egress checked only"
    );
    check_outgoing(&network, &peer, true);
    cfctl.ok(&["detach", host]);
    check_outgoing(&network, &peer, false);
    assert!(
        !cfctl.pin_dir().exists(),
        "the pins removed with the last link"
    );
    for direction in ["ingress", "egress"] {
        let left = clsact_filters(&network, direction);
        assert!(left.is_empty(), "filters left on {direction}: {left}");
    }
}

/// `cfctl resize` while the listed peer (.3) sends datagrams to the host
/// (at most 20,000, until the resize is done); none of them arrives, and
/// those the unlisted peer sends after it do.
fn resize_under_traffic(network: &TestNetwork, cfctl: &Cfctl) {
    let receiver = UdpSocket::bind((network.v4(1), PORT + 1)).expect("binding the receiver");
    let destination = receiver.local_addr().expect("the receiver's address");
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            network.enter();
            let socket = UdpSocket::bind((network.v4(3), 0)).expect("binding the listed peer");
            for _ in 0..20_000 {
                if done.load(Ordering::SeqCst) {
                    break;
                }
                send(&socket, b"listed", destination);
                std::thread::sleep(Duration::from_micros(200));
            }
        });
        let resized = cfctl.run(&["resize", "--capacity", "5000"]);
        done.store(true, Ordering::SeqCst);
        assert!(resized.status.success(), "resize: {resized:?}");
    });
    network.send_udp(network.v4(2), destination, b"marker", 1);
    assert_eq!(
        receive_until_marker(&receiver),
        (0, 0),
        "datagrams from the listed peer that got through during the resize"
    );
}

#[test]
fn the_tc_hook_runs_beside_a_program_that_holds_the_xdp_hook() {
    let network = TestNetwork::new(195);
    // Another XDP program holds the hook (here a blocklist listing
    // nothing, attached by this test with a link of its own, which no
    // pin directory of cfctl's records).
    let mut other = listing(&[]);
    let _held = other
        .attach(network.host_index(), AttachMode::Skb)
        .expect("attaching the other XDP program");
    let cfctl = Cfctl::new("tc-beside-xdp");
    let host = network.host_link.as_str();
    let refused = cfctl.fails(&["attach", host, "--mode", "skb"]);
    assert!(refused.contains("attach with `--hook tc`"), "{refused}");
    assert!(
        refused.contains(&format!("({}", other_program_name())),
        "the refusal names the program on the hook: {refused}"
    );
    cfctl.ok(&["attach", host, "--hook", "tc"]);
    cfctl.ok(&[
        "add",
        &network.v4(3).to_string(),
        &network.v6(3).to_string(),
    ]);
    check_traffic(&network, true);
    assert_eq!(
        counted(&other, Outcome::Dropped, Family::Ipv4),
        0,
        "the XDP program dropped nothing"
    );
    assert!(
        counted(&other, Outcome::Passed, Family::Ipv4) >= 2 * (DATAGRAMS + PINGS),
        "the XDP program saw the traffic before the TC hook"
    );
    let refused = cfctl.fails(&["attach", host, "--direction", "egress"]);
    assert!(
        refused.contains("--hook tc --direction egress"),
        "{refused}"
    );
    cfctl.ok(&["detach", host]);
    check_traffic(&network, false);
}

/// The kernel's name of the program [`listing`] loads.
fn other_program_name() -> &'static str {
    LISTING_SHAPE.program()
}

/// xdp-filter (xdp-tools, through libxdp) loaded on an interface, unloaded
/// when dropped.
struct XdpFilter {
    interface: String,
}

impl XdpFilter {
    fn load(interface: &str) -> Self {
        let status = std::process::Command::new("xdp-filter")
            .args(["load", interface, "--mode", "skb"])
            .status()
            .expect("running xdp-filter (Debian package xdp-tools)");
        assert!(status.success(), "xdp-filter load {interface}: {status}");
        Self {
            interface: interface.to_owned(),
        }
    }

    /// The packets it passed, from `xdp-filter status`.
    fn passed(&self) -> u64 {
        let output = std::process::Command::new("xdp-filter")
            .arg("status")
            .output()
            .expect("running xdp-filter status");
        let status = String::from_utf8_lossy(&output.stdout);
        status
            .lines()
            .find_map(|line| {
                let mut words = line.split_whitespace();
                (words.next() == Some("XDP_PASS")).then(|| words.next()?.parse().ok())?
            })
            .unwrap_or_else(|| panic!("no XDP_PASS count in xdp-filter status: {status}"))
    }
}

impl Drop for XdpFilter {
    fn drop(&mut self) {
        let _ = std::process::Command::new("xdp-filter")
            .args(["unload", &self.interface])
            .status();
        // libxdp's lock directory, if nothing else of libxdp's is there.
        let _ = std::fs::remove_dir("/sys/fs/bpf/xdp");
    }
}

#[test]
fn beside_xdp_filter_the_refusal_names_it_and_the_tc_hook_filters_what_it_passes() {
    require_root();
    let network = TestNetwork::new(199);
    let host = network.host_link.as_str();
    let xdp_filter = XdpFilter::load(host);
    let cfctl = Cfctl::new("tc-beside-xdp-filter");
    cfctl.ok(&[
        "add",
        &network.v4(3).to_string(),
        &network.v6(3).to_string(),
    ]);
    let refused = cfctl.fails(&["attach", host]);
    assert!(
        refused.contains("already has another XDP program attached, program ")
            && refused.contains("(xdpfilt_alw_all"),
        "the refusal names xdp-filter's program: {refused}"
    );
    assert!(
        !cfctl.pin_dir().exists(),
        "a refused attach left pins behind"
    );
    cfctl.ok(&["attach", host, "--hook", "tc"]);
    let before = xdp_filter.passed();
    check_traffic(&network, true);
    assert!(
        xdp_filter.passed() - before >= 2 * (DATAGRAMS + PINGS),
        "xdp-filter passed the traffic on to the TC hook"
    );
    cfctl.ok(&["detach", host]);
    check_traffic(&network, false);
}

#[test]
fn a_tc_attach_to_a_blocklist_pinned_without_tc_programs_loads_them_and_keeps_counting() {
    let network = TestNetwork::new(198);
    let cfctl = Cfctl::new("tc-upgrade");
    let host = network.host_link.as_str();
    cfctl.ok(&["attach", host, "--mode", "skb"]);
    cfctl.ok(&[
        "add",
        &network.v4(3).to_string(),
        &network.v6(3).to_string(),
    ]);
    check_traffic(&network, true);
    let dropped = cfctl.packets("dropped", "ipv4");
    assert_eq!(dropped, DATAGRAMS + PINGS);
    // As a cfctl without the TC hook pinned it.
    for name in ["program-tc-ingress", "program-tc-egress"] {
        std::fs::remove_file(cfctl.pin_dir().join(name)).expect("removing a TC program pin");
    }
    cfctl.ok(&["attach", host, "--hook", "tc", "--direction", "egress"]);
    for name in ["program-tc-ingress", "program-tc-egress"] {
        assert!(cfctl.pin_dir().join(name).exists(), "{name} pinned again");
    }
    // The XDP link moved to the new program, which counts on.
    check_traffic(&network, true);
    assert_eq!(
        cfctl.packets("dropped", "ipv4"),
        dropped + DATAGRAMS + PINGS
    );
    cfctl.ok(&["detach", host]);
    check_traffic(&network, false);
}
