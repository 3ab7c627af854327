//! The filter device on a NUCLEO-F429ZI (STM32F429ZI, the on-chip
//! Ethernet MAC wired by RMII to the board's LAN8742A): an inline guard
//! on its RJ45 port. The port carries two VLANs tagged
//! (`BRIDGED_VLANS`) and the device bridges between them, dropping frames
//! from listed sources ([`firmware::bridge`], the XDP program's parser);
//! untagged frames are its own: built with a key, it answers ARP and
//! takes sealed updates on its UDP port ([`firmware::endpoint`]). The
//! protocol also runs on USART3 (PD8 TX, PD9 RX: the ST-LINK's virtual
//! COM port, 115200 8N1); images live in flash sectors 8-9 and 10-11;
//! defmt goes over RTT.
//!
//! USART3 receives by interrupt into a ring, the Ethernet DMA into its
//! descriptor ring (stm32-eth); the main loop serves bytes, then frames,
//! and sleeps (`wfi`) when neither waits. SysTick wakes it every 100 ms to
//! feed the independent watchdog and to follow the PHY's link (the MAC's
//! speed and duplex follow autonegotiation). A hang, or a panic
//! (panic-probe stops the core), ends in a watchdog reset; boot loads the
//! last image and its journal, and `Info` says why the chip started.
//!
//! Builds in CI; it has not been run on a board (see FOOTPRINT.md).
#![no_std]
#![no_main]

use core::cell::RefCell;
use core::sync::atomic::{AtomicBool, Ordering};

use cortex_m::peripheral::syst::SystClkSource;
use cortex_m_rt::{entry, exception};
use critical_section::Mutex;
use defmt_rtt as _;
use embedded_hal_nb::serial::{Read as _, Write as _};
use filter_core::protocol::datagram::Key;
use filter_core::StaticCuckooFilter;
use firmware::build_settings;
use firmware::endpoint::MAX_REPLY_LEN;
use firmware::port::{EthernetService, Outgoing};
use firmware::stm32::ResetFlags;
use firmware::{Device, RxRing, SerialServer, SlotLayout, UdpEndpoint};
use ieee802_3_miim::phy::{PhySpeed, LAN8742A};
use ieee802_3_miim::Phy;
use panic_probe as _;
use stm32_eth::dma::{RxRingEntry, TxRing, TxRingEntry};
use stm32_eth::mac::Speed;
use stm32_eth::{EthPins, Parts, PartsIn};
use stm32f4xx_hal::flash::LockedFlash;
use stm32f4xx_hal::gpio::Speed as PinSpeed;
use stm32f4xx_hal::serial::{Rx, Tx};
use stm32f4xx_hal::signature::Uid;
use stm32f4xx_hal::watchdog::IndependentWatchdog;
use stm32f4xx_hal::{interrupt, pac, prelude::*};

// ---- Sizes: the one place to change them ---------------------------------
type FingerprintBits = u16;
const SLOTS: usize = 4;
/// 16,384 buckets of 4 × 16 bits: a 128 KiB table, about 62,000 entries
/// at the 95% load a 4-slot filter reaches, in the 192 KiB of SRAM the
/// Ethernet DMA also reaches.
const BUCKETS: usize = 16_384;
const DEFAULT_SEED: u64 = 0x5eed_f429;
/// Flash sectors 8-9 and 10-11 of bank 1 (offsets from 0x0800_0000),
/// 256 KiB a slot: the table and about 8,000 journal records after it.
const IMAGE_SLOTS: SlotLayout = SlotLayout {
    offsets: [0x8_0000, 0xc_0000],
    slot_len: 0x4_0000,
};
const BAUD: u32 = 115_200;
/// Received bytes the ring holds (as on the F411).
const RX_RING_LEN: usize = 1024;
/// Frames the Ethernet DMA can hold received, and queued to send: each
/// takes a 1,522-byte buffer (a VLAN-tagged frame) and its descriptor.
const RX_FRAMES: usize = 2;
const TX_FRAMES: usize = 2;
/// Frames taken in one turn of the main loop at most, so that a flood of
/// them starves neither USART3 nor the watchdog.
const FRAMES_PER_TURN: usize = 32;
/// The VLANs the Ethernet port bridges.
const BRIDGED_VLANS: [u16; 2] = [10, 20];
/// The LAN8742A's address on the MDIO bus (strapped on the NUCLEO).
const PHY_ADDRESS: u8 = 0;
/// Core clock: the ST-LINK's 8 MHz clock output (HSE bypass) to 168 MHz.
const SYSCLK_HZ: u32 = 168_000_000;
/// SysTick's period: 100 ms of the core clock.
const TICK_CYCLES: u32 = SYSCLK_HZ / 10;
/// Watchdog period: longer than the slowest request (a save erases two
/// 128 KiB sectors, up to 4 s, and writes a 128 KiB table, about 2 s),
/// with room for the LSI clock running up to 40% fast.
const WATCHDOG_PERIOD_MS: u32 = 16_000;
/// The key updates over UDP are sealed under (64 hex digits) and the
/// address and port the device takes them on (`A.B.C.D:PORT`), from the
/// environment when the image is built: `FILTER_DEVICE_KEY` and
/// `FILTER_DEVICE_UDP`. Without a key the device takes no updates over
/// the network and answers no ARP; with one, it needs the address.
const UPDATE_KEY: Option<Key> = match option_env!("FILTER_DEVICE_KEY") {
    Some(hex) => Some(build_settings::key_from_hex(hex.as_bytes())),
    None => None,
};
const UPDATE_SOCKET: ([u8; 4], u16) = match (UPDATE_KEY, option_env!("FILTER_DEVICE_UDP")) {
    (_, Some(text)) => build_settings::socket_from_text(text.as_bytes()),
    (Some(_), None) => panic!("FILTER_DEVICE_KEY needs FILTER_DEVICE_UDP=A.B.C.D:PORT"),
    (None, None) => ([0; 4], 0),
};
// ---------------------------------------------------------------------------

/// Bytes received by the USART3 handler, for the main loop.
static RX_RING: RxRing<RX_RING_LEN> = RxRing::new();
/// USART3's receiver, owned by its interrupt handler once set up.
static USART3_RX: Mutex<RefCell<Option<Rx<pac::USART3>>>> = Mutex::new(RefCell::new(None));
/// Set by SysTick, taken by the main loop.
static TICKED: AtomicBool = AtomicBool::new(false);
/// The Ethernet frame FCS, which the DMA leaves at the end of each
/// received frame and the MAC appends to each sent one.
const FCS_LEN: usize = 4;

type Filter = StaticCuckooFilter<FingerprintBits, SLOTS, BUCKETS>;

#[entry]
fn main() -> ! {
    // cortex-m-rt turns these into `&'static mut`, in .bss.
    static mut FILTER: Filter = Filter::new(0);
    static mut RX_ENTRIES: [RxRingEntry; RX_FRAMES] = [RxRingEntry::INIT; RX_FRAMES];
    static mut TX_ENTRIES: [TxRingEntry; TX_FRAMES] = [TxRingEntry::INIT; TX_FRAMES];
    static mut REPLY: [u8; MAX_REPLY_LEN] = [0; MAX_REPLY_LEN];

    let (Some(dp), Some(mut cp)) = (pac::Peripherals::take(), cortex_m::Peripherals::take()) else {
        defmt::panic!("peripherals taken twice");
    };
    let reset_cause = take_reset_cause(&dp.RCC);
    let clocks = dp
        .RCC
        .constrain()
        .cfgr
        .use_hse(8.MHz())
        .bypass_hse_oscillator()
        .sysclk(SYSCLK_HZ.Hz())
        .hclk(SYSCLK_HZ.Hz())
        .freeze();
    let (gpioa, gpiob, gpioc, gpiod, gpiog) = (
        dp.GPIOA.split(),
        dp.GPIOB.split(),
        dp.GPIOC.split(),
        dp.GPIOD.split(),
        dp.GPIOG.split(),
    );

    let Ok(port) = dp
        .USART3
        .serial::<u8>((gpiod.pd8, gpiod.pd9), BAUD.bps(), &clocks)
    else {
        defmt::panic!("USART3 rejects {=u32} baud", BAUD);
    };
    let (tx, mut rx) = port.split();
    rx.listen();
    critical_section::with(|cs| USART3_RX.borrow_ref_mut(cs).replace(rx));

    let mut watchdog = IndependentWatchdog::new(dp.IWDG);
    watchdog.start(WATCHDOG_PERIOD_MS.millis());
    cp.SYST.set_clock_source(SystClkSource::Core);
    cp.SYST.set_reload(TICK_CYCLES - 1);
    cp.SYST.clear_current();
    cp.SYST.enable_interrupt();
    cp.SYST.enable_counter();

    let flash = LockingFlash(LockedFlash::new(dp.FLASH));
    let mut device = Device::boot(FILTER, flash, IMAGE_SLOTS, DEFAULT_SEED, reset_cause);
    defmt::info!(
        "ready: {=usize} of {=usize} slots used",
        device.filter().len(),
        device.filter().capacity()
    );

    let ethernet = PartsIn {
        dma: dp.ETHERNET_DMA,
        mac: dp.ETHERNET_MAC,
        mmc: dp.ETHERNET_MMC,
    };
    let pins = EthPins {
        ref_clk: gpioa.pa1,
        crs: gpioa.pa7,
        tx_en: gpiog.pg11,
        tx_d0: gpiog.pg13,
        tx_d1: gpiob.pb13,
        rx_d0: gpioc.pc4,
        rx_d1: gpioc.pc5,
    };
    let Ok(Parts { mut dma, mac }) = stm32_eth::new(
        ethernet,
        &mut RX_ENTRIES[..],
        &mut TX_ENTRIES[..],
        clocks,
        pins,
    ) else {
        defmt::panic!("HCLK too slow for the Ethernet MAC");
    };
    dma.enable_interrupt();
    let mut mdio = gpioa.pa2.into_alternate();
    mdio.set_speed(PinSpeed::VeryHigh);
    let mut mdc = gpioc.pc1.into_alternate();
    mdc.set_speed(PinSpeed::VeryHigh);
    let mut phy = LAN8742A::new(mac.with_mii(mdio, mdc), PHY_ADDRESS);
    phy.phy_init();

    let mac_address = mac_from_unique_id(Uid::get());
    let (ipv4, port) = UPDATE_SOCKET;
    let service = EthernetService {
        bridged_vlans: BRIDGED_VLANS,
        endpoint: UPDATE_KEY.map(|key| UdpEndpoint {
            mac: mac_address,
            ipv4,
            port,
            key,
        }),
    };
    if service.endpoint.is_some() {
        defmt::info!(
            "updates over UDP at {=[u8]}:{=u16} (MAC {=[u8]:02x})",
            ipv4,
            port,
            mac_address
        );
    }
    // SAFETY: the handlers touch only what they share through critical
    // sections (the ring, the receiver) and the Ethernet DMA's interrupt
    // status, which stm32-eth's handler acknowledges.
    unsafe {
        cortex_m::peripheral::NVIC::unmask(pac::Interrupt::USART3);
        cortex_m::peripheral::NVIC::unmask(pac::Interrupt::ETH);
    }

    let mut serial = SerialServer::new();
    let mut serial_tx = SerialTx(tx);
    let mut link = None;
    let mut lost_to_full_queue: u32 = 0;
    let mut input = [0u8; 64];
    let (rx_ring, tx_ring) = dma.split();
    loop {
        if TICKED.swap(false, Ordering::Relaxed) {
            watchdog.feed();
            follow_link(&mut phy, &mut link);
            if lost_to_full_queue > 0 {
                defmt::warn!(
                    "{=u32} frames not forwarded: transmit queue full",
                    lost_to_full_queue
                );
                lost_to_full_queue = 0;
            }
        }
        let count = RX_RING.pop_into(&mut input);
        if count > 0 {
            let bytes = input.get(..count).unwrap_or(&[]);
            if let Err(error) = serial.receive(&mut device, bytes, &mut serial_tx) {
                defmt::panic!("serial port failed: {}", error);
            }
        }
        for _ in 0..FRAMES_PER_TURN {
            let Ok(mut received) = rx_ring.recv_next(None) else {
                break;
            };
            let len = received.len().saturating_sub(FCS_LEN);
            let Some(frame) = received.get_mut(..len) else {
                continue;
            };
            let sent = match service.take(&mut device, frame, REPLY) {
                Outgoing::Forward => transmit(tx_ring, frame),
                Outgoing::Reply(len) => transmit(tx_ring, REPLY.get(..len).unwrap_or(&[])),
                Outgoing::Nothing => true,
            };
            if !sent {
                lost_to_full_queue = lost_to_full_queue.saturating_add(1);
            }
        }
        // With interrupts masked, nothing can arrive unseen between the
        // look and the sleep; a pending interrupt ends the `wfi`.
        cortex_m::interrupt::free(|_| {
            if RX_RING.is_empty()
                && !rx_ring.next_entry_available()
                && !TICKED.load(Ordering::Relaxed)
            {
                cortex_m::asm::wfi();
            }
        });
    }
}

/// Queues `frame` to be sent; `false` when the transmit ring is full.
fn transmit(tx_ring: &mut TxRing<'_>, frame: &[u8]) -> bool {
    match tx_ring.send_next(frame.len(), None) {
        Ok(mut packet) => {
            packet.copy_from_slice(frame);
            packet.send();
            true
        }
        Err(_) => false,
    }
}

/// Sets the MAC's speed and duplex to the link's, when the link changed.
fn follow_link<
    M: ieee802_3_miim::Miim + core::ops::DerefMut<Target = stm32_eth::mac::EthernetMAC>,
>(
    phy: &mut LAN8742A<M>,
    link: &mut Option<PhySpeed>,
) {
    let now = if phy.link_established() {
        phy.link_speed()
    } else {
        None
    };
    if now == *link {
        return;
    }
    *link = now;
    let Some(speed) = now else {
        defmt::warn!("Ethernet: link down");
        return;
    };
    let (mac_speed, name) = match speed {
        PhySpeed::HalfDuplexBase10T => (Speed::HalfDuplexBase10T, "10 Mbit/s half duplex"),
        PhySpeed::FullDuplexBase10T => (Speed::FullDuplexBase10T, "10 Mbit/s full duplex"),
        PhySpeed::HalfDuplexBase100Tx => (Speed::HalfDuplexBase100Tx, "100 Mbit/s half duplex"),
        PhySpeed::FullDuplexBase100Tx => (Speed::FullDuplexBase100Tx, "100 Mbit/s full duplex"),
    };
    phy.get_miim().set_speed(mac_speed);
    defmt::info!("Ethernet: link up, {=str}", name);
}

/// A locally administered unicast MAC address from the chip's 96-bit
/// unique id, so that two boards on one LAN differ.
fn mac_from_unique_id(uid: &Uid) -> [u8; 6] {
    let mut mac = [0x02, 0xcf, 0, 0, 0, 0];
    let [x, y] = [uid.x().to_le_bytes(), uid.y().to_le_bytes()];
    let wafer = [uid.waf_num()];
    let id = x.iter().chain(&y).chain(&wafer);
    for (index, byte) in id.chain(uid.lot_num().as_bytes()).enumerate() {
        if let Some(slot) = mac.get_mut(2 + index % 4) {
            *slot ^= byte;
        }
    }
    mac
}

/// Why the chip started, from the reset flags in RCC_CSR, which it then
/// clears so that the next start reads only its own.
fn take_reset_cause(rcc: &pac::RCC) -> filter_core::protocol::ResetCause {
    let cause = ResetFlags::from_rcc_csr(rcc.csr.read().bits()).cause();
    rcc.csr.modify(|_, w| w.rmvf().set_bit());
    cause
}

/// Moves every byte USART3 has received into the ring. A byte lost to
/// overrun, noise or framing is simply missing: its frame fails its CRC
/// and the host gets an error response, and resends.
#[interrupt]
fn USART3() {
    critical_section::with(|cs| {
        if let Some(rx) = USART3_RX.borrow_ref_mut(cs).as_mut() {
            RX_RING.push_from(|| rx.read());
        }
    });
}

/// The Ethernet DMA's interrupt: acknowledged, so that it falls; the
/// frames stay in the ring for the main loop, which it woke.
#[interrupt]
fn ETH() {
    stm32_eth::eth_interrupt_handler();
}

/// Wakes the main loop from `wfi`, to feed the watchdog and look at the
/// link.
#[exception]
fn SysTick() {
    TICKED.store(true, Ordering::Relaxed);
}

/// USART3's transmitter as the byte sink the protocol writes to.
struct SerialTx(Tx<pac::USART3>);

impl embedded_io::ErrorType for SerialTx {
    type Error = embedded_io::ErrorKind;
}

impl embedded_io::Write for SerialTx {
    fn write(&mut self, bytes: &[u8]) -> Result<usize, Self::Error> {
        for &byte in bytes {
            nb::block!(self.0.write(byte)).map_err(|_| embedded_io::ErrorKind::Other)?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> Result<(), Self::Error> {
        nb::block!(self.0.flush()).map_err(|_| embedded_io::ErrorKind::Other)
    }
}

firmware::locking_flash!(LockingFlash);
