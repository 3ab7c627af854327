//! The device's own address on an Ethernet port, for updates over the
//! network: it answers ARP for its IPv4 address and takes the protocol's
//! sealed datagrams ([`filter_core::protocol::datagram`]) sent to its UDP
//! port, answering each from that port to the sender
//! ([`Device::answer_datagram`] decides what is taken).
//!
//! Untagged frames only (the bridged VLANs are the bridge's), IPv4 only,
//! unfragmented, to the endpoint's MAC address. The UDP checksum of a
//! request is not checked: the datagram's tag covers every byte of it
//! that matters. Replies carry a UDP checksum.

use embedded_storage::nor_flash::NorFlash;
use filter_core::protocol::datagram::{Key, MAX_RESPONSE_DATAGRAM_LEN};
use filter_core::{BucketStorage, Fingerprint};

use crate::Device;

const ETHERTYPE_IPV4: [u8; 2] = [0x08, 0x00];
const ETHERTYPE_ARP: [u8; 2] = [0x08, 0x06];
const ETHERNET_LEN: usize = 14;
const IPV4_LEN: usize = 20;
const UDP_LEN: usize = 8;
const PROTOCOL_UDP: u8 = 17;
/// The shortest Ethernet frame without its FCS: shorter replies are padded.
const MIN_FRAME_LEN: usize = 60;
/// An ARP request for an IPv4 address over Ethernet: hardware type 1,
/// protocol type IPv4, address lengths 6 and 4, operation 1.
const ARP_REQUEST: [u8; 8] = [0, 1, 8, 0, 6, 4, 0, 1];
const ARP_REPLY: [u8; 8] = [0, 1, 8, 0, 6, 4, 0, 2];

/// The headers before a reply's payload.
const HEADERS_LEN: usize = ETHERNET_LEN + IPV4_LEN + UDP_LEN;
/// The longest reply frame.
pub const MAX_REPLY_LEN: usize = HEADERS_LEN + MAX_RESPONSE_DATAGRAM_LEN;

/// Where the device takes updates, and the key they are sealed under.
pub struct UdpEndpoint {
    /// The device's MAC address.
    pub mac: [u8; 6],
    /// Its IPv4 address.
    pub ipv4: [u8; 4],
    /// The UDP port it takes requests on.
    pub port: u16,
    /// The key requests are sealed under.
    pub key: Key,
}

impl UdpEndpoint {
    /// Answers `frame` if it is the endpoint's: an ARP request for its
    /// address, or a datagram to its port that the device answers. Writes
    /// the reply into `reply`; returns its length.
    pub fn answer<F, const S: usize, B, Flash>(
        &self,
        device: &mut Device<'_, F, S, B, Flash>,
        frame: &mut [u8],
        reply: &mut [u8; MAX_REPLY_LEN],
    ) -> Option<usize>
    where
        F: Fingerprint,
        B: BucketStorage<F, S>,
        Flash: NorFlash,
    {
        let ethertype = frame.get(12..ETHERNET_LEN)?;
        if ethertype == ETHERTYPE_ARP {
            return self.answer_arp(frame, reply);
        }
        if ethertype != ETHERTYPE_IPV4 || frame.get(..6)? != self.mac {
            return None;
        }
        let (payload, sender) = self.udp_payload(frame)?;
        let datagram = frame.get_mut(payload)?;
        // The answer goes straight into the reply, after its headers.
        let answer = reply.get_mut(HEADERS_LEN..)?.try_into().ok()?;
        let answer_len = device.answer_datagram(&self.key, datagram, answer)?.len();
        self.udp_frame(&sender, answer_len, reply)
    }

    fn answer_arp(&self, frame: &[u8], reply: &mut [u8; MAX_REPLY_LEN]) -> Option<usize> {
        let arp = frame.get(ETHERNET_LEN..ETHERNET_LEN + 28)?;
        let (header, addresses) = arp.split_at(8);
        let (sender, target) = addresses.split_at(10);
        if header != ARP_REQUEST || target.get(6..10)? != self.ipv4 {
            return None;
        }
        let reply = reply.get_mut(..MIN_FRAME_LEN)?;
        reply.fill(0);
        let sender_mac = sender.get(..6)?;
        let fields: [&[u8]; 8] = [
            sender_mac,
            &self.mac,
            &ETHERTYPE_ARP,
            &ARP_REPLY,
            &self.mac,
            &self.ipv4,
            sender_mac,
            sender.get(6..10)?,
        ];
        write_fields(reply, &fields)?;
        Some(MIN_FRAME_LEN)
    }

    /// Where the payload of a UDP datagram to the endpoint lies in
    /// `frame`, and its sender; `None` for any other frame.
    fn udp_payload(&self, frame: &[u8]) -> Option<(core::ops::Range<usize>, Sender)> {
        let ip = frame.get(ETHERNET_LEN..)?;
        let header_len = usize::from(ip.first()? & 0x0f) * 4;
        let header = ip.get(..header_len)?;
        let total_len = usize::from(u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?]));
        let unfragmented = u16::from_be_bytes([*ip.get(6)?, *ip.get(7)?]) & 0x3fff == 0;
        if ip.first()? >> 4 != 4
            || header_len < IPV4_LEN
            || !unfragmented
            || *ip.get(9)? != PROTOCOL_UDP
            || ip.get(16..20)? != self.ipv4
            || ones_sum(0, header) != 0xffff
        {
            return None;
        }
        let udp = ip.get(header_len..total_len)?;
        let udp_len = usize::from(u16::from_be_bytes([*udp.get(4)?, *udp.get(5)?]));
        if udp.get(2..4)? != self.port.to_be_bytes() || udp_len < UDP_LEN || udp_len > udp.len() {
            return None;
        }
        let sender = Sender {
            mac: frame.get(6..12)?.try_into().ok()?,
            address: ip.get(12..16)?.try_into().ok()?,
            port: udp.get(..2)?.try_into().ok()?,
        };
        let start = ETHERNET_LEN + header_len + UDP_LEN;
        Some((start..ETHERNET_LEN + header_len + udp_len, sender))
    }

    /// Writes the headers of a UDP datagram from the endpoint to `to`
    /// around the `payload_len` bytes of payload in place in `reply`;
    /// returns the frame's length.
    fn udp_frame(
        &self,
        to: &Sender,
        payload_len: usize,
        reply: &mut [u8; MAX_REPLY_LEN],
    ) -> Option<usize> {
        let Sender { mac, address, port } = to;
        let udp_len = u16::try_from(UDP_LEN + payload_len).ok()?;
        let ip_len = udp_len.checked_add(IPV4_LEN as u16)?;
        let len = (ETHERNET_LEN + usize::from(ip_len)).max(MIN_FRAME_LEN);
        let frame = reply.get_mut(..len)?;
        frame.get_mut(..HEADERS_LEN)?.fill(0);
        // The padding of a short frame.
        frame.get_mut(HEADERS_LEN + payload_len..)?.fill(0);
        let fields: [&[u8]; 9] = [
            mac,
            &self.mac,
            &ETHERTYPE_IPV4,
            // Version 4, 20 bytes, no TOS; length; id 0, don't fragment;
            // TTL 64, UDP, checksum later.
            &[0x45, 0],
            &ip_len.to_be_bytes(),
            &[0, 0, 0x40, 0, 64, PROTOCOL_UDP, 0, 0],
            &self.ipv4,
            address,
            &self.port.to_be_bytes(),
        ];
        write_fields(frame, &fields)?;
        let rest: [&[u8]; 3] = [port, &udp_len.to_be_bytes(), &[0, 0]];
        write_fields(frame.get_mut(ETHERNET_LEN + IPV4_LEN + 2..)?, &rest)?;
        let udp_start = ETHERNET_LEN + IPV4_LEN;
        let ip_sum = !ones_sum(0, frame.get(ETHERNET_LEN..udp_start)?);
        frame
            .get_mut(ETHERNET_LEN + 10..ETHERNET_LEN + 12)?
            .copy_from_slice(&ip_sum.to_be_bytes());
        // The pseudo-header: addresses, protocol, UDP length.
        let mut pseudo = [0u8; 12];
        write_fields(
            &mut pseudo,
            &[
                &self.ipv4,
                address,
                &[0, PROTOCOL_UDP],
                &udp_len.to_be_bytes(),
            ],
        )?;
        let udp = frame.get(udp_start..udp_start + usize::from(udp_len))?;
        let udp_sum = match !ones_sum(ones_sum(0, &pseudo), udp) {
            0 => 0xffff,
            sum => sum,
        };
        frame
            .get_mut(udp_start + 6..udp_start + 8)?
            .copy_from_slice(&udp_sum.to_be_bytes());
        Some(len)
    }
}

/// Where a request came from, where its answer goes.
struct Sender {
    mac: [u8; 6],
    address: [u8; 4],
    port: [u8; 2],
}

/// Writes `fields` one after another from the start of `out`.
fn write_fields(out: &mut [u8], fields: &[&[u8]]) -> Option<()> {
    let mut at = 0;
    for field in fields {
        out.get_mut(at..at + field.len())?.copy_from_slice(field);
        at += field.len();
    }
    Some(())
}

/// The ones' complement sum of `bytes` (16-bit big-endian words, an odd
/// last byte padded with zero) and `sum`, folded to 16 bits: `0xffff`
/// over a header whose checksum is right.
fn ones_sum(sum: u16, bytes: &[u8]) -> u16 {
    let mut total = u32::from(sum);
    for pair in bytes.chunks(2) {
        let word = match pair {
            [high, low] => u16::from_be_bytes([*high, *low]),
            [high] => u16::from_be_bytes([*high, 0]),
            _ => 0,
        };
        total += u32::from(word);
    }
    while total > 0xffff {
        total = (total & 0xffff) + (total >> 16);
    }
    total as u16
}
