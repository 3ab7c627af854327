//! The agent's reading of CrowdSec LAPI answers (`/v1/decisions/stream`)
//! on any bytes. The first byte picks which answers are startup answers
//! and how far the clock moves between answers; the rest is a run of JSON
//! answers separated by NUL bytes, decoded and taken into one decision
//! state as the agent does. Never a panic; after every answer taken, the
//! source lists exactly the networks a live decision names, each once, as
//! a network (no host bits) that ends with its longest decision; every
//! decision received is either applied or ignored.
#![no_main]

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cfctl::agent::config::{Config, CrowdsecConfig};
use cfctl::agent::crowdsec::{take_answer, Answer};
use cfctl::store::CrowdsecState;
use ipnet::IpNet;
use libfuzzer_sys::fuzz_target;

/// At most this many answers per input, so that one input stays quick.
const MAX_ANSWERS: usize = 8;

/// The agent's defaults (scopes Ip and Range, type ban), with the
/// exclusions an operator typically sets, read once as the agent reads them.
fn config() -> &'static CrowdsecConfig {
    static CONFIG: OnceLock<CrowdsecConfig> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let text = "[crowdsec]\nurl = \"https://127.0.0.1:8080\"\n\
        cert_file = \"bouncer.pem\"\nkey_file = \"bouncer-key.pem\"\n\
        exclude_origins = [\"CAPI\"]\nexclude_scenarios = [\"crowdsecurity/ssh-slow-bf\"]\n";
        Config::parse(text, Path::new("agent.toml"))
            .expect("the configuration parses")
            .crowdsec
            .expect("a [crowdsec] section")
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&control, answers)) = data.split_first() else {
        return;
    };
    let config = config();
    let mut state = CrowdsecState::default();
    // The source's entries as the agent's changes leave them: expiry by
    // network.
    let mut source: BTreeMap<IpNet, SystemTime> = BTreeMap::new();
    let step = Duration::from_secs(u64::from(control >> 4) * 45);
    let mut now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let (mut received, mut reasons) = (0u64, 0u64);
    for (index, body) in answers
        .split(|&byte| byte == 0)
        .take(MAX_ANSWERS)
        .enumerate()
    {
        let Ok(answer) = serde_json::from_slice::<Answer>(body) else {
            continue;
        };
        let startup = index == 0 || control & (1 << (index % 4)) != 0;
        let changes = take_answer(config, &mut state, &answer, startup, now);
        received += answer.new.len() as u64;
        reasons += changes.ignored.len() as u64;

        let mut seen = HashSet::new();
        for (net, expires, _) in &changes.listed {
            assert_eq!(*net, net.trunc(), "{net} keeps host bits");
            assert!(seen.insert(*net), "{net} listed twice in one change");
            assert!(*expires > now, "{net} listed with an expiry in the past");
        }
        for net in &changes.unlisted {
            assert!(seen.insert(*net), "{net} both listed and unlisted");
        }
        if changes.replace {
            source.clear();
        }
        source.extend(
            changes
                .listed
                .iter()
                .map(|(net, expires, _)| (*net, *expires)),
        );
        for net in &changes.unlisted {
            assert!(
                source.remove(net).is_some(),
                "{net} unlisted but not listed"
            );
        }
        assert_eq!(changes.entries().len(), changes.listed.len());

        let now_seconds = now.duration_since(UNIX_EPOCH).unwrap().as_secs();
        let mut longest: BTreeMap<IpNet, u64> = BTreeMap::new();
        for decision in state.decisions.values() {
            assert!(decision.expires > now_seconds, "an expired decision kept");
            let end = longest.entry(decision.net).or_default();
            *end = (*end).max(decision.expires);
        }
        let live: BTreeSet<&IpNet> = longest.keys().collect();
        let listed: BTreeSet<&IpNet> = source.keys().collect();
        assert_eq!(listed, live, "the source differs from the live decisions");
        for (net, expires) in &source {
            assert_eq!(
                *expires,
                UNIX_EPOCH + Duration::from_secs(longest[net]),
                "{net} does not end with its longest decision"
            );
        }
        let counts = state.counts.values();
        let (all_received, applied, ignored) = counts.fold((0, 0, 0), |sum, count| {
            (
                sum.0 + count.received,
                sum.1 + count.applied,
                sum.2 + count.ignored,
            )
        });
        assert_eq!(
            all_received,
            applied + ignored,
            "a decision neither applied nor ignored"
        );
        assert_eq!(all_received, received);
        assert!(
            reasons <= ignored,
            "more reasons to ignore than decisions ignored"
        );
        now += step;
    }
});
