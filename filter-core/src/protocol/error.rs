//! Why a request fails: the [`Error`] a device answers with.

use serde::{Deserialize, Serialize};

use super::frame::FrameError;
use super::limits::{CHUNK_ALIGN, PROTOCOL_VERSION};
use crate::snapshot::{Parameter, SnapshotError};

/// Why a request failed ([`Response::Error`](super::Response::Error)).
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
    /// A [`Request::Locate`](super::Request::Locate) parameter is impossible.
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
