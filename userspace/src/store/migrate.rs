//! Migrations of stores written by earlier schema versions, each in the
//! transaction that opens the store: a store is migrated whole or not at
//! all. Version 1 kept one source per network; version 2 kept a per-source
//! index beside version 3's memberships; version 3 kept the filter
//! settings and the agent's records in a `settings` table and the feeds'
//! states in a `feeds` table, which version 4 holds in its one `state`
//! table; version 4 had no index by source, which version 5 builds from
//! the memberships. Version 5 indexed every source, which version 6 reads
//! as it is: a source leaves the index at its next large change.

use std::collections::HashMap;

use redb::ReadableTable;

use super::schema::{v1, v2, v3, NetBytes, ALL_SOURCES, COUNTS, SOURCES, STATE};
use super::{InStore, ListKind, Store, StoreError};

impl Store {
    /// Brings a store of schema version `found` (1 to 5) to the current
    /// one, one version after another, in `txn`.
    pub(super) fn migrate(
        &self,
        txn: &redb::WriteTransaction,
        found: u64,
    ) -> Result<(), StoreError> {
        if found == 1 {
            self.migrate_from_v1(txn)?;
        }
        if found == 2 {
            self.migrate_from_v2(txn)?;
        }
        if found <= 3 {
            self.migrate_from_v3(txn)?;
        }
        if found <= 4 {
            self.migrate_from_v4(txn)?;
        }
        Ok(())
    }

    /// Moves the entries of a schema 1 store (one source per network; a
    /// file's source named by its path, standard input by `-`) into
    /// memberships: `cli` stays `cli`, a file becomes `file:PATH`.
    fn migrate_from_v1(&self, txn: &redb::WriteTransaction) -> Result<(), StoreError> {
        let names = self.source_names(&txn.open_table(SOURCES).in_store(self)?)?;
        let renamed: HashMap<u32, String> = names
            .into_iter()
            .map(|(id, name)| match name.as_str() {
                "cli" => (id, name),
                _ => (id, format!("file:{name}")),
            })
            .collect();
        {
            let mut sources = txn.open_table(SOURCES).in_store(self)?;
            for (id, name) in &renamed {
                sources.insert(*id, name.as_str()).in_store(self)?;
            }
        }
        for (list, old) in [
            (ListKind::Blocklist, v1::BLOCKLIST),
            (ListKind::Allowlist, v1::ALLOWLIST),
        ] {
            let mut rows = Vec::new();
            {
                let table = txn.open_table(old).in_store(self)?;
                for row in table.iter().in_store(self)? {
                    let (key, value) = row.in_store(self)?;
                    let (source, comment, added) = value.value();
                    rows.push((key.value(), source, comment.map(str::to_owned), added));
                }
            }
            txn.delete_table(old).in_store(self)?;
            let tables = list.tables();
            let mut members = txn.open_table(tables.members).in_store(self)?;
            let mut counts = txn.open_table(COUNTS).in_store(self)?;
            let mut per_source: HashMap<u32, u64> = HashMap::new();
            for (net, source, comment, added) in &rows {
                members
                    .insert((net, *source), (comment.as_deref(), *added, 0))
                    .in_store(self)?;
                *per_source.entry(*source).or_default() += 1;
            }
            per_source.insert(ALL_SOURCES, rows.len() as u64);
            for (source, count) in per_source.into_iter().filter(|&(_, count)| count > 0) {
                counts.insert((list.code(), source), count).in_store(self)?;
            }
        }
        Ok(())
    }

    /// Deletes the per-source indexes of a schema 2 store; its memberships,
    /// expiries and counts are already those of schema 3.
    fn migrate_from_v2(&self, txn: &redb::WriteTransaction) -> Result<(), StoreError> {
        for index in v2::BY_SOURCE {
            txn.delete_table(index).in_store(self)?;
        }
        Ok(())
    }

    /// Moves the `settings` and `feeds` rows of a schema 3 store into the
    /// `state` table: a setting `NS:KEY` becomes state `KEY` of namespace
    /// `NS`, one without a colon state `NS` of namespace `NS`; a feed's
    /// state becomes state `NAME` of namespace `feed`.
    fn migrate_from_v3(&self, txn: &redb::WriteTransaction) -> Result<(), StoreError> {
        let mut rows = Vec::new();
        for (table, namespace_of) in [(v3::SETTINGS, None), (v3::FEEDS, Some(v3::FEED_NAMESPACE))] {
            {
                let old = txn.open_table(table).in_store(self)?;
                for row in old.iter().in_store(self)? {
                    let (key, json) = row.in_store(self)?;
                    let key = key.value();
                    let (namespace, key) = match namespace_of {
                        Some(namespace) => (namespace, key),
                        None => key.split_once(':').unwrap_or((key, key)),
                    };
                    rows.push((
                        namespace.to_owned(),
                        key.to_owned(),
                        json.value().to_owned(),
                    ));
                }
            }
            txn.delete_table(table).in_store(self)?;
        }
        let mut state = txn.open_table(STATE).in_store(self)?;
        for (namespace, key, json) in &rows {
            state
                .insert((namespace.as_str(), key.as_str()), json.as_str())
                .in_store(self)?;
        }
        Ok(())
    }

    /// Builds each list's index by source from its memberships, written in
    /// the index's order (ordered writes touch each page once).
    fn migrate_from_v4(&self, txn: &redb::WriteTransaction) -> Result<(), StoreError> {
        for list in ListKind::ALL {
            let tables = list.tables();
            let mut rows: Vec<(u32, NetBytes)> = Vec::new();
            {
                let members = txn.open_table(tables.members).in_store(self)?;
                for row in members.iter().in_store(self)? {
                    let (&net, source) = row.in_store(self)?.0.value();
                    rows.push((source, net));
                }
            }
            rows.sort_unstable();
            let mut by_source = txn.open_table(tables.by_source).in_store(self)?;
            for (source, net) in &rows {
                by_source.insert((*source, net), ()).in_store(self)?;
            }
        }
        Ok(())
    }
}
