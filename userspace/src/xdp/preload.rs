//! Creates a blocklist's outer filter map (`ARRAY_OF_MAPS`) before its
//! object is loaded, with the first filter table as the inner-map template,
//! and hands it to aya through a pin on a private, temporary bpffs mount.
//!
//! Why: the inner template fixes the size of every table the outer map can
//! hold, and only for tables of a size fixed this way (no
//! `BPF_F_INNER_MAP`) does the verifier inline the program's bucket lookups,
//! which halves the cost of a probe. aya 0.14 sizes an object's inner
//! template from the object (a compile-time constant), and takes an existing
//! map only from a bpffs pin, hence the pin. The mount is the loader's own,
//! so it works without `/sys/fs/bpf` and leaves nothing behind.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use aya::maps::MapData;
use cfxdp::PROFILE_COUNT;

use super::syscall::bpf_new_fd;

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_TYPE_ARRAY_OF_MAPS: u32 = 12;

/// The leading fields of the `BPF_MAP_CREATE` member of `union bpf_attr`;
/// the kernel treats the fields after them as zero.
#[repr(C)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

/// A new `ARRAY_OF_MAPS` of [`PROFILE_COUNT`] slots whose inner maps must
/// look like `template` (same size and flags).
pub fn create_outer_map(name: &str, template: &MapData) -> io::Result<MapData> {
    let mut map_name = [0u8; 16];
    for (destination, source) in map_name.iter_mut().zip(name.bytes().take(15)) {
        *destination = source;
    }
    let mut attr = MapCreateAttr {
        map_type: BPF_MAP_TYPE_ARRAY_OF_MAPS,
        key_size: 4,
        value_size: 4,
        max_entries: PROFILE_COUNT as u32,
        map_flags: 0,
        inner_map_fd: template.fd().as_fd().as_raw_fd() as u32,
        numa_node: 0,
        map_name,
    };
    // SAFETY: the `BPF_MAP_CREATE` member, which holds no address.
    let fd = unsafe { bpf_new_fd(BPF_MAP_CREATE, &mut attr) }?;
    MapData::from_fd(fd).map_err(io::Error::other)
}

/// A bpffs mounted on a fresh temporary directory; unmounted and removed
/// on drop (pins in it go with it).
#[derive(Debug)]
pub struct TemporaryBpffs {
    dir: PathBuf,
}

impl TemporaryBpffs {
    /// Mounts a new bpffs instance (needs CAP_SYS_ADMIN).
    pub fn mount() -> io::Result<Self> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "cfxdp-load-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&dir)?;
        if let Err(error) = mount_bpffs(&dir) {
            let _ = std::fs::remove_dir(&dir);
            return Err(error);
        }
        Ok(Self { dir })
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.dir
    }
}

/// Mounts a new bpffs instance on the existing directory `target` (needs
/// CAP_SYS_ADMIN).
pub fn mount_bpffs(target: &Path) -> io::Result<()> {
    let target = c_path(target)?;
    let fs_type = c"bpf";
    // SAFETY: valid NUL-terminated strings; no mount data.
    let mounted = unsafe {
        libc::mount(
            fs_type.as_ptr(),
            target.as_ptr(),
            fs_type.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if mounted == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

impl Drop for TemporaryBpffs {
    fn drop(&mut self) {
        if let Ok(target) = c_path(&self.dir) {
            // SAFETY: a valid NUL-terminated path; a lazy unmount of our own
            // mount.
            unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}
