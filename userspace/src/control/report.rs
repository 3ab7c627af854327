//! What control-plane operations report: plain, serialisable records that
//! cfctl prints as text or JSON. Setting names are the ABI's
//! ([`crate::Setting::name`]); nothing here decides anything.

use std::net::IpAddr;
use std::path::PathBuf;

use ipnet::IpNet;
use serde::Serialize;

use super::sizing::{Resized, Sizing};
pub use crate::filter::TableSummary;
use crate::store::Entry;
use crate::time::unix_seconds;
pub use crate::xdp::pins::Attachment;
use crate::xdp::{SamplerCounts, Sampling, TrafficDirection};
use crate::{Family, MalformedAction, MatchAddress, Mode, Outcome, Policy};

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
    /// `add`, `delete`, `replace` or `expire`.
    pub operation: &'static str,
    /// The source whose entries changed (`expire`: every source).
    pub source: String,
    /// Entries given more than once: each was taken once.
    pub repeated: usize,
    /// Networks no source listed before, listed now.
    pub added: usize,
    /// Networks other sources listed, now listed by this one too.
    pub joined: usize,
    /// Networks no source lists any more.
    pub deleted: usize,
    /// Networks this source no longer lists that other sources still do
    /// (they stay listed).
    pub still_listed: Vec<IpNet>,
    /// Entries the source listed before a replace and still does.
    pub kept: usize,
    /// Memberships that had expired (`expire`).
    pub expired: usize,
    /// Networks to add that this source listed already (kept, with the
    /// new comment and expiry).
    pub already_listed: Vec<IpNet>,
    /// Networks to delete that this source did not list.
    pub not_listed: Vec<IpNet>,
    /// How the filter changed.
    pub filter: FilterUpdate,
    /// The resize of a filter that sizes itself this change made, if any.
    pub resized: Option<Resized>,
}

/// One source's listing of a network, for reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MembershipRecord {
    /// The source.
    pub source: String,
    /// Its comment.
    pub comment: Option<String>,
    /// When the source first listed it, Unix seconds.
    pub added: u64,
    /// When the source's listing ends, Unix seconds, if it does.
    pub expires: Option<u64>,
}

/// A stored entry and the sources that list it, for reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EntryRecord {
    /// The network.
    pub net: IpNet,
    /// Every source listing it.
    pub sources: Vec<MembershipRecord>,
}

impl From<Entry> for EntryRecord {
    fn from(entry: Entry) -> Self {
        Self {
            net: entry.net,
            sources: entry
                .sources
                .into_iter()
                .map(|member| MembershipRecord {
                    source: member.source,
                    comment: member.comment,
                    added: unix_seconds(member.added),
                    expires: member.expires.map(unix_seconds),
                })
                .collect(),
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
    /// packets of its block one probe), cleared by the next rebuild. Live
    /// updates clear every bit they unmark, IPv4 and IPv6 alike: only an
    /// update that failed or was killed part-way leaves any.
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
    /// Why what is pinned cannot be used, if it cannot (a pin removed by
    /// hand, maps of another cfctl version), with the way out.
    pub pins_problem: Option<String>,
    /// Interfaces with a cfctl link.
    pub interfaces: Vec<Attachment>,
    /// Live mode (stored mode when not loaded).
    #[serde(with = "crate::setting_names")]
    pub mode: Mode,
    /// Live policy (stored when not loaded).
    #[serde(with = "crate::setting_names")]
    pub policy: Policy,
    /// Live action on malformed frames (stored when not loaded).
    #[serde(with = "crate::setting_names")]
    pub malformed: MalformedAction,
    /// Matched address.
    #[serde(with = "crate::setting_names")]
    pub match_address: MatchAddress,
    /// Keys the filter is sized for.
    pub capacity: u64,
    /// Whether the filter sizes itself.
    pub sizing: Sizing,
    /// Its last change of size.
    pub last_resize: Option<Resized>,
    /// The most bytes its table may take, if there is a ceiling.
    pub max_memory: Option<u64>,
    /// Fingerprint width.
    pub fingerprint_bits: u32,
    /// How drops are sampled (live; stored when not loaded).
    pub sampling: Sampling,
    /// What the samplers did, when loaded.
    pub samplers: Option<SamplerCounts>,
    /// Blocklist entries.
    pub entries: u64,
    /// Allowlist entries.
    pub allowlist_entries: u64,
    /// Entries per source and list.
    pub sources: Vec<SourceCount>,
    /// When the next listing expires, Unix seconds.
    pub next_expiry: Option<u64>,
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

/// How many entries a source lists in one list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SourceCount {
    /// `blocklist` or `allowlist`.
    pub list: &'static str,
    /// The source.
    pub source: String,
    /// Entries it lists.
    pub entries: u64,
}

/// Packets and bytes of one counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CounterRecord {
    /// Which way the packets travelled: `ingress` (the XDP hook, the TC
    /// ingress hook) or `egress`.
    #[serde(with = "crate::setting_names")]
    pub direction: TrafficDirection,
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
