//! The control plane behind `cfctl`: moves entries from a source through
//! the store and the plan to the live XDP filter, or to a filter device.
//!
//! A [`Control`] holds the [`Store`] of one state directory (the source of
//! truth; its lock serialises cfctl processes) and the [`PinDir`] where the
//! loaded program, its maps and one BPF link per interface are pinned. Its
//! rooms:
//!
//! | module | what |
//! |---|---|
//! | [`update`] | the update path and the order that keeps the live filter a superset of the store |
//! | `diff` | the exact diff of a small change, planned from the entries around it |
//! | [`attach`] | attach, detach, resize, and loading a program filled from the store |
//! | [`inspect`] | status, check, verify, counters |
//! | [`capacity`] | how large a filter may be, and the way out of a full one |
//! | [`sizing`], `resize` | a filter that sizes itself: the rules, and the resizes |
//! | [`settings`] | the filter's settings, kept in the store |
//! | [`report`], [`error`] | what operations report, and why they fail |
//! | [`device`] | the same verbs on a filter device |
//!
//! Two marks in the pinned config tie the live filter to the store. The
//! *store id* says which store the filter was built from: a command that
//! finds a filter built from another store (a mistyped `--state-dir`, a
//! lost or replaced store) refuses to change it unless forced, and then
//! rebuilds it from its own store. The *update mark* is set while a
//! process changes the live filter; a process that finds it set (its
//! writer crashed: the store lock serialises cfctl processes) rebuilds the
//! filter from the committed store before anything else ([`Control::repair`]).
//!
//! The store is updated even when nothing is attached; `attach` builds the
//! filter from it, so a reboot (which clears bpffs) loses nothing.

pub mod attach;
pub mod capacity;
pub mod device;
mod diff;
pub mod error;
pub mod inspect;
pub mod report;
mod resize;
pub mod sampled;
pub mod settings;
pub mod sizing;
pub mod update;

use std::fs;
use std::net::IpAddr;
use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, Instant};

pub use capacity::shape_for_fpr;
pub use diff::BULK_ENTRIES;
pub use error::{ControlError, Result};
pub use inspect::{live_summary, read_counters};
pub use report::*;
pub use sampled::DropReader;
pub use sizing::{CapacityChoice, MemoryCeiling, Sizing};
pub use update::{Change, NoProgress, Progress};

pub use crate::store::ListKind;
use crate::store::{Access, Store, StoreError};
pub use crate::xdp::maps::PREFILTER_BYTES;
pub use crate::xdp::{
    tcx_supported, AttachMode, AttachPoint, SamplerCounts, Sampling, TrafficDirection,
};
use crate::xdp::{LiveFilter, PinDir};
use crate::{FilterShape, MalformedAction, MatchAddress, Policy};
pub use settings::FilterSettings;

pub use crate::store::DirCheck;
/// How long to wait for another cfctl process to release the store.
const STORE_WAIT: Duration = Duration::from_secs(30);
/// How long to wait for the store before saying who holds it.
pub const STORE_NOTICE: Duration = Duration::from_secs(1);

/// Fails with [`ControlError::NotPrivileged`] unless the process may load
/// BPF programs and attach them: root, or CAP_BPF, CAP_NET_ADMIN and
/// CAP_SYS_ADMIN (pinning) in its effective set.
pub fn require_privileges(action: &'static str) -> Result<()> {
    const CAP_NET_ADMIN: u32 = 12;
    const CAP_SYS_ADMIN: u32 = 21;
    const CAP_BPF: u32 = 39;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return Ok(());
    }
    let effective = fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("CapEff:"))
                .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        })
        .unwrap_or(0);
    let has = |cap: u32| effective & (1 << cap) != 0;
    if has(CAP_BPF) && has(CAP_NET_ADMIN) && has(CAP_SYS_ADMIN) {
        Ok(())
    } else {
        Err(ControlError::NotPrivileged(action))
    }
}

/// Options of `attach`; `None` keeps the stored setting.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AttachOptions {
    /// Keys the filter is sized for, or sized for the store.
    pub capacity: Option<CapacityChoice>,
    /// Fingerprint width and slots per bucket.
    pub shape: Option<FilterShape>,
    /// Which address of a packet is matched.
    pub match_address: Option<MatchAddress>,
    /// Deny listed addresses, or allow only allowlisted ones.
    pub policy: Option<Policy>,
    /// Drop or pass malformed frames.
    pub malformed: Option<MalformedAction>,
    /// The most bytes the filter's table may take.
    pub max_memory: Option<MemoryCeiling>,
}

/// How a command uses the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreUse {
    /// It adds entries or settings: create the store if there is none.
    Create,
    /// It deletes or changes what is there: the store must exist.
    Existing,
    /// It only reads: the store must exist, and is opened read-only
    /// (see [`Control::open_for_reading`]).
    Read,
}

/// The cfctl control plane of one pin directory and one state directory.
pub struct Control {
    pins: PinDir,
    store: Store,
    force: bool,
    notice: Rc<dyn Fn(&str)>,
}

impl Control {
    /// Opens the store in `state_dir` (waiting up to 30 s for another
    /// cfctl process to finish, creating it if `store_use` allows) for the
    /// blocklist pinned in `pin_dir`, checking the directory
    /// ([`DirCheck::Private`]).
    pub fn open(pin_dir: &Path, state_dir: &Path, store_use: StoreUse) -> Result<Self> {
        Self::open_with_notices(
            pin_dir,
            state_dir,
            store_use,
            DirCheck::Private,
            Rc::new(|_| {}),
        )
    }

    /// [`Control::open`] with the directory check `check`, telling
    /// `notice` what the user should know but is not an error: who holds
    /// the store when it is still busy after [`STORE_NOTICE`], and a
    /// repair after an interrupted update.
    pub fn open_with_notices(
        pin_dir: &Path,
        state_dir: &Path,
        store_use: StoreUse,
        check: DirCheck,
        notice: Rc<dyn Fn(&str)>,
    ) -> Result<Self> {
        // Not followed: a link there is refused by the store's open.
        let found = fs::symlink_metadata(state_dir.join(Store::FILE_NAME)).is_ok();
        if store_use != StoreUse::Create && !found {
            return Err(ControlError::NoStore(state_dir.to_owned()));
        }
        let access = match store_use {
            StoreUse::Read => Access::ReadOnly,
            StoreUse::Create | StoreUse::Existing => Access::ReadWrite,
        };
        let started = Instant::now();
        let mut told = false;
        let store = loop {
            match Store::open_with(state_dir, access, check) {
                Err(StoreError::Busy { path }) => {
                    if started.elapsed() >= STORE_WAIT {
                        let holders = processes_holding(&path);
                        let seconds = STORE_WAIT.as_secs();
                        return Err(ControlError::StoreBusy {
                            path,
                            holders,
                            seconds,
                        });
                    }
                    if !told && started.elapsed() >= STORE_NOTICE {
                        notice(&format!(
                            "waiting for another cfctl ({}) to finish with {}",
                            processes_holding(&path),
                            path.display()
                        ));
                        told = true;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                result => break result?,
            }
        };
        Ok(Self {
            pins: PinDir::new(pin_dir),
            store,
            force: false,
            notice,
        })
    }

    /// Opens the store in `state_dir` for a command that only reads, and
    /// ends the listings that have expired first, so that what it shows is
    /// what the filter holds; where the store cannot be written (a
    /// read-only file system, no permission), opens it read-only as it is
    /// ([`StoreUse::Read`]), telling `notice` so.
    pub fn open_for_reading(
        pin_dir: &Path,
        state_dir: &Path,
        check: DirCheck,
        notice: Rc<dyn Fn(&str)>,
    ) -> Result<Self> {
        let open = |store_use| {
            Self::open_with_notices(pin_dir, state_dir, store_use, check, Rc::clone(&notice))
        };
        match open(StoreUse::Existing) {
            Ok(mut control) => {
                control.expire_due()?;
                Ok(control)
            }
            Err(ControlError::Store(error @ StoreError::NotWritable { .. })) => {
                notice(&format!(
                    "{error}; reading it as it is (expired listings stay in the store and the \
                     filter until a command can change it)"
                ));
                open(StoreUse::Read)
            }
            Err(error) => Err(error),
        }
    }

    /// Ends a one-shot command's use of the store without redb's close;
    /// the process must be about to exit (see [`Store::close_at_exit`]).
    pub fn close_at_exit(self) {
        self.store.close_at_exit();
    }

    /// Lets the control plane do what it refuses by default: take over a
    /// filter built from another store, or empty one with an empty store.
    pub fn set_force(&mut self, force: bool) {
        self.force = force;
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The pin directory.
    pub fn pins(&self) -> &PinDir {
        &self.pins
    }

    /// The stored allowlist as (address, prefix length) pairs.
    fn stored_allowlist(&self) -> Result<Vec<(IpAddr, u8)>> {
        Ok(update::address_pairs(
            &self.store.nets(ListKind::Allowlist)?,
        ))
    }

    /// The live filter pinned in the pin directory, `None` if nothing is
    /// pinned, repaired first if a crashed process left the update mark;
    /// and whether it was built from this control plane's store.
    fn live(&self) -> Result<Option<(LiveFilter, bool)>> {
        let mut live = match self.pins.open() {
            Ok(Some(live)) => live,
            Ok(None) => return Ok(None),
            Err(source) => {
                return Err(ControlError::Incomplete {
                    pin_dir: self.pins.path().to_owned(),
                    source: Box::new(source),
                })
            }
        };
        let same_store = self.is_own(&live)?;
        let crashed = live.updating_pid();
        if crashed != 0 && same_store {
            self.repair(&mut live)?;
            (self.notice)(&format!(
                "rebuilt the live filter from the store: an update by pid {crashed} was \
                 interrupted"
            ));
        }
        Ok(Some((live, same_store)))
    }

    /// The live filter, for a command that changes it: `None` if nothing
    /// is pinned; a filter built from another store is refused, or with
    /// force rebuilt from this one and taken over.
    fn live_for_update(&self) -> Result<Option<LiveFilter>> {
        let Some((mut live, same_store)) = self.live()? else {
            return Ok(None);
        };
        if !same_store {
            if !self.force {
                return Err(self.other_store());
            }
            self.adopt(&mut live)?;
        }
        Ok(Some(live))
    }

    /// Whether `live` was built from this store.
    fn is_own(&self, live: &LiveFilter) -> Result<bool> {
        let id = self.settings()?.store_id;
        Ok(id != 0 && live.store_id() == id)
    }

    fn other_store(&self) -> ControlError {
        ControlError::OtherStore {
            pin_dir: self.pins.path().to_owned(),
            store: self.store.path().to_owned(),
        }
    }

    /// Makes `live` this store's: rebuilt from the store, marked with its
    /// id (given one if it has none yet).
    fn adopt(&self, live: &mut LiveFilter) -> Result<()> {
        let mut settings = self.settings()?;
        settings.claim_store_id();
        settings.seed = live.seed();
        self.save_settings(&settings)?;
        live.begin_update();
        self.repair(live)?;
        live.set_store_id(settings.store_id);
        Ok(())
    }
}

/// The processes other than this one that have `path` open, as
/// `pid N: command line` (found through `/proc/*/fd`), or `pid unknown`.
fn processes_holding(path: &Path) -> String {
    let own = std::process::id().to_string();
    let holders: Vec<String> = fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|pid| pid.bytes().all(|byte| byte.is_ascii_digit()) && *pid != own)
        .filter(|pid| {
            fs::read_dir(format!("/proc/{pid}/fd"))
                .into_iter()
                .flatten()
                .filter_map(|fd| fd.ok())
                .any(|fd| fs::read_link(fd.path()).is_ok_and(|target| target == path))
        })
        .map(|pid| {
            let command = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let words: Vec<_> = command
                .split(|&byte| byte == 0)
                .filter(|word| !word.is_empty())
                .map(String::from_utf8_lossy)
                .collect();
            format!("pid {pid}: {}", crate::text::excerpt(&words.join(" ")))
        })
        .collect();
    if holders.is_empty() {
        "pid unknown".to_owned()
    } else {
        holders.join("; ")
    }
}
