//! Loading the `cfxdp` object and its programs ([`FilterProgram`]: the XDP
//! program and the two TC programs of a filter shape, sharing the maps),
//! attaching them to interfaces directly or with pinned BPF links (XDP
//! links, tcx links) or as `clsact` filters, moving an attachment to
//! another program with no gap, and running the programs on a frame with
//! `BPF_PROG_TEST_RUN` (verdict tests).
//!
//! A `clsact` filter is no BPF object and cannot be pinned: the qdisc
//! holds it until it is deleted. cfctl's has a fixed priority and handle
//! ([`CLSACT_PRIORITY`], [`CLSACT_HANDLE`]) by which a later cfctl finds
//! it, and the pin that records it is the program it runs
//! (`links/IFACE@clsact-DIRECTION`). Replacing the program of a filter
//! with the same handle is one atomic change in the kernel, as
//! `bpf_link_update` is for a link.
//!
//! Loading goes through [`super::preload`]: the outer filter map is
//! created first with a table of the chosen size as its inner template, so
//! the verifier inlines every bucket lookup.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

use aya::programs::links::Link;
use aya::programs::links::{FdLink, PinnedLink};
use aya::programs::tc::{
    qdisc_add_clsact, NlOptions, SchedClassifierLink, TcAttachOptions, TcHandle,
};
use aya::programs::xdp::XdpLink;
use aya::programs::{LinkOrder, Program, ProgramError, SchedClassifier, TcAttachType, Xdp};
use aya::{Ebpf, EbpfLoader};
use aya_obj::programs::XdpAttachType;
use cfxdp::prefilter::Prefilter;
use cfxdp::{
    by_shape, FilterShape, MatchAddress, Setting, ALLOW_V4_MAP, ALLOW_V6_MAP,
    DEFAULT_ALLOWLIST_ENTRIES, MATCH_DESTINATION_GLOBAL,
};

use super::links::{detach_and_unpin, detach_link};
use super::maps::{filter_profile, FilterMaps, SharedMaps};
use super::preload::{self, TemporaryBpffs};
use super::table::{FilterTable, TableError, TableFingerprint, TableMap};
use super::test_run::{run_tc, run_xdp, TcTestRun, TestRun};
use super::{
    os_error_code, AttachMode, AttachPoint, LiveFilter, Result, TrafficDirection, XdpError,
};
use crate::plan::ActiveLengths;

/// The compiled `cfxdp` eBPF object.
static CFXDP_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/cfxdp"));

/// Name of the pinned XDP program in a pin directory.
pub const PINNED_PROGRAM: &str = "program";

/// Name of the pinned program for `point` in a pin directory: `program`
/// (XDP), `program-tc-ingress`, `program-tc-egress`.
pub fn pinned_program(point: AttachPoint) -> String {
    match point {
        AttachPoint::Xdp(_) => PINNED_PROGRAM.to_owned(),
        AttachPoint::Tc(_) => format!("{PINNED_PROGRAM}-{}", point.name()),
        AttachPoint::Clsact(direction) => pinned_program(AttachPoint::Tc(direction)),
    }
}

/// Priority of cfctl's `clsact` filters: first in the qdisc's chain.
pub const CLSACT_PRIORITY: u16 = 1;
/// Handle of cfctl's `clsact` filters.
pub const CLSACT_HANDLE: TcHandle = TcHandle::new(0, 0xcfc1);

/// The TC programs' directions.
const TC_DIRECTIONS: [TrafficDirection; 2] = [TrafficDirection::Ingress, TrafficDirection::Egress];

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
            seed: crate::filter::random_seed(),
            match_address: MatchAddress::Source,
            allowlist_entries: DEFAULT_ALLOWLIST_ENTRIES as u32,
        })
    }
}

/// A loaded blocklist: its programs (XDP, TC ingress, TC egress) and their
/// maps.
#[derive(Debug)]
pub struct FilterProgram {
    ebpf: Ebpf,
    shape: FilterShape,
    live: LiveFilter,
}

impl FilterProgram {
    /// Loads the object and the programs for `options.shape`, and makes an
    /// empty table of `options.bucket_count` buckets live (no prefix
    /// lengths: nothing is listed).
    pub fn load(options: &LoadOptions) -> Result<Self> {
        Self::load_with(options, None)
    }

    /// Like [`Self::load`], but the new program uses the counters, the
    /// ring of sampled drops and the samplers of another blocklist
    /// ([`FilterMaps::shared`]). A program that takes over from another
    /// one (a resize) goes on counting where the old one stopped: while
    /// the links switch over, both programs add to the same per-CPU
    /// values, so no packet is lost from the counts or counted twice, and
    /// a reader of the samples reads on.
    pub fn load_sharing(options: &LoadOptions, shared: SharedMaps<'_>) -> Result<Self> {
        Self::load_with(options, Some(shared))
    }

    fn load_with(options: &LoadOptions, shared: Option<SharedMaps<'_>>) -> Result<Self> {
        let outer_name = options.shape.outer_map();
        let table = by_shape!(options.shape, empty_table(options.bucket_count))?;
        let outer = preload::create_outer_map(outer_name, table.map())
            .map_err(|source| XdpError::OuterMap { source })?;
        let bpffs = TemporaryBpffs::mount().map_err(|source| XdpError::Bpffs { source })?;
        let pin = bpffs.path().join(outer_name);
        outer.pin(&pin).map_err(|source| XdpError::Pin {
            path: pin.clone(),
            source,
        })?;
        let match_destination = options.match_address.to_u32() as u8;
        let mut loader = EbpfLoader::new();
        loader
            .override_global(MATCH_DESTINATION_GLOBAL, &match_destination, true)
            .map_max_entries(ALLOW_V4_MAP, options.allowlist_entries)
            .map_max_entries(ALLOW_V6_MAP, options.allowlist_entries)
            .map_pin_path(outer_name, pin);
        for (name, map) in shared.iter().flat_map(SharedMaps::named) {
            let pin = bpffs.path().join(name);
            map.pin(&pin).map_err(|source| XdpError::Pin {
                path: pin.clone(),
                source,
            })?;
            loader.map_pin_path(name, pin);
        }
        let mut ebpf = loader.load(CFXDP_OBJECT)?;
        drop(bpffs);
        let name = options.shape.program();
        program_mut::<Xdp>(&mut ebpf, name)?
            .load()
            .map_err(|source| XdpError::Program { name, source })?;
        for direction in TC_DIRECTIONS {
            let name = options.shape.tc_program(direction);
            program_mut::<SchedClassifier>(&mut ebpf, name)?
                .load()
                .map_err(|source| XdpError::Program { name, source })?;
        }
        let mut maps = FilterMaps::take(&mut ebpf, options.shape, options.bucket_count)?;
        maps.stamp_abi_version();
        let profile = filter_profile(
            options.seed,
            options.bucket_count,
            &ActiveLengths::default(),
        )?;
        maps.install(table.map(), &profile, &Prefilter::EMPTY)?;
        Ok(Self {
            ebpf,
            shape: options.shape,
            live: LiveFilter::new(maps),
        })
    }

    /// The live filter.
    pub fn live(&mut self) -> &mut LiveFilter {
        &mut self.live
    }

    /// The maps.
    pub fn maps(&self) -> &FilterMaps {
        self.live.maps()
    }

    /// The maps, to change them.
    pub fn maps_mut(&mut self) -> &mut FilterMaps {
        self.live.maps_mut()
    }

    fn program(&mut self) -> Result<&mut Xdp> {
        program_mut::<Xdp>(&mut self.ebpf, self.shape.program())
    }

    /// Attaches the program to interface `if_index` with a link of its own:
    /// the attachment lasts until the link is dropped or given to
    /// [`detach`].
    pub fn attach(&mut self, if_index: u32, mode: AttachMode) -> Result<FdLink> {
        let name = self.shape.program();
        attach_xdp(self.program()?, name, if_index, mode)
    }

    /// Attaches the program for `point` to `interface` (index `if_index`)
    /// with a BPF link pinned at `link_path`: the attachment outlives this
    /// process until [`detach_pinned`] removes it.
    pub fn attach_pinned(
        &mut self,
        interface: &str,
        if_index: u32,
        point: AttachPoint,
        link_path: &Path,
    ) -> Result<()> {
        let link = match point {
            AttachPoint::Xdp(mode) => {
                let name = self.shape.program();
                attach_xdp(self.program()?, name, if_index, mode)?
            }
            AttachPoint::Tc(direction) => {
                let name = self.shape.tc_program(direction);
                attach_tc(
                    program_mut::<SchedClassifier>(&mut self.ebpf, name)?,
                    name,
                    interface,
                    direction,
                )?
            }
            AttachPoint::Clsact(direction) => {
                let name = self.shape.tc_program(direction);
                let program = program_mut::<SchedClassifier>(&mut self.ebpf, name)?;
                return attach_clsact(program, name, interface, direction, link_path);
            }
        };
        pin_link(link, link_path)
    }

    /// Moves the attachment at `point` pinned at `link_path` (by
    /// [`Self::attach_pinned`] or [`attach_pinned_program`], of any
    /// blocklist) to this blocklist's program for `point` with one
    /// `bpf_link_update`: packets on that interface go from the old program
    /// to this one with no gap. The link stays pinned where it is.
    pub fn take_over_pinned_link(&mut self, link_path: &Path, point: AttachPoint) -> Result<()> {
        if let AttachPoint::Clsact(direction) = point {
            return self.take_over_clsact_filter(link_path, direction);
        }
        let link = FdLink::from(PinnedLink::from_pin(link_path)?);
        match point {
            AttachPoint::Xdp(_) => {
                let name = self.shape.program();
                let program_error = |source| XdpError::Program { name, source };
                let program = self.program()?;
                let link_id = program
                    .attach_to_link(XdpLink::try_from(link)?)
                    .map_err(program_error)?;
                // Keep the link (pinned) when this program is dropped.
                drop(program.take_link(link_id).map_err(program_error)?);
            }
            AttachPoint::Tc(direction) => {
                let name = self.shape.tc_program(direction);
                let program_error = |source| XdpError::Program { name, source };
                let program = program_mut::<SchedClassifier>(&mut self.ebpf, name)?;
                let link_id = program
                    .attach_to_link(SchedClassifierLink::try_from(link)?)
                    .map_err(program_error)?;
                drop(program.take_link(link_id).map_err(program_error)?);
            }
            AttachPoint::Clsact(_) => {}
        }
        Ok(())
    }

    /// Puts this blocklist's TC program of `direction` in cfctl's `clsact`
    /// filter that the program pinned at `marker` runs, and pins it there
    /// instead. A marker whose interface is gone (and the filter with it)
    /// is removed.
    fn take_over_clsact_filter(
        &mut self,
        marker: &Path,
        direction: TrafficDirection,
    ) -> Result<()> {
        let Some(interface) = marker_interface(marker) else {
            return remove_marker(marker);
        };
        let name = self.shape.tc_program(direction);
        let program_error = |source| XdpError::Program { name, source };
        let link = match clsact_filter(&interface, direction) {
            Ok(link) => link,
            Err(_) => return remove_marker(marker),
        };
        let program = program_mut::<SchedClassifier>(&mut self.ebpf, name)?;
        let link_id = program.attach_to_link(link).map_err(program_error)?;
        keep_clsact_filter(program.take_link(link_id).map_err(program_error)?);
        pin_marker(program, marker)
    }

    /// Pins the maps (see [`FilterMaps::pin`]) and the programs (see
    /// [`pinned_program`]) in `dir`, an existing directory on a bpffs.
    pub fn pin(&mut self, dir: &Path) -> Result<()> {
        self.live.maps().pin(dir)?;
        let path = dir.join(PINNED_PROGRAM);
        self.program()?
            .pin(&path)
            .map_err(|source| XdpError::Pin { path, source })?;
        for direction in TC_DIRECTIONS {
            let path = dir.join(pinned_program(AttachPoint::Tc(direction)));
            program_mut::<SchedClassifier>(&mut self.ebpf, self.shape.tc_program(direction))?
                .pin(&path)
                .map_err(|source| XdpError::Pin { path, source })?;
        }
        Ok(())
    }

    /// Runs the XDP program on `frame` with BPF_PROG_TEST_RUN, `repeat`
    /// times; counters count every repetition.
    pub fn test_run(&self, frame: &[u8], repeat: u32) -> Result<TestRun> {
        let name = self.shape.program();
        run_xdp(self.program_fd(name)?, frame, repeat).map_err(|source| XdpError::TestRun {
            program: name,
            source,
        })
    }

    /// Runs the TC program of `direction` on `frame` with
    /// BPF_PROG_TEST_RUN, `repeat` times.
    pub fn test_run_tc(
        &self,
        direction: TrafficDirection,
        frame: &[u8],
        repeat: u32,
    ) -> Result<TcTestRun> {
        let name = self.shape.tc_program(direction);
        run_tc(self.program_fd(name)?, frame, repeat).map_err(|source| XdpError::TestRun {
            program: name,
            source,
        })
    }

    /// The descriptor of the loaded program `name`.
    fn program_fd(&self, name: &'static str) -> Result<BorrowedFd<'_>> {
        let program = self
            .ebpf
            .program(name)
            .ok_or(XdpError::MissingProgram(name))?;
        let fd = program
            .fd()
            .map_err(|source| XdpError::Program { name, source })?;
        Ok(fd.as_fd())
    }
}

/// Attaches the program for `point` that [`FilterProgram::pin`] pinned in
/// `dir` to one more interface, with a BPF link pinned at `link_path`;
/// every interface shares the pinned maps.
pub fn attach_pinned_program(
    dir: &Path,
    interface: &str,
    if_index: u32,
    point: AttachPoint,
    link_path: &Path,
) -> Result<()> {
    const NAME: &str = "pinned blocklist program";
    let program_error = |source| XdpError::Program { name: NAME, source };
    let path = dir.join(pinned_program(point));
    let link = match point {
        AttachPoint::Xdp(mode) => {
            let mut program =
                Xdp::from_pin(path, XdpAttachType::Interface).map_err(program_error)?;
            attach_xdp(&mut program, NAME, if_index, mode)?
        }
        AttachPoint::Tc(direction) => {
            let mut program = SchedClassifier::from_pin(path).map_err(program_error)?;
            attach_tc(&mut program, NAME, interface, direction)?
        }
        AttachPoint::Clsact(direction) => {
            let mut program = SchedClassifier::from_pin(path).map_err(program_error)?;
            return attach_clsact(&mut program, NAME, interface, direction, link_path);
        }
    };
    pin_link(link, link_path)
}

/// The attach type of a direction's TC hook.
fn tc_attach_type(direction: TrafficDirection) -> TcAttachType {
    match direction {
        TrafficDirection::Ingress => TcAttachType::Ingress,
        TrafficDirection::Egress => TcAttachType::Egress,
    }
}

/// Attaches `program` to `interface`'s `clsact` qdisc (added if it has
/// none) on `direction` as cfctl's filter, and pins it at `marker`.
fn attach_clsact(
    program: &mut SchedClassifier,
    name: &'static str,
    interface: &str,
    direction: TrafficDirection,
    marker: &Path,
) -> Result<()> {
    let program_error = |source| XdpError::Program { name, source };
    // The qdisc is often there already (EEXIST); any other failure shows
    // in the attach that follows, which needs it.
    let _ = qdisc_add_clsact(interface);
    let options = TcAttachOptions::Netlink(NlOptions {
        priority: CLSACT_PRIORITY,
        handle: CLSACT_HANDLE,
        ..NlOptions::default()
    });
    let link_id = program
        .attach_with_options(interface, tc_attach_type(direction), options)
        .map_err(program_error)?;
    keep_clsact_filter(program.take_link(link_id).map_err(program_error)?);
    if let Err(error) = pin_marker(program, marker) {
        let _ = clsact_filter(interface, direction).map(|filter| filter.detach());
        return Err(error);
    }
    Ok(())
}

/// cfctl's `clsact` filter on `interface` in `direction`, to replace or
/// delete.
fn clsact_filter(interface: &str, direction: TrafficDirection) -> io::Result<SchedClassifierLink> {
    SchedClassifierLink::attached(
        interface,
        tc_attach_type(direction),
        CLSACT_PRIORITY,
        CLSACT_HANDLE,
        None,
    )
}

/// Leaves the filter `link` stands for on its qdisc: dropping it would
/// delete the filter.
fn keep_clsact_filter(link: SchedClassifierLink) {
    std::mem::forget(link);
}

/// Pins `program` at `marker`, in place of what is pinned there (a
/// rename, so the marker is never missing; bpffs names have no dots).
fn pin_marker(program: &mut SchedClassifier, marker: &Path) -> Result<()> {
    let mut fresh = marker.as_os_str().to_owned();
    fresh.push("-replacing");
    let fresh = PathBuf::from(fresh);
    let _ = std::fs::remove_file(&fresh);
    program.pin(&fresh).map_err(|source| XdpError::Pin {
        path: fresh.clone(),
        source,
    })?;
    std::fs::rename(&fresh, marker).map_err(|source| XdpError::PinnedLink {
        path: marker.to_owned(),
        source,
    })
}

/// Removes the pin that records a `clsact` filter.
fn remove_marker(marker: &Path) -> Result<()> {
    std::fs::remove_file(marker).map_err(|source| XdpError::PinnedLink {
        path: marker.to_owned(),
        source,
    })
}

/// The interface a `clsact` marker (`links/IFACE@clsact-DIRECTION`) is
/// for, if it still exists.
fn marker_interface(marker: &Path) -> Option<String> {
    let name = marker.file_name()?.to_str()?;
    let (interface, _) = name.rsplit_once('@')?;
    super::interface::interface_index(interface).ok()?;
    Some(interface.to_owned())
}

/// Attaches `program` to interface `if_index` in `mode`; its link.
fn attach_xdp(
    program: &mut Xdp,
    name: &'static str,
    if_index: u32,
    mode: AttachMode,
) -> Result<FdLink> {
    let program_error = |source| XdpError::Program { name, source };
    let link_id = program
        .attach_to_if_index(if_index, mode.into())
        .map_err(program_error)?;
    Ok(FdLink::try_from(
        program.take_link(link_id).map_err(program_error)?,
    )?)
}

/// Attaches `program` to `interface`'s TC hook of `direction` with a tcx
/// link, before every other program there; its link.
fn attach_tc(
    program: &mut SchedClassifier,
    name: &'static str,
    interface: &str,
    direction: TrafficDirection,
) -> Result<FdLink> {
    let program_error = |source| XdpError::Program { name, source };
    let order = TcAttachOptions::TcxOrder(LinkOrder::first());
    let link_id = program
        .attach_with_options(interface, tc_attach_type(direction), order)
        .map_err(program_error)?;
    Ok(FdLink::try_from(
        program.take_link(link_id).map_err(program_error)?,
    )?)
}

/// Pins `link` at `link_path`.
fn pin_link(link: FdLink, link_path: &Path) -> Result<()> {
    link.pin(link_path).map_err(|source| XdpError::Pin {
        path: link_path.to_owned(),
        source,
    })?;
    Ok(())
}

/// Removes an attachment made by [`FilterProgram::attach_pinned`] or
/// [`attach_pinned_program`] at `point`: the program is off the hook when
/// this returns, whoever else holds the link.
pub fn detach_pinned(link_path: &Path, point: AttachPoint) -> Result<()> {
    if let AttachPoint::Clsact(direction) = point {
        if let Some(interface) = marker_interface(link_path) {
            if let Ok(filter) = clsact_filter(&interface, direction) {
                match filter.detach() {
                    // (Gone with its qdisc.)
                    Err(error) if os_error_code(&error) == Some(libc::ENOENT) => {}
                    result => result.map_err(|source| XdpError::Program {
                        name: "clsact filter",
                        source,
                    })?,
                }
            }
        }
        return remove_marker(link_path);
    }
    detach_and_unpin(link_path).map_err(|source| XdpError::PinnedLink {
        path: link_path.to_owned(),
        source,
    })
}

/// Removes an attachment made by [`FilterProgram::attach`]: the program is
/// off the hook when this returns.
pub fn detach(link: FdLink) -> Result<()> {
    detach_link(link).map_err(|source| XdpError::Detach { source })
}

/// The loaded object's program `name`, as the program type `P`.
fn program_mut<'a, P>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut P>
where
    &'a mut P: TryFrom<&'a mut Program, Error = ProgramError>,
{
    ebpf.program_mut(name)
        .ok_or(XdpError::MissingProgram(name))?
        .try_into()
        .map_err(|source| XdpError::Program { name, source })
}

/// An empty table of `bucket_count` buckets of fingerprints `F` in buckets
/// of `S`, only to be installed as the outer map's inner template.
fn empty_table<F: TableFingerprint, const S: usize>(
    bucket_count: usize,
) -> Result<Box<dyn TableMap>, TableError> {
    Ok(Box::new(FilterTable::<F, S>::create(bucket_count)?))
}
