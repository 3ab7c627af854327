//! cfctl's handling of what a device sends back: a client asks a batch
//! check and reads any bytes. Never a panic, and the result is what the
//! first frame carrying the request's id says (an answer to another id, a
//! damaged frame or noise never answers it); without one, the call fails.
#![no_main]

use std::time::Duration;

use cfctl::device::{DeviceClient, DeviceError, Link, LinkTiming};
use cuckoo_fuzz::{ScriptedPort, FIRST_ID};
use filter_core::protocol::{self, Envelope, FrameReader, Item, Response, MAX_FRAME_LEN};
use libfuzzer_sys::fuzz_target;

const ITEMS: [Item<'static>; 3] = [Item::U64(1), Item::U64(2), Item::Bytes(b"x")];

/// The first readable response with `FIRST_ID` in `data`, if any.
fn own_answer(data: &[u8]) -> Option<Response> {
    let mut reader = FrameReader::<MAX_FRAME_LEN>::new();
    data.iter().find_map(|&byte| {
        let frame = reader.push(byte)?.ok()?;
        protocol::decode::<Envelope<Response>>(frame)
            .ok()
            .filter(|answer| answer.id == FIRST_ID)
            .map(|answer| answer.message)
    })
}

fuzz_target!(|data: &[u8]| {
    // Resends and the deadline never come into play: the port ends first.
    let timing = LinkTiming {
        deadline: Duration::from_secs(3600),
        resend_after: Duration::from_secs(3600),
    };
    let link = Link::new(ScriptedPort { input: data }, timing).with_first_id(FIRST_ID);
    let mut client = DeviceClient::with_link(link);
    let result = client.check_batch(&ITEMS);
    match (own_answer(data), result) {
        (Some(Response::BatchChecked { present }), Ok(answers)) => {
            let expected: Vec<bool> = (0..ITEMS.len()).map(|i| present & (1 << i) != 0).collect();
            assert_eq!(answers, expected);
        }
        (Some(Response::Error(error)), Err(DeviceError::Refused(refused))) => {
            assert_eq!(error, refused)
        }
        (Some(other), Err(DeviceError::Unexpected { got, .. })) => assert_eq!(other, *got),
        (None, Err(DeviceError::Closed)) => {}
        (answer, result) => panic!("answer {answer:?} gave {result:?}"),
    }
});
