//! The pin directory ([`PinDir`]): where a loaded blocklist's program, maps
//! and one BPF link per interface are pinned on a bpf filesystem, so the
//! attachment outlives the process that made it:
//!
//! ```text
//! <pin dir>/program, program-tc-ingress, program-tc-egress,
//!           CONFIG, PREFILTERS, COUNTERS, ALLOW_V4, ALLOW_V6, FILTERS_FP<bits>, ...
//! <pin dir>/links/<interface>@<native|skb|tc-ingress|tc-egress|clsact-ingress|clsact-egress>
//! ```
//!
//! An interface has at most one link for each direction: on ingress the
//! XDP hook or the TC hook, on egress the TC hook. A `clsact` filter,
//! which is not a BPF object, is recorded by pinning the program it runs
//! in its place (see [`super::program`]).
//!
//! Preparing a directory mounts a bpf filesystem at `/sys/fs/bpf` when
//! nothing is mounted there yet (a fresh machine), unless this process's
//! mount namespace ends with it (as under `ip netns exec`), where the mount
//! and the attachment would vanish. Directories are created 0700 whatever
//! the umask; pins are 0600 by the kernel's own rule.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::interface::interface_index;
use super::links::link_ifindex;
use super::maps::FilterMaps;
use super::program::{
    attach_pinned_program, detach_pinned, pinned_program, FilterProgram, PINNED_PROGRAM,
};
use super::{AttachPoint, LiveFilter, Result, XdpError};
use crate::Setting;

/// The subdirectory holding one link per interface.
const LINKS_DIR: &str = "links";
/// Magic number of a bpffs in `statfs`.
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;
/// Where bpffs is normally mounted.
const BPFFS_ROOT: &str = "/sys/fs/bpf";

/// One interface with a pinned link.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Attachment {
    /// Interface name.
    pub interface: String,
    /// `xdp` or `tc`.
    pub hook: &'static str,
    /// `ingress` or `egress`.
    pub direction: &'static str,
    /// `native` or `skb` (XDP), `tcx` (TC).
    pub mode: &'static str,
    /// Where the link is, as one value.
    #[serde(skip)]
    pub point: AttachPoint,
    /// Whether the interface still exists (the kernel keeps the link on
    /// it).
    pub present: bool,
    /// Whether it is an interface of this process's network namespace
    /// (links pinned from one namespace are seen from all).
    pub in_this_namespace: bool,
}

/// A pin directory on a bpf filesystem.
#[derive(Clone, Debug)]
pub struct PinDir {
    path: PathBuf,
}

impl PinDir {
    /// The pin directory at `path` (nothing is created yet).
    pub fn new(path: &Path) -> Self {
        Self {
            path: path.to_owned(),
        }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn links_dir(&self) -> PathBuf {
        self.path.join(LINKS_DIR)
    }

    /// Whether a program is pinned here.
    pub fn has_program(&self) -> bool {
        self.path.join(PINNED_PROGRAM).exists()
    }

    /// Whether the program for `point` is pinned here (a blocklist pinned
    /// by a cfctl without the TC hook has only the XDP one).
    pub fn has_program_for(&self, point: AttachPoint) -> bool {
        self.path.join(pinned_program(point)).exists()
    }

    /// Whether anything but the link directory is pinned here.
    pub fn has_pins(&self) -> bool {
        fs::read_dir(&self.path)
            .is_ok_and(|mut pins| pins.any(|pin| pin.is_ok_and(|pin| pin.file_name() != LINKS_DIR)))
    }

    /// The live filter of the program pinned here; `None` if nothing is
    /// pinned. An error if the program is there but a map pin is missing
    /// or unusable, or if the program's pin is missing while maps or links
    /// are pinned.
    pub fn open(&self) -> Result<Option<LiveFilter>> {
        if !self.has_program() {
            if self.has_pins() || !self.links().is_empty() {
                return Err(XdpError::MissingProgramPin(self.path.join(PINNED_PROGRAM)));
            }
            return Ok(None);
        }
        FilterMaps::open_pinned(&self.path).map(|maps| Some(LiveFilter::new(maps)))
    }

    /// Makes sure the directory can hold pins (see the module
    /// documentation).
    pub fn prepare(&self) -> Result<()> {
        let error = |source| XdpError::PinDir {
            path: self.path.clone(),
            source,
        };
        let root = Path::new(BPFFS_ROOT);
        if self.path.starts_with(root) && !is_bpffs(root) {
            if mount_namespace_ends_with_this_process() {
                let namespace = named_network_namespace().unwrap_or_else(|| "NAME".to_owned());
                return Err(error(io::Error::other(format!(
                    "nothing is mounted on {BPFFS_ROOT}, and this process has a mount namespace \
                     of its own (as under `ip netns exec`, which gives each command its own \
                     /sys): a bpf filesystem mounted now would vanish when cfctl exits, and the \
                     attachment with it; enter only the network namespace instead: \
                     `nsenter --net=/run/netns/{namespace} cfctl ...`"
                ))));
            }
            super::preload::mount_bpffs(root).map_err(error)?;
        }
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(self.links_dir())
            .map_err(error)?;
        if !is_bpffs(&self.path) {
            return Err(error(io::Error::other(
                "it is not on a bpf filesystem (mount one with `mount -t bpf bpf DIR`)",
            )));
        }
        Ok(())
    }

    /// Pins `blocklist`'s program and maps here.
    pub fn pin(&self, blocklist: &mut FilterProgram) -> Result<()> {
        blocklist.pin(&self.path)
    }

    /// The interfaces with a link pinned here, by name, with the links'
    /// paths.
    pub fn links(&self) -> Vec<(Attachment, PathBuf)> {
        let Ok(dir) = fs::read_dir(self.links_dir()) else {
            return Vec::new();
        };
        let mut links: Vec<_> = dir
            .filter_map(|entry| entry.ok())
            .filter_map(|entry| {
                let name = entry.file_name().into_string().ok()?;
                let (interface, point) = name.rsplit_once('@')?;
                let point = AttachPoint::from_name(point)?;
                let here = interface_index(interface).ok();
                // Without the kernel's answer, the name's own (a clsact
                // filter's pin is its program's, which names no interface).
                let ifindex = match point {
                    AttachPoint::Clsact(_) => here,
                    _ => link_ifindex(&entry.path()).ok().or(here),
                };
                let attachment = Attachment {
                    interface: interface.to_owned(),
                    hook: point.hook(),
                    direction: point.direction().name(),
                    mode: point.mode(),
                    point,
                    present: ifindex.is_some_and(|index| index != 0),
                    in_this_namespace: here.is_some() && here == ifindex,
                };
                Some((attachment, entry.path()))
            })
            .collect();
        links.sort_by(|(a, _), (b, _)| {
            (&a.interface, a.direction).cmp(&(&b.interface, b.direction))
        });
        links
    }

    /// The interfaces with a link pinned here.
    pub fn attachments(&self) -> Vec<Attachment> {
        self.links().into_iter().map(|(link, _)| link).collect()
    }

    /// Attaches the program pinned here for `point` to `interface` (index
    /// `index`) with a link pinned in the link directory.
    pub fn attach(&self, interface: &str, index: u32, point: AttachPoint) -> Result<()> {
        let link = self
            .links_dir()
            .join(format!("{interface}@{}", point.name()));
        attach_pinned_program(&self.path, interface, index, point, &link)
    }

    /// Removes the attachment at `point` pinned at `link` (from
    /// [`Self::links`]).
    pub fn detach(&self, link: &Path, point: AttachPoint) -> Result<()> {
        detach_pinned(link, point)
    }

    /// Removes the pinned program and maps: every pin but the links.
    pub fn unpin_program_and_maps(&self) {
        let Ok(pins) = fs::read_dir(&self.path) else {
            return;
        };
        for pin in pins.filter_map(|pin| pin.ok()) {
            if pin.file_name() != LINKS_DIR {
                let _ = fs::remove_file(pin.path());
            }
        }
    }

    /// Removes the pinned program and maps and the (empty) directories.
    pub fn remove(&self) {
        self.unpin_program_and_maps();
        let _ = fs::remove_dir(self.links_dir());
        let _ = fs::remove_dir(&self.path);
    }
}

/// Whether a mount made now would vanish when this process exits: it runs
/// in a mount namespace other than init's that no other process shares (as
/// under `ip netns exec NS cfctl`, or `unshare -m cfctl`). In init's mount
/// namespace (also under `nsenter --net`), or in one a shell or service
/// around cfctl lives in, a mount outlives cfctl.
fn mount_namespace_ends_with_this_process() -> bool {
    let Some(own) = namespace_id(Path::new("/proc/self/ns/mnt")) else {
        return false;
    };
    if namespace_id(Path::new("/proc/1/ns/mnt")) == Some(own) {
        return false;
    }
    let own_pid = std::process::id().to_string();
    let Ok(processes) = fs::read_dir("/proc") else {
        return false;
    };
    !processes
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name())
        .filter(|name| name.as_encoded_bytes().iter().all(u8::is_ascii_digit))
        .filter(|name| name.as_encoded_bytes() != own_pid.as_bytes())
        .any(|pid| namespace_id(&Path::new("/proc").join(pid).join("ns/mnt")) == Some(own))
}

/// The (device, inode) pair that identifies the namespace behind a
/// `/proc/PID/ns/*` link.
fn namespace_id(link: &Path) -> Option<(u64, u64)> {
    fs::metadata(link)
        .ok()
        .map(|namespace| (namespace.dev(), namespace.ino()))
}

/// The name in `/run/netns` (where `ip netns` keeps them) of the network
/// namespace this process runs in, if it has one.
fn named_network_namespace() -> Option<String> {
    let own = namespace_id(Path::new("/proc/self/ns/net"))?;
    fs::read_dir("/run/netns")
        .ok()?
        .filter_map(|entry| entry.ok())
        .find(|entry| namespace_id(&entry.path()) == Some(own))
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
}

fn is_bpffs(path: &Path) -> bool {
    let Ok(c_path) = CString::new(path.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: statfs only writes the struct we pass.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid path and a valid out pointer.
    let found = unsafe { libc::statfs(c_path.as_ptr(), &mut stat) } == 0;
    found && stat.f_type as i64 == BPF_FS_MAGIC
}
