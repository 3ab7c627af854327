//! Updates over the network: the QEMU image built with a key
//! (`FILTER_DEVICE_KEY`) boots inside a network namespace the test makes,
//! its LAN9118 on a tap device there (198.18.250.1/24 on the Linux side,
//! the device at 198.18.250.2, UDP port 7070). `cfctl --device
//! udp:198.18.250.2:7070 --device-key FILE`, run in the namespace through
//! the kernel's own UDP and ARP, imports Spamhaus DROP, checks, adds and
//! deletes as over the serial link; sealed datagrams sent by hand show
//! that one under another key gets no answer and is counted, and one sent
//! again is answered as stale and not executed. Key files that others may
//! read, or that hold no key, are refused. The namespace (and the tap with
//! it) and QEMU are removed on drop. Needs root, iproute2,
//! `qemu-system-arm` and `defmt-print`.

mod common;

use std::collections::HashSet;
use std::os::unix::fs::PermissionsExt;
use std::process::Output;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cfctl::netlist::{parse_file, ParseOptions};
use common::cli::expect_one_error_line;
use common::qemu::{
    firmware_elf_with_update_key, repo_root, stack_high_water_mark, Qemu, UPDATE_KEY_HEX,
};
use common::tap::{key_file, TapNamespace, TAP};
use filter_core::protocol::datagram::{self, Key, Kind};
use filter_core::protocol::{self, Envelope, Request, Response};
use ipnet::IpNet;

fn key(hex: &str) -> Key {
    let mut key = [0u8; 32];
    for (byte, index) in key.iter_mut().zip((0..64).step_by(2)) {
        *byte = u8::from_str_radix(&hex[index..index + 2], 16).expect("hex");
    }
    key
}

/// `request` with id `id`, sealed under `key` and `counter`.
fn sealed(key: &Key, counter: u64, id: u32, request: Request<'_>) -> Vec<u8> {
    let mut frame = vec![0u8; protocol::MAX_FRAME_LEN + 1];
    let envelope = Envelope {
        id,
        message: request,
    };
    let frame = protocol::encode(&envelope, &mut frame)
        .expect("fits")
        .to_vec();
    let mut out = vec![0u8; datagram::MAX_REQUEST_DATAGRAM_LEN];
    let len = datagram::seal(key, Kind::Request, counter, &frame, &mut out).expect("fits");
    out.truncate(len);
    out
}

/// The kind, counter and response of an answer sealed under `key`.
fn opened(key: &Key, answer: &[u8]) -> (Kind, u64, Option<Response>) {
    let opened = datagram::open(key, answer).expect("sealed under the key");
    let response = (opened.kind == Kind::Response).then(|| {
        let mut frame = opened.frame.to_vec();
        assert_eq!(frame.pop(), Some(0), "a delimited frame");
        protocol::decode::<Envelope<Response>>(&mut frame)
            .expect("a response")
            .message
    });
    (opened.kind, opened.counter, response)
}

fn json(output: &Output, what: &str) -> serde_json::Value {
    assert!(
        output.status.success(),
        "cfctl {what}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON")
}

#[test]
fn cfctl_updates_a_device_over_udp_which_refuses_forged_and_replayed_datagrams() {
    let elf = firmware_elf_with_update_key();
    let namespace = TapNamespace::new();
    let (mut qemu, first_client) = Qemu::boot_on_tap(&elf, &namespace.name, TAP);
    drop(first_client);
    let dir = tempfile::tempdir().expect("a directory");
    let key_file = key_file(dir.path());

    let status = json(&namespace.cfctl(&key_file, &["status"]), "status");
    assert_eq!(status["entries"], 0);
    let list_path = repo_root().join("../shared/data/blocklists/spamhaus_drop.netset");
    let list = parse_file(&list_path, ParseOptions::default()).expect("the shared list parses");
    let unique: HashSet<IpNet> = list.entries.iter().map(|entry| entry.net).collect();
    let path = list_path.to_str().expect("a UTF-8 path");
    let import = json(&namespace.cfctl(&key_file, &["import", path]), "import");
    assert_eq!(import["device_entries"], unique.len());
    let first = list.entries[0].net;
    let inside = first.hosts().nth(1).unwrap_or(first.network()).to_string();
    // `check` answers like grep: exit status 1 for "not listed".
    let check = |address: &str| {
        let output = namespace.cfctl(&key_file, &["check", address]);
        let report: serde_json::Value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|_| panic!("cfctl check: {}", String::from_utf8_lossy(&output.stderr)));
        report["listed"].clone()
    };
    assert_eq!(check(&inside), true);
    assert_eq!(check("198.18.0.1"), false);
    assert_eq!(
        json(
            &namespace.cfctl(&key_file, &["add", "198.18.0.0/24"]),
            "add"
        )["added"],
        1
    );
    assert_eq!(check("198.18.0.1"), true);
    json(
        &namespace.cfctl(&key_file, &["del", "198.18.0.0/24"]),
        "del",
    );
    assert_eq!(check("198.18.0.1"), false);

    // By hand: a request under another key gets no answer; a good one is
    // answered; the same datagram again is stale; the stats, asked last,
    // count both refusals (the device takes datagrams in order).
    let good_key = key(UPDATE_KEY_HEX);
    let mut other_key = good_key;
    other_key[0] ^= 0xff;
    let counter = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_micros() as u64
        + 10_000_000;
    let save = sealed(&good_key, counter, 77, Request::Save);
    let answers = namespace.exchange(
        &[
            sealed(&other_key, counter, 76, Request::Clear),
            save.clone(),
            save,
        ],
        Duration::from_secs(2),
    );
    assert_eq!(answers[0], None, "a forged request was answered");
    let saved = opened(&good_key, answers[1].as_deref().expect("an answer"));
    assert!(
        matches!(saved, (Kind::Response, c, Some(Response::Saved { .. })) if c == counter),
        "{saved:?}"
    );
    let replayed = opened(&good_key, answers[2].as_deref().expect("an answer"));
    assert_eq!(replayed, (Kind::Stale, counter, None));
    // The hand-made counter is 10 s ahead of cfctl's clock: the stats
    // request of the cfctl below is stale once, and cfctl sends it again
    // above the device's counter.
    let stats = json(&namespace.cfctl(&key_file, &["stats"]), "stats");
    assert_eq!(stats["datagrams_refused"], 1, "{stats}");
    assert_eq!(stats["datagrams_stale"], 2, "{stats}");
    // The forged clear changed nothing.
    assert_eq!(check(&inside), true);

    // Key files that others may read, or that hold no key, are refused.
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let line = expect_one_error_line(&namespace.cfctl(&key_file, &["status"]), "a shared key");
    assert!(
        line.contains("readable by other users (mode 644)"),
        "{line}"
    );
    std::fs::write(&key_file, "not a key\n").expect("writing");
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let line = expect_one_error_line(&namespace.cfctl(&key_file, &["status"]), "a bad key");
    assert!(line.contains("not a key: 64 hex digits expected"), "{line}");

    let log = qemu.stop_and_decode_log(&elf);
    assert!(log.contains("updates over UDP"), "defmt log:\n{log}");
    // Requests over UDP run a little deeper than over the serial port.
    let stack_used = stack_high_water_mark(&log);
    assert!(
        stack_used < 7 * 1024,
        "the firmware used {stack_used} bytes of stack"
    );
    drop(qemu);
    drop(namespace);
}
