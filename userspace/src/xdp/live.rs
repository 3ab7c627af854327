//! [`LiveFilter`]: the filter of a loaded or pinned blocklist as the
//! control plane uses it, one type for every [`FilterShape`].
//!
//! It writes plans and diffs into the live table in the order that keeps
//! every listed key visible to the program at every instant:
//!
//! * [`LiveFilter::install`] builds a whole table from a [`KeyPlan`] in
//!   process memory and swaps it in with its profile and block prefilter
//!   in one store;
//! * [`LiveFilter::insert`] sets the new keys' prefilter bits, then inserts
//!   them (`filter-core` writes each relocation's destination before
//!   clearing its source); a full table undoes the call completely, bits
//!   included;
//! * [`LiveFilter::remove`] removes keys; the control plane calls it only
//!   after the store has committed the change, and clears prefilter bits
//!   ([`LiveFilter::clear_bits`]) only after that.
//!
//! A change or lookup of a few keys maps only the pages of the table that
//! hold the keys' candidate buckets ([`FilterTable::from_map_pages`]); an
//! insertion that needs relocations, or many keys, maps the whole table.
//!
//! It also carries the two marks the control plane keeps in the config:
//! the id of the store the filter was built from, and the pid of a process
//! changing the filter right now (a crash leaves it set; see
//! `control::repair`).

use cfxdp::prefilter::{key_bits, Prefilter, PrefilterBit};
use cfxdp::{FilterShape, MalformedAction, Mode, Policy};
use filter_core::layout::locate;
use filter_core::{CuckooFilter, NetKey};

use super::maps::{filter_profile, Counters, FilterMaps};
use super::table::{FilterTable, TableFingerprint};
use super::{Result, XdpError};
use crate::filter::{self, by_shape, FilterFull, TableSummary};
use crate::plan::{ActiveLengths, KeyPlan};

/// The live filter of one blocklist program.
#[derive(Debug)]
pub struct LiveFilter {
    maps: FilterMaps,
}

impl LiveFilter {
    /// The live filter of `maps`.
    pub fn new(maps: FilterMaps) -> Self {
        Self { maps }
    }

    /// The maps underneath, for the data-plane tests and diagnostics.
    pub fn maps(&self) -> &FilterMaps {
        &self.maps
    }

    /// The maps underneath, kept.
    pub fn into_maps(self) -> FilterMaps {
        self.maps
    }

    /// The maps underneath, to change them directly (data-plane tests).
    pub fn maps_mut(&mut self) -> &mut FilterMaps {
        &mut self.maps
    }

    /// The fingerprint shape of the program's tables.
    pub fn shape(&self) -> FilterShape {
        self.maps.shape()
    }

    /// Buckets of every table of the program.
    pub fn bucket_count(&self) -> usize {
        self.maps.bucket_count()
    }

    /// The live table's seed.
    pub fn seed(&self) -> u64 {
        self.maps.live_profile().seed
    }

    /// The live profile's active prefix lengths.
    pub fn lengths(&self) -> ActiveLengths {
        let profile = self.maps.live_profile();
        ActiveLengths::new(
            profile.lengths(filter_core::AddressFamily::Ipv4),
            profile.lengths(filter_core::AddressFamily::Ipv6),
        )
        .unwrap_or_default()
    }

    /// Builds a table keyed with the live seed (the one the program was
    /// loaded with) holding every key of `plan` and makes it live with the
    /// plan's lengths and prefilter, atomically. On error the live filter
    /// is unchanged.
    pub fn install(&mut self, plan: &KeyPlan) -> Result<()> {
        let seed = self.seed();
        by_shape!(self.shape(), install_as(&mut self.maps, plan, seed))
    }

    /// Sets the prefilter bits of `keys`, then inserts them. If the table
    /// fills up, every key this call inserted is removed again and every
    /// bit it set is cleared: the filter is as it was.
    pub fn insert(&mut self, keys: &[NetKey]) -> Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        let lengths = self.lengths();
        let bits: Vec<PrefilterBit> = keys
            .iter()
            .flat_map(|key| key_bits(key, lengths.get(key.family())))
            .collect();
        let newly_set = self.maps.set_prefilter_bits(&bits);
        let inserted = by_shape!(self.shape(), insert_as(&mut self.maps, keys));
        if inserted.is_err() {
            self.maps.clear_prefilter_bits(&newly_set);
        }
        inserted
    }

    /// Removes `keys` (one copy each).
    pub fn remove(&mut self, keys: &[NetKey]) -> Result<()> {
        by_shape!(self.shape(), remove_as(&mut self.maps, keys))
    }

    /// Whether the live filter holds each of `keys` and its prefilter marks
    /// every block of the key (else packets of an unmarked block miss it).
    pub fn contains(&mut self, keys: &[NetKey]) -> Result<Vec<bool>> {
        by_shape!(self.shape(), contains_as(&mut self.maps, keys))
    }

    /// Occupancy of the live table (reads all of it).
    pub fn summary(&mut self) -> Result<TableSummary> {
        by_shape!(self.shape(), summary_as(&mut self.maps))
    }

    /// The live profile's prefilter as it is now.
    pub fn prefilter(&self) -> Box<Prefilter> {
        self.maps.live_prefilter()
    }

    /// Clears `bits` of the live prefilter: only bits no key in the filter
    /// marks.
    pub fn clear_bits(&self, bits: &[PrefilterBit]) {
        self.maps.clear_prefilter_bits(bits);
    }

    /// The live mode.
    pub fn mode(&self) -> Mode {
        self.maps.mode()
    }

    /// The live policy.
    pub fn policy(&self) -> Policy {
        self.maps.policy()
    }

    /// The live action on malformed frames.
    pub fn malformed_action(&self) -> MalformedAction {
        self.maps.malformed_action()
    }

    /// Sets the mode.
    pub fn set_mode(&self, mode: Mode) {
        self.maps.set_mode(mode);
    }

    /// Sets the action on malformed frames.
    pub fn set_malformed_action(&self, action: MalformedAction) {
        self.maps.set_malformed_action(action);
    }

    /// Sets the mode, the policy and the action on malformed frames: every
    /// setting of a verdict that can change while the program runs.
    pub fn set_verdict_settings(&self, mode: Mode, policy: Policy, malformed: MalformedAction) {
        self.maps.set_mode(mode);
        self.maps.set_policy(policy);
        self.maps.set_malformed_action(malformed);
    }

    /// The id of the store the filter was built from (zero: none).
    pub fn store_id(&self) -> u64 {
        self.maps.store_id()
    }

    /// Records the store the filter is built from.
    pub fn set_store_id(&self, id: u64) {
        self.maps.set_store_id(id);
    }

    /// The pid of a process that began changing the filter and has not
    /// finished (zero: none).
    pub fn updating_pid(&self) -> u32 {
        self.maps.updating_pid()
    }

    /// Marks the filter as being changed by this process, until
    /// [`Self::end_update`].
    pub fn begin_update(&self) {
        self.maps.set_updating_pid(std::process::id());
    }

    /// Clears the mark of [`Self::begin_update`].
    pub fn end_update(&self) {
        self.maps.set_updating_pid(0);
    }

    /// Adds `allow` entries (address, prefix length) to the allowlist, then
    /// removes the `disallow` ones; see
    /// [`FilterMaps::update_allowlist`].
    pub fn update_allowlist(
        &mut self,
        allow: &[(std::net::IpAddr, u8)],
        disallow: &[(std::net::IpAddr, u8)],
    ) -> Result<()> {
        self.maps.update_allowlist(allow, disallow)
    }

    /// Makes the allowlist exactly `entries`.
    pub fn set_allowlist(&mut self, entries: &[(std::net::IpAddr, u8)]) -> Result<()> {
        self.maps.set_allowlist(entries)
    }

    /// The counters, summed over CPUs.
    pub fn counters(&self) -> Result<Counters> {
        self.maps.counters()
    }
}

fn install_as<F: TableFingerprint, const S: usize>(
    maps: &mut FilterMaps,
    plan: &KeyPlan,
    seed: u64,
) -> Result<()> {
    let bucket_count = maps.bucket_count();
    let built = filter::build::<F, S>(plan.keys(), bucket_count, seed)?;
    let profile = filter_profile(seed, bucket_count, plan.lengths())?;
    let mut table = FilterTable::<F, S>::create(bucket_count)?;
    table.fill(built.storage())?;
    maps.install(table.map(), &profile, &plan.prefilter())
}

fn insert_as<F: TableFingerprint, const S: usize>(
    maps: &mut FilterMaps,
    keys: &[NetKey],
) -> Result<()> {
    let placed = match few_keys::<F, S>(maps, keys) {
        true => place_in_candidate_buckets::<F, S>(maps, keys)?,
        false => 0,
    };
    if placed == keys.len() {
        return Ok(());
    }
    let mut filter = live_filter::<F, S>(maps, Occupancy::Unknown)?;
    let seed = filter.seed();
    for (inserted, key) in keys.iter().enumerate().skip(placed) {
        if filter.insert_hash(key.hash(seed)).is_err() {
            for undone in keys[..inserted].iter().rev() {
                filter.remove_hash(undone.hash(seed));
            }
            let summary = summary_as::<F, S>(maps)?;
            return Err(XdpError::Full(FilterFull {
                wanted: summary.fingerprints + keys.len(),
                slots: summary.slots,
            }));
        }
    }
    Ok(())
}

/// Inserts `keys` from the first on while one of the key's candidate
/// buckets has a free slot, so that the core places it there without a
/// relocation, in a table mapped only in the pages of those buckets.
/// Returns how many it inserted: the next one needs relocations, which may
/// touch any bucket.
fn place_in_candidate_buckets<F: TableFingerprint, const S: usize>(
    maps: &mut FilterMaps,
    keys: &[NetKey],
) -> Result<usize> {
    let mut filter = candidate_buckets_filter::<F, S>(maps, keys)?;
    let seed = filter.seed();
    Ok(keys
        .iter()
        .take_while(|key| filter.insert_hash_in_place(key.hash(seed)))
        .count())
}

fn remove_as<F: TableFingerprint, const S: usize>(
    maps: &mut FilterMaps,
    keys: &[NetKey],
) -> Result<()> {
    if keys.is_empty() {
        return Ok(());
    }
    let mut filter = filter_for_keys::<F, S>(maps, keys)?;
    let seed = filter.seed();
    for key in keys {
        filter.remove_hash(key.hash(seed));
    }
    Ok(())
}

fn contains_as<F: TableFingerprint, const S: usize>(
    maps: &mut FilterMaps,
    keys: &[NetKey],
) -> Result<Vec<bool>> {
    let profile = maps.live_profile();
    let marked: Vec<bool> = keys
        .iter()
        .map(|key| {
            let lengths = profile.lengths(key.family());
            lengths.contains(&key.prefix_len())
                && key_bits(key, lengths).all(|bit| maps.prefilter_has(bit))
        })
        .collect();
    let filter = filter_for_keys::<F, S>(maps, keys)?;
    let seed = filter.seed();
    Ok(keys
        .iter()
        .zip(marked)
        .map(|(key, marked)| marked && filter.contains_hash(key.hash(seed)))
        .collect())
}

fn summary_as<F: TableFingerprint, const S: usize>(maps: &mut FilterMaps) -> Result<TableSummary> {
    Ok(TableSummary::of(&live_filter::<F, S>(
        maps,
        Occupancy::Counted,
    )?))
}

/// Whether a handle on the live table knows how many fingerprints it holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Occupancy {
    /// Counted: reads every bucket, so every page of the mapping.
    Counted,
    /// Not counted (`len` starts at zero): for updates and lookups, which
    /// touch a few buckets of a table of up to hundreds of megabytes.
    Unknown,
}

/// Whether `keys` are few enough for a table mapped only in their
/// candidate buckets' pages: one page mapped alone costs a system call and
/// a VMA, about as much as a few dozen pages of a whole mapping.
fn few_keys<F: TableFingerprint, const S: usize>(maps: &FilterMaps, keys: &[NetKey]) -> bool {
    const TABLE_PAGES_PER_KEY: usize = 32;
    let table_pages = maps.bucket_count() * S * F::BYTES / super::mapped::page_size();
    keys.len().saturating_mul(TABLE_PAGES_PER_KEY) <= table_pages
}

/// The live table as a filter keyed with the live seed for lookups and
/// removals of `keys`: mapped in their candidate buckets' pages if they
/// are few, else whole.
fn filter_for_keys<F: TableFingerprint, const S: usize>(
    maps: &mut FilterMaps,
    keys: &[NetKey],
) -> Result<CuckooFilter<F, S, FilterTable<F, S>>> {
    match few_keys::<F, S>(maps, keys) {
        true => candidate_buckets_filter(maps, keys),
        false => live_filter(maps, Occupancy::Unknown),
    }
}

/// The live table as a filter keyed with the live seed, mapped only in the
/// pages of `keys`' candidate buckets: only for lookups, removals and
/// insertions without relocations of those keys.
fn candidate_buckets_filter<F: TableFingerprint, const S: usize>(
    maps: &mut FilterMaps,
    keys: &[NetKey],
) -> Result<CuckooFilter<F, S, FilterTable<F, S>>> {
    let seed = maps.live_profile().seed;
    let bucket_mask = maps.bucket_count().saturating_sub(1);
    let buckets: Vec<usize> = keys
        .iter()
        .flat_map(|key| {
            let location = locate::<F>(key.hash(seed), bucket_mask);
            [location.primary, location.alternate]
        })
        .collect();
    keyed(maps.live_table_pages(&buckets)?, seed, Occupancy::Unknown)
}

/// The live table as a filter keyed with the live seed.
fn live_filter<F: TableFingerprint, const S: usize>(
    maps: &mut FilterMaps,
    occupancy: Occupancy,
) -> Result<CuckooFilter<F, S, FilterTable<F, S>>> {
    let seed = maps.live_profile().seed;
    keyed(maps.live_table()?, seed, occupancy)
}

/// `table` as a filter keyed with `seed`.
fn keyed<F: TableFingerprint, const S: usize>(
    table: FilterTable<F, S>,
    seed: u64,
    occupancy: Occupancy,
) -> Result<CuckooFilter<F, S, FilterTable<F, S>>> {
    match occupancy {
        Occupancy::Counted => CuckooFilter::with_storage(table, seed),
        Occupancy::Unknown => CuckooFilter::with_storage_and_len(table, seed, 0),
    }
    .map_err(|error| XdpError::Storage(format!("{error:?}")))
}
