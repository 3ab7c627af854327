//! Benchmark baselines: the same parsing as `cfxdp`, then an exact
//! lookup instead of the cuckoo filter, IPv4 source addresses only.
//!
//! * `baseline_hash`: a BPF hash map of `(prefix length, masked address)`
//!   keys, probed once per active prefix length, longest first, the way the
//!   filter is (for plain address lists that is one probe of a hash map of
//!   addresses, the aya book's blocklist);
//! * `baseline_lpm`: one lookup in a BPF LPM trie of the CIDRs;
//! * `baseline_parse`: the parsing alone, no lookup: the floor under the
//!   others.
//!
//! They drop on a match and pass everything else; they count nothing.
#![no_std]
#![no_main]

use aya_ebpf::{
    bindings::{xdp_action, BPF_F_MMAPABLE},
    btf_maps::{lpm_trie::Key, Array, HashMap, LpmTrie},
    macros::{btf_map, xdp},
    programs::XdpContext,
};
use cfxdp::{
    baseline_hash_key,
    packet::{parse, Direction, Frame},
    BaselineLengths,
};

/// Placeholder sizes; the benchmark sets the real ones at load time.
const DEFAULT_ENTRIES: usize = 1024;

#[btf_map]
static BASELINE_LENGTHS: Array<BaselineLengths, 1, { BPF_F_MMAPABLE as usize }> = Array::new();

#[btf_map]
static BASELINE_HASH: HashMap<u64, u8, DEFAULT_ENTRIES> = HashMap::new();

#[btf_map]
static BASELINE_LPM: LpmTrie<[u8; 4], u8, DEFAULT_ENTRIES> = LpmTrie::new();

#[xdp]
pub fn baseline_hash(ctx: XdpContext) -> u32 {
    let Frame::Ipv4(address) = parse(&ctx, Direction::Source) else {
        return xdp_action::XDP_PASS;
    };
    let Some(lengths) = BASELINE_LENGTHS.get(0) else {
        return xdp_action::XDP_PASS;
    };
    for (position, &prefix_len) in lengths.lengths.iter().enumerate() {
        if position as u32 >= lengths.count {
            break;
        }
        let key = baseline_hash_key(address, prefix_len);
        if BASELINE_HASH.get_ptr(key).is_some() {
            return xdp_action::XDP_DROP;
        }
    }
    xdp_action::XDP_PASS
}

#[xdp]
pub fn baseline_lpm(ctx: XdpContext) -> u32 {
    let Frame::Ipv4(address) = parse(&ctx, Direction::Source) else {
        return xdp_action::XDP_PASS;
    };
    if BASELINE_LPM
        .get(&Key::new(32, address.to_be_bytes()))
        .is_some()
    {
        xdp_action::XDP_DROP
    } else {
        xdp_action::XDP_PASS
    }
}

#[xdp]
pub fn baseline_parse(ctx: XdpContext) -> u32 {
    match parse(&ctx, Direction::Source) {
        // A use of the address, so the parsing is not optimized away; no
        // benchmark frame comes from 0.0.0.0.
        Frame::Ipv4(0) => xdp_action::XDP_DROP,
        _ => xdp_action::XDP_PASS,
    }
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
