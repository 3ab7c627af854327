//! The QEMU firmware image: built (or named by `CF_QEMU_FIRMWARE`), booted
//! on `mps2-an386` with UART0 on a unix socket or a loopback TCP port, and
//! with no network (`-nic none`) or its LAN9118 on a UDP socket of
//! 127.0.0.1 (`-netdev dgram`: one datagram per Ethernet frame), killed
//! and cleaned up on drop, its defmt log decoded. Needs `qemu-system-arm`
//! and `defmt-print`.

use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// A fresh scratch directory for one QEMU process.
fn scratch_dir() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "cf-qemu-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The QEMU image: `CF_QEMU_FIRMWARE` if set, else built (or found up to
/// date) by cargo in the firmware's board workspace.
pub fn firmware_elf() -> PathBuf {
    if let Some(elf) = std::env::var_os("CF_QEMU_FIRMWARE") {
        return PathBuf::from(elf);
    }
    build_qemu_image(&[], "target")
}

/// The QEMU image with the test-only fault triggers (feature
/// `fault-triggers`), built into a target directory of its own so that it
/// never replaces the normal image.
pub fn firmware_elf_with_fault_triggers() -> PathBuf {
    build_qemu_image(&["--features", "fault-triggers"], "target/fault-triggers")
}

/// The key the image of [`firmware_elf_with_update_key`] is built with.
pub const UPDATE_KEY_HEX: &str = "4b6579206f66207468652074657374732c206e65766572206120726561616c21";

/// The QEMU image that takes updates over UDP, sealed under
/// [`UPDATE_KEY_HEX`] (`FILTER_DEVICE_KEY` when built), in a target
/// directory of its own.
pub fn firmware_elf_with_update_key() -> PathBuf {
    build_qemu_image_with(&[], "target/update-key", Some(UPDATE_KEY_HEX))
}

fn build_qemu_image(features: &[&str], target_dir: &str) -> PathBuf {
    build_qemu_image_with(features, target_dir, None)
}

fn build_qemu_image_with(features: &[&str], target_dir: &str, key: Option<&str>) -> PathBuf {
    let boards = repo_root().join("firmware/boards");
    let mut cargo = Command::new(env!("CARGO"));
    match key {
        Some(key) => cargo.env("FILTER_DEVICE_KEY", key),
        None => cargo.env_remove("FILTER_DEVICE_KEY"),
    };
    let status = cargo
        .args([
            "build",
            "--release",
            "-p",
            "qemu-mps2",
            "--target-dir",
            target_dir,
        ])
        .args(features)
        .current_dir(&boards)
        .status()
        .expect("run cargo");
    assert!(status.success(), "building the QEMU firmware failed");
    boards
        .join(target_dir)
        .join("thumbv7em-none-eabihf/release/qemu-mps2")
}

/// The highest stack high-water mark a decoded defmt log reports.
pub fn stack_high_water_mark(log: &str) -> usize {
    log.lines()
        .filter_map(|line| line.split("stack high-water mark: ").nth(1))
        .filter_map(|rest| rest.trim_end_matches(" bytes").parse::<usize>().ok())
        .max()
        .expect("no stack high-water mark in the log")
}

/// A QEMU process and its scratch directory; killed and removed on drop,
/// so a failing test leaves nothing behind.
pub struct Qemu {
    child: Child,
    dir: PathBuf,
    device: String,
}

impl Qemu {
    /// Boots `elf` with UART0 on a unix socket in the scratch directory.
    pub fn boot(elf: &Path) -> (Self, UnixStream) {
        Self::boot_on_unix_socket(elf, &[], &["-nic", "none"])
    }

    /// Boots `elf` inside network namespace `namespace` (`ip netns exec`,
    /// which execs QEMU: the PID is QEMU's), with UART0 on a unix socket and
    /// the LAN9118 on the tap device `tap` of that namespace.
    pub fn boot_on_tap(elf: &Path, namespace: &str, tap: &str) -> (Self, UnixStream) {
        let netdev = format!("tap,id=n0,ifname={tap},script=no,downscript=no");
        Self::boot_on_unix_socket(
            elf,
            &["ip", "netns", "exec", namespace],
            &["-netdev", &netdev, "-net", "nic,netdev=n0,model=lan9118"],
        )
    }

    /// Boots `elf` as [`Self::boot_on_tap`] does, with the LAN9118 on an
    /// emulated hub that also holds a UDP socket of the namespace's
    /// 127.0.0.1 (`-netdev dgram` on port `free`): `trunk`, bound in the
    /// namespace, then sends frames that the controller (and the tap)
    /// receive, and receives every frame the controller or the tap sends.
    pub fn boot_on_tap_with_trunk(
        elf: &Path,
        namespace: &str,
        tap: &str,
        trunk: &UdpSocket,
        free: u16,
    ) -> (Self, UnixStream) {
        let tap = format!("tap,id=t0,ifname={tap},script=no,downscript=no");
        let dgram = dgram_netdev("d0", free, trunk);
        let (qemu, stream) = Self::boot_on_unix_socket(
            elf,
            &["ip", "netns", "exec", namespace],
            &[
                "-netdev",
                "hubport,id=n0,hubid=0",
                "-net",
                "nic,netdev=n0,model=lan9118",
                "-netdev",
                &tap,
                "-netdev",
                "hubport,id=n1,hubid=0,netdev=t0",
                "-netdev",
                &dgram,
                "-netdev",
                "hubport,id=n2,hubid=0,netdev=d0",
            ],
        );
        trunk
            .connect((Ipv4Addr::LOCALHOST, free))
            .expect("connecting to the emulated port");
        (qemu, stream)
    }

    /// Boots `elf` with UART0 on a unix socket and `network` as the
    /// emulator's network arguments, QEMU started by `runner` (a command
    /// that execs it) when that is not empty.
    fn boot_on_unix_socket(elf: &Path, runner: &[&str], network: &[&str]) -> (Self, UnixStream) {
        let dir = scratch_dir();
        let socket = dir.join("uart0.sock");
        let mut qemu = Self::spawn(
            elf,
            runner,
            dir,
            format!("unix:{},server=on,wait=on", socket.display()),
            socket.display().to_string(),
            network,
        );
        let stream = qemu.first_client(|| UnixStream::connect(&socket));
        (qemu, stream)
    }

    /// Boots `elf` as [`Self::boot`] does, with the LAN9118 attached to a
    /// UDP socket of 127.0.0.1: the returned socket sends the frames the
    /// controller receives and receives the frames it sends.
    pub fn boot_with_ethernet(elf: &Path) -> (Self, UnixStream, UdpSocket) {
        let port = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("a UDP socket");
        let free = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|socket| socket.local_addr())
            .expect("a free loopback port")
            .port();
        let netdev = dgram_netdev("n0", free, &port);
        let (qemu, stream) = Self::boot_on_unix_socket(
            elf,
            &[],
            &["-netdev", &netdev, "-net", "nic,netdev=n0,model=lan9118"],
        );
        port.connect((Ipv4Addr::LOCALHOST, free))
            .expect("connecting to the emulated port");
        (qemu, stream, port)
    }

    /// Boots `elf` with UART0 on a TCP port of 127.0.0.1, as a ser2net-style
    /// serial server would offer it.
    pub fn boot_tcp(elf: &Path) -> (Self, TcpStream) {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|listener| listener.local_addr())
            .expect("a free loopback port")
            .port();
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let mut qemu = Self::spawn(
            elf,
            &[],
            scratch_dir(),
            format!("tcp:{address},server=on,wait=on"),
            format!("tcp:{address}"),
            &["-nic", "none"],
        );
        let stream = qemu.first_client(|| TcpStream::connect(address));
        (qemu, stream)
    }

    fn spawn(
        elf: &Path,
        runner: &[&str],
        dir: PathBuf,
        serial: String,
        device: String,
        network: &[&str],
    ) -> Self {
        let mut command = match runner.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg("qemu-system-arm");
                command
            }
            None => Command::new("qemu-system-arm"),
        };
        let child = command
            .args(["-machine", "mps2-an386", "-cpu", "cortex-m4", "-nographic"])
            .args(["-monitor", "none"])
            .args(network)
            .args(["-semihosting-config", "enable=on,target=native"])
            .args(["-serial", &serial])
            .arg("-kernel")
            .arg(elf)
            .stdin(Stdio::null())
            .stdout(File::create(dir.join("defmt.bin")).unwrap())
            .stderr(File::create(dir.join("qemu.stderr")).unwrap())
            .spawn()
            .expect("qemu-system-arm not found: run ./x setup");
        Qemu { child, dir, device }
    }

    /// QEMU opens UART0's socket, then waits for a first client before it
    /// starts the guest. Bounded wait: 20 s.
    fn first_client<S>(&mut self, connect: impl Fn() -> std::io::Result<S>) -> S {
        for _ in 0..400 {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("QEMU exited early ({status}): {}", self.stderr());
            }
            if let Ok(stream) = connect() {
                return stream;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("QEMU did not open UART0 at {}", self.device);
    }

    /// UART0 as `cfctl --device` names it: the unix socket's path or
    /// `tcp:HOST:PORT` (QEMU accepts a new client after the previous one
    /// disconnects).
    pub fn device(&self) -> &str {
        &self.device
    }

    /// The scratch directory, removed with the QEMU process.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.join("qemu.stderr")).unwrap_or_default()
    }

    /// Checks that the firmware is still running and never panicked,
    /// faulted or hung (each logs, then resets), stops QEMU, and decodes
    /// the defmt log.
    pub fn stop_and_decode_log(&mut self, elf: &Path) -> String {
        let log = self.stop_and_decode_log_after_faults(elf);
        assert!(
            !log.contains("panic") && !log.contains("HardFault") && !log.contains("watchdog"),
            "the firmware failed:\n{log}"
        );
        log
    }

    /// Checks that QEMU is still running, stops it, and decodes the defmt
    /// log, which may report panics and HardFaults.
    pub fn stop_and_decode_log_after_faults(&mut self, elf: &Path) -> String {
        let status = self.child.try_wait().unwrap();
        assert!(
            status.is_none(),
            "firmware exited ({status:?}): {}",
            self.stderr()
        );
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        let decoded = Command::new("defmt-print")
            .arg("-e")
            .arg(elf)
            .arg("stdin")
            .stdin(File::open(self.dir.join("defmt.bin")).unwrap())
            .output()
            .expect("defmt-print not found: run ./x setup");
        String::from_utf8_lossy(&decoded.stdout).into_owned()
            + &String::from_utf8_lossy(&decoded.stderr)
    }
}

impl Drop for Qemu {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A `-netdev dgram` with id `id` on 127.0.0.1 port `free`, its frames
/// going to and coming from `peer`'s port.
fn dgram_netdev(id: &str, free: u16, peer: &UdpSocket) -> String {
    let own = peer.local_addr().expect("the socket's address").port();
    format!(
        "dgram,id={id},local.type=inet,local.host=127.0.0.1,local.port={free},\
         remote.type=inet,remote.host=127.0.0.1,remote.port={own}"
    )
}
