//! Write transactions ([`StoreTransaction`]): one source's entries added,
//! deleted or replaced, expired memberships swept, settings and feed states
//! written, all or nothing at [`commit`](StoreTransaction::commit).
//!
//! Every change is made of two moves on one list ([`ListWriter`]): a source
//! *joins* a network (a new membership, or a renewed one) or *leaves* it.
//! A network is listed while at least one membership holds it, so the
//! reports say which networks the list gained or lost as a whole: those
//! are what the filter must change.

use std::collections::{HashMap, HashSet};
use std::time::SystemTime;

use ipnet::IpNet;
use redb::{ReadableTable, Table, WriteTransaction};

use super::schema::{
    encode_expiry, encode_net, memberships_of, unix_seconds, CountKey, ExpiryKey, MemberKey,
    MemberValue, NetBytes, SourceKey, ALL_SOURCES, COUNTS, FEEDS, FILTER_SETTINGS_KEY, SETTINGS,
    SOURCES,
};
use super::{
    AddReport, DeleteReport, ExpireReport, FilterSettings, InStore, ListKind, NewEntry,
    ReplaceReport, Store, StoreError,
};

/// Source names and their ids, as in the `sources` table.
pub(super) struct SourceIds {
    ids: HashMap<String, u32>,
    next: u32,
}

impl SourceIds {
    pub(super) fn from_names(names: HashMap<u32, String>) -> Self {
        let next = names.keys().max().map_or(0, |max| max + 1);
        let ids = names.into_iter().map(|(id, name)| (name, id)).collect();
        Self { ids, next }
    }

    /// The id of `name`, if it has one.
    fn get(&self, name: &str) -> Option<u32> {
        self.ids.get(name).copied()
    }

    /// The id of `name`, recorded in `table` if new.
    fn id(
        &mut self,
        table: &mut Table<u32, &'static str>,
        name: &str,
    ) -> Result<u32, redb::StorageError> {
        if let Some(id) = self.get(name) {
            return Ok(id);
        }
        let id = self.next;
        table.insert(id, name)?;
        self.ids.insert(name.to_owned(), id);
        self.next += 1;
        Ok(id)
    }
}

/// What a membership move did to the list as a whole.
enum Moved {
    /// The network was not listed and now is / was listed and now is not.
    List,
    /// Other sources list it, before and after.
    OthersToo,
    /// Nothing: the source listed it already (join: renewed) or did not
    /// (leave).
    Nothing,
}

/// The open tables of one list inside a write transaction, and the count
/// changes to write when done.
struct ListWriter<'t> {
    list: ListKind,
    members: Table<'t, MemberKey, MemberValue>,
    by_source: Table<'t, SourceKey, ()>,
    expiry: Table<'t, ExpiryKey, ()>,
    counts: Table<'t, CountKey, u64>,
    deltas: HashMap<u32, i64>,
    now: u64,
}

impl<'t> ListWriter<'t> {
    fn open(txn: &'t WriteTransaction, list: ListKind, now: u64) -> Result<Self, redb::Error> {
        let tables = list.tables();
        Ok(Self {
            list,
            members: txn.open_table(tables.members)?,
            by_source: txn.open_table(tables.by_source)?,
            expiry: txn.open_table(tables.expiry)?,
            counts: txn.open_table(COUNTS)?,
            deltas: HashMap::new(),
            now,
        })
    }

    /// Whether any source lists `net`.
    fn listed(&self, net: NetBytes) -> Result<bool, redb::Error> {
        Ok(self.members.range(memberships_of(net))?.next().is_some())
    }

    /// Source `source` lists `net` with `comment` until `expires`; a
    /// membership it had keeps its time added.
    fn join(
        &mut self,
        source: u32,
        net: NetBytes,
        comment: Option<&str>,
        expires: Option<SystemTime>,
    ) -> Result<Moved, redb::Error> {
        let expires = encode_expiry(expires);
        let listed_before = self.listed(net)?;
        let previous = self
            .members
            .insert((net, source), (comment, self.now, expires))?
            .map(|old| {
                let (old_comment, added, expiry) = old.value();
                (old_comment.map(str::to_owned), added, expiry)
            });
        if let Some((old_comment, added, old_expiry)) = previous {
            // Renewed: the time added stays, a comment stays unless replaced.
            let comment = comment.or(old_comment.as_deref());
            self.members
                .insert((net, source), (comment, added, expires))?;
            if old_expiry != expires {
                if old_expiry != 0 {
                    self.expiry.remove((old_expiry, source, net))?;
                }
                if expires != 0 {
                    self.expiry.insert((expires, source, net), ())?;
                }
            }
            return Ok(Moved::Nothing);
        }
        self.by_source.insert((source, net), ())?;
        if expires != 0 {
            self.expiry.insert((expires, source, net), ())?;
        }
        *self.deltas.entry(source).or_default() += 1;
        Ok(if listed_before {
            Moved::OthersToo
        } else {
            *self.deltas.entry(ALL_SOURCES).or_default() += 1;
            Moved::List
        })
    }

    /// Source `source` no longer lists `net`.
    fn leave(&mut self, source: u32, net: NetBytes) -> Result<Moved, redb::Error> {
        let Some(expires) = self.members.remove((net, source))?.map(|old| old.value().2) else {
            return Ok(Moved::Nothing);
        };
        self.by_source.remove((source, net))?;
        if expires != 0 {
            self.expiry.remove((expires, source, net))?;
        }
        *self.deltas.entry(source).or_default() -= 1;
        Ok(if self.listed(net)? {
            Moved::OthersToo
        } else {
            *self.deltas.entry(ALL_SOURCES).or_default() -= 1;
            Moved::List
        })
    }

    /// No source lists `net` any more.
    fn leave_all(&mut self, net: NetBytes) -> Result<Moved, redb::Error> {
        let mut sources = Vec::new();
        for row in self.members.range(memberships_of(net))? {
            sources.push(row?.0.value().1);
        }
        let mut moved = Moved::Nothing;
        for source in sources {
            moved = self.leave(source, net)?;
        }
        Ok(moved)
    }

    /// The networks `source` lists.
    fn networks_of(&self, source: u32) -> Result<Vec<NetBytes>, redb::Error> {
        let mut nets = Vec::new();
        for row in self
            .by_source
            .range((source, [0; 18])..=(source, [u8::MAX; 18]))?
        {
            nets.push(row?.0.value().1);
        }
        Ok(nets)
    }

    /// Writes the count changes.
    fn finish(mut self) -> Result<(), redb::Error> {
        for (source, delta) in std::mem::take(&mut self.deltas) {
            let key = (self.list.code(), source);
            let count = self.counts.get(key)?.map_or(0, |count| count.value());
            let count = count.saturating_add_signed(delta);
            if count == 0 {
                self.counts.remove(key)?;
            } else {
                self.counts.insert(key, count)?;
            }
        }
        Ok(())
    }
}

/// A write transaction: nothing it does is visible, or persisted, before
/// [`commit`](Self::commit); dropping it discards everything.
pub struct StoreTransaction<'s> {
    pub(super) store: &'s Store,
    pub(super) txn: WriteTransaction,
    pub(super) now: SystemTime,
    pub(super) sources: SourceIds,
}

impl StoreTransaction<'_> {
    /// The id of source `name`, recorded if new.
    fn source_id(&mut self, name: &str) -> Result<u32, StoreError> {
        let mut table = self.txn.open_table(SOURCES).in_store(self.store)?;
        self.sources.id(&mut table, name).in_store(self.store)
    }

    fn writer(&self, list: ListKind) -> Result<ListWriter<'_>, StoreError> {
        ListWriter::open(&self.txn, list, unix_seconds(self.now)).in_store(self.store)
    }

    /// Source `source` lists `entries` in `list` (later repeats of a
    /// network are ignored); networks it listed already keep their time
    /// added and take the new comment and expiry.
    pub fn add<'a>(
        &mut self,
        list: ListKind,
        source: &str,
        entries: impl IntoIterator<Item = NewEntry<'a>>,
    ) -> Result<AddReport, StoreError> {
        let store = self.store;
        let source = self.source_id(source)?;
        store.guarded(|| {
            let mut writer = self.writer(list)?;
            let mut report = AddReport::default();
            for entry in entries {
                let net = encode_net(&entry.net);
                match writer
                    .join(source, net, entry.comment, entry.expires)
                    .in_store(store)?
                {
                    Moved::List => report.added.push(entry.net),
                    Moved::OthersToo => report.joined.push(entry.net),
                    Moved::Nothing => report.already_listed.push(entry.net),
                }
            }
            writer.finish().in_store(store)?;
            Ok(report)
        })
    }

    /// Source `source` (every source, if `None`) no longer lists `nets` in
    /// `list`.
    pub fn delete(
        &mut self,
        list: ListKind,
        source: Option<&str>,
        nets: impl IntoIterator<Item = IpNet>,
    ) -> Result<DeleteReport, StoreError> {
        let store = self.store;
        let source = match source {
            None => None,
            Some(name) => match self.sources.get(name) {
                Some(id) => Some(id),
                None => {
                    return Ok(DeleteReport {
                        missing: nets.into_iter().collect(),
                        ..DeleteReport::default()
                    })
                }
            },
        };
        store.guarded(|| {
            let mut writer = self.writer(list)?;
            let mut report = DeleteReport::default();
            for net in nets {
                let key = encode_net(&net);
                let moved = match source {
                    Some(source) => writer.leave(source, key),
                    None => writer.leave_all(key),
                };
                match moved.in_store(store)? {
                    Moved::List => report.deleted.push(net),
                    Moved::OthersToo => report.still_listed.push(net),
                    Moved::Nothing => report.missing.push(net),
                }
            }
            writer.finish().in_store(store)?;
            Ok(report)
        })
    }

    /// Makes `entries` the whole of what source `source` lists in `list`
    /// (ipset swap semantics, for one source; later repeats ignored).
    pub fn replace<'a>(
        &mut self,
        list: ListKind,
        source: &str,
        entries: impl IntoIterator<Item = NewEntry<'a>>,
    ) -> Result<ReplaceReport, StoreError> {
        let store = self.store;
        let source = self.source_id(source)?;
        store.guarded(|| {
            let mut writer = self.writer(list)?;
            let mut old: HashSet<NetBytes> = writer
                .networks_of(source)
                .in_store(store)?
                .into_iter()
                .collect();
            let mut report = ReplaceReport::default();
            let mut seen = HashSet::new();
            for entry in entries {
                let net = encode_net(&entry.net);
                if !seen.insert(net) {
                    continue;
                }
                let kept = old.remove(&net);
                match writer
                    .join(source, net, entry.comment, entry.expires)
                    .in_store(store)?
                {
                    Moved::List => report.added.push(entry.net),
                    Moved::OthersToo => report.joined.push(entry.net),
                    Moved::Nothing => report.kept += usize::from(kept),
                }
            }
            let mut gone: Vec<NetBytes> = old.into_iter().collect();
            gone.sort_unstable();
            for net in gone {
                let decoded = store.decode_net(&net)?;
                match writer.leave(source, net).in_store(store)? {
                    Moved::List => report.removed.push(decoded),
                    Moved::OthersToo => report.still_listed.push(decoded),
                    Moved::Nothing => {}
                }
            }
            writer.finish().in_store(store)?;
            Ok(report)
        })
    }

    /// Removes from `list` every membership that expires at `until` or
    /// before.
    pub fn expire(
        &mut self,
        list: ListKind,
        until: SystemTime,
    ) -> Result<ExpireReport, StoreError> {
        let store = self.store;
        let until = encode_expiry(Some(until));
        store.guarded(|| {
            let mut writer = self.writer(list)?;
            let mut due = Vec::new();
            for row in writer
                .expiry
                .range((1, 0, [0; 18])..=(until, u32::MAX, [u8::MAX; 18]))
                .in_store(store)?
            {
                let (_, source, net) = row.in_store(store)?.0.value();
                due.push((source, net));
            }
            let mut report = ExpireReport {
                expired: due.len(),
                removed: Vec::new(),
            };
            for (source, net) in due {
                if let Moved::List = writer.leave(source, net).in_store(store)? {
                    report.removed.push(store.decode_net(&net)?);
                }
            }
            writer.finish().in_store(store)?;
            Ok(report)
        })
    }

    /// Writes the filter settings.
    pub fn set_settings(&mut self, settings: &FilterSettings) -> Result<(), StoreError> {
        let json = serde_json::to_string(settings)
            .map_err(|error| self.store.corrupt(format!("filter settings: {error}")))?;
        self.put(SETTINGS, FILTER_SETTINGS_KEY, &json)
    }

    /// Writes the state of feed `name` (JSON, the agent's).
    pub fn set_feed_state(&mut self, name: &str, state: &str) -> Result<(), StoreError> {
        self.put(FEEDS, name, state)
    }

    fn put(
        &mut self,
        table: redb::TableDefinition<&str, &str>,
        key: &str,
        value: &str,
    ) -> Result<(), StoreError> {
        let store = self.store;
        store.guarded(|| {
            let mut table = self.txn.open_table(table).in_store(store)?;
            table.insert(key, value).in_store(store)?;
            Ok(())
        })
    }

    /// Makes every change of the transaction durable, atomically.
    pub fn commit(self) -> Result<(), StoreError> {
        let store = self.store;
        store.guarded(|| self.txn.commit().in_store(store))
    }
}
