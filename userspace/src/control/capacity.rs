//! How large a filter may be, and what to say when one is too small: one
//! set of rules for `attach` and `resize`, and the way out a full filter's
//! error names (a larger `--capacity` while one is being built, `cfctl
//! resize` once one is attached).

use std::fs;

use super::error::{ControlError, Result};
use crate::filter::{FilterFull, FilterShape};
use crate::xdp::XdpError;

/// The filter shape whose fingerprints reach a false-positive rate of
/// `fpr` per probe in a full filter: the narrowest of 8, 16 and 32 bits.
pub fn shape_for_fpr(fpr: f64) -> Result<FilterShape> {
    FilterShape::ALL
        .into_iter()
        .find(|shape| {
            filter_core::sizing::cuckoo_min_fingerprint_bits(shape.slots(), fpr)
                .is_some_and(|bits| bits <= shape.fingerprint_bits())
        })
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
/// it is built in while it is swapped in).
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

/// Checks that a table for `capacity` keys of `shape` stays within
/// `max_memory` bytes, if there is a ceiling (`--max-memory`).
pub fn check_ceiling(capacity: u64, shape: FilterShape, max_memory: Option<u64>) -> Result<()> {
    let (Some(ceiling), Some(needed)) = (max_memory, table_bytes(capacity, shape)) else {
        return Ok(());
    };
    let needed = u64::try_from(needed).unwrap_or(u64::MAX);
    if needed <= ceiling {
        return Ok(());
    }
    Err(ControlError::OverMemoryCeiling {
        capacity,
        needed: bytesize::ByteSize(needed),
        ceiling: bytesize::ByteSize(ceiling),
    })
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

/// How to make room when a filter is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WayOut {
    /// A filter is being built (`attach`, `resize`): a larger `--capacity`.
    LargerCapacity,
    /// The attached filter is full: `cfctl resize`.
    Resize,
}

impl WayOut {
    /// `error` with this way out if it is a full filter; other errors as
    /// they are.
    pub fn explain(self, error: XdpError) -> ControlError {
        match error {
            XdpError::Full(full) => self.full(full),
            other => ControlError::Xdp(other),
        }
    }

    /// A full filter's error with this way out.
    pub fn full(self, FilterFull { wanted, slots }: FilterFull) -> ControlError {
        let capacity = wanted.saturating_add(wanted / 4).max(1);
        let way_out = match self {
            WayOut::LargerCapacity => {
                format!("the stored entries need a larger --capacity (at least {capacity})")
            }
            WayOut::Resize => {
                format!("make it larger with `cfctl resize --capacity {capacity}`")
            }
        };
        ControlError::Full {
            wanted,
            slots,
            way_out,
        }
    }
}
