//! The bookkeeping of decisions against the rules of the module
//! documentation, each answer taken and then applied as the agent does.

use std::time::UNIX_EPOCH;

use super::*;
use crate::netlist;
use crate::sources::crowdsec::config::ApiKey;

fn config() -> CrowdsecConfig {
    CrowdsecConfig {
        url: "http://127.0.0.1:1".into(),
        api_key: Some(ApiKey("k".into())),
        client_cert: None,
        pull: Duration::from_secs(10),
        scopes: vec!["Ip".into(), "Range".into()],
        types: vec!["ban".into()],
        origins: vec![],
        exclude_origins: vec!["CAPI".into()],
        scenarios: vec![],
        exclude_scenarios: vec![],
        scenarios_containing: vec![],
        scenarios_not_containing: vec![],
        ca_file: None,
        timeout: Duration::from_secs(1),
        resync: Duration::from_secs(300),
        max_bytes: 1 << 20,
        allow_whole_family: false,
        metrics_interval: None,
    }
}

fn decision(id: u64, scope: &str, value: &str, duration: &str) -> Decision {
    Decision {
        id,
        value: value.into(),
        scope: scope.into(),
        kind: "ban".into(),
        duration: duration.into(),
        origin: "cscli".into(),
        scenario: "manual".into(),
    }
}

fn net(text: &str) -> IpNet {
    text.parse().expect("a network")
}

/// Decisions taken as the agent takes them: each answer's changes are
/// applied before the next one.
#[derive(Default)]
struct Taker {
    decisions: Decisions,
    counts: BTreeMap<String, DecisionCounts>,
}

impl Taker {
    fn take(
        &mut self,
        config: &CrowdsecConfig,
        answer: Answer,
        taking: Taking,
        now: SystemTime,
    ) -> Changes {
        let changes = self
            .decisions
            .take(config, &answer, taking, now, &mut self.counts);
        self.decisions.applied(&changes);
        changes
    }
}

fn new(decisions: Vec<Decision>) -> Answer {
    Answer {
        new: decisions,
        deleted: vec![],
    }
}

fn deleted(decisions: Vec<Decision>) -> Answer {
    Answer {
        new: vec![],
        deleted: decisions,
    }
}

fn nets(changes: &Changes) -> Vec<IpNet> {
    changes.listed.iter().map(|(net, ..)| *net).collect()
}

#[test]
fn go_durations_parse() {
    let secs = |text: &str| parse_go_duration(text).map(|d| d.as_secs_f64());
    assert_eq!(secs("59m59.5s"), Some(3599.5));
    assert_eq!(secs("4h0m0s"), Some(14400.0));
    assert_eq!(secs("1h2m3s"), Some(3723.0));
    assert_eq!(secs("16ms"), Some(0.016));
    assert_eq!(secs("1.5µs"), Some(1.5e-6));
    assert_eq!(secs("-1.606978886s"), Some(0.0));
    assert_eq!(secs("0s"), Some(0.0));
    assert_eq!(secs("2562047h"), Some(2562047.0 * 3600.0));
    for bad in [
        "",
        "-",
        "5",
        "5x",
        "1h5",
        "s",
        "1..2s",
        "forever",
        "2562048h",
        "-2562048h",
    ] {
        assert_eq!(parse_go_duration(bad), None, "{bad}");
    }
}

#[test]
fn an_id_sent_again_for_another_network_moves_its_decision() {
    let config = config();
    let mut taker = Taker::default();
    let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
    taker.take(
        &config,
        new(vec![decision(1, "Ip", "198.18.0.1", "1h")]),
        Taking::Replace,
        now,
    );
    let changes = taker.take(
        &config,
        new(vec![decision(1, "Ip", "198.18.0.2", "1h")]),
        Taking::Changes,
        now,
    );
    assert_eq!(nets(&changes), [net("198.18.0.2/32")]);
    assert_eq!(changes.unlisted, [net("198.18.0.1/32")]);
    // Within one answer, the first network was never listed: nothing to
    // unlist.
    let twice = new(vec![
        decision(2, "Ip", "198.18.0.3", "1h"),
        decision(2, "Ip", "198.18.0.4", "1h"),
    ]);
    let changes = taker.take(&config, twice, Taking::Changes, now);
    assert_eq!(nets(&changes), [net("198.18.0.4/32")]);
    assert!(changes.unlisted.is_empty(), "{:?}", changes.unlisted);
}

#[test]
fn a_duration_beyond_gos_limit_is_ignored_not_a_panic() {
    let mut taker = Taker::default();
    let answer = new(vec![decision(1, "Ip", "198.18.0.1", "4000000000000000h")]);
    let changes = taker.take(&config(), answer, Taking::Replace, SystemTime::now());
    assert!(changes.listed.is_empty());
    assert_eq!(changes.ignored.len(), 1, "{:?}", changes.ignored);
}

#[test]
fn a_network_stays_while_any_decision_for_it_lives() {
    let config = config();
    let mut taker = Taker::default();
    let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
    let answer = new(vec![
        decision(1, "Ip", "198.18.0.1", "1h"),
        decision(2, "Ip", "198.18.0.1", "2h"),
        decision(3, "Range", "198.19.0.7/24", "1h"),
        decision(4, "Country", "FR", "1h"),
        decision(5, "Ip", "not-an-ip", "1h"),
        Decision {
            origin: "CAPI".into(),
            ..decision(6, "Ip", "198.18.0.9", "1h")
        },
    ]);
    let changes = taker.take(&config, answer, Taking::Replace, now);
    let mut listed: Vec<(IpNet, SystemTime, &str)> = changes
        .listed
        .iter()
        .map(|(net, at, comment)| (*net, *at, comment.as_str()))
        .collect();
    listed.sort();
    assert_eq!(
        listed,
        [
            (
                net("198.18.0.1/32"),
                now + Duration::from_secs(7200),
                "cscli/manual #2"
            ),
            (
                net("198.19.0.0/24"),
                now + Duration::from_secs(3600),
                "cscli/manual #3"
            ),
        ]
    );
    assert_eq!(changes.ignored.len(), 3, "{:?}", changes.ignored);
    let cscli = taker.counts["cscli"];
    assert_eq!((cscli.received, cscli.applied, cscli.ignored), (5, 3, 2));

    // A value listed as deleted under another of its decisions' ids ends
    // it (the LAPI names one decision per value).
    let delete_ago = |id, ago| deleted(vec![decision(id, "Ip", "198.18.0.1", ago)]);
    let deleted_at = now + Duration::from_secs(2);
    let changes = taker.take(&config, delete_ago(7, "-1s"), Taking::Changes, deleted_at);
    assert!(changes.listed.is_empty());
    assert_eq!(changes.unlisted, [net("198.18.0.1/32")]);
    // A deletion repeated by the LAPI changes nothing.
    let changes = taker.take(&config, delete_ago(1, "-1s"), Taking::Changes, deleted_at);
    assert!(changes.listed.is_empty() && changes.unlisted.is_empty());
    // A repeated deletion spares a decision taken after it.
    let later_ban = new(vec![decision(8, "Ip", "198.18.0.1", "1h")]);
    taker.take(&config, later_ban, Taking::Changes, deleted_at);
    let repeat_at = deleted_at + Duration::from_secs(1);
    // (the LAPI repeats it with the time since it ended)
    let changes = taker.take(&config, delete_ago(7, "-2s"), Taking::Changes, repeat_at);
    assert!(changes.unlisted.is_empty(), "{changes:?}");
    assert_eq!(taker.decisions.live(repeat_at), 2);

    // A decision that outlives its duration has ended by the store's
    // expiry: no change for it, and it is counted once its network is
    // next looked at.
    let later = now + Duration::from_secs(3601);
    let changes = taker.take(
        &config,
        deleted(vec![decision(3, "Range", "198.19.0.0/24", "-1s")]),
        Taking::Changes,
        later,
    );
    assert!(
        changes.unlisted.is_empty() && changes.listed.is_empty(),
        "{changes:?}"
    );
    assert_eq!(taker.counts["cscli"].expired, 1);
}

#[test]
fn a_whole_answer_changes_only_the_difference() {
    let config = config();
    let mut taker = Taker::default();
    let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
    let first = new(vec![
        decision(1, "Ip", "198.18.0.1", "1h"),
        decision(2, "Ip", "198.18.0.2", "1h"),
        decision(3, "Ip", "198.18.0.3", "1h"),
    ]);
    assert_eq!(
        taker
            .take(&config, first, Taking::Replace, now)
            .listed
            .len(),
        3
    );
    // Five minutes later the LAPI gives each decision's time left: the
    // same listings, and one it missed sending, and one gone.
    let later = now + Duration::from_secs(300);
    let resync = new(vec![
        decision(1, "Ip", "198.18.0.1", "55m0.0004s"),
        decision(2, "Ip", "198.18.0.2", "2h"),
        decision(4, "Ip", "198.18.0.4", "1h"),
    ]);
    let changes = taker.take(&config, resync, Taking::Resync, later);
    let mut listed = nets(&changes);
    listed.sort();
    assert_eq!(
        listed,
        [net("198.18.0.2/32"), net("198.18.0.4/32")],
        "the extended and the missed"
    );
    assert_eq!(changes.unlisted, [net("198.18.0.3/32")]);
    // A whole answer that replaces what the source lists lists everything,
    // changed or not.
    let again = new(vec![
        decision(1, "Ip", "198.18.0.1", "55m"),
        decision(4, "Ip", "198.18.0.4", "55m"),
    ]);
    let changes = taker.take(&config, again, Taking::Replace, later);
    assert_eq!(changes.listed.len(), 2, "{changes:?}");
    assert!(changes.unlisted.is_empty());
}

#[test]
fn deletions_of_many_decisions_each_cost_a_lookup() {
    let config = config();
    let mut taker = Taker::default();
    let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
    let count = 100_000u32;
    let address = |n: u32| std::net::Ipv4Addr::from(0xc612_0000 + n).to_string();
    let all = new((0..count)
        .map(|n| decision(n.into(), "Ip", &address(n), "1h"))
        .collect());
    assert_eq!(
        taker.take(&config, all, Taking::Replace, now).listed.len(),
        count as usize
    );
    let gone = deleted(
        (0..count)
            .map(|n| decision(n.into(), "Ip", &address(n), "-1s"))
            .collect(),
    );
    let started = std::time::Instant::now();
    let changes = taker.take(&config, gone, Taking::Changes, now + Duration::from_secs(2));
    assert_eq!(changes.unlisted.len(), count as usize);
    assert_eq!(taker.decisions.live(now), 0);
    // Not a timing assertion: a scan per deletion (10^10 steps) would not
    // end within any test's patience; this records what it took.
    eprintln!("10^5 deletions taken in {:?}", started.elapsed());
}

#[test]
fn whole_family_ranges_are_ignored_unless_allowed() {
    let answer = || {
        new(vec![
            decision(1, "Range", "0.0.0.0/0", "1h"),
            decision(2, "Range", "::/0", "1h"),
            decision(3, "Range", "::ffff:0:0/96", "1h"),
            decision(4, "Ip", "198.18.0.1", "1h"),
        ])
    };
    let mut taker = Taker::default();
    let changes = taker.take(&config(), answer(), Taking::Replace, SystemTime::now());
    assert_eq!(changes.listed.len(), 1, "{:?}", changes.listed);
    assert_eq!(taker.counts["cscli"].ignored, 3);
    assert!(
        changes
            .ignored
            .iter()
            .all(|reason| reason.contains("covers every address of its family")),
        "{:?}",
        changes.ignored
    );
    let allowing = CrowdsecConfig {
        allow_whole_family: true,
        ..config()
    };
    let mut taker = Taker::default();
    let changes = taker.take(&allowing, answer(), Taking::Replace, SystemTime::now());
    assert_eq!(changes.listed.len(), 3, "{:?}", changes.listed);
}

#[test]
fn ipv4_mapped_decisions_are_ipv4() {
    let config = config();
    let mut taker = Taker::default();
    let answer = new(vec![
        decision(1, "Range", "::ffff:198.18.70.0/120", "1h"),
        decision(2, "Ip", "::ffff:198.18.0.5", "1h"),
    ]);
    let now = SystemTime::now();
    let mut listed = nets(&taker.take(&config, answer, Taking::Replace, now));
    listed.sort();
    assert_eq!(listed, [net("198.18.0.5/32"), net("198.18.70.0/24")]);
    // Its deletion, sent mapped too, ends it.
    let gone = deleted(vec![decision(1, "Range", "::ffff:198.18.70.0/120", "-1s")]);
    let changes = taker.take(&config, gone, Taking::Changes, now + Duration::from_secs(2));
    assert_eq!(changes.unlisted, [net("198.18.70.0/24")]);
}

#[test]
fn a_long_scenario_makes_a_comment_that_fits_and_exports() {
    let mut taker = Taker::default();
    let answer = new(vec![Decision {
        scenario: "\u{1f}s".repeat(750),
        ..decision(u64::MAX, "Ip", "198.18.0.1", "1h")
    }]);
    let changes = taker.take(&config(), answer, Taking::Replace, SystemTime::now());
    let (net, _, comment) = &changes.listed[0];
    assert!(
        comment.len() <= MAX_COMMENT_BYTES,
        "{} bytes",
        comment.len()
    );
    assert!(comment.starts_with("cscli/\u{1f}s"), "{comment:?}");
    assert!(
        comment.ends_with(&format!("... #{}", u64::MAX)),
        "{comment:?}"
    );
    let line = netlist::export_line(net, Some(comment));
    let list = netlist::parse_bytes(line.as_bytes(), "export", Default::default())
        .expect("the export line reads back");
    assert_eq!(list.entries[0].comment.as_deref(), Some(comment.as_str()));
}

#[test]
fn a_stream_answer_with_nulls_parses() {
    let answer: Answer = serde_json::from_str(
        r#"{"deleted":null,"new":[{"duration":"2.4s","id":2,"origin":"cscli","scenario":"m","scope":"Range","type":"ban","value":"198.19.0.0/24"}]}"#,
    )
    .unwrap();
    assert_eq!((answer.new.len(), answer.deleted.len()), (1, 0));
    assert!(serde_json::from_str::<Answer>("[1, 2]").is_err());
}

#[test]
fn the_decision_that_speaks_for_a_network_names_its_origin() {
    let config = CrowdsecConfig {
        exclude_origins: vec![],
        ..config()
    };
    let mut taker = Taker::default();
    let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
    let from = |origin: &str, scenario: &str, decision: Decision| Decision {
        origin: origin.into(),
        scenario: scenario.into(),
        ..decision
    };
    let answer = new(vec![
        from("CAPI", "ssh-bf", decision(1, "Ip", "198.18.0.1", "1h")),
        // The longer decision speaks for the network.
        from("lists", "firehol_l1", decision(2, "Ip", "198.18.0.1", "3h")),
        decision(3, "Ip", "198.18.0.2", "1h"),
        decision(4, "Ip", "2001:db8::1", "1h"),
        from(
            "CAPI",
            "http-probing",
            decision(5, "Ip", "198.18.0.3", "2h"),
        ),
    ]);
    taker.take(&config, answer, Taking::Replace, now);
    let decisions = &taker.decisions;
    assert_eq!(
        decisions.origin_of(&net("198.18.0.1/32")).as_deref(),
        Some("lists:firehol_l1")
    );
    assert_eq!(
        decisions.origin_of(&net("198.18.0.2/32")).as_deref(),
        Some("cscli")
    );
    assert_eq!(decisions.origin_of(&net("198.18.0.9/32")), None);
    let counts = |at| -> Vec<(String, Family, u64)> {
        decisions
            .listed_by_origin(at)
            .into_iter()
            .map(|((origin, family), count)| (origin, family, count))
            .collect()
    };
    assert_eq!(
        counts(now),
        [
            ("CAPI".to_owned(), Family::Ipv4, 1),
            ("cscli".to_owned(), Family::Ipv4, 1),
            ("cscli".to_owned(), Family::Ipv6, 1),
            ("lists:firehol_l1".to_owned(), Family::Ipv4, 1),
        ]
    );
    // Listings that ended are no longer counted.
    assert_eq!(
        counts(now + Duration::from_secs(7200)),
        [("lists:firehol_l1".to_owned(), Family::Ipv4, 1)]
    );
}

#[test]
fn scenarios_are_followed_by_what_they_contain() {
    let config = CrowdsecConfig {
        exclude_origins: vec![],
        scenarios_containing: vec!["ssh".into(), "http".into()],
        scenarios_not_containing: vec!["probing".into()],
        ..config()
    };
    let with = |scenario: &str| Decision {
        scenario: scenario.into(),
        ..decision(1, "Ip", "198.18.0.1", "1h")
    };
    assert!(ignored_because(&config, &with("crowdsecurity/ssh-bf")).is_none());
    assert!(ignored_because(&config, &with("crowdsecurity/http-bad-user-agent")).is_none());
    assert!(ignored_because(&config, &with("crowdsecurity/http-probing")).is_some());
    assert!(ignored_because(&config, &with("crowdsecurity/smb-bf")).is_some());
}
