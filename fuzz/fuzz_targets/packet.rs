//! The XDP program's frame parser (`cfxdp::packet`, the same code,
//! here over a byte slice) on any frame, for the source and the
//! destination address: never a panic, and always the answer of a
//! reference parse built on etherparse's header decoders, which says what
//! the parser documents: Ethernet II, then up to `MAX_VLAN_TAGS` 802.1Q or
//! 802.1ad tags (one more is malformed of no family), then an IPv4 header
//! (version 4, IHL >= 5, the whole header present, options included) or
//! the IPv6 fixed header (version 6, 40 bytes present), and the address
//! asked for; a frame that ends before its ethertype is known is malformed
//! of no family, one whose IP header is cut or impossible is malformed of
//! that header's family.
#![no_main]

use cfxdp::packet::{parse, Direction, Frame, Ipv6Address, MAX_VLAN_TAGS};
use cfxdp::Family;
use etherparse::{
    EtherType, Ethernet2HeaderSlice, Ipv4HeaderSlice, Ipv6HeaderSlice, SingleVlanHeaderSlice,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|frame: &[u8]| {
    for direction in [Direction::Source, Direction::Destination] {
        assert_eq!(
            parse(frame, direction),
            reference(frame, direction),
            "{direction:?} of {frame:02x?}"
        );
    }
});

fn reference(frame: &[u8], direction: Direction) -> Frame {
    let Ok(ethernet) = Ethernet2HeaderSlice::from_slice(frame) else {
        return Frame::Malformed(Family::Other);
    };
    let mut ether_type = ethernet.ether_type();
    let mut rest = &frame[ethernet.slice().len()..];
    let is_tag = |ether_type| {
        ether_type == EtherType::VLAN_TAGGED_FRAME || ether_type == EtherType::PROVIDER_BRIDGING
    };
    for _tag in 0..MAX_VLAN_TAGS {
        if !is_tag(ether_type) {
            break;
        }
        let Ok(tag) = SingleVlanHeaderSlice::from_slice(rest) else {
            return Frame::Malformed(Family::Other);
        };
        ether_type = tag.ether_type();
        rest = &rest[tag.slice().len()..];
    }
    if is_tag(ether_type) {
        return Frame::Malformed(Family::Other);
    }
    match ether_type {
        EtherType::IPV4 => match Ipv4HeaderSlice::from_slice(rest) {
            Ok(header) => Frame::Ipv4(u32::from(pick(
                direction,
                header.source_addr(),
                header.destination_addr(),
            ))),
            Err(_) => Frame::Malformed(Family::Ipv4),
        },
        EtherType::IPV6 => match Ipv6HeaderSlice::from_slice(rest) {
            Ok(header) => {
                let bits = u128::from(pick(
                    direction,
                    header.source_addr(),
                    header.destination_addr(),
                ));
                Frame::Ipv6(Ipv6Address {
                    high: (bits >> 64) as u64,
                    low: bits as u64,
                })
            }
            Err(_) => Frame::Malformed(Family::Ipv6),
        },
        _ => Frame::NonIp,
    }
}

/// The source or the destination, as `direction` says.
fn pick<T>(direction: Direction, source: T, destination: T) -> T {
    match direction {
        Direction::Source => source,
        Direction::Destination => destination,
    }
}
