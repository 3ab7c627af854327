//! What the agent makes of the LAPI's answers: the decisions it took and
//! that live, indexed by network and by id ([`Decisions`]), and the
//! changes an answer makes to what the source `crowdsec` lists
//! ([`Decisions::take`]).
//!
//! Invariants:
//! * a network is listed exactly while at least one taken, live decision
//!   names it; its expiry is the latest of theirs (to the millisecond)
//!   and its comment names the decision that lasts longest
//!   (`origin/scenario #id`, cut to fit a comment);
//! * a decision the LAPI lists as deleted ends every decision taken for
//!   its network before it ended (the LAPI lists a value as deleted, under
//!   any one of its decisions' ids, only once nothing bans it any more);
//!   each deletion costs a lookup of its network, not a scan;
//! * a decision that outlives its duration is dropped when its network is
//!   next looked at: its listing ended already, by the store's expiry,
//!   which is the one way a listing ends on time;
//! * a whole answer (a startup pull) replaces what the source lists, or
//!   is compared with it and only the difference is changed;
//! * a decision the agent does not follow (scope, type, origin, scenario,
//!   a whole family without `allow_whole_family`, or a value that is no
//!   address or network) is counted as ignored and the rest of the answer
//!   is taken.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, SystemTime};

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use super::config::CrowdsecConfig;
use super::lapi::{Answer, Decision};
use super::SOURCE;
use crate::netlist;
use crate::store::NewEntry;
use crate::text::{self, excerpt, MAX_COMMENT_BYTES};
use crate::Family;

/// Two expiries of one network this close are the same listing (a whole
/// answer gives each decision's time left, which moves with the clock).
const SAME_EXPIRY: Duration = Duration::from_secs(1);

/// How many decisions of one origin met each fate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DecisionCounts {
    /// Listed as new in an answer.
    pub received: u64,
    /// Taken (their network listed by source `crowdsec`).
    pub applied: u64,
    /// Not taken: a scope, type, origin or scenario not followed, a whole
    /// family, or a bad value.
    pub ignored: u64,
    /// Ended by their duration before the LAPI said so.
    pub expired: u64,
}

/// One decision taken.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Taken {
    id: u64,
    expires: SystemTime,
    origin: String,
    scenario: String,
    /// When it was taken (a deletion ends only the decisions taken before
    /// it ended).
    taken: SystemTime,
}

/// A network as the source lists it: its expiry and comment.
pub type Listing = (SystemTime, String);

/// The decisions taken and live, and what the source lists.
#[derive(Debug, Default)]
pub struct Decisions {
    by_net: HashMap<IpNet, Vec<Taken>>,
    net_of: HashMap<u64, IpNet>,
    /// What the source lists, as the last applied changes left it.
    listed: HashMap<IpNet, Listing>,
}

/// What one answer changes in what the source lists.
#[derive(Debug, Default)]
pub struct Changes {
    /// Networks listed anew, or with another expiry or comment.
    pub listed: Vec<(IpNet, SystemTime, String)>,
    /// Networks no longer listed.
    pub unlisted: Vec<IpNet>,
    /// Why decisions were ignored (one line each, repeats removed).
    pub ignored: BTreeSet<String>,
}

impl Changes {
    /// The entries to add (or to replace the source's with).
    pub fn entries(&self) -> Vec<NewEntry<'_>> {
        self.listed
            .iter()
            .map(|(net, expires, comment)| NewEntry {
                net: *net,
                comment: Some(comment),
                expires: Some(*expires),
            })
            .collect()
    }
}

/// How an answer is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Taking {
    /// The changes since the last pull.
    Changes,
    /// The whole list, compared with what the source lists: every
    /// decision taken before is forgotten, and only what differs changes.
    Resync,
    /// The whole list, to replace all that the source lists: every
    /// listing is in the changes.
    Replace,
}

impl Decisions {
    /// Decisions taken and live at `now`.
    pub fn live(&self, now: SystemTime) -> usize {
        self.by_net
            .values()
            .map(|taken| taken.iter().filter(|taken| taken.expires > now).count())
            .sum()
    }

    /// Networks the source lists.
    pub fn listed(&self) -> usize {
        self.listed.len()
    }

    /// The origin reported for drops of `net`: that of the decision that
    /// speaks for it ([`reported_origin`]), if one was taken.
    pub fn origin_of(&self, net: &IpNet) -> Option<String> {
        let speaker = self
            .by_net
            .get(net)?
            .iter()
            .max_by_key(|taken| (taken.expires, taken.id))?;
        Some(reported_origin(&speaker.origin, &speaker.scenario))
    }

    /// The networks listed at `now`, by reported origin and family (a
    /// bouncer's `active_decisions`).
    pub fn listed_by_origin(&self, now: SystemTime) -> BTreeMap<(String, Family), u64> {
        let mut counts = BTreeMap::new();
        for (net, (expires, _)) in &self.listed {
            if *expires <= now {
                continue;
            }
            let origin = self.origin_of(net).unwrap_or_else(|| SOURCE.to_owned());
            let family = match net {
                IpNet::V4(_) => Family::Ipv4,
                IpNet::V6(_) => Family::Ipv6,
            };
            *counts.entry((origin, family)).or_default() += 1;
        }
        counts
    }

    /// Takes `answer` at `now`, counting each decision's fate in `counts`
    /// by origin, and returns what it changes in what the source lists.
    /// The changes are not yet what the source lists: [`Self::applied`]
    /// records them once they are.
    pub fn take(
        &mut self,
        config: &CrowdsecConfig,
        answer: &Answer,
        taking: Taking,
        now: SystemTime,
        counts: &mut BTreeMap<String, DecisionCounts>,
    ) -> Changes {
        let mut changes = Changes::default();
        // What the store's expiry has ended is no longer listed.
        self.listed.retain(|_, (expires, _)| *expires > now);
        let mut touched = BTreeSet::new();
        if taking == Taking::Replace {
            self.listed.clear();
        }
        if taking != Taking::Changes {
            touched.extend(self.listed.keys().copied());
            self.by_net.clear();
            self.net_of.clear();
        }
        for decision in &answer.deleted {
            if let Some(net) = deleted_network(config, decision) {
                self.delete(net, decision, now, &mut touched, counts);
            }
        }
        for decision in &answer.new {
            let counts = counts.entry(decision.origin.clone()).or_default();
            counts.received += 1;
            match taken(config, decision, now) {
                Ok((net, taken)) => {
                    counts.applied += 1;
                    touched.insert(net);
                    // An id sent again for another network moves the
                    // decision.
                    if let Some(old) = self.net_of.insert(taken.id, net) {
                        if let Some(decisions) = self.by_net.get_mut(&old) {
                            decisions.retain(|known| known.id != taken.id);
                        }
                        touched.insert(old);
                    }
                    let decisions = self.by_net.entry(net).or_default();
                    decisions.retain(|known| known.id != taken.id);
                    decisions.push(taken);
                }
                Err(reason) => {
                    counts.ignored += 1;
                    changes.ignored.insert(reason);
                }
            }
        }
        for net in touched {
            match (self.longest(net, now, counts), self.listed.get(&net)) {
                (Some(listing), Some(known)) if same_listing(&listing, known) => {}
                (Some((expires, comment)), _) => changes.listed.push((net, expires, comment)),
                (None, Some(_)) => changes.unlisted.push(net),
                (None, None) => {}
            }
        }
        changes
    }

    /// Records that `changes` were applied to what the source lists.
    pub fn applied(&mut self, changes: &Changes) {
        for net in &changes.unlisted {
            self.listed.remove(net);
        }
        for (net, expires, comment) in &changes.listed {
            self.listed.insert(*net, (*expires, comment.clone()));
        }
    }

    /// Ends every decision for `net` taken before `deleted` ended (one
    /// that had outlived its duration is counted as expired).
    fn delete(
        &mut self,
        net: IpNet,
        deleted: &Decision,
        now: SystemTime,
        touched: &mut BTreeSet<IpNet>,
        counts: &mut BTreeMap<String, DecisionCounts>,
    ) {
        let ended = deleted
            .duration
            .strip_prefix('-')
            .and_then(parse_go_duration)
            .map_or(now, |ago| {
                now.checked_sub(ago).unwrap_or(SystemTime::UNIX_EPOCH)
            });
        let Some(decisions) = self.by_net.get_mut(&net) else {
            return;
        };
        let before = decisions.len();
        decisions.retain(|taken| {
            let kept = taken.taken > ended;
            if !kept {
                self.net_of.remove(&taken.id);
                if taken.expires <= now {
                    counts.entry(taken.origin.clone()).or_default().expired += 1;
                }
            }
            kept
        });
        if decisions.len() != before {
            touched.insert(net);
        }
    }

    /// The listing of `net`: its longest live decision's expiry and
    /// comment, if it has one; drops its decisions that have ended.
    fn longest(
        &mut self,
        net: IpNet,
        now: SystemTime,
        counts: &mut BTreeMap<String, DecisionCounts>,
    ) -> Option<Listing> {
        let decisions = self.by_net.get_mut(&net)?;
        decisions.retain(|taken| {
            let live = taken.expires > now;
            if !live {
                counts.entry(taken.origin.clone()).or_default().expired += 1;
                self.net_of.remove(&taken.id);
            }
            live
        });
        let longest = decisions
            .iter()
            .max_by_key(|taken| (taken.expires, taken.id));
        let listing = longest.map(|taken| (taken.expires, comment(taken)));
        if listing.is_none() {
            self.by_net.remove(&net);
        }
        listing
    }
}

/// Whether two listings of a network are the same.
fn same_listing((expires, comment): &Listing, (known_expires, known_comment): &Listing) -> bool {
    let apart = expires
        .duration_since(*known_expires)
        .or_else(|_| known_expires.duration_since(*expires))
        .unwrap_or_default();
    apart < SAME_EXPIRY && comment == known_comment
}

/// A network's comment, `origin/scenario #id` of the decision that speaks
/// for it: the origin and scenario cut so that the whole fits a comment
/// (the LAPI bounds neither), the id always kept.
fn comment(taken: &Taken) -> String {
    let id = format!(" #{}", taken.id);
    let reason = format!("{}/{}", taken.origin, taken.scenario);
    text::cut(reason, MAX_COMMENT_BYTES - id.len()) + &id
}

/// The origin a bouncer reports for a decision's drops: its origin, or
/// `lists:SCENARIO` for a decision of a blocklist (origin `lists`, the
/// list's name as scenario), as CrowdSec's firewall bouncer labels them.
fn reported_origin(origin: &str, scenario: &str) -> String {
    match origin {
        "lists" => format!("lists:{scenario}"),
        _ => origin.to_owned(),
    }
}

/// The network a new decision names and the time it has left, if the
/// agent follows it under `config`; why not, if not.
pub fn followed(config: &CrowdsecConfig, decision: &Decision) -> Result<(IpNet, Duration), String> {
    if let Some(reason) = ignored_because(config, decision) {
        return Err(reason);
    }
    let net = network(config, decision)?;
    let left = parse_go_duration(&decision.duration).ok_or_else(|| {
        format!(
            "duration '{}' is not a Go duration",
            excerpt(&decision.duration)
        )
    })?;
    Ok((net, left))
}

/// The network a deleted decision names, if the agent follows it.
pub fn deleted_network(config: &CrowdsecConfig, decision: &Decision) -> Option<IpNet> {
    network(config, decision).ok()
}

/// The decision `decision` taken at `now`: its network and what is kept
/// of it, or why it is not taken.
fn taken(
    config: &CrowdsecConfig,
    decision: &Decision,
    now: SystemTime,
) -> Result<(IpNet, Taken), String> {
    let (net, left) = followed(config, decision)?;
    let expires = now
        .checked_add(left)
        .ok_or_else(|| format!("duration '{}' is too long", excerpt(&decision.duration)))?;
    Ok((
        net,
        Taken {
            id: decision.id,
            expires,
            origin: decision.origin.clone(),
            scenario: decision.scenario.clone(),
            taken: now,
        },
    ))
}

/// Why a decision is not taken.
fn ignored_because(config: &CrowdsecConfig, decision: &Decision) -> Option<String> {
    let listed = |list: &[String], value: &str| list.iter().any(|item| item == value);
    if !config
        .scopes
        .iter()
        .any(|scope| scope.eq_ignore_ascii_case(&decision.scope))
    {
        return Some(format!("scope '{}' not followed", excerpt(&decision.scope)));
    }
    if !listed(&config.types, &decision.kind) {
        return Some(format!("type '{}' not followed", excerpt(&decision.kind)));
    }
    if (!config.origins.is_empty() && !listed(&config.origins, &decision.origin))
        || listed(&config.exclude_origins, &decision.origin)
    {
        return Some(format!(
            "origin '{}' not followed",
            excerpt(&decision.origin)
        ));
    }
    let held = |parts: &[String]| {
        parts
            .iter()
            .any(|part| decision.scenario.contains(part.as_str()))
    };
    if (!config.scenarios.is_empty() && !listed(&config.scenarios, &decision.scenario))
        || listed(&config.exclude_scenarios, &decision.scenario)
        || (!config.scenarios_containing.is_empty() && !held(&config.scenarios_containing))
        || held(&config.scenarios_not_containing)
    {
        return Some(format!(
            "scenario '{}' not followed",
            excerpt(&decision.scenario)
        ));
    }
    None
}

/// The network a decision names, or why it is not taken: it names none,
/// or a whole family (`0.0.0.0/0`, `::/0`) that `config` does not allow.
fn network(config: &CrowdsecConfig, decision: &Decision) -> Result<IpNet, String> {
    let bad = || {
        format!(
            "{} value '{}' is not an {}",
            decision.scope,
            excerpt(&decision.value),
            if decision.scope.eq_ignore_ascii_case("Ip") {
                "address"
            } else {
                "address/prefix network"
            }
        )
    };
    let net = if decision.scope.eq_ignore_ascii_case("Ip") {
        netlist::parse_address(&decision.value)
            .map(IpNet::from)
            .ok_or_else(bad)?
    } else {
        netlist::parse_range(&decision.value).ok_or_else(bad)?
    };
    if net.prefix_len() == 0 && !config.allow_whole_family {
        return Err(format!(
            "{net} covers every address of its family (allow_whole_family = true takes it)"
        ));
    }
    Ok(net)
}

/// The longest Go duration: `i64::MAX` nanoseconds, about 292 years.
const MAX_GO_DURATION_SECONDS: f64 = i64::MAX as f64 / 1e9;

/// Parses a Go duration (`1h2m3.5s`, `-1.6s`, `16.9ms`, `0s`); a negative
/// one is zero. Like Go, refuses one beyond `i64::MAX` nanoseconds, so that
/// a decision's end cannot overflow the clock.
pub fn parse_go_duration(text: &str) -> Option<Duration> {
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest.is_empty() {
        return None;
    }
    let mut seconds = 0.0f64;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest.get(..number_end)?.parse().ok()?;
        rest = rest.get(number_end..)?;
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match rest.get(..unit_end)? {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = rest.get(unit_end..)?;
        seconds += number * scale;
    }
    if seconds > MAX_GO_DURATION_SECONDS {
        return None;
    }
    if negative || text == "0" {
        return Some(Duration::ZERO);
    }
    Duration::try_from_secs_f64(seconds).ok()
}

#[cfg(test)]
mod tests;
