//! The host side of the firmware's serial protocol
//! ([`filter_core::protocol`]): one method per request, plus
//! [`DeviceClient::push_snapshot`] that uploads a whole filter built on the
//! host.
//!
//! * [`link`]: request ids, discarding answers that are not this
//!   request's, and resending until the answer comes;
//! * [`port`]: opens the stream (serial port or pty, unix socket, TCP,
//!   sealed UDP);
//! * [`sealed`]: frames as datagrams sealed under the device's key.

pub mod link;
pub mod port;
pub mod sealed;

use std::io::{self, Read, Write};
use std::time::Duration;

use filter_core::protocol::{
    self, FrameError, Info, Item, Located, PrefixLengths, Request, Response, Stats, Traffic,
    MAX_BATCH, MAX_CHUNK_LEN, PROTOCOL_VERSION,
};

pub use link::{Link, LinkStats, LinkTiming};
pub use port::{Port, PortSettings, Target};

/// Why a request to the device failed.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// Opening, reading or writing the stream failed.
    #[error("device link: {0}")]
    Io(#[from] io::Error),
    /// The device sent nothing back within the deadline.
    #[error("device did not answer within {0:?}")]
    Timeout(Duration),
    /// The stream ended.
    #[error("device closed the link")]
    Closed,
    /// Until the deadline, only damaged frames came back (from the device
    /// or, as it reported, to it).
    #[error("no intact answer within the deadline: {0}")]
    BadResponse(FrameError),
    /// The device answered with an error.
    #[error("device refused the request: {0}")]
    Refused(protocol::Error),
    /// The device answered, but not what the request asks for.
    #[error("device answered {got:?} to a {request} request")]
    Unexpected {
        /// The request's name.
        request: &'static str,
        /// The answer.
        got: Box<Response>,
    },
    /// The request cannot be sent (too large).
    #[error("request too large for one frame")]
    TooLarge,
}

/// A connection to a filter device.
pub struct DeviceClient<P> {
    link: Link<P>,
}

impl DeviceClient<Box<dyn Port>> {
    /// Opens `target` (see [`Target::parse`]) and says hello; returns the
    /// client and the device's [`Info`].
    pub fn open(
        target: &str,
        settings: &PortSettings,
        timing: LinkTiming,
    ) -> Result<(Self, Info), DeviceError> {
        // Reads wake the link often enough to resend on time (a zero read
        // timeout would mean "never" to the socket).
        let poll = (timing.resend_after / 4).max(Duration::from_millis(1));
        let port = Target::parse(target).open(settings, poll)?;
        let mut client = DeviceClient::with_timing(port, timing);
        let info = client.hello()?;
        Ok((client, info))
    }
}

impl<P: Read + Write> DeviceClient<P> {
    /// A client on an open stream whose reads time out after `timeout`,
    /// waiting at most `timeout` for each answer.
    pub fn new(port: P, timeout: Duration) -> Self {
        Self::with_timing(port, LinkTiming::with_deadline(timeout))
    }

    /// A client on an open stream, with the given deadline and resend
    /// interval (see [`link`]).
    pub fn with_timing(port: P, timing: LinkTiming) -> Self {
        Self::with_link(Link::new(port, timing))
    }

    /// A client over `link`.
    pub fn with_link(link: Link<P>) -> Self {
        Self { link }
    }

    /// What the link discarded or repeated so far.
    pub fn link_stats(&self) -> LinkStats {
        self.link.stats()
    }

    /// Sends `request` and returns the device's response, errors included.
    pub fn request(&mut self, request: &Request<'_>) -> Result<Response, DeviceError> {
        self.link.call(request)
    }

    /// Sends raw bytes (which should end a frame) and returns the next
    /// response, whatever its id: for testing how a device treats damaged
    /// frames.
    pub fn exchange_raw(&mut self, bytes: &[u8]) -> Result<Response, DeviceError> {
        self.link.exchange_raw(bytes)
    }

    /// Sends `request` and picks the expected answer out of the response.
    fn call<T>(
        &mut self,
        request: &Request<'_>,
        name: &'static str,
        pick: impl FnOnce(Response) -> Result<T, Box<Response>>,
    ) -> Result<T, DeviceError> {
        match self.request(request)? {
            Response::Error(error) => Err(DeviceError::Refused(error)),
            response => {
                pick(response).map_err(|got| DeviceError::Unexpected { request: name, got })
            }
        }
    }

    /// Checks the protocol version; returns the device's parameters.
    pub fn hello(&mut self) -> Result<Info, DeviceError> {
        let request = Request::Hello {
            version: PROTOCOL_VERSION,
        };
        self.call(&request, "hello", |response| match response {
            Response::Info(info) => Ok(info),
            other => Err(Box::new(other)),
        })
    }

    /// Adds one item.
    pub fn add(&mut self, item: Item<'_>) -> Result<(), DeviceError> {
        self.call(&Request::Add(item), "add", |response| match response {
            Response::Added => Ok(()),
            other => Err(Box::new(other)),
        })
    }

    /// Deletes one copy of an item; `false` when none was there.
    pub fn delete(&mut self, item: Item<'_>) -> Result<bool, DeviceError> {
        self.call(
            &Request::Delete(item),
            "delete",
            |response| match response {
                Response::Deleted { found } => Ok(found),
                other => Err(Box::new(other)),
            },
        )
    }

    /// Checks one item.
    pub fn check(&mut self, item: Item<'_>) -> Result<bool, DeviceError> {
        self.call(&Request::Check(item), "check", |response| match response {
            Response::Checked { present } => Ok(present),
            other => Err(Box::new(other)),
        })
    }

    /// Adds items, [`MAX_BATCH`] per request; returns how many were added
    /// (all of them, or the error says how many of the last batch were).
    pub fn add_batch(&mut self, items: &[Item<'_>]) -> Result<usize, DeviceError> {
        let mut added = 0;
        for batch in items.chunks(MAX_BATCH) {
            let request = Request::AddBatch(batch.iter().copied().collect());
            added += self.call(&request, "add batch", |response| match response {
                Response::BatchAdded { added } => Ok(usize::from(added)),
                other => Err(Box::new(other)),
            })?;
        }
        Ok(added)
    }

    /// Checks items, [`MAX_BATCH`] per request.
    pub fn check_batch(&mut self, items: &[Item<'_>]) -> Result<Vec<bool>, DeviceError> {
        let mut answers = Vec::with_capacity(items.len());
        for batch in items.chunks(MAX_BATCH) {
            let request = Request::CheckBatch(batch.iter().copied().collect());
            let present = self.call(&request, "check batch", |response| match response {
                Response::BatchChecked { present } => Ok(present),
                other => Err(Box::new(other)),
            })?;
            answers.extend((0..batch.len()).map(|index| present & (1 << index) != 0));
        }
        Ok(answers)
    }

    /// Removes every entry.
    pub fn clear(&mut self) -> Result<(), DeviceError> {
        self.call(&Request::Clear, "clear", |response| match response {
            Response::Cleared => Ok(()),
            other => Err(Box::new(other)),
        })
    }

    /// The device's counters.
    pub fn stats(&mut self) -> Result<Stats, DeviceError> {
        self.call(&Request::Stats, "stats", |response| match response {
            Response::Stats(stats) => Ok(stats),
            other => Err(Box::new(other)),
        })
    }

    /// The counters of the frames the device checked on its Ethernet
    /// port.
    pub fn traffic(&mut self) -> Result<Traffic, DeviceError> {
        self.call(&Request::Traffic, "traffic", |response| match response {
            Response::Traffic(traffic) => Ok(traffic),
            other => Err(Box::new(other)),
        })
    }

    /// Saves the live filter to the device's flash; returns the image's
    /// sequence number.
    pub fn save(&mut self) -> Result<u32, DeviceError> {
        self.call(&Request::Save, "save", |response| match response {
            Response::Saved { sequence } => Ok(sequence),
            other => Err(Box::new(other)),
        })
    }

    /// Where `item` lives in a table of the given shape, as the device
    /// computes it.
    pub fn locate(
        &mut self,
        item: Item<'_>,
        seed: u64,
        bucket_count: u32,
        fingerprint_bits: u8,
    ) -> Result<Located, DeviceError> {
        let request = Request::Locate {
            seed,
            bucket_count,
            fingerprint_bits,
            item,
        };
        self.call(&request, "locate", |response| match response {
            Response::Located(located) => Ok(located),
            other => Err(Box::new(other)),
        })
    }

    /// Uploads a whole snapshot (made with filter-core for the device's
    /// filter shape) and makes it the device's live and saved filter;
    /// returns the new entry count and image sequence number. The device
    /// keeps its old filter if anything is wrong with the snapshot.
    pub fn push_snapshot(
        &mut self,
        snapshot: &[u8],
        prefix_lengths: PrefixLengths,
    ) -> Result<(u32, u32), DeviceError> {
        let total_len = u32::try_from(snapshot.len()).map_err(|_| DeviceError::TooLarge)?;
        let begin = Request::SnapshotBegin {
            total_len,
            prefix_lengths,
        };
        self.call(&begin, "snapshot begin", |response| match response {
            Response::SnapshotStarted => Ok(()),
            other => Err(Box::new(other)),
        })?;
        let chunk_len = MAX_CHUNK_LEN - MAX_CHUNK_LEN % protocol::CHUNK_ALIGN;
        for (index, data) in snapshot.chunks(chunk_len).enumerate() {
            let offset = (index * chunk_len) as u32;
            let chunk = Request::SnapshotChunk { offset, data };
            self.call(&chunk, "snapshot chunk", |response| match response {
                Response::ChunkAccepted { .. } => Ok(()),
                other => Err(Box::new(other)),
            })?;
        }
        self.call(
            &Request::SnapshotCommit,
            "snapshot commit",
            |response| match response {
                Response::SnapshotCommitted { entries, sequence } => Ok((entries, sequence)),
                other => Err(Box::new(other)),
            },
        )
    }
}
