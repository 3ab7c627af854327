//! Fixed-size keys for network prefixes: an IPv4 or IPv6 address masked to a
//! prefix length.
//!
//! A [`NetKey`] is three 64-bit words:
//!
//! | word | contents                                                  |
//! |------|-----------------------------------------------------------|
//! | 0    | `0x4e4b_0000 \| family << 8 \| prefix_len` (family 4 or 6)  |
//! | 1    | IPv4: the address as a number; IPv6: its first 64 bits    |
//! | 2    | IPv4: 0; IPv6: its last 64 bits                           |
//!
//! Bits beyond the prefix are zero, so every address inside a prefix gives
//! the same key. The family and length are part of word 0, so an IPv4 key
//! never equals an IPv6 key, nor `10.0.0.0/8` equal `10.0.0.0/16`. Hashing is
//! [`hash_words`] over these words: no loop, no branch on the data, cheap
//! enough for the XDP fast path, and the same value as hashing the 24
//! little-endian bytes with [`crate::KeyedHasher`].

use crate::hash::{hash_words, KeyHash};

const KEY_TAG: u64 = 0x4e4b_0000;

/// Address family of a [`NetKey`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum AddressFamily {
    /// IPv4 (prefix lengths 0..=32).
    Ipv4,
    /// IPv6 (prefix lengths 0..=128).
    Ipv6,
}

impl AddressFamily {
    /// The longest prefix of this family.
    pub const fn max_prefix_len(self) -> u8 {
        match self {
            AddressFamily::Ipv4 => 32,
            AddressFamily::Ipv6 => 128,
        }
    }

    const fn tag(self) -> u64 {
        match self {
            AddressFamily::Ipv4 => 4,
            AddressFamily::Ipv6 => 6,
        }
    }
}

/// An address masked to a prefix length, ready to hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct NetKey {
    words: [u64; 3],
}

/// Keeps the `prefix_len` most significant bits of a `width`-bit value.
#[inline(always)]
const fn high_bits_mask(prefix_len: u32, width: u32) -> u64 {
    // prefix_len == 0 would shift by the full width: no bits are kept.
    match u64::MAX.checked_shl(64 - prefix_len) {
        Some(mask) => match mask.checked_shr(64 - width) {
            Some(mask) => mask,
            None => 0,
        },
        None => 0,
    }
}

impl NetKey {
    /// An IPv4 prefix; `address` is the address as a number
    /// (`u32::from_be_bytes(octets)`). `None` if `prefix_len > 32`.
    #[inline(always)]
    pub const fn ipv4(address: u32, prefix_len: u8) -> Option<Self> {
        if prefix_len > 32 {
            return None;
        }
        let masked = address as u64 & high_bits_mask(prefix_len as u32, 32);
        Some(Self {
            words: [Self::tag_word(AddressFamily::Ipv4, prefix_len), masked, 0],
        })
    }

    /// An IPv6 prefix from the address's first and last 64 bits
    /// (`u64::from_be_bytes` of octets 0..8 and 8..16). `None` if
    /// `prefix_len > 128`.
    #[inline(always)]
    pub const fn ipv6(high: u64, low: u64, prefix_len: u8) -> Option<Self> {
        if prefix_len > 128 {
            return None;
        }
        let low_len = (prefix_len as u32).saturating_sub(64);
        let high_len = prefix_len as u32 - low_len;
        Some(Self {
            words: [
                Self::tag_word(AddressFamily::Ipv6, prefix_len),
                high & high_bits_mask(high_len, 64),
                low & high_bits_mask(low_len, 64),
            ],
        })
    }

    /// An IPv4 prefix from the address's octets in network order.
    pub const fn ipv4_octets(octets: [u8; 4], prefix_len: u8) -> Option<Self> {
        Self::ipv4(u32::from_be_bytes(octets), prefix_len)
    }

    /// An IPv6 prefix from the address's octets in network order.
    pub const fn ipv6_octets(octets: [u8; 16], prefix_len: u8) -> Option<Self> {
        let high = u64::from_be_bytes([
            octets[0], octets[1], octets[2], octets[3], octets[4], octets[5], octets[6], octets[7],
        ]);
        let low = u64::from_be_bytes([
            octets[8], octets[9], octets[10], octets[11], octets[12], octets[13], octets[14],
            octets[15],
        ]);
        Self::ipv6(high, low, prefix_len)
    }

    /// The key's first word: the tag, the family in bits 8 to 15 and the
    /// prefix length in bits 0 to 7 (disjoint fields, so their sum).
    const fn tag_word(family: AddressFamily, prefix_len: u8) -> u64 {
        KEY_TAG + (family.tag() << 8) + prefix_len as u64
    }

    /// The address family.
    pub const fn family(&self) -> AddressFamily {
        if (self.words[0] >> 8) & 0xff == 4 {
            AddressFamily::Ipv4
        } else {
            AddressFamily::Ipv6
        }
    }

    /// The prefix length.
    pub const fn prefix_len(&self) -> u8 {
        self.words[0] as u8
    }

    /// The three words described in the module documentation.
    pub const fn words(&self) -> &[u64; 3] {
        &self.words
    }

    /// The key's hash under `seed`.
    #[inline(always)]
    pub const fn hash(&self, seed: u64) -> KeyHash {
        hash_words(seed, &self.words)
    }
}
