//! cfctl: the control plane of the XDP cuckoo-filter blocklist and of
//! filter devices, and the library behind the `cfctl` command.
//!
//! # Rooms
//!
//! Each room is a module whose documentation opens with what it keeps. A
//! room imports only the rooms this table allows (every room may use the
//! map ABI re-exported here from `cfxdp`, and the crates `filter-core` and
//! `cfxdp`); `tests/rooms.rs` reads the table and fails when the code
//! imports a room it does not name, or when files import each other in a
//! circle.
//!
//! <!-- rooms -->
//! | room | what it owns | may import |
//! |---|---|---|
//! | [`text`] | text from outside: its bounds, and escaping for output and export | |
//! | [`time`] | points in time as Unix seconds and milliseconds | |
//! | [`paths`] | the default paths | |
//! | [`setting_names`] | the ABI's settings by name, in serde | |
//! | [`netlist`] | parsing FireHOL, Spamhaus and plain lists (streamed, bounded), and the line `export` writes | `text` |
//! | [`store`] | the source of truth: the exact entries and every owner's state, in a crash-safe redb file | `time` |
//! | [`filter`] | filters built in process memory from keys, for every fingerprint shape | |
//! | [`plan`] | entries to reference-counted filter keys: prefix lengths, exact diffs, prefilter bits | `filter` |
//! | [`xdp`] | everything that touches the XDP program and its maps, behind [`xdp::LiveFilter`] and [`xdp::PinDir`] | `plan`, `filter` |
//! | [`device`] | the client of the firmware's serial protocol | `plan`, `filter` |
//! | [`drops`] | the attribution of sampled drops to sources, entries, addresses and interfaces; their frames as pcap | `store`, `setting_names`, `time` |
//! | [`control`] | the one update path: from a source through the store and the plan to a live filter or a device; status, check, verify | `store`, `plan`, `filter`, `xdp`, `device`, `drops`, `setting_names`, `text`, `time` |
//! | [`sources`] | where entries come from: the command line, files, feeds, a Local API, each in its own module | `control`, `drops`, `store`, `netlist`, `filter`, `text`, `time` |
//! | [`agent`] | the long-running service: a scheduler of the sources, the expiry sweep, metrics | `sources`, `control`, `drops`, `store`, `text`, `time` |
//! | `cfctl` (the binary) | the command line, reports, and the verbs on XDP and on devices | `agent`, `sources`, `control`, `drops`, `netlist`, `paths`, `text`, `time` |
//! <!-- /rooms -->
//!
//! # How an update flows
//!
//! ```text
//! a source: CLI arguments, a list file, a feed, a LAPI    (sources, netlist)
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
//! A source only differs in how entries arrive: it produces
//! [`store::NewEntry`] values and hands them to [`control::Control::change`],
//! which runs the path above; it never touches the store's tables, the
//! plan or the maps itself. A kind of source the agent runs is one module
//! of [`sources`] and one line in [`sources::KINDS`] (see [`sources`]).

// The crate is an application, and its documentation is for the people who
// work on it: `./x test` builds it with `--document-private-items`, so a
// public item's documentation may link to the private items it rests on.
#![allow(rustdoc::private_intra_doc_links)]

pub mod agent;
pub mod control;
pub mod device;
pub mod drops;
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
    DropEvent, Family, FilterProfile, FilterShape, MalformedAction, MatchAddress, Mode, Outcome,
    Policy, ProgramHook, Setting, TrafficDirection, NO_PREFIX,
};
