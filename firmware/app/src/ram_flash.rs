//! A [`NorFlash`] in RAM: erased bytes read `0xff`, and a write can only
//! clear bits, as in real NOR flash.
//!
//! QEMU's `mps2-an386` machine has no flash that survives the emulator, so
//! the QEMU board keeps its image slots here: they survive everything but a
//! restart of QEMU itself. Tests use it as the base of a power-cutting mock.

use embedded_storage::nor_flash::{
    ErrorType, NorFlash, NorFlashError, NorFlashErrorKind, ReadNorFlash,
};

/// NOR flash emulated in a byte slice, with `WRITE` byte write units and
/// `ERASE` byte erase units.
#[derive(Debug)]
pub struct RamFlash<'m, const WRITE: usize, const ERASE: usize> {
    memory: &'m mut [u8],
}

/// An access outside the memory or not aligned to its units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RamFlashError(NorFlashErrorKind);

impl NorFlashError for RamFlashError {
    fn kind(&self) -> NorFlashErrorKind {
        self.0
    }
}

impl<'m, const WRITE: usize, const ERASE: usize> RamFlash<'m, WRITE, ERASE> {
    /// Flash over `memory` (its contents are kept: pass erased memory,
    /// `0xff`, for a blank device).
    pub fn new(memory: &'m mut [u8]) -> Self {
        Self { memory }
    }

    fn range(&mut self, from: u32, len: usize, unit: usize) -> Result<&mut [u8], RamFlashError> {
        let from = from as usize;
        if !from.is_multiple_of(unit) || !len.is_multiple_of(unit) {
            return Err(RamFlashError(NorFlashErrorKind::NotAligned));
        }
        from.checked_add(len)
            .and_then(|to| self.memory.get_mut(from..to))
            .ok_or(RamFlashError(NorFlashErrorKind::OutOfBounds))
    }
}

impl<const WRITE: usize, const ERASE: usize> ErrorType for RamFlash<'_, WRITE, ERASE> {
    type Error = RamFlashError;
}

impl<const WRITE: usize, const ERASE: usize> ReadNorFlash for RamFlash<'_, WRITE, ERASE> {
    const READ_SIZE: usize = 1;

    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), Self::Error> {
        bytes.copy_from_slice(self.range(offset, bytes.len(), 1)?);
        Ok(())
    }

    fn capacity(&self) -> usize {
        self.memory.len()
    }
}

impl<const WRITE: usize, const ERASE: usize> NorFlash for RamFlash<'_, WRITE, ERASE> {
    const WRITE_SIZE: usize = WRITE;
    const ERASE_SIZE: usize = ERASE;

    fn erase(&mut self, from: u32, to: u32) -> Result<(), Self::Error> {
        let len = to
            .checked_sub(from)
            .ok_or(RamFlashError(NorFlashErrorKind::OutOfBounds))?;
        self.range(from, len as usize, ERASE)?.fill(0xff);
        Ok(())
    }

    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), Self::Error> {
        for (cell, byte) in self
            .range(offset, bytes.len(), WRITE)?
            .iter_mut()
            .zip(bytes)
        {
            *cell &= byte;
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn accesses_must_be_aligned_to_their_unit_in_offset_and_length() {
        let mut memory = [0xffu8; 1024];
        let mut flash = RamFlash::<4, 256>::new(&mut memory);
        assert_eq!(flash.capacity(), 1024);
        let not_aligned = Err(RamFlashError(NorFlashErrorKind::NotAligned));
        assert_eq!(flash.write(2, &[0; 4]), not_aligned);
        assert_eq!(flash.write(4, &[0; 2]), not_aligned);
        assert_eq!(flash.erase(128, 384), not_aligned);
        assert_eq!(
            flash.write(1024, &[0; 4]),
            Err(RamFlashError(NorFlashErrorKind::OutOfBounds))
        );
        assert_eq!(flash.write(4, &[0x0f; 4]), Ok(()));
        assert_eq!(flash.write(4, &[0xf0; 4]), Ok(()));
        let mut read = [0u8; 12];
        assert_eq!(flash.read(0, &mut read), Ok(()));
        assert_eq!(
            read,
            [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]
        );
    }
}
