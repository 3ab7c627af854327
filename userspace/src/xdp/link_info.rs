//! Which interface a pinned XDP or tcx link is on, as the kernel says: the
//! `xdp.ifindex` member of `struct bpf_link_info` (`tcx.ifindex`, at the
//! same place), zero once the interface is gone (the kernel detaches the
//! link). A name looked up by cfctl says
//! less: interface names belong to a network namespace, and a link pinned
//! from one namespace is seen from every other.
//!
//! aya 0.14 exposes neither the fd of a pinned link nor that member, so
//! this module issues the `bpf` syscall itself: `BPF_OBJ_GET` (command 7)
//! for the pin, `BPF_OBJ_GET_INFO_BY_FD` (command 15) for its info.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

const BPF_OBJ_GET: libc::c_long = 7;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;

/// The `BPF_OBJ_*` member of `union bpf_attr`.
#[repr(C)]
#[derive(Default)]
struct ObjectAttr {
    pathname: u64,
    bpf_fd: u32,
    file_flags: u32,
    path_fd: i32,
    padding: u32,
}

/// The `info` member of `union bpf_attr`.
#[repr(C)]
#[derive(Default)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// The head of `struct bpf_link_info` with its `xdp` (or `tcx`) member: the kernel
/// fills as much of the struct as the length it is given.
#[repr(C)]
#[derive(Default)]
struct XdpLinkInfo {
    link_type: u32,
    id: u32,
    prog_id: u32,
    /// The union starts 8-byte aligned.
    padding: u32,
    ifindex: u32,
    tail: u32,
}

/// Runs the `bpf` syscall `command` on `attr`.
fn bpf<T>(command: libc::c_long, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a valid bpf_attr member of its size; the kernel
    // reads it and writes only where its pointers say.
    let result = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            command,
            attr as *mut T,
            std::mem::size_of::<T>(),
        )
    };
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(result)
    }
}

/// The index of the interface the XDP or tcx link pinned at `pin` is on; zero if
/// the interface is gone.
pub fn link_ifindex(pin: &Path) -> io::Result<u32> {
    let path = CString::new(pin.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))?;
    let mut object = ObjectAttr {
        pathname: path.as_ptr() as u64,
        ..ObjectAttr::default()
    };
    let fd = bpf(BPF_OBJ_GET, &mut object)?;
    // SAFETY: BPF_OBJ_GET returned a new descriptor that nothing else owns.
    let link = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let mut info = XdpLinkInfo::default();
    let mut attr = InfoAttr {
        bpf_fd: link.as_raw_fd() as u32,
        info_len: std::mem::size_of::<XdpLinkInfo>() as u32,
        info: &mut info as *mut XdpLinkInfo as u64,
    };
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    Ok(info.ifindex)
}
