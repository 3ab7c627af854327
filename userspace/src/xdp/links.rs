//! XDP and tcx links as the kernel holds them, for what aya 0.14 does not
//! expose:
//! - which interface a pinned link is on: the `xdp.ifindex` member of
//!   `struct bpf_link_info` (`tcx.ifindex`, at the same place), zero once
//!   the interface is gone (the kernel detaches the link). A name looked up
//!   by cfctl says less: interface names belong to a network namespace,
//!   and a link pinned from one namespace is seen from every other;
//! - detaching a link from its hook at once (`BPF_LINK_DETACH`). Closing
//!   a link detaches it only when its last reference goes, and others may
//!   hold one: another cfctl reading the pin, or a child process forked
//!   between its `fork` and `exec` with the loader's descriptors. Until
//!   then the program would go on dropping packets after a detach that
//!   said it was done.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;

use aya::programs::links::FdLink;

use super::syscall::{bpf, bpf_new_fd};

const BPF_OBJ_GET: libc::c_long = 7;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_LINK_GET_FD_BY_ID: libc::c_long = 30;
const BPF_LINK_DETACH: libc::c_long = 34;

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

/// The `*_GET_FD_BY_ID` member of `union bpf_attr` (`link_id` shares the
/// first field).
#[repr(C)]
#[derive(Default)]
struct GetByIdAttr {
    link_id: u32,
    next_id: u32,
    open_flags: u32,
}

/// The `link_detach` member of `union bpf_attr`.
#[repr(C)]
struct LinkDetachAttr {
    link_fd: u32,
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

/// A new descriptor of the link pinned at `pin`.
fn open_pinned(pin: &Path) -> io::Result<OwnedFd> {
    let path = CString::new(pin.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))?;
    let mut object = ObjectAttr {
        pathname: path.as_ptr() as u64,
        ..ObjectAttr::default()
    };
    // SAFETY: the `BPF_OBJ_GET` member, whose path outlives the call.
    unsafe { bpf_new_fd(BPF_OBJ_GET, &mut object) }
}

/// The index of the interface the XDP or tcx link pinned at `pin` is on; zero if
/// the interface is gone.
pub fn link_ifindex(pin: &Path) -> io::Result<u32> {
    let link = open_pinned(pin)?;
    let mut info = XdpLinkInfo::default();
    let mut attr = InfoAttr {
        bpf_fd: link.as_raw_fd() as u32,
        info_len: std::mem::size_of::<XdpLinkInfo>() as u32,
        info: &mut info as *mut XdpLinkInfo as u64,
    };
    // SAFETY: the `info` member, naming `info` with its size.
    unsafe { bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr) }?;
    Ok(info.ifindex)
}

/// Detaches the link `link` from its hook now, whoever else holds it.
/// A link already off its hook (its interface gone) is left as it is.
fn detach(link: BorrowedFd<'_>) -> io::Result<()> {
    let mut attr = LinkDetachAttr {
        link_fd: link.as_raw_fd() as u32,
    };
    // SAFETY: the `link_detach` member, which holds no address.
    unsafe { bpf(BPF_LINK_DETACH, &mut attr) }.map(drop)
}

/// Detaches the link pinned at `pin` from its hook now, whoever else
/// holds it, and removes the pin.
pub fn detach_and_unpin(pin: &Path) -> io::Result<()> {
    detach(open_pinned(pin)?.as_fd())?;
    std::fs::remove_file(pin)
}

/// Detaches `link` from its hook now, whoever else holds it, and closes
/// it.
pub fn detach_link(link: FdLink) -> io::Result<()> {
    let info = link.info().map_err(io::Error::other)?;
    let mut attr = GetByIdAttr {
        link_id: info.id(),
        ..GetByIdAttr::default()
    };
    // SAFETY: the `*_GET_FD_BY_ID` member, which holds no address.
    let descriptor = unsafe { bpf_new_fd(BPF_LINK_GET_FD_BY_ID, &mut attr) }?;
    detach(descriptor.as_fd())
}
