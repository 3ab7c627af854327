//! The prefix plan: which filter keys represent a set of CIDR entries.
//!
//! The XDP program probes the filter once per *active prefix length* of the
//! packet's family, longest first, and stops at the first hit; the number of
//! active lengths per family is bounded by a probe budget. A [`KeyPlan`]
//! turns the exact entry set into filter keys for such a program by
//! *controlled prefix expansion*: an entry of length `L` becomes every
//! prefix of length `A` inside it, where `A` is the shortest active length
//! `>= L`. The addresses the keys cover are then exactly the addresses the
//! entries cover.
//!
//! # Choosing the active lengths
//!
//! [`choose_lengths`] picks at most `budget` lengths per family by dynamic
//! programming over the histogram of entry lengths: an entry of length `L`
//! expanded to `A` costs `2^(A-L)` keys, only lengths that entries have are
//! worth activating (moving an active length down to the longest entry
//! length it serves only shrinks the expansion), and the longest entry
//! length must be active. `best[j][i]`, the fewest keys for the entries up to
//! the `i`-th present length with `j` active lengths the longest of which is
//! that length, is `min over p < i of best[j-1][p] + cost(p+1..=i)`. The cost
//! counts keys per entry, so it is an upper bound on the distinct keys when
//! entries overlap. A plan whose expansion exceeds [`PlanLimits::max_keys`]
//! is refused.
//!
//! # Exact updates
//!
//! Entries overlap (a `/16` and a `/24` inside it share keys once expanded to
//! the same length), so every key carries a reference count: the number of
//! entries whose expansion contains it. [`KeyPlan::update`] adds and removes
//! entries and returns the exact [`KeyDiff`]: the keys whose count went from
//! zero to positive (insert them into the filter) and from positive to zero
//! (remove them). A key leaves the filter only when no remaining entry covers
//! it. An update never changes the active lengths: if an added entry is
//! longer than every active length of its family, or would take the plan
//! past its key limit, the update fails with [`PlanError::RebuildNeeded`],
//! changes nothing, and the caller builds a new plan with
//! [`KeyPlan::build`] and swaps the whole filter.
//!
//! # The block prefilter
//!
//! The XDP program first reads, from a per-profile map of coarse address
//! blocks (see `cfxdp::prefilter`), which active lengths have keys
//! in the packet's block, and probes only those. The plan counts, for every
//! bit of that map (a block and a length), the keys that mark it;
//! [`KeyPlan::prefilter`] gives the full map for a new filter,
//! and each [`KeyDiff`] also lists the bits whose count left zero (set them
//! before inserting the keys) and reached zero (clear them after removing
//! the keys; only safe when the plan holds every entry, see [`KeyDiff`]).
//!
//! [`KeyPlan::check`] answers which entries cover an address and compares
//! that with what the filter says, to tell a listed address from a false
//! positive.
//!
//! This module holds no filter, does no I/O and knows nothing of the store
//! or the loader: it maps entries to keys.

mod check;
mod diff;
mod lengths;
mod sharing;

use std::net::IpAddr;

use cfxdp::prefilter::{ipv4_block, ipv6_block, Prefilter, PrefilterBit};
use filter_core::{AddressFamily, NetKey};
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use ipnet::IpNet;

pub use check::{CheckReport, CheckVerdict};
pub use diff::KeyDiff;
use diff::{cancel_common, marked_lengths, BitReferences};
use lengths::expansion_size;
pub use lengths::{choose_lengths, ActiveLengths, PlanLimits, DEFAULT_MAX_KEYS};
pub use sharing::KeySharing;

/// The family of an address.
pub fn family_of_address(address: IpAddr) -> AddressFamily {
    match address {
        IpAddr::V4(_) => AddressFamily::Ipv4,
        IpAddr::V6(_) => AddressFamily::Ipv6,
    }
}

/// The family of a network.
pub fn family_of(net: &IpNet) -> AddressFamily {
    family_of_address(net.addr())
}

/// The prefixes of `address` at each of `lengths` (those longer than the
/// address are skipped).
pub fn prefixes_of(
    address: IpAddr,
    lengths: impl IntoIterator<Item = u8>,
) -> impl Iterator<Item = IpNet> {
    lengths
        .into_iter()
        .filter_map(move |len| IpNet::new(address, len).ok().map(|net| net.trunc()))
}

/// "IPv4" or "IPv6".
pub const fn family_name(family: AddressFamily) -> &'static str {
    match family {
        AddressFamily::Ipv4 => "IPv4",
        AddressFamily::Ipv6 => "IPv6",
    }
}

/// Why a plan cannot be made or changed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The entries expand to more keys than the limit allows.
    #[error(
        "the {} entries expand to {planned} filter keys with at most {budget} probe lengths, \
         over the limit of {limit} keys (raise the key limit or the probe budget, or list \
         fewer or shorter prefixes)",
        family_name(*.family)
    )]
    TooManyKeys {
        /// The family whose expansion is too large (the IPv6 one if both are).
        family: AddressFamily,
        /// Keys the best plan needs (both families up to this one).
        planned: u128,
        /// The family's probe budget.
        budget: usize,
        /// [`PlanLimits::max_keys`].
        limit: u64,
    },
    /// More active lengths than the probe budget.
    #[error(
        "{count} active {} prefix lengths are more than the probe budget of {budget}",
        family_name(*.family)
    )]
    OverBudget {
        /// The family.
        family: AddressFamily,
        /// Its active lengths.
        count: usize,
        /// Its probe budget.
        budget: usize,
    },
    /// A family has entries but a probe budget of zero.
    #[error("there are {} entries but the {} probe budget is 0 lengths", family_name(*.0), family_name(*.0))]
    NoProbeBudget(AddressFamily),
    /// The update needs other active lengths; nothing was changed.
    #[error("a full rebuild of the filter is needed: {0}")]
    RebuildNeeded(RebuildReason),
}

/// Why an update needs a rebuild.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RebuildReason {
    /// An entry is longer than every active length of its family.
    #[error("{net} is longer than every active {} prefix length ({})", family_name(family_of(.net)), describe_lengths(.active))]
    LengthNotActive {
        /// The entry.
        net: IpNet,
        /// The family's active lengths, longest first.
        active: Vec<u8>,
    },
    /// The added entries would take the plan past its key limit.
    #[error("the plan would grow to {keys} filter keys, over the limit of {limit}")]
    TooManyKeys {
        /// Keys after the update (an upper bound).
        keys: u128,
        /// [`PlanLimits::max_keys`].
        limit: u64,
    },
}

fn describe_lengths(lengths: &[u8]) -> String {
    if lengths.is_empty() {
        return "none".to_owned();
    }
    let names: Vec<String> = lengths.iter().map(|len| format!("/{len}")).collect();
    names.join(" ")
}

/// The exact entry set, its active lengths and the reference-counted keys
/// it expands to.
#[derive(Clone, Debug)]
pub struct KeyPlan {
    limits: PlanLimits,
    lengths: ActiveLengths,
    entries: HashSet<IpNet>,
    key_refs: HashMap<NetKey, u32>,
    bit_refs: BitReferences,
}

impl KeyPlan {
    /// Plans `entries` (duplicates ignored) with the best active lengths
    /// within `limits`.
    pub fn build(
        entries: impl IntoIterator<Item = IpNet>,
        limits: PlanLimits,
    ) -> Result<Self, PlanError> {
        let entries: HashSet<IpNet> = entries.into_iter().collect();
        let mut chosen = [Vec::new(), Vec::new()];
        let mut planned = 0u128;
        for (slot, family) in [AddressFamily::Ipv4, AddressFamily::Ipv6]
            .into_iter()
            .enumerate()
        {
            let mut histogram = vec![0u64; usize::from(family.max_prefix_len()) + 1];
            for net in entries.iter().filter(|net| family_of(net) == family) {
                histogram[usize::from(net.prefix_len())] += 1;
            }
            let budget = limits.budget(family);
            let (lengths, keys) =
                choose_lengths(&histogram, budget).ok_or(PlanError::NoProbeBudget(family))?;
            planned = planned.saturating_add(keys);
            if planned > u128::from(limits.max_keys) {
                return Err(PlanError::TooManyKeys {
                    family,
                    planned,
                    budget,
                    limit: limits.max_keys,
                });
            }
            chosen[slot] = lengths;
        }
        let [ipv4, ipv6] = chosen;
        let lengths = ActiveLengths { ipv4, ipv6 };
        Self::with_lengths(entries, lengths, limits)
    }

    /// Plans `entries` with given active lengths (those of a live filter),
    /// for example to resume incremental updates against it.
    pub fn with_lengths(
        entries: impl IntoIterator<Item = IpNet>,
        lengths: ActiveLengths,
        limits: PlanLimits,
    ) -> Result<Self, PlanError> {
        for family in [AddressFamily::Ipv4, AddressFamily::Ipv6] {
            let (count, budget) = (lengths.get(family).len(), limits.budget(family));
            if count > budget {
                return Err(PlanError::OverBudget {
                    family,
                    count,
                    budget,
                });
            }
        }
        let mut plan = Self {
            limits,
            lengths,
            entries: HashSet::new(),
            key_refs: HashMap::new(),
            bit_refs: BitReferences::new(),
        };
        let entries: Vec<IpNet> = entries.into_iter().collect();
        plan.update(&entries, &[])?;
        Ok(plan)
    }

    /// The limits the plan was made with.
    pub fn limits(&self) -> PlanLimits {
        self.limits
    }

    /// The active lengths.
    pub fn lengths(&self) -> &ActiveLengths {
        &self.lengths
    }

    /// The number of entries.
    pub fn entry_count(&self) -> usize {
        self.entries.len()
    }

    /// The number of distinct filter keys.
    pub fn key_count(&self) -> usize {
        self.key_refs.len()
    }

    /// Every filter key, in no particular order, to fill a new filter.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &NetKey> {
        self.key_refs.keys()
    }

    /// How many entries expand to `key` (0 if none).
    pub fn key_references(&self, key: &NetKey) -> u32 {
        self.key_refs.get(key).copied().unwrap_or(0)
    }

    /// How many keys mark the prefilter bit `bit` (0 if none).
    pub fn bit_references(&self, bit: PrefilterBit) -> u32 {
        self.bit_refs
            .counts(bit.family)
            .get(bit.block as usize)
            .and_then(|counts| counts.get(usize::from(bit.length_index)))
            .copied()
            .unwrap_or(0)
    }

    /// The prefilter of every key, to install with a new filter.
    pub fn prefilter(&self) -> Box<Prefilter> {
        let mut prefilter = Box::new(Prefilter::EMPTY);
        for family in [AddressFamily::Ipv4, AddressFamily::Ipv6] {
            let blocks = prefilter.masks_mut(family).iter_mut();
            for (mask, counts) in blocks.zip(self.bit_refs.counts(family)) {
                *mask = marked_lengths(counts);
            }
        }
        prefilter
    }

    /// The active lengths, as positions in the family's length list, that
    /// the prefilter marks in the block of `address`: the lengths the XDP
    /// program probes for it (none: it passes without a probe).
    pub fn prefilter_mask(&self, address: IpAddr) -> u8 {
        let (family, block) = match address {
            IpAddr::V4(v4) => (AddressFamily::Ipv4, ipv4_block(u32::from(v4))),
            IpAddr::V6(v6) => (
                AddressFamily::Ipv6,
                ipv6_block((u128::from(v6) >> 96) as u32),
            ),
        };
        self.bit_refs
            .counts(family)
            .get(block as usize)
            .map_or(0, marked_lengths)
    }

    /// Adds the `added` entries, then removes the `removed` ones, and
    /// returns the filter keys that changed. Adding an entry that is already
    /// there and removing one that is not change nothing. On error the plan
    /// is unchanged.
    pub fn update(&mut self, added: &[IpNet], removed: &[IpNet]) -> Result<KeyDiff, PlanError> {
        // Check every addition before changing anything. Duplicates in
        // `added` are counted twice here: the bound stays an upper bound.
        let mut new_keys = 0u128;
        let mut additions = Vec::with_capacity(added.len());
        for net in added.iter().filter(|net| !self.entries.contains(net)) {
            let target = self.target_of(net)?;
            let size = expansion_size(net.prefix_len(), target).unwrap_or(u128::MAX);
            new_keys = new_keys.saturating_add(size);
            additions.push((*net, target));
        }
        let keys = new_keys.saturating_add(self.key_refs.len() as u128);
        if keys > u128::from(self.limits.max_keys) {
            return Err(PlanError::RebuildNeeded(RebuildReason::TooManyKeys {
                keys,
                limit: self.limits.max_keys,
            }));
        }

        let mut diff = KeyDiff::default();
        self.key_refs
            .reserve(usize::try_from(new_keys).unwrap_or(0));
        self.entries.reserve(additions.len());
        for (net, target) in additions {
            if !self.entries.insert(net) {
                continue;
            }
            for key in expand(net, target) {
                let references = self.key_refs.entry(key).or_insert(0);
                if *references == 0 {
                    diff.insert.push(key);
                    let lengths = self.lengths.get(key.family());
                    self.bit_refs.add(&key, lengths, &mut diff.set_bits);
                }
                *references += 1;
            }
        }
        for net in removed {
            // Every entry has an active length at or above its own.
            let Some(target) = self.lengths.target(family_of(net), net.prefix_len()) else {
                continue;
            };
            if !self.entries.remove(net) {
                continue;
            }
            for key in expand(*net, target) {
                if let Some(references) = self.key_refs.get_mut(&key) {
                    *references -= 1;
                    if *references == 0 {
                        self.key_refs.remove(&key);
                        diff.remove.push(key);
                        let lengths = self.lengths.get(key.family());
                        self.bit_refs.remove(&key, lengths, &mut diff.clear_bits);
                    }
                }
            }
        }
        // Keys (and bits) that an added entry brought in and a removed one
        // took out again were absent before and are absent after.
        cancel_common(&mut diff.insert, &mut diff.remove);
        cancel_common(&mut diff.set_bits, &mut diff.clear_bits);
        Ok(diff)
    }

    /// The active length an entry expands to.
    fn target_of(&self, net: &IpNet) -> Result<u8, PlanError> {
        let family = family_of(net);
        self.lengths
            .target(family, net.prefix_len())
            .ok_or_else(|| {
                PlanError::RebuildNeeded(RebuildReason::LengthNotActive {
                    net: *net,
                    active: self.lengths.get(family).to_vec(),
                })
            })
    }

    /// The keys the XDP program probes for `address`, in probe order.
    pub fn probe_keys(&self, address: IpAddr) -> Vec<NetKey> {
        let family = family_of_address(address);
        let bits = address_bits(&address);
        self.lengths
            .get(family)
            .iter()
            .map(|&len| net_key(family, bits, len))
            .collect()
    }

    /// The entries that contain `address`, longest first.
    pub fn covering_entries(&self, address: IpAddr) -> Vec<IpNet> {
        let max = family_of_address(address).max_prefix_len();
        prefixes_of(address, (0..=max).rev())
            .filter(|net| self.entries.contains(net))
            .collect()
    }

    /// Checks `address`: the entries covering it, and the first of its
    /// probe keys that `filter_contains` (the live filter) reports.
    pub fn check(
        &self,
        address: IpAddr,
        mut filter_contains: impl FnMut(&NetKey) -> bool,
    ) -> CheckReport {
        CheckReport {
            address,
            covering: self.covering_entries(address),
            filter_hit: self
                .probe_keys(address)
                .into_iter()
                .find(|key| filter_contains(key)),
        }
    }
}

/// The keys of length `target` (at least the entry's length, with a
/// countable expansion) inside `net`.
fn expand(net: IpNet, target: u8) -> impl Iterator<Item = NetKey> {
    let family = family_of(&net);
    let network = address_bits(&net.network());
    let count = expansion_size(net.prefix_len(), target).unwrap_or(u128::MAX);
    let step = 1u128
        .checked_shl(u32::from(family.max_prefix_len() - target))
        .unwrap_or(0);
    (0..count).map(move |index| net_key(family, network.wrapping_add(index * step), target))
}

/// An address as a number (IPv4 in the low 32 bits).
fn address_bits(address: &IpAddr) -> u128 {
    match address {
        IpAddr::V4(v4) => u128::from(u32::from(*v4)),
        IpAddr::V6(v6) => u128::from(*v6),
    }
}

/// The key of the prefix of length `len` (valid for `family`) of an address
/// given as a number.
fn net_key(family: AddressFamily, bits: u128, len: u8) -> NetKey {
    let key = match family {
        AddressFamily::Ipv4 => NetKey::ipv4(bits as u32, len),
        AddressFamily::Ipv6 => NetKey::ipv6((bits >> 64) as u64, bits as u64, len),
    };
    key.expect("prefix lengths in a plan are at most the family's address width")
}

#[cfg(test)]
mod tests;
