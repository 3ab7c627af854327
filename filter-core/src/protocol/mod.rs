//! The serial wire protocol between a host (cfctl) and the firmware.
//!
//! This module is the single definition of every byte on the link; the
//! firmware and the host client both use it. It does not own a filter or a
//! port: it frames, checks and (de)serializes messages, and defines what the
//! messages mean ([`contains`], [`locate_item`]) so that both ends agree.
//!
//! # Frames
//!
//! A frame is `COBS(postcard(envelope) ‖ CRC-32(postcard(envelope)))`
//! followed by one `0x00` delimiter. The CRC is CRC-32/ISO-HDLC (as zlib,
//! the same as [`crate::snapshot`]), little-endian. COBS keeps `0x00` out of
//! the frame, so a receiver resynchronizes at the next delimiter after any
//! corruption, and empty frames (a lone `0x00`) are ignored: a host may send
//! one to flush a half-sent frame.
//!
//! # Exchange
//!
//! The host sends one [`Request`] per frame, in an [`Envelope`] that
//! carries a request id of the host's choosing; the device answers each
//! with exactly one [`Response`] frame whose envelope carries the same id,
//! in order. A frame that is corrupted (bad COBS or CRC), truncated, longer
//! than [`MAX_FRAME_LEN`], or that holds no known request gets
//! [`Response::Error`] with [`Error::Frame`], changes nothing, and is
//! answered with id [`NO_ID`] (its own id cannot be trusted). A session
//! starts with [`Request::Hello`], which checks [`PROTOCOL_VERSION`] and
//! returns the device's [`Info`]. A host waits for each answer before it
//! sends the next request: a device holds one incoming frame at a time.
//!
//! # Request ids: stale answers and retransmission
//!
//! A serial line outlives its clients: a client killed mid-exchange, or
//! one that sent requests without reading the answers, leaves answers in
//! the stream that the next client would otherwise take for its own. So a
//! host discards every response whose id is not the id of the request it
//! is waiting for (stale, duplicated or late answers). Hosts start their
//! ids at a random value, so two clients of the same line do not share
//! them.
//!
//! Retransmission is safe: the device remembers the id, the frame CRC and
//! the response of the last request it executed, and answers a frame with
//! the same id and CRC (a copy of that request, sent again because its
//! answer was lost or damaged) with the remembered response, without
//! executing it again. Every request therefore takes effect at most once,
//! however often it is sent, and a host that resends a request until it
//! gets its answer applies it exactly once. One remembered request is
//! enough because the link keeps bytes in order and a host sends request
//! `n + 1` only after it got the answer to request `n`: every copy of `n`
//! reaches the device before `n + 1`. Id [`NO_ID`] is never remembered
//! (each such request is executed).
//!
//! # Keys
//!
//! An [`Item`] is an IPv4/IPv6 prefix ([`Prefix`], hashed as a
//! [`NetKey`](crate::NetKey)), a `u64` (hashed with
//! [`KeyedHasher`](crate::KeyedHasher) as a `u64`) or a byte string (its
//! bytes written to a [`KeyedHasher`](crate::KeyedHasher), no length
//! prefix, so the hash is the same on 32- and 64-bit targets). Checking a prefix probes
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
//!
//! # Modules
//!
//! * [`item`]: what a key means: [`Prefix`], [`Item`], the active
//!   [`PrefixLengths`], and how both ends check ([`contains`]) and locate
//!   ([`locate_item`]) an item.
//! * [`message`]: the schema: every [`Request`], [`Response`] and
//!   [`Error`], the [`Envelope`] that carries a request id, and the
//!   [`PROTOCOL_VERSION`].
//! * [`frame`]: bytes on the wire: [`encode`], [`decode`] and the
//!   [`FrameReader`] that cuts a stream into frames.
//! * `datagram` (feature `datagram`): frames over UDP, one a datagram,
//!   sealed with a counter and an HMAC-SHA256 tag.

#[cfg(feature = "datagram")]
pub mod datagram;
pub mod error;
pub mod frame;
pub mod item;
pub mod limits;
pub mod message;

pub use error::Error;
pub use frame::{
    decode, decode_with_crc, encode, BufferTooSmall, FrameError, FrameReader, MAX_FRAME_LEN,
    MAX_MESSAGE_LEN, MAX_RESPONSE_FRAME_LEN,
};
pub use item::{contains, locate_item, Item, Located, Prefix, PrefixLengths};
pub use limits::{CHUNK_ALIGN, MAX_BATCH, MAX_CHUNK_LEN, NO_ID, PROTOCOL_VERSION};
pub use message::{
    Envelope, FamilyTraffic, FrameCount, Info, JournalFill, Request, ResetCause, Response, Stats,
    Traffic,
};

#[cfg(test)]
mod tests;
