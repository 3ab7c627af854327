//! Batched lookups: many keys' cache misses in flight at once.
//!
//! A lookup in a table larger than the cache waits for two memory reads.
//! Looked up one after another, keys overlap those waits only as far as
//! the processor's out-of-order window reaches past the hashing and
//! comparing of each key. [`ContainsMany`] instead takes a group of
//! [`GROUP`] keys, computes all their locations, then reads all their
//! buckets (plain loads into a local array, nothing in between that
//! depends on them), and only then compares: up to `2 * GROUP` misses
//! overlap, in safe code.
//!
//! The answers are exactly [`CuckooFilter::contains_hash`]'s, in order.

use crate::cuckoo::CuckooFilter;
use crate::fingerprint::Fingerprint;
use crate::hash::KeyHash;
use crate::layout::{buckets_contain, BucketStorage};

/// Keys per group: enough misses in flight to cover memory latency, few
/// enough that the group's buckets stay in registers and L1.
pub const GROUP: usize = 32;

/// Iterator over whether each of a sequence of hashes may be in a filter:
/// see [`CuckooFilter::contains_many_hashes`].
pub struct ContainsMany<'a, F: Fingerprint, const S: usize, B, I> {
    filter: &'a CuckooFilter<F, S, B>,
    hashes: I,
    found: [bool; GROUP],
    next: usize,
    len: usize,
}

impl<'a, F, const S: usize, B, I> ContainsMany<'a, F, S, B, I>
where
    F: Fingerprint,
    B: BucketStorage<F, S>,
    I: Iterator<Item = KeyHash>,
{
    pub(crate) fn new(filter: &'a CuckooFilter<F, S, B>, hashes: I) -> Self {
        Self {
            filter,
            hashes,
            found: [false; GROUP],
            next: 0,
            len: 0,
        }
    }

    /// Answers the next group of up to [`GROUP`] hashes.
    fn fill(&mut self) {
        let mut hashes = [KeyHash(0); GROUP];
        let mut len = 0;
        for slot in hashes.iter_mut() {
            let Some(hash) = self.hashes.next() else {
                break;
            };
            *slot = hash;
            len += 1;
        }
        // The last group may be partial: the answers for its padding are
        // never read.
        self.found = self.filter.contains_group(hashes);
        self.next = 0;
        self.len = len;
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
        if self.next >= self.len {
            self.fill();
        }
        let found = self
            .found
            .get(self.next)
            .copied()
            .filter(|_| self.next < self.len)?;
        self.next += 1;
        Some(found)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let buffered = self.len.saturating_sub(self.next);
        let (low, high) = self.hashes.size_hint();
        (
            low.saturating_add(buffered),
            high.and_then(|high| high.checked_add(buffered)),
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
    /// One full group: locate all, load all, then compare all.
    #[inline(always)]
    fn contains_group(&self, hashes: [KeyHash; GROUP]) -> [bool; GROUP] {
        let locations = hashes.map(|hash| self.locate(hash));
        let buckets = locations.map(|location| self.both_buckets(location));
        let mut found = [false; GROUP];
        for ((found, [primary, alternate]), location) in
            found.iter_mut().zip(&buckets).zip(&locations)
        {
            *found = buckets_contain(primary, alternate, location.fingerprint);
        }
        found
    }

    /// Whether each of `items` may be present, in order, looked up in groups
    /// so that their cache misses overlap (see the [module
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
