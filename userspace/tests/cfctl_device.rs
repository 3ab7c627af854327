//! `cfctl --device` against the QEMU firmware image: import a shared
//! blocklist (built and pushed as a snapshot), check listed and unlisted
//! addresses, delete an entry, add one, read status and stats, save; a
//! bad list that is refused with `file:line` and changes nothing on the
//! device; and, over a serial line that outlives its clients, answers left
//! on the line by a client that did not read them (or was killed) that
//! must not answer the next command. Needs `qemu-system-arm` and
//! `defmt-print` (`./x setup`).

mod common;

use std::collections::HashSet;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use cfctl::netlist::{parse_file, ParseOptions};
use common::cli::{binary, expect_one_error_line};
use common::qemu::{firmware_elf, repo_root, Qemu};
use common::serial_line::SerialLine;
use filter_core::protocol::{self, Envelope, Item, Prefix, Request};
use ipnet::IpNet;

/// Runs `cfctl --device DEVICE --json ARGS`, which must succeed.
fn device_json(device: &str, args: &[&str]) -> serde_json::Value {
    let output = binary()
        .arg("--device")
        .arg(device)
        .arg("--json")
        .args(args)
        .output()
        .expect("running cfctl");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
        panic!(
            "cfctl --device {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    // `check` answers in its exit status too: 1 for not listed.
    let expected = match report["listed"].as_bool() {
        Some(false) => 1,
        _ => 0,
    };
    assert_eq!(
        output.status.code(),
        Some(expected),
        "cfctl --device {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    report
}

#[test]
fn cfctl_drives_the_qemu_firmware() {
    let elf = firmware_elf();
    let (mut qemu, first_client) = Qemu::boot(&elf);
    // QEMU waits for a first client before the guest starts; cfctl then
    // connects anew for every command.
    drop(first_client);
    let device = qemu.device().to_owned();

    let list_path = repo_root().join("../shared/data/blocklists/spamhaus_drop.netset");
    let list = parse_file(&list_path, ParseOptions::default()).expect("the shared list parses");
    let unique: HashSet<IpNet> = list.entries.iter().map(|entry| entry.net).collect();
    let path = list_path.to_str().expect("a UTF-8 path");
    let import = device_json(&device, &["import", path]);
    assert_eq!(import["entries"], unique.len());
    assert_eq!(import["device_entries"], unique.len());

    let status = device_json(&device, &["status"]);
    assert_eq!(status["entries"], unique.len());
    assert_eq!(status["saved_sequence"], import["sequence"]);
    assert_eq!(status["reset_cause"], "power-on");
    // An import is a new image: its journal is empty.
    assert_eq!(status["journal"]["records"], 0);
    let journal_capacity = status["journal"]["capacity"].clone();
    assert!(journal_capacity.as_u64() > Some(1000), "{status}");

    // An address inside the first entry is listed; one in the benchmarking
    // range is not (unless a false positive, which 16-bit fingerprints
    // make unlikely at this load).
    let first = list.entries[0].net;
    let inside = first.hosts().nth(1).unwrap_or(first.network());
    assert_eq!(
        device_json(&device, &["check", &inside.to_string()])["listed"],
        true
    );
    assert_eq!(
        device_json(&device, &["check", "198.18.0.1"])["listed"],
        false
    );

    // Delete the first entry; add a benchmarking prefix.
    let deleted = device_json(&device, &["del", &first.to_string()]);
    assert_eq!(deleted["deleted"][0], first.to_string());
    assert_eq!(
        device_json(&device, &["check", &inside.to_string()])["listed"],
        false
    );
    assert_eq!(device_json(&device, &["add", "198.18.0.0/24"])["added"], 1);
    assert_eq!(
        device_json(&device, &["check", "198.18.0.77"])["listed"],
        true
    );
    // The delete and the add are a record each in the journal.
    assert_eq!(
        device_json(&device, &["status"])["journal"],
        serde_json::json!({ "records": 2, "capacity": journal_capacity })
    );

    // A bad list: one line naming file and line, and the device unchanged.
    let dir = tempfile::tempdir().expect("a directory");
    let bad = dir.path().join("bad.txt");
    std::fs::write(&bad, "198.18.1.0/24\n198.18.1.0/33\n").expect("writing");
    let before = device_json(&device, &["status"]);
    let output = binary()
        .arg("--device")
        .arg(&device)
        .arg("import")
        .arg(&bad)
        .output()
        .expect("running cfctl");
    let line = expect_one_error_line(&output, "--device import bad.txt");
    assert!(
        line.contains(&format!("{}:2: prefix length out of range", bad.display())),
        "{line}"
    );
    assert_eq!(device_json(&device, &["status"]), before);

    // Verbs that have no meaning for a device are refused.
    let output = binary()
        .arg("--device")
        .arg(&device)
        .arg("verify")
        .output()
        .expect("cfctl");
    let line = expect_one_error_line(&output, "--device verify");
    assert!(line.contains("has no meaning for a device"), "{line}");

    let stats = device_json(&device, &["stats"]);
    assert_eq!(stats["deleted"], 1);
    assert_eq!(stats["added"], 1);
    let saved = device_json(&device, &["save"]);
    let sequence = saved["saved_sequence"].as_u64().expect("a sequence number");
    let status = device_json(&device, &["status"]);
    assert_eq!(status["saved_sequence"], sequence);
    assert_eq!(
        status["journal"]["records"], 0,
        "a save folds the journal in"
    );
    assert_eq!(device_json(&device, &["status"])["entries"], unique.len());

    let log = qemu.stop_and_decode_log(&elf);
    assert!(log.contains("snapshot 1 committed"), "defmt log:\n{log}");
}

#[test]
fn cfctl_reaches_a_device_served_over_tcp() {
    let elf = firmware_elf();
    let (mut qemu, first_client) = Qemu::boot_tcp(&elf);
    drop(first_client);
    let device = qemu.device().to_owned();
    assert!(device.starts_with("tcp:127.0.0.1:"), "{device}");
    assert_eq!(device_json(&device, &["add", "198.18.4.0/24"])["added"], 1);
    assert_eq!(
        device_json(&device, &["check", "198.18.4.9"])["listed"],
        true
    );
    assert_eq!(device_json(&device, &["status"])["entries"], 1);
    let log = qemu.stop_and_decode_log(&elf);
    assert!(!log.is_empty(), "the firmware logged nothing");
}

/// The frame of `request` with request id `id`.
fn request_frame(id: u32, request: Request<'_>) -> Vec<u8> {
    let mut out = vec![0u8; protocol::MAX_FRAME_LEN + 1];
    let envelope = Envelope {
        id,
        message: request,
    };
    protocol::encode(&envelope, &mut out).unwrap().to_vec()
}

/// Waits (at most 20 s) until the line holds `frames` answers for the
/// next client.
fn wait_for_waiting_frames(line: &SerialLine, frames: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while line.waiting_frames() < frames {
        assert!(Instant::now() < deadline, "the device did not answer");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn answers_left_on_the_line_do_not_answer_the_next_command() {
    let elf = firmware_elf();
    let (mut qemu, uart) = Qemu::boot(&elf);
    let line = SerialLine::start(qemu.dir(), uart, None);
    let device = line.path().to_owned();
    assert_eq!(device_json(&device, &["add", "198.18.7.0/24"])["added"], 1);

    // A client sends requests and leaves without reading the answers: a
    // "listed" answer, counters and the device's info wait on the line.
    let listed = Item::Net(Prefix::V4 {
        address: [198, 18, 7, 7],
        len: 32,
    });
    let mut careless = UnixStream::connect(&device).unwrap();
    for (id, request) in [
        (1, Request::Check(listed)),
        (2, Request::Stats),
        (3, Request::Check(listed)),
        (
            4,
            Request::Hello {
                version: protocol::PROTOCOL_VERSION,
            },
        ),
    ] {
        careless.write_all(&request_frame(id, request)).unwrap();
    }
    // The normal image has no fault triggers: these are damaged frames.
    careless.write_all(b"!panic\0!hardfault\0").unwrap();
    drop(careless);
    wait_for_waiting_frames(&line, 6);

    // The next commands get their own answers.
    assert_eq!(
        device_json(&device, &["check", "198.18.5.6"])["listed"],
        false
    );
    assert_eq!(
        device_json(&device, &["check", "198.18.7.8"])["listed"],
        true
    );
    assert_eq!(device_json(&device, &["status"])["entries"], 1);

    // An import killed half way leaves answers (and perhaps half a frame)
    // on the line too.
    let list = repo_root().join("../shared/data/blocklists/spamhaus_drop.netset");
    let mut import = binary()
        .arg("--device")
        .arg(&device)
        .arg("import")
        .arg(&list)
        .spawn()
        .expect("running cfctl");
    std::thread::sleep(Duration::from_millis(400));
    import.kill().unwrap();
    import.wait().unwrap();
    assert_eq!(
        device_json(&device, &["check", "198.18.5.6"])["listed"],
        false
    );
    let stats = device_json(&device, &["stats"]);
    assert!(stats["requests"].as_u64().unwrap() > 6, "{stats}");

    let log = qemu.stop_and_decode_log(&elf);
    assert!(!log.is_empty(), "the firmware logged nothing");
}
