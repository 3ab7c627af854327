//! Bytes on the wire: a frame is `COBS(postcard(message) ‖ CRC-32)` and a
//! `0x00` delimiter. [`encode`] and [`decode`] turn one message into one
//! frame and back (checking length, COBS, CRC and contents, never
//! panicking); [`FrameReader`] cuts a byte stream into frames in a fixed
//! buffer.

use serde::{Deserialize, Serialize};

use crate::snapshot::CRC32;

/// Longest message (postcard bytes plus the 4-byte CRC) in either direction.
pub const MAX_MESSAGE_LEN: usize = 1024;
/// Longest frame on the wire, without its delimiter.
pub const MAX_FRAME_LEN: usize = cobs::max_encoding_length(MAX_MESSAGE_LEN);
/// Longest response frame, with its delimiter: a device needs no bigger
/// transmit buffer. The largest is [`Response::Traffic`](super::Response::Traffic)
/// with every counter at its maximum (a protocol test checks it).
pub const MAX_RESPONSE_FRAME_LEN: usize = 256;

const CRC_LEN: usize = 4;

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
    decode_with_crc(frame).map(|(message, _)| message)
}

/// [`decode`], also returning the frame's CRC: with the request id, it
/// tells a retransmitted request from a new one.
pub fn decode_with_crc<'a, T: Deserialize<'a>>(
    frame: &'a mut [u8],
) -> Result<(T, u32), FrameError> {
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
        Ok((message, [])) => Ok((message, stored)),
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
            // A full buffer stays full until the delimiter.
            match self.buffer.get_mut(self.len) {
                Some(slot) => {
                    *slot = byte;
                    self.len += 1;
                }
                None => self.overflowed = true,
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
