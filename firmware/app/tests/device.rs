//! The application on the host: a scripted fake serial port drives
//! [`firmware::serve`], and a flash mock that loses power at every single
//! write and erase step checks that a reboot always finds the old or the new
//! image, never garbage.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::VecDeque;

use embedded_storage::nor_flash::{ErrorType, NorFlash, NorFlashErrorKind, ReadNorFlash};
use filter_core::protocol::{
    self, Envelope, Error, FrameError, Info, Item, JournalFill, Prefix, PrefixLengths, Request,
    ResetCause, Response, MAX_CHUNK_LEN, NO_ID, PROTOCOL_VERSION,
};
use filter_core::{AddressFamily, StaticCuckooFilter};
use firmware::serve::PortError;
use firmware::stm32::ResetFlags;
use firmware::{Device, RamFlash, SlotLayout};

type Filter = StaticCuckooFilter<u16, 4, 64>;
const WRITE: usize = 4;
const ERASE: usize = 256;
const LAYOUT: SlotLayout = SlotLayout {
    offsets: [0, 1024],
    slot_len: 1024,
};
const SEED: u64 = 0x5eed;

fn blank_flash() -> Vec<u8> {
    vec![0xff; 2048]
}

/// NOR flash in a `Vec` that loses power after `budget` write units and
/// erase units: the interrupted unit is left half done (half a sector
/// erased, some bits of a word programmed), and every later write or erase
/// fails.
struct CuttingFlash {
    memory: Vec<u8>,
    budget: usize,
}

impl CuttingFlash {
    /// Spends one step; `Ok(true)` when this is the step the power goes.
    fn spend(&mut self) -> Result<bool, NorFlashErrorKind> {
        if self.budget == 0 {
            return Err(NorFlashErrorKind::Other);
        }
        self.budget -= 1;
        Ok(self.budget == 0)
    }
}

impl ErrorType for CuttingFlash {
    type Error = NorFlashErrorKind;
}

impl ReadNorFlash for CuttingFlash {
    const READ_SIZE: usize = 1;
    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), Self::Error> {
        let start = offset as usize;
        let source = self
            .memory
            .get(start..start + bytes.len())
            .ok_or(NorFlashErrorKind::OutOfBounds)?;
        bytes.copy_from_slice(source);
        Ok(())
    }
    fn capacity(&self) -> usize {
        self.memory.len()
    }
}

impl NorFlash for CuttingFlash {
    const WRITE_SIZE: usize = WRITE;
    const ERASE_SIZE: usize = ERASE;

    fn erase(&mut self, from: u32, to: u32) -> Result<(), Self::Error> {
        for unit in (from as usize..to as usize).step_by(ERASE) {
            let cut = self.spend()?;
            let erased = if cut { ERASE / 2 } else { ERASE };
            self.memory[unit..unit + erased].fill(0xff);
            if cut {
                return Err(NorFlashErrorKind::Other);
            }
        }
        Ok(())
    }

    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), Self::Error> {
        assert_eq!(offset as usize % WRITE, 0, "unaligned write");
        for (index, word) in bytes.chunks(WRITE).enumerate() {
            let at = offset as usize + index * WRITE;
            let cut = self.spend()?;
            for (cell, &byte) in self.memory[at..at + word.len()].iter_mut().zip(word) {
                // Cut: only some of the bits that should clear did.
                *cell &= if cut { byte | 0x5a } else { byte };
            }
            if cut {
                return Err(NorFlashErrorKind::Other);
            }
        }
        Ok(())
    }
}

/// A scripted serial port: reads the bytes queued, then fails (which ends
/// `serve`); collects what the device writes.
#[derive(Default)]
struct FakePort {
    input: VecDeque<u8>,
    output: Vec<u8>,
}

#[derive(Debug)]
struct EndOfScript;

impl embedded_io::Error for EndOfScript {
    fn kind(&self) -> embedded_io::ErrorKind {
        embedded_io::ErrorKind::Other
    }
}

impl embedded_io::ErrorType for FakePort {
    type Error = EndOfScript;
}

impl embedded_io::Read for FakePort {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, EndOfScript> {
        if self.input.is_empty() {
            return Err(EndOfScript);
        }
        let count = buf.len().min(self.input.len()).min(7);
        for slot in &mut buf[..count] {
            *slot = self.input.pop_front().unwrap();
        }
        Ok(count)
    }
}

impl embedded_io::Write for FakePort {
    fn write(&mut self, buf: &[u8]) -> Result<usize, EndOfScript> {
        self.output.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> Result<(), EndOfScript> {
        Ok(())
    }
}

/// The frame of `request` with request id `id`.
fn frame_with_id(id: u32, request: &Request<'_>) -> Vec<u8> {
    let mut out = vec![0u8; protocol::MAX_FRAME_LEN + 1];
    let envelope = Envelope {
        id,
        message: request.clone(),
    };
    protocol::encode(&envelope, &mut out).unwrap().to_vec()
}

/// Request ids: every request of these tests gets a new one.
fn next_id() -> u32 {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The frame of `request` with a new request id.
fn frame(request: &Request<'_>) -> Vec<u8> {
    frame_with_id(next_id(), request)
}

/// Sends raw byte streams through `serve` and decodes every response.
fn exchange<Flash: NorFlash>(
    device: &mut Device<'_, u16, 4, [[u16; 4]; 64], Flash>,
    streams: &[Vec<u8>],
) -> Vec<Envelope<Response>> {
    let mut port = FakePort::default();
    for stream in streams {
        port.input.extend(stream);
    }
    let mut tx = FakePort::default();
    assert_eq!(firmware::serve(device, &mut port, &mut tx), PortError::Read);
    let mut reader = protocol::FrameReader::<{ protocol::MAX_RESPONSE_FRAME_LEN }>::new();
    let mut responses = Vec::new();
    for byte in tx.output {
        if let Some(frame) = reader.push(byte) {
            responses.push(protocol::decode::<Envelope<Response>>(frame.unwrap()).unwrap());
        }
    }
    responses
}

fn ask<Flash: NorFlash>(
    device: &mut Device<'_, u16, 4, [[u16; 4]; 64], Flash>,
    request: Request<'_>,
) -> Response {
    let id = next_id();
    let mut responses = exchange(device, &[frame_with_id(id, &request)]);
    assert_eq!(responses.len(), 1, "one response per request");
    let answer = responses.remove(0);
    assert_eq!(answer.id, id, "the answer carries the request's id");
    answer.message
}

/// A device booted on `filter` with its flash images in `memory`.
fn boot<'f, 'm>(
    filter: &'f mut Filter,
    memory: &'m mut [u8],
) -> Device<'f, u16, 4, [[u16; 4]; 64], RamFlash<'m, WRITE, ERASE>> {
    Device::boot(
        filter,
        RamFlash::<WRITE, ERASE>::new(memory),
        LAYOUT,
        SEED,
        ResetCause::PowerOn,
    )
}

/// The device's answer to a hello.
fn info<Flash: NorFlash>(device: &mut Device<'_, u16, 4, [[u16; 4]; 64], Flash>) -> Info {
    match ask(
        device,
        Request::Hello {
            version: PROTOCOL_VERSION,
        },
    ) {
        Response::Info(info) => info,
        other => panic!("hello must answer info, got {other:?}"),
    }
}

fn v4(address: [u8; 4], len: u8) -> Item<'static> {
    Item::Net(Prefix::V4 { address, len })
}

/// What `filter` holds, as a reboot must bring it back: its count and its
/// answer for every key the journal's tests use. (Not the bytes of its
/// table: a replayed insert that relocates may move a key to its other
/// bucket, as the walk's random choices start over at boot.)
fn held(filter: &Filter) -> (usize, Vec<bool>) {
    let seed = filter.seed();
    let keys = (0..500)
        .map(Item::U64)
        .chain([v4([198, 18, 0, 0], 24), v4([198, 18, 7, 0], 24)]);
    let answers = keys
        .map(|item| filter.contains_hash(item.hash(seed).unwrap()))
        .collect();
    (filter.len(), answers)
}

fn table_of(filter: &Filter) -> Vec<u8> {
    let mut out = vec![0u8; filter.snapshot_len() as usize];
    filter.write_snapshot(&mut out).unwrap();
    out
}

#[test]
fn requests_get_one_answer_each_and_bad_frames_change_nothing() {
    let mut memory = blank_flash();
    let mut filter = Filter::new(0);
    let mut device = boot(&mut filter, &mut memory);

    let info = info(&mut device);
    assert_eq!((info.seed, info.entries, info.capacity), (SEED, 0, 256));
    assert_eq!(
        info.reset_cause,
        ResetCause::PowerOn,
        "the cause boot was given"
    );
    assert_eq!(
        ask(&mut device, Request::Hello { version: 99 }),
        Response::Error(Error::VersionMismatch {
            device: PROTOCOL_VERSION
        })
    );

    assert_eq!(
        ask(&mut device, Request::Add(v4([198, 18, 0, 0], 15))),
        Response::Added
    );
    assert_eq!(
        ask(&mut device, Request::Add(Item::Bytes(b"COUPON-1"))),
        Response::Added
    );
    assert_eq!(
        ask(&mut device, Request::Check(v4([198, 19, 7, 7], 32))),
        Response::Checked { present: true }
    );
    assert_eq!(
        ask(&mut device, Request::Add(v4([1, 2, 3, 4], 33))),
        Response::Error(Error::InvalidPrefixLen { len: 33 })
    );
    let before = table_of(device.filter());

    let good = frame(&Request::Add(Item::U64(7)));
    let mut corrupted = good.clone();
    corrupted[2] ^= 0x10;
    let truncated = [&good[..good.len() / 2], &[0]].concat();
    let oversized = [vec![9u8; protocol::MAX_FRAME_LEN + 5], vec![0]].concat();
    let unknown = {
        let mut out = vec![0u8; 64];
        protocol::encode(&(5u32, 77u8, 1u32), &mut out)
            .unwrap()
            .to_vec()
    };
    let answers = exchange(&mut device, &[corrupted, truncated, oversized, unknown]);
    assert_eq!(answers.len(), 4);
    assert!(
        answers.iter().all(|answer| answer.id == NO_ID),
        "an unreadable frame's answer has no id: {answers:?}"
    );
    let responses: Vec<Response> = answers.into_iter().map(|answer| answer.message).collect();
    assert!(matches!(
        responses[0],
        Response::Error(Error::Frame(FrameError::Crc { .. }))
    ));
    assert!(matches!(responses[1], Response::Error(Error::Frame(_))));
    assert_eq!(
        responses[2],
        Response::Error(Error::Frame(FrameError::Oversized))
    );
    assert_eq!(
        responses[3],
        Response::Error(Error::Frame(FrameError::Malformed))
    );
    assert_eq!(
        table_of(device.filter()),
        before,
        "bad frames changed the filter"
    );

    let batch: heapless::Vec<Item<'_>, { protocol::MAX_BATCH }> = [
        v4([10, 0, 0, 1], 32),
        Item::U64(1),
        Item::Bytes(b"COUPON-1"),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        ask(&mut device, Request::AddBatch(batch.clone())),
        Response::BatchAdded { added: 3 }
    );
    assert_eq!(
        ask(&mut device, Request::CheckBatch(batch)),
        Response::BatchChecked { present: 0b111 }
    );
    assert_eq!(
        ask(&mut device, Request::Delete(Item::U64(1))),
        Response::Deleted { found: true }
    );
    assert_eq!(
        ask(&mut device, Request::Check(Item::U64(1))),
        Response::Checked { present: false }
    );
    let Response::Stats(stats) = ask(&mut device, Request::Stats) else {
        panic!("stats");
    };
    assert_eq!((stats.frame_errors, stats.added, stats.deleted), (4, 5, 1));
    assert_eq!(stats.replayed, 0);
    assert_eq!(ask(&mut device, Request::Clear), Response::Cleared);
    assert_eq!(device.filter().len(), 0);
}

#[test]
fn a_retransmitted_request_is_answered_again_but_executed_once() {
    let mut memory = blank_flash();
    let mut filter = Filter::new(0);
    let mut device = boot(&mut filter, &mut memory);
    let add = frame_with_id(41, &Request::Add(Item::U64(9)));
    let answers = exchange(&mut device, &[add.clone(), add.clone(), add]);
    let expected = Envelope {
        id: 41,
        message: Response::Added,
    };
    assert_eq!(answers, [expected.clone(), expected.clone(), expected]);
    assert_eq!(device.filter().len(), 1, "a copy was executed again");

    // The same id on other bytes is another request; so is every request
    // without an id.
    let other = frame_with_id(41, &Request::Add(Item::U64(10)));
    let anonymous = frame_with_id(NO_ID, &Request::Add(Item::U64(11)));
    let answers = exchange(&mut device, &[other, anonymous.clone(), anonymous]);
    assert!(answers
        .iter()
        .all(|answer| answer.message == Response::Added));
    assert_eq!(device.filter().len(), 4);

    // Only the last request is remembered: an older copy runs again.
    let first = frame_with_id(50, &Request::Delete(Item::U64(9)));
    let second = frame_with_id(51, &Request::Check(Item::U64(9)));
    let answers = exchange(&mut device, &[first.clone(), second, first]);
    let messages: Vec<Response> = answers.into_iter().map(|answer| answer.message).collect();
    assert_eq!(
        messages,
        [
            Response::Deleted { found: true },
            Response::Checked { present: false },
            Response::Deleted { found: false },
        ]
    );
    let Response::Stats(stats) = ask(&mut device, Request::Stats) else {
        panic!("stats");
    };
    assert_eq!((stats.added, stats.replayed), (4, 2));
}

#[test]
fn fills_up_without_losing_an_entry() {
    let mut memory = blank_flash();
    let mut filter = Filter::new(0);
    let mut device = boot(&mut filter, &mut memory);
    let mut added = Vec::new();
    // 256 slots: a device that never says full fails here, not hangs.
    for value in 0u64..1024 {
        match ask(&mut device, Request::Add(Item::U64(value))) {
            Response::Added => added.push(value),
            Response::Error(Error::Full { added: 0 }) => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(added.len() > 200, "only {} entries fit", added.len());
    assert!(added.len() <= 256, "{} entries in 256 slots", added.len());
    for value in added {
        assert_eq!(
            ask(&mut device, Request::Check(Item::U64(value))),
            Response::Checked { present: true }
        );
    }
}

#[test]
fn snapshot_chunks_of_the_largest_size_are_taken_and_longer_ones_refused() {
    // A filter whose snapshot is longer than two chunks, in larger slots.
    let layout = SlotLayout {
        offsets: [0, 4096],
        slot_len: 4096,
    };
    let mut memory = vec![0xff; 8192];
    let mut filter = StaticCuckooFilter::<u16, 4, 256>::new(0);
    let mut device = Device::boot(
        &mut filter,
        RamFlash::<WRITE, ERASE>::new(&mut memory),
        layout,
        SEED,
        ResetCause::PowerOn,
    );
    let total_len = device.filter().snapshot_len() as u32;
    assert!(total_len as usize > MAX_CHUNK_LEN + protocol::CHUNK_ALIGN);
    let begin = Request::SnapshotBegin {
        total_len,
        prefix_lengths: PrefixLengths::new(),
    };
    assert_eq!(device.answer(begin), Response::SnapshotStarted);
    let bytes = [0x5au8; MAX_CHUNK_LEN + protocol::CHUNK_ALIGN];
    let too_long = Request::SnapshotChunk {
        offset: 0,
        data: &bytes,
    };
    assert_eq!(
        device.answer(too_long),
        Response::Error(Error::SnapshotChunk { expected_offset: 0 })
    );
    let largest = Request::SnapshotChunk {
        offset: 0,
        data: &bytes[..MAX_CHUNK_LEN],
    };
    assert_eq!(
        device.answer(largest),
        Response::ChunkAccepted {
            received: MAX_CHUNK_LEN as u32
        }
    );
}

/// Uploads a snapshot in chunks; returns the commit's response, or the
/// first response that was not the expected one.
fn upload<Flash: NorFlash>(
    device: &mut Device<'_, u16, 4, [[u16; 4]; 64], Flash>,
    snapshot: &[u8],
    prefix_lengths: PrefixLengths,
) -> Response {
    let begin = Request::SnapshotBegin {
        total_len: snapshot.len() as u32,
        prefix_lengths,
    };
    let started = ask(device, begin);
    if started != Response::SnapshotStarted {
        return started;
    }
    for (index, data) in snapshot.chunks(MAX_CHUNK_LEN / 2).enumerate() {
        let offset = (index * MAX_CHUNK_LEN / 2) as u32;
        let received = offset + data.len() as u32;
        let response = ask(device, Request::SnapshotChunk { offset, data });
        if response != (Response::ChunkAccepted { received }) {
            return response;
        }
    }
    ask(device, Request::SnapshotCommit)
}

/// A snapshot of 40 IPv4 addresses made on the host.
fn host_snapshot() -> (Vec<u8>, PrefixLengths) {
    let mut host = Filter::new(0x1234);
    let mut prefix_lengths = PrefixLengths::new();
    for last in 0..40u8 {
        let key = Prefix::V4 {
            address: [198, 18, 1, last],
            len: 32,
        }
        .net_key()
        .unwrap();
        host.insert_hash(key.hash(host.seed())).unwrap();
    }
    prefix_lengths.insert(AddressFamily::Ipv4, 32);
    (table_of(&host), prefix_lengths)
}

#[test]
fn snapshot_upload_replaces_the_filter_only_when_intact_and_survives_reboot() {
    let (snapshot, prefix_lengths) = host_snapshot();

    let mut memory = blank_flash();
    let mut filter = Filter::new(0);
    let mut device = boot(&mut filter, &mut memory);
    ask(&mut device, Request::Add(Item::U64(5)));
    let before = table_of(device.filter());

    let mut corrupted = snapshot.clone();
    corrupted[100] ^= 1;
    assert!(matches!(
        upload(&mut device, &corrupted, prefix_lengths),
        Response::Error(Error::Snapshot(
            filter_core::SnapshotError::CrcMismatch { .. }
        ))
    ));
    assert_eq!(table_of(device.filter()), before);

    // Incomplete upload, wrong length, chunk out of order, no upload.
    let begin = Request::SnapshotBegin {
        total_len: snapshot.len() as u32,
        prefix_lengths,
    };
    assert_eq!(ask(&mut device, begin.clone()), Response::SnapshotStarted);
    assert_eq!(
        ask(
            &mut device,
            Request::SnapshotChunk {
                offset: 4,
                data: &snapshot[4..8]
            }
        ),
        Response::Error(Error::SnapshotChunk { expected_offset: 0 })
    );
    assert_eq!(
        ask(
            &mut device,
            Request::SnapshotChunk {
                offset: 0,
                data: &snapshot[..3]
            }
        ),
        Response::Error(Error::SnapshotChunk { expected_offset: 0 })
    );
    assert!(matches!(
        ask(&mut device, Request::SnapshotCommit),
        Response::Error(Error::Snapshot(
            filter_core::SnapshotError::Truncated { .. }
        ))
    ));
    assert_eq!(
        ask(&mut device, Request::SnapshotCommit),
        Response::Error(Error::NoSnapshotUpload)
    );
    assert_eq!(
        ask(
            &mut device,
            Request::SnapshotBegin {
                total_len: 12,
                prefix_lengths
            }
        ),
        Response::Error(Error::SnapshotLength {
            expected: snapshot.len() as u32
        })
    );
    assert_eq!(table_of(device.filter()), before);

    let Response::SnapshotCommitted {
        entries: 40,
        sequence,
    } = upload(&mut device, &snapshot, prefix_lengths)
    else {
        panic!("intact snapshot rejected");
    };
    assert_eq!(table_of(device.filter()), snapshot);
    assert_eq!(
        ask(&mut device, Request::Check(v4([198, 18, 1, 39], 32))),
        Response::Checked { present: true }
    );

    // Reboot from the same flash: the committed snapshot is the saved image.
    let mut rebooted = Filter::new(0);
    let mut device = boot(&mut rebooted, &mut memory);
    let info = info(&mut device);
    assert_eq!(info.saved_sequence, Some(sequence));
    assert_eq!(info.prefix_lengths, prefix_lengths);
    assert_eq!(table_of(device.filter()), snapshot);
}

/// Saves `items` on a fresh device; returns the flash and the image.
fn saved_device(items: std::ops::Range<u64>) -> (Vec<u8>, Vec<u8>) {
    let mut memory = blank_flash();
    let mut filter = Filter::new(0);
    let mut device = boot(&mut filter, &mut memory);
    for value in items {
        ask(&mut device, Request::Add(Item::U64(value)));
    }
    assert!(matches!(
        ask(&mut device, Request::Save),
        Response::Saved { .. }
    ));
    let image = table_of(device.filter());
    (memory, image)
}

type CutDevice<'f, 'm> = Device<'f, u16, 4, [[u16; 4]; 64], &'m mut CuttingFlash>;

/// The flash of `memory` with the power back on.
fn powered_on(memory: Vec<u8>) -> CuttingFlash {
    CuttingFlash {
        memory,
        budget: usize::MAX,
    }
}

/// A device booted on `filter` and the power-cutting `flash`.
fn boot_cut<'f, 'm>(filter: &'f mut Filter, flash: &'m mut CuttingFlash) -> CutDevice<'f, 'm> {
    Device::boot(filter, flash, LAYOUT, SEED, ResetCause::PowerOn)
}

/// Asks `request`; whether it was answered without an error.
fn answered(device: &mut CutDevice, request: Request<'_>) -> bool {
    !matches!(ask(device, request), Response::Error(_))
}

/// Runs `change` on a device whose flash loses power after 1, 2, 3, ...
/// steps, until one run completes. `change` says whether every request it
/// made was answered without an error. After every cut, a reboot must find
/// exactly the filter the device held when the power went: every change
/// answered before the cut, and none of the one cut (it was undone and
/// answered with a storage error).
fn assert_power_loss_keeps_every_answered_change(change: impl Fn(&mut CutDevice) -> bool) {
    // Two saves, so that both slots hold an image, and a journal after the
    // second.
    let (memory, _) = saved_device(0..10);
    let mut flash = CuttingFlash {
        memory,
        budget: usize::MAX,
    };
    let mut filter = Filter::new(0);
    {
        let mut device = boot_cut(&mut filter, &mut flash);
        assert!(answered(&mut device, Request::Save));
        assert!(answered(&mut device, Request::Add(Item::U64(100))));
    }
    let base = flash.memory;

    for (cuts, budget) in (1..).enumerate() {
        let mut flash = CuttingFlash {
            memory: base.clone(),
            budget,
        };
        let mut filter = Filter::new(0);
        let mut device = boot_cut(&mut filter, &mut flash);
        let completed = change(&mut device);
        let before = held(device.filter());

        let mut restarted = powered_on(flash.memory);
        let mut filter = Filter::new(0);
        let device = boot_cut(&mut filter, &mut restarted);
        assert_eq!(
            held(device.filter()),
            before,
            "power loss at step {budget}: the filter after the reboot is not the one answered for"
        );
        if completed {
            assert!(cuts > 20, "the change took only {cuts} flash steps");
            return;
        }
    }
}

#[test]
fn power_loss_at_any_step_of_a_save_keeps_every_answered_change() {
    assert_power_loss_keeps_every_answered_change(|device| {
        (200..230).all(|value| answered(device, Request::Add(Item::U64(value))))
            && answered(device, Request::Save)
    });
}

#[test]
fn power_loss_at_any_step_of_a_snapshot_upload_keeps_every_answered_change() {
    let (snapshot, prefix_lengths) = host_snapshot();
    assert_power_loss_keeps_every_answered_change(|device| {
        !matches!(
            upload(device, &snapshot, prefix_lengths),
            Response::Error(_)
        )
    });
}

#[test]
fn power_loss_at_any_step_of_journaled_changes_and_their_fold_keeps_every_answered_change() {
    assert_power_loss_keeps_every_answered_change(|device| {
        let batch: heapless::Vec<Item, { protocol::MAX_BATCH }> =
            (300..310).map(Item::U64).collect();
        // More records than a journal holds, so that one is folded.
        (200..240).all(|value| answered(device, Request::Add(Item::U64(value))))
            && answered(device, Request::Delete(Item::U64(100)))
            && answered(device, Request::AddBatch(batch.clone()))
            && answered(device, Request::Add(v4([198, 18, 0, 0], 24)))
            && answered(device, Request::Clear)
            && answered(device, Request::Add(Item::U64(400)))
    });
}

#[test]
fn adds_deletes_and_a_clear_outlive_a_reset_without_a_save() {
    let mut memory = blank_flash();
    let mut filter = Filter::new(0);
    let mut device = boot(&mut filter, &mut memory);
    let listed = v4([198, 18, 7, 0], 24);
    assert_eq!(info(&mut device).journal, None, "no image, no journal");
    assert_eq!(
        ask(&mut device, Request::Add(Item::U64(1))),
        Response::Added
    );
    // The first change of a device with no image saves one; the next ones
    // go to its journal.
    let first = info(&mut device);
    assert_eq!(first.saved_sequence, Some(1));
    let journal = first.journal.expect("a journal after the image");
    assert_eq!(ask(&mut device, Request::Clear), Response::Cleared);
    for request in [
        Request::Add(Item::U64(2)),
        Request::Add(Item::U64(3)),
        Request::Add(listed),
    ] {
        assert_eq!(ask(&mut device, request), Response::Added);
    }
    assert_eq!(
        ask(&mut device, Request::Delete(Item::U64(2))),
        Response::Deleted { found: true }
    );
    let info_before = info(&mut device);
    let before = held(device.filter());
    // A record each: the clear, three adds and the delete.
    assert_eq!(
        info_before.journal,
        Some(JournalFill {
            records: journal.records + 5,
            capacity: journal.capacity
        })
    );

    let mut rebooted = Filter::new(0);
    let mut device = boot(&mut rebooted, &mut memory);
    let after = info(&mut device);
    assert_eq!(held(device.filter()), before);
    assert_eq!(after.entries, 2);
    assert_eq!(after.prefix_lengths, info_before.prefix_lengths);
    assert_eq!(after.saved_sequence, Some(1), "no image saved since");
    assert_eq!(
        after.journal, info_before.journal,
        "replay ends where it was"
    );
    for (item, present) in [
        (Item::U64(1), false),
        (Item::U64(2), false),
        (Item::U64(3), true),
        (v4([198, 18, 7, 9], 32), true),
    ] {
        assert_eq!(
            ask(&mut device, Request::Check(item)),
            Response::Checked { present },
            "{item:?}"
        );
    }
}

#[test]
fn a_full_journal_is_folded_into_a_new_image_and_starts_over() {
    let (mut memory, _) = saved_device(0..1);
    let mut filter = Filter::new(0);
    let mut device = boot(&mut filter, &mut memory);
    let first = info(&mut device).saved_sequence.unwrap();
    let mut folds = Vec::new();
    let mut records = info(&mut device).journal.unwrap().records;
    for value in 100..200 {
        assert_eq!(
            ask(&mut device, Request::Add(Item::U64(value))),
            Response::Added
        );
        let now = info(&mut device);
        let saved = now.saved_sequence.unwrap();
        let journal = now.journal.unwrap();
        if saved != folds.last().copied().unwrap_or(first) {
            folds.push(saved);
            // The fold took the journal in; the add is its first record.
            assert_eq!(journal.records, 1);
        } else {
            assert_eq!(journal.records, records + 1);
        }
        assert!(journal.records <= journal.capacity);
        records = journal.records;
    }
    // The test's slots hold about 25 records after their image.
    assert!(
        (3..=6).contains(&folds.len()),
        "100 adds folded {} times",
        folds.len()
    );
    let before = held(device.filter());
    let mut rebooted = Filter::new(0);
    let device = boot(&mut rebooted, &mut memory);
    assert_eq!(held(device.filter()), before);
    assert_eq!(device.filter().len(), 101);
}

#[test]
fn a_change_cut_by_power_loss_is_skipped_and_the_next_ones_go_after_it() {
    let (memory, _) = saved_device(0..1);
    // A batch of three keys, cut at its second record's last flash word.
    let mut flash = CuttingFlash { memory, budget: 8 };
    let mut filter = Filter::new(0);
    let mut device = boot_cut(&mut filter, &mut flash);
    let batch = [10, 11, 12].into_iter().map(Item::U64).collect();
    assert_eq!(
        ask(&mut device, Request::AddBatch(batch)),
        Response::Error(Error::Storage)
    );
    assert_eq!(device.filter().len(), 1, "the cut batch was not undone");

    let mut restarted = powered_on(flash.memory);
    let mut filter = Filter::new(0);
    let mut device = boot_cut(&mut filter, &mut restarted);
    assert_eq!(
        device.filter().len(),
        1,
        "a part of the cut batch came back"
    );
    assert_eq!(
        ask(&mut device, Request::Add(Item::U64(20))),
        Response::Added
    );
    let before = held(device.filter());

    let mut filter = Filter::new(0);
    let device = boot_cut(&mut filter, &mut restarted);
    assert_eq!(held(device.filter()), before);
    assert_eq!(device.filter().len(), 2);
}

/// One request of the journal's property test.
#[derive(Clone, Debug)]
enum Change {
    Add(u64),
    AddBatch(Vec<u64>),
    Delete(u64),
    Clear,
    Save,
}

fn change() -> impl proptest::strategy::Strategy<Value = Change> {
    use proptest::prelude::*;
    prop_oneof![
        8 => (0..48u64).prop_map(Change::Add),
        2 => proptest::collection::vec(0..48u64, 1..8).prop_map(Change::AddBatch),
        6 => (0..48u64).prop_map(Change::Delete),
        1 => Just(Change::Clear),
        1 => Just(Change::Save),
    ]
}

proptest::proptest! {
    /// Any run of adds, deletes, clears and saves (whose journal fills and
    /// folds many times) comes back after a reset as the filter held it,
    /// and the filter holds what an exact count of each key says.
    #[test]
    fn a_reset_after_any_run_of_changes_brings_back_the_filter_it_held(
        changes in proptest::collection::vec(change(), 1..120),
    ) {
        let mut memory = blank_flash();
        let mut filter = Filter::new(0);
        let mut device = boot(&mut filter, &mut memory);
        let mut copies = std::collections::BTreeMap::<u64, usize>::new();
        for change in changes {
            match change {
                // At most a few copies of a key: its two buckets hold eight.
                Change::Add(value) if copies.get(&value).is_some_and(|&held| held >= 3) => {}
                Change::Add(value) => {
                    assert_eq!(ask(&mut device, Request::Add(Item::U64(value))), Response::Added);
                    *copies.entry(value).or_default() += 1;
                }
                Change::AddBatch(mut values) => {
                    values.sort_unstable();
                    values.dedup();
                    values.retain(|value| copies.get(value).is_none_or(|&held| held < 3));
                    let batch = values.iter().copied().map(Item::U64).collect();
                    let added = values.len() as u16;
                    assert_eq!(ask(&mut device, Request::AddBatch(batch)), Response::BatchAdded { added });
                    values.iter().for_each(|value| *copies.entry(*value).or_default() += 1);
                }
                Change::Delete(value) => {
                    let held = copies.get(&value).copied().unwrap_or(0);
                    let response = ask(&mut device, Request::Delete(Item::U64(value)));
                    // A key the model does not hold can still be found:
                    // another key with its fingerprint in its buckets.
                    if held > 0 {
                        assert_eq!(response, Response::Deleted { found: true });
                        copies.insert(value, held - 1);
                    } else if response == (Response::Deleted { found: true }) {
                        return Ok(());
                    }
                }
                Change::Clear => {
                    assert_eq!(ask(&mut device, Request::Clear), Response::Cleared);
                    copies.clear();
                }
                Change::Save => {
                    assert!(matches!(ask(&mut device, Request::Save), Response::Saved { .. }));
                }
            }
        }
        let before = held(device.filter());
        let mut rebooted = Filter::new(0);
        let mut device = boot(&mut rebooted, &mut memory);
        assert_eq!(held(device.filter()), before);
        assert_eq!(device.filter().len(), copies.values().sum::<usize>());
        for (value, held) in copies {
            if held > 0 {
                assert_eq!(
                    ask(&mut device, Request::Check(Item::U64(value))),
                    Response::Checked { present: true }
                );
            }
        }
    }
}

#[test]
fn the_reset_flags_are_read_from_their_bits_of_rcc_csr() {
    // A power-on reset as an F411 reads it: PORRSTF, PINRSTF, BORRSTF,
    // and the reset value's LSI bits below, which are no flags.
    let power_on = ResetFlags::from_rcc_csr(0x0e00_0003);
    assert_eq!(
        power_on,
        ResetFlags {
            power_on: true,
            pin: true,
            brownout: true,
            ..ResetFlags::default()
        }
    );
    assert_eq!(power_on.cause(), ResetCause::PowerOn);
    let causes: Vec<_> = (25..32)
        .map(|bit| ResetFlags::from_rcc_csr(1 << bit).cause())
        .collect();
    assert_eq!(
        causes,
        [
            ResetCause::Brownout,
            ResetCause::Pin,
            ResetCause::PowerOn,
            ResetCause::Software,
            ResetCause::Watchdog,
            ResetCause::Watchdog,
            ResetCause::LowPower
        ]
    );
    assert_eq!(
        ResetFlags::from_rcc_csr(0x01ff_ffff).cause(),
        ResetCause::Unknown
    );
}

#[test]
fn the_most_specific_reset_flag_names_the_cause() {
    let every = ResetFlags {
        watchdog: true,
        software: true,
        low_power: true,
        power_on: true,
        brownout: true,
        pin: true,
    };
    // A reset pulls NRST too and a power-on sets the brown-out flag: each
    // flag turned off in order reveals the next cause.
    let mut flags = every;
    let mut seen = vec![flags.cause()];
    for clear in [
        |f: &mut ResetFlags| f.watchdog = false,
        |f: &mut ResetFlags| f.software = false,
        |f: &mut ResetFlags| f.low_power = false,
        |f: &mut ResetFlags| f.power_on = false,
        |f: &mut ResetFlags| f.brownout = false,
        |f: &mut ResetFlags| f.pin = false,
    ] {
        clear(&mut flags);
        seen.push(flags.cause());
    }
    assert_eq!(
        seen,
        [
            ResetCause::Watchdog,
            ResetCause::Software,
            ResetCause::LowPower,
            ResetCause::PowerOn,
            ResetCause::Brownout,
            ResetCause::Pin,
            ResetCause::Unknown
        ]
    );
}
