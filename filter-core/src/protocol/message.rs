//! The message schema: every [`Request`] a host sends and the
//! [`Response`] a device answers, with the [`Error`]s a request can meet.
//! The limits here ([`MAX_BATCH`], [`MAX_CHUNK_LEN`]) keep every message
//! within one frame (see [`super::frame`]).

use heapless::Vec;
use serde::{Deserialize, Serialize};

use super::frame::FrameError;
use super::item::{Item, PrefixLengths};
use crate::snapshot::{Parameter, SnapshotError};

/// The protocol version exchanged in [`Request::Hello`]. Version 2 put
/// every message in an [`Envelope`] with a request id.
pub const PROTOCOL_VERSION: u16 = 2;
/// The id of the answer to a frame whose own id could not be read (a
/// damaged frame); a request sent with this id is never replayed.
pub const NO_ID: u32 = 0;
/// Most items in one [`Request::AddBatch`] or [`Request::CheckBatch`].
pub const MAX_BATCH: usize = 32;
/// Most snapshot bytes in one [`Request::SnapshotChunk`].
pub const MAX_CHUNK_LEN: usize = 768;
/// Every snapshot chunk but the last is a multiple of this many bytes long,
/// so that a device can write chunks to flash as they come.
pub const CHUNK_ALIGN: usize = 4;

/// A message as it travels: the request id and the request or response.
/// A response carries the id of the request it answers (see the module
/// documentation of [`super`] for what ids are for).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope<T> {
    /// The request's id ([`NO_ID`] in the answer to an unreadable frame).
    pub id: u32,
    /// The request or response.
    pub message: T,
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
    /// Retransmitted requests answered again without being executed again.
    pub replayed: u32,
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
            Error::InvalidParameter { parameter } => write!(f, "invalid {parameter}"),
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
