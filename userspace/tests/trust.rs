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

use common::cli::{attached, expect_one_error_line, Cfctl};
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
                entry["sources"][0]["comment"].as_str().map(str::to_owned),
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
            "/dev/zero:1: the line is longer than 8192 bytes",
        ),
        (
            vec!["import".to_owned(), path(&huge_line)],
            "huge.txt:1: the line is longer than 8192 bytes",
        ),
        (
            vec!["import".to_owned(), path(&huge_comment)],
            "drop.txt:1: the line is longer than 8192 bytes",
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
        let output = cfctl.run_to_end(&args);
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

    // Every way in reads an IPv4-mapped address as the IPv4 one: the
    // command line's entries and addresses, and a file's lines.
    cfctl.ok(&["add", "::ffff:198.18.0.1", "::ffff:198.18.4.0/120"]);
    let mapped = dir.path().join("mapped.txt");
    std::fs::write(&mapped, "::ffff:198.18.9.0/120\n").expect("writing a list");
    cfctl.ok(&["import", mapped.to_str().expect("a UTF-8 path")]);
    let listed: Vec<String> = comments(&cfctl).into_iter().map(|(net, _)| net).collect();
    assert_eq!(listed, ["198.18.0.1/32", "198.18.4.0/24", "198.18.9.0/24"]);
    let (status, shown) = quiet_check(&cfctl, "::ffff:198.18.9.7");
    assert_eq!(status, Some(0), "{shown}");
    let checked = cfctl.json(&["check", "::ffff:198.18.0.1"]);
    assert_eq!(checked["address"], "198.18.0.1", "{checked}");
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
        again.starts_with("0 added, 1 listed already by cli (renewed) ("),
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
    let store = cfctl::store::Store::open(cfctl.state_dir()).expect("holding the store");
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
        let mut command = common::cli::binary();
        command.arg("--pin-dir").arg(cfctl.pin_dir());
        command.arg("--state-dir").arg(&state_dir);
        command.args(args);
        let script = format!("umask 000 && exec {}", shell_words(&command));
        let output = Command::new("sh")
            .args(["-c", &script])
            .output()
            .expect("running sh");
        assert!(
            output.status.success(),
            "cfctl {args:?} under umask 000: {}",
            String::from_utf8_lossy(&output.stderr)
        );
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
    let detach = common::cli::binary()
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
    let mut live = cfctl::xdp::PinDir::new(cfctl.pin_dir())
        .open()
        .expect("the pinned maps")
        .expect("a pinned program");
    serde_json::json!(live.summary().expect("the live table").fingerprints)
}

/// Whether the live filter pinned for `cfctl` holds every key of every
/// entry its store lists (the invariant a crash must never break), read
/// directly, without a cfctl command that would repair anything; and
/// whether the update mark is set.
fn live_covers_store(cfctl: &Cfctl) -> (bool, bool) {
    use cfctl::plan::{KeyPlan, PlanLimits};
    use cfctl::store::{ListKind, Store};
    let store = Store::open(cfctl.state_dir()).expect("opening the store");
    let nets = store.nets(ListKind::Blocklist).expect("the stored entries");
    drop(store);
    let mut live = cfctl::xdp::PinDir::new(cfctl.pin_dir())
        .open()
        .expect("the pinned maps")
        .expect("a pinned program");
    let plan = KeyPlan::with_lengths(nets, live.lengths(), PlanLimits::default())
        .expect("the stored entries fit the live lengths");
    let keys: Vec<_> = plan.keys().copied().collect();
    let covered = live
        .contains(&keys)
        .expect("probing the live filter")
        .into_iter()
        .all(|present| present);
    (covered, live.updating_pid() != 0)
}

/// `count` hosts of 198.18.0.0/15 from `first`, as arguments.
fn hosts(first: u32, count: u32) -> Vec<String> {
    (first..first + count)
        .map(|n| std::net::Ipv4Addr::from(0xc612_0000 + n).to_string())
        .collect()
}

/// Runs cfctl with `args`, aborting at crash point `point`.
fn crash_at(cfctl: &Cfctl, point: &str, args: &[&str]) {
    let status = cfctl
        .command(args)
        .env("CFCTL_CRASH_AT", point)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("running cfctl");
    let command = &args[..args.len().min(3)];
    assert_eq!(
        status.code(),
        None,
        "cfctl {command:?} should die at {point}"
    );
}

/// After a crash: the next command rebuilds the filter, says so, and the
/// filter then matches the store exactly.
fn expect_repair(cfctl: &Cfctl, what: &str) {
    let output = cfctl.run(&["status"]);
    assert!(output.status.success(), "{what}: status after the crash");
    let notice = String::from_utf8_lossy(&output.stderr);
    assert!(
        notice.contains("rebuilt the live filter from the store: an update by pid"),
        "{what}: {notice}"
    );
    cfctl.ok(&["verify"]);
    assert_eq!(
        live_covers_store(cfctl),
        (true, false),
        "{what}: after the repair"
    );
}

#[test]
fn crashes_at_every_step_of_an_update_never_unblock_a_listed_address() {
    let (_network, cfctl) = attached(125, "crash-points", "20000", "skb");
    let base = hosts(0, 3000);
    let dir = tempfile::tempdir().expect("a directory for lists");
    let base_list = dir.path().join("base.txt");
    std::fs::write(&base_list, base.join("\n")).expect("writing a list");
    let base_list = base_list.to_str().expect("a UTF-8 path");
    let source = ["--source", "base"];
    let reset = |cfctl: &Cfctl, extra: &[&str]| {
        cfctl.ok(&[
            &["--force", "import", "--replace"][..],
            &source,
            &[base_list],
        ]
        .concat());
        if !extra.is_empty() {
            cfctl.ok(extra);
        }
    };
    reset(&cfctl, &[]);

    let more = hosts(5000, 3000);
    let mut add = vec!["add"];
    add.extend(more.iter().map(String::as_str));
    let mut del_more = vec!["del"];
    del_more.extend(more.iter().map(String::as_str));
    let mut del = vec!["del", "--source", "base"];
    del.extend(base.iter().map(String::as_str));
    let replacement = dir.path().join("replacement.txt");
    std::fs::write(&replacement, hosts(1500, 3000).join("\n")).expect("writing a list");
    let replace = [
        "import",
        "--replace",
        "--source",
        "base",
        replacement.to_str().expect("a UTF-8 path"),
    ];
    let allow = ["allow", "add", "198.18.0.5"];
    let undo_allow = ["allow", "del", "198.18.0.5"];
    let cases: [(&[&str], &[&str], &[&str]); 4] = [
        (&add, &["inserted", "committed"], &del_more),
        (&del, &["inserted", "committed", "removed"], &[]),
        (&replace, &["inserted", "committed", "removed"], &[]),
        (&allow, &["allowlist-added", "committed"], &undo_allow),
    ];
    for (args, points, undo) in cases {
        for point in points {
            let what = format!("{} crashed at {point}", args[..2].join(" "));
            crash_at(&cfctl, point, args);
            let (covered, marked) = live_covers_store(&cfctl);
            assert!(
                covered,
                "{what}: a stored entry is missing from the live filter"
            );
            assert!(marked, "{what}: the update mark is set");
            expect_repair(&cfctl, &what);
            reset(&cfctl, undo);
        }
    }
}

#[test]
fn a_bulk_replace_holds_old_and_new_entries_together_until_its_commit() {
    let (_network, cfctl) = attached(132, "crash-bulk", "150000", "skb");
    let dir = tempfile::tempdir().expect("a directory for lists");
    // Large enough to swap whole tables; the lists share half their entries.
    let [old, new] = [0, 30_000].map(|start| {
        let path = dir.path().join(format!("bulk-{start}.txt"));
        std::fs::write(&path, hosts(start, 60_000).join("\n")).expect("writing a list");
        path.to_str().expect("a UTF-8 path").to_owned()
    });
    let replace = |list: &str| -> Vec<String> {
        ["import", "--replace", "--source", "feed:bulk", list]
            .map(str::to_owned)
            .to_vec()
    };
    for point in ["union-installed", "committed"] {
        cfctl.ok(&replace(&old).iter().map(String::as_str).collect::<Vec<_>>());
        let args = replace(&new);
        crash_at(
            &cfctl,
            point,
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        let (covered, marked) = live_covers_store(&cfctl);
        assert!(covered, "crashed at {point}: a stored entry is missing");
        assert!(marked, "crashed at {point}: the update mark is set");
        expect_repair(&cfctl, &format!("the bulk replace crashed at {point}"));
    }
}

#[test]
fn a_replace_too_large_for_both_lists_at_once_still_swaps_and_a_crash_is_repaired() {
    // Room for one list of 3,000 but not for two at once.
    let (_network, cfctl) = attached(130, "crash-tight", "3100", "skb");
    let dir = tempfile::tempdir().expect("a directory for lists");
    let [first, second] = [0, 10_000].map(|start| {
        let path = dir.path().join(format!("list-{start}.txt"));
        std::fs::write(&path, hosts(start, 3000).join("\n")).expect("writing a list");
        path.to_str().expect("a UTF-8 path").to_owned()
    });
    let replace =
        |list: &str| ["import", "--replace", "--source", "feed:tight", list].map(str::to_owned);
    cfctl.ok(&replace(&first).each_ref().map(String::as_str));
    crash_at(
        &cfctl,
        "installed",
        &replace(&second).each_ref().map(String::as_str),
    );
    expect_repair(&cfctl, "the tight replace crashed before its commit");
    cfctl.ok(&replace(&second).each_ref().map(String::as_str));
    cfctl.ok(&["verify"]);
    assert_eq!(cfctl.check("198.18.39.16")["verdict"], "listed");
    assert_eq!(cfctl.check("198.18.0.1")["verdict"], "not_listed");
}

#[test]
fn attach_after_a_first_import_crashed_repairs_instead_of_refusing() {
    let (network, cfctl) = attached(131, "crash-first", "100000", "skb");
    let host = network.host_link.as_str();
    let dir = tempfile::tempdir().expect("a directory for lists");
    let list = dir.path().join("bulk.txt");
    // Enough entries for a whole new table, swapped in before the commit.
    std::fs::write(&list, hosts(0, 60_000).join("\n")).expect("writing a list");
    crash_at(
        &cfctl,
        "installed",
        &["import", list.to_str().expect("a UTF-8 path")],
    );
    // The store is empty and the filter holds the leftovers: attach
    // repairs them away rather than mistaking them for a list.
    cfctl.ok(&["attach", host, "--mode", "skb"]);
    assert_eq!(keys_of(&cfctl), serde_json::json!(0));
    cfctl.ok(&["verify"]);
}

#[test]
fn kill_9_at_any_moment_of_a_delete_never_unblocks_a_listed_address() {
    let (_network, cfctl) = attached(126, "crash-kill", "20000", "skb");
    let base = hosts(0, 3000);
    let mut add = vec!["add"];
    add.extend(base.iter().map(String::as_str));
    let mut del = vec!["del"];
    del.extend(base.iter().map(String::as_str));
    // Kills spread over the delete's whole run; wherever one lands, the
    // live filter covers the store. (The delays only spread the kills:
    // every outcome, finished or not, must keep the invariant.)
    for round in 0..12u64 {
        cfctl.ok(&add);
        let mut child = cfctl
            .command(&del)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("starting cfctl del");
        std::thread::sleep(std::time::Duration::from_millis(round * 7));
        let _ = child.kill();
        let status = child.wait().expect("waiting for cfctl");
        let (covered, marked) = live_covers_store(&cfctl);
        assert!(
            covered,
            "round {round}: a stored entry is missing from the live filter"
        );
        if marked {
            assert_eq!(
                status.code(),
                None,
                "round {round}: only a crash leaves the mark"
            );
            expect_repair(&cfctl, &format!("round {round}"));
        } else {
            cfctl.ok(&["verify"]);
        }
    }
}

#[test]
fn a_failed_update_of_a_full_filter_leaves_no_prefilter_bit_behind() {
    let (_network, cfctl) = attached(127, "full-bits", "60", "skb");
    cfctl.ok(&["add", "198.18.0.1", "198.18.0.2"]);
    // Forty hosts, each in a block of its own, that cannot all fit.
    let many: Vec<String> = (0..80)
        .map(|block| format!("198.{}.7.7", 100 + block))
        .collect();
    let mut add = vec!["add"];
    add.extend(many.iter().map(String::as_str));
    let line = cfctl.fails(&add);
    assert!(line.contains("the filter is full"), "{line}");
    let verify = cfctl.json(&["verify"]);
    assert_eq!(verify["stale_prefilter_bits"], 0, "{verify}");
    assert_eq!(
        verify["problems"].as_array().map(Vec::len),
        Some(0),
        "{verify}"
    );
}

#[test]
fn a_pinned_filter_belongs_to_one_store() {
    let network = TestNetwork::new(128);
    let host = network.host_link.as_str();
    let cfctl = Cfctl::new("identity");
    cfctl.ok(&["attach", host, "--mode", "skb"]);
    let store = cfctl.state_dir().join("cfctl.redb");
    let before_any_entry = std::fs::read(&store).expect("reading the store");
    cfctl.ok(&["add", "198.18.1.0/24"]);
    let live_keys = || keys_of(&cfctl);
    let before = live_keys();
    let other = tempfile::tempdir().expect("another state directory");
    let mistyped = |args: &[&str]| {
        let mut command = common::cli::binary();
        command.arg("--pin-dir").arg(cfctl.pin_dir());
        command.arg("--state-dir").arg(other.path().join("typo"));
        command.args(args);
        command.output().expect("running cfctl")
    };
    // A mistyped --state-dir: reads find no store, changes refuse loudly.
    let line = expect_one_error_line(&mistyped(&["list"]), "list");
    assert!(line.contains("no cfctl store in"), "{line}");
    assert!(!other.path().join("typo").exists(), "list created a store");
    for args in [
        &["attach", host, "--mode", "skb"][..],
        &["add", "198.18.2.0/24"],
    ] {
        let line = expect_one_error_line(&mistyped(args), &args.join(" "));
        assert!(
            line.contains("was built from another store"),
            "{args:?}: {line}"
        );
        assert_eq!(live_keys(), before, "{args:?} changed the live filter");
    }
    // The right store still works; an emptied store file is damage.
    cfctl.ok(&["verify"]);
    let saved = std::fs::read(&store).expect("reading the store");
    std::fs::write(&store, b"").expect("truncating the store");
    for args in [&["list"][..], &["attach", host, "--mode", "skb"]] {
        let line = cfctl.fails(args);
        assert!(line.contains("is damaged"), "{args:?}: {line}");
    }
    assert_eq!(live_keys(), before);
    std::fs::write(&store, saved).expect("restoring the store");
    // --force takes the filter over for another store.
    let output = mistyped(&["--force", "add", "198.18.2.0/24"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let output = mistyped(&["--json", "verify"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let line = expect_one_error_line(&cfctl.run(&["add", "198.18.3.0/24"]), "add");
    assert!(line.contains("was built from another store"), "{line}");
    // Its own store empty (a copy from before anything was listed) never
    // silently empties a filter with keys.
    cfctl.ok(&["--force", "attach", host, "--mode", "skb"]);
    std::fs::write(&store, before_any_entry).expect("restoring an old store");
    let line = cfctl.fails(&["attach", host, "--mode", "skb"]);
    assert!(
        line.contains("lists nothing, but the filter pinned in"),
        "{line}"
    );
    assert_eq!(live_keys(), before);
}

#[test]
fn attach_repairs_a_pin_directory_whose_maps_were_removed() {
    let network = TestNetwork::new(129);
    let host = network.host_link.as_str();
    let cfctl = Cfctl::new("repair-pins");
    cfctl.ok(&["attach", host, "--capacity", "1000"]);
    cfctl.ok(&[
        "add",
        &network.v4(3).to_string(),
        &network.v6(3).to_string(),
    ]);
    common::netns::check_traffic(&network, true);
    // A map's pin, then the program's, removed by hand (the links stay,
    // and the attached program runs on): every command that touches the
    // live filter refuses, naming the pin and the repair, and changes
    // nothing; `status` says so once.
    for (pin, named) in [("CONFIG", "CONFIG"), ("program", "program pin")] {
        std::fs::remove_file(cfctl.pin_dir().join(pin)).expect("removing a pin");
        let export = cfctl.ok(&["export"]);
        for args in [
            &["add", "198.18.9.9"][..],
            &["verify"],
            &["check", "198.18.9.9"],
        ] {
            let line = cfctl.fails(args);
            assert!(
                line.contains("is incomplete")
                    && line.contains(named)
                    && line.contains("`cfctl attach IFACE`"),
                "{args:?}: {line}"
            );
        }
        assert_eq!(cfctl.ok(&["export"]), export, "the store changed");
        let status = cfctl.ok(&["status"]);
        assert!(
            status.contains("pins         incomplete: ") && !status.contains("nothing pinned"),
            "{status}"
        );
        let problem = cfctl.json(&["status"])["pins_problem"].clone();
        assert!(
            problem.as_str().is_some_and(|text| text.contains(named)),
            "{problem}"
        );
        cfctl.ok(&["attach", host]);
        cfctl.ok(&["verify"]);
        assert_eq!(cfctl.json(&["status"])["interfaces"][0]["interface"], host);
        assert_eq!(
            cfctl.json(&["status"])["pins_problem"],
            serde_json::Value::Null
        );
        common::netns::check_traffic(&network, true);
    }

    // Maps an older cfctl made (another map and filter layout) are never
    // written into: attach loads a new program and moves the links to it.
    set_pinned_abi_version(cfctl.pin_dir(), 1);
    let line = cfctl.fails(&["add", "198.18.9.9"]);
    assert!(line.contains("from another cfctl version"), "{line}");
    cfctl.ok(&["attach", host]);
    cfctl.ok(&["verify"]);
    common::netns::check_traffic(&network, true);
}

/// Native attach at an MTU the driver refuses says what to do; `status`
/// from another network namespace says where the interface is, not that
/// it is gone, and says it is gone once it is.
#[test]
fn attach_and_status_errors_say_what_to_do() {
    let network = TestNetwork::new(163);
    let host = network.host_link.as_str();
    let cfctl = Cfctl::new("errors");
    for (namespace, link) in [
        (None, host),
        (Some(network.namespace.as_str()), network.peer_link.as_str()),
    ] {
        let mut args = vec!["link", "set", "dev", link, "mtu", "9000"];
        if let Some(namespace) = namespace {
            args.splice(0..0, ["-n", namespace]);
        }
        common::netns::ip(&args);
    }
    let line = cfctl.fails(&["attach", host, "--mode", "native"]);
    assert!(
        line.contains("refuses native XDP at its MTU (9000)") && line.contains("--mode skb"),
        "{line}"
    );
    cfctl.ok(&["attach", host, "--mode", "skb"]);
    let status = cfctl.command(&["status"]);
    let elsewhere = Command::new("nsenter")
        .arg(format!("--net=/run/netns/{}", network.namespace))
        .arg(status.get_program())
        .args(status.get_args())
        .output()
        .expect("running cfctl in the test network's namespace");
    let shown = String::from_utf8_lossy(&elsewhere.stdout);
    assert!(
        shown.contains(&format!("{host} (skb, in another network namespace)")),
        "{shown}{}",
        String::from_utf8_lossy(&elsewhere.stderr)
    );
    assert!(cfctl
        .ok(&["status"])
        .contains(&format!("attached to  {host} (skb)\n")));
    common::netns::ip(&["link", "del", host]);
    assert!(cfctl
        .ok(&["status"])
        .contains(&format!("{host} (skb, interface gone)")));
}

/// Writes `version` as the ABI version of the maps pinned in `pin_dir`.
fn set_pinned_abi_version(pin_dir: &Path, version: u32) {
    use std::os::fd::AsFd;
    let config = aya::maps::MapData::from_pin(pin_dir.join("CONFIG")).expect("the config map");
    let memory = cfctl::xdp::mapped::MappedMap::new(
        config.fd().as_fd(),
        std::mem::size_of::<cfxdp::Config>(),
    )
    .expect("mapping the config");
    memory
        .atomic_u32(std::mem::offset_of!(cfxdp::Config, abi_version))
        .expect("the version field")
        .store(version, std::sync::atomic::Ordering::SeqCst);
}
