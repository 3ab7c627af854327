//! Frame parsing for XDP: Ethernet II, up to [`MAX_VLAN_TAGS`] stacked
//! 802.1Q / 802.1ad tags, then the IPv4 or IPv6 header, down to the
//! address the filter matches.
//!
//! The parser reads the frame through [`PacketBytes`], so the same code
//! runs in the XDP and TC programs (over the packet between `data` and
//! `data_end`) and on the host over a byte slice (the `packet` fuzz target checks it
//! there against etherparse). Every read is checked against the end of the
//! frame first, so the verifier accepts the program without an abort path;
//! all offsets but the IPv4 header length are constants, which keeps every
//! check trivial for the verifier.
//!
//! The parser validates only what it needs: IPv4 version 4, IHL >= 5 and
//! the whole header present; IPv6 version 6 and the 40-byte fixed header
//! present. It does not look at checksums, lengths beyond the header,
//! options or extension headers.
//!
//! Every tag is followed, whatever its VLAN id: the kernel strips priority
//! tags (VLAN id 0) one after another and delivers what is inside to IP,
//! so a stack of them must not hide the address. A frame with more than
//! [`MAX_VLAN_TAGS`] tags is malformed (of no family), never "not IP": its
//! address is past what the parser reads, and the kernel may still
//! deliver it. Every other malformed frame is one the kernel's IP layer
//! drops itself (a wrong version, a short or cut header).

#[cfg(target_arch = "bpf")]
use aya_ebpf::programs::{TcContext, XdpContext};

use crate::Family;

const ETHERNET_HEADER_LEN: usize = 14;
const VLAN_TAG_LEN: usize = 4;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88a8;
/// The most stacked VLAN tags the parser follows (the verifier unrolls
/// the loop); a frame with more is [`Frame::Malformed`].
pub const MAX_VLAN_TAGS: usize = 8;
const IPV4_MIN_HEADER_LEN: usize = 20;
const IPV4_SOURCE_OFFSET: usize = 12;
const IPV6_HEADER_LEN: usize = 40;
const IPV6_SOURCE_OFFSET: usize = 8;
const IPV4_MAX_HEADER_LEN: usize = 60;

/// The most bytes from the frame's start that the parser reads: the
/// Ethernet header, [`MAX_VLAN_TAGS`] tags and the longest IPv4 header
/// (an IPv6 header is shorter).
pub const MAX_PARSED_BYTES: usize =
    ETHERNET_HEADER_LEN + MAX_VLAN_TAGS * VLAN_TAG_LEN + IPV4_MAX_HEADER_LEN;

/// An IPv6 address as its first and last 64 bits (what `NetKey::ipv6`
/// takes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv6Address {
    /// Octets 0..8, big-endian.
    pub high: u64,
    /// Octets 8..16, big-endian.
    pub low: u64,
}

/// What a frame is, as far as the filter cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame {
    /// An IPv4 packet: the address as a number (`u32::from_be_bytes`).
    Ipv4(u32),
    /// An IPv6 packet.
    Ipv6(Ipv6Address),
    /// Ends early, has an impossible header or more than
    /// [`MAX_VLAN_TAGS`] tags; `Family::Other` when the IP ethertype is
    /// never reached.
    Malformed(Family),
    /// Another ethertype.
    NonIp,
}

/// Which address of the IP header to take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// The source address.
    Source,
    /// The destination address.
    Destination,
}

impl Direction {
    /// The other address: what a list of peers matches on the way out when
    /// it matches `self` on the way in.
    #[inline(always)]
    pub const fn opposite(self) -> Self {
        match self {
            Direction::Source => Direction::Destination,
            Direction::Destination => Direction::Source,
        }
    }
}

/// The bytes of a frame as the parser reads them: a few at a time, at
/// offsets from the frame's start, each read checked against its end.
pub trait PacketBytes {
    /// Whether `len` bytes from `offset` are inside the frame.
    fn fits(&self, offset: usize, len: usize) -> bool;

    /// The `N` bytes at `offset`, or `None` past the end of the frame.
    fn read<const N: usize>(&self, offset: usize) -> Option<[u8; N]>;
}

/// Direct packet access: the packet an XDP program sees, and the linear
/// part of the one a TC program sees (which the TC program makes cover
/// [`MAX_PARSED_BYTES`] first when it can). The check compares packet
/// pointers with `data_end` in the form the verifier tracks.
macro_rules! direct_packet_bytes {
    ($($context:ty),*) => {$(
        #[cfg(target_arch = "bpf")]
        impl PacketBytes for $context {
            #[inline(always)]
            fn fits(&self, offset: usize, len: usize) -> bool {
                self.data() + offset + len <= self.data_end()
            }

            #[inline(always)]
            fn read<const N: usize>(&self, offset: usize) -> Option<[u8; N]> {
                if !self.fits(offset, N) {
                    return None;
                }
                // SAFETY: the N bytes at data + offset are inside the frame
                // (checked just above); the read is unaligned-safe.
                Some(unsafe { ((self.data() + offset) as *const [u8; N]).read_unaligned() })
            }
        }
    )*};
}
direct_packet_bytes!(XdpContext, TcContext);

/// A frame held in memory (the host: tests and fuzzing).
impl PacketBytes for [u8] {
    #[inline(always)]
    fn fits(&self, offset: usize, len: usize) -> bool {
        offset.checked_add(len).is_some_and(|end| end <= self.len())
    }

    #[inline(always)]
    fn read<const N: usize>(&self, offset: usize) -> Option<[u8; N]> {
        self.get(offset..offset.checked_add(N)?)?.try_into().ok()
    }
}

#[inline(always)]
fn read_u16<P: PacketBytes + ?Sized>(packet: &P, offset: usize) -> Option<u16> {
    packet.read::<2>(offset).map(u16::from_be_bytes)
}

/// Parses the frame and picks the address in `direction`.
#[inline(always)]
pub fn parse<P: PacketBytes + ?Sized>(packet: &P, direction: Direction) -> Frame {
    let Some(mut ethertype) = read_u16(packet, ETHERNET_HEADER_LEN - 2) else {
        return Frame::Malformed(Family::Other);
    };
    let mut offset = ETHERNET_HEADER_LEN;
    // A loop of constant bound: the offsets stay constants once unrolled,
    // which keeps every access check trivial for the verifier.
    for _ in 0..MAX_VLAN_TAGS {
        if !is_vlan_tag(ethertype) {
            break;
        }
        let Some(inner) = read_u16(packet, offset + VLAN_TAG_LEN - 2) else {
            return Frame::Malformed(Family::Other);
        };
        ethertype = inner;
        offset += VLAN_TAG_LEN;
    }
    match ethertype {
        ETHERTYPE_IPV4 => parse_ipv4(packet, offset, direction),
        ETHERTYPE_IPV6 => parse_ipv6(packet, offset, direction),
        // One tag more than the parser follows.
        ethertype if is_vlan_tag(ethertype) => Frame::Malformed(Family::Other),
        _ => Frame::NonIp,
    }
}

/// Whether `ethertype` starts an 802.1Q or 802.1ad tag (the two the kernel
/// strips).
#[inline(always)]
fn is_vlan_tag(ethertype: u16) -> bool {
    ethertype == ETHERTYPE_VLAN || ethertype == ETHERTYPE_QINQ
}

#[inline(always)]
fn parse_ipv4<P: PacketBytes + ?Sized>(packet: &P, offset: usize, direction: Direction) -> Frame {
    let malformed = Frame::Malformed(Family::Ipv4);
    let Some([version_ihl]) = packet.read::<1>(offset) else {
        return malformed;
    };
    let header_len = usize::from(version_ihl & 0x0f) * 4;
    if version_ihl >> 4 != 4
        || header_len < IPV4_MIN_HEADER_LEN
        || !packet.fits(offset, IPV4_MIN_HEADER_LEN)
        || !packet.fits(offset, header_len)
    {
        return malformed;
    }
    let address_offset = match direction {
        Direction::Source => IPV4_SOURCE_OFFSET,
        Direction::Destination => IPV4_SOURCE_OFFSET + 4,
    };
    match packet.read::<4>(offset + address_offset) {
        Some(address) => Frame::Ipv4(u32::from_be_bytes(address)),
        None => malformed,
    }
}

#[inline(always)]
fn parse_ipv6<P: PacketBytes + ?Sized>(packet: &P, offset: usize, direction: Direction) -> Frame {
    let malformed = Frame::Malformed(Family::Ipv6);
    let Some([version_class]) = packet.read::<1>(offset) else {
        return malformed;
    };
    if version_class >> 4 != 6 || !packet.fits(offset, IPV6_HEADER_LEN) {
        return malformed;
    }
    let address_offset = match direction {
        Direction::Source => IPV6_SOURCE_OFFSET,
        Direction::Destination => IPV6_SOURCE_OFFSET + 16,
    };
    match (
        packet.read::<8>(offset + address_offset),
        packet.read::<8>(offset + address_offset + 8),
    ) {
        (Some(high), Some(low)) => Frame::Ipv6(Ipv6Address {
            high: u64::from_be_bytes(high),
            low: u64::from_be_bytes(low),
        }),
        _ => malformed,
    }
}
