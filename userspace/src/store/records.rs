//! What goes in and out of the store: entries to add ([`NewEntry`]),
//! stored ones ([`Entry`]), what a change did, and the filter settings kept
//! with the entries.

use std::time::SystemTime;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::blocklist::ParsedList;
use crate::plan::PlanLimits;
use crate::{MatchAddress, Mode, Policy};

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
    /// source matching, enforce, deny, default plan limits, no id yet.
    fn default() -> Self {
        Self {
            capacity: 1 << 20,
            fingerprint_bits: 16,
            seed: 0,
            match_address: MatchAddress::Source,
            mode: Mode::Enforce,
            policy: Policy::Deny,
            plan_limits: PlanLimits::default(),
            store_id: 0,
        }
    }
}

/// An entry to add.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewEntry<'a> {
    /// The network (host bits zero).
    pub net: IpNet,
    /// Where it comes from: a file name, `-`, or `cli`.
    pub source: &'a str,
    /// Its comment (a Spamhaus SBL id), if any.
    pub comment: Option<&'a str>,
}

impl<'a> NewEntry<'a> {
    /// The entries of a parsed list.
    pub fn from_list(list: &'a ParsedList) -> impl Iterator<Item = NewEntry<'a>> + 'a {
        list.entries.iter().map(|listed| NewEntry {
            net: listed.net,
            source: &list.source,
            comment: listed.comment.as_deref(),
        })
    }
}

/// A stored entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The network.
    pub net: IpNet,
    /// Where it came from.
    pub source: String,
    /// Its comment, if any.
    pub comment: Option<String>,
    /// When it was added (whole seconds).
    pub added: SystemTime,
}

/// What an add did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AddReport {
    /// Networks that were not listed and now are, in input order.
    pub added: Vec<IpNet>,
    /// Networks that were listed already (or twice in the input): unchanged.
    pub already_listed: Vec<IpNet>,
}

/// What a delete did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeleteReport {
    /// Networks that were listed and are not any more.
    pub deleted: Vec<IpNet>,
    /// Networks that were not listed.
    pub missing: Vec<IpNet>,
}

/// What a replace did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplaceReport {
    /// Networks new to the set.
    pub added: Vec<IpNet>,
    /// Networks no longer in the set.
    pub removed: Vec<IpNet>,
    /// Networks in both: their time added is kept, source and comment are
    /// the new ones.
    pub kept: usize,
}
