//! The block prefilter: per family, one byte per coarse address block whose
//! bit `i` says that the block may hold a filter key of the profile's `i`-th
//! active prefix length. The XDP program reads the byte of a packet's block
//! before it probes: a zero byte is a miss after one array read, and
//! otherwise only the lengths whose bits are set are probed (longest first,
//! as always), so a packet costs one probe per length that has keys near
//! it, not one per active length.
//!
//! * IPv4: one byte per /16 block ([`IPV4_BLOCK_LEN`]), the block number
//!   itself, 65,536 bytes.
//! * IPv6: one byte per /32 block ([`IPV6_BLOCK_LEN`]) *within each first
//!   16-bit group*: the byte of block `X:Y::/32` is `Y ^ mix(X)`
//!   ([`ipv6_block`], [`ipv6_group_mix`]). Blocks of different first
//!   groups may share a byte: a false mark only costs a probe.
//!
//! # Why the IPv6 byte is the second group, shifted per first group
//!
//! The bits must stay exact: after a removal userspace clears a bit only
//! when no entry marks it any more, so it must find every entry that can
//! mark one byte. With this mapping the blocks of byte `b` are
//! `X:(b ^ mix(X))::/32`, exactly one per first group `X`, and real IPv6
//! lists hold few distinct first groups (RIR allocations: 2001, 2400-240f,
//! 2600-260f, 2a00-2a0f, ...): userspace finds them by skipping through its
//! ordered store and reads one /32 per group, or every IPv6 entry once
//! when that is cheaper: bounded work however long the list is (a hash of
//! all 32 bits would scatter a byte's blocks anywhere, so every IPv6 entry
//! would have to be read for each change).
//!
//! The XOR with `mix(X)` (a Fibonacci hash of the first group) keeps a
//! key of length 16 to 32, whose blocks are an aligned run of second
//! groups, an aligned run of consecutive bytes (no byte twice), while
//! blocks at the same second group under different first groups land
//! apart. That matters because allocations are aligned: with the plain
//! second group, Spamhaus' IPv6 DROP list (`spamhaus_dropv6.txt`, 56
//! entries, 353 /32 blocks in 15 first groups) marks 345 distinct bytes
//! (/29s at one second group in other first groups collide), with the mix
//! 353, as many as the 32-bit hash. Modelled diverse traffic (200,000
//! sources in 81 RIR-like first groups, 70% from the first /32 of an
//! aligned /29, the rest from any /32) reaches 42,584 distinct bytes
//! with the plain second group, 62,385 with the mix and 61,875 with the
//! hash, and a source of an unlisted block finds its byte marked by the
//! list 0.64%, 0.52% and 0.55% of the time: the mix spreads like the hash.
//! Traffic from one /32 reads one byte under any mapping.
//!
//! A key of length `L` marks bit `position of L` of every block it
//! overlaps: one block when `L` is at least the block length, else the
//! `2^(block length - L)` blocks it spans (every byte once that count
//! reaches the map's size). A set bit never hides a key; an unset bit must
//! mean that no key of that length in its blocks is in the filter, so
//! userspace sets a key's bit before inserting it and clears a bit only
//! after removing the last key that marks it. The bits' meaning depends on
//! the profile's length list, which is why each profile has its own
//! prefilter.
//!
//! The functions here are the only definition of "which bit": the XDP
//! program reads masks with [`Prefilter::ipv4_mask`] and
//! [`Prefilter::ipv6_mask`], userspace marks keys with [`key_bits`].
//!
//! # When a prefilter does not pay
//!
//! The byte is one more memory read per packet, and under traffic from many
//! sources it misses the cache like the filter's buckets do. It pays when
//! it saves probes: a list of 10^6 random addresses marks every IPv4 /16
//! block at its one length, so it never saves any. [`Prefilter::pays`]
//! estimates the probes it saves per packet from addresses spread evenly
//! over the blocks, and the loader records in the profile's
//! `prefilter_skipped` the families where that is below
//! [`MIN_SAVED_PROBES`]; the program then skips the read and probes every
//! active length. The bits are kept exact either way, so skipping is only
//! ever a matter of speed.

use crate::MAX_PREFIX_LENGTHS;
use filter_core::{AddressFamily, NetKey};

const _: () = assert!(
    MAX_PREFIX_LENGTHS <= u8::BITS as usize,
    "one bit per length"
);

/// Blocks (bytes) of each family's map.
pub const PREFILTER_BLOCKS: usize = 1 << 16;
/// Prefix length of an IPv4 block.
pub const IPV4_BLOCK_LEN: u8 = 16;
/// Prefix length of an IPv6 block.
pub const IPV6_BLOCK_LEN: u8 = 32;

/// Fewest probes per packet a prefilter must save to be read: a probe
/// (hash, two bucket reads) costs several times the prefilter's one read.
pub const MIN_SAVED_PROBES: f64 = 0.125;

/// The bit of `family` in a profile's `prefilter_skipped`.
pub const fn skip_bit(family: AddressFamily) -> u32 {
    match family {
        AddressFamily::Ipv4 => 1,
        AddressFamily::Ipv6 => 2,
    }
}

/// Fibonacci hashing: an odd multiplier whose top bits mix every input
/// bit.
const IPV6_GROUP_MULTIPLIER: u32 = 0x9e37_79b1;

/// One profile's prefilter: the value of one element of the prefilter map.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefilter {
    /// Byte `b`, bit `i`: IPv4 block `b` (addresses `b << 16 ..`) may hold
    /// keys of the `i`-th active IPv4 length.
    pub ipv4: [u8; PREFILTER_BLOCKS],
    /// Byte `b`, bit `i`: some IPv6 /32 block of byte `b` (one per first
    /// group, see [`ipv6_block`]) may hold keys of the `i`-th active IPv6
    /// length.
    pub ipv6: [u8; PREFILTER_BLOCKS],
}

/// One bit of a prefilter: a block and a position in the length list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PrefilterBit {
    /// The family's map.
    pub family: AddressFamily,
    /// The block (byte), below [`PREFILTER_BLOCKS`].
    pub block: u32,
    /// The position of the key's length in the profile's active lengths of
    /// the family, below [`MAX_PREFIX_LENGTHS`].
    pub length_index: u8,
}

impl PrefilterBit {
    /// The bit's mask in its block's byte.
    pub const fn mask(self) -> u8 {
        1 << (self.length_index as usize % MAX_PREFIX_LENGTHS)
    }
}

/// The IPv4 block holding `address` (`u32::from_be_bytes`).
#[inline(always)]
pub const fn ipv4_block(address: u32) -> u32 {
    address >> (32 - IPV4_BLOCK_LEN)
}

/// The 16 bits that shift the bytes of the IPv6 blocks whose first 16-bit
/// group is `first_group` (only its low 16 bits count): a Fibonacci hash.
#[inline(always)]
pub const fn ipv6_group_mix(first_group: u32) -> u32 {
    (first_group & 0xffff).wrapping_mul(IPV6_GROUP_MULTIPLIER) >> 16
}

/// The byte of the IPv6 /32 block whose first 32 address bits are
/// `block`: its second 16-bit group XOR [`ipv6_group_mix`] of its first
/// (see the module documentation).
#[inline(always)]
pub const fn ipv6_block(block: u32) -> u32 {
    (block & 0xffff) ^ ipv6_group_mix(block >> 16)
}

/// The first 32 address bits of the one IPv6 /32 block with first group
/// `first_group` whose byte is `byte`: the inverse of [`ipv6_block`] within
/// a first group.
#[inline(always)]
pub const fn ipv6_block_of_byte(first_group: u16, byte: u32) -> u32 {
    let first_group = first_group as u32;
    first_group << 16 | ((byte ^ ipv6_group_mix(first_group)) & 0xffff)
}

impl Prefilter {
    /// No block marked.
    pub const EMPTY: Self = Self {
        ipv4: [0; PREFILTER_BLOCKS],
        ipv6: [0; PREFILTER_BLOCKS],
    };

    /// Every bit of every block set: every packet probes every length.
    pub const FULL: Self = Self {
        ipv4: [u8::MAX; PREFILTER_BLOCKS],
        ipv6: [u8::MAX; PREFILTER_BLOCKS],
    };

    /// The block bytes of `family`.
    pub fn masks(&self, family: AddressFamily) -> &[u8; PREFILTER_BLOCKS] {
        match family {
            AddressFamily::Ipv4 => &self.ipv4,
            AddressFamily::Ipv6 => &self.ipv6,
        }
    }

    /// The block bytes of `family`, to change them.
    pub fn masks_mut(&mut self, family: AddressFamily) -> &mut [u8; PREFILTER_BLOCKS] {
        match family {
            AddressFamily::Ipv4 => &mut self.ipv4,
            AddressFamily::Ipv6 => &mut self.ipv6,
        }
    }

    /// The length bits of the IPv4 block of `address`. Reads the byte once
    /// (userspace may change it at any time).
    #[inline(always)]
    pub fn ipv4_mask(&self, address: u32) -> u8 {
        read_block(&self.ipv4, ipv4_block(address))
    }

    /// The length bits of the IPv6 block of an address whose first 64 bits
    /// are `high`. Reads the byte once.
    #[inline(always)]
    pub fn ipv6_mask(&self, high: u64) -> u8 {
        read_block(&self.ipv6, ipv6_block((high >> 32) as u32))
    }

    /// Whether `bit` is set.
    pub fn contains(&self, bit: PrefilterBit) -> bool {
        read_block(self.masks(bit.family), bit.block) & bit.mask() != 0
    }

    /// Sets `bit`.
    pub fn set(&mut self, bit: PrefilterBit) {
        let index = block_index(bit.block);
        self.masks_mut(bit.family)[index] |= bit.mask();
    }

    /// Probes per packet the family's bytes save, for addresses spread
    /// evenly over the blocks, when `length_count` lengths are active: the
    /// lengths whose bits are clear, averaged over the blocks.
    pub fn saved_probes(&self, family: AddressFamily, length_count: u32) -> f64 {
        let active = length_count.min(MAX_PREFIX_LENGTHS as u32);
        let active_bits = (1u32 << active) - 1;
        let probed: u64 = self
            .masks(family)
            .iter()
            .map(|&mask| u64::from((u32::from(mask) & active_bits).count_ones()))
            .sum();
        f64::from(active) - probed as f64 / PREFILTER_BLOCKS as f64
    }

    /// Whether reading the family's bytes saves at least
    /// [`MIN_SAVED_PROBES`] per packet (see the module documentation).
    pub fn pays(&self, family: AddressFamily, length_count: u32) -> bool {
        self.saved_probes(family, length_count) >= MIN_SAVED_PROBES
    }

    /// Marks every block `key` overlaps at its length's position in
    /// `lengths`, the active lengths of the key's family in probe order.
    pub fn mark(&mut self, key: &NetKey, lengths: &[u8]) {
        for bit in key_bits(key, lengths) {
            self.set(bit);
        }
    }
}

/// `block` masked into range for the verifier.
#[inline(always)]
const fn block_index(block: u32) -> usize {
    block as usize & (PREFILTER_BLOCKS - 1)
}

#[inline(always)]
fn read_block(masks: &[u8; PREFILTER_BLOCKS], block: u32) -> u8 {
    // SAFETY: a valid reference into the map.
    unsafe { core::ptr::read_volatile(&masks[block_index(block)]) }
}

/// The bits a key marks (see the module documentation), given the active
/// lengths of its family in probe order. None if its length is not
/// active (the program never probes it). Each bit comes once: a key spans
/// a run of consecutive bytes (IPv4 blocks are the block numbers; an IPv6
/// key of length 16 to 32 spans an aligned run of second groups, which
/// [`ipv6_block`] maps to an aligned run of bytes), or every byte.
pub fn key_bits(key: &NetKey, lengths: &[u8]) -> KeyBits {
    let family = key.family();
    let [_, high, _] = *key.words();
    let (first_32_bits, block_len) = match family {
        AddressFamily::Ipv4 => (high as u32, IPV4_BLOCK_LEN),
        AddressFamily::Ipv6 => ((high >> 32) as u32, IPV6_BLOCK_LEN),
    };
    let length_index = lengths
        .iter()
        .position(|&length| length == key.prefix_len())
        .and_then(|position| u8::try_from(position).ok())
        .filter(|&position| usize::from(position) < MAX_PREFIX_LENGTHS);
    let spanned_len = u32::from(block_len.saturating_sub(key.prefix_len()));
    let spanned = (1u64 << spanned_len).min(PREFILTER_BLOCKS as u64) as u32;
    let first_block = match family {
        _ if spanned as usize == PREFILTER_BLOCKS => 0,
        AddressFamily::Ipv4 => first_32_bits >> (32 - u32::from(block_len)),
        AddressFamily::Ipv6 => ipv6_block(first_32_bits) & !(spanned - 1),
    };
    KeyBits {
        family,
        length_index: length_index.unwrap_or(0),
        next: first_block,
        remaining: if length_index.is_some() { spanned } else { 0 },
    }
}

/// Iterator over the bits of one key, each once: see [`key_bits`].
#[derive(Clone, Debug)]
pub struct KeyBits {
    family: AddressFamily,
    length_index: u8,
    next: u32,
    remaining: u32,
}

impl Iterator for KeyBits {
    type Item = PrefilterBit;

    fn next(&mut self) -> Option<PrefilterBit> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let block = self.next;
        self.next = block.wrapping_add(1);
        Some(PrefilterBit {
            family: self.family,
            block,
            length_index: self.length_index,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining as usize, Some(self.remaining as usize))
    }
}

impl ExactSizeIterator for KeyBits {}
