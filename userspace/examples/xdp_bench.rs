//! Benchmark of the XDP blocklist against an exact BPF hash map program and
//! a BPF LPM trie program on the same entries, two ways:
//!
//! * **hot** (BPF_PROG_TEST_RUN, 10^6 repetitions per frame): nanoseconds
//!   per packet and locked map memory per entry, for 10^3, 10^6 and
//!   1.6*10^7 IPv4 addresses and for the FireHOL level 1 list. Frames come
//!   from addresses drawn at random: listed ones (hits), unlisted ones
//!   (misses), and unlisted ones in a block the filter's prefilter marks
//!   (misses that probe). The filter runs twice: with its block prefilter
//!   as the loader configures it, and with every prefilter bit set. One
//!   frame repeated keeps every cache warm.
//! * **diverse traffic**: 200,000 frames from as many different sources,
//!   half of them listed, sent twice from the peer end of a veth pair (in a
//!   network namespace of its own) to the host end, where each program in
//!   turn is attached in native mode. The cost per packet is the kernel's
//!   own run-time statistics (`run_time_ns / run_cnt` over the run, kept on
//!   only while the benchmark holds them on). A parse-only program gives
//!   the floor. For 10^6 and 1.6*10^7 addresses and FireHOL level 1.
//! * **the TC hook**: the same filter's TC ingress program, hot
//!   (BPF_PROG_TEST_RUN on the same frames) and under the same diverse
//!   traffic (attached with a tcx link while no XDP program is), beside
//!   the XDP figures. The kernel's statistics count the program's own run
//!   time, not the socket buffer the kernel allocates before TC (which
//!   XDP runs ahead of).
//!
//! * **IPv6 prefilter under diverse traffic** (`-- --ipv6 [DROPV6_FILE]`,
//!   on its own): the filter of an IPv6 list (default: Spamhaus' IPv6
//!   DROP list) under [`DIVERSE_SOURCES`] distinct IPv6 sources, half
//!   inside random entries, half unlisted from RIR-like space (2001::/16,
//!   2400::/12, 2600::/12, 2800::/12, 2a00::/12, 2c00::/12: a random first
//!   group, the rest random), with its prefilter as configured and with
//!   every bit set, beside the parse-only floor.
//!
//! * **drop sampling under diverse traffic** (`-- --sampling
//!   [NETSET_FILE]`, on its own): the filter of FireHOL level 1 (8
//!   lengths) with sampling off, at its default rate and with every drop
//!   sampled, in rounds, while a reader drains the ring as `cfctl` does,
//!   beside the parse-only floor.
//!
//! The frames carry a destination MAC address that is not the host end's,
//! so whatever a program passes is dropped by the host's stack unrouted.
//! Prints markdown tables. Needs root.
//!
//! `cargo run -p cfctl --release --example xdp_bench [-- NETSET_FILE]`
//! (or `-- --ipv6 [FILE]`, `-- --sampling [NETSET_FILE]`)
//! (default: ../shared/data/blocklists/firehol_level1.netset from the
//! repository root).

use std::collections::HashSet;
use std::fs::File;
use std::mem::offset_of;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aya::maps::lpm_trie::Key;
use aya::maps::{HashMap, LpmTrie, Map, MapData};
use aya::programs::{loaded_programs, Xdp, XdpMode};
use aya::sys::{enable_stats, Stats};
use aya::{Ebpf, EbpfLoader};
use cfctl::control::sizing::auto_capacity;
use cfctl::plan::{KeyPlan, PlanLimits};
use cfctl::xdp::mapped::MappedValue;
use cfctl::xdp::program::{detach, detach_pinned};
use cfctl::xdp::test_run::{run_xdp, TcAction, TestRun, XdpAction};
use cfctl::xdp::{
    AttachMode, AttachPoint, DropEvents, FilterProgram, LoadOptions, PinDir, SamplerCounts,
    Sampling, TrafficDirection,
};
use cfxdp::prefilter::Prefilter;
use cfxdp::{
    baseline_hash_key, BaselineLengths, FilterShape, BASELINE_HASH_MAP, BASELINE_HASH_PROGRAM,
    BASELINE_LENGTHS_MAP, BASELINE_LPM_MAP, BASELINE_LPM_PROGRAM, BASELINE_PARSE_PROGRAM,
    MAX_PREFIX_LENGTHS,
};
use etherparse::PacketBuilder;
use filter_core::NetKey;
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

#[path = "../tests/common/raw_frames.rs"]
mod raw_frames;
use raw_frames::send_from_namespace;

static BASELINES_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/baselines"));

const REPEAT: u32 = 1_000_000;
const FRAMES_PER_CASE: usize = 32;
/// Random draws allowed to find the frames of one case.
const MAX_DRAWS: usize = 1 << 26;
/// Distinct sources of the diverse traffic, half of them listed.
const DIVERSE_SOURCES: usize = 200_000;
/// Times the diverse traffic is sent.
const DIVERSE_PASSES: usize = 2;

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Runs a program on a frame `repeat` times.
type Runner<'a> = dyn Fn(&[u8], u32) -> BenchResult<TestRun> + 'a;

/// The entries of one row.
struct Dataset {
    name: String,
    /// Most prefix lengths probed per packet.
    probe_budget: usize,
    cidrs: Vec<Ipv4Net>,
    /// Which baselines run under diverse traffic too (none: the dataset is
    /// measured hot only).
    diverse: Option<Baselines>,
}

/// The baselines measured beside the filter under diverse traffic.
#[derive(Clone, Copy)]
struct Baselines {
    hash: bool,
    lpm: bool,
}

/// The source addresses of one dataset's frames, drawn at random.
struct Frames {
    /// Inside a random entry.
    hits: Vec<Ipv4Addr>,
    /// Unlisted.
    misses: Vec<Ipv4Addr>,
    /// Unlisted, in a block the prefilter marks.
    marked_misses: Vec<Ipv4Addr>,
}

impl Frames {
    fn draw(dataset: &Dataset, plan: &KeyPlan, rng: &mut StdRng) -> BenchResult<Self> {
        let hits = (0..FRAMES_PER_CASE)
            .map(|_| {
                let cidr = dataset.cidrs[rng.random_range(0..dataset.cidrs.len())];
                let host_mask = u32::MAX.checked_shr(cidr.prefix_len().into()).unwrap_or(0);
                Ipv4Addr::from(u32::from(cidr.network()) | (rng.random::<u32>() & host_mask))
            })
            .collect();
        let unlisted = |address: Ipv4Addr| plan.covering_entries(IpAddr::V4(address)).is_empty();
        let misses = draw_addresses(rng, unlisted)?;
        let marked_misses = draw_addresses(rng, |address| {
            unlisted(address) && plan.prefilter_mask(IpAddr::V4(address)) != 0
        })?;
        Ok(Self {
            hits,
            misses,
            marked_misses,
        })
    }
}

/// `FRAMES_PER_CASE` addresses drawn uniformly from those `wanted` accepts.
fn draw_addresses(
    rng: &mut StdRng,
    wanted: impl Fn(Ipv4Addr) -> bool,
) -> BenchResult<Vec<Ipv4Addr>> {
    let addresses: Vec<Ipv4Addr> = (0..MAX_DRAWS)
        .map(|_| Ipv4Addr::from(rng.random::<u32>()))
        .filter(|&address| wanted(address))
        .take(FRAMES_PER_CASE)
        .collect();
    if addresses.len() < FRAMES_PER_CASE {
        return Err(format!("found only {} addresses to draw from", addresses.len()).into());
    }
    Ok(addresses)
}

/// The `index`-th of a sequence of distinct addresses (an odd multiplier
/// permutes u32).
fn distinct_address(index: u32) -> Ipv4Addr {
    Ipv4Addr::from(index.wrapping_mul(0x9e37_79b1))
}

fn address_dataset(count: u32, diverse: Option<Baselines>) -> Dataset {
    Dataset {
        name: format!("{count} IPv4 addresses"),
        probe_budget: MAX_PREFIX_LENGTHS,
        cidrs: (0..count)
            .map(|index| Ipv4Net::from(distinct_address(index)))
            .collect(),
        diverse,
    }
}

fn netset_dataset(
    path: &PathBuf,
    probe_budget: usize,
    diverse: Option<Baselines>,
) -> BenchResult<Dataset> {
    let text =
        std::fs::read_to_string(path).map_err(|error| format!("{}: {error}", path.display()))?;
    let mut cidrs = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (address, prefix_len) = line.split_once('/').unwrap_or((line, "32"));
        let address: Ipv4Addr = address
            .parse()
            .map_err(|error| format!("{}:{}: {error}", path.display(), number + 1))?;
        let prefix_len: u8 = prefix_len
            .parse()
            .map_err(|error| format!("{}:{}: {error}", path.display(), number + 1))?;
        cidrs.push(
            Ipv4Net::new(address, prefix_len)
                .map_err(|error| format!("{}:{}: {error}", path.display(), number + 1))?,
        );
    }
    Ok(Dataset {
        name: format!(
            "{} ({} CIDRs), {probe_budget} lengths",
            path.file_name()
                .map_or("netset".into(), |name| name.to_string_lossy()),
            cidrs.len()
        ),
        probe_budget,
        cidrs,
        diverse,
    })
}

/// A 64-byte UDP frame from `source` (to a MAC address no interface here
/// has).
fn frame(source: Ipv4Addr) -> Vec<u8> {
    let builder = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(source.octets(), [198, 18, 0, 1], 64)
        .udp(40000, 4242);
    let payload = [0u8; 22];
    let mut frame = Vec::with_capacity(builder.size(payload.len()));
    builder
        .write(&mut frame, &payload)
        .expect("writing to a Vec");
    frame
}

/// A veth pair whose peer end sits in a network namespace of its own: the
/// programs run on the host end, the diverse traffic is sent from the peer
/// end. Drop deletes the namespace, which deletes the pair.
struct TrafficLink {
    namespace: String,
    host: String,
    peer: String,
    host_index: u32,
}

fn ip(args: &[&str]) -> BenchResult<()> {
    let output = Command::new("ip").args(args).output()?;
    if !output.status.success() {
        return Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    Ok(())
}

impl TrafficLink {
    fn new() -> BenchResult<Self> {
        let tag = std::process::id() % 100_000;
        // Drop cleans up whatever of this was made, on any early return.
        let mut link = TrafficLink {
            namespace: format!("cfxdpbench{tag}"),
            host: format!("cfbh{tag}"),
            peer: format!("cfbp{tag}"),
            host_index: 0,
        };
        ip(&["netns", "add", &link.namespace])?;
        ip(&[
            "link",
            "add",
            &link.host,
            "address",
            "02:cf:be:00:00:01",
            "type",
            "veth",
            "peer",
            "name",
            &link.peer,
            "netns",
            &link.namespace,
        ])?;
        ip(&["link", "set", &link.host, "up"])?;
        ip(&["-n", &link.namespace, "link", "set", &link.peer, "up"])?;
        let name = std::ffi::CString::new(link.host.as_str())?;
        // SAFETY: a valid NUL-terminated name.
        link.host_index = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if link.host_index == 0 {
            return Err(format!("no interface {}", link.host).into());
        }
        Ok(link)
    }

    /// Sends every frame once from the peer end; returns how many went out.
    fn send(&self, frames: &[Vec<u8>]) -> BenchResult<usize> {
        let namespace = File::open(format!("/run/netns/{}", self.namespace))?;
        let peer = std::ffi::CString::new(self.peer.as_str())?;
        std::thread::scope(|scope| {
            scope
                .spawn(|| send_from_namespace(&namespace, &peer, frames))
                .join()
                .map_err(|_| "the sending thread panicked")?
                .map_err(Into::into)
        })
    }

    /// The id of the XDP program attached to the host end.
    fn attached_program(&self) -> BenchResult<u32> {
        let output = Command::new("ip")
            .args(["-j", "link", "show", "dev", &self.host])
            .output()?;
        let links: serde_json::Value = serde_json::from_slice(&output.stdout)?;
        links[0]["xdp"]["prog"]["id"]
            .as_u64()
            .map(|id| id as u32)
            .ok_or_else(|| format!("no XDP program on {}", self.host).into())
    }

    /// ns per packet of program `id` on the host end over
    /// [`DIVERSE_PASSES`] sends of `frames`, from the kernel's run-time
    /// statistics (which must be on).
    fn cost(&self, id: u32, frames: &[Vec<u8>]) -> BenchResult<DiverseCost> {
        // Run-time statistics cost every program run some time: on only
        // while this holds the descriptor.
        let _statistics = enable_stats(Stats::RunTime)?;
        let before = run_statistics(id)?;
        let mut sent = 0;
        for _ in 0..DIVERSE_PASSES {
            sent += self.send(frames)?;
        }
        // Let the receiving side drain its queue.
        std::thread::sleep(Duration::from_millis(50));
        let after = run_statistics(id)?;
        let packets = after.1 - before.1;
        if packets == 0 {
            return Err(format!("program {id} saw none of {sent} frames").into());
        }
        Ok(DiverseCost {
            ns: (after.0 - before.0) as f64 / packets as f64,
            packets,
            sent,
        })
    }
}

impl Drop for TrafficLink {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.namespace]);
        let _ = Command::new("ip")
            .args(["link", "del", &self.host])
            .output();
    }
}

/// The id of the loaded program named `name` (the benchmark loads one
/// blocklist at a time).
fn program_id(name: &str) -> BenchResult<u32> {
    for info in loaded_programs() {
        let info = info?;
        if info.name_as_str() == Some(name) {
            return Ok(info.id());
        }
    }
    Err(format!("no program {name}").into())
}

/// `(run_time_ns, run_cnt)` of program `id`.
fn run_statistics(id: u32) -> BenchResult<(u64, u64)> {
    for info in loaded_programs() {
        let info = info?;
        if info.id() == id {
            return Ok((info.run_time().as_nanos() as u64, info.run_count()));
        }
    }
    Err(format!("no program {id}").into())
}

/// One program's cost under diverse traffic.
#[derive(Clone, Copy)]
struct DiverseCost {
    ns: f64,
    /// Packets the program ran on.
    packets: u64,
    /// Frames sent.
    sent: usize,
}

/// The traffic a dataset is measured under, and where it is sent.
struct DiverseTraffic<'a> {
    link: &'a TrafficLink,
    frames: Vec<Vec<u8>>,
}

impl<'a> DiverseTraffic<'a> {
    /// [`DIVERSE_SOURCES`] distinct sources in random order, half inside a
    /// random entry, half unlisted.
    fn draw(
        link: &'a TrafficLink,
        dataset: &Dataset,
        plan: &KeyPlan,
        rng: &mut StdRng,
    ) -> BenchResult<Self> {
        let mut seen = HashSet::new();
        let mut listed = Vec::new();
        for _ in 0..MAX_DRAWS {
            if listed.len() == DIVERSE_SOURCES / 2 {
                break;
            }
            let cidr = dataset.cidrs[rng.random_range(0..dataset.cidrs.len())];
            let host_mask = u32::MAX.checked_shr(cidr.prefix_len().into()).unwrap_or(0);
            let address =
                Ipv4Addr::from(u32::from(cidr.network()) | (rng.random::<u32>() & host_mask));
            if seen.insert(address) {
                listed.push(address);
            }
        }
        if listed.len() < DIVERSE_SOURCES / 2 {
            return Err(format!("{}: too few distinct listed addresses", dataset.name).into());
        }
        let mut sources = listed;
        while sources.len() < DIVERSE_SOURCES {
            let address = Ipv4Addr::from(rng.random::<u32>());
            if plan.covering_entries(IpAddr::V4(address)).is_empty() && seen.insert(address) {
                sources.push(address);
            }
        }
        sources.shuffle(rng);
        Ok(Self {
            link,
            frames: sources.into_iter().map(frame).collect(),
        })
    }

    /// The cost of `xdp`, attached for the measurement only.
    fn cost_of(&self, xdp: &mut Xdp) -> BenchResult<DiverseCost> {
        let attachment = xdp.attach_to_if_index(self.link.host_index, XdpMode::Driver)?;
        let cost = self.link.cost(self.link.attached_program()?, &self.frames);
        xdp.detach(attachment)?;
        cost
    }

    /// The cost of the blocklist, attached for the measurement only.
    fn cost_of_blocklist(&self, blocklist: &mut FilterProgram) -> BenchResult<DiverseCost> {
        let attachment = blocklist.attach(self.link.host_index, AttachMode::Native)?;
        let cost = self.link.cost(self.link.attached_program()?, &self.frames);
        detach(attachment)?;
        cost
    }

    /// The cost of the blocklist's TC ingress program, attached (with a
    /// tcx link pinned in `pins`) for the measurement only.
    fn cost_of_blocklist_on_tc(
        &self,
        blocklist: &mut FilterProgram,
        pins: &BenchPins,
    ) -> BenchResult<DiverseCost> {
        let link = pins.0.join("tc-link");
        let point = AttachPoint::Tc(TrafficDirection::Ingress);
        blocklist.attach_pinned(&self.link.host, self.link.host_index, point, &link)?;
        let name = blocklist
            .maps()
            .shape()
            .tc_program(TrafficDirection::Ingress);
        let cost = program_id(name).and_then(|id| self.link.cost(id, &self.frames));
        detach_pinned(&link, point)?;
        cost
    }
}

/// Mean ns per packet over the frames, and how many got `expected`.
fn measure(run: &Runner, addresses: &[Ipv4Addr], expected: XdpAction) -> BenchResult<(f64, usize)> {
    let mut total = 0u64;
    let mut as_expected = 0;
    for &address in addresses {
        let result = run(&frame(address), REPEAT)?;
        total += u64::from(result.duration_ns);
        as_expected += usize::from(result.action == expected);
    }
    Ok((total as f64 / addresses.len() as f64, as_expected))
}

/// Times of one program on every kind of frame.
struct Timings {
    hit_ns: f64,
    miss_ns: f64,
    marked_miss_ns: f64,
    /// Frames that got the wrong verdict.
    wrong: usize,
}

fn measure_all(run: &Runner, frames: &Frames) -> BenchResult<Timings> {
    let (hit_ns, hits) = measure(run, &frames.hits, XdpAction::Drop)?;
    let (miss_ns, misses) = measure(run, &frames.misses, XdpAction::Pass)?;
    let (marked_miss_ns, marked_misses) = measure(run, &frames.marked_misses, XdpAction::Pass)?;
    Ok(Timings {
        hit_ns,
        miss_ns,
        marked_miss_ns,
        wrong: 3 * FRAMES_PER_CASE - hits - misses - marked_misses,
    })
}

/// The mean number of filter probes the program makes for `addresses`:
/// the lengths the prefilter marks in each address's block, longest first,
/// up to the first that holds the address's key.
fn mean_probes(plan: &KeyPlan, addresses: &[Ipv4Addr]) -> f64 {
    let probes: usize = addresses
        .iter()
        .map(|&address| {
            let marked = plan.prefilter_mask(IpAddr::V4(address));
            let mut probes = 0;
            for (position, key) in plan.probe_keys(IpAddr::V4(address)).iter().enumerate() {
                if marked & 1 << position != 0 {
                    probes += 1;
                    if plan.key_references(key) > 0 {
                        break;
                    }
                }
            }
            probes
        })
        .sum();
    probes as f64 / addresses.len() as f64
}

/// Locked memory of a map, from /proc/self/fdinfo.
fn memlock(map: &MapData) -> BenchResult<u64> {
    use std::os::fd::AsRawFd;
    let fd = map.fd().as_fd().as_raw_fd();
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}"))?;
    info.lines()
        .find_map(|line| line.strip_prefix("memlock:"))
        .and_then(|value| value.trim().parse().ok())
        .ok_or_else(|| "no memlock in fdinfo".into())
}

fn map_data<'a>(ebpf: &'a Ebpf, name: &str) -> BenchResult<&'a MapData> {
    match ebpf.map(name) {
        Some(Map::HashMap(data) | Map::LpmTrie(data)) => Ok(data),
        _ => Err(format!("no map {name}").into()),
    }
}

struct Row {
    program: &'static str,
    keys: usize,
    fill_seconds: f64,
    timings: Timings,
    bytes: u64,
    /// Under diverse traffic, if measured.
    diverse: Option<DiverseCost>,
}

/// The filter of `plan`, sized as an attach without `--capacity` sizes
/// it, with its prefilter as the loader configures it
/// (also under diverse traffic), on XDP and on TC ingress, then on XDP
/// with every prefilter bit set.
fn bench_filter(
    plan: &KeyPlan,
    frames: &Frames,
    traffic: Option<&DiverseTraffic>,
) -> BenchResult<[Row; 3]> {
    let keys = plan.key_count();
    // Sized as `cfctl attach` sizes a filter without `--capacity`.
    let capacity = usize::try_from(auto_capacity(keys, FilterShape::Fingerprint16))?;
    let options = LoadOptions::for_capacity(FilterShape::Fingerprint16, capacity)
        .ok_or("filter too large")?;
    let mut blocklist = FilterProgram::load(&options)?;
    let start = Instant::now();
    blocklist.live().install(plan)?;
    let fill_seconds = start.elapsed().as_secs_f64();
    let bytes = memlock(&blocklist.maps_mut().live_table_map()?)?;
    let with_prefilter = {
        let run = |frame: &[u8], repeat| -> BenchResult<TestRun> {
            Ok(blocklist.test_run(frame, repeat)?)
        };
        measure_all(&run, frames)?
    };
    let diverse = traffic
        .map(|traffic| traffic.cost_of_blocklist(&mut blocklist))
        .transpose()?;
    let on_tc = {
        let run = |frame: &[u8], repeat| -> BenchResult<TestRun> {
            let run = blocklist.test_run_tc(TrafficDirection::Ingress, frame, repeat)?;
            let action = match run.action {
                TcAction::Drop => XdpAction::Drop,
                TcAction::Next => XdpAction::Pass,
                _ => XdpAction::Aborted,
            };
            Ok(TestRun {
                action,
                duration_ns: run.duration_ns,
            })
        };
        measure_all(&run, frames)?
    };
    let pins = BenchPins(PathBuf::from(format!(
        "/sys/fs/bpf/cfxdp-bench-tc-{}",
        std::process::id()
    )));
    let diverse_on_tc = match traffic {
        Some(traffic) => {
            PinDir::new(&pins.0).prepare()?;
            Some(traffic.cost_of_blocklist_on_tc(&mut blocklist, &pins)?)
        }
        None => None,
    };
    let maps = blocklist.maps_mut();
    let (profile, table) = (maps.live_profile(), maps.live_table_map()?);
    maps.install(&table, &profile, &Box::new(Prefilter::FULL))?;
    let run =
        |frame: &[u8], repeat| -> BenchResult<TestRun> { Ok(blocklist.test_run(frame, repeat)?) };
    let without_prefilter = measure_all(&run, frames)?;
    Ok([
        Row {
            program: "cuckoo filter",
            keys,
            fill_seconds,
            timings: with_prefilter,
            bytes,
            diverse,
        },
        Row {
            program: "cuckoo filter, TC ingress",
            keys,
            fill_seconds,
            timings: on_tc,
            bytes,
            diverse: diverse_on_tc,
        },
        Row {
            program: "cuckoo filter, every prefilter bit set",
            keys,
            fill_seconds,
            timings: without_prefilter,
            bytes,
            diverse: None,
        },
    ])
}

fn load_baseline(program: &'static str, map: &'static str, entries: u32) -> BenchResult<Ebpf> {
    let mut ebpf = EbpfLoader::new()
        .map_max_entries(map, entries.max(1))
        .load(BASELINES_OBJECT)?;
    let xdp: &mut Xdp = ebpf
        .program_mut(program)
        .ok_or("missing program")?
        .try_into()?;
    xdp.load()?;
    Ok(ebpf)
}

fn baseline_runner<'a>(ebpf: &'a Ebpf, program: &str) -> BenchResult<Box<Runner<'a>>> {
    let xdp: &Xdp = ebpf.program(program).ok_or("missing program")?.try_into()?;
    let fd = xdp.fd()?;
    Ok(Box::new(move |frame: &[u8], repeat| {
        Ok(run_xdp(fd.as_fd(), frame, repeat)?)
    }))
}

fn diverse_cost_of(
    ebpf: &mut Ebpf,
    program: &str,
    traffic: Option<&DiverseTraffic>,
) -> BenchResult<Option<DiverseCost>> {
    let Some(traffic) = traffic else {
        return Ok(None);
    };
    let xdp: &mut Xdp = ebpf
        .program_mut(program)
        .ok_or("missing program")?
        .try_into()?;
    traffic.cost_of(xdp).map(Some)
}

/// The parse-only program under the traffic: the floor.
fn diverse_floor(traffic: &DiverseTraffic) -> BenchResult<DiverseCost> {
    let mut ebpf = load_baseline(BASELINE_PARSE_PROGRAM, BASELINE_LPM_MAP, 1)?;
    diverse_cost_of(&mut ebpf, BASELINE_PARSE_PROGRAM, Some(traffic))?
        .ok_or_else(|| "no floor".into())
}

fn bench_hash(
    keys: &[NetKey],
    lengths: &[u8],
    frames: &Frames,
    traffic: Option<&DiverseTraffic>,
) -> BenchResult<Row> {
    let mut ebpf = load_baseline(BASELINE_HASH_PROGRAM, BASELINE_HASH_MAP, keys.len() as u32)?;
    let lengths_map = match ebpf.map(BASELINE_LENGTHS_MAP) {
        Some(Map::Array(data)) => MappedValue::<BaselineLengths>::new(data.fd().as_fd())?,
        _ => return Err("no baseline lengths map".into()),
    };
    let fields = lengths_map.fields();
    fields
        .atomic_u32(offset_of!(BaselineLengths, count))
        .ok_or("baseline lengths mapping too small")?
        .store(lengths.len() as u32, Ordering::SeqCst);
    for (position, &len) in lengths.iter().enumerate() {
        fields
            .atomic_u8(offset_of!(BaselineLengths, lengths) + position)
            .ok_or("baseline lengths mapping too small")?
            .store(len, Ordering::SeqCst);
    }
    let start = Instant::now();
    {
        let mut map = HashMap::<&mut MapData, u64, u8>::try_from(
            ebpf.map_mut(BASELINE_HASH_MAP).ok_or("no hash map")?,
        )?;
        for key in keys {
            let [_, address, _] = *key.words();
            map.insert(baseline_hash_key(address as u32, key.prefix_len()), 1, 0)?;
        }
    }
    let fill_seconds = start.elapsed().as_secs_f64();
    let timings = measure_all(&*baseline_runner(&ebpf, BASELINE_HASH_PROGRAM)?, frames)?;
    Ok(Row {
        program: "BPF hash map",
        keys: keys.len(),
        fill_seconds,
        timings,
        bytes: memlock(map_data(&ebpf, BASELINE_HASH_MAP)?)?,
        diverse: diverse_cost_of(&mut ebpf, BASELINE_HASH_PROGRAM, traffic)?,
    })
}

fn bench_lpm(
    dataset: &Dataset,
    frames: &Frames,
    traffic: Option<&DiverseTraffic>,
) -> BenchResult<Row> {
    let mut ebpf = load_baseline(
        BASELINE_LPM_PROGRAM,
        BASELINE_LPM_MAP,
        dataset.cidrs.len() as u32,
    )?;
    let start = Instant::now();
    {
        let mut trie = LpmTrie::<&mut MapData, [u8; 4], u8>::try_from(
            ebpf.map_mut(BASELINE_LPM_MAP).ok_or("no trie")?,
        )?;
        for cidr in &dataset.cidrs {
            trie.insert(
                &Key::new(u32::from(cidr.prefix_len()), cidr.network().octets()),
                1,
                0,
            )?;
        }
    }
    let fill_seconds = start.elapsed().as_secs_f64();
    let timings = measure_all(&*baseline_runner(&ebpf, BASELINE_LPM_PROGRAM)?, frames)?;
    Ok(Row {
        program: "BPF LPM trie",
        keys: dataset.cidrs.len(),
        fill_seconds,
        timings,
        bytes: memlock(map_data(&ebpf, BASELINE_LPM_MAP)?)?,
        diverse: diverse_cost_of(&mut ebpf, BASELINE_LPM_PROGRAM, traffic)?,
    })
}

/// ns per packet of a baseline program that stops at the ethertype of an
/// ARP frame: the test-run harness plus the least possible work.
fn harness_floor() -> BenchResult<u32> {
    let ebpf = load_baseline(BASELINE_LPM_PROGRAM, BASELINE_LPM_MAP, 1)?;
    let run = baseline_runner(&ebpf, BASELINE_LPM_PROGRAM)?;
    let mut arp = frame(Ipv4Addr::UNSPECIFIED);
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    let result = run(&arp, REPEAT)?;
    if result.action != XdpAction::Pass {
        return Err(format!("the baseline program returned {:?} for ARP", result.action).into());
    }
    Ok(result.duration_ns)
}

fn main() -> BenchResult<()> {
    match std::env::args().nth(1).as_deref() {
        Some("--ipv6") => return bench_ipv6_prefilter(),
        Some("--sampling") => return bench_sampling(),
        _ => {}
    }
    let floor_ns = harness_floor()?;
    println!("Harness floor (baseline program on a non-IP frame: test run + Ethernet parse): {floor_ns} ns/packet\n");
    let netset = netset_argument(1);
    let both = Baselines {
        hash: true,
        lpm: true,
    };
    let datasets = [
        address_dataset(1_000, None),
        address_dataset(1_000_000, Some(both)),
        // A trie of 1.6*10^7 entries takes too long to fill to be worth it.
        address_dataset(16_000_000, Some(Baselines { lpm: false, ..both })),
        // A hash map of a CIDR list is the hot table's exact probe per
        // length: the trie is the program to beat.
        netset_dataset(
            &netset,
            MAX_PREFIX_LENGTHS,
            Some(Baselines {
                hash: false,
                ..both
            }),
        )?,
        netset_dataset(&netset, 4, None)?,
    ];
    let link = TrafficLink::new()?;
    let mut diverse_rows = Vec::new();
    println!("| entries | program | keys | fill s | hit ns | miss ns | marked-block miss ns | hit - floor | miss - floor | marked-block miss - floor | locked bytes | bytes/entry | wrong verdicts |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut rng = StdRng::seed_from_u64(0x0b0e_5eed);
    let floor = f64::from(floor_ns);
    for dataset in &datasets {
        let limits = PlanLimits {
            ipv4_lengths: dataset.probe_budget,
            ..PlanLimits::default()
        };
        let plan = KeyPlan::build(dataset.cidrs.iter().copied().map(IpNet::V4), limits)?;
        let keys: Vec<NetKey> = plan.keys().copied().collect();
        let mut lengths = plan.lengths().ipv4().to_vec();
        lengths.sort_unstable_by(|a, b| b.cmp(a));
        let frames = Frames::draw(dataset, &plan, &mut rng)?;
        let traffic = dataset
            .diverse
            .map(|_| DiverseTraffic::draw(&link, dataset, &plan, &mut rng))
            .transpose()?;
        let only_if = |wanted: fn(Baselines) -> bool| {
            traffic
                .as_ref()
                .filter(|_| dataset.diverse.is_some_and(wanted))
        };
        let floor_cost = traffic.as_ref().map(diverse_floor).transpose()?;
        let [filter, on_tc, unfiltered] = bench_filter(&plan, &frames, traffic.as_ref())?;
        let rows = [
            filter,
            on_tc,
            unfiltered,
            bench_hash(&keys, &lengths, &frames, only_if(|b| b.hash))?,
            bench_lpm(dataset, &frames, only_if(|b| b.lpm))?,
        ];
        if let Some(floor_cost) = floor_cost {
            diverse_rows.push((dataset.name.clone(), floor_cost, diverse_summary(&rows)));
        }
        for row in rows {
            let timings = &row.timings;
            println!(
                "| {} | {} | {} | {:.2} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {:.2} | {} |",
                dataset.name,
                row.program,
                row.keys,
                row.fill_seconds,
                timings.hit_ns,
                timings.miss_ns,
                timings.marked_miss_ns,
                timings.hit_ns - floor,
                timings.miss_ns - floor,
                timings.marked_miss_ns - floor,
                row.bytes,
                row.bytes as f64 / dataset.cidrs.len() as f64,
                timings.wrong
            );
        }
        let marked_blocks = plan
            .prefilter()
            .ipv4
            .iter()
            .filter(|&&mask| mask != 0)
            .count();
        eprintln!(
            "{}: probe lengths {lengths:?}, {marked_blocks} of 65536 IPv4 /16 blocks marked; \
             probes per packet: hits {:.2}, misses {:.2}, marked-block misses {:.2}",
            dataset.name,
            mean_probes(&plan, &frames.hits),
            mean_probes(&plan, &frames.misses),
            mean_probes(&plan, &frames.marked_misses),
        );
    }
    print_diverse_table(&diverse_rows, floor);
    Ok(())
}

/// The netset file given as argument `position`, or FireHOL level 1.
fn netset_argument(position: usize) -> PathBuf {
    std::env::args_os().nth(position).map_or_else(
        || {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../shared/data/blocklists/firehol_level1.netset")
        },
        PathBuf::from,
    )
}

/// A program's hot and diverse-traffic figures, for the second table.
struct DiverseSummary {
    program: &'static str,
    hot_hit_ns: f64,
    hot_miss_ns: f64,
    cost: DiverseCost,
}

fn diverse_summary(rows: &[Row]) -> Vec<DiverseSummary> {
    rows.iter()
        .filter_map(|row| {
            row.diverse.map(|cost| DiverseSummary {
                program: row.program,
                hot_hit_ns: row.timings.hit_ns,
                hot_miss_ns: row.timings.miss_ns,
                cost,
            })
        })
        .collect()
}

/// Hot (test-run) and diverse-traffic cost side by side, each program's
/// diverse cost above the floor as a ratio to the baselines'.
fn print_diverse_table(rows: &[(String, DiverseCost, Vec<DiverseSummary>)], hot_floor: f64) {
    println!(
        "\nDiverse traffic: {DIVERSE_SOURCES} sources (half listed), sent {DIVERSE_PASSES} times; \
         hot floor {hot_floor:.0} ns\n"
    );
    println!("| entries | program | hot hit / miss ns | diverse ns | diverse - floor | filter / program, above floor | packets run / sent |");
    println!("|---|---|---:|---:|---:|---:|---:|");
    for (dataset, floor, programs) in rows {
        let above = |cost: &DiverseCost| cost.ns - floor.ns;
        let filter = programs.first().map(|summary| above(&summary.cost));
        println!(
            "| {dataset} | parse-only floor | - | {:.0} | 0 | - | {} / {} |",
            floor.ns, floor.packets, floor.sent
        );
        for summary in programs {
            let ratio = filter.map_or("-".into(), |filter| {
                format!("{:.2}", filter / above(&summary.cost))
            });
            println!(
                "| {dataset} | {} | {:.1} / {:.1} | {:.0} | {:.0} | {ratio} | {} / {} |",
                summary.program,
                summary.hot_hit_ns,
                summary.hot_miss_ns,
                summary.cost.ns,
                above(&summary.cost),
                summary.cost.packets,
                summary.cost.sent,
            );
        }
    }
}

/// A 64-byte UDP frame from the IPv6 `source` to 2001:db8::1 (to a MAC
/// address no interface here has).
fn frame_v6(source: Ipv6Addr) -> Vec<u8> {
    let destination: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
    let builder = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv6(source.octets(), destination.octets(), 64)
        .udp(40000, 4242);
    let payload = [0u8; 2];
    let mut frame = Vec::with_capacity(builder.size(payload.len()));
    builder
        .write(&mut frame, &payload)
        .expect("writing to a Vec");
    frame
}

/// The IPv6 networks of a list of `CIDR ; comment` lines (`;` and `#`
/// start comments).
fn ipv6_list(path: &PathBuf) -> BenchResult<Vec<Ipv6Net>> {
    let text =
        std::fs::read_to_string(path).map_err(|error| format!("{}: {error}", path.display()))?;
    let mut nets = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.split([';', '#']).next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let net: Ipv6Net = line
            .parse()
            .map_err(|error| format!("{}:{}: {error}", path.display(), number + 1))?;
        nets.push(net.trunc());
    }
    Ok(nets)
}

/// First 16-bit groups of the unlisted IPv6 traffic: RIR-like space.
fn rir_like_first_group(rng: &mut StdRng) -> u16 {
    const BASES: [u16; 5] = [0x2400, 0x2600, 0x2800, 0x2a00, 0x2c00];
    match rng.random_range(0..=BASES.len() * 16) {
        0 => 0x2001,
        index => BASES[(index - 1) / 16] + ((index - 1) % 16) as u16,
    }
}

/// Probes per packet the plan gives the IPv6 `sources` (the lengths their
/// blocks' bytes mark).
fn mean_probes_v6(plan: &KeyPlan, sources: &[Ipv6Addr]) -> f64 {
    let total: u32 = sources
        .iter()
        .map(|&source| plan.prefilter_mask(IpAddr::V6(source)).count_ones())
        .sum();
    f64::from(total) / sources.len() as f64
}

/// The IPv6 prefilter under diverse IPv6 traffic (see the module
/// documentation).
fn bench_ipv6_prefilter() -> BenchResult<()> {
    let path = std::env::args_os().nth(2).map_or_else(
        || {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../shared/data/blocklists/spamhaus_dropv6.txt")
        },
        PathBuf::from,
    );
    let nets = ipv6_list(&path)?;
    let plan = KeyPlan::build(nets.iter().copied().map(IpNet::V6), PlanLimits::default())?;
    let mut rng = StdRng::seed_from_u64(0x0b0e_5eed);
    let mut seen = HashSet::new();
    let mut listed = Vec::new();
    while listed.len() < DIVERSE_SOURCES / 2 {
        let net = nets[rng.random_range(0..nets.len())];
        let host_mask = u128::MAX.checked_shr(net.prefix_len().into()).unwrap_or(0);
        let address =
            Ipv6Addr::from(u128::from(net.network()) | (rng.random::<u128>() & host_mask));
        if seen.insert(address) {
            listed.push(address);
        }
    }
    let mut unlisted = Vec::new();
    while unlisted.len() < DIVERSE_SOURCES / 2 {
        let first = u128::from(rir_like_first_group(&mut rng)) << 112;
        let address = Ipv6Addr::from(first | (rng.random::<u128>() >> 16));
        if plan.covering_entries(IpAddr::V6(address)).is_empty() && seen.insert(address) {
            unlisted.push(address);
        }
    }
    let mut sources: Vec<Ipv6Addr> = listed.iter().chain(&unlisted).copied().collect();
    sources.shuffle(&mut rng);
    let link = TrafficLink::new()?;
    let traffic = DiverseTraffic {
        link: &link,
        frames: sources.iter().copied().map(frame_v6).collect(),
    };
    let floor = diverse_floor(&traffic)?;
    let capacity = usize::try_from(auto_capacity(plan.key_count(), FilterShape::Fingerprint16))?;
    let options = LoadOptions::for_capacity(FilterShape::Fingerprint16, capacity)
        .ok_or("filter too large")?;
    let mut blocklist = FilterProgram::load(&options)?;
    blocklist.live().install(&plan)?;
    let skipped = blocklist.maps_mut().live_profile().prefilter_skipped;
    let configured = traffic.cost_of_blocklist(&mut blocklist)?;
    let maps = blocklist.maps_mut();
    let (profile, table) = (maps.live_profile(), maps.live_table_map()?);
    maps.install(&table, &profile, &Box::new(Prefilter::FULL))?;
    let full = traffic.cost_of_blocklist(&mut blocklist)?;
    let marked = plan
        .prefilter()
        .ipv6
        .iter()
        .filter(|&&mask| mask != 0)
        .count();
    let lengths = plan.lengths().ipv6().to_vec();
    println!(
        "{}: {} IPv6 entries, {} keys, lengths {lengths:?}, {marked} of 65536 IPv6 bytes marked, \
         prefilter_skipped {skipped:#b}",
        path.display(),
        nets.len(),
        plan.key_count()
    );
    println!(
        "probes per packet from the plan: listed {:.2}, unlisted {:.2} (every bit set: {})",
        mean_probes_v6(&plan, &listed),
        mean_probes_v6(&plan, &unlisted),
        lengths.len()
    );
    println!(
        "\nDiverse IPv6 traffic: {DIVERSE_SOURCES} sources (half listed), sent {DIVERSE_PASSES} times\n"
    );
    println!("| program | diverse ns | diverse - floor | packets run / sent |");
    println!("|---|---:|---:|---:|");
    for (program, cost) in [
        ("parse-only floor", floor),
        ("cuckoo filter, prefilter as configured", configured),
        ("cuckoo filter, every prefilter bit set", full),
    ] {
        println!(
            "| {program} | {:.0} | {:.0} | {} / {} |",
            cost.ns,
            cost.ns - floor.ns,
            cost.packets,
            cost.sent
        );
    }
    println!(
        "\nevery bit set / as configured, above the floor: {:.2}",
        (full.ns - floor.ns) / (configured.ns - floor.ns)
    );
    Ok(())
}

/// Rounds of the sampling benchmark: each setting once per round, so
/// that drift over the run touches every setting alike.
const SAMPLING_ROUNDS: usize = 3;

/// A bpffs directory for the sampling benchmark's pins, removed on drop.
struct BenchPins(PathBuf);

impl Drop for BenchPins {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A thread draining the ring of the program pinned in a directory, as
/// `cfctl` reads it, until dropped.
struct RingDrain {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Result<u64, String>>>,
}

impl RingDrain {
    fn start(pins: &Path) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (pins, stopped) = (pins.to_owned(), Arc::clone(&stop));
        let thread = std::thread::spawn(move || -> Result<u64, String> {
            let mut events = DropEvents::open(&PinDir::new(&pins))
                .map_err(|error| error.to_string())?
                .ok_or("no pinned program")?;
            let mut read = 0;
            while !stopped.load(Ordering::Relaxed) {
                read += events
                    .poll(Duration::from_millis(100), |_| {})
                    .map_err(|error| error.to_string())? as u64;
            }
            Ok(read)
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops the reader; the events it read.
    fn finish(mut self) -> BenchResult<u64> {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self.thread.take().ok_or("reader already finished")?;
        Ok(thread.join().map_err(|_| "the ring reader panicked")??)
    }
}

impl Drop for RingDrain {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Drop sampling under diverse traffic (see the module documentation).
fn bench_sampling() -> BenchResult<()> {
    let dataset = netset_dataset(&netset_argument(2), MAX_PREFIX_LENGTHS, None)?;
    let plan = KeyPlan::build(
        dataset.cidrs.iter().copied().map(IpNet::V4),
        PlanLimits::default(),
    )?;
    let mut rng = StdRng::seed_from_u64(0x0b0e_5eed);
    let link = TrafficLink::new()?;
    let traffic = DiverseTraffic::draw(&link, &dataset, &plan, &mut rng)?;
    let capacity = usize::try_from(auto_capacity(plan.key_count(), FilterShape::Fingerprint16))?;
    let options = LoadOptions::for_capacity(FilterShape::Fingerprint16, capacity)
        .ok_or("filter too large")?;
    let mut blocklist = FilterProgram::load(&options)?;
    blocklist.live().install(&plan)?;
    let pins = BenchPins(PathBuf::from(format!(
        "/sys/fs/bpf/cfxdp-bench-sampling-{}",
        std::process::id()
    )));
    PinDir::new(&pins.0).prepare()?;
    blocklist.pin(&pins.0)?;
    let drain = RingDrain::start(&pins.0);
    let settings = [
        (
            "off (rate 0)",
            Sampling {
                rate: 0,
                ..Sampling::default()
            },
        ),
        ("default (1,000/s per CPU)", Sampling::default()),
        (
            "every drop (10^6/s per CPU)",
            Sampling {
                rate: 1_000_000,
                burst: 1_000_000,
                ..Sampling::default()
            },
        ),
    ];
    let mut floors = Vec::new();
    let mut costs = vec![Vec::new(); settings.len()];
    let mut counts = vec![SamplerCounts::default(); settings.len()];
    for _ in 0..SAMPLING_ROUNDS {
        floors.push(diverse_floor(&traffic)?);
        for (index, (_, sampling)) in settings.iter().enumerate() {
            blocklist.maps().set_sampling(sampling);
            let before = blocklist.maps().sampler_counts()?;
            costs[index].push(traffic.cost_of_blocklist(&mut blocklist)?);
            let after = blocklist.maps().sampler_counts()?;
            counts[index].sampled += after.sampled - before.sampled;
            counts[index].lost += after.lost - before.lost;
            counts[index].skipped += after.skipped - before.skipped;
        }
    }
    let read = drain.finish()?;
    let mean =
        |costs: &[DiverseCost]| costs.iter().map(|cost| cost.ns).sum::<f64>() / costs.len() as f64;
    let floor = mean(&floors);
    let off_above = mean(&costs[0]) - floor;
    println!(
        "{}: {} keys; {DIVERSE_SOURCES} sources (half listed), sent {DIVERSE_PASSES} times, \
         {SAMPLING_ROUNDS} rounds; the reader read {read} events\n",
        dataset.name,
        plan.key_count()
    );
    println!("| sampling | diverse ns (per round) | mean - floor | / off, above floor | sampled | lost | skipped |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let rounds = |costs: &[DiverseCost]| {
        costs
            .iter()
            .map(|cost| format!("{:.0}", cost.ns))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "| parse-only floor | {} | 0 | - | - | - | - |",
        rounds(&floors)
    );
    for ((name, _), (costs, counts)) in settings.iter().zip(costs.iter().zip(&counts)) {
        let above = mean(costs) - floor;
        println!(
            "| {name} | {} | {above:.0} | {:.2} | {} | {} | {} |",
            rounds(costs),
            above / off_above,
            counts.sampled,
            counts.lost,
            counts.skipped
        );
    }
    Ok(())
}
