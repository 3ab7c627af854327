//! Why a control-plane operation failed: [`ControlError`], one variant per
//! thing a user can act on, each message saying what to do.

use std::path::PathBuf;

use ipnet::IpNet;

use crate::plan::PlanError;
use crate::store::StoreError;
use crate::xdp::XdpError;

/// Why a control-plane operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Another process kept the store for longer than cfctl waits.
    #[error(
        "the state store {} is still in use by another cfctl ({holders}) after {seconds} s; try \
         again when it has finished",
        .path.display()
    )]
    StoreBusy {
        /// The store file.
        path: PathBuf,
        /// Who has it open.
        holders: String,
        /// How long cfctl waited.
        seconds: u64,
    },
    /// No store in the state directory, for a command that only reads one.
    #[error(
        "no cfctl store in {}: nothing was added there yet, or --state-dir names the wrong \
         directory",
        .0.display()
    )]
    NoStore(PathBuf),
    /// Loading, attaching or a map operation failed.
    #[error(transparent)]
    Xdp(#[from] XdpError),
    /// The entries cannot be planned.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// Nothing is pinned in the pin directory.
    #[error("no blocklist is attached (nothing pinned in {}); run `cfctl attach IFACE` first", .0.display())]
    NotAttached(PathBuf),
    /// A program is pinned but a map pin is missing or unusable, or was
    /// made by another version of cfctl.
    #[error(
        "the blocklist pinned in {} is incomplete or from another cfctl version ({source}); \
         `cfctl attach IFACE` loads it again from the store and takes over its links with no \
         gap",
        .pin_dir.display()
    )]
    Incomplete {
        /// The pin directory.
        pin_dir: PathBuf,
        /// What could not be opened.
        source: Box<XdpError>,
    },
    /// The pinned filter was built from another store.
    #[error(
        "the blocklist pinned in {} was built from another store than {} (a wrong --state-dir, \
         or a store replaced since): use the right --state-dir, or add --force to rebuild the \
         pinned filter from this store",
        .pin_dir.display(),
        .store.display()
    )]
    OtherStore {
        /// The pin directory.
        pin_dir: PathBuf,
        /// The store file.
        store: PathBuf,
    },
    /// An empty store would empty a pinned filter that holds keys.
    #[error(
        "the store {} lists nothing, but the filter pinned in {} holds {keys} keys: add --force \
         to empty it",
        .store.display(),
        .pin_dir.display()
    )]
    EmptyStore {
        /// The store file.
        store: PathBuf,
        /// The pin directory.
        pin_dir: PathBuf,
        /// Fingerprints in the pinned filter.
        keys: usize,
    },
    /// Another process reads the sampled drops and did not let them go.
    #[error(
        "another cfctl reads the sampled drops (it holds {}); only one reader gets them, \
         try again when it ends",
        lock.display()
    )]
    SamplesBusy {
        /// The reader lock.
        lock: PathBuf,
    },
    /// The reader lock of the sampled drops cannot be opened.
    #[error("cannot open the sampled drops' reader lock {}: {source}", lock.display())]
    SamplesLock {
        /// The reader lock.
        lock: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// cfctl has no link on the interface.
    #[error("cfctl is not attached to '{0}'")]
    NotAttachedTo(String),
    /// Another XDP program holds the interface.
    #[error(
        "interface '{interface}' already has another XDP program attached, {holder}, which \
         takes its whole XDP hook: attach with `--hook tc` to run beside it, or remove it \
         first (for example `ip link set dev {interface} xdp off`)"
    )]
    InterfaceBusy {
        /// The interface.
        interface: String,
        /// The program there, as far as rtnetlink and the kernel say.
        holder: String,
    },
    /// The kernel has no tcx links, which the TC hook is attached with.
    #[error(
        "cannot attach to the TC hook of '{interface}' with a tcx link: this kernel ({kernel}) \
         has none (Linux 6.6 or later); attach with `--mode clsact` (a filter on the clsact \
         qdisc), or on the XDP hook (`--hook xdp`, `--mode skb` where the driver lacks XDP)"
    )]
    TcxUnsupported {
        /// The interface.
        interface: String,
        /// The kernel's release.
        kernel: String,
    },
    /// The driver refuses native XDP at the interface's MTU.
    #[error(
        "the driver of '{interface}' refuses native XDP at its MTU{mtu}: native XDP needs \
         frames that fit a page (a veth checks its peer's MTU too); lower the MTU (`ip link set \
         dev {interface} mtu 1500`) or attach with `--mode skb`",
        mtu = .mtu.map(|mtu| format!(" ({mtu})")).unwrap_or_default()
    )]
    NativeMtu {
        /// The interface.
        interface: String,
        /// Its MTU, if it could be read.
        mtu: Option<u32>,
    },
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
    /// An invalid setting.
    #[error("{0}")]
    InvalidSetting(String),
    /// A filter table larger than `--max-memory` allows.
    #[error(
        "a filter for {capacity} keys takes {needed}, more than --max-memory {ceiling} allows; \
         nothing changed (`cfctl attach IFACE --max-memory SIZE` raises the ceiling, `none` lifts it)"
    )]
    OverMemoryCeiling {
        /// The keys the filter would be sized for.
        capacity: u64,
        /// Its table's size.
        needed: bytesize::ByteSize,
        /// The ceiling.
        ceiling: bytesize::ByteSize,
    },
    /// An entry for every address of a family, without `--force`.
    #[error(
        "{net} covers every {family} address; add --force if that is what you mean",
        net = .0,
        family = if .0.addr().is_ipv4() { "IPv4" } else { "IPv6" }
    )]
    WholeFamily(IpNet),
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
}

/// The result of control-plane operations.
pub type Result<T, E = ControlError> = std::result::Result<T, E>;
