//! Snapshots: a cuckoo filter as bytes, for files, flash and serial links.
//!
//! # Format (version 4, all integers little-endian)
//!
//! | offset | size | field                                              |
//! |--------|------|----------------------------------------------------|
//! | 0      | 4    | magic `b"CFLT"`                                     |
//! | 4      | 2    | format version, 4 (the layout version)              |
//! | 6      | 1    | filter kind, 1 = cuckoo                             |
//! | 7      | 1    | fingerprint bits (8, 16, 32)                        |
//! | 8      | 1    | slots per bucket (1, 2, 4, 8)                       |
//! | 9      | 1    | log2 of the bucket count                            |
//! | 10     | 6    | reserved, zero                                      |
//! | 16     | 8    | hash seed                                           |
//! | 24     | 8    | item count (occupied slots)                         |
//! | 32     | n    | the table, in the [bucket layout](crate::layout)    |
//! | 32 + n | 4    | CRC-32 (ISO-HDLC, as zlib) of all preceding bytes   |
//!
//! # Import never half-applies
//!
//! [`CuckooFilter::load_snapshot`] checks the header, the parameters, the
//! length, the CRC and the item count before it writes a single slot.
//! [`SnapshotLoader`] takes a snapshot chunk by chunk (like RedisBloom's
//! `CF.LOADCHUNK`) into a *staging* filter and reports in
//! [`SnapshotLoader::finish`] whether it is whole and intact; only then
//! should the caller make the staging filter live. [`SnapshotExporter`]
//! produces the chunks (like `CF.SCANDUMP`).

use crc::{Crc, Digest, CRC_32_ISO_HDLC};

use crate::cuckoo::CuckooFilter;
use crate::fingerprint::Fingerprint;
use crate::layout::BucketStorage;

/// First four bytes of every snapshot.
pub const MAGIC: [u8; 4] = *b"CFLT";
/// The format version this crate writes and reads: the table's layout
/// version, since a table means something only with its addressing (tables
/// of earlier versions placed keys differently and are refused).
pub const FORMAT_VERSION: u16 = crate::layout::LAYOUT_VERSION;
/// Header size in bytes.
pub const HEADER_LEN: usize = 32;
/// Trailer (CRC) size in bytes.
pub const TRAILER_LEN: usize = 4;
const KIND_CUCKOO: u8 = 1;

/// CRC-32/ISO-HDLC (the zlib CRC), table-driven: snapshots and serial
/// frames both use it.
pub static CRC32: Crc<u32> = Crc::<u32>::new(&CRC_32_ISO_HDLC);

/// A parameter that must match between a snapshot and its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "protocol", derive(serde::Serialize, serde::Deserialize))]
pub enum Parameter {
    /// Fingerprint width in bits.
    FingerprintBits,
    /// Slots per bucket.
    SlotsPerBucket,
    /// Number of buckets.
    BucketCount,
}

impl core::fmt::Display for Parameter {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Parameter::FingerprintBits => "fingerprint width",
            Parameter::SlotsPerBucket => "slots per bucket",
            Parameter::BucketCount => "bucket count",
        })
    }
}

/// Why a snapshot was rejected. The target filter is unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "protocol", derive(serde::Serialize, serde::Deserialize))]
pub enum SnapshotError {
    /// The first four bytes are not [`MAGIC`].
    BadMagic,
    /// A format version this crate does not read.
    UnsupportedVersion(u16),
    /// A filter kind this crate does not read.
    UnsupportedKind(u8),
    /// Reserved header bytes are not zero, or a header field is impossible.
    InvalidHeader,
    /// The snapshot was made for a filter of other dimensions.
    ParameterMismatch {
        /// Which parameter differs.
        parameter: Parameter,
        /// The target's value.
        expected: u64,
        /// The snapshot's value.
        found: u64,
    },
    /// The snapshot ends early.
    Truncated {
        /// Bytes a whole snapshot has.
        expected: u64,
        /// Bytes received.
        received: u64,
    },
    /// Bytes follow the end of the snapshot.
    TooLong {
        /// Bytes a whole snapshot has.
        expected: u64,
    },
    /// The checksum does not match the contents.
    CrcMismatch {
        /// CRC in the trailer.
        stored: u32,
        /// CRC of the bytes received.
        computed: u32,
    },
    /// The header's item count disagrees with the occupied slots.
    CountMismatch {
        /// Count in the header.
        header: u64,
        /// Occupied slots in the payload.
        counted: u64,
    },
    /// The output buffer cannot hold the snapshot.
    BufferTooSmall {
        /// Bytes needed.
        needed: u64,
    },
}

impl core::fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SnapshotError::BadMagic => f.write_str("not a filter snapshot (bad magic)"),
            SnapshotError::UnsupportedVersion(v) => write!(
                f,
                "unsupported snapshot format version {v}: its keys were placed by another \
                 hash or layout, so rebuild the filter from the keys"
            ),
            SnapshotError::UnsupportedKind(k) => write!(f, "unsupported filter kind {k}"),
            SnapshotError::InvalidHeader => f.write_str("invalid snapshot header"),
            SnapshotError::ParameterMismatch {
                parameter,
                expected,
                found,
            } => write!(
                f,
                "snapshot {parameter} is {found}, the target filter's is {expected}"
            ),
            SnapshotError::Truncated { expected, received } => {
                write!(f, "snapshot truncated: {received} of {expected} bytes")
            }
            SnapshotError::TooLong { expected } => {
                write!(f, "snapshot longer than its {expected} bytes")
            }
            SnapshotError::CrcMismatch { stored, computed } => write!(
                f,
                "snapshot corrupted: CRC-32 is {computed:#010x}, trailer says {stored:#010x}"
            ),
            SnapshotError::CountMismatch { header, counted } => write!(
                f,
                "snapshot header counts {header} items but the table holds {counted}"
            ),
            SnapshotError::BufferTooSmall { needed } => {
                write!(
                    f,
                    "buffer too small for the snapshot: {needed} bytes needed"
                )
            }
        }
    }
}

impl core::error::Error for SnapshotError {}

/// The decoded header of a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SnapshotHeader {
    /// Fingerprint width in bits.
    pub fingerprint_bits: u8,
    /// Slots per bucket.
    pub slots: u8,
    /// log2 of the bucket count.
    pub bucket_count_log2: u8,
    /// Hash seed of the table.
    pub seed: u64,
    /// Occupied slots.
    pub item_count: u64,
}

impl SnapshotHeader {
    /// The header a filter's snapshot starts with.
    pub fn of<F: Fingerprint, const S: usize, B: BucketStorage<F, S>>(
        filter: &CuckooFilter<F, S, B>,
    ) -> Self {
        Self {
            fingerprint_bits: F::BITS as u8,
            slots: S as u8,
            bucket_count_log2: filter.bucket_count().trailing_zeros() as u8,
            seed: filter.seed(),
            item_count: filter.len() as u64,
        }
    }

    /// Number of buckets.
    pub fn bucket_count(&self) -> u64 {
        1u64.checked_shl(u32::from(self.bucket_count_log2))
            .unwrap_or(u64::MAX)
    }

    /// Table size in bytes.
    pub fn payload_len(&self) -> u64 {
        self.bucket_count()
            .saturating_mul(u64::from(self.slots))
            .saturating_mul(u64::from(self.fingerprint_bits / 8))
    }

    /// Whole snapshot size in bytes.
    pub fn total_len(&self) -> u64 {
        self.payload_len()
            .saturating_add((HEADER_LEN + TRAILER_LEN) as u64)
    }

    /// The header's bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        let fields: [(usize, &[u8]); 8] = [
            (0, &MAGIC),
            (4, &FORMAT_VERSION.to_le_bytes()),
            (6, &[KIND_CUCKOO]),
            (7, &[self.fingerprint_bits]),
            (8, &[self.slots]),
            (9, &[self.bucket_count_log2]),
            (16, &self.seed.to_le_bytes()),
            (24, &self.item_count.to_le_bytes()),
        ];
        for (offset, bytes) in fields {
            for (dst, src) in out.iter_mut().skip(offset).zip(bytes) {
                *dst = *src;
            }
        }
        out
    }

    /// Parses and checks a header.
    pub fn decode(bytes: &[u8; HEADER_LEN]) -> Result<Self, SnapshotError> {
        let [m0, m1, m2, m3, v0, v1, kind, fingerprint_bits, slots, bucket_count_log2, r0, r1, r2, r3, r4, r5, s0, s1, s2, s3, s4, s5, s6, s7, c0, c1, c2, c3, c4, c5, c6, c7] =
            *bytes;
        if [m0, m1, m2, m3] != MAGIC {
            return Err(SnapshotError::BadMagic);
        }
        let version = u16::from_le_bytes([v0, v1]);
        if version != FORMAT_VERSION {
            return Err(SnapshotError::UnsupportedVersion(version));
        }
        if kind != KIND_CUCKOO {
            return Err(SnapshotError::UnsupportedKind(kind));
        }
        let reserved_clear = [r0, r1, r2, r3, r4, r5] == [0; 6];
        let fingerprint_ok = matches!(fingerprint_bits, 8 | 16 | 32);
        let slots_ok = matches!(slots, 1 | 2 | 4 | 8);
        if !(reserved_clear && fingerprint_ok && slots_ok && bucket_count_log2 <= 32) {
            return Err(SnapshotError::InvalidHeader);
        }
        Ok(Self {
            fingerprint_bits,
            slots,
            bucket_count_log2,
            seed: u64::from_le_bytes([s0, s1, s2, s3, s4, s5, s6, s7]),
            item_count: u64::from_le_bytes([c0, c1, c2, c3, c4, c5, c6, c7]),
        })
    }

    /// Checks that a snapshot with this header fits `filter`.
    pub fn check_fits<F: Fingerprint, const S: usize, B: BucketStorage<F, S>>(
        &self,
        filter: &CuckooFilter<F, S, B>,
    ) -> Result<(), SnapshotError> {
        self.check_dimensions(&Self::of(filter))
    }

    /// Checks that a snapshot with this header has `target`'s fingerprint
    /// width, slots per bucket and bucket count.
    pub(crate) fn check_dimensions(&self, target: &Self) -> Result<(), SnapshotError> {
        let checks = [
            (
                Parameter::FingerprintBits,
                target.fingerprint_bits,
                self.fingerprint_bits,
            ),
            (Parameter::SlotsPerBucket, target.slots, self.slots),
            (
                Parameter::BucketCount,
                target.bucket_count_log2,
                self.bucket_count_log2,
            ),
        ];
        for (parameter, expected, found) in checks {
            if expected != found {
                let value = |log_or_value: u8| match parameter {
                    Parameter::BucketCount => 1u64 << log_or_value,
                    _ => u64::from(log_or_value),
                };
                return Err(SnapshotError::ParameterMismatch {
                    parameter,
                    expected: value(expected),
                    found: value(found),
                });
            }
        }
        Ok(())
    }
}

/// Counts the fingerprints in a payload that are not empty.
fn occupied_in<F: Fingerprint>(payload: &[u8]) -> u64 {
    payload
        .chunks_exact(F::BYTES)
        .filter(|slot| slot.iter().any(|&byte| byte != 0))
        .count() as u64
}

impl<F: Fingerprint, const S: usize, B: BucketStorage<F, S>> CuckooFilter<F, S, B> {
    /// Size of this filter's snapshot in bytes.
    pub fn snapshot_len(&self) -> u64 {
        SnapshotHeader::of(self).total_len()
    }

    /// Writes the whole snapshot into `out`; returns its length.
    pub fn write_snapshot(&self, out: &mut [u8]) -> Result<usize, SnapshotError> {
        let needed = self.snapshot_len();
        let Some(out) = out
            .get_mut(..needed as usize)
            .filter(|_| needed <= usize::MAX as u64)
        else {
            return Err(SnapshotError::BufferTooSmall { needed });
        };
        let mut exporter = SnapshotExporter::new(self);
        Ok(exporter.next_chunk(self, out))
    }

    /// Replaces this filter's contents and seed with a whole snapshot. On
    /// any error the filter is left exactly as it was.
    pub fn load_snapshot(&mut self, bytes: &[u8]) -> Result<(), SnapshotError> {
        let (header, payload) = parse_snapshot::<F>(bytes, &SnapshotHeader::of(self))?;
        self.load_payload(payload, header.seed);
        Ok(())
    }

    /// Writes a checked payload (see [`parse_snapshot`]) into the table and
    /// adopts `seed`.
    pub(crate) fn load_payload(&mut self, payload: &[u8], seed: u64) {
        for (index, slot) in payload.chunks_exact(F::BYTES).enumerate() {
            self.set_global_slot(index, F::read_le(slot).unwrap_or(F::EMPTY));
        }
        self.finish_load(seed);
    }
}

/// Checks a whole snapshot for a table of `target`'s dimensions (header,
/// parameters, length, CRC, item count) without writing anything; returns
/// its header and its payload.
pub(crate) fn parse_snapshot<'a, F: Fingerprint>(
    bytes: &'a [u8],
    target: &SnapshotHeader,
) -> Result<(SnapshotHeader, &'a [u8]), SnapshotError> {
    let received = bytes.len() as u64;
    let header_bytes: &[u8; HEADER_LEN] = bytes
        .get(..HEADER_LEN)
        .and_then(|h| h.try_into().ok())
        .ok_or(SnapshotError::Truncated {
        expected: HEADER_LEN as u64,
        received,
    })?;
    let header = SnapshotHeader::decode(header_bytes)?;
    header.check_dimensions(target)?;
    let expected = header.total_len();
    if received < expected {
        return Err(SnapshotError::Truncated { expected, received });
    }
    if received > expected {
        return Err(SnapshotError::TooLong { expected });
    }
    let (body, trailer) = bytes.split_at(bytes.len() - TRAILER_LEN);
    let stored = u32::from_le_bytes(
        trailer
            .try_into()
            .map_err(|_| SnapshotError::InvalidHeader)?,
    );
    let computed = CRC32.checksum(body);
    if stored != computed {
        return Err(SnapshotError::CrcMismatch { stored, computed });
    }
    let payload = body.get(HEADER_LEN..).unwrap_or(&[]);
    let counted = occupied_in::<F>(payload);
    if counted != header.item_count {
        return Err(SnapshotError::CountMismatch {
            header: header.item_count,
            counted,
        });
    }
    Ok((header, payload))
}

/// Produces a filter's snapshot in chunks of any size.
///
/// The filter must not change between the first and the last chunk.
pub struct SnapshotExporter {
    header: [u8; HEADER_LEN],
    position: u64,
    total: u64,
    digest: Digest<'static, u32>,
}

impl SnapshotExporter {
    /// Starts exporting `filter`.
    pub fn new<F: Fingerprint, const S: usize, B: BucketStorage<F, S>>(
        filter: &CuckooFilter<F, S, B>,
    ) -> Self {
        let header = SnapshotHeader::of(filter);
        Self {
            header: header.encode(),
            position: 0,
            total: header.total_len(),
            digest: CRC32.digest(),
        }
    }

    /// Bytes in the whole snapshot.
    pub fn total_len(&self) -> u64 {
        self.total
    }

    /// Bytes produced so far.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Whether every byte has been produced.
    pub fn is_done(&self) -> bool {
        self.position >= self.total
    }

    /// Fills `out` with the next bytes of the snapshot; returns how many (0
    /// when done).
    pub fn next_chunk<F: Fingerprint, const S: usize, B: BucketStorage<F, S>>(
        &mut self,
        filter: &CuckooFilter<F, S, B>,
        out: &mut [u8],
    ) -> usize {
        let payload_end = self.total - TRAILER_LEN as u64;
        let mut written = 0;
        for byte in out.iter_mut() {
            let position = self.position;
            if position >= self.total {
                break;
            }
            *byte = if position < HEADER_LEN as u64 {
                self.header.get(position as usize).copied().unwrap_or(0)
            } else if position < payload_end {
                let offset = (position - HEADER_LEN as u64) as usize;
                let mut le = [0u8; 4];
                filter.global_slot(offset / F::BYTES).write_le(&mut le);
                le.get(offset % F::BYTES).copied().unwrap_or(0)
            } else {
                let crc = self.digest.clone().finalize().to_le_bytes();
                crc.get((position - payload_end) as usize)
                    .copied()
                    .unwrap_or(0)
            };
            if position < payload_end {
                self.digest.update(core::slice::from_ref(byte));
            }
            self.position += 1;
            written += 1;
        }
        written
    }
}

/// Takes a snapshot chunk by chunk into a staging filter.
///
/// The staging filter is overwritten as bytes arrive; it is meaningful only
/// once [`Self::finish`] returns `Ok`. After any error the loader refuses
/// further chunks with the same error.
pub struct SnapshotLoader {
    header_bytes: [u8; HEADER_LEN],
    header: Option<SnapshotHeader>,
    position: u64,
    slot_bytes: [u8; 4],
    trailer: [u8; TRAILER_LEN],
    digest: Digest<'static, u32>,
    failure: Option<SnapshotError>,
}

impl Default for SnapshotLoader {
    fn default() -> Self {
        Self::new()
    }
}

impl SnapshotLoader {
    /// A loader waiting for the first chunk.
    pub fn new() -> Self {
        Self {
            header_bytes: [0; HEADER_LEN],
            header: None,
            position: 0,
            slot_bytes: [0; 4],
            trailer: [0; TRAILER_LEN],
            digest: CRC32.digest(),
            failure: None,
        }
    }

    /// Bytes accepted so far.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// The header, once it has arrived.
    pub fn header(&self) -> Option<SnapshotHeader> {
        self.header
    }

    /// Feeds the next chunk into `staging`.
    pub fn feed<F: Fingerprint, const S: usize, B: BucketStorage<F, S>>(
        &mut self,
        staging: &mut CuckooFilter<F, S, B>,
        chunk: &[u8],
    ) -> Result<(), SnapshotError> {
        if let Some(failure) = self.failure {
            return Err(failure);
        }
        let result = chunk
            .iter()
            .try_for_each(|&byte| self.feed_byte(staging, byte));
        if let Err(failure) = result {
            self.failure = Some(failure);
        }
        result
    }

    fn feed_byte<F: Fingerprint, const S: usize, B: BucketStorage<F, S>>(
        &mut self,
        staging: &mut CuckooFilter<F, S, B>,
        byte: u8,
    ) -> Result<(), SnapshotError> {
        let position = self.position;
        match self.header {
            None => {
                if let Some(slot) = self.header_bytes.get_mut(position as usize) {
                    *slot = byte;
                }
                self.digest.update(&[byte]);
                if position + 1 == HEADER_LEN as u64 {
                    let header = SnapshotHeader::decode(&self.header_bytes)?;
                    header.check_fits(staging)?;
                    self.header = Some(header);
                }
            }
            Some(header) => {
                let payload_end = HEADER_LEN as u64 + header.payload_len();
                if position < payload_end {
                    self.digest.update(&[byte]);
                    let offset = (position - HEADER_LEN as u64) as usize;
                    if let Some(slot) = self.slot_bytes.get_mut(offset % F::BYTES) {
                        *slot = byte;
                    }
                    if offset % F::BYTES == F::BYTES - 1 {
                        let bytes = self.slot_bytes.get(..F::BYTES).unwrap_or(&[]);
                        let fingerprint = F::read_le(bytes).unwrap_or(F::EMPTY);
                        staging.set_global_slot(offset / F::BYTES, fingerprint);
                    }
                } else if let Some(slot) = self.trailer.get_mut((position - payload_end) as usize) {
                    *slot = byte;
                } else {
                    return Err(SnapshotError::TooLong {
                        expected: header.total_len(),
                    });
                }
            }
        }
        self.position += 1;
        Ok(())
    }

    /// Checks that the snapshot is whole and intact, and makes `staging`
    /// ready to use. On error `staging` holds garbage: discard it.
    pub fn finish<F: Fingerprint, const S: usize, B: BucketStorage<F, S>>(
        self,
        staging: &mut CuckooFilter<F, S, B>,
    ) -> Result<(), SnapshotError> {
        if let Some(failure) = self.failure {
            return Err(failure);
        }
        let Some(header) = self.header else {
            return Err(SnapshotError::Truncated {
                expected: HEADER_LEN as u64,
                received: self.position,
            });
        };
        if self.position < header.total_len() {
            return Err(SnapshotError::Truncated {
                expected: header.total_len(),
                received: self.position,
            });
        }
        let stored = u32::from_le_bytes(self.trailer);
        let computed = self.digest.finalize();
        if stored != computed {
            return Err(SnapshotError::CrcMismatch { stored, computed });
        }
        staging.finish_load(header.seed);
        if staging.len() as u64 != header.item_count {
            return Err(SnapshotError::CountMismatch {
                header: header.item_count,
                counted: staging.len() as u64,
            });
        }
        Ok(())
    }
}
