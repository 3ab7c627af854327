//! The source of truth: the exact sets of blocklist and allowlist entries
//! and the filter settings, persisted in a crash-safe embedded database.
//!
//! A [`Store`] is one `redb` file, [`Store::FILE_NAME`], in a state
//! directory. Every change goes through a [`StoreTransaction`]: add many
//! entries, delete many, replace a whole list (ipset swap semantics) or
//! write the settings, then [`commit`](StoreTransaction::commit). A
//! transaction that is dropped, or a process that dies (even by `SIGKILL`)
//! before its commit returns, leaves the previously committed state; redb
//! commits with an fsync'd copy-on-write root switch, so there is no
//! half-applied state to repair. Only one process opens the store at a time
//! ([`StoreError::Busy`] otherwise), so an in-memory plan built from it
//! stays in step with it.
//!
//! # Schema (version [`SCHEMA_VERSION`])
//!
//! | table       | key                 | value                                     |
//! |-------------|---------------------|-------------------------------------------|
//! | `meta`      | `"schema_version"`  | `u64`                                     |
//! | `blocklist` | network, 18 bytes   | (source id `u32`, comment, added: Unix s) |
//! | `allowlist` | network, 18 bytes   | the same                                  |
//! | `sources`   | source id `u32`     | source name (file path as given, or `-`)  |
//! | `settings`  | `"filter"`          | [`FilterSettings`] as JSON                |
//!
//! # Damage
//!
//! redb checks the structure of every page it reads and keeps a checksum
//! of every page. A store that was damaged outside redb (a disk error,
//! another program writing to it) can make redb fail or panic; every
//! operation here turns either into [`StoreError::Damaged`], which names
//! the file and how to recover. [`Store::check_integrity`] verifies every
//! page's checksum, so it also finds damage that still reads as valid
//! entries (a flipped byte in an address); the control plane runs it where
//! the store is about to become the whole live filter (`attach`) and in
//! `verify`. Other commands trust the page-structure checks, which cost
//! nothing extra.
//!
//! The two lists ([`ListKind`]) hold the same kind of entries. A network key
//! is the family (4 or 6), the 16-byte address (IPv4 in the first 4 bytes)
//! and the prefix length, so entries iterate IPv4 first, in address order.
//! Source names are stored once and referred to by id (names no entry uses
//! any more are kept: there are few).
//! Settings are JSON with defaults for missing fields, so new fields can be
//! added without a schema change.
//!
//! An entry is identified by its network alone: adding a network that is
//! already listed keeps the existing record (source, comment, time) and
//! reports it. This module does not plan filter keys or touch any filter:
//! callers apply the plan's diff between the transaction's changes and its
//! commit, so that a failure there aborts the transaction.

use std::collections::HashMap;
use std::fs;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ipnet::IpNet;
use redb::{
    Database, DatabaseError, ReadableDatabase, ReadableTable, ReadableTableMetadata,
    TableDefinition, WriteTransaction,
};
use serde::{Deserialize, Serialize};

use crate::blocklist::ParsedList;
use crate::plan::PlanLimits;
use crate::{MatchAddress, Mode, Policy};

/// The schema version this code reads and writes.
pub const SCHEMA_VERSION: u64 = 1;

type NetBytes = [u8; 18];
/// (source id, comment, added in Unix seconds)
type RecordValue = (u32, Option<&'static str>, u64);

const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const BLOCKLIST: TableDefinition<NetBytes, RecordValue> = TableDefinition::new("blocklist");
const ALLOWLIST: TableDefinition<NetBytes, RecordValue> = TableDefinition::new("allowlist");
const SOURCES: TableDefinition<u32, &str> = TableDefinition::new("sources");
const SETTINGS: TableDefinition<&str, &str> = TableDefinition::new("settings");
const SCHEMA_VERSION_KEY: &str = "schema_version";
const FILTER_SETTINGS_KEY: &str = "filter";

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
    const fn table(self) -> TableDefinition<'static, NetBytes, RecordValue> {
        match self {
            ListKind::Blocklist => BLOCKLIST,
            ListKind::Allowlist => ALLOWLIST,
        }
    }
}

/// Why the store failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The state directory could not be created.
    #[error("cannot create the state directory {}: {source}", .path.display())]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Another process has the store open.
    #[error("the state store {} is in use by another cfctl process", .path.display())]
    Busy {
        /// The store file.
        path: PathBuf,
    },
    /// The database failed.
    #[error("state store {}: {source}", .path.display())]
    Database {
        /// The store file.
        path: PathBuf,
        /// redb's error.
        source: redb::Error,
    },
    /// The store was written by a newer version.
    #[error(
        "the state store {} has schema version {found}; this cfctl reads version {SCHEMA_VERSION}",
        .path.display()
    )]
    UnknownSchema {
        /// The store file.
        path: PathBuf,
        /// The version found.
        found: u64,
    },
    /// The file is damaged: redb found a bad page, failed a checksum, or
    /// panicked reading it, or a record cannot be decoded.
    #[error(
        "the state store {path} is damaged ({what}), so cfctl will not use it; the live \
         filter keeps what it holds. Keep the file for inspection and start again from your \
         last `cfctl export` backup: `mv {path} {path}.damaged`, then \
         `cfctl import --replace --force BACKUP`",
        path = .path.display()
    )]
    Damaged {
        /// The store file.
        path: PathBuf,
        /// What redb said.
        what: String,
    },
}

/// Filter parameters kept with the entries, so that `attach` after a reboot
/// builds the same filter. Missing fields read as their defaults.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FilterSettings {
    /// Keys the filter is sized for.
    pub capacity: u64,
    /// Fingerprint width: 8, 16 or 32.
    pub fingerprint_bits: u32,
    /// Hash seed of the filter.
    pub seed: u64,
    /// Which address of a packet is matched.
    #[serde(with = "crate::setting_names")]
    pub match_address: MatchAddress,
    /// Drop, or only count.
    #[serde(with = "crate::setting_names")]
    pub mode: Mode,
    /// Drop listed packets, or everything not allowlisted.
    #[serde(with = "crate::setting_names")]
    pub policy: Policy,
    /// Probe budgets and key limit of the prefix plan.
    pub plan_limits: PlanLimits,
    /// This store's id, written into the live filter built from it so that
    /// a filter and its store recognise each other; zero until a filter is
    /// first built.
    pub store_id: u64,
}

impl FilterSettings {
    /// Gives the store an id if it has none yet.
    pub fn claim_store_id(&mut self) {
        while self.store_id == 0 {
            self.store_id = crate::filter::random_seed();
        }
    }
}

impl Default for FilterSettings {
    /// 1 Mi keys, 16-bit fingerprints, seed 0 (choose one when building),
    /// source matching, enforce, deny, default plan limits, no id yet.
    fn default() -> Self {
        Self {
            capacity: 1 << 20,
            fingerprint_bits: 16,
            seed: 0,
            match_address: MatchAddress::Source,
            mode: Mode::Enforce,
            policy: Policy::Deny,
            plan_limits: PlanLimits::default(),
            store_id: 0,
        }
    }
}

/// An entry to add.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewEntry<'a> {
    /// The network (host bits zero).
    pub net: IpNet,
    /// Where it comes from: a file name, `-`, or `cli`.
    pub source: &'a str,
    /// Its comment (a Spamhaus SBL id), if any.
    pub comment: Option<&'a str>,
}

impl<'a> NewEntry<'a> {
    /// The entries of a parsed list.
    pub fn from_list(list: &'a ParsedList) -> impl Iterator<Item = NewEntry<'a>> + 'a {
        list.entries.iter().map(|listed| NewEntry {
            net: listed.net,
            source: &list.source,
            comment: listed.comment.as_deref(),
        })
    }
}

/// A stored entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The network.
    pub net: IpNet,
    /// Where it came from.
    pub source: String,
    /// Its comment, if any.
    pub comment: Option<String>,
    /// When it was added (whole seconds).
    pub added: SystemTime,
}

/// What an add did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AddReport {
    /// Networks that were not listed and now are, in input order.
    pub added: Vec<IpNet>,
    /// Networks that were listed already (or twice in the input): unchanged.
    pub already_listed: Vec<IpNet>,
}

/// What a delete did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeleteReport {
    /// Networks that were listed and are not any more.
    pub deleted: Vec<IpNet>,
    /// Networks that were not listed.
    pub missing: Vec<IpNet>,
}

/// What a replace did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplaceReport {
    /// Networks new to the set.
    pub added: Vec<IpNet>,
    /// Networks no longer in the set.
    pub removed: Vec<IpNet>,
    /// Networks in both: their time added is kept, source and comment are
    /// the new ones.
    pub kept: usize,
}

/// The entry store in one state directory.
pub struct Store {
    db: Database,
    path: PathBuf,
}

impl Store {
    /// The store's file name inside the state directory.
    pub const FILE_NAME: &'static str = "cfctl.redb";

    /// Opens the store in `state_dir`, creating the directory (mode 0700)
    /// and an empty store (mode 0600) if needed, whatever the umask, and
    /// recovering from an interrupted transaction.
    pub fn open(state_dir: &Path) -> Result<Self, StoreError> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(state_dir)
            .map_err(|source| StoreError::CreateDir {
                path: state_dir.to_owned(),
                source,
            })?;
        let path = state_dir.join(Self::FILE_NAME);
        let database_error = |error: DatabaseError| match error {
            DatabaseError::DatabaseAlreadyOpen => StoreError::Busy { path: path.clone() },
            other => store_error(&path, other),
        };
        // Created here with its mode, so that redb finds an empty file to
        // start a store in.
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
        {
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(database_error(DatabaseError::Storage(error.into()))),
        }
        let db = guarded(&path, || Database::create(&path).map_err(database_error))?;
        let store = Self { db, path };
        store.guarded(|| store.initialise())?;
        Ok(store)
    }

    /// Runs `operation`, turning a panic inside redb into
    /// [`StoreError::Damaged`].
    fn guarded<T>(
        &self,
        operation: impl FnOnce() -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        guarded(&self.path, operation)
    }

    /// Verifies every page of the store against its checksum (reads the
    /// whole file); [`StoreError::Damaged`] if one fails.
    pub fn check_integrity(&mut self) -> Result<(), StoreError> {
        let path = self.path.clone();
        let db = &mut self.db;
        guarded(&path, || match db.check_integrity() {
            // `false`: the allocator state was rebuilt, no data lost.
            Ok(_) => Ok(()),
            Err(error) => Err(StoreError::Damaged {
                path: path.clone(),
                what: error.to_string(),
            }),
        })
    }

    /// Creates the tables of a new store, or checks the schema version of
    /// an existing one (with a read, so that opening a store commits
    /// nothing).
    fn initialise(&self) -> Result<(), StoreError> {
        if self.has_schema()? {
            return Ok(());
        }
        let txn = self.db.begin_write().in_store(self)?;
        {
            let mut meta = txn.open_table(META).in_store(self)?;
            let found = meta
                .get(SCHEMA_VERSION_KEY)
                .in_store(self)?
                .map(|version| version.value());
            match found {
                None => {
                    meta.insert(SCHEMA_VERSION_KEY, SCHEMA_VERSION)
                        .in_store(self)?;
                }
                Some(SCHEMA_VERSION) => {}
                Some(found) => {
                    return Err(StoreError::UnknownSchema {
                        path: self.path.clone(),
                        found,
                    })
                }
            }
            txn.open_table(BLOCKLIST).in_store(self)?;
            txn.open_table(ALLOWLIST).in_store(self)?;
            txn.open_table(SOURCES).in_store(self)?;
            txn.open_table(SETTINGS).in_store(self)?;
        }
        txn.commit().in_store(self)
    }

    /// Whether the store holds this code's schema version (its tables are
    /// created in the same transaction as the version); an error for
    /// another version.
    fn has_schema(&self) -> Result<bool, StoreError> {
        let txn = self.db.begin_read().in_store(self)?;
        let meta = match txn.open_table(META) {
            Ok(meta) => meta,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(false),
            Err(error) => return Err(error).in_store(self),
        };
        match meta.get(SCHEMA_VERSION_KEY).in_store(self)? {
            None => Ok(false),
            Some(version) if version.value() == SCHEMA_VERSION => Ok(true),
            Some(version) => Err(StoreError::UnknownSchema {
                path: self.path.clone(),
                found: version.value(),
            }),
        }
    }

    /// The store file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn corrupt(&self, what: String) -> StoreError {
        StoreError::Damaged {
            path: self.path.clone(),
            what,
        }
    }

    /// Starts a write transaction (waits for one of this process's own to
    /// end).
    pub fn begin(&self) -> Result<StoreTransaction<'_>, StoreError> {
        self.guarded(|| {
            let txn = self.db.begin_write().in_store(self)?;
            let names = self.source_names(&txn.open_table(SOURCES).in_store(self)?)?;
            Ok(StoreTransaction {
                store: self,
                txn,
                now: unix_seconds(SystemTime::now()),
                sources: SourceIds::from_names(names),
            })
        })
    }

    /// Every entry of `list`, IPv4 first, in address order.
    pub fn entries(&self, list: ListKind) -> Result<Vec<Entry>, StoreError> {
        self.guarded(|| {
            let txn = self.db.begin_read().in_store(self)?;
            let sources = self.source_names(&txn.open_table(SOURCES).in_store(self)?)?;
            let table = txn.open_table(list.table()).in_store(self)?;
            let mut entries = Vec::with_capacity(table.len().in_store(self)? as usize);
            for row in table.iter().in_store(self)? {
                let (key, value) = row.in_store(self)?;
                entries.push(self.decode_entry(&key.value(), value.value(), &sources)?);
            }
            Ok(entries)
        })
    }

    /// The networks of every entry of `list`, IPv4 first, in address order.
    pub fn nets(&self, list: ListKind) -> Result<Vec<IpNet>, StoreError> {
        self.guarded(|| {
            let txn = self.db.begin_read().in_store(self)?;
            let table = txn.open_table(list.table()).in_store(self)?;
            let mut nets = Vec::with_capacity(table.len().in_store(self)? as usize);
            for row in table.iter().in_store(self)? {
                let (key, _) = row.in_store(self)?;
                nets.push(self.decode_net(&key.value())?);
            }
            Ok(nets)
        })
    }

    /// The entry of `list` for exactly `net`, if listed.
    pub fn entry(&self, list: ListKind, net: &IpNet) -> Result<Option<Entry>, StoreError> {
        self.guarded(|| {
            let txn = self.db.begin_read().in_store(self)?;
            let table = txn.open_table(list.table()).in_store(self)?;
            let Some(value) = table.get(encode_net(net)).in_store(self)? else {
                return Ok(None);
            };
            let sources = self.source_names(&txn.open_table(SOURCES).in_store(self)?)?;
            self.decode_entry(&encode_net(net), value.value(), &sources)
                .map(Some)
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
            let table = txn.open_table(list.table()).in_store(self)?;
            let mut found = Vec::new();
            for net in nets {
                if table.get(encode_net(&net)).in_store(self)?.is_some() {
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
            let table = txn.open_table(list.table()).in_store(self)?;
            let mut first = encode_net(within);
            first[17] = 0;
            let mut last = encode_net(&IpNet::from(within.broadcast()));
            last[17] = u8::MAX;
            let mut nets = Vec::new();
            for row in table.range(first..=last).in_store(self)? {
                let (key, _) = row.in_store(self)?;
                nets.push(self.decode_net(&key.value())?);
            }
            Ok(nets)
        })
    }

    /// The number of entries of `list`.
    pub fn entry_count(&self, list: ListKind) -> Result<u64, StoreError> {
        self.guarded(|| {
            let txn = self.db.begin_read().in_store(self)?;
            let table = txn.open_table(list.table()).in_store(self)?;
            table.len().in_store(self)
        })
    }

    /// The filter settings, if any were stored.
    pub fn settings(&self) -> Result<Option<FilterSettings>, StoreError> {
        self.guarded(|| {
            let txn = self.db.begin_read().in_store(self)?;
            let table = txn.open_table(SETTINGS).in_store(self)?;
            let Some(json) = table.get(FILTER_SETTINGS_KEY).in_store(self)? else {
                return Ok(None);
            };
            serde_json::from_str(json.value())
                .map(Some)
                .map_err(|error| self.corrupt(format!("filter settings: {error}")))
        })
    }

    fn source_names(
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

    fn decode_net(&self, bytes: &NetBytes) -> Result<IpNet, StoreError> {
        decode_net(bytes).ok_or_else(|| self.corrupt(format!("bad network key {bytes:02x?}")))
    }

    fn decode_entry(
        &self,
        key: &NetBytes,
        (source_id, comment, added): (u32, Option<&str>, u64),
        sources: &HashMap<u32, String>,
    ) -> Result<Entry, StoreError> {
        let net = self.decode_net(key)?;
        let source = sources.get(&source_id).ok_or_else(|| {
            self.corrupt(format!("entry {net} refers to unknown source {source_id}"))
        })?;
        Ok(Entry {
            net,
            source: source.clone(),
            comment: comment.map(str::to_owned),
            added: UNIX_EPOCH + Duration::from_secs(added),
        })
    }
}

/// Source names and their ids, as in the `sources` table.
struct SourceIds {
    ids: HashMap<String, u32>,
    next: u32,
}

impl SourceIds {
    fn from_names(names: HashMap<u32, String>) -> Self {
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
    store: &'s Store,
    txn: WriteTransaction,
    now: u64,
    sources: SourceIds,
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

/// Attaches the store's path to redb's errors.
trait InStore<T> {
    fn in_store(self, store: &Store) -> Result<T, StoreError>;
}

impl<T, E: Into<redb::Error>> InStore<T> for Result<T, E> {
    fn in_store(self, store: &Store) -> Result<T, StoreError> {
        self.map_err(|error| store_error(&store.path, error))
    }
}

/// A redb error of the store at `path`: [`StoreError::Damaged`] when redb
/// found the file corrupt or unreadable as a database, else
/// [`StoreError::Database`].
fn store_error(path: &Path, error: impl Into<redb::Error>) -> StoreError {
    match error.into() {
        redb::Error::Corrupted(what) => StoreError::Damaged {
            path: path.to_owned(),
            what,
        },
        redb::Error::Io(error)
            if matches!(
                error.kind(),
                std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof
            ) =>
        {
            StoreError::Damaged {
                path: path.to_owned(),
                what: error.to_string(),
            }
        }
        source => StoreError::Database {
            path: path.to_owned(),
            source,
        },
    }
}

/// Runs `operation` on the store at `path`, turning a panic (redb panics
/// on some damaged files) into [`StoreError::Damaged`].
fn guarded<T>(
    path: &Path,
    operation: impl FnOnce() -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(operation)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|message| (*message).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "redb panicked".to_owned());
        Err(StoreError::Damaged {
            path: path.to_owned(),
            what: format!("redb: {what}"),
        })
    })
}

fn unix_seconds(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

fn encode_net(net: &IpNet) -> NetBytes {
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

fn decode_net(bytes: &NetBytes) -> Option<IpNet> {
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
