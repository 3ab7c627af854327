//! The firmware application: a cuckoo-filter device that answers cfctl over
//! a serial link and keeps its filter in flash across resets.
//!
//! Board-agnostic and `no_std`: no allocator, no `unsafe`. A board binary
//! provides the filter (a `static`), a serial port (embedded-io `Read` and
//! `Write`) and a flash device (embedded-storage `NorFlash`), then calls
//! [`serve()`].
//!
//! * [`device`]: the state and the answer to each request of
//!   [`filter_core::protocol`].
//! * [`store`]: two flash slots with sequence numbers and CRCs; power loss
//!   during a save keeps the previous image.
//! * [`journal`]: the adds, deletes and clears since the image in use was saved,
//!   written after it in its slot and replayed at boot.
//! * [`ram_flash`]: a `NorFlash` in RAM, for QEMU (which has no persistent
//!   flash) and for tests.
//! * [`mod@serve`]: the serial side: frames from the port, answers back
//!   ([`SerialServer`], and the loop [`serve()`]).
//! * [`bridge`]: a filtering bridge between two VLANs on an Ethernet port,
//!   with the XDP program's parser and counters (boards with Ethernet).
//! * [`endpoint`]: the device's own IPv4 address and UDP port on an
//!   Ethernet port, where it takes sealed requests (updates over the
//!   network).
//! * [`port`]: what a board's Ethernet port serves: the bridge's VLANs,
//!   then the endpoint.
//! * [`stm32`]: what the STM32F4 boards share: their reset flags, and
//!   their flash unlocked only while it is written.
//! * [`build_settings`]: a board's endpoint settings, read when it is built.
//! * [`rx_ring`]: received bytes queued by an interrupt handler for the
//!   main loop (boards with interrupt-driven reception).
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod bridge;
pub mod build_settings;
mod checksum;
pub mod device;
pub mod endpoint;
pub mod journal;
pub mod port;
pub mod ram_flash;
pub mod rx_ring;
pub mod serve;
pub mod stm32;
pub mod store;

pub use bridge::Verdict;
pub use device::Device;
pub use endpoint::UdpEndpoint;
pub use ram_flash::RamFlash;
pub use rx_ring::{RingReader, RxRing};
pub use serve::{serve, SerialServer};
pub use store::{ImageStore, SlotLayout};

/// `defmt::info!` when the `defmt` feature is on; nothing otherwise.
macro_rules! log_info {
    ($($arg:tt)*) => {
        #[cfg(feature = "defmt")]
        defmt::info!($($arg)*);
    };
}

/// `defmt::warn!` when the `defmt` feature is on; nothing otherwise.
macro_rules! log_warn {
    ($($arg:tt)*) => {
        #[cfg(feature = "defmt")]
        defmt::warn!($($arg)*);
    };
}

pub(crate) use {log_info, log_warn};
