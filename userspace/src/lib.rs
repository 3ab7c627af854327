//! Userspace side of the XDP blocklist: load the eBPF program, attach it to
//! interfaces, pin it, and keep its filter, allowlist and config current.
//!
//! * [`loader`]: load, attach (native or SKB), detach, pin and reopen the
//!   program's maps; config, prefix lengths, allowlist, counters, and the
//!   atomic whole-filter swap. Its documentation explains the map design.
//! * [`blocklist`]: parse FireHOL, Spamhaus and plain blocklist files.
//! * [`store`]: the persisted, transactional set of entries and settings.
//! * [`plan`]: entries to reference-counted filter keys, exact add/delete
//!   diffs and `check`.
//! * [`device`]: the client of the firmware's serial protocol.
//! * [`control`]: the control plane behind `cfctl`: store, plan and live
//!   filter kept in step; attach, detach, updates, check, verify, resize;
//!   and the same verbs on a device.
//! * [`filter_table`]: a filter table in BPF map memory that `filter-core`'s
//!   `CuckooFilter` runs on directly.
//! * [`mapped`]: mmapped BPF array memory.
//! * [`preload`]: the outer filter map, created before the object loads.
//! * [`test_run`]: a safe `BPF_PROG_TEST_RUN` wrapper.
//!
//! The filter's bytes, hash and key encoding come from `filter-core`; the
//! maps' layout from the `blocklist-ebpf` crate's library.

pub mod blocklist;
pub mod control;
pub mod device;
pub mod filter_table;
pub mod loader;
pub mod mapped;
pub mod plan;
pub mod preload;
pub mod store;
pub mod test_run;
pub mod text;

pub use blocklist_ebpf::{Family, FilterProfile, FilterShape, Outcome};
pub use filter_table::FilterTable;
pub use loader::{AttachMode, Blocklist, BlocklistMaps, LoadOptions, MatchAddress};
