//! What a request's key means, the same on both ends: an [`Item`] (a
//! network [`Prefix`], a `u64` or a byte string), its hash, the set of
//! active [`PrefixLengths`] a check probes, and [`contains`] /
//! [`locate_item`], which define the answers to `Check` and `Locate`.

use serde::{Deserialize, Serialize};

use super::error::Error;
use crate::cuckoo::CuckooFilter;
use crate::fingerprint::Fingerprint;
use crate::hash::{KeyHash, KeyedHasher};
use crate::layout::{locate, BucketStorage};
use crate::netkey::{AddressFamily, NetKey};
use crate::snapshot::Parameter;

/// An IPv4 or IPv6 prefix: an address and how many leading bits count.
/// A single address is a `/32` or `/128` prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Prefix {
    /// An IPv4 address (network order) and prefix length (0..=32).
    V4 {
        /// The address octets.
        address: [u8; 4],
        /// The prefix length.
        len: u8,
    },
    /// An IPv6 address (network order) and prefix length (0..=128).
    V6 {
        /// The address octets.
        address: [u8; 16],
        /// The prefix length.
        len: u8,
    },
}

impl Prefix {
    /// The address family.
    pub fn family(&self) -> AddressFamily {
        match self {
            Prefix::V4 { .. } => AddressFamily::Ipv4,
            Prefix::V6 { .. } => AddressFamily::Ipv6,
        }
    }

    /// The prefix length.
    pub fn prefix_len(&self) -> u8 {
        match *self {
            Prefix::V4 { len, .. } | Prefix::V6 { len, .. } => len,
        }
    }

    /// The same address with another prefix length.
    pub fn with_prefix_len(self, len: u8) -> Self {
        match self {
            Prefix::V4 { address, .. } => Prefix::V4 { address, len },
            Prefix::V6 { address, .. } => Prefix::V6 { address, len },
        }
    }

    /// The key of this prefix, or [`Error::InvalidPrefixLen`] when the
    /// length is too long for the family.
    pub fn net_key(&self) -> Result<NetKey, Error> {
        let key = match *self {
            Prefix::V4 { address, len } => NetKey::ipv4_octets(address, len),
            Prefix::V6 { address, len } => NetKey::ipv6_octets(address, len),
        };
        key.ok_or(Error::InvalidPrefixLen {
            len: self.prefix_len(),
        })
    }
}

/// What a request adds, deletes, checks or locates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Item<'a> {
    /// A network prefix or address.
    Net(Prefix),
    /// A 64-bit identifier.
    U64(u64),
    /// Any byte string (a coupon code, a name).
    Bytes(&'a [u8]),
}

impl Item<'_> {
    /// The item's hash under `seed`, as both ends compute it.
    pub fn hash(&self, seed: u64) -> Result<KeyHash, Error> {
        match self {
            Item::Net(prefix) => prefix.net_key().map(|key| key.hash(seed)),
            Item::U64(value) => Ok(KeyedHasher::hash_item(seed, value)),
            Item::Bytes(bytes) => {
                let mut hasher = KeyedHasher::new(seed);
                core::hash::Hasher::write(&mut hasher, bytes);
                Ok(hasher.key_hash())
            }
        }
    }
}

/// The prefix lengths that may hold entries, per family: the lengths a
/// check has to probe. Adding a prefix activates its length; deleting does
/// not deactivate it (a stale length costs one probe, never a wrong answer);
/// a clear or a snapshot resets the set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PrefixLengths {
    /// Word 0, bit `n`: IPv4 length `n`; words 1 to 3, bit `n % 64` of
    /// word `1 + n / 64`: IPv6 length `n`.
    words: [u64; 4],
}

impl PrefixLengths {
    /// Size of [`Self::to_le_bytes`].
    pub const ENCODED_LEN: usize = 32;

    /// No active length.
    pub const fn new() -> Self {
        Self { words: [0; 4] }
    }

    /// The word and bit of a length; `None` beyond the family's longest.
    fn position(family: AddressFamily, len: u8) -> Option<(usize, u64)> {
        if len > family.max_prefix_len() {
            return None;
        }
        Some(match family {
            AddressFamily::Ipv4 => (0, 1 << len),
            AddressFamily::Ipv6 => (1 + usize::from(len / 64), 1 << (len % 64)),
        })
    }

    /// Marks `len` active for `family`; lengths beyond the family's longest
    /// are ignored.
    pub fn insert(&mut self, family: AddressFamily, len: u8) {
        if let Some((index, bit)) = Self::position(family, len) {
            if let Some(word) = self.words.get_mut(index) {
                *word |= bit;
            }
        }
    }

    /// Whether `len` is active for `family`.
    pub fn contains(&self, family: AddressFamily, len: u8) -> bool {
        Self::position(family, len)
            .and_then(|(index, bit)| self.words.get(index).map(|word| word & bit != 0))
            .unwrap_or(false)
    }

    /// The active lengths of `family` up to `max_len`, shortest first.
    pub fn up_to(&self, family: AddressFamily, max_len: u8) -> impl Iterator<Item = u8> + '_ {
        (0..=max_len.min(family.max_prefix_len())).filter(move |&len| self.contains(family, len))
    }

    /// The set as 32 little-endian bytes (the four words in order), for
    /// storing it beside a snapshot.
    pub fn to_le_bytes(&self) -> [u8; Self::ENCODED_LEN] {
        let mut out = [0u8; Self::ENCODED_LEN];
        for (chunk, word) in out.chunks_exact_mut(8).zip(self.words) {
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        out
    }

    /// The inverse of [`Self::to_le_bytes`].
    pub fn from_le_bytes(bytes: &[u8; Self::ENCODED_LEN]) -> Self {
        let mut words = [0u64; 4];
        for (word, chunk) in words.iter_mut().zip(bytes.chunks_exact(8)) {
            let mut le = [0u8; 8];
            le.copy_from_slice(chunk);
            *word = u64::from_le_bytes(le);
        }
        Self { words }
    }
}

/// Whether `filter` reports `item` present, the way the device answers
/// [`Request::Check`](super::Request::Check): a prefix (or address) is present when the filter
/// holds it or any shorter active prefix that contains it; other items when
/// the filter holds them.
pub fn contains<F: Fingerprint, const S: usize, B: BucketStorage<F, S>>(
    filter: &CuckooFilter<F, S, B>,
    active: &PrefixLengths,
    item: &Item<'_>,
) -> Result<bool, Error> {
    match item {
        Item::Net(prefix) => {
            // Validates the length even when no length is active.
            prefix.net_key()?;
            for len in active.up_to(prefix.family(), prefix.prefix_len()) {
                if filter.contains_hash(prefix.with_prefix_len(len).net_key()?.hash(filter.seed()))
                {
                    return Ok(true);
                }
            }
            Ok(false)
        }
        other => Ok(filter.contains_hash(other.hash(filter.seed())?)),
    }
}

/// Where `item` lives in a table of `bucket_count` buckets of
/// `fingerprint_bits`-bit fingerprints under `seed` ([`Request::Locate`](super::Request::Locate)).
pub fn locate_item(
    item: &Item<'_>,
    seed: u64,
    bucket_count: u32,
    fingerprint_bits: u8,
) -> Result<Located, Error> {
    if !bucket_count.is_power_of_two() {
        return Err(Error::InvalidParameter {
            parameter: Parameter::BucketCount,
        });
    }
    let hash = item.hash(seed)?;
    let mask = bucket_count as usize - 1;
    let (fingerprint, primary, alternate) = match fingerprint_bits {
        8 => widen(locate::<u8>(hash, mask)),
        16 => widen(locate::<u16>(hash, mask)),
        32 => widen(locate::<u32>(hash, mask)),
        _ => {
            return Err(Error::InvalidParameter {
                parameter: Parameter::FingerprintBits,
            })
        }
    };
    Ok(Located {
        hash: hash.0,
        fingerprint,
        primary: primary as u32,
        alternate: alternate as u32,
    })
}

fn widen<F: Fingerprint>(location: crate::Location<F>) -> (u32, usize, usize) {
    (
        location.fingerprint.to_u32(),
        location.primary,
        location.alternate,
    )
}

/// Where an item lives ([`Response::Located`](super::Response::Located)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Located {
    /// The 64-bit hash.
    pub hash: u64,
    /// The fingerprint, widened.
    pub fingerprint: u32,
    /// Primary bucket.
    pub primary: u32,
    /// Alternate bucket.
    pub alternate: u32,
}
