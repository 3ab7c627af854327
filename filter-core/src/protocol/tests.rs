//! The protocol's unit and property tests: round trips, limits, damaged
//! frames, and the meaning of items.
#![allow(clippy::panic, clippy::indexing_slicing)]
extern crate std;

use super::*;
use crate::hash::KeyedHasher;
use crate::netkey::AddressFamily;
use crate::snapshot::{Parameter, SnapshotError};
use heapless::Vec;
use proptest::prelude::*;
use serde::Serialize;
use std::vec::Vec as StdVec;

fn frame_of<T: Serialize>(message: &T) -> StdVec<u8> {
    let mut out = [0u8; MAX_FRAME_LEN + 1];
    match encode(message, &mut out) {
        Ok(frame) => frame.to_vec(),
        Err(error) => panic!("encode: {error}"),
    }
}

fn decode_frame(frame: &[u8]) -> Result<Request<'static>, FrameError> {
    let owned: &'static mut [u8] = std::boxed::Box::leak(frame.to_vec().into_boxed_slice());
    let body_len = owned.len().saturating_sub(1);
    decode(&mut owned[..body_len])
}

fn sample_requests() -> StdVec<Request<'static>> {
    let v4 = Item::Net(Prefix::V4 {
        address: [198, 18, 0, 1],
        len: 32,
    });
    let v6 = Item::Net(Prefix::V6 {
        address: [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        len: 64,
    });
    let batch: Vec<Item<'static>, MAX_BATCH> = [v4, v6, Item::U64(7), Item::Bytes(b"coupon")]
        .into_iter()
        .cycle()
        .take(MAX_BATCH)
        .collect();
    let mut prefix_lengths = PrefixLengths::new();
    prefix_lengths.insert(AddressFamily::Ipv6, 128);
    std::vec![
        Request::Hello {
            version: PROTOCOL_VERSION
        },
        Request::Add(v4),
        Request::Delete(v6),
        Request::Check(Item::Bytes(b"")),
        Request::AddBatch(batch.clone()),
        Request::CheckBatch(batch),
        Request::Clear,
        Request::Stats,
        Request::Traffic,
        Request::SnapshotBegin {
            total_len: u32::MAX,
            prefix_lengths
        },
        Request::SnapshotChunk {
            offset: 4096,
            data: &[0u8; MAX_CHUNK_LEN],
        },
        Request::SnapshotCommit,
        Request::Save,
        Request::Locate {
            seed: u64::MAX,
            bucket_count: 1 << 24,
            fingerprint_bits: 16,
            item: Item::U64(u64::MAX),
        },
    ]
}

#[test]
fn every_request_round_trips_within_the_frame_limit() {
    for request in sample_requests() {
        let frame = frame_of(&request);
        assert!(frame.len() <= MAX_FRAME_LEN + 1, "{request:?}");
        assert_eq!(frame.last(), Some(&0));
        assert!(!frame[..frame.len() - 1].contains(&0));
        assert_eq!(decode_frame(&frame), Ok(request.clone()));
        // With the longest request id, in the envelope the wire carries.
        let enveloped = Envelope {
            id: u32::MAX,
            message: request,
        };
        let mut frame = frame_of(&enveloped);
        assert!(frame.len() <= MAX_FRAME_LEN + 1, "{enveloped:?}");
        frame.pop();
        assert_eq!(decode::<Envelope<Request>>(&mut frame), Ok(enveloped));
    }
}

#[test]
fn the_largest_responses_fit_the_response_buffer() {
    let all_lengths = PrefixLengths::from_le_bytes(&[0xff; PrefixLengths::ENCODED_LEN]);
    let responses = [
        Response::Info(Info {
            protocol_version: u16::MAX,
            fingerprint_bits: 32,
            slots_per_bucket: 8,
            bucket_count: u32::MAX,
            capacity: u32::MAX,
            seed: u64::MAX,
            entries: u32::MAX,
            prefix_lengths: all_lengths,
            saved_sequence: Some(u32::MAX),
            journal: Some(JournalFill {
                records: u32::MAX,
                capacity: u32::MAX,
            }),
            reset_cause: ResetCause::Unknown,
        }),
        Response::Stats(Stats {
            requests: u32::MAX,
            frame_errors: u32::MAX,
            request_errors: u32::MAX,
            added: u32::MAX,
            deleted: u32::MAX,
            checked: u32::MAX,
            hits: u32::MAX,
            saves: u32::MAX,
            replayed: u32::MAX,
            datagrams_refused: u32::MAX,
            datagrams_stale: u32::MAX,
        }),
        Response::Traffic({
            let most = FrameCount {
                frames: u64::MAX,
                bytes: u64::MAX,
            };
            let family = FamilyTraffic {
                passed: most,
                dropped: most,
                malformed: most,
            };
            Traffic {
                ipv4: family,
                ipv6: family,
                non_ip: most,
                malformed: most,
                ignored: most,
            }
        }),
        Response::Error(Error::Snapshot(SnapshotError::ParameterMismatch {
            parameter: Parameter::BucketCount,
            expected: u64::MAX,
            found: u64::MAX,
        })),
        Response::Error(Error::Frame(FrameError::Crc {
            stored: u32::MAX,
            computed: u32::MAX,
        })),
        Response::Located(Located {
            hash: u64::MAX,
            fingerprint: u32::MAX,
            primary: u32::MAX,
            alternate: u32::MAX,
        }),
    ];
    for response in responses {
        let enveloped = Envelope {
            id: u32::MAX,
            message: response,
        };
        let mut out = [0u8; MAX_RESPONSE_FRAME_LEN];
        let frame = encode(&enveloped, &mut out).map(|frame| frame.to_vec());
        let Ok(mut frame) = frame else {
            panic!("{enveloped:?} does not fit");
        };
        frame.pop();
        assert_eq!(decode::<Envelope<Response>>(&mut frame), Ok(enveloped));
    }
}

#[test]
fn the_crc_names_the_frame_bytes() {
    let request = Envelope {
        id: 7,
        message: Request::Add(Item::U64(42)),
    };
    let mut first = frame_of(&request);
    let mut again = first.clone();
    let mut other = frame_of(&Envelope {
        id: 8,
        message: Request::Add(Item::U64(42)),
    });
    let crc = |frame: &mut StdVec<u8>| {
        frame.pop();
        decode_with_crc::<Envelope<Request>>(frame).map(|(_, crc)| crc)
    };
    let first = crc(&mut first);
    assert!(first.is_ok());
    assert_eq!(first, crc(&mut again));
    assert_ne!(first, crc(&mut other));
}

#[test]
fn a_flipped_bit_is_caught() {
    let frame = frame_of(&Request::Add(Item::U64(42)));
    for bit in 0..(frame.len() - 1) * 8 {
        let mut corrupted = frame.clone();
        corrupted[bit / 8] ^= 1 << (bit % 8);
        if corrupted[bit / 8] == 0 {
            continue; // becomes a delimiter: a truncated frame, tested below
        }
        assert!(decode_frame(&corrupted).is_err(), "bit {bit}");
    }
}

#[test]
fn every_truncation_is_caught() {
    let frame = frame_of(&Request::Check(Item::Bytes(b"a longer item to cut")));
    for len in 0..frame.len() - 1 {
        let mut truncated = frame[..len].to_vec();
        truncated.push(0);
        assert!(decode_frame(&truncated).is_err(), "length {len}");
    }
}

#[test]
fn an_unknown_request_is_malformed() {
    // Variant index 200 with a valid CRC.
    let frame = frame_of(&(200u8, 1u8));
    assert_eq!(decode_frame(&frame), Err(FrameError::Malformed));
}

#[test]
fn trailing_bytes_are_malformed() {
    let frame = frame_of(&(Request::Clear, 0u8));
    assert_eq!(decode_frame(&frame), Err(FrameError::Malformed));
}

#[test]
fn a_too_long_batch_is_malformed() {
    let items = [Item::U64(1); MAX_BATCH + 1];
    // Variant 4 is AddBatch: a sequence of MAX_BATCH + 1 items.
    let frame = frame_of(&(4u8, &items[..]));
    assert_eq!(decode_frame(&frame), Err(FrameError::Malformed));
}

#[test]
fn the_reader_splits_frames_and_drops_oversized_ones() {
    let first = frame_of(&Request::Stats);
    let mut stream = std::vec![0u8, 0];
    stream.extend(&first);
    stream.extend(std::iter::repeat_n(7u8, MAX_FRAME_LEN + 10));
    stream.push(0);
    stream.extend(&first);
    let mut reader = FrameReader::<MAX_FRAME_LEN>::new();
    let mut results = StdVec::new();
    for byte in stream {
        if let Some(frame) = reader.push(byte) {
            results.push(frame.map(|frame| decode::<Request>(frame) == Ok(Request::Stats)));
        }
    }
    assert_eq!(
        results,
        std::vec![Ok(true), Err(FrameError::Oversized), Ok(true)]
    );
}

#[test]
fn prefix_lengths_round_trip_and_ignore_impossible_lengths() {
    let mut lengths = PrefixLengths::new();
    for len in [0, 8, 24, 32, 33, 200] {
        lengths.insert(AddressFamily::Ipv4, len);
    }
    for len in [0, 63, 64, 127, 128, 129] {
        lengths.insert(AddressFamily::Ipv6, len);
    }
    let v4: StdVec<u8> = lengths.up_to(AddressFamily::Ipv4, 255).collect();
    let v6: StdVec<u8> = lengths.up_to(AddressFamily::Ipv6, 255).collect();
    assert_eq!(v4, [0, 8, 24, 32]);
    assert_eq!(v6, [0, 63, 64, 127, 128]);
    assert_eq!(
        lengths
            .up_to(AddressFamily::Ipv4, 23)
            .collect::<StdVec<_>>(),
        [0, 8]
    );
    assert_eq!(
        PrefixLengths::from_le_bytes(&lengths.to_le_bytes()),
        lengths
    );
}

#[test]
fn byte_items_hash_without_a_length_prefix() {
    let mut hasher = KeyedHasher::new(5);
    core::hash::Hasher::write(&mut hasher, b"abc");
    assert_eq!(Item::Bytes(b"abc").hash(5), Ok(hasher.key_hash()));
}

#[test]
fn locate_rejects_impossible_shapes() {
    let item = Item::U64(1);
    assert!(locate_item(&item, 0, 3, 16).is_err());
    assert!(locate_item(&item, 0, 0, 16).is_err());
    assert!(locate_item(&item, 0, 4, 12).is_err());
    let located = locate_item(&item, 0, 1024, 16).map(|l| l.hash);
    assert_eq!(located, Ok(KeyedHasher::hash_item(0, &1u64).0));
}

/// `Locate` names the buckets where a filter of that shape keeps the item:
/// its fingerprint is in one of the two after the insert.
fn locate_finds_what_the_filter_inserted<F: crate::Fingerprint>(fingerprint_bits: u8) {
    const BUCKETS: u32 = 1024;
    for seed in [0u64, 7, 0x9e37_79b9_7f4a_7c15] {
        let storage = std::vec![[F::EMPTY; 4]; BUCKETS as usize];
        let Ok(mut filter) =
            crate::CuckooFilter::<F, 4, StdVec<[F; 4]>>::with_storage(storage, seed)
        else {
            panic!("a power-of-two table")
        };
        for key in 0..200u64 {
            let item = Item::U64(key);
            let located = locate_item(&item, seed, BUCKETS, fingerprint_bits);
            let Ok(located) = located else {
                panic!("{fingerprint_bits}-bit fingerprints: {located:?}")
            };
            assert_eq!(located.hash, KeyedHasher::hash_item(seed, &key).0);
            assert!(filter.insert_hash(crate::KeyHash(located.hash)).is_ok());
            let holds = |bucket: u32| {
                filter.storage().get(bucket as usize).is_some_and(|slots| {
                    slots
                        .iter()
                        .any(|&slot| slot != F::EMPTY && slot.to_u32() == located.fingerprint)
                })
            };
            assert!(
                holds(located.primary) || holds(located.alternate),
                "{fingerprint_bits}-bit fingerprints, seed {seed}, key {key}: {located:?}"
            );
        }
    }
}

#[test]
fn locate_finds_the_item_where_the_filter_put_it_for_every_width() {
    locate_finds_what_the_filter_inserted::<u8>(8);
    locate_finds_what_the_filter_inserted::<u16>(16);
    locate_finds_what_the_filter_inserted::<u32>(32);
}

#[test]
fn request_errors_say_what_is_wrong() {
    use std::string::ToString;
    let cases = [
        (
            Error::VersionMismatch { device: 1 }.to_string(),
            std::format!("device speaks protocol version 1, this host {PROTOCOL_VERSION}"),
        ),
        (
            Error::InvalidPrefixLen { len: 40 }.to_string(),
            "prefix length 40 is too long for its address family".into(),
        ),
        (
            Error::InvalidParameter {
                parameter: Parameter::BucketCount,
            }
            .to_string(),
            "invalid bucket count".into(),
        ),
        (
            Error::Full { added: 3 }.to_string(),
            "filter is full (3 items of the request were added)".into(),
        ),
        (
            Error::NoSnapshotUpload.to_string(),
            "no snapshot upload in progress".into(),
        ),
        (
            Error::SnapshotLength { expected: 4096 }.to_string(),
            "this device takes snapshots of exactly 4096 bytes".into(),
        ),
        (
            Error::SnapshotChunk {
                expected_offset: 64,
            }
            .to_string(),
            std::format!(
                "snapshot chunk out of order or misaligned: expected offset 64, length a \
                 multiple of {CHUNK_ALIGN}"
            ),
        ),
        (
            Error::Snapshot(SnapshotError::BadMagic).to_string(),
            "snapshot rejected: not a filter snapshot (bad magic)".into(),
        ),
        (
            Error::Storage.to_string(),
            "persistent storage failed".into(),
        ),
        (
            Error::Frame(FrameError::Truncated).to_string(),
            "rejected frame: frame too short to hold a CRC".into(),
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(text, expected);
    }
}

#[test]
fn a_check_probes_shorter_active_prefixes() {
    let mut filter = crate::StaticCuckooFilter::<u16, 4, 64>::new(9);
    let mut active = PrefixLengths::new();
    let listed = Prefix::V4 {
        address: [198, 18, 0, 0],
        len: 15,
    };
    let Ok(key) = listed.net_key() else {
        panic!("valid prefix")
    };
    assert!(filter.insert_hash(key.hash(9)).is_ok());
    active.insert(AddressFamily::Ipv4, 15);
    let inside = Item::Net(Prefix::V4 {
        address: [198, 19, 1, 2],
        len: 32,
    });
    let outside = Item::Net(Prefix::V4 {
        address: [198, 20, 1, 2],
        len: 32,
    });
    let wider = Item::Net(Prefix::V4 {
        address: [198, 18, 0, 0],
        len: 8,
    });
    assert_eq!(contains(&filter, &active, &inside), Ok(true));
    assert_eq!(contains(&filter, &active, &outside), Ok(false));
    assert_eq!(contains(&filter, &active, &wider), Ok(false));
    let bad = Item::Net(listed.with_prefix_len(33));
    assert_eq!(
        contains(&filter, &active, &bad),
        Err(Error::InvalidPrefixLen { len: 33 })
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn decoding_arbitrary_bytes_never_panics(mut bytes in proptest::collection::vec(any::<u8>(), 0..MAX_FRAME_LEN + 64)) {
        let _ = decode::<Request>(&mut bytes);
        let _ = decode::<Response>(&mut bytes.clone());
    }

    #[test]
    fn mutated_frames_are_rejected_or_decode_cleanly(
        index in 0usize..sample_requests().len(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut frame = frame_of(&sample_requests()[index]);
        frame.pop();
        for (position, value) in edits {
            let at = position.index(frame.len());
            frame[at] = value;
        }
        // Either an error or some valid request; never a panic.
        let _ = decode::<Request>(&mut frame);
    }

    #[test]
    fn the_reader_never_yields_more_than_its_buffer(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let mut reader = FrameReader::<64>::new();
        for byte in bytes {
            if let Some(Ok(frame)) = reader.push(byte) {
                prop_assert!(!frame.is_empty() && frame.len() <= 64);
                prop_assert!(!frame.contains(&0));
            }
        }
    }
}

#[test]
fn frame_errors_say_what_is_wrong() {
    use std::string::ToString;
    let cases = [
        (
            FrameError::Oversized.to_string(),
            std::format!("frame longer than {MAX_FRAME_LEN} bytes"),
        ),
        (
            FrameError::Encoding.to_string(),
            "frame is not valid COBS".into(),
        ),
        (
            FrameError::Truncated.to_string(),
            "frame too short to hold a CRC".into(),
        ),
        (
            FrameError::Crc {
                stored: 1,
                computed: 0xabcd,
            }
            .to_string(),
            "frame corrupted: CRC-32 is 0x0000abcd, frame says 0x00000001".into(),
        ),
        (
            FrameError::Malformed.to_string(),
            "frame holds no known message".into(),
        ),
        (
            BufferTooSmall.to_string(),
            "message does not fit the frame buffer".into(),
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(text, expected);
    }
}

#[test]
fn a_frame_of_the_largest_length_is_decoded_and_a_longer_one_refused() {
    // COBS with no zero byte: one code byte per 254 data bytes.
    let mut largest = std::vec![0x2au8; MAX_FRAME_LEN];
    assert_ne!(
        decode::<Request<'_>>(&mut largest).err(),
        Some(FrameError::Oversized)
    );
    let mut longer = std::vec![0x2au8; MAX_FRAME_LEN + 1];
    assert_eq!(
        decode::<Request<'_>>(&mut longer).err(),
        Some(FrameError::Oversized)
    );
}
