//! The kernel's network interfaces by name: index and MTU.

use std::ffi::CString;

use super::{Result, XdpError};

/// The kernel's index of interface `name`.
pub fn interface_index(name: &str) -> Result<u32> {
    let no_interface = || XdpError::NoInterface(name.to_owned());
    let c_name = CString::new(name).map_err(|_| no_interface())?;
    // SAFETY: a valid NUL-terminated string.
    match unsafe { libc::if_nametoindex(c_name.as_ptr()) } {
        0 => Err(no_interface()),
        index => Ok(index),
    }
}

/// The MTU of interface `name`, if it can be read (`SIOCGIFMTU`).
pub fn interface_mtu(name: &str) -> Option<u32> {
    let name = CString::new(name).ok()?;
    // SAFETY: a zeroed ifreq is a valid one.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    let bytes = name.as_bytes_with_nul();
    if bytes.len() > request.ifr_name.len() {
        return None;
    }
    for (slot, &byte) in request.ifr_name.iter_mut().zip(bytes) {
        *slot = byte as libc::c_char;
    }
    // SAFETY: plain syscalls: a datagram socket only to ask, closed below;
    // ioctl reads the name from and writes the MTU into `request`.
    unsafe {
        let socket = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
        if socket < 0 {
            return None;
        }
        let result = libc::ioctl(socket, libc::SIOCGIFMTU, &mut request);
        libc::close(socket);
        (result == 0).then_some(request.ifr_ifru.ifru_mtu as u32)
    }
}
