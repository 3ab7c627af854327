//! The device's frame decoder and request handler (firmware `Device` on
//! the host, in-RAM flash), fed any byte stream. Checks that every frame
//! gets exactly one response, which decodes and carries the request's id
//! (or none for an unreadable frame), and that the filter never loses an
//! item: a model counts the copies of each item the device said it added
//! and deleted (retransmissions replayed, not re-executed, as the device
//! does), and the device's answers and final table must agree with it.
#![no_main]

use std::collections::HashMap;

use cuckoo_fuzz::{Filter, FLASH_ERASE, FLASH_LEN, FLASH_WRITE, LAYOUT, SEED};
use filter_core::protocol::{
    self, Envelope, Error, FrameReader, Item, Prefix, Request, ResetCause, Response, MAX_FRAME_LEN,
    MAX_RESPONSE_FRAME_LEN, NO_ID,
};
use firmware::{Device, RamFlash};
use libfuzzer_sys::fuzz_target;

/// An item, owned, as a map key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    Net(Prefix),
    U64(u64),
    Bytes(Vec<u8>),
}

impl Key {
    fn of(item: &Item<'_>) -> Self {
        match *item {
            Item::Net(prefix) => Key::Net(prefix),
            Item::U64(value) => Key::U64(value),
            Item::Bytes(bytes) => Key::Bytes(bytes.to_vec()),
        }
    }

    fn item(&self) -> Item<'_> {
        match self {
            Key::Net(prefix) => Item::Net(*prefix),
            Key::U64(value) => Item::U64(*value),
            Key::Bytes(bytes) => Item::Bytes(bytes),
        }
    }
}

/// What the filter must hold: copies per item, unless a snapshot replaced
/// the filter, or a delete of an item the model does not hold found
/// something (a fingerprint collision: it removed another item's copy),
/// after which the model knows nothing until the next clear.
#[derive(Default)]
struct Model {
    copies: HashMap<Key, u32>,
    unknown: bool,
    /// Id and frame CRC of the last request executed.
    last: Option<(u32, u32)>,
}

impl Model {
    fn add(&mut self, items: &[Item<'_>]) {
        for item in items {
            *self.copies.entry(Key::of(item)).or_default() += 1;
        }
    }

    fn holds(&self, item: &Item<'_>) -> bool {
        !self.unknown && self.copies.get(&Key::of(item)).is_some_and(|&n| n > 0)
    }

    /// Checks the answer to one executed request and follows it.
    fn follow(&mut self, request: &Request<'_>, response: &Response) {
        match (request, response) {
            (Request::Add(item), Response::Added) => self.add(&[*item]),
            (Request::AddBatch(items), Response::BatchAdded { added }) => {
                assert_eq!(usize::from(*added), items.len(), "a batch added in part");
                self.add(items);
            }
            (Request::Add(item), Response::Error(Error::Full { added })) => {
                assert_eq!(*added, 0);
                let _ = item;
            }
            (Request::AddBatch(items), Response::Error(Error::Full { added })) => {
                self.add(&items[..usize::from(*added)]);
            }
            (Request::Delete(item), Response::Deleted { found }) => {
                let key = Key::of(item);
                match self.copies.get_mut(&key) {
                    Some(n) if *n > 0 && !self.unknown => {
                        assert!(found, "a listed item was not found: {item:?}");
                        *n -= 1;
                    }
                    _ => self.unknown |= found,
                }
            }
            (Request::Check(item), Response::Checked { present }) => {
                assert!(*present || !self.holds(item), "lost {item:?}");
            }
            (Request::CheckBatch(items), Response::BatchChecked { present }) => {
                for (index, item) in items.iter().enumerate() {
                    let hit = present & (1 << index) != 0;
                    assert!(hit || !self.holds(item), "lost {item:?}");
                }
            }
            (Request::Clear, Response::Cleared) => *self = Model::default(),
            (Request::SnapshotCommit, Response::SnapshotCommitted { .. }) => self.unknown = true,
            _ => {}
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut memory = vec![0xff; FLASH_LEN];
    let mut filter = Filter::new(0);
    let flash = RamFlash::<FLASH_WRITE, FLASH_ERASE>::new(&mut memory);
    let mut device = Device::boot(&mut filter, flash, LAYOUT, SEED, ResetCause::PowerOn);
    let mut model = Model::default();
    let mut reader = FrameReader::<MAX_FRAME_LEN>::new();
    let mut out = [0u8; MAX_RESPONSE_FRAME_LEN];
    for &byte in data {
        let Some(frame) = reader.push(byte) else {
            continue;
        };
        // What the device will read, decoded on a copy.
        let mut copy = frame
            .as_ref()
            .map(|frame| frame.to_vec())
            .unwrap_or_default();
        let request = frame
            .is_ok()
            .then(|| protocol::decode_with_crc::<Envelope<Request>>(&mut copy).ok())
            .flatten();
        let mut answer = device.answer_frame(frame, &mut out).to_vec();
        assert_eq!(answer.pop(), Some(0), "no response, or not one frame");
        assert!(!answer.contains(&0), "more than one response frame");
        let response = protocol::decode::<Envelope<Response>>(&mut answer)
            .expect("the device's response does not decode");
        let Some((Envelope { id, message }, crc)) = request else {
            assert_eq!(response.id, NO_ID);
            assert!(matches!(response.message, Response::Error(Error::Frame(_))));
            continue;
        };
        assert_eq!(response.id, id, "the response carries another id");
        let replayed = id != NO_ID && model.last == Some((id, crc));
        if !replayed {
            model.follow(&message, &response.message);
            model.last = (id != NO_ID).then_some((id, crc));
        }
    }
    if !model.unknown {
        let filter = device.filter();
        let expected: u32 = model.copies.values().sum();
        assert_eq!(
            filter.len(),
            expected as usize,
            "entries differ from the model"
        );
        for (key, &copies) in &model.copies {
            if copies > 0 {
                let hash = key.item().hash(filter.seed()).expect("added, so valid");
                assert!(filter.contains_hash(hash), "lost {key:?}");
            }
        }
    }
});
