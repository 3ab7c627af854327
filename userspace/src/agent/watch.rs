//! Tells the agent when another process has opened the store, so that an
//! idle agent need not open it to find out.
//!
//! Opening the store costs device flushes: redb marks the file in use when
//! it opens it for writing and clean when it closes it. An agent that
//! opened the store on a timer to look for listings a command had added
//! flushed the disk about twenty times a second while nothing happened.
//! Every `cfctl` command that could change the store opens the file, and
//! no process can change it without opening it, so an inotify watch on
//! the state directory for opens (and for the file being created, moved
//! in or deleted) says exactly when the agent must look again.
//!
//! The agent empties the watch right after its last opening of the store
//! in a pass, while it holds the store's lock: whatever another process
//! did before then is in what the pass reads, and whatever it does after
//! (it can only start once the agent has closed the store) leaves an
//! event for the next wait. Between passes the agent sleeps in `poll` on
//! the watch's descriptor ([`AsFd`]), so an opening wakes it at once.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use inotify::{Inotify, WatchMask};

use crate::store::Store;

/// An inotify watch for opens of the store file in one state directory.
pub struct StoreWatch {
    inotify: Inotify,
}

impl StoreWatch {
    /// Watches `state_dir` (which must exist).
    pub fn new(state_dir: &Path) -> io::Result<Self> {
        let inotify = Inotify::init()?;
        inotify.watches().add(
            state_dir,
            WatchMask::OPEN | WatchMask::CREATE | WatchMask::MOVED_TO | WatchMask::DELETE,
        )?;
        Ok(Self { inotify })
    }

    /// Whether the store file was opened, created, moved in or deleted
    /// since the last call; empties the watch. A lost event (the kernel's
    /// queue overflowed) counts as an opening.
    pub fn store_touched(&mut self) -> io::Result<bool> {
        let mut buffer = [0; 4096];
        let mut touched = false;
        loop {
            match self.inotify.read_events(&mut buffer) {
                Ok(events) => {
                    for event in events {
                        touched |= event
                            .name
                            .is_none_or(|name| name == OsStr::new(Store::FILE_NAME));
                    }
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Ok(touched),
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
    }
}

impl AsFd for StoreWatch {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inotify.as_fd()
    }
}
