//! The exact diff of a small blocklist change, planned from the committed
//! entries around it rather than from the whole list: which keys the live
//! filter gains and loses, and which prefilter bits no entry needs any
//! more. A bulk change, or one that needs other lengths, gets no diff: the
//! update path ([`super::update`]) swaps in whole tables instead.

use foldhash::{HashSet, HashSetExt};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use cfxdp::prefilter::{ipv6_block_of_byte, PrefilterBit};
use filter_core::AddressFamily;
use ipnet::{IpNet, Ipv6Net};

use super::error::Result;
use crate::plan::{
    prefixes_of, ActiveLengths, KeyDiff, KeyPlan, KeySharing, PlanError, PlanLimits,
};
use crate::store::{ListKind, Store, ROWS_PER_LOOKUP};

/// Changes of at least this many entries, and more than a
/// [`BULK_SHARE`]th of the list, build a new table and swap it in (one
/// copy into the map) rather than writing each key into the live one.
pub const BULK_ENTRIES: usize = 50_000;
/// A change of at most this share of the list (1/N of its entries) is
/// written key by key however large: a feed refresh that changes 10^5 of
/// 10^6 entries costs its own keys, not a rebuild of the whole table.
pub const BULK_SHARE: usize = 4;
/// The most networks an exact update looks up one by one.
const MAX_CANDIDATES: usize = 1 << 20;

/// The exact diff of a blocklist change that adds `added` and removes
/// `removed` (networks the list gains and loses as a whole) under the live
/// `lengths`, planned from the committed entries around it; `None` for a
/// bulk change (at least [`BULK_ENTRIES`] and more than a [`BULK_SHARE`]th
/// of the list) or one that needs other lengths: whole tables then.
pub(super) fn planned_diff(
    store: &Store,
    added: &[IpNet],
    removed: &[IpNet],
    lengths: &ActiveLengths,
    limits: PlanLimits,
) -> Result<Option<KeyDiff>> {
    let changed = added.len() + removed.len();
    let listed = usize::try_from(store.entry_count(ListKind::Blocklist)?).unwrap_or(usize::MAX);
    if changed >= BULK_ENTRIES && changed.saturating_mul(BULK_SHARE) > listed {
        return Ok(None);
    }
    let Some(mut plan) = plan_around(store, added, removed, listed, lengths, limits)? else {
        return Ok(None);
    };
    match plan.update(added, removed) {
        Ok(mut diff) => {
            // Should the check fail, the bits stay set, which only costs
            // probes.
            diff.clear_bits =
                unmarked_bits(store, &diff.clear_bits, removed, listed, lengths, limits)
                    .unwrap_or_default();
            Ok(Some(diff))
        }
        Err(PlanError::RebuildNeeded(_)) => Ok(None),
        Err(error) => Err(error.into()),
    }
}

/// A plan of the committed entries that can share a filter key with a
/// change of `added` and `removed` under the live `lengths`
/// ([`KeySharing`]): enough for an exact diff of that change. A small
/// change looks its candidates up; one whose candidates would outnumber a
/// [`ROWS_PER_LOOKUP`]th of the `listed` entries reads the list once
/// instead. `None` when the plan needs other lengths (then the caller
/// rebuilds from the whole store).
fn plan_around(
    store: &Store,
    added: &[IpNet],
    removed: &[IpNet],
    listed: usize,
    lengths: &ActiveLengths,
    limits: PlanLimits,
) -> Result<Option<KeyPlan>> {
    let sharing = KeySharing::new(added.iter().chain(removed).copied(), lengths);
    let max_lookups = listed / usize::try_from(ROWS_PER_LOOKUP).unwrap_or(usize::MAX);
    let stored = match sharing.candidates(max_lookups.min(MAX_CANDIDATES)) {
        Some(candidates) => store.existing(ListKind::Blocklist, candidates)?,
        None => store.nets_where(ListKind::Blocklist, |net| sharing.shares(net))?,
    };
    match KeyPlan::with_lengths(stored, lengths.clone(), limits) {
        Ok(plan) => Ok(Some(plan)),
        Err(PlanError::RebuildNeeded(_)) => Ok(None),
        Err(error) => Err(error.into()),
    }
}

/// Those of `candidates`, the prefilter bits that a plan of the entries
/// around a change no longer needs, that no entry needs once the change is
/// committed: each is checked against a plan of every entry that can mark
/// it, read from the store before the change, without the `removed` ones
/// (an entry the change adds never marks a candidate: the plan counted
/// its keys). For an IPv4 bit (one /16 block) those are the entries inside
/// the block and the prefixes that contain it; for an IPv6 bit, the same
/// for the one /32 block of its byte in each first 16-bit group the list
/// holds ([`ipv6_markers`]). Every bit is checked exactly, at any list
/// size. Planned beside the store's writes, so a large refresh does not
/// wait for these reads after its commit.
fn unmarked_bits(
    store: &Store,
    candidates: &[PrefilterBit],
    removed: &[IpNet],
    listed: usize,
    lengths: &ActiveLengths,
    limits: PlanLimits,
) -> Result<Vec<PrefilterBit>> {
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    let mut markers = HashSet::new();
    let mut ipv4_blocks = HashSet::new();
    let mut ipv6_bytes = HashSet::new();
    // Blocks share their shorter prefixes: each is looked up once.
    let mut containing = HashSet::new();
    for bit in candidates {
        match bit.family {
            AddressFamily::Ipv4 => {
                if ipv4_blocks.insert(bit.block) {
                    let first = IpAddr::V4(Ipv4Addr::from(bit.block << 16));
                    let block = IpNet::new_assert(first, 16);
                    containing.extend(prefixes_of(first, 0..16));
                    markers.extend(store.nets_within(ListKind::Blocklist, &block)?);
                }
            }
            AddressFamily::Ipv6 => {
                ipv6_bytes.insert(bit.block);
            }
        }
    }
    if !ipv6_bytes.is_empty() {
        markers.extend(ipv6_markers(store, &ipv6_bytes, listed, &mut containing)?);
    }
    markers.extend(store.existing(ListKind::Blocklist, containing)?);
    for net in removed {
        markers.remove(net);
    }
    let plan = KeyPlan::with_lengths(markers, lengths.clone(), limits)?;
    Ok(candidates
        .iter()
        .copied()
        .filter(|&bit| plan.bit_references(bit) == 0)
        .collect())
}

/// Range reads and lookups that finding the markers of `bytes` costs per
/// first group: the group's seek, and per byte the range read of its /32
/// block and the lookups of the block's prefixes from /16 to /31; the
/// group's 16 shorter prefixes, which its blocks share.
fn lookups_per_group(bytes: usize) -> usize {
    bytes.saturating_mul(1 + 16).saturating_add(1 + 16)
}

/// The IPv6 entries that can mark a byte of `bytes` (IPv6 prefilter
/// blocks), with the prefixes that may be entries that contain them added
/// to `containing`. The blocks of byte `b` are `X:Y::/32` with `Y = b ^
/// mix(X)` for each first group `X` ([`cfxdp::prefilter::ipv6_block`]),
/// so the first groups of the list's IPv6 entries, found by skipping
/// through the ordered store (few in real lists: RIR allocations), give
/// every block: the entries inside each, and the prefixes containing it.
/// When those reads would cost more than one ordered pass over the
/// `listed` entries ([`ROWS_PER_LOOKUP`] rows a lookup), every IPv6 entry
/// is read once instead: exact either way, and bounded by the cheaper.
fn ipv6_markers(
    store: &Store,
    bytes: &HashSet<u32>,
    listed: usize,
    containing: &mut HashSet<IpNet>,
) -> Result<Vec<IpNet>> {
    let every_ipv6 = IpNet::V6(Ipv6Net::default());
    let max_lookups = listed / usize::try_from(ROWS_PER_LOOKUP).unwrap_or(usize::MAX);
    let max_groups = max_lookups / lookups_per_group(bytes.len());
    let groups = match max_groups {
        0 => None,
        _ => store.prefixes_present(ListKind::Blocklist, &every_ipv6, 16, max_groups)?,
    };
    let Some(groups) = groups else {
        return Ok(store.nets_within(ListKind::Blocklist, &every_ipv6)?);
    };
    let mut markers = Vec::new();
    for group in groups {
        let IpAddr::V6(first) = group.network() else {
            continue;
        };
        let first_group = first.segments()[0];
        for &byte in bytes {
            let block = ipv6_block_of_byte(first_group, byte);
            let address = IpAddr::V6(Ipv6Addr::from(u128::from(block) << 96));
            containing.extend(prefixes_of(address, 0..32));
            markers
                .extend(store.nets_within(ListKind::Blocklist, &IpNet::new_assert(address, 32))?);
        }
    }
    Ok(markers)
}
