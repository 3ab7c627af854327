//! The filter device on an STM32F411 "black pill" (25 MHz crystal): the
//! protocol on USART1 (PA9 TX, PA10 RX, 115200 8N1), images in flash
//! sectors 6 and 7, defmt over RTT. Everything board-specific is here; the
//! device itself is the `firmware` crate.
#![no_std]
#![no_main]

use core::convert::Infallible;

use cortex_m_rt::entry;
use defmt_rtt as _;
use embedded_storage::nor_flash::{ErrorType, NorFlash, ReadNorFlash};
use filter_core::StaticCuckooFilter;
use firmware::{Device, SlotLayout};
use panic_probe as _;
use stm32f4xx_hal::flash::{FlashExt, LockedFlash, UnlockedFlash};
use stm32f4xx_hal::{pac, prelude::*, rcc::Config};

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
// ---------------------------------------------------------------------------

type Filter = StaticCuckooFilter<FingerprintBits, SLOTS, BUCKETS>;

#[entry]
fn main() -> ! {
    // cortex-m-rt turns these into `&'static mut`; both start zeroed in .bss.
    static mut FILTER: Filter = Filter::new(0);

    let Some(dp) = pac::Peripherals::take() else {
        defmt::panic!("peripherals taken twice");
    };
    let mut rcc = dp.RCC.freeze(Config::hse(25.MHz()).sysclk(96.MHz()));
    let gpioa = dp.GPIOA.split(&mut rcc);
    let Ok(port) = dp
        .USART1
        .serial::<u8>((gpioa.pa9, gpioa.pa10), BAUD.bps(), &mut rcc)
    else {
        defmt::panic!("USART1 rejects {=u32} baud", BAUD);
    };
    let (mut tx, rx) = port.split();
    let mut rx = BlockingRx(rx);

    let flash = LockingFlash(LockedFlash::new(dp.FLASH));
    let mut device = Device::boot(FILTER, flash, IMAGE_SLOTS, DEFAULT_SEED);
    defmt::info!(
        "ready: {=usize} of {=usize} slots used",
        device.filter().len(),
        device.filter().capacity()
    );
    let error = firmware::serve(&mut device, &mut rx, &mut tx);
    defmt::panic!("serial port failed: {}", error);
}

/// The HAL's receiver (embedded-hal-nb) as a blocking embedded-io reader.
/// A byte lost to overrun, noise or framing is simply missing: the frame
/// then fails its CRC and the host gets an error response.
struct BlockingRx<R>(R);

impl<R> embedded_io::ErrorType for BlockingRx<R> {
    type Error = Infallible;
}

impl<R: embedded_hal_nb::serial::Read<u8>> embedded_io::Read for BlockingRx<R> {
    fn read(&mut self, buffer: &mut [u8]) -> Result<usize, Infallible> {
        let mut count = 0;
        for slot in buffer.iter_mut() {
            let byte = loop {
                match self.0.read() {
                    Ok(byte) => break Some(byte),
                    // Return what we have rather than wait for more.
                    Err(nb::Error::WouldBlock) if count > 0 => break None,
                    Err(_) => {}
                }
            };
            let Some(byte) = byte else { break };
            *slot = byte;
            count += 1;
        }
        Ok(count)
    }
}

/// The on-chip flash, unlocked only for the duration of each erase or
/// write.
struct LockingFlash(LockedFlash);

impl ErrorType for LockingFlash {
    type Error = stm32f4xx_hal::flash::Error;
}

impl ReadNorFlash for LockingFlash {
    const READ_SIZE: usize = LockedFlash::READ_SIZE;

    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), Self::Error> {
        ReadNorFlash::read(&mut self.0, offset, bytes)
    }

    fn capacity(&self) -> usize {
        ReadNorFlash::capacity(&self.0)
    }
}

impl NorFlash for LockingFlash {
    const WRITE_SIZE: usize = <UnlockedFlash<'static> as NorFlash>::WRITE_SIZE;
    const ERASE_SIZE: usize = <UnlockedFlash<'static> as NorFlash>::ERASE_SIZE;

    fn erase(&mut self, from: u32, to: u32) -> Result<(), Self::Error> {
        NorFlash::erase(&mut self.0.unlocked(), from, to)
    }

    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), Self::Error> {
        NorFlash::write(&mut self.0.unlocked(), offset, bytes)
    }
}
