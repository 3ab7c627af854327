//! Everything that touches the blocklist programs (XDP, and TC for
//! interfaces whose XDP hook is taken and for egress: tcx links, or
//! `clsact` filters on older kernels) and their maps:
//! loading the object, attaching, pinning, the config, the filter tables, the block
//! prefilter, the allowlist, the counters and the sampled drops. The control
//! plane reaches it
//! through two types: [`LiveFilter`], the shape-erased filter of a loaded
//! or pinned program (install a plan, write a diff, probe keys, settings),
//! and [`PinDir`], the bpffs directory that keeps a program attached
//! after cfctl exits.
//!
//! | module | what |
//! |---|---|
//! | [`program`] | loading the object ([`FilterProgram`]), attaching, links, test runs |
//! | [`maps`] | the maps of a program ([`FilterMaps`]): config, profiles, the atomic table swap, counters |
//! | [`prefilter`] | the block prefilter's bits in the live profile |
//! | [`sampling`] | the sampled drops: settings, sampler counts, the ring's reader |
//! | [`allowlist`] | the allowlist tries |
//! | [`live`] | [`LiveFilter`]: the filter operations for every shape |
//! | [`pins`] | [`PinDir`]: the pin directory, bpffs, links per interface |
//! | `netlink` | [`HookHolder`]: the program on an interface's XDP hook |
//! | `links`, `syscall` | a pinned link's interface and detaching a link at once, by the `bpf` syscall |
//! | [`interface`] | an interface's index and MTU by its name; the wait for one to appear |
//! | [`table`], [`mapped`], [`preload`], [`test_run`] | a filter table in map memory, mmapped maps, the outer map, `BPF_PROG_TEST_RUN` |
//!
//! # Where the filter lives, and why
//!
//! Each filter table is its own BPF `ARRAY` map with `BPF_F_MMAPABLE`,
//! element `i` = bucket `i` in `filter-core`'s layout (8- or 16-byte
//! buckets, see [`cfxdp::FilterShape`]), and the program reaches it
//! through a two-slot `ARRAY_OF_MAPS`. A two-profile config map, also
//! mmapped, says which slot is live and carries that table's seed, size
//! and active prefix lengths. This gives the three things the data plane
//! needs:
//!
//! * **single-bucket updates while packets are checked**: userspace maps
//!   the live table and runs `filter-core`'s insert/remove on it through
//!   [`FilterTable`], one atomic store per slot, no syscall; the core writes
//!   each relocation's destination before clearing its source, so no listed
//!   key is ever absent;
//! * **whole-filter atomic swap** ([`FilterMaps::install`]): build a new
//!   table, put it in the idle outer slot, write the idle profile, then flip
//!   `active_profile` with one 4-byte store. Table, seed and prefix lengths
//!   change together for every packet; memory is doubled only while a swap
//!   is in progress;
//! * **fast bulk fill** ([`FilterTable::fill`]): a table built in process
//!   memory is copied into the new map with one `memcpy` through the
//!   mapping, before it goes live, instead of millions of update syscalls.
//!
//! Each profile also owns a block [`cfxdp::prefilter::Prefilter`] (one
//! element of the mmapped `PREFILTERS` array), which the program checks
//! before the first probe. [`FilterMaps::install`] writes the idle
//! profile's block bytes before the flip, so they swap with the table and
//! its lengths; on the live profile, [`FilterMaps::mark_keys`],
//! [`FilterMaps::set_prefilter_bits`] and
//! [`FilterMaps::clear_prefilter_bits`] change single bits with atomic
//! read-modify-writes. Callers set a key's bits before inserting it and
//! clear a bit only after removing the last key that marks it (see
//! [`crate::plan::KeyDiff`]), so a listed key is never hidden.
//!
//! All tables of one loaded program have the bucket count chosen at load
//! time: the loader creates the outer map itself with the first table as
//! its inner template (see [`preload`]), so the verifier knows the
//! tables' size and inlines every bucket lookup. Measured on the project VM
//! (`userspace/BENCHMARKS-xdp.md`), tables of any size (`BPF_F_INNER_MAP`)
//! cost two helper calls per probe: 10 to 16 ns more per packet at one
//! prefix length, about 14 ns per probe at eight. Resizing therefore means
//! loading a new program with larger tables and replacing the old one on
//! its links; two fixed tables selected by an index would inline as well but
//! hold twice the memory all the time.
//!
//! Profile slots are reused: [`FilterMaps::install`] waits a grace period
//! after each flip, far longer than any program run, before the idle slot
//! can be written again. One process at a time may change a blocklist's
//! filter (the control plane serialises its commands).

pub mod allowlist;
pub mod interface;
mod links;
pub mod live;
pub mod mapped;
pub mod maps;
mod netlink;
pub mod pins;
pub mod prefilter;
pub mod preload;
pub mod program;
pub mod sampling;
mod syscall;
pub mod table;
pub mod test_run;

use std::io;
use std::path::PathBuf;

use aya::maps::MapError;
use aya::pin::PinError;
use aya::programs::links::LinkError;
use aya::programs::{ProgramError, XdpMode};
use aya::util::KernelVersion;
use aya::EbpfError;
use cfxdp::MAX_PREFIX_LENGTHS;
use filter_core::AddressFamily;

pub use live::LiveFilter;
pub use maps::{Counters, FilterMaps};
pub use netlink::HookHolder;
pub use pins::PinDir;
pub use program::{FilterProgram, LoadOptions};
pub use sampling::{DropEvents, SamplerCounts, Sampling};
pub use table::{FilterTable, TableError};

use crate::filter::FilterFull;

/// Why loading or changing the blocklist failed.
#[derive(Debug, thiserror::Error)]
pub enum XdpError {
    /// The object could not be loaded (maps created, relocated).
    #[error("cannot load the blocklist eBPF object: {0}")]
    Ebpf(#[from] EbpfError),
    /// A program could not be loaded, attached or detached.
    #[error("blocklist program {name}: {source}")]
    Program {
        /// Program name.
        name: &'static str,
        /// What the kernel or aya said.
        source: ProgramError,
    },
    /// The object lacks a program it must have.
    #[error("the blocklist eBPF object has no program {0}")]
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
    /// The program's pin is gone while its maps or links are still pinned
    /// (removed by hand): the attached program runs on, out of reach.
    #[error(
        "the program pin {} is missing while maps or links are still pinned (removed by hand?): \
         the attached program runs on, and no change would reach it",
        .0.display()
    )]
    MissingProgramPin(PathBuf),
    /// No filter map of any shape is pinned in the directory.
    #[error("no pinned blocklist filter map (FILTERS_FP8/16/32) in {0}")]
    NoPinnedFilter(PathBuf),
    /// A link operation failed.
    #[error("link: {0}")]
    Link(#[from] LinkError),
    /// A link could not be detached from its hook.
    #[error("cannot detach the blocklist program: {source}")]
    Detach {
        /// What the kernel said.
        source: io::Error,
    },
    /// A pinned link could not be opened, detached or unpinned.
    #[error("pinned link {path}: {source}")]
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
    /// The filter cannot hold the keys; nothing was changed.
    #[error(transparent)]
    Full(#[from] FilterFull),
    /// The pin directory cannot be prepared.
    #[error("cannot prepare the bpffs directory {}: {source}", .path.display())]
    PinDir {
        /// The directory.
        path: PathBuf,
        /// What failed.
        source: io::Error,
    },
    /// The pinned maps were made by a loader of another ABI version.
    #[error(
        "the pinned blocklist was loaded by a cfctl of another version (map and filter layout \
         {found}, this cfctl's is {})",
        cfxdp::ABI_VERSION
    )]
    OtherAbi {
        /// The version found (0: older than versioned layouts).
        found: u32,
    },
    /// No such network interface.
    #[error("no network interface named '{0}'")]
    NoInterface(String),
    /// A network interface waited for did not appear.
    #[error(
        "no network interface named '{interface}' appeared in {}",
        humantime::format_duration(*waited)
    )]
    InterfaceNeverAppeared {
        /// The interface's name.
        interface: String,
        /// How long cfctl waited.
        waited: std::time::Duration,
    },
    /// A table the filter code cannot run on.
    #[error("the filter table is unusable: {0}")]
    Storage(String),
    /// Waiting on a map's descriptor failed.
    #[error("cannot wait for map {name}: {source}")]
    Poll {
        /// Map name.
        name: &'static str,
        /// What the kernel said.
        source: io::Error,
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

/// The OS error code somewhere in `error`'s chain of sources.
pub fn os_error_code(error: &(dyn std::error::Error + 'static)) -> Option<i32> {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(code) = error
            .downcast_ref::<io::Error>()
            .and_then(io::Error::raw_os_error)
        {
            return Some(code);
        }
        current = error.source();
    }
    None
}

/// The result of the XDP room's operations.
pub type Result<T, E = XdpError> = std::result::Result<T, E>;

/// Whether this kernel has tcx links (Linux 6.6 or later), with which the
/// TC hook is attached by default; older kernels get a `clsact` filter.
pub fn tcx_supported() -> bool {
    KernelVersion::current().is_ok_and(|version| version >= KernelVersion::new(6, 6, 0))
}

/// How the XDP program is attached to an interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachMode {
    /// In the driver (native XDP).
    Native,
    /// In the generic network stack (SKB mode), for any interface.
    Skb,
}

impl AttachMode {
    /// Both modes.
    pub const ALL: [AttachMode; 2] = [AttachMode::Native, AttachMode::Skb];

    /// The mode's name: `native` or `skb`.
    pub const fn name(self) -> &'static str {
        match self {
            AttachMode::Native => "native",
            AttachMode::Skb => "skb",
        }
    }

    /// The mode of a name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|mode| mode.name() == name)
    }
}

impl From<AttachMode> for XdpMode {
    fn from(mode: AttachMode) -> Self {
        match mode {
            AttachMode::Native => XdpMode::Driver,
            AttachMode::Skb => XdpMode::Skb,
        }
    }
}

pub use cfxdp::TrafficDirection;

/// Where on an interface a blocklist program runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachPoint {
    /// The XDP hook (ingress only), in a mode.
    Xdp(AttachMode),
    /// The TC hook in a direction, with a tcx link, first in the hook's
    /// chain; a pass hands the packet on to the programs after it.
    Tc(TrafficDirection),
    /// The TC hook in a direction on a kernel without tcx links (before
    /// Linux 6.6): a direct-action `bpf` filter on the interface's
    /// `clsact` qdisc, first in its chain (priority
    /// [`program::CLSACT_PRIORITY`]); a pass goes on to the filters after
    /// it.
    Clsact(TrafficDirection),
}

impl AttachPoint {
    /// Every attach point.
    pub const ALL: [AttachPoint; 6] = [
        AttachPoint::Xdp(AttachMode::Native),
        AttachPoint::Xdp(AttachMode::Skb),
        AttachPoint::Tc(TrafficDirection::Ingress),
        AttachPoint::Tc(TrafficDirection::Egress),
        AttachPoint::Clsact(TrafficDirection::Ingress),
        AttachPoint::Clsact(TrafficDirection::Egress),
    ];

    /// The name that a link's pin ends with: `native`, `skb`, `tc-ingress`,
    /// `tc-egress`, `clsact-ingress` or `clsact-egress`.
    pub const fn name(self) -> &'static str {
        match self {
            AttachPoint::Xdp(mode) => mode.name(),
            AttachPoint::Tc(TrafficDirection::Ingress) => "tc-ingress",
            AttachPoint::Tc(TrafficDirection::Egress) => "tc-egress",
            AttachPoint::Clsact(TrafficDirection::Ingress) => "clsact-ingress",
            AttachPoint::Clsact(TrafficDirection::Egress) => "clsact-egress",
        }
    }

    /// The attach point of a name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|point| point.name() == name)
    }

    /// The hook: `xdp` or `tc`.
    pub const fn hook(self) -> &'static str {
        match self {
            AttachPoint::Xdp(_) => "xdp",
            AttachPoint::Tc(_) | AttachPoint::Clsact(_) => "tc",
        }
    }

    /// Which packets the program sees.
    pub const fn direction(self) -> TrafficDirection {
        match self {
            AttachPoint::Xdp(_) => TrafficDirection::Ingress,
            AttachPoint::Tc(direction) | AttachPoint::Clsact(direction) => direction,
        }
    }

    /// How the program is attached: `native` or `skb` (XDP), `tcx` or
    /// `clsact` (TC).
    pub const fn mode(self) -> &'static str {
        match self {
            AttachPoint::Xdp(mode) => mode.name(),
            AttachPoint::Tc(_) => "tcx",
            AttachPoint::Clsact(_) => "clsact",
        }
    }
}
