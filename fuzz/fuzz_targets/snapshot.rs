//! Snapshot loading, whole and chunked, on any bytes: never a panic; both
//! ways agree; a rejected snapshot leaves the target filter exactly as it
//! was; an accepted one writes back byte for byte. The first input byte
//! picks the chunk length, the rest is the snapshot.
#![no_main]

use cuckoo_fuzz::Filter;
use filter_core::SnapshotLoader;
use libfuzzer_sys::fuzz_target;

fn bytes_of(filter: &Filter) -> Vec<u8> {
    let mut out = vec![0u8; filter.snapshot_len() as usize];
    filter.write_snapshot(&mut out).expect("the buffer fits");
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&chunk_byte, snapshot)) = data.split_first() else {
        return;
    };
    let chunk_len = usize::from(chunk_byte) + 1;

    let mut whole = Filter::new(0x1234);
    for value in 0..20u64 {
        whole.insert(&value).expect("room for 20 items");
    }
    let before = bytes_of(&whole);
    let whole_result = whole.load_snapshot(snapshot);
    match &whole_result {
        Ok(()) => assert_eq!(bytes_of(&whole), snapshot, "no exact round trip"),
        Err(_) => assert_eq!(
            bytes_of(&whole),
            before,
            "a rejected snapshot changed the filter"
        ),
    }

    let mut staging = Filter::new(0);
    let mut loader = SnapshotLoader::new();
    let chunked = snapshot
        .chunks(chunk_len)
        .try_for_each(|chunk| loader.feed(&mut staging, chunk))
        .and_then(|()| loader.finish(&mut staging));
    assert_eq!(
        chunked.is_ok(),
        whole_result.is_ok(),
        "{chunked:?} vs {whole_result:?}"
    );
    if chunked.is_ok() {
        assert_eq!(bytes_of(&staging), snapshot);
    }
});
