//! The serial loop: bytes in, frames to the [`Device`], one response frame
//! out per frame in.

use embedded_io::{Read, Write};
use embedded_storage::nor_flash::NorFlash;
use filter_core::protocol::{FrameReader, MAX_FRAME_LEN, MAX_RESPONSE_FRAME_LEN};
use filter_core::{BucketStorage, Fingerprint};

use crate::device::Device;

/// A read or write on the serial port failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PortError {
    /// Reading failed.
    Read,
    /// Writing failed.
    Write,
}

/// Serves requests from `rx`, answering on `tx`, until the port fails.
pub fn serve<F, const S: usize, B, Flash, Rx, Tx>(
    device: &mut Device<'_, F, S, B, Flash>,
    rx: &mut Rx,
    tx: &mut Tx,
) -> PortError
where
    F: Fingerprint,
    B: BucketStorage<F, S>,
    Flash: NorFlash,
    Rx: Read,
    Tx: Write,
{
    let mut reader = FrameReader::<MAX_FRAME_LEN>::new();
    let mut response = [0u8; MAX_RESPONSE_FRAME_LEN];
    let mut input = [0u8; 64];
    loop {
        let Ok(count) = rx.read(&mut input) else {
            return PortError::Read;
        };
        for &byte in input.get(..count).unwrap_or(&[]) {
            if let Some(frame) = reader.push(byte) {
                let answer = device.answer_frame(frame, &mut response);
                if tx.write_all(answer).and_then(|()| tx.flush()).is_err() {
                    return PortError::Write;
                }
            }
        }
    }
}
