//! The state directory when something is wrong with it: a file system
//! that went read-only (what ext4 does after errors), and a directory
//! another user can write, or a symbolic link where the store goes. Each
//! test fails without its fix. Needs root (mounts, BPF) and iproute2.

mod common;

use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::cli::{expect_one_error_line, Cfctl};
use common::netns::TestNetwork;

/// A small tmpfs mounted over a directory (mode 0700), unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(on: &Path) -> Self {
        mount(&["-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs"], on);
        Self(on.to_owned())
    }

    /// Remounts it read-only, as the kernel does with ext4 after errors.
    fn make_read_only(&self) {
        mount(&["-o", "remount,ro"], &self.0);
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn mount(args: &[&str], on: &Path) {
    let status = Command::new("mount")
        .args(args)
        .arg(on)
        .status()
        .expect("running mount");
    assert!(status.success(), "mount {args:?} {}", on.display());
}

#[test]
fn reads_and_the_backup_work_on_a_read_only_file_system() {
    let network = TestNetwork::new(162);
    let cfctl = Cfctl::new("read-only");
    let tmpfs = Tmpfs::mount(cfctl.state_dir());
    cfctl.ok(&["attach", &network.host_link, "--mode", "skb"]);
    cfctl.ok(&["add", "198.18.0.0/24", "--comment", "kept"]);
    cfctl.ok(&["add", "198.18.9.9", "--timeout", "1s"]);
    cfctl.ok(&["allow", "add", "198.18.0.7"]);
    let export = cfctl.ok(&["export"]);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    tmpfs.make_read_only();

    // Every command that only reads works, and the backup is the same
    // (the listing that expired meanwhile cannot be ended: it stays, and
    // the commands say so).
    for args in [
        &["status"][..],
        &["list"],
        &["check", "198.18.0.1"],
        &["verify"],
        &["allow", "list"],
    ] {
        let output = cfctl.run(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "cfctl {args:?}: {stderr}");
        assert!(
            stderr.contains("cannot be written") && stderr.contains("expired listings stay"),
            "cfctl {args:?}: {stderr}"
        );
    }
    assert_eq!(cfctl.ok(&["export"]), export);
    assert!(cfctl.ok(&["list"]).contains("kept"));

    // A change is refused, in one line naming the file system's state.
    let output = cfctl.run(&["add", "198.18.5.5"]);
    let line = expect_one_error_line(&output, "add on a read-only file system");
    assert!(line.contains("Read-only file system"), "{line}");
}

#[test]
fn a_symbolic_link_at_the_store_path_is_refused_and_not_followed() {
    let cfctl = Cfctl::new("store-link");
    let elsewhere = tempfile::tempdir().expect("a directory a link points into");
    let target = elsewhere.path().join("root-only-file");
    symlink(&target, cfctl.state_dir().join("cfctl.redb")).expect("planting a link");
    for args in [&["add", "198.18.0.1"][..], &["list"], &["status"]] {
        let output = cfctl.run(args);
        let line = expect_one_error_line(&output, &args.join(" "));
        assert!(
            line.contains("is a symbolic link"),
            "cfctl {args:?}: {line}"
        );
        assert!(!target.exists(), "cfctl {args:?} created the link's target");
    }
}

#[test]
fn a_state_directory_another_user_can_write_is_refused_unless_trusted() {
    let cfctl = Cfctl::new("shared-dir");
    let dir = cfctl.state_dir();
    cfctl.ok(&["add", "198.18.0.1"]);
    let set_mode = |mode| {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)).expect("chmod");
    };
    for (mode, owner, expected) in [
        (
            0o777,
            0,
            "is writable by its group or by everyone (mode 777)",
        ),
        (
            0o770,
            0,
            "is writable by its group or by everyone (mode 770)",
        ),
        (0o700, 65534, "is owned by uid 65534, not by root"),
    ] {
        set_mode(mode);
        std::os::unix::fs::chown(dir, Some(owner), None).expect("chown");
        for args in [&["add", "198.18.0.2"][..], &["list"]] {
            let output = cfctl.run(args);
            let line = expect_one_error_line(&output, &args.join(" "));
            assert!(line.contains(expected), "cfctl {args:?}: {line}");
            assert!(line.contains("--trust-state-dir"), "{line}");
        }
        // Waived, it opens the store.
        assert!(cfctl
            .ok(&["--trust-state-dir", "list"])
            .contains("198.18.0.1/32"));
        std::os::unix::fs::chown(dir, Some(0), None).expect("chown");
        set_mode(0o700);
    }
    assert_eq!(std::fs::metadata(dir).expect("the directory").uid(), 0);
    assert!(!cfctl.ok(&["list"]).contains("198.18.0.2/32"));
}
