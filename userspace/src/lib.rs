//! The userspace side of the cuckoo-filter blocklist, and the library
//! behind `cfctl`.
//!
//! # Rooms
//!
//! | module | what it owns |
//! |---|---|
//! | [`blocklist`] | parsing FireHOL, Spamhaus and plain lists (streamed, bounded) |
//! | [`text`] | text from outside: its bounds, and escaping for output and export |
//! | [`store`] | the source of truth: the exact entries and settings, in a crash-safe redb file |
//! | [`plan`] | entries to reference-counted filter keys: prefix lengths, exact diffs, prefilter bits, `check` |
//! | [`filter`] | filters built in process memory from keys, for every fingerprint shape |
//! | [`xdp`] | everything that touches the XDP program and its maps, behind [`xdp::LiveFilter`] and [`xdp::PinDir`] |
//! | [`device`] | the client of the firmware's serial protocol |
//! | [`control`] | the control plane: moves entries from a source through the store and the plan to a live filter or a device |
//! | [`agent`] | the long-running service: feeds, expiry and metrics scheduled around `control` |
//!
//! Imports run one way: `control` uses `store`, `plan`, `filter`, `xdp` and
//! `device`; `xdp` and `device` use `plan` and `filter`; those use
//! `filter-core` and the map ABI (`cfxdp`). `agent` sits on top
//! of `control` and uses nothing below it but the store's read side. `cfctl` (the binary)
//! parses the command line, calls `control` and prints reports.
//!
//! # How an update flows
//!
//! ```text
//! CLI arguments, a list file     (blocklist, text)
//!        |
//!        v
//! store transaction              (store: the change recorded, not committed)
//!        |
//!        v
//! key plan -> exact diff         (plan: keys whose reference count left or reached zero)
//!        |
//!        v
//! live filter: inserts           (xdp::LiveFilter, before the commit)
//!        |
//!        v
//! commit                         (store)
//!        |
//!        v
//! live filter: removes, bits     (xdp::LiveFilter, after the commit)
//! ```
//!
//! so the live filter always holds every key the committed store needs
//! (`control::update` explains the order and the crash marker). A device
//! takes a whole filter built by [`filter`] as a snapshot, or single keys.
//!
//! # Where a new source of entries plugs in
//!
//! A source (the command line, a file, an HTTP feed, a CrowdSec Local API)
//! only differs in how entries arrive: it produces [`store::NewEntry`]
//! values and hands them to [`control::Control::change`], which runs the
//! path above. It never touches the store's tables, the plan or the maps
//! itself.

pub mod agent;
pub mod control;
pub mod device;
pub mod filter;
pub mod netlist;
pub mod paths;
pub mod plan;
pub mod setting_names;
pub mod sources;
pub mod store;
pub mod text;
pub mod time;
pub mod xdp;

pub use cfxdp::packet::MAX_VLAN_TAGS;
pub use cfxdp::{
    Family, FilterProfile, FilterShape, MalformedAction, MatchAddress, Mode, Outcome, Policy,
    Setting,
};
