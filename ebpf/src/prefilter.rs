//! The block prefilter: per family, a bitmap of the coarse address blocks
//! that any filter key overlaps, checked before the first filter probe, so
//! that a packet from an unmarked block is a miss after one array read.
//!
//! * IPv4: one bit per /16 block ([`IPV4_BLOCK_LEN`]), the block number
//!   itself, 65,536 bits.
//! * IPv6: /32 blocks ([`IPV6_BLOCK_LEN`]) hashed to 65,536 bits (a
//!   multiplicative hash of the address's first 32 bits). Two blocks may
//!   share a bit: a false mark only costs the normal probes.
//!
//! A key of length `L` marks every block it overlaps: one when `L` is at
//! least the block length, else the `2^(block length - L)` blocks it spans
//! (every bit once that count reaches the bitmap's size). A set bit never
//! hides a key; an unset bit must mean that no key of its blocks is in the
//! filter, so userspace sets a key's bits before inserting it and clears a
//! bit only after removing the last key that marks it.
//!
//! The functions here are the only definition of "which bit": the XDP
//! program tests bits with [`Prefilter::marks_ipv4`] and
//! [`Prefilter::marks_ipv6`], userspace marks keys with [`key_bits`].

use filter_core::{AddressFamily, NetKey};

/// Bits of each family's bitmap.
pub const PREFILTER_BITS: usize = 1 << 16;
/// 64-bit words of each family's bitmap.
pub const PREFILTER_WORDS: usize = PREFILTER_BITS / 64;
/// Prefix length of an IPv4 block.
pub const IPV4_BLOCK_LEN: u8 = 16;
/// Prefix length of an IPv6 block.
pub const IPV6_BLOCK_LEN: u8 = 32;

/// Fibonacci hashing: an odd multiplier (a bijection of `u32`) whose top
/// bits mix every input bit.
const IPV6_BLOCK_MULTIPLIER: u32 = 0x9e37_79b1;

/// One profile's prefilter: the value of one element of the prefilter map.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefilter {
    /// Bit `b` set: IPv4 block `b` (addresses `b << 16 ..`) may hold keys.
    pub ipv4: [u64; PREFILTER_WORDS],
    /// Bit `b` set: some IPv6 /32 block hashing to `b` may hold keys.
    pub ipv6: [u64; PREFILTER_WORDS],
}

/// A bit of one family's bitmap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PrefilterBit {
    /// The bitmap.
    pub family: AddressFamily,
    /// The bit, below [`PREFILTER_BITS`].
    pub index: u32,
}

/// The word holding `bit` and the bit's mask in it; the word index is
/// masked into range for the verifier.
#[inline(always)]
pub const fn word_and_mask(bit: u32) -> (usize, u64) {
    ((bit as usize >> 6) & (PREFILTER_WORDS - 1), 1 << (bit & 63))
}

/// The bit of the IPv4 block holding `address` (`u32::from_be_bytes`).
#[inline(always)]
pub const fn ipv4_bit(address: u32) -> u32 {
    address >> (32 - IPV4_BLOCK_LEN)
}

/// The bit of the IPv6 /32 block whose first 32 address bits are
/// `block`.
#[inline(always)]
pub const fn ipv6_bit(block: u32) -> u32 {
    block.wrapping_mul(IPV6_BLOCK_MULTIPLIER) >> (32 - PREFILTER_BITS.trailing_zeros())
}

impl Prefilter {
    /// No block marked.
    pub const EMPTY: Self = Self {
        ipv4: [0; PREFILTER_WORDS],
        ipv6: [0; PREFILTER_WORDS],
    };

    /// The bitmap of `family`.
    pub fn words(&self, family: AddressFamily) -> &[u64; PREFILTER_WORDS] {
        match family {
            AddressFamily::Ipv4 => &self.ipv4,
            AddressFamily::Ipv6 => &self.ipv6,
        }
    }

    /// The bitmap of `family`, to change it.
    pub fn words_mut(&mut self, family: AddressFamily) -> &mut [u64; PREFILTER_WORDS] {
        match family {
            AddressFamily::Ipv4 => &mut self.ipv4,
            AddressFamily::Ipv6 => &mut self.ipv6,
        }
    }

    /// Whether the IPv4 block of `address` is marked. Reads the word once
    /// (userspace may change it at any time).
    #[inline(always)]
    pub fn marks_ipv4(&self, address: u32) -> bool {
        test(&self.ipv4, ipv4_bit(address))
    }

    /// Whether the IPv6 block of an address whose first 64 bits are `high`
    /// is marked. Reads the word once.
    #[inline(always)]
    pub fn marks_ipv6(&self, high: u64) -> bool {
        test(&self.ipv6, ipv6_bit((high >> 32) as u32))
    }

    /// Whether `bit` is set.
    pub fn contains(&self, bit: PrefilterBit) -> bool {
        test(self.words(bit.family), bit.index)
    }

    /// Sets `bit`.
    pub fn set(&mut self, bit: PrefilterBit) {
        let (word, mask) = word_and_mask(bit.index);
        self.words_mut(bit.family)[word] |= mask;
    }

    /// Marks every block `key` overlaps.
    pub fn mark(&mut self, key: &NetKey) {
        for bit in key_bits(key) {
            self.set(bit);
        }
    }
}

#[inline(always)]
fn test(words: &[u64; PREFILTER_WORDS], bit: u32) -> bool {
    let (word, mask) = word_and_mask(bit);
    // SAFETY: a valid, aligned reference into the bitmap.
    unsafe { core::ptr::read_volatile(&words[word]) & mask != 0 }
}

/// The bits a key marks (see the module documentation). IPv4 bits come
/// once each; IPv6 bits of a key shorter than a block may repeat (two of
/// its blocks hashing to one bit).
pub fn key_bits(key: &NetKey) -> KeyBits {
    let family = key.family();
    let [_, high, _] = *key.words();
    let (first_32_bits, block_len) = match family {
        AddressFamily::Ipv4 => (high as u32, IPV4_BLOCK_LEN),
        AddressFamily::Ipv6 => ((high >> 32) as u32, IPV6_BLOCK_LEN),
    };
    let spanned_len = u32::from(block_len.saturating_sub(key.prefix_len()));
    let first_block = first_32_bits >> (32 - u32::from(block_len));
    let next = match family {
        // IPv4 blocks are bits: a run of consecutive bits.
        AddressFamily::Ipv4 => Next::Bit(first_block),
        AddressFamily::Ipv6 if (1u64 << spanned_len) >= PREFILTER_BITS as u64 => Next::Bit(0),
        AddressFamily::Ipv6 => Next::HashedBlock(first_block),
    };
    let remaining = match next {
        Next::HashedBlock(_) => 1u32 << spanned_len,
        Next::Bit(_) => (1u64 << spanned_len).min(PREFILTER_BITS as u64) as u32,
    };
    KeyBits {
        family,
        next,
        remaining,
    }
}

#[derive(Clone, Copy, Debug)]
enum Next {
    /// The next bit is this one (runs of bits: IPv4 blocks, or every bit).
    Bit(u32),
    /// The next bit is this IPv6 block's.
    HashedBlock(u32),
}

/// Iterator over the bits of one key: see [`key_bits`].
#[derive(Clone, Debug)]
pub struct KeyBits {
    family: AddressFamily,
    next: Next,
    remaining: u32,
}

impl KeyBits {
    /// Whether a bit may come more than once: IPv6 keys shorter than a
    /// block whose blocks hash apart.
    pub fn may_repeat(&self) -> bool {
        matches!(self.next, Next::HashedBlock(_)) && self.remaining > 1
    }
}

impl Iterator for KeyBits {
    type Item = PrefilterBit;

    fn next(&mut self) -> Option<PrefilterBit> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let index = match &mut self.next {
            Next::Bit(bit) => {
                let index = *bit;
                *bit = bit.wrapping_add(1);
                index
            }
            Next::HashedBlock(block) => {
                let index = ipv6_bit(*block);
                *block = block.wrapping_add(1);
                index
            }
        };
        Some(PrefilterBit {
            family: self.family,
            index,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining as usize, Some(self.remaining as usize))
    }
}

impl ExactSizeIterator for KeyBits {}
