//! Batched lookups: many keys' cache misses in flight at once.
//!
//! A lookup in a table larger than the cache waits for two memory reads.
//! Looked up one after another, keys overlap those waits only as far as
//! the processor's out-of-order window reaches past the hashing and
//! comparing of each key. [`ContainsMany`] instead runs a pipeline
//! [`LOOKAHEAD`] keys deep: each key is hashed and located, and both of
//! its buckets are requested from memory with a prefetch hint, when it
//! enters; its buckets are read and compared only when it leaves,
//! `LOOKAHEAD` keys later, by which time they have arrived. A prefetch
//! waits for nothing, so the misses of the whole pipeline overlap and it
//! never drains, in safe code.
//!
//! Prefetching is a hint with no effect on the answers: where this crate
//! has no safe prefetch for the target (anything but x86 and x86-64 with
//! SSE, through [`safe_arch`]), the pipeline runs without it.
//!
//! The answers are exactly [`CuckooFilter::contains_hash`]'s, in order.

use crate::cuckoo::CuckooFilter;
use crate::fingerprint::Fingerprint;
use crate::hash::KeyHash;
use crate::layout::{BucketStorage, Location};

/// Keys between a key's prefetch and its comparison: enough to cover a
/// memory read with the other keys' work, few enough that the prefetched
/// buckets are still in the first-level cache when they are read.
pub const LOOKAHEAD: usize = 16;

/// Iterator over whether each of a sequence of hashes may be in a filter:
/// see [`CuckooFilter::contains_many_hashes`].
pub struct ContainsMany<'a, F: Fingerprint, const S: usize, B, I> {
    filter: &'a CuckooFilter<F, S, B>,
    hashes: I,
    /// The keys in the pipeline, oldest at `oldest`, `queued` of them.
    pipeline: [Location<F>; LOOKAHEAD],
    oldest: usize,
    queued: usize,
}

impl<'a, F, const S: usize, B, I> ContainsMany<'a, F, S, B, I>
where
    F: Fingerprint,
    B: BucketStorage<F, S>,
    I: Iterator<Item = KeyHash>,
{
    pub(crate) fn new(filter: &'a CuckooFilter<F, S, B>, hashes: I) -> Self {
        let unused = Location {
            fingerprint: F::EMPTY,
            primary: 0,
            alternate: 0,
        };
        Self {
            filter,
            hashes,
            pipeline: [unused; LOOKAHEAD],
            oldest: 0,
            queued: 0,
        }
    }

    /// Fills the pipeline from the hashes, prefetching each key's buckets.
    #[inline(always)]
    fn refill(&mut self) {
        while self.queued < LOOKAHEAD {
            let Some(hash) = self.hashes.next() else {
                break;
            };
            let location = self.filter.locate(hash);
            self.filter.prefetch_buckets(location);
            let newest = (self.oldest + self.queued) % LOOKAHEAD;
            if let Some(slot) = self.pipeline.get_mut(newest) {
                *slot = location;
            }
            self.queued += 1;
        }
    }
}

impl<F, const S: usize, B, I> Iterator for ContainsMany<'_, F, S, B, I>
where
    F: Fingerprint,
    B: BucketStorage<F, S>,
    I: Iterator<Item = KeyHash>,
{
    type Item = bool;

    #[inline]
    fn next(&mut self) -> Option<bool> {
        self.refill();
        let location = *self.pipeline.get(self.oldest).filter(|_| self.queued > 0)?;
        self.oldest = (self.oldest + 1) % LOOKAHEAD;
        self.queued -= 1;
        Some(self.filter.contains_location(location))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let (low, high) = self.hashes.size_hint();
        (
            low.saturating_add(self.queued),
            high.and_then(|high| high.checked_add(self.queued)),
        )
    }
}

impl<F, const S: usize, B, I> ExactSizeIterator for ContainsMany<'_, F, S, B, I>
where
    F: Fingerprint,
    B: BucketStorage<F, S>,
    I: ExactSizeIterator<Item = KeyHash>,
{
}

impl<F: Fingerprint, const S: usize, B: BucketStorage<F, S>> CuckooFilter<F, S, B> {
    /// Whether each of `items` may be present, in order, looked up in a
    /// pipeline so that their cache misses overlap (see the [module
    /// documentation](self)). For many lookups in a filter larger than the
    /// cache; the answers are [`Self::contains`]'s.
    ///
    /// ```
    /// use filter_core::StaticCuckooFilter;
    ///
    /// let mut filter = StaticCuckooFilter::<u16, 4, 1024>::new(7);
    /// filter.insert(&2u64).unwrap();
    /// let found: Vec<bool> = filter.contains_many(&[1u64, 2, 3]).collect();
    /// assert_eq!(found, [false, true, false]);
    /// ```
    pub fn contains_many<'a, T: core::hash::Hash + 'a>(
        &'a self,
        items: &'a [T],
    ) -> ContainsMany<'a, F, S, B, impl ExactSizeIterator<Item = KeyHash> + 'a> {
        self.contains_many_hashes(items.iter().map(move |item| self.hash(item)))
    }

    /// [`Self::contains_many`] for precomputed hashes (such as
    /// [`crate::NetKey::hash`]).
    pub fn contains_many_hashes<I: IntoIterator<Item = KeyHash>>(
        &self,
        hashes: I,
    ) -> ContainsMany<'_, F, S, B, I::IntoIter> {
        ContainsMany::new(self, hashes.into_iter())
    }
}
