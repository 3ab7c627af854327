//! A board's build-time settings for its endpoint, read from the text of
//! environment variables (`option_env!`) by `const` functions: the
//! compiler evaluates them when the board is built, so text that is not a
//! setting fails the build with a message naming the variable
//! (`FILTER_DEVICE_KEY`, `FILTER_DEVICE_UDP`). Call them in a `const`
//! item; at run time they would panic on the same text.
// A panic in a `const` evaluation is a build error, not a fault at run
// time: this module's `panic!`s, `assert!`s and indexing are how the
// build refuses a setting.
#![allow(clippy::panic, clippy::indexing_slicing)]

use filter_core::protocol::datagram::{Key, KEY_LEN};

/// A key from its 64 hex digits (`FILTER_DEVICE_KEY`).
pub const fn key_from_hex(hex: &[u8]) -> Key {
    assert!(
        hex.len() == 2 * KEY_LEN,
        "FILTER_DEVICE_KEY must be 64 hex digits"
    );
    let mut key = [0u8; KEY_LEN];
    let mut index = 0;
    while index < KEY_LEN {
        key[index] = hex_digit(hex[2 * index]) << 4 | hex_digit(hex[2 * index + 1]);
        index += 1;
    }
    key
}

const fn hex_digit(digit: u8) -> u8 {
    match digit {
        b'0'..=b'9' => digit - b'0',
        b'a'..=b'f' => digit - b'a' + 10,
        b'A'..=b'F' => digit - b'A' + 10,
        _ => panic!("FILTER_DEVICE_KEY must be 64 hex digits"),
    }
}

/// An IPv4 address and UDP port from `A.B.C.D:PORT`
/// (`FILTER_DEVICE_UDP`).
pub const fn socket_from_text(text: &[u8]) -> ([u8; 4], u16) {
    const WRONG: &str = "FILTER_DEVICE_UDP must be A.B.C.D:PORT (a port from 1 to 65535)";
    // The four parts of the address, then the port.
    let mut numbers = [0u32; 5];
    let mut current = 0;
    let mut digits = 0;
    let mut index = 0;
    while index < text.len() {
        let byte = text[index];
        let separator = if current < 3 { b'.' } else { b':' };
        if byte.is_ascii_digit() && digits < 5 {
            numbers[current] = numbers[current] * 10 + (byte - b'0') as u32;
            digits += 1;
        } else if byte == separator && digits > 0 && current < 4 {
            current += 1;
            digits = 0;
        } else {
            panic!("{}", WRONG);
        }
        index += 1;
    }
    assert!(current == 4 && digits > 0, "{}", WRONG);
    let mut address = [0u8; 4];
    let mut part = 0;
    while part < 4 {
        assert!(numbers[part] <= 255, "{}", WRONG);
        address[part] = numbers[part] as u8;
        part += 1;
    }
    assert!(numbers[4] >= 1 && numbers[4] <= 65_535, "{}", WRONG);
    (address, numbers[4] as u16)
}
