//! The flash record decoder and image loading: a device boots from any
//! flash contents (two slots). Never a panic; boot only reads; a loaded
//! image is a consistent filter; and an image saved on top of whatever was
//! there is the one the next boot loads.
//!
//! Random bytes almost never carry a right CRC, so when the input's first
//! byte is odd the target first makes each slot's record CRC and its
//! snapshot's trailer CRC right (where the record says the snapshot ends):
//! the fields behind the CRCs get fuzzed too.
#![no_main]

use cuckoo_fuzz::{Filter, FLASH_ERASE, FLASH_LEN, FLASH_WRITE, LAYOUT, SEED};
use filter_core::protocol::{Request, ResetCause, Response, PROTOCOL_VERSION};
use filter_core::snapshot::{CRC32, TRAILER_LEN};
use firmware::store::{record, RECORD_LEN};
use firmware::{Device, RamFlash};
use libfuzzer_sys::fuzz_target;

type Flash<'m> = RamFlash<'m, FLASH_WRITE, FLASH_ERASE>;

fn bytes_of(filter: &Filter) -> Vec<u8> {
    let mut out = vec![0u8; filter.snapshot_len() as usize];
    filter.write_snapshot(&mut out).expect("the buffer fits");
    out
}

/// Boots on `memory`; returns the loaded table and sequence number.
fn boot(memory: &mut [u8]) -> (Vec<u8>, Option<u32>) {
    let mut filter = Filter::new(0);
    let mut device = Device::boot(
        &mut filter,
        Flash::new(memory),
        LAYOUT,
        SEED,
        ResetCause::PowerOn,
    );
    let hello = Request::Hello {
        version: PROTOCOL_VERSION,
    };
    let Response::Info(info) = device.answer(hello) else {
        panic!("hello failed");
    };
    assert!(info.entries <= info.capacity);
    assert_eq!(info.entries as usize, device.filter().len());
    (bytes_of(device.filter()), info.saved_sequence)
}

/// Makes the record CRC of the slot at `start`, and the CRC of the
/// snapshot its record points to, right.
fn fix_crcs(memory: &mut [u8], start: usize, slot_len: usize) {
    let slot = &mut memory[start..start + slot_len];
    let image_len = u32::from_le_bytes(
        slot[record::IMAGE_LEN.offset..record::IMAGE_LEN.end()]
            .try_into()
            .expect("four bytes"),
    ) as usize;
    let image_start = RECORD_LEN as usize;
    if image_len >= TRAILER_LEN && image_start + image_len <= slot_len {
        let trailer = image_start + image_len - TRAILER_LEN;
        let crc = CRC32.checksum(&slot[image_start..trailer]);
        slot[trailer..trailer + TRAILER_LEN].copy_from_slice(&crc.to_le_bytes());
    }
    let crc = CRC32.checksum(&slot[..record::CRC.offset]);
    slot[record::CRC.offset..record::CRC.end()].copy_from_slice(&crc.to_le_bytes());
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, contents)) = data.split_first() else {
        return;
    };
    let mut memory = vec![0xff; FLASH_LEN];
    let len = contents.len().min(FLASH_LEN);
    memory[..len].copy_from_slice(&contents[..len]);
    if mode & 1 == 1 {
        for start in LAYOUT.offsets {
            fix_crcs(&mut memory, start as usize, LAYOUT.slot_len as usize);
        }
    }
    let original = memory.clone();

    let first = boot(&mut memory);
    assert!(memory == original, "booting wrote to flash");
    assert_eq!(
        boot(&mut memory),
        first,
        "two boots loaded different images"
    );

    let mut filter = Filter::new(0);
    let mut device = Device::boot(
        &mut filter,
        Flash::new(&mut memory),
        LAYOUT,
        SEED,
        ResetCause::PowerOn,
    );
    device.answer(Request::Add(filter_core::protocol::Item::U64(7)));
    let saved = match device.answer(Request::Save) {
        Response::Saved { sequence } => Some((bytes_of(device.filter()), Some(sequence))),
        // Garbage in the spare slot's flash can fail the save; the image
        // in use must then still be the one that loads.
        Response::Error(_) => None,
        other => panic!("save answered {other:?}"),
    };
    let after = boot(&mut memory);
    assert_eq!(
        after,
        saved.unwrap_or(first),
        "the next boot loaded another image"
    );
});
