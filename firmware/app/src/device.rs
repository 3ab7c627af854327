//! The device: the live filter, its prefix lengths, counters and image
//! store, and the answer to every [`Request`] of the wire protocol.
//!
//! This layer knows nothing of ports or bytes on a wire beyond whole frames
//! ([`Device::answer_frame`]); [`crate::serve()`] moves the bytes.
//!
//! Invariants: every frame gets exactly one response frame, which carries
//! the request's id ([`NO_ID`] when the frame could not be read); a
//! damaged frame changes nothing; a retransmitted request (the same id
//! and frame CRC as the last one executed) is answered with the remembered
//! response and not executed again (see [`filter_core::protocol`]).

use filter_core::protocol::{
    self, Envelope, Error, FrameError, Info, Item, Prefix, PrefixLengths, Request, ResetCause,
    Response, Stats, Traffic, MAX_CHUNK_LEN, NO_ID, PROTOCOL_VERSION,
};
use filter_core::{BucketStorage, CuckooFilter, Fingerprint};

use crate::bridge::{bridge, Verdict};
use crate::store::{ImageStore, NoImage, SlotLayout, StoreError};

/// A snapshot upload in progress: its bytes go straight into the store's
/// spare slot.
#[derive(Clone, Copy, Debug)]
struct Upload {
    total_len: u32,
    received: u32,
    prefix_lengths: PrefixLengths,
}

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
}

impl<'f, F, const S: usize, B, Flash> Device<'f, F, S, B, Flash>
where
    F: Fingerprint,
    B: BucketStorage<F, S>,
    Flash: embedded_storage::nor_flash::NorFlash,
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
                protocol::CHUNK_ALIGN.is_multiple_of(Flash::WRITE_SIZE),
                "snapshot chunks must be whole flash words"
            )
        };
        crate::log_info!("started after: {}", reset_cause);
        let mut store = ImageStore::new(flash, layout);
        let prefix_lengths = match store.load_newest(filter) {
            Ok(image) => {
                crate::log_info!(
                    "loaded image {=u32}: {=usize} entries",
                    image.sequence,
                    filter.len()
                );
                image.prefix_lengths
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
        Self {
            filter,
            prefix_lengths,
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

    /// Answers one frame (or a framing error) with one response frame
    /// encoded into `out`; returns the bytes to send.
    pub fn answer_frame<'o>(
        &mut self,
        frame: Result<&mut [u8], FrameError>,
        out: &'o mut [u8; protocol::MAX_RESPONSE_FRAME_LEN],
    ) -> &'o [u8] {
        let answer = match frame.and_then(protocol::decode_with_crc::<Envelope<Request>>) {
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

    /// Answers one request.
    pub fn answer(&mut self, request: Request<'_>) -> Response {
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
            Request::Clear => {
                self.filter.clear();
                self.prefix_lengths = PrefixLengths::new();
                crate::log_info!("cleared");
                Response::Cleared
            }
            Request::Stats => Response::Stats(self.stats),
            Request::Traffic => Response::Traffic(self.traffic),
            Request::SnapshotBegin {
                total_len,
                prefix_lengths,
            } => self.begin_snapshot(total_len, prefix_lengths),
            Request::SnapshotChunk { offset, data } => self.snapshot_chunk(offset, data),
            Request::SnapshotCommit => self.commit_snapshot(),
            Request::Save => self.save(),
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
            reset_cause: self.reset_cause,
        }
    }

    /// Adds `items` in order; all are validated first, so an invalid item
    /// changes nothing.
    #[inline(never)]
    fn add(&mut self, items: &[Item<'_>]) -> Result<u16, Error> {
        let seed = self.filter.seed();
        items
            .iter()
            .try_for_each(|item| item.hash(seed).map(drop))?;
        let mut added = 0u16;
        for item in items {
            let hash = item.hash(seed)?;
            self.filter
                .insert_hash(hash)
                .map_err(|_| Error::Full { added })?;
            if let Item::Net(prefix) = item {
                self.prefix_lengths
                    .insert(prefix.family(), prefix.prefix_len());
            }
            added += 1;
            self.stats.added = self.stats.added.wrapping_add(1);
        }
        Ok(added)
    }

    fn delete(&mut self, item: &Item<'_>) -> Response {
        match item.hash(self.filter.seed()) {
            Ok(hash) => {
                let found = self.filter.remove_hash(hash);
                self.stats.deleted = self.stats.deleted.wrapping_add(u32::from(found));
                Response::Deleted { found }
            }
            Err(error) => Response::Error(error),
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
        if let Err(error) = self.store.begin(total_len) {
            return storage_error(error);
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
            return storage_error(error);
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
            Err(error) => return storage_error(error),
        };
        // The image checked out in flash; copying it cannot fail unless the
        // flash itself does, and then the filter starts over empty.
        if let Err(error) = self.store.load_current(self.filter) {
            self.filter.clear();
            self.prefix_lengths = PrefixLengths::new();
            return storage_error(error);
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

    #[inline(never)]
    fn save(&mut self) -> Response {
        // The spare slot is about to be overwritten.
        self.upload = None;
        match self.store.save(self.filter, self.prefix_lengths) {
            Ok(image) => {
                self.stats.saves = self.stats.saves.wrapping_add(1);
                crate::log_info!("saved image {=u32}", image.sequence);
                Response::Saved {
                    sequence: image.sequence,
                }
            }
            Err(error) => storage_error(error),
        }
    }
}

fn storage_error(error: StoreError) -> Response {
    crate::log_warn!("storage: {}", error);
    Response::Error(match error {
        StoreError::Verify(snapshot) => Error::Snapshot(snapshot),
        StoreError::Flash | StoreError::ImageTooLarge => Error::Storage,
    })
}
