//! Write transactions ([`StoreTransaction`]): add, delete and replace
//! entries, and write the settings, all or nothing at
//! [`commit`](StoreTransaction::commit).

use std::collections::HashMap;

use ipnet::IpNet;
use redb::{ReadableTable, WriteTransaction};

use super::schema::{encode_net, NetBytes, FILTER_SETTINGS_KEY, SETTINGS, SOURCES};
use super::{
    AddReport, DeleteReport, FilterSettings, InStore, ListKind, NewEntry, ReplaceReport, Store,
    StoreError,
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

    /// The id of `name`, recorded in `table` if new.
    fn id(
        &mut self,
        table: &mut redb::Table<u32, &'static str>,
        name: &str,
    ) -> Result<u32, redb::StorageError> {
        if let Some(&id) = self.ids.get(name) {
            return Ok(id);
        }
        let id = self.next;
        table.insert(id, name)?;
        self.ids.insert(name.to_owned(), id);
        self.next += 1;
        Ok(id)
    }
}

/// A write transaction: nothing it does is visible, or persisted, before
/// [`commit`](Self::commit); dropping it discards everything.
pub struct StoreTransaction<'s> {
    pub(super) store: &'s Store,
    pub(super) txn: WriteTransaction,
    pub(super) now: u64,
    pub(super) sources: SourceIds,
}

impl StoreTransaction<'_> {
    /// Adds entries to `list`; those already listed keep their record.
    pub fn add<'a>(
        &mut self,
        list: ListKind,
        entries: impl IntoIterator<Item = NewEntry<'a>>,
    ) -> Result<AddReport, StoreError> {
        let store = self.store;
        store.guarded(|| {
            let mut table = self.txn.open_table(list.table()).in_store(self.store)?;
            let mut sources = self.txn.open_table(SOURCES).in_store(self.store)?;
            let mut report = AddReport::default();
            for entry in entries {
                let key = encode_net(&entry.net);
                let source = self
                    .sources
                    .id(&mut sources, entry.source)
                    .in_store(self.store)?;
                let previous = table
                    .insert(key, (source, entry.comment, self.now))
                    .in_store(self.store)?
                    .map(|record| {
                        let (source, comment, added) = record.value();
                        (source, comment.map(str::to_owned), added)
                    });
                match previous {
                    // Listed already: put its record back (rare, so the common
                    // case needs one B-tree walk, not two).
                    Some((source, comment, added)) => {
                        table
                            .insert(key, (source, comment.as_deref(), added))
                            .in_store(self.store)?;
                        report.already_listed.push(entry.net);
                    }
                    None => report.added.push(entry.net),
                }
            }
            Ok(report)
        })
    }

    /// Deletes entries of `list` by network.
    pub fn delete(
        &mut self,
        list: ListKind,
        nets: impl IntoIterator<Item = IpNet>,
    ) -> Result<DeleteReport, StoreError> {
        let store = self.store;
        store.guarded(|| {
            let mut report = DeleteReport::default();
            let mut table = self.txn.open_table(list.table()).in_store(self.store)?;
            for net in nets {
                if table
                    .remove(encode_net(&net))
                    .in_store(self.store)?
                    .is_some()
                {
                    report.deleted.push(net);
                } else {
                    report.missing.push(net);
                }
            }
            Ok(report)
        })
    }

    /// Replaces the whole of `list` with `entries` (later duplicates
    /// ignored).
    pub fn replace<'a>(
        &mut self,
        list: ListKind,
        entries: impl IntoIterator<Item = NewEntry<'a>>,
    ) -> Result<ReplaceReport, StoreError> {
        let store = self.store;
        store.guarded(|| {
            // Time added of every old entry; then start from an empty table.
            let mut old: HashMap<NetBytes, u64> = HashMap::new();
            {
                let table = self.txn.open_table(list.table()).in_store(self.store)?;
                for row in table.iter().in_store(self.store)? {
                    let (key, value) = row.in_store(self.store)?;
                    old.insert(key.value(), value.value().2);
                }
            }
            self.txn.delete_table(list.table()).in_store(self.store)?;

            let mut table = self.txn.open_table(list.table()).in_store(self.store)?;
            let mut sources = self.txn.open_table(SOURCES).in_store(self.store)?;
            let mut report = ReplaceReport::default();
            for entry in entries {
                let key = encode_net(&entry.net);
                if table.get(key).in_store(self.store)?.is_some() {
                    continue;
                }
                let added = match old.remove(&key) {
                    Some(added) => {
                        report.kept += 1;
                        added
                    }
                    None => {
                        report.added.push(entry.net);
                        self.now
                    }
                };
                let source = self
                    .sources
                    .id(&mut sources, entry.source)
                    .in_store(self.store)?;
                table
                    .insert(key, (source, entry.comment, added))
                    .in_store(self.store)?;
            }
            let mut removed: Vec<NetBytes> = old.into_keys().collect();
            removed.sort_unstable();
            report.removed = removed
                .iter()
                .map(|key| self.store.decode_net(key))
                .collect::<Result<_, _>>()?;
            Ok(report)
        })
    }

    /// Writes the filter settings.
    pub fn set_settings(&mut self, settings: &FilterSettings) -> Result<(), StoreError> {
        let store = self.store;
        store.guarded(|| {
            let json = serde_json::to_string(settings)
                .map_err(|error| self.store.corrupt(format!("filter settings: {error}")))?;
            let mut table = self.txn.open_table(SETTINGS).in_store(self.store)?;
            table
                .insert(FILTER_SETTINGS_KEY, json.as_str())
                .in_store(self.store)?;
            Ok(())
        })
    }

    /// Makes every change of the transaction durable, atomically.
    pub fn commit(self) -> Result<(), StoreError> {
        let store = self.store;
        store.guarded(|| self.txn.commit().in_store(store))
    }
}
