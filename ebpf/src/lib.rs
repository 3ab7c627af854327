//! cfxdp, cfctl's data plane: the contract between the programs (XDP, and
//! TC for ingress and egress) and their loader (map and program names, the
//! layout of the config map, counter indices and the filter shapes the
//! programs are built for), and the frame parser ([`packet`]), which the
//! firmware's Ethernet bridge runs too, so both decide the same address
//! for the same bytes.
//!
//! Everything here is plain `#[repr(C)]` data, compiled both for
//! `bpfel-unknown-none` (the bins of this crate) and for the host (the
//! `cfctl` crate). The crate has no features on purpose: the eBPF build
//! runs inside the host workspace, so a host-only feature asked for by
//! `cfctl` would be switched on for the BPF target too. The filter's own
//! bytes (bucket layout, hash, key encoding) are defined once, in
//! `filter-core`; this crate only adds what the maps around it look like.
//!
//! # Maps of the `cfxdp` object
//!
//! | map                        | type              | contents                                  |
//! |----------------------------|-------------------|-------------------------------------------|
//! | [`CONFIG_MAP`]             | ARRAY, mmapable   | one [`Config`]                            |
//! | [`FilterShape::outer_map`] | ARRAY_OF_MAPS \[2\] | the filter tables, one per [`FilterProfile`] |
//! | [`PREFILTER_MAP`]          | ARRAY \[2\], mmapable | one [`prefilter::Prefilter`] per profile  |
//! | [`COUNTERS_MAP`]           | PERCPU_ARRAY      | one [`Counter`] per (outcome, family)     |
//! | [`ALLOW_V4_MAP`]           | LPM_TRIE          | IPv4 allowlist, `[u8; 4]` keys            |
//! | [`ALLOW_V6_MAP`]           | LPM_TRIE          | IPv6 allowlist, `[u8; 16]` keys           |
//! | [`DROP_EVENTS_MAP`]        | RINGBUF           | sampled drops, one [`DropEvent`] each     |
//! | [`SAMPLERS_MAP`]           | PERCPU_ARRAY \[1\] | one [`Sampler`]: token bucket and event counts |
//!
//! A filter table is a `BPF_F_MMAPABLE` ARRAY whose element `i` is bucket
//! `i` in `filter-core`'s layout, so its mmapped memory is exactly a
//! `[[F; S]; B]` table; see `cfctl::xdp` for why the filter lives in
//! such maps.
//!
//! Profile `p` owns filter table `p` and prefilter `p` (per coarse block,
//! the profile's lengths that have keys in it, see [`prefilter`]), so flipping
//! [`Config::active_profile`] swaps table, lengths and prefilter together.
#![no_std]

pub mod packet;
pub mod prefilter;

/// Name of the config map.
pub const CONFIG_MAP: &str = "CONFIG";
/// Name of the prefilter map: one [`prefilter::Prefilter`] per profile.
pub const PREFILTER_MAP: &str = "PREFILTERS";
/// Name of the per-CPU counter map.
pub const COUNTERS_MAP: &str = "COUNTERS";
/// Name of the IPv4 allowlist (LPM trie).
pub const ALLOW_V4_MAP: &str = "ALLOW_V4";
/// Name of the IPv6 allowlist (LPM trie).
pub const ALLOW_V6_MAP: &str = "ALLOW_V6";
/// Name of the ring buffer of sampled drops ([`DropEvent`]).
pub const DROP_EVENTS_MAP: &str = "DROP_EVENTS";
/// Name of the per-CPU sampler state ([`Sampler`]).
pub const SAMPLERS_MAP: &str = "SAMPLERS";
/// Name of the map the `locate` object's program writes (tests only).
pub const LOCATE_MAP: &str = "LOCATE";
/// Name of the program of the `locate` object (tests only), which reports
/// where a packet's key lives as the data plane's code computes it.
pub const LOCATE_PROGRAM: &str = "locate_key";
/// Name of the read-only global that selects the matched address: 0 for
/// the source, 1 for the destination. Set at load time.
pub const MATCH_DESTINATION_GLOBAL: &str = "MATCH_DESTINATION";

/// Entries of each allowlist (IPv4, IPv6) unless the loader sets another
/// size.
pub const DEFAULT_ALLOWLIST_ENTRIES: usize = 4096;

/// Most prefix lengths probed per family and packet: the probe budget.
pub const MAX_PREFIX_LENGTHS: usize = 8;
/// Filter profiles (and outer-map slots): the live one and the one being
/// prepared.
pub const PROFILE_COUNT: usize = 2;

/// Flags of every filter table: `BPF_F_MMAPABLE` (bulk fill and
/// single-slot atomic stores from userspace). Not `BPF_F_INNER_MAP`: all
/// tables of one loaded program have the size of the outer map's inner
/// template, so the verifier inlines bucket lookups.
pub const FILTER_TABLE_FLAGS: usize = 1 << 10;

/// Declares every filter shape once, and from that declaration
/// [`FilterShape`], [`by_shape!`] and [`with_each_shape!`].
macro_rules! filter_shapes {
    (
        $d:tt
        $(
            $(#[$meta:meta])*
            $variant:ident: $fingerprint:ty, $slots:literal,
                $program:ident, $tc_ingress:ident, $tc_egress:ident, $outer_map:ident;
        )*
    ) => {
        /// A filter shape the program is built for: fingerprint width and
        /// slots per bucket. Every bucket is 8 or 16 bytes, a multiple of
        /// the 8-byte element stride of an mmapable array, so the mapped
        /// table has `filter-core`'s layout with no gaps.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum FilterShape {
            $($(#[$meta])* $variant,)*
        }

        impl FilterShape {
            /// Every shape.
            pub const ALL: [FilterShape; [$(FilterShape::$variant),*].len()] =
                [$(FilterShape::$variant),*];

            /// Fingerprint width in bits.
            pub const fn fingerprint_bits(self) -> u32 {
                match self {
                    $(FilterShape::$variant => <$fingerprint>::BITS,)*
                }
            }

            /// Slots per bucket.
            pub const fn slots(self) -> usize {
                match self {
                    $(FilterShape::$variant => $slots,)*
                }
            }

            /// The XDP program probing a filter of this shape.
            pub const fn program(self) -> &'static str {
                match self {
                    $(FilterShape::$variant => stringify!($program),)*
                }
            }

            /// The TC program probing a filter of this shape on a
            /// direction's hook: sources on ingress and destinations on
            /// egress (or the other way round with [`MATCH_DESTINATION_GLOBAL`]
            /// set).
            pub const fn tc_program(self, direction: TrafficDirection) -> &'static str {
                match (self, direction) {
                    $(
                        (FilterShape::$variant, TrafficDirection::Ingress) => stringify!($tc_ingress),
                        (FilterShape::$variant, TrafficDirection::Egress) => stringify!($tc_egress),
                    )*
                }
            }

            /// The ARRAY_OF_MAPS holding this shape's filter tables.
            pub const fn outer_map(self) -> &'static str {
                match self {
                    $(FilterShape::$variant => stringify!($outer_map),)*
                }
            }
        }

        /// Calls `function::<F, S>(args)` for the fingerprint type `F` and
        /// the slots per bucket `S` of a [`FilterShape`] known at run time.
        #[macro_export]
        macro_rules! by_shape {
            ($d shape:expr, $d function:ident($d($d arg:expr),* $d(,)?)) => {
                match $d shape {
                    $($crate::FilterShape::$variant => $d function::<$fingerprint, $slots>($d($d arg),*),)*
                }
            };
        }

        /// Calls the macro `callback!` with one `(variant, fingerprint
        /// type, slots, XDP program, TC ingress program, TC egress
        /// program, outer map)` group per shape: what the program declares
        /// its maps and entry points with.
        #[macro_export]
        macro_rules! with_each_shape {
            ($d callback:ident) => {
                $d callback! {
                    $(($variant, $fingerprint, $slots, $program, $tc_ingress, $tc_egress, $outer_map))*
                }
            };
        }
    };
}

filter_shapes! {
    $
    /// 8-bit fingerprints, 8 slots per bucket (8-byte buckets).
    Fingerprint8: u8, 8, cfxdp_fp8, cftc_in_fp8, cftc_out_fp8, FILTERS_FP8;
    /// 16-bit fingerprints, 4 slots per bucket (8-byte buckets).
    Fingerprint16: u16, 4, cfxdp_fp16, cftc_in_fp16, cftc_out_fp16, FILTERS_FP16;
    /// 32-bit fingerprints, 4 slots per bucket (16-byte buckets).
    Fingerprint32: u32, 4, cfxdp_fp32, cftc_in_fp32, cftc_out_fp32, FILTERS_FP32;
}

impl FilterShape {
    /// The shape for a fingerprint width, if there is one.
    pub const fn from_bits(bits: u32) -> Option<Self> {
        let mut index = 0;
        while index < Self::ALL.len() {
            if Self::ALL[index].fingerprint_bits() == bits {
                return Some(Self::ALL[index]);
            }
            index += 1;
        }
        None
    }

    /// Bytes per bucket.
    pub const fn bucket_bytes(self) -> usize {
        self.slots() * self.fingerprint_bits() as usize / 8
    }
}

/// A run-time setting of the program, or a dimension of its counters: a
/// `#[repr(u32)]` enum whose discriminants are the values the maps hold,
/// with one name per value for the command line, reports and the store.
/// Declared once here (`setting!`) and used as they are by the program,
/// the loader, the store, the CLI and the reports.
pub trait Setting: Copy + PartialEq + Sized + 'static {
    /// Every value, in the order of the ABI values.
    const ALL: &'static [Self];

    /// The value's name.
    fn name(self) -> &'static str;

    /// Other names a value was once written with (read, never written).
    fn aliases(self) -> &'static [&'static str];

    /// The value as the maps hold it.
    fn to_u32(self) -> u32;

    /// The value of a name or an alias.
    fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .iter()
            .copied()
            .find(|value| value.name() == name || value.aliases().contains(&name))
    }

    /// The value the maps hold as `raw`, if it is one.
    fn from_u32(raw: u32) -> Option<Self> {
        Self::ALL
            .iter()
            .copied()
            .find(|value| value.to_u32() == raw)
    }
}

/// Declares a [`Setting`] enum: `Variant = value => "name" (| "alias")*`.
macro_rules! setting {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $($(#[$variant_meta:meta])* $variant:ident = $value:literal => $text:literal
                $(| $alias:literal)*,)*
        }
    ) => {
        $(#[$meta])*
        #[repr(u32)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name {
            $($(#[$variant_meta])* $variant = $value,)*
        }

        impl Setting for $name {
            const ALL: &'static [Self] = &[$($name::$variant),*];

            fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }

            fn aliases(self) -> &'static [&'static str] {
                match self {
                    $($name::$variant => &[$($alias),*],)*
                }
            }

            fn to_u32(self) -> u32 {
                self as u32
            }
        }
    };
}

setting! {
    /// Which way the packets a program sees travel: the XDP program's and
    /// the TC ingress program's arrive, the TC egress program's leave. The
    /// outer dimension of the counters.
    pub enum TrafficDirection {
        /// Arriving on the interface.
        Ingress = 0 => "ingress",
        /// Leaving by the interface.
        Egress = 1 => "egress",
    }
}

setting! {
    /// The hook a program runs on ([`DropEvent::hook`]).
    pub enum ProgramHook {
        /// The XDP hook (in the driver or in the generic stack).
        Xdp = 0 => "xdp",
        /// The TC hook (a tcx link or a clsact filter).
        Tc = 1 => "tc",
    }
}

setting! {
    /// What the program does with a packet that would be dropped
    /// ([`Config::mode`]).
    pub enum Mode {
        /// Drop it.
        Enforce = 0 => "enforce",
        /// Pass it and count it as would-drop.
        Monitor = 1 => "monitor",
    }
}

setting! {
    /// Which IP packets are dropped ([`Config::policy`]).
    pub enum Policy {
        /// Packets whose address is in the blocklist (and not allowlisted).
        Deny = 0 => "deny",
        /// Every IP packet whose address is not allowlisted.
        Allow = 1 => "allow",
    }
}

setting! {
    /// What happens to a truncated or malformed frame
    /// ([`Config::malformed_action`]).
    pub enum MalformedAction {
        /// Pass it (the default).
        Pass = 0 => "pass",
        /// Drop it (in enforce mode).
        Drop = 1 => "drop",
    }
}

setting! {
    /// Which address of a packet is matched: the read-only global
    /// [`MATCH_DESTINATION_GLOBAL`], fixed when the program is loaded.
    pub enum MatchAddress {
        /// The source address (a blocklist of senders).
        Source = 0 => "src" | "source",
        /// The destination address.
        Destination = 1 => "dst" | "destination",
    }
}

/// One filter generation: its seed, size and active prefix lengths. The
/// program reads `Config::profiles[Config::active_profile]` and the filter
/// table in slot `active_profile` of the outer map.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FilterProfile {
    /// Hash seed of the table.
    pub seed: u64,
    /// Bucket count minus one (the count is a power of two).
    pub bucket_mask: u32,
    /// How many entries of `ipv4_lengths` are in use.
    pub ipv4_length_count: u32,
    /// How many entries of `ipv6_lengths` are in use.
    pub ipv6_length_count: u32,
    /// IPv4 prefix lengths with keys in the table, longest first.
    pub ipv4_lengths: [u8; MAX_PREFIX_LENGTHS],
    /// IPv6 prefix lengths with keys in the table, longest first.
    pub ipv6_lengths: [u8; MAX_PREFIX_LENGTHS],
    /// Families whose prefilter the program does not read
    /// ([`prefilter::skip_bit`]): it probes every active length, as if
    /// every bit were set. The loader sets a family's bit when the prefilter
    /// would save too little to pay for its read
    /// ([`prefilter::Prefilter::pays`]); zero reads both.
    pub prefilter_skipped: u32,
}

impl FilterProfile {
    /// The active lengths of `family` in probe order (the stored count
    /// capped at [`MAX_PREFIX_LENGTHS`]).
    pub fn lengths(&self, family: filter_core::AddressFamily) -> &[u8] {
        let (lengths, count) = match family {
            filter_core::AddressFamily::Ipv4 => (&self.ipv4_lengths, self.ipv4_length_count),
            filter_core::AddressFamily::Ipv6 => (&self.ipv6_lengths, self.ipv6_length_count),
        };
        lengths.get(..count as usize).unwrap_or(lengths)
    }
}

/// The single value of the config map. Userspace maps it and changes one
/// aligned field at a time with atomic stores; the program reads each field
/// once per packet.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// A [`Mode`].
    pub mode: u32,
    /// A [`Policy`].
    pub policy: u32,
    /// A [`MalformedAction`].
    pub malformed_action: u32,
    /// Index of the live profile and filter slot: 0 or 1.
    pub active_profile: u32,
    /// Entries of the IPv4 allowlist, or more while it changes: never zero
    /// while the trie holds an entry. The program skips the trie lookup
    /// when it is zero.
    pub allowlist_ipv4_entries: u32,
    /// The same for the IPv6 allowlist.
    pub allowlist_ipv6_entries: u32,
    /// The two profiles.
    pub profiles: [FilterProfile; PROFILE_COUNT],
    /// Which store of entries the filter was built from (the control
    /// plane's, never read by the program).
    pub store_id: u64,
    /// The process id of a control-plane process changing the live filter
    /// right now, or zero (the control plane's crash marker, never read by
    /// the program).
    pub updating_pid: u32,
    /// [`ABI_VERSION`] of the loader that created the maps (never read by
    /// the program): a control plane of another version loads a new
    /// program rather than write into these maps.
    pub abi_version: u32,
    /// Sampled drops per second and CPU, the token bucket's refill rate
    /// (the control plane's record; the program reads
    /// `sample_interval_ns`).
    pub sample_rate: u32,
    /// Tokens the bucket holds at most: the longest burst of events one
    /// CPU writes at once (the control plane's record; the program reads
    /// `sample_credit_ns`).
    pub sample_burst: u32,
    /// A drop the bucket would sample is sampled with probability
    /// `1 / sample_one_in` (0 and 1: every one).
    pub sample_one_in: u32,
    /// Bytes of the frame an event carries, from the Ethernet header on,
    /// at most [`MAX_EVENT_FRAME_BYTES`].
    pub sample_frame_bytes: u32,
    /// Nanoseconds of refill one token costs, `10^9 / sample_rate`; zero
    /// turns sampling off. Precomputed so that a drop pays no division.
    pub sample_interval_ns: u64,
    /// The most credit the bucket holds, `sample_interval_ns *
    /// sample_burst`.
    pub sample_credit_ns: u64,
}

impl Config {
    /// Index of the live profile and filter slot, read once, always in
    /// range.
    #[inline(always)]
    pub fn live_index(&self) -> u32 {
        read_once(&self.active_profile) & (PROFILE_COUNT as u32 - 1)
    }
}

/// Reads a field of map memory that userspace may change at any time,
/// exactly once (the program's view of the config and the tables).
#[inline(always)]
pub fn read_once<T: Copy>(field: &T) -> T {
    // SAFETY: `field` is a valid, aligned reference.
    unsafe { core::ptr::read_volatile(field) }
}

/// The version of everything a loaded program and its control plane share:
/// this crate's map layouts and `filter-core`'s bucket layout and hash.
/// Change it with any of them; a change of `filter-core`'s
/// `LAYOUT_VERSION` alone does not build (see `LAYOUT_OF_THIS_ABI`).
pub const ABI_VERSION: u32 = 6;

/// The `filter-core` layout version [`ABI_VERSION`] was last changed with:
/// a control plane that wrote fingerprints of another layout into a
/// loaded program's tables would hide the keys from its lookups.
const LAYOUT_OF_THIS_ABI: u16 = 4;
const _: () = assert!(
    filter_core::layout::LAYOUT_VERSION == LAYOUT_OF_THIS_ABI,
    "filter-core's layout changed: change ABI_VERSION, and LAYOUT_OF_THIS_ABI with it"
);

/// Packets and bytes of one counter, per CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counter {
    /// Packets.
    pub packets: u64,
    /// Bytes (whole frames, from the Ethernet header on).
    pub bytes: u64,
}

setting! {
    /// Why a packet got its verdict: the first dimension of the counters.
    pub enum Outcome {
        /// An IP packet that matched nothing to drop.
        Passed = 0 => "passed",
        /// Dropped (blocklisted, or not allowlisted under the allow policy).
        Dropped = 1 => "dropped",
        /// Would have been dropped, passed because of monitor mode.
        WouldDrop = 2 => "would_drop",
        /// Would have been dropped, passed because the allowlist matched.
        Allowlisted = 3 => "allowlisted",
        /// Truncated or malformed, or with more VLAN tags than the parser
        /// follows; passed or dropped by `malformed_action`.
        Malformed = 4 => "malformed",
        /// Not IPv4 or IPv6 (ARP, LLDP, ...): passed.
        NonIp = 5 => "non_ip",
    }
}

setting! {
    /// The family a counter is split by: the second dimension of the
    /// counters.
    pub enum Family {
        /// IPv4 (ethertype 0x0800).
        Ipv4 = 0 => "ipv4",
        /// IPv6 (ethertype 0x86dd).
        Ipv6 = 1 => "ipv6",
        /// Neither, or unknown because the frame ended first.
        Other = 2 => "other",
    }
}

/// Number of counters (directions times outcomes times families).
pub const COUNTER_COUNT: usize = <TrafficDirection as Setting>::ALL.len()
    * <Outcome as Setting>::ALL.len()
    * <Family as Setting>::ALL.len();

/// Index of the counter of `outcome` for `family` in `direction`.
#[inline(always)]
pub const fn counter_index(direction: TrafficDirection, outcome: Outcome, family: Family) -> u32 {
    let outcomes = <Outcome as Setting>::ALL.len() as u32;
    let families = <Family as Setting>::ALL.len() as u32;
    (direction as u32 * outcomes + outcome as u32) * families + family as u32
}

/// Most frame bytes a [`DropEvent`] carries.
pub const MAX_EVENT_FRAME_BYTES: usize = 128;

/// Bytes of the [`DROP_EVENTS_MAP`] ring: about 1,500 events, three
/// seconds of the default rate on two CPUs, so a reader that looks every
/// second loses none.
pub const DROP_EVENTS_RING_BYTES: usize = 256 * 1024;

/// [`DropEvent::prefix_len`] of a drop no filter entry caused (the allow
/// policy, a malformed frame).
pub const NO_PREFIX: u8 = u8::MAX;

/// One sampled drop, as the program writes it to [`DROP_EVENTS_MAP`].
/// Dropped packets, and in monitor mode the packets that would have been
/// dropped, are sampled; passed packets never are.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DropEvent {
    /// `bpf_ktime_get_ns()`: nanoseconds of `CLOCK_MONOTONIC`.
    pub timestamp_ns: u64,
    /// The matched address in network order: an IPv4 address in the first
    /// four bytes (the rest zero), an IPv6 address in all sixteen; zero
    /// for a malformed frame.
    pub address: [u8; 16],
    /// Length of the whole frame, from the Ethernet header on.
    pub frame_len: u32,
    /// The interface the packet arrived on (XDP: `ingress_ifindex`), or
    /// crossed (TC: `ifindex`, arriving or leaving).
    pub ifindex: u32,
    /// The receive queue it arrived on (XDP: `rx_queue_index`), or its
    /// queue mapping (TC); both fit 16 bits.
    pub rx_queue: u16,
    /// A [`TrafficDirection`]: arriving or leaving.
    pub direction: u8,
    /// A [`ProgramHook`]: the hook of the program that dropped it.
    pub hook: u8,
    /// A [`Family`].
    pub family: u8,
    /// An [`Outcome`]: `Dropped`, `WouldDrop` or `Malformed`.
    pub outcome: u8,
    /// The prefix length whose probe hit, or [`NO_PREFIX`].
    pub prefix_len: u8,
    /// How many bytes of `frame` hold the frame's first bytes.
    pub captured: u8,
    /// The frame's first `captured` bytes.
    pub frame: [u8; MAX_EVENT_FRAME_BYTES],
}

/// One CPU's sampler: the token bucket and what it let through.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sampler {
    /// Tokens in the bucket, in nanoseconds of refill (a token costs
    /// `10^9 / sample_rate`).
    pub credit_ns: u64,
    /// When the bucket was last refilled (`bpf_ktime_get_ns()`).
    pub refilled_ns: u64,
    /// Events written to the ring.
    pub sampled: u64,
    /// Events lost because the ring was full.
    pub lost: u64,
    /// Drops the bucket or the `1 / sample_one_in` draw left unsampled.
    pub skipped: u64,
    /// Drops to skip before the bucket is looked at again (it was empty).
    pub skip_run: u64,
    /// The length of the last such run: doubled (plus one) at each empty
    /// look, zero once a token is taken.
    pub empty_run: u64,
}

/// What the test-only locate program found for a packet's matched address
/// at the active profile's first prefix length: the hash and, per
/// fingerprint width 8, 16 and 32, the fingerprint and both buckets.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocateReport {
    /// `NetKey::hash(seed)`.
    pub hash: u64,
    /// Fingerprints for widths 8, 16, 32.
    pub fingerprint: [u32; 3],
    /// Primary buckets for widths 8, 16, 32.
    pub primary: [u32; 3],
    /// Alternate buckets for widths 8, 16, 32.
    pub alternate: [u32; 3],
    /// 1 once the program has written a report for an IP packet.
    pub valid: u32,
}

/// Name of the baselines' config map (active lengths for the hash program).
pub const BASELINE_LENGTHS_MAP: &str = "BASELINE_LENGTHS";
/// Name of the baselines' exact hash map (key: [`baseline_hash_key`]).
pub const BASELINE_HASH_MAP: &str = "BASELINE_HASH";
/// Name of the baselines' IPv4 LPM trie.
pub const BASELINE_LPM_MAP: &str = "BASELINE_LPM";
/// Name of the baseline program probing the exact hash map once per length.
pub const BASELINE_HASH_PROGRAM: &str = "baseline_hash";
/// Name of the baseline program looking the address up in the LPM trie.
pub const BASELINE_LPM_PROGRAM: &str = "baseline_lpm";
/// Name of the parse-only baseline program (the per-packet floor).
pub const BASELINE_PARSE_PROGRAM: &str = "baseline_parse";

/// The exact hash map key of an IPv4 prefix: its length and masked address.
#[inline(always)]
pub const fn baseline_hash_key(address: u32, prefix_len: u8) -> u64 {
    let mask = match u32::MAX.checked_shl(32 - prefix_len as u32) {
        Some(mask) if prefix_len > 0 => mask,
        _ => 0,
    };
    (prefix_len as u64) << 32 | (address & mask) as u64
}

/// Active IPv4 prefix lengths of the baseline hash program, longest first.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BaselineLengths {
    /// How many of `lengths` are in use.
    pub count: u32,
    /// The lengths.
    pub lengths: [u8; MAX_PREFIX_LENGTHS],
}

const _: () = {
    assert!(core::mem::size_of::<FilterProfile>() == 40);
    assert!(core::mem::size_of::<Config>() == 24 + 2 * 40 + 16 + 16 + 16);
    assert!(core::mem::size_of::<DropEvent>() == 8 + 16 + 16 + MAX_EVENT_FRAME_BYTES);
    assert!(core::mem::size_of::<Sampler>() == 56);
    assert!(core::mem::size_of::<Counter>() == 16);
    assert!(core::mem::size_of::<LocateReport>() == 8 + 40);
    assert!(core::mem::size_of::<BaselineLengths>() == 12);
    assert!(core::mem::size_of::<prefilter::Prefilter>() == 2 * prefilter::PREFILTER_BLOCKS);
};
