//! What a user can trust cfctl with: the first run on a fresh machine, the
//! answers scripts read from exit statuses, files created under any umask,
//! bounds on what the command line may ask for, and one clear line for every
//! refusal. Each test was written against a defect found by trying to break
//! cfctl, and fails without its fix. Needs root, iproute2, util-linux
//! (`unshare`, `nsenter`, `mountpoint`) and the kernel's BPF support.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use common::cfctl::{expect_one_error_line, Cfctl};
use common::netns::TestNetwork;

/// `command` as one line for `sh -c`, every word single-quoted.
fn shell_words(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|word| format!("'{}'", word.to_string_lossy().replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn first_attach_on_a_fresh_machine_mounts_bpffs_under_nsenter() {
    let network = TestNetwork::new(120);
    let cfctl = Cfctl::new("fresh");
    let enter = format!("nsenter --net=/run/netns/{}", network.namespace);
    // A private mount namespace with nothing on /sys/fs/bpf is what a
    // machine that never ran a BPF tool looks like; cfctl runs in the test
    // network's namespace through nsenter, as the demo does. The namespace
    // (and the attachment, with its pins) ends with the shell.
    let script = format!(
        "while mountpoint -q /sys/fs/bpf; do umount -l /sys/fs/bpf || exit 9; done; \
         {enter} {attach} && {enter} {status}",
        attach = shell_words(&cfctl.command(&["attach", &network.peer_link, "--mode", "skb"])),
        status = shell_words(&cfctl.command(&["--json", "status"])),
    );
    let output = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .output()
        .expect("running unshare");
    assert!(
        output.status.success(),
        "attach on a fresh machine failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(
        output
            .stdout
            .split(|&byte| byte == b'\n')
            .rfind(|line| line.starts_with(b"{"))
            .expect("a JSON status line"),
    )
    .expect("cfctl status --json prints JSON");
    assert_eq!(status["loaded"], true);
    assert_eq!(
        status["interfaces"][0]["interface"],
        network.peer_link.as_str()
    );
}

/// The exit status and standard output of `cfctl check --quiet ADDRESS`.
fn quiet_check(cfctl: &Cfctl, address: &str) -> (Option<i32>, String) {
    let output = cfctl.run(&["check", "--quiet", address]);
    let printed = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.code(), printed)
}

#[test]
fn check_answers_in_its_exit_status() {
    let cfctl = Cfctl::new("check-status");
    cfctl.ok(&["add", "198.18.5.0/24"]);
    assert_eq!(quiet_check(&cfctl, "198.18.5.9"), (Some(0), String::new()));
    assert_eq!(quiet_check(&cfctl, "198.18.6.1"), (Some(1), String::new()));
    // Without --quiet it still answers in the status, and says it too.
    let output = cfctl.run(&["check", "198.18.6.1"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stdout).contains("not listed"));
    // An error is not an answer: 2, like grep, and one line.
    let output = cfctl.run(&["check", "--quiet", "not-an-ip"]);
    assert_eq!(output.status.code(), Some(2));
    expect_one_error_line(&output, "check not-an-ip");
}

/// Whether `text` holds a character a terminal acts on: a control
/// character other than the line break, or a bidirectional override.
fn has_raw_controls(text: &str) -> bool {
    text.chars()
        .any(|c| (c.is_control() && c != '\n') || ('\u{202a}'..='\u{202e}').contains(&c))
}

/// The comments of `cfctl --json list`, by network.
fn comments(cfctl: &Cfctl) -> Vec<(String, Option<String>)> {
    cfctl
        .json(&["list"])
        .as_array()
        .expect("a list of entries")
        .iter()
        .map(|entry| {
            (
                entry["net"].as_str().expect("a network").to_owned(),
                entry["comment"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

#[test]
fn comments_never_reach_the_terminal_raw_and_export_reads_back_exactly() {
    let cfctl = Cfctl::new("comments");
    // Every character from U+0001 to U+00FF, a line break that once made
    // an export list another network, and a bidirectional override.
    let every: String = (1u32..=0xff).filter_map(char::from_u32).collect();
    let injected = "x\n198.18.66.0/24";
    let reordered = "abc\u{202e}fed";
    cfctl.ok(&["add", "198.18.1.0/24", "--comment", &every]);
    cfctl.ok(&["add", "198.18.2.0/24", "--comment", injected]);
    cfctl.ok(&["add", "198.18.3.0/24", "--comment", reordered]);
    cfctl.ok(&[
        "add",
        "198.18.4.0/24",
        "--comment",
        "  spaced and \\u{41}  ",
    ]);
    cfctl.ok(&["add", "198.18.5.0/24"]);
    for args in [&["list"][..], &["check", "198.18.1.1"], &["export"]] {
        let shown = cfctl.ok(args);
        assert!(
            !has_raw_controls(&shown),
            "cfctl {args:?} printed {shown:?}"
        );
    }
    let export = cfctl.ok(&["export"]);
    assert!(!export.contains("\n198.18.66.0/24"), "{export}");

    let dir = tempfile::tempdir().expect("a directory for the export");
    let exported = dir.path().join("export.txt");
    std::fs::write(&exported, &export).expect("writing the export");
    let copy = Cfctl::new("comments-copy");
    copy.ok(&["import", exported.to_str().expect("a UTF-8 path")]);
    let original = comments(&cfctl);
    assert_eq!(comments(&copy), original);
    assert_eq!(original[0].1.as_deref(), Some(every.as_str()));
    assert_eq!(original.len(), 5, "no entry came from a comment");
}

/// Runs cfctl to its end, which a bounded input guarantees; a hang would
/// be the defect under test, so it is cut off (and fails) after a minute.
fn run_to_end(cfctl: &Cfctl, args: &[&str]) -> std::process::Output {
    let mut child = cfctl
        .command(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting cfctl");
    for _ in 0..600 {
        if child.try_wait().expect("waiting for cfctl").is_some() {
            return child.wait_with_output().expect("reading cfctl's output");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("cfctl {} did not end", args.join(" "));
}

#[test]
fn endless_huge_and_oversized_input_is_refused_with_a_short_line() {
    let cfctl = Cfctl::new("bounds");
    cfctl.ok(&["add", "198.18.0.0/24"]);
    let store = cfctl.state_dir().join("cfctl.redb");
    let size = || std::fs::metadata(&store).expect("the store").len();
    let before = (cfctl.ok(&["export"]), size());
    let dir = tempfile::tempdir().expect("a directory for lists");
    let huge_line = dir.path().join("huge.txt");
    std::fs::write(&huge_line, "7".repeat(100 << 20)).expect("writing a 100 MB line");
    let huge_comment = dir.path().join("drop.txt");
    let comment = "S".repeat(50 << 20);
    std::fs::write(&huge_comment, format!("198.18.9.0/24 ; {comment}\n")).expect("writing");
    let long_comment = dir.path().join("long.txt");
    let comment = "S".repeat(2000);
    std::fs::write(&long_comment, format!("198.18.9.0/24 ; {comment}\n")).expect("writing");
    let path = |path: &Path| path.to_str().expect("a UTF-8 path").to_owned();

    for (args, expected) in [
        (
            vec!["import".to_owned(), "/dev/zero".to_owned()],
            "/dev/zero:1: the line is longer than 4096 bytes",
        ),
        (
            vec!["import".to_owned(), path(&huge_line)],
            "huge.txt:1: the line is longer than 4096 bytes",
        ),
        (
            vec!["import".to_owned(), path(&huge_comment)],
            "drop.txt:1: the line is longer than 4096 bytes",
        ),
        (
            vec!["import".to_owned(), path(&long_comment)],
            "long.txt:1: the comment is 2000 bytes long; at most 1024 are kept",
        ),
        (
            vec![
                "add".to_owned(),
                "198.18.9.0/24".to_owned(),
                "--comment".to_owned(),
                comment.clone(),
            ],
            "--comment: the comment is 2000 bytes long",
        ),
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = run_to_end(&cfctl, &args);
        let line = expect_one_error_line(&output, &args[..2].join(" "));
        assert!(line.contains(expected), "{line}");
        assert!(line.len() < 1000, "a {} byte error line", line.len());
        assert_eq!(
            (cfctl.ok(&["export"]), size()),
            before,
            "{args:?} changed the store"
        );
    }
}

#[test]
fn whole_families_need_force_and_ipv4_mapped_addresses_mean_ipv4() {
    let cfctl = Cfctl::new("families");
    let dir = tempfile::tempdir().expect("a directory for lists");
    let list = dir.path().join("everything.txt");
    std::fs::write(&list, "198.18.0.0/24\n0.0.0.0/0\n").expect("writing a list");
    let list = list.to_str().expect("a UTF-8 path");
    for (args, expected) in [
        (
            &["add", "0.0.0.0/0"][..],
            "0.0.0.0/0 covers every IPv4 address; add --force",
        ),
        (
            &["add", "::/0"],
            "::/0 covers every IPv6 address; add --force",
        ),
        (&["allow", "add", "::/0"], "::/0 covers every IPv6 address"),
        (&["import", list], "0.0.0.0/0 covers every IPv4 address"),
        (
            &["add", "::ffff:0:0/96"],
            "0.0.0.0/0 covers every IPv4 address",
        ),
    ] {
        let line = cfctl.fails(args);
        assert!(line.contains(expected), "cfctl {args:?}: {line}");
    }
    assert_eq!(
        cfctl.ok(&["export"]).lines().count(),
        1,
        "nothing was added"
    );

    let forced = cfctl.run(&["add", "--force", "0.0.0.0/0"]);
    assert!(forced.status.success());
    assert!(String::from_utf8_lossy(&forced.stderr)
        .contains("warning: 0.0.0.0/0 covers every address of its family"));
    cfctl.ok(&["del", "0.0.0.0/0"]);

    cfctl.ok(&["add", "::ffff:198.18.0.1", "::ffff:198.18.4.0/120"]);
    let listed: Vec<String> = comments(&cfctl).into_iter().map(|(net, _)| net).collect();
    assert_eq!(listed, ["198.18.0.1/32", "198.18.4.0/24"]);
}

#[test]
fn changes_say_what_happened() {
    let cfctl = Cfctl::new("messages");
    let added = cfctl.ok(&["add", "198.18.7.1", "198.18.7.1", "198.18.7.1"]);
    assert!(
        added.starts_with("1 added, 2 repeated in the input (taken once) ("),
        "{added}"
    );
    let again = cfctl.ok(&["add", "198.18.7.1"]);
    assert!(
        again.starts_with("0 added, 1 listed already (kept as they were) ("),
        "{again}"
    );
    let output = cfctl.run(&["del", "198.18.77.0/24"]);
    assert!(output.status.success());
    let deleted = String::from_utf8_lossy(&output.stdout);
    assert!(
        deleted.starts_with("0 deleted, 1 not listed ("),
        "{deleted}"
    );
    assert!(!deleted.contains("added"), "{deleted}");
}

#[test]
fn watch_intervals_are_bounded() {
    let cfctl = Cfctl::new("watch");
    for interval in ["1e308", "18446744073709551616", "1e-300", "0", "-1", "NaN"] {
        let output = cfctl.run(&["stats", &format!("--watch={interval}")]);
        assert_eq!(output.status.code(), Some(2), "--watch {interval}");
        let line = expect_one_error_line(&output, &format!("stats --watch {interval}"));
        assert!(line.contains("0.1 to 86400 seconds"), "{line}");
    }
}

#[test]
fn a_waiting_cfctl_says_who_holds_the_store() {
    use std::io::{BufRead, BufReader};
    let cfctl = Cfctl::new("waiting");
    cfctl.ok(&["add", "198.18.8.0/24"]);
    let store = userspace::store::Store::open(cfctl.state_dir()).expect("holding the store");
    let mut waiter = cfctl
        .command(&["add", "198.18.8.1"])
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("starting a second cfctl");
    let stderr = BufReader::new(waiter.stderr.take().expect("its standard error"));
    let notice = stderr
        .lines()
        .next()
        .expect("a line before cfctl ends")
        .expect("a readable line");
    let holder = format!("waiting for another cfctl (pid {}: ", std::process::id());
    assert!(notice.contains(&holder), "{notice}");
    drop(store);
    assert!(waiter.wait().expect("waiting for cfctl").success());
}

/// The permission bits of `path`.
fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn state_and_pins_are_private_whatever_the_umask() {
    let network = TestNetwork::new(122);
    let cfctl = Cfctl::new("umask");
    let state_dir = cfctl.state_dir().join("fresh");
    let under_umask_000 = |args: &[&str]| {
        let mut command = common::cfctl::binary();
        command.arg("--pin-dir").arg(cfctl.pin_dir());
        command.arg("--state-dir").arg(&state_dir);
        command.args(args);
        let script = format!("umask 000 && exec {}", shell_words(&command));
        let status = Command::new("sh")
            .args(["-c", &script])
            .status()
            .expect("running sh");
        assert!(status.success(), "cfctl {args:?} under umask 000");
    };
    under_umask_000(&["attach", &network.host_link, "--mode", "skb"]);
    under_umask_000(&["add", "198.18.0.0/24"]);
    assert_eq!(mode(&state_dir), 0o700);
    assert_eq!(mode(&state_dir.join("cfctl.redb")), 0o600);
    assert_eq!(mode(cfctl.pin_dir()), 0o700);
    assert_eq!(mode(&cfctl.pin_dir().join("links")), 0o700);
    for pin in std::fs::read_dir(cfctl.pin_dir()).expect("the pins") {
        let pin = pin.expect("a pin").path();
        if pin.is_file() {
            assert_eq!(mode(&pin) & 0o077, 0, "{} is open to others", pin.display());
        }
    }
    let detach = common::cfctl::binary()
        .arg("--pin-dir")
        .arg(cfctl.pin_dir())
        .arg("--state-dir")
        .arg(&state_dir)
        .args(["detach", "--all"])
        .status()
        .expect("running cfctl");
    assert!(detach.success());
}

#[test]
fn capacities_follow_one_rule_for_attach_and_resize() {
    let network = TestNetwork::new(123);
    let cfctl = Cfctl::new("capacity");
    let entries: Vec<String> = (0..40).map(|host| format!("198.18.3.{host}")).collect();
    let mut add = vec!["add"];
    add.extend(entries.iter().map(String::as_str));
    cfctl.ok(&add);
    let host = network.host_link.as_str();
    for (args, expected, unexpected) in [
        (
            &["attach", host, "--capacity", "0"][..],
            "the capacity must be at least 1 key",
            "full",
        ),
        (
            &["attach", host, "--capacity", "1"],
            "the stored entries need a larger --capacity (at least 50)",
            "resize",
        ),
        (
            &["attach", host, "--capacity", "4294967296000"],
            "a capacity of 4294967296000 keys is too large",
            "full",
        ),
    ] {
        let line = cfctl.fails(args);
        assert!(line.contains(expected), "cfctl {args:?}: {line}");
        assert!(!line.contains(unexpected), "cfctl {args:?}: {line}");
        assert!(
            !cfctl.pin_dir().join("program").exists(),
            "{args:?} left a program"
        );
    }
    cfctl.ok(&["attach", host, "--capacity", "100", "--mode", "skb"]);
    for (args, expected) in [
        (
            &["resize", "--capacity", "0"][..],
            "the capacity must be at least 1 key",
        ),
        (
            &["resize", "--capacity", "1"],
            "the stored entries need a larger --capacity (at least 50)",
        ),
        (
            &["resize", "--capacity", "4294967296000"],
            "a capacity of 4294967296000 keys is too large",
        ),
    ] {
        let line = cfctl.fails(args);
        assert!(line.contains(expected), "cfctl {args:?}: {line}");
    }
    cfctl.ok(&["verify"]);
    // A live filter that fills up says how to make it larger.
    let more: Vec<String> = (0..200).map(|host| format!("198.18.4.{host}")).collect();
    let mut add_more = vec!["add"];
    add_more.extend(more.iter().map(String::as_str));
    let line = cfctl.fails(&add_more);
    assert!(
        line.contains("make it larger with `cfctl resize --capacity "),
        "{line}"
    );
}

/// Overwrites `pages` (4 KiB each) of the file at `path` with `bytes`.
fn overwrite_pages(path: &Path, pages: std::ops::RangeInclusive<u64>, bytes: impl Fn(usize) -> u8) {
    use std::io::{Seek, SeekFrom, Write};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("opening the store");
    let page: Vec<u8> = (0..4096).map(&bytes).collect();
    for number in pages {
        file.seek(SeekFrom::Start(number * 4096)).expect("seeking");
        file.write_all(&page).expect("writing over a page");
    }
}

/// Replaces every `from` in the file at `path` with `to`; how many.
fn replace_bytes(path: &Path, from: &[u8], to: &[u8]) -> usize {
    let mut bytes = std::fs::read(path).expect("reading the store");
    let mut count = 0;
    let mut at = 0;
    while let Some(found) = bytes[at..]
        .windows(from.len())
        .position(|window| window == from)
    {
        bytes[at + found..at + found + to.len()].copy_from_slice(to);
        at += found + from.len();
        count += 1;
    }
    std::fs::write(path, bytes).expect("writing the store");
    count
}

#[test]
fn a_damaged_store_is_named_with_the_way_to_recover_and_changes_no_filter() {
    let network = TestNetwork::new(124);
    let host = network.host_link.as_str();
    let cfctl = Cfctl::new("damaged");
    let dir = tempfile::tempdir().expect("a directory for lists");
    let list = dir.path().join("list.txt");
    let text: String = (0..5000)
        .map(|n| format!("198.18.{}.{}/32 # entry {n}\n", n / 250, n % 250))
        .chain(std::iter::once("198.18.41.0/24\n".to_owned()))
        .collect();
    std::fs::write(&list, text).expect("writing a list");
    cfctl.ok(&["attach", host, "--mode", "skb", "--capacity", "20000"]);
    cfctl.ok(&["import", list.to_str().expect("a UTF-8 path")]);
    let keys = || cfctl.json(&["status"])["filter"]["fingerprints"].clone();
    let live_keys = keys();
    let store = cfctl.state_dir().join("cfctl.redb");
    let pristine = std::fs::read(&store).expect("reading the store");
    let commands: [&[&str]; 8] = [
        &["list"],
        &["export"],
        &["status"],
        &["check", "198.18.0.1"],
        &["add", "198.18.200.1"],
        &["del", "198.18.0.1"],
        &["verify"],
        &["attach", host, "--mode", "skb"],
    ];

    // A byte changed inside an entry still reads as an entry: the page
    // checksums find it where the store becomes the filter, and in verify.
    let mut network_key = vec![4, 198, 18, 41, 0];
    network_key.extend([0; 12]);
    network_key.push(24);
    let mut changed = network_key.clone();
    changed[3] = 42;
    assert!(
        replace_bytes(&store, &network_key, &changed) > 0,
        "the entry is in the file"
    );
    for args in [&["verify"][..], &["attach", host, "--mode", "skb"]] {
        let line = cfctl.fails(args);
        assert!(line.contains("is damaged"), "cfctl {args:?}: {line}");
    }
    assert_eq!(keys(), live_keys, "the live filter kept its keys");

    // Pages of random bytes, or of zeros: every command says so in one
    // line, naming the file and the way back, and no filter changes.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let random = |_| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed as u8
    };
    let random_pages: Vec<u8> = (0..16 * 4096).map(random).collect();
    for damage in ["random bytes over pages 1-16", "zeros over pages 1-64"] {
        std::fs::write(&store, &pristine).expect("restoring the store");
        match damage.starts_with("random") {
            true => overwrite_pages(&store, 1..=16, |at| random_pages[at]),
            false => overwrite_pages(&store, 1..=64, |_| 0),
        }
        for args in commands {
            let output = cfctl.run(args);
            let error_status = if args[0] == "check" { 2 } else { 1 };
            assert_eq!(
                output.status.code(),
                Some(error_status),
                "{damage}: cfctl {args:?}"
            );
            let line = expect_one_error_line(&output, &format!("{damage}: {args:?}"));
            for expected in [
                store.to_str().expect("a UTF-8 path"),
                "is damaged",
                "cfctl export",
            ] {
                assert!(line.contains(expected), "{damage}: cfctl {args:?}: {line}");
            }
        }
        assert_eq!(
            keys_of(&cfctl),
            live_keys,
            "{damage}: the live filter kept its keys"
        );
    }
}

/// The live filter's fingerprint count, read from the pinned maps (cfctl
/// status needs the store).
fn keys_of(cfctl: &Cfctl) -> serde_json::Value {
    let mut live = userspace::xdp::PinDir::new(cfctl.pin_dir())
        .open()
        .expect("the pinned maps")
        .expect("a pinned program");
    serde_json::json!(live.summary().expect("the live table").fingerprints)
}
