//! The device client under faults, against a scripted fake device on a
//! socket pair (no QEMU): answers that arrive late, twice, out of order,
//! after the deadline, for other requests, or damaged. Every call must
//! return its own answer (or fail), never another request's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::thread::JoinHandle;
use std::time::Duration;

use cfctl::device::{DeviceClient, DeviceError, LinkTiming};
use filter_core::protocol::{
    self, Envelope, Error, FrameError, FrameReader, Item, Request, Response, MAX_FRAME_LEN, NO_ID,
};

/// The fake device's true answer to checking `k`.
fn truth(k: u64) -> bool {
    k.is_multiple_of(3)
}

fn frame_of<T: serde::Serialize>(message: &T) -> Vec<u8> {
    let mut out = vec![0u8; MAX_FRAME_LEN + 1];
    protocol::encode(message, &mut out).unwrap().to_vec()
}

fn answer(id: u32, present: bool) -> Vec<u8> {
    frame_of(&Envelope {
        id,
        message: Response::Checked { present },
    })
}

/// What the fake device sends for the `index`-th request frame it reads,
/// a check of `k` with id `id`; `None` stops it.
type Script = Box<dyn FnMut(usize, u32, u64) -> Option<Vec<(Duration, Vec<u8>)>> + Send>;

/// A fake device on one end of a socket pair: reads request frames (checks
/// only) and plays `script` for each: bytes to send, each after a pause.
fn fake_device(mut port: UnixStream, mut script: Script) -> JoinHandle<usize> {
    std::thread::spawn(move || {
        let mut reader = FrameReader::<MAX_FRAME_LEN>::new();
        let mut requests = 0;
        let mut byte = [0u8; 1];
        while let Ok(1) = port.read(&mut byte) {
            let Some(frame) = reader.push(byte[0]) else {
                continue;
            };
            let Ok(Envelope {
                id,
                message: Request::Check(Item::U64(k)),
            }) = frame.and_then(protocol::decode::<Envelope<Request>>)
            else {
                panic!("the client sent a frame that is not a check");
            };
            let Some(sends) = script(requests, id, k) else {
                break;
            };
            requests += 1;
            for (pause, bytes) in sends {
                std::thread::sleep(pause);
                if port.write_all(&bytes).is_err() {
                    return requests;
                }
            }
        }
        requests
    })
}

/// A client on a socket pair whose other end plays `script`.
fn client_with(
    timing: LinkTiming,
    script: Script,
) -> (DeviceClient<UnixStream>, JoinHandle<usize>) {
    let (host, device) = UnixStream::pair().unwrap();
    host.set_read_timeout(Some(Duration::from_millis(5)))
        .unwrap();
    (
        DeviceClient::with_timing(host, timing),
        fake_device(device, script),
    )
}

const QUICK: LinkTiming = LinkTiming {
    deadline: Duration::from_secs(5),
    resend_after: Duration::from_millis(30),
};

#[test]
fn answers_for_other_requests_and_damaged_frames_are_discarded() {
    let now = Duration::ZERO;
    let (mut client, device) = client_with(
        QUICK,
        Box::new(move |_, id, k| {
            let damaged = {
                let mut frame = answer(id, truth(k));
                frame[2] ^= 0x40;
                frame
            };
            Some(vec![
                // Before the answer: the previous request's answer again,
                // answers to another client's requests (out of order), a
                // damaged copy of the right one, and noise.
                (now, answer(id.wrapping_sub(1), !truth(k))),
                (now, answer(id ^ 0x8000_0000, !truth(k))),
                (now, answer(id.wrapping_add(1000), !truth(k))),
                (now, damaged),
                (now, vec![0x55, 0x13, 0x00]),
                (now, answer(id, truth(k))),
            ])
        }),
    );
    // Each damaged frame calls for a resend, whose answer has damaged
    // frames again: unless resends are rate-limited, they multiply, and
    // the calls never end.
    let (done, finished) = std::sync::mpsc::channel();
    let calls = std::thread::spawn(move || {
        for k in 0..50 {
            assert_eq!(client.check(Item::U64(k)).unwrap(), truth(k), "item {k}");
        }
        let _ = done.send(());
        client.link_stats()
    });
    finished
        .recv_timeout(Duration::from_secs(60))
        .expect("50 calls did not end within 60 s: a resend storm");
    let stats = calls.join().unwrap();
    assert!(stats.stale >= 150, "{stats:?}");
    assert!(stats.damaged >= 100, "{stats:?}");
    let frames = device.join().unwrap();
    assert!(
        frames < 500,
        "the client sent {frames} frames for 50 requests"
    );
}

#[test]
fn a_late_answer_is_waited_for_and_its_copies_are_discarded() {
    // The device answers each copy it gets, 100 ms late: the client resends
    // meanwhile, and the answers to the copies arrive during later calls.
    let (mut client, device) = client_with(
        QUICK,
        Box::new(|_, id, k| Some(vec![(Duration::from_millis(100), answer(id, truth(k)))])),
    );
    for k in 0..10 {
        assert_eq!(client.check(Item::U64(k)).unwrap(), truth(k), "item {k}");
    }
    let stats = client.link_stats();
    assert!(stats.resent > 0 && stats.stale > 0, "{stats:?}");
    drop(client);
    let copies = device.join().unwrap();
    assert!(copies > 10, "the device saw {copies} frames");
}

#[test]
fn an_answer_after_the_deadline_does_not_answer_the_next_request() {
    let timing = LinkTiming {
        deadline: Duration::from_millis(1000),
        resend_after: Duration::from_secs(10),
    };
    let (mut client, device) = client_with(
        timing,
        Box::new(|index, id, k| {
            // Past the first deadline, well before the second.
            let pause = if index == 0 { 1400 } else { 0 };
            Some(vec![(Duration::from_millis(pause), answer(id, truth(k)))])
        }),
    );
    assert!(matches!(
        client.check(Item::U64(1)),
        Err(DeviceError::Timeout(_))
    ));
    // The late "not present" for item 1 arrives while item 3 is asked.
    assert!(client.check(Item::U64(3)).unwrap());
    assert_eq!(client.link_stats().stale, 1);
    drop(client);
    device.join().unwrap();
}

#[test]
fn a_frame_the_device_could_not_read_is_sent_again() {
    // The device says the first copy of every request was damaged, and
    // answers the copies after it.
    let mut rejected_ids = std::collections::HashSet::new();
    let (mut client, device) = client_with(
        QUICK,
        Box::new(move |_, id, k| {
            let rejected = frame_of(&Envelope {
                id: NO_ID,
                message: Response::Error(Error::Frame(FrameError::Crc {
                    stored: 1,
                    computed: 2,
                })),
            });
            let first_copy = rejected_ids.insert(id);
            Some(vec![(
                Duration::ZERO,
                if first_copy {
                    rejected
                } else {
                    answer(id, truth(k))
                },
            )])
        }),
    );
    for k in 0..20 {
        assert_eq!(client.check(Item::U64(k)).unwrap(), truth(k), "item {k}");
    }
    let stats = client.link_stats();
    assert_eq!(stats.rejected, 20, "{stats:?}");
    // One resend per rejection (more only if the machine stalled for the
    // silence interval).
    assert!(stats.resent >= 20, "{stats:?}");
    drop(client);
    assert!(device.join().unwrap() >= 40);
}

#[test]
fn a_device_that_only_sends_damaged_frames_fails_the_call_at_the_deadline() {
    let timing = LinkTiming {
        deadline: Duration::from_millis(300),
        resend_after: Duration::from_millis(50),
    };
    let (mut client, device) = client_with(
        timing,
        Box::new(|_, _, _| Some(vec![(Duration::from_millis(20), vec![0x11, 0x22, 0x00])])),
    );
    assert!(matches!(
        client.check(Item::U64(1)),
        Err(DeviceError::BadResponse(_))
    ));
    drop(client);
    device.join().unwrap();
}
