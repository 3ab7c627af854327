//! The protocol's version and the limits that keep every message within
//! one frame (see [`super::frame`]).

/// The protocol version exchanged in [`Request::Hello`](super::Request::Hello). Version 2 put
/// every message in an [`Envelope`](super::Envelope) with a request id;
/// version 3 added [`Request::Traffic`](super::Request::Traffic);
/// version 4 the [`ResetCause`](super::ResetCause) in [`Info`](super::Info);
/// version 5 the [`JournalFill`](super::JournalFill) in it, and the
/// datagram counters in [`Stats`](super::Stats).
pub const PROTOCOL_VERSION: u16 = 5;
/// The id of the answer to a frame whose own id could not be read (a
/// damaged frame); a request sent with this id is never replayed.
pub const NO_ID: u32 = 0;
/// Most items in one [`Request::AddBatch`](super::Request::AddBatch) or [`Request::CheckBatch`](super::Request::CheckBatch).
pub const MAX_BATCH: usize = 32;
/// Most snapshot bytes in one [`Request::SnapshotChunk`](super::Request::SnapshotChunk).
pub const MAX_CHUNK_LEN: usize = 768;
/// Every snapshot chunk but the last is a multiple of this many bytes long,
/// so that a device can write chunks to flash as they come.
pub const CHUNK_ALIGN: usize = 4;
