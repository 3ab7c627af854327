//! What goes in and out of the store: entries to add ([`NewEntry`]),
//! stored ones with their sources ([`Entry`], [`Membership`]), what a
//! change did, and the filter settings kept with the entries.

use std::time::SystemTime;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::netlist::ParsedList;
use crate::plan::PlanLimits;
use crate::{MalformedAction, MatchAddress, Mode, Policy};

/// Filter parameters kept with the entries, so that `attach` after a reboot
/// builds the same filter. Missing fields read as their defaults.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FilterSettings {
    /// Keys the filter is sized for.
    pub capacity: u64,
    /// Fingerprint width: 8, 16 or 32.
    pub fingerprint_bits: u32,
    /// Hash seed of the filter.
    pub seed: u64,
    /// Which address of a packet is matched.
    #[serde(with = "crate::setting_names")]
    pub match_address: MatchAddress,
    /// Drop, or only count.
    #[serde(with = "crate::setting_names")]
    pub mode: Mode,
    /// Drop listed packets, or everything not allowlisted.
    #[serde(with = "crate::setting_names")]
    pub policy: Policy,
    /// What happens to a malformed frame (in enforce mode).
    #[serde(with = "crate::setting_names")]
    pub malformed: MalformedAction,
    /// Probe budgets and key limit of the prefix plan.
    pub plan_limits: PlanLimits,
    /// This store's id, written into the live filter built from it so that
    /// a filter and its store recognise each other; zero until a filter is
    /// first built.
    pub store_id: u64,
}

impl FilterSettings {
    /// Gives the store an id if it has none yet.
    pub fn claim_store_id(&mut self) {
        while self.store_id == 0 {
            self.store_id = crate::filter::random_seed();
        }
    }
}

impl Default for FilterSettings {
    /// 1 Mi keys, 16-bit fingerprints, seed 0 (choose one when building),
    /// source matching, enforce, deny, malformed frames dropped (the
    /// kernel's IP layer drops every frame the program calls malformed but
    /// one with more VLAN tags than it follows), default plan limits, no
    /// id yet.
    fn default() -> Self {
        Self {
            capacity: 1 << 20,
            fingerprint_bits: 16,
            seed: 0,
            match_address: MatchAddress::Source,
            mode: Mode::Enforce,
            policy: Policy::Deny,
            malformed: MalformedAction::Drop,
            plan_limits: PlanLimits::default(),
            store_id: 0,
        }
    }
}

/// What the agent remembers of a feed between refreshes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FeedState {
    /// The last good answer's `ETag`, sent back as `If-None-Match`.
    pub etag: Option<String>,
    /// The last good answer's `Last-Modified`, sent back as
    /// `If-Modified-Since`.
    pub last_modified: Option<String>,
    /// The feed's settings the last good list was applied with: under
    /// other settings, the validators are not sent (an unchanged list may
    /// now apply otherwise).
    pub applied_with: Option<String>,
    /// When a refresh was last tried, Unix seconds.
    pub last_attempt: Option<u64>,
    /// When a refresh last succeeded (an updated or an unchanged list).
    pub last_success: Option<u64>,
    /// Why the last refresh failed, if it did.
    pub last_error: Option<String>,
    /// Entries of the last good list that were taken.
    pub entries: usize,
    /// Entries of the last good list that were refused: each covers a
    /// whole family (`0.0.0.0/0`, `::/0`) and the feed does not allow it.
    pub refused: usize,
    /// Refreshes that changed the list.
    pub updated: u64,
    /// Refreshes the server answered with 304 Not Modified.
    pub not_modified: u64,
    /// Refreshes that failed (the last good list stayed).
    pub failed: u64,
}

/// What the agent remembers of a CrowdSec Local API between pulls.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CrowdsecState {
    /// Whether the last pull's answer was applied (for `cfctl status`).
    /// The agent does not take it from the store: each start of the agent
    /// asks for the whole list, and so does the pull after one that failed
    /// or was not applied.
    pub synced: bool,
    /// The decisions taken and still live, by decision id.
    pub decisions: std::collections::BTreeMap<u64, CrowdsecDecision>,
    /// When a pull was last tried, Unix seconds.
    pub last_attempt: Option<u64>,
    /// When a pull last succeeded.
    pub last_success: Option<u64>,
    /// Why the last pull failed, if it did.
    pub last_error: Option<String>,
    /// Decisions by origin: received, applied, ignored, expired.
    pub counts: std::collections::BTreeMap<String, DecisionCounts>,
}

/// One decision the agent took.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrowdsecDecision {
    /// Its network.
    pub net: IpNet,
    /// When it ends, Unix seconds.
    pub expires: u64,
    /// Its origin (`cscli`, `crowdsec`, `CAPI`, ...).
    pub origin: String,
    /// Its scenario.
    pub scenario: String,
    /// When the agent took it, Unix milliseconds.
    #[serde(default)]
    pub taken_ms: u64,
}

/// How many decisions of one origin met each fate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DecisionCounts {
    /// Listed as new in an answer.
    pub received: u64,
    /// Taken (their network listed by source `crowdsec`).
    pub applied: u64,
    /// Not taken: a scope, type, origin or scenario not followed, or a bad
    /// value.
    pub ignored: u64,
    /// Ended by their duration before the LAPI said so.
    pub expired: u64,
}

/// What the agent records of itself.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AgentState {
    /// Its process id.
    pub pid: u32,
    /// When it started, Unix seconds.
    pub started: u64,
    /// Its configuration file.
    pub config: String,
    /// Its feeds' names.
    pub feeds: Vec<String>,
    /// Where its metrics endpoint listens, if it does.
    pub metrics: Option<String>,
    /// The CrowdSec Local API it follows, if it does.
    pub crowdsec: Option<String>,
}

/// An entry to add for one source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewEntry<'a> {
    /// The network (host bits zero).
    pub net: IpNet,
    /// Its comment (a Spamhaus SBL id), if any.
    pub comment: Option<&'a str>,
    /// When the source's listing of it ends, if it does.
    pub expires: Option<SystemTime>,
}

impl<'a> NewEntry<'a> {
    /// The entries of a parsed list, expiring at `expires` if given.
    pub fn from_list(
        list: &'a ParsedList,
        expires: Option<SystemTime>,
    ) -> impl Iterator<Item = NewEntry<'a>> + 'a {
        list.entries.iter().map(move |listed| NewEntry {
            net: listed.net,
            comment: listed.comment.as_deref(),
            expires,
        })
    }
}

/// One source's listing of a network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Membership {
    /// The source: `cli`, `file:NAME`, `feed:NAME`, ...
    pub source: String,
    /// Its comment, if any.
    pub comment: Option<String>,
    /// When the source first listed it (whole seconds).
    pub added: SystemTime,
    /// When the source's listing ends, if it does.
    pub expires: Option<SystemTime>,
}

/// A stored entry: a network and every source that lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The network.
    pub net: IpNet,
    /// Its sources, by source id (the order they were first seen).
    pub sources: Vec<Membership>,
}

/// What an add did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AddReport {
    /// Networks that were not listed by any source and now are.
    pub added: Vec<IpNet>,
    /// Networks other sources listed, now listed by this one too.
    pub joined: Vec<IpNet>,
    /// Networks this source listed already: kept, with the new comment and
    /// expiry if given.
    pub already_listed: Vec<IpNet>,
    /// Entries that repeated an earlier entry's network, ignored.
    pub repeated: usize,
}

/// What a delete did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeleteReport {
    /// Networks that are not listed by any source any more.
    pub deleted: Vec<IpNet>,
    /// Networks this source no longer lists that other sources still do.
    pub still_listed: Vec<IpNet>,
    /// Networks this source did not list.
    pub missing: Vec<IpNet>,
}

/// What a replace of one source's entries did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplaceReport {
    /// Networks that were not listed by any source and now are.
    pub added: Vec<IpNet>,
    /// Networks other sources listed, now listed by this one too.
    pub joined: Vec<IpNet>,
    /// Networks that are not listed by any source any more.
    pub removed: Vec<IpNet>,
    /// Networks this source no longer lists that other sources still do.
    pub still_listed: Vec<IpNet>,
    /// Networks the source listed before and still does: their time added
    /// is kept, comment and expiry are the new ones.
    pub kept: usize,
    /// Entries that repeated an earlier entry's network, ignored.
    pub repeated: usize,
}

/// What an expiry sweep did, per list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExpireReport {
    /// Memberships that expired.
    pub expired: usize,
    /// Networks that are not listed by any source any more.
    pub removed: Vec<IpNet>,
}
