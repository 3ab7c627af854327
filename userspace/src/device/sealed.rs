//! A device reached over UDP (`udp:HOST:PORT`): the byte stream the link
//! writes is cut into frames, each sent as one datagram sealed under the
//! device's key with a fresh counter ([`filter_core::protocol::datagram`]),
//! and the device's sealed answers are opened back into the stream.
//!
//! Counters are microseconds since 1970 (at least one more than the last
//! one sent), so that a new cfctl is ahead of the last one without keeping
//! state; when the device says a counter is stale (its clock of requests
//! is ahead, after another host's requests or a clock set back), the frame
//! goes again right away under a counter above the device's. A resend by
//! the link is the same frame under a new counter, which the device
//! answers from memory if it took the first one. Datagrams that do not
//! open under the key, and answers to counters this port did not send for
//! the frame in flight, are dropped.

use std::fs;
use std::io::{self, Read, Write};
use std::net::UdpSocket;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use filter_core::protocol::datagram::{
    self, Key, Kind, KEY_LEN, MAX_REQUEST_DATAGRAM_LEN, MAX_RESPONSE_DATAGRAM_LEN,
};

/// Reads a device key: 64 hex digits (surrounding white space allowed) in
/// a file that only its owner may read.
pub fn read_key(path: &Path) -> io::Result<Key> {
    let named = |message: String| io::Error::other(format!("{}: {message}", path.display()));
    let mode = fs::metadata(path)?.permissions().mode();
    if mode & 0o077 != 0 {
        return Err(named(format!(
            "readable by other users (mode {:o}): chmod 600 it",
            mode & 0o777
        )));
    }
    let text = fs::read_to_string(path)?;
    let hex = text.trim();
    let invalid = || named(format!("not a key: {} hex digits expected", 2 * KEY_LEN));
    if hex.len() != 2 * KEY_LEN || !hex.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        return Err(invalid());
    }
    let mut key = [0u8; KEY_LEN];
    for (byte, pair) in key.iter_mut().zip(hex.as_bytes().chunks(2)) {
        let pair = std::str::from_utf8(pair).map_err(|_| invalid())?;
        *byte = u8::from_str_radix(pair, 16).map_err(|_| invalid())?;
    }
    Ok(key)
}

/// A sealed datagram link to one device.
pub struct SealedUdp {
    socket: UdpSocket,
    key: Key,
    /// The frame being written, up to its delimiter.
    writing: Vec<u8>,
    /// The last frame sent, and the counters it went under.
    in_flight: Vec<u8>,
    sent_under: Vec<u64>,
    last_counter: u64,
    /// Bytes of answers, for the link to read.
    answered: Vec<u8>,
}

impl SealedUdp {
    /// A link to `address` (`HOST:PORT`) under `key`; reads wait at most
    /// `timeout`.
    pub fn connect(address: &str, key: Key, timeout: Duration) -> io::Result<Self> {
        let socket = UdpSocket::bind(("0.0.0.0", 0))?;
        socket.connect(address)?;
        socket.set_read_timeout(Some(timeout))?;
        Ok(Self {
            socket,
            key,
            writing: Vec::new(),
            in_flight: Vec::new(),
            sent_under: Vec::new(),
            last_counter: 0,
            answered: Vec::new(),
        })
    }

    /// Sends the frame in flight under a counter above `floor` and every
    /// one used before.
    fn send_in_flight(&mut self, floor: u64) -> io::Result<()> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_micros() as u64);
        let counter = now.max(floor).max(self.last_counter).saturating_add(1);
        self.last_counter = counter;
        self.sent_under.push(counter);
        let mut sealed = [0u8; MAX_REQUEST_DATAGRAM_LEN];
        let len = datagram::seal(
            &self.key,
            Kind::Request,
            counter,
            &self.in_flight,
            &mut sealed,
        )
        .ok_or_else(|| io::Error::other("frame too long for a datagram"))?;
        self.socket.send(&sealed[..len])?;
        Ok(())
    }
}

impl Write for SealedUdp {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        for &byte in bytes {
            self.writing.push(byte);
            if byte == 0 {
                let frame = std::mem::take(&mut self.writing);
                // A lone delimiter ends a half frame on a serial line; a
                // datagram has none to end.
                if frame.len() > 1 {
                    self.in_flight = frame;
                    self.sent_under.clear();
                    self.send_in_flight(0)?;
                }
            }
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Read for SealedUdp {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.answered.is_empty() {
            let mut datagram = [0u8; MAX_RESPONSE_DATAGRAM_LEN];
            let len = self.socket.recv(&mut datagram)?;
            let Ok(opened) = datagram::open(&self.key, &datagram[..len]) else {
                continue;
            };
            match opened.kind {
                Kind::Response if self.sent_under.contains(&opened.counter) => {
                    self.answered.extend_from_slice(opened.frame);
                }
                Kind::Stale
                    if !self.in_flight.is_empty() && opened.counter >= self.last_counter =>
                {
                    self.send_in_flight(opened.counter)?;
                }
                _ => {}
            }
        }
        let count = out.len().min(self.answered.len());
        out[..count].copy_from_slice(&self.answered[..count]);
        self.answered.drain(..count);
        Ok(count)
    }
}
