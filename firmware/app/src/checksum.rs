//! The CRC-32 (ISO-HDLC) of the store's commit records and the journal's
//! records: bitwise, as the records are too small (60 and 16 bytes) for a
//! 1 KiB table to pay off.

/// The CRC-32 both record kinds carry.
pub(crate) static CRC32: crc::Crc<u32, crc::NoTable> =
    crc::Crc::<u32, crc::NoTable>::new(&crc::CRC_32_ISO_HDLC);
