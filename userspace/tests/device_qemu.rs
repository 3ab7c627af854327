//! End to end on QEMU: boots the `mps2-an386` firmware image with UART0 on a
//! unix socket and drives it through [`cfctl::device::DeviceClient`]:
//! the cross-target test vectors, a blocklist pushed as a snapshot, 10,000
//! checks compared with filter-core on the host, deletes, damaged frames and
//! a damaged snapshot that must change nothing, a save, and the decoded
//! defmt log; and 10,000 random operations over a lossy serial line
//! (dropped, flipped, duplicated and cut bytes, bursts of noise) that must
//! leave the device exactly where a model on the host is.
//!
//! Needs `qemu-system-arm` and `defmt-print` (`./x setup`). Builds the
//! image itself with cargo in `firmware/boards` (or takes the ELF named by
//! `CF_QEMU_FIRMWARE`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::Write;
use std::net::IpAddr;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use common::qemu::{
    firmware_elf, firmware_elf_with_fault_triggers, repo_root, stack_high_water_mark, Qemu,
};
use common::serial_line::{Faults, SerialLine};

use cfctl::device::{DeviceClient, DeviceError, LinkTiming};
use filter_core::protocol::{self, Error, Item, Prefix, PrefixLengths, ResetCause, Response};
use filter_core::StaticCuckooFilter;
use rand::{rngs::StdRng, Rng, SeedableRng};

/// The device's filter shape (firmware/boards/qemu-mps2/src/main.rs).
type HostFilter = StaticCuckooFilter<u16, 4, 8192>;
const TIMEOUT: Duration = Duration::from_secs(30);
const SEED: u64 = 0xc0ff_ee00_5eed;

fn prefix(address: IpAddr, len: u8) -> Prefix {
    match address {
        IpAddr::V4(v4) => Prefix::V4 {
            address: v4.octets(),
            len,
        },
        IpAddr::V6(v6) => Prefix::V6 {
            address: v6.octets(),
            len,
        },
    }
}

/// The CIDRs of a blocklist file: `CIDR` or `CIDR ; comment` lines, `#` and
/// `;` comments.
fn blocklist(name: &str) -> Vec<Prefix> {
    let path = repo_root().join("../shared/data/blocklists").join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    text.lines()
        .map(|line| line.split(['#', ';']).next().unwrap_or("").trim())
        .filter(|line| !line.is_empty())
        .map(|cidr| {
            let (address, len) = cidr.split_once('/').unwrap_or((cidr, ""));
            let address: IpAddr = address.parse().unwrap();
            let max = if address.is_ipv4() { 32 } else { 128 };
            prefix(
                address,
                if len.is_empty() {
                    max
                } else {
                    len.parse().unwrap()
                },
            )
        })
        .collect()
}

fn key_hash(filter: &HostFilter, prefix: &Prefix) -> filter_core::KeyHash {
    prefix.net_key().unwrap().hash(filter.seed())
}

/// Checks `items` on the device and on the host; every answer must agree.
fn compare_checks(
    device: &mut DeviceClient<UnixStream>,
    host: &HostFilter,
    lengths: &PrefixLengths,
    items: &[Item<'_>],
) -> usize {
    let answers = device.check_batch(items).unwrap();
    let mut present = 0;
    for (item, answer) in items.iter().zip(answers) {
        let expected = protocol::contains(host, lengths, item).unwrap();
        assert_eq!(answer, expected, "device and host disagree on {item:?}");
        present += usize::from(answer);
    }
    present
}

/// 10,000 IPv4 addresses: half inside listed prefixes, half anywhere.
fn sample_addresses(listed: &[Prefix], rng: &mut StdRng) -> Vec<Item<'static>> {
    (0..10_000)
        .map(|index| {
            let address = if index % 2 == 0 {
                let Prefix::V4 { address, len } = listed[rng.random_range(0..listed.len())] else {
                    unreachable!("IPv4 list")
                };
                let host_bits = u32::MAX.checked_shr(u32::from(len)).unwrap_or(0);
                u32::from_be_bytes(address) | (rng.random::<u32>() & host_bits)
            } else {
                rng.random()
            };
            Item::Net(Prefix::V4 {
                address: address.to_be_bytes(),
                len: 32,
            })
        })
        .collect()
}

fn check_vectors(device: &mut DeviceClient<UnixStream>) {
    let vectors =
        std::fs::read_to_string(repo_root().join("filter-core/tests/vectors.csv")).unwrap();
    let hex = |text: &str| u64::from_str_radix(text.trim_start_matches("0x"), 16).unwrap();
    let mut rows = 0;
    for line in vectors.lines().skip(1) {
        let fields: Vec<&str> = line.split(',').collect();
        let [seed, key, bucket_count, bits, hash, fingerprint, primary, alternate] = fields[..]
        else {
            panic!("bad vector line {line}");
        };
        let item = if let Some(net) = key.strip_prefix("net:") {
            let (address, len) = net.rsplit_once('/').unwrap();
            Item::Net(prefix(address.parse().unwrap(), len.parse().unwrap()))
        } else {
            Item::U64(key.strip_prefix("u64:").unwrap().parse().unwrap())
        };
        let located = device
            .locate(
                item,
                hex(seed),
                bucket_count.parse().unwrap(),
                bits.parse().unwrap(),
            )
            .unwrap();
        assert_eq!(
            (
                located.hash,
                located.fingerprint.to_string(),
                located.primary.to_string(),
                located.alternate.to_string()
            ),
            (
                hex(hash),
                fingerprint.into(),
                primary.into(),
                alternate.into()
            ),
            "vector {line}"
        );
        rows += 1;
    }
    assert!(rows > 100, "only {rows} vectors");
}

#[test]
fn firmware_in_qemu_matches_filter_core() {
    let elf = firmware_elf();
    let (mut qemu, stream) = Qemu::boot(&elf);
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut device = DeviceClient::new(stream, TIMEOUT);

    let info = device.hello().unwrap();
    assert_eq!(
        (
            info.fingerprint_bits,
            info.slots_per_bucket,
            info.bucket_count
        ),
        (16, 4, 8192),
        "the host filter type no longer matches the QEMU board"
    );
    assert_eq!((info.entries, info.saved_sequence), (0, None));

    check_vectors(&mut device);

    // Import: build the whole filter on the host, push it as a snapshot.
    let listed = blocklist("spamhaus_drop.netset");
    assert!(listed.len() > 500);
    let mut host = Box::new(HostFilter::new(SEED));
    let mut lengths = PrefixLengths::new();
    for cidr in &listed {
        host.insert_hash(key_hash(&host, cidr)).unwrap();
        lengths.insert(cidr.family(), cidr.prefix_len());
    }
    let mut snapshot = vec![0u8; host.snapshot_len() as usize];
    host.write_snapshot(&mut snapshot).unwrap();
    let (entries, sequence) = device.push_snapshot(&snapshot, lengths).unwrap();
    assert_eq!((entries as usize, sequence), (listed.len(), 1));
    let info = device.hello().unwrap();
    assert_eq!((info.seed, info.prefix_lengths), (SEED, lengths));

    let mut rng = StdRng::seed_from_u64(0x5eed);
    let addresses = sample_addresses(&listed, &mut rng);
    let present = compare_checks(&mut device, &host, &lengths, &addresses);
    assert!(present >= 5_000, "listed addresses must all be present");

    // Delete the first 100 prefixes on both sides.
    for cidr in &listed[..100] {
        assert!(
            device.delete(Item::Net(*cidr)).unwrap(),
            "{cidr:?} not found"
        );
        assert!(host.remove_hash(key_hash(&host, cidr)));
    }
    compare_checks(&mut device, &host, &lengths, &addresses);

    // IPv6 entries added one batch at a time.
    let listed_v6 = blocklist("spamhaus_dropv6.txt");
    let items: Vec<Item<'_>> = listed_v6.iter().map(|cidr| Item::Net(*cidr)).collect();
    assert_eq!(device.add_batch(&items).unwrap(), items.len());
    for cidr in &listed_v6 {
        host.insert_hash(key_hash(&host, cidr)).unwrap();
        lengths.insert(cidr.family(), cidr.prefix_len());
    }
    // An address inside each listed prefix, and one just outside the list.
    let v6_checks: Vec<Item<'_>> = listed_v6
        .iter()
        .flat_map(|cidr| {
            let Prefix::V6 { mut address, .. } = *cidr else {
                unreachable!("IPv6 list")
            };
            address[15] ^= 0x42;
            let mut outside = address;
            outside[0] ^= 0x80;
            [address, outside].map(|address| Item::Net(Prefix::V6 { address, len: 128 }))
        })
        .collect();
    compare_checks(&mut device, &host, &lengths, &v6_checks);

    // Damaged frames and a damaged snapshot change nothing.
    let before = device.hello().unwrap();
    let frame = {
        let mut out = vec![0u8; protocol::MAX_FRAME_LEN + 1];
        protocol::encode(&protocol::Request::Add(Item::U64(999)), &mut out)
            .unwrap()
            .to_vec()
    };
    let mut corrupted = frame.clone();
    corrupted[3] ^= 0x04;
    let truncated = [&frame[..frame.len() / 2], &[0]].concat();
    let oversized = [vec![0x55; protocol::MAX_FRAME_LEN + 10], vec![0]].concat();
    let unknown = {
        let mut out = [0u8; 32];
        protocol::encode(&(200u8, 5u32), &mut out).unwrap().to_vec()
    };
    for (name, bytes) in [
        ("corrupted", corrupted),
        ("truncated", truncated),
        ("oversized", oversized),
        ("unknown", unknown),
    ] {
        let response = device.exchange_raw(&bytes).unwrap();
        assert!(
            matches!(response, Response::Error(Error::Frame(_))),
            "{name} frame got {response:?}"
        );
    }
    let mut damaged = snapshot.clone();
    damaged[1000] ^= 0x01;
    assert!(matches!(
        device.push_snapshot(&damaged, lengths),
        Err(DeviceError::Refused(Error::Snapshot(_)))
    ));
    assert_eq!(device.hello().unwrap(), before);
    compare_checks(&mut device, &host, &lengths, &[Item::U64(999)]);
    compare_checks(&mut device, &host, &lengths, &addresses);
    let stats = device.stats().unwrap();
    assert_eq!(stats.frame_errors, 4);
    assert_eq!(stats.deleted, 100);

    assert_eq!(device.save().unwrap(), 2);
    assert_eq!(device.hello().unwrap().saved_sequence, Some(2));

    // Fill the device to the brim: relocations run (the deepest stack), and
    // no added item may go missing.
    device.clear().unwrap();
    let mut added = Vec::new();
    'fill: for batch in 0u64.. {
        let items: Vec<Item<'_>> = (batch * 32..batch * 32 + 32).map(Item::U64).collect();
        match device.add_batch(&items) {
            Ok(count) => added.extend_from_slice(&items[..count]),
            Err(DeviceError::Refused(Error::Full { added: count })) => {
                added.extend_from_slice(&items[..usize::from(count)]);
                break 'fill;
            }
            Err(error) => panic!("filling: {error}"),
        }
    }
    assert!(
        added.len() as u32 >= info.capacity * 9 / 10,
        "full at {} of {} slots",
        added.len(),
        info.capacity
    );
    assert!(device
        .check_batch(&added)
        .unwrap()
        .into_iter()
        .all(|present| present));

    let log = qemu.stop_and_decode_log(&elf);
    let stack_used = stack_high_water_mark(&log);
    assert!(
        stack_used < 7 * 1024,
        "the firmware used {stack_used} bytes of stack"
    );
    for expected in [
        "no saved image: starting empty",
        "ready: 0 of 32768 slots used",
        "snapshot 1 committed",
        "rejected frame",
        "saved image 2",
    ] {
        assert!(
            log.contains(expected),
            "defmt log lacks {expected:?}:\n{log}"
        );
    }
}

/// The lossy line's faults: about one byte in 400 in each direction, which
/// damages some 5-10% of the frames and keeps the run to a minute or two.
const LOSSY: Faults = Faults {
    per_byte: 0.0025,
    seed: 0x1055_11e5,
};
const LOSSY_OPERATIONS: usize = 10_000;

/// A random item: one of 4,000 numbers or a prefix in 198.18.0.0/15 (so
/// that adds repeat and deletes find something).
fn random_item(rng: &mut StdRng) -> Item<'static> {
    if rng.random_bool(0.5) {
        return Item::U64(rng.random_range(0..4_000));
    }
    let len = [16, 24, 32][rng.random_range(0..3)];
    let address = (0xc612_0000u32 | rng.random_range(0..0x2_0000)) & (u32::MAX << (32 - len));
    Item::Net(Prefix::V4 {
        address: address.to_be_bytes(),
        len,
    })
}

/// The device as the host expects it: the same filter-core filter under
/// the same seed, fed the same operations, and the list of items added
/// (with repeats).
struct Model {
    filter: Box<HostFilter>,
    lengths: PrefixLengths,
    listed: Vec<Item<'static>>,
}

impl Model {
    fn add(&mut self, item: Item<'static>) {
        let hash = item.hash(self.filter.seed()).unwrap();
        self.filter.insert_hash(hash).unwrap();
        if let Item::Net(prefix) = item {
            self.lengths.insert(prefix.family(), prefix.prefix_len());
        }
        self.listed.push(item);
    }

    fn delete(&mut self, item: Item<'static>) -> bool {
        let hash = item.hash(self.filter.seed()).unwrap();
        let found = self.filter.remove_hash(hash);
        if let Some(index) = self.listed.iter().position(|listed| *listed == item) {
            self.listed.swap_remove(index);
        }
        found
    }

    fn contains(&self, item: &Item<'_>) -> bool {
        protocol::contains(&self.filter, &self.lengths, item).unwrap()
    }

    /// A random item listed fewer than four times (a bucket pair holds at
    /// most eight copies of one fingerprint).
    fn addable(&self, rng: &mut StdRng, batch: &[Item<'static>]) -> Item<'static> {
        loop {
            let item = random_item(rng);
            let copies = self
                .listed
                .iter()
                .chain(batch)
                .filter(|listed| **listed == item)
                .count();
            if copies < 4 {
                return item;
            }
        }
    }
}

#[test]
fn ten_thousand_operations_over_a_lossy_line_match_the_model() {
    let elf = firmware_elf();
    let (mut qemu, uart) = Qemu::boot(&elf);
    let line = SerialLine::start(qemu.dir(), uart, Some(LOSSY));
    let stream = UnixStream::connect(line.path()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(10)))
        .unwrap();
    let timing = LinkTiming {
        deadline: Duration::from_secs(30),
        resend_after: Duration::from_millis(60),
    };
    let mut device = DeviceClient::with_timing(stream, timing);
    let info = device.hello().unwrap();
    let mut model = Model {
        filter: Box::new(HostFilter::new(info.seed)),
        lengths: PrefixLengths::new(),
        listed: Vec::new(),
    };
    let mut rng = StdRng::seed_from_u64(LOSSY.seed);
    let started = Instant::now();
    for operation in 0..LOSSY_OPERATIONS {
        let context = |what: &str| format!("operation {operation} ({what})");
        match rng.random_range(0..100) {
            0..30 => {
                let item = model.addable(&mut rng, &[]);
                device.add(item).unwrap();
                model.add(item);
            }
            30..40 => {
                let mut items = Vec::new();
                for _ in 0..rng.random_range(2..=8) {
                    items.push(model.addable(&mut rng, &items));
                }
                assert_eq!(device.add_batch(&items).unwrap(), items.len());
                items.into_iter().for_each(|item| model.add(item));
            }
            40..60 => {
                let item = match model.listed.len() {
                    0 => random_item(&mut rng),
                    len if rng.random_bool(0.7) => model.listed[rng.random_range(0..len)],
                    _ => random_item(&mut rng),
                };
                let found = device.delete(item).unwrap();
                assert_eq!(found, model.delete(item), "{}", context("delete"));
            }
            60..85 => {
                let item = random_item(&mut rng);
                let present = device.check(item).unwrap();
                assert_eq!(present, model.contains(&item), "{}", context("check"));
            }
            85..95 => {
                let items: Vec<Item<'static>> = (0..rng.random_range(1..=16))
                    .map(|_| random_item(&mut rng))
                    .collect();
                let expected: Vec<bool> = items.iter().map(|item| model.contains(item)).collect();
                assert_eq!(
                    device.check_batch(&items).unwrap(),
                    expected,
                    "{}",
                    context("check batch")
                );
            }
            95..99 => {
                let info = device.hello().unwrap();
                assert_eq!(
                    info.entries as usize,
                    model.filter.len(),
                    "{}",
                    context("hello")
                );
            }
            _ => {
                // A save executed twice would skip a sequence number. (A
                // change that finds the journal full saves too.)
                let saved_sequence = device.hello().unwrap().saved_sequence.unwrap_or(0);
                assert_eq!(
                    device.save().unwrap(),
                    saved_sequence + 1,
                    "{}",
                    context("save")
                );
            }
        }
    }
    let elapsed = started.elapsed();

    // The device holds exactly the model's items: the count, every listed
    // item, and the model's answer for 2,000 random items.
    let info = device.hello().unwrap();
    assert_eq!(info.entries as usize, model.filter.len());
    assert_eq!(model.filter.len(), model.listed.len());
    assert_eq!(info.prefix_lengths, model.lengths);
    let listed = model.listed.clone();
    assert!(device
        .check_batch(&listed)
        .unwrap()
        .into_iter()
        .all(|present| present));
    let probes: Vec<Item<'static>> = (0..2_000).map(|_| random_item(&mut rng)).collect();
    let expected: Vec<bool> = probes.iter().map(|item| model.contains(item)).collect();
    assert_eq!(device.check_batch(&probes).unwrap(), expected);

    // The line did damage frames, and the link and the device saw it.
    let (to_device, to_host) = line.faults();
    let link = device.link_stats();
    let stats = device.stats().unwrap();
    eprintln!(
        "{LOSSY_OPERATIONS} operations over the lossy line in {elapsed:.1?}: \
         faults host->device {to_device:?}, device->host {to_host:?}; \
         link {link:?}; device: {} frame errors, {} replayed",
        stats.frame_errors, stats.replayed
    );
    assert!(to_device.total() > 100 && to_host.total() > 100);
    assert!(link.resent > 0 && link.damaged + link.rejected > 0);
    assert!(stats.frame_errors > 0 && stats.replayed > 0);
    drop(device);
    drop(line);
    qemu.stop_and_decode_log(&elf);
}

#[test]
fn a_panic_a_hard_fault_and_a_hang_reset_the_device_which_keeps_every_answered_change_and_says_why()
{
    let elf = firmware_elf_with_fault_triggers();
    let (mut qemu, stream) = Qemu::boot(&elf);
    stream
        .set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let mut trigger = stream.try_clone().unwrap();
    let timing = LinkTiming {
        deadline: Duration::from_secs(30),
        resend_after: Duration::from_millis(200),
    };
    let mut device = DeviceClient::with_timing(stream, timing);
    assert_eq!(device.hello().unwrap().reset_cause, ResetCause::PowerOn);
    let mut listed: Vec<Item<'_>> = (0..3).map(Item::U64).collect();
    assert_eq!(device.add_batch(&listed).unwrap(), 3);
    // The first change of a blank device saved image 1.
    assert_eq!(device.save().unwrap(), 2);
    for (name, cause) in [
        ("panic", ResetCause::Panic),
        ("hardfault", ResetCause::HardFault),
        // The watchdog bites after two of its periods without food.
        ("hang", ResetCause::Watchdog),
    ] {
        // An entry added after the save goes to the journal, and a delete
        // too: both outlive the reset.
        let added = Item::U64(100 + listed.len() as u64);
        device.add_batch(&[added, Item::U64(999)]).unwrap();
        assert!(device.delete(Item::U64(999)).unwrap());
        listed.push(added);
        trigger.write_all(format!("!{name}\0").as_bytes()).unwrap();
        // The client resends until the rebooted device answers.
        let info = device.hello().unwrap();
        assert_eq!(
            (info.entries as usize, info.saved_sequence, info.reset_cause),
            (listed.len(), Some(2), cause),
            "after a {name}, the device must come back with every change it answered and say why"
        );
        let present = device.check_batch(&listed).unwrap();
        assert!(present.into_iter().all(|present| present));
    }
    let log = qemu.stop_and_decode_log_after_faults(&elf);
    for expected in [
        "fault trigger: panic",
        "panic at",
        "HardFault at pc",
        "fault trigger: hang",
        "watchdog: the main loop stopped",
        "loaded image 2 and 2 changes after it: 4 entries",
        "loaded image 2 and 6 changes after it: 6 entries",
    ] {
        assert!(
            log.contains(expected),
            "defmt log lacks {expected:?}:\n{log}"
        );
    }
    assert_eq!(log.matches("ready: ").count(), 4, "four boots:\n{log}");
}
