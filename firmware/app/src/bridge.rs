//! A filtering bridge between two VLANs on one Ethernet port: the device
//! sits in the path of traffic, as an inline guard in front of the hosts
//! of one VLAN, with the switch port it hangs on carrying both VLANs
//! tagged (a "router on a stick", at layer 2).
//!
//! Each frame tagged with one of the two VLAN ids is parsed by the XDP
//! program's own parser ([`cfxdp::packet`]), and its source address is
//! checked against the device's filter at every active prefix length, as
//! `Check` does. A listed source is dropped, a malformed frame is dropped
//! (the XDP program's default), anything else (not listed, not IP: ARP
//! passes) goes back out with the other VLAN id in its outer tag. Frames
//! of any other VLAN, and untagged ones, are not the bridge's: they are
//! dropped and counted apart. Counters ([`Traffic`]) are by outcome and
//! family, as the XDP program keeps them.
//!
//! The bridge keeps no state but its counters and learns no addresses:
//! every frame it passes goes out once, to the other VLAN.

use cfxdp::packet::{parse, Direction, Frame, Ipv6Address};
use cfxdp::Family;
use filter_core::protocol::{Prefix, Traffic};

const ETHERTYPE_VLAN: [u8; 2] = 0x8100u16.to_be_bytes();
/// Offset of the outer tag's control information (priority, DEI, VLAN
/// id).
const TAG_CONTROL: usize = 14;
const VLAN_ID_MASK: u16 = 0x0fff;

/// What the bridge did with a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Verdict {
    /// Retagged for the other VLAN: send it back out.
    Forward,
    /// Dropped: a listed source, or malformed.
    Drop,
    /// Not tagged with either VLAN id: not the bridge's.
    NotBridged,
}

/// Decides `frame`, arriving on the port that carries VLANs `vlans`,
/// with `lists` (whether the filter lists a source address), and counts
/// it in `traffic`; retags it in place when it is to be forwarded.
pub fn bridge(
    frame: &mut [u8],
    vlans: [u16; 2],
    lists: impl Fn(&Prefix) -> bool,
    traffic: &mut Traffic,
) -> Verdict {
    let len = frame.len();
    let Some(other) = other_vlan(frame, vlans) else {
        traffic.ignored.add(len);
        return Verdict::NotBridged;
    };
    let (source, family) = match parse(&*frame, Direction::Source) {
        Frame::NonIp => {
            traffic.non_ip.add(len);
            retag(frame, other);
            return Verdict::Forward;
        }
        Frame::Malformed(Family::Other) => {
            traffic.malformed.add(len);
            return Verdict::Drop;
        }
        Frame::Malformed(Family::Ipv4) => {
            traffic.ipv4.malformed.add(len);
            return Verdict::Drop;
        }
        Frame::Malformed(Family::Ipv6) => {
            traffic.ipv6.malformed.add(len);
            return Verdict::Drop;
        }
        Frame::Ipv4(address) => {
            let source = Prefix::V4 {
                address: address.to_be_bytes(),
                len: 32,
            };
            (source, &mut traffic.ipv4)
        }
        Frame::Ipv6(Ipv6Address { high, low }) => {
            let source = Prefix::V6 {
                address: ((u128::from(high) << 64) | u128::from(low)).to_be_bytes(),
                len: 128,
            };
            (source, &mut traffic.ipv6)
        }
    };
    if lists(&source) {
        family.dropped.add(len);
        Verdict::Drop
    } else {
        family.passed.add(len);
        retag(frame, other);
        Verdict::Forward
    }
}

/// The VLAN id a frame of one of `vlans` goes out with.
fn other_vlan(frame: &[u8], vlans: [u16; 2]) -> Option<u16> {
    if frame.get(12..14) != Some(&ETHERTYPE_VLAN[..]) {
        return None;
    }
    let id = tag_control(frame)? & VLAN_ID_MASK;
    match vlans {
        [a, b] if id == a => Some(b),
        [a, b] if id == b => Some(a),
        _ => None,
    }
}

/// The outer tag's control information.
fn tag_control(frame: &[u8]) -> Option<u16> {
    let bytes = frame.get(TAG_CONTROL..TAG_CONTROL + 2)?;
    Some(u16::from_be_bytes(bytes.try_into().ok()?))
}

/// Sets the outer tag's VLAN id to `vlan`, keeping its priority and DEI.
fn retag(frame: &mut [u8], vlan: u16) {
    if let (Some(old), Some(control)) = (
        tag_control(frame),
        frame.get_mut(TAG_CONTROL..TAG_CONTROL + 2),
    ) {
        control.copy_from_slice(&((old & !VLAN_ID_MASK) | vlan).to_be_bytes());
    }
}
