//! What control-plane operations report: plain, serialisable records that
//! cfctl prints as text or JSON. Setting names are the ABI's
//! ([`crate::Setting::name`]); nothing here decides anything.

use std::net::IpAddr;
use std::path::PathBuf;

use ipnet::IpNet;
use serde::Serialize;

pub use crate::filter::TableSummary;
use crate::store::Entry;
pub use crate::xdp::pins::Attachment;
use crate::{Family, MatchAddress, Mode, Outcome, Policy};

/// What an attach did.
#[derive(Clone, Debug, Serialize)]
pub struct AttachReport {
    /// Interfaces newly attached.
    pub attached: Vec<String>,
    /// Interfaces that were attached already.
    pub already_attached: Vec<String>,
    /// Whether the program was loaded by this call (else it was pinned).
    pub loaded: bool,
    /// Entries in the filter.
    pub entries: usize,
    /// Filter keys they expand to.
    pub keys: usize,
}

/// What a detach did.
#[derive(Clone, Debug, Serialize)]
pub struct DetachReport {
    /// Interfaces detached.
    pub detached: Vec<String>,
    /// Whether the program and maps were unpinned (no interface left).
    pub unloaded: bool,
}

/// How a change reached the filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FilterUpdate {
    /// Nothing is attached: only the store changed.
    NotAttached,
    /// Nothing to change in the filter.
    Unchanged,
    /// Keys were written into the live table.
    Incremental {
        /// Keys inserted.
        inserted: usize,
        /// Keys removed.
        removed: usize,
    },
    /// A new table was built and swapped in.
    Rebuilt {
        /// Keys in the new table.
        keys: usize,
    },
    /// The allowlist map was changed.
    Allowlist,
}

/// What a change did.
#[derive(Clone, Debug, Serialize)]
pub struct ChangeReport {
    /// `add`, `delete` or `replace`.
    pub operation: &'static str,
    /// Entries given more than once: each was taken once.
    pub repeated: usize,
    /// Entries added.
    pub added: usize,
    /// Entries deleted (or removed by a replace).
    pub deleted: usize,
    /// Entries kept by a replace.
    pub kept: usize,
    /// Networks to add that were listed already.
    pub already_listed: Vec<IpNet>,
    /// Networks to delete that were not listed.
    pub not_listed: Vec<IpNet>,
    /// How the filter changed.
    pub filter: FilterUpdate,
}

/// A stored entry, for reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EntryRecord {
    /// The network.
    pub net: IpNet,
    /// Where it came from.
    pub source: String,
    /// Its comment.
    pub comment: Option<String>,
    /// When it was added, Unix seconds.
    pub added: u64,
}

impl From<Entry> for EntryRecord {
    fn from(entry: Entry) -> Self {
        Self {
            net: entry.net,
            source: entry.source,
            comment: entry.comment,
            added: entry
                .added
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |since| since.as_secs()),
        }
    }
}

/// What `check` found.
#[derive(Clone, Debug, Serialize)]
pub struct CheckResult {
    /// The address.
    pub address: IpAddr,
    /// `listed`, `not_listed`, `false_positive`, `missing_from_filter`, or
    /// `not_attached` (only the store was consulted).
    pub verdict: &'static str,
    /// Blocklist entries covering it, longest first.
    pub covering: Vec<EntryRecord>,
    /// Allowlist entries covering it, longest first.
    pub allowlisted: Vec<EntryRecord>,
    /// The filter key the XDP program would stop at.
    pub filter_hit: Option<String>,
    /// Whether the pinned filter was built from another store.
    pub other_store: bool,
}

/// What `verify` found.
#[derive(Clone, Debug, Serialize)]
pub struct VerifyReport {
    /// Entries in the store.
    pub entries: usize,
    /// Keys they expand to with the live active lengths.
    pub keys: usize,
    /// Fingerprints in the live table.
    pub fingerprints: usize,
    /// Keys the live filter does not hold.
    pub missing_keys: usize,
    /// Prefilter bits set that no key needs: not a problem (each costs the
    /// packets of its block one probe), cleared by the next rebuild.
    pub stale_prefilter_bits: usize,
    /// Problems found; empty when the filter matches the store.
    pub problems: Vec<String>,
}

/// The state of cfctl: settings, interfaces, entries and the live filter.
#[derive(Clone, Debug, Serialize)]
pub struct Status {
    /// The pin directory.
    pub pin_dir: PathBuf,
    /// The store file.
    pub store: PathBuf,
    /// Whether a program is pinned.
    pub loaded: bool,
    /// Whether the pinned filter was built from another store (`--force`
    /// on an update or attach rebuilds it from this one).
    pub other_store: bool,
    /// Interfaces with a cfctl link.
    pub interfaces: Vec<Attachment>,
    /// Live mode (stored mode when not loaded).
    #[serde(with = "crate::setting_names")]
    pub mode: Mode,
    /// Live policy (stored when not loaded).
    #[serde(with = "crate::setting_names")]
    pub policy: Policy,
    /// Matched address.
    #[serde(with = "crate::setting_names")]
    pub match_address: MatchAddress,
    /// Keys the filter is sized for.
    pub capacity: u64,
    /// Fingerprint width.
    pub fingerprint_bits: u32,
    /// Blocklist entries.
    pub entries: u64,
    /// Allowlist entries.
    pub allowlist_entries: u64,
    /// Active IPv4 prefix lengths, longest first.
    pub ipv4_lengths: Vec<u8>,
    /// Active IPv6 prefix lengths, longest first.
    pub ipv6_lengths: Vec<u8>,
    /// The live table.
    pub filter: Option<TableSummary>,
    /// False-positive rate per IPv4 packet (one probe per active length).
    pub ipv4_packet_fpr: Option<f64>,
    /// False-positive rate per IPv6 packet.
    pub ipv6_packet_fpr: Option<f64>,
}

/// Packets and bytes of one counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CounterRecord {
    /// The outcome.
    #[serde(with = "crate::setting_names")]
    pub outcome: Outcome,
    /// The family.
    #[serde(with = "crate::setting_names")]
    pub family: Family,
    /// Packets.
    pub packets: u64,
    /// Bytes.
    pub bytes: u64,
}
