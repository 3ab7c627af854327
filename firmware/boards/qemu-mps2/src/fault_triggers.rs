//! Test-only ways to make the firmware fail (feature `fault-triggers`,
//! never in the normal image): the received bytes `!panic`, `!hardfault`
//! or `!hang` followed by a frame delimiter panic, execute an undefined
//! instruction (a HardFault, as no UsageFault handler is enabled), or spin
//! forever with interrupts on (until the watchdog resets the machine).

const PANIC: &[u8] = b"!panic\0";
const HARD_FAULT: &[u8] = b"!hardfault\0";
const HANG: &[u8] = b"!hang\0";
const WINDOW: usize = 11;

/// The last bytes received, to spot a trigger.
pub struct Watch {
    window: [u8; WINDOW],
}

impl Watch {
    pub const fn new() -> Self {
        Self {
            window: [0; WINDOW],
        }
    }

    /// Looks at `bytes` as they arrive; fails when a trigger completes.
    pub fn scan(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.window.rotate_left(1);
            if let Some(last) = self.window.last_mut() {
                *last = byte;
            }
            if self.window.ends_with(PANIC) {
                defmt::panic!("fault trigger: panic");
            }
            if self.window.ends_with(HARD_FAULT) {
                cortex_m::asm::udf();
            }
            if self.window.ends_with(HANG) {
                defmt::warn!("fault trigger: hang");
                loop {
                    cortex_m::asm::nop();
                }
            }
        }
    }
}
