//! The store's schema: table definitions, the version, and how networks
//! are encoded as keys (see the [module documentation](super) for the
//! tables).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{SystemTime, UNIX_EPOCH};

use ipnet::IpNet;
use redb::TableDefinition;

/// The schema version this code reads and writes.
pub const SCHEMA_VERSION: u64 = 1;

pub(super) type NetBytes = [u8; 18];
/// (source id, comment, added in Unix seconds)
pub(super) type RecordValue = (u32, Option<&'static str>, u64);

pub(super) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
pub(super) const BLOCKLIST: TableDefinition<NetBytes, RecordValue> =
    TableDefinition::new("blocklist");
pub(super) const ALLOWLIST: TableDefinition<NetBytes, RecordValue> =
    TableDefinition::new("allowlist");
pub(super) const SOURCES: TableDefinition<u32, &str> = TableDefinition::new("sources");
pub(super) const SETTINGS: TableDefinition<&str, &str> = TableDefinition::new("settings");
pub(super) const SCHEMA_VERSION_KEY: &str = "schema_version";
pub(super) const FILTER_SETTINGS_KEY: &str = "filter";

/// Which list entries belong to: the blocklist that becomes the filter, or
/// the exact allowlist that always wins over it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListKind {
    /// Addresses to drop.
    Blocklist,
    /// Addresses never to drop.
    Allowlist,
}

impl ListKind {
    pub(super) const fn table(self) -> TableDefinition<'static, NetBytes, RecordValue> {
        match self {
            ListKind::Blocklist => BLOCKLIST,
            ListKind::Allowlist => ALLOWLIST,
        }
    }
}

pub(super) fn unix_seconds(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

pub(super) fn encode_net(net: &IpNet) -> NetBytes {
    let mut bytes = [0u8; 18];
    match net.network() {
        IpAddr::V4(address) => {
            bytes[0] = 4;
            bytes[1..5].copy_from_slice(&address.octets());
        }
        IpAddr::V6(address) => {
            bytes[0] = 6;
            bytes[1..17].copy_from_slice(&address.octets());
        }
    }
    bytes[17] = net.prefix_len();
    bytes
}

pub(super) fn decode_net(bytes: &NetBytes) -> Option<IpNet> {
    let [family, address @ .., prefix_len] = *bytes;
    let address = match family {
        4 => {
            let octets: [u8; 4] = address[..4].try_into().ok()?;
            IpAddr::V4(Ipv4Addr::from(octets))
        }
        6 => IpAddr::V6(Ipv6Addr::from(address)),
        _ => return None,
    };
    IpNet::new(address, prefix_len).ok()
}
