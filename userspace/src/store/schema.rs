//! The store's schema: table definitions, the version, and how networks
//! and times are encoded (see the [module documentation](super) for what
//! each table holds).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::SystemTime;

use ipnet::IpNet;
use redb::TableDefinition;

use crate::time::{from_unix_millis, unix_millis};

/// The schema version this code reads and writes.
pub const SCHEMA_VERSION: u64 = 6;

/// A network as a key: family (4 or 6), 16 address bytes (IPv4 in the
/// first 4), prefix length.
pub(super) type NetBytes = [u8; 18];
/// A network in a key, borrowed: redb compares `&[u8; N]` keys with one
/// `memcmp` and reads them without a copy, where it compares and decodes
/// `[u8; N]` byte by byte into a new vector. Both encode as the bytes
/// themselves under the same type name, so stores written with either
/// read with the other (the schema-2 migration test writes `[u8; 18]`).
pub(super) type NetKey = &'static NetBytes;
/// A membership's key: the network, then the source's id.
pub(super) type MemberKey = (NetKey, u32);
/// A membership: comment, time added (Unix seconds), expiry (Unix
/// milliseconds, 0 for never).
pub(super) type MemberValue = (Option<&'static str>, u64, u64);
/// The expiry index's key: expiry (Unix milliseconds), source id, network.
pub(super) type ExpiryKey = (u64, u32, NetKey);
/// The source index's key: source id, network.
pub(super) type SourceKey = (u32, NetKey);
/// A count's key: the list's code and a source id, or [`ALL_SOURCES`] for
/// the list's networks.
pub(super) type CountKey = (u8, u32);

/// The source id that counts a list's networks rather than one source's.
pub(super) const ALL_SOURCES: u32 = u32::MAX;

pub(super) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
pub(super) const SOURCES: TableDefinition<u32, &str> = TableDefinition::new("sources");
pub(super) const COUNTS: TableDefinition<CountKey, u64> = TableDefinition::new("counts");
pub(super) const SCHEMA_VERSION_KEY: &str = "schema_version";
/// The sources the index by source leaves out, by (list code, source id):
/// each listed at least a [`ROWS_PER_LOOKUP`](super::writer::ROWS_PER_LOOKUP)th
/// of its list when last changed, so what it lists is read in one pass over
/// the list, and its memberships cost one write each, not two.
pub(super) const UNINDEXED: TableDefinition<CountKey, ()> =
    TableDefinition::new("unindexed_sources");
/// The state table: (namespace, key) -> JSON (see [`super::state`]).
pub(super) const STATE: TableDefinition<(&str, &str), &str> = TableDefinition::new("state");

/// The tables of schema version 1 (one source per network), read once to
/// migrate a store and then deleted.
pub(super) mod v1 {
    use redb::TableDefinition;

    use super::NetBytes;

    /// (source id, comment, added in Unix seconds)
    pub type Record = (u32, Option<&'static str>, u64);

    pub const BLOCKLIST: TableDefinition<NetBytes, Record> = TableDefinition::new("blocklist");
    pub const ALLOWLIST: TableDefinition<NetBytes, Record> = TableDefinition::new("allowlist");
}

/// The tables schema version 2 kept beside version 3's: each list's
/// per-source index, (source id, network) -> (), deleted when a store is
/// migrated to version 3 (version 5's index of the same name and layout is
/// built afresh from the memberships).
pub(super) mod v2 {
    use redb::TableDefinition;

    use super::NetBytes;

    pub const BY_SOURCE: [TableDefinition<(u32, NetBytes), ()>; 2] = [
        TableDefinition::new("blocklist_by_source"),
        TableDefinition::new("allowlist_by_source"),
    ];
}

/// The tables of schema version 3 that version 4's `state` table holds,
/// read once to migrate a store and then deleted.
pub(super) mod v3 {
    use redb::TableDefinition;

    /// Filter settings and the agent's records, by key.
    pub const SETTINGS: TableDefinition<&str, &str> = TableDefinition::new("settings");
    /// The feeds' states, by feed name.
    pub const FEEDS: TableDefinition<&str, &str> = TableDefinition::new("feeds");
    /// The namespace the feeds' states move to.
    pub const FEED_NAMESPACE: &str = "feed";
}

/// Which list entries belong to: the blocklist that becomes the filter, or
/// the exact allowlist that always wins over it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ListKind {
    /// Addresses to drop.
    Blocklist,
    /// Addresses never to drop.
    Allowlist,
}

/// The three tables of one list.
pub(super) struct ListTables {
    /// (network, source) -> membership.
    pub members: TableDefinition<'static, MemberKey, MemberValue>,
    /// (expiry, source, network) -> (): memberships by expiry.
    pub expiry: TableDefinition<'static, ExpiryKey, ()>,
    /// (source, network) -> (): memberships by source.
    pub by_source: TableDefinition<'static, SourceKey, ()>,
}

impl ListKind {
    /// Both lists.
    pub const ALL: [ListKind; 2] = [ListKind::Blocklist, ListKind::Allowlist];

    /// The list's name in the store and in messages.
    pub const fn name(self) -> &'static str {
        match self {
            ListKind::Blocklist => "blocklist",
            ListKind::Allowlist => "allowlist",
        }
    }

    /// The list's code in count keys.
    pub(super) const fn code(self) -> u8 {
        match self {
            ListKind::Blocklist => 0,
            ListKind::Allowlist => 1,
        }
    }

    pub(super) const fn tables(self) -> ListTables {
        match self {
            ListKind::Blocklist => ListTables {
                members: TableDefinition::new("blocklist_members"),
                expiry: TableDefinition::new("blocklist_expiry"),
                by_source: TableDefinition::new("blocklist_by_source"),
            },
            ListKind::Allowlist => ListTables {
                members: TableDefinition::new("allowlist_members"),
                expiry: TableDefinition::new("allowlist_expiry"),
                by_source: TableDefinition::new("allowlist_by_source"),
            },
        }
    }
}

/// An expiry as stored: Unix milliseconds, at least 1; 0 for none.
pub(super) fn encode_expiry(expires: Option<SystemTime>) -> u64 {
    expires.map_or(0, |time| unix_millis(time).max(1))
}

pub(super) fn decode_expiry(millis: u64) -> Option<SystemTime> {
    (millis != 0).then(|| from_unix_millis(millis))
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

/// The keys of every membership of `net`: from `(net, 0)` to
/// `(net, u32::MAX)`.
pub(super) fn memberships_of(net: &NetBytes) -> std::ops::RangeInclusive<(&NetBytes, u32)> {
    (net, 0)..=(net, u32::MAX)
}

/// The lowest and the highest network key.
const NO_NET: NetBytes = [0; 18];
const LAST_NET: NetBytes = [u8::MAX; 18];

/// The source index's keys of every network `source` lists.
pub(super) fn networks_of(source: u32) -> std::ops::RangeInclusive<SourceKey> {
    (source, &NO_NET)..=(source, &LAST_NET)
}
