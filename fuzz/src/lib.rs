//! What the fuzz targets share: the small device they fuzz (a 64-bucket
//! filter and 2 KiB of in-RAM flash in two slots, as in the firmware's host
//! tests), frame encoding, and a scripted serial port. `seed_corpus`
//! builds the committed seeds from the same definitions.

use filter_core::protocol::{self, MAX_FRAME_LEN};
use filter_core::StaticCuckooFilter;
use firmware::SlotLayout;

/// The fuzzed device's filter: 64 buckets of four 16-bit fingerprints
/// (256 slots, so the full-filter paths run often).
pub type Filter = StaticCuckooFilter<u16, 4, 64>;
/// Flash write unit and erase unit, in bytes.
pub const FLASH_WRITE: usize = 4;
pub const FLASH_ERASE: usize = 256;
/// Two 1 KiB slots: room for the 64-bucket filter's snapshot.
pub const LAYOUT: SlotLayout = SlotLayout {
    offsets: [0, 1024],
    slot_len: 1024,
};
pub const FLASH_LEN: usize = 2048;
/// The seed of a device that boots without an image.
pub const SEED: u64 = 0x5eed;
/// The first request id of the fuzzed client (`device_responses`).
pub const FIRST_ID: u32 = 0x00c0_ffee;

/// `message` as one frame, delimiter included.
pub fn frame_of<T: serde::Serialize>(message: &T) -> Vec<u8> {
    let mut out = vec![0u8; MAX_FRAME_LEN + 1];
    match protocol::encode(message, &mut out) {
        Ok(frame) => frame.to_vec(),
        Err(error) => panic!("a seed message does not fit a frame: {error}"),
    }
}

/// A serial port that hands out `input` (in reads of at most 7 bytes, to
/// split frames across reads) and then reports the end of the stream;
/// what is written to it is dropped.
pub struct ScriptedPort<'a> {
    pub input: &'a [u8],
}

impl std::io::Read for ScriptedPort<'_> {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        let count = buffer.len().min(self.input.len()).min(7);
        let (now, later) = self.input.split_at(count);
        buffer[..count].copy_from_slice(now);
        self.input = later;
        Ok(count)
    }
}

impl std::io::Write for ScriptedPort<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
