//! The live program's sampled drops, read by one process at a time, with
//! the exact counters the attribution ([`crate::drops`]) shares out.
//!
//! A BPF ring buffer has one consumer position: two readers would split
//! the events between them. The reader holds an exclusive `flock` on
//! [`LOCK_FILE`] in the state directory while it reads. The agent reads
//! in slices and lets the lock go between them ([`DropReader::pause`]),
//! so a command (`cfctl capture`, `top`, `stats --by`) takes the samples
//! over while it runs, and the agent's estimates go on from fewer
//! samples meanwhile (its shares of the exact counters stay unbiased).

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::error::{ControlError, Result};
use super::inspect::open_pinned;
use crate::drops::Exact;
use crate::xdp::{DropEvents, PinDir, SamplerCounts};
use crate::{DropEvent, Family, Outcome, Setting};

/// The reader lock's file name in the state directory.
pub const LOCK_FILE: &str = "drops.lock";

/// How long a command waits for the agent to let the samples go.
const LOCK_WAIT: Duration = Duration::from_secs(5);

/// The exact drop counters by outcome and family, and the drops the
/// program skipped or lost rather than sampled.
pub type ExactDrops = (Vec<((Outcome, Family), Exact)>, u64);

/// The sampled drops of the blocklist pinned in one directory.
pub struct DropReader {
    events: DropEvents,
    pin_dir: PathBuf,
    lock: File,
    locked: bool,
}

impl DropReader {
    /// Opens the samples of the blocklist pinned in `pin_dir`, waiting
    /// up to [`LOCK_WAIT`] for the reader lock in `state_dir`.
    pub fn open(pin_dir: &Path, state_dir: &Path) -> Result<Self> {
        let mut reader = Self::open_paused(pin_dir, state_dir)?;
        let started = Instant::now();
        while !reader.resume()? {
            if started.elapsed() >= LOCK_WAIT {
                return Err(ControlError::SamplesBusy {
                    lock: state_dir.join(LOCK_FILE),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(reader)
    }

    /// Opens the samples without taking the reader lock: [`Self::resume`]
    /// takes it.
    pub fn open_paused(pin_dir: &Path, state_dir: &Path) -> Result<Self> {
        let lock_path = state_dir.join(LOCK_FILE);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&lock_path)
            .map_err(|source| ControlError::SamplesLock {
                lock: lock_path,
                source,
            })?;
        let events = DropEvents::open(&PinDir::new(pin_dir))?
            .ok_or_else(|| ControlError::NotAttached(pin_dir.to_owned()))?;
        Ok(Self {
            events,
            pin_dir: pin_dir.to_owned(),
            lock,
            locked: false,
        })
    }

    /// Takes the reader lock if no other process holds it; whether it
    /// holds it now.
    pub fn resume(&mut self) -> Result<bool> {
        if !self.locked {
            // SAFETY: flock on a descriptor this reader owns.
            let taken =
                unsafe { libc::flock(self.lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            self.locked = taken == 0;
        }
        Ok(self.locked)
    }

    /// Lets the reader lock go, so that another process may read.
    pub fn pause(&mut self) {
        if self.locked {
            // SAFETY: flock on a descriptor this reader owns.
            unsafe { libc::flock(self.lock.as_raw_fd(), libc::LOCK_UN) };
            self.locked = false;
        }
    }

    /// Waits up to `timeout` for samples and hands each to `each`; how
    /// many there were. Reads nothing while paused.
    pub fn read(&mut self, timeout: Duration, each: impl FnMut(&DropEvent)) -> Result<usize> {
        if !self.locked {
            std::thread::sleep(timeout);
            return Ok(0);
        }
        Ok(self.events.poll(timeout, each)?)
    }

    /// The exact drop counters now, and the drops not sampled.
    pub fn exact(&self) -> Result<ExactDrops> {
        exact_drops(&self.pin_dir)
    }

    /// The frame bytes each sample carries (the live sampling setting).
    pub fn frame_bytes(&self) -> Result<u32> {
        Ok(self.events.frame_bytes())
    }
}

/// The exact drop counters of the blocklist pinned in `pin_dir` by
/// outcome and family, and the drops its sampler skipped or lost.
pub fn exact_drops(pin_dir: &Path) -> Result<ExactDrops> {
    // Both directions' drops together.
    let both = open_pinned(pin_dir)?.counters()?;
    let counters = Outcome::ALL
        .iter()
        .flat_map(|&outcome| Family::ALL.iter().map(move |&family| (outcome, family)))
        .map(|(outcome, family)| {
            let counter = both.get(outcome, family);
            let exact = Exact {
                packets: counter.packets,
                bytes: counter.bytes,
            };
            ((outcome, family), exact)
        })
        .collect();
    let sampler = sampler_counts(pin_dir)?;
    Ok((counters, sampler.lost + sampler.skipped))
}

/// What the samplers of the blocklist pinned in `pin_dir` did.
pub fn sampler_counts(pin_dir: &Path) -> Result<SamplerCounts> {
    Ok(open_pinned(pin_dir)?.maps().sampler_counts()?)
}
