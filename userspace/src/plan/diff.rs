//! The diff of one plan update ([`KeyDiff`]) and the reference counts of
//! the block prefilter's bits ([`BitReferences`]) it is computed from.

use cfxdp::prefilter::{key_bits, PrefilterBit, PREFILTER_BLOCKS};
use cfxdp::MAX_PREFIX_LENGTHS;
use filter_core::{AddressFamily, NetKey};
use foldhash::HashSet;

/// Filter keys to insert and to remove for one update, and prefilter bits
/// to set and to clear. Write them in field order: set bits, insert,
/// remove, clear bits. No key and no bit is in both of its lists, and the
/// order keeps every listed address listed throughout (a key's bits are set
/// before it goes in; a bit is cleared only once no key marks it).
///
/// The bits are counted over the plan's own keys. For a plan of every
/// entry in the filter both lists are exact. A plan of only some entries
/// (the control plane's plan of the entries around a change) does not see
/// the other keys in the same blocks: its bits to set are still safe to
/// set, but its bits to clear may be needed by keys it does not hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyDiff {
    /// Prefilter bits no key marked before and some key marks now.
    pub set_bits: Vec<PrefilterBit>,
    /// Keys no entry covered before and some entry covers now.
    pub insert: Vec<NetKey>,
    /// Keys some entry covered before and none covers now.
    pub remove: Vec<NetKey>,
    /// Prefilter bits some key marked before and none marks now.
    pub clear_bits: Vec<PrefilterBit>,
}

/// How many keys mark each prefilter bit: per family, per block, per
/// length position.
#[derive(Clone, Debug)]
pub(super) struct BitReferences {
    ipv4: Vec<[u32; MAX_PREFIX_LENGTHS]>,
    ipv6: Vec<[u32; MAX_PREFIX_LENGTHS]>,
}

impl BitReferences {
    pub(super) fn new() -> Self {
        Self {
            ipv4: vec![[0; MAX_PREFIX_LENGTHS]; PREFILTER_BLOCKS],
            ipv6: vec![[0; MAX_PREFIX_LENGTHS]; PREFILTER_BLOCKS],
        }
    }

    pub(super) fn counts(&self, family: AddressFamily) -> &[[u32; MAX_PREFIX_LENGTHS]] {
        match family {
            AddressFamily::Ipv4 => &self.ipv4,
            AddressFamily::Ipv6 => &self.ipv6,
        }
    }

    pub(super) fn count_mut(&mut self, bit: PrefilterBit) -> &mut u32 {
        let counts = match bit.family {
            AddressFamily::Ipv4 => &mut self.ipv4,
            AddressFamily::Ipv6 => &mut self.ipv6,
        };
        &mut counts[bit.block as usize][usize::from(bit.length_index)]
    }

    /// Counts a key that entered the filter; pushes the bits it is the
    /// first to mark. `lengths`: the active lengths of its family.
    pub(super) fn add(
        &mut self,
        key: &NetKey,
        lengths: &[u8],
        newly_marked: &mut Vec<PrefilterBit>,
    ) {
        for_each_distinct_bit(key, lengths, |bit| {
            let count = self.count_mut(bit);
            if *count == 0 {
                newly_marked.push(bit);
            }
            *count += 1;
        });
    }

    /// Uncounts a key that left the filter; pushes the bits no key marks
    /// any more.
    pub(super) fn remove(
        &mut self,
        key: &NetKey,
        lengths: &[u8],
        unmarked: &mut Vec<PrefilterBit>,
    ) {
        for_each_distinct_bit(key, lengths, |bit| {
            let count = self.count_mut(bit);
            *count -= 1;
            if *count == 0 {
                unmarked.push(bit);
            }
        });
    }
}

/// The prefilter byte of a block whose length positions have `counts`
/// marking keys.
pub(super) fn marked_lengths(counts: &[u32; MAX_PREFIX_LENGTHS]) -> u8 {
    (0..)
        .zip(counts)
        .filter(|&(_, &count)| count > 0)
        .fold(0, |mask, (position, _)| mask | 1 << position)
}

/// Calls `visit` once for every prefilter bit `key` marks ([`key_bits`]
/// yields each once).
fn for_each_distinct_bit(key: &NetKey, lengths: &[u8], visit: impl FnMut(PrefilterBit)) {
    key_bits(key, lengths).for_each(visit);
}

/// Removes what is in both lists from both (changes an update made and
/// undid again).
pub(super) fn cancel_common<T: Copy + Eq + std::hash::Hash>(
    first: &mut Vec<T>,
    second: &mut Vec<T>,
) {
    if first.is_empty() || second.is_empty() {
        return;
    }
    let in_first: HashSet<T> = first.iter().copied().collect();
    let common: HashSet<T> = second
        .iter()
        .copied()
        .filter(|item| in_first.contains(item))
        .collect();
    first.retain(|item| !common.contains(item));
    second.retain(|item| !common.contains(item));
}
