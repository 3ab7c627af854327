//! The block prefilter of the live profile, in the mmapped `PREFILTERS`
//! map: a whole prefilter written into an idle profile before a swap, and
//! single bits set and cleared in the live one with atomic
//! read-modify-writes. Callers set a key's bits before inserting the key
//! and clear a bit only after the last key that marks it is gone (see
//! [`crate::plan::KeyDiff`]), so a listed key is never hidden.

use std::collections::HashSet;
use std::mem::{offset_of, size_of};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use cfxdp::prefilter::{key_bits, Prefilter, PrefilterBit, PREFILTER_BLOCKS};
use filter_core::{AddressFamily, NetKey};

use super::maps::FilterMaps;

impl FilterMaps {
    /// Offset in the prefilter mapping of profile `slot`'s block bytes of
    /// `family`.
    fn prefilter_offset(slot: usize, family: AddressFamily) -> usize {
        slot * size_of::<Prefilter>()
            + match family {
                AddressFamily::Ipv4 => offset_of!(Prefilter, ipv4),
                AddressFamily::Ipv6 => offset_of!(Prefilter, ipv6),
            }
    }

    /// Every 8-byte word of profile `slot`'s prefilter: family, offset of
    /// its first block, the word.
    fn prefilter_words(
        &self,
        slot: usize,
    ) -> impl Iterator<Item = (AddressFamily, usize, &AtomicU64)> {
        [AddressFamily::Ipv4, AddressFamily::Ipv6]
            .into_iter()
            .flat_map(move |family| {
                let base = Self::prefilter_offset(slot, family);
                (0..PREFILTER_BLOCKS)
                    .step_by(size_of::<u64>())
                    .filter_map(move |block| {
                        Some((family, block, self.prefilters.atomic_u64(base + block)?))
                    })
            })
    }

    /// Writes a whole prefilter into profile `slot`, one atomic store per
    /// eight blocks.
    pub(super) fn write_prefilter(&self, slot: usize, prefilter: &Prefilter) {
        for (family, block, word) in self.prefilter_words(slot) {
            let masks = &prefilter.masks(family)[block..block + size_of::<u64>()];
            if let Ok(bytes) = masks.try_into() {
                word.store(u64::from_ne_bytes(bytes), Ordering::Release);
            }
        }
    }

    /// The live profile's prefilter as it is now.
    pub fn live_prefilter(&self) -> Box<Prefilter> {
        let mut prefilter = Box::new(Prefilter::EMPTY);
        for (family, block, word) in self.prefilter_words(self.live_slot()) {
            let bytes = word.load(Ordering::Acquire).to_ne_bytes();
            prefilter.masks_mut(family)[block..block + size_of::<u64>()].copy_from_slice(&bytes);
        }
        prefilter
    }

    /// Whether `bit` is set in the live profile's prefilter (one byte read,
    /// where [`Self::live_prefilter`] copies all 128 KiB).
    pub fn prefilter_has(&self, bit: PrefilterBit) -> bool {
        self.block_byte(bit)
            .is_some_and(|block| block.load(Ordering::Acquire) & bit.mask() != 0)
    }

    /// Sets the prefilter bits of `keys` (see
    /// [`cfxdp::prefilter::key_bits`]) in the live profile's
    /// prefilter. Call before inserting the keys.
    pub fn mark_keys(&self, keys: &[NetKey]) {
        let profile = self.live_profile();
        let bits: Vec<PrefilterBit> = keys
            .iter()
            .flat_map(|key| key_bits(key, profile.lengths(key.family())))
            .collect();
        self.set_prefilter_bits(&bits);
    }

    /// Sets `bits` in the live profile's prefilter, one atomic
    /// read-modify-write each, and returns those that were clear (each
    /// once). Call before inserting the keys that mark them.
    pub fn set_prefilter_bits(&self, bits: &[PrefilterBit]) -> Vec<PrefilterBit> {
        let unique: HashSet<PrefilterBit> = bits.iter().copied().collect();
        unique
            .into_iter()
            .filter(|&bit| {
                self.block_byte(bit).is_some_and(|block| {
                    block.fetch_or(bit.mask(), Ordering::AcqRel) & bit.mask() == 0
                })
            })
            .collect()
    }

    /// Clears `bits` in the live profile's prefilter. Call only after
    /// removing every key that marks them.
    pub fn clear_prefilter_bits(&self, bits: &[PrefilterBit]) {
        for &bit in bits {
            if let Some(block) = self.block_byte(bit) {
                block.fetch_and(!bit.mask(), Ordering::Release);
            }
        }
    }

    /// The live profile's byte of `bit`'s block.
    fn block_byte(&self, bit: PrefilterBit) -> Option<&AtomicU8> {
        let offset = Self::prefilter_offset(self.live_slot(), bit.family) + bit.block as usize;
        self.prefilters.atomic_u8(offset)
    }
}
