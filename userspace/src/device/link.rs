//! One request, one answer, over a byte stream that may lose, damage,
//! duplicate or delay bytes, and that may still hold answers meant for an
//! earlier client.
//!
//! [`Link::call`] puts the request in an [`Envelope`] with a fresh id and
//! waits for the response that carries that id. Everything else that
//! arrives meanwhile is discarded and counted ([`LinkStats`]): answers to
//! other ids (left in the stream by a killed client, or duplicated), and
//! frames that do not decode. The request is sent again when nothing has
//! come for [`LinkTiming::resend_after`] (doubling after each silent
//! resend), and sooner, a quarter of that after the last send, when the
//! device says a frame it got was damaged or a damaged frame arrives (it
//! may have been the answer), until [`LinkTiming::deadline`]. Resends are
//! rate-limited so that damaged answers to resends cannot multiply them. Resending is safe because the device answers a
//! copy of the last request from memory without executing it again (see
//! [`filter_core::protocol`]): every request takes effect exactly once.
//!
//! Invariants: ids are never [`NO_ID`] and start at a random value, so two
//! clients of one line do not share them; a call returns only a response
//! that carries its own id, or an error.

use std::hash::BuildHasher;
use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use filter_core::protocol::{
    self, Envelope, Error, FrameError, FrameReader, Request, Response, MAX_FRAME_LEN, NO_ID,
};

use super::DeviceError;

/// Longest wait between two sends of one request.
const MAX_RESEND_INTERVAL: Duration = Duration::from_secs(8);

/// How long a client waits for an answer, and when it sends a request
/// again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkTiming {
    /// How long to wait for the answer to a request, resends included.
    pub deadline: Duration,
    /// Silence after which a request is sent again (doubling after each
    /// resend, up to 8 s; a quarter of it after damage). Reads of the
    /// stream should time out at least every quarter of it, or a resend
    /// waits for the read.
    pub resend_after: Duration,
}

impl LinkTiming {
    /// A deadline of `deadline`, resending after a second of silence (or
    /// after `deadline`, when that is shorter).
    pub fn with_deadline(deadline: Duration) -> Self {
        Self {
            deadline,
            resend_after: deadline.min(Duration::from_secs(1)),
        }
    }
}

/// What a link discarded or repeated, since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LinkStats {
    /// Requests sent again.
    pub resent: u64,
    /// Answers that carried another request's id (stale or duplicated).
    pub stale: u64,
    /// Frames from the device that did not decode.
    pub damaged: u64,
    /// Answers in which the device said a frame it got was damaged.
    pub rejected: u64,
}

/// A request/response link over a byte stream `P`.
pub struct Link<P> {
    port: P,
    reader: Box<FrameReader<MAX_FRAME_LEN>>,
    /// Bytes read from the port and not yet given to `reader`.
    pending: Vec<u8>,
    next_id: u32,
    timing: LinkTiming,
    stats: LinkStats,
}

/// What waiting for one frame gave.
enum Arrival {
    /// A readable answer.
    Answer(Envelope<Response>),
    /// A frame that did not decode.
    Damaged(FrameError),
    /// Nothing within the port's read timeout.
    Silence,
}

impl<P: Read + Write> Link<P> {
    /// A link on an open stream. Sends a lone delimiter first, so that the
    /// device drops any half frame an earlier client left behind.
    pub fn new(port: P, timing: LinkTiming) -> Self {
        let mut link = Self {
            port,
            reader: Box::new(FrameReader::new()),
            pending: Vec::new(),
            next_id: random_id(),
            timing,
            stats: LinkStats::default(),
        };
        // A failure here shows up on the first request.
        let _ = link.port.write_all(&[0]);
        link
    }

    /// The same link with request ids from `id` on ([`NO_ID`] is
    /// skipped): for tests and fuzzing, which need to know the ids.
    pub fn with_first_id(mut self, id: u32) -> Self {
        self.next_id = id;
        if id == NO_ID {
            self.take_id();
        }
        self
    }

    /// What the link discarded or repeated so far.
    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    /// The timing in force.
    pub fn timing(&self) -> LinkTiming {
        self.timing
    }

    fn take_id(&mut self) -> u32 {
        let id = self.next_id;
        self.next_id = match id.wrapping_add(1) {
            NO_ID => NO_ID + 1,
            next => next,
        };
        id
    }

    /// Sends `request` and returns the device's response to it, errors
    /// included; resends it as the module documentation says.
    pub fn call(&mut self, request: &Request<'_>) -> Result<Response, DeviceError> {
        let id = self.take_id();
        let mut buffer = vec![0u8; MAX_FRAME_LEN + 1];
        let envelope = Envelope {
            id,
            message: request,
        };
        let frame = protocol::encode(&envelope, &mut buffer).map_err(|_| DeviceError::TooLarge)?;
        let base = self.timing.resend_after;
        let deadline = Instant::now() + self.timing.deadline;
        let mut interval = base;
        self.send(frame)?;
        let mut last_send = Instant::now();
        let mut damage_seen = false;
        let mut last_damage = None;
        loop {
            match self.receive()? {
                Arrival::Answer(answer) if answer.id == id => return Ok(answer.message),
                Arrival::Answer(Envelope {
                    id: NO_ID,
                    message: Response::Error(Error::Frame(error)),
                }) => {
                    // The device could not read a frame: perhaps this one.
                    self.stats.rejected += 1;
                    last_damage = Some(error);
                    damage_seen = true;
                }
                Arrival::Answer(_) => self.stats.stale += 1,
                Arrival::Damaged(error) => {
                    // Perhaps the answer, damaged on the way.
                    self.stats.damaged += 1;
                    last_damage = Some(error);
                    damage_seen = true;
                }
                Arrival::Silence => {}
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(match last_damage {
                    Some(error) => DeviceError::BadResponse(error),
                    None => DeviceError::Timeout(self.timing.deadline),
                });
            }
            // Damage calls for a resend sooner than silence does, but not
            // at once: at most one send per quarter interval, or damaged
            // answers to resends would call for ever more resends.
            let silent_for = now - last_send;
            let silence = silent_for >= interval;
            if silence || (damage_seen && silent_for >= base / 4) {
                if silence {
                    interval = (interval * 2).min(MAX_RESEND_INTERVAL);
                }
                self.stats.resent += 1;
                self.send(frame)?;
                last_send = now;
                damage_seen = false;
            }
        }
    }

    /// Sends raw bytes (which should end a frame) and returns the next
    /// readable response, whatever its id: for testing how a device treats
    /// damaged frames. No resend.
    pub fn exchange_raw(&mut self, bytes: &[u8]) -> Result<Response, DeviceError> {
        self.send(bytes)?;
        let deadline = Instant::now() + self.timing.deadline;
        loop {
            match self.receive()? {
                Arrival::Answer(answer) => return Ok(answer.message),
                Arrival::Damaged(error) => return Err(DeviceError::BadResponse(error)),
                Arrival::Silence if Instant::now() >= deadline => {
                    return Err(DeviceError::Timeout(self.timing.deadline))
                }
                Arrival::Silence => {}
            }
        }
    }

    fn send(&mut self, bytes: &[u8]) -> Result<(), DeviceError> {
        self.port.write_all(bytes)?;
        self.port.flush()?;
        Ok(())
    }

    /// Reads until a frame ends or a read times out.
    fn receive(&mut self) -> Result<Arrival, DeviceError> {
        loop {
            if let Some(arrival) = self.next_buffered_frame() {
                return Ok(arrival);
            }
            let mut chunk = [0u8; 512];
            match self.port.read(&mut chunk) {
                Ok(0) => return Err(DeviceError::Closed),
                Ok(count) => self.pending.extend_from_slice(&chunk[..count]),
                Err(error)
                    if matches!(
                        error.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(Arrival::Silence)
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error.into()),
            }
        }
    }

    /// The first frame the pending bytes complete, if any; consumes the
    /// bytes up to its delimiter (all of them when none completes).
    fn next_buffered_frame(&mut self) -> Option<Arrival> {
        let mut consumed = 0;
        let mut arrival = None;
        for &byte in &self.pending {
            consumed += 1;
            if let Some(frame) = self.reader.push(byte) {
                arrival = Some(
                    match frame.and_then(protocol::decode::<Envelope<Response>>) {
                        Ok(answer) => Arrival::Answer(answer),
                        Err(error) => Arrival::Damaged(error),
                    },
                );
                break;
            }
        }
        self.pending.drain(..consumed);
        arrival
    }
}

/// A random first request id, never [`NO_ID`]: from the standard library's
/// randomly keyed hasher, so no random-number crate is needed.
fn random_id() -> u32 {
    let random = std::collections::hash_map::RandomState::new().hash_one(std::process::id());
    match random as u32 {
        NO_ID => NO_ID + 1,
        id => id,
    }
}
