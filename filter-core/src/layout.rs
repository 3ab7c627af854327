//! Where a key lives in a cuckoo table, and the storage abstraction the
//! filter's code runs on.
//!
//! # Bucket layout (stable, version 4)
//!
//! A table is `B` buckets (`B` a power of two, at most 2^32), each of `S`
//! slots (`S` in 1, 2, 4, 8), each slot one fingerprint of `F::BYTES` bytes,
//! little-endian, `0` meaning empty. Bucket `i` starts at byte
//! `i * S * F::BYTES`; no header, no padding. A `[[F; S]; B]` array has
//! exactly this layout on little-endian targets (x86, Arm Cortex-M, BPF), so
//! a static array, a slice of BPF map memory and a snapshot payload are the
//! same bytes.
//!
//! # Addressing (partial-key cuckoo hashing)
//!
//! For a [`KeyHash`] `h` and `mask = B - 1`:
//! * fingerprint `f = F::from_hash(h.low())`: the low `F::BITS` bits of
//!   `h`, 0 taken as 1;
//! * primary bucket `i1 = h.high() & mask`;
//! * alternate bucket `i2 = i1 ^ ((f * 0x5bd1_e995 mod 2^32) & mask)`.
//!
//! `i2` depends only on `i1` and `f`, and `alternate_bucket(i2, f) == i1`, so
//! a fingerprint can move between its two buckets without the item. The
//! multiplier (odd, so the low bits of `f` map one to one onto the low bits
//! of the offset) is the reference implementation's; one multiply instead
//! of a full 32-bit finalizer shortens the path from a key to its second
//! load, which every lookup, insert and XDP probe waits on.
//!
//! Earlier versions placed keys differently, so their tables and snapshots
//! are refused: version 1 spread the alternate with `fmix32(f)`; version 2
//! mapped the 32 bits onto the nonzero fingerprints by a multiply-shift,
//! and hashed inputs of at most 8 bytes (integer keys) as longer ones are;
//! version 3 absorbed the words of inputs longer than 8 bytes (network
//! keys among them) without the state's own product (see
//! [`crate::hash`]).

use crate::fingerprint::Fingerprint;
use crate::hash::KeyHash;
use crate::swar::slot_matches;

/// The layout version: bucket bytes and addressing as documented above.
pub const LAYOUT_VERSION: u16 = 4;

/// Spreads a fingerprint over the table for its alternate bucket.
const ALTERNATE_MULTIPLIER: u32 = 0x5bd1_e995;

/// The fingerprint and the two candidate buckets of one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Location<F> {
    /// Fingerprint stored for the key (never `F::EMPTY`).
    pub fingerprint: F,
    /// Primary bucket index.
    pub primary: usize,
    /// Alternate bucket index.
    pub alternate: usize,
}

/// Locates `hash` in a table of `bucket_mask + 1` buckets.
#[inline(always)]
pub fn locate<F: Fingerprint>(hash: KeyHash, bucket_mask: usize) -> Location<F> {
    let fingerprint = F::from_hash(hash.low());
    let primary = hash.high() as usize & bucket_mask;
    Location {
        fingerprint,
        primary,
        alternate: alternate_bucket(primary, fingerprint, bucket_mask),
    }
}

/// The other bucket of `fingerprint` when it sits in `bucket`.
#[inline(always)]
pub fn alternate_bucket<F: Fingerprint>(
    bucket: usize,
    fingerprint: F,
    bucket_mask: usize,
) -> usize {
    bucket ^ (fingerprint.to_u32().wrapping_mul(ALTERNATE_MULTIPLIER) as usize & bucket_mask)
}

/// Whether `bucket` holds `fingerprint`. Branch-free for every width and
/// slot count: an exact SWAR lane test over the bucket's 64-bit words.
#[inline(always)]
pub fn bucket_contains<F: Fingerprint, const S: usize>(bucket: &[F; S], fingerprint: F) -> bool {
    slot_matches(bucket, fingerprint).any()
}

/// Whether either of a key's two buckets holds `fingerprint`: the probe the
/// XDP program runs on map memory. Both buckets are compared, with no
/// branch between them, so a caller that loads both before calling lets
/// the two cache misses overlap.
#[inline(always)]
pub fn buckets_contain<F: Fingerprint, const S: usize>(
    primary: &[F; S],
    alternate: &[F; S],
    fingerprint: F,
) -> bool {
    // `|` of the two lane masks, not `||` of two answers: no branch.
    let primary = slot_matches(primary, fingerprint);
    let alternate = slot_matches(alternate, fingerprint);
    primary.or(alternate).any()
}

/// How many slots of `bucket` hold `fingerprint`.
#[inline(always)]
pub fn bucket_count<F: Fingerprint, const S: usize>(bucket: &[F; S], fingerprint: F) -> usize {
    slot_matches(bucket, fingerprint).count()
}

/// The first slot of `bucket` holding `fingerprint` (`F::EMPTY` finds a free
/// slot).
#[inline(always)]
pub fn find_slot<F: Fingerprint, const S: usize>(bucket: &[F; S], fingerprint: F) -> Option<usize> {
    slot_matches(bucket, fingerprint).first()
}

/// Starts bringing the cache line of `value` into every cache level, on
/// targets with a safe prefetch instruction (x86 and x86-64 with SSE).
#[inline(always)]
fn prefetch<T>(value: &T) {
    #[cfg(all(
        any(target_arch = "x86", target_arch = "x86_64"),
        target_feature = "sse"
    ))]
    safe_arch::prefetch_t0(value);
    #[cfg(not(all(
        any(target_arch = "x86", target_arch = "x86_64"),
        target_feature = "sse"
    )))]
    let _ = value;
}

/// Storage for a cuckoo table in the layout above.
///
/// Implemented for everything that derefs to `[[F; S]]` (a static array, a
/// `Vec`, a mutable slice of mapped memory). Implement it yourself for memory
/// that needs special writes, such as atomic stores into a map that a
/// running XDP program reads. Indices the filter passes are always in range;
/// implementations may still treat out-of-range reads as empty buckets and
/// ignore out-of-range writes rather than panic.
pub trait BucketStorage<F: Fingerprint, const S: usize> {
    /// Number of buckets.
    fn bucket_count(&self) -> usize;
    /// A copy of bucket `index`.
    fn bucket(&self, index: usize) -> [F; S];
    /// Stores `fingerprint` in slot `slot` of bucket `index`.
    fn set_slot(&mut self, index: usize, slot: usize, fingerprint: F);
    /// A hint that bucket `index` will be read soon: start bringing it into
    /// the cache, waiting for nothing ([`crate::batch`]'s pipeline). The
    /// default does nothing.
    #[inline(always)]
    fn prefetch_bucket(&self, index: usize) {
        let _ = index;
    }
}

impl<F, const S: usize, T> BucketStorage<F, S> for T
where
    F: Fingerprint,
    T: AsRef<[[F; S]]> + AsMut<[[F; S]]> + ?Sized,
{
    #[inline(always)]
    fn bucket_count(&self) -> usize {
        self.as_ref().len()
    }

    #[inline(always)]
    fn bucket(&self, index: usize) -> [F; S] {
        self.as_ref().get(index).copied().unwrap_or([F::EMPTY; S])
    }

    #[inline(always)]
    fn prefetch_bucket(&self, index: usize) {
        if let Some(bucket) = self.as_ref().get(index) {
            prefetch(bucket);
        }
    }

    #[inline(always)]
    fn set_slot(&mut self, index: usize, slot: usize, fingerprint: F) {
        if let Some(cell) = self
            .as_mut()
            .get_mut(index)
            .and_then(|bucket| bucket.get_mut(slot))
        {
            *cell = fingerprint;
        }
    }
}
