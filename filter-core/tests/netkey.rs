//! Network keys: the family and prefix length a key reports are the ones
//! it was made with, and every family takes prefixes up to its longest
//! one and no longer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use filter_core::{AddressFamily, NetKey};

const V4: u32 = 0xc612_000a;
const V6: (u64, u64) = (0x2001_0db8_0000_0001, 0x0000_0000_0000_0010);

#[test]
fn a_key_reports_its_family_and_prefix_length() {
    for prefix_len in 0..=32 {
        let key = NetKey::ipv4(V4, prefix_len).unwrap();
        assert_eq!(key.family(), AddressFamily::Ipv4);
        assert_eq!(key.prefix_len(), prefix_len);
    }
    for prefix_len in 0..=128 {
        let key = NetKey::ipv6(V6.0, V6.1, prefix_len).unwrap();
        assert_eq!(key.family(), AddressFamily::Ipv6);
        assert_eq!(key.prefix_len(), prefix_len);
    }
}

#[test]
fn each_family_takes_prefixes_up_to_its_longest() {
    let ipv4 = AddressFamily::Ipv4.max_prefix_len();
    let ipv6 = AddressFamily::Ipv6.max_prefix_len();
    assert_eq!((ipv4, ipv6), (32, 128));
    assert!(NetKey::ipv4(V4, ipv4).is_some());
    assert!(NetKey::ipv4(V4, ipv4 + 1).is_none());
    assert!(NetKey::ipv6(V6.0, V6.1, ipv6).is_some());
    assert!(NetKey::ipv6(V6.0, V6.1, ipv6 + 1).is_none());
}
