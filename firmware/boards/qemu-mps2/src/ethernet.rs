//! Driver for the SMSC LAN9118 Ethernet controller of QEMU's `mps2-an386`
//! at 0x4020_0000: whole frames in and out through the chip's FIFOs (its
//! receive FIFO is the bounded queue: about 10 KiB), no heap, one frame
//! buffer owned by the caller. A received frame raises interrupt 13
//! ([`on_interrupt`] acknowledges it); the main loop, woken by it, takes
//! the frames. No crate drives this chip,
//! so the registers are written here, from the datasheet's map (offsets
//! from the base):
//!
//! | register | offset | use |
//! |---|---|---|
//! | RX_DATA | 0x00 | received data, one 32-bit word per read, bytes in little-endian order |
//! | TX_DATA | 0x20 | command word A, command word B, then the data words |
//! | RX_STATUS | 0x40 | one word per received frame: its length (CRC included) in bits 16-29 |
//! | ID_REV | 0x50 | `0x0118_0001` on the emulated chip |
//! | IRQ_CFG | 0x54 | IRQ_EN (bit 8), push-pull active high (bits 4, 0) |
//! | INT_STS / INT_EN | 0x58 / 0x5c | RSFL (bit 3): a receive status word waits; write 1 to clear |
//! | TX_CFG | 0x70 | TX_ON (bit 1), TXSAO (bit 2: TX status words may be dropped) |
//! | HW_CFG | 0x74 | soft reset (bit 0) |
//! | RX_FIFO_INF | 0x7c | RX status words waiting in bits 16-23 |
//! | MAC_CSR_CMD / DATA | 0xa4 / 0xa8 | the MAC's own registers, reached indirectly |
//!
//! The MAC runs promiscuous (PRMS): the device bridges frames addressed to
//! other hosts, which a station would filter out.

use core::ptr::{read_volatile, write_volatile};

const BASE: usize = 0x4020_0000;
const RX_DATA: usize = 0x00;
const TX_DATA: usize = 0x20;
const RX_STATUS: usize = 0x40;
const ID_REV: usize = 0x50;
const IRQ_CFG: usize = 0x54;
const INT_STS: usize = 0x58;
const INT_EN: usize = 0x5c;
const TX_CFG: usize = 0x70;
const HW_CFG: usize = 0x74;
const RX_FIFO_INF: usize = 0x7c;
const MAC_CSR_CMD: usize = 0xa4;
const MAC_CSR_DATA: usize = 0xa8;

/// What the emulated chip reads in ID_REV.
const LAN9118_ID: u32 = 0x0118_0001;
const IRQ_CFG_ENABLED_ACTIVE_HIGH: u32 = (1 << 8) | (1 << 4) | 1;
const INT_RX_STATUS: u32 = 1 << 3;
const TX_CFG_TX_ON: u32 = 1 << 1;
const TX_CFG_TXSAO: u32 = 1 << 2;
const HW_CFG_SOFT_RESET: u32 = 1 << 0;
const MAC_CSR_BUSY: u32 = 1 << 31;
const MAC_CR: u32 = 1;
const MAC_CR_RXEN: u32 = 1 << 2;
const MAC_CR_TXEN: u32 = 1 << 3;
const MAC_CR_PRMS: u32 = 1 << 18;
const TX_FIRST_SEGMENT: u32 = 1 << 13;
const TX_LAST_SEGMENT: u32 = 1 << 12;
/// The length field of command words A and B, and the most bytes one
/// frame may have.
pub const MAX_FRAME_LEN: usize = 0x7ff;
const FCS_LEN: usize = 4;

/// The controller, once found and started.
pub struct Lan9118(());

impl Lan9118 {
    /// Resets the chip and starts receiving and transmitting; `None` if
    /// the chip is not there (its ID does not read back).
    pub fn start() -> Option<Self> {
        if read(ID_REV) != LAN9118_ID {
            return None;
        }
        write(HW_CFG, HW_CFG_SOFT_RESET);
        while read(HW_CFG) & HW_CFG_SOFT_RESET != 0 {}
        write(TX_CFG, TX_CFG_TX_ON | TX_CFG_TXSAO);
        write_mac(MAC_CR, MAC_CR_RXEN | MAC_CR_TXEN | MAC_CR_PRMS);
        write(INT_EN, INT_RX_STATUS);
        write(IRQ_CFG, IRQ_CFG_ENABLED_ACTIVE_HIGH);
        Some(Self(()))
    }

    /// Whether a received frame waits.
    pub fn has_frame(&self) -> bool {
        (read(RX_FIFO_INF) >> 16) & 0xff != 0
    }

    /// Moves the next received frame (without its CRC) into `frame`; its
    /// length, or `None` when nothing was received. A frame longer than
    /// `frame` is read out of the chip and dropped (`Some(0)`).
    pub fn receive(&mut self, frame: &mut [u8]) -> Option<usize> {
        if !self.has_frame() {
            return None;
        }
        let status = read(RX_STATUS);
        let with_fcs = ((status >> 16) & 0x3fff) as usize;
        let len = with_fcs.saturating_sub(FCS_LEN);
        let fits = len <= frame.len();
        // Every word is read, the CRC's too, so the next frame starts at
        // the FIFO's head; only the frame's bytes are kept.
        let mut slots = frame.iter_mut().take(if fits { len } else { 0 });
        for _ in 0..with_fcs.div_ceil(4) {
            for byte in read(RX_DATA).to_le_bytes() {
                if let Some(slot) = slots.next() {
                    *slot = byte;
                }
            }
        }
        Some(if fits { len } else { 0 })
    }

    /// Sends `frame` (without a CRC: the chip adds it); a frame longer
    /// than [`MAX_FRAME_LEN`] is not sent.
    pub fn transmit(&mut self, frame: &[u8]) {
        if frame.len() > MAX_FRAME_LEN {
            return;
        }
        let len = frame.len() as u32;
        write(TX_DATA, TX_FIRST_SEGMENT | TX_LAST_SEGMENT | len);
        write(TX_DATA, len);
        for chunk in frame.chunks(4) {
            let mut word = [0u8; 4];
            word[..chunk.len()].copy_from_slice(chunk);
            write(TX_DATA, u32::from_le_bytes(word));
        }
    }
}

/// The Ethernet interrupt: acknowledged, so that it falls; the frames
/// stay in the chip for the main loop.
pub fn on_interrupt() {
    write(INT_STS, INT_RX_STATUS);
}

fn read(offset: usize) -> u32 {
    // SAFETY: the LAN9118's registers are at BASE on this machine; reads of
    // the FIFO registers pop from them, which only `Lan9118` (one value)
    // does; the interrupt handler only writes INT_STS.
    unsafe { read_volatile((BASE + offset) as *const u32) }
}

fn write(offset: usize, value: u32) {
    // SAFETY: as for `read`.
    unsafe { write_volatile((BASE + offset) as *mut u32, value) }
}

/// Writes MAC register `index` through the indirect access registers.
fn write_mac(index: u32, value: u32) {
    while read(MAC_CSR_CMD) & MAC_CSR_BUSY != 0 {}
    write(MAC_CSR_DATA, value);
    write(MAC_CSR_CMD, MAC_CSR_BUSY | index);
    while read(MAC_CSR_CMD) & MAC_CSR_BUSY != 0 {}
}
