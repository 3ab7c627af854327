//! The protocol's frames over UDP, sealed: one frame a datagram, with a
//! counter and an HMAC-SHA256 tag under a key the host and the device
//! share, so that nobody else on the network can change a device's
//! filter, and no datagram sent once takes effect twice.
//!
//! A datagram is `kind ‖ counter ‖ frame ‖ tag`: the [`Kind`] byte, the
//! counter (a `u64`, big-endian), the frame exactly as the serial link
//! carries it (COBS, CRC, delimiter: see [`super::frame`]), and
//! `HMAC-SHA256(key, DOMAIN ‖ kind ‖ counter ‖ frame)`.
//!
//! * A host seals each request with a counter higher than any it used
//!   before; a resend of a request is the same frame under a new counter.
//! * The device takes a request only if its tag is right and its counter
//!   is higher than that of every request it took before (it keeps the
//!   highest through resets); it answers with a [`Kind::Response`] under
//!   the request's counter, which tells the host that the answer is the
//!   device's and is for that request. A request whose counter is not
//!   higher is a replay, or a host's counter behind the device's: the
//!   device answers [`Kind::Stale`] with an empty frame under its highest
//!   counter, from which an honest host goes on. A datagram whose tag is
//!   wrong gets no answer.
//!
//! The frame's own request id (see [`super`]) makes a request that the
//! device took, but whose answer was lost, take effect once when it is
//! resent under a new counter.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::frame::{MAX_FRAME_LEN, MAX_RESPONSE_FRAME_LEN};

/// The key's length in bytes.
pub const KEY_LEN: usize = 32;
/// The tag's length in bytes.
pub const TAG_LEN: usize = 32;
/// The kind byte and the counter before the frame.
pub const HEADER_LEN: usize = 1 + 8;
/// The longest request datagram.
pub const MAX_REQUEST_DATAGRAM_LEN: usize = HEADER_LEN + MAX_FRAME_LEN + TAG_LEN;
/// The longest answer datagram.
pub const MAX_RESPONSE_DATAGRAM_LEN: usize = HEADER_LEN + MAX_RESPONSE_FRAME_LEN + TAG_LEN;
/// What the tag covers first: a datagram of this protocol, of this
/// layout, cannot be taken for another use of the same key.
const DOMAIN: &[u8] = b"filter-core datagram 1";

/// A shared key.
pub type Key = [u8; KEY_LEN];

/// What a datagram carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Kind {
    /// A request, from the host.
    Request = 1,
    /// The answer to the request with the same counter, from the device.
    Response = 2,
    /// The device refused a request whose counter was not above its
    /// highest, which this datagram carries (with an empty frame).
    Stale = 3,
}

impl Kind {
    fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            1 => Some(Self::Request),
            2 => Some(Self::Response),
            3 => Some(Self::Stale),
            _ => None,
        }
    }
}

/// A datagram whose tag was right.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Opened<'a> {
    /// What it carries.
    pub kind: Kind,
    /// Its counter.
    pub counter: u64,
    /// Its frame (empty for [`Kind::Stale`]).
    pub frame: &'a [u8],
}

/// Why a datagram was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum OpenError {
    /// Shorter than a kind, a counter and a tag.
    Short,
    /// The tag is not that of the key over the rest: another key, or bytes
    /// changed on the way.
    BadTag,
    /// A right tag over a kind this side does not know.
    UnknownKind(u8),
}

impl core::fmt::Display for OpenError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Short => write!(f, "datagram shorter than its header and tag"),
            Self::BadTag => write!(f, "authentication tag wrong (another key, or damaged)"),
            Self::UnknownKind(kind) => write!(f, "unknown datagram kind {kind}"),
        }
    }
}

/// The tag's MAC over everything before it (`None` only if HMAC refused
/// the key, which it does for no length).
fn mac(key: &Key, kind: u8, counter: u64, frame: &[u8]) -> Option<Hmac<Sha256>> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).ok()?;
    mac.update(DOMAIN);
    mac.update(&[kind]);
    mac.update(&counter.to_be_bytes());
    mac.update(frame);
    Some(mac)
}

/// Seals `frame` as a datagram of `kind` under `counter` into `out`;
/// returns its length, or `None` if `out` is too short.
pub fn seal(key: &Key, kind: Kind, counter: u64, frame: &[u8], out: &mut [u8]) -> Option<usize> {
    out.get_mut(HEADER_LEN..HEADER_LEN + frame.len())?
        .copy_from_slice(frame);
    seal_in_place(key, kind, counter, frame.len(), out)
}

/// Seals the `frame_len` bytes of a frame already in place in `out` (from
/// [`HEADER_LEN`] on) as a datagram of `kind` under `counter`: writes the
/// header before it and the tag after it. Returns the datagram's length,
/// or `None` if `out` is too short.
pub fn seal_in_place(
    key: &Key,
    kind: Kind,
    counter: u64,
    frame_len: usize,
    out: &mut [u8],
) -> Option<usize> {
    let len = HEADER_LEN + frame_len + TAG_LEN;
    let out = out.get_mut(..len)?;
    let (header, rest) = out.split_at_mut(HEADER_LEN);
    let (frame, tag) = rest.split_at_mut(frame_len);
    let (kind_byte, counter_bytes) = header.split_at_mut(1);
    kind_byte.copy_from_slice(&[kind as u8]);
    counter_bytes.copy_from_slice(&counter.to_be_bytes());
    let mac = mac(key, kind as u8, counter, frame)?;
    tag.copy_from_slice(&mac.finalize().into_bytes());
    Some(len)
}

/// Checks `datagram`'s tag under `key` (in constant time) and splits it.
pub fn open<'a>(key: &Key, datagram: &'a [u8]) -> Result<Opened<'a>, OpenError> {
    if datagram.len() < HEADER_LEN + TAG_LEN {
        return Err(OpenError::Short);
    }
    let (header, rest) = datagram.split_at(HEADER_LEN);
    let (frame, tag) = rest.split_at(rest.len() - TAG_LEN);
    let (&kind, counter) = header.split_first().ok_or(OpenError::Short)?;
    let counter = u64::from_be_bytes(counter.try_into().map_err(|_| OpenError::Short)?);
    mac(key, kind, counter, frame)
        .ok_or(OpenError::BadTag)?
        .verify_slice(tag)
        .map_err(|_| OpenError::BadTag)?;
    let kind = Kind::from_byte(kind).ok_or(OpenError::UnknownKind(kind))?;
    Ok(Opened {
        kind,
        counter,
        frame,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::indexing_slicing, clippy::expect_used)]
    use super::*;

    const KEY: Key = [7; KEY_LEN];

    #[test]
    fn a_sealed_datagram_opens_under_its_key_only() {
        let mut out = [0u8; 64];
        let len = seal(&KEY, Kind::Request, 41, b"frame\0", &mut out).expect("room");
        assert_eq!(len, HEADER_LEN + 6 + TAG_LEN);
        let datagram = out.get(..len).expect("sealed");
        assert_eq!(
            open(&KEY, datagram),
            Ok(Opened {
                kind: Kind::Request,
                counter: 41,
                frame: b"frame\0"
            })
        );
        let mut other = KEY;
        other[31] ^= 1;
        assert_eq!(open(&other, datagram), Err(OpenError::BadTag));
    }

    #[test]
    fn any_changed_byte_or_a_cut_is_refused() {
        let mut out = [0u8; 64];
        let len = seal(&KEY, Kind::Response, u64::MAX, b"abc", &mut out).expect("room");
        for index in 0..len {
            for bit in 0..8 {
                let mut changed = out;
                changed[index] ^= 1 << bit;
                assert_eq!(
                    open(&KEY, changed.get(..len).expect("sealed")),
                    Err(OpenError::BadTag),
                    "byte {index} bit {bit}"
                );
            }
        }
        for cut in 0..len {
            let expected = if cut < HEADER_LEN + TAG_LEN {
                OpenError::Short
            } else {
                OpenError::BadTag
            };
            assert_eq!(open(&KEY, out.get(..cut).expect("a prefix")), Err(expected));
        }
        assert_eq!(seal(&KEY, Kind::Stale, 1, b"abc", &mut [0u8; 40]), None);
    }
}
