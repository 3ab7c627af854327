//! The filter device on an STM32F411 "black pill" (25 MHz crystal): the
//! protocol on USART1 (PA9 TX, PA10 RX, 115200 8N1), images in flash
//! sectors 6 and 7, defmt over RTT. Everything board-specific is here; the
//! device itself is the `firmware` crate.
//!
//! Reception is interrupt-driven: the USART1 handler moves each received
//! byte into a ring (`firmware::RxRing`) that the main loop reads, so a
//! burst of frames that arrives while the device answers is queued, not
//! dropped. The independent watchdog resets the chip unless the main loop
//! feeds it (while it waits for bytes) at least every `WATCHDOG_PERIOD_MS`:
//! a hang, or a panic (panic-probe stops the core), ends in a reset, and
//! boot loads the last saved image; `Info` says why the chip started (the
//! RCC reset flags).
#![no_std]
#![no_main]

use core::cell::RefCell;

use cortex_m_rt::entry;
use critical_section::Mutex;
use defmt_rtt as _;
use embedded_hal_nb::serial::Read as _;
use filter_core::protocol::ResetCause;
use filter_core::StaticCuckooFilter;
use firmware::stm32::ResetFlags;
use firmware::{Device, RingReader, RxRing, SlotLayout};
use panic_probe as _;
use stm32f4xx_hal::flash::LockedFlash;
use stm32f4xx_hal::serial::{Rx, RxListen};
use stm32f4xx_hal::watchdog::IndependentWatchdog;
use stm32f4xx_hal::{interrupt, pac, prelude::*, rcc::Config};

// ---- Sizes: the one place to change them ---------------------------------
/// Fingerprints of 16 bits (false-positive rate about 0.012% when full).
type FingerprintBits = u16;
/// Slots per bucket.
const SLOTS: usize = 4;
/// 8192 buckets of 4 × 16 bits: a 64 KiB table, about 31,000 entries at
/// the 95% load a 4-slot filter reaches; half of the chip's 128 KiB of RAM
/// (the largest power of two that leaves room for the stack).
const BUCKETS: usize = 8192;
/// Seed of an empty device; an uploaded snapshot brings its own.
const DEFAULT_SEED: u64 = 0x5eed_f411;
/// Flash sectors 6 and 7 (offsets from 0x0800_0000), 128 KiB each.
const IMAGE_SLOTS: SlotLayout = SlotLayout {
    offsets: [0x4_0000, 0x6_0000],
    slot_len: 0x2_0000,
};
const BAUD: u32 = 115_200;
/// Received bytes the ring holds: a burst of a few ordinary requests (a
/// batch of 32 IPv4 addresses is about 230 bytes), or the longest frame;
/// with the 512-byte defmt buffer, RAM outside the filter stays under 8 KiB.
const RX_RING_LEN: usize = 1024;
/// Watchdog period: longer than the slowest request (a save erases a
/// 128 KiB sector, up to 2 s, then writes 64 KiB), with room for the LSI
/// clock running up to 40% fast.
const WATCHDOG_PERIOD_MS: u32 = 8_000;
// ---------------------------------------------------------------------------

/// Bytes received by the USART1 handler, for the main loop.
static RX_RING: RxRing<RX_RING_LEN> = RxRing::new();
/// USART1's receiver, owned by its interrupt handler once set up.
static USART1_RX: Mutex<RefCell<Option<Rx<pac::USART1>>>> = Mutex::new(RefCell::new(None));

type Filter = StaticCuckooFilter<FingerprintBits, SLOTS, BUCKETS>;

#[entry]
fn main() -> ! {
    // cortex-m-rt turns these into `&'static mut`; both start zeroed in .bss.
    static mut FILTER: Filter = Filter::new(0);

    let Some(dp) = pac::Peripherals::take() else {
        defmt::panic!("peripherals taken twice");
    };
    let reset_cause = take_reset_cause(&dp.RCC);
    let mut rcc = dp.RCC.freeze(Config::hse(25.MHz()).sysclk(96.MHz()));
    let gpioa = dp.GPIOA.split(&mut rcc);
    let Ok(port) = dp
        .USART1
        .serial::<u8>((gpioa.pa9, gpioa.pa10), BAUD.bps(), &mut rcc)
    else {
        defmt::panic!("USART1 rejects {=u32} baud", BAUD);
    };
    let (mut tx, mut rx) = port.split();
    rx.listen();
    critical_section::with(|cs| USART1_RX.borrow_ref_mut(cs).replace(rx));
    // SAFETY: the handler only touches USART1_RX and RX_RING, both shared
    // through critical sections; nothing here relies on it staying masked.
    unsafe { cortex_m::peripheral::NVIC::unmask(pac::Interrupt::USART1) };

    let mut watchdog = IndependentWatchdog::new(dp.IWDG);
    watchdog.start(WATCHDOG_PERIOD_MS.millis());

    let flash = LockingFlash(LockedFlash::new(dp.FLASH));
    let mut device = Device::boot(FILTER, flash, IMAGE_SLOTS, DEFAULT_SEED, reset_cause);
    defmt::info!(
        "ready: {=usize} of {=usize} slots used",
        device.filter().len(),
        device.filter().capacity()
    );
    // The main loop feeds the watchdog whenever it waits for a byte.
    let mut rx = RingReader::new(&RX_RING, || watchdog.feed());
    let error = firmware::serve(&mut device, &mut rx, &mut tx);
    defmt::panic!("serial port failed: {}", error);
}

/// Why the chip started, from the reset flags in RCC_CSR, which it then
/// clears so that the next start reads only its own.
fn take_reset_cause(rcc: &pac::RCC) -> ResetCause {
    let cause = ResetFlags::from_rcc_csr(rcc.csr().read().bits()).cause();
    rcc.csr().modify(|_, w| w.rmvf().set_bit());
    cause
}

/// Moves every byte USART1 has received into the ring. A byte lost to
/// overrun, noise or framing (or to a full ring) is simply missing: its
/// frame fails its CRC and the host gets an error response, and resends.
#[interrupt]
fn USART1() {
    critical_section::with(|cs| {
        if let Some(rx) = USART1_RX.borrow_ref_mut(cs).as_mut() {
            RX_RING.push_from(|| rx.read());
        }
    });
}

firmware::locking_flash!(LockingFlash);
