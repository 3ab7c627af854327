//! The serial side: bytes in, frames to the [`Device`], one response frame
//! out per frame in. [`SerialServer`] takes bytes as they come (a board
//! that also serves Ethernet polls both); [`serve()`] is the loop of a
//! board that only serves the port.

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

/// The framing state of one serial port.
pub struct SerialServer {
    reader: FrameReader<MAX_FRAME_LEN>,
    response: [u8; MAX_RESPONSE_FRAME_LEN],
}

impl Default for SerialServer {
    fn default() -> Self {
        Self::new()
    }
}

impl SerialServer {
    /// No frame begun.
    pub const fn new() -> Self {
        Self {
            reader: FrameReader::new(),
            response: [0; MAX_RESPONSE_FRAME_LEN],
        }
    }

    /// Takes `bytes` from the port; each frame they complete is answered
    /// on `tx`.
    pub fn receive<F, const S: usize, B, Flash, Tx>(
        &mut self,
        device: &mut Device<'_, F, S, B, Flash>,
        bytes: &[u8],
        tx: &mut Tx,
    ) -> Result<(), PortError>
    where
        F: Fingerprint,
        B: BucketStorage<F, S>,
        Flash: NorFlash,
        Tx: Write,
    {
        for &byte in bytes {
            if let Some(frame) = self.reader.push(byte) {
                let answer = device.answer_frame(frame, &mut self.response);
                tx.write_all(answer)
                    .and_then(|()| tx.flush())
                    .map_err(|_| PortError::Write)?;
            }
        }
        Ok(())
    }
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
    let mut server = SerialServer::new();
    let mut input = [0u8; 64];
    loop {
        let Ok(count) = rx.read(&mut input) else {
            return PortError::Read;
        };
        if let Err(error) = server.receive(device, input.get(..count).unwrap_or(&[]), tx) {
            return error;
        }
    }
}
