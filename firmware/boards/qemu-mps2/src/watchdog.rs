//! The CMSDK APB watchdog of QEMU's `mps2-an386` at 0x4000_8000, clocked
//! at 25 MHz: counting down from [`PERIOD_TICKS`], it raises its interrupt
//! (wired to the NMI) the first time it reaches zero and resets the
//! machine the second time, unless [`Watchdog::feed`] reloads it first.
//! The main loop feeds it on every turn; SysTick wakes the loop from
//! `wfi` ten times a second, so an idle device keeps feeding it and only a
//! hang lets it bite.

use core::ptr::write_volatile;

use cortex_m::peripheral::syst::SystClkSource;
use cortex_m::peripheral::SYST;

const BASE: usize = 0x4000_8000;
const LOAD: *mut u32 = BASE as *mut u32;
const CTRL: *mut u32 = (BASE + 0x8) as *mut u32;
const INTCLR: *mut u32 = (BASE + 0xc) as *mut u32;
const LOCK: *mut u32 = (BASE + 0xc00) as *mut u32;

/// Unlocks the watchdog's registers (any other value locks them).
const UNLOCK_KEY: u32 = 0x1ACC_E551;
/// CTRL: count and raise the interrupt, then reset.
const CTRL_INTERRUPT_AND_RESET: u32 = 0b11;
/// The machine's clock.
const CLOCK_HZ: u32 = 25_000_000;
/// One second to the interrupt, another to the reset: far longer than any
/// request takes (the slowest, a save, erases a 96 KiB slot and copies the
/// 64 KiB table into it).
pub const PERIOD_TICKS: u32 = CLOCK_HZ;
/// SysTick's period: a tenth of a second.
const WAKE_TICKS: u32 = CLOCK_HZ / 10;

/// The running watchdog.
pub struct Watchdog(());

impl Watchdog {
    /// Starts the watchdog, and SysTick to wake the main loop.
    pub fn start(mut syst: SYST) -> Self {
        syst.set_clock_source(SystClkSource::Core);
        syst.set_reload(WAKE_TICKS - 1);
        syst.clear_current();
        syst.enable_interrupt();
        syst.enable_counter();
        // SAFETY: the watchdog's documented registers; nothing else
        // touches them.
        unsafe {
            write_volatile(LOCK, UNLOCK_KEY);
            write_volatile(LOAD, PERIOD_TICKS);
            write_volatile(CTRL, CTRL_INTERRUPT_AND_RESET);
            write_volatile(LOCK, 0);
        }
        Self(())
    }

    /// Reloads the counter (and clears a raised interrupt).
    pub fn feed(&mut self) {
        // SAFETY: as in `start`.
        unsafe {
            write_volatile(LOCK, UNLOCK_KEY);
            write_volatile(INTCLR, 1);
            write_volatile(LOCK, 0);
        }
    }
}
