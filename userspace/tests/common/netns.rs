//! Test networks: a network namespace holding the peer end of a veth pair
//! whose host end stays in the test's namespace, with addresses in
//! 198.18.0.0/15 and 2001:db8::/32 only; bounded UDP and ping traffic from
//! a listed (.3 / ::3) and an unlisted (.2 / ::2) peer address, and raw
//! frames from the peer end; and bpffs
//! directories removed on drop. Guards delete what they create even when a
//! test fails.

use std::fs::File;
use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Datagrams sent per source and family by [`check_traffic`].
pub const DATAGRAMS: u64 = 5;
/// Pings sent per source and family by [`check_traffic`].
pub const PINGS: u64 = 3;
pub const PORT: u16 = 4242;
const HOST_MAC: &str = "02:cf:00:00:00:01";
const PEER_MAC: &str = "02:cf:00:00:00:02";
const HOST_MAC_BYTES: [u8; 6] = [0x02, 0xcf, 0, 0, 0, 1];
const PEER_MAC_BYTES: [u8; 6] = [0x02, 0xcf, 0, 0, 0, 2];

/// Runs `ip` with `args`, failing the test with its output if it fails.
pub fn ip(args: &[&str]) {
    let output = Command::new("ip")
        .args(args)
        .output()
        .expect("running ip (iproute2)");
    assert!(
        output.status.success(),
        "ip {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Moves the calling thread into network namespace `name` (made by `ip
/// netns add`), for good: for a thread of its own, never the test's main
/// thread, which must stay outside to clean up.
pub fn enter_namespace(name: &str) {
    let file = File::open(Path::new("/run/netns").join(name)).expect("the namespace's file");
    // SAFETY: setns(2) on a descriptor this function holds open; it
    // switches only the calling thread's network namespace.
    let entered = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(entered, 0, "setns: {}", std::io::Error::last_os_error());
}

/// A network namespace holding the peer end of a veth pair, with test
/// addresses and static neighbours on both sides. Drop deletes the
/// namespace (which deletes the veth pair) and the host link if still there.
pub struct TestNetwork {
    pub namespace: String,
    pub host_link: String,
    /// The veth end inside the namespace.
    pub peer_link: String,
    subnet: u8,
}

impl TestNetwork {
    /// The name the host end of network `subnet` gets, before it exists.
    pub fn host_link_of(subnet: u8) -> String {
        format!("cfh{}", Self::tag(subnet))
    }

    /// What makes this test process's names for network `subnet` unique.
    fn tag(subnet: u8) -> String {
        format!("{}x{subnet}", std::process::id() % 100_000)
    }

    pub fn new(subnet: u8) -> Self {
        let tag = Self::tag(subnet);
        let network = TestNetwork {
            namespace: format!("cfxdp{tag}"),
            host_link: Self::host_link_of(subnet),
            peer_link: format!("cfp{tag}"),
            subnet,
        };
        let peer_link = network.peer_link.as_str();
        let ns = network.namespace.as_str();
        ip(&["netns", "add", ns]);
        ip(&[
            "link",
            "add",
            &network.host_link,
            "address",
            HOST_MAC,
            "type",
            "veth",
            "peer",
            "name",
            peer_link,
            "address",
            PEER_MAC,
            "netns",
            ns,
        ]);
        let host = network.host_link.as_str();
        ip(&["addr", "add", &format!("{}/24", network.v4(1)), "dev", host]);
        ip(&[
            "addr",
            "add",
            &format!("{}/64", network.v6(1)),
            "dev",
            host,
            "nodad",
        ]);
        for peer in [2, 3] {
            ip(&[
                "-n",
                ns,
                "addr",
                "add",
                &format!("{}/24", network.v4(peer)),
                "dev",
                peer_link,
            ]);
            ip(&[
                "-n",
                ns,
                "addr",
                "add",
                &format!("{}/64", network.v6(peer)),
                "dev",
                peer_link,
                "nodad",
            ]);
            for address in [network.v4(peer), network.v6(peer)] {
                ip(&[
                    "neigh",
                    "replace",
                    &address.to_string(),
                    "lladdr",
                    PEER_MAC,
                    "dev",
                    host,
                    "nud",
                    "permanent",
                ]);
            }
        }
        for address in [network.v4(1), network.v6(1)] {
            ip(&[
                "-n",
                ns,
                "neigh",
                "replace",
                &address.to_string(),
                "lladdr",
                HOST_MAC,
                "dev",
                peer_link,
                "nud",
                "permanent",
            ]);
        }
        ip(&["link", "set", host, "up"]);
        ip(&["-n", ns, "link", "set", peer_link, "up"]);
        ip(&["-n", ns, "link", "set", "lo", "up"]);
        network
    }

    /// Moves the calling thread into the namespace, for good: processes it
    /// starts from then on run there too (servers on the namespace's own
    /// 127.0.0.1). For a thread of its own, never the test's main thread,
    /// which must stay outside to clean up.
    pub fn enter(&self) {
        enter_namespace(&self.namespace);
    }

    /// 198.18.<subnet>.<host>
    pub fn v4(&self, host: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(198, 18, self.subnet, host))
    }

    /// 2001:db8:<subnet>::<host>
    pub fn v6(&self, host: u8) -> IpAddr {
        IpAddr::V6(Ipv6Addr::new(
            0x2001,
            0xdb8,
            self.subnet.into(),
            0,
            0,
            0,
            0,
            host.into(),
        ))
    }

    pub fn host_index(&self) -> u32 {
        let name = std::ffi::CString::new(self.host_link.as_str()).expect("a link name");
        // SAFETY: a valid NUL-terminated name.
        let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
        assert_ne!(index, 0, "no interface {}", self.host_link);
        index
    }

    /// Sends `count` UDP datagrams with `payload` from `source` (in the
    /// namespace) to `destination`, from a thread that enters the namespace.
    pub fn send_udp(
        &self,
        source: IpAddr,
        destination: SocketAddr,
        payload: &'static [u8],
        count: u64,
    ) {
        let namespace = self.namespace.clone();
        std::thread::spawn(move || {
            enter_namespace(&namespace);
            let socket = UdpSocket::bind(SocketAddr::new(source, 0)).expect("binding the sender");
            for _ in 0..count {
                socket
                    .send_to(payload, destination)
                    .expect("sending a datagram");
            }
        })
        .join()
        .expect("the sender thread");
    }

    /// Sends each of `frames` once from the peer end of the veth, through a
    /// raw packet socket in the namespace; fails the test unless all go
    /// out.
    pub fn send_frames(&self, frames: &[Vec<u8>]) {
        let namespace = File::open(Path::new("/run/netns").join(&self.namespace))
            .expect("opening the namespace");
        let link = std::ffi::CString::new(self.peer_link.as_str()).expect("a link name");
        let sent = std::thread::scope(|scope| {
            scope
                .spawn(|| super::raw_frames::send_from_namespace(&namespace, &link, frames))
                .join()
                .expect("the sender thread")
                .expect("sending raw frames")
        });
        assert_eq!(sent, frames.len(), "raw frames sent");
    }

    /// A UDP datagram with `payload` from the peer address `source` to
    /// `destination` on the host end, as a frame on the veth behind
    /// `tags` priority tags (VLAN id 0) whose outer one has the protocol
    /// `outer`.
    pub fn tagged_datagram(
        &self,
        source: IpAddr,
        destination: SocketAddr,
        payload: &[u8],
        tags: usize,
        outer: u16,
    ) -> Vec<u8> {
        let ethernet = etherparse::PacketBuilder::ethernet2(PEER_MAC_BYTES, HOST_MAC_BYTES);
        let builder = match (source, destination.ip()) {
            (IpAddr::V4(source), IpAddr::V4(host)) => {
                ethernet.ipv4(source.octets(), host.octets(), 64)
            }
            (IpAddr::V6(source), IpAddr::V6(host)) => {
                ethernet.ipv6(source.octets(), host.octets(), 64)
            }
            _ => panic!("{source} and {destination} are of different families"),
        }
        .udp(40000, destination.port());
        let mut frame = Vec::with_capacity(builder.size(payload.len()));
        builder
            .write(&mut frame, payload)
            .expect("writing to a Vec");
        super::with_priority_tags(&frame, tags, outer)
    }

    /// Whether pings from `source` to `destination` get any reply.
    pub fn ping(&self, source: IpAddr, destination: IpAddr) -> bool {
        let (count, source, destination) = (
            PINGS.to_string(),
            source.to_string(),
            destination.to_string(),
        );
        let status = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.namespace,
                "ping",
                "-n",
                "-q",
                "-c",
                &count,
                "-i",
                "0.2",
                "-W",
                "1",
                "-I",
            ])
            .args([&source, &destination])
            .output()
            .expect("running ping in the namespace");
        status.status.success()
    }
}

impl Drop for TestNetwork {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.namespace])
            .output();
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_link])
            .output();
    }
}

/// Receives on `socket` until the marker datagram comes (or 5 s pass
/// without any datagram); returns how many listed and unlisted datagrams
/// arrived. Datagrams on one veth queue arrive in order, so everything sent
/// before the marker has been through XDP by then.
pub fn receive_until_marker(socket: &UdpSocket) -> (u64, u64) {
    socket
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("setting a timeout");
    let (mut listed, mut unlisted) = (0, 0);
    let mut buffer = [0u8; 64];
    // A bound on the loop, above what any test sends before its marker.
    for _ in 0..1000 {
        match socket.recv(&mut buffer) {
            Ok(len) => match &buffer[..len] {
                b"listed" => listed += 1,
                b"unlisted" => unlisted += 1,
                b"marker" => return (listed, unlisted),
                b"probe" => {}
                other => panic!("unexpected datagram {other:?}"),
            },
            Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!("the marker datagram did not arrive (listed {listed}, unlisted {unlisted})")
            }
            Err(error) => panic!("receiving: {error}"),
        }
    }
    panic!("more datagrams than were sent")
}

/// Sends probe datagrams from `source` to `receiver`, one at a time,
/// until one arrives (at most 100): attaching or detaching an XDP program
/// in native mode restarts the veth's queues, and what is sent meanwhile
/// is lost, which would look like a wrong verdict.
pub fn wait_until_the_path_carries(network: &TestNetwork, receiver: &UdpSocket, source: IpAddr) {
    let destination = receiver.local_addr().expect("the receiver's address");
    receiver
        .set_read_timeout(Some(Duration::from_millis(50)))
        .expect("setting a timeout");
    let mut buffer = [0u8; 64];
    for _ in 0..100 {
        network.send_udp(source, destination, b"probe", 1);
        if receiver.recv(&mut buffer).is_ok() {
            return;
        }
    }
    panic!("no probe from {source} reached {destination} in 100 tries");
}

/// Sends UDP and pings from the listed (.3 / ::3) and unlisted (.2 / ::2)
/// peer addresses and checks what arrives. Returns nothing; panics on a
/// mismatch.
pub fn check_traffic(network: &TestNetwork, listed_blocked: bool) {
    for (host, listed, unlisted) in [
        (network.v4(1), network.v4(3), network.v4(2)),
        (network.v6(1), network.v6(3), network.v6(2)),
    ] {
        let receiver = UdpSocket::bind(SocketAddr::new(host, PORT)).expect("binding the receiver");
        let destination = receiver.local_addr().expect("the receiver's address");
        wait_until_the_path_carries(network, &receiver, unlisted);
        network.send_udp(listed, destination, b"listed", DATAGRAMS);
        network.send_udp(unlisted, destination, b"unlisted", DATAGRAMS);
        network.send_udp(unlisted, destination, b"marker", 1);
        let expected_listed = if listed_blocked { 0 } else { DATAGRAMS };
        assert_eq!(
            receive_until_marker(&receiver),
            (expected_listed, DATAGRAMS),
            "UDP to {host}: (listed, unlisted) received"
        );
        assert_eq!(
            network.ping(listed, host),
            !listed_blocked,
            "ping from listed {listed} answered"
        );
        assert!(
            network.ping(unlisted, host),
            "ping from unlisted {unlisted} answered"
        );
    }
}

/// Mounts bpffs at /sys/fs/bpf if nothing is mounted there.
pub fn ensure_bpffs() {
    let mounts = std::fs::read_to_string("/proc/mounts").expect("reading /proc/mounts");
    if !mounts
        .lines()
        .any(|line| line.split(' ').nth(1) == Some("/sys/fs/bpf"))
    {
        let status = Command::new("mount")
            .args(["-t", "bpf", "bpf", "/sys/fs/bpf"])
            .status()
            .expect("running mount");
        assert!(status.success(), "cannot mount bpffs at /sys/fs/bpf");
    }
}

/// A directory on bpffs, removed with everything pinned in it on drop.
pub struct PinDir(pub PathBuf);

impl Drop for PinDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
