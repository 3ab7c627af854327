//! Frame parsing for XDP: Ethernet II, up to two 802.1Q / 802.1ad tags,
//! then the IPv4 or IPv6 header, down to the address the filter matches.
//!
//! Every read is checked against `data_end` first, so the verifier accepts
//! the program without an abort path. The parser validates only what it
//! needs: IPv4 version 4, IHL >= 5 and the whole header present; IPv6
//! version 6 and the 40-byte fixed header present. It does not look at
//! checksums, lengths beyond the header, options or extension headers.

use aya_ebpf::programs::XdpContext;

use crate::Family;

const ETHERNET_HEADER_LEN: usize = 14;
const VLAN_TAG_LEN: usize = 4;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88a8;
const IPV4_MIN_HEADER_LEN: usize = 20;
const IPV4_SOURCE_OFFSET: usize = 12;
const IPV6_HEADER_LEN: usize = 40;
const IPV6_SOURCE_OFFSET: usize = 8;

/// An IPv6 address as its first and last 64 bits (what `NetKey::ipv6`
/// takes).
#[derive(Clone, Copy)]
pub struct Ipv6Address {
    /// Octets 0..8, big-endian.
    pub high: u64,
    /// Octets 8..16, big-endian.
    pub low: u64,
}

/// What a frame is, as far as the filter cares.
#[derive(Clone, Copy)]
pub enum Frame {
    /// An IPv4 packet: the address as a number (`u32::from_be_bytes`).
    Ipv4(u32),
    /// An IPv6 packet.
    Ipv6(Ipv6Address),
    /// Ends early or has an impossible header; `Family::Other` when the
    /// frame ends before its ethertype is known.
    Malformed(Family),
    /// Another ethertype.
    NonIp,
}

/// Which address of the IP header to take.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// The source address.
    Source,
    /// The destination address.
    Destination,
}

/// Bytes of the frame.
#[inline(always)]
pub fn frame_len(ctx: &XdpContext) -> u64 {
    (ctx.data_end() - ctx.data()) as u64
}

/// Whether `len` bytes from `offset` are inside the frame.
#[inline(always)]
fn fits(ctx: &XdpContext, offset: usize, len: usize) -> bool {
    ctx.data() + offset + len <= ctx.data_end()
}

/// Reads `N` bytes at `offset`, or `None` past the end of the frame.
#[inline(always)]
fn read<const N: usize>(ctx: &XdpContext, offset: usize) -> Option<[u8; N]> {
    if !fits(ctx, offset, N) {
        return None;
    }
    // SAFETY: the N bytes at data + offset are inside the frame (checked
    // just above); the read is unaligned-safe.
    Some(unsafe { ((ctx.data() + offset) as *const [u8; N]).read_unaligned() })
}

#[inline(always)]
fn read_u16(ctx: &XdpContext, offset: usize) -> Option<u16> {
    read::<2>(ctx, offset).map(u16::from_be_bytes)
}

/// Parses the frame and picks the address in `direction`.
#[inline(always)]
pub fn parse(ctx: &XdpContext, direction: Direction) -> Frame {
    let Some(mut ethertype) = read_u16(ctx, ETHERNET_HEADER_LEN - 2) else {
        return Frame::Malformed(Family::Other);
    };
    let mut offset = ETHERNET_HEADER_LEN;
    // Up to two tags; a third tag is another ethertype (passed as non-IP).
    // Constant offsets keep every access check trivial for the verifier.
    if ethertype == ETHERTYPE_VLAN || ethertype == ETHERTYPE_QINQ {
        let Some(inner) = read_u16(ctx, ETHERNET_HEADER_LEN + VLAN_TAG_LEN - 2) else {
            return Frame::Malformed(Family::Other);
        };
        ethertype = inner;
        offset = ETHERNET_HEADER_LEN + VLAN_TAG_LEN;
        if ethertype == ETHERTYPE_VLAN || ethertype == ETHERTYPE_QINQ {
            let Some(inner) = read_u16(ctx, ETHERNET_HEADER_LEN + 2 * VLAN_TAG_LEN - 2) else {
                return Frame::Malformed(Family::Other);
            };
            ethertype = inner;
            offset = ETHERNET_HEADER_LEN + 2 * VLAN_TAG_LEN;
        }
    }
    match ethertype {
        ETHERTYPE_IPV4 => parse_ipv4(ctx, offset, direction),
        ETHERTYPE_IPV6 => parse_ipv6(ctx, offset, direction),
        _ => Frame::NonIp,
    }
}

#[inline(always)]
fn parse_ipv4(ctx: &XdpContext, offset: usize, direction: Direction) -> Frame {
    let malformed = Frame::Malformed(Family::Ipv4);
    let Some([version_ihl]) = read::<1>(ctx, offset) else {
        return malformed;
    };
    let header_len = usize::from(version_ihl & 0x0f) * 4;
    if version_ihl >> 4 != 4
        || header_len < IPV4_MIN_HEADER_LEN
        || !fits(ctx, offset, IPV4_MIN_HEADER_LEN)
        || !fits(ctx, offset, header_len)
    {
        return malformed;
    }
    let address_offset = match direction {
        Direction::Source => IPV4_SOURCE_OFFSET,
        Direction::Destination => IPV4_SOURCE_OFFSET + 4,
    };
    match read::<4>(ctx, offset + address_offset) {
        Some(address) => Frame::Ipv4(u32::from_be_bytes(address)),
        None => malformed,
    }
}

#[inline(always)]
fn parse_ipv6(ctx: &XdpContext, offset: usize, direction: Direction) -> Frame {
    let malformed = Frame::Malformed(Family::Ipv6);
    let Some([version_class]) = read::<1>(ctx, offset) else {
        return malformed;
    };
    if version_class >> 4 != 6 || !fits(ctx, offset, IPV6_HEADER_LEN) {
        return malformed;
    }
    let address_offset = match direction {
        Direction::Source => IPV6_SOURCE_OFFSET,
        Direction::Destination => IPV6_SOURCE_OFFSET + 16,
    };
    match (
        read::<8>(ctx, offset + address_offset),
        read::<8>(ctx, offset + address_offset + 8),
    ) {
        (Some(high), Some(low)) => Frame::Ipv6(Ipv6Address {
            high: u64::from_be_bytes(high),
            low: u64::from_be_bytes(low),
        }),
        _ => malformed,
    }
}
