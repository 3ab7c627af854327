//! Opening the store's file safely: the state directory checked (no other
//! user may replace what is in it), the file opened without following a
//! symbolic link and handed to redb, for changes or for reading only.
//!
//! * **The directory.** cfctl runs as root and keeps a blocklist in the
//!   state directory: if another user can write the directory, that user
//!   can replace the store (or plant a symbolic link where it goes, making
//!   root create or overwrite a file of the link's choosing). The
//!   directory must be owned by root or by the user cfctl runs as, and be
//!   writable by nobody else, unless the check is waived
//!   ([`DirCheck::Waived`], `--trust-state-dir`).
//! * **The file.** It is opened with `O_NOFOLLOW` (a symbolic link there is
//!   refused, not followed) and redb works on that open file, so nothing
//!   can swap the path between the check and the use.
//! * **Read-only.** Where the store cannot be written (a file system
//!   mounted read-only, such as ext4 after errors, when a backup is needed
//!   most), a command that only reads opens the file read-only
//!   ([`Access::ReadOnly`]) and changes nothing. redb opens a file
//!   read-only only if its last writer closed it, and a one-shot cfctl
//!   command leaves it without redb's close (that saves four device
//!   flushes, [`super::Store::close_at_exit`]); such a file is read whole
//!   into memory instead and opened there, where redb's quick repair (from
//!   the allocator state every commit records) touches no byte of the
//!   file. No writer can change a file on a read-only file system, so that
//!   copy is the store as it is.

use std::fs::{self, File};
use std::io::{ErrorKind, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use redb::backends::{FileBackend, InMemoryBackend};
use redb::{
    Builder, Database, DatabaseError, ReadOnlyDatabase, ReadTransaction, ReadableDatabase,
    StorageBackend,
};

use super::{store_error, StoreError};

/// Whether the state directory's owner and mode are checked before the
/// store in it is opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DirCheck {
    /// Owned by root or by this process's user, writable by nobody else.
    #[default]
    Private,
    /// Not checked (`--trust-state-dir`): for a directory shared on
    /// purpose, whose other writers are trusted.
    Waived,
}

/// How the store is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// For changes: created if missing, one process at a time.
    ReadWrite,
    /// For reading only: it must exist; shared with other readers.
    ReadOnly,
}

/// The open database, for changes or for reading only.
pub(super) enum Handle {
    /// Opened for reading and writing.
    Writable(Database),
    /// Opened read-only.
    ReadOnly(ReadOnlyDatabase),
    /// Read into memory and opened there: changes stay in memory, and
    /// the store never asks for any.
    Copy(Database),
}

impl Handle {
    /// A read transaction, whichever way the file is open.
    pub(super) fn begin_read(&self) -> Result<ReadTransaction, redb::TransactionError> {
        match self {
            Handle::Writable(db) | Handle::Copy(db) => db.begin_read(),
            Handle::ReadOnly(db) => db.begin_read(),
        }
    }
}

/// Refuses a state directory that another user could write, unless
/// `check` waives it.
pub(super) fn check_state_dir(state_dir: &Path, check: DirCheck) -> Result<(), StoreError> {
    if check == DirCheck::Waived {
        return Ok(());
    }
    let unsafe_dir = |reason: String| StoreError::UnsafeStateDir {
        path: state_dir.to_owned(),
        reason,
    };
    let metadata = fs::metadata(state_dir).map_err(|source| StoreError::CreateDir {
        path: state_dir.to_owned(),
        source,
    })?;
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if metadata.uid() != 0 && metadata.uid() != euid {
        return Err(unsafe_dir(format!(
            "is owned by uid {}, not by root or by this user (uid {euid})",
            metadata.uid()
        )));
    }
    if metadata.mode() & 0o022 != 0 {
        return Err(unsafe_dir(format!(
            "is writable by its group or by everyone (mode {:o})",
            metadata.mode() & 0o7777
        )));
    }
    Ok(())
}

/// Opens the store file at `path` with `access`, never through a
/// symbolic link; a new store (mode 0600, whatever the umask) only for
/// [`Access::ReadWrite`].
pub(super) fn open_database(path: &Path, access: Access) -> Result<Handle, StoreError> {
    let database_error = |error: DatabaseError| match error {
        DatabaseError::DatabaseAlreadyOpen => StoreError::Busy {
            path: path.to_owned(),
        },
        DatabaseError::RepairAborted => StoreError::NeedsRepair {
            path: path.to_owned(),
        },
        other => store_error(path, other),
    };
    let (file, created) = open_file(path, access)?;
    // An existing file that is empty was truncated: redb would start a
    // new store in it, and the list would be gone without a word.
    if !created && file.metadata().is_ok_and(|metadata| metadata.len() == 0) {
        return Err(StoreError::Damaged {
            path: path.to_owned(),
            what: "the file is empty".to_owned(),
        });
    }
    let backend = FileBackend::new(file).map_err(database_error)?;
    super::guarded(path, || match access {
        Access::ReadWrite => Builder::new()
            .create_with_backend(backend)
            .map(Handle::Writable)
            .map_err(database_error),
        Access::ReadOnly => match Builder::new().open_read_only_with_backend(backend) {
            Ok(db) => Ok(Handle::ReadOnly(db)),
            Err(DatabaseError::RepairAborted) => in_memory_copy(path).map(Handle::Copy),
            Err(error) => Err(database_error(error)),
        },
    })
}

/// The store file at `path` read whole into memory and opened there (see
/// the module documentation): for a read-only store whose last writer did
/// not close it.
fn in_memory_copy(path: &Path) -> Result<Database, StoreError> {
    let io_error = |error: std::io::Error| store_error(path, DatabaseError::Storage(error.into()));
    let (mut file, _) = open_file(path, Access::ReadOnly)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(io_error)?;
    let memory = InMemoryBackend::new();
    let copied = memory
        .set_len(bytes.len() as u64)
        .and_then(|()| memory.write(0, &bytes));
    copied.map_err(|error| io_error(std::io::Error::other(error.to_string())))?;
    Builder::new()
        .create_with_backend(memory)
        .map_err(|error| store_error(path, error))
}

/// The store file, opened without following a symbolic link, and whether
/// this call created it (empty, mode 0600 whatever the umask: only for
/// [`Access::ReadWrite`]).
fn open_file(path: &Path, access: Access) -> Result<(File, bool), StoreError> {
    let mut options = fs::OpenOptions::new();
    options.read(true).custom_flags(libc::O_NOFOLLOW);
    let opened = match access {
        Access::ReadOnly => options.open(path).map(|file| (file, false)),
        Access::ReadWrite => {
            options.write(true);
            match options.clone().create_new(true).mode(0o600).open(path) {
                Ok(file) => Ok((file, true)),
                Err(error) if error.kind() == ErrorKind::AlreadyExists => {
                    options.open(path).map(|file| (file, false))
                }
                Err(error) => Err(error),
            }
        }
    };
    opened.map_err(|source| match source.raw_os_error() {
        // O_NOFOLLOW on a link; O_CREAT | O_EXCL finds a link existing.
        Some(libc::ELOOP) => StoreError::Symlink {
            path: path.to_owned(),
        },
        _ if access == Access::ReadWrite
            && matches!(
                source.kind(),
                ErrorKind::ReadOnlyFilesystem | ErrorKind::PermissionDenied
            ) =>
        {
            StoreError::NotWritable {
                path: path.to_owned(),
                source,
            }
        }
        _ => store_error(path, DatabaseError::Storage(source.into())),
    })
}
