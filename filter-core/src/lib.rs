//! `filter-core`: approximate set membership that is tiny, fast and
//! deletable, for microcontrollers, eBPF programs and servers alike.
//!
//! * [`CuckooFilter`]: a cuckoo filter (Fan et al., 2014) generic in its
//!   fingerprint type (`u8`, `u16`, `u32`), slots per bucket (1, 2, 4, 8)
//!   and storage; [`StaticCuckooFilter`] is the `const fn`-built array
//!   version that can live in a `static`. Its probes load both candidate
//!   buckets, then compare them branch-free; [`batch`] looks up many keys
//!   with their cache misses overlapping.
//! * [`GrowableCuckooFilter`]: levels of cuckoo filters that grow like
//!   RedisBloom's (`CF.RESERVE … EXPANSION e`), over storage the caller
//!   provides per level ([`growable`]).
//! * [`BloomFilter`] and [`CountingBloomFilter`] (4-bit sticky counters),
//!   likewise over any word storage, with `Static…` array versions.
//! * [`KeyedHasher`] and [`NetKey`]: the seeded hash, for any `Hash` item
//!   and for IPv4/IPv6 prefixes on a fixed-size, verifier-friendly path.
//! * [`layout`]: the stable byte layout of a cuckoo table and the probe code
//!   that the XDP program runs on map memory.
//! * [`sizing`]: `const fn` sizing for a capacity and false-positive rate.
//! * [`snapshot`]: a versioned, CRC-checked byte format, whole or chunked.
//!
//! `#![no_std]`, no allocator, no `unsafe`, and no panic reachable from the
//! public API (enforced by clippy lints). Features: `defmt` adds
//! `defmt::Format` to every public type; `protocol` the serial wire
//! protocol; `alloc` (still `no_std`, with `extern crate alloc`) the
//! `Vec`-backed [`growable::VecGrowableCuckooFilter`] that allocates each
//! new level.
//!
//! ```
//! use filter_core::StaticCuckooFilter;
//!
//! // 1024 buckets of 4 sixteen-bit fingerprints: 8 KiB, about 3,900 items.
//! static mut BLOCKLIST: StaticCuckooFilter<u16, 4, 1024> = StaticCuckooFilter::new(0);
//!
//! let mut filter = StaticCuckooFilter::<u16, 4, 1024>::new(0x5eed);
//! filter.insert(&"198.18.0.1").unwrap();
//! assert!(filter.contains(&"198.18.0.1"));
//! assert!(filter.remove(&"198.18.0.1"));
//! assert!(!filter.contains(&"198.18.0.1"));
//! ```
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

#[cfg(feature = "alloc")]
extern crate alloc;

pub mod batch;
pub mod bloom;
pub mod cuckoo;
pub mod fingerprint;
pub mod growable;
pub mod hash;
pub mod layout;
pub mod math;
pub mod netkey;
#[cfg(feature = "protocol")]
pub mod protocol;
pub mod sizing;
pub mod snapshot;
mod swar;

pub use batch::ContainsMany;
pub use bloom::{
    BloomFilter, CountingBloomFilter, PackedBloom, RemoveError, StaticBloomFilter,
    StaticCountingBloomFilter,
};
pub use cuckoo::{CuckooFilter, InsertError, StaticCuckooFilter, StorageError};
pub use fingerprint::Fingerprint;
pub use growable::{
    ArenaLevels, GrowError, GrowableCuckooFilter, GrowableSnapshotError, LevelStorage,
    ReserveParams,
};
#[cfg(feature = "alloc")]
pub use growable::{HeapLevels, VecGrowableCuckooFilter};
pub use hash::{KeyHash, KeyedHasher};
pub use layout::{BucketStorage, Location};
pub use netkey::{AddressFamily, NetKey};
pub use snapshot::{SnapshotError, SnapshotExporter, SnapshotHeader, SnapshotLoader};

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeExamples;
