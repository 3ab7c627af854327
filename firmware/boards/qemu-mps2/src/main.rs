//! The filter device on QEMU's `mps2-an386` (Cortex-M4F), the image the
//! end-to-end tests boot: the protocol on UART0, defmt through
//! semihosting, the image slots in RAM (QEMU has no flash that outlives
//! the emulator: see `firmware::ram_flash`), and a filtering bridge
//! between VLANs 10 and 20 on the LAN9118 Ethernet port
//! ([`firmware::bridge`]): frames from listed sources never cross it.
//! Untagged frames are the device's own: with a key built in (below), it
//! answers ARP for its address and takes sealed requests on its UDP port
//! ([`firmware::endpoint`]), so `cfctl --device udp:ADDR:PORT` updates it
//! over the network. Both receive by interrupt: UART0's handler moves bytes into a ring, the
//! Ethernet controller keeps frames in its FIFO; the main loop serves the
//! bytes, then the frames, and sleeps (`wfi`) when neither waits.
//!
//! A panic or a HardFault logs where it happened and resets the machine;
//! a hang is ended by the CMSDK watchdog, which the main loop feeds
//! ([`watchdog`]). The image slots live in `.uninit` RAM, which a reset
//! does not clear, like flash: after the reset, boot loads the last saved
//! image, and `Info` says why the machine started ([`reset_cause`]).
//! Feature `fault-triggers` (for the tests only; never in the normal
//! image) adds the way to cause all three: the bytes `!panic`,
//! `!hardfault` or `!hang` followed by a frame delimiter.
#![no_std]
#![no_main]

mod ethernet;
#[cfg(feature = "fault-triggers")]
mod fault_triggers;
mod reset_cause;
mod stack;
mod uart;
mod watchdog;

use core::mem::MaybeUninit;
use core::ptr::addr_of_mut;

use cortex_m::interrupt::InterruptNumber;
use cortex_m::peripheral::{NVIC, SCB};
use cortex_m::Peripherals;
use cortex_m_rt::{entry, exception, ExceptionFrame};
use defmt_semihosting as _;
use filter_core::protocol::datagram::Key;
use filter_core::protocol::ResetCause;
use filter_core::StaticCuckooFilter;
use firmware::build_settings;
use firmware::endpoint::MAX_REPLY_LEN;
use firmware::port::{EthernetService, Outgoing};
use firmware::{Device, RamFlash, SerialServer, SlotLayout, UdpEndpoint};

// ---- Sizes: the one place to change them (the same filter as the F411) --
type FingerprintBits = u16;
const SLOTS: usize = 4;
const BUCKETS: usize = 8192;
const DEFAULT_SEED: u64 = 0x5eed_0386;
/// Emulated flash: 4-byte write units, 4 KiB erase units, two 96 KiB slots
/// (a 64 KiB table plus snapshot header, trailer and commit record, and
/// about 2,000 journal records of changes after it).
const FLASH_WRITE: usize = 4;
const FLASH_ERASE: usize = 4096;
const SLOT_LEN: usize = 24 * FLASH_ERASE;
const IMAGE_SLOTS: SlotLayout = SlotLayout {
    offsets: [0, SLOT_LEN as u32],
    slot_len: SLOT_LEN as u32,
};
/// The VLANs the Ethernet port bridges.
const BRIDGED_VLANS: [u16; 2] = [10, 20];
/// Frames bridged in one turn of the main loop at most.
const FRAMES_PER_TURN: usize = 32;
/// Where the device takes updates over the network (untagged frames).
const UPDATE_MAC: [u8; 6] = [0x02, 0xcf, 0xfa, 0x00, 0x00, 0x02];
const UPDATE_IPV4: [u8; 4] = [198, 18, 250, 2];
const UPDATE_PORT: u16 = 7070;
/// The key updates are sealed under: 64 hex digits in the environment
/// variable `FILTER_DEVICE_KEY` when the image is built. Without it the
/// device takes no updates over the network (it answers no ARP either).
const UPDATE_KEY: Option<Key> = match option_env!("FILTER_DEVICE_KEY") {
    Some(hex) => Some(build_settings::key_from_hex(hex.as_bytes())),
    None => None,
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
    // The frame being bridged, and a reply of the endpoint: in .bss, not
    // on the stack.
    static mut FRAME: [u8; ethernet::MAX_FRAME_LEN] = [0; ethernet::MAX_FRAME_LEN];
    static mut REPLY: [u8; MAX_REPLY_LEN] = [0; MAX_REPLY_LEN];

    // SAFETY: `main` runs once and is the only code that names
    // FLASH_MEMORY. QEMU zeroes RAM when it starts and keeps it across
    // resets, so the bytes are initialized (zeroed flash holds no valid
    // image, like a blank device), and any bit pattern is a valid `u8`.
    let flash_memory = unsafe { (*addr_of_mut!(FLASH_MEMORY)).assume_init_mut() };

    let reset_cause = reset_cause::take();
    let mut stack = stack::StackGauge::paint();
    let Some(peripherals) = Peripherals::take() else {
        defmt::panic!("core peripherals taken twice");
    };
    let Some(mut tx) = uart::take() else {
        defmt::panic!("UART0 taken twice");
    };
    let flash = RamFlash::<FLASH_WRITE, FLASH_ERASE>::new(flash_memory);
    let mut device = Device::boot(FILTER, flash, IMAGE_SLOTS, DEFAULT_SEED, reset_cause);
    defmt::info!(
        "ready: {=usize} of {=usize} slots used",
        device.filter().len(),
        device.filter().capacity()
    );
    let mut ethernet = ethernet::Lan9118::start();
    if ethernet.is_none() {
        defmt::warn!("no LAN9118 found: serving UART0 only");
    }
    let service = EthernetService {
        bridged_vlans: BRIDGED_VLANS,
        endpoint: UPDATE_KEY.map(|key| UdpEndpoint {
            mac: UPDATE_MAC,
            ipv4: UPDATE_IPV4,
            port: UPDATE_PORT,
            key,
        }),
    };
    if service.endpoint.is_some() {
        defmt::info!(
            "updates over UDP at {=[u8]}:{=u16}",
            UPDATE_IPV4,
            UPDATE_PORT
        );
    }
    // SAFETY: the handlers touch only the ring (through critical sections)
    // and the devices' interrupt acknowledgement registers.
    unsafe {
        NVIC::unmask(Interrupt::Uart0Rx);
        NVIC::unmask(Interrupt::Ethernet);
    }
    let mut serial = SerialServer::new();
    #[cfg(feature = "fault-triggers")]
    let mut triggers = fault_triggers::Watch::new();
    let mut input = [0u8; 64];
    let mut watchdog = watchdog::Watchdog::start(peripherals.SYST);
    loop {
        watchdog.feed();
        let count = uart::RX_RING.pop_into(&mut input);
        if count > 0 {
            let bytes = input.get(..count).unwrap_or(&[]);
            #[cfg(feature = "fault-triggers")]
            triggers.scan(bytes);
            if let Err(error) = serial.receive(&mut device, bytes, &mut tx) {
                defmt::panic!("serial port failed: {}", error);
            }
        }
        let mut answered_datagrams = false;
        // A bounded number of frames a turn, so that a flood of them
        // neither starves UART0 nor keeps the watchdog unfed.
        if let Some(port) = &mut ethernet {
            for _ in 0..FRAMES_PER_TURN {
                let Some(len) = port.receive(FRAME) else {
                    break;
                };
                let frame = FRAME.get_mut(..len).unwrap_or(&mut []);
                match service.take(&mut device, frame, REPLY) {
                    Outgoing::Forward => port.transmit(frame),
                    Outgoing::Reply(len) => {
                        port.transmit(REPLY.get(..len).unwrap_or(&[]));
                        answered_datagrams = true;
                    }
                    Outgoing::Nothing => {}
                }
            }
        }
        // Requests take the most stack; the gauge reads once after each
        // batch of them, not on every turn of the loop.
        if count > 0 || answered_datagrams {
            if let Some(used) = stack.new_high_water_mark() {
                defmt::info!("stack high-water mark: {=usize} bytes", used);
            }
        }
        // With interrupts masked, nothing can arrive unseen between the
        // look and the sleep; a pending interrupt (SysTick's at the latest)
        // ends the `wfi`, and its handler runs once they are unmasked.
        cortex_m::interrupt::free(|_| {
            let frame_waits = ethernet.as_ref().is_some_and(ethernet::Lan9118::has_frame);
            if uart::RX_RING.is_empty() && !frame_waits {
                cortex_m::asm::wfi();
            }
        });
    }
}

/// The interrupts this board uses, by their number on `mps2-an386`.
#[derive(Clone, Copy)]
enum Interrupt {
    Uart0Rx = 0,
    Ethernet = 13,
}

// SAFETY: the numbers are those of QEMU's mps2-an386 (UART0 RX 0, the
// LAN9118 13), below INTERRUPTS.
unsafe impl InterruptNumber for Interrupt {
    fn number(self) -> u16 {
        self as u16
    }
}

extern "C" fn uart0_rx() {
    uart::on_receive();
}

extern "C" fn ethernet_interrupt() {
    ethernet::on_interrupt();
}

/// External interrupts of QEMU's `mps2-an386` model.
const INTERRUPTS: usize = 32;

extern "C" {
    /// cortex-m-rt's default handler (its linker script provides it).
    fn DefaultHandler();
}

/// The interrupt part of the vector table (cortex-m-rt's `device` feature
/// leaves it to the board, as a PAC would provide it): UART0 RX and the
/// Ethernet controller have handlers, every other entry points at the
/// default handler.
#[link_section = ".vector_table.interrupts"]
#[no_mangle]
static __INTERRUPTS: [unsafe extern "C" fn(); INTERRUPTS] = {
    let mut table: [unsafe extern "C" fn(); INTERRUPTS] = [DefaultHandler; INTERRUPTS];
    table[Interrupt::Uart0Rx as usize] = uart0_rx;
    table[Interrupt::Ethernet as usize] = ethernet_interrupt;
    table
};

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    match info.location() {
        Some(location) => defmt::error!("panic at {=str}:{=u32}", location.file(), location.line()),
        None => defmt::error!("panic"),
    }
    reset_cause::record(ResetCause::Panic);
    SCB::sys_reset()
}

#[exception]
unsafe fn HardFault(frame: &ExceptionFrame) -> ! {
    defmt::error!("HardFault at pc {=u32:#010x}", frame.pc());
    reset_cause::record(ResetCause::HardFault);
    SCB::sys_reset()
}

/// The watchdog's first expiry: the main loop has not fed it for a whole
/// period. The second expiry resets the machine.
#[exception]
unsafe fn NonMaskableInt() {
    defmt::error!("watchdog: the main loop stopped; the machine resets at the next expiry");
    reset_cause::record(ResetCause::Watchdog);
}

/// Wakes the main loop from `wfi`, so that it feeds the watchdog.
#[exception]
fn SysTick() {}
