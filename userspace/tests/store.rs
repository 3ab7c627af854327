//! The entry store: transactions, reports, persistence, settings, and
//! consistency after a writer is killed with SIGKILL mid-transaction.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use cfctl::control::FilterSettings;
use cfctl::netlist::{parse_bytes, ParseOptions};
use cfctl::sources::file;
use cfctl::store::{ListKind, NewEntry, ReplaceReport, Store, StoreError};
use cfctl::Mode;
use ipnet::IpNet;

fn net(text: &str) -> IpNet {
    text.parse().unwrap()
}

/// Entries for `nets`, with no comment and no expiry.
fn cli(nets: &[&str]) -> Vec<NewEntry<'static>> {
    nets.iter()
        .map(|text| NewEntry {
            net: net(text),
            comment: None,
            expires: None,
        })
        .collect()
}

fn listed(store: &Store) -> Vec<String> {
    store
        .nets(ListKind::Blocklist)
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn add_and_delete_report_what_changed() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut txn = store.begin().unwrap();
    let report = txn
        .add(
            ListKind::Blocklist,
            "cli",
            &cli(&[
                "2001:db8::/32",
                "198.18.0.0/15",
                "198.18.0.1/32",
                "198.18.0.0/15",
            ]),
        )
        .unwrap();
    txn.commit().unwrap();
    assert_eq!(report.added.len(), 3);
    // A network given twice in one add is stored once; the repeat is
    // counted, not listed again.
    assert_eq!(report.repeated, 1);
    assert!(report.already_listed.is_empty());
    // IPv4 first, in address order, then by length.
    assert_eq!(
        listed(&store),
        ["198.18.0.0/15", "198.18.0.1/32", "2001:db8::/32"]
    );

    let mut txn = store.begin().unwrap();
    let report = txn
        .delete(
            ListKind::Blocklist,
            Some("cli"),
            [net("198.18.0.1/32"), net("198.19.0.0/16")],
        )
        .unwrap();
    txn.commit().unwrap();
    assert_eq!(report.deleted, [net("198.18.0.1/32")]);
    assert_eq!(report.missing, [net("198.19.0.0/16")]);
    assert_eq!(store.entry_count(ListKind::Blocklist).unwrap(), 2);
}

/// A store in a new directory (keep it: dropping it removes the
/// directory) whose blocklist is `nets`, added from the command line.
fn store_listing(nets: &[&str]) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut txn = store.begin().unwrap();
    txn.add(ListKind::Blocklist, "cli", &cli(nets)).unwrap();
    txn.commit().unwrap();
    (dir, store)
}

#[test]
fn nets_within_a_prefix_are_those_whose_address_lies_inside_it() {
    let (_dir, store) = store_listing(&[
        "198.17.255.255/32",
        "198.18.0.0/15",
        "198.18.0.0/16",
        "198.18.7.0/24",
        "198.18.255.255/32",
        "198.19.0.0/32",
        "2001:db8::/32",
        "2001:db8:1::/48",
        "2001:db9::1/128",
    ]);
    let within = |prefix: &str| -> Vec<String> {
        store
            .nets_within(ListKind::Blocklist, &net(prefix))
            .unwrap()
            .iter()
            .map(ToString::to_string)
            .collect()
    };
    // Any length, the prefix's own network included; not the /15 around it
    // (its address is inside, so it is listed) nor the neighbours.
    assert_eq!(
        within("198.18.0.0/16"),
        [
            "198.18.0.0/15",
            "198.18.0.0/16",
            "198.18.7.0/24",
            "198.18.255.255/32"
        ]
    );
    assert_eq!(within("198.18.7.128/25"), Vec::<String>::new());
    assert_eq!(
        within("2001:db8::/32"),
        ["2001:db8::/32", "2001:db8:1::/48"]
    );
    assert_eq!(within("::/0").len(), 3);
    assert_eq!(within("0.0.0.0/0").len(), 6);
}

#[test]
fn prefixes_present_skip_to_each_distinct_prefix() {
    let (_dir, store) = store_listing(&[
        "198.18.0.0/15",
        "2000::/3",
        "2001:db8::/32",
        "2001:db8:1::/48",
        "2001:db9::1/128",
        "2a00:1::/32",
        "3fff:fff::/32",
        "ffff:ffff::/32",
    ]);
    let present = |within: &str, len: u8, limit: usize| -> Option<Vec<String>> {
        store
            .prefixes_present(ListKind::Blocklist, &net(within), len, limit)
            .unwrap()
            .map(|prefixes| prefixes.iter().map(ToString::to_string).collect())
    };
    let groups = [
        "2000::/16",
        "2001::/16",
        "2a00::/16",
        "3fff::/16",
        "ffff::/16",
    ];
    assert_eq!(present("::/0", 16, 5).unwrap(), groups);
    assert_eq!(present("::/0", 16, 4), None, "more than the limit");
    assert_eq!(
        present("2001::/16", 32, 10).unwrap(),
        ["2001:db8::/32", "2001:db9::/32"]
    );
    assert_eq!(present("2002::/16", 32, 10).unwrap(), Vec::<String>::new());
    assert_eq!(present("0.0.0.0/0", 8, 10).unwrap(), ["198.0.0.0/8"]);
}

#[test]
fn entries_keep_source_comment_and_time_and_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let list = parse_bytes(
        b"; DROPv6\n2001:db8::/32 ; SBL1\n2001:db8:1::/48 ; SBL2\n",
        "dropv6.txt",
        ParseOptions::default(),
    )
    .unwrap();
    {
        let store = Store::open(dir.path()).unwrap();
        let mut txn = store.begin().unwrap();
        txn.add(
            ListKind::Blocklist,
            "file:dropv6.txt",
            &file::entries(&list, None),
        )
        .unwrap();
        txn.add(ListKind::Blocklist, "cli", &cli(&["198.18.0.1/32"]))
            .unwrap();
        txn.commit().unwrap();
    }
    let store = Store::open(dir.path()).unwrap();
    let entries = store.entries(ListKind::Blocklist, None).unwrap();
    assert_eq!(entries.len(), 3);
    let sbl2 = store
        .entry(ListKind::Blocklist, &net("2001:db8:1::/48"))
        .unwrap()
        .unwrap();
    assert_eq!(sbl2.sources.len(), 1);
    assert_eq!(sbl2.sources[0].source, "file:dropv6.txt");
    assert_eq!(sbl2.sources[0].comment.as_deref(), Some("SBL2"));
    let age = sbl2.sources[0].added.elapsed().unwrap_or_default();
    assert!(age < Duration::from_secs(600), "{age:?}");
    assert_eq!(entries[0].sources[0].source, "cli");
    assert_eq!(
        store
            .entry(ListKind::Blocklist, &net("2001:db8:2::/48"))
            .unwrap(),
        None
    );
}

#[test]
fn a_store_cfctl_leaves_without_a_close_reopens_with_every_commit_and_no_full_repair() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    // No program is pinned there: the commands change the store alone,
    // and each process ends without closing it.
    let pins = dir.path().join("pins");
    for arguments in [
        &["add", "198.18.0.0/24", "198.18.1.0/24"][..],
        &["add", "198.18.2.0/24", "2001:db8::/48"],
        &["del", "198.18.1.0/24"],
    ] {
        let status = Command::new(env!("CARGO_BIN_EXE_cfctl"))
            .arg("--state-dir")
            .arg(&state)
            .arg("--pin-dir")
            .arg(&pins)
            .args(arguments)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "cfctl {arguments:?}: {status}");
    }

    // The allocator state the last commit recorded is loaded: redb calls
    // the repair callback only when it must rebuild that state by walking
    // every page.
    let repaired = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = repaired.clone();
    let database = redb::Database::builder()
        .set_repair_callback(move |_| seen.store(true, std::sync::atomic::Ordering::SeqCst))
        .open(state.join(Store::FILE_NAME))
        .unwrap();
    drop(database);
    assert!(
        !repaired.load(std::sync::atomic::Ordering::SeqCst),
        "the store needed a full repair"
    );
    let store = Store::open(&state).unwrap();
    assert_eq!(
        listed(&store),
        ["198.18.0.0/24", "198.18.2.0/24", "2001:db8::/48"]
    );
}

#[test]
fn dropped_transactions_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut txn = store.begin().unwrap();
    txn.add(ListKind::Blocklist, "cli", &cli(&["198.18.0.0/24"]))
        .unwrap();
    txn.commit().unwrap();

    let mut txn = store.begin().unwrap();
    txn.add(ListKind::Blocklist, "cli", &cli(&["198.18.1.0/24"]))
        .unwrap();
    txn.delete(ListKind::Blocklist, Some("cli"), [net("198.18.0.0/24")])
        .unwrap();
    txn.replace(ListKind::Blocklist, "cli", cli(&["2001:db8::/64"]))
        .unwrap();
    drop(txn);
    assert_eq!(listed(&store), ["198.18.0.0/24"]);
}

#[test]
fn a_replace_after_other_changes_in_its_transaction_replaces_what_they_made() {
    // The replacement reads the list as the transaction left it, not as
    // committed.
    let (_dir, store) = store_listing(&["198.18.0.0/24"]);
    let mut txn = store.begin().unwrap();
    txn.add(ListKind::Blocklist, "cli", &cli(&["198.18.1.0/24"]))
        .unwrap();
    txn.delete(ListKind::Blocklist, Some("cli"), [net("198.18.0.0/24")])
        .unwrap();
    let report = txn
        .replace(ListKind::Blocklist, "cli", cli(&["198.18.2.0/24"]))
        .unwrap();
    txn.commit().unwrap();
    assert_eq!(report.added, [net("198.18.2.0/24")]);
    assert_eq!(report.removed, [net("198.18.1.0/24")]);
    assert_eq!(listed(&store), ["198.18.2.0/24"]);
    assert_eq!(store.entry_count(ListKind::Blocklist).unwrap(), 1);
}

#[test]
fn replace_swaps_a_sources_whole_set_and_keeps_time_added_of_kept_entries() {
    let (_dir, store) = store_listing(&["198.18.0.0/24", "198.18.1.0/24", "198.18.2.0/24"]);
    let before = store
        .entry(ListKind::Blocklist, &net("198.18.1.0/24"))
        .unwrap()
        .unwrap();

    let list = parse_bytes(
        b"198.18.1.0/24 # kept\n198.18.3.0/24\n198.18.3.0/24\n",
        "new.list",
        ParseOptions::default(),
    )
    .unwrap();
    let mut txn = store.begin().unwrap();
    let report = txn
        .replace(ListKind::Blocklist, "cli", file::entries(&list, None))
        .unwrap();
    txn.commit().unwrap();
    assert_eq!(report.added, [net("198.18.3.0/24")]);
    assert_eq!(report.removed, [net("198.18.0.0/24"), net("198.18.2.0/24")]);
    assert_eq!(report.kept, 1);
    assert_eq!(listed(&store), ["198.18.1.0/24", "198.18.3.0/24"]);
    let kept = store
        .entry(ListKind::Blocklist, &net("198.18.1.0/24"))
        .unwrap()
        .unwrap();
    assert_eq!(kept.sources[0].added, before.sources[0].added);
    assert_eq!(kept.sources[0].source, "cli");
    assert_eq!(kept.sources[0].comment.as_deref(), Some("kept"));
}

#[test]
fn the_allowlist_is_a_separate_list() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let management = [NewEntry {
        net: net("198.18.9.0/24"),
        comment: Some("management"),
        expires: None,
    }];
    let mut txn = store.begin().unwrap();
    txn.add(ListKind::Allowlist, "ops", &management).unwrap();
    txn.add(ListKind::Blocklist, "cli", &cli(&["198.18.0.0/15"]))
        .unwrap();
    txn.commit().unwrap();

    // Replacing the blocklist leaves the allowlist and its sources alone.
    let report = replaced(&store, "cli", cli(&["2001:db8::/32"]));
    assert_eq!(report.removed, [net("198.18.0.0/15")]);
    let allowed = store.entries(ListKind::Allowlist, None).unwrap();
    assert_eq!(allowed.len(), 1);
    assert_eq!(allowed[0].sources[0].source, "ops");
    assert_eq!(allowed[0].sources[0].comment.as_deref(), Some("management"));
    assert_eq!(listed(&store), ["2001:db8::/32"]);

    let mut txn = store.begin().unwrap();
    let report = txn
        .delete(ListKind::Allowlist, Some("ops"), [net("198.18.0.0/15")])
        .unwrap();
    assert_eq!(report.missing, [net("198.18.0.0/15")]);
}

/// A state of some owner's, as the generic state API keeps it.
#[derive(Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
struct Recorded {
    count: u64,
    note: Option<String>,
}

#[test]
fn states_round_trip_by_namespace_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.state::<Recorded>("feed", "a").unwrap(), None);
    let a = Recorded {
        count: 7,
        note: Some("x\n\u{1b}".into()),
    };
    let mut txn = store.begin().unwrap();
    txn.set_state("feed", "a", &a).unwrap();
    txn.set_state("feed", "b", &Recorded::default()).unwrap();
    txn.set_state("feeds", "a", &Recorded::default()).unwrap();
    txn.set_state("fee", "z", &Recorded::default()).unwrap();
    txn.commit().unwrap();
    drop(store);
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.state::<Recorded>("feed", "a").unwrap(), Some(a));
    let keys: Vec<String> = store
        .states::<Recorded>("feed")
        .unwrap()
        .into_iter()
        .map(|(key, _)| key)
        .collect();
    assert_eq!(keys, ["a", "b"], "only that namespace's, in key order");
    let mut txn = store.begin().unwrap();
    txn.remove_state("feed", "a").unwrap();
    txn.commit().unwrap();
    assert_eq!(store.state::<Recorded>("feed", "a").unwrap(), None);
    // A state of another shape is damage, named.
    let error = store.state::<u64>("feed", "b").unwrap_err().to_string();
    assert!(error.contains("state feed/b"), "{error}");
}

#[test]
fn filter_settings_read_missing_fields_as_their_defaults() {
    let old: FilterSettings =
        serde_json::from_str(r#"{"capacity": 5, "mode": "monitor", "fingerprint_bits": 32}"#)
            .unwrap();
    assert_eq!(old.capacity, 5);
    assert_eq!(old.mode, Mode::Monitor);
    assert_eq!(old.shape, cfctl::FilterShape::Fingerprint32);
    assert_eq!(old.policy, FilterSettings::default().policy);
    assert!(serde_json::from_str::<FilterSettings>(r#"{"fingerprint_bits": 12}"#).is_err());
}

#[test]
fn a_second_opener_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let _store = Store::open(dir.path()).unwrap();
    let error = Store::open(dir.path())
        .err()
        .expect("the store is already open");
    assert!(matches!(error, StoreError::Busy { .. }), "{error:?}");
    assert!(error
        .to_string()
        .ends_with("cfctl.redb is in use by another cfctl process"));
}

// ---- crash consistency -------------------------------------------------

const CRASH_DIR_VARIABLE: &str = "CFCTL_STORE_CRASH_DIR";
const CRASH_FIRST_ROUND_VARIABLE: &str = "CFCTL_STORE_CRASH_FIRST_ROUND";
const GENERATION_SIZE: u32 = 100_000;

/// The entries of generation `generation`: `GENERATION_SIZE` host routes
/// whose first octet is the generation, so a mix of two is visible.
fn generation(generation: u8) -> Vec<IpNet> {
    (0..GENERATION_SIZE)
        .map(|index| {
            let address = Ipv4Addr::from(u32::from(generation) << 24 | index);
            IpNet::from(IpAddr::from(address))
        })
        .collect()
}

fn new_entries(nets: &[IpNet]) -> impl Iterator<Item = NewEntry<'_>> {
    nets.iter().map(|&net| NewEntry {
        net,
        comment: Some("generation"),
        expires: None,
    })
}

/// The generation the store holds, checking that it holds exactly one.
fn stored_generation(dir: &Path) -> u8 {
    let store = Store::open(dir).unwrap();
    let nets = store.nets(ListKind::Blocklist).unwrap();
    let Some(IpNet::V4(first)) = nets.first() else {
        panic!("the store lost every entry");
    };
    let found = first.addr().octets()[0];
    let expected: HashSet<IpNet> = generation(found).into_iter().collect();
    let stored: HashSet<IpNet> = nets.into_iter().collect();
    assert_eq!(stored.len(), expected.len(), "a mix of generations");
    assert!(stored == expected, "generation {found} is not whole");
    found
}

/// The child's part of the crash test: replaces the store's contents with
/// one generation after another, printing each step, until it is killed.
#[test]
#[ignore = "run by killed_writers_leave_the_last_commit, in a child process"]
fn crash_test_writer() {
    let Some(dir) = std::env::var_os(CRASH_DIR_VARIABLE) else {
        return;
    };
    let first_round: u8 = std::env::var(CRASH_FIRST_ROUND_VARIABLE)
        .unwrap()
        .parse()
        .unwrap();
    let store = Store::open(Path::new(&dir)).unwrap();
    let mut stdout = std::io::stdout();
    // End the test harness's "test crash_test_writer ... " line first.
    writeln!(stdout).unwrap();
    for round in first_round.. {
        let nets = generation(round);
        let mut txn = store.begin().unwrap();
        writeln!(stdout, "begin {round}").unwrap();
        txn.replace(ListKind::Blocklist, "crash-test", new_entries(&nets))
            .unwrap();
        writeln!(stdout, "replaced {round}").unwrap();
        txn.commit().unwrap();
        writeln!(stdout, "committed {round}").unwrap();
        stdout.flush().unwrap();
    }
}

#[test]
fn killed_writers_leave_the_last_commit() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path()).unwrap();
        let mut txn = store.begin().unwrap();
        txn.add(
            ListKind::Blocklist,
            "crash-test",
            &new_entries(&generation(0)).collect::<Vec<_>>(),
        )
        .unwrap();
        txn.commit().unwrap();
    }
    let mut last_committed = 0;
    // Kill points: while the first replace runs, right after a commit
    // returned, and at varied times during later transactions.
    for (attempt, lines_before_kill) in [1usize, 3, 4, 5, 7, 8, 2].into_iter().enumerate() {
        // Rounds of different children are different generations.
        let first_round = 1 + attempt as u8 * 32;
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "crash_test_writer", "--ignored", "--nocapture"])
            .args(["--test-threads", "1"])
            .env(CRASH_DIR_VARIABLE, dir.path())
            .env(CRASH_FIRST_ROUND_VARIABLE, first_round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut committed_seen = None;
        let mut steps = 0;
        while steps < lines_before_kill {
            let line = lines.next().expect("the writer stopped early").unwrap();
            if let Some(round) = line.strip_prefix("committed ") {
                committed_seen = Some(round.parse::<u8>().unwrap());
            }
            if ["begin ", "replaced ", "committed "]
                .iter()
                .any(|step| line.starts_with(step))
            {
                steps += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(attempt as u64 * 7 % 20));
        // Child::kill sends SIGKILL to this child's PID only.
        child.kill().unwrap();
        child.wait().unwrap();

        let found = stored_generation(dir.path());
        match committed_seen {
            // The child may have committed rounds after the last line read,
            // or none at all.
            None => assert!(
                found == last_committed || found >= first_round,
                "attempt {attempt}: found generation {found}, expected {last_committed} \
                 or a round from {first_round}"
            ),
            Some(round) => assert!(
                found >= round,
                "attempt {attempt}: generation {round} was committed, found {found}"
            ),
        }
        println!(
            "attempt {attempt}: killed after {lines_before_kill} steps \
             (last commit seen: {committed_seen:?}); the store holds generation {found}"
        );
        last_committed = found;
    }
}

#[test]
fn a_network_stays_listed_until_every_source_drops_it() {
    let (_dir, store) = store_listing(&["198.18.0.0/24", "198.18.1.0/24"]);
    let report = replaced(&store, "feed:a", cli(&["198.18.1.0/24", "198.18.2.0/24"]));
    assert_eq!(report.added, [net("198.18.2.0/24")]);
    assert_eq!(report.joined, [net("198.18.1.0/24")]);
    assert_eq!(
        store.source_counts(ListKind::Blocklist).unwrap(),
        [("cli".to_owned(), 2), ("feed:a".to_owned(), 2)]
    );
    assert_eq!(store.entry_count(ListKind::Blocklist).unwrap(), 3);

    // The feed drops what the command line also lists: it stays.
    let report = replaced(&store, "feed:a", cli(&["198.18.2.0/24"]));
    assert_eq!(report.removed, Vec::<IpNet>::new());
    assert_eq!(report.still_listed, [net("198.18.1.0/24")]);
    assert_eq!(report.kept, 1);
    assert_eq!(
        listed(&store),
        ["198.18.0.0/24", "198.18.1.0/24", "198.18.2.0/24"]
    );
    let only_feed = store.entries(ListKind::Blocklist, Some("feed:a")).unwrap();
    assert_eq!(only_feed.len(), 1);
    assert_eq!(only_feed[0].net, net("198.18.2.0/24"));

    // A delete for every source unlists it whoever listed it.
    let mut txn = store.begin().unwrap();
    let everyone = txn
        .delete(ListKind::Blocklist, None, [net("198.18.2.0/24")])
        .unwrap();
    assert_eq!(everyone.deleted, [net("198.18.2.0/24")]);
    drop(txn);

    // The command line drops it too: now it goes.
    let mut txn = store.begin().unwrap();
    let report = txn
        .delete(ListKind::Blocklist, Some("cli"), [net("198.18.1.0/24")])
        .unwrap();
    txn.commit().unwrap();
    assert_eq!(report.deleted, [net("198.18.1.0/24")]);
    assert_eq!(store.entry_count(ListKind::Blocklist).unwrap(), 2);
}

#[test]
fn expired_memberships_end_together_and_others_stay() {
    use std::time::SystemTime;
    let (_dir, store) = store_listing(&["198.18.0.0/24"]);
    let now = SystemTime::now();
    let soon = |seconds| NewEntry {
        net: net("198.18.0.0/24"),
        comment: None,
        expires: Some(now + Duration::from_secs(seconds)),
    };
    let mut txn = store.begin().unwrap();
    // A source lists the permanent entry for a while: it stays after.
    txn.add(ListKind::Blocklist, "feed:b", &[soon(10)]).unwrap();
    let expiring: Vec<NewEntry> = (0..1000u32)
        .map(|host| NewEntry {
            net: IpNet::from(IpAddr::from(Ipv4Addr::from(0xc613_0000 + host))),
            comment: None,
            expires: Some(now + Duration::from_secs(10)),
        })
        .collect();
    txn.add(ListKind::Blocklist, "cli", &expiring).unwrap();
    txn.commit().unwrap();
    assert_eq!(store.next_expiry().unwrap().map(|at| at >= now), Some(true));

    let mut txn = store.begin().unwrap();
    let early = txn
        .expire(ListKind::Blocklist, now + Duration::from_secs(5))
        .unwrap();
    assert_eq!(early.expired, 0);
    let report = txn
        .expire(ListKind::Blocklist, now + Duration::from_secs(10))
        .unwrap();
    txn.commit().unwrap();
    assert_eq!(report.expired, 1001);
    assert_eq!(report.removed.len(), 1000);
    assert_eq!(listed(&store), ["198.18.0.0/24"]);
    assert_eq!(store.next_expiry().unwrap(), None);
    let entry = store
        .entry(ListKind::Blocklist, &net("198.18.0.0/24"))
        .unwrap()
        .unwrap();
    assert_eq!(entry.sources.len(), 1, "feed:b's listing expired");
}

#[test]
fn a_schema_1_store_is_migrated_with_its_sources() {
    // A store written by the previous cfctl: one source per network.
    const OLD_BLOCKLIST: redb::TableDefinition<[u8; 18], (u32, Option<&str>, u64)> =
        redb::TableDefinition::new("blocklist");
    const OLD_SOURCES: redb::TableDefinition<u32, &str> = redb::TableDefinition::new("sources");
    const OLD_META: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("meta");
    let dir = tempfile::tempdir().unwrap();
    {
        let db = redb::Database::create(dir.path().join(Store::FILE_NAME)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            txn.open_table(OLD_META)
                .unwrap()
                .insert("schema_version", 1)
                .unwrap();
            let mut sources = txn.open_table(OLD_SOURCES).unwrap();
            sources.insert(0, "cli").unwrap();
            sources.insert(1, "drop.txt").unwrap();
            let mut blocklist = txn.open_table(OLD_BLOCKLIST).unwrap();
            let mut key = [0u8; 18];
            key[..5].copy_from_slice(&[4, 198, 18, 0, 0]);
            key[17] = 24;
            blocklist
                .insert(key, (1, Some("SBL1"), 1_700_000_000))
                .unwrap();
            key[3] = 1;
            blocklist.insert(key, (0, None, 1_700_000_001)).unwrap();
        }
        txn.commit().unwrap();
    }
    let store = Store::open(dir.path()).unwrap();
    let entries = store.entries(ListKind::Blocklist, None).unwrap();
    let sources: Vec<(String, String, Option<String>)> = entries
        .iter()
        .map(|entry| {
            let member = &entry.sources[0];
            (
                entry.net.to_string(),
                member.source.clone(),
                member.comment.clone(),
            )
        })
        .collect();
    assert_eq!(
        sources,
        [
            (
                "198.18.0.0/24".into(),
                "file:drop.txt".into(),
                Some("SBL1".into())
            ),
            ("198.18.1.0/24".into(), "cli".into(), None),
        ]
    );
    assert_eq!(store.entry_count(ListKind::Blocklist).unwrap(), 2);
    drop(store);
    assert_eq!(raw_schema(dir.path()), (6, true));
}

/// The /32 at `offset` from 198.18.0.0.
fn address(offset: u32) -> String {
    format!("{}/32", Ipv4Addr::from(0xc612_0000 + offset))
}

#[test]
fn many_memberships_go_in_between_the_lists_rows_and_leave_in_one_pass() {
    // The command line lists every 100th address of the first 4,000 (gaps
    // that hold long runs of the feed's new memberships) and every other
    // one of the next 400 (runs of one).
    let sparse = (0..4_000).step_by(100);
    let dense = (4_000..4_400).step_by(2);
    let cli_nets: Vec<String> = sparse.chain(dense).map(address).collect();
    let cli_refs: Vec<&str> = cli_nets.iter().map(String::as_str).collect();
    let (dir, store) = store_listing(&cli_refs);

    let feed_nets: Vec<String> = (0..4_400).map(address).collect();
    let comments: Vec<String> = (0..4_400).map(|n| format!("entry {n}")).collect();
    // Every other entry expires (in a day), so its drop has an expiry row to
    // remove too.
    let tomorrow = std::time::SystemTime::now() + Duration::from_secs(86_400);
    let feed: Vec<NewEntry> = feed_nets
        .iter()
        .zip(&comments)
        .enumerate()
        .map(|(offset, (text, comment))| NewEntry {
            net: net(text),
            comment: Some(comment),
            expires: offset.is_multiple_of(2).then_some(tomorrow),
        })
        .collect();
    let mut txn = store.begin().unwrap();
    let report = txn.add(ListKind::Blocklist, "feed:a", &feed).unwrap();
    txn.commit().unwrap();
    assert_eq!(report.joined.len(), cli_nets.len());
    assert_eq!(report.added.len(), 4_400 - cli_nets.len());

    assert_eq!(listed_by(&store, "feed:a"), feed_nets);
    assert_eq!(listed_by(&store, "cli"), cli_nets);
    for (offset, entry) in store
        .entries(ListKind::Blocklist, None)
        .unwrap()
        .iter()
        .enumerate()
    {
        let feeds = entry.sources.iter().find(|held| held.source == "feed:a");
        assert_eq!(
            feeds.and_then(|held| held.comment.as_deref()),
            Some(comments[offset].as_str()),
            "{}",
            entry.net
        );
    }
    assert_eq!(
        store.source_counts(ListKind::Blocklist).unwrap(),
        [
            ("cli".to_owned(), cli_nets.len() as u64),
            ("feed:a".to_owned(), 4_400)
        ]
    );
    assert_eq!(store.entry_count(ListKind::Blocklist).unwrap(), 4_400);

    // A replace that drops the first half (many drops: one pass over the
    // rows they lie between) and lists 2,000 more past the end (its new
    // memberships follow the list's last row).
    let next: Vec<String> = (2_200..6_400).map(address).collect();
    let refs: Vec<&str> = next.iter().map(String::as_str).collect();
    let report = replaced(&store, "feed:a", cli(&refs));
    assert_eq!(report.added.len(), 2_000);
    assert_eq!(listed_by(&store, "feed:a"), next);
    // Dropped and renewed without one, no membership expires any more.
    assert_eq!(store.next_expiry().unwrap(), None);
    assert_eq!(
        store.entry_count(ListKind::Blocklist).unwrap(),
        6_400 - 2_200 + 22
    );
    drop(store);
    assert_eq!(raw_schema(dir.path()), (6, true));
}

/// A state directory holding a copy of the store `tests/data/NAME`.
fn fixture(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    std::fs::copy(&fixture, dir.path().join(Store::FILE_NAME)).expect("copying the fixture");
    dir
}

/// The blocklist's networks that `source` lists.
fn listed_by(store: &Store, source: &str) -> Vec<String> {
    store
        .entries(ListKind::Blocklist, Some(source))
        .unwrap()
        .iter()
        .map(|entry| entry.net.to_string())
        .collect()
}

/// `source`'s blocklist entries replaced by `entries`, committed.
fn replaced(store: &Store, source: &str, entries: Vec<NewEntry<'_>>) -> ReplaceReport {
    let mut txn = store.begin().unwrap();
    let report = txn.replace(ListKind::Blocklist, source, entries).unwrap();
    txn.commit().unwrap();
    report
}

/// The fixtures' `cfctl add --comment kept --timeout ... 198.18.0.1`: its
/// comment and its expiry kept.
fn assert_keeps_the_fixtures_cli_entry(store: &Store) {
    let kept = store
        .entry(ListKind::Blocklist, &net("198.18.0.1/32"))
        .unwrap()
        .unwrap();
    assert_eq!(kept.sources[0].comment.as_deref(), Some("kept"));
    assert!(store.next_expiry().unwrap().is_some());
}

/// The schema version of the store in `dir`, read with redb directly, and
/// whether each list's index by source holds exactly the memberships of
/// the sources that `unindexed_sources` does not leave out (all of them in
/// a store of schema 5 or one just migrated).
fn raw_schema(dir: &Path) -> (u64, bool) {
    use redb::{ReadableDatabase, ReadableTable};
    type Net = &'static [u8; 18];
    const META: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("meta");
    let db = redb::Database::open(dir.join(Store::FILE_NAME)).unwrap();
    let txn = db.begin_read().unwrap();
    let version = txn
        .open_table(META)
        .unwrap()
        .get("schema_version")
        .unwrap()
        .unwrap()
        .value();
    let indexed = ["blocklist", "allowlist"].iter().all(|list| {
        let (members, index) = (format!("{list}_members"), format!("{list}_by_source"));
        let members: redb::TableDefinition<(Net, u32), (Option<&str>, u64, u64)> =
            redb::TableDefinition::new(&members);
        let index: redb::TableDefinition<(u32, Net), ()> = redb::TableDefinition::new(&index);
        let (Ok(members), Ok(index)) = (txn.open_table(members), txn.open_table(index)) else {
            return false;
        };
        let unindexed = unindexed_in(&txn, list);
        let mut from_members: Vec<(u32, [u8; 18])> = members
            .iter()
            .unwrap()
            .map(|row| {
                let (key, _) = row.unwrap();
                let (net, source) = key.value();
                (source, *net)
            })
            .filter(|(source, _)| !unindexed.contains(source))
            .collect();
        from_members.sort_unstable();
        let from_index: Vec<(u32, [u8; 18])> = index
            .iter()
            .unwrap()
            .map(|row| {
                let (key, _) = row.unwrap();
                let (source, net) = key.value();
                (source, *net)
            })
            .collect();
        from_members == from_index
    });
    (version, indexed)
}

/// The ids of the blocklist's sources that the store in `dir` leaves out
/// of its index by source.
fn unindexed_blocklist_sources(dir: &Path) -> Vec<u32> {
    use redb::ReadableDatabase;
    let db = redb::Database::open(dir.join(Store::FILE_NAME)).unwrap();
    unindexed_in(&db.begin_read().unwrap(), "blocklist")
}

/// The ids of the sources of `list` ("blocklist" or "allowlist") that
/// `txn`'s store leaves out of its index by source.
fn unindexed_in(txn: &redb::ReadTransaction, list: &str) -> Vec<u32> {
    const UNINDEXED: redb::TableDefinition<(u8, u32), ()> =
        redb::TableDefinition::new("unindexed_sources");
    let code = u8::from(list == "allowlist");
    let Ok(table) = txn.open_table(UNINDEXED) else {
        return Vec::new();
    };
    table
        .range((code, 0)..=(code, u32::MAX))
        .unwrap()
        .map(|row| row.unwrap().0.value().1)
        .collect()
}

#[test]
fn a_schema_2_store_has_its_source_index_rebuilt_and_keeps_every_membership() {
    // A store written by the previous cfctl: memberships, expiries and
    // counts as now, and beside them an index (source, network) per list.
    type Net = [u8; 18];
    type Member = (Option<&'static str>, u64, u64);
    const META: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("meta");
    const SOURCES: redb::TableDefinition<u32, &str> = redb::TableDefinition::new("sources");
    const COUNTS: redb::TableDefinition<(u8, u32), u64> = redb::TableDefinition::new("counts");
    const EMPTY: [redb::TableDefinition<&str, &str>; 2] = [
        redb::TableDefinition::new("settings"),
        redb::TableDefinition::new("feeds"),
    ];
    /// A list's members, per-source index and expiry tables.
    type ListTables = (
        redb::TableDefinition<'static, (Net, u32), Member>,
        redb::TableDefinition<'static, (u32, Net), ()>,
        redb::TableDefinition<'static, (u64, u32, Net), ()>,
    );
    const LISTS: [ListTables; 2] = [
        (
            redb::TableDefinition::new("blocklist_members"),
            redb::TableDefinition::new("blocklist_by_source"),
            redb::TableDefinition::new("blocklist_expiry"),
        ),
        (
            redb::TableDefinition::new("allowlist_members"),
            redb::TableDefinition::new("allowlist_by_source"),
            redb::TableDefinition::new("allowlist_expiry"),
        ),
    ];
    let key = |third: u8, fourth: u8, prefix_len: u8| {
        let mut key = [0u8; 18];
        key[..5].copy_from_slice(&[4, 198, 18, third, fourth]);
        key[17] = prefix_len;
        key
    };
    let expires = 4_000_000_000_000u64;
    // (list, network, source, membership)
    let rows: [(usize, Net, u32, Member); 4] = [
        (0, key(0, 0, 24), 1, (Some("SBL1"), 1_700_000_000, 0)),
        (0, key(0, 0, 24), 2, (None, 1_700_000_005, expires)),
        (0, key(1, 0, 24), 0, (None, 1_700_000_001, 0)),
        (1, key(2, 1, 32), 0, (Some("gateway"), 1_700_000_002, 0)),
    ];
    let dir = tempfile::tempdir().unwrap();
    {
        let db = redb::Database::create(dir.path().join(Store::FILE_NAME)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            txn.open_table(META)
                .unwrap()
                .insert("schema_version", 2)
                .unwrap();
            let mut sources = txn.open_table(SOURCES).unwrap();
            for (id, name) in ["cli", "file:a", "feed:b"].into_iter().enumerate() {
                sources.insert(u32::try_from(id).unwrap(), name).unwrap();
            }
            for table in EMPTY {
                txn.open_table(table).unwrap();
            }
            for (members, by_source, expiry) in LISTS {
                txn.open_table(members).unwrap();
                txn.open_table(by_source).unwrap();
                txn.open_table(expiry).unwrap();
            }
            for (list, net, source, member) in rows {
                let (members, by_source, expiry) = LISTS[list];
                txn.open_table(members)
                    .unwrap()
                    .insert((net, source), member)
                    .unwrap();
                txn.open_table(by_source)
                    .unwrap()
                    .insert((source, net), ())
                    .unwrap();
                if member.2 != 0 {
                    txn.open_table(expiry)
                        .unwrap()
                        .insert((member.2, source, net), ())
                        .unwrap();
                }
            }
            let mut counts = txn.open_table(COUNTS).unwrap();
            for (key, count) in [
                ((0, 0), 1),
                ((0, 1), 1),
                ((0, 2), 1),
                ((0, u32::MAX), 2),
                ((1, 0), 1),
                ((1, u32::MAX), 1),
            ] {
                counts.insert(key, count).unwrap();
            }
        }
        txn.commit().unwrap();
    }

    let store = Store::open(dir.path()).unwrap();
    let memberships = |list: ListKind, source: Option<&str>| -> Vec<String> {
        let mut found = Vec::new();
        for entry in store.entries(list, source).unwrap() {
            for member in entry.sources {
                let added = member.added.duration_since(std::time::UNIX_EPOCH).unwrap();
                found.push(format!(
                    "{} {} {:?} {} {:?}",
                    entry.net,
                    member.source,
                    member.comment,
                    added.as_secs(),
                    member.expires.is_some()
                ));
            }
        }
        found
    };
    let blocklist = [
        "198.18.0.0/24 file:a Some(\"SBL1\") 1700000000 false",
        "198.18.0.0/24 feed:b None 1700000005 true",
        "198.18.1.0/24 cli None 1700000001 false",
    ];
    assert_eq!(memberships(ListKind::Blocklist, None), blocklist);
    assert_eq!(
        memberships(ListKind::Blocklist, Some("cli")),
        blocklist[2..]
    );
    assert_eq!(
        memberships(ListKind::Allowlist, None),
        ["198.18.2.1/32 cli Some(\"gateway\") 1700000002 false"]
    );
    assert_eq!(
        store.next_expiry().unwrap(),
        Some(std::time::UNIX_EPOCH + Duration::from_millis(expires))
    );
    assert_eq!(store.entry_count(ListKind::Blocklist).unwrap(), 2);
    assert_eq!(
        store.source_counts(ListKind::Blocklist).unwrap(),
        [
            ("cli".to_owned(), 1),
            ("feed:b".to_owned(), 1),
            ("file:a".to_owned(), 1)
        ]
    );
    // The migrated memberships take part in a refresh: file:a drops its
    // network, which feed:b still lists, and lists a new one.
    let report = replaced(&store, "file:a", cli(&["198.18.3.0/24"]));
    assert_eq!(report.still_listed, [net("198.18.0.0/24")]);
    assert_eq!(report.added, [net("198.18.3.0/24")]);
    assert_eq!(
        listed(&store),
        ["198.18.0.0/24", "198.18.1.0/24", "198.18.3.0/24"]
    );
    drop(store);
    assert_eq!(raw_schema(dir.path()), (6, true));
}

/// A store the previous release wrote (schema 3: `cfctl add` with a
/// comment and with a timeout, `allow add`, `mode monitor`, and `agent
/// --once` with a file feed and an unreachable CrowdSec LAPI) opens as
/// schema 4: every entry kept, and every record in the state table, read
/// by its owner.
#[test]
fn a_store_of_the_previous_release_is_migrated_with_its_states() {
    use cfctl::agent::status::AgentRecord;
    use cfctl::sources::crowdsec::LapiState;
    use cfctl::sources::feed::FeedState;
    let dir = fixture("store-v3.redb");
    assert_eq!(raw_schema(dir.path()).0, 3);
    drop(Store::open(dir.path()).unwrap());
    assert_eq!(raw_schema(dir.path()), (6, true));
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(
        listed(&store),
        [
            "198.18.0.1/32",
            "198.18.9.0/24",
            "198.18.200.0/24",
            "2001:db8:200::/48"
        ]
    );
    assert_eq!(store.entry_count(ListKind::Allowlist).unwrap(), 1);
    assert_keeps_the_fixtures_cli_entry(&store);
    let settings: FilterSettings = store.state("filter", "filter").unwrap().unwrap();
    assert_eq!(settings.mode, Mode::Monitor);
    let feed: FeedState = store.state("feed", "local").unwrap().unwrap();
    assert_eq!((feed.entries, feed.updated), (2, 1));
    let lapi: LapiState = store
        .state("crowdsec", "http://127.0.0.1:1")
        .unwrap()
        .unwrap();
    assert!(lapi.last_error.unwrap().contains("cannot reach the LAPI"));
    let agent: AgentRecord = store.state("agent", "agent").unwrap().unwrap();
    assert_eq!(agent.config, "agent.toml");
    drop(store);
    {
        use redb::{ReadableDatabase, TableHandle};
        let db = redb::Database::open(dir.path().join(Store::FILE_NAME)).unwrap();
        let txn = db.begin_read().unwrap();
        let tables: Vec<String> = txn
            .list_tables()
            .unwrap()
            .map(|table| table.name().to_owned())
            .collect();
        assert!(
            !tables
                .iter()
                .any(|name| name == "settings" || name == "feeds"),
            "{tables:?}"
        );
    }
    let store = Store::open(dir.path()).unwrap();
    // Nothing else is in the state table.
    let namespaces: Vec<usize> = ["filter", "feed", "crowdsec", "agent"]
        .iter()
        .map(|namespace| store.states::<serde_json::Value>(namespace).unwrap().len())
        .collect();
    assert_eq!(namespaces, [1, 1, 1, 1]);
    drop(store);
    // Opened again, it is as it was.
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(listed(&store).len(), 4);
}

/// A store a release wrote before the index by source (schema
/// 4: `cfctl add` with a comment and with a timeout, `import` of a file
/// that shares a network with a feed, `allow add`, `mode monitor`, and
/// `agent --once` with a file feed and an unreachable CrowdSec LAPI)
/// opens as the current schema: every entry kept, the index built from the
/// memberships, and a refresh of one source among many others read
/// through it.
#[test]
fn a_store_of_the_current_release_is_migrated_to_the_index_by_source() {
    let dir = fixture("store-v4.redb");
    assert_eq!(raw_schema(dir.path()), (4, false));
    drop(Store::open(dir.path()).unwrap());
    assert_eq!(raw_schema(dir.path()), (6, true));
    let store = Store::open(dir.path()).unwrap();
    let feed = ["198.18.0.1/32", "198.18.9.0/24", "2001:db8:200::/48"];
    assert_eq!(
        listed(&store),
        [
            "198.18.0.1/32",
            "198.18.9.0/24",
            "198.18.77.0/24",
            "198.18.200.0/24",
            "2001:db8:200::/48"
        ]
    );
    assert_eq!(listed_by(&store, "feed:local"), feed);
    let kept = store
        .entry(ListKind::Blocklist, &net("198.18.0.1/32"))
        .unwrap()
        .unwrap();
    let sources: Vec<&str> = kept
        .sources
        .iter()
        .map(|member| member.source.as_str())
        .collect();
    assert_eq!(sources, ["cli", "feed:local"]);
    assert_eq!(kept.sources[0].comment.as_deref(), Some("kept"));
    assert!(store.next_expiry().unwrap().is_some());
    assert_eq!(store.entry_count(ListKind::Allowlist).unwrap(), 1);
    let settings: FilterSettings = store.state("filter", "filter").unwrap().unwrap();
    assert_eq!(settings.mode, Mode::Monitor);

    // Beside many other entries, the feed is a small source: its listing
    // and its refresh read the index, and see what the fixture stored.
    let others: Vec<String> = (0..200).map(|n| format!("198.19.{n}.0/24")).collect();
    let others: Vec<&str> = others.iter().map(String::as_str).collect();
    let mut txn = store.begin().unwrap();
    txn.add(ListKind::Blocklist, "file:others", &cli(&others))
        .unwrap();
    txn.commit().unwrap();
    assert_eq!(listed_by(&store, "feed:local"), feed);
    let report = replaced(
        &store,
        "feed:local",
        cli(&["198.18.0.1/32", "198.18.10.0/24"]),
    );
    assert_eq!(report.kept, 1);
    assert_eq!(report.added, [net("198.18.10.0/24")]);
    assert_eq!(report.still_listed, [net("198.18.9.0/24")]);
    assert_eq!(report.removed, [net("2001:db8:200::/48")]);
    assert_eq!(
        listed_by(&store, "feed:local"),
        ["198.18.0.1/32", "198.18.10.0/24"]
    );
    drop(store);
    assert_eq!(raw_schema(dir.path()), (6, true));
}

/// A store the current release wrote with every source in the index by
/// source (schema 5: `cfctl add --comment kept --timeout 3650d
/// 198.18.0.1`, `import --source big` of 40 addresses 198.19.0.0-39,
/// `add --source feed:local` of three networks, one shared with `cli`, and
/// `allow add 198.18.50.1`) opens as schema 6 with nothing lost. A source
/// that comes to list much of the list leaves the index at its next
/// change, and comes back into it, rebuilt, once it lists little; through
/// both, its listing, its replace reports and the other sources' stay
/// exact.
#[test]
fn a_store_of_the_current_release_keeps_its_index_and_large_sources_leave_it() {
    let dir = fixture("store-v5.redb");
    assert_eq!(raw_schema(dir.path()), (5, true));
    drop(Store::open(dir.path()).unwrap());
    assert_eq!(raw_schema(dir.path()), (6, true));
    assert!(unindexed_blocklist_sources(dir.path()).is_empty());
    let big: Vec<String> = (0..40).map(|n| format!("198.19.0.{n}/32")).collect();
    let feed = ["198.18.0.1/32", "198.18.9.0/24", "2001:db8:200::/48"];
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.entry_count(ListKind::Blocklist).unwrap(), 43);
    assert_eq!(store.entry_count(ListKind::Allowlist).unwrap(), 1);
    assert_eq!(listed_by(&store, "big"), big);
    assert_eq!(listed_by(&store, "feed:local"), feed);
    assert_keeps_the_fixtures_cli_entry(&store);

    // `big` lists most of the list: its refresh takes it out of the index.
    let refreshed: Vec<String> = (1..41).map(|n| format!("198.19.0.{n}/32")).collect();
    let refreshed: Vec<&str> = refreshed.iter().map(String::as_str).collect();
    let report = replaced(&store, "big", cli(&refreshed));
    assert_eq!(report.kept, 39);
    assert_eq!(report.added, [net("198.19.0.40/32")]);
    assert_eq!(report.removed, [net("198.19.0.0/32")]);
    assert_eq!(listed_by(&store, "big"), refreshed);
    drop(store);
    assert_eq!(unindexed_blocklist_sources(dir.path()).len(), 1);
    assert_eq!(raw_schema(dir.path()), (6, true));

    // Beside 400 others, `big` shrinks to two entries: back in the index,
    // with exactly its memberships.
    let store = Store::open(dir.path()).unwrap();
    let others: Vec<String> = (0..400)
        .map(|n| format!("198.18.{}.{}/32", 100 + n / 200, n % 200))
        .collect();
    let others: Vec<&str> = others.iter().map(String::as_str).collect();
    let mut txn = store.begin().unwrap();
    txn.add(ListKind::Blocklist, "file:others", &cli(&others))
        .unwrap();
    txn.commit().unwrap();
    let report = replaced(&store, "big", cli(&["198.19.0.1/32", "198.18.100.0/32"]));
    assert_eq!((report.kept, report.removed.len()), (1, 39));
    assert_eq!(report.joined, [net("198.18.100.0/32")]);
    assert_eq!(
        listed_by(&store, "big"),
        ["198.18.100.0/32", "198.19.0.1/32"]
    );
    assert_eq!(listed_by(&store, "feed:local"), feed);
    assert_eq!(listed_by(&store, "file:others").len(), 400);
    drop(store);
    // `file:others` lists most of the list now; `big` is back.
    assert_eq!(unindexed_blocklist_sources(dir.path()).len(), 1);
    assert_eq!(raw_schema(dir.path()), (6, true));
    let store = Store::open(dir.path()).unwrap();
    let report = replaced(&store, "big", cli(&["198.19.0.2/32"]));
    assert_eq!(report.added, [net("198.19.0.2/32")]);
    assert_eq!(report.removed, [net("198.19.0.1/32")]);
    assert_eq!(report.still_listed, [net("198.18.100.0/32")]);
    assert_eq!(listed_by(&store, "big"), ["198.19.0.2/32"]);
}
