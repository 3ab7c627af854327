//! The QEMU firmware image: built (or named by `CF_QEMU_FIRMWARE`), booted
//! on `mps2-an386` with UART0 on a unix socket, killed and cleaned up on
//! drop, its defmt log decoded. Needs `qemu-system-arm` and `defmt-print`.

use std::fs::File;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The QEMU image: `CF_QEMU_FIRMWARE` if set, else built (or found up to
/// date) by cargo in the firmware's board workspace.
pub fn firmware_elf() -> PathBuf {
    if let Some(elf) = std::env::var_os("CF_QEMU_FIRMWARE") {
        return PathBuf::from(elf);
    }
    let boards = repo_root().join("firmware/boards");
    let status = Command::new(env!("CARGO"))
        .args(["build", "--release", "-p", "qemu-mps2"])
        .current_dir(&boards)
        .status()
        .expect("run cargo");
    assert!(status.success(), "building the QEMU firmware failed");
    boards.join("target/thumbv7em-none-eabihf/release/qemu-mps2")
}

/// A QEMU process and its scratch directory; killed and removed on drop,
/// so a failing test leaves nothing behind.
pub struct Qemu {
    child: Child,
    dir: PathBuf,
}

impl Qemu {
    pub fn boot(elf: &Path) -> (Self, UnixStream) {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "cf-qemu-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("uart0.sock");
        let child = Command::new("qemu-system-arm")
            .args(["-machine", "mps2-an386", "-cpu", "cortex-m4", "-nographic"])
            .args(["-monitor", "none"])
            .args(["-semihosting-config", "enable=on,target=native"])
            .arg("-serial")
            .arg(format!("unix:{},server=on,wait=on", socket.display()))
            .arg("-kernel")
            .arg(elf)
            .stdin(Stdio::null())
            .stdout(File::create(dir.join("defmt.bin")).unwrap())
            .stderr(File::create(dir.join("qemu.stderr")).unwrap())
            .spawn()
            .expect("qemu-system-arm not found: run ./x setup");
        let mut qemu = Qemu { child, dir };
        // QEMU creates the socket, then waits for us before it starts the
        // guest. Bounded wait: 20 s.
        for _ in 0..400 {
            if let Some(status) = qemu.child.try_wait().unwrap() {
                panic!("QEMU exited early ({status}): {}", qemu.stderr());
            }
            if let Ok(stream) = UnixStream::connect(&socket) {
                return (qemu, stream);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("QEMU did not open {}", socket.display());
    }

    /// The unix socket of UART0 (QEMU accepts a new client on it after
    /// the previous one disconnects).
    pub fn socket(&self) -> PathBuf {
        self.dir.join("uart0.sock")
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.join("qemu.stderr")).unwrap_or_default()
    }

    /// Checks that the firmware is still running (a panic or HardFault
    /// exits QEMU), stops QEMU, and decodes the defmt log.
    pub fn stop_and_decode_log(&mut self, elf: &Path) -> String {
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
