//! A blocklist in a `static` cuckoo filter, as firmware would keep it:
//! insert network prefixes, probe addresses once per active prefix length
//! (longest first, as the XDP program does), delete, and move the filter
//! through a snapshot.
//!
//! `cargo run --release -p filter-core --example blocklist`
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::net::Ipv4Addr;
use std::sync::Mutex;

use filter_core::{NetKey, StaticCuckooFilter};

/// 4,096 slots of 16-bit fingerprints: 8 KiB.
type Blocklist = StaticCuckooFilter<u16, 4, 1024>;

static BLOCKLIST: Mutex<Blocklist> = Mutex::new(Blocklist::new(0));

const LISTED: [(Ipv4Addr, u8); 4] = [
    (Ipv4Addr::new(198, 18, 0, 0), 24),
    (Ipv4Addr::new(198, 18, 7, 0), 28),
    (Ipv4Addr::new(198, 19, 1, 1), 32),
    (Ipv4Addr::new(198, 19, 128, 0), 17),
];

fn key(address: Ipv4Addr, prefix_len: u8) -> NetKey {
    NetKey::ipv4(address.into(), prefix_len).expect("prefix length <= 32")
}

/// The longest listed prefix length that covers `address`, if any.
fn lookup(filter: &Blocklist, address: Ipv4Addr, active_lengths: &[u8]) -> Option<u8> {
    active_lengths
        .iter()
        .copied()
        .find(|&len| filter.contains_hash(key(address, len).hash(filter.seed())))
}

fn main() {
    let mut guard = BLOCKLIST.lock().unwrap();
    let filter = &mut *guard;
    filter.reseed(0x5eed_cafe);
    for (address, len) in LISTED {
        filter
            .insert_hash(key(address, len).hash(filter.seed()))
            .unwrap();
    }
    let mut active_lengths: Vec<u8> = LISTED.iter().map(|&(_, len)| len).collect();
    active_lengths.sort_unstable_by(|a, b| b.cmp(a));
    active_lengths.dedup();

    for address in [
        "198.18.0.77",
        "198.18.7.9",
        "198.18.7.200",
        "198.19.200.1",
        "198.19.1.1",
    ] {
        let address: Ipv4Addr = address.parse().unwrap();
        match lookup(filter, address, &active_lengths) {
            Some(len) => println!("{address:<15} listed (/{len})"),
            None => println!("{address:<15} not listed"),
        }
    }
    println!(
        "{} prefixes, {} slots, load {:.4}, expected false-positive rate {:.2e}",
        filter.len(),
        filter.capacity(),
        filter.load_factor(),
        filter.expected_fpr()
    );

    let (address, len) = LISTED[2];
    filter.remove_hash(key(address, len).hash(filter.seed()));
    println!(
        "after removing {address}/{len}: {:?}",
        lookup(filter, address, &active_lengths)
    );

    let mut snapshot = vec![0u8; filter.snapshot_len() as usize];
    filter.write_snapshot(&mut snapshot).unwrap();
    let mut restored = Blocklist::new(0);
    restored.load_snapshot(&snapshot).unwrap();
    println!(
        "snapshot: {} bytes, restored {} prefixes with seed {:#x}",
        snapshot.len(),
        restored.len(),
        restored.seed()
    );
}
