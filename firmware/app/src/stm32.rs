//! What the STM32F4 boards share, whichever stm32f4xx-hal release each is
//! built on (the F411's and the one stm32-eth needs differ): why the chip
//! started, from the bits of its RCC_CSR register ([`ResetFlags`]), and
//! [`locking_flash!`](crate::locking_flash), the on-chip flash as a
//! `NorFlash` unlocked only while it is erased or written.

use filter_core::protocol::ResetCause;

/// The reset flags of RCC_CSR, as read after a start (RM0383 and RM0090,
/// section "RCC clock control & status register").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResetFlags {
    /// The independent or the window watchdog (IWDGRSTF, WWDGRSTF).
    pub watchdog: bool,
    /// A software reset, SYSRESETREQ (SFTRSTF).
    pub software: bool,
    /// Entering Standby or Stop where the option bytes say to reset
    /// (LPWRRSTF).
    pub low_power: bool,
    /// Power-on or power-down reset (PORRSTF).
    pub power_on: bool,
    /// Brown-out reset (BORRSTF).
    pub brownout: bool,
    /// The NRST pin (PINRSTF).
    pub pin: bool,
}

impl ResetFlags {
    /// The flags in the value of RCC_CSR.
    pub fn from_rcc_csr(bits: u32) -> Self {
        let set = |bit: u32| bits & (1 << bit) != 0;
        Self {
            watchdog: set(29) || set(30),
            software: set(28),
            low_power: set(31),
            power_on: set(27),
            brownout: set(25),
            pin: set(26),
        }
    }

    /// The cause. Every reset also pulls the NRST pin, and a power-on
    /// sets the brown-out flag too, so the flags are read from the most
    /// specific to the least.
    pub fn cause(&self) -> ResetCause {
        if self.watchdog {
            ResetCause::Watchdog
        } else if self.software {
            ResetCause::Software
        } else if self.low_power {
            ResetCause::LowPower
        } else if self.power_on {
            ResetCause::PowerOn
        } else if self.brownout {
            ResetCause::Brownout
        } else if self.pin {
            ResetCause::Pin
        } else {
            ResetCause::Unknown
        }
    }
}

/// Declares `struct $name(stm32f4xx_hal::flash::LockedFlash)`, the
/// on-chip flash as an embedded-storage `NorFlash` that unlocks the flash
/// for the duration of each erase or write only. Expanded in a board
/// crate, it names that board's `stm32f4xx_hal` and `embedded_storage`,
/// so it serves any HAL release that has `LockedFlash` and `FlashExt`.
#[macro_export]
macro_rules! locking_flash {
    ($name:ident) => {
        /// The on-chip flash, unlocked only for the duration of each
        /// erase or write.
        struct $name(stm32f4xx_hal::flash::LockedFlash);

        // A scope for the imports the impls need.
        const _: () = {
            use embedded_storage::nor_flash::{ErrorType, NorFlash, ReadNorFlash};
            use stm32f4xx_hal::flash::{Error, FlashExt, LockedFlash, UnlockedFlash};

            impl ErrorType for $name {
                type Error = Error;
            }

            impl ReadNorFlash for $name {
                const READ_SIZE: usize = LockedFlash::READ_SIZE;

                fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), Error> {
                    ReadNorFlash::read(&mut self.0, offset, bytes)
                }

                fn capacity(&self) -> usize {
                    ReadNorFlash::capacity(&self.0)
                }
            }

            impl NorFlash for $name {
                const WRITE_SIZE: usize = <UnlockedFlash<'static> as NorFlash>::WRITE_SIZE;
                const ERASE_SIZE: usize = <UnlockedFlash<'static> as NorFlash>::ERASE_SIZE;

                fn erase(&mut self, from: u32, to: u32) -> Result<(), Error> {
                    NorFlash::erase(&mut self.0.unlocked(), from, to)
                }

                fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), Error> {
                    NorFlash::write(&mut self.0.unlocked(), offset, bytes)
                }
            }
        };
    };
}
