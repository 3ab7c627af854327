//! The receive ring on the host: against a `VecDeque` model (order kept,
//! overflow drops the newest byte and counts it), the blocking reader, and
//! a burst of frames queued while the device is busy that all get their
//! answers.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::VecDeque;

use embedded_io::Read;
use filter_core::protocol::{self, Envelope, FrameReader, Item, Request, ResetCause, Response};
use filter_core::StaticCuckooFilter;
use firmware::{Device, RamFlash, RingReader, RxRing, SlotLayout};
use proptest::prelude::*;

const LEN: usize = 64;

#[derive(Clone, Debug)]
enum Op {
    Push(u8),
    Pop(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => any::<u8>().prop_map(Op::Push),
        // Pops take about as much as pushes bring, so the ring both fills
        // up (and drops) and runs dry.
        1 => (0usize..6).prop_map(Op::Pop),
    ]
}

proptest! {
    #[test]
    fn the_ring_behaves_like_a_bounded_fifo(ops in proptest::collection::vec(op(), 0..2000)) {
        let ring = RxRing::<LEN>::new();
        let mut model = VecDeque::new();
        let mut dropped = 0u32;
        for op in ops {
            match op {
                Op::Push(byte) if model.len() < LEN => {
                    ring.push(byte);
                    model.push_back(byte);
                }
                Op::Push(byte) => {
                    ring.push(byte);
                    dropped += 1;
                }
                Op::Pop(count) => {
                    let mut buffer = vec![0u8; count];
                    let got = ring.pop_into(&mut buffer);
                    let expected: Vec<u8> = model.drain(..count.min(model.len())).collect();
                    prop_assert_eq!(&buffer[..got], &expected[..]);
                }
            }
            prop_assert_eq!(ring.dropped(), dropped);
        }
    }
}

#[test]
fn a_full_ring_drops_and_counts_the_newest_bytes() {
    let ring = RxRing::<LEN>::new();
    (0..LEN + 5).for_each(|byte| ring.push(byte as u8));
    assert_eq!(ring.dropped(), 5);
    let mut buffer = [0u8; 2 * LEN];
    assert_eq!(ring.pop_into(&mut buffer), LEN);
    assert!(buffer[..LEN]
        .iter()
        .enumerate()
        .all(|(index, &byte)| usize::from(byte) == index));
}

#[test]
fn the_reader_waits_for_a_byte_then_takes_what_has_come() {
    let ring = RxRing::<LEN>::new();
    let mut idle_calls = 0;
    let mut reader = RingReader::new(&ring, || {
        idle_calls += 1;
        // The "interrupt" brings three bytes on the third wait.
        if idle_calls == 3 {
            [7, 8, 9].into_iter().for_each(|byte| ring.push(byte));
        }
        // A reader that misses the bytes fails here rather than hangs.
        assert!(idle_calls < 100, "the reader did not see the pushed bytes");
    });
    let mut buffer = [0u8; 8];
    assert_eq!(reader.read(&mut buffer).unwrap(), 3);
    assert_eq!(&buffer[..3], &[7, 8, 9]);
    assert_eq!(idle_calls, 3);
}

/// Reads the ring until it is empty, then ends `serve` (the test's end of
/// input; a board's reader waits instead).
struct Drain<'r>(&'r RxRing<2048>);

#[derive(Debug)]
struct Empty;

impl embedded_io::Error for Empty {
    fn kind(&self) -> embedded_io::ErrorKind {
        embedded_io::ErrorKind::Other
    }
}

impl embedded_io::ErrorType for Drain<'_> {
    type Error = Empty;
}

impl Read for Drain<'_> {
    fn read(&mut self, buffer: &mut [u8]) -> Result<usize, Empty> {
        match self.0.pop_into(buffer) {
            0 => Err(Empty),
            count => Ok(count),
        }
    }
}

/// Collects what the device writes.
#[derive(Default)]
struct Output(Vec<u8>);

impl embedded_io::ErrorType for Output {
    type Error = core::convert::Infallible;
}

impl embedded_io::Write for Output {
    fn write(&mut self, bytes: &[u8]) -> Result<usize, Self::Error> {
        self.0.extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

#[test]
fn a_burst_of_frames_is_queued_and_every_frame_answered() {
    // Eight batch adds arrive back to back (about 1.5 KiB) before the main
    // loop reads any of them.
    let ring = RxRing::<2048>::new();
    let mut sent = 0;
    for id in 1..=8u32 {
        let items = (0..16)
            .map(|n| Item::U64(u64::MAX - u64::from(id) * 100 - n))
            .collect();
        let mut out = vec![0u8; protocol::MAX_FRAME_LEN + 1];
        let frame = protocol::encode(
            &Envelope {
                id,
                message: Request::AddBatch(items),
            },
            &mut out,
        )
        .unwrap();
        frame.iter().for_each(|&byte| ring.push(byte));
        sent += frame.len();
    }
    assert!(sent > 1024, "the burst is only {sent} bytes");
    assert_eq!(ring.dropped(), 0);

    let mut memory = vec![0xff; 2048];
    let mut filter = StaticCuckooFilter::<u16, 4, 64>::new(0);
    let layout = SlotLayout {
        offsets: [0, 1024],
        slot_len: 1024,
    };
    let flash = RamFlash::<4, 256>::new(&mut memory);
    let mut device = Device::boot(&mut filter, flash, layout, 1, ResetCause::PowerOn);
    let mut output = Output::default();
    firmware::serve(&mut device, &mut Drain(&ring), &mut output);

    let mut reader = FrameReader::<{ protocol::MAX_RESPONSE_FRAME_LEN }>::new();
    let mut answers: Vec<Envelope<Response>> = Vec::new();
    for &byte in &output.0 {
        if let Some(frame) = reader.push(byte) {
            answers.push(protocol::decode(frame.unwrap()).unwrap());
        }
    }
    let expected: Vec<Envelope<Response>> = (1..=8)
        .map(|id| Envelope {
            id,
            message: Response::BatchAdded { added: 16 },
        })
        .collect();
    assert_eq!(answers, expected);
    assert_eq!(device.filter().len(), 128);
}
