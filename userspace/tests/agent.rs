//! `cfctl agent` for real: a feed server on 127.0.0.1 that the test starts
//! and changes, the agent as a separate process, the XDP program attached
//! to a veth pair in a namespace, real traffic, metrics scraped over HTTP,
//! `kill -9` in the middle of a refresh, and every bad configuration line.
//! Polls wait for events with generous deadlines (a deadline is a hang
//! guard, never a measured time). Needs root, iproute2 and ping.

mod common;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::agent::{free_port, listed, sample, scrape, scrape_body, wait_for, Agent};
use common::cli::{attached, Cfctl};
use common::feed_server::{Answer, FeedServer};
use common::netns::{check_traffic, TestNetwork};

/// A feed's state in `cfctl status --json`.
fn feed_state(cfctl: &Cfctl, name: &str) -> serde_json::Value {
    let status = cfctl.json(&["status"]);
    status["feeds"]
        .as_array()
        .and_then(|feeds| feeds.iter().find(|feed| feed["name"] == name).cloned())
        .unwrap_or_default()
}

/// A configuration with no metrics and feed `name` refreshed every
/// second from `url`, with `extra` settings.
fn feed_config(name: &str, url: &str, extra: &str) -> String {
    format!(
        "[metrics]\nlisten = \"\"\n\n{}",
        feed_section(name, url, extra)
    )
}

/// The `[[feed]]` section of feed `name`, refreshed every second.
fn feed_section(name: &str, url: &str, extra: &str) -> String {
    format!("[[feed]]\nname = \"{name}\"\nurl = \"{url}\"\nrefresh = \"1s\"\n{extra}\n")
}

#[test]
fn feed_changes_reach_the_traffic_and_an_unchanged_feed_changes_nothing() {
    let (network, cfctl) = attached(140, "agent-feed", "1000", "skb");
    let listed_peer = network.v4(3).to_string();
    let other = network.v4(9).to_string();
    let server = FeedServer::start(Answer::List(format!("{listed_peer}\n{}\n", network.v6(3))));
    let agent = Agent::start(&cfctl, &feed_config("t", &server.url(), ""));
    wait_for("the feed's first list", || listed(&cfctl, &listed_peer));
    check_traffic(&network, true);
    assert_eq!(feed_state(&cfctl, "t")["entries"], 2);

    // The feed changes: the new entry is listed, the old one passes again.
    server.set(Answer::List(format!("{other}\n")));
    wait_for("the feed's second list", || listed(&cfctl, &other));
    assert!(!listed(&cfctl, &listed_peer));
    check_traffic(&network, false);

    // An unchanged feed answers 304 to the agent's conditional request,
    // and nothing changes.
    let before = cfctl.ok(&["list"]);
    let seen = server.not_modified.load(Ordering::SeqCst);
    wait_for("a 304", || {
        server.not_modified.load(Ordering::SeqCst) > seen + 1
    });
    assert_eq!(cfctl.ok(&["list"]), before);
    assert!(feed_state(&cfctl, "t")["not_modified"].as_u64() > Some(0));

    // The command line keeps working beside the agent, and a source the
    // feed does not own is left alone by its refreshes.
    cfctl.ok(&["add", "198.18.140.77"]);
    server.set(Answer::List(format!("{listed_peer}\n")));
    wait_for("the feed's third list", || !listed(&cfctl, &other));
    assert!(listed(&cfctl, "198.18.140.77"));

    // `cfctl status` shows the running agent and its feed; SIGTERM ends
    // the agent, and the attachment stays.
    let status = cfctl.json(&["status"]);
    assert_eq!(status["agent"]["running"], true, "{status}");
    assert_eq!(status["agent"]["sources"][0], "feed:t");
    let log = agent.log();
    assert!(log.contains("feed refreshed"), "{log}");
    assert!(agent.terminate().success());
    let status = cfctl.json(&["status"]);
    assert_eq!(status["loaded"], true);
    assert_eq!(status["agent"]["running"], false);
    assert!(listed(&cfctl, "198.18.140.77"));
}

#[test]
fn a_second_agent_refuses_to_start_and_leaves_the_running_ones_entries_alone() {
    let (_network, cfctl) = attached(149, "agent-second", "1000", "skb");
    let first = FeedServer::start(Answer::List("198.18.149.3\n".to_owned()));
    let second = FeedServer::start(Answer::List("198.18.149.4\n".to_owned()));
    let agent = Agent::start(&cfctl, &feed_config("a", &first.url(), ""));
    wait_for("the running agent's feed", || {
        listed(&cfctl, "198.18.149.3")
    });
    let dir = tempfile::tempdir().expect("a directory for the second configuration");
    let other = dir.path().join("other.toml");
    std::fs::write(&other, feed_config("b", &second.url(), "")).expect("writing it");
    let other = other.to_str().expect("a UTF-8 path");
    let holder = format!("another cfctl agent (pid {})", agent.child.id());
    for args in [
        &["agent", "--once", "--config", other][..],
        &["agent", "--config", other],
    ] {
        let output = cfctl.run_to_end(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "cfctl {args:?} ran: {stderr}");
        assert!(stderr.contains(&holder), "cfctl {args:?}: {stderr}");
    }
    // Its configuration can still be checked.
    cfctl.ok(&["agent", "--check-config", "--config", other]);
    // The running agent's entries are untouched, and nothing of the
    // second configuration was applied.
    assert!(listed(&cfctl, "198.18.149.3"));
    assert!(!listed(&cfctl, "198.18.149.4"));
    assert!(!agent.log().contains("withdrawn"), "{}", agent.log());
    // Once the first agent has ended, the second one runs.
    assert!(agent.terminate().success());
    cfctl.ok(&["agent", "--once", "--config", other]);
    assert!(listed(&cfctl, "198.18.149.4"));
}

#[test]
fn a_feeds_whole_family_entries_are_refused_unless_allowed_and_mapped_ones_are_ipv4() {
    let (_network, cfctl) = attached(161, "agent-whole", "1000", "skb");
    let server = FeedServer::start(Answer::List(
        "0.0.0.0/0\n::/0\n::ffff:198.18.161.0/120\n198.18.162.3\n".to_owned(),
    ));
    let allow = FeedServer::start(Answer::List("::/0\n198.18.163.0/24\n".to_owned()));
    let port = free_port();
    let config = |allow_whole_family: bool| {
        format!(
            "[metrics]\nlisten = \"127.0.0.1:{port}\"\n\n{}{}",
            feed_section(
                "w",
                &server.url(),
                &format!("allow_whole_family = {allow_whole_family}")
            ),
            feed_section("a", &allow.url(), "list = \"allowlist\"")
        )
    };
    let agent = Agent::start(&cfctl, &config(false));
    wait_for("the feeds", || {
        listed(&cfctl, "198.18.162.3") && feed_state(&cfctl, "a")["entries"] == 1
    });
    // The rest of each list is applied; the mapped entry is IPv4.
    assert!(listed(&cfctl, "198.18.161.9"));
    assert!(!listed(&cfctl, "198.18.7.7") && !listed(&cfctl, "2001:db8::7"));
    let allowlisted = cfctl.ok(&["allow", "list"]);
    assert!(
        allowlisted.contains("198.18.163.0/24") && !allowlisted.contains("::/0"),
        "{allowlisted}"
    );
    // The refusal is counted, shown and logged.
    assert_eq!(feed_state(&cfctl, "w")["refused"], 2);
    assert_eq!(feed_state(&cfctl, "w")["entries"], 2);
    assert_eq!(feed_state(&cfctl, "a")["refused"], 1);
    assert!(cfctl.ok(&["status"]).contains("(2 refused: whole family)"));
    let samples = scrape(port);
    assert_eq!(
        sample(&samples, "cfctl_feed_refused_entries{feed=\"w\"}"),
        Some(2.0)
    );
    assert!(agent.log().contains("are refused"), "{}", agent.log());
    // A feed that allows them lists them.
    agent.reload(&config(true));
    wait_for("the whole families listed", || {
        listed(&cfctl, "198.18.7.7") && listed(&cfctl, "2001:db8::7")
    });
    assert_eq!(feed_state(&cfctl, "w")["refused"], 0);
}

#[test]
fn sighup_takes_a_good_configuration_and_refuses_a_bad_one() {
    let (_network, cfctl) = attached(145, "agent-reload", "1000", "skb");
    let first = FeedServer::start(Answer::List("198.18.145.3\n".to_owned()));
    let second = FeedServer::start(Answer::List("198.18.145.4\n".to_owned()));
    let agent = Agent::start(&cfctl, &feed_config("one", &first.url(), ""));
    wait_for("the first feed", || listed(&cfctl, "198.18.145.3"));

    // A bad configuration is refused, and the old one keeps working.
    agent.reload("[[feed]]\nname = \"one\"\n");
    wait_for("the refusal", || agent.log().contains("refused"));
    assert!(agent.log().contains("agent.toml:1: "), "{}", agent.log());
    first.set(Answer::List("198.18.145.5\n".to_owned()));
    wait_for("the old feed refreshed", || listed(&cfctl, "198.18.145.5"));

    // A good one replaces the feeds: the new feed's entries arrive, and
    // the feed that left takes its entries with it, but not an entry that
    // another source lists too.
    cfctl.ok(&["add", "198.18.145.5"]);
    agent.reload(&feed_config("two", &second.url(), ""));
    wait_for("the second feed", || listed(&cfctl, "198.18.145.4"));
    wait_for("the first feed withdrawn", || {
        cfctl
            .ok(&["list", "--source", "feed:one"])
            .trim()
            .is_empty()
    });
    assert!(listed(&cfctl, "198.18.145.5"), "the cli's entry stays");
    assert!(agent.log().contains("source no longer configured"));
    let status = cfctl.json(&["status"]);
    assert_eq!(status["agent"]["sources"][0], "feed:two");
    let feeds = status["feeds"].as_array().cloned().unwrap_or_default();
    assert!(
        feeds.iter().all(|feed| feed["name"] != "one"),
        "the state of the feed that left is forgotten: {status}"
    );
    assert!(agent.terminate().success());
}

#[test]
fn a_failing_feed_keeps_its_last_good_list_and_says_why() {
    let (_network, cfctl) = attached(141, "agent-fail", "1000", "skb");
    let good = "198.18.141.3\n198.18.141.4\n".to_owned();
    let server = FeedServer::start(Answer::List(good.clone()));
    let config = feed_config("t", &server.url(), "max_bytes = 4096\ntimeout = \"5s\"");
    let agent = Agent::start(&cfctl, &config);
    wait_for("the first list", || listed(&cfctl, "198.18.141.3"));
    for (answer, expected) in [
        (Answer::Status(500), "500"),
        (
            Answer::List("198.18.141.5\n<html>\n".to_owned()),
            "feed:t:2: ",
        ),
        (
            Answer::List("198.18.141.6\n".repeat(1000)),
            "larger than max_bytes",
        ),
        (Answer::Cut("198.18.141.7\n".repeat(50)), "reading the body"),
        // A line that would forge a log line on a terminal.
        (Answer::List(FORGED_LOG_LINE.to_owned()), "feed:t:2: "),
    ] {
        let failed = feed_state(&cfctl, "t")["failed"].as_u64().unwrap_or(0);
        server.set(answer);
        wait_for(expected, || {
            feed_state(&cfctl, "t")["failed"].as_u64().unwrap_or(0) > failed
        });
        let state = feed_state(&cfctl, "t");
        let error = state["last_error"].as_str().unwrap_or_default();
        assert!(error.contains(expected), "{expected}: {error}");
        assert!(listed(&cfctl, "198.18.141.3") && listed(&cfctl, "198.18.141.4"));
        assert_eq!(
            cfctl.json(&["status"])["entries"],
            2,
            "nothing applied from {expected}"
        );
        server.set(Answer::List(good.clone()));
    }
    assert_no_raw_controls(&agent.log());
}

/// A feed body whose second line would show a forged INFO line on a
/// terminal if a log carried it raw (ESC, CR), with NUL and DEL too.
const FORGED_LOG_LINE: &str =
    "198.18.141.5\n\x1b[2K\r2026-12-02T06:43:00Z  INFO feed refreshed\x00\x7f\n";

/// Fails if `log` has a control character other than a line feed (what
/// came from outside must reach it escaped).
fn assert_no_raw_controls(log: &str) {
    let raw: Vec<char> = log
        .chars()
        .filter(|&c| c.is_control() && c != '\n')
        .collect();
    assert!(raw.is_empty(), "raw controls {raw:?} in the log:\n{log:?}");
    assert!(
        log.contains("\\u{1b}[2K\\u{d}"),
        "the escaped line in:\n{log}"
    );
}

#[test]
fn a_slow_feed_holds_up_neither_another_feed_nor_a_command_nor_sigterm() {
    let (_network, cfctl) = attached(164, "agent-slow", "1000", "skb");
    // 1,300 bytes at one per 100 ms: two minutes, longer than any wait of
    // this test, and the fetch's timeout is longer still.
    let slow = FeedServer::start(Answer::Trickle(
        "198.18.164.3\n".repeat(100),
        Duration::from_millis(100),
    ));
    let fast = FeedServer::start(Answer::List("198.18.164.4\n".to_owned()));
    let config = feed_config("slow", &slow.url(), "timeout = \"150s\"")
        + &feed_section("fast", &fast.url(), "");
    let agent = Agent::start(&cfctl, &config);
    wait_for("the slow fetch to begin", || {
        slow.trickling.load(Ordering::SeqCst)
    });
    wait_for("the fast feed's list", || listed(&cfctl, "198.18.164.4"));
    fast.set(Answer::List("198.18.164.5\n".to_owned()));
    wait_for("the fast feed's next list", || {
        listed(&cfctl, "198.18.164.5")
    });
    cfctl.ok(&["add", "--timeout", "5m", "198.18.164.6"]);
    assert!(listed(&cfctl, "198.18.164.6"));
    assert!(
        slow.trickling.load(Ordering::SeqCst),
        "all of the above happened while the slow fetch ran"
    );
    assert!(!listed(&cfctl, "198.18.164.3"));
    // Waiting for the slow fetch would outlast terminate's minute.
    assert!(agent.terminate().success());
}

#[test]
fn a_collapsing_feed_is_refused_and_shown_unless_it_may_shrink() {
    let (_network, cfctl) = attached(165, "agent-collapse", "1000", "skb");
    let hosts = |range: std::ops::Range<u8>| -> String {
        range.map(|host| format!("198.18.165.{host}\n")).collect()
    };
    let server = FeedServer::start(Answer::List(hosts(10..30)));
    let config = feed_config("t", &server.url(), "");
    let agent = Agent::start(&cfctl, &config);
    let entries = || feed_state(&cfctl, "t")["entries"].as_u64();
    wait_for("the whole list", || entries() == Some(20));
    // Losing 8 of 20 entries is within the default max_shrink (a half).
    server.set(Answer::List(hosts(10..22)));
    wait_for("a list that shrank by 40%", || entries() == Some(12));
    for (answer, reason) in [
        (
            Answer::List(String::new()),
            "0 entries, fewer than min_entries = 1",
        ),
        (Answer::List(hosts(10..12)), "max_shrink = 0.5"),
    ] {
        let refusals = || feed_state(&cfctl, "t")["collapses_refused"].as_u64();
        let before = refusals().unwrap_or(0);
        server.set(answer);
        wait_for(reason, || refusals() > Some(before));
        let state = feed_state(&cfctl, "t");
        let error = state["last_error"].as_str().unwrap_or_default();
        assert!(error.contains(reason), "{reason}: {state}");
        assert_eq!(state["entries"], 12, "{state}");
        assert_eq!(cfctl.json(&["status"])["entries"], 12);
        assert!(listed(&cfctl, "198.18.165.21"));
    }
    let status = cfctl.ok(&["status"]);
    assert!(status.contains("refused as a collapse"), "{status}");
    let log = agent.log();
    assert!(
        log.lines()
            .any(|line| line.contains("WARN") && line.contains("looks like a collapse")),
        "{log}"
    );
    // A feed that may shrink freely takes the short list.
    agent.reload(&feed_config("t", &server.url(), "allow_shrink = true"));
    wait_for("the short list", || entries() == Some(2));
    assert!(!listed(&cfctl, "198.18.165.21"));
    assert!(listed(&cfctl, "198.18.165.11"));
}

#[test]
fn a_redirected_feed_shows_where_its_list_came_from() {
    let (_network, cfctl) = attached(166, "agent-redirect", "1000", "skb");
    let target = FeedServer::start(Answer::List("198.18.166.3\n".to_owned()));
    let redirect = FeedServer::start(Answer::Redirect(target.url()));
    let _agent = Agent::start(&cfctl, &feed_config("t", &redirect.url(), ""));
    wait_for("the redirected list", || listed(&cfctl, "198.18.166.3"));
    assert_eq!(
        feed_state(&cfctl, "t")["redirected_to"],
        target.url().as_str()
    );
    let status = cfctl.ok(&["status"]);
    assert!(
        status.contains(&format!("from {}", target.url())),
        "{status}"
    );
}

#[test]
fn expiry_ends_listings_in_one_batch_and_never_the_others() {
    use cfctl::xdp::test_run::XdpAction;
    let (network, cfctl) = attached(142, "agent-expiry", "400000", "skb");
    let port = free_port();
    let _agent = Agent::start(
        &cfctl,
        &format!("[metrics]\nlisten = \"127.0.0.1:{port}\"\n"),
    );
    wait_for("the metrics endpoint", || {
        ureq::get(&format!("http://127.0.0.1:{port}/metrics"))
            .call()
            .is_ok()
    });
    let permanent = network.v4(3).to_string();
    cfctl.ok(&["add", &permanent]);
    cfctl.ok(&["add", "198.18.142.50", "--timeout", "2s"]);
    wait_for("the 2 s listing to end", || {
        !listed(&cfctl, "198.18.142.50")
    });
    assert!(listed(&cfctl, &permanent));

    // 10^5 listings expiring together end in one update of the agent,
    // while packets from the permanent entry keep being dropped
    // throughout. The probes run the pinned program on frames
    // (BPF_PROG_TEST_RUN) and leave the store alone, so only the agent
    // ends the listings.
    let dir = tempfile::tempdir().expect("a directory for lists");
    let list = dir.path().join("expiring.txt");
    let hosts: Vec<std::net::Ipv4Addr> = (0..100_000u32)
        .map(|n| std::net::Ipv4Addr::from(0xc613_0000 + n))
        .collect();
    let text: Vec<String> = hosts.iter().map(ToString::to_string).collect();
    std::fs::write(&list, text.join("\n")).expect("writing a list");
    let updates = |samples: &[(String, f64)]| {
        sample(samples, "cfctl_updates_total{kind=\"expire\"}").unwrap_or(0.0)
    };
    let before = updates(&scrape(port));
    cfctl.ok(&[
        "import",
        list.to_str().expect("a UTF-8 path"),
        "--timeout",
        "5s",
    ]);
    let action = cfctl.pinned_verdict();
    let (first, last) = (hosts[0].into(), hosts[99_999].into());
    assert_eq!(action(first), XdpAction::Drop, "the imported listing");
    let (mut probes, mut misses) = (0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(120);
    while action(first) == XdpAction::Drop {
        assert!(Instant::now() < deadline, "gave up waiting for the expiry");
        for _ in 0..100 {
            probes += 1;
            misses += u64::from(action(network.v4(3)) != XdpAction::Drop);
        }
    }
    assert_eq!(
        action(last),
        XdpAction::Pass,
        "the whole batch ended together"
    );
    assert!(probes > 0);
    assert_eq!(
        misses, 0,
        "{misses} of {probes} probes of the permanent entry passed"
    );
    // The agent counts the update after applying it.
    wait_for("the expiry's update to be counted", || {
        updates(&scrape(port)) > before
    });
    assert_eq!(
        updates(&scrape(port)),
        before + 1.0,
        "one update for 10^5 expiries"
    );
    assert_eq!(cfctl.json(&["status"])["entries"], 1);
}

#[test]
fn an_idle_agent_sleeps_leaves_the_store_alone_and_still_ends_a_commands_listing() {
    let (network, cfctl) = attached(147, "agent-idle", "1000", "skb");
    let agent = Agent::start(&cfctl, "[metrics]\nlisten = \"\"\n");
    wait_for("the agent to run", || {
        cfctl.json(&["status"])["agent"]["running"] == true
    });
    // Opening the store for writing writes it (redb marks the file in use,
    // then clean): an agent that looked at the store on a timer (it did,
    // twice a second) would never leave it unchanged for two seconds.
    let store = cfctl.state_dir().join(cfctl::store::Store::FILE_NAME);
    let stamp = || {
        let metadata = std::fs::metadata(&store).expect("the store file");
        (
            metadata.modified().expect("a modification time"),
            metadata.len(),
        )
    };
    // Nor does it wake to look: it sleeps in poll until something is due
    // (nothing is), a signal or an opening of the store. An agent that
    // woke on a 20 ms timer, as it did, would sleep 100 times in 2 s.
    wait_for("the idle agent to leave the store alone for 2 s", || {
        let (before, sleeps_before) = (stamp(), sleeps(&agent));
        std::thread::sleep(Duration::from_secs(2));
        let sleeps = sleeps(&agent) - sleeps_before;
        let idle = stamp() == before;
        assert!(
            !idle || sleeps < 10,
            "the idle agent went to sleep {sleeps} times in 2 s"
        );
        idle
    });
    // The agent learns of the command's listing because the command opened
    // the store.
    the_agent_ends_a_commands_short_listing(&network, &cfctl);
    // With nothing due, it sleeps without a timeout: SIGTERM wakes it.
    assert!(agent.terminate().success());
}

#[test]
fn the_agent_outwaits_a_command_that_holds_the_store_long() {
    let (network, cfctl) = attached(148, "agent-busy", "1000", "skb");
    let mut agent = Agent::start(&cfctl, "[metrics]\nlisten = \"\"\n");
    wait_for("the agent to run", || {
        cfctl.json(&["status"])["agent"]["running"] == true
    });
    // The test holds the store as a long import would, for longer than one
    // wait for it (30 s). Opening it wakes the agent, which then waits.
    let store = cfctl::store::Store::open(cfctl.state_dir()).expect("opening the store");
    wait_for("the agent to find the store busy", || {
        let status = agent.child.try_wait().expect("the agent's status");
        assert!(status.is_none(), "the agent ended: {}", agent.log());
        agent.log().contains("the store is still busy")
    });
    drop(store);
    the_agent_ends_a_commands_short_listing(&network, &cfctl);
}

/// How many times the agent's threads have gone to sleep (voluntary
/// context switches, from /proc).
fn sleeps(agent: &Agent) -> u64 {
    let tasks = format!("/proc/{}/task", agent.child.id());
    std::fs::read_dir(&tasks)
        .expect("the agent's threads")
        .map(|task| {
            let status = std::fs::read_to_string(task.expect("a thread").path().join("status"))
                .unwrap_or_default();
            status
                .lines()
                .find_map(|line| line.strip_prefix("voluntary_ctxt_switches:"))
                .map_or(0, |count| count.trim().parse().expect("a count"))
        })
        .sum()
}

/// Adds a listing of 2 s with cfctl and waits for the agent to end it. The
/// probes run the pinned program on frames and leave the store alone, so
/// only the agent can end the listing.
fn the_agent_ends_a_commands_short_listing(network: &TestNetwork, cfctl: &Cfctl) {
    use cfctl::xdp::test_run::XdpAction;
    let address = network.v4(7);
    cfctl.ok(&["add", &address.to_string(), "--timeout", "2s"]);
    let action = cfctl.pinned_verdict();
    assert_eq!(action(address), XdpAction::Drop, "the new listing");
    wait_for("the agent to end the 2 s listing", || {
        action(address) == XdpAction::Pass
    });
}

/// `promtool check metrics` on a scrape's `body`.
fn promtool_check(body: &str) -> std::process::Output {
    use std::io::Write;
    let mut promtool = std::process::Command::new(common::unpacked_bin("prometheus", "promtool"))
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting promtool");
    promtool
        .stdin
        .take()
        .expect("promtool's input")
        .write_all(body.as_bytes())
        .expect("writing the scrape to promtool");
    promtool.wait_with_output().expect("promtool's verdict")
}

#[test]
fn metrics_are_served_and_parse() {
    let (network, cfctl) = attached(143, "agent-metrics", "1000", "skb");
    let server = FeedServer::start(Answer::List(format!(
        "{}\n{}\n",
        network.v4(3),
        network.v6(3)
    )));
    let down = FeedServer::start(Answer::Status(503));
    let port = free_port();
    let config = feed_config("m", &server.url(), "")
        .replace("listen = \"\"", &format!("listen = \"127.0.0.1:{port}\""))
        + &feed_section("down", &down.url(), "");
    let _agent = Agent::start(&cfctl, &config);
    wait_for("the feed", || listed(&cfctl, &network.v4(3).to_string()));
    wait_for("the failing feed's first try", || {
        feed_state(&cfctl, "down")["failed"].as_u64() > Some(0)
    });
    check_traffic(&network, true);

    // promtool (Debian's prometheus package) checks the scrape as served.
    let (content_type, body) = scrape_body(port);
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let promtool = promtool_check(&body);
    assert!(
        promtool.status.success(),
        "promtool: {}\n{body}",
        String::from_utf8_lossy(&promtool.stderr)
    );

    let samples = scrape(port);
    // A source with no entries shows 0, not no series.
    for name in [
        "cfctl_entries{list=\"blocklist\",source=\"feed:down\"}",
        "cfctl_feed_up{feed=\"down\"}",
    ] {
        assert_eq!(sample(&samples, name), Some(0.0), "{name}");
    }
    for (name, at_least) in [
        ("cfctl_entries{list=\"blocklist\",source=\"feed:m\"}", 1.0),
        (
            "cfctl_feed_refreshes_total{feed=\"m\",result=\"updated\"}",
            1.0,
        ),
        ("cfctl_feed_up{feed=\"m\"}", 1.0),
        (
            "cfctl_packets_total{direction=\"ingress\",family=\"ipv4\",outcome=\"dropped\"}",
            1.0,
        ),
        ("cfctl_filter_fingerprints", 1.0),
        ("cfctl_updates_total{kind=\"feed\"}", 1.0),
    ] {
        let value = sample(&samples, name).unwrap_or_else(|| panic!("no sample {name}"));
        assert!(value >= at_least, "{name} = {value}");
    }
    assert!(sample(&samples, "cfctl_agent_start_time_seconds").is_some());
    // Attached with --capacity 1000: a fixed size, never resized.
    for (name, value) in [
        ("cfctl_filter_capacity_keys", 1000.0),
        ("cfctl_filter_sizes_itself", 0.0),
        ("cfctl_filter_high_watermark_ratio", 0.85),
        ("cfctl_filter_low_watermark_ratio", 0.1),
        ("cfctl_filter_last_resize_timestamp_seconds", 0.0),
    ] {
        assert_eq!(sample(&samples, name), Some(value), "{name}");
    }
}

#[test]
fn a_killed_agent_leaves_the_store_before_or_after_a_refresh_and_finishes_it() {
    let (_network, cfctl) = attached(144, "agent-kill", "400000", "skb");
    let big: String = (0..100_000u32)
        .map(|n| format!("{}\n", std::net::Ipv4Addr::from(0xc613_0000 + n)))
        .collect();
    let server = FeedServer::start(Answer::List(big));
    let config = feed_config("k", &server.url(), "");
    for delay_ms in [0, 150, 300, 600] {
        let agent = Agent::start(&cfctl, &config);
        std::thread::sleep(Duration::from_millis(delay_ms));
        drop(agent);
        let entries = cfctl.json(&["status"])["entries"].as_u64();
        assert!(
            entries == Some(0) || entries == Some(100_000),
            "after a kill at {delay_ms} ms the store holds {entries:?} entries"
        );
        cfctl.ok(&["verify"]);
    }
    let _agent = Agent::start(&cfctl, &config);
    wait_for("the refresh to complete", || {
        cfctl.json(&["status"])["entries"].as_u64() == Some(100_000)
    });
    cfctl.ok(&["verify"]);
}

#[test]
fn every_bad_configuration_line_is_one_clear_error() {
    let cfctl = Cfctl::new("agent-config");
    let dir = tempfile::tempdir().expect("a directory for configurations");
    let feed = "[[feed]]\nname = \"a\"\nurl = \"http://127.0.0.1:1/x\"\nrefresh = \"1m\"\n";
    for (text, line, expected) in [
        ("[metrics]\nlisten = \"nowhere\"\n", 2, "is not an address"),
        (
            "[[feed]]\nname = \"a\"\nrefresh = \"1m\"\n",
            1,
            "needs a url or a path",
        ),
        (
            &format!("{feed}format = \"csv\"\n"),
            5,
            "unknown list format 'csv'",
        ),
        (
            &format!("{feed}list = \"greylist\"\n"),
            5,
            "neither blocklist nor allowlist",
        ),
        (&feed.replace("1m", "soon"), 4, "is not a duration"),
        (&feed.replace("1m", "10ms"), 4, "is shorter than 1s"),
        (&feed.replace("1m", "101years"), 4, "is longer than 100 years"),
        (
            &feed.replace("http://", "ftp://"),
            3,
            "is not http:// or https://",
        ),
        (&format!("{feed}{feed}"), 6, "a second feed named 'a'"),
        (
            &format!("{feed}colour = \"red\"\n"),
            5,
            "unknown field `colour`",
        ),
        (
            &format!("{feed}max_bytes = 0\n"),
            5,
            "max_bytes must be at least 1",
        ),
        ("[[feed]\n", 1, ""),
        (
            "[crowdsec]\nurl = \"http://127.0.0.1:1\"\n",
            1,
            "needs api_key_file or api_key_env",
        ),
        (
            "[crowdsec]\nurl = \"ftp://x\"\napi_key_env = \"PATH\"\n",
            2,
            "crowdsec: url 'ftp://x' is not http:// or https://",
        ),
        (
            "[crowdsec]\nurl = \"http://x\"\napi_key_env = \"CFCTL_NO_SUCH_VARIABLE\"\n",
            3,
            "the environment has no variable CFCTL_NO_SUCH_VARIABLE",
        ),
        (
            "[crowdsec]\nurl = \"http://x\"\napi_key_file = \"/nonexistent/key\"\n",
            3,
            "cannot read api_key_file /nonexistent/key",
        ),
        (
            "[crowdsec]\nurl = \"http://x\"\napi_key_env = \"PATH\"\npull = \"100ms\"\n",
            4,
            "crowdsec: pull '100ms' is shorter than 1s",
        ),
        (
            "[crowdsec]\nurl = \"http://x\"\napi_key_env = \"PATH\"\nmetrics_interval = \"5m\"\n",
            4,
            "crowdsec: metrics_interval '5m' is shorter than 10m (or \"0\" to push no usage metrics)",
        ),
        (
            "[crowdsec]\nurl = \"http://x\"\napi_key_env = \"PATH\"\nscopes = [\"Ip\", \"Country\"]\n",
            4,
            "scope 'Country' is not one of Ip, Range",
        ),
        (
            "[crowdsec]\nurl = \"https://x\"\ncert_file = \"c.pem\"\n",
            3,
            "crowdsec: give both cert_file and key_file, or neither",
        ),
        (
            "[crowdsec]\nurl = \"http://x\"\nkey_file = \"k.pem\"\ncert_file = \"c.pem\"\n",
            4,
            "crowdsec: cert_file needs an https:// url",
        ),
        (
            "[crowdsec]\nurl = \"http://x\"\napi_key_env = \"PATH\"\napi_key = \"k\"\n",
            4,
            "unknown field `api_key`",
        ),
        // Found by fuzzing: a value's control characters are escaped, so
        // the error stays one line (and cfctl escapes the escape's
        // backslash again as it prints any message).
        (
            &feed.replace("name = \"a\"", "name = \"a\\nb\""),
            2,
            r"feed name 'a\\u{a}b'",
        ),
    ] {
        let file = dir.path().join("agent.toml");
        std::fs::write(&file, text).expect("writing a configuration");
        let path = file.to_str().expect("a UTF-8 path");
        let line_text = cfctl.fails(&["agent", "--check-config", "--config", path]);
        assert!(
            line_text.starts_with(&format!("cfctl: {path}:{line}: "))
                && line_text.contains(expected),
            "{text:?}: {line_text}"
        );
    }
}

/// The files in `userspace/dist/`: both systemd units pass
/// `systemd-analyze verify` (pointed at the cfctl under test) and keep an
/// exposure level of at most 3.0 in `systemd-analyze security` (OK in its
/// scale, where an unsandboxed service scores 9.6), and the example agent
/// configuration passes `cfctl agent --check-config`.
#[test]
fn the_shipped_service_units_verify_and_the_example_configuration_checks() {
    let dist = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("dist");
    let units = tempfile::tempdir().expect("a directory for the units");
    let cfctl_binary = env!("CARGO_BIN_EXE_cfctl");
    for unit in ["cfctl-agent.service", "cfctl-attach@.service"] {
        let text = std::fs::read_to_string(dist.join(unit)).expect("reading a unit");
        assert!(text.contains("ExecStart=/usr/bin/cfctl "), "{unit}");
        let copy = units.path().join(unit);
        std::fs::write(&copy, text.replace("/usr/bin/cfctl", cfctl_binary))
            .expect("writing a unit");
        for check in [
            vec!["verify".to_owned()],
            vec![
                "security".to_owned(),
                "--offline=yes".to_owned(),
                "--threshold=30".to_owned(), // tenths: 3.0
            ],
        ] {
            let output = std::process::Command::new("systemd-analyze")
                .args(&check)
                .arg(&copy)
                .current_dir(units.path())
                .output()
                .expect("running systemd-analyze (Debian package systemd)");
            assert!(
                output.status.success() && output.stderr.is_empty(),
                "systemd-analyze {} {unit}: {}",
                check.join(" "),
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
    let cfctl = Cfctl::new("agent-dist");
    let example = dist.join("agent.toml");
    let summary = cfctl.ok(&[
        "agent",
        "--check-config",
        "--config",
        example.to_str().expect("a UTF-8 path"),
    ]);
    assert!(summary.contains("firehol_level1"), "{summary}");
}

/// The datagrams systemd would receive on `socket`, read until `until`
/// holds of them all (failing after a minute).
fn notifications_until(
    socket: &std::os::unix::net::UnixDatagram,
    seen: &mut Vec<String>,
    what: &str,
    mut until: impl FnMut(&[String]) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut buffer = [0; 4096];
    while !until(seen) {
        assert!(
            Instant::now() < deadline,
            "gave up waiting: {what}; got {seen:?}"
        );
        if let Ok(length) = socket.recv(&mut buffer) {
            seen.push(String::from_utf8_lossy(&buffer[..length]).into_owned());
        }
    }
}

/// Under systemd (`Type=notify`), the agent says READY=1 once its feed's
/// first list is applied, a STATUS line, WATCHDOG=1 while the loop runs,
/// RELOADING=1 then READY=1 around SIGHUP, and STOPPING=1 at SIGTERM: a
/// listener on a `NOTIFY_SOCKET` of the test's own reads them.
#[test]
fn the_agent_tells_systemd_it_is_ready_alive_reloading_and_stopping() {
    let cfctl = Cfctl::new("agent-notify");
    let address = "198.18.188.3";
    let server = FeedServer::start(Answer::List(format!("{address}\n")));
    let dir = tempfile::tempdir().expect("a directory for the socket");
    let path = dir.path().join("notify");
    let socket = std::os::unix::net::UnixDatagram::bind(&path).expect("a notify socket");
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("a timeout");
    let config = feed_config("n", &server.url(), "");
    let agent = Agent::start_under_systemd(&cfctl, &config, &path, 1_000_000);
    let mut seen = Vec::new();
    notifications_until(&socket, &mut seen, "READY=1", |seen| {
        seen.iter().any(|message| message.contains("READY=1"))
    });
    // Ready means the feed's list is in.
    assert!(listed(&cfctl, address));
    let ready = seen
        .iter()
        .find(|message| message.contains("READY=1"))
        .expect("the ready message");
    assert!(ready.contains("STATUS=following 1 sources"), "{seen:?}");
    assert!(
        seen[0].contains("STATUS=waiting for the first fetch of 1 of 1 sources"),
        "{seen:?}"
    );
    notifications_until(&socket, &mut seen, "two watchdog pings", |seen| {
        seen.iter()
            .filter(|message| *message == "WATCHDOG=1\n")
            .count()
            >= 2
    });
    agent.signal(libc::SIGHUP);
    let ready_before = seen
        .iter()
        .filter(|message| message.contains("READY=1"))
        .count();
    notifications_until(&socket, &mut seen, "the reload's READY=1", |seen| {
        seen.iter()
            .filter(|message| message.contains("READY=1"))
            .count()
            > ready_before
    });
    let reloading = seen
        .iter()
        .position(|message| message.contains("RELOADING=1"))
        .expect("RELOADING=1 before the reload's READY=1");
    assert!(seen[reloading].contains("MONOTONIC_USEC="), "{seen:?}");
    assert!(agent.terminate().success());
    notifications_until(&socket, &mut seen, "STOPPING=1", |seen| {
        seen.iter().any(|message| message.contains("STOPPING=1"))
    });
}

/// The log's levels come from `--log-level`, else `RUST_LOG`; `--log-format
/// json` writes one JSON object per line; into the journal (its
/// `JOURNAL_STREAM` naming standard error), each line starts with its
/// priority; a bad level is refused naming the flag.
#[test]
fn the_log_takes_its_levels_formats_and_the_journals_priorities() {
    let cfctl = Cfctl::new("agent-log");
    let server = FeedServer::start(Answer::List("198.18.189.3\n".to_owned()));
    let dir = tempfile::tempdir().expect("a directory");
    let config = dir.path().join("agent.toml");
    std::fs::write(&config, feed_config("l", &server.url(), "")).expect("the configuration");
    let config = config.to_str().expect("UTF-8");
    let log_file = dir.path().join("stderr");
    let run = |arguments: &[&str], environment: &[(&str, String)]| -> String {
        let stderr = std::fs::File::create(&log_file).expect("a log file");
        let mut command_line = vec!["agent", "--once", "--config", config];
        command_line.extend_from_slice(arguments);
        let status = cfctl
            .command(&command_line)
            .env_remove("RUST_LOG")
            .envs(
                environment
                    .iter()
                    .map(|(name, value)| (*name, value.as_str())),
            )
            .stderr(stderr)
            .status()
            .expect("running the agent");
        let log = std::fs::read_to_string(&log_file).expect("the log");
        assert!(status.success(), "{log}");
        log
    };
    let text = run(&[], &[]);
    assert!(
        text.contains(" INFO ") && text.contains("feed refreshed"),
        "{text}"
    );

    let json = run(&["--log-format", "json"], &[]);
    let events: Vec<serde_json::Value> = json
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {line}")))
        .collect();
    assert!(
        events
            .iter()
            .any(|event| event["level"] == "INFO" && event["fields"]["message"] == "agent started"),
        "{json}"
    );

    for (arguments, environment) in [
        (vec!["--log-level", "warn"], vec![]),
        (vec![], vec![("RUST_LOG", "warn".to_owned())]),
    ] {
        let quiet = run(&arguments, &environment);
        assert!(
            !quiet.contains("INFO"),
            "{arguments:?} {environment:?}: {quiet}"
        );
    }
    let debug = run(
        &["--log-level", "warn"],
        &[("RUST_LOG", "debug".to_owned())],
    );
    assert!(
        !debug.contains("INFO"),
        "the flag wins over RUST_LOG: {debug}"
    );

    // What systemd sets for a service whose standard error is the journal.
    std::fs::File::create(&log_file).expect("a log file");
    let metadata = std::fs::metadata(&log_file).expect("the log's metadata");
    let stream = {
        use std::os::unix::fs::MetadataExt;
        format!("{}:{}", metadata.dev(), metadata.ino())
    };
    let journal = run(&[], &[("JOURNAL_STREAM", stream)]);
    assert!(
        journal.lines().all(|line| line.starts_with('<')),
        "{journal}"
    );
    assert!(
        journal
            .lines()
            .any(|line| line.starts_with("<6>") && line.contains("agent started")),
        "{journal}"
    );

    let refused = cfctl.fails(&[
        "agent",
        "--once",
        "--config",
        config,
        "--log-level",
        "cfctl=loud",
    ]);
    assert!(refused.contains("--log-level 'cfctl=loud'"), "{refused}");
}
