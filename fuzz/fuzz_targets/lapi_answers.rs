//! The agent's reading of CrowdSec LAPI answers (`/v1/decisions/stream`)
//! on any bytes. The first byte picks which answers are whole lists (and
//! whether they replace or resync) and how far the clock moves between
//! answers; the rest is a run of JSON answers separated by NUL bytes,
//! decoded and taken into one bookkeeping of decisions as the agent does,
//! each answer's changes applied before the next. Never a panic; after
//! every answer, the source lists exactly the networks a live decision
//! names in a plain model of the rules (every decision kept in one map,
//! a deletion scanning all of them), each with its longest decision's
//! expiry (within the second a resync lets pass); every decision received
//! is either applied or ignored.
#![no_main]

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cfctl::agent::config::Config;
use cfctl::sources::crowdsec::decisions::{
    deleted_network, followed, parse_go_duration, DecisionCounts, Decisions, Taking,
};
use cfctl::sources::crowdsec::lapi::Answer;
use cfctl::sources::crowdsec::CrowdsecConfig;
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
        let config =
            Config::parse(text, Path::new("agent.toml")).expect("the configuration parses");
        config.sources[0]
            .as_any()
            .downcast_ref::<CrowdsecConfig>()
            .expect("a [crowdsec] section")
            .clone()
    })
}

/// One decision of the model: its network, when it ends, when it was taken.
type Modelled = (IpNet, SystemTime, SystemTime);

fuzz_target!(|data: &[u8]| {
    let Some((&control, answers)) = data.split_first() else {
        return;
    };
    let config = config();
    let mut decisions = Decisions::default();
    let mut counts: BTreeMap<String, DecisionCounts> = BTreeMap::new();
    let mut model: BTreeMap<u64, Modelled> = BTreeMap::new();
    // The source's entries as the changes leave them: expiry by network.
    let mut source: BTreeMap<IpNet, SystemTime> = BTreeMap::new();
    let step = Duration::from_secs(u64::from(control >> 4) * 45);
    let mut now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let mut received = 0u64;
    for (index, body) in answers
        .split(|&byte| byte == 0)
        .take(MAX_ANSWERS)
        .enumerate()
    {
        let Ok(answer) = serde_json::from_slice::<Answer>(body) else {
            continue;
        };
        let taking = match (index == 0, control & (1 << (index % 4)) != 0) {
            (true, _) => Taking::Replace,
            (false, true) if control & 1 == 0 => Taking::Resync,
            (false, true) => Taking::Replace,
            (false, false) => Taking::Changes,
        };
        let changes = decisions.take(config, &answer, taking, now, &mut counts);
        decisions.applied(&changes);
        received += answer.new.len() as u64;

        let mut seen = HashSet::new();
        for (net, expires, _) in &changes.listed {
            assert_eq!(*net, net.trunc(), "{net} keeps host bits");
            assert!(seen.insert(*net), "{net} listed twice in one change");
            assert!(*expires > now, "{net} listed with an expiry in the past");
        }
        for net in &changes.unlisted {
            assert!(seen.insert(*net), "{net} both listed and unlisted");
        }
        // What the store holds of the source: a replace is all of it, and
        // the store's expiry ends what has ended.
        if taking == Taking::Replace {
            source.clear();
        }
        source.retain(|_, expires| *expires > now);
        source.extend(
            changes
                .listed
                .iter()
                .map(|(net, expires, _)| (*net, *expires)),
        );
        for net in &changes.unlisted {
            source.remove(net);
        }
        assert_eq!(changes.entries().len(), changes.listed.len());

        // The plain model of the rules.
        if taking != Taking::Changes {
            model.clear();
        }
        for decision in &answer.deleted {
            let Some(net) = deleted_network(config, decision) else {
                continue;
            };
            let ended = decision
                .duration
                .strip_prefix('-')
                .and_then(parse_go_duration)
                .map_or(now, |ago| now.checked_sub(ago).unwrap_or(UNIX_EPOCH));
            model.retain(|_, (modelled, _, taken)| *modelled != net || *taken > ended);
        }
        for decision in &answer.new {
            if let Ok((net, left)) = followed(config, decision) {
                if let Some(expires) = now.checked_add(left) {
                    model.insert(decision.id, (net, expires, now));
                }
            }
        }
        let mut longest: BTreeMap<IpNet, SystemTime> = BTreeMap::new();
        for (net, expires, _) in model.values().filter(|(_, expires, _)| *expires > now) {
            let end = longest.entry(*net).or_insert(*expires);
            *end = (*end).max(*expires);
        }
        let live: Vec<&IpNet> = longest.keys().collect();
        let listed: Vec<&IpNet> = source.keys().collect();
        assert_eq!(listed, live, "the source differs from the live decisions");
        for (net, expires) in &source {
            let apart = expires
                .duration_since(longest[net])
                .or_else(|_| longest[net].duration_since(*expires))
                .unwrap_or_default();
            assert!(
                apart < Duration::from_secs(1),
                "{net} does not end with its longest decision"
            );
        }
        let (all_received, applied, ignored) = counts.values().fold((0, 0, 0), |sum, count| {
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
            changes.ignored.len() as u64 <= ignored,
            "more reasons than ignored decisions"
        );
        now += step;
    }
});
