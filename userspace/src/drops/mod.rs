//! Which sources, entries, addresses and interfaces the dropped packets
//! hit: the attribution of the XDP program's sampled drops.
//!
//! A cuckoo filter cannot say which entry matched, and one filter per
//! list would multiply the probes. The program instead hands userspace a
//! bounded, rate-limited sample of its drops ([`cfxdp::DropEvent`]); here
//! each sampled address is looked up in the exact store ([`Covers`]), and
//! every sample takes its share of the program's exact drop counters.
//!
//! * **Estimates.** The samples of one batch share out the exact packets
//!   and bytes the counters of their outcome and family gained since the
//!   batch before: each of `n` samples stands for `1/n` of the packets, and
//!   for a share of the bytes in proportion to its frame's length. A batch
//!   in which the program sampled every drop (it skipped and lost none)
//!   counts each sample as exactly one packet of its frame's length, so
//!   the figures are exact when sampling keeps up. Drops a batch has no
//!   sample for wait for the next batch that has some.
//! * **Origins.** A sample counts for every source of every blocklist
//!   entry that covers its address: an address listed by two sources
//!   counts for both, so the origins' sums may exceed the drops. Drops
//!   that no entry explains have their own origins: [`POLICY_ORIGIN`]
//!   (the allow policy drops everything not allowlisted) and
//!   [`UNLISTED_ORIGIN`] (the filter's false positives, and entries
//!   removed between the drop and its lookup). Malformed frames are
//!   sampled for captures but not attributed.
//! * **Reported origins.** Beside the sources, the drops are counted by
//!   the origin a bouncer reports to CrowdSec ([`OriginNames`]): a source
//!   that knows a finer origin for an entry (the CrowdSec source: the
//!   origin of the decision that speaks for it) names it, and every other
//!   entry counts under its source's name.
//! * **Bounds.** Entries are tallied up to [`MAX_ENTRIES`] (more share
//!   the line [`Attribution::other_entries`]); addresses are kept in a
//!   Filtered Space-Saving top list of [`TOP_ADDRESSES`] (the `topk`
//!   crate), whose counts of the heaviest are exact and of the others an
//!   upper bound.

pub mod capture;
pub mod report;

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use ipnet::IpNet;
use topk::FilteredSpaceSaving;

use crate::store::{Access, DirCheck, ListKind, Store, StoreError};
use crate::{DropEvent, Family, Outcome, ProgramHook, Setting, TrafficDirection, NO_PREFIX};

/// The origin of drops the allow policy made (no entry involved).
pub const POLICY_ORIGIN: &str = "policy";
/// The origin of drops no blocklist entry covers: the filter's false
/// positives, or entries gone before the lookup.
pub const UNLISTED_ORIGIN: &str = "unlisted";
/// Most entries tallied one by one.
pub const MAX_ENTRIES: usize = 1 << 17;
/// Addresses in the top list.
pub const TOP_ADDRESSES: usize = 1024;
/// Most addresses kept resolved between store changes.
const MAX_COVERS: usize = 1 << 16;

/// The origin reported for drops of an entry, where its source knows one
/// finer than its own name.
pub trait OriginNames {
    /// The origin of `net`'s drops, which `source` lists; none to report
    /// the source's name.
    fn origin_of(&self, source: &str, net: &IpNet) -> Option<String>;
}

/// Every entry's drops reported under its source's name.
pub struct SourceNames;

impl OriginNames for SourceNames {
    fn origin_of(&self, _source: &str, _net: &IpNet) -> Option<String> {
        None
    }
}

/// One sampled drop, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// `CLOCK_MONOTONIC` nanoseconds of the drop.
    pub at_ns: u64,
    /// The matched address (none for a malformed frame).
    pub address: Option<IpAddr>,
    /// Its family.
    pub family: Family,
    /// Dropped, would-drop (monitor mode) or malformed.
    pub outcome: Outcome,
    /// The prefix length whose probe hit, if an entry caused the drop.
    pub prefix_len: Option<u8>,
    /// The interface it arrived on, or left by.
    pub ifindex: u32,
    /// Whether it arrived or left.
    pub direction: TrafficDirection,
    /// The hook of the program that dropped it.
    pub hook: ProgramHook,
    /// The frame's whole length.
    pub frame_len: u32,
}

impl Sample {
    /// Decodes an event; none if its family, outcome, direction or hook is
    /// not one this build knows.
    pub fn from_event(event: &DropEvent) -> Option<Self> {
        let family = Family::from_u32(event.family.into())?;
        let outcome = Outcome::from_u32(event.outcome.into())?;
        let direction = TrafficDirection::from_u32(event.direction.into())?;
        let hook = ProgramHook::from_u32(event.hook.into())?;
        let address = match family {
            _ if outcome == Outcome::Malformed => None,
            Family::Ipv4 => {
                let [a, b, c, d, ..] = event.address;
                Some(IpAddr::V4(Ipv4Addr::new(a, b, c, d)))
            }
            Family::Ipv6 => Some(IpAddr::V6(Ipv6Addr::from(event.address))),
            Family::Other => None,
        };
        Some(Self {
            at_ns: event.timestamp_ns,
            address,
            family,
            outcome,
            prefix_len: (event.prefix_len != NO_PREFIX).then_some(event.prefix_len),
            ifindex: event.ifindex,
            direction,
            hook,
            frame_len: event.frame_len,
        })
    }

    /// Whether its drop is shared out (dropped or would-drop, with an
    /// address).
    fn attributed(&self) -> bool {
        self.address.is_some() && shared_out(self.outcome)
    }
}

/// Whether the drops of `outcome` are shared out among their samples.
fn shared_out(outcome: Outcome) -> bool {
    matches!(outcome, Outcome::Dropped | Outcome::WouldDrop)
}

/// A blocklist entry covering an address, and the sources listing it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cover {
    /// The entry.
    pub net: IpNet,
    /// Its sources' names.
    pub sources: Vec<String>,
}

/// The blocklist entries covering the addresses seen, looked up in the
/// store once per address until [`Covers::forget`] (the store changed).
#[derive(Debug, Default)]
pub struct Covers {
    resolved: HashMap<IpAddr, Vec<Cover>>,
}

impl Covers {
    /// Looks up, in one read of `store`, the addresses of `samples` not
    /// resolved yet.
    pub fn resolve(&mut self, store: &Store, samples: &[Sample]) -> Result<(), StoreError> {
        let mut missing: Vec<IpAddr> = samples
            .iter()
            .filter_map(|sample| sample.address)
            .filter(|address| !self.resolved.contains_key(address))
            .collect();
        missing.sort_unstable();
        missing.dedup();
        if missing.is_empty() {
            return Ok(());
        }
        if self.resolved.len() + missing.len() > MAX_COVERS {
            self.resolved.clear();
        }
        let covering = store.covering(ListKind::Blocklist, &missing)?;
        for (address, entries) in missing.into_iter().zip(covering) {
            let covers = entries
                .into_iter()
                .map(|entry| {
                    let mut sources: Vec<String> = entry
                        .sources
                        .into_iter()
                        .map(|member| member.source)
                        .collect();
                    sources.dedup();
                    Cover {
                        net: entry.net,
                        sources,
                    }
                })
                .collect();
            self.resolved.insert(address, covers);
        }
        Ok(())
    }

    /// [`Covers::resolve`] with the store in `state_dir` opened read-only
    /// for the lookup; false (nothing looked up) while another process
    /// holds it for writing, or while it does not exist yet.
    pub fn resolve_from(
        &mut self,
        state_dir: &Path,
        check: DirCheck,
        samples: &[Sample],
    ) -> Result<bool, StoreError> {
        let unresolved = samples
            .iter()
            .filter_map(|sample| sample.address)
            .any(|address| !self.resolved.contains_key(&address));
        if !unresolved {
            return Ok(true);
        }
        if !state_dir.join(Store::FILE_NAME).exists() {
            return Ok(false);
        }
        match Store::open_with(state_dir, Access::ReadOnly, check) {
            Ok(store) => self.resolve(&store, samples).map(|()| true),
            Err(StoreError::Busy { .. }) => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// The entries covering `address`, if it was resolved.
    pub fn get(&self, address: IpAddr) -> Option<&[Cover]> {
        self.resolved.get(&address).map(Vec::as_slice)
    }

    /// Forgets every lookup: the store changed.
    pub fn forget(&mut self) {
        self.resolved.clear();
    }
}

/// Estimated drops: packets and bytes (fractional while sampled), and
/// the samples they come from.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Estimate {
    /// Packets.
    pub packets: f64,
    /// Bytes.
    pub bytes: f64,
    /// Samples.
    pub sampled: u64,
}

impl Estimate {
    fn add(&mut self, share: Share) {
        self.packets += share.packets;
        self.bytes += share.bytes;
        self.sampled += 1;
    }
}

/// What one sample stands for.
#[derive(Clone, Copy, Debug)]
struct Share {
    packets: f64,
    bytes: f64,
}

/// The drops one origin made, of one outcome and family.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OriginKey {
    /// A source's name, [`POLICY_ORIGIN`] or [`UNLISTED_ORIGIN`].
    pub origin: String,
    /// Dropped or would-drop.
    pub outcome: Outcome,
    /// IPv4 or IPv6.
    pub family: Family,
}

/// One entry's drops.
#[derive(Clone, Debug, PartialEq)]
pub struct EntryDrops {
    /// The sources listing it (as of its first sample).
    pub sources: Vec<String>,
    /// Its drops.
    pub estimate: Estimate,
}

/// What the blocklist did since the agent started, in the terms of a
/// CrowdSec bouncer's usage metrics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Remediation {
    /// Dropped packets and bytes by reported origin ([`OriginNames`]) and
    /// family (estimates, exact while the sampling keeps up).
    pub dropped: BTreeMap<(String, Family), Estimate>,
    /// Every IPv4 and IPv6 packet the program saw, by family (exact).
    pub processed: BTreeMap<Family, Exact>,
}

/// The exact packets and bytes of one (outcome, family) counter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Exact {
    /// Packets.
    pub packets: u64,
    /// Bytes.
    pub bytes: u64,
}

/// Where drops happened: an interface, which way, on which hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct InterfaceKey {
    /// The interface's index.
    pub ifindex: u32,
    /// Arriving or leaving.
    pub direction: TrafficDirection,
    /// The dropping program's hook.
    pub hook: ProgramHook,
}

/// Cumulative drop estimates by origin, entry, address and interface,
/// since the attribution started.
pub struct Attribution {
    /// The exact counters as of the last batch.
    counted: HashMap<(Outcome, Family), Exact>,
    /// Exact drops no batch had a sample for yet.
    owed: HashMap<(Outcome, Family), Exact>,
    /// Drops the program skipped or lost, as of the last batch.
    unsampled: u64,
    origins: BTreeMap<OriginKey, Estimate>,
    /// By the origins [`OriginNames`] reports.
    reported: BTreeMap<OriginKey, Estimate>,
    entries: HashMap<IpNet, EntryDrops>,
    other_entries: Estimate,
    addresses: FilteredSpaceSaving<IpAddr>,
    interfaces: BTreeMap<InterfaceKey, Estimate>,
    sampled: u64,
}

impl std::fmt::Debug for Attribution {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Attribution")
            .field("origins", &self.origins)
            .field("entries", &self.entries.len())
            .field("sampled", &self.sampled)
            .finish_non_exhaustive()
    }
}

impl Attribution {
    /// Starts from the program's exact counters now (`counters` by outcome
    /// and family) and its count of drops it skipped or lost: only drops
    /// after this are shared out.
    pub fn new(
        counters: impl IntoIterator<Item = ((Outcome, Family), Exact)>,
        unsampled: u64,
    ) -> Self {
        Self {
            counted: counters.into_iter().collect(),
            owed: HashMap::new(),
            unsampled,
            origins: BTreeMap::new(),
            reported: BTreeMap::new(),
            entries: HashMap::new(),
            other_entries: Estimate::default(),
            addresses: FilteredSpaceSaving::new(TOP_ADDRESSES),
            interfaces: BTreeMap::new(),
            sampled: 0,
        }
    }

    /// Shares out the drops since the last batch among `samples`, whose
    /// addresses `covers` has resolved, given the exact counters and the
    /// count of unsampled drops now; `names` gives the reported origins.
    pub fn record(
        &mut self,
        samples: &[Sample],
        covers: &Covers,
        counters: impl IntoIterator<Item = ((Outcome, Family), Exact)>,
        unsampled: u64,
        names: &dyn OriginNames,
    ) {
        let every_drop_sampled = unsampled == self.unsampled;
        self.unsampled = unsampled;
        for (group, now) in counters
            .into_iter()
            .filter(|((outcome, _), _)| shared_out(*outcome))
        {
            let before = self.counted.insert(group, now).unwrap_or_default();
            let owed = self.owed.entry(group).or_default();
            owed.packets += now.packets.saturating_sub(before.packets);
            owed.bytes += now.bytes.saturating_sub(before.bytes);
        }
        let mut groups: HashMap<(Outcome, Family), (u64, u64)> = HashMap::new();
        for sample in samples.iter().filter(|sample| sample.attributed()) {
            let (count, bytes) = groups.entry((sample.outcome, sample.family)).or_default();
            *count += 1;
            *bytes += u64::from(sample.frame_len);
        }
        let mut shares = HashMap::new();
        for (group, (count, frame_bytes)) in groups {
            let owed = self.owed.entry(group).or_default();
            let share = if every_drop_sampled {
                // Each sample is its own drop: the counters' gain is paid.
                owed.packets = owed.packets.saturating_sub(count);
                owed.bytes = owed.bytes.saturating_sub(frame_bytes);
                None
            } else {
                let owed = std::mem::take(owed);
                Some(Share {
                    packets: owed.packets as f64 / count as f64,
                    bytes: owed.bytes as f64 / frame_bytes.max(1) as f64,
                })
            };
            shares.insert(group, share);
        }
        for sample in samples.iter().filter(|sample| sample.attributed()) {
            let share = match shares
                .get(&(sample.outcome, sample.family))
                .copied()
                .flatten()
            {
                Some(per) => Share {
                    packets: per.packets,
                    bytes: per.bytes * f64::from(sample.frame_len),
                },
                None => Share {
                    packets: 1.0,
                    bytes: f64::from(sample.frame_len),
                },
            };
            self.count(sample, covers, share, names);
        }
    }

    fn count(&mut self, sample: &Sample, covers: &Covers, share: Share, names: &dyn OriginNames) {
        let Some(address) = sample.address else {
            return;
        };
        self.sampled += 1;
        let covering = match sample.prefix_len {
            Some(_) => covers.get(address).unwrap_or_default(),
            None => &[],
        };
        let unexplained = match sample.prefix_len {
            None => POLICY_ORIGIN,
            Some(_) => UNLISTED_ORIGIN,
        };
        let sources = covering
            .iter()
            .flat_map(|cover| cover.sources.iter().cloned());
        let reported = covering.iter().flat_map(|cover| {
            cover.sources.iter().map(|source| {
                names
                    .origin_of(source, &cover.net)
                    .unwrap_or_else(|| source.clone())
            })
        });
        for (tally, origins) in [
            (&mut self.origins, sources.collect::<Vec<_>>()),
            (&mut self.reported, reported.collect()),
        ] {
            let mut origins = origins;
            origins.sort_unstable();
            origins.dedup();
            if origins.is_empty() {
                origins.push(unexplained.to_owned());
            }
            for origin in origins {
                tally
                    .entry(OriginKey {
                        origin,
                        outcome: sample.outcome,
                        family: sample.family,
                    })
                    .or_default()
                    .add(share);
            }
        }
        for cover in covering {
            let room = self.entries.len() < MAX_ENTRIES;
            match self.entries.get_mut(&cover.net) {
                Some(entry) => entry.estimate.add(share),
                None if room => {
                    let mut estimate = Estimate::default();
                    estimate.add(share);
                    self.entries.insert(
                        cover.net,
                        EntryDrops {
                            sources: cover.sources.clone(),
                            estimate,
                        },
                    );
                }
                None => self.other_entries.add(share),
            }
        }
        self.addresses.insert(address, 1);
        self.interfaces
            .entry(InterfaceKey {
                ifindex: sample.ifindex,
                direction: sample.direction,
                hook: sample.hook,
            })
            .or_default()
            .add(share);
    }

    /// Drops by origin, outcome and family.
    pub fn origins(&self) -> &BTreeMap<OriginKey, Estimate> {
        &self.origins
    }

    /// Drops by reported origin ([`OriginNames`]), outcome and family.
    pub fn reported_origins(&self) -> &BTreeMap<OriginKey, Estimate> {
        &self.reported
    }

    /// Drops by entry (at most [`MAX_ENTRIES`] of them).
    pub fn entries(&self) -> &HashMap<IpNet, EntryDrops> {
        &self.entries
    }

    /// Drops of entries past [`MAX_ENTRIES`].
    pub fn other_entries(&self) -> Estimate {
        self.other_entries
    }

    /// Drops by interface index, direction and hook.
    pub fn interfaces(&self) -> &BTreeMap<InterfaceKey, Estimate> {
        &self.interfaces
    }

    /// Samples attributed so far.
    pub fn sampled(&self) -> u64 {
        self.sampled
    }

    /// The `count` addresses sampled most, with their samples, most first.
    pub fn top_addresses(&self, count: usize) -> Vec<(IpAddr, u64)> {
        let mut top: Vec<(IpAddr, u64)> = self
            .addresses
            .iter()
            .map(|(address, counter)| (*address, counter.estimated_count()))
            .collect();
        top.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        top.truncate(count);
        top
    }
}

#[cfg(test)]
mod tests;
