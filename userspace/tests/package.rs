//! The Debian package `./x package` builds (target/debian/cfctl_*.deb),
//! installed with dpkg into a throwaway root of its own (`dpkg --root`,
//! its maintainer scripts run outside it with `DPKG_ROOT` set), checked
//! for what it put where, then removed (the conffile and the state
//! directory stay) and purged (they go). Needs root and dpkg.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The package, which `./x package` (run by `./x test`) builds.
fn package() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debian");
    let mut packages: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("{}: {error}: run ./x package", dir.display()))
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("cfctl_") && name.ends_with(".deb"))
        })
        .collect();
    assert_eq!(
        packages.len(),
        1,
        "one package in {}: run ./x package",
        dir.display()
    );
    packages.remove(0)
}

/// dpkg on the root `root`; its output, failing the test if it fails.
fn dpkg(root: &Path, args: &[&str]) -> String {
    let output = Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        .args([
            "--force-script-chrootless",
            "--force-depends",
            "--force-not-root",
        ])
        .args(args)
        .output()
        .expect("running dpkg");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "dpkg {args:?}: {text}");
    text
}

/// An empty root with the dpkg database a root needs.
fn empty_root() -> tempfile::TempDir {
    let root = tempfile::tempdir().expect("a root");
    let database = root.path().join("var/lib/dpkg");
    for sub in ["updates", "info", "triggers"] {
        std::fs::create_dir_all(database.join(sub)).expect("the dpkg database");
    }
    for file in ["status", "available"] {
        std::fs::write(database.join(file), "").expect("the dpkg database");
    }
    root
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn the_package_installs_where_debian_puts_things_and_removes_cleanly() {
    let package = package();
    let root = empty_root();
    let r = root.path();
    dpkg(r, &["--install", package.to_str().expect("UTF-8")]);

    for (path, expected_mode) in [
        ("usr/bin/cfctl", 0o755),
        ("usr/lib/systemd/system/cfctl-agent.service", 0o644),
        ("usr/lib/systemd/system/cfctl-attach@.service", 0o644),
        ("usr/lib/systemd/system-preset/80-cfctl.preset", 0o644),
        ("etc/cfctl/agent.toml", 0o644),
        ("etc/fail2ban/action.d/cfctl.py", 0o644),
        ("usr/share/man/man1/cfctl.1.gz", 0o644),
        ("usr/share/man/man1/cfctl-attach.1.gz", 0o644),
        ("usr/share/bash-completion/completions/cfctl", 0o644),
        ("usr/share/zsh/vendor-completions/_cfctl", 0o644),
        ("usr/share/fish/vendor_completions.d/cfctl.fish", 0o644),
        ("usr/share/doc/cfctl/copyright", 0o644),
        ("usr/share/doc/cfctl/changelog.Debian.gz", 0o644),
        ("var/lib/cfctl", 0o700),
    ] {
        assert_eq!(mode(&r.join(path)), expected_mode, "{path}");
    }
    // The binary runs, and the units run it from where the package put it.
    let version = Command::new(r.join("usr/bin/cfctl"))
        .arg("--version")
        .output()
        .expect("running the installed cfctl");
    assert!(
        String::from_utf8_lossy(&version.stdout).contains(env!("CARGO_PKG_VERSION")),
        "{version:?}"
    );
    let unit = std::fs::read_to_string(r.join("usr/lib/systemd/system/cfctl-agent.service"))
        .expect("the agent's unit");
    assert!(unit.contains("ExecStart=/usr/bin/cfctl agent"), "{unit}");
    assert!(unit.contains("Type=notify"), "{unit}");
    let conffiles = dpkg(r, &["--status", "cfctl"]);
    assert!(conffiles.contains(" /etc/cfctl/agent.toml "), "{conffiles}");
    assert!(
        conffiles.contains(" /etc/fail2ban/action.d/cfctl.py "),
        "{conffiles}"
    );

    // The store written while installed, and a conffile edited.
    std::fs::write(r.join("var/lib/cfctl/blocklist.redb"), "entries").expect("a store");
    std::fs::write(r.join("etc/cfctl/agent.toml"), "# edited\n").expect("an edit");
    dpkg(r, &["--remove", "cfctl"]);
    assert!(!r.join("usr/bin/cfctl").exists());
    assert!(!r
        .join("usr/lib/systemd/system/cfctl-agent.service")
        .exists());
    assert!(
        r.join("var/lib/cfctl/blocklist.redb").exists(),
        "the store stays"
    );
    assert_eq!(
        std::fs::read_to_string(r.join("etc/cfctl/agent.toml")).expect("the conffile stays"),
        "# edited\n"
    );

    dpkg(r, &["--purge", "cfctl"]);
    assert!(
        !r.join("var/lib/cfctl").exists(),
        "a purge removes the store"
    );
    assert!(
        !r.join("etc/cfctl").exists(),
        "a purge removes the configuration"
    );
}
