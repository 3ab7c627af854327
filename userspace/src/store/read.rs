//! Reading the store: the entries of a list (all, one source's, one
//! network's, those inside a network, those covering an address), their networks, how many each
//! source lists, and when the next listing expires. Each read is one read
//! transaction, so what it returns is one committed state.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::SystemTime;

use ipnet::IpNet;
use redb::{ReadableTable, ReadableTableMetadata};

use super::schema::{
    decode_expiry, decode_net, encode_net, memberships_of, networks_of, MemberKey, MemberValue,
    NetBytes, ALL_SOURCES, COUNTS, SOURCES, UNINDEXED,
};
use super::writer::one_pass_reads;
use super::{Entry, InStore, ListKind, Membership, Store, StoreError};
use crate::time::from_unix_seconds;

impl Store {
    /// Every entry of `list` (only those `source` lists, if given), IPv4
    /// first, in address order. A source that lists few of the list's
    /// networks ([`ROWS_PER_LOOKUP`](super::ROWS_PER_LOOKUP)) has them read from the index by
    /// source, each with its memberships; otherwise the list is read in one
    /// ordered pass that keeps the source's entries.
    pub fn entries(&self, list: ListKind, source: Option<&str>) -> Result<Vec<Entry>, StoreError> {
        self.guarded(|| {
            let txn = self.db.begin_read().in_store(self)?;
            let names = self.source_names(&txn.open_table(SOURCES).in_store(self)?)?;
            let wanted = match source {
                None => None,
                Some(name) => match names.iter().find(|(_, known)| known.as_str() == name) {
                    Some((&id, _)) => Some(id),
                    None => return Ok(Vec::new()),
                },
            };
            let members = txn.open_table(list.tables().members).in_store(self)?;
            if let Some(id) = wanted {
                let count = txn
                    .open_table(COUNTS)
                    .in_store(self)?
                    .get((list.code(), id))
                    .in_store(self)?
                    .map_or(0, |count| count.value());
                let indexed = txn
                    .open_table(UNINDEXED)
                    .in_store(self)?
                    .get((list.code(), id))
                    .in_store(self)?
                    .is_none();
                if indexed && !one_pass_reads(count, members.len().in_store(self)?) {
                    let by_source = txn.open_table(list.tables().by_source).in_store(self)?;
                    let mut entries = Vec::new();
                    for row in by_source.range(networks_of(id)).in_store(self)? {
                        let (_, &net) = row.in_store(self)?.0.value();
                        entries.extend(self.entry_in(&members, &net, &names)?);
                    }
                    return Ok(entries);
                }
            }
            let mut entries: Vec<Entry> = Vec::new();
            for row in members.iter().in_store(self)? {
                let (key, value) = row.in_store(self)?;
                let (net, membership) = self.decode_member(key.value(), value.value(), &names)?;
                match entries.last_mut() {
                    Some(last) if last.net == net => last.sources.push(membership),
                    _ => entries.push(Entry {
                        net,
                        sources: vec![membership],
                    }),
                }
            }
            if let Some(id) = wanted {
                let name = &names[&id];
                entries.retain(|entry| entry.sources.iter().any(|member| &member.source == name));
            }
            Ok(entries)
        })
    }

    /// The entry of network `net` in `members`, if listed.
    fn entry_in(
        &self,
        members: &impl ReadableTable<MemberKey, MemberValue>,
        net: &NetBytes,
        names: &HashMap<u32, String>,
    ) -> Result<Option<Entry>, StoreError> {
        let mut found: Option<Entry> = None;
        for row in members.range(memberships_of(net)).in_store(self)? {
            let (key, value) = row.in_store(self)?;
            let (net, membership) = self.decode_member(key.value(), value.value(), names)?;
            match &mut found {
                Some(entry) => entry.sources.push(membership),
                None => {
                    found = Some(Entry {
                        net,
                        sources: vec![membership],
                    })
                }
            }
        }
        Ok(found)
    }

    /// The entries of `list` that contain each of `addresses` (one list
    /// per address, longest prefix first), looked up in one read
    /// transaction.
    pub fn covering(
        &self,
        list: ListKind,
        addresses: &[IpAddr],
    ) -> Result<Vec<Vec<Entry>>, StoreError> {
        self.guarded(|| {
            let txn = self.db.begin_read().in_store(self)?;
            let names = self.source_names(&txn.open_table(SOURCES).in_store(self)?)?;
            let members = txn.open_table(list.tables().members).in_store(self)?;
            let mut covering = Vec::with_capacity(addresses.len());
            for &address in addresses {
                let longest = match address {
                    IpAddr::V4(_) => 32,
                    IpAddr::V6(_) => 128,
                };
                let mut entries = Vec::new();
                for len in (0..=longest).rev() {
                    let Ok(net) = IpNet::new(address, len) else {
                        continue;
                    };
                    entries.extend(self.entry_in(&members, &encode_net(&net.trunc()), &names)?);
                }
                covering.push(entries);
            }
            Ok(covering)
        })
    }

    /// The networks of every entry of `list`, IPv4 first, in address order.
    pub fn nets(&self, list: ListKind) -> Result<Vec<IpNet>, StoreError> {
        self.nets_where(list, |_| true)
    }

    /// The networks of the entries of `list` that `wanted` accepts, in
    /// address order: one pass over the list that keeps only those.
    pub fn nets_where(
        &self,
        list: ListKind,
        wanted: impl FnMut(&IpNet) -> bool,
    ) -> Result<Vec<IpNet>, StoreError> {
        self.guarded(|| {
            let txn = self.db.begin_read().in_store(self)?;
            let members = txn.open_table(list.tables().members).in_store(self)?;
            self.distinct_nets(members.iter().in_store(self)?, wanted)
        })
    }

    /// The distinct networks of membership rows in key order that `wanted`
    /// accepts.
    fn distinct_nets<'a>(
        &self,
        rows: impl Iterator<
            Item = Result<
                (
                    redb::AccessGuard<'a, MemberKey>,
                    redb::AccessGuard<'a, MemberValue>,
                ),
                redb::StorageError,
            >,
        >,
        mut wanted: impl FnMut(&IpNet) -> bool,
    ) -> Result<Vec<IpNet>, StoreError> {
        let mut nets = Vec::new();
        let mut last: Option<NetBytes> = None;
        for row in rows {
            let (&net, _) = row.in_store(self)?.0.value();
            if last != Some(net) {
                let decoded = self.decode_net(&net)?;
                if wanted(&decoded) {
                    nets.push(decoded);
                }
                last = Some(net);
            }
        }
        Ok(nets)
    }

    /// The entry of `list` for exactly `net`, if listed.
    pub fn entry(&self, list: ListKind, net: &IpNet) -> Result<Option<Entry>, StoreError> {
        self.guarded(|| {
            let txn = self.db.begin_read().in_store(self)?;
            let names = self.source_names(&txn.open_table(SOURCES).in_store(self)?)?;
            let members = txn.open_table(list.tables().members).in_store(self)?;
            self.entry_in(&members, &encode_net(net), &names)
        })
    }

    /// Those of `nets` that are entries of `list`, looked up in one read
    /// transaction, in the order given.
    pub fn existing(
        &self,
        list: ListKind,
        nets: impl IntoIterator<Item = IpNet>,
    ) -> Result<Vec<IpNet>, StoreError> {
        self.guarded(|| {
            let txn = self.db.begin_read().in_store(self)?;
            let members = txn.open_table(list.tables().members).in_store(self)?;
            let mut found = Vec::new();
            for net in nets {
                let mut rows = members
                    .range(memberships_of(&encode_net(&net)))
                    .in_store(self)?;
                if rows.next().is_some() {
                    found.push(net);
                }
            }
            Ok(found)
        })
    }

    /// The networks of `list` whose address lies inside `within` (of any
    /// prefix length, `within` itself included), in address order.
    pub fn nets_within(&self, list: ListKind, within: &IpNet) -> Result<Vec<IpNet>, StoreError> {
        self.guarded(|| {
            let txn = self.db.begin_read().in_store(self)?;
            let members = txn.open_table(list.tables().members).in_store(self)?;
            let (first, last) = nets_from_to(within);
            self.distinct_nets(
                members
                    .range((&first, 0)..=(&last, u32::MAX))
                    .in_store(self)?,
                |_| true,
            )
        })
    }

    /// The distinct `len`-bit prefixes of the addresses of `list`'s
    /// entries inside `within` (`len` at least its length), in address
    /// order, or `None` if there are more than `limit`: one seek per prefix
    /// found, whatever the number of entries each holds (the next seek
    /// starts past the prefix just found).
    pub fn prefixes_present(
        &self,
        list: ListKind,
        within: &IpNet,
        len: u8,
        limit: usize,
    ) -> Result<Option<Vec<IpNet>>, StoreError> {
        self.guarded(|| {
            let txn = self.db.begin_read().in_store(self)?;
            let members = txn.open_table(list.tables().members).in_store(self)?;
            let (mut first, last) = nets_from_to(within);
            let mut prefixes = Vec::new();
            loop {
                let net = {
                    let mut rows = members
                        .range((&first, 0)..=(&last, u32::MAX))
                        .in_store(self)?;
                    match rows.next() {
                        Some(row) => self.decode_net(row.in_store(self)?.0.value().0)?,
                        None => break,
                    }
                };
                let prefix_len = len.clamp(within.prefix_len(), net.max_prefix_len());
                let prefix =
                    IpNet::new(net.addr(), prefix_len).map_or(net, |prefix| prefix.trunc());
                if prefixes.len() == limit {
                    return Ok(None);
                }
                prefixes.push(prefix);
                let next = match prefix.broadcast() {
                    IpAddr::V4(end) => u32::from(end)
                        .checked_add(1)
                        .map(|next| IpAddr::from(Ipv4Addr::from(next))),
                    IpAddr::V6(end) => u128::from(end)
                        .checked_add(1)
                        .map(|next| IpAddr::from(Ipv6Addr::from(next))),
                };
                match next {
                    Some(next) if prefix.broadcast() != within.broadcast() => {
                        first = nets_from_to(&IpNet::from(next)).0;
                    }
                    _ => break,
                }
            }
            Ok(Some(prefixes))
        })
    }

    /// The number of entries (networks) of `list`.
    pub fn entry_count(&self, list: ListKind) -> Result<u64, StoreError> {
        self.count(list, ALL_SOURCES)
    }

    fn count(&self, list: ListKind, source: u32) -> Result<u64, StoreError> {
        self.guarded(|| {
            let txn = self.db.begin_read().in_store(self)?;
            let counts = txn.open_table(COUNTS).in_store(self)?;
            Ok(counts
                .get((list.code(), source))
                .in_store(self)?
                .map_or(0, |count| count.value()))
        })
    }

    /// How many entries each source lists in `list`, by source name.
    pub fn source_counts(&self, list: ListKind) -> Result<Vec<(String, u64)>, StoreError> {
        self.guarded(|| {
            let txn = self.db.begin_read().in_store(self)?;
            let names = self.source_names(&txn.open_table(SOURCES).in_store(self)?)?;
            let counts = txn.open_table(COUNTS).in_store(self)?;
            let mut per_source = Vec::new();
            for row in counts
                .range((list.code(), 0)..(list.code(), ALL_SOURCES))
                .in_store(self)?
            {
                let (key, count) = row.in_store(self)?;
                let (_, source) = key.value();
                let name = names
                    .get(&source)
                    .cloned()
                    .unwrap_or_else(|| format!("#{source}"));
                per_source.push((name, count.value()));
            }
            per_source.sort();
            Ok(per_source)
        })
    }

    /// When the first membership of either list expires, if any does.
    pub fn next_expiry(&self) -> Result<Option<SystemTime>, StoreError> {
        self.guarded(|| {
            let txn = self.db.begin_read().in_store(self)?;
            let mut next = None;
            for list in ListKind::ALL {
                let expiry = txn.open_table(list.tables().expiry).in_store(self)?;
                let first = expiry.first().in_store(self)?.map(|row| row.0.value().0);
                if let Some(first) = first.and_then(decode_expiry) {
                    next = Some(next.map_or(first, |next: SystemTime| next.min(first)));
                }
            }
            Ok(next)
        })
    }

    pub(super) fn source_names(
        &self,
        table: &impl ReadableTable<u32, &'static str>,
    ) -> Result<HashMap<u32, String>, StoreError> {
        let mut names = HashMap::new();
        for row in table.iter().in_store(self)? {
            let (id, name) = row.in_store(self)?;
            names.insert(id.value(), name.value().to_owned());
        }
        Ok(names)
    }

    pub(super) fn decode_net(&self, bytes: &NetBytes) -> Result<IpNet, StoreError> {
        decode_net(bytes).ok_or_else(|| self.corrupt(format!("bad network key {bytes:02x?}")))
    }

    fn decode_member(
        &self,
        (net, source): (&NetBytes, u32),
        (comment, added, expires): (Option<&str>, u64, u64),
        names: &HashMap<u32, String>,
    ) -> Result<(IpNet, Membership), StoreError> {
        let net = self.decode_net(net)?;
        let source = names.get(&source).ok_or_else(|| {
            self.corrupt(format!("entry {net} refers to unknown source {source}"))
        })?;
        Ok((
            net,
            Membership {
                source: source.clone(),
                comment: comment.map(str::to_owned),
                added: from_unix_seconds(added),
                expires: decode_expiry(expires),
            },
        ))
    }
}

/// The lowest and the highest key of a network whose address lies inside
/// `within` (of any prefix length).
fn nets_from_to(within: &IpNet) -> (NetBytes, NetBytes) {
    let mut first = encode_net(&within.trunc());
    first[17] = 0;
    let mut last = encode_net(&IpNet::from(within.broadcast()));
    last[17] = u8::MAX;
    (first, last)
}
