//! Cross-target test vectors: `tests/vectors.csv` fixes, for a set of seeds,
//! keys and table shapes, the hash, fingerprint and both buckets. The XDP
//! program and the firmware reproduce the same file; this test checks that
//! filter-core itself still does (so a change to the hash or the layout
//! cannot slip through), and `UPDATE_VECTORS=1` regenerates it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fmt::Write as _;
use std::net::IpAddr;

use filter_core::layout::locate;
use filter_core::{KeyHash, KeyedHasher, NetKey};

const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors.csv");
const HEADER: &str = "seed,key,bucket_count,fingerprint_bits,hash,fingerprint,primary,alternate";

const SEEDS: [u64; 3] = [0, 0x5eed, 0xdead_beef_cafe_f00d];
const KEYS: [&str; 17] = [
    "net:198.18.0.1/32",
    "net:198.18.0.0/15",
    "net:198.19.255.255/24",
    "net:0.0.0.0/0",
    "net:255.255.255.255/32",
    "net:10.1.2.3/8",
    "net:2001:db8::1/128",
    "net:2001:db8::/32",
    "net:::/0",
    "net:2001:db8:ffff:ffff:ffff:ffff:ffff:ffff/64",
    "net:2001:db8:ffff:ffff:ffff:ffff:ffff:ffff/65",
    "net:2001:db8::abcd/127",
    "u64:0",
    "u64:1",
    "u64:42",
    "u64:18446744073709551615",
    "u64:81985529216486895",
];
const BUCKET_COUNTS: [usize; 3] = [1, 1024, 1 << 24];
const FINGERPRINT_BITS: [u32; 3] = [8, 16, 32];

fn parse_net_key(text: &str) -> NetKey {
    let (address, prefix_len) = text.split_once('/').expect("net key needs /prefix_len");
    let prefix_len: u8 = prefix_len.parse().expect("prefix length");
    match address.parse::<IpAddr>().expect("address") {
        IpAddr::V4(v4) => NetKey::ipv4_octets(v4.octets(), prefix_len),
        IpAddr::V6(v6) => NetKey::ipv6_octets(v6.octets(), prefix_len),
    }
    .expect("prefix length in range")
}

fn key_hash(seed: u64, key: &str) -> KeyHash {
    if let Some(net) = key.strip_prefix("net:") {
        parse_net_key(net).hash(seed)
    } else if let Some(number) = key.strip_prefix("u64:") {
        KeyedHasher::hash_item(seed, &number.parse::<u64>().expect("u64 key"))
    } else {
        panic!("unknown key kind in {key}")
    }
}

fn row(seed: u64, key: &str, bucket_count: usize, bits: u32) -> String {
    let hash = key_hash(seed, key);
    let mask = bucket_count - 1;
    let (fingerprint, primary, alternate) = match bits {
        8 => {
            let l = locate::<u8>(hash, mask);
            (u32::from(l.fingerprint), l.primary, l.alternate)
        }
        16 => {
            let l = locate::<u16>(hash, mask);
            (u32::from(l.fingerprint), l.primary, l.alternate)
        }
        _ => {
            let l = locate::<u32>(hash, mask);
            (l.fingerprint, l.primary, l.alternate)
        }
    };
    format!(
        "{seed:#x},{key},{bucket_count},{bits},{:#018x},{fingerprint},{primary},{alternate}",
        hash.0
    )
}

fn expected_file() -> String {
    let mut out = String::new();
    writeln!(out, "{HEADER}").unwrap();
    for seed in SEEDS {
        for key in KEYS {
            for bucket_count in BUCKET_COUNTS {
                for bits in FINGERPRINT_BITS {
                    writeln!(out, "{}", row(seed, key, bucket_count, bits)).unwrap();
                }
            }
        }
    }
    out
}

#[test]
fn filter_core_reproduces_the_checked_in_vectors() {
    let expected = expected_file();
    if std::env::var_os("UPDATE_VECTORS").is_some() {
        std::fs::write(PATH, &expected).unwrap();
    }
    let stored = std::fs::read_to_string(PATH).expect("tests/vectors.csv is checked in");
    assert_eq!(stored.lines().next(), Some(HEADER));
    for (line_number, (stored_row, computed_row)) in
        stored.lines().zip(expected.lines()).enumerate().skip(1)
    {
        assert_eq!(
            stored_row,
            computed_row,
            "vectors.csv line {} differs",
            line_number + 1
        );
    }
    assert_eq!(stored.lines().count(), expected.lines().count());
}

#[test]
fn net_keys_hash_like_their_words_through_the_generic_hasher() {
    use core::hash::Hasher;
    for seed in SEEDS {
        for key in KEYS.iter().filter_map(|k| k.strip_prefix("net:")) {
            let net = parse_net_key(key);
            let mut hasher = KeyedHasher::new(seed);
            for word in net.words() {
                hasher.write(&word.to_le_bytes());
            }
            assert_eq!(hasher.finish(), net.hash(seed).0, "{key}");
        }
    }
}

#[test]
fn bytes_hash_the_same_however_the_writes_split_them() {
    use core::hash::Hasher;
    let bytes: Vec<u8> = (1..=20).collect();
    let whole = {
        let mut hasher = KeyedHasher::new(7);
        hasher.write(&bytes);
        hasher.key_hash()
    };
    for split in 0..=bytes.len() {
        let (head, tail) = bytes.split_at(split);
        let mut hasher = KeyedHasher::new(7);
        hasher.write(head);
        hasher.write(tail);
        assert_eq!(hasher.key_hash(), whole, "split at {split}");
    }
}

#[test]
fn every_integer_write_hashes_as_its_little_endian_bytes() {
    use core::hash::Hasher;
    type Write = fn(&mut KeyedHasher);
    let writes: [(Write, Vec<u8>); 6] = [
        (|h| h.write_u8(0xa5), vec![0xa5]),
        (|h| h.write_u16(0xa5b6), 0xa5b6u16.to_le_bytes().to_vec()),
        (
            |h| h.write_u32(0xa5b6_c7d8),
            0xa5b6_c7d8u32.to_le_bytes().to_vec(),
        ),
        (
            |h| h.write_u64(0x0102_0304_0506_0708),
            0x0102_0304_0506_0708u64.to_le_bytes().to_vec(),
        ),
        (
            |h| h.write_u128(u128::MAX / 3),
            (u128::MAX / 3).to_le_bytes().to_vec(),
        ),
        (
            |h| h.write_usize(0xdead_beef),
            0xdead_beefusize.to_le_bytes().to_vec(),
        ),
    ];
    // After nothing (whole words) and after three bytes (a partial word).
    for prefix in [&[][..], &[1, 2, 3][..]] {
        for (write, bytes) in &writes {
            let mut integer = KeyedHasher::new(7);
            integer.write(prefix);
            write(&mut integer);
            let mut raw = KeyedHasher::new(7);
            raw.write(prefix);
            raw.write(bytes);
            assert_eq!(
                integer.finish(),
                raw.finish(),
                "{bytes:02x?} after {prefix:?}"
            );
            assert_ne!(
                integer.finish(),
                KeyedHasher::new(7).finish(),
                "{bytes:02x?} hashed as nothing"
            );
        }
    }
}

#[test]
fn the_32_bit_hash_folds_the_64_bit_one() {
    use core::hash::Hasher;
    use hash32::Hasher as _;
    for key in [0u64, 1, 0xdead_beef, u64::MAX] {
        let mut hasher = KeyedHasher::new(7);
        hasher.write_u64(key);
        let hash = hasher.finish();
        assert_eq!(
            hasher.finish32(),
            (hash as u32) ^ ((hash >> 32) as u32),
            "key {key}"
        );
    }
}

#[test]
fn fmix32_is_murmurhash3s_finalizer() {
    use filter_core::hash::fmix32;
    assert_eq!(fmix32(0), 0);
    assert_eq!(fmix32(1), 0x514e_28b7);
    assert_eq!(fmix32(0xdead_beef), 0x0de5_c6a9);
}
