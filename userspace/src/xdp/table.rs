//! A cuckoo filter table in BPF map memory: a `BPF_F_MMAPABLE` array whose
//! element `i` is bucket `i` in `filter-core`'s layout, mapped into this
//! process.
//!
//! [`FilterTable`] implements [`BucketStorage`], so
//! `CuckooFilter::with_storage(table, seed)` runs `filter-core`'s insert and
//! remove directly on the memory the XDP program probes. Every slot is
//! written with one atomic store and read with atomic loads, so a packet
//! sees each slot either before or after a change, never torn; because the
//! core's insert writes each relocation's destination before clearing its
//! source, a live insert never hides a listed key. [`FilterTable::fill`]
//! copies a whole table built elsewhere (fast bulk fill) into a table that is
//! not live yet.
//!
//! A table is mapped whole ([`FilterTable::from_map`]), or only in the
//! pages that hold some buckets ([`FilterTable::from_map_pages`]): the
//! kernel fills every page-table entry of a mapping when it is made, so
//! mapping a 4 MiB table costs about as much as the rest of a one-entry
//! update. Buckets outside the mapped pages read as empty and ignore
//! writes, so a caller of `from_map_pages` must touch only the buckets it
//! named (the core's lookups and removals touch a key's two candidate
//! buckets; its insertions too, while one of them has a free slot).

use std::marker::PhantomData;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;

use aya::maps::{MapData, MapError};
use cfxdp::FILTER_TABLE_FLAGS;
use filter_core::{BucketStorage, Fingerprint};

use super::mapped::{page_size, MappedMap};

const BPF_MAP_TYPE_ARRAY: u32 = 2;

const _: () = assert!(
    cfg!(target_endian = "little"),
    "filter tables are copied as native-endian memory; the layout is little-endian"
);

/// Why a filter table could not be created or opened.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// The bucket count is zero, not a power of two or above 2^32 - 1.
    #[error("a filter table needs a power-of-two bucket count below 2^32, not {0}")]
    BadBucketCount(usize),
    /// An existing map does not have the shape of this table type.
    #[error(
        "map is not a filter table of {expected_value_size}-byte buckets \
         (value size {value_size}, {max_entries} entries, flags {flags:#x})"
    )]
    WrongShape {
        /// Bucket size this table type needs.
        expected_value_size: u32,
        /// The map's value size.
        value_size: u32,
        /// The map's entries.
        max_entries: u32,
        /// The map's flags.
        flags: u32,
    },
    /// `fill` got a table of another size.
    #[error("cannot fill a table of {table} buckets with {given} buckets")]
    SizeMismatch {
        /// Buckets in the map.
        table: usize,
        /// Buckets given.
        given: usize,
    },
    /// The kernel refused to create or describe the map.
    #[error("filter table map: {0}")]
    Map(#[from] MapError),
    /// The map could not be mapped into memory.
    #[error("cannot mmap the filter table: {0}")]
    Mmap(#[from] std::io::Error),
    /// `fill` on a table mapped only in part.
    #[error("cannot fill a filter table mapped only in the pages of some buckets")]
    PartlyMapped,
}

/// A fingerprint type that can be stored in and loaded from shared map
/// memory atomically.
pub trait TableFingerprint: Fingerprint {
    /// Atomically loads the slot at byte `offset`.
    fn load(memory: &MappedMap, offset: usize) -> Option<Self>;
    /// Atomically stores `value` to the slot at byte `offset`.
    fn store(memory: &MappedMap, offset: usize, value: Self) -> Option<()>;
}

macro_rules! impl_table_fingerprint {
    ($($ty:ty => $atomic:ident),*) => {$(
        impl TableFingerprint for $ty {
            fn load(memory: &MappedMap, offset: usize) -> Option<Self> {
                memory.$atomic(offset).map(|slot| slot.load(Ordering::Acquire))
            }

            fn store(memory: &MappedMap, offset: usize, value: Self) -> Option<()> {
                memory.$atomic(offset).map(|slot| slot.store(value, Ordering::Release))
            }
        }
    )*};
}

impl_table_fingerprint!(u8 => atomic_u8, u16 => atomic_u16, u32 => atomic_u32);

/// A filter table of `F` fingerprints in buckets of `S` slots, in a BPF map.
#[derive(Debug)]
pub struct FilterTable<F, const S: usize> {
    map: MapData,
    memory: TableMemory,
    bucket_count: usize,
    fingerprint: PhantomData<F>,
}

/// The part of a table mapped into this process.
#[derive(Debug)]
enum TableMemory {
    /// All of it.
    Whole(MappedMap),
    /// Single pages, by page number, sorted.
    Pages {
        page_size: usize,
        pages: Vec<(usize, MappedMap)>,
    },
}

impl TableMemory {
    /// The mapping holding the table's byte `offset`, and the offset in it.
    fn at(&self, offset: usize) -> Option<(&MappedMap, usize)> {
        match self {
            Self::Whole(memory) => Some((memory, offset)),
            Self::Pages { page_size, pages } => {
                let page = offset / page_size;
                let found = pages.binary_search_by_key(&page, |&(number, _)| number);
                let (_, memory) = pages.get(found.ok()?)?;
                Some((memory, offset % page_size))
            }
        }
    }
}

impl<F: TableFingerprint, const S: usize> FilterTable<F, S> {
    const BUCKET_BYTES: usize = S * F::BYTES;

    /// Creates an empty table of `bucket_count` buckets (a power of two).
    pub fn create(bucket_count: usize) -> Result<Self, TableError> {
        let entries = u32::try_from(bucket_count)
            .ok()
            .filter(|_| bucket_count.is_power_of_two())
            .ok_or(TableError::BadBucketCount(bucket_count))?;
        let definition = aya_obj::Map::new_from_params(
            BPF_MAP_TYPE_ARRAY,
            4,
            Self::BUCKET_BYTES as u32,
            entries,
            FILTER_TABLE_FLAGS as u32,
        );
        Self::from_map(MapData::create(definition, "cf_table", None)?)
    }

    /// Opens an existing table (from an outer-map slot or a pin), checking
    /// that it has this type's shape, and maps all of it.
    pub fn from_map(map: MapData) -> Result<Self, TableError> {
        let bucket_count = Self::check_shape(&map)?;
        let memory = MappedMap::new(map.fd().as_fd(), bucket_count * Self::BUCKET_BYTES)?;
        Ok(Self {
            map,
            memory: TableMemory::Whole(memory),
            bucket_count,
            fingerprint: PhantomData,
        })
    }

    /// Opens an existing table like [`Self::from_map`], but maps only the
    /// pages that hold `buckets` (see the module documentation for what
    /// the caller may then touch). Buckets out of range are left out.
    pub fn from_map_pages(map: MapData, buckets: &[usize]) -> Result<Self, TableError> {
        let bucket_count = Self::check_shape(&map)?;
        let page_size = page_size();
        let mut numbers: Vec<usize> = buckets
            .iter()
            .filter(|&&bucket| bucket < bucket_count)
            .flat_map(|&bucket| {
                let first_byte = bucket * Self::BUCKET_BYTES;
                let last_byte = first_byte + Self::BUCKET_BYTES - 1;
                [first_byte / page_size, last_byte / page_size]
            })
            .collect();
        numbers.sort_unstable();
        numbers.dedup();
        let pages = numbers
            .into_iter()
            .map(|number| Ok((number, MappedMap::pages(map.fd().as_fd(), number, 1)?)))
            .collect::<Result<_, TableError>>()?;
        Ok(Self {
            map,
            memory: TableMemory::Pages { page_size, pages },
            bucket_count,
            fingerprint: PhantomData,
        })
    }

    /// The bucket count of `map`, if it has this type's shape.
    fn check_shape(map: &MapData) -> Result<usize, TableError> {
        let info = map.info()?;
        let (value_size, max_entries, flags) =
            (info.value_size(), info.max_entries(), info.map_flags());
        if value_size as usize != Self::BUCKET_BYTES
            || !max_entries.is_power_of_two()
            || flags != FILTER_TABLE_FLAGS as u32
        {
            return Err(TableError::WrongShape {
                expected_value_size: Self::BUCKET_BYTES as u32,
                value_size,
                max_entries,
                flags,
            });
        }
        Ok(max_entries as usize)
    }

    /// The map, to install it in an outer-map slot or pin it.
    pub fn map(&self) -> &MapData {
        &self.map
    }

    /// Bytes of table memory.
    pub fn bytes(&self) -> usize {
        self.bucket_count * Self::BUCKET_BYTES
    }

    /// Copies a whole table (for example a `CuckooFilter`'s storage built
    /// in a `Vec`) into the map. Not atomic: only for a table that is not
    /// live yet.
    pub fn fill(&mut self, buckets: &[[F; S]]) -> Result<(), TableError> {
        let TableMemory::Whole(memory) = &self.memory else {
            return Err(TableError::PartlyMapped);
        };
        if buckets.len() != self.bucket_count {
            return Err(TableError::SizeMismatch {
                table: self.bucket_count,
                given: buckets.len(),
            });
        }
        // SAFETY: [[F; S]] with F an unsigned integer has no padding, so its
        // memory is initialised bytes; length and alignment of u8 are fine.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                buckets.as_ptr().cast::<u8>(),
                std::mem::size_of_val(buckets),
            )
        };
        memory.copy_from(0, bytes).ok_or(TableError::SizeMismatch {
            table: self.bucket_count,
            given: buckets.len(),
        })
    }

    fn slot_offset(index: usize, slot: usize) -> usize {
        index * Self::BUCKET_BYTES + slot * F::BYTES
    }
}

impl<F: TableFingerprint, const S: usize> BucketStorage<F, S> for FilterTable<F, S> {
    fn bucket_count(&self) -> usize {
        self.bucket_count
    }

    fn bucket(&self, index: usize) -> [F; S] {
        let mut bucket = [F::EMPTY; S];
        if index < self.bucket_count {
            for (slot, value) in bucket.iter_mut().enumerate() {
                *value = self
                    .memory
                    .at(Self::slot_offset(index, slot))
                    .and_then(|(memory, offset)| F::load(memory, offset))
                    .unwrap_or(F::EMPTY);
            }
        }
        bucket
    }

    fn set_slot(&mut self, index: usize, slot: usize, fingerprint: F) {
        if index < self.bucket_count && slot < S {
            // In range by the check above, so the store misses only a page
            // a partly mapped table left out.
            if let Some((memory, offset)) = self.memory.at(Self::slot_offset(index, slot)) {
                let _ = F::store(memory, offset, fingerprint);
            }
        }
    }
}

/// A table of any shape as the map it is, for whoever only hands the map
/// on (the loader's inner template).
pub trait TableMap {
    /// The table's map.
    fn map(&self) -> &MapData;
}

impl<F: TableFingerprint, const S: usize> TableMap for FilterTable<F, S> {
    fn map(&self) -> &MapData {
        FilterTable::map(self)
    }
}
