//! The kernel's network interfaces by name: index and MTU, and a wait for
//! one that is yet to appear.

use std::ffi::CString;
use std::time::{Duration, Instant};

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

/// How often [`wait_for_interface`] looks.
const WAIT_STEP: Duration = Duration::from_millis(100);

/// The index of interface `name`, once it exists: looked up every tenth of
/// a second for at most `patience` (a driver or a USB adapter that comes up
/// after the service that attaches to it, udev naming it meanwhile).
pub fn wait_for_interface(name: &str, patience: Duration) -> Result<u32> {
    let deadline = Instant::now() + patience;
    loop {
        match interface_index(name) {
            Err(XdpError::NoInterface(_)) if Instant::now() < deadline => {
                std::thread::sleep(
                    WAIT_STEP.min(deadline.saturating_duration_since(Instant::now())),
                );
            }
            Err(XdpError::NoInterface(_)) => {
                return Err(XdpError::InterfaceNeverAppeared {
                    interface: name.to_owned(),
                    waited: patience,
                })
            }
            found => return found,
        }
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
