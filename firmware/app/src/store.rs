//! Persistent filter images in NOR flash: two slots, each holding one
//! [snapshot](filter_core::snapshot) and a commit record, so that power loss
//! at any point leaves the previous image loadable.
//!
//! # Slot layout
//!
//! | offset | size | contents                                            |
//! |--------|------|-----------------------------------------------------|
//! | 0      | 64   | commit record (below)                               |
//! | 64     | n    | the snapshot, byte for byte as filter-core writes it |
//!
//! Commit record, little-endian: magic `b"CFIM"`, record version (u16, 1),
//! two reserved bytes, sequence number (u32), snapshot length (u32), the
//! [`PrefixLengths`] (32 bytes), 12 reserved bytes, and a CRC-32 of the
//! preceding 60 bytes.
//!
//! # Why power loss cannot lose the saved filter
//!
//! A save (or a snapshot upload) always goes to the slot that does *not*
//! hold the image in use: it erases that slot (the record first, as it sits
//! in the slot's first erase unit), writes the snapshot, reads it back
//! through [`SnapshotLoader`] to check header, length, CRC and item count,
//! and only then writes the commit record with the next sequence number. At
//! boot the valid record with the highest sequence whose snapshot also
//! checks out is loaded. An interrupted erase or write leaves that slot
//! without a valid record (or with a snapshot that fails its CRC), so boot
//! falls back to the other slot, which was never touched.

use core::cell::RefCell;

use embedded_storage::nor_flash::NorFlash;
use filter_core::protocol::PrefixLengths;
use filter_core::snapshot::{SnapshotError, SnapshotLoader};
use filter_core::{BucketStorage, CuckooFilter, Fingerprint};

const RECORD_MAGIC: [u8; 4] = *b"CFIM";
const RECORD_VERSION: u16 = 1;
/// Bytes reserved for the commit record at the start of a slot.
pub const RECORD_LEN: u32 = 64;
const RECORD_CRC_OFFSET: usize = 60;
/// Bytes read from or written to flash at a time.
const IO_CHUNK: usize = 256;
/// CRC-32 of the 60-byte commit records: bitwise, as the records are too
/// small for a 1 KiB table to pay off.
static CRC32: crc::Crc<u32, crc::NoTable> =
    crc::Crc::<u32, crc::NoTable>::new(&crc::CRC_32_ISO_HDLC);

/// Where the two slots are in the flash device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotLayout {
    /// Start of each slot (a multiple of the erase size).
    pub offsets: [u32; 2],
    /// Length of each slot (a multiple of the erase size).
    pub slot_len: u32,
}

/// A flash operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum StoreError {
    /// The flash device reported an error.
    Flash,
    /// An image of this size does not fit a slot.
    ImageTooLarge,
    /// The written snapshot did not read back intact.
    Verify(SnapshotError),
}

/// What a commit record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Record {
    sequence: u32,
    image_len: u32,
    prefix_lengths: PrefixLengths,
}

impl Record {
    fn encode(&self) -> [u8; RECORD_LEN as usize] {
        let mut out = [0u8; RECORD_LEN as usize];
        let fields: [(usize, &[u8]); 5] = [
            (0, &RECORD_MAGIC),
            (4, &RECORD_VERSION.to_le_bytes()),
            (8, &self.sequence.to_le_bytes()),
            (12, &self.image_len.to_le_bytes()),
            (16, &self.prefix_lengths.to_le_bytes()),
        ];
        for (offset, bytes) in fields {
            if let Some(field) = out.get_mut(offset..offset + bytes.len()) {
                field.copy_from_slice(bytes);
            }
        }
        let crc = CRC32.checksum(out.get(..RECORD_CRC_OFFSET).unwrap_or(&[]));
        if let Some(field) = out.get_mut(RECORD_CRC_OFFSET..) {
            field.copy_from_slice(&crc.to_le_bytes());
        }
        out
    }

    fn decode(bytes: &[u8; RECORD_LEN as usize]) -> Option<Self> {
        let (body, crc) = bytes.split_at(RECORD_CRC_OFFSET);
        let le_u32 = |at: usize| {
            bytes
                .get(at..at + 4)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_le_bytes)
        };
        let crc_ok = crc.try_into().ok().map(u32::from_le_bytes) == Some(CRC32.checksum(body));
        let header_ok = body.get(..6) == Some(&[b'C', b'F', b'I', b'M', 1, 0][..]);
        let prefix_lengths = bytes
            .get(16..48)
            .and_then(|b| b.try_into().ok())
            .map(PrefixLengths::from_le_bytes)?;
        (crc_ok && header_ok).then_some(())?;
        Some(Self {
            sequence: le_u32(8)?,
            image_len: le_u32(12)?,
            prefix_lengths,
        })
    }
}

/// A loaded or saved image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Image {
    /// Its sequence number.
    pub sequence: u32,
    /// The prefix lengths stored with it.
    pub prefix_lengths: PrefixLengths,
}

/// The two-slot image store over a [`NorFlash`].
pub struct ImageStore<Flash> {
    // In a RefCell so that a staged image can be read through the
    // `&self` methods of `BucketStorage` (see `StagedTable`).
    flash: RefCell<Flash>,
    layout: SlotLayout,
    /// The slot of the image in use (loaded or last written), if any.
    current_slot: Option<usize>,
    next_sequence: u32,
}

impl<Flash: NorFlash> ImageStore<Flash> {
    /// A store over `flash`; reads both commit records.
    pub fn new(flash: Flash, layout: SlotLayout) -> Self {
        let mut store = Self {
            flash: RefCell::new(flash),
            layout,
            current_slot: None,
            next_sequence: 1,
        };
        let highest = (0..2)
            .filter_map(|slot| store.record(slot))
            .map(|record| record.sequence)
            .max();
        store.next_sequence = highest.map_or(1, |sequence| sequence.wrapping_add(1));
        store
    }

    /// Sequence number of the image in use, if any.
    pub fn current_sequence(&self) -> Option<u32> {
        self.current_slot
            .and_then(|slot| self.record(slot))
            .map(|record| record.sequence)
    }

    fn slot_offset(&self, slot: usize) -> u32 {
        self.layout.offsets.get(slot).copied().unwrap_or(0)
    }

    fn spare_slot(&self) -> usize {
        match self.current_slot {
            Some(0) => 1,
            _ => 0,
        }
    }

    fn read(&self, offset: u32, out: &mut [u8]) -> Result<(), StoreError> {
        let mut flash = self.flash.try_borrow_mut().map_err(|_| StoreError::Flash)?;
        flash.read(offset, out).map_err(|_| StoreError::Flash)
    }

    fn record(&self, slot: usize) -> Option<Record> {
        let mut bytes = [0u8; RECORD_LEN as usize];
        self.read(self.slot_offset(slot), &mut bytes).ok()?;
        Record::decode(&bytes)
    }

    /// Loads the newest image that checks out into `filter`; `None` (and
    /// `filter` left holding garbage) when there is none.
    pub fn load_newest<F: Fingerprint, const S: usize, B: BucketStorage<F, S>>(
        &mut self,
        filter: &mut CuckooFilter<F, S, B>,
    ) -> Option<Image> {
        let mut records = [(0usize, self.record(0)), (1, self.record(1))];
        records.sort_unstable_by_key(|(_, record)| {
            core::cmp::Reverse(record.map(|record| record.sequence))
        });
        for (slot, record) in records {
            let Some(record) = record else { continue };
            if self.verify(slot, record.image_len, filter).is_ok()
                && read_snapshot(self, slot, record.image_len, filter).is_ok()
            {
                self.current_slot = Some(slot);
                return Some(Image {
                    sequence: record.sequence,
                    prefix_lengths: record.prefix_lengths,
                });
            }
        }
        None
    }

    /// Erases the spare slot for a new image of `image_len` bytes. The image
    /// in use is not touched.
    pub fn begin(&mut self, image_len: u32) -> Result<(), StoreError> {
        if image_len > self.layout.slot_len.saturating_sub(RECORD_LEN) {
            return Err(StoreError::ImageTooLarge);
        }
        let start = self.slot_offset(self.spare_slot());
        let mut flash = self.flash.try_borrow_mut().map_err(|_| StoreError::Flash)?;
        flash
            .erase(start, start + self.layout.slot_len)
            .map_err(|_| StoreError::Flash)
    }

    /// Writes `data` at `offset` of the image in the spare slot. `offset`
    /// must be a multiple of `Flash::WRITE_SIZE`; a ragged tail is padded
    /// with erased bytes (only the image's last write may have one).
    pub fn write_image(&mut self, offset: u32, data: &[u8]) -> Result<(), StoreError> {
        let end = offset.saturating_add(data.len() as u32);
        if end > self.layout.slot_len.saturating_sub(RECORD_LEN) {
            return Err(StoreError::ImageTooLarge);
        }
        let start = self.slot_offset(self.spare_slot()) + RECORD_LEN + offset;
        let aligned_len = data.len() - data.len() % Flash::WRITE_SIZE;
        let (body, tail) = data.split_at(aligned_len);
        let mut flash = self.flash.try_borrow_mut().map_err(|_| StoreError::Flash)?;
        flash.write(start, body).map_err(|_| StoreError::Flash)?;
        if !tail.is_empty() {
            let mut padded = [0xffu8; 64];
            let padded = padded
                .get_mut(..Flash::WRITE_SIZE)
                .ok_or(StoreError::Flash)?;
            padded
                .iter_mut()
                .zip(tail)
                .for_each(|(dst, src)| *dst = *src);
            flash
                .write(start + aligned_len as u32, padded)
                .map_err(|_| StoreError::Flash)?;
        }
        Ok(())
    }

    /// Checks the image written to the spare slot as a snapshot for a filter
    /// shaped like `shape`, then commits it with the next sequence number:
    /// from now on it is the image loaded at boot. `filter` is not changed.
    pub fn commit<F: Fingerprint, const S: usize, B: BucketStorage<F, S>>(
        &mut self,
        image_len: u32,
        prefix_lengths: PrefixLengths,
        shape: &CuckooFilter<F, S, B>,
    ) -> Result<Image, StoreError> {
        let slot = self.spare_slot();
        self.verify(slot, image_len, shape)
            .map_err(StoreError::Verify)?;
        let record = Record {
            sequence: self.next_sequence,
            image_len,
            prefix_lengths,
        };
        {
            let mut flash = self.flash.try_borrow_mut().map_err(|_| StoreError::Flash)?;
            flash
                .write(self.slot_offset(slot), &record.encode())
                .map_err(|_| StoreError::Flash)?;
        }
        self.current_slot = Some(slot);
        self.next_sequence = self.next_sequence.wrapping_add(1);
        Ok(Image {
            sequence: record.sequence,
            prefix_lengths,
        })
    }

    /// Loads the image in use into `filter` (after a commit).
    pub fn load_current<F: Fingerprint, const S: usize, B: BucketStorage<F, S>>(
        &self,
        filter: &mut CuckooFilter<F, S, B>,
    ) -> Result<(), StoreError> {
        let slot = self.current_slot.ok_or(StoreError::Flash)?;
        let record = self.record(slot).ok_or(StoreError::Flash)?;
        read_snapshot(self, slot, record.image_len, filter).map_err(StoreError::Verify)
    }

    /// Saves `filter` as a new image.
    pub fn save<F: Fingerprint, const S: usize, B: BucketStorage<F, S>>(
        &mut self,
        filter: &CuckooFilter<F, S, B>,
        prefix_lengths: PrefixLengths,
    ) -> Result<Image, StoreError> {
        let image_len =
            u32::try_from(filter.snapshot_len()).map_err(|_| StoreError::ImageTooLarge)?;
        self.begin(image_len)?;
        let mut exporter = filter_core::SnapshotExporter::new(filter);
        let mut buffer = [0u8; IO_CHUNK];
        let mut offset = 0u32;
        loop {
            let written = exporter.next_chunk(filter, &mut buffer);
            let Some(chunk) = buffer.get(..written).filter(|chunk| !chunk.is_empty()) else {
                break;
            };
            self.write_image(offset, chunk)?;
            offset += written as u32;
        }
        self.commit(image_len, prefix_lengths, filter)
    }

    /// Checks the snapshot in `slot` without changing `shape`.
    fn verify<F: Fingerprint, const S: usize, B: BucketStorage<F, S>>(
        &self,
        slot: usize,
        image_len: u32,
        shape: &CuckooFilter<F, S, B>,
    ) -> Result<(), SnapshotError> {
        let mut staged = StagedTable::<F, S, Flash>::filter_shaped_like(self, slot, shape)
            .ok_or(SnapshotError::InvalidHeader)?;
        read_snapshot(self, slot, image_len, &mut staged)
    }
}

/// Feeds the `image_len` bytes of the snapshot in `slot` to `target`.
fn read_snapshot<Flash: NorFlash, F: Fingerprint, const S: usize, B: BucketStorage<F, S>>(
    store: &ImageStore<Flash>,
    slot: usize,
    image_len: u32,
    target: &mut CuckooFilter<F, S, B>,
) -> Result<(), SnapshotError> {
    let start = store.slot_offset(slot) + RECORD_LEN;
    let mut loader = SnapshotLoader::new();
    let mut buffer = [0u8; IO_CHUNK];
    let mut offset = 0u32;
    while offset < image_len {
        let len = (image_len - offset).min(IO_CHUNK as u32) as usize;
        let chunk = buffer.get_mut(..len).unwrap_or(&mut []);
        store
            .read(start + offset, chunk)
            .map_err(|_| SnapshotError::Truncated {
                expected: u64::from(image_len),
                received: u64::from(offset),
            })?;
        loader.feed(target, chunk)?;
        offset += len as u32;
    }
    loader.finish(target)
}

/// The table of a snapshot in a flash slot, read in place: a staging
/// filter that needs no RAM. Writes are dropped (the bytes are already in
/// flash); reads come from flash, so counting the items checks what was
/// written.
struct StagedTable<'s, F, const S: usize, Flash> {
    store: &'s ImageStore<Flash>,
    table_offset: u32,
    bucket_count: usize,
    fingerprint: core::marker::PhantomData<F>,
}

impl<'s, F: Fingerprint, const S: usize, Flash: NorFlash> StagedTable<'s, F, S, Flash> {
    fn filter_shaped_like<B: BucketStorage<F, S>>(
        store: &'s ImageStore<Flash>,
        slot: usize,
        shape: &CuckooFilter<F, S, B>,
    ) -> Option<CuckooFilter<F, S, Self>> {
        let table = Self {
            store,
            table_offset: store.slot_offset(slot)
                + RECORD_LEN
                + filter_core::snapshot::HEADER_LEN as u32,
            bucket_count: shape.bucket_count(),
            fingerprint: core::marker::PhantomData,
        };
        CuckooFilter::with_storage(table, shape.seed()).ok()
    }
}

impl<F: Fingerprint, const S: usize, Flash: NorFlash> BucketStorage<F, S>
    for StagedTable<'_, F, S, Flash>
{
    fn bucket_count(&self) -> usize {
        self.bucket_count
    }

    fn bucket(&self, index: usize) -> [F; S] {
        let mut bucket = [F::EMPTY; S];
        let mut bytes = [0u8; 32];
        let len = S * F::BYTES;
        let Some(bytes) = bytes.get_mut(..len) else {
            return bucket;
        };
        let offset = self.table_offset + (index * len) as u32;
        if self.store.read(offset, bytes).is_ok() {
            for (slot, le) in bucket.iter_mut().zip(bytes.chunks_exact(F::BYTES)) {
                *slot = F::read_le(le).unwrap_or(F::EMPTY);
            }
        }
        bucket
    }

    fn set_slot(&mut self, _index: usize, _slot: usize, _fingerprint: F) {}
}
