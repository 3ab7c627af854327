//! The control plane behind `cfctl`: keeps an attached XDP blocklist in
//! step with the entry store.
//!
//! A [`Control`] holds the [`Store`] of one state directory (the source of
//! truth; its lock serialises cfctl processes) and knows the bpffs
//! directory where the loaded program, its maps and one BPF link per
//! interface are pinned:
//!
//! ```text
//! <pin dir>/program, CONFIG, PREFILTERS, COUNTERS, ALLOW_V4, ALLOW_V6, FILTERS_FP<bits>
//! <pin dir>/links/<interface>@<native|skb>
//! ```
//!
//! # Updates
//!
//! Every change of the blocklist runs in this order:
//!
//! 1. begin a store transaction and record the change in it;
//! 2. update a [`KeyPlan`] with the live filter's active lengths and get
//!    the exact [`KeyDiff`](crate::plan::KeyDiff); the plan holds only the
//!    committed entries that can share a filter key with the change (a few
//!    store lookups, see `Control::plan_around`), so one `add` costs the
//!    same with ten entries listed or ten million;
//! 3. write the diff into the live table: the new keys' prefilter bits,
//!    the inserts, then the removes ([`tables::apply_diff`]); the filter
//!    core writes each relocation's destination before clearing its source,
//!    so no listed key ever disappears, even for an instant;
//! 4. commit;
//! 5. clear the prefilter bits that no key marks any more. The plan of
//!    step 2 knows only the entries around the change, so each bit it
//!    would clear is checked against a plan of every stored entry that can
//!    mark it (`Control::clear_unmarked_bits`).
//!
//! If the filter is full, the keys already inserted are removed again and
//! the transaction is dropped: nothing is half-applied. If the plan needs
//! other active lengths ([`PlanError::RebuildNeeded`]), a change replaces
//! the whole list (`--replace`) or is large, a new plan and a new table are
//! built from the entries and swapped in atomically
//! ([`tables::install_plan`]); the active lengths are always the plan's,
//! never inferred from the keys present. Should the commit itself fail,
//! the filter is put back as it was.
//!
//! A process killed between steps 3 and 4 leaves the committed store
//! intact and, at worst, extra keys in the live filter (listed addresses
//! are never lost); `cfctl verify` reports that and `cfctl attach` rebuilds
//! the filter from the store.
//!
//! The store is updated even when nothing is attached; `attach` builds the
//! filter from it, so a reboot (which clears bpffs) loses nothing.

pub mod device;
pub mod tables;

use std::collections::HashSet;
use std::ffi::CString;
use std::fs;
use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use aya::maps::MapData;
use blocklist_ebpf::prefilter::PrefilterBit;
use filter_core::AddressFamily;
use ipnet::{IpNet, Ipv6Net};
use serde::Serialize;

use crate::loader::{
    attach_pinned_program, detach_pinned, AttachMode, Blocklist, BlocklistMaps, LoadOptions,
    LoaderError, MatchAddress, Mode, Policy,
};
use crate::plan::{ActiveLengths, CheckReport, CheckVerdict, KeyPlan, PlanError, PlanLimits};
use crate::store::{Entry, FilterSettings, ListKind, NewEntry, Store, StoreError};
use crate::{Family, FilterShape, Outcome};
use tables::{TableOpError, TableSummary};

/// Where cfctl pins its program, maps and links unless told otherwise.
pub const DEFAULT_PIN_DIR: &str = "/sys/fs/bpf/cfctl";
/// Where cfctl keeps its store unless told otherwise.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/cfctl";
/// The subdirectory of the pin directory holding one link per interface.
const LINKS_DIR: &str = "links";
/// Changes of at least this many entries build a new table and swap it in
/// (one copy into the map) rather than writing each key into the live one.
pub const BULK_ENTRIES: usize = 50_000;
/// Most IPv6 entries read to check whether an IPv6 prefilter bit may be
/// cleared after a live update.
const MAX_IPV6_SCAN: usize = 100_000;
/// How long to wait for another cfctl process to release the store.
const STORE_WAIT: Duration = Duration::from_secs(30);
/// How long to wait for the store before saying who holds it.
pub const STORE_NOTICE: Duration = Duration::from_secs(1);
/// Magic number of a bpffs in `statfs`.
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;
/// Where bpffs is normally mounted.
const BPFFS_ROOT: &str = "/sys/fs/bpf";

/// Why a control-plane operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Another process kept the store for longer than cfctl waits.
    #[error(
        "the state store {} is still in use by another cfctl ({holders}) after {} s; try again \
         when it has finished",
        .path.display(),
        STORE_WAIT.as_secs()
    )]
    StoreBusy {
        /// The store file.
        path: PathBuf,
        /// Who has it open, as [`processes_holding`] says.
        holders: String,
    },
    /// Loading, attaching or a map operation failed.
    #[error(transparent)]
    Loader(#[from] LoaderError),
    /// The entries cannot be planned.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The filter is full or unusable.
    #[error(transparent)]
    Table(#[from] TableOpError),
    /// The filter is full; the message says what to do.
    #[error("the filter is full: {wanted} filter keys do not fit in its {slots} slots; {way_out}")]
    Full {
        /// Keys the table would have had to hold.
        wanted: usize,
        /// Slots of the table.
        slots: usize,
        /// What makes the keys fit.
        way_out: String,
    },
    /// Nothing is pinned in the pin directory.
    #[error("no blocklist is attached (nothing pinned in {}); run `cfctl attach IFACE` first", .0.display())]
    NotAttached(PathBuf),
    /// No such network interface.
    #[error("no network interface named '{0}'")]
    NoInterface(String),
    /// cfctl has no link on the interface.
    #[error("cfctl is not attached to '{0}'")]
    NotAttachedTo(String),
    /// Another XDP program holds the interface.
    #[error(
        "interface '{0}' already has another XDP program attached; remove it first \
         (for example `ip link set dev {0} xdp off`)"
    )]
    InterfaceBusy(String),
    /// Native XDP is not available on the interface.
    #[error("the driver of '{0}' has no native XDP support; attach with `--mode skb`")]
    NativeUnsupported(String),
    /// The attached filter was made with other parameters.
    #[error("{0}")]
    Conflict(String),
    /// The caller lacks the privileges for BPF.
    #[error(
        "cfctl needs root (or CAP_BPF, CAP_NET_ADMIN and CAP_SYS_ADMIN) to {0}; run it with sudo"
    )]
    NotPrivileged(&'static str),
    /// A bpffs directory could not be prepared.
    #[error("cannot prepare the bpffs directory {}: {source}", .path.display())]
    Bpffs {
        /// The directory.
        path: PathBuf,
        /// What failed.
        source: io::Error,
    },
    /// An invalid setting.
    #[error("{0}")]
    InvalidSetting(String),
    /// An entry for every address of a family, without `--force`.
    #[error(
        "{net} covers every {family} address; add --force if that is what you mean",
        net = .0,
        family = if .0.addr().is_ipv4() { "IPv4" } else { "IPv6" }
    )]
    WholeFamily(IpNet),
}

type Result<T, E = ControlError> = std::result::Result<T, E>;

/// Reports the progress of long operations (a progress bar on a terminal).
pub trait Progress {
    /// A stage of `total` steps (0: unknown) starts.
    fn start(&self, stage: &str, total: u64);
    /// `steps` more steps of the current stage are done.
    fn advance(&self, steps: u64);
}

/// Reports nothing.
pub struct NoProgress;

impl Progress for NoProgress {
    fn start(&self, _stage: &str, _total: u64) {}
    fn advance(&self, _steps: u64) {}
}

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
    /// Keys the filter is sized for.
    pub capacity: Option<u64>,
    /// Fingerprint width: 8, 16 or 32.
    pub fingerprint_bits: Option<u32>,
    /// Which address of a packet is matched.
    pub match_address: Option<MatchAddress>,
    /// Deny listed addresses, or allow only allowlisted ones.
    pub policy: Option<Policy>,
}

/// The fingerprint width that reaches a false-positive rate of `fpr` per
/// probe in a full filter: the narrowest of 8, 16 and 32 bits.
pub fn fingerprint_bits_for_fpr(fpr: f64) -> Result<u32> {
    FilterShape::ALL
        .into_iter()
        .find(|shape| {
            filter_core::sizing::cuckoo_min_fingerprint_bits(shape.slots(), fpr)
                .is_some_and(|bits| bits <= shape.fingerprint_bits())
        })
        .map(FilterShape::fingerprint_bits)
        .ok_or_else(|| {
            ControlError::InvalidSetting(format!(
                "no filter reaches a false-positive rate of {fpr:e} (32-bit fingerprints give about \
                 2e-9; the rate must be between 0 and 1)"
            ))
        })
}

/// Bytes of one filter table for `capacity` keys of `shape`, if a table
/// can be that large: its bucket count must be a power of two a BPF array
/// can hold.
fn table_bytes(capacity: u64, shape: FilterShape) -> Option<usize> {
    let capacity = usize::try_from(capacity).ok()?;
    let buckets = filter_core::sizing::cuckoo_buckets(capacity, shape.slots())?;
    if buckets > 1 << 31 {
        return None;
    }
    buckets.checked_mul(shape.bucket_bytes())
}

/// Checks a filter capacity before anything is built: at least one key,
/// and a table that a BPF array can hold and that fits this machine's
/// available memory three times (the live table, the new one, and the copy
/// it is built in while it is swapped in). One rule for `attach` and
/// `resize`.
pub fn check_capacity(capacity: u64, shape: FilterShape) -> Result<()> {
    if capacity == 0 {
        return Err(ControlError::InvalidSetting(
            "the capacity must be at least 1 key".to_owned(),
        ));
    }
    let too_large = |why: String| {
        ControlError::InvalidSetting(format!("a capacity of {capacity} keys is too large: {why}"))
    };
    let Some(bytes) = table_bytes(capacity, shape) else {
        return Err(too_large(format!(
            "a filter of {}-bit fingerprints holds at most about {} keys",
            shape.fingerprint_bits(),
            (1u64 << 31) * shape.slots() as u64
        )));
    };
    let available = available_memory();
    if available.is_some_and(|available| bytes.saturating_mul(3) > available) {
        return Err(too_large(format!(
            "its table takes {} MiB, three times that while a new table is swapped in, and \
             this machine has {} MiB available",
            bytes >> 20,
            available.unwrap_or_default() >> 20
        )));
    }
    Ok(())
}

/// `MemAvailable` of `/proc/meminfo`, in bytes.
fn available_memory() -> Option<usize> {
    let meminfo = fs::read_to_string("/proc/meminfo").ok()?;
    let kib = meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemAvailable:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<usize>()
        .ok()?;
    kib.checked_mul(1024)
}

/// `error` with the way out of a full filter: `way_out(keys)` for the
/// number of keys to make room for; other errors as they are.
fn with_way_out(error: TableOpError, way_out: impl FnOnce(usize) -> String) -> ControlError {
    match error {
        TableOpError::Full { wanted, slots } => ControlError::Full {
            wanted,
            slots,
            way_out: way_out(wanted),
        },
        other => ControlError::Table(other),
    }
}

/// A capacity with room to spare for `keys` filter keys.
fn roomy_capacity(keys: usize) -> usize {
    keys.saturating_add(keys / 4).max(1)
}

/// The way out when the filter being built for `attach` or `resize` is too
/// small for the stored entries.
fn larger_capacity(keys: usize) -> String {
    format!(
        "the stored entries need a larger --capacity (at least {})",
        roomy_capacity(keys)
    )
}

/// The way out when the attached filter cannot take more keys.
fn resize_way_out(keys: usize) -> String {
    format!(
        "make it larger with `cfctl resize --capacity {}`",
        roomy_capacity(keys)
    )
}

/// The entries of `nets` that list every address of their family
/// (`0.0.0.0/0`, `::/0`), which cfctl adds only when `force` is set: a
/// blocklist entry that drops every packet of a family, or an allowlist
/// entry that lets every one through, is more often a slip than a wish.
/// Returns them, so the caller can warn when forced.
pub fn whole_families(nets: &[IpNet], force: bool) -> Result<Vec<IpNet>> {
    let whole: Vec<IpNet> = nets
        .iter()
        .copied()
        .filter(|net| net.prefix_len() == 0)
        .collect();
    match whole.first() {
        Some(net) if !force => Err(ControlError::WholeFamily(*net)),
        _ => Ok(whole),
    }
}

/// One interface cfctl is attached to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Attachment {
    /// Interface name.
    pub interface: String,
    /// `native` or `skb`.
    pub mode: &'static str,
    /// Whether the interface still exists.
    pub present: bool,
}

fn mode_name(mode: AttachMode) -> &'static str {
    match mode {
        AttachMode::Native => "native",
        AttachMode::Skb => "skb",
    }
}

/// What an attach did.
#[derive(Clone, Debug, Serialize)]
pub struct AttachReport {
    /// Interfaces newly attached.
    pub attached: Vec<String>,
    /// Interfaces that were attached already.
    pub already_attached: Vec<String>,
    /// Whether the program was loaded by this call (else it was pinned).
    pub loaded: bool,
    /// Entries in the filter.
    pub entries: usize,
    /// Filter keys they expand to.
    pub keys: usize,
}

/// What a detach did.
#[derive(Clone, Debug, Serialize)]
pub struct DetachReport {
    /// Interfaces detached.
    pub detached: Vec<String>,
    /// Whether the program and maps were unpinned (no interface left).
    pub unloaded: bool,
}

/// A change of one list.
#[derive(Clone, Copy, Debug)]
pub enum Change<'a> {
    /// Add entries (those listed already are kept as they are).
    Add(&'a [NewEntry<'a>]),
    /// Delete entries by network.
    Delete(&'a [IpNet]),
    /// Replace the whole list (ipset swap semantics).
    Replace(&'a [NewEntry<'a>]),
}

/// A change with each network once (the first of its entries kept).
enum UniqueChange<'a> {
    Add(Vec<NewEntry<'a>>),
    Delete(Vec<IpNet>),
    Replace(Vec<NewEntry<'a>>),
}

impl<'a> Change<'a> {
    /// The change without entries given again, and how many were.
    fn without_repeats(self) -> (UniqueChange<'a>, usize) {
        fn first_of_each<T: Copy>(items: &[T], net: impl Fn(&T) -> IpNet) -> (Vec<T>, usize) {
            let mut seen = HashSet::with_capacity(items.len());
            let unique: Vec<T> = items
                .iter()
                .copied()
                .filter(|item| seen.insert(net(item)))
                .collect();
            let repeated = items.len() - unique.len();
            (unique, repeated)
        }
        match self {
            Change::Add(entries) => {
                let (unique, repeated) = first_of_each(entries, |entry| entry.net);
                (UniqueChange::Add(unique), repeated)
            }
            Change::Delete(nets) => {
                let (unique, repeated) = first_of_each(nets, |net| *net);
                (UniqueChange::Delete(unique), repeated)
            }
            Change::Replace(entries) => {
                let (unique, repeated) = first_of_each(entries, |entry| entry.net);
                (UniqueChange::Replace(unique), repeated)
            }
        }
    }
}

impl UniqueChange<'_> {
    fn operation(&self) -> &'static str {
        match self {
            UniqueChange::Add(_) => "add",
            UniqueChange::Delete(_) => "delete",
            UniqueChange::Replace(_) => "replace",
        }
    }
}

/// How a change reached the filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FilterUpdate {
    /// Nothing is attached: only the store changed.
    NotAttached,
    /// Nothing to change in the filter.
    Unchanged,
    /// Keys were written into the live table.
    Incremental {
        /// Keys inserted.
        inserted: usize,
        /// Keys removed.
        removed: usize,
    },
    /// A new table was built and swapped in.
    Rebuilt {
        /// Keys in the new table.
        keys: usize,
    },
    /// The allowlist map was changed.
    Allowlist,
}

/// What a change did.
#[derive(Clone, Debug, Serialize)]
pub struct ChangeReport {
    /// `add`, `delete` or `replace`.
    pub operation: &'static str,
    /// Entries given more than once: each was taken once.
    pub repeated: usize,
    /// Entries added.
    pub added: usize,
    /// Entries deleted (or removed by a replace).
    pub deleted: usize,
    /// Entries kept by a replace.
    pub kept: usize,
    /// Networks to add that were listed already.
    pub already_listed: Vec<IpNet>,
    /// Networks to delete that were not listed.
    pub not_listed: Vec<IpNet>,
    /// How the filter changed.
    pub filter: FilterUpdate,
}

/// A stored entry, for reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EntryRecord {
    /// The network.
    pub net: IpNet,
    /// Where it came from.
    pub source: String,
    /// Its comment.
    pub comment: Option<String>,
    /// When it was added, Unix seconds.
    pub added: u64,
}

impl From<Entry> for EntryRecord {
    fn from(entry: Entry) -> Self {
        Self {
            net: entry.net,
            source: entry.source,
            comment: entry.comment,
            added: entry
                .added
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |since| since.as_secs()),
        }
    }
}

/// What `check` found.
#[derive(Clone, Debug, Serialize)]
pub struct CheckResult {
    /// The address.
    pub address: IpAddr,
    /// `listed`, `not_listed`, `false_positive`, `missing_from_filter`, or
    /// `not_attached` (only the store was consulted).
    pub verdict: &'static str,
    /// Blocklist entries covering it, longest first.
    pub covering: Vec<EntryRecord>,
    /// Allowlist entries covering it, longest first.
    pub allowlisted: Vec<EntryRecord>,
    /// The filter key the XDP program would stop at.
    pub filter_hit: Option<String>,
}

/// What `verify` found.
#[derive(Clone, Debug, Serialize)]
pub struct VerifyReport {
    /// Entries in the store.
    pub entries: usize,
    /// Keys they expand to with the live active lengths.
    pub keys: usize,
    /// Fingerprints in the live table.
    pub fingerprints: usize,
    /// Keys the live filter does not hold.
    pub missing_keys: usize,
    /// Prefilter bits set that no key needs: not a problem (each costs the
    /// packets of its block one probe), cleared by the next rebuild.
    pub stale_prefilter_bits: usize,
    /// Problems found; empty when the filter matches the store.
    pub problems: Vec<String>,
}

/// The state of cfctl: settings, interfaces, entries and the live filter.
#[derive(Clone, Debug, Serialize)]
pub struct Status {
    /// The pin directory.
    pub pin_dir: PathBuf,
    /// The store file.
    pub store: PathBuf,
    /// Whether a program is pinned.
    pub loaded: bool,
    /// Interfaces with a cfctl link.
    pub interfaces: Vec<Attachment>,
    /// Live mode (stored mode when not loaded): `enforce` or `monitor`.
    pub mode: &'static str,
    /// Live policy (stored when not loaded): `deny` or `allow`.
    pub policy: &'static str,
    /// Matched address: `src` or `dst`.
    pub match_address: &'static str,
    /// Keys the filter is sized for.
    pub capacity: u64,
    /// Fingerprint width.
    pub fingerprint_bits: u32,
    /// Blocklist entries.
    pub entries: u64,
    /// Allowlist entries.
    pub allowlist_entries: u64,
    /// Active IPv4 prefix lengths, longest first.
    pub ipv4_lengths: Vec<u8>,
    /// Active IPv6 prefix lengths, longest first.
    pub ipv6_lengths: Vec<u8>,
    /// The live table.
    pub filter: Option<TableSummary>,
    /// False-positive rate per IPv4 packet (one probe per active length).
    pub ipv4_packet_fpr: Option<f64>,
    /// False-positive rate per IPv6 packet.
    pub ipv6_packet_fpr: Option<f64>,
}

/// Packets and bytes of one counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CounterRecord {
    /// The outcome: passed, dropped, would_drop, allowlisted, malformed,
    /// non_ip.
    pub outcome: &'static str,
    /// ipv4, ipv6 or other.
    pub family: &'static str,
    /// Packets.
    pub packets: u64,
    /// Bytes.
    pub bytes: u64,
}

/// The name of an outcome in reports.
pub fn outcome_name(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Passed => "passed",
        Outcome::Dropped => "dropped",
        Outcome::WouldDrop => "would_drop",
        Outcome::Allowlisted => "allowlisted",
        Outcome::Malformed => "malformed",
        Outcome::NonIp => "non_ip",
    }
}

/// The name of a counter family in reports.
pub fn family_name(family: Family) -> &'static str {
    match family {
        Family::Ipv4 => "ipv4",
        Family::Ipv6 => "ipv6",
        Family::Other => "other",
    }
}

/// Reads every counter of the blocklist pinned in `pin_dir` (no store
/// needed, so this works while another cfctl holds it).
pub fn read_counters(pin_dir: &Path) -> Result<Vec<CounterRecord>> {
    let maps = open_pinned(pin_dir)?;
    let counters = maps.counters()?;
    Ok(Outcome::ALL
        .into_iter()
        .flat_map(|outcome| Family::ALL.map(|family| (outcome, family)))
        .map(|(outcome, family)| {
            let counter = counters.get(outcome, family);
            CounterRecord {
                outcome: outcome_name(outcome),
                family: family_name(family),
                packets: counter.packets,
                bytes: counter.bytes,
            }
        })
        .collect())
}

fn open_pinned(pin_dir: &Path) -> Result<BlocklistMaps> {
    if !pin_dir.join("program").exists() {
        return Err(ControlError::NotAttached(pin_dir.to_owned()));
    }
    Ok(BlocklistMaps::open_pinned(pin_dir)?)
}

/// The active lengths of the live profile.
fn live_lengths(maps: &BlocklistMaps) -> ActiveLengths {
    let profile = maps.live_profile();
    let take = |lengths: &[u8], count: u32| lengths[..(count as usize).min(lengths.len())].to_vec();
    let ipv4 = take(&profile.ipv4_lengths, profile.ipv4_length_count);
    let ipv6 = take(&profile.ipv6_lengths, profile.ipv6_length_count);
    ActiveLengths::new(&ipv4, &ipv6).unwrap_or_default()
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

/// The kernel's index of interface `name`.
fn interface_index(name: &str) -> Result<u32> {
    let c_name = CString::new(name).map_err(|_| ControlError::NoInterface(name.to_owned()))?;
    // SAFETY: a valid NUL-terminated string.
    match unsafe { libc::if_nametoindex(c_name.as_ptr()) } {
        0 => Err(ControlError::NoInterface(name.to_owned())),
        index => Ok(index),
    }
}

/// The OS error code somewhere in `error`'s chain of sources.
fn os_error_code(error: &(dyn std::error::Error + 'static)) -> Option<i32> {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(code) = error
            .downcast_ref::<io::Error>()
            .and_then(io::Error::raw_os_error)
        {
            return Some(code);
        }
        current = error.source();
    }
    None
}

/// Explains a failed attach to `interface`.
fn attach_error(interface: &str, error: LoaderError) -> ControlError {
    match os_error_code(&error) {
        Some(libc::EBUSY | libc::EEXIST) => ControlError::InterfaceBusy(interface.to_owned()),
        Some(libc::EOPNOTSUPP) => ControlError::NativeUnsupported(interface.to_owned()),
        _ => ControlError::Loader(error),
    }
}

/// Makes sure `dir` can be created on a bpffs: mounts bpffs at
/// `/sys/fs/bpf` if the directory is below it and nothing is mounted there.
fn prepare_bpffs(dir: &Path) -> Result<()> {
    let bpffs_error = |source| ControlError::Bpffs {
        path: dir.to_owned(),
        source,
    };
    let root = Path::new(BPFFS_ROOT);
    if dir.starts_with(root) && !is_bpffs(root) {
        if mount_namespace_ends_with_this_process() {
            let namespace = named_network_namespace().unwrap_or_else(|| "NAME".to_owned());
            return Err(bpffs_error(io::Error::other(format!(
                "nothing is mounted on {BPFFS_ROOT}, and this process has a mount namespace of \
                 its own (as under `ip netns exec`, which gives each command its own /sys): a \
                 bpf filesystem mounted now would vanish when cfctl exits, and the attachment \
                 with it; enter only the network namespace instead: \
                 `nsenter --net=/run/netns/{namespace} cfctl ...`"
            ))));
        }
        crate::preload::mount_bpffs(root).map_err(bpffs_error)?;
    }
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir.join(LINKS_DIR))
        .map_err(bpffs_error)?;
    if !is_bpffs(dir) {
        return Err(bpffs_error(io::Error::other(
            "it is not on a bpf filesystem (mount one with `mount -t bpf bpf DIR`)",
        )));
    }
    Ok(())
}

/// Whether a mount made now would vanish when this process exits: it runs
/// in a mount namespace other than init's that no other process shares (as
/// under `ip netns exec NS cfctl`, or `unshare -m cfctl`). In init's mount
/// namespace (also under `nsenter --net`), or in one a shell or service
/// around cfctl lives in, a mount outlives cfctl.
fn mount_namespace_ends_with_this_process() -> bool {
    let Some(own) = namespace_id(Path::new("/proc/self/ns/mnt")) else {
        return false;
    };
    if namespace_id(Path::new("/proc/1/ns/mnt")) == Some(own) {
        return false;
    }
    let own_pid = std::process::id().to_string();
    let Ok(processes) = fs::read_dir("/proc") else {
        return false;
    };
    !processes
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name())
        .filter(|name| name.as_encoded_bytes().iter().all(u8::is_ascii_digit))
        .filter(|name| name.as_encoded_bytes() != own_pid.as_bytes())
        .any(|pid| namespace_id(&Path::new("/proc").join(pid).join("ns/mnt")) == Some(own))
}

/// The (device, inode) pair that identifies the namespace behind a
/// `/proc/PID/ns/*` link.
fn namespace_id(link: &Path) -> Option<(u64, u64)> {
    fs::metadata(link)
        .ok()
        .map(|namespace| (namespace.dev(), namespace.ino()))
}

/// The name in `/run/netns` (where `ip netns` keeps them) of the network
/// namespace this process runs in, if it has one.
fn named_network_namespace() -> Option<String> {
    let own = namespace_id(Path::new("/proc/self/ns/net"))?;
    fs::read_dir("/run/netns")
        .ok()?
        .filter_map(|entry| entry.ok())
        .find(|entry| namespace_id(&entry.path()) == Some(own))
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
}

fn is_bpffs(path: &Path) -> bool {
    let Ok(c_path) = CString::new(path.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: statfs only writes the struct we pass.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid path and a valid out pointer.
    let found = unsafe { libc::statfs(c_path.as_ptr(), &mut stat) } == 0;
    found && stat.f_type as i64 == BPF_FS_MAGIC
}

/// A link pin's file name: `<interface>@<mode>`.
fn link_name(interface: &str, mode: AttachMode) -> String {
    format!("{interface}@{}", mode_name(mode))
}

/// The cfctl control plane of one pin directory and one state directory.
pub struct Control {
    pin_dir: PathBuf,
    store: Store,
}

impl Control {
    /// Opens the store in `state_dir` (waiting up to 30 s for another
    /// cfctl process to finish) for the blocklist pinned in `pin_dir`.
    pub fn open(pin_dir: &Path, state_dir: &Path) -> Result<Self> {
        Self::open_waiting(pin_dir, state_dir, &|_| {})
    }

    /// [`Control::open`], calling `waiting` once with a line saying which
    /// process holds the store if it is still busy after [`STORE_NOTICE`].
    pub fn open_waiting(pin_dir: &Path, state_dir: &Path, waiting: &dyn Fn(&str)) -> Result<Self> {
        let started = Instant::now();
        let mut told = false;
        let store = loop {
            match Store::open(state_dir) {
                Err(StoreError::Busy { path }) => {
                    if started.elapsed() >= STORE_WAIT {
                        let holders = processes_holding(&path);
                        return Err(ControlError::StoreBusy { path, holders });
                    }
                    if !told && started.elapsed() >= STORE_NOTICE {
                        waiting(&format!(
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
            pin_dir: pin_dir.to_owned(),
            store,
        })
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The stored settings, or the defaults.
    pub fn settings(&self) -> Result<FilterSettings> {
        Ok(self.store.settings()?.unwrap_or_default())
    }

    fn save_settings(&self, settings: &FilterSettings) -> Result<()> {
        let mut txn = self.store.begin()?;
        txn.set_settings(settings)?;
        txn.commit()?;
        Ok(())
    }

    fn links_dir(&self) -> PathBuf {
        self.pin_dir.join(LINKS_DIR)
    }

    /// The maps of the pinned blocklist, `None` if nothing is pinned.
    fn pinned_maps(&self) -> Result<Option<BlocklistMaps>> {
        match open_pinned(&self.pin_dir) {
            Ok(maps) => Ok(Some(maps)),
            Err(ControlError::NotAttached(_)) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// The interfaces cfctl has links on, with the link pins' paths.
    fn links(&self) -> Vec<(Attachment, PathBuf)> {
        let Ok(dir) = fs::read_dir(self.links_dir()) else {
            return Vec::new();
        };
        let mut links: Vec<_> = dir
            .filter_map(|entry| entry.ok())
            .filter_map(|entry| {
                let name = entry.file_name().into_string().ok()?;
                let (interface, mode) = name.rsplit_once('@')?;
                let mode = match mode {
                    "native" => "native",
                    "skb" => "skb",
                    _ => return None,
                };
                let attachment = Attachment {
                    interface: interface.to_owned(),
                    mode,
                    present: interface_index(interface).is_ok(),
                };
                Some((attachment, entry.path()))
            })
            .collect();
        links.sort_by(|(a, _), (b, _)| a.interface.cmp(&b.interface));
        links
    }

    /// The interfaces cfctl is attached to.
    pub fn attachments(&self) -> Vec<Attachment> {
        self.links().into_iter().map(|(link, _)| link).collect()
    }

    /// Loads the program (or reuses the pinned one), builds the filter from
    /// the store, and attaches it to every interface in `interfaces` with a
    /// pinned link. Interfaces that have a cfctl link already keep it; the
    /// filter of a pinned program is rebuilt from the store, which repairs
    /// it after an interrupted update.
    pub fn attach(
        &mut self,
        interfaces: &[String],
        mode: AttachMode,
        options: AttachOptions,
    ) -> Result<AttachReport> {
        let mut indexes = Vec::with_capacity(interfaces.len());
        for interface in interfaces {
            indexes.push(interface_index(interface)?);
        }
        // The store is about to become the whole live filter: make sure
        // every page of it is what was written.
        self.store.check_integrity()?;
        let mut settings = self.settings()?;
        let pinned = self.pinned_maps()?;
        if let Some(maps) = &pinned {
            check_compatible(maps, &settings, options)?;
        }
        apply_options(&mut settings, options)?;
        let plan = KeyPlan::build(self.store.nets(ListKind::Blocklist)?, settings.plan_limits)?;
        let loaded = match pinned {
            Some(mut maps) => {
                settings.seed = maps.live_profile().seed;
                tables::install_plan(&mut maps, &plan, settings.seed)
                    .map_err(|error| with_way_out(error, resize_way_out))?;
                maps.set_allowlist(&self.stored_allowlist()?)?;
                apply_live_settings(&maps, &settings);
                false
            }
            None => {
                if settings.seed == 0 {
                    settings.seed = crate::loader::random_seed();
                }
                prepare_bpffs(&self.pin_dir)?;
                let mut blocklist = self.load_filled(&settings, &plan, None)?;
                if let Err(error) = blocklist.pin(&self.pin_dir) {
                    self.remove_pins();
                    return Err(error.into());
                }
                true
            }
        };
        let existing: Vec<String> = self
            .attachments()
            .into_iter()
            .map(|link| link.interface)
            .collect();
        let mut report = AttachReport {
            attached: Vec::new(),
            already_attached: Vec::new(),
            loaded,
            entries: plan.entry_count(),
            keys: plan.key_count(),
        };
        for (interface, &index) in interfaces.iter().zip(&indexes) {
            if existing.contains(interface) || report.attached.contains(interface) {
                report.already_attached.push(interface.clone());
                continue;
            }
            let link = self.links_dir().join(link_name(interface, mode));
            if let Err(error) = attach_pinned_program(&self.pin_dir, index, mode, &link) {
                if loaded && report.attached.is_empty() {
                    self.remove_pins();
                }
                return Err(attach_error(interface, error));
            }
            report.attached.push(interface.clone());
        }
        self.save_settings(&settings)?;
        Ok(report)
    }

    /// Loads a new program sized by `settings`, with `plan` in its filter
    /// and the stored allowlist, mode and policy.
    /// Loads a program for `settings` and fills it with `plan` and the
    /// stored allowlist; it counts into `counters` if given (see
    /// [`Blocklist::load_counting_into`]).
    fn load_filled(
        &self,
        settings: &FilterSettings,
        plan: &KeyPlan,
        counters: Option<&MapData>,
    ) -> Result<Blocklist> {
        let shape = shape_of(settings)?;
        let capacity = usize::try_from(settings.capacity).unwrap_or(usize::MAX);
        let options = LoadOptions {
            seed: settings.seed,
            match_address: settings.match_address,
            ..LoadOptions::for_capacity(shape, capacity).ok_or_else(|| {
                ControlError::InvalidSetting(format!("a capacity of {capacity} keys is too large"))
            })?
        };
        // Keys that cannot fit fail before anything is loaded.
        let slots = options.bucket_count.saturating_mul(shape.slots());
        if plan.key_count() > slots {
            let full = TableOpError::Full {
                wanted: plan.key_count(),
                slots,
            };
            return Err(with_way_out(full, larger_capacity));
        }
        let mut blocklist = match counters {
            Some(counters) => Blocklist::load_counting_into(&options, counters)?,
            None => Blocklist::load(&options)?,
        };
        tables::install_plan(blocklist.maps_mut(), plan, settings.seed)
            .map_err(|error| with_way_out(error, larger_capacity))?;
        apply_live_settings(blocklist.maps(), settings);
        blocklist
            .maps_mut()
            .set_allowlist(&self.stored_allowlist()?)?;
        Ok(blocklist)
    }

    /// The stored allowlist as (address, prefix length) pairs.
    fn stored_allowlist(&self) -> Result<Vec<(IpAddr, u8)>> {
        Ok(address_pairs(&self.store.nets(ListKind::Allowlist)?))
    }

    /// Removes the pinned program and maps: every pin but the links.
    fn unpin_program_and_maps(&self) {
        let Ok(pins) = fs::read_dir(&self.pin_dir) else {
            return;
        };
        for pin in pins.filter_map(|pin| pin.ok()) {
            if pin.file_name() != LINKS_DIR {
                let _ = fs::remove_file(pin.path());
            }
        }
    }

    /// Removes the pinned program and maps and the (empty) directories.
    fn remove_pins(&self) {
        self.unpin_program_and_maps();
        let _ = fs::remove_dir(self.links_dir());
        let _ = fs::remove_dir(&self.pin_dir);
    }

    /// Detaches from `interfaces` (every interface if `None`). When no
    /// interface is left, the program and maps are unpinned too unless
    /// `keep_state`. The store is never touched.
    pub fn detach(
        &mut self,
        interfaces: Option<&[String]>,
        keep_state: bool,
    ) -> Result<DetachReport> {
        let links = self.links();
        let chosen: Vec<&(Attachment, PathBuf)> = match interfaces {
            None => links.iter().collect(),
            Some(names) => {
                let mut chosen = Vec::new();
                for name in names {
                    let link = links
                        .iter()
                        .find(|(link, _)| &link.interface == name)
                        .ok_or_else(|| ControlError::NotAttachedTo(name.clone()))?;
                    chosen.push(link);
                }
                chosen
            }
        };
        let mut report = DetachReport {
            detached: Vec::new(),
            unloaded: false,
        };
        for (link, path) in chosen {
            detach_pinned(path)?;
            report.detached.push(link.interface.clone());
        }
        if self.links().is_empty() && !keep_state && self.pin_dir.exists() {
            self.remove_pins();
            report.unloaded = true;
        }
        Ok(report)
    }

    /// Applies `change` to `list`, in the store and in the live filter; see
    /// the module documentation for the order and what happens on failure.
    pub fn change(
        &mut self,
        list: ListKind,
        change: Change<'_>,
        progress: &dyn Progress,
    ) -> Result<ChangeReport> {
        let mut txn = self.store.begin()?;
        let (change, repeated) = change.without_repeats();
        let mut report = ChangeReport {
            operation: change.operation(),
            repeated,
            added: 0,
            deleted: 0,
            kept: 0,
            already_listed: Vec::new(),
            not_listed: Vec::new(),
            filter: FilterUpdate::NotAttached,
        };
        let (added, removed, replace) = match &change {
            UniqueChange::Add(entries) => {
                progress.start("storing entries", entries.len() as u64);
                let stored = txn.add(list, counted(entries, progress))?;
                report.already_listed = stored.already_listed;
                (stored.added, Vec::new(), false)
            }
            UniqueChange::Delete(nets) => {
                let stored = txn.delete(list, nets.iter().copied())?;
                report.not_listed = stored.missing;
                (Vec::new(), stored.deleted, false)
            }
            UniqueChange::Replace(entries) => {
                progress.start("storing entries", entries.len() as u64);
                let stored = txn.replace(list, counted(entries, progress))?;
                report.kept = stored.kept;
                (stored.added, stored.removed, true)
            }
        };
        report.added = added.len();
        report.deleted = removed.len();
        let Some(mut maps) = self.pinned_maps()? else {
            progress.start("committing", 0);
            txn.commit()?;
            return Ok(report);
        };
        if added.is_empty() && removed.is_empty() {
            report.filter = FilterUpdate::Unchanged;
            txn.commit()?;
            return Ok(report);
        }
        if list == ListKind::Allowlist {
            let (added, removed) = (address_pairs(&added), address_pairs(&removed));
            maps.update_allowlist(&added, &removed)?;
            if let Err(error) = txn.commit() {
                let _ = maps.update_allowlist(&removed, &added);
                return Err(error.into());
            }
            report.filter = FilterUpdate::Allowlist;
            return Ok(report);
        }

        let limits = self.settings()?.plan_limits;
        let seed = maps.live_profile().seed;
        progress.start("planning filter keys", 0);
        let lengths = live_lengths(&maps);
        let incremental = if replace || added.len() >= BULK_ENTRIES {
            None
        } else {
            self.plan_around(&added, &removed, lengths, limits)?
                .map(|mut plan| plan.update(&added, &removed))
        };
        match incremental {
            Some(Ok(diff)) => {
                progress.start("writing the live filter", 0);
                tables::apply_diff(&mut maps, &diff)
                    .map_err(|error| with_way_out(error, resize_way_out))?;
                progress.start("committing", 0);
                if let Err(error) = txn.commit() {
                    let _ = tables::revert_diff(&mut maps, &diff);
                    return Err(error.into());
                }
                // The change is committed and the filter right; should the
                // check fail, the bits stay set, which only costs probes.
                let _ = self.clear_unmarked_bits(&maps, &diff.clear_bits, limits);
                report.filter = FilterUpdate::Incremental {
                    inserted: diff.insert.len(),
                    removed: diff.remove.len(),
                };
            }
            Some(Err(error)) if !matches!(error, PlanError::RebuildNeeded(_)) => {
                return Err(error.into())
            }
            // A bulk change, a rebuild the plan asks for, or a live filter
            // whose lengths no longer fit the store: build it anew.
            _ => {
                let plan = match &change {
                    UniqueChange::Replace(new) => {
                        KeyPlan::build(new.iter().map(|entry| entry.net), limits)?
                    }
                    _ => {
                        let removed: HashSet<IpNet> = removed.into_iter().collect();
                        let committed = self.store.nets(ListKind::Blocklist)?;
                        let kept = committed.into_iter().filter(|net| !removed.contains(net));
                        KeyPlan::build(kept.chain(added), limits)?
                    }
                };
                progress.start("building and swapping in the new filter", 0);
                tables::install_plan(&mut maps, &plan, seed)
                    .map_err(|error| with_way_out(error, resize_way_out))?;
                progress.start("committing", 0);
                if let Err(error) = txn.commit() {
                    self.rebuild(&mut maps, limits, seed);
                    return Err(error.into());
                }
                report.filter = FilterUpdate::Rebuilt {
                    keys: plan.key_count(),
                };
            }
        }
        Ok(report)
    }

    /// A plan of the committed entries that can share a filter key with
    /// `added` or `removed` under the live `lengths`: enough for an exact
    /// diff of that change, without reading the whole store. An entry `E`
    /// shares a key with a changed entry `N` only if both expand to the
    /// same active length and one contains the other, so the candidates are
    /// `N`'s prefixes down to just above the next shorter active length and
    /// `N`'s subnets down to its target length. `None` when there are too
    /// many candidates (then the caller rebuilds from the whole store).
    fn plan_around(
        &self,
        added: &[IpNet],
        removed: &[IpNet],
        lengths: ActiveLengths,
        limits: PlanLimits,
    ) -> Result<Option<KeyPlan>> {
        const MAX_CANDIDATES: usize = 1 << 20;
        let mut candidates = Vec::new();
        for net in added.iter().chain(removed) {
            let active = lengths.get(crate::plan::family_of(net));
            let len = net.prefix_len();
            let Some(target) = active.iter().rev().copied().find(|&active| active >= len) else {
                continue;
            };
            let shortest = active
                .iter()
                .copied()
                .find(|&active| active < target)
                .map_or(0, |floor| floor + 1);
            let expansion = 1usize.checked_shl(u32::from(target - len) + 1);
            if expansion.is_none_or(|size| candidates.len() + size > MAX_CANDIDATES) {
                return Ok(None);
            }
            candidates.extend(prefixes_of(net.network(), shortest..=len));
            for sub_len in len + 1..=target {
                candidates.extend(net.subnets(sub_len).into_iter().flatten());
            }
        }
        let sharing = self.store.existing(ListKind::Blocklist, candidates)?;
        match KeyPlan::with_lengths(sharing, lengths, limits) {
            Ok(plan) => Ok(Some(plan)),
            Err(PlanError::RebuildNeeded(_)) => Ok(None),
            Err(error) => Err(error.into()),
        }
    }

    /// Clears those of `candidates`, the prefilter bits that a plan of the
    /// entries around a committed change no longer needs, that no stored
    /// entry needs: each is checked against a plan of every entry that can
    /// mark it. For an IPv4 bit (one /16 block) those are the entries
    /// inside the block and the prefixes that contain it; IPv6 blocks share
    /// bytes by hash, so for IPv6 bits they are all IPv6 entries, and the
    /// bits stay set when there are more than [`MAX_IPV6_SCAN`] (a stale
    /// bit costs one probe, never a wrong answer).
    fn clear_unmarked_bits(
        &self,
        maps: &BlocklistMaps,
        candidates: &[PrefilterBit],
        limits: PlanLimits,
    ) -> Result<()> {
        if candidates.is_empty() {
            return Ok(());
        }
        let mut markers = HashSet::new();
        let mut ipv4_blocks = HashSet::new();
        let mut check_ipv6 = false;
        for bit in candidates {
            match bit.family {
                AddressFamily::Ipv4 => {
                    if ipv4_blocks.insert(bit.block) {
                        let first = IpAddr::V4(Ipv4Addr::from(bit.block << 16));
                        let block = IpNet::new_assert(first, 16);
                        let containing = prefixes_of(first, 0..16);
                        markers.extend(self.store.nets_within(ListKind::Blocklist, &block)?);
                        markers.extend(self.store.existing(ListKind::Blocklist, containing)?);
                    }
                }
                AddressFamily::Ipv6 => check_ipv6 = true,
            }
        }
        if check_ipv6 {
            let every_ipv6 = IpNet::V6(Ipv6Net::default());
            let ipv6 = self.store.nets_within(ListKind::Blocklist, &every_ipv6)?;
            check_ipv6 = ipv6.len() <= MAX_IPV6_SCAN;
            if check_ipv6 {
                markers.extend(ipv6);
            }
        }
        let plan = KeyPlan::with_lengths(markers, live_lengths(maps), limits)?;
        let unmarked: Vec<PrefilterBit> = candidates
            .iter()
            .copied()
            .filter(|bit| bit.family == AddressFamily::Ipv4 || check_ipv6)
            .filter(|&bit| plan.bit_references(bit) == 0)
            .collect();
        maps.clear_prefilter_bits(&unmarked);
        Ok(())
    }

    /// Best effort after a failed commit: the filter of the committed store.
    fn rebuild(&self, maps: &mut BlocklistMaps, limits: PlanLimits, seed: u64) {
        if let Ok(plan) = self
            .store
            .nets(ListKind::Blocklist)
            .map_err(ControlError::from)
            .and_then(|nets| Ok(KeyPlan::build(nets, limits)?))
        {
            let _ = tables::install_plan(maps, &plan, seed);
        }
    }

    /// The entries of `list` that contain `address`, longest first.
    fn covering(&self, list: ListKind, address: IpAddr) -> Result<Vec<Entry>> {
        let max = match address {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        let prefixes = prefixes_of(address, (0..=max).rev());
        let mut covering = Vec::new();
        for net in self.store.existing(list, prefixes)? {
            covering.extend(self.store.entry(list, &net)?);
        }
        Ok(covering)
    }

    /// Which entries cover `address`, and what the live filter says.
    pub fn check(&self, address: IpAddr) -> Result<CheckResult> {
        let covering = self.covering(ListKind::Blocklist, address)?;
        let allowlisted = self.covering(ListKind::Allowlist, address)?;
        let mut result = CheckResult {
            address,
            verdict: "not_attached",
            covering: Vec::new(),
            allowlisted: allowlisted.into_iter().map(EntryRecord::from).collect(),
            filter_hit: None,
        };
        if let Some(mut maps) = self.pinned_maps()? {
            let limits = PlanLimits {
                ipv4_lengths: blocklist_ebpf::MAX_PREFIX_LENGTHS,
                ipv6_lengths: blocklist_ebpf::MAX_PREFIX_LENGTHS,
                max_keys: u64::MAX,
            };
            let probes =
                KeyPlan::with_lengths([], live_lengths(&maps), limits)?.probe_keys(address);
            let hits = tables::live_contains(&mut maps, &probes)?;
            let report = CheckReport {
                address,
                covering: covering.iter().map(|entry| entry.net).collect(),
                filter_hit: probes
                    .iter()
                    .zip(hits)
                    .find_map(|(key, hit)| hit.then_some(*key)),
            };
            result.verdict = match report.verdict() {
                CheckVerdict::Listed => "listed",
                CheckVerdict::NotListed => "not_listed",
                CheckVerdict::FalsePositive => "false_positive",
                CheckVerdict::MissingFromFilter => "missing_from_filter",
            };
            result.filter_hit = report.filter_hit.map(|key| describe_key(&key));
        }
        result.covering = covering.into_iter().map(EntryRecord::from).collect();
        Ok(result)
    }

    /// Recomputes the filter keys from the store with the live active
    /// lengths and compares them with the live table.
    pub fn verify(&mut self) -> Result<VerifyReport> {
        let mut maps = open_pinned(&self.pin_dir)?;
        self.store.check_integrity()?;
        let settings = self.settings()?;
        let nets = self.store.nets(ListKind::Blocklist)?;
        let mut report = VerifyReport {
            entries: nets.len(),
            keys: 0,
            fingerprints: tables::live_summary(&mut maps)?.fingerprints,
            missing_keys: 0,
            stale_prefilter_bits: 0,
            problems: Vec::new(),
        };
        let plan = match KeyPlan::with_lengths(nets, live_lengths(&maps), settings.plan_limits) {
            Ok(plan) => plan,
            Err(error) => {
                report.problems.push(format!(
                    "the live active prefix lengths cannot hold the stored entries: {error}"
                ));
                return Ok(report);
            }
        };
        report.keys = plan.key_count();
        let (live, exact) = (maps.live_prefilter(), plan.prefilter());
        report.stale_prefilter_bits = [AddressFamily::Ipv4, AddressFamily::Ipv6]
            .into_iter()
            .flat_map(|family| live.masks(family).iter().zip(exact.masks(family)))
            .map(|(live, exact)| (live & !exact).count_ones() as usize)
            .sum();
        let keys: Vec<_> = plan.keys().copied().collect();
        report.missing_keys = tables::live_contains(&mut maps, &keys)?
            .into_iter()
            .filter(|present| !present)
            .count();
        if report.missing_keys > 0 {
            report.problems.push(format!(
                "{} of {} filter keys are missing from the live filter",
                report.missing_keys, report.keys
            ));
        }
        if report.fingerprints != report.keys {
            report.problems.push(format!(
                "the live filter holds {} fingerprints for {} keys",
                report.fingerprints, report.keys
            ));
        }
        if maps.live_profile().seed != settings.seed {
            report
                .problems
                .push("the live filter's seed is not the stored one".to_owned());
        }
        Ok(report)
    }

    /// The state of everything.
    pub fn status(&self) -> Result<Status> {
        let settings = self.settings()?;
        let mut status = Status {
            pin_dir: self.pin_dir.clone(),
            store: self.store.path().to_owned(),
            loaded: false,
            interfaces: self.attachments(),
            mode: match settings.mode {
                Mode::Enforce => "enforce",
                Mode::Monitor => "monitor",
            },
            policy: match settings.policy {
                Policy::Deny => "deny",
                Policy::Allow => "allow",
            },
            match_address: match settings.match_address {
                MatchAddress::Source => "src",
                MatchAddress::Destination => "dst",
            },
            capacity: settings.capacity,
            fingerprint_bits: settings.fingerprint_bits,
            entries: self.store.entry_count(ListKind::Blocklist)?,
            allowlist_entries: self.store.entry_count(ListKind::Allowlist)?,
            ipv4_lengths: Vec::new(),
            ipv6_lengths: Vec::new(),
            filter: None,
            ipv4_packet_fpr: None,
            ipv6_packet_fpr: None,
        };
        if let Some(mut maps) = self.pinned_maps()? {
            let config = maps.config();
            status.loaded = true;
            status.mode = if config.mode == blocklist_ebpf::mode::MONITOR {
                "monitor"
            } else {
                "enforce"
            };
            status.policy = if config.policy == blocklist_ebpf::policy::ALLOW {
                "allow"
            } else {
                "deny"
            };
            status.fingerprint_bits = maps.shape().fingerprint_bits();
            let lengths = live_lengths(&maps);
            let summary = tables::live_summary(&mut maps)?;
            let per_packet = |probes: usize| 1.0 - (1.0 - summary.expected_fpr).powi(probes as i32);
            status.ipv4_packet_fpr = Some(per_packet(lengths.ipv4().len()));
            status.ipv6_packet_fpr = Some(per_packet(lengths.ipv6().len()));
            status.ipv4_lengths = lengths.ipv4().to_vec();
            status.ipv6_lengths = lengths.ipv6().to_vec();
            status.filter = Some(summary);
        }
        Ok(status)
    }

    /// Switches between enforce and monitor mode (live and stored).
    pub fn set_mode(&mut self, mode: Mode) -> Result<()> {
        let mut settings = self.settings()?;
        settings.mode = mode;
        if let Some(maps) = self.pinned_maps()? {
            maps.set_mode(mode);
        }
        self.save_settings(&settings)
    }

    /// Loads a program whose filter holds `capacity` keys, fills it from the
    /// store, and swaps it in on every link atomically (each link switches
    /// from the old program to the new one; both hold every entry), then
    /// pins it in place of the old one. The new program counts into the old
    /// one's counter map, so the counts go on.
    pub fn resize(&mut self, capacity: u64) -> Result<TableSummary> {
        let old = open_pinned(&self.pin_dir)?;
        check_capacity(capacity, old.shape())?;
        let mut settings = self.settings()?;
        settings.capacity = capacity;
        settings.fingerprint_bits = old.shape().fingerprint_bits();
        settings.seed = old.live_profile().seed;
        let plan = KeyPlan::build(self.store.nets(ListKind::Blocklist)?, settings.plan_limits)?;
        let mut blocklist = self.load_filled(&settings, &plan, Some(old.counters_map()?))?;
        let config = old.config();
        blocklist
            .maps()
            .set_mode(if config.mode == blocklist_ebpf::mode::MONITOR {
                Mode::Monitor
            } else {
                Mode::Enforce
            });
        for (_, link) in self.links() {
            blocklist.take_over_pinned_link(&link)?;
        }
        self.unpin_program_and_maps();
        blocklist.pin(&self.pin_dir)?;
        self.save_settings(&settings)?;
        Ok(tables::live_summary(blocklist.maps_mut())?)
    }
}

/// Counts entries through `progress` as they are stored.
fn counted<'a>(
    entries: &'a [NewEntry<'a>],
    progress: &'a dyn Progress,
) -> impl Iterator<Item = NewEntry<'a>> + 'a {
    entries.iter().enumerate().map(move |(index, entry)| {
        if index % 4096 == 4095 {
            progress.advance(4096);
        }
        *entry
    })
}

/// The prefixes of `address` at each of `lengths` (those longer than the
/// address are skipped).
fn prefixes_of(
    address: IpAddr,
    lengths: impl IntoIterator<Item = u8>,
) -> impl Iterator<Item = IpNet> {
    lengths
        .into_iter()
        .filter_map(move |len| IpNet::new(address, len).ok().map(|net| net.trunc()))
}

/// Networks as the (address, prefix length) pairs the allowlist takes.
fn address_pairs(nets: &[IpNet]) -> Vec<(IpAddr, u8)> {
    nets.iter()
        .map(|net| (net.network(), net.prefix_len()))
        .collect()
}

/// The fingerprint shape of `settings`.
fn shape_of(settings: &FilterSettings) -> Result<FilterShape> {
    FilterShape::from_bits(settings.fingerprint_bits).ok_or_else(|| {
        ControlError::InvalidSetting(format!(
            "fingerprints are 8, 16 or 32 bits wide, not {}",
            settings.fingerprint_bits
        ))
    })
}

/// Applies `options` to `settings`.
fn apply_options(settings: &mut FilterSettings, options: AttachOptions) -> Result<()> {
    if let Some(capacity) = options.capacity {
        settings.capacity = capacity;
    }
    if let Some(bits) = options.fingerprint_bits {
        settings.fingerprint_bits = bits;
    }
    check_capacity(settings.capacity, shape_of(settings)?)?;
    if let Some(match_address) = options.match_address {
        settings.match_address = match_address;
    }
    if let Some(policy) = options.policy {
        settings.policy = policy;
    }
    Ok(())
}

/// Refuses options that the pinned program cannot take without a reload.
fn check_compatible(
    maps: &BlocklistMaps,
    settings: &FilterSettings,
    options: AttachOptions,
) -> Result<()> {
    let bits = maps.shape().fingerprint_bits();
    if options
        .fingerprint_bits
        .is_some_and(|wanted| wanted != bits)
    {
        return Err(ControlError::Conflict(format!(
            "the attached filter has {bits}-bit fingerprints; `cfctl detach --all` first to \
             change the width"
        )));
    }
    if options
        .match_address
        .is_some_and(|wanted| wanted != settings.match_address)
    {
        return Err(ControlError::Conflict(
            "the attached program matches the other address; `cfctl detach --all` first to \
             change --match"
                .to_owned(),
        ));
    }
    if options
        .capacity
        .is_some_and(|wanted| wanted != settings.capacity)
    {
        return Err(ControlError::Conflict(format!(
            "the attached filter is sized for {} keys; use `cfctl resize --capacity N` to change \
             its size",
            settings.capacity
        )));
    }
    Ok(())
}

/// Writes the mode and policy of `settings` into the live config.
fn apply_live_settings(maps: &BlocklistMaps, settings: &FilterSettings) {
    maps.set_mode(settings.mode);
    maps.set_policy(settings.policy);
}

/// `198.18.0.0/24`-style text for a filter key.
fn describe_key(key: &filter_core::NetKey) -> String {
    let [_, first, second] = *key.words();
    let net = match key.family() {
        filter_core::AddressFamily::Ipv4 => {
            IpNet::new(IpAddr::V4((first as u32).into()), key.prefix_len())
        }
        filter_core::AddressFamily::Ipv6 => IpNet::new(
            IpAddr::V6((u128::from(first) << 64 | u128::from(second)).into()),
            key.prefix_len(),
        ),
    };
    net.map_or_else(|_| format!("{key:?}"), |net| net.to_string())
}
