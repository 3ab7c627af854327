//! The serial wire protocol between a host (cfctl) and the firmware.
//!
//! This module is the single definition of every byte on the link; the
//! firmware and the host client both use it. It does not own a filter or a
//! port: it frames, checks and (de)serializes messages, and defines what the
//! messages mean ([`contains`], [`locate_item`]) so that both ends agree.
//!
//! # Frames
//!
//! A frame is `COBS(postcard(message) ‖ CRC-32(postcard(message)))`
//! followed by one `0x00` delimiter. The CRC is CRC-32/ISO-HDLC (as zlib,
//! the same as [`crate::snapshot`]), little-endian. COBS keeps `0x00` out of
//! the frame, so a receiver resynchronizes at the next delimiter after any
//! corruption, and empty frames (a lone `0x00`) are ignored: a host may send
//! one to flush a half-sent frame.
//!
//! # Exchange
//!
//! The host sends one [`Request`] per frame; the device answers each with
//! exactly one [`Response`] frame, in order. A frame that is corrupted
//! (bad COBS or CRC), truncated, longer than [`MAX_FRAME_LEN`], or that
//! holds no known request gets [`Response::Error`] with
//! [`Error::Frame`] and changes nothing. A session starts with
//! [`Request::Hello`], which checks [`PROTOCOL_VERSION`] and returns the
//! device's [`Info`]. A host waits for each answer before it sends the next
//! request: a device holds one incoming frame at a time.
//!
//! # Keys
//!
//! An [`Item`] is an IPv4/IPv6 prefix ([`Prefix`], hashed as a
//! [`NetKey`]), a `u64` (hashed with [`KeyedHasher`] as a `u64`) or a byte
//! string (its bytes written to a [`KeyedHasher`], no length prefix, so the
//! hash is the same on 32- and 64-bit targets). Checking a prefix probes
//! every active prefix length up to its own (see [`contains`]).
//!
//! # Snapshots
//!
//! A host builds a whole filter with this crate and pushes its
//! [snapshot](crate::snapshot) with [`Request::SnapshotBegin`], a series of
//! [`Request::SnapshotChunk`]s (at most [`MAX_CHUNK_LEN`] bytes each, in
//! order, each but the last a multiple of [`CHUNK_ALIGN`] bytes long), and
//! [`Request::SnapshotCommit`]. The device checks the whole snapshot (header,
//! length, CRC, item count) before it replaces its live filter.

use heapless::Vec;
use serde::{Deserialize, Serialize};

use crate::cuckoo::CuckooFilter;
use crate::fingerprint::Fingerprint;
use crate::hash::{KeyHash, KeyedHasher};
use crate::layout::{locate, BucketStorage};
use crate::netkey::{AddressFamily, NetKey};
use crate::snapshot::{Parameter, SnapshotError, CRC32};

/// The protocol version exchanged in [`Request::Hello`].
pub const PROTOCOL_VERSION: u16 = 1;
/// Longest message (postcard bytes plus the 4-byte CRC) in either direction.
pub const MAX_MESSAGE_LEN: usize = 1024;
/// Longest frame on the wire, without its delimiter.
pub const MAX_FRAME_LEN: usize = cobs::max_encoding_length(MAX_MESSAGE_LEN);
/// Longest response frame, with its delimiter: a device needs no bigger
/// transmit buffer.
pub const MAX_RESPONSE_FRAME_LEN: usize = 128;
/// Most items in one [`Request::AddBatch`] or [`Request::CheckBatch`].
pub const MAX_BATCH: usize = 32;
/// Most snapshot bytes in one [`Request::SnapshotChunk`].
pub const MAX_CHUNK_LEN: usize = 768;
/// Every snapshot chunk but the last is a multiple of this many bytes long,
/// so that a device can write chunks to flash as they come.
pub const CHUNK_ALIGN: usize = 4;

const CRC_LEN: usize = 4;

/// An IPv4 or IPv6 prefix: an address and how many leading bits count.
/// A single address is a `/32` or `/128` prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Prefix {
    /// An IPv4 address (network order) and prefix length (0..=32).
    V4 {
        /// The address octets.
        address: [u8; 4],
        /// The prefix length.
        len: u8,
    },
    /// An IPv6 address (network order) and prefix length (0..=128).
    V6 {
        /// The address octets.
        address: [u8; 16],
        /// The prefix length.
        len: u8,
    },
}

impl Prefix {
    /// The address family.
    pub fn family(&self) -> AddressFamily {
        match self {
            Prefix::V4 { .. } => AddressFamily::Ipv4,
            Prefix::V6 { .. } => AddressFamily::Ipv6,
        }
    }

    /// The prefix length.
    pub fn prefix_len(&self) -> u8 {
        match *self {
            Prefix::V4 { len, .. } | Prefix::V6 { len, .. } => len,
        }
    }

    /// The same address with another prefix length.
    pub fn with_prefix_len(self, len: u8) -> Self {
        match self {
            Prefix::V4 { address, .. } => Prefix::V4 { address, len },
            Prefix::V6 { address, .. } => Prefix::V6 { address, len },
        }
    }

    /// The key of this prefix, or [`Error::InvalidPrefixLen`] when the
    /// length is too long for the family.
    pub fn net_key(&self) -> Result<NetKey, Error> {
        let key = match *self {
            Prefix::V4 { address, len } => NetKey::ipv4_octets(address, len),
            Prefix::V6 { address, len } => NetKey::ipv6_octets(address, len),
        };
        key.ok_or(Error::InvalidPrefixLen {
            len: self.prefix_len(),
        })
    }
}

/// What a request adds, deletes, checks or locates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Item<'a> {
    /// A network prefix or address.
    Net(Prefix),
    /// A 64-bit identifier.
    U64(u64),
    /// Any byte string (a coupon code, a name).
    Bytes(&'a [u8]),
}

impl Item<'_> {
    /// The item's hash under `seed`, as both ends compute it.
    pub fn hash(&self, seed: u64) -> Result<KeyHash, Error> {
        match self {
            Item::Net(prefix) => prefix.net_key().map(|key| key.hash(seed)),
            Item::U64(value) => Ok(KeyedHasher::hash_item(seed, value)),
            Item::Bytes(bytes) => {
                let mut hasher = KeyedHasher::new(seed);
                core::hash::Hasher::write(&mut hasher, bytes);
                Ok(hasher.key_hash())
            }
        }
    }
}

/// The prefix lengths that may hold entries, per family: the lengths a
/// check has to probe. Adding a prefix activates its length; deleting does
/// not deactivate it (a stale length costs one probe, never a wrong answer);
/// a clear or a snapshot resets the set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PrefixLengths {
    /// Word 0, bit `n`: IPv4 length `n`; words 1 to 3, bit `n % 64` of
    /// word `1 + n / 64`: IPv6 length `n`.
    words: [u64; 4],
}

impl PrefixLengths {
    /// Size of [`Self::to_le_bytes`].
    pub const ENCODED_LEN: usize = 32;

    /// No active length.
    pub const fn new() -> Self {
        Self { words: [0; 4] }
    }

    /// The word and bit of a length; `None` beyond the family's longest.
    fn position(family: AddressFamily, len: u8) -> Option<(usize, u64)> {
        if len > family.max_prefix_len() {
            return None;
        }
        Some(match family {
            AddressFamily::Ipv4 => (0, 1 << len),
            AddressFamily::Ipv6 => (1 + usize::from(len / 64), 1 << (len % 64)),
        })
    }

    /// Marks `len` active for `family`; lengths beyond the family's longest
    /// are ignored.
    pub fn insert(&mut self, family: AddressFamily, len: u8) {
        if let Some((index, bit)) = Self::position(family, len) {
            if let Some(word) = self.words.get_mut(index) {
                *word |= bit;
            }
        }
    }

    /// Whether `len` is active for `family`.
    pub fn contains(&self, family: AddressFamily, len: u8) -> bool {
        Self::position(family, len)
            .and_then(|(index, bit)| self.words.get(index).map(|word| word & bit != 0))
            .unwrap_or(false)
    }

    /// The active lengths of `family` up to `max_len`, shortest first.
    pub fn up_to(&self, family: AddressFamily, max_len: u8) -> impl Iterator<Item = u8> + '_ {
        (0..=max_len.min(family.max_prefix_len())).filter(move |&len| self.contains(family, len))
    }

    /// The set as 32 little-endian bytes (the four words in order), for
    /// storing it beside a snapshot.
    pub fn to_le_bytes(&self) -> [u8; Self::ENCODED_LEN] {
        let mut out = [0u8; Self::ENCODED_LEN];
        for (chunk, word) in out.chunks_exact_mut(8).zip(self.words) {
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        out
    }

    /// The inverse of [`Self::to_le_bytes`].
    pub fn from_le_bytes(bytes: &[u8; Self::ENCODED_LEN]) -> Self {
        let mut words = [0u64; 4];
        for (word, chunk) in words.iter_mut().zip(bytes.chunks_exact(8)) {
            let mut le = [0u8; 8];
            le.copy_from_slice(chunk);
            *word = u64::from_le_bytes(le);
        }
        Self { words }
    }
}

/// Whether `filter` reports `item` present, the way the device answers
/// [`Request::Check`]: a prefix (or address) is present when the filter
/// holds it or any shorter active prefix that contains it; other items when
/// the filter holds them.
pub fn contains<F: Fingerprint, const S: usize, B: BucketStorage<F, S>>(
    filter: &CuckooFilter<F, S, B>,
    active: &PrefixLengths,
    item: &Item<'_>,
) -> Result<bool, Error> {
    match item {
        Item::Net(prefix) => {
            // Validates the length even when no length is active.
            prefix.net_key()?;
            for len in active.up_to(prefix.family(), prefix.prefix_len()) {
                if filter.contains_hash(prefix.with_prefix_len(len).net_key()?.hash(filter.seed()))
                {
                    return Ok(true);
                }
            }
            Ok(false)
        }
        other => Ok(filter.contains_hash(other.hash(filter.seed())?)),
    }
}

/// Where `item` lives in a table of `bucket_count` buckets of
/// `fingerprint_bits`-bit fingerprints under `seed` ([`Request::Locate`]).
pub fn locate_item(
    item: &Item<'_>,
    seed: u64,
    bucket_count: u32,
    fingerprint_bits: u8,
) -> Result<Located, Error> {
    if !bucket_count.is_power_of_two() {
        return Err(Error::InvalidParameter {
            parameter: Parameter::BucketCount,
        });
    }
    let hash = item.hash(seed)?;
    let mask = bucket_count as usize - 1;
    let (fingerprint, primary, alternate) = match fingerprint_bits {
        8 => widen(locate::<u8>(hash, mask)),
        16 => widen(locate::<u16>(hash, mask)),
        32 => widen(locate::<u32>(hash, mask)),
        _ => {
            return Err(Error::InvalidParameter {
                parameter: Parameter::FingerprintBits,
            })
        }
    };
    Ok(Located {
        hash: hash.0,
        fingerprint,
        primary: primary as u32,
        alternate: alternate as u32,
    })
}

fn widen<F: Fingerprint>(location: crate::Location<F>) -> (u32, usize, usize) {
    (
        location.fingerprint.to_u32(),
        location.primary,
        location.alternate,
    )
}

/// A request from the host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request<'a> {
    /// Opens a session: the device checks `version` and answers
    /// [`Response::Info`]. Also the way to ask for [`Info`] later.
    Hello {
        /// The host's [`PROTOCOL_VERSION`].
        version: u16,
    },
    /// Adds an item: [`Response::Added`].
    #[serde(borrow)]
    Add(Item<'a>),
    /// Deletes one copy of an item: [`Response::Deleted`].
    Delete(Item<'a>),
    /// Checks an item: [`Response::Checked`].
    Check(Item<'a>),
    /// Adds items in order until one does not fit: [`Response::BatchAdded`].
    AddBatch(Vec<Item<'a>, MAX_BATCH>),
    /// Checks items: [`Response::BatchChecked`].
    CheckBatch(Vec<Item<'a>, MAX_BATCH>),
    /// Removes every entry (the seed stays): [`Response::Cleared`].
    Clear,
    /// Asks for the counters: [`Response::Stats`].
    Stats,
    /// Starts a snapshot upload of `total_len` bytes whose entries use
    /// `prefix_lengths`; discards any upload in progress:
    /// [`Response::SnapshotStarted`].
    SnapshotBegin {
        /// The snapshot's whole length in bytes.
        total_len: u32,
        /// The prefix lengths the snapshot's entries use.
        prefix_lengths: PrefixLengths,
    },
    /// The snapshot bytes at `offset` (which must be the number of bytes
    /// sent so far): [`Response::ChunkAccepted`].
    SnapshotChunk {
        /// Position of `data` in the snapshot.
        offset: u32,
        /// The bytes.
        data: &'a [u8],
    },
    /// Checks the whole snapshot and, if it is intact, makes it the live
    /// filter and the saved image: [`Response::SnapshotCommitted`].
    SnapshotCommit,
    /// Writes the live filter to persistent storage: [`Response::Saved`].
    Save,
    /// Computes where `item` lives in a table of the given shape, without
    /// touching the filter: [`Response::Located`]. Lets a host check the
    /// device's hash and layout code against test vectors.
    Locate {
        /// Hash seed.
        seed: u64,
        /// Number of buckets (a power of two).
        bucket_count: u32,
        /// Fingerprint width: 8, 16 or 32.
        fingerprint_bits: u8,
        /// The item.
        item: Item<'a>,
    },
}

/// The device's answer to one request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Response {
    /// The device's parameters and state.
    Info(Info),
    /// The item was added.
    Added,
    /// Whether a copy of the item was found and deleted.
    Deleted {
        /// `false`: nothing matched, nothing changed.
        found: bool,
    },
    /// Whether the item is (probably) present.
    Checked {
        /// `false` is certain; `true` may be a false positive.
        present: bool,
    },
    /// All items of the batch were added.
    BatchAdded {
        /// Items added.
        added: u16,
    },
    /// The answers to a batch check.
    BatchChecked {
        /// Bit `i` is set when item `i` is present.
        present: u32,
    },
    /// The filter is empty.
    Cleared,
    /// The counters.
    Stats(Stats),
    /// The device waits for the snapshot's chunks.
    SnapshotStarted,
    /// The chunk was stored.
    ChunkAccepted {
        /// Snapshot bytes received so far.
        received: u32,
    },
    /// The snapshot is live (and saved).
    SnapshotCommitted {
        /// Entries in the new live filter.
        entries: u32,
        /// Sequence number of the saved image.
        sequence: u32,
    },
    /// The live filter was saved.
    Saved {
        /// Sequence number of the new image.
        sequence: u32,
    },
    /// Where an item lives.
    Located(Located),
    /// The request failed; nothing changed unless the error says so.
    Error(Error),
}

/// The device's parameters and state ([`Response::Info`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Info {
    /// The device's [`PROTOCOL_VERSION`].
    pub protocol_version: u16,
    /// Fingerprint width in bits.
    pub fingerprint_bits: u8,
    /// Slots per bucket.
    pub slots_per_bucket: u8,
    /// Number of buckets.
    pub bucket_count: u32,
    /// Number of slots (an upper bound on entries).
    pub capacity: u32,
    /// Hash seed of the live filter.
    pub seed: u64,
    /// Entries in the live filter.
    pub entries: u32,
    /// Prefix lengths that checks probe.
    pub prefix_lengths: PrefixLengths,
    /// Sequence number of the newest saved image, if any.
    pub saved_sequence: Option<u32>,
}

/// Counters since boot ([`Response::Stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Stats {
    /// Requests answered (errors included).
    pub requests: u32,
    /// Frames rejected as corrupted, truncated, oversized or unknown.
    pub frame_errors: u32,
    /// Well-formed requests that failed.
    pub request_errors: u32,
    /// Items added.
    pub added: u32,
    /// Items deleted.
    pub deleted: u32,
    /// Items checked.
    pub checked: u32,
    /// Checks that answered present.
    pub hits: u32,
    /// Images written to persistent storage.
    pub saves: u32,
}

/// Where an item lives ([`Response::Located`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Located {
    /// The 64-bit hash.
    pub hash: u64,
    /// The fingerprint, widened.
    pub fingerprint: u32,
    /// Primary bucket.
    pub primary: u32,
    /// Alternate bucket.
    pub alternate: u32,
}

/// Why a frame was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum FrameError {
    /// Longer than [`MAX_FRAME_LEN`]; the bytes up to the next delimiter
    /// were dropped.
    Oversized,
    /// Not valid COBS.
    Encoding,
    /// Too short to hold a CRC.
    Truncated,
    /// The CRC does not match the contents.
    Crc {
        /// CRC in the frame.
        stored: u32,
        /// CRC of the contents.
        computed: u32,
    },
    /// The CRC is right but the contents are not a known message (an
    /// unknown request, a bad field, trailing bytes).
    Malformed,
}

impl core::fmt::Display for FrameError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            FrameError::Oversized => write!(f, "frame longer than {MAX_FRAME_LEN} bytes"),
            FrameError::Encoding => f.write_str("frame is not valid COBS"),
            FrameError::Truncated => f.write_str("frame too short to hold a CRC"),
            FrameError::Crc { stored, computed } => write!(
                f,
                "frame corrupted: CRC-32 is {computed:#010x}, frame says {stored:#010x}"
            ),
            FrameError::Malformed => f.write_str("frame holds no known message"),
        }
    }
}

impl core::error::Error for FrameError {}

/// Why a request failed ([`Response::Error`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Error {
    /// The request's frame was rejected; nothing changed.
    Frame(FrameError),
    /// The host speaks another protocol version.
    VersionMismatch {
        /// The device's version.
        device: u16,
    },
    /// A prefix length longer than its family allows.
    InvalidPrefixLen {
        /// The length given.
        len: u8,
    },
    /// A [`Request::Locate`] parameter is impossible.
    InvalidParameter {
        /// Which one.
        parameter: Parameter,
    },
    /// The filter is full. For a batch, the items before the one that did
    /// not fit were added.
    Full {
        /// Items added before the filter filled up.
        added: u16,
    },
    /// A snapshot chunk or commit without a snapshot upload in progress.
    NoSnapshotUpload,
    /// A snapshot of the wrong length for this device.
    SnapshotLength {
        /// The length this device's snapshots have.
        expected: u32,
    },
    /// A snapshot chunk out of order or of a length that is not a multiple
    /// of [`CHUNK_ALIGN`]; the upload goes on.
    SnapshotChunk {
        /// The offset the device expects next.
        expected_offset: u32,
    },
    /// The snapshot was rejected; the live filter is unchanged and the
    /// upload is over.
    Snapshot(SnapshotError),
    /// Persistent storage failed; the saved images are as they were.
    Storage,
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Frame(error) => write!(f, "rejected frame: {error}"),
            Error::VersionMismatch { device } => write!(
                f,
                "device speaks protocol version {device}, this host {PROTOCOL_VERSION}"
            ),
            Error::InvalidPrefixLen { len } => {
                write!(f, "prefix length {len} is too long for its address family")
            }
            Error::InvalidParameter { parameter } => write!(f, "invalid {parameter:?}"),
            Error::Full { added } => {
                write!(
                    f,
                    "filter is full ({added} items of the request were added)"
                )
            }
            Error::NoSnapshotUpload => f.write_str("no snapshot upload in progress"),
            Error::SnapshotLength { expected } => {
                write!(f, "this device takes snapshots of exactly {expected} bytes")
            }
            Error::SnapshotChunk { expected_offset } => write!(
                f,
                "snapshot chunk out of order or misaligned: expected offset {expected_offset}, \
                 length a multiple of {CHUNK_ALIGN}"
            ),
            Error::Snapshot(error) => write!(f, "snapshot rejected: {error}"),
            Error::Storage => f.write_str("persistent storage failed"),
        }
    }
}

impl core::error::Error for Error {}

/// A message did not fit the output buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct BufferTooSmall;

impl core::fmt::Display for BufferTooSmall {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("message does not fit the frame buffer")
    }
}

impl core::error::Error for BufferTooSmall {}

/// Encodes `message` as a whole frame, delimiter included, into `out`;
/// returns the frame's bytes.
pub fn encode<'b, T: Serialize + ?Sized>(
    message: &T,
    out: &'b mut [u8],
) -> Result<&'b mut [u8], BufferTooSmall> {
    use postcard::ser_flavors::{crc::CrcModifier, Cobs, Slice};
    let flavor = Cobs::try_new(Slice::new(out)).map_err(|_| BufferTooSmall)?;
    postcard::serialize_with_flavor(message, CrcModifier::new(flavor, CRC32.digest()))
        .map_err(|_| BufferTooSmall)
}

/// Decodes one frame (without its delimiter) in place: checks its length,
/// COBS, CRC and contents. Never panics, whatever the bytes.
pub fn decode<'a, T: Deserialize<'a>>(frame: &'a mut [u8]) -> Result<T, FrameError> {
    if frame.len() > MAX_FRAME_LEN {
        return Err(FrameError::Oversized);
    }
    let decoded_len = cobs::decode_in_place(frame).map_err(|_| FrameError::Encoding)?;
    let decoded = frame.get(..decoded_len).ok_or(FrameError::Encoding)?;
    let body_len = decoded_len
        .checked_sub(CRC_LEN)
        .ok_or(FrameError::Truncated)?;
    let (body, crc) = decoded.split_at(body_len);
    let stored = crc
        .try_into()
        .map(u32::from_le_bytes)
        .map_err(|_| FrameError::Truncated)?;
    let computed = CRC32.checksum(body);
    if stored != computed {
        return Err(FrameError::Crc { stored, computed });
    }
    match postcard::take_from_bytes(body) {
        Ok((message, [])) => Ok(message),
        _ => Err(FrameError::Malformed),
    }
}

/// Cuts a byte stream into frames at `0x00` delimiters, in a buffer of `N`
/// bytes; bytes of a frame longer than `N` are dropped up to the next
/// delimiter and reported as [`FrameError::Oversized`].
#[derive(Clone, Debug)]
pub struct FrameReader<const N: usize> {
    buffer: [u8; N],
    len: usize,
    overflowed: bool,
}

impl<const N: usize> Default for FrameReader<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> FrameReader<N> {
    /// An empty reader.
    pub const fn new() -> Self {
        Self {
            buffer: [0; N],
            len: 0,
            overflowed: false,
        }
    }

    /// Takes the next byte; returns a frame (without its delimiter) when
    /// `byte` ends one. Empty frames are skipped.
    pub fn push(&mut self, byte: u8) -> Option<Result<&mut [u8], FrameError>> {
        if byte != 0 {
            match self.buffer.get_mut(self.len) {
                Some(slot) if !self.overflowed => {
                    *slot = byte;
                    self.len += 1;
                }
                _ => self.overflowed = true,
            }
            return None;
        }
        let len = core::mem::take(&mut self.len);
        if core::mem::take(&mut self.overflowed) {
            return Some(Err(FrameError::Oversized));
        }
        if len == 0 {
            return None;
        }
        self.buffer.get_mut(..len).map(Ok)
    }
}

#[cfg(test)]
#[allow(clippy::panic, clippy::indexing_slicing)]
mod tests {
    extern crate std;

    use super::*;
    use proptest::prelude::*;
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
            assert_eq!(decode_frame(&frame), Ok(request));
        }
    }

    #[test]
    fn the_largest_responses_fit_the_response_buffer() {
        let all_lengths = PrefixLengths {
            words: [u64::MAX; 4],
        };
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
            let mut out = [0u8; MAX_RESPONSE_FRAME_LEN];
            let frame = encode(&response, &mut out).map(|frame| frame.to_vec());
            let Ok(mut frame) = frame else {
                panic!("{response:?} does not fit");
            };
            frame.pop();
            assert_eq!(decode::<Response>(&mut frame), Ok(response));
        }
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
}
