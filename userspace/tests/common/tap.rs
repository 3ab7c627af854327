//! A network namespace with a tap device for the QEMU firmware's LAN9118
//! (198.18.250.1/24 on the Linux side, the device at [`DEVICE`], IPv6 off
//! so that the kernel sends nothing of its own), `cfctl --device udp:`
//! run inside it, sockets and datagram exchanges in it, and a key file
//! with the QEMU test key. The namespace (and the tap with it) is deleted
//! on drop.

use std::net::UdpSocket;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use super::cli::binary;
use super::netns::{enter_namespace, ip};
use super::qemu::UPDATE_KEY_HEX;

/// Where the QEMU image built with a key takes updates.
pub const DEVICE: &str = "198.18.250.2:7070";
/// The tap device in the namespace.
pub const TAP: &str = "tap0";

/// A network namespace with a tap device, deleted on drop.
pub struct TapNamespace {
    pub name: String,
}

impl TapNamespace {
    pub fn new() -> Self {
        let name = format!("cfudp-{}", std::process::id());
        ip(&["netns", "add", &name]);
        let namespace = Self { name };
        let name = namespace.name.as_str();
        ip(&["-n", name, "tuntap", "add", "dev", TAP, "mode", "tap"]);
        ip(&["-n", name, "addr", "add", "198.18.250.1/24", "dev", TAP]);
        // No IPv6 on the tap: no neighbour or router solicitations, no MLD
        // reports, nothing the device would count as traffic.
        ip(&["-n", name, "link", "set", TAP, "addrgenmode", "none"]);
        ip(&["-n", name, "link", "set", TAP, "up"]);
        ip(&["-n", name, "link", "set", "lo", "up"]);
        namespace
    }

    /// `cfctl --json --device udp:DEVICE --device-key KEY ARGS`, run in the
    /// namespace.
    pub fn cfctl(&self, key_file: &Path, args: &[&str]) -> Output {
        let cfctl = binary();
        Command::new("ip")
            .args(["netns", "exec", &self.name])
            .arg(cfctl.get_program())
            .args([
                "--json",
                "--device",
                &format!("udp:{DEVICE}"),
                "--device-key",
            ])
            .arg(key_file)
            .args(args)
            .output()
            .expect("running cfctl in the namespace")
    }

    /// A UDP socket bound to `address` inside the namespace (made by a
    /// thread that enters it; a socket stays in the namespace it was made
    /// in).
    pub fn socket(&self, address: &str) -> UdpSocket {
        let (name, address) = (self.name.clone(), address.to_owned());
        std::thread::spawn(move || {
            enter_namespace(&name);
            UdpSocket::bind(address).expect("a socket in the namespace")
        })
        .join()
        .expect("the namespace's thread")
    }

    /// Sends `datagrams` to the device from a socket in the namespace, one
    /// at a time; returns the answer to each, or `None` if none came
    /// within `wait`.
    pub fn exchange(&self, datagrams: &[Vec<u8>], wait: Duration) -> Vec<Option<Vec<u8>>> {
        let socket = self.socket("198.18.250.1:0");
        socket.connect(DEVICE).expect("the device's address");
        socket.set_read_timeout(Some(wait)).expect("a timeout");
        datagrams
            .iter()
            .map(|datagram| {
                socket.send(datagram).expect("sending");
                let mut answer = [0u8; 512];
                socket
                    .recv(&mut answer)
                    .ok()
                    .map(|len| answer[..len].to_vec())
            })
            .collect()
    }
}

/// Writes the QEMU test key into `dir/device.key`, readable by its owner
/// only, as `cfctl --device-key` wants it.
pub fn key_file(dir: &Path) -> PathBuf {
    let path = dir.join("device.key");
    std::fs::write(&path, format!("{UPDATE_KEY_HEX}\n")).expect("the key file");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    path
}

impl Drop for TapNamespace {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}
