//! Writes the committed seed corpora, `seeds/<target>/`, from real data:
//! the frames the firmware tests send, snapshots and flash images of
//! filters holding entries of the shared blocklists, device answers as a
//! client meets them, a few hundred lines of each shared blocklist,
//! frames from listed addresses as the XDP tests send them, agent
//! configurations (the shipped example and variations on it), and CrowdSec
//! LAPI answers.
//!
//! `cargo +nightly run --example seed_corpus -- BLOCKLIST_DIR` in `fuzz/`
//! (the blocklists the tests use); run it again when a format changes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use cfctl::netlist::{parse_bytes, ParseOptions};
use cfxdp::packet::MAX_VLAN_TAGS;
use cuckoo_fuzz::{frame_of, Filter, FIRST_ID, FLASH_ERASE, FLASH_LEN, FLASH_WRITE, LAYOUT, SEED};
use etherparse::{
    ArpHardwareId, ArpOperation, ArpPacket, EtherType, IpHeaders, Ipv4Header, Ipv6Header,
    PacketBuilder, VlanId,
};
use filter_core::protocol::{
    Envelope, Error, FrameError, Info, Item, JournalFill, Prefix, PrefixLengths, Request,
    ResetCause, Response, Stats, CHUNK_ALIGN, MAX_BATCH, MAX_CHUNK_LEN, NO_ID, PROTOCOL_VERSION,
};
use filter_core::AddressFamily;
use firmware::{Device, RamFlash};

/// Lines of each blocklist kept as a seed (the lists are public).
const LIST_LINES: usize = 300;
/// The payload of the seed frames.
const PAYLOAD: &[u8] = b"cuckoo";

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::create_dir_all(dir).expect("creating a seed directory");
    std::fs::write(dir.join(name), bytes).expect("writing a seed");
}

/// The first `count` entries of every list in `lists`, as protocol items.
fn listed_prefixes(lists: &Path, count: usize) -> Vec<Prefix> {
    let mut prefixes = Vec::new();
    for name in [
        "spamhaus_drop.netset",
        "spamhaus_dropv6.txt",
        "firehol_level1.netset",
    ] {
        let bytes = std::fs::read(lists.join(name)).expect("reading a shared blocklist");
        let list = parse_bytes(&bytes, name, ParseOptions::default()).expect("the list parses");
        prefixes.extend(
            list.entries
                .iter()
                .take(count)
                .map(|entry| match entry.net {
                    ipnet::IpNet::V4(net) => Prefix::V4 {
                        address: net.network().octets(),
                        len: net.prefix_len(),
                    },
                    ipnet::IpNet::V6(net) => Prefix::V6 {
                        address: net.network().octets(),
                        len: net.prefix_len(),
                    },
                }),
        );
    }
    prefixes
}

/// Request frames with ids from 1 on.
struct Frames {
    next_id: u32,
    bytes: Vec<u8>,
}

impl Frames {
    fn new() -> Self {
        // A leading delimiter, as every client sends first.
        Self {
            next_id: 1,
            bytes: vec![0],
        }
    }

    fn push(&mut self, request: Request<'_>) -> &mut Self {
        let frame = frame_of(&Envelope {
            id: self.next_id,
            message: request,
        });
        self.next_id += 1;
        self.bytes.extend(frame);
        self
    }
}

/// A host-built filter holding `prefixes`, its snapshot and lengths.
fn snapshot_of(prefixes: &[Prefix]) -> (Vec<u8>, PrefixLengths) {
    let mut filter = Filter::new(0x1234);
    let mut lengths = PrefixLengths::new();
    for prefix in prefixes {
        let key = prefix.net_key().expect("a valid prefix");
        if filter.insert_hash(key.hash(filter.seed())).is_ok() {
            lengths.insert(prefix.family(), prefix.prefix_len());
        }
    }
    let mut snapshot = vec![0u8; filter.snapshot_len() as usize];
    filter
        .write_snapshot(&mut snapshot)
        .expect("the buffer fits");
    (snapshot, lengths)
}

fn device_frames(dir: &Path, prefixes: &[Prefix]) {
    let items: Vec<Item<'_>> = prefixes.iter().map(|p| Item::Net(*p)).collect();
    let batch = |range: std::ops::Range<usize>| items[range].iter().copied().collect();
    let hello = Request::Hello {
        version: PROTOCOL_VERSION,
    };

    let mut session = Frames::new();
    session
        .push(hello.clone())
        .push(Request::Add(items[0]))
        .push(Request::Add(Item::Bytes(b"COUPON-1")))
        .push(Request::Add(Item::U64(7)))
        .push(Request::Check(items[0]))
        .push(Request::AddBatch(batch(1..1 + MAX_BATCH)))
        .push(Request::CheckBatch(batch(0..MAX_BATCH)))
        .push(Request::Delete(items[3]))
        .push(Request::Check(items[3]))
        .push(Request::Stats)
        .push(Request::Save)
        .push(Request::Locate {
            seed: SEED,
            bucket_count: 1024,
            fingerprint_bits: 16,
            item: items[5],
        })
        .push(Request::Clear);
    write(dir, "session", &session.bytes);

    // A retransmission: the same frame three times.
    let add = frame_of(&Envelope {
        id: 9,
        message: Request::Add(items[1]),
    });
    write(
        dir,
        "retransmission",
        &[&[0][..], &add, &add, &add].concat(),
    );

    // Damaged, truncated, oversized and unknown frames between good ones.
    let good = frame_of(&Envelope {
        id: 3,
        message: Request::Add(Item::U64(7)),
    });
    let mut corrupted = good.clone();
    corrupted[2] ^= 0x10;
    let truncated = [&good[..good.len() / 2], &[0]].concat();
    let unknown = frame_of(&(5u32, 77u8, 1u32));
    write(
        dir,
        "damaged",
        &[good.clone(), corrupted, truncated, unknown, good].concat(),
    );

    // Fill to the brim, then delete some.
    let mut fill = Frames::new();
    for chunk in items.chunks(MAX_BATCH).take(12) {
        fill.push(Request::AddBatch(chunk.iter().copied().collect()));
    }
    for item in items.iter().take(20) {
        fill.push(Request::Delete(*item));
    }
    write(dir, "fill", &fill.bytes);

    // A snapshot upload of a host-built filter.
    let (snapshot, prefix_lengths) = snapshot_of(&prefixes[..40]);
    let mut upload = Frames::new();
    upload.push(Request::SnapshotBegin {
        total_len: snapshot.len() as u32,
        prefix_lengths,
    });
    let chunk_len = MAX_CHUNK_LEN / 2 - (MAX_CHUNK_LEN / 2) % CHUNK_ALIGN;
    for (index, data) in snapshot.chunks(chunk_len).enumerate() {
        upload.push(Request::SnapshotChunk {
            offset: (index * chunk_len) as u32,
            data,
        });
    }
    upload
        .push(Request::SnapshotCommit)
        .push(Request::Check(items[10]))
        .push(hello);
    write(dir, "snapshot_upload", &upload.bytes);
}

fn snapshots(dir: &Path, prefixes: &[Prefix]) {
    let (small, _) = snapshot_of(&prefixes[..40]);
    let (full, _) = snapshot_of(prefixes);
    let (empty, _) = snapshot_of(&[]);
    for (name, chunk_byte, snapshot) in [
        ("small_whole", 255u8, &small),
        ("small_chunks_of_32", 31, &small),
        ("full_chunks_of_7", 6, &full),
        ("empty", 0, &empty),
    ] {
        write(dir, name, &[&[chunk_byte][..], snapshot].concat());
    }
}

/// Boots a device on `memory`, adds `prefixes` and saves.
fn add_and_save(memory: &mut [u8], prefixes: &[Prefix]) {
    let mut filter = Filter::new(0);
    let flash = RamFlash::<FLASH_WRITE, FLASH_ERASE>::new(memory);
    let mut device = Device::boot(&mut filter, flash, LAYOUT, SEED, ResetCause::PowerOn);
    for prefix in prefixes {
        device.answer(Request::Add(Item::Net(*prefix)));
    }
    assert!(matches!(
        device.answer(Request::Save),
        Response::Saved { .. }
    ));
}

fn flash_images(dir: &Path, prefixes: &[Prefix]) {
    let mut memory = vec![0xff; FLASH_LEN];
    // The first byte: 0 takes the flash as it is, 1 fixes CRCs first.
    add_and_save(&mut memory, &prefixes[..30]);
    write(dir, "one_image", &[&[0u8][..], &memory].concat());
    add_and_save(&mut memory, &prefixes[30..60]);
    write(dir, "two_images", &[&[0u8][..], &memory].concat());
    write(
        dir,
        "two_images_crcs_fixed",
        &[&[1u8][..], &memory].concat(),
    );
}

fn device_responses(dir: &Path) {
    let answer = |id, message: Response| frame_of(&Envelope { id, message });
    let own = answer(FIRST_ID, Response::BatchChecked { present: 0b101 });
    let stale = answer(FIRST_ID - 1, Response::Checked { present: true });
    let rejected = answer(
        NO_ID,
        Response::Error(Error::Frame(FrameError::Crc {
            stored: 1,
            computed: 2,
        })),
    );
    let mut damaged = own.clone();
    damaged[3] ^= 0x08;
    let info = Info {
        protocol_version: PROTOCOL_VERSION,
        fingerprint_bits: 16,
        slots_per_bucket: 4,
        bucket_count: 8192,
        capacity: 32768,
        seed: SEED,
        entries: 12,
        prefix_lengths: PrefixLengths::new(),
        saved_sequence: Some(3),
        journal: Some(JournalFill {
            records: 40,
            capacity: 4064,
        }),
        reset_cause: ResetCause::Watchdog,
    };
    for (name, bytes) in [
        ("own", own.clone()),
        ("stale_then_own", [stale.clone(), own.clone()].concat()),
        (
            "rejected_damaged_own",
            [rejected, damaged, own.clone()].concat(),
        ),
        (
            "refused",
            answer(FIRST_ID, Response::Error(Error::Full { added: 1 })),
        ),
        ("unexpected", answer(FIRST_ID, Response::Info(info))),
        (
            "stats_of_another",
            answer(7, Response::Stats(Stats::default())),
        ),
        ("noise", vec![0x42, 0x13, 0x00, 0xff, 0x00]),
    ] {
        write(dir, name, &bytes);
    }
}

fn blocklists(dir: &Path, lists: &Path) {
    let names = [
        "firehol_level1.netset",
        "spamhaus_drop.netset",
        "spamhaus_dropv6.txt",
        "dshield_top_1000.ipset",
        "feodo_badips.ipset",
    ];
    for name in names {
        let text = std::fs::read_to_string(lists.join(name)).expect("reading a shared blocklist");
        let head: String = text
            .lines()
            .take(LIST_LINES)
            .map(|line| line.to_owned() + "\n")
            .collect();
        // Selector 0: detect the format from the contents.
        write(dir, name, &[&[0u8][..], head.as_bytes()].concat());
    }
    let plain = "198.18.0.1\n198.18.1.0/24 # a comment\n2001:db8::/32\n\n# only a comment\n";
    write(dir, "plain", &[&[1u8][..], plain.as_bytes()].concat());
}

/// The first address of the shared list `name`.
fn first_listed(lists: &Path, name: &str) -> IpAddr {
    let bytes = std::fs::read(lists.join(name)).expect("reading a shared blocklist");
    let list = parse_bytes(&bytes, name, ParseOptions::default()).expect("the list parses");
    list.entries.first().expect("a non-empty list").net.addr()
}

/// Frames to or from listed addresses: UDP, TCP and ICMP over IPv4 and
/// IPv6 with no, one or two VLAN tags, an IPv4 header with options, ARP,
/// stacks of priority tags up to one more than the parser follows, and cut
/// frames.
fn packets(dir: &Path, lists: &Path) {
    let listed_v4 = first_listed(lists, "dshield_top_1000.ipset");
    let listed_v6 = first_listed(lists, "spamhaus_dropv6.txt");
    let (IpAddr::V4(listed_v4), IpAddr::V6(listed_v6)) = (listed_v4, listed_v6) else {
        panic!("the lists changed families");
    };
    let host_v4 = Ipv4Addr::new(198, 18, 0, 1);
    let host_v6: Ipv6Addr = "2001:db8::1".parse().expect("an IPv6 address");
    let ethernet = || PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    let vlan = |id| VlanId::try_new(id).expect("a valid VLAN id");
    let ipv4 = |source: Ipv4Addr, destination: Ipv4Addr| {
        IpHeaders::Ipv4(
            Ipv4Header::new(
                0,
                64,
                etherparse::ip_number::UDP,
                source.octets(),
                destination.octets(),
            )
            .expect("an empty payload fits"),
            Default::default(),
        )
    };
    let ipv6 = |source: Ipv6Addr, destination: Ipv6Addr| {
        IpHeaders::Ipv6(
            Ipv6Header {
                hop_limit: 64,
                source: source.octets(),
                destination: destination.octets(),
                ..Default::default()
            },
            Default::default(),
        )
    };
    // A frame of a builder step that takes a payload (UDP, TCP, ICMP).
    macro_rules! built {
        ($builder:expr) => {{
            let builder = $builder;
            let mut frame = Vec::with_capacity(builder.size(PAYLOAD.len()));
            builder
                .write(&mut frame, PAYLOAD)
                .expect("writing to a Vec");
            frame
        }};
    }
    let mut with_options = Ipv4Header::new(
        0,
        64,
        etherparse::ip_number::UDP,
        listed_v4.octets(),
        host_v4.octets(),
    )
    .expect("an empty payload fits");
    // Record route, 8 bytes: IHL 7.
    with_options.options = [7, 7, 4, 0, 0, 0, 0, 0].into();
    let arp = ArpPacket::new(
        ArpHardwareId::ETHERNET,
        EtherType::IPV4,
        ArpOperation::REQUEST,
        &[2, 0, 0, 0, 0, 1],
        &host_v4.octets(),
        &[0; 6],
        &listed_v4.octets(),
    )
    .expect("an Ethernet/IPv4 ARP packet");
    let arp_builder = ethernet().arp(arp);
    let mut arp_frame = Vec::with_capacity(arp_builder.size());
    arp_builder.write(&mut arp_frame).expect("writing to a Vec");
    let frames = [
        (
            "udp4",
            built!(ethernet().ip(ipv4(listed_v4, host_v4)).udp(40000, 53)),
        ),
        (
            "udp4_one_tag",
            built!(ethernet()
                .single_vlan(vlan(7))
                .ip(ipv4(listed_v4, host_v4))
                .udp(40000, 53)),
        ),
        (
            "udp4_two_tags",
            built!(ethernet()
                .double_vlan(vlan(100), vlan(7))
                .ip(ipv4(host_v4, listed_v4))
                .udp(53, 40000)),
        ),
        (
            "tcp4_syn",
            built!(ethernet()
                .ip(ipv4(listed_v4, host_v4))
                .tcp(40000, 443, 1, 64240)
                .syn()),
        ),
        (
            "icmp4_echo",
            built!(ethernet()
                .ip(ipv4(listed_v4, host_v4))
                .icmpv4_echo_request(1, 1)),
        ),
        (
            "udp4_with_options",
            built!(ethernet()
                .ip(IpHeaders::Ipv4(with_options, Default::default()))
                .udp(40000, 53)),
        ),
        (
            "udp6",
            built!(ethernet().ip(ipv6(listed_v6, host_v6)).udp(40000, 53)),
        ),
        (
            "tcp6_two_tags",
            built!(ethernet()
                .double_vlan(vlan(100), vlan(7))
                .ip(ipv6(listed_v6, host_v6))
                .tcp(40000, 443, 1, 64240)
                .syn()),
        ),
        (
            "icmp6_echo_one_tag",
            built!(ethernet()
                .single_vlan(vlan(7))
                .ip(ipv6(host_v6, listed_v6))
                .icmpv6_echo_request(1, 1)),
        ),
        ("arp", arp_frame),
    ];
    for (name, frame) in &frames {
        write(dir, name, frame);
    }
    // Priority tags (VLAN id 0) stacked in front of a two-tag frame: the
    // kernel strips them all, so the parser follows them to the address,
    // and a stack deeper than it follows is malformed.
    let stacked = |tags: usize| {
        let (_, tagged) = &frames[2];
        let priority_tags = [0x81, 0x00, 0x00, 0x00].repeat(tags - 2);
        [&tagged[..12], &priority_tags[..], &tagged[12..]].concat()
    };
    write(dir, "udp4_three_tags", &stacked(3));
    write(dir, "udp4_max_tags", &stacked(MAX_VLAN_TAGS));
    write(dir, "udp4_too_many_tags", &stacked(MAX_VLAN_TAGS + 1));
    // Cut inside the IPv4 options, the IPv6 header and the Ethernet header.
    let cut = |name: &str, length: usize| {
        let (_, frame) = frames
            .iter()
            .find(|(candidate, _)| *candidate == name)
            .expect("a frame built above");
        frame[..length].to_vec()
    };
    write(
        dir,
        "udp4_with_options_cut",
        &cut("udp4_with_options", 14 + 24),
    );
    write(dir, "udp6_cut", &cut("udp6", 14 + 39));
    write(dir, "ethernet_cut", &cut("udp4", 13));
}

/// The agent configuration shipped in `userspace/dist/`, one feed of
/// each kind with every key set, and the mistakes the tests name.
fn agent_configs(dir: &Path) {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../userspace/dist/agent.toml");
    let example = std::fs::read(example).expect("reading the example agent configuration");
    write(dir, "example", &example);
    let every_key = "[metrics]\nlisten = \"[::1]:9640\"\n\n[[feed]]\nname = \"a-1.b_c\"\n\
        url = \"http://127.0.0.1:8080/list\"\nrefresh = \"1h 30m\"\nformat = \"netset\"\n\
        list = \"allowlist\"\ntimeout = \"5s\"\nmax_bytes = 4096\nmax_entries = 10\n\n\
        [[feed]]\nname = \"local\"\npath = \"/srv/lists/local.txt\"\nrefresh = \"1s\"\n";
    write(dir, "every_key", every_key.as_bytes());
    write(dir, "metrics_off", b"[metrics]\nlisten = \"\"\n");
    write(
        dir,
        "two_feeds_one_name",
        b"[[feed]]\nname = \"a\"\npath = \"/x\"\nrefresh = \"1m\"\n\
          [[feed]]\nname = \"a\"\npath = \"/y\"\nrefresh = \"1m\"\n",
    );
    write(dir, "unclosed_table", b"[[feed]\nname = \"a\"\n");
}

/// One decision as a CrowdSec LAPI (1.6) lists it in
/// `/v1/decisions/stream`.
fn lapi_decision(
    id: u64,
    (scope, value): (&str, &str),
    (kind, duration): (&str, &str),
    (origin, scenario): (&str, &str),
) -> serde_json::Value {
    serde_json::json!({
        "duration": duration, "id": id, "origin": origin, "scenario": scenario,
        "scope": scope, "type": kind, "value": value,
        "uuid": format!("5d3e9b9c-0f4c-4c1e-9a51-{id:012x}"),
    })
}

/// Runs of LAPI answers as the agent meets them (the first byte: which are
/// startup answers, and how far the clock moves between them; answers
/// separated by NUL bytes): a startup list of every scope, type and origin,
/// then changes, deletions, expiries and the `null` lists of a quiet
/// stream; addresses from the shared lists.
fn lapi_answers(dir: &Path, lists: &Path) {
    let listed_v4 = first_listed(lists, "dshield_top_1000.ipset").to_string();
    let listed_v6 = first_listed(lists, "spamhaus_dropv6.txt").to_string();
    let cscli = ("cscli", "manual 'ban' from 'localhost'");
    let ban = |duration| ("ban", duration);
    let startup = serde_json::json!({
        "new": [
            lapi_decision(1, ("Ip", &listed_v4), ban("3h59m59.5s"), cscli),
            lapi_decision(2, ("Ip", &listed_v6), ban("167h59m58.1s"), ("crowdsec", "crowdsecurity/ssh-bf")),
            lapi_decision(3, ("Range", "198.18.0.0/24"), ban("23h59m59s"), cscli),
            lapi_decision(4, ("Range", "2001:db8::/48"), ban("1h"), cscli),
            lapi_decision(5, ("Ip", "198.18.0.7"), ban("59m59s"), ("CAPI", "crowdsecurity/http-probing")),
            lapi_decision(6, ("Ip", "198.18.0.8"), ("captcha", "4h"), cscli),
            lapi_decision(7, ("Country", "FR"), ban("4h"), cscli),
            lapi_decision(8, ("Ip", "198.18.0.7"), ban("2m"), ("crowdsec", "crowdsecurity/ssh-slow-bf")),
            lapi_decision(9, ("Ip", "198.18.0.9"), ban("30s"), cscli),
        ],
        "deleted": null,
    });
    let changes = serde_json::json!({
        "new": [
            lapi_decision(10, ("Ip", &listed_v4), ban("7h59m59s"), cscli),
            lapi_decision(11, ("Range", "198.18.0.1/24"), ban("1h"), cscli),
        ],
        "deleted": [
            lapi_decision(3, ("Range", "198.18.0.0/24"), ban("-1.606978886s"), cscli),
            lapi_decision(2, ("Ip", &listed_v6), ban("-4m3s"), cscli),
        ],
    });
    let quiet = serde_json::json!({ "new": null, "deleted": null });
    let join = |answers: &[&serde_json::Value]| {
        let mut bytes = Vec::new();
        for answer in answers {
            bytes.push(0);
            bytes.extend(serde_json::to_vec(answer).expect("JSON"));
        }
        bytes
    };
    let mut startup_then_changes = join(&[&startup, &changes, &quiet, &changes]);
    startup_then_changes[0] = 0x10;
    write(dir, "startup_then_changes", &startup_then_changes);
    let mut expiring = join(&[&startup, &quiet, &quiet, &startup]);
    expiring[0] = 0xf8;
    write(dir, "expiring_and_startup_again", &expiring);
    let mut quiet_only = join(&[&quiet]);
    quiet_only[0] = 0x01;
    write(dir, "quiet", &quiet_only);
}

/// Records of `device_datagrams`: `len ‖ how ‖ bytes` (see the target).
fn device_datagrams(dir: &Path, prefixes: &[Prefix]) {
    let record = |how: u8, bytes: &[u8]| {
        let mut record = vec![u8::try_from(bytes.len()).expect("a short record"), how];
        record.extend_from_slice(bytes);
        record
    };
    let request = |id, message: Request<'_>| frame_of(&Envelope { id, message });
    let hello = Request::Hello {
        version: PROTOCOL_VERSION,
    };
    // An ARP request for the device's address (198.18.250.2).
    let mut arp = vec![0xff; 6];
    arp.extend_from_slice(&[0x02, 0xcf, 0, 0, 0, 2, 0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
    arp.extend_from_slice(&[0x02, 0xcf, 0, 0, 0, 2, 198, 18, 250, 1]);
    arp.extend_from_slice(&[0, 0, 0, 0, 0, 0, 198, 18, 250, 2]);
    arp.resize(60, 0);
    let session = [
        record(0, &arp),
        record(2, &request(1, hello)),
        record(1, &request(2, Request::Add(Item::Net(prefixes[0])))),
        record(4, &[]),
        record(3, &request(3, Request::Clear)),
        record(2, &request(4, Request::Check(Item::Net(prefixes[0])))),
        record(1, &request(5, Request::Delete(Item::Net(prefixes[0])))),
        record(2, &request(6, Request::Save)),
        record(1, &request(7, Request::Stats)),
    ]
    .concat();
    write(dir, "session", &session);
    // A resend of a request under a new counter, answered from memory.
    let add = request(8, Request::Add(Item::U64(7)));
    write(dir, "resend", &[record(2, &add), record(1, &add)].concat());
}

fn main() {
    let lists = PathBuf::from(
        std::env::args()
            .nth(1)
            .expect("usage: seed_corpus BLOCKLIST_DIR"),
    );
    let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    let prefixes = listed_prefixes(&lists, 100);
    assert!(prefixes.iter().any(|p| p.family() == AddressFamily::Ipv6));
    device_frames(&seeds.join("device_frames"), &prefixes);
    snapshots(&seeds.join("snapshot"), &prefixes);
    flash_images(&seeds.join("flash_image"), &prefixes);
    device_responses(&seeds.join("device_responses"));
    device_datagrams(&seeds.join("device_datagrams"), &prefixes);
    blocklists(&seeds.join("netlist"), &lists);
    packets(&seeds.join("packet"), &lists);
    agent_configs(&seeds.join("agent_config"));
    lapi_answers(&seeds.join("lapi_answers"), &lists);
}
