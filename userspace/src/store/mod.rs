//! The source of truth: the exact sets of blocklist and allowlist entries
//! and the filter settings, persisted in a crash-safe embedded database.
//!
//! A [`Store`] is one `redb` file, [`Store::FILE_NAME`], in a state
//! directory. Every change goes through a [`StoreTransaction`]: add many
//! entries for a source, delete many, replace all of a source's entries
//! (ipset swap semantics), sweep expired ones, or write the settings, then
//! [`commit`](StoreTransaction::commit). A
//! transaction that is dropped, or a process that dies (even by `SIGKILL`)
//! before its commit returns, leaves the previously committed state; redb
//! commits with an fsync'd copy-on-write root switch, so there is no
//! half-applied state to repair. Only one process opens the store at a time
//! ([`StoreError::Busy`] otherwise), so an in-memory plan built from it
//! stays in step with it.
//!
//! Every commit also records redb's allocator state (redb's *quick
//! repair*: a two-phase commit), so opening a store whose last user did
//! not close it (`SIGKILL`, or [`Store::close_at_exit`]) loads that state
//! instead of walking every page to rebuild it. That is what lets a
//! one-shot command end without redb's close, which would commit once
//! more and write a shutdown header (four more syncs, most of the latency
//! of a `cfctl add`).
//!
//! # Sources and expiry
//!
//! Every entry belongs to one or more *sources*: `cli`, `file:NAME`,
//! `feed:NAME`, ... Each source's listing of a network is a *membership*
//! with its own comment, time added and optional expiry. A network is
//! listed while at least one membership holds it: a source's refresh
//! ([`StoreTransaction::replace`]) changes only its own memberships, and a
//! network two sources list stays until both drop it. Expired memberships
//! are removed by [`StoreTransaction::expire`], many at once.
//!
//! # Schema (version [`SCHEMA_VERSION`])
//!
//! | table | key | value |
//! |---|---|---|
//! | `meta` | `"schema_version"` | `u64` |
//! | `blocklist_members` | (network, source id) | (comment, added: Unix s, expires: Unix ms or 0) |
//! | `blocklist_expiry` | (expires: Unix ms, source id, network) | `()`: memberships by expiry |
//! | `blocklist_by_source` | (source id, network) | `()`: memberships by source, of the sources not in `unindexed_sources` |
//! | `allowlist_*` | the same for the allowlist | |
//! | `unindexed_sources` | (list code, source id) | `()`: sources the index by source leaves out |
//! | `counts` | (list code, source id or `u32::MAX`) | memberships of a source, or networks of the list |
//! | `sources` | source id `u32` | source name |
//! | `state` | (namespace, key) | an owner's state, JSON ([`state`]) |
//!
//! The states kept now:
//!
//! | namespace | key | owner, and what |
//! |---|---|---|
//! | `filter` | `filter` | `control::FilterSettings`: what `attach` builds the filter with |
//! | `agent` | `agent` | `agent::status::AgentRecord`: the agent's process and configuration |
//! | `feed` | the feed's name | `sources::feed::FeedState`: validators and refreshes |
//! | (each kind of source) | its source's key | what the kind keeps ([`crate::sources::Kind::namespace`]) |
//!
//! A network key is the family (4 or 6), the 16-byte address (IPv4 in the
//! first 4 bytes) and the prefix length, so memberships iterate IPv4 first,
//! in address order, the sources of a network together. The index by
//! source holds the same rows in (source, network) order, so what one
//! source lists is one range of it: a source's refresh
//! ([`StoreTransaction::replace`]) and a listing of one source read that
//! source's networks and the memberships of those networks only, whatever
//! the other sources list. It holds only the sources that list less than
//! a [`ROWS_PER_LOOKUP`]th of their list: reading the networks of a larger
//! one costs a pass over the list anyway, so such a source is left out
//! (`unindexed_sources`) and each of its memberships costs one write, not
//! two. Whether a source is in the index is decided at each of its adds
//! and replaces, by what it will list after it: it leaves at that line and
//! comes back, rebuilt from one pass over the memberships, below half of
//! it. A small source that was once large (the first feed into an empty
//! store) is read in one pass until its next change puts it back.
//! Source names are stored once and referred to by id. States are JSON
//! with defaults for missing fields, so new fields can be added without a
//! schema change. A store of an earlier schema version is migrated when it
//! is opened, in one transaction ([`migrate`]).
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
//! This module does not plan filter keys or touch any filter: callers apply
//! the plan's diff around the transaction's commit.

mod file;
mod migrate;
mod read;
mod records;
mod schema;
mod state;
mod transaction;
mod writer;

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use file::Handle;
pub use file::{Access, DirCheck};
pub use records::{
    AddReport, DeleteReport, Entry, ExpireReport, Membership, NewEntry, ReplaceReport,
};
pub use schema::{ListKind, SCHEMA_VERSION};
use schema::{COUNTS, META, SCHEMA_VERSION_KEY, SOURCES, STATE, UNINDEXED};
pub use transaction::StoreTransaction;
use writer::SourceIds;
pub use writer::ROWS_PER_LOOKUP;

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
    /// Another user could replace what is in the state directory.
    #[error(
        "the state directory {} {reason}: another user could replace the store; make it owned \
         by root with mode 0700, or pass --trust-state-dir if its other writers are trusted",
        .path.display()
    )]
    UnsafeStateDir {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A symbolic link is where the store goes.
    #[error(
        "the state store {} is a symbolic link; cfctl opens only a regular file there (a link \
         could make it write elsewhere): remove the link, or point --state-dir at the directory \
         that holds the store",
        .path.display()
    )]
    Symlink {
        /// The store file.
        path: PathBuf,
    },
    /// The store cannot be opened for writing (a read-only file system, or
    /// no permission).
    #[error("the state store {} cannot be written: {source}", .path.display())]
    NotWritable {
        /// The store file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A change was asked of a store opened read-only.
    #[error("the state store {} is open read-only", .path.display())]
    ReadOnly {
        /// The store file.
        path: PathBuf,
    },
    /// A store opened read-only has an older schema, which only a writable
    /// open migrates.
    #[error(
        "the state store {} has schema version {found}; a command that changes it (on a writable \
         file system) migrates it to version {SCHEMA_VERSION} first",
        .path.display()
    )]
    OldSchema {
        /// The store file.
        path: PathBuf,
        /// The version found (0: none).
        found: u64,
    },
    /// A store opened read-only was left by a process that recorded no
    /// allocator state: only a writable open can repair it.
    #[error(
        "the state store {} needs a repair, which only a command that changes it (on a writable \
         file system) makes",
        .path.display()
    )]
    NeedsRepair {
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
    db: Handle,
    path: PathBuf,
}

impl Store {
    /// The store's file name inside the state directory.
    pub const FILE_NAME: &'static str = "cfctl.redb";

    /// Opens the store in `state_dir` for changes, creating the directory
    /// (mode 0700) and an empty store (mode 0600) if needed, whatever the
    /// umask, and recovering from an interrupted transaction; the
    /// directory is checked ([`DirCheck::Private`]).
    pub fn open(state_dir: &Path) -> Result<Self, StoreError> {
        Self::open_with(state_dir, Access::ReadWrite, DirCheck::Private)
    }

    /// Opens the store in `state_dir` with `access`, after the `check` of
    /// the directory (see [`mod@file`]). A read-only store must exist and
    /// have the current schema (only a writable open migrates one); it is
    /// for where the store cannot be written, because reading a store that
    /// its last writer did not close takes a copy in memory.
    pub fn open_with(
        state_dir: &Path,
        access: Access,
        check: DirCheck,
    ) -> Result<Self, StoreError> {
        if access == Access::ReadWrite {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(state_dir)
                .map_err(|source| StoreError::CreateDir {
                    path: state_dir.to_owned(),
                    source,
                })?;
        }
        file::check_state_dir(state_dir, check)?;
        let path = state_dir.join(Self::FILE_NAME);
        let db = file::open_database(&path, access)?;
        let store = Self { db, path };
        store.guarded(|| store.initialise())?;
        Ok(store)
    }

    /// Whether the store was opened read-only.
    pub fn is_read_only(&self) -> bool {
        !matches!(self.db, Handle::Writable(_))
    }

    /// Runs `operation`, turning a panic inside redb into
    /// [`StoreError::Damaged`].
    pub(super) fn guarded<T>(
        &self,
        operation: impl FnOnce() -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        guarded(&self.path, operation)
    }

    /// Verifies every page of the store against its checksum (reads the
    /// whole file); [`StoreError::Damaged`] if one fails.
    /// A read-only store is not checked (redb checks pages only through a
    /// writable handle): its reads still check each page they read.
    pub fn check_integrity(&mut self) -> Result<(), StoreError> {
        let path = self.path.clone();
        let Handle::Writable(db) = &mut self.db else {
            return Ok(());
        };
        guarded(&path, || match db.check_integrity() {
            // `false`: the allocator state was rebuilt, no data lost.
            Ok(_) => Ok(()),
            Err(error) => Err(StoreError::Damaged {
                path: path.clone(),
                what: error.to_string(),
            }),
        })
    }

    /// Creates the tables of a new store, migrates one of an earlier schema
    /// version ([`migrate`]), or checks the schema version of an existing one (with a
    /// read, so that opening a current store commits nothing).
    fn initialise(&self) -> Result<(), StoreError> {
        let found = self.schema_version()?;
        if found == Some(SCHEMA_VERSION) {
            return Ok(());
        }
        if self.is_read_only() {
            return Err(StoreError::OldSchema {
                path: self.path.clone(),
                found: found.unwrap_or(0),
            });
        }
        if let Some(found) = found.filter(|&found| !(1..SCHEMA_VERSION).contains(&found)) {
            return Err(StoreError::UnknownSchema {
                path: self.path.clone(),
                found,
            });
        }
        let txn = self.begin_write()?;
        if let Some(found) = found {
            self.migrate(&txn, found)?;
        }
        {
            let mut meta = txn.open_table(META).in_store(self)?;
            meta.insert(SCHEMA_VERSION_KEY, SCHEMA_VERSION)
                .in_store(self)?;
            for list in ListKind::ALL {
                let tables = list.tables();
                txn.open_table(tables.members).in_store(self)?;
                txn.open_table(tables.expiry).in_store(self)?;
                txn.open_table(tables.by_source).in_store(self)?;
            }
            txn.open_table(UNINDEXED).in_store(self)?;
            txn.open_table(COUNTS).in_store(self)?;
            txn.open_table(SOURCES).in_store(self)?;
            txn.open_table(STATE).in_store(self)?;
        }
        txn.commit().in_store(self)
    }

    /// The schema version the store holds; `None` for a new store.
    fn schema_version(&self) -> Result<Option<u64>, StoreError> {
        let txn = self.db.begin_read().in_store(self)?;
        let meta = match txn.open_table(META) {
            Ok(meta) => meta,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(error) => return Err(error).in_store(self),
        };
        Ok(meta
            .get(SCHEMA_VERSION_KEY)
            .in_store(self)?
            .map(|version| version.value()))
    }

    /// The store file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(super) fn corrupt(&self, what: String) -> StoreError {
        StoreError::Damaged {
            path: self.path.clone(),
            what,
        }
    }

    /// A redb write transaction whose commit records the allocator state
    /// (see the module documentation): every write of the store starts
    /// here.
    fn begin_write(&self) -> Result<redb::WriteTransaction, StoreError> {
        let Handle::Writable(db) = &self.db else {
            return Err(StoreError::ReadOnly {
                path: self.path.clone(),
            });
        };
        let mut txn = db.begin_write().in_store(self)?;
        txn.set_quick_repair(true);
        Ok(txn)
    }

    /// Ends this process's use of the store without redb's close: the
    /// process must be about to exit, which releases the file and its lock.
    /// Nothing is lost: every commit is durable and records the allocator
    /// state, so the next open is as fast as after a close (see the module
    /// documentation).
    pub fn close_at_exit(self) {
        std::mem::forget(self.db);
    }

    /// Starts a write transaction (waits for one of this process's own to
    /// end).
    pub fn begin(&self) -> Result<StoreTransaction<'_>, StoreError> {
        self.guarded(|| {
            let txn = self.begin_write()?;
            let names = self.source_names(&txn.open_table(SOURCES).in_store(self)?)?;
            Ok(StoreTransaction {
                store: self,
                txn,
                now: SystemTime::now(),
                sources: SourceIds::from_names(names),
            })
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
