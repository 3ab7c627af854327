//! The filter device on QEMU's `mps2-an386` (Cortex-M4F), the image the
//! end-to-end tests boot: the protocol on UART0, defmt through
//! semihosting, and the image slots in RAM (QEMU has no flash that
//! outlives the emulator: see `firmware::ram_flash`).
//!
//! A panic or a HardFault logs where it happened and resets the machine,
//! as the watchdog does on a real board. The image slots live in
//! `.uninit` RAM, which a reset does not clear, like flash: after the
//! reset, boot loads the last saved image. Feature `fault-triggers` (for
//! the tests only; never in the normal image) adds the way to cause both:
//! the bytes `!panic` or `!hardfault` followed by a frame delimiter.
#![no_std]
#![no_main]

#[cfg(feature = "fault-triggers")]
mod fault_triggers;
mod stack;
mod uart;

use core::mem::MaybeUninit;
use core::ptr::addr_of_mut;

use cortex_m::peripheral::SCB;
use cortex_m_rt::{entry, exception, ExceptionFrame};
use defmt_semihosting as _;
use filter_core::StaticCuckooFilter;
use firmware::{Device, RamFlash, SlotLayout};

// ---- Sizes: the one place to change them (the same filter as the F411) --
type FingerprintBits = u16;
const SLOTS: usize = 4;
const BUCKETS: usize = 8192;
const DEFAULT_SEED: u64 = 0x5eed_0386;
/// Emulated flash: 4-byte write units, 4 KiB erase units, two 68 KiB slots
/// (a 64 KiB table plus snapshot header, trailer and commit record).
const FLASH_WRITE: usize = 4;
const FLASH_ERASE: usize = 4096;
const SLOT_LEN: usize = 17 * FLASH_ERASE;
const IMAGE_SLOTS: SlotLayout = SlotLayout {
    offsets: [0, SLOT_LEN as u32],
    slot_len: SLOT_LEN as u32,
};
// ---------------------------------------------------------------------------

type Filter = StaticCuckooFilter<FingerprintBits, SLOTS, BUCKETS>;

/// The emulated flash: in `.uninit`, which cortex-m-rt's start-up code
/// does not zero, so that it keeps its images across a reset.
#[link_section = ".uninit.IMAGE_SLOTS"]
static mut FLASH_MEMORY: MaybeUninit<[u8; 2 * SLOT_LEN]> = MaybeUninit::uninit();

#[entry]
fn main() -> ! {
    // cortex-m-rt turns this into a `&'static mut`; it starts zeroed in .bss.
    static mut FILTER: Filter = Filter::new(0);

    // SAFETY: `main` runs once and is the only code that names
    // FLASH_MEMORY. QEMU zeroes RAM when it starts and keeps it across
    // resets, so the bytes are initialized (zeroed flash holds no valid
    // image, like a blank device), and any bit pattern is a valid `u8`.
    let flash_memory = unsafe { (*addr_of_mut!(FLASH_MEMORY)).assume_init_mut() };

    let stack = stack::StackGauge::paint();
    let Some((rx, mut tx)) = uart::take() else {
        defmt::panic!("UART0 taken twice");
    };
    let flash = RamFlash::<FLASH_WRITE, FLASH_ERASE>::new(flash_memory);
    let mut device = Device::boot(FILTER, flash, IMAGE_SLOTS, DEFAULT_SEED);
    defmt::info!(
        "ready: {=usize} of {=usize} slots used",
        device.filter().len(),
        device.filter().capacity()
    );
    let mut rx = GaugedRx {
        rx,
        stack,
        #[cfg(feature = "fault-triggers")]
        triggers: fault_triggers::Watch::new(),
    };
    let error = firmware::serve(&mut device, &mut rx, &mut tx);
    defmt::panic!("serial port failed: {}", error);
}

/// UART0's receiver that, whenever the device is idle (nothing received
/// yet), logs a new stack high-water mark.
struct GaugedRx {
    rx: uart::UartRx,
    stack: stack::StackGauge,
    #[cfg(feature = "fault-triggers")]
    triggers: fault_triggers::Watch,
}

impl embedded_io::ErrorType for GaugedRx {
    type Error = core::convert::Infallible;
}

impl embedded_io::Read for GaugedRx {
    fn read(&mut self, buffer: &mut [u8]) -> Result<usize, Self::Error> {
        if !uart::rx_ready() {
            if let Some(used) = self.stack.new_high_water_mark() {
                defmt::info!("stack high-water mark: {=usize} bytes", used);
            }
        }
        let count = self.rx.read(buffer)?;
        #[cfg(feature = "fault-triggers")]
        self.triggers.scan(buffer.get(..count).unwrap_or(&[]));
        Ok(count)
    }
}

/// External interrupts of QEMU's `mps2-an386` model.
const INTERRUPTS: usize = 32;

extern "C" {
    /// cortex-m-rt's default handler (its linker script provides it).
    fn DefaultHandler();
}

/// The interrupt part of the vector table (cortex-m-rt's `device` feature
/// leaves it to the board, as a PAC would provide it): no interrupt is
/// enabled, so each points at the default handler.
#[link_section = ".vector_table.interrupts"]
#[no_mangle]
static __INTERRUPTS: [unsafe extern "C" fn(); INTERRUPTS] = [DefaultHandler; INTERRUPTS];

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    match info.location() {
        Some(location) => defmt::error!("panic at {=str}:{=u32}", location.file(), location.line()),
        None => defmt::error!("panic"),
    }
    SCB::sys_reset()
}

#[exception]
unsafe fn HardFault(frame: &ExceptionFrame) -> ! {
    defmt::error!("HardFault at pc {=u32:#010x}", frame.pc());
    SCB::sys_reset()
}
