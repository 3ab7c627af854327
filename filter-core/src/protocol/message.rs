//! The message schema: every [`Request`] a host sends and the
//! [`Response`] a device answers, with the [`Error`]s a request can meet.
//! The limits of [`super::limits`] ([`MAX_BATCH`],
//! [`super::limits::MAX_CHUNK_LEN`]) keep every message within one frame.

use heapless::Vec;
use serde::{Deserialize, Serialize};

use super::error::Error;
use super::item::{Item, Located, PrefixLengths};
use super::limits::MAX_BATCH;

/// A message as it travels: the request id and the request or response.
/// A response carries the id of the request it answers (see the module
/// documentation of [`super`] for what ids are for).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope<T> {
    /// The request's id ([`NO_ID`](super::limits::NO_ID) in the answer to an unreadable frame).
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
        /// The host's [`PROTOCOL_VERSION`](super::limits::PROTOCOL_VERSION).
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
    /// Asks for the counters of the frames a device with Ethernet checked:
    /// [`Response::Traffic`].
    Traffic,
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
    /// The frame counters.
    Traffic(Traffic),
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
    /// The device's [`PROTOCOL_VERSION`](super::limits::PROTOCOL_VERSION).
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
    /// The journal of changes kept in flash after that image (`None`
    /// before any image is saved).
    pub journal: Option<JournalFill>,
    /// Why the device last started.
    pub reset_cause: ResetCause,
}

/// How full a device's journal is ([`Info`]): the adds, deletes and clears
/// since its image was saved, one record per key, kept in flash after the
/// image until a save folds them into a new image (which a device does by
/// itself when the journal has no room for a request's records).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct JournalFill {
    /// Records written.
    pub records: u32,
    /// Records the journal holds.
    pub capacity: u32,
}

/// Why a device last started, as far as its board can tell ([`Info`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ResetCause {
    /// Power came on.
    PowerOn,
    /// The reset pin (or a debugger) reset it.
    Pin,
    /// The supply voltage dropped too low.
    Brownout,
    /// The watchdog: the main loop stopped feeding it (a hang).
    Watchdog,
    /// Software asked for a reset (other than after a panic or a fault).
    Software,
    /// The firmware panicked and reset itself.
    Panic,
    /// A HardFault, after which the firmware reset itself.
    HardFault,
    /// A low-power management reset.
    LowPower,
    /// The board cannot tell.
    Unknown,
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
    /// Datagrams refused for a wrong authentication tag (or too short to
    /// carry one): not answered.
    pub datagrams_refused: u32,
    /// Datagrams with a right tag but a counter not above the highest
    /// taken (replays): answered as stale, not executed.
    pub datagrams_stale: u32,
}

/// Frames and bytes of one counter of [`Traffic`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct FrameCount {
    /// Frames.
    pub frames: u64,
    /// Bytes, from the Ethernet header on.
    pub bytes: u64,
}

impl FrameCount {
    /// Counts one frame of `bytes` bytes.
    pub fn add(&mut self, bytes: usize) {
        self.frames = self.frames.wrapping_add(1);
        self.bytes = self.bytes.wrapping_add(bytes as u64);
    }
}

/// What became of the IP frames of one address family.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct FamilyTraffic {
    /// Not listed: passed on.
    pub passed: FrameCount,
    /// From a listed source: dropped.
    pub dropped: FrameCount,
    /// A header cut short or impossible: dropped.
    pub malformed: FrameCount,
}

/// Counters since boot of the frames a device checked on its Ethernet
/// port ([`Response::Traffic`]), by outcome and family as the XDP program
/// counts them; all zero on a device without one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Traffic {
    /// IPv4 frames.
    pub ipv4: FamilyTraffic,
    /// IPv6 frames.
    pub ipv6: FamilyTraffic,
    /// Frames of another ethertype (ARP, ...): passed on.
    pub non_ip: FrameCount,
    /// Frames whose VLAN tags end early or stack too deep, of no family:
    /// dropped.
    pub malformed: FrameCount,
    /// Frames the device does not handle (not on a VLAN it bridges):
    /// dropped.
    pub ignored: FrameCount,
}
