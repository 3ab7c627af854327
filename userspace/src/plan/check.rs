//! What `check` reports: the entries covering an address next to what the
//! filter answers, and what that means ([`CheckVerdict`]).

use std::net::IpAddr;

use filter_core::NetKey;
use ipnet::IpNet;

/// What [`super::KeyPlan::check`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckReport {
    /// The address checked.
    pub address: IpAddr,
    /// The entries that contain it, longest first.
    pub covering: Vec<IpNet>,
    /// The first probe key the filter matched, if any: where the XDP
    /// program would stop.
    pub filter_hit: Option<NetKey>,
}

/// The meaning of a [`CheckReport`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckVerdict {
    /// Entries cover the address and the filter matches it.
    Listed,
    /// No entry covers it and the filter does not match it.
    NotListed,
    /// No entry covers it, yet the filter matches it: a false positive of
    /// the approximate filter (packets from it are dropped too).
    FalsePositive,
    /// An entry covers it but the filter does not match it: the filter is
    /// out of date (`cfctl verify` rebuilds it).
    MissingFromFilter,
}

impl CheckReport {
    /// What the report means.
    pub fn verdict(&self) -> CheckVerdict {
        match (self.covering.is_empty(), self.filter_hit.is_some()) {
            (false, true) => CheckVerdict::Listed,
            (true, false) => CheckVerdict::NotListed,
            (true, true) => CheckVerdict::FalsePositive,
            (false, false) => CheckVerdict::MissingFromFilter,
        }
    }
}
