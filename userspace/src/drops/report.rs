//! What `cfctl stats --by`, `cfctl top` and their `--json` show of an
//! [`Attribution`]: rows by origin, entry, address and interface, the
//! heaviest first.

use std::ffi::CStr;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::Serialize;

use super::{Attribution, Estimate};
use crate::{ProgramHook, Setting, TrafficDirection};

/// The rows of one attribution.
#[derive(Clone, Debug, Serialize)]
pub struct DropReport {
    /// Samples attributed.
    pub sampled: u64,
    /// Drops by origin, outcome and family.
    pub origins: Vec<OriginRow>,
    /// The entries that dropped most.
    pub entries: Vec<EntryRow>,
    /// The addresses sampled most.
    pub addresses: Vec<AddressRow>,
    /// Drops by interface.
    pub interfaces: Vec<InterfaceRow>,
}

/// Estimated drops: packets, bytes, and the samples they come from.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Figures {
    /// Packets.
    pub packets: f64,
    /// Bytes.
    pub bytes: f64,
    /// Samples.
    pub sampled: u64,
}

impl From<Estimate> for Figures {
    fn from(estimate: Estimate) -> Self {
        Self {
            packets: estimate.packets,
            bytes: estimate.bytes,
            sampled: estimate.sampled,
        }
    }
}

/// One origin's drops of one outcome and family.
#[derive(Clone, Debug, Serialize)]
pub struct OriginRow {
    /// A source's name, `policy` or `unlisted`.
    pub origin: String,
    /// `dropped` or `would_drop`.
    pub outcome: &'static str,
    /// `ipv4` or `ipv6`.
    pub ip_type: &'static str,
    /// Its drops.
    #[serde(flatten)]
    pub figures: Figures,
}

/// One entry's drops.
#[derive(Clone, Debug, Serialize)]
pub struct EntryRow {
    /// The entry.
    pub entry: IpNet,
    /// The sources listing it.
    pub sources: Vec<String>,
    /// Its drops.
    #[serde(flatten)]
    pub figures: Figures,
}

/// One address's samples.
#[derive(Clone, Debug, Serialize)]
pub struct AddressRow {
    /// The address.
    pub address: IpAddr,
    /// Its samples (exact for the heaviest, an upper bound past them).
    pub sampled: u64,
    /// Its share of all samples.
    pub share: f64,
}

/// One interface's drops in one direction on one hook.
#[derive(Clone, Debug, Serialize)]
pub struct InterfaceRow {
    /// Its index.
    pub ifindex: u32,
    /// Its name, if it still has one.
    pub interface: Option<String>,
    /// `ingress` or `egress`.
    #[serde(with = "crate::setting_names")]
    pub direction: TrafficDirection,
    /// `xdp` or `tc`.
    #[serde(with = "crate::setting_names")]
    pub hook: ProgramHook,
    /// Its drops.
    #[serde(flatten)]
    pub figures: Figures,
}

impl Attribution {
    /// The rows, at most `limit` entries and addresses.
    pub fn report(&self, limit: usize) -> DropReport {
        let mut origins: Vec<OriginRow> = self
            .origins()
            .iter()
            .map(|(key, estimate)| OriginRow {
                origin: key.origin.clone(),
                outcome: key.outcome.name(),
                ip_type: key.family.name(),
                figures: (*estimate).into(),
            })
            .collect();
        origins.sort_by(|a, b| b.figures.packets.total_cmp(&a.figures.packets));
        let mut entries: Vec<EntryRow> = self
            .entries()
            .iter()
            .map(|(net, drops)| EntryRow {
                entry: *net,
                sources: drops.sources.clone(),
                figures: drops.estimate.into(),
            })
            .collect();
        entries.sort_by(|a, b| {
            b.figures
                .packets
                .total_cmp(&a.figures.packets)
                .then(a.entry.cmp(&b.entry))
        });
        entries.truncate(limit);
        let sampled = self.sampled();
        let addresses = self
            .top_addresses(limit)
            .into_iter()
            .map(|(address, count)| AddressRow {
                address,
                sampled: count,
                share: count as f64 / sampled.max(1) as f64,
            })
            .collect();
        let interfaces = self
            .interfaces()
            .iter()
            .map(|(key, estimate)| InterfaceRow {
                ifindex: key.ifindex,
                interface: interface_name(key.ifindex),
                direction: key.direction,
                hook: key.hook,
                figures: (*estimate).into(),
            })
            .collect();
        DropReport {
            sampled,
            origins,
            entries,
            addresses,
            interfaces,
        }
    }
}

/// The name of interface `ifindex`, if there is one.
fn interface_name(ifindex: u32) -> Option<String> {
    let mut name = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: `name` has the IF_NAMESIZE bytes if_indextoname writes at
    // most; it returns null or a pointer to `name`, NUL-terminated.
    let found = unsafe { libc::if_indextoname(ifindex, name.as_mut_ptr()) };
    if found.is_null() {
        return None;
    }
    // SAFETY: if_indextoname wrote a NUL-terminated name into `name`.
    let name = unsafe { CStr::from_ptr(name.as_ptr()) };
    Some(name.to_string_lossy().into_owned())
}
