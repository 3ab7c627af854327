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
//! [`NetKey`](crate::NetKey)), a `u64` (hashed with [`KeyedHasher`](crate::KeyedHasher) as a `u64`) or a byte
//! string (its bytes written to a [`KeyedHasher`](crate::KeyedHasher), no length prefix, so the
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
//!
//! # Modules
//!
//! * [`item`]: what a key means: [`Prefix`], [`Item`], the active
//!   [`PrefixLengths`], and how both ends check ([`contains`]) and locate
//!   ([`locate_item`]) an item.
//! * [`message`]: the schema: every [`Request`], [`Response`] and
//!   [`Error`], and the [`PROTOCOL_VERSION`].
//! * [`frame`]: bytes on the wire: [`encode`], [`decode`] and the
//!   [`FrameReader`] that cuts a stream into frames.

pub mod frame;
pub mod item;
pub mod message;

pub use frame::{
    decode, encode, BufferTooSmall, FrameError, FrameReader, MAX_FRAME_LEN, MAX_MESSAGE_LEN,
    MAX_RESPONSE_FRAME_LEN,
};
pub use item::{contains, locate_item, Item, Prefix, PrefixLengths};
pub use message::{
    Error, Info, Located, Request, Response, Stats, CHUNK_ALIGN, MAX_BATCH, MAX_CHUNK_LEN,
    PROTOCOL_VERSION,
};

#[cfg(test)]
mod tests;
