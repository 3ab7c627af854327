//! The maps of a loaded or pinned blocklist ([`FilterMaps`]): the
//! mmapped config with its two profiles, the outer map of filter tables
//! and the atomic swap between them, and the per-CPU counters. The block
//! prefilter, the allowlist tries and the sampled drops are in their own
//! modules ([`super::prefilter`], [`super::allowlist`], [`super::sampling`]).
//!
//! The config is changed one aligned field at a time with atomic stores,
//! which the program reads once per packet; see the [module
//! documentation](super) for the table swap.

use std::mem::{offset_of, size_of};
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::Duration;

use aya::maps::{ArrayOfMaps, Map, MapData, MapError, PerCpuArray};
use aya::Ebpf;
use cfxdp::prefilter::{skip_bit, Prefilter};
use cfxdp::{
    counter_index, Config, Counter, Family, FilterProfile, FilterShape, MalformedAction, Mode,
    Outcome, Policy, Setting, TrafficDirection, ABI_VERSION, ALLOW_V4_MAP, ALLOW_V6_MAP,
    CONFIG_MAP, COUNTERS_MAP, DROP_EVENTS_MAP, MAX_PREFIX_LENGTHS, PREFILTER_MAP, PROFILE_COUNT,
    SAMPLERS_MAP,
};
use filter_core::AddressFamily;

use super::mapped::map_value;
use super::mapped::{MappedMap, MappedValue};
use super::table::{FilterTable, TableFingerprint};
use super::{Result, XdpError};
use crate::plan::ActiveLengths;

/// How long a profile slot is left alone after it stopped being live: far
/// longer than any run of the program, so no packet still reads it.
const GRACE_PERIOD: Duration = Duration::from_millis(2);

/// Bytes of a loaded program's block prefilters (one per profile), whatever
/// the size of its filter.
pub const PREFILTER_BYTES: usize = PROFILE_COUNT * size_of::<Prefilter>();

/// A filter profile for a table of `bucket_count` buckets keyed with
/// `seed`, probing `lengths` (longest first, as [`ActiveLengths`] keeps
/// them); an error if a family has more lengths than the program probes.
pub fn filter_profile(
    seed: u64,
    bucket_count: usize,
    lengths: &ActiveLengths,
) -> Result<FilterProfile> {
    let probe_order = |family: AddressFamily| -> Result<([u8; MAX_PREFIX_LENGTHS], u32)> {
        let active = lengths.get(family);
        let mut order = [0u8; MAX_PREFIX_LENGTHS];
        order
            .get_mut(..active.len())
            .ok_or(XdpError::TooManyLengths {
                family,
                count: active.len(),
            })?
            .copy_from_slice(active);
        Ok((order, active.len() as u32))
    };
    let (ipv4_lengths, ipv4_length_count) = probe_order(AddressFamily::Ipv4)?;
    let (ipv6_lengths, ipv6_length_count) = probe_order(AddressFamily::Ipv6)?;
    Ok(FilterProfile {
        seed,
        bucket_mask: bucket_count.saturating_sub(1) as u32,
        ipv4_length_count,
        ipv6_length_count,
        ipv4_lengths,
        ipv6_lengths,
        prefilter_skipped: 0,
    })
}

/// `profile` with `prefilter_skipped` set for the families whose
/// prefilter does not pay for its read ([`Prefilter::pays`]).
fn with_prefilter_decision(profile: &FilterProfile, prefilter: &Prefilter) -> FilterProfile {
    let skipped = [
        (AddressFamily::Ipv4, profile.ipv4_length_count),
        (AddressFamily::Ipv6, profile.ipv6_length_count),
    ]
    .into_iter()
    .filter(|&(family, count)| !prefilter.pays(family, count))
    .fold(0, |skipped, (family, _)| skipped | skip_bit(family));
    FilterProfile {
        prefilter_skipped: skipped,
        ..*profile
    }
}

/// Packets and bytes per direction, outcome and family, summed over CPUs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    values: Vec<Counter>,
}

impl Counters {
    /// The counter of `outcome` for `family` in `direction`.
    pub fn get_in(&self, direction: TrafficDirection, outcome: Outcome, family: Family) -> Counter {
        self.values
            .get(counter_index(direction, outcome, family) as usize)
            .copied()
            .unwrap_or_default()
    }

    /// The counter of `outcome` for `family`, both directions together.
    pub fn get(&self, outcome: Outcome, family: Family) -> Counter {
        TrafficDirection::ALL
            .iter()
            .map(|&direction| self.get_in(direction, outcome, family))
            .fold(Counter::default(), |sum, counter| Counter {
                packets: sum.packets + counter.packets,
                bytes: sum.bytes + counter.bytes,
            })
    }
}

/// The maps of a loaded or pinned blocklist.
#[derive(Debug)]
pub struct FilterMaps {
    shape: FilterShape,
    bucket_count: usize,
    config: MappedValue<Config>,
    config_map: Map,
    filters: Map,
    pub(super) prefilters: MappedMap,
    prefilter_map: Map,
    counters: Map,
    pub(super) drop_events: Map,
    pub(super) samplers: Map,
    pub(super) allow_v4: Map,
    pub(super) allow_v6: Map,
}

/// The maps a program that takes over from another one shares with it
/// ([`FilterMaps::shared`]): the counters, the ring of sampled drops and
/// the samplers, so that counts and readers go on across the switch.
#[derive(Clone, Copy, Debug)]
pub struct SharedMaps<'maps> {
    /// The per-CPU counters.
    pub counters: &'maps MapData,
    /// The ring of sampled drops.
    pub drop_events: &'maps MapData,
    /// The per-CPU samplers.
    pub samplers: &'maps MapData,
}

impl SharedMaps<'_> {
    /// Each map with its name.
    pub fn named(&self) -> [(&'static str, &MapData); 3] {
        [
            (COUNTERS_MAP, self.counters),
            (DROP_EVENTS_MAP, self.drop_events),
            (SAMPLERS_MAP, self.samplers),
        ]
    }
}

impl FilterMaps {
    pub(super) fn take(ebpf: &mut Ebpf, shape: FilterShape, bucket_count: usize) -> Result<Self> {
        Self::assemble(shape, Some(bucket_count), |name| {
            ebpf.take_map(name).ok_or(XdpError::MissingMap(name))
        })
    }

    /// `bucket_count`: the tables' size, or `None` to take it from the live
    /// profile; `map`: the map of a name.
    fn assemble(
        shape: FilterShape,
        bucket_count: Option<usize>,
        mut map: impl FnMut(&'static str) -> Result<Map>,
    ) -> Result<Self> {
        let config_map = map(CONFIG_MAP)?;
        let filters = map(shape.outer_map())?;
        let prefilter_map = map(PREFILTER_MAP)?;
        let counters = map(COUNTERS_MAP)?;
        let drop_events = map(DROP_EVENTS_MAP)?;
        let samplers = map(SAMPLERS_MAP)?;
        let allow_v4 = map(ALLOW_V4_MAP)?;
        let allow_v6 = map(ALLOW_V6_MAP)?;
        let config: MappedValue<Config> = map_value(&config_map, CONFIG_MAP)?;
        if bucket_count.is_none() && config.read().abi_version != ABI_VERSION {
            return Err(XdpError::OtherAbi {
                found: config.read().abi_version,
            });
        }
        let Map::Array(prefilter_data) = &prefilter_map else {
            return Err(XdpError::MissingMap(PREFILTER_MAP));
        };
        let prefilters =
            MappedMap::new(prefilter_data.fd().as_fd(), PREFILTER_BYTES).map_err(|source| {
                XdpError::Mmap {
                    name: PREFILTER_MAP,
                    source,
                }
            })?;
        let bucket_count = bucket_count.unwrap_or_else(|| {
            let live = config.read();
            live.profiles[live.active_profile as usize % PROFILE_COUNT].bucket_mask as usize + 1
        });
        Ok(Self {
            shape,
            bucket_count,
            config,
            config_map,
            filters,
            prefilters,
            prefilter_map,
            counters,
            drop_events,
            samplers,
            allow_v4,
            allow_v6,
        })
    }

    /// Opens the maps pinned by [`Self::pin`] in `dir`.
    pub fn open_pinned(dir: &Path) -> Result<Self> {
        let shape = FilterShape::ALL
            .into_iter()
            .find(|shape| dir.join(shape.outer_map()).exists())
            .ok_or_else(|| XdpError::NoPinnedFilter(dir.to_owned()))?;
        let open = |name: &str| {
            let path = dir.join(name);
            MapData::from_pin(&path)
                .and_then(Map::from_map_data)
                .map_err(|source| XdpError::OpenPinned { path, source })
        };
        Self::assemble(shape, None, open)
    }

    /// Pins every map in `dir` under its name (`CONFIG`, `PREFILTERS`,
    /// `COUNTERS`, `DROP_EVENTS`, `SAMPLERS`, `ALLOW_V4`, `ALLOW_V6` and
    /// the shape's `FILTERS_FP*`).
    pub fn pin(&self, dir: &Path) -> Result<()> {
        for (name, map) in [
            (CONFIG_MAP, &self.config_map),
            (self.shape.outer_map(), &self.filters),
            (PREFILTER_MAP, &self.prefilter_map),
            (COUNTERS_MAP, &self.counters),
            (DROP_EVENTS_MAP, &self.drop_events),
            (SAMPLERS_MAP, &self.samplers),
            (ALLOW_V4_MAP, &self.allow_v4),
            (ALLOW_V6_MAP, &self.allow_v6),
        ] {
            let path = dir.join(name);
            map.pin(&path)
                .map_err(|source| XdpError::Pin { path, source })?;
        }
        Ok(())
    }

    /// The maps to hand to a program that takes over
    /// ([`super::FilterProgram::load_sharing`]).
    pub fn shared(&self) -> Result<SharedMaps<'_>> {
        let counters = match &self.counters {
            Map::PerCpuArray(data) => data,
            _ => return Err(XdpError::MissingMap(COUNTERS_MAP)),
        };
        let drop_events = match &self.drop_events {
            Map::RingBuf(data) => data,
            _ => return Err(XdpError::MissingMap(DROP_EVENTS_MAP)),
        };
        let samplers = match &self.samplers {
            Map::PerCpuArray(data) => data,
            _ => return Err(XdpError::MissingMap(SAMPLERS_MAP)),
        };
        Ok(SharedMaps {
            counters,
            drop_events,
            samplers,
        })
    }

    /// Buckets of every filter table of the program.
    pub fn bucket_count(&self) -> usize {
        self.bucket_count
    }

    /// The filter shape the program was built for.
    pub fn shape(&self) -> FilterShape {
        self.shape
    }

    /// The config as it is now.
    pub fn config(&self) -> Config {
        self.config.read()
    }

    /// The live profile.
    pub fn live_profile(&self) -> FilterProfile {
        let config = self.config();
        config.profiles[config.active_profile as usize % PROFILE_COUNT]
    }

    pub(super) fn fields(&self) -> &MappedMap {
        self.config.fields()
    }

    pub(super) fn store_config_u32(&self, offset: usize, value: u32) {
        if let Some(field) = self.fields().atomic_u32(offset) {
            field.store(value, Ordering::Release);
        }
    }

    pub(super) fn store_config_u64(&self, offset: usize, value: u64) {
        if let Some(field) = self.fields().atomic_u64(offset) {
            field.store(value, Ordering::Release);
        }
    }

    /// Switches between enforce and monitor mode.
    pub fn set_mode(&self, mode: Mode) {
        self.store_config_u32(offset_of!(Config, mode), mode.to_u32());
    }

    /// Switches between deny and allow policy.
    pub fn set_policy(&self, policy: Policy) {
        self.store_config_u32(offset_of!(Config, policy), policy.to_u32());
    }

    /// Chooses what happens to malformed frames.
    pub fn set_malformed_action(&self, action: MalformedAction) {
        self.store_config_u32(offset_of!(Config, malformed_action), action.to_u32());
    }

    /// The live mode (enforce if the config holds no mode).
    pub fn mode(&self) -> Mode {
        Mode::from_u32(self.config().mode).unwrap_or(Mode::Enforce)
    }

    /// The live action on malformed frames (pass if the config holds
    /// none).
    pub fn malformed_action(&self) -> MalformedAction {
        MalformedAction::from_u32(self.config().malformed_action).unwrap_or(MalformedAction::Pass)
    }

    /// The live policy (deny if the config holds no policy).
    pub fn policy(&self) -> Policy {
        Policy::from_u32(self.config().policy).unwrap_or(Policy::Deny)
    }

    /// Records that this loader's ABI made the maps.
    pub(super) fn stamp_abi_version(&self) {
        self.store_config_u32(offset_of!(Config, abi_version), ABI_VERSION);
    }

    /// The id of the store the filter was built from (zero: none yet).
    pub fn store_id(&self) -> u64 {
        self.config().store_id
    }

    /// Records which store the filter is built from.
    pub fn set_store_id(&self, id: u64) {
        self.store_config_u64(offset_of!(Config, store_id), id);
    }

    /// The pid a control-plane process left while it changed the live
    /// filter (zero: none is, or the last one finished).
    pub fn updating_pid(&self) -> u32 {
        self.config().updating_pid
    }

    /// Marks the live filter as being changed by process `pid` (zero when
    /// done): a marker that outlives a crash.
    pub fn set_updating_pid(&self, pid: u32) {
        self.store_config_u32(offset_of!(Config, updating_pid), pid);
    }

    fn outer(&mut self) -> Result<ArrayOfMaps<&mut MapData>> {
        let name = self.shape.outer_map();
        ArrayOfMaps::try_from(&mut self.filters).map_err(|source| XdpError::Map { name, source })
    }

    /// The live filter table's map.
    pub fn live_table_map(&mut self) -> Result<MapData> {
        let name = self.shape.outer_map();
        let active = self.config().active_profile % PROFILE_COUNT as u32;
        self.outer()?
            .get(&active, 0)
            .map_err(|source| XdpError::Map { name, source })
    }

    /// The live filter table, to change single buckets in place (with
    /// `CuckooFilter::with_storage(table, live_profile().seed)`). `F` and
    /// `S` must match [`Self::shape`].
    pub fn live_table<F: TableFingerprint, const S: usize>(&mut self) -> Result<FilterTable<F, S>> {
        Ok(FilterTable::from_map(self.live_table_map()?)?)
    }

    /// The live filter table mapped only in the pages of `buckets` (see
    /// [`FilterTable::from_map_pages`]).
    pub fn live_table_pages<F: TableFingerprint, const S: usize>(
        &mut self,
        buckets: &[usize],
    ) -> Result<FilterTable<F, S>> {
        Ok(FilterTable::from_map_pages(
            self.live_table_map()?,
            buckets,
        )?)
    }

    /// Makes `table` with `profile` and `prefilter` live, atomically for
    /// every packet (see the module documentation). The previous table is
    /// released. `table` must have [`Self::bucket_count`] buckets, and the
    /// filter answers correctly only if `profile` (see [`filter_profile`])
    /// says so too and `prefilter` marks every key's blocks; the locate
    /// diagnostic may be driven with other sizes.
    pub fn install(
        &mut self,
        table: &MapData,
        profile: &FilterProfile,
        prefilter: &Prefilter,
    ) -> Result<()> {
        let name = self.shape.outer_map();
        let found = table
            .info()
            .map_err(|source| XdpError::Map { name, source })?
            .max_entries() as usize;
        if found != self.bucket_count {
            return Err(XdpError::TableSize {
                expected: self.bucket_count,
                found,
            });
        }
        let active = self.live_slot() as u32;
        let idle = (active + 1) % PROFILE_COUNT as u32;
        self.outer()?
            .set(idle, table, 0)
            .map_err(|source| XdpError::Map { name, source })?;
        self.write_profile(idle as usize, &with_prefilter_decision(profile, prefilter));
        self.write_prefilter(idle as usize, prefilter);
        self.store_config_u32(offset_of!(Config, active_profile), idle);
        thread::sleep(GRACE_PERIOD);
        // The old slot now aliases the live table, which frees the old one.
        self.outer()?
            .set(active, table, 0)
            .map_err(|source| XdpError::Map { name, source })
    }

    pub(super) fn live_slot(&self) -> usize {
        self.config().active_profile as usize % PROFILE_COUNT
    }

    fn write_profile(&self, slot: usize, profile: &FilterProfile) {
        let base = offset_of!(Config, profiles) + slot * size_of::<FilterProfile>();
        let fields = self.fields();
        if let Some(seed) = fields.atomic_u64(base + offset_of!(FilterProfile, seed)) {
            seed.store(profile.seed, Ordering::Release);
        }
        for (offset, value) in [
            (offset_of!(FilterProfile, bucket_mask), profile.bucket_mask),
            (
                offset_of!(FilterProfile, ipv4_length_count),
                profile.ipv4_length_count,
            ),
            (
                offset_of!(FilterProfile, ipv6_length_count),
                profile.ipv6_length_count,
            ),
            (
                offset_of!(FilterProfile, prefilter_skipped),
                profile.prefilter_skipped,
            ),
        ] {
            self.store_config_u32(base + offset, value);
        }
        for (offset, lengths) in [
            (
                offset_of!(FilterProfile, ipv4_lengths),
                profile.ipv4_lengths,
            ),
            (
                offset_of!(FilterProfile, ipv6_lengths),
                profile.ipv6_lengths,
            ),
        ] {
            for (position, len) in lengths.into_iter().enumerate() {
                if let Some(field) = fields.atomic_u8(base + offset + position) {
                    field.store(len, Ordering::Release);
                }
            }
        }
    }

    /// The counters, summed over CPUs.
    pub fn counters(&self) -> Result<Counters> {
        let array =
            PerCpuArray::<&MapData, [u64; 2]>::try_from(&self.counters).map_err(|source| {
                XdpError::Map {
                    name: COUNTERS_MAP,
                    source,
                }
            })?;
        let values = (0..array.len())
            .map(|index| {
                let per_cpu = array.get(&index, 0)?;
                Ok(per_cpu
                    .iter()
                    .fold(Counter::default(), |sum, [packets, bytes]| Counter {
                        packets: sum.packets + packets,
                        bytes: sum.bytes + bytes,
                    }))
            })
            .collect::<Result<Vec<_>, MapError>>()
            .map_err(|source| XdpError::Map {
                name: COUNTERS_MAP,
                source,
            })?;
        Ok(Counters { values })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_probe_longest_first_without_repeats() {
        let lengths = ActiveLengths::new(&[16, 32, 24, 32], &[48, 128]).unwrap();
        let profile = filter_profile(7, 1024, &lengths).unwrap();
        assert_eq!(profile.seed, 7);
        assert_eq!(profile.bucket_mask, 1023);
        assert_eq!(profile.ipv4_length_count, 3);
        assert_eq!(profile.ipv4_lengths[..3], [32, 24, 16]);
        assert_eq!(profile.ipv6_length_count, 2);
        assert_eq!(profile.ipv6_lengths[..2], [128, 48]);
    }

    #[test]
    fn profiles_refuse_impossible_lengths_and_budgets() {
        assert_eq!(ActiveLengths::new(&[33], &[]), None);
        assert_eq!(ActiveLengths::new(&[], &[129]), None);
        let nine: Vec<u8> = (20..29).collect();
        let lengths = ActiveLengths::new(&nine, &[]).unwrap();
        assert!(matches!(
            filter_profile(0, 1, &lengths),
            Err(XdpError::TooManyLengths {
                family: AddressFamily::Ipv4,
                count: 9
            })
        ));
    }
}
