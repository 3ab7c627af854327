//! The blocklist data plane: parse the frame, take the matched address,
//! check the allowlist and the cuckoo filter, count, return a verdict.
//!
//! Three programs per [`cfxdp::FilterShape`], all the same generic code over
//! the [`Hook`] they run on: the XDP program (`cfxdp_fp8`, `_fp16`, `_fp32`)
//! and two TC programs, one for ingress (`cftc_in_*`) and one for egress
//! (`cftc_out_*`), which matches the other address (the destination of
//! what leaves, where ingress matches the source of what arrives). The
//! loader loads the ones of the shape it needs; they share every map. A
//! TC program first makes the headers the parser reads linear when the
//! kernel left them in fragments, and returns `TC_ACT_UNSPEC` for a pass,
//! so the programs after it on the hook run too. The filter is
//! probed with `filter-core`'s own code: [`NetKey`] for the key and its
//! hash, [`locate`] for the fingerprint and buckets, [`buckets_contain`] on
//! both buckets copied out of map memory. (The `locate` object, for the
//! tests, reports what that code computes for a packet.)
//!
//! Before the first probe, the live profile's [`Prefilter`] gives the active
//! prefix lengths that have keys in the address's coarse block: the filter
//! is probed at those only, and not at all when there are none. A profile
//! whose prefilter would save too little (every block marked) has the
//! family in `prefilter_skipped`, and the program probes every active
//! length without reading it. Each probe reads both buckets before
//! comparing either, so their cache misses overlap.
//!
//! A dropped packet (and in monitor mode one that would be) may be
//! sampled for userspace ([`sample`]): a one-in-N draw, then the CPU's
//! token bucket, then a reservation in the ring of [`DropEvent`]s that
//! carries the address, the prefix length that hit and the frame's first
//! bytes. A passed packet never reaches that code, and with sampling off
//! (rate 0) a dropped one reads one field more.
//!
//! Decision, for an IP packet and its matched address:
//! * deny policy: listed in the filter at any active prefix length ->
//!   allowlisted? pass (`Allowlisted`) : drop (`Dropped`), else pass
//!   (`Passed`);
//! * allow policy: allowlisted -> pass (`Allowlisted`), else drop;
//! * monitor mode turns every drop, malformed frames included, into a pass
//!   counted as `WouldDrop` (or `Malformed`).
#![no_std]
#![no_main]

use aya_ebpf::{
    bindings::{
        xdp_action, BPF_F_MMAPABLE, BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP,
        TC_ACT_SHOT, TC_ACT_UNSPEC,
    },
    btf_maps::{lpm_trie::Key, Array, ArrayOfMaps, LpmTrie, PerCpuArray, RingBuf},
    helpers::{
        bpf_get_prandom_u32, bpf_ktime_get_coarse_ns, bpf_ktime_get_ns, bpf_ringbuf_query,
        bpf_skb_load_bytes, bpf_xdp_load_bytes,
    },
    macros::{btf_map, classifier, xdp},
    programs::{TcContext, XdpContext},
};
use cfxdp::{
    counter_index,
    packet::{parse, Direction, Frame, Ipv6Address, PacketBytes, MAX_PARSED_BYTES},
    prefilter::{skip_bit, Prefilter},
    read_once, Config, Counter, DropEvent, Family, MalformedAction, Mode, Outcome, Policy,
    ProgramHook, Sampler, TrafficDirection, COUNTER_COUNT, DEFAULT_ALLOWLIST_ENTRIES,
    DROP_EVENTS_RING_BYTES, FILTER_TABLE_FLAGS, MAX_EVENT_FRAME_BYTES, NO_PREFIX, PROFILE_COUNT,
};
use filter_core::{
    layout::{buckets_contain, locate},
    AddressFamily, Fingerprint, NetKey,
};

/// A filter table: element `i` is bucket `i`. The loader replaces the outer
/// maps' inner template with one of the size it chooses; 1 is a
/// placeholder.
type Table<F, const S: usize> = Array<[F; S], 1, FILTER_TABLE_FLAGS>;
type Tables<F, const S: usize> = ArrayOfMaps<Table<F, S>, PROFILE_COUNT>;

#[btf_map]
static CONFIG: Array<Config, 1, { BPF_F_MMAPABLE as usize }> = Array::new();

/// One outer map of filter tables and three programs per
/// [`cfxdp::FilterShape`].
macro_rules! shape_programs {
    ($((
        $variant:ident, $fingerprint:ty, $slots:literal,
        $program:ident, $tc_ingress:ident, $tc_egress:ident, $outer_map:ident
    ))*) => {
        $(
            #[btf_map]
            static $outer_map: Tables<$fingerprint, $slots> = ArrayOfMaps::new();

            #[xdp]
            pub fn $program(ctx: XdpContext) -> u32 {
                if run(&ctx, &$outer_map, TrafficDirection::Ingress) {
                    xdp_action::XDP_DROP
                } else {
                    xdp_action::XDP_PASS
                }
            }

            #[classifier]
            pub fn $tc_ingress(ctx: TcContext) -> i32 {
                run_tc(&ctx, &$outer_map, TrafficDirection::Ingress)
            }

            #[classifier]
            pub fn $tc_egress(ctx: TcContext) -> i32 {
                run_tc(&ctx, &$outer_map, TrafficDirection::Egress)
            }
        )*
    };
}
cfxdp::with_each_shape!(shape_programs);

/// Element `p`: the prefilter of profile `p`.
#[btf_map]
static PREFILTERS: Array<Prefilter, PROFILE_COUNT, { BPF_F_MMAPABLE as usize }> = Array::new();

#[btf_map]
static COUNTERS: PerCpuArray<Counter, COUNTER_COUNT> = PerCpuArray::new();

#[btf_map]
static DROP_EVENTS: RingBuf<DropEvent, DROP_EVENTS_RING_BYTES> = RingBuf::new();

#[btf_map]
static SAMPLERS: PerCpuArray<Sampler, 1> = PerCpuArray::new();

#[btf_map]
static ALLOW_V4: LpmTrie<[u8; 4], u8, DEFAULT_ALLOWLIST_ENTRIES> = LpmTrie::new();

#[btf_map]
static ALLOW_V6: LpmTrie<[u8; 16], u8, DEFAULT_ALLOWLIST_ENTRIES> = LpmTrie::new();

/// 1 to match destination addresses instead of sources; set at load time.
#[no_mangle]
static MATCH_DESTINATION: u8 = 0;

#[inline(always)]
fn direction() -> Direction {
    if read_once(&MATCH_DESTINATION) == 0 {
        Direction::Source
    } else {
        Direction::Destination
    }
}

/// What the verdict code needs of the hook it runs on, beyond the
/// frame's bytes.
trait Hook: PacketBytes {
    /// Which hook this is.
    const HOOK: ProgramHook;
    /// Bytes of the whole frame.
    fn frame_len(&self) -> u64;
    /// The interface and the queue a sampled drop records.
    fn interface_and_queue(&self) -> (u32, u32);
    /// Copies the frame's first `len` bytes to `to`; whether it could.
    ///
    /// # Safety
    /// `to` is valid for `len` bytes of writes.
    unsafe fn copy_head(&self, to: *mut u8, len: u32) -> bool;
}

impl Hook for XdpContext {
    const HOOK: ProgramHook = ProgramHook::Xdp;

    #[inline(always)]
    fn frame_len(&self) -> u64 {
        (self.data_end() - self.data()) as u64
    }

    #[inline(always)]
    fn interface_and_queue(&self) -> (u32, u32) {
        // SAFETY: `self.ctx` is the program's context.
        unsafe { ((*self.ctx).ingress_ifindex, (*self.ctx).rx_queue_index) }
    }

    #[inline(always)]
    unsafe fn copy_head(&self, to: *mut u8, len: u32) -> bool {
        // SAFETY: the caller's promise on `to`; `self.ctx` is the context.
        unsafe { bpf_xdp_load_bytes(self.ctx, 0, to.cast(), len) == 0 }
    }
}

/// On TC, the interface the packet crosses (arriving or leaving) and its
/// queue mapping.
impl Hook for TcContext {
    const HOOK: ProgramHook = ProgramHook::Tc;

    #[inline(always)]
    fn frame_len(&self) -> u64 {
        self.len() as u64
    }

    #[inline(always)]
    fn interface_and_queue(&self) -> (u32, u32) {
        // SAFETY: `self.skb.skb` is the program's context.
        unsafe { ((*self.skb.skb).ifindex, (*self.skb.skb).queue_mapping) }
    }

    #[inline(always)]
    unsafe fn copy_head(&self, to: *mut u8, len: u32) -> bool {
        // SAFETY: the caller's promise on `to`; `self.skb.skb` is the
        // context.
        unsafe { bpf_skb_load_bytes(self.skb.skb.cast(), 0, to.cast(), len) == 0 }
    }
}

/// A TC program's run: the headers made linear when they are not (the
/// parser reads the linear part only; an skb whose first fragment is
/// shorter would otherwise read as malformed), then the verdict:
/// `TC_ACT_SHOT` to drop, `TC_ACT_UNSPEC` to pass on to the hook's next
/// program.
#[inline(always)]
fn run_tc<F: Fingerprint, const S: usize>(
    ctx: &TcContext,
    tables: &Tables<F, S>,
    traffic: TrafficDirection,
) -> i32 {
    let linear = ctx.data_end() - ctx.data();
    let len = ctx.len() as usize;
    if linear < MAX_PARSED_BYTES && len > linear {
        // A failed pull leaves the packet as it was: parsed as it is.
        let _ = ctx.pull_data(len.min(MAX_PARSED_BYTES) as u32);
    }
    if run(ctx, tables, traffic) {
        TC_ACT_SHOT
    } else {
        TC_ACT_UNSPEC
    }
}

/// Checks the frame travelling in `traffic` (its source arriving, its
/// destination leaving, or the other way round with `MATCH_DESTINATION`)
/// and counts it; whether to drop it.
#[inline(always)]
fn run<H: Hook, F: Fingerprint, const S: usize>(
    ctx: &H,
    tables: &Tables<F, S>,
    traffic: TrafficDirection,
) -> bool {
    let bytes = ctx.frame_len();
    let Some(config) = CONFIG.get(0) else {
        return false;
    };
    let matched = match traffic {
        TrafficDirection::Ingress => direction(),
        TrafficDirection::Egress => direction().opposite(),
    };
    let (outcome, family, address, hit) = match parse(ctx, matched) {
        Frame::NonIp => (Outcome::NonIp, Family::Other, None, NO_PREFIX),
        Frame::Malformed(family) => (Outcome::Malformed, family, None, NO_PREFIX),
        Frame::Ipv4(address) => {
            let address = Address::V4(address);
            let (outcome, hit) = classify(config, tables, address);
            (outcome, Family::Ipv4, Some(address), hit)
        }
        Frame::Ipv6(address) => {
            let address = Address::V6(address);
            let (outcome, hit) = classify(config, tables, address);
            (outcome, Family::Ipv6, Some(address), hit)
        }
    };
    let seen = Seen {
        traffic,
        outcome,
        family,
        address,
        hit,
        bytes,
    };
    count(&seen);
    let (drop, sampled) = match outcome {
        Outcome::Dropped => (true, true),
        Outcome::WouldDrop => (false, true),
        Outcome::Malformed => {
            let dropped = read_once(&config.malformed_action) == MalformedAction::Drop as u32;
            let enforced = read_once(&config.mode) == Mode::Enforce as u32;
            (dropped && enforced, dropped)
        }
        Outcome::Passed | Outcome::Allowlisted | Outcome::NonIp => (false, false),
    };
    if sampled {
        sample(ctx, config, &seen);
    }
    drop
}

#[derive(Clone, Copy)]
enum Address {
    V4(u32),
    V6(Ipv6Address),
}

/// What the program made of a frame: what it counts and samples.
struct Seen {
    traffic: TrafficDirection,
    outcome: Outcome,
    family: Family,
    /// The matched address, if the frame has one.
    address: Option<Address>,
    /// The prefix length whose probe hit, or [`NO_PREFIX`].
    hit: u8,
    /// The frame's length.
    bytes: u64,
}

/// The outcome for `address`, and the prefix length whose probe hit
/// ([`NO_PREFIX`] if none did, or the allow policy decided).
#[inline(always)]
fn classify<F: Fingerprint, const S: usize>(
    config: &Config,
    tables: &Tables<F, S>,
    address: Address,
) -> (Outcome, u8) {
    let hit = if read_once(&config.policy) == Policy::Allow as u32 {
        Some(NO_PREFIX)
    } else {
        listed(config, tables, address)
    };
    let Some(hit) = hit else {
        return (Outcome::Passed, NO_PREFIX);
    };
    let outcome = if allowlisted(config, address) {
        Outcome::Allowlisted
    } else if read_once(&config.mode) == Mode::Monitor as u32 {
        Outcome::WouldDrop
    } else {
        Outcome::Dropped
    };
    (outcome, hit)
}

/// Whether the address is in its family's allowlist; no trie lookup while
/// the allowlist is empty.
#[inline(always)]
fn allowlisted(config: &Config, address: Address) -> bool {
    match address {
        Address::V4(address) => {
            read_once(&config.allowlist_ipv4_entries) != 0
                && ALLOW_V4.get(&Key::new(32, address.to_be_bytes())).is_some()
        }
        Address::V6(address) => {
            let octets = ((address.high as u128) << 64 | address.low as u128).to_be_bytes();
            read_once(&config.allowlist_ipv6_entries) != 0
                && ALLOW_V6.get(&Key::new(128, octets)).is_some()
        }
    }
}

/// Asks the live prefilter which active prefix lengths have keys in the
/// address's block, then probes the live filter at each of them, longest
/// first, stopping at the first hit; at most `MAX_PREFIX_LENGTHS` probes.
/// The prefix length that hit, if one did.
#[inline(always)]
fn listed<F: Fingerprint, const S: usize>(
    config: &Config,
    tables: &Tables<F, S>,
    address: Address,
) -> Option<u8> {
    let index = config.live_index();
    let profile = &config.profiles[index as usize];
    let skipped = read_once(&profile.prefilter_skipped);
    let marked_lengths = match address {
        Address::V4(_) if skipped & skip_bit(AddressFamily::Ipv4) != 0 => u8::MAX,
        Address::V6(_) if skipped & skip_bit(AddressFamily::Ipv6) != 0 => u8::MAX,
        Address::V4(address) => PREFILTERS.get(index)?.ipv4_mask(address),
        Address::V6(address) => PREFILTERS.get(index)?.ipv6_mask(address.high),
    };
    if marked_lengths == 0 {
        return None;
    }
    let table = tables.get(index)?;
    let seed = read_once(&profile.seed);
    let mask = read_once(&profile.bucket_mask) as usize;
    let (lengths, count) = match address {
        Address::V4(_) => (&profile.ipv4_lengths, read_once(&profile.ipv4_length_count)),
        Address::V6(_) => (&profile.ipv6_lengths, read_once(&profile.ipv6_length_count)),
    };
    for (position, length) in lengths.iter().enumerate() {
        if position as u32 >= count {
            break;
        }
        if marked_lengths & (1 << position) == 0 {
            continue;
        }
        let prefix_len = read_once(length);
        let key = match address {
            Address::V4(address) => NetKey::ipv4(address, prefix_len),
            Address::V6(address) => NetKey::ipv6(address.high, address.low, prefix_len),
        };
        let Some(key) = key else {
            continue;
        };
        let location = locate::<F>(key.hash(seed), mask);
        // Both buckets are read before either is compared, so their cache
        // misses overlap, and compared with no branch between them.
        let primary = read_bucket(table, location.primary);
        let alternate = read_bucket(table, location.alternate);
        if buckets_contain(&primary, &alternate, location.fingerprint) {
            return Some(prefix_len);
        }
    }
    None
}

/// Bucket `index` of `table`, read once; an index out of range (never, the
/// mask keeps it in) reads as an empty bucket.
#[inline(always)]
fn read_bucket<F: Fingerprint, const S: usize>(table: &Table<F, S>, index: usize) -> [F; S] {
    match table.get(index as u32) {
        Some(bucket) => read_once(bucket),
        None => [F::EMPTY; S],
    }
}

/// The most drops the sampler skips without looking at the clock while
/// its bucket is empty.
const MAX_EMPTY_RUN: u64 = 63;

/// Samples a drop for userspace, if the one-in-N draw and this CPU's
/// token bucket let it: a reservation in the ring, filled and submitted
/// (or counted as lost when the ring is full).
#[inline(always)]
fn sample<H: Hook>(ctx: &H, config: &Config, seen: &Seen) {
    let cost = read_once(&config.sample_interval_ns);
    if cost == 0 {
        return;
    }
    let Some(sampler) = SAMPLERS.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: a per-CPU element, only this CPU writes it.
    let sampler = unsafe { &mut *sampler };
    let one_in = read_once(&config.sample_one_in);
    // SAFETY: a helper with no arguments.
    if one_in > 1 && unsafe { bpf_get_prandom_u32() } % one_in != 0 {
        sampler.skipped += 1;
        return;
    }
    // While the bucket is empty, a clock read per drop would cost more
    // than the rest of the filter: after each empty look the sampler
    // skips a growing run of drops (up to MAX_EMPTY_RUN) before it looks
    // again. The credit keeps accruing meanwhile, so no token is lost,
    // only taken a few drops later.
    if sampler.skip_run > 0 {
        sampler.skip_run -= 1;
        sampler.skipped += 1;
        return;
    }
    // The coarse clock (a tick's resolution) reads a cached value where
    // the precise one reads the clock source; a tick's worth of tokens at
    // once is within the burst.
    // SAFETY: a helper with no arguments.
    let now = unsafe { bpf_ktime_get_coarse_ns() };
    let most = read_once(&config.sample_credit_ns);
    let credit = (sampler.credit_ns + now.wrapping_sub(sampler.refilled_ns)).min(most);
    sampler.refilled_ns = now;
    if credit < cost {
        sampler.credit_ns = credit;
        sampler.skipped += 1;
        sampler.empty_run = (sampler.empty_run * 2 + 1).min(MAX_EMPTY_RUN);
        sampler.skip_run = sampler.empty_run;
        return;
    }
    sampler.empty_run = 0;
    sampler.credit_ns = credit - cost;
    let Some(mut entry) = DROP_EVENTS.reserve(0) else {
        sampler.lost += 1;
        return;
    };
    let event = entry.as_mut_ptr();
    let (ifindex, queue) = ctx.interface_and_queue();
    // SAFETY: `event` points at a reserved, writable DropEvent of the
    // ring; each field is written before the submit.
    unsafe {
        (*event).timestamp_ns = bpf_ktime_get_ns();
        (*event).address = match seen.address {
            Some(Address::V4(address)) => {
                let mut octets = [0; 16];
                octets[..4].copy_from_slice(&address.to_be_bytes());
                octets
            }
            Some(Address::V6(address)) => {
                ((address.high as u128) << 64 | address.low as u128).to_be_bytes()
            }
            None => [0; 16],
        };
        (*event).frame_len = seen.bytes as u32;
        (*event).ifindex = ifindex;
        (*event).rx_queue = queue as u16;
        (*event).hook = H::HOOK as u8;
        (*event).family = seen.family as u8;
        (*event).outcome = seen.outcome as u8;
        (*event).direction = seen.traffic as u8;
        (*event).prefix_len = seen.hit;
        let wanted = (read_once(&config.sample_frame_bytes) as u64).min(seen.bytes);
        let captured = wanted.min(MAX_EVENT_FRAME_BYTES as u64) as u32;
        (*event).captured = 0;
        if captured > 0 && ctx.copy_head((*event).frame.as_mut_ptr(), captured) {
            (*event).captured = captured as u8;
        }
    }
    // A wakeup is an interrupt the dropping CPU pays (a VM exit in a
    // guest): the reader is woken only once the ring is half full, and
    // otherwise reads on its own schedule.
    // SAFETY: the ring map's definition, as the reserve above passes it.
    let waiting = unsafe {
        bpf_ringbuf_query(
            core::ptr::from_ref(&DROP_EVENTS).cast_mut().cast(),
            BPF_RB_AVAIL_DATA as u64,
        )
    };
    let wakeup = if waiting >= (DROP_EVENTS_RING_BYTES / 2) as u64 {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    };
    entry.submit(wakeup as u64);
    sampler.sampled += 1;
}

#[inline(always)]
fn count(seen: &Seen) {
    let index = counter_index(seen.traffic, seen.outcome, seen.family);
    if let Some(counter) = COUNTERS.get_ptr_mut(index) {
        // SAFETY: a per-CPU element, only this CPU writes it.
        unsafe {
            (*counter).packets += 1;
            (*counter).bytes += seen.bytes;
        }
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
