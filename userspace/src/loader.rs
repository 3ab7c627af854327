//! Loads the XDP blocklist, attaches and pins it, and changes what it
//! filters while it runs: config, prefix lengths, allowlist, whole filter
//! tables; reads its counters.
//!
//! # Where the filter lives, and why
//!
//! Each filter table is its own BPF `ARRAY` map with `BPF_F_MMAPABLE`,
//! element `i` = bucket `i` in `filter-core`'s layout (8- or 16-byte
//! buckets, see [`FilterShape`]), and the program reaches it through a
//! two-slot `ARRAY_OF_MAPS`. A two-profile config map, also mmapped, says
//! which slot is live and carries that table's seed, size and active prefix
//! lengths. This gives the three things the data plane needs:
//!
//! * **single-bucket updates while packets are checked**: userspace maps
//!   the live table and runs `filter-core`'s insert/remove on it through
//!   [`FilterTable`], one atomic store per slot, no syscall; the core writes
//!   each relocation's destination before clearing its source, so no listed
//!   key is ever absent;
//! * **whole-filter atomic swap** ([`BlocklistMaps::install`]): build a new
//!   table, put it in the idle outer slot, write the idle profile, then flip
//!   `active_profile` with one 4-byte store. Table, seed and prefix lengths
//!   change together for every packet; memory is doubled only while a swap
//!   is in progress;
//! * **fast bulk fill** ([`FilterTable::fill`]): a table built in process
//!   memory is copied into the new map with one `memcpy` through the
//!   mapping, before it goes live, instead of millions of update syscalls.
//!
//! Each profile also owns a block [`Prefilter`] (one element of the
//! mmapped `PREFILTERS` array), which the program checks before the first
//! probe. [`BlocklistMaps::install`] writes the idle profile's block bytes
//! before the flip, so they swap with the table and its lengths; on the
//! live profile, [`BlocklistMaps::mark_keys`],
//! [`BlocklistMaps::set_prefilter_bits`] and
//! [`BlocklistMaps::clear_prefilter_bits`] change single bits with atomic
//! read-modify-writes. Callers set a key's bits before inserting it and
//! clear a bit only after removing the last key that marks it (see
//! [`crate::plan::KeyDiff`]), so a listed key is never hidden.
//!
//! All tables of one loaded program have the bucket count chosen at load
//! time: the loader creates the outer map itself with the first table as
//! its inner template (see [`crate::preload`]), so the verifier knows the
//! tables' size and inlines every bucket lookup. Measured on the project VM
//! (`userspace/BENCHMARKS-xdp.md`), tables of any size (`BPF_F_INNER_MAP`)
//! cost two helper calls per probe: 10 to 16 ns more per packet at one
//! prefix length, about 14 ns per probe at eight. Resizing therefore means
//! loading a new program with larger tables and replacing the old one on
//! its links; two fixed tables selected by an index would inline as well but
//! hold twice the memory all the time.
//!
//! Profile slots are reused: [`BlocklistMaps::install`] waits a grace period
//! after each flip, far longer than any program run, before the idle slot
//! can be written again. One process at a time may change a blocklist's
//! filter (the control plane serialises its commands).

use std::collections::HashSet;
use std::io;
use std::mem::{offset_of, size_of};
use std::net::IpAddr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::thread;
use std::time::Duration;

use aya::maps::lpm_trie::Key;
use aya::maps::{ArrayOfMaps, LpmTrie, Map, MapData, MapError, PerCpuArray};
use aya::pin::PinError;
use aya::programs::links::{FdLink, LinkError, PinnedLink};
use aya::programs::xdp::XdpLink;
use aya::programs::{ProgramError, Xdp, XdpMode};
use aya::{Ebpf, EbpfError, EbpfLoader};
use aya_obj::programs::XdpAttachType;
use blocklist_ebpf::{
    counter_index, malformed_action, mode, policy,
    prefilter::{key_bits, Prefilter, PrefilterBit, PREFILTER_BLOCKS},
    Config, Counter, Family, FilterProfile, FilterShape, LocateReport, Outcome, ALLOW_V4_MAP,
    ALLOW_V6_MAP, CONFIG_MAP, COUNTERS_MAP, DEFAULT_ALLOWLIST_ENTRIES, LOCATE_MAP, LOCATE_PROGRAM,
    MATCH_DESTINATION_GLOBAL, MAX_PREFIX_LENGTHS, PREFILTER_MAP, PROFILE_COUNT,
};
use filter_core::{AddressFamily, CuckooFilter, NetKey};

use crate::filter_table::{FilterTable, TableError, TableFingerprint};
use crate::mapped::{MappedMap, MappedValue};
use crate::preload::{self, TemporaryBpffs};
use crate::test_run::{run_xdp, TestRun};

/// The compiled `blocklist` eBPF object.
static BLOCKLIST_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/blocklist"));

/// How long a profile slot is left alone after it stopped being live: far
/// longer than any run of the program, so no packet still reads it.
const GRACE_PERIOD: Duration = Duration::from_millis(2);

/// Name of the pinned program in a pin directory.
const PINNED_PROGRAM: &str = "program";

/// Why loading or changing the blocklist failed.
#[derive(Debug, thiserror::Error)]
pub enum LoaderError {
    /// The object could not be loaded (maps created, relocated).
    #[error("cannot load the blocklist eBPF object: {0}")]
    Ebpf(#[from] EbpfError),
    /// A program could not be loaded, attached or detached.
    #[error("XDP program {name}: {source}")]
    Program {
        /// Program name.
        name: &'static str,
        /// What the kernel or aya said.
        source: ProgramError,
    },
    /// The object lacks a program it must have.
    #[error("the blocklist eBPF object has no XDP program {0}")]
    MissingProgram(&'static str),
    /// The object lacks a map it must have.
    #[error("the blocklist eBPF object has no map {0}")]
    MissingMap(&'static str),
    /// A map operation failed.
    #[error("map {name}: {source}")]
    Map {
        /// Map name.
        name: &'static str,
        /// What the kernel or aya said.
        source: MapError,
    },
    /// A map could not be mapped into memory.
    #[error("cannot mmap map {name}: {source}")]
    Mmap {
        /// Map name.
        name: &'static str,
        /// What the kernel said.
        source: io::Error,
    },
    /// Pinning failed.
    #[error("cannot pin {path}: {source}")]
    Pin {
        /// Pin path.
        path: PathBuf,
        /// What the kernel or aya said.
        source: PinError,
    },
    /// A pinned map is missing or unusable.
    #[error("cannot open pinned map {path}: {source}")]
    OpenPinned {
        /// Pin path.
        path: PathBuf,
        /// What the kernel or aya said.
        source: MapError,
    },
    /// No filter map of any shape is pinned in the directory.
    #[error("no pinned blocklist filter map (FILTERS_FP8/16/32) in {0}")]
    NoPinnedFilter(PathBuf),
    /// A link operation failed.
    #[error("XDP link: {0}")]
    Link(#[from] LinkError),
    /// A pinned link could not be opened or unpinned.
    #[error("pinned XDP link {path}: {source}")]
    PinnedLink {
        /// Pin path.
        path: PathBuf,
        /// What the kernel said.
        source: io::Error,
    },
    /// The outer filter map could not be created and handed to the loader.
    #[error("cannot create the outer filter map: {source}")]
    OuterMap {
        /// What the kernel said.
        source: io::Error,
    },
    /// The private bpffs that hands the outer map to aya could not be
    /// mounted.
    #[error("cannot mount a temporary bpffs to pass the outer filter map to the loader: {source}")]
    Bpffs {
        /// What the kernel said.
        source: io::Error,
    },
    /// A table of another size than the program's tables.
    #[error("filter tables of this program have {expected} buckets, not {found} (resizing needs a new program)")]
    TableSize {
        /// The program's table size.
        expected: usize,
        /// The given table's size.
        found: usize,
    },
    /// A filter table could not be created or opened.
    #[error(transparent)]
    Table(#[from] TableError),
    /// More prefix lengths than the program probes.
    #[error("{count} {family:?} prefix lengths; the program probes at most {MAX_PREFIX_LENGTHS}")]
    TooManyLengths {
        /// The family.
        family: AddressFamily,
        /// Distinct lengths given.
        count: usize,
    },
    /// A prefix length above the family's maximum.
    #[error("{family:?} prefix length {len} is longer than the address")]
    BadPrefixLength {
        /// The family.
        family: AddressFamily,
        /// The length.
        len: u8,
    },
    /// The filter cannot hold all the keys.
    #[error("the filter of {bucket_count} buckets is full after {inserted} of {keys} keys; use a larger one")]
    FilterFull {
        /// Keys inserted before the failure.
        inserted: usize,
        /// Keys given.
        keys: usize,
        /// Buckets of the table.
        bucket_count: usize,
    },
    /// BPF_PROG_TEST_RUN failed.
    #[error("test run of {program}: {source}")]
    TestRun {
        /// Program name.
        program: &'static str,
        /// What the kernel said.
        source: io::Error,
    },
}

type Result<T, E = LoaderError> = std::result::Result<T, E>;

/// Which address of a packet is matched; fixed when the program is loaded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MatchAddress {
    /// The source address (a blocklist of senders).
    #[default]
    Source,
    /// The destination address.
    Destination,
}

/// How the program is attached to an interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachMode {
    /// In the driver (native XDP).
    Native,
    /// In the generic network stack (SKB mode), for any interface.
    Skb,
}

impl From<AttachMode> for XdpMode {
    fn from(mode: AttachMode) -> Self {
        match mode {
            AttachMode::Native => XdpMode::Driver,
            AttachMode::Skb => XdpMode::Skb,
        }
    }
}

/// Drop, or only count what would be dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Drop.
    Enforce,
    /// Pass and count as would-drop.
    Monitor,
}

/// Which IP packets are dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Listed addresses (unless allowlisted).
    Deny,
    /// Everything not allowlisted.
    Allow,
}

/// What to do with truncated or malformed frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MalformedAction {
    /// Pass them.
    Pass,
    /// Drop them (in enforce mode).
    Drop,
}

/// How to load the program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadOptions {
    /// Fingerprint width and slots per bucket.
    pub shape: FilterShape,
    /// Buckets of every filter table of the program: a power of two.
    pub bucket_count: usize,
    /// Hash seed of the first table.
    pub seed: u64,
    /// Match sources or destinations.
    pub match_address: MatchAddress,
    /// Capacity of each allowlist (IPv4 and IPv6).
    pub allowlist_entries: u32,
}

impl LoadOptions {
    /// Options for a filter of `shape` that holds `capacity` keys, with a
    /// random seed; `None` if no table can be that large.
    pub fn for_capacity(shape: FilterShape, capacity: usize) -> Option<Self> {
        Some(Self {
            shape,
            bucket_count: filter_core::sizing::cuckoo_buckets(capacity, shape.slots())?,
            seed: random_seed(),
            match_address: MatchAddress::Source,
            allowlist_entries: DEFAULT_ALLOWLIST_ENTRIES as u32,
        })
    }
}

/// A seed from the kernel's random source (std's hasher keys).
pub fn random_seed() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64)
}

/// Bytes of a loaded program's block prefilters (one per profile), whatever
/// the size of its filter.
pub const PREFILTER_BYTES: usize = PROFILE_COUNT * size_of::<Prefilter>();

/// A filter profile for a table of `bucket_count` buckets: lengths are
/// deduplicated and sorted longest first.
pub fn filter_profile(
    seed: u64,
    bucket_count: usize,
    ipv4_lengths: &[u8],
    ipv6_lengths: &[u8],
) -> Result<FilterProfile> {
    let (ipv4_lengths, ipv4_length_count) = probe_order(AddressFamily::Ipv4, ipv4_lengths)?;
    let (ipv6_lengths, ipv6_length_count) = probe_order(AddressFamily::Ipv6, ipv6_lengths)?;
    Ok(FilterProfile {
        seed,
        bucket_mask: bucket_count.saturating_sub(1) as u32,
        ipv4_length_count,
        ipv6_length_count,
        ipv4_lengths,
        ipv6_lengths,
        reserved: 0,
    })
}

fn probe_order(family: AddressFamily, lengths: &[u8]) -> Result<([u8; MAX_PREFIX_LENGTHS], u32)> {
    let mut sorted = lengths.to_vec();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    sorted.dedup();
    if let Some(&len) = sorted.first().filter(|&&len| len > family.max_prefix_len()) {
        return Err(LoaderError::BadPrefixLength { family, len });
    }
    let mut order = [0u8; MAX_PREFIX_LENGTHS];
    if sorted.len() > order.len() {
        return Err(LoaderError::TooManyLengths {
            family,
            count: sorted.len(),
        });
    }
    order[..sorted.len()].copy_from_slice(&sorted);
    Ok((order, sorted.len() as u32))
}

/// A loaded blocklist program and its maps.
#[derive(Debug)]
pub struct Blocklist {
    ebpf: Ebpf,
    shape: FilterShape,
    maps: BlocklistMaps,
    locate: Option<MappedValue<LocateReport>>,
}

impl Blocklist {
    /// Loads the object and the program for `options.shape`, and makes an
    /// empty table of `options.bucket_count` buckets live (no prefix
    /// lengths: nothing is listed).
    pub fn load(options: &LoadOptions) -> Result<Self> {
        Self::load_with(options, None)
    }

    /// Like [`Self::load`], but the new program counts into `counters`, the
    /// counter map of another blocklist ([`BlocklistMaps::counters_map`]).
    /// A program that takes over from another one (a resize) goes on
    /// counting where the old one stopped: while the links switch over,
    /// both programs add to the same per-CPU values, so no packet is lost
    /// from the counts or counted twice.
    pub fn load_counting_into(options: &LoadOptions, counters: &MapData) -> Result<Self> {
        Self::load_with(options, Some(counters))
    }

    fn load_with(options: &LoadOptions, counters: Option<&MapData>) -> Result<Self> {
        let outer_name = options.shape.outer_map();
        let table = EmptyTable::create(options.shape, options.bucket_count)?;
        let outer = preload::create_outer_map(outer_name, table.map())
            .map_err(|source| LoaderError::OuterMap { source })?;
        let bpffs = TemporaryBpffs::mount().map_err(|source| LoaderError::Bpffs { source })?;
        let pin = bpffs.path().join(outer_name);
        outer.pin(&pin).map_err(|source| LoaderError::Pin {
            path: pin.clone(),
            source,
        })?;
        let match_destination = u8::from(options.match_address == MatchAddress::Destination);
        let mut loader = EbpfLoader::new();
        loader
            .override_global(MATCH_DESTINATION_GLOBAL, &match_destination, true)
            .map_max_entries(ALLOW_V4_MAP, options.allowlist_entries)
            .map_max_entries(ALLOW_V6_MAP, options.allowlist_entries)
            .map_pin_path(outer_name, pin);
        if let Some(counters) = counters {
            let pin = bpffs.path().join(COUNTERS_MAP);
            counters.pin(&pin).map_err(|source| LoaderError::Pin {
                path: pin.clone(),
                source,
            })?;
            loader.map_pin_path(COUNTERS_MAP, pin);
        }
        let mut ebpf = loader.load(BLOCKLIST_OBJECT)?;
        drop(bpffs);
        let name = options.shape.program();
        xdp_mut(&mut ebpf, name)?
            .load()
            .map_err(|source| LoaderError::Program { name, source })?;
        let maps = BlocklistMaps::take(&mut ebpf, options.shape, options.bucket_count)?;
        let mut blocklist = Self {
            ebpf,
            shape: options.shape,
            maps,
            locate: None,
        };
        let profile = filter_profile(options.seed, options.bucket_count, &[], &[])?;
        blocklist
            .maps
            .install(table.map(), &profile, &Prefilter::EMPTY)?;
        Ok(blocklist)
    }

    /// The maps.
    pub fn maps(&self) -> &BlocklistMaps {
        &self.maps
    }

    /// The maps, to change them.
    pub fn maps_mut(&mut self) -> &mut BlocklistMaps {
        &mut self.maps
    }

    fn program(&mut self) -> Result<&mut Xdp> {
        xdp_mut(&mut self.ebpf, self.shape.program())
    }

    /// Attaches the program to interface `if_index`; the attachment lasts
    /// as long as this `Blocklist` (or until [`Self::detach`]).
    pub fn attach(
        &mut self,
        if_index: u32,
        mode: AttachMode,
    ) -> Result<aya::programs::xdp::XdpLinkId> {
        let name = self.shape.program();
        self.program()?
            .attach_to_if_index(if_index, mode.into())
            .map_err(|source| LoaderError::Program { name, source })
    }

    /// Detaches an attachment made by [`Self::attach`].
    pub fn detach(&mut self, link: aya::programs::xdp::XdpLinkId) -> Result<()> {
        let name = self.shape.program();
        self.program()?
            .detach(link)
            .map_err(|source| LoaderError::Program { name, source })
    }

    /// Attaches the program to interface `if_index` with a BPF link pinned
    /// at `link_path`: the attachment outlives this process until
    /// [`detach_pinned`] removes it.
    pub fn attach_pinned(
        &mut self,
        if_index: u32,
        mode: AttachMode,
        link_path: &Path,
    ) -> Result<()> {
        let name = self.shape.program();
        attach_with_pinned_link(self.program()?, name, if_index, mode, link_path)
    }

    /// Moves the attachment pinned at `link_path` (by
    /// [`Self::attach_pinned`] or [`attach_pinned_program`], of any
    /// blocklist) to this program with one `bpf_link_update`: packets on
    /// that interface go from the old program to this one with no gap. The
    /// link stays pinned where it is.
    pub fn take_over_pinned_link(&mut self, link_path: &Path) -> Result<()> {
        let name = self.shape.program();
        let link = XdpLink::try_from(FdLink::from(PinnedLink::from_pin(link_path)?))?;
        let link_id = self
            .program()?
            .attach_to_link(link)
            .map_err(|source| LoaderError::Program { name, source })?;
        // Keep the link (pinned) when this program is dropped.
        drop(
            self.program()?
                .take_link(link_id)
                .map_err(|source| LoaderError::Program { name, source })?,
        );
        Ok(())
    }

    /// Pins the maps (see [`BlocklistMaps::pin`]) and the program (as
    /// `program`) in `dir`, an existing directory on a bpffs.
    pub fn pin(&mut self, dir: &Path) -> Result<()> {
        self.maps.pin(dir)?;
        let path = dir.join(PINNED_PROGRAM);
        self.program()?
            .pin(&path)
            .map_err(|source| LoaderError::Pin { path, source })
    }

    /// Runs the blocklist program on `frame` with BPF_PROG_TEST_RUN,
    /// `repeat` times; counters count every repetition.
    pub fn test_run(&self, frame: &[u8], repeat: u32) -> Result<TestRun> {
        self.test_run_program(self.shape.program(), frame, repeat)
    }

    /// Runs the loaded program `name` on `frame` with BPF_PROG_TEST_RUN.
    fn test_run_program(&self, name: &'static str, frame: &[u8], repeat: u32) -> Result<TestRun> {
        let xdp: &Xdp = self
            .ebpf
            .program(name)
            .ok_or(LoaderError::MissingProgram(name))?
            .try_into()
            .map_err(|source| LoaderError::Program { name, source })?;
        let fd = xdp
            .fd()
            .map_err(|source| LoaderError::Program { name, source })?;
        run_xdp(fd.as_fd(), frame, repeat).map_err(|source| LoaderError::TestRun {
            program: name,
            source,
        })
    }

    /// Diagnostic: what the program's own code computes for `frame`'s
    /// matched address at the live profile's first prefix length of its
    /// family (hash, and fingerprint and buckets for each fingerprint
    /// width), by running the `locate_key` program on it. `None` for a frame
    /// that is not IP.
    pub fn locate(&mut self, frame: &[u8]) -> Result<Option<LocateReport>> {
        if self.locate.is_none() {
            xdp_mut(&mut self.ebpf, LOCATE_PROGRAM)?
                .load()
                .map_err(|source| LoaderError::Program {
                    name: LOCATE_PROGRAM,
                    source,
                })?;
            let map = self
                .ebpf
                .take_map(LOCATE_MAP)
                .ok_or(LoaderError::MissingMap(LOCATE_MAP))?;
            self.locate = Some(map_value(&map, LOCATE_MAP)?);
        }
        let report = self
            .locate
            .as_ref()
            .ok_or(LoaderError::MissingMap(LOCATE_MAP))?;
        let valid = report
            .fields()
            .atomic_u32(offset_of!(LocateReport, valid))
            .ok_or(LoaderError::MissingMap(LOCATE_MAP))?;
        valid.store(0, Ordering::SeqCst);
        self.test_run_program(LOCATE_PROGRAM, frame, 1)?;
        let value = report.read();
        Ok((value.valid == 1).then_some(value))
    }
}

/// Attaches the program that [`Blocklist::pin`] pinned in `dir` to one
/// more interface, with a BPF link pinned at `link_path`; every interface
/// shares the pinned maps.
pub fn attach_pinned_program(
    dir: &Path,
    if_index: u32,
    mode: AttachMode,
    link_path: &Path,
) -> Result<()> {
    const NAME: &str = "pinned blocklist program";
    let mut program = Xdp::from_pin(dir.join(PINNED_PROGRAM), XdpAttachType::Interface)
        .map_err(|source| LoaderError::Program { name: NAME, source })?;
    attach_with_pinned_link(&mut program, NAME, if_index, mode, link_path)
}

fn attach_with_pinned_link(
    program: &mut Xdp,
    name: &'static str,
    if_index: u32,
    mode: AttachMode,
    link_path: &Path,
) -> Result<()> {
    let program_error = |source| LoaderError::Program { name, source };
    let link_id = program
        .attach_to_if_index(if_index, mode.into())
        .map_err(program_error)?;
    let link = program.take_link(link_id).map_err(program_error)?;
    FdLink::try_from(link)?
        .pin(link_path)
        .map_err(|source| LoaderError::Pin {
            path: link_path.to_owned(),
            source,
        })?;
    Ok(())
}

/// Removes an attachment made by [`Blocklist::attach_pinned`] or
/// [`attach_pinned_program`].
pub fn detach_pinned(link_path: &Path) -> Result<()> {
    let link = PinnedLink::from_pin(link_path)?;
    // Unpinning drops the last reference once the returned FdLink goes.
    drop(link.unpin().map_err(|source| LoaderError::PinnedLink {
        path: link_path.to_owned(),
        source,
    })?);
    Ok(())
}

fn xdp_mut<'a>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut Xdp> {
    ebpf.program_mut(name)
        .ok_or(LoaderError::MissingProgram(name))?
        .try_into()
        .map_err(|source| LoaderError::Program { name, source })
}

fn map_value<T: crate::mapped::PlainData>(map: &Map, name: &'static str) -> Result<MappedValue<T>> {
    let Map::Array(data) = map else {
        return Err(LoaderError::MissingMap(name));
    };
    MappedValue::new(data.fd().as_fd()).map_err(|source| LoaderError::Mmap { name, source })
}

/// An empty table of any shape, only to be installed.
enum EmptyTable {
    Fingerprint8(FilterTable<u8, 8>),
    Fingerprint16(FilterTable<u16, 4>),
    Fingerprint32(FilterTable<u32, 4>),
}

impl EmptyTable {
    fn create(shape: FilterShape, bucket_count: usize) -> Result<Self, TableError> {
        Ok(match shape {
            FilterShape::Fingerprint8 => {
                EmptyTable::Fingerprint8(FilterTable::create(bucket_count)?)
            }
            FilterShape::Fingerprint16 => {
                EmptyTable::Fingerprint16(FilterTable::create(bucket_count)?)
            }
            FilterShape::Fingerprint32 => {
                EmptyTable::Fingerprint32(FilterTable::create(bucket_count)?)
            }
        })
    }

    fn map(&self) -> &MapData {
        match self {
            EmptyTable::Fingerprint8(table) => table.map(),
            EmptyTable::Fingerprint16(table) => table.map(),
            EmptyTable::Fingerprint32(table) => table.map(),
        }
    }
}

/// Packets and bytes per outcome and family, summed over CPUs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    values: Vec<Counter>,
}

impl Counters {
    /// The counter of `outcome` for `family`.
    pub fn get(&self, outcome: Outcome, family: Family) -> Counter {
        self.values
            .get(counter_index(outcome, family) as usize)
            .copied()
            .unwrap_or_default()
    }
}

/// The maps of a loaded or pinned blocklist.
#[derive(Debug)]
pub struct BlocklistMaps {
    shape: FilterShape,
    bucket_count: usize,
    config: MappedValue<Config>,
    config_map: Map,
    filters: Map,
    prefilters: MappedMap,
    prefilter_map: Map,
    counters: Map,
    allow_v4: Map,
    allow_v6: Map,
}

impl BlocklistMaps {
    fn take(ebpf: &mut Ebpf, shape: FilterShape, bucket_count: usize) -> Result<Self> {
        Self::assemble(shape, Some(bucket_count), |name| {
            ebpf.take_map(name).ok_or(LoaderError::MissingMap(name))
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
        let allow_v4 = map(ALLOW_V4_MAP)?;
        let allow_v6 = map(ALLOW_V6_MAP)?;
        let config: MappedValue<Config> = map_value(&config_map, CONFIG_MAP)?;
        let Map::Array(prefilter_data) = &prefilter_map else {
            return Err(LoaderError::MissingMap(PREFILTER_MAP));
        };
        let prefilters =
            MappedMap::new(prefilter_data.fd().as_fd(), PREFILTER_BYTES).map_err(|source| {
                LoaderError::Mmap {
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
            allow_v4,
            allow_v6,
        })
    }

    /// Opens the maps pinned by [`Self::pin`] in `dir`.
    pub fn open_pinned(dir: &Path) -> Result<Self> {
        let shape = FilterShape::ALL
            .into_iter()
            .find(|shape| dir.join(shape.outer_map()).exists())
            .ok_or_else(|| LoaderError::NoPinnedFilter(dir.to_owned()))?;
        let open = |name: &str| {
            let path = dir.join(name);
            MapData::from_pin(&path)
                .and_then(Map::from_map_data)
                .map_err(|source| LoaderError::OpenPinned { path, source })
        };
        Self::assemble(shape, None, open)
    }

    /// Pins every map in `dir` under its name (`CONFIG`, `PREFILTERS`,
    /// `COUNTERS`, `ALLOW_V4`, `ALLOW_V6` and the shape's `FILTERS_FP*`).
    pub fn pin(&self, dir: &Path) -> Result<()> {
        for (name, map) in [
            (CONFIG_MAP, &self.config_map),
            (self.shape.outer_map(), &self.filters),
            (PREFILTER_MAP, &self.prefilter_map),
            (COUNTERS_MAP, &self.counters),
            (ALLOW_V4_MAP, &self.allow_v4),
            (ALLOW_V6_MAP, &self.allow_v6),
        ] {
            let path = dir.join(name);
            map.pin(&path)
                .map_err(|source| LoaderError::Pin { path, source })?;
        }
        Ok(())
    }

    /// The per-CPU counter map, to hand to a program that takes over
    /// ([`Blocklist::load_counting_into`]).
    pub fn counters_map(&self) -> Result<&MapData> {
        match &self.counters {
            Map::PerCpuArray(data) => Ok(data),
            _ => Err(LoaderError::MissingMap(COUNTERS_MAP)),
        }
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

    fn fields(&self) -> &MappedMap {
        self.config.fields()
    }

    fn store_config_u32(&self, offset: usize, value: u32) {
        if let Some(field) = self.fields().atomic_u32(offset) {
            field.store(value, Ordering::Release);
        }
    }

    /// Switches between enforce and monitor mode.
    pub fn set_mode(&self, new_mode: Mode) {
        let value = match new_mode {
            Mode::Enforce => mode::ENFORCE,
            Mode::Monitor => mode::MONITOR,
        };
        self.store_config_u32(offset_of!(Config, mode), value);
    }

    /// Switches between deny and allow policy.
    pub fn set_policy(&self, new_policy: Policy) {
        let value = match new_policy {
            Policy::Deny => policy::DENY,
            Policy::Allow => policy::ALLOW,
        };
        self.store_config_u32(offset_of!(Config, policy), value);
    }

    /// Chooses what happens to malformed frames.
    pub fn set_malformed_action(&self, action: MalformedAction) {
        let value = match action {
            MalformedAction::Pass => malformed_action::PASS,
            MalformedAction::Drop => malformed_action::DROP,
        };
        self.store_config_u32(offset_of!(Config, malformed_action), value);
    }

    fn outer(&mut self) -> Result<ArrayOfMaps<&mut MapData>> {
        let name = self.shape.outer_map();
        ArrayOfMaps::try_from(&mut self.filters).map_err(|source| LoaderError::Map { name, source })
    }

    /// The live filter table's map.
    pub fn live_table_map(&mut self) -> Result<MapData> {
        let name = self.shape.outer_map();
        let active = self.config().active_profile % PROFILE_COUNT as u32;
        self.outer()?
            .get(&active, 0)
            .map_err(|source| LoaderError::Map { name, source })
    }

    /// The live filter table, to change single buckets in place (with
    /// `CuckooFilter::with_storage(table, live_profile().seed)`). `F` and
    /// `S` must match [`Self::shape`].
    pub fn live_table<F: TableFingerprint, const S: usize>(&mut self) -> Result<FilterTable<F, S>> {
        Ok(FilterTable::from_map(self.live_table_map()?)?)
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
            .map_err(|source| LoaderError::Map { name, source })?
            .max_entries() as usize;
        if found != self.bucket_count {
            return Err(LoaderError::TableSize {
                expected: self.bucket_count,
                found,
            });
        }
        let active = self.live_slot() as u32;
        let idle = (active + 1) % PROFILE_COUNT as u32;
        self.outer()?
            .set(idle, table, 0)
            .map_err(|source| LoaderError::Map { name, source })?;
        self.write_profile(idle as usize, profile);
        self.write_prefilter(idle as usize, prefilter);
        self.store_config_u32(offset_of!(Config, active_profile), idle);
        thread::sleep(GRACE_PERIOD);
        // The old slot now aliases the live table, which frees the old one.
        self.outer()?
            .set(active, table, 0)
            .map_err(|source| LoaderError::Map { name, source })
    }

    /// Replaces the whole filter, atomically: builds a table keyed with
    /// `seed` that holds `keys` in process memory, copies it into a new map
    /// and installs it with the keys' prefix lengths. `F` and `S` must match
    /// [`Self::shape`]. On error the live filter is unchanged.
    pub fn replace_filter<F: TableFingerprint, const S: usize>(
        &mut self,
        seed: u64,
        keys: &[NetKey],
    ) -> Result<()> {
        let bucket_count = self.bucket_count;
        let mut filter =
            CuckooFilter::<F, S, _>::with_storage(vec![[F::EMPTY; S]; bucket_count], seed)
                .map_err(|_| TableError::BadBucketCount(bucket_count))?;
        let mut ipv4_lengths = Vec::new();
        let mut ipv6_lengths = Vec::new();
        for (inserted, key) in keys.iter().enumerate() {
            filter
                .insert_hash(key.hash(seed))
                .map_err(|_| LoaderError::FilterFull {
                    inserted,
                    keys: keys.len(),
                    bucket_count,
                })?;
            let lengths = match key.family() {
                AddressFamily::Ipv4 => &mut ipv4_lengths,
                AddressFamily::Ipv6 => &mut ipv6_lengths,
            };
            if !lengths.contains(&key.prefix_len()) {
                lengths.push(key.prefix_len());
            }
        }
        let profile = filter_profile(seed, bucket_count, &ipv4_lengths, &ipv6_lengths)?;
        let mut prefilter = Box::new(Prefilter::EMPTY);
        for key in keys {
            prefilter.mark(key, profile.lengths(key.family()));
        }
        let mut table = FilterTable::<F, S>::create(bucket_count)?;
        table.fill(filter.storage())?;
        self.install(table.map(), &profile, &prefilter)
    }

    fn live_slot(&self) -> usize {
        self.config().active_profile as usize % PROFILE_COUNT
    }

    /// Offset in the prefilter mapping of profile `slot`'s block bytes of
    /// `family`.
    fn prefilter_offset(slot: usize, family: AddressFamily) -> usize {
        slot * size_of::<Prefilter>()
            + match family {
                AddressFamily::Ipv4 => offset_of!(Prefilter, ipv4),
                AddressFamily::Ipv6 => offset_of!(Prefilter, ipv6),
            }
    }

    /// Every 8-byte word of profile `slot`'s prefilter: family, offset of
    /// its first block, the word.
    fn prefilter_words(
        &self,
        slot: usize,
    ) -> impl Iterator<Item = (AddressFamily, usize, &AtomicU64)> {
        [AddressFamily::Ipv4, AddressFamily::Ipv6]
            .into_iter()
            .flat_map(move |family| {
                let base = Self::prefilter_offset(slot, family);
                (0..PREFILTER_BLOCKS)
                    .step_by(size_of::<u64>())
                    .filter_map(move |block| {
                        Some((family, block, self.prefilters.atomic_u64(base + block)?))
                    })
            })
    }

    /// Writes a whole prefilter into profile `slot`, one atomic store per
    /// eight blocks.
    fn write_prefilter(&self, slot: usize, prefilter: &Prefilter) {
        for (family, block, word) in self.prefilter_words(slot) {
            let masks = &prefilter.masks(family)[block..block + size_of::<u64>()];
            if let Ok(bytes) = masks.try_into() {
                word.store(u64::from_ne_bytes(bytes), Ordering::Release);
            }
        }
    }

    /// The live profile's prefilter as it is now.
    pub fn live_prefilter(&self) -> Box<Prefilter> {
        let mut prefilter = Box::new(Prefilter::EMPTY);
        for (family, block, word) in self.prefilter_words(self.live_slot()) {
            let bytes = word.load(Ordering::Acquire).to_ne_bytes();
            prefilter.masks_mut(family)[block..block + size_of::<u64>()].copy_from_slice(&bytes);
        }
        prefilter
    }

    /// Sets the prefilter bits of `keys` (see
    /// [`blocklist_ebpf::prefilter::key_bits`]) in the live profile's
    /// prefilter. Call before inserting the keys.
    pub fn mark_keys(&self, keys: &[NetKey]) {
        let profile = self.live_profile();
        let bits: HashSet<PrefilterBit> = keys
            .iter()
            .flat_map(|key| key_bits(key, profile.lengths(key.family())))
            .collect();
        self.set_prefilter_bits(&bits.into_iter().collect::<Vec<_>>());
    }

    /// Sets `bits` in the live profile's prefilter, one atomic
    /// read-modify-write each. Call before inserting the keys that mark
    /// them.
    pub fn set_prefilter_bits(&self, bits: &[PrefilterBit]) {
        self.change_prefilter_bits(bits, |block, mask| {
            block.fetch_or(mask, Ordering::Release);
        });
    }

    /// Clears `bits` in the live profile's prefilter. Call only after
    /// removing every key that marks them.
    pub fn clear_prefilter_bits(&self, bits: &[PrefilterBit]) {
        self.change_prefilter_bits(bits, |block, mask| {
            block.fetch_and(!mask, Ordering::Release);
        });
    }

    fn change_prefilter_bits(&self, bits: &[PrefilterBit], change: impl Fn(&AtomicU8, u8)) {
        let slot = self.live_slot();
        for &bit in bits {
            let offset = Self::prefilter_offset(slot, bit.family) + bit.block as usize;
            if let Some(block) = self.prefilters.atomic_u8(offset) {
                change(block, bit.mask());
            }
        }
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
            (offset_of!(FilterProfile, reserved), profile.reserved),
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
                LoaderError::Map {
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
            .map_err(|source| LoaderError::Map {
                name: COUNTERS_MAP,
                source,
            })?;
        Ok(Counters { values })
    }

    /// Adds `address/prefix_len` to the allowlist.
    pub fn allow(&mut self, address: IpAddr, prefix_len: u8) -> Result<()> {
        self.update_allowlist(&[(address, prefix_len)], &[])
    }

    /// Removes `address/prefix_len` from the allowlist.
    pub fn disallow(&mut self, address: IpAddr, prefix_len: u8) -> Result<()> {
        self.update_allowlist(&[], &[(address, prefix_len)])
    }

    /// Adds the `allow` entries (address, prefix length) to the allowlist,
    /// then removes the `disallow` ones, and stores the entry counts of the
    /// families changed once, at the end. If an add fails (the trie is
    /// full), the adds before it are taken back and nothing is removed.
    pub fn update_allowlist(
        &mut self,
        allow: &[(IpAddr, u8)],
        disallow: &[(IpAddr, u8)],
    ) -> Result<()> {
        let result = self.apply_allowlist_changes(allow, disallow);
        let families: HashSet<AddressFamily> = allow
            .iter()
            .chain(disallow)
            .map(|&(address, _)| family_of(address))
            .collect();
        for family in families {
            self.count_allowlist(family)?;
        }
        result
    }

    fn apply_allowlist_changes(
        &mut self,
        allow: &[(IpAddr, u8)],
        disallow: &[(IpAddr, u8)],
    ) -> Result<()> {
        for (index, &(address, prefix_len)) in allow.iter().enumerate() {
            if let Err(error) = self.change_allowlist(address, prefix_len, true) {
                for &(done, done_len) in &allow[..index] {
                    let _ = self.change_allowlist(done, done_len, false);
                }
                return Err(error);
            }
        }
        for &(address, prefix_len) in disallow {
            self.change_allowlist(address, prefix_len, false)?;
        }
        Ok(())
    }

    /// Makes the allowlist exactly `entries` (address, prefix length):
    /// adds the missing ones first, then removes the others, so an address
    /// that stays allowlisted is never dropped on the way.
    pub fn set_allowlist(&mut self, entries: &[(IpAddr, u8)]) -> Result<()> {
        let mut result = entries.iter().try_for_each(|&(address, prefix_len)| {
            self.change_allowlist(address, prefix_len, true)
        });
        if result.is_ok() {
            let keep: HashSet<(IpAddr, u8)> = entries.iter().copied().collect();
            result = remove_other_keys(
                &mut self.allow_v4,
                ALLOW_V4_MAP,
                &keep,
                |octets: [u8; 4]| IpAddr::from(octets),
            )
            .and_then(|()| {
                remove_other_keys(
                    &mut self.allow_v6,
                    ALLOW_V6_MAP,
                    &keep,
                    |octets: [u8; 16]| IpAddr::from(octets),
                )
            });
        }
        self.count_allowlist(AddressFamily::Ipv4)?;
        self.count_allowlist(AddressFamily::Ipv6)?;
        result
    }

    /// The config field that tells the program whether the allowlist of
    /// `family` may hold entries.
    fn allowlist_entries_field(family: AddressFamily) -> usize {
        match family {
            AddressFamily::Ipv4 => offset_of!(Config, allowlist_ipv4_entries),
            AddressFamily::Ipv6 => offset_of!(Config, allowlist_ipv6_entries),
        }
    }

    /// Stores the number of entries in the allowlist of `family` into the
    /// config, after a change.
    fn count_allowlist(&mut self, family: AddressFamily) -> Result<()> {
        let entries = match family {
            AddressFamily::Ipv4 => trie_len::<[u8; 4]>(&mut self.allow_v4, ALLOW_V4_MAP)?,
            AddressFamily::Ipv6 => trie_len::<[u8; 16]>(&mut self.allow_v6, ALLOW_V6_MAP)?,
        };
        self.store_config_u32(Self::allowlist_entries_field(family), entries);
        Ok(())
    }

    /// Inserts (`add`) or removes one allowlist entry. Before an insert,
    /// the family's entry count goes up by one, so the program looks the
    /// new entry up as soon as it is there; callers store the exact count
    /// afterwards ([`Self::count_allowlist`]).
    fn change_allowlist(&mut self, address: IpAddr, prefix_len: u8, add: bool) -> Result<()> {
        let family = family_of(address);
        if prefix_len > family.max_prefix_len() {
            return Err(LoaderError::BadPrefixLength {
                family,
                len: prefix_len,
            });
        }
        if add {
            if let Some(entries) = self
                .fields()
                .atomic_u32(Self::allowlist_entries_field(family))
            {
                entries.fetch_add(1, Ordering::AcqRel);
            }
        }
        match address {
            IpAddr::V4(address) => change_trie(
                &mut self.allow_v4,
                ALLOW_V4_MAP,
                Key::new(u32::from(prefix_len), address.octets()),
                add,
            ),
            IpAddr::V6(address) => change_trie(
                &mut self.allow_v6,
                ALLOW_V6_MAP,
                Key::new(u32::from(prefix_len), address.octets()),
                add,
            ),
        }
    }
}

fn family_of(address: IpAddr) -> AddressFamily {
    match address {
        IpAddr::V4(_) => AddressFamily::Ipv4,
        IpAddr::V6(_) => AddressFamily::Ipv6,
    }
}

/// The number of entries in the allowlist trie `map`.
fn trie_len<K: aya::Pod>(map: &mut Map, name: &'static str) -> Result<u32> {
    let trie = LpmTrie::<&mut MapData, K, u8>::try_from(map)
        .map_err(|source| LoaderError::Map { name, source })?;
    let mut entries = 0u32;
    for key in trie.keys() {
        key.map_err(|source| LoaderError::Map { name, source })?;
        entries += 1;
    }
    Ok(entries)
}

/// Removes from the allowlist trie `map` every key whose (address, prefix
/// length) is not in `keep`.
fn remove_other_keys<K: aya::Pod>(
    map: &mut Map,
    name: &'static str,
    keep: &HashSet<(IpAddr, u8)>,
    address_of: fn(K) -> IpAddr,
) -> Result<()> {
    let mut trie = LpmTrie::<&mut MapData, K, u8>::try_from(map)
        .map_err(|source| LoaderError::Map { name, source })?;
    let others = trie
        .keys()
        .collect::<Result<Vec<Key<K>>, MapError>>()
        .map_err(|source| LoaderError::Map { name, source })?
        .into_iter()
        .filter(|key| {
            let prefix_len = u8::try_from(key.prefix_len()).unwrap_or(u8::MAX);
            !keep.contains(&(address_of(key.data()), prefix_len))
        })
        .collect::<Vec<_>>();
    for key in others {
        trie.remove(&key)
            .map_err(|source| LoaderError::Map { name, source })?;
    }
    Ok(())
}

/// Inserts (`add`) or removes `key` in the allowlist trie `map`.
fn change_trie<K: aya::Pod>(
    map: &mut Map,
    name: &'static str,
    key: Key<K>,
    add: bool,
) -> Result<()> {
    let mut trie = LpmTrie::<&mut MapData, K, u8>::try_from(map)
        .map_err(|source| LoaderError::Map { name, source })?;
    let result = if add {
        trie.insert(&key, 1, 0)
    } else {
        trie.remove(&key)
    };
    result.map_err(|source| LoaderError::Map { name, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_probe_longest_first_without_repeats() {
        let profile = filter_profile(7, 1024, &[16, 32, 24, 32], &[48, 128]).unwrap();
        assert_eq!(profile.seed, 7);
        assert_eq!(profile.bucket_mask, 1023);
        assert_eq!(profile.ipv4_length_count, 3);
        assert_eq!(profile.ipv4_lengths[..3], [32, 24, 16]);
        assert_eq!(profile.ipv6_length_count, 2);
        assert_eq!(profile.ipv6_lengths[..2], [128, 48]);
    }

    #[test]
    fn profiles_refuse_impossible_lengths_and_budgets() {
        assert!(matches!(
            filter_profile(0, 1, &[33], &[]),
            Err(LoaderError::BadPrefixLength {
                family: AddressFamily::Ipv4,
                len: 33
            })
        ));
        assert!(matches!(
            filter_profile(0, 1, &[], &[129]),
            Err(LoaderError::BadPrefixLength {
                family: AddressFamily::Ipv6,
                len: 129
            })
        ));
        let nine: Vec<u8> = (20..29).collect();
        assert!(matches!(
            filter_profile(0, 1, &nine, &[]),
            Err(LoaderError::TooManyLengths {
                family: AddressFamily::Ipv4,
                count: 9
            })
        ));
    }
}
