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

mod records;
mod schema;
mod transaction;

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ipnet::IpNet;
use redb::{Database, DatabaseError, ReadableDatabase, ReadableTable, ReadableTableMetadata};

pub use records::{AddReport, DeleteReport, Entry, FilterSettings, NewEntry, ReplaceReport};
use schema::{
    decode_net, encode_net, unix_seconds, NetBytes, ALLOWLIST, BLOCKLIST, FILTER_SETTINGS_KEY,
    META, SCHEMA_VERSION_KEY, SETTINGS, SOURCES,
};
pub use schema::{ListKind, SCHEMA_VERSION};
use transaction::SourceIds;
pub use transaction::StoreTransaction;

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
        // An existing file that is empty was truncated: redb would start a
        // new store in it, and the list would be gone without a word.
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
        {
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                if fs::metadata(&path).is_ok_and(|file| file.len() == 0) {
                    return Err(StoreError::Damaged {
                        path,
                        what: "the file is empty".to_owned(),
                    });
                }
            }
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
