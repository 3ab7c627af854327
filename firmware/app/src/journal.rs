//! The journal: the changes made to the live filter since the image in use
//! was saved, as 16-byte records written one after another into the erased
//! space of that image's slot, after the snapshot. An add or a delete then
//! costs one small flash write instead of a save (which erases a slot), and
//! still outlives a reset: boot loads the image and replays its journal.
//! When the slot has no room left, the device saves a new image (into the
//! other slot, whose journal starts empty), which folds the journal in.
//!
//! # Record layout
//!
//! | offset | size | contents |
//! |---|---|---|
//! | 0 | 1 | kind: 1 insert, 2 insert of an IPv4 network, 3 of an IPv6 network, 4 remove, 5 clear, 6 datagram counter lease (`0xff`: erased, the journal's end) |
//! | 1 | 1 | the network's prefix length (kinds 2 and 3) |
//! | 2 | 1 | records in the change this record belongs to (1 to 255) |
//! | 3 | 1 | this record's place in that change (0 first) |
//! | 4 | 8 | the key's hash, little-endian (for the image's seed); for a lease, the counter |
//! | 12 | 4 | CRC-32 of the image's sequence number (LE) and bytes 0 to 11 |
//!
//! # Why power loss cannot half-apply a change
//!
//! A request's change (one key, or a batch of up to
//! [`MAX_BATCH`](filter_core::protocol::MAX_BATCH)) is answered only once
//! all its records are written. Replay applies a change only when every one
//! of its records is intact and in its place: a cut leaves its records
//! damaged or missing, and replay skips them (the request was never
//! answered, so the host sends it again). The CRC covers the image's
//! sequence number, so records can only ever be replayed onto the image
//! they were written after.
//!
//! Replay brings back the same keys, not always in the same slots: the
//! relocation walk's random choices start over at boot, so an insert that
//! relocated may settle a key in its other bucket (which no lookup or
//! delete can tell).

use filter_core::{AddressFamily, KeyHash};

use crate::checksum::CRC32;

/// Bytes of one record.
pub const RECORD_LEN: usize = 16;

/// One change to the live filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// A key inserted; for a network, its family and prefix length.
    Insert {
        /// The key's hash.
        hash: KeyHash,
        /// The network's family and prefix length, for a network key.
        network: Option<(AddressFamily, u8)>,
    },
    /// A key removed.
    Remove(KeyHash),
    /// Every key removed.
    Clear,
    /// Datagrams up to this counter may have been taken: after a reset,
    /// none up to it is taken again (see [`crate::Device::answer_datagram`]).
    /// Changes no key.
    Lease(u64),
}

/// A record as read back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    /// Never written: the journal ends here.
    Blank,
    /// Written, but not intact (a write cut by power loss).
    Damaged,
    /// Intact: `change` is record `place` of `records`.
    Intact {
        /// What changed.
        change: Change,
        /// Records in its change.
        records: u8,
        /// Its place there.
        place: u8,
    },
}

const INSERT: u8 = 1;
const INSERT_V4: u8 = 2;
const INSERT_V6: u8 = 3;
const REMOVE: u8 = 4;
const CLEAR: u8 = 5;
const LEASE: u8 = 6;
const COVERED: usize = RECORD_LEN - 4;

/// The record of `change`, record `place` of `records`, written after the
/// image numbered `sequence`.
pub fn encode(change: Change, records: u8, place: u8, sequence: u32) -> [u8; RECORD_LEN] {
    let (kind, prefix_len, hash) = match change {
        Change::Insert {
            hash,
            network: None,
        } => (INSERT, 0, hash.0),
        Change::Insert {
            hash,
            network: Some((AddressFamily::Ipv4, len)),
        } => (INSERT_V4, len, hash.0),
        Change::Insert {
            hash,
            network: Some((AddressFamily::Ipv6, len)),
        } => (INSERT_V6, len, hash.0),
        Change::Remove(hash) => (REMOVE, 0, hash.0),
        Change::Clear => (CLEAR, 0, 0),
        Change::Lease(counter) => (LEASE, 0, counter),
    };
    let mut record = [0u8; RECORD_LEN];
    let (header, rest) = record.split_at_mut(4);
    header.copy_from_slice(&[kind, prefix_len, records, place]);
    let (hash_bytes, crc_bytes) = rest.split_at_mut(8);
    hash_bytes.copy_from_slice(&hash.to_le_bytes());
    let crc = checksum(sequence, header, hash_bytes);
    crc_bytes.copy_from_slice(&crc.to_le_bytes());
    record
}

/// Reads `record`, written after the image numbered `sequence`.
pub fn decode(record: &[u8; RECORD_LEN], sequence: u32) -> Read {
    if record.iter().all(|&byte| byte == 0xff) {
        return Read::Blank;
    }
    let (covered, crc) = record.split_at(COVERED);
    let (header, hash) = covered.split_at(4);
    let (Ok(&[kind, prefix_len, records, place]), Ok(hash), Ok(crc)) = (
        <&[u8; 4]>::try_from(header),
        <[u8; 8]>::try_from(hash),
        <[u8; 4]>::try_from(crc),
    ) else {
        return Read::Damaged;
    };
    if u32::from_le_bytes(crc) != checksum(sequence, header, &hash) || place >= records {
        return Read::Damaged;
    }
    let hash = KeyHash(u64::from_le_bytes(hash));
    let insert = |network| Change::Insert { hash, network };
    let change = match kind {
        INSERT => insert(None),
        INSERT_V4 => insert(Some((AddressFamily::Ipv4, prefix_len))),
        INSERT_V6 => insert(Some((AddressFamily::Ipv6, prefix_len))),
        REMOVE => Change::Remove(hash),
        CLEAR => Change::Clear,
        LEASE => Change::Lease(hash.0),
        _ => return Read::Damaged,
    };
    Read::Intact {
        change,
        records,
        place,
    }
}

fn checksum(sequence: u32, header: &[u8], hash: &[u8]) -> u32 {
    let mut covered = [0u8; 4 + COVERED];
    let (sequence_bytes, record) = covered.split_at_mut(4);
    sequence_bytes.copy_from_slice(&sequence.to_le_bytes());
    for (to, from) in record.iter_mut().zip(header.iter().chain(hash)) {
        *to = *from;
    }
    CRC32.checksum(&covered)
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    const CHANGES: [Change; 6] = [
        Change::Insert {
            hash: KeyHash(0x0123_4567_89ab_cdef),
            network: None,
        },
        Change::Insert {
            hash: KeyHash(1),
            network: Some((AddressFamily::Ipv4, 24)),
        },
        Change::Insert {
            hash: KeyHash(u64::MAX),
            network: Some((AddressFamily::Ipv6, 128)),
        },
        Change::Remove(KeyHash(42)),
        Change::Clear,
        Change::Lease(u64::MAX - 1),
    ];

    #[test]
    fn every_change_round_trips_with_its_place() {
        for change in CHANGES {
            let record = encode(change, 3, 2, 7);
            let intact = Read::Intact {
                change,
                records: 3,
                place: 2,
            };
            assert_eq!(decode(&record, 7), intact);
        }
    }

    #[test]
    fn a_record_of_another_image_or_with_any_bit_flipped_is_damaged() {
        for change in CHANGES {
            let record = encode(change, 1, 0, 7);
            assert_eq!(decode(&record, 8), Read::Damaged);
            for bit in 0..RECORD_LEN * 8 {
                let mut flipped = record;
                flipped[bit / 8] ^= 1 << (bit % 8);
                assert_eq!(decode(&flipped, 7), Read::Damaged, "bit {bit}");
            }
        }
    }

    #[test]
    fn erased_flash_is_the_end_and_a_place_past_its_change_is_damaged() {
        assert_eq!(decode(&[0xff; RECORD_LEN], 7), Read::Blank);
        assert_eq!(decode(&encode(Change::Clear, 2, 2, 7), 7), Read::Damaged);
    }
}
