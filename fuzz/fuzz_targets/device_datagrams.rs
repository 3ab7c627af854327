//! The device's network endpoint (firmware `UdpEndpoint` and
//! `Device::answer_datagram` on the host, in-RAM flash), fed Ethernet
//! frames. The input is a series of records, `len ‖ how ‖ len bytes`:
//! `how` 0 sends the bytes as a raw frame; 1 and 2 seal them (as the
//! request's frame) under the device's key in a UDP frame to its port,
//! with the counter one or 2^21 above the last (2 passes the lease); 3
//! seals them under another key; 4 sends the last sealed frame again.
//! Checks that nothing panics; that a raw or forged frame gets no UDP
//! answer (no tag can be right without the key), ARP aside; that every
//! answer opens under the key, to the sender, and is the response under
//! the request's counter (taken once: never a counter taken before, or
//! below the highest) or a stale answer under a counter at least that of
//! the request.
#![no_main]

use cuckoo_fuzz::{Filter, FLASH_ERASE, FLASH_LEN, FLASH_WRITE, LAYOUT, SEED};
use etherparse::{PacketBuilder, SlicedPacket, TransportSlice};
use filter_core::protocol::datagram::{self, Key, Kind, MAX_REQUEST_DATAGRAM_LEN};
use filter_core::protocol::ResetCause;
use firmware::endpoint::MAX_REPLY_LEN;
use firmware::{Device, RamFlash, UdpEndpoint};
use libfuzzer_sys::fuzz_target;

const KEY: Key = [0x4b; 32];
const OTHER_KEY: Key = [0x4c; 32];
const DEVICE_MAC: [u8; 6] = [0x02, 0xcf, 0, 0, 0, 1];
const HOST_MAC: [u8; 6] = [0x02, 0xcf, 0, 0, 0, 2];
const DEVICE_IP: [u8; 4] = [198, 18, 250, 2];
const HOST_IP: [u8; 4] = [198, 18, 250, 1];
const PORT: u16 = 7070;

/// `frame` sealed under `key` and `counter` in a UDP frame to the device.
fn sealed_frame(key: &Key, counter: u64, frame: &[u8]) -> Option<Vec<u8>> {
    let mut sealed = [0u8; MAX_REQUEST_DATAGRAM_LEN];
    let len = datagram::seal(key, Kind::Request, counter, frame, &mut sealed)?;
    let mut out = Vec::new();
    PacketBuilder::ethernet2(HOST_MAC, DEVICE_MAC)
        .ipv4(HOST_IP, DEVICE_IP, 64)
        .udp(40000, PORT)
        .write(&mut out, &sealed[..len])
        .ok()?;
    Some(out)
}

fuzz_target!(|data: &[u8]| {
    let endpoint = UdpEndpoint {
        mac: DEVICE_MAC,
        ipv4: DEVICE_IP,
        port: PORT,
        key: KEY,
    };
    let mut memory = vec![0xffu8; FLASH_LEN];
    let mut filter = Filter::new(0);
    let flash = RamFlash::<FLASH_WRITE, FLASH_ERASE>::new(&mut memory);
    let mut device = Device::boot(&mut filter, flash, LAYOUT, SEED, ResetCause::PowerOn);
    let mut reply = [0u8; MAX_REPLY_LEN];
    let (mut counter, mut highest_taken) = (1u64, 0u64);
    let mut last_sealed: Option<(Vec<u8>, u64)> = None;
    let mut rest = data;
    while let [len, how, tail @ ..] = rest {
        let (body, next) = tail.split_at(usize::from(*len).min(tail.len()));
        rest = next;
        // The frame, and the counter it carries under the key (none for a
        // raw or forged one).
        let (mut frame, under_key) = match how % 5 {
            0 => (body.to_vec(), None),
            jump @ (1 | 2) => {
                counter += if jump == 1 { 1 } else { 1 << 21 };
                let Some(frame) = sealed_frame(&KEY, counter, body) else {
                    continue;
                };
                last_sealed = Some((frame.clone(), counter));
                (frame, Some(counter))
            }
            3 => match sealed_frame(&OTHER_KEY, counter + 1, body) {
                Some(frame) => (frame, None),
                None => continue,
            },
            _ => match &last_sealed {
                Some((frame, sent_under)) => (frame.clone(), Some(*sent_under)),
                None => continue,
            },
        };
        let Some(len) = endpoint.answer(&mut device, &mut frame, &mut reply) else {
            continue;
        };
        let packet = SlicedPacket::from_ethernet(&reply[..len]).expect("a reply etherparse reads");
        let Some(TransportSlice::Udp(udp)) = packet.transport else {
            // ARP, which needs no key.
            assert_eq!(&reply[12..14], &[0x08, 0x06], "a reply neither ARP nor UDP");
            continue;
        };
        let sent_under = under_key.expect("an answer to a datagram not sealed under the key");
        assert_eq!(&reply[..6], &HOST_MAC, "an answer not to the sender");
        let opened = datagram::open(&KEY, udp.payload()).expect("an answer not under the key");
        match opened.kind {
            Kind::Response => {
                assert_eq!(
                    opened.counter, sent_under,
                    "a response under another counter"
                );
                assert!(
                    sent_under > highest_taken,
                    "counter {sent_under} taken twice"
                );
                highest_taken = sent_under;
            }
            Kind::Stale => assert!(opened.counter >= sent_under, "a stale answer below"),
            Kind::Request => panic!("the device answered with a request"),
        }
    }
});
