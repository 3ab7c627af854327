//! One agent per store: a lock the running agent holds for its whole life
//! on a file beside the store, [`AgentLock::FILE_NAME`].
//!
//! A second agent (`cfctl agent`, `--once` too) that found the store free
//! between the first one's passes would treat it as its own: withdraw the
//! entries of every source its own configuration does not declare. So an
//! agent takes the lock before anything else and refuses to start when
//! another process holds it, naming that agent's pid, which the lock file
//! records. The lock is an advisory
//! `flock`, released by the kernel when its holder ends, however it ends:
//! no stale lock after a `kill -9`, and no pid to compare with a process
//! that may have taken the same number since.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Why the lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another agent holds it.
    #[error(
        "another cfctl agent ({holder}) keeps the store in {}: stop it first, or send it \
         SIGHUP to reload its configuration",
        .state_dir.display()
    )]
    Held {
        /// The state directory.
        state_dir: PathBuf,
        /// `pid N`, or `pid unknown` if the file does not say.
        holder: String,
    },
    /// The lock file could not be opened or written.
    #[error("cannot lock {}: {source}", .path.display())]
    Io {
        /// The lock file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
}

/// The lock of the agent that keeps one state directory; released when
/// dropped (or when the process ends).
#[derive(Debug)]
pub struct AgentLock {
    _file: File,
}

impl AgentLock {
    /// The lock file's name inside the state directory.
    pub const FILE_NAME: &'static str = "agent.lock";

    /// Takes the lock of `state_dir` (creating the directory, mode 0700,
    /// and the file, mode 0600, if needed) and records this process's pid
    /// in it, or fails with [`LockError::Held`] at once.
    pub fn acquire(state_dir: &Path) -> Result<Self, LockError> {
        let path = state_dir.join(Self::FILE_NAME);
        let io = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(state_dir)
            .map_err(io)?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(LockError::Held {
                    state_dir: state_dir.to_owned(),
                    holder: recorded_pid(&mut file),
                })
            }
            Err(std::fs::TryLockError::Error(error)) => return Err(io(error)),
        }
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        Ok(Self { _file: file })
    }

    /// Whether an agent holds the lock of `state_dir` now (false if it
    /// cannot be told: no lock file, or it cannot be opened).
    pub fn is_held(state_dir: &Path) -> bool {
        let Ok(file) = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(state_dir.join(Self::FILE_NAME))
        else {
            return false;
        };
        match file.try_lock_shared() {
            Ok(()) => false,
            Err(std::fs::TryLockError::WouldBlock) => true,
            Err(std::fs::TryLockError::Error(_)) => false,
        }
    }
}

/// `pid N` as the lock file records it, or `pid unknown`.
fn recorded_pid(file: &mut File) -> String {
    let mut text = String::new();
    let _ = file.read_to_string(&mut text);
    match text.trim().parse::<u32>() {
        Ok(pid) => format!("pid {pid}"),
        Err(_) => "pid unknown".to_owned(),
    }
}
