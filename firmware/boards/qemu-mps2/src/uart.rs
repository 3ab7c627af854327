//! Driver for the CMSDK APB UART0 of QEMU's `mps2-an386` at 0x4000_4000:
//! reception by interrupt (UART0 RX, interrupt 0) into a ring
//! ([`firmware::RxRing`], as on the F411), transmission polled through an
//! embedded-io writer. QEMU hands the UART a byte only when the previous
//! one was read, so the handler reads each byte as it comes.

use core::convert::Infallible;
use core::ptr::{read_volatile, write_volatile};
use core::sync::atomic::{AtomicBool, Ordering};

use firmware::RxRing;

const BASE: usize = 0x4000_4000;
const DATA: *mut u32 = BASE as *mut u32;
const STATE: *mut u32 = (BASE + 0x4) as *mut u32;
const CTRL: *mut u32 = (BASE + 0x8) as *mut u32;
const INTCLEAR: *mut u32 = (BASE + 0xc) as *mut u32;
const BAUDDIV: *mut u32 = (BASE + 0x10) as *mut u32;

const STATE_TX_FULL: u32 = 1 << 0;
const STATE_RX_FULL: u32 = 1 << 1;
const CTRL_TX_RX_ENABLE: u32 = 0b11;
const CTRL_RX_INTERRUPT: u32 = 1 << 3;
const INT_RX: u32 = 1 << 1;
/// The machine's 25 MHz clock over 115200 baud (QEMU ignores the rate, but
/// rejects a divider below 16).
const BAUD_DIVIDER: u32 = 25_000_000 / 115_200;
/// Bytes the ring holds: more than a whole request frame.
const RX_RING_LEN: usize = 1024;

/// Bytes received by the UART0 RX handler, for the main loop.
pub static RX_RING: RxRing<RX_RING_LEN> = RxRing::new();

static TAKEN: AtomicBool = AtomicBool::new(false);

/// The transmitting half.
pub struct UartTx(());

/// Enables UART0 with its receive interrupt (still masked in the NVIC) and
/// returns the transmitter; `None` after the first call.
pub fn take() -> Option<UartTx> {
    if TAKEN.swap(true, Ordering::AcqRel) {
        return None;
    }
    // SAFETY: UART0's registers exist on this machine; only this module
    // touches them (the handler reads DATA, UartTx writes it).
    unsafe {
        write_volatile(BAUDDIV, BAUD_DIVIDER);
        write_volatile(CTRL, CTRL_TX_RX_ENABLE | CTRL_RX_INTERRUPT);
        // A read of DATA is QEMU's cue that the UART takes input: without
        // it, a client that connected (or left) before reception was
        // enabled may go unheard until something else wakes the emulator.
        let _ = read_volatile(DATA);
    }
    Some(UartTx(()))
}

/// The UART0 RX interrupt: moves the received byte (and any other waiting)
/// into [`RX_RING`].
pub fn on_receive() {
    // SAFETY: clearing the RX interrupt first, so that a byte arriving
    // while this runs raises it again; reading DATA pops the byte.
    unsafe {
        write_volatile(INTCLEAR, INT_RX);
        while state() & STATE_RX_FULL != 0 {
            RX_RING.push(read_volatile(DATA) as u8);
        }
    }
}

fn state() -> u32 {
    // SAFETY: a read of UART0's status register has no side effect.
    unsafe { read_volatile(STATE) }
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
