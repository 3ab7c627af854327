//! Sending prebuilt Ethernet frames from inside a network namespace
//! through a raw packet socket, as a host on the link would: for frames no
//! socket of the IP stack would build (stacked VLAN tags, traffic from
//! many sources). Shared by the tests and `examples/xdp_bench.rs`.

use std::ffi::CStr;
use std::fs::File;
use std::os::fd::AsRawFd;

/// Joins `namespace` (this thread only: run it in a thread of its own),
/// opens a raw packet socket on the interface `link` there and sends each
/// frame once; returns how many went out whole.
pub fn send_from_namespace(
    namespace: &File,
    link: &CStr,
    frames: &[Vec<u8>],
) -> std::io::Result<usize> {
    // SAFETY: plain syscalls on valid descriptors, a NUL-terminated name
    // and a zeroed, then filled, socket address; setns changes only this
    // thread's network namespace.
    unsafe {
        if libc::setns(namespace.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let index = libc::if_nametoindex(link.as_ptr());
        let socket = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0);
        if index == 0 || socket < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut address: libc::sockaddr_ll = std::mem::zeroed();
        address.sll_family = libc::AF_PACKET as u16;
        address.sll_ifindex = index as i32;
        address.sll_halen = 6;
        let mut sent = 0;
        for frame in frames {
            let result = libc::sendto(
                socket,
                frame.as_ptr().cast(),
                frame.len(),
                0,
                (&raw const address).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            );
            sent += usize::from(result == frame.len() as isize);
        }
        libc::close(socket);
        Ok(sent)
    }
}
