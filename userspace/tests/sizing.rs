//! A filter that sizes itself, in the real kernel: attached without
//! `--capacity`, it takes a list three times its first size in one import
//! (growing first), shrinks when the list does, and grows when an add
//! finds it full, while
//! BPF_PROG_TEST_RUN probes a permanent entry on the program attached at
//! each moment: no miss. A fixed capacity still refuses what does not fit
//! and names `cfctl resize`, and `resize --capacity auto` lets it size
//! itself; `--max-memory` stops the growth. Needs root and iproute2.

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU64, Ordering};

use cfctl::control::sizing::{auto_capacity, MIN_AUTO_CAPACITY};
use cfctl::xdp::test_run::XdpAction;
use cfctl::FilterShape;
use common::cli::Cfctl;
use common::feed_server::{Answer, FeedServer};
use common::netns::TestNetwork;

/// A list of `count` addresses from 198.19.0.0 up, written to `dir`.
fn list_of(dir: &std::path::Path, count: u32) -> std::path::PathBuf {
    list_from(dir, 0, count)
}

/// A list of `count` addresses from 198.19.0.0 + `first` up, written to
/// `dir`.
fn list_from(dir: &std::path::Path, first: u32, count: u32) -> std::path::PathBuf {
    let base = u32::from(Ipv4Addr::new(198, 19, 0, 0)) + first;
    let list: String = (0..count)
        .map(|index| format!("{}\n", Ipv4Addr::from(base + index)))
        .collect();
    let file = dir.join("list.txt");
    std::fs::write(&file, list).expect("writing the list");
    file
}

/// Runs `body` while a thread probes `address` with BPF_PROG_TEST_RUN on
/// whichever program is pinned at each moment, and asserts that the
/// probes ran and that none of them passed it.
fn never_passes(cfctl: &Cfctl, address: IpAddr, body: impl FnOnce()) {
    let (probes, misses) = (AtomicU64::new(0), AtomicU64::new(0));
    let probe = || {
        match cfctl.verdict_now(address) {
            Some(XdpAction::Drop) => probes.fetch_add(1, Ordering::SeqCst),
            Some(_) => misses.fetch_add(1, Ordering::SeqCst),
            None => 0,
        };
    };
    common::while_probing(probe, body);
    assert_eq!(misses.into_inner(), 0, "{address} passed");
    assert!(probes.into_inner() > 0, "the prober never ran");
}

#[test]
fn a_filter_attached_without_a_capacity_grows_and_shrinks_with_the_list() {
    common::require_root();
    let network = TestNetwork::new(169);
    let cfctl = Cfctl::new("sizing");
    cfctl.ok(&["attach", &network.host_link, "--mode", "skb"]);
    let status = cfctl.json(&["status"]);
    assert_eq!(status["sizing"], "auto", "{status}");
    assert_eq!(status["capacity"], MIN_AUTO_CAPACITY);
    let permanent: IpAddr = Ipv4Addr::new(198, 18, 169, 3).into();
    cfctl.ok(&["add", &permanent.to_string()]);
    let dir = tempfile::tempdir().expect("a directory for the lists");
    let entries = 3 * u32::try_from(MIN_AUTO_CAPACITY).expect("a small capacity");

    never_passes(&cfctl, permanent, || {
        // Three times the first capacity in one import: the filter grows
        // first, as the import's size says it must, then takes it.
        let list = list_of(dir.path(), entries);
        let list = list.to_str().expect("a UTF-8 path");
        let report = cfctl.json(&["import", list]);
        assert_eq!(report["added"], entries, "{report}");
        let grown = report["resized"]["to"].as_u64().unwrap_or_default();
        let shape = FilterShape::Fingerprint16;
        assert_eq!(grown, auto_capacity(entries as usize, shape), "{report}");
        let status = cfctl.json(&["status"]);
        assert_eq!(status["capacity"], grown);
        // Sized for the list: more than a quarter and at most half full
        // (these keys would fill the table `--capacity` gives for them
        // three quarters, so the automatic one is twice that).
        let load = status["filter"]["load_factor"].as_f64().unwrap_or_default();
        assert!((0.25..=0.5).contains(&load), "{status}");
        let reason = status["last_resize"]["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("needs at least"), "{status}");
        cfctl.ok(&["verify"]);
        let verdict = cfctl.pinned_verdict();
        for index in [0, entries / 2, entries - 1] {
            let address = Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 19, 0, 0)) + index);
            assert_eq!(verdict(address.into()), XdpAction::Drop, "{address}");
        }

        // The list shrinks to ten entries: so does the filter.
        list_of(dir.path(), 10);
        let report = cfctl.json(&["import", "--replace", list]);
        assert_eq!(report["resized"]["to"], MIN_AUTO_CAPACITY, "{report}");
        let status = cfctl.json(&["status"]);
        assert_eq!(status["capacity"], MIN_AUTO_CAPACITY);
        let reason = status["last_resize"]["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("below the low watermark"), "{status}");
        assert!(cfctl.ok(&["status"]).contains("sizing       automatic"));
        cfctl.ok(&["verify"]);

        // Two adds that each fit, together not: the second finds the
        // filter full, which grows, and then takes it.
        let slots = cfctl.json(&["status"])["filter"]["slots"]
            .as_u64()
            .expect("the filter's slots");
        let most = u32::try_from(slots * 6 / 10).expect("a small filter");
        let report = cfctl.json(&[
            "import",
            list_from(dir.path(), 20_000, most).to_str().unwrap(),
        ]);
        assert!(report["resized"].is_null(), "{report}");
        let report = cfctl.json(&[
            "import",
            list_from(dir.path(), 40_000, most).to_str().unwrap(),
        ]);
        assert_eq!(report["added"], most, "{report}");
        assert!(
            report["resized"]["to"].as_u64() > Some(MIN_AUTO_CAPACITY),
            "{report}"
        );
        let status = cfctl.json(&["status"]);
        let reason = status["last_resize"]["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("needed"), "{status}");
        cfctl.ok(&["verify"]);
    });
    let covering = |address: &str| cfctl.check(address)["covering"].as_array().map(Vec::len);
    assert_eq!(covering("198.19.0.9"), Some(1));
    assert_eq!(covering("198.19.0.10"), Some(0));
}

/// A feed three times the filter's first size, refreshed by the agent
/// into a default attach: the filter grows ahead of it, so the refresh
/// applies in one pass, and the permanent entry never passes meanwhile.
#[test]
fn a_feed_three_times_the_first_size_applies_in_one_pass() {
    common::require_root();
    let network = TestNetwork::new(173);
    let cfctl = Cfctl::new("sizing-feed");
    cfctl.ok(&["attach", &network.host_link, "--mode", "skb"]);
    let permanent: IpAddr = Ipv4Addr::new(198, 18, 173, 3).into();
    cfctl.ok(&["add", &permanent.to_string()]);
    let entries = 3 * u32::try_from(MIN_AUTO_CAPACITY).expect("a small capacity");
    let dir = tempfile::tempdir().expect("a directory for the feed");
    let list = std::fs::read_to_string(list_of(dir.path(), entries)).expect("the list");
    let server = FeedServer::start(Answer::List(list));
    let config = dir.path().join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "[metrics]\nlisten = \"\"\n\n[[feed]]\nname = \"grow\"\nurl = \"{}\"\nrefresh = \"1h\"\n",
            server.url()
        ),
    )
    .expect("writing the configuration");
    let config = config.to_str().expect("a UTF-8 path");

    never_passes(&cfctl, permanent, || {
        cfctl.ok(&["agent", "--once", "--config", config]);
    });
    let status = cfctl.json(&["status"]);
    assert_eq!(status["entries"], entries + 1, "{status}");
    // One growth, ahead of the refresh, for what it brought.
    assert_eq!(
        status["capacity"],
        auto_capacity(entries as usize, FilterShape::Fingerprint16),
        "{status}"
    );
    let reason = status["last_resize"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("needs at least"), "{status}");
    cfctl.ok(&["verify"]);
}

#[test]
fn a_fixed_capacity_or_a_memory_ceiling_refuses_what_does_not_fit() {
    common::require_root();
    let network = TestNetwork::new(170);
    let cfctl = Cfctl::new("sizing-fixed");
    cfctl.ok(&[
        "attach",
        &network.host_link,
        "--mode",
        "skb",
        "--capacity",
        "100",
    ]);
    assert_eq!(cfctl.json(&["status"])["sizing"], "fixed");
    assert!(cfctl
        .ok(&["status"])
        .contains("sizing       fixed at 100 keys"));
    let dir = tempfile::tempdir().expect("a directory for the lists");
    let list = list_of(dir.path(), 1000);
    let list = list.to_str().expect("a UTF-8 path");
    let line = cfctl.fails(&["import", list]);
    assert!(line.contains("cfctl resize --capacity"), "{line}");
    assert_eq!(cfctl.json(&["status"])["entries"], 0);

    cfctl.ok(&["resize", "--capacity", "auto"]);
    let status = cfctl.json(&["status"]);
    assert_eq!(status["sizing"], "auto", "{status}");
    assert_eq!(status["capacity"], MIN_AUTO_CAPACITY);
    cfctl.ok(&["import", list]);
    cfctl.ok(&["verify"]);
    assert_eq!(cfctl.json(&["status"])["entries"], 1000);
    let line = cfctl.fails(&["attach", &network.host_link, "--capacity", "100"]);
    assert!(line.contains("cfctl resize --capacity N|auto"), "{line}");

    // A ceiling on the table's memory stops the growth: a change that
    // would need more is refused whole.
    cfctl.ok(&["attach", &network.host_link, "--max-memory", "64KiB"]);
    assert_eq!(cfctl.json(&["status"])["max_memory"], 65536);
    let more_dir = tempfile::tempdir().expect("a directory for the lists");
    let more = list_of(more_dir.path(), 20_000);
    let more = more.to_str().expect("a UTF-8 path");
    let line = cfctl.fails(&["import", more]);
    assert!(line.contains("more than --max-memory 64.0 KiB"), "{line}");
    assert_eq!(cfctl.json(&["status"])["entries"], 1000);
    cfctl.ok(&["verify"]);
    cfctl.ok(&["attach", &network.host_link, "--max-memory", "none"]);
    cfctl.ok(&["import", more]);
    assert_eq!(cfctl.json(&["status"])["entries"], 20_000);
    cfctl.ok(&["verify"]);
}
