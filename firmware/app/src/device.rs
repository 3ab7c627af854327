//! The device: the live filter, its prefix lengths, counters and image
//! store, and the answer to every [`Request`] of the wire protocol.
//!
//! This layer knows nothing of ports or bytes on a wire beyond whole frames
//! ([`Device::answer_frame`]); [`crate::serve()`] moves the bytes.
//!
//! Every add, delete and clear outlives a reset once it is answered: it
//! is written to the [`journal`] of the image in use, or,
//! when that has no room, a new image is saved. A change whose writing
//! fails is undone in the live filter and answered with a storage error.
//!
//! Requests also come in UDP datagrams ([`Device::answer_datagram`]),
//! sealed under a key: a datagram whose tag is wrong is not answered, and
//! one whose counter is not above the highest taken (through resets: the
//! counters are leased in the journal) is answered as stale, not executed.
//!
//! Invariants: every frame gets exactly one response frame, which carries
//! the request's id ([`NO_ID`] when the frame could not be read); a
//! damaged frame changes nothing; a retransmitted request (the same id
//! and frame CRC as the last one executed) is answered with the remembered
//! response and not executed again (see [`filter_core::protocol`]).

use embedded_storage::nor_flash::NorFlash;
use filter_core::protocol::datagram::{self, Key, Kind, MAX_RESPONSE_DATAGRAM_LEN};
use filter_core::protocol::{
    self, Envelope, Error, FrameError, Info, Item, Prefix, PrefixLengths, Request, ResetCause,
    Response, Stats, Traffic, MAX_CHUNK_LEN, NO_ID, PROTOCOL_VERSION,
};
use filter_core::{BucketStorage, CuckooFilter, Fingerprint};

use crate::bridge::{bridge, Verdict};
use crate::journal::{self, Change};
use crate::store::{Appended, Image, ImageStore, NoImage, Replayed, SlotLayout, StoreError};

/// A snapshot upload in progress: its bytes go straight into the store's
/// spare slot.
#[derive(Clone, Copy, Debug)]
struct Upload {
    total_len: u32,
    received: u32,
    prefix_lengths: PrefixLengths,
}

/// Datagram counters leased at a time: a lease record is written when a
/// counter passes the lease, so about one a second for a host counting in
/// microseconds.
const LEASE_STEP: u64 = 1 << 20;

/// Journal records kept free when a snapshot upload begins, for the leases
/// of the datagrams that carry it (a lease a second): a save in the middle
/// of the upload would overwrite the slot it is written into.
const UPLOAD_JOURNAL_ROOM: usize = 16;

/// The last request executed, to recognise a retransmission of it.
#[derive(Clone, Debug)]
struct LastRequest {
    id: u32,
    frame_crc: u32,
    response: Response,
}

/// The filter device, generic over the filter's fingerprint, bucket size
/// and storage, and over the flash that keeps its images.
pub struct Device<'f, F: Fingerprint, const S: usize, B, Flash> {
    filter: &'f mut CuckooFilter<F, S, B>,
    prefix_lengths: PrefixLengths,
    store: ImageStore<Flash>,
    upload: Option<Upload>,
    last_request: Option<LastRequest>,
    stats: Stats,
    traffic: Traffic,
    reset_cause: ResetCause,
    /// The highest datagram counter taken (after a reset: the lease).
    highest_counter: u64,
}

impl<'f, F, const S: usize, B, Flash> Device<'f, F, S, B, Flash>
where
    F: Fingerprint,
    B: BucketStorage<F, S>,
    Flash: NorFlash,
{
    /// Boots: loads the newest valid image from `flash` into `filter`, or
    /// starts empty with `default_seed` when there is none. `reset_cause`,
    /// as the board tells it, is reported in [`Info`].
    pub fn boot(
        filter: &'f mut CuckooFilter<F, S, B>,
        flash: Flash,
        layout: SlotLayout,
        default_seed: u64,
        reset_cause: ResetCause,
    ) -> Self {
        const {
            assert!(
                protocol::CHUNK_ALIGN.is_multiple_of(Flash::WRITE_SIZE)
                    && journal::RECORD_LEN.is_multiple_of(Flash::WRITE_SIZE),
                "snapshot chunks and journal records must be whole flash words"
            )
        };
        crate::log_info!("started after: {}", reset_cause);
        let mut store = ImageStore::new(flash, layout);
        let prefix_lengths = match store.load_newest(filter) {
            Ok(image) => {
                let (prefix_lengths, _replayed) = replay(&mut store, filter, image);
                crate::log_info!(
                    "loaded image {=u32} and {=u32} changes after it: {=usize} entries",
                    image.sequence,
                    _replayed.changes,
                    filter.len()
                );
                if _replayed.skipped > 0 {
                    crate::log_warn!(
                        "journal: {=u32} records of changes cut by power loss skipped",
                        _replayed.skipped
                    );
                }
                prefix_lengths
            }
            Err(why) => {
                match why {
                    NoImage::NoneSaved => {
                        crate::log_info!("no saved image: starting empty");
                    }
                    NoImage::Refused(_reason) => {
                        crate::log_warn!(
                            "saved image refused ({}): starting empty, push the blocklist again",
                            _reason
                        );
                    }
                }
                filter.reseed(default_seed);
                PrefixLengths::new()
            }
        };
        let highest_counter = store.lease();
        Self {
            filter,
            prefix_lengths,
            highest_counter,
            store,
            upload: None,
            last_request: None,
            stats: Stats::default(),
            traffic: Traffic::default(),
            reset_cause,
        }
    }

    /// The live filter.
    pub fn filter(&self) -> &CuckooFilter<F, S, B> {
        self.filter
    }

    /// Bridges `frame`, arriving on an Ethernet port that carries VLANs
    /// `vlans` (see [`crate::bridge`]): a source the filter lists at one
    /// of the active prefix lengths (as `Check` answers) is dropped. The
    /// frame is counted in the answer to `Traffic`.
    pub fn bridge_frame(&mut self, frame: &mut [u8], vlans: [u16; 2]) -> Verdict {
        let (filter, lengths) = (&*self.filter, &self.prefix_lengths);
        let lists = |source: &Prefix| {
            protocol::contains(filter, lengths, &Item::Net(*source)).unwrap_or(false)
        };
        bridge(frame, vlans, lists, &mut self.traffic)
    }

    /// Answers a request datagram sealed under `key` (see
    /// [`filter_core::protocol::datagram`]) with a datagram encoded into
    /// `out`: the response under the request's counter, or, for a counter
    /// not above the highest taken, a stale answer under that highest.
    /// Returns the answer, or `None` for a datagram not sealed under `key`
    /// (counted, never answered) or when the counter cannot be leased in
    /// flash. The request's frame is decoded in place in `datagram`.
    pub fn answer_datagram<'o>(
        &mut self,
        key: &Key,
        datagram: &mut [u8],
        out: &'o mut [u8; MAX_RESPONSE_DATAGRAM_LEN],
    ) -> Option<&'o [u8]> {
        let counter = match datagram::open(key, datagram) {
            Ok(opened) if opened.kind == Kind::Request => opened.counter,
            _ => {
                self.stats.datagrams_refused = self.stats.datagrams_refused.wrapping_add(1);
                return None;
            }
        };
        if counter <= self.highest_counter {
            self.stats.datagrams_stale = self.stats.datagrams_stale.wrapping_add(1);
            let len = datagram::seal(key, Kind::Stale, self.highest_counter, &[], out)?;
            return out.get(..len);
        }
        if let Err(_error) = self.lease_through(counter) {
            crate::log_warn!("datagram counters cannot be leased: {}", _error);
            return None;
        }
        self.highest_counter = counter;
        let frame_end = datagram.len() - datagram::TAG_LEN;
        let frame = datagram.get_mut(datagram::HEADER_LEN..frame_end)?;
        // The frame as the serial link carries it: without its delimiter.
        let frame = match frame.split_last_mut() {
            Some((0, frame)) => Ok(frame),
            _ => Err(FrameError::Encoding),
        };
        // The response is encoded in place, between header and tag.
        let response_end = datagram::HEADER_LEN + protocol::MAX_RESPONSE_FRAME_LEN;
        let response = out
            .get_mut(datagram::HEADER_LEN..response_end)?
            .try_into()
            .ok()?;
        let frame_len = self.answer_frame(frame, response).len();
        let len = datagram::seal_in_place(key, Kind::Response, counter, frame_len, out)?;
        out.get(..len)
    }

    /// Makes sure the journal leases datagram counters up to `counter`.
    fn lease_through(&mut self, counter: u64) -> Result<(), StoreError> {
        if counter <= self.store.lease() {
            return Ok(());
        }
        let lease = counter.saturating_add(LEASE_STEP);
        if self.store.extend_lease(lease)? == Appended::NoRoom {
            // A new image's journal starts with the lease, and has room.
            self.save().map_err(|_| StoreError::Flash)?;
            self.store.extend_lease(lease)?;
        }
        Ok(())
    }

    /// Answers one frame (or a framing error) with one response frame
    /// encoded into `out`; returns the bytes to send.
    pub fn answer_frame<'o>(
        &mut self,
        frame: Result<&mut [u8], FrameError>,
        out: &'o mut [u8; protocol::MAX_RESPONSE_FRAME_LEN],
    ) -> &'o [u8] {
        let answer = match frame.and_then(decode_request) {
            Ok((envelope, frame_crc)) => self.answer_envelope(envelope, frame_crc),
            Err(error) => {
                crate::log_warn!("rejected frame: {}", error);
                self.stats.frame_errors = self.stats.frame_errors.wrapping_add(1);
                Envelope {
                    id: NO_ID,
                    message: Response::Error(Error::Frame(error)),
                }
            }
        };
        self.stats.requests = self.stats.requests.wrapping_add(1);
        // Every response fits MAX_RESPONSE_FRAME_LEN (a protocol test checks
        // the largest ones), so the fallback is never sent.
        let len = protocol::encode(&answer, out).map_or(0, |frame| frame.len());
        out.get(..len).unwrap_or(&[])
    }

    /// Answers a readable request: again from memory if it is a copy of
    /// the last one, else by executing it (and remembering the answer).
    fn answer_envelope(
        &mut self,
        Envelope { id, message }: Envelope<Request<'_>>,
        frame_crc: u32,
    ) -> Envelope<Response> {
        if let Some(last) = &self.last_request {
            if id != NO_ID && last.id == id && last.frame_crc == frame_crc {
                self.stats.replayed = self.stats.replayed.wrapping_add(1);
                return Envelope {
                    id,
                    message: last.response.clone(),
                };
            }
        }
        let response = self.answer(message);
        if let Response::Error(_) = &response {
            self.stats.request_errors = self.stats.request_errors.wrapping_add(1);
        }
        self.last_request = (id != NO_ID).then(|| LastRequest {
            id,
            frame_crc,
            response: response.clone(),
        });
        Envelope {
            id,
            message: response,
        }
    }

    /// Answers one request. Not inlined, like `decode_request`, so that
    /// a request is decoded and answered in frames of their own.
    #[inline(never)]
    pub fn answer(&mut self, request: Request<'_>) -> Response {
        let records = match &request {
            Request::Add(_) | Request::Delete(_) | Request::Clear => 1,
            Request::AddBatch(items) => items.len(),
            _ => 0,
        };
        if let Err(error) = self.make_room(records) {
            return Response::Error(error);
        }
        match request {
            Request::Hello { version } if version != PROTOCOL_VERSION => {
                Response::Error(Error::VersionMismatch {
                    device: PROTOCOL_VERSION,
                })
            }
            Request::Hello { .. } => Response::Info(self.info()),
            Request::Add(item) => match self.add(&[item]) {
                Ok(_) => Response::Added,
                Err(error) => Response::Error(error),
            },
            Request::AddBatch(items) => match self.add(&items) {
                Ok(added) => Response::BatchAdded { added },
                Err(error) => Response::Error(error),
            },
            Request::Delete(item) => self.delete(&item),
            Request::Check(item) => match self.check(&item) {
                Ok(present) => Response::Checked { present },
                Err(error) => Response::Error(error),
            },
            Request::CheckBatch(items) => self.check_batch(&items),
            Request::Clear => self.clear(),
            Request::Stats => Response::Stats(self.stats),
            Request::Traffic => Response::Traffic(self.traffic),
            Request::SnapshotBegin {
                total_len,
                prefix_lengths,
            } => self.begin_snapshot(total_len, prefix_lengths),
            Request::SnapshotChunk { offset, data } => self.snapshot_chunk(offset, data),
            Request::SnapshotCommit => self.commit_snapshot(),
            Request::Save => match self.save() {
                Ok(sequence) => Response::Saved { sequence },
                Err(error) => Response::Error(error),
            },
            Request::Locate {
                seed,
                bucket_count,
                fingerprint_bits,
                item,
            } => match protocol::locate_item(&item, seed, bucket_count, fingerprint_bits) {
                Ok(located) => Response::Located(located),
                Err(error) => Response::Error(error),
            },
        }
    }

    fn info(&self) -> Info {
        Info {
            protocol_version: PROTOCOL_VERSION,
            fingerprint_bits: F::BITS as u8,
            slots_per_bucket: S as u8,
            bucket_count: self.filter.bucket_count() as u32,
            capacity: self.filter.capacity() as u32,
            seed: self.filter.seed(),
            entries: self.filter.len() as u32,
            prefix_lengths: self.prefix_lengths,
            saved_sequence: self.store.current_sequence(),
            journal: self.store.journal_fill(),
            reset_cause: self.reset_cause,
        }
    }

    /// Adds `items` in order; all are validated first, so an invalid item
    /// changes nothing. When the filter fills up, the items added before
    /// stay (and are saved); when saving fails, none stays.
    #[inline(never)]
    fn add(&mut self, items: &[Item<'_>]) -> Result<u16, Error> {
        let seed = self.filter.seed();
        items
            .iter()
            .try_for_each(|item| item.hash(seed).map(drop))?;
        let mut added = 0u16;
        let mut full = None;
        for item in items {
            let hash = item.hash(seed)?;
            if self.filter.insert_hash(hash).is_err() {
                full = Some(Error::Full { added });
                break;
            }
            added += 1;
        }
        let inserted = items.get(..usize::from(added)).unwrap_or(&[]);
        let changes = inserted.iter().filter_map(|item| {
            Some(Change::Insert {
                hash: item.hash(seed).ok()?,
                network: network_of(item),
            })
        });
        // The prefix lengths first, so that a save below keeps them.
        let lengths_before = self.prefix_lengths;
        for (family, len) in inserted.iter().filter_map(network_of) {
            self.prefix_lengths.insert(family, len);
        }
        if let Err(error) = self.persist(changes.clone()) {
            changes.for_each(|change| {
                if let Change::Insert { hash, .. } = change {
                    self.filter.remove_hash(hash);
                }
            });
            self.prefix_lengths = lengths_before;
            return Err(error);
        }
        self.stats.added = self.stats.added.wrapping_add(u32::from(added));
        full.map_or(Ok(added), Err)
    }

    fn delete(&mut self, item: &Item<'_>) -> Response {
        let hash = match item.hash(self.filter.seed()) {
            Ok(hash) => hash,
            Err(error) => return Response::Error(error),
        };
        let found = self.filter.remove_hash(hash);
        if found {
            if let Err(error) = self.persist(core::iter::once(Change::Remove(hash))) {
                // Its slot is free again: the fingerprint goes back in.
                let _ = self.filter.insert_hash(hash);
                return Response::Error(error);
            }
        }
        self.stats.deleted = self.stats.deleted.wrapping_add(u32::from(found));
        Response::Deleted { found }
    }

    /// Empties the filter; should saving that fail, the filter is read
    /// back from flash as it was.
    fn clear(&mut self) -> Response {
        self.filter.clear();
        self.prefix_lengths = PrefixLengths::new();
        if let Err(error) = self.persist(core::iter::once(Change::Clear)) {
            self.reload();
            return Response::Error(error);
        }
        crate::log_info!("cleared");
        Response::Cleared
    }

    /// Loads the image in use and its journal again: what the live filter
    /// held after the last change answered.
    fn reload(&mut self) {
        let (filter, prefix_lengths) = (&mut *self.filter, &mut self.prefix_lengths);
        match self.store.load_current(filter) {
            Ok(image) => *prefix_lengths = replay(&mut self.store, filter, image).0,
            Err(_) => {
                filter.clear();
                *prefix_lengths = PrefixLengths::new();
            }
        }
    }

    /// Saves a new image, which empties the journal, when the journal has
    /// no room for a change of `records` records: before the change, so
    /// that a save runs no deeper in the stack than a `Save` request.
    #[inline(never)]
    fn make_room(&mut self, records: usize) -> Result<(), Error> {
        if records > 0 && self.store.journal_room() < records {
            self.save()?;
        }
        Ok(())
    }

    /// Makes a change just made to the live filter outlive a reset: writes
    /// its records to the journal, or saves a new image when the journal
    /// has no room even after [`Self::make_room`] (a batch larger than a
    /// whole journal). Not inlined: its frame stays off the stack of an
    /// insert's relocation path, the deepest there is.
    #[inline(never)]
    fn persist(&mut self, changes: impl Iterator<Item = Change> + Clone) -> Result<(), Error> {
        match self.store.append(changes) {
            Ok(Appended::Written) => Ok(()),
            Ok(Appended::NoRoom) => self.save().map(drop),
            Err(error) => Err(storage_error(error)),
        }
    }

    fn check(&mut self, item: &Item<'_>) -> Result<bool, Error> {
        let present = protocol::contains(self.filter, &self.prefix_lengths, item)?;
        self.stats.checked = self.stats.checked.wrapping_add(1);
        self.stats.hits = self.stats.hits.wrapping_add(u32::from(present));
        Ok(present)
    }

    #[inline(never)]
    fn check_batch(&mut self, items: &[Item<'_>]) -> Response {
        let mut present = 0u32;
        for (index, item) in items.iter().enumerate() {
            match self.check(item) {
                Ok(hit) => present |= u32::from(hit) << index,
                Err(error) => return Response::Error(error),
            }
        }
        Response::BatchChecked { present }
    }

    #[inline(never)]
    fn begin_snapshot(&mut self, total_len: u32, prefix_lengths: PrefixLengths) -> Response {
        self.upload = None;
        let expected = self.filter.snapshot_len();
        if u64::from(total_len) != expected {
            return Response::Error(Error::SnapshotLength {
                expected: u32::try_from(expected).unwrap_or(u32::MAX),
            });
        }
        // (A device with no image has no journal, and no datagram taken:
        // the first one saves an image for its lease.)
        let journal_short =
            self.store.journal_fill().is_some() && self.store.journal_room() < UPLOAD_JOURNAL_ROOM;
        if journal_short {
            if let Err(error) = self.save() {
                return Response::Error(error);
            }
        }
        if let Err(error) = self.store.begin(total_len) {
            return Response::Error(storage_error(error));
        }
        crate::log_info!("snapshot upload of {=u32} bytes", total_len);
        self.upload = Some(Upload {
            total_len,
            received: 0,
            prefix_lengths,
        });
        Response::SnapshotStarted
    }

    #[inline(never)]
    fn snapshot_chunk(&mut self, offset: u32, data: &[u8]) -> Response {
        let Some(upload) = &mut self.upload else {
            return Response::Error(Error::NoSnapshotUpload);
        };
        let end = offset.saturating_add(data.len() as u32);
        let aligned = data.len().is_multiple_of(protocol::CHUNK_ALIGN) || end == upload.total_len;
        if offset != upload.received
            || end > upload.total_len
            || !aligned
            || data.len() > MAX_CHUNK_LEN
        {
            return Response::Error(Error::SnapshotChunk {
                expected_offset: upload.received,
            });
        }
        if let Err(error) = self.store.write_image(offset, data) {
            self.upload = None;
            return Response::Error(storage_error(error));
        }
        upload.received = end;
        Response::ChunkAccepted { received: end }
    }

    #[inline(never)]
    fn commit_snapshot(&mut self) -> Response {
        let Some(upload) = self.upload.take() else {
            return Response::Error(Error::NoSnapshotUpload);
        };
        let image = match self
            .store
            .commit(upload.received, upload.prefix_lengths, self.filter)
        {
            Ok(image) => image,
            Err(error) => return Response::Error(storage_error(error)),
        };
        // The image checked out in flash; copying it cannot fail unless the
        // flash itself does, and then the filter starts over empty.
        if let Err(error) = self.store.load_current(self.filter) {
            self.filter.clear();
            self.prefix_lengths = PrefixLengths::new();
            return Response::Error(storage_error(error));
        }
        self.prefix_lengths = image.prefix_lengths;
        crate::log_info!(
            "snapshot {=u32} committed: {=usize} entries",
            image.sequence,
            self.filter.len()
        );
        Response::SnapshotCommitted {
            entries: self.filter.len() as u32,
            sequence: image.sequence,
        }
    }

    /// Saves the live filter as a new image (its journal starts empty);
    /// returns the image's sequence number.
    #[inline(never)]
    fn save(&mut self) -> Result<u32, Error> {
        // The spare slot is about to be overwritten.
        self.upload = None;
        let image = self
            .store
            .save(self.filter, self.prefix_lengths)
            .map_err(storage_error)?;
        self.stats.saves = self.stats.saves.wrapping_add(1);
        crate::log_info!("saved image {=u32}", image.sequence);
        Ok(image.sequence)
    }
}

/// The request in `frame`, and the frame's CRC. Not inlined: decoding
/// moves a batch of items through several temporaries, which then leave
/// the stack before the request is answered (the deepest path).
#[inline(never)]
fn decode_request(frame: &mut [u8]) -> Result<(Envelope<Request<'_>>, u32), FrameError> {
    protocol::decode_with_crc::<Envelope<Request>>(frame)
}

/// Replays the journal of `image`, just loaded into `filter`: the prefix
/// lengths after it, and what replay found.
#[inline(never)]
fn replay<F: Fingerprint, const S: usize, B: BucketStorage<F, S>, Flash: NorFlash>(
    store: &mut ImageStore<Flash>,
    filter: &mut CuckooFilter<F, S, B>,
    image: Image,
) -> (PrefixLengths, Replayed) {
    let mut prefix_lengths = image.prefix_lengths;
    let replayed = store.replay_journal(|change| apply(filter, &mut prefix_lengths, change));
    (prefix_lengths, replayed)
}

/// Applies a journaled `change` to `filter` and its `prefix_lengths`.
fn apply<F: Fingerprint, const S: usize, B: BucketStorage<F, S>>(
    filter: &mut CuckooFilter<F, S, B>,
    prefix_lengths: &mut PrefixLengths,
    change: Change,
) {
    apply_lengths(prefix_lengths, change);
    match change {
        Change::Insert { hash, .. } => {
            if filter.insert_hash(hash).is_err() {
                crate::log_warn!("journal: a key no longer fits the filter");
            }
        }
        Change::Remove(hash) => {
            filter.remove_hash(hash);
        }
        Change::Clear => filter.clear(),
        // The store keeps leases itself (see `ImageStore::lease`).
        Change::Lease(_) => {}
    }
}

/// Applies `change` to the prefix lengths: a network's length becomes
/// active, a clear resets them.
fn apply_lengths(prefix_lengths: &mut PrefixLengths, change: Change) {
    match change {
        Change::Insert {
            network: Some((family, len)),
            ..
        } => prefix_lengths.insert(family, len),
        Change::Clear => *prefix_lengths = PrefixLengths::new(),
        Change::Insert { network: None, .. } | Change::Remove(_) | Change::Lease(_) => {}
    }
}

/// The family and prefix length of a network item.
fn network_of(item: &Item<'_>) -> Option<(filter_core::AddressFamily, u8)> {
    match item {
        Item::Net(prefix) => Some((prefix.family(), prefix.prefix_len())),
        _ => None,
    }
}

fn storage_error(error: StoreError) -> Error {
    crate::log_warn!("storage: {}", error);
    match error {
        StoreError::Verify(snapshot) => Error::Snapshot(snapshot),
        StoreError::Flash | StoreError::ImageTooLarge => Error::Storage,
    }
}
