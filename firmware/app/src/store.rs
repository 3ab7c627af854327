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
//! | 64 + n, rounded up to 16 | the rest | the [`journal`] of changes since |
//!
//! Commit record, little-endian: magic `b"CFIM"`, record version (u16, 1),
//! two reserved bytes, sequence number (u32), snapshot length (u32), the
//! [`PrefixLengths`] (32 bytes), 12 reserved bytes, and a CRC-32 of the
//! preceding 60 bytes. The [`record`] module defines each field's place
//! once; encoder and decoder both use it.
//!
//! # Why power loss cannot lose the saved filter
//!
//! A save (or a snapshot upload) always goes to the slot that does *not*
//! hold the image in use: it erases that slot (the record first, as it sits
//! in the slot's first erase unit), writes the snapshot, reads it back
//! through [`SnapshotLoader`] to check header, length, CRC and item count,
//! and only then writes the commit record with the next sequence number
//! (one more than the image in use, so that the two slots' numbers are
//! always one apart once a save succeeds). At
//! boot the valid record with the newest sequence (serial-number
//! arithmetic: the number after `u32::MAX` is 0) whose snapshot also
//! checks out is loaded. An interrupted erase or write leaves that slot
//! without a valid record (or with a snapshot that fails its CRC), so boot
//! falls back to the other slot, which was never touched.

use core::cell::RefCell;

use embedded_storage::nor_flash::NorFlash;
use filter_core::protocol::{JournalFill, PrefixLengths};
use filter_core::snapshot::{SnapshotError, SnapshotLoader};
use filter_core::{BucketStorage, CuckooFilter, Fingerprint};

use crate::checksum::CRC32;
use crate::journal::{self, Change};

/// Bytes reserved for the commit record at the start of a slot.
pub const RECORD_LEN: u32 = record::LEN as u32;
/// Bytes of a journal record, as flash offsets count them.
const JOURNAL_RECORD: u32 = journal::RECORD_LEN as u32;
/// Bytes read from or written to flash at a time.
const IO_CHUNK: usize = 64;

/// Why [`ImageStore::load_newest`] loaded nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum NoImage {
    /// Neither slot holds a committed image.
    NoneSaved,
    /// The newest committed image failed its checks: damaged, or a
    /// snapshot of another layout version (saved by a firmware whose hash
    /// places keys elsewhere).
    Refused(SnapshotError),
}

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

/// The commit record's byte layout: every field's place, each derived from
/// the one before, so that no offset is written twice.
pub mod record {
    use filter_core::protocol::PrefixLengths;

    /// A field: `len` bytes at `offset`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Field {
        /// Where it starts in the record.
        pub offset: usize,
        /// How long it is.
        pub len: usize,
    }

    impl Field {
        const fn first(len: usize) -> Self {
            Self { offset: 0, len }
        }

        const fn then(self, len: usize) -> Self {
            Self {
                offset: self.end(),
                len,
            }
        }

        /// The offset just past the field.
        pub const fn end(self) -> usize {
            self.offset + self.len
        }

        /// The field's bytes in `record`.
        pub fn of(self, record: &[u8; LEN]) -> &[u8] {
            record.get(self.offset..self.end()).unwrap_or(&[])
        }

        /// Writes `value` (as long as the field) into `record`.
        pub fn write(self, record: &mut [u8; LEN], value: &[u8]) {
            if let Some(field) = record.get_mut(self.offset..self.end()) {
                field.copy_from_slice(value);
            }
        }
    }

    /// `b"CFIM"`: a slot's first bytes when it holds a record.
    pub const MAGIC_VALUE: [u8; 4] = *b"CFIM";
    /// The version of this layout.
    pub const VERSION_VALUE: u16 = 1;

    /// [`MAGIC_VALUE`].
    pub const MAGIC: Field = Field::first(4);
    /// [`VERSION_VALUE`], a `u16`.
    pub const VERSION: Field = MAGIC.then(2);
    const RESERVED_AFTER_VERSION: Field = VERSION.then(2);
    /// The image's sequence number, a `u32`.
    pub const SEQUENCE: Field = RESERVED_AFTER_VERSION.then(4);
    /// The snapshot's length in bytes, a `u32`.
    pub const IMAGE_LEN: Field = SEQUENCE.then(4);
    /// The image's [`PrefixLengths`].
    pub const PREFIX_LENGTHS: Field = IMAGE_LEN.then(PrefixLengths::ENCODED_LEN);
    const RESERVED_BEFORE_CRC: Field = PREFIX_LENGTHS.then(12);
    /// CRC-32 of every byte before it, a `u32`.
    pub const CRC: Field = RESERVED_BEFORE_CRC.then(4);
    /// The whole record.
    pub const LEN: usize = CRC.end();
    const _: () = assert!(LEN == 64, "the record fills its 64-byte place");
}

/// What a commit record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Record {
    sequence: u32,
    image_len: u32,
    prefix_lengths: PrefixLengths,
}

impl Record {
    fn encode(&self) -> [u8; record::LEN] {
        let mut out = [0u8; record::LEN];
        record::MAGIC.write(&mut out, &record::MAGIC_VALUE);
        record::VERSION.write(&mut out, &record::VERSION_VALUE.to_le_bytes());
        record::SEQUENCE.write(&mut out, &self.sequence.to_le_bytes());
        record::IMAGE_LEN.write(&mut out, &self.image_len.to_le_bytes());
        record::PREFIX_LENGTHS.write(&mut out, &self.prefix_lengths.to_le_bytes());
        let crc = CRC32.checksum(out.get(..record::CRC.offset).unwrap_or(&[]));
        record::CRC.write(&mut out, &crc.to_le_bytes());
        out
    }

    /// The record in `bytes`, if its magic, version and CRC check out.
    fn decode(bytes: &[u8; record::LEN]) -> Option<Self> {
        let le_u32 = |field: record::Field| field.of(bytes).try_into().ok().map(u32::from_le_bytes);
        let covered = bytes.get(..record::CRC.offset)?;
        let intact = le_u32(record::CRC)? == CRC32.checksum(covered)
            && record::MAGIC.of(bytes) == record::MAGIC_VALUE
            && record::VERSION.of(bytes) == record::VERSION_VALUE.to_le_bytes();
        intact.then_some(())?;
        Some(Self {
            sequence: le_u32(record::SEQUENCE)?,
            image_len: le_u32(record::IMAGE_LEN)?,
            prefix_lengths: PrefixLengths::from_le_bytes(
                record::PREFIX_LENGTHS.of(bytes).try_into().ok()?,
            ),
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
    /// Where the image in use keeps its journal.
    journal: Option<JournalSpace>,
    /// The datagram counter leased in the journal (0: none): no datagram
    /// up to it is taken after a reset. Every new image's journal starts
    /// with it.
    lease: u64,
}

/// The journal of the image in use: the erased space of its slot after the
/// snapshot (see [`crate::journal`]).
#[derive(Clone, Copy, Debug)]
struct JournalSpace {
    /// Where the first record goes.
    start: u32,
    /// Where the next record goes.
    next: u32,
    /// The end of the slot.
    end: u32,
    /// The image's sequence number, which every record's CRC covers.
    sequence: u32,
}

/// Whether [`ImageStore::append`] wrote a change to the journal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Appended {
    /// Written: it outlives a reset.
    Written,
    /// Not written, for want of room (or of an image to journal after):
    /// save a new image instead.
    NoRoom,
}

/// What [`ImageStore::replay_journal`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Replayed {
    /// Changes applied.
    pub changes: u32,
    /// Records skipped: damaged, or of a change not written whole (a
    /// request cut by power loss, never answered).
    pub skipped: u32,
}

impl<Flash: NorFlash> ImageStore<Flash> {
    /// A store over `flash`; reads both commit records.
    pub fn new(flash: Flash, layout: SlotLayout) -> Self {
        let mut store = Self {
            flash: RefCell::new(flash),
            layout,
            current_slot: None,
            next_sequence: 1,
            journal: None,
            lease: 0,
        };
        let newest = (0..2)
            .filter_map(|slot| store.record(slot))
            .map(|record| record.sequence)
            .reduce(|a, b| if is_newer(b, a) { b } else { a });
        store.next_sequence = newest.map_or(1, |sequence| sequence.wrapping_add(1));
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
        let mut bytes = [0u8; record::LEN];
        self.read(self.slot_offset(slot), &mut bytes).ok()?;
        Record::decode(&bytes)
    }

    /// Loads the newest image that checks out into `filter`; when there is
    /// none (`filter` then left holding garbage), why.
    pub fn load_newest<F: Fingerprint, const S: usize, B: BucketStorage<F, S>>(
        &mut self,
        filter: &mut CuckooFilter<F, S, B>,
    ) -> Result<Image, NoImage> {
        let mut records = [(0usize, self.record(0)), (1, self.record(1))];
        // Newest first; a slot without a record is skipped below.
        if let [(_, Some(first)), (_, Some(second))] = records {
            if is_newer(second.sequence, first.sequence) {
                records.swap(0, 1);
            }
        }
        let mut refused = None;
        for (slot, record) in records {
            let Some(record) = record else { continue };
            let checked = self
                .verify(slot, record.image_len, filter)
                .and_then(|()| read_snapshot(self, slot, record.image_len, filter));
            if let Err(reason) = checked {
                refused.get_or_insert(reason);
            } else {
                self.current_slot = Some(slot);
                // Unknown until it is replayed: nothing is appended to it.
                self.journal = None;
                // The next image beats this one by one. A record numbered
                // from a damaged image could be 2^31 away from it, which
                // serial-number arithmetic cannot order.
                self.next_sequence = record.sequence.wrapping_add(1);
                return Ok(Image {
                    sequence: record.sequence,
                    prefix_lengths: record.prefix_lengths,
                });
            }
        }
        Err(refused.map_or(NoImage::NoneSaved, NoImage::Refused))
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
        let mut journal = self.journal_after(slot, &record);
        {
            let mut flash = self.flash.try_borrow_mut().map_err(|_| StoreError::Flash)?;
            // The lease goes into the new journal before the record makes
            // the image the one in use: no moment without it.
            if self.lease > 0 {
                let lease = journal::encode(Change::Lease(self.lease), 1, 0, record.sequence);
                flash
                    .write(journal.next, &lease)
                    .map_err(|_| StoreError::Flash)?;
                journal.next += JOURNAL_RECORD;
            }
            flash
                .write(self.slot_offset(slot), &record.encode())
                .map_err(|_| StoreError::Flash)?;
        }
        self.current_slot = Some(slot);
        self.journal = Some(journal);
        self.next_sequence = self.next_sequence.wrapping_add(1);
        Ok(Image {
            sequence: record.sequence,
            prefix_lengths,
        })
    }

    /// Loads the image in use into `filter` (after a commit, or to undo a
    /// change that could not be saved).
    pub fn load_current<F: Fingerprint, const S: usize, B: BucketStorage<F, S>>(
        &self,
        filter: &mut CuckooFilter<F, S, B>,
    ) -> Result<Image, StoreError> {
        let slot = self.current_slot.ok_or(StoreError::Flash)?;
        let record = self.record(slot).ok_or(StoreError::Flash)?;
        read_snapshot(self, slot, record.image_len, filter).map_err(StoreError::Verify)?;
        Ok(Image {
            sequence: record.sequence,
            prefix_lengths: record.prefix_lengths,
        })
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
        self.write_snapshot_of(filter)?;
        self.commit(image_len, prefix_lengths, filter)
    }

    /// Writes the snapshot of `filter` into the spare slot. Not inlined,
    /// so that its buffer is off the stack before the commit verifies
    /// the snapshot with a buffer of its own (a save can run under a
    /// batch of adds, the deepest stack).
    #[inline(never)]
    fn write_snapshot_of<F: Fingerprint, const S: usize, B: BucketStorage<F, S>>(
        &mut self,
        filter: &CuckooFilter<F, S, B>,
    ) -> Result<(), StoreError> {
        let mut exporter = filter_core::SnapshotExporter::new(filter);
        let mut buffer = [0u8; IO_CHUNK];
        let mut offset = 0u32;
        loop {
            let written = exporter.next_chunk(filter, &mut buffer);
            let Some(chunk) = buffer.get(..written).filter(|chunk| !chunk.is_empty()) else {
                return Ok(());
            };
            self.write_image(offset, chunk)?;
            offset += written as u32;
        }
    }

    /// The journal space of the image `record` commits in `slot`, empty.
    fn journal_after(&self, slot: usize, record: &Record) -> JournalSpace {
        let start = self.slot_offset(slot);
        let snapshot_end = RECORD_LEN.saturating_add(record.image_len);
        let first = start.saturating_add(snapshot_end.next_multiple_of(JOURNAL_RECORD));
        JournalSpace {
            start: first,
            next: first,
            end: start.saturating_add(self.layout.slot_len),
            sequence: record.sequence,
        }
    }

    /// How many more records the journal of the image in use has room for
    /// (none without an image in use).
    pub fn journal_room(&self) -> usize {
        self.journal.map_or(0, |space| {
            (space.end.saturating_sub(space.next) / JOURNAL_RECORD) as usize
        })
    }

    /// How full the journal of the image in use is (`None` without an
    /// image in use).
    pub fn journal_fill(&self) -> Option<JournalFill> {
        self.journal.map(|space| JournalFill {
            records: space.next.saturating_sub(space.start) / JOURNAL_RECORD,
            capacity: space.end.saturating_sub(space.start) / JOURNAL_RECORD,
        })
    }

    /// The datagram counter leased in flash (0: none).
    pub fn lease(&self) -> u64 {
        self.lease
    }

    /// Leases datagram counters up to `counter` in the journal; the lease
    /// holds once written ([`Appended::NoRoom`]: save a new image first).
    pub fn extend_lease(&mut self, counter: u64) -> Result<Appended, StoreError> {
        let appended = self.append(core::iter::once(Change::Lease(counter)))?;
        if appended == Appended::Written {
            self.lease = counter;
        }
        Ok(appended)
    }

    /// Writes the records of one request's `changes` to the journal of the
    /// image in use. Nothing is written when they do not fit
    /// ([`Appended::NoRoom`]); a write that fails leaves a change that is
    /// not whole, which replay skips.
    pub fn append(
        &mut self,
        changes: impl Iterator<Item = Change> + Clone,
    ) -> Result<Appended, StoreError> {
        let count = changes.clone().count();
        let (Some(mut space), Ok(records)) = (self.journal, u8::try_from(count)) else {
            return Ok(Appended::NoRoom);
        };
        if self.journal_room() < count {
            return Ok(Appended::NoRoom);
        }
        let mut flash = self.flash.try_borrow_mut().map_err(|_| StoreError::Flash)?;
        let mut written = Ok(());
        for (place, change) in (0..records).zip(changes) {
            let record = journal::encode(change, records, place, space.sequence);
            written = flash.write(space.next, &record);
            // After a failed write too: the next record goes past it.
            space.next += JOURNAL_RECORD;
            if written.is_err() {
                break;
            }
        }
        self.journal = Some(space);
        written
            .map(|()| Appended::Written)
            .map_err(|_| StoreError::Flash)
    }

    /// Replays the journal of the image in use (just loaded) through
    /// `apply`, from its first record; later records go after the last
    /// one found.
    pub fn replay_journal(&mut self, mut apply: impl FnMut(Change)) -> Replayed {
        let mut replayed = Replayed::default();
        let Some(slot) = self.current_slot else {
            return replayed;
        };
        let Some(record) = self.record(slot) else {
            return replayed;
        };
        let mut space = self.journal_after(slot, &record);
        while let Some(read) = self.journal_record(&space, 0) {
            match read {
                journal::Read::Blank => break,
                journal::Read::Intact {
                    records, place: 0, ..
                } if self.is_whole(&space, records) => {
                    // Read again to apply: a change is checked whole first,
                    // without a buffer for its records.
                    for place in 0..records {
                        match self.journal_record(&space, place) {
                            Some(journal::Read::Intact {
                                change: Change::Lease(counter),
                                ..
                            }) => self.lease = self.lease.max(counter),
                            Some(journal::Read::Intact { change, .. }) => apply(change),
                            _ => {}
                        }
                    }
                    space.next += u32::from(records) * JOURNAL_RECORD;
                    replayed.changes += 1;
                }
                _ => {
                    space.next += JOURNAL_RECORD;
                    replayed.skipped += 1;
                }
            }
        }
        self.journal = Some(space);
        replayed
    }

    /// Whether the `records` records from `space.next` are one change's,
    /// intact and in their places.
    fn is_whole(&self, space: &JournalSpace, records: u8) -> bool {
        (0..records).all(|place| {
            matches!(
                self.journal_record(space, place),
                Some(journal::Read::Intact { records: of, place: at, .. }) if of == records && at == place
            )
        })
    }

    /// Record `index` from `space.next`; `None` past the slot's end or
    /// when flash cannot be read.
    fn journal_record(&self, space: &JournalSpace, index: u8) -> Option<journal::Read> {
        let at = space.next + u32::from(index) * JOURNAL_RECORD;
        if at.saturating_add(JOURNAL_RECORD) > space.end {
            return None;
        }
        let mut bytes = [0u8; journal::RECORD_LEN];
        self.read(at, &mut bytes).ok()?;
        Some(journal::decode(&bytes, space.sequence))
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

/// Whether sequence number `candidate` was given out after `than`: serial
/// number arithmetic (RFC 1982), so that the image saved after number
/// `u32::MAX`, number 0, counts as the newer one. The two slots' numbers
/// are always close, as each save takes the next one.
fn is_newer(candidate: u32, than: u32) -> bool {
    (1..=u32::MAX / 2).contains(&candidate.wrapping_sub(than))
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

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::panic)]
mod tests {
    use super::*;
    use filter_core::AddressFamily;

    fn sample() -> Record {
        let mut prefix_lengths = PrefixLengths::new();
        prefix_lengths.insert(AddressFamily::Ipv4, 24);
        prefix_lengths.insert(AddressFamily::Ipv6, 48);
        Record {
            sequence: 0x0102_0304,
            image_len: 65_588,
            prefix_lengths,
        }
    }

    #[test]
    fn a_record_round_trips_with_its_fields_where_the_layout_says() {
        let record = sample();
        let bytes = record.encode();
        assert_eq!(Record::decode(&bytes), Some(record));
        assert_eq!(&bytes[..4], b"CFIM");
        assert_eq!(bytes[4..6], 1u16.to_le_bytes());
        assert_eq!(bytes[8..12], 0x0102_0304u32.to_le_bytes());
        assert_eq!(bytes[12..16], 65_588u32.to_le_bytes());
        assert_eq!(bytes[16..48], record.prefix_lengths.to_le_bytes());
        assert_eq!(bytes[60..], CRC32.checksum(&bytes[..60]).to_le_bytes());
    }

    const LAYOUT: SlotLayout = SlotLayout {
        offsets: [0, 1024],
        slot_len: 1024,
    };

    type Filter = filter_core::StaticCuckooFilter<u16, 4, 64>;

    /// Boots on `memory`: the number of the image loaded, and its filter.
    fn boot(memory: &mut [u8]) -> (Option<u32>, Filter) {
        let mut store = ImageStore::new(crate::RamFlash::<4, 256>::new(memory), LAYOUT);
        let mut loaded = Filter::new(0);
        let sequence = store
            .load_newest(&mut loaded)
            .ok()
            .map(|image| image.sequence);
        (sequence, loaded)
    }

    /// The record in slot 0 of `memory`, as the store reads it.
    fn saved_record(memory: &mut [u8]) -> Option<Record> {
        ImageStore::new(crate::RamFlash::<4, 256>::new(memory), LAYOUT).record(0)
    }

    /// Boots on `memory`, then saves `filter`: the numbers of the image
    /// loaded and of the image saved.
    fn boot_and_save(memory: &mut [u8], filter: &Filter) -> (Option<u32>, Result<u32, StoreError>) {
        let mut store = ImageStore::new(crate::RamFlash::<4, 256>::new(memory), LAYOUT);
        let mut loaded = Filter::new(0);
        let sequence = store
            .load_newest(&mut loaded)
            .ok()
            .map(|image| image.sequence);
        let saved = store.save(filter, PrefixLengths::new());
        (sequence, saved.map(|image| image.sequence))
    }

    #[test]
    fn the_image_saved_after_the_last_sequence_number_is_the_newest() {
        // Found by the flash_image fuzz target: the save after number
        // u32::MAX got number 0, and the next boot loaded the older image.
        let mut memory = [0xffu8; 2048];
        let mut filter = Filter::new(1);
        assert!(filter.insert(&1u64).is_ok());
        assert_eq!(boot_and_save(&mut memory, &filter), (None, Ok(1)));
        // Renumber that image to the last sequence number.
        let renumbered = saved_record(&mut memory).map(|record| Record {
            sequence: u32::MAX,
            ..record
        });
        let Some(renumbered) = renumbered else {
            panic!("the saved record does not decode");
        };
        memory[..record::LEN].copy_from_slice(&renumbered.encode());

        assert!(filter.insert(&2u64).is_ok());
        assert_eq!(boot_and_save(&mut memory, &filter), (Some(u32::MAX), Ok(0)));
        let (sequence, loaded) = boot(&mut memory);
        assert_eq!(sequence, Some(0), "the older image was loaded");
        assert!(loaded.contains(&2u64));
        assert!(is_newer(0, u32::MAX) && is_newer(5, 4) && !is_newer(4, 5));
        assert!(!is_newer(7, 7));
    }

    #[test]
    fn the_image_saved_after_a_boot_beats_a_damaged_image_of_any_number() {
        // Found by the flash_image fuzz target: the other slot held a record
        // numbered 2^31 whose snapshot was damaged, so boot loaded image 1,
        // but the save took number 2^31 + 1 from the damaged record, exactly
        // 2^31 after image 1, which serial-number arithmetic cannot order:
        // the next boot loaded image 1 again and the save was lost.
        let mut memory = [0xffu8; 2048];
        let mut filter = Filter::new(1);
        assert!(filter.insert(&1u64).is_ok());
        assert_eq!(boot_and_save(&mut memory, &filter), (None, Ok(1)));
        // Slot 1: a record numbered 2^31 over a snapshot that fails its CRC.
        let damaged = Record {
            sequence: 1 << 31,
            ..sample()
        };
        memory[1024..1024 + record::LEN].copy_from_slice(&damaged.encode());

        assert!(filter.insert(&2u64).is_ok());
        assert_eq!(boot_and_save(&mut memory, &filter), (Some(1), Ok(2)));
        let (sequence, loaded) = boot(&mut memory);
        assert_eq!(sequence, Some(2), "the saved image was not loaded");
        assert!(loaded.contains(&2u64));
    }

    #[test]
    fn boot_says_why_it_loaded_nothing() {
        let mut memory = [0xffu8; 2048];
        let mut store = ImageStore::new(crate::RamFlash::<4, 256>::new(&mut memory), LAYOUT);
        let mut loaded = Filter::new(0);
        assert_eq!(store.load_newest(&mut loaded), Err(NoImage::NoneSaved));

        // An image saved by a firmware of layout version 1 (alternate
        // buckets placed another way): its snapshot intact, CRC and all,
        // but refused for its version.
        let mut filter = Filter::new(1);
        assert!(filter.insert(&1u64).is_ok());
        assert_eq!(boot_and_save(&mut memory, &filter), (None, Ok(1)));
        let Some(saved) = saved_record(&mut memory) else {
            panic!("the saved record does not decode");
        };
        let snapshot = &mut memory[record::LEN..record::LEN + saved.image_len as usize];
        snapshot[4..6].copy_from_slice(&1u16.to_le_bytes());
        let body_len = snapshot.len() - 4;
        let crc = CRC32.checksum(&snapshot[..body_len]);
        snapshot[body_len..].copy_from_slice(&crc.to_le_bytes());

        let mut store = ImageStore::new(crate::RamFlash::<4, 256>::new(&mut memory), LAYOUT);
        assert_eq!(
            store.load_newest(&mut loaded),
            Err(NoImage::Refused(SnapshotError::UnsupportedVersion(1)))
        );
    }

    #[test]
    fn images_fill_a_slot_to_the_byte_and_not_one_more() {
        let mut memory = [0xffu8; 2048];
        let mut store = ImageStore::new(crate::RamFlash::<4, 256>::new(&mut memory), LAYOUT);
        let room = LAYOUT.slot_len - RECORD_LEN;
        assert_eq!(store.begin(room), Ok(()));
        assert_eq!(store.begin(room + 1), Err(StoreError::ImageTooLarge));
        assert_eq!(store.write_image(room - 4, &[1, 2, 3, 4]), Ok(()));
        assert_eq!(
            store.write_image(room, &[1, 2, 3, 4]),
            Err(StoreError::ImageTooLarge)
        );
    }

    #[test]
    fn a_ragged_last_write_lands_after_the_aligned_part_padded_with_erased_bytes() {
        let mut memory = [0xffu8; 2048];
        {
            let mut store = ImageStore::new(crate::RamFlash::<4, 256>::new(&mut memory), LAYOUT);
            assert_eq!(store.begin(15), Ok(()));
            assert_eq!(store.write_image(0, &[9; 8]), Ok(()));
            assert_eq!(store.write_image(8, &[1, 2, 3, 4, 5, 6, 7]), Ok(()));
        }
        // The spare slot of a store without an image is slot 0.
        let image = &memory[RECORD_LEN as usize..RECORD_LEN as usize + 20];
        assert_eq!(
            image,
            [9, 9, 9, 9, 9, 9, 9, 9, 1, 2, 3, 4, 5, 6, 7, 0xff, 0xff, 0xff, 0xff, 0xff]
        );
    }

    #[test]
    fn each_save_takes_the_next_number_and_the_newer_of_two_loads() {
        let mut memory = [0xffu8; 2048];
        let mut filter = Filter::new(1);
        let mut store = ImageStore::new(crate::RamFlash::<4, 256>::new(&mut memory), LAYOUT);
        assert_eq!(store.current_sequence(), None);
        for expected in 1..=3 {
            assert!(filter.insert(&expected).is_ok());
            let saved = store.save(&filter, PrefixLengths::new());
            assert_eq!(saved.map(|image| image.sequence), Ok(expected));
            assert_eq!(store.current_sequence(), Some(expected));
        }
        assert!(is_newer(10, 3) && !is_newer(3, 10));
        assert!(is_newer(3, u32::MAX - 5) && !is_newer(u32::MAX - 5, 3));
    }

    #[test]
    fn any_damage_or_another_magic_or_version_is_refused() {
        let bytes = sample().encode();
        for index in 0..record::LEN {
            let mut damaged = bytes;
            damaged[index] ^= 0x01;
            assert_eq!(Record::decode(&damaged), None, "byte {index}");
        }
        // Magic and version are checked, not only covered by the CRC.
        for field in [record::MAGIC, record::VERSION] {
            let mut other = bytes;
            other[field.offset] ^= 0x01;
            let crc = CRC32.checksum(&other[..record::CRC.offset]);
            record::CRC.write(&mut other, &crc.to_le_bytes());
            assert_eq!(Record::decode(&other), None, "{field:?}");
        }
    }
}
