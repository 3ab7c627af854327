//! Snapshots: round trips whole and chunked, and every truncation, every
//! single-bit flip and every parameter mismatch rejected with the target
//! left exactly as it was.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use filter_core::snapshot::{Parameter, HEADER_LEN};
use filter_core::{
    SnapshotError, SnapshotExporter, SnapshotHeader, SnapshotLoader, StaticCuckooFilter,
};

type Small = StaticCuckooFilter<u16, 4, 64>;

fn populated(seed: u64, items: u64) -> Small {
    let mut filter = Small::new(seed);
    for key in 0..items {
        filter.insert(&key).unwrap();
    }
    filter
}

fn snapshot_of(filter: &Small) -> Vec<u8> {
    let mut bytes = vec![0u8; filter.snapshot_len() as usize];
    assert_eq!(filter.write_snapshot(&mut bytes).unwrap(), bytes.len());
    bytes
}

fn assert_same(a: &Small, b: &Small) {
    assert_eq!(a.storage(), b.storage());
    assert_eq!(a.len(), b.len());
    assert_eq!(a.seed(), b.seed());
}

/// Loads through the chunked loader into a staging filter.
fn load_chunked(bytes: &[u8], chunk: usize) -> Result<Small, SnapshotError> {
    let mut staging = Small::new(0);
    let mut loader = SnapshotLoader::new();
    let mut fed = 0;
    for piece in bytes.chunks(chunk) {
        loader.feed(&mut staging, piece)?;
        fed += piece.len();
        assert_eq!(loader.position(), fed as u64);
        assert_eq!(loader.header().is_some(), fed >= HEADER_LEN);
    }
    loader.finish(&mut staging)?;
    Ok(staging)
}

#[test]
fn whole_round_trip_restores_table_seed_and_count() {
    let source = populated(0xabc, 200);
    let mut target = populated(1, 3);
    target.load_snapshot(&snapshot_of(&source)).unwrap();
    assert_same(&source, &target);
    for key in 0..200u64 {
        assert!(target.contains(&key));
    }
}

#[test]
fn chunked_export_and_import_round_trip_at_any_chunk_size() {
    let source = populated(0xabc, 230);
    let whole = snapshot_of(&source);
    for chunk in [1, 3, 7, 32, 64, 500, 4096] {
        let mut exporter = SnapshotExporter::new(&source);
        assert_eq!(exporter.total_len(), whole.len() as u64);
        assert_eq!((exporter.position(), exporter.is_done()), (0, false));
        let mut exported = Vec::new();
        let mut buffer = vec![0u8; chunk];
        loop {
            let n = exporter.next_chunk(&source, &mut buffer);
            if n == 0 {
                break;
            }
            exported.extend_from_slice(&buffer[..n]);
            assert_eq!(exporter.position(), exported.len() as u64);
            assert_eq!(exporter.is_done(), exported.len() == whole.len());
        }
        assert!(exporter.is_done());
        assert_eq!(exported, whole, "chunk size {chunk}");
        assert_same(&source, &load_chunked(&exported, chunk).unwrap());
    }
}

#[test]
fn every_truncation_is_rejected_and_changes_nothing() {
    let bytes = snapshot_of(&populated(5, 150));
    let mut target = populated(9, 40);
    let before = target.clone();
    for len in 0..bytes.len() {
        let error = target.load_snapshot(&bytes[..len]).unwrap_err();
        assert!(
            matches!(error, SnapshotError::Truncated { .. }),
            "length {len}: {error:?}"
        );
        assert_same(&target, &before);
        assert!(
            matches!(
                load_chunked(&bytes[..len], 17),
                Err(SnapshotError::Truncated { .. })
            ),
            "chunked, length {len}"
        );
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(matches!(
        target.load_snapshot(&longer),
        Err(SnapshotError::TooLong { .. })
    ));
    assert!(matches!(
        load_chunked(&longer, 17),
        Err(SnapshotError::TooLong { .. })
    ));
    assert_same(&target, &before);
}

#[test]
fn every_single_bit_flip_is_rejected_and_changes_nothing() {
    let bytes = snapshot_of(&populated(5, 150));
    let mut target = populated(9, 40);
    let before = target.clone();
    for bit in 0..bytes.len() * 8 {
        let mut corrupted = bytes.clone();
        corrupted[bit / 8] ^= 1 << (bit % 8);
        assert!(
            target.load_snapshot(&corrupted).is_err(),
            "bit {bit} accepted"
        );
        assert_same(&target, &before);
        assert!(
            load_chunked(&corrupted, 64).is_err(),
            "bit {bit} accepted by the loader"
        );
    }
}

#[test]
fn a_header_count_that_lies_is_rejected_even_with_a_valid_crc() {
    let source = populated(5, 150);
    let mut bytes = snapshot_of(&source);
    bytes[24] = bytes[24].wrapping_add(1);
    let body_len = bytes.len() - 4;
    let crc = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC).checksum(&bytes[..body_len]);
    bytes[body_len..].copy_from_slice(&crc.to_le_bytes());
    let mut target = Small::new(0);
    assert!(matches!(
        target.load_snapshot(&bytes),
        Err(SnapshotError::CountMismatch {
            header: 151,
            counted: 150
        })
    ));
    assert!(matches!(
        load_chunked(&bytes, 10),
        Err(SnapshotError::CountMismatch { .. })
    ));
    assert!(target.is_empty());
}

#[test]
fn parameter_mismatches_name_the_parameter() {
    let bytes = snapshot_of(&populated(5, 10));
    let mut other_buckets = StaticCuckooFilter::<u16, 4, 128>::new(0);
    assert_eq!(
        other_buckets.load_snapshot(&bytes),
        Err(SnapshotError::ParameterMismatch {
            parameter: Parameter::BucketCount,
            expected: 128,
            found: 64
        })
    );
    let mut other_slots = StaticCuckooFilter::<u16, 2, 128>::new(0);
    assert!(matches!(
        other_slots.load_snapshot(&bytes),
        Err(SnapshotError::ParameterMismatch {
            parameter: Parameter::SlotsPerBucket,
            ..
        })
    ));
    let mut other_fingerprint = StaticCuckooFilter::<u8, 4, 64>::new(0);
    assert!(matches!(
        other_fingerprint.load_snapshot(&bytes),
        Err(SnapshotError::ParameterMismatch {
            parameter: Parameter::FingerprintBits,
            ..
        })
    ));
    assert!(other_buckets.is_empty() && other_slots.is_empty() && other_fingerprint.is_empty());
}

#[test]
fn header_fields_are_where_the_format_says() {
    let filter = populated(0x0102_0304_0506_0708, 7);
    let bytes = snapshot_of(&filter);
    assert_eq!(&bytes[0..4], b"CFLT");
    assert_eq!(u16::from_le_bytes([bytes[4], bytes[5]]), 4);
    assert_eq!(bytes[6..10], [1, 16, 4, 6]);
    assert_eq!(bytes[10..16], [0; 6]);
    assert_eq!(
        u64::from_le_bytes(bytes[16..24].try_into().unwrap()),
        0x0102_0304_0506_0708
    );
    assert_eq!(u64::from_le_bytes(bytes[24..32].try_into().unwrap()), 7);
    assert_eq!(bytes.len(), HEADER_LEN + 64 * 4 * 2 + 4);
    let mut small = [0u8; 10];
    assert!(matches!(
        filter.write_snapshot(&mut small),
        Err(SnapshotError::BufferTooSmall { needed }) if needed == bytes.len() as u64
    ));
}

#[test]
fn snapshots_of_earlier_layouts_are_refused_even_with_a_valid_crc() {
    // Version 1 tables placed alternate buckets with another function,
    // version 2 tables derived fingerprints (and integer keys' hashes)
    // another way, version 3 tables hashed inputs longer than 8 bytes
    // (network keys) another way: their fingerprints would be lost if
    // loaded.
    let bytes = snapshot_of(&populated(11, 40));
    for version in [1u16, 2, 3] {
        let mut old = bytes[..bytes.len() - 4].to_vec();
        old[4..6].copy_from_slice(&version.to_le_bytes());
        let crc = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC).checksum(&old);
        old.extend_from_slice(&crc.to_le_bytes());
        let mut target = populated(3, 5);
        let before = target.clone();
        assert!(matches!(
            target.load_snapshot(&old),
            Err(SnapshotError::UnsupportedVersion(v)) if v == version
        ));
        assert_same(&target, &before);
        assert!(matches!(
            load_chunked(&old, 64),
            Err(SnapshotError::UnsupportedVersion(v)) if v == version
        ));
    }
}

#[test]
fn a_header_with_any_field_out_of_range_is_invalid() {
    let valid = SnapshotHeader {
        fingerprint_bits: 16,
        slots: 4,
        bucket_count_log2: 32,
        seed: 9,
        item_count: 0,
    };
    let bytes = valid.encode();
    assert_eq!(SnapshotHeader::decode(&bytes), Ok(valid));
    // Each field alone out of range: a reserved byte set, a fingerprint
    // width, a slot count, a bucket count.
    let mut broken = Vec::new();
    for reserved in 10..16 {
        let mut header = bytes;
        header[reserved] = 0x80;
        broken.push(header);
    }
    for (offset, value) in [(7, 12), (7, 0), (8, 3), (8, 16), (9, 33)] {
        let mut header = bytes;
        header[offset] = value;
        broken.push(header);
    }
    for header in broken {
        assert_eq!(
            SnapshotHeader::decode(&header),
            Err(SnapshotError::InvalidHeader),
            "{header:?}"
        );
    }
}

#[test]
fn every_error_says_what_is_wrong_with_its_values() {
    let cases = [
        (SnapshotError::BadMagic, "not a filter snapshot (bad magic)"),
        (
            SnapshotError::UnsupportedVersion(9),
            "unsupported snapshot format version 9: its keys were placed by another hash or \
             layout, so rebuild the filter from the keys",
        ),
        (
            SnapshotError::UnsupportedKind(7),
            "unsupported filter kind 7",
        ),
        (SnapshotError::InvalidHeader, "invalid snapshot header"),
        (
            SnapshotError::ParameterMismatch {
                parameter: Parameter::BucketCount,
                expected: 1024,
                found: 512,
            },
            "snapshot bucket count is 512, the target filter's is 1024",
        ),
        (
            SnapshotError::Truncated {
                expected: 100,
                received: 40,
            },
            "snapshot truncated: 40 of 100 bytes",
        ),
        (
            SnapshotError::TooLong { expected: 100 },
            "snapshot longer than its 100 bytes",
        ),
        (
            SnapshotError::CrcMismatch {
                stored: 0xdead_beef,
                computed: 0x1234,
            },
            "snapshot corrupted: CRC-32 is 0x00001234, trailer says 0xdeadbeef",
        ),
        (
            SnapshotError::CountMismatch {
                header: 5,
                counted: 4,
            },
            "snapshot header counts 5 items but the table holds 4",
        ),
        (
            SnapshotError::BufferTooSmall { needed: 64 },
            "buffer too small for the snapshot: 64 bytes needed",
        ),
    ];
    for (error, text) in cases {
        assert_eq!(error.to_string(), text);
    }
    for (parameter, name) in [
        (Parameter::FingerprintBits, "fingerprint width"),
        (Parameter::SlotsPerBucket, "slots per bucket"),
        (Parameter::BucketCount, "bucket count"),
    ] {
        assert_eq!(parameter.to_string(), name);
    }
}
