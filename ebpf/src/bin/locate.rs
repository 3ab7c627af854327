//! For the tests only: `locate_key` writes to `LOCATE` the hash,
//! fingerprints and buckets of a packet's source address at the live
//! profile's first prefix length of its family, computed by the code the
//! data plane runs ([`parse`], [`NetKey`], [`locate`]), so that the tests
//! can hold them against filter-core's on the host. Its own `CONFIG` map
//! holds the profile the tests give it. It always passes.
#![no_std]
#![no_main]

use aya_ebpf::{
    bindings::{xdp_action, BPF_F_MMAPABLE},
    btf_maps::Array,
    macros::{btf_map, xdp},
    programs::XdpContext,
};
use cfxdp::{
    packet::{parse, Direction, Frame},
    read_once, Config, LocateReport, MAX_PREFIX_LENGTHS,
};
use filter_core::{layout::locate, Fingerprint, KeyHash, NetKey};

#[btf_map]
static CONFIG: Array<Config, 1, { BPF_F_MMAPABLE as usize }> = Array::new();

#[btf_map]
static LOCATE: Array<LocateReport, 1, { BPF_F_MMAPABLE as usize }> = Array::new();

#[xdp]
pub fn locate_key(ctx: XdpContext) -> u32 {
    let (Some(config), Some(report)) = (CONFIG.get(0), LOCATE.get_ptr_mut(0)) else {
        return xdp_action::XDP_PASS;
    };
    let profile = &config.profiles[config.live_index() as usize];
    let key = match parse(&ctx, Direction::Source) {
        Frame::Ipv4(address) => NetKey::ipv4(address, first_length(&profile.ipv4_lengths)),
        Frame::Ipv6(address) => NetKey::ipv6(
            address.high,
            address.low,
            first_length(&profile.ipv6_lengths),
        ),
        Frame::Malformed(_) | Frame::NonIp => None,
    };
    let Some(key) = key else {
        return xdp_action::XDP_PASS;
    };
    let hash = key.hash(read_once(&profile.seed));
    let mask = read_once(&profile.bucket_mask) as usize;
    let widths = [
        located::<u8>(hash, mask),
        located::<u16>(hash, mask),
        located::<u32>(hash, mask),
    ];
    let mut value = LocateReport {
        hash: hash.0,
        valid: 1,
        ..LocateReport::default()
    };
    for (width, (fingerprint, primary, alternate)) in widths.into_iter().enumerate() {
        value.fingerprint[width] = fingerprint;
        value.primary[width] = primary;
        value.alternate[width] = alternate;
    }
    // SAFETY: `report` points at the map's only element.
    unsafe { report.write(value) };
    xdp_action::XDP_PASS
}

#[inline(always)]
fn first_length(lengths: &[u8; MAX_PREFIX_LENGTHS]) -> u8 {
    read_once(&lengths[0])
}

#[inline(always)]
fn located<F: Fingerprint>(hash: KeyHash, mask: usize) -> (u32, u32, u32) {
    let location = locate::<F>(hash, mask);
    (
        location.fingerprint.to_u32(),
        location.primary as u32,
        location.alternate as u32,
    )
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
