//! Driver for the CMSDK APB UART0 of QEMU's `mps2-an386` at 0x4000_4000,
//! as embedded-io reader and writer halves. Polled; QEMU only hands the
//! UART a byte when the previous one was read, so nothing is ever lost.

use core::convert::Infallible;
use core::ptr::{read_volatile, write_volatile};
use core::sync::atomic::{AtomicBool, Ordering};

const BASE: usize = 0x4000_4000;
const DATA: *mut u32 = BASE as *mut u32;
const STATE: *mut u32 = (BASE + 0x4) as *mut u32;
const CTRL: *mut u32 = (BASE + 0x8) as *mut u32;
const BAUDDIV: *mut u32 = (BASE + 0x10) as *mut u32;

const STATE_TX_FULL: u32 = 1 << 0;
const STATE_RX_FULL: u32 = 1 << 1;
const CTRL_TX_RX_ENABLE: u32 = 0b11;
/// The machine's 25 MHz clock over 115200 baud (QEMU ignores the rate, but
/// rejects a divider below 16).
const BAUD_DIVIDER: u32 = 25_000_000 / 115_200;

static TAKEN: AtomicBool = AtomicBool::new(false);

/// The receiving half.
pub struct UartRx(());
/// The transmitting half.
pub struct UartTx(());

/// Enables UART0 and returns its halves; `None` after the first call.
pub fn take() -> Option<(UartRx, UartTx)> {
    if TAKEN.swap(true, Ordering::AcqRel) {
        return None;
    }
    // SAFETY: UART0's registers exist on this machine, and only the halves
    // handed out here (once) touch them.
    unsafe {
        write_volatile(BAUDDIV, BAUD_DIVIDER);
        write_volatile(CTRL, CTRL_TX_RX_ENABLE);
    }
    Some((UartRx(()), UartTx(())))
}

/// Whether a received byte is waiting.
pub fn rx_ready() -> bool {
    state() & STATE_RX_FULL != 0
}

fn state() -> u32 {
    // SAFETY: a read of UART0's status register has no side effect.
    unsafe { read_volatile(STATE) }
}

impl embedded_io::ErrorType for UartRx {
    type Error = Infallible;
}

impl embedded_io::Read for UartRx {
    /// Waits for one byte, then takes what else has arrived.
    fn read(&mut self, buffer: &mut [u8]) -> Result<usize, Infallible> {
        let mut count = 0;
        for slot in buffer.iter_mut() {
            while !rx_ready() {
                if count > 0 {
                    return Ok(count);
                }
            }
            // SAFETY: reading DATA pops the received byte; only UartRx does.
            *slot = unsafe { read_volatile(DATA) } as u8;
            count += 1;
        }
        Ok(count)
    }
}

impl embedded_io::ErrorType for UartTx {
    type Error = Infallible;
}

impl embedded_io::Write for UartTx {
    fn write(&mut self, bytes: &[u8]) -> Result<usize, Infallible> {
        for &byte in bytes {
            while state() & STATE_TX_FULL != 0 {}
            // SAFETY: writing DATA sends a byte; only UartTx does.
            unsafe { write_volatile(DATA, u32::from(byte)) };
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> Result<(), Infallible> {
        Ok(())
    }
}
