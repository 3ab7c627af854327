//! Updates over the network on the host: the endpoint's ARP answers, and
//! sealed requests in real UDP frames (built and read back with
//! etherparse, checksums checked): taken once under the right key and a
//! fresh counter, answered as stale when replayed (also after a reset and
//! after the journal is folded), not answered under another key. And what
//! a board's Ethernet port does with each frame (the bridge's VLANs, then
//! the endpoint), and the endpoint's build-time settings.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use etherparse::{PacketBuilder, SlicedPacket, TransportSlice, VlanId};
use filter_core::protocol::datagram::{self, Key, Kind, MAX_REQUEST_DATAGRAM_LEN};
use filter_core::protocol::{self, Envelope, Item, Prefix, Request, ResetCause, Response};
use filter_core::StaticCuckooFilter;
use firmware::build_settings::{key_from_hex, socket_from_text};
use firmware::endpoint::MAX_REPLY_LEN;
use firmware::port::{EthernetService, Outgoing};
use firmware::{Device, RamFlash, SlotLayout, UdpEndpoint};

type Filter = StaticCuckooFilter<u16, 4, 64>;
type TestDevice<'f, 'm> = Device<'f, u16, 4, [[u16; 4]; 64], RamFlash<'m, 4, 256>>;
const LAYOUT: SlotLayout = SlotLayout {
    offsets: [0, 1024],
    slot_len: 1024,
};
const KEY: Key = [0x4b; 32];
const DEVICE_MAC: [u8; 6] = [0x02, 0xcf, 0, 0, 0, 1];
const HOST_MAC: [u8; 6] = [0x02, 0xcf, 0, 0, 0, 2];
const DEVICE_IP: [u8; 4] = [198, 18, 250, 2];
const HOST_IP: [u8; 4] = [198, 18, 250, 1];
const PORT: u16 = 7070;

fn endpoint() -> UdpEndpoint {
    UdpEndpoint {
        mac: DEVICE_MAC,
        ipv4: DEVICE_IP,
        port: PORT,
        key: KEY,
    }
}

fn boot<'f, 'm>(filter: &'f mut Filter, memory: &'m mut [u8]) -> TestDevice<'f, 'm> {
    Device::boot(
        filter,
        RamFlash::<4, 256>::new(memory),
        LAYOUT,
        0x5eed,
        ResetCause::PowerOn,
    )
}

/// `request` (id `id`) sealed under `key` and `counter`, in a UDP frame
/// from the host to the device.
fn request_frame(key: &Key, counter: u64, id: u32, request: Request<'_>) -> Vec<u8> {
    let mut frame = vec![0u8; protocol::MAX_FRAME_LEN + 1];
    let envelope = Envelope {
        id,
        message: request,
    };
    let frame = protocol::encode(&envelope, &mut frame)
        .expect("fits")
        .to_vec();
    let mut sealed = [0u8; MAX_REQUEST_DATAGRAM_LEN];
    let len = datagram::seal(key, Kind::Request, counter, &frame, &mut sealed).expect("fits");
    udp_frame(&sealed[..len])
}

fn udp_frame(payload: &[u8]) -> Vec<u8> {
    let builder = PacketBuilder::ethernet2(HOST_MAC, DEVICE_MAC)
        .ipv4(HOST_IP, DEVICE_IP, 64)
        .udp(40000, PORT);
    let mut frame = Vec::new();
    builder.write(&mut frame, payload).expect("a frame");
    frame
}

/// What the device answered to `frame`: the opened datagram's kind and
/// counter, and its response (none for a stale answer). The reply's
/// addresses, ports and checksums are checked.
fn answer(
    device: &mut TestDevice<'_, '_>,
    mut frame: Vec<u8>,
) -> Option<(Kind, u64, Option<Response>)> {
    let mut reply = [0u8; MAX_REPLY_LEN];
    let len = endpoint().answer(device, &mut frame, &mut reply)?;
    let packet = SlicedPacket::from_ethernet(&reply[..len]).expect("a frame etherparse reads");
    let Some(etherparse::LinkSlice::Ethernet2(ethernet)) = &packet.link else {
        panic!("not Ethernet II");
    };
    assert_eq!(
        (ethernet.source(), ethernet.destination()),
        (DEVICE_MAC, HOST_MAC)
    );
    let Some(etherparse::NetSlice::Ipv4(ip)) = packet.net else {
        panic!("not IPv4");
    };
    let header = ip.header().to_header();
    assert_eq!((header.source, header.destination), (DEVICE_IP, HOST_IP));
    assert_eq!(header.header_checksum, header.calc_header_checksum());
    let Some(TransportSlice::Udp(udp)) = packet.transport else {
        panic!("not UDP");
    };
    let udp_header = udp.to_header();
    assert_eq!(
        (udp_header.source_port, udp_header.destination_port),
        (PORT, 40000)
    );
    let expected = udp_header
        .calc_checksum_ipv4(&header, udp.payload())
        .expect("a checksum");
    assert_eq!(udp_header.checksum, expected);
    let opened = datagram::open(&KEY, udp.payload()).expect("sealed under the key");
    let response = match opened.kind {
        Kind::Stale => None,
        _ => {
            let mut frame = opened.frame.to_vec();
            assert_eq!(frame.pop(), Some(0), "a delimited frame");
            let envelope: Envelope<Response> = protocol::decode(&mut frame).expect("a response");
            Some(envelope.message)
        }
    };
    Some((opened.kind, opened.counter, response))
}

#[test]
fn arp_requests_for_the_device_address_are_answered_and_others_are_not() {
    let mut memory = vec![0xff; 2048];
    let mut filter = Filter::new(0);
    let mut device = boot(&mut filter, &mut memory);
    let arp = |target: [u8; 4]| {
        let mut frame = Vec::new();
        frame.extend_from_slice(&[0xff; 6]);
        frame.extend_from_slice(&HOST_MAC);
        frame.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
        frame.extend_from_slice(&HOST_MAC);
        frame.extend_from_slice(&HOST_IP);
        frame.extend_from_slice(&[0; 6]);
        frame.extend_from_slice(&target);
        frame.resize(60, 0);
        frame
    };
    let mut reply = [0u8; MAX_REPLY_LEN];
    let len = endpoint()
        .answer(&mut device, &mut arp(DEVICE_IP), &mut reply)
        .expect("an ARP reply");
    let mut expected = Vec::new();
    expected.extend_from_slice(&HOST_MAC);
    expected.extend_from_slice(&DEVICE_MAC);
    expected.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 2]);
    expected.extend_from_slice(&DEVICE_MAC);
    expected.extend_from_slice(&DEVICE_IP);
    expected.extend_from_slice(&HOST_MAC);
    expected.extend_from_slice(&HOST_IP);
    expected.resize(60, 0);
    assert_eq!(&reply[..len], &expected[..]);
    assert_eq!(
        endpoint().answer(&mut device, &mut arp([198, 18, 250, 3]), &mut reply),
        None
    );
}

#[test]
fn a_sealed_request_is_taken_once_and_its_replays_never_even_after_a_reset() {
    let mut memory = vec![0xff; 2048];
    let mut filter = Filter::new(0);
    let mut device = boot(&mut filter, &mut memory);
    let add = request_frame(&KEY, 1000, 1, Request::Add(Item::U64(7)));
    assert_eq!(
        answer(&mut device, add.clone()),
        Some((Kind::Response, 1000, Some(Response::Added)))
    );
    // The same datagram again: stale, under the highest counter taken.
    assert_eq!(
        answer(&mut device, add.clone()),
        Some((Kind::Stale, 1000, None))
    );
    // Another key, or a byte changed on the way: no answer at all.
    let mut other_key = KEY;
    other_key[0] ^= 1;
    let forged = request_frame(&other_key, 2000, 2, Request::Delete(Item::U64(7)));
    assert_eq!(answer(&mut device, forged), None);
    let mut damaged = request_frame(&KEY, 2000, 2, Request::Delete(Item::U64(7)));
    let last = damaged.len() - 1;
    damaged[last] ^= 1;
    assert_eq!(answer(&mut device, damaged), None);
    // A resend of a request whose answer was lost: the same frame under a
    // new counter, answered from memory (the add is not made twice).
    let resent = request_frame(&KEY, 1001, 1, Request::Add(Item::U64(7)));
    assert_eq!(
        answer(&mut device, resent),
        Some((Kind::Response, 1001, Some(Response::Added)))
    );
    assert_eq!(device.filter().len(), 1);
    let stats = match answer(&mut device, request_frame(&KEY, 1002, 3, Request::Stats)) {
        Some((Kind::Response, 1002, Some(Response::Stats(stats)))) => stats,
        other => panic!("{other:?}"),
    };
    assert_eq!((stats.datagrams_refused, stats.datagrams_stale), (2, 1));
    assert_eq!((stats.added, stats.replayed), (1, 1));

    // After a reset, and after the journal is folded into new images, the
    // counters taken stay taken.
    let mut filter = Filter::new(0);
    let mut device = boot(&mut filter, &mut memory);
    assert!(matches!(
        answer(&mut device, add.clone()),
        Some((Kind::Stale, _, None))
    ));
    let mut counter = 1u64 << 21;
    for value in 0..60 {
        counter += 1;
        let frame = request_frame(
            &KEY,
            counter,
            10 + value as u32,
            Request::Add(Item::U64(value)),
        );
        assert!(matches!(
            answer(&mut device, frame),
            Some((Kind::Response, _, Some(_)))
        ));
        counter += 1u64 << 20;
    }
    let taken = request_frame(&KEY, counter, 100, Request::Check(Item::U64(7)));
    assert_eq!(
        answer(&mut device, taken.clone()),
        Some((
            Kind::Response,
            counter,
            Some(Response::Checked { present: true })
        ))
    );
    // A save under the lease folds the journal: the new one must start
    // with the lease.
    let save = request_frame(&KEY, counter + 1, 101, Request::Save);
    assert!(matches!(
        answer(&mut device, save),
        Some((Kind::Response, _, Some(Response::Saved { .. })))
    ));
    let mut filter = Filter::new(0);
    let mut device = boot(&mut filter, &mut memory);
    let Some((Kind::Stale, highest, None)) = answer(&mut device, taken) else {
        panic!("a replay after folds and a reset was taken");
    };
    assert!(highest >= counter);
    // An honest host goes on above the highest.
    assert!(matches!(
        answer(
            &mut device,
            request_frame(&KEY, highest + 1, 102, Request::Stats)
        ),
        Some((Kind::Response, _, Some(Response::Stats(_))))
    ));
}

#[test]
fn a_snapshot_upload_over_datagrams_survives_leases_that_meet_a_full_journal() {
    let mut memory = vec![0xff; 2048];
    let mut filter = Filter::new(0);
    let mut device = boot(&mut filter, &mut memory);
    let mut counter = 1_000u64;
    let mut id = 0u32;
    let mut ask = |device: &mut TestDevice<'_, '_>, request: Request<'_>, jump: u64| {
        counter += jump;
        id += 1;
        match answer(device, request_frame(&KEY, counter, id, request)) {
            Some((Kind::Response, _, Some(response))) => response,
            other => panic!("{other:?}"),
        }
    };
    // Adds under one lease until the journal has one record of room.
    let mut value = 0;
    loop {
        let hello = Request::Hello {
            version: protocol::PROTOCOL_VERSION,
        };
        let Response::Info(info) = ask(&mut device, hello, 1) else {
            panic!("no info");
        };
        let journal = info.journal.expect("a journal");
        if journal.capacity - journal.records <= 1 && value > 0 {
            break;
        }
        assert_eq!(
            ask(&mut device, Request::Add(Item::U64(value)), 1),
            Response::Added
        );
        value += 1;
    }
    // Every datagram of the upload passes the lease.
    let mut host = Filter::new(0x1234);
    for key in 0..30u64 {
        host.insert(&key).expect("room");
    }
    let mut snapshot = vec![0u8; host.snapshot_len() as usize];
    host.write_snapshot(&mut snapshot).expect("a snapshot");
    let begin = Request::SnapshotBegin {
        total_len: snapshot.len() as u32,
        prefix_lengths: protocol::PrefixLengths::new(),
    };
    assert_eq!(ask(&mut device, begin, 1 << 21), Response::SnapshotStarted);
    for (index, data) in snapshot.chunks(protocol::MAX_CHUNK_LEN / 2).enumerate() {
        let offset = (index * protocol::MAX_CHUNK_LEN / 2) as u32;
        let received = offset + data.len() as u32;
        let chunk = Request::SnapshotChunk { offset, data };
        assert_eq!(
            ask(&mut device, chunk, 1 << 21),
            Response::ChunkAccepted { received }
        );
    }
    assert!(matches!(
        ask(&mut device, Request::SnapshotCommit, 1 << 21),
        Response::SnapshotCommitted { entries: 30, .. }
    ));
}

const LISTED: [u8; 4] = [198, 18, 7, 7];
const UNLISTED: [u8; 4] = [198, 18, 7, 8];

fn service(with_endpoint: bool) -> EthernetService {
    EthernetService {
        bridged_vlans: [10, 20],
        endpoint: with_endpoint.then(endpoint),
    }
}

/// An IPv4/UDP frame from `source`, tagged with `vlan` if any.
fn frame(vlan: Option<u16>, source: [u8; 4]) -> Vec<u8> {
    let ethernet = PacketBuilder::ethernet2(HOST_MAC, [0x02, 0, 0, 0, 0, 9]);
    let ip = match vlan {
        Some(id) => {
            ethernet
                .single_vlan(VlanId::try_new(id).unwrap())
                .ipv4(source, [198, 18, 8, 1], 64)
        }
        None => ethernet.ipv4(source, [198, 18, 8, 1], 64),
    };
    let mut frame = Vec::new();
    ip.udp(4000, 5000).write(&mut frame, b"payload").unwrap();
    frame
}

/// An ARP request for `target` from the host, untagged.
fn arp_request(target: [u8; 4]) -> Vec<u8> {
    let mut frame = vec![0xff; 6];
    frame.extend_from_slice(&HOST_MAC);
    frame.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
    frame.extend_from_slice(&HOST_MAC);
    frame.extend_from_slice(&[198, 18, 250, 1]);
    frame.extend_from_slice(&[0; 6]);
    frame.extend_from_slice(&target);
    frame
}

fn vlan_id(frame: &[u8]) -> u16 {
    u16::from_be_bytes([frame[14], frame[15]]) & 0x0fff
}

#[test]
fn the_port_bridges_its_vlans_drops_listed_sources_and_answers_only_its_own_frames() {
    let mut filter = Filter::new(0);
    let mut memory = vec![0xff; 2048];
    let mut device = boot(&mut filter, &mut memory);
    let listed = Item::Net(Prefix::V4 {
        address: LISTED,
        len: 32,
    });
    assert_eq!(device.answer(Request::Add(listed)), Response::Added);
    for with_endpoint in [true, false] {
        let port = service(with_endpoint);
        let mut reply_to = [0u8; 6];
        let mut take = |mut frame: Vec<u8>| {
            let mut reply = [0u8; MAX_REPLY_LEN];
            let outgoing = port.take(&mut device, &mut frame, &mut reply);
            reply_to.copy_from_slice(&reply[..6]);
            (outgoing, frame)
        };

        let (outgoing, forwarded) = take(frame(Some(10), UNLISTED));
        assert_eq!(outgoing, Outgoing::Forward);
        assert_eq!(vlan_id(&forwarded), 20, "retagged for the other VLAN");
        let (outgoing, forwarded) = take(frame(Some(20), UNLISTED));
        assert_eq!(outgoing, Outgoing::Forward);
        assert_eq!(vlan_id(&forwarded), 10);
        assert_eq!(take(frame(Some(10), LISTED)).0, Outgoing::Nothing);
        assert_eq!(take(frame(Some(30), UNLISTED)).0, Outgoing::Nothing);
        assert_eq!(take(frame(None, UNLISTED)).0, Outgoing::Nothing);

        assert_eq!(take(arp_request([198, 18, 250, 3])).0, Outgoing::Nothing);
        let answered = take(arp_request(DEVICE_IP)).0;
        if with_endpoint {
            assert_eq!(answered, Outgoing::Reply(60));
            assert_eq!(reply_to, HOST_MAC, "the reply goes to the asker");
        } else {
            assert_eq!(answered, Outgoing::Nothing, "no endpoint, no ARP");
        }
    }
}

#[test]
fn build_time_keys_and_sockets_are_read_and_anything_else_is_refused() {
    let hex = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF";
    let key = key_from_hex(hex.as_bytes());
    assert_eq!(key[..3], [0x00, 0x11, 0x22]);
    assert_eq!(key[31], 0xff);
    assert_eq!(
        socket_from_text(b"198.18.250.2:7070"),
        ([198, 18, 250, 2], 7070)
    );
    assert_eq!(socket_from_text(b"0.0.0.0:65535"), ([0; 4], 65535));
    for wrong in [
        "",
        "198.18.250.2",
        "198.18.250:7070",
        "198.18.250.256:7070",
        "198.18.250.2:0",
        "198.18.250.2:65536",
        "198.18.250.2:",
        ".18.250.2:7070",
        "198.18.250.2:70a",
        "198.18.250.2.1:7070",
        "198..250.2:7070",
        "198.18.250.2:123456",
    ] {
        let refused = std::panic::catch_unwind(|| socket_from_text(wrong.as_bytes()));
        assert!(refused.is_err(), "{wrong:?} taken");
    }
    for wrong in [&hex[1..], &hex.replace('f', "g")] {
        let refused = std::panic::catch_unwind(|| key_from_hex(wrong.as_bytes()));
        assert!(refused.is_err(), "{wrong:?} taken");
    }
}
