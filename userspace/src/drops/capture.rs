//! Sampled frames as a pcap file (`cfctl capture --dropped`), written with
//! the `pcap-file` crate: Ethernet link type, nanosecond timestamps on the
//! wall clock, each packet's original length beside the bytes the program
//! copied (at most [`MAX_EVENT_FRAME_BYTES`], the file's snap length), so
//! `tcpdump -r` and Wireshark show the frames as truncated captures.

use std::io::Write;
use std::time::UNIX_EPOCH;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::{DataLink, PcapError, TsResolution};

use crate::time::from_monotonic_nanos;
use crate::DropEvent;
use cfxdp::MAX_EVENT_FRAME_BYTES;

/// A pcap file being written.
pub struct Capture<W: Write> {
    writer: PcapWriter<W>,
    written: u64,
}

impl<W: Write> Capture<W> {
    /// Writes the file's header to `out`.
    pub fn new(out: W) -> Result<Self, PcapError> {
        let header = PcapHeader {
            snaplen: MAX_EVENT_FRAME_BYTES as u32,
            datalink: DataLink::ETHERNET,
            ts_resolution: TsResolution::NanoSecond,
            ..PcapHeader::default()
        };
        Ok(Self {
            writer: PcapWriter::with_header(out, header)?,
            written: 0,
        })
    }

    /// Writes the frame `event` carries; false (nothing written) if it
    /// carries no bytes of it.
    pub fn write(&mut self, event: &DropEvent) -> Result<bool, PcapError> {
        let captured = usize::from(event.captured).min(MAX_EVENT_FRAME_BYTES);
        if captured == 0 {
            return Ok(false);
        }
        let at = from_monotonic_nanos(event.timestamp_ns)
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let length = event.frame_len.max(captured as u32);
        self.writer
            .write_packet(&PcapPacket::new(at, length, &event.frame[..captured]))?;
        self.written += 1;
        Ok(true)
    }

    /// Frames written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The output, flushed.
    pub fn finish(self) -> Result<W, std::io::Error> {
        let mut out = self.writer.into_writer();
        out.flush()?;
        Ok(out)
    }
}
