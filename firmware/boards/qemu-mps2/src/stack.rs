//! Stack high-water mark: the stack below `main`'s frame is painted with a
//! pattern at boot; the deepest word that no longer holds it shows the most
//! stack ever used. Measures the RAM the firmware needs beyond its statics.

use core::ptr::{read_volatile, write_volatile};

const PAINT: u32 = 0x5afe_57ac;
/// Bytes painted: far more than the firmware uses.
const PAINTED_LEN: usize = 32 * 1024;
/// Room left unpainted for the frame of `paint` itself.
const MARGIN: usize = 256;

extern "C" {
    /// Top of the stack (cortex-m-rt's linker script).
    static _stack_start: u32;
}

/// The painted region and the deepest use seen so far.
pub struct StackGauge {
    start: usize,
    painted_bottom: usize,
    reported: usize,
}

impl StackGauge {
    /// Paints the stack below the caller's frame.
    pub fn paint() -> Self {
        let top = cortex_m::register::msp::read() as usize - MARGIN;
        let painted_bottom = top - PAINTED_LEN;
        for address in (painted_bottom..top).step_by(4) {
            // SAFETY: the region lies below the live stack frames, in RAM
            // that holds no Rust object (the statics end far lower), and no
            // interrupt handler runs that could be using it.
            unsafe { write_volatile(address as *mut u32, PAINT) };
        }
        Self {
            start: core::ptr::addr_of!(_stack_start) as usize,
            painted_bottom,
            reported: 0,
        }
    }

    /// The stack used so far, in bytes, when it is more than last reported.
    pub fn new_high_water_mark(&mut self) -> Option<usize> {
        let deepest = (self.painted_bottom..self.start)
            .step_by(4)
            // SAFETY: reads of painted stack RAM, which is always mapped.
            .find(|&address| unsafe { read_volatile(address as *const u32) } != PAINT)?;
        let used = self.start - deepest;
        (used > self.reported).then(|| {
            self.reported = used;
            used
        })
    }
}
