//! The flash record decoder and image loading: a device boots from any
//! flash contents (two slots). Never a panic; boot only reads; a loaded
//! image is a consistent filter; and an image saved on top of whatever was
//! there is the one the next boot loads.
#![no_main]

use cuckoo_fuzz::{Filter, FLASH_ERASE, FLASH_LEN, FLASH_WRITE, LAYOUT, SEED};
use filter_core::protocol::{Request, Response, PROTOCOL_VERSION};
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
    let mut device = Device::boot(&mut filter, Flash::new(memory), LAYOUT, SEED);
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

fuzz_target!(|data: &[u8]| {
    let mut memory = vec![0xff; FLASH_LEN];
    let len = data.len().min(FLASH_LEN);
    memory[..len].copy_from_slice(&data[..len]);
    let original = memory.clone();

    let first = boot(&mut memory);
    assert!(memory == original, "booting wrote to flash");
    assert_eq!(
        boot(&mut memory),
        first,
        "two boots loaded different images"
    );

    let mut filter = Filter::new(0);
    let mut device = Device::boot(&mut filter, Flash::new(&mut memory), LAYOUT, SEED);
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
