//! The `bpf` syscall, for the commands aya 0.14 does not expose: each call
//! passes one member of `union bpf_attr` (include/uapi/linux/bpf.h), and
//! the kernel takes the size it is given as the size of the union.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

/// Runs the `bpf` syscall `command` on `attr`; its non-negative result.
///
/// # Safety
///
/// `attr` must be a `#[repr(C)]` copy of the member of `union bpf_attr`
/// that `command` reads, and every address in it must point at memory
/// that stays valid through the call for what the kernel does there
/// (reads a frame, fills an info struct).
pub(super) unsafe fn bpf<T>(command: libc::c_long, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is valid for reads and writes of the size passed; the
    // caller vouches for the memory its addresses name.
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

/// Runs the `bpf` syscall `command`, one that returns a new file
/// descriptor (`BPF_MAP_CREATE`, `BPF_OBJ_GET`, `BPF_LINK_GET_FD_BY_ID`),
/// on `attr`; the descriptor.
///
/// # Safety
///
/// As for [`bpf`].
pub(super) unsafe fn bpf_new_fd<T>(command: libc::c_long, attr: &mut T) -> io::Result<OwnedFd> {
    // SAFETY: the caller's guarantee, passed on.
    let result = unsafe { bpf(command, attr) }?;
    let fd = i32::try_from(result)
        .map_err(|_| io::Error::other("the bpf syscall returned no file descriptor"))?;
    // SAFETY: the command returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
