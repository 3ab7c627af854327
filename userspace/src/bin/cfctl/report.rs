//! How cfctl prints its reports: as text for people, or as JSON with
//! `--json`; and the progress bar of long imports.

use std::io::Write;
use std::path::Path;

use filter_core::protocol::{Info, JournalFill, ResetCause};
use filter_core::AddressFamily;
use ipnet::IpNet;

use cfctl::agent::{self, status::AgentStatus};
use cfctl::control::device::{DeviceDelete, DeviceImport, DeviceStats};
use cfctl::control::sizing::{Sizing, HIGH_WATERMARK, LOW_WATERMARK};
use cfctl::control::{
    AttachPoint, AttachReport, ChangeReport, CheckResult, Control, CounterRecord, DetachReport,
    EntryRecord, FilterUpdate, Status, TableSummary, VerifyReport, PREFILTER_BYTES,
};
use cfctl::drops::report::DropReport;
use cfctl::netlist::export_line;
use cfctl::text::{thousands, Escaped};
use cfctl::time::utc;
use cfctl::{MalformedAction, MatchAddress, Setting};
use serde::Serialize;

use crate::cli::DropsBy;

/// Prints `value` as one line of JSON.
pub fn json<T: Serialize>(value: &T) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, value)?;
    writeln!(out)?;
    Ok(())
}

fn bytes(value: usize) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut size = value as f64;
    let mut unit = 0;
    while size >= 1024.0 && unit + 1 < UNITS.len() {
        size /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{value} B")
    } else {
        format!("{size:.1} {}", UNITS[unit])
    }
}

fn lengths(lengths: &[u8]) -> String {
    if lengths.is_empty() {
        return "none".to_owned();
    }
    lengths
        .iter()
        .map(|len| format!("/{len}"))
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn attach(report: &AttachReport) {
    let how = if report.loaded {
        "loaded the program"
    } else {
        "reused the pinned program"
    };
    if !report.attached.is_empty() {
        println!("attached to {} ({how})", report.attached.join(", "));
    }
    if !report.already_attached.is_empty() {
        println!("already attached to {}", report.already_attached.join(", "));
    }
    println!(
        "filter: {} entries, {} filter keys",
        thousands(report.entries as u64),
        thousands(report.keys as u64)
    );
}

pub fn resize(summary: &TableSummary) {
    println!(
        "resized: {} buckets, {} keys ({:.1}% of slots); swapped in on every link",
        thousands(summary.buckets as u64),
        thousands(summary.fingerprints as u64),
        summary.load_factor * 100.0
    )
}

pub fn detach(report: &DetachReport) {
    if !report.detached.is_empty() {
        println!("detached from {}", report.detached.join(", "));
    }
    if report.unloaded {
        println!("unpinned the program and its maps (the entry store is kept)");
    }
}

pub fn change(report: &ChangeReport) {
    println!("{}", change_summary(report));
    let by = by_source(report);
    notes(&report.not_listed, &format!("was not listed{by}"));
    notes(
        &report.still_listed,
        "stays listed: other sources list it (`cfctl list` shows which)",
    );
}

/// What a change did, in one line (what `cfctl batch` answers with).
pub fn change_summary(report: &ChangeReport) -> String {
    let count = |value: usize| thousands(value as u64);
    let source = Escaped(&report.source);
    let mut parts = match report.operation {
        "delete" => vec![format!("{} deleted", count(report.deleted))],
        "replace" => vec![
            format!("{} added", count(report.added)),
            format!("{} deleted", count(report.deleted)),
            format!("{} kept", count(report.kept)),
        ],
        "expire" => vec![
            format!("{} expired", count(report.expired)),
            format!("{} deleted", count(report.deleted)),
        ],
        _ => vec![format!("{} added", count(report.added))],
    };
    if report.joined > 0 {
        parts.push(format!(
            "{} listed by other sources too, now by {source} as well",
            count(report.joined)
        ));
    }
    if !report.already_listed.is_empty() {
        parts.push(format!(
            "{} listed already by {source} (renewed)",
            count(report.already_listed.len())
        ));
    }
    if !report.still_listed.is_empty() {
        parts.push(format!(
            "{} still listed by other sources",
            count(report.still_listed.len())
        ));
    }
    let by = by_source(report);
    if !report.not_listed.is_empty() {
        parts.push(format!("{} not listed{by}", count(report.not_listed.len())));
    }
    if report.repeated > 0 {
        parts.push(format!(
            "{} repeated in the input (taken once)",
            count(report.repeated)
        ));
    }
    let filter = match report.filter {
        FilterUpdate::NotAttached => "store only: not attached".to_owned(),
        FilterUpdate::Unchanged => "filter unchanged".to_owned(),
        FilterUpdate::Incremental { inserted, removed } => {
            format!("live filter: +{inserted} -{removed} keys")
        }
        FilterUpdate::Rebuilt { keys } => format!(
            "live filter rebuilt with {} keys and swapped in",
            thousands(keys as u64)
        ),
        FilterUpdate::Allowlist => "allowlist map updated".to_owned(),
    };
    format!("{} ({filter})", parts.join(", "))
}

/// ` by SOURCE` for a change of one source's entries, nothing for one
/// of every source's.
fn by_source(report: &ChangeReport) -> String {
    match report.source.as_str() {
        "*" => String::new(),
        source => format!(" by {}", Escaped(source)),
    }
}

/// One warning line for each of the first ten of `nets`, then how many
/// more there are.
fn notes(nets: &[IpNet], what: &str) {
    const SHOWN: usize = 10;
    for net in nets.iter().take(SHOWN) {
        eprintln!("cfctl: warning: {net} {what}");
    }
    if nets.len() > SHOWN {
        eprintln!(
            "cfctl: warning: and {} more: {what}",
            thousands((nets.len() - SHOWN) as u64)
        );
    }
}

fn entry_line(entry: &EntryRecord) -> String {
    let sources: Vec<String> = entry
        .sources
        .iter()
        .map(|member| {
            let comment = member
                .comment
                .as_deref()
                .map(|comment| format!(" ({})", Escaped(comment)))
                .unwrap_or_default();
            let expires = member
                .expires
                .map(|expires| format!(", expires {}", utc(expires)))
                .unwrap_or_default();
            format!(
                "from {}{comment}, added {}{expires}",
                Escaped(&member.source),
                utc(member.added)
            )
        })
        .collect();
    format!("{} {}", entry.net, sources.join("; "))
}

pub fn check(result: &CheckResult) {
    let address = result.address;
    match result.verdict {
        "listed" | "missing_from_filter" | "not_attached" if !result.covering.is_empty() => {
            println!("{address} is listed:");
            for entry in &result.covering {
                println!("  {}", entry_line(entry));
            }
        }
        _ => println!("{address}: not listed"),
    }
    for entry in &result.allowlisted {
        println!("  allowlisted by {}", entry_line(entry));
    }
    match result.verdict {
        "false_positive" => eprintln!(
            "cfctl: warning: the filter matches {address} at {} but no entry covers it: a false \
             positive (its packets are dropped too)",
            result.filter_hit.as_deref().unwrap_or("?")
        ),
        "missing_from_filter" => eprintln!(
            "cfctl: warning: the live filter does not match {address}; run `cfctl verify`"
        ),
        "not_attached" => eprintln!("cfctl: note: not attached; only the store was checked"),
        _ => {}
    }
}

pub fn entries(entries: &[EntryRecord]) {
    for entry in entries {
        println!("{}", entry_line(entry));
    }
}

/// The list in the plain format, each entry with the first comment of its
/// sources after `#`, escaped so that `cfctl import` reads back exactly the
/// same entries and comments.
pub fn export(entries: &[EntryRecord]) -> anyhow::Result<()> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    writeln!(out, "# cfctl export: {} entries", entries.len())?;
    for entry in entries {
        let comment = entry
            .sources
            .iter()
            .find_map(|member| member.comment.as_deref());
        writeln!(out, "{}", export_line(&entry.net, comment))?;
    }
    out.flush()?;
    Ok(())
}

pub fn status(full: &FullStatus) {
    let status = &full.filter;
    if status.interfaces.is_empty() {
        println!("not attached to any interface");
    } else {
        let interfaces: Vec<String> = status
            .interfaces
            .iter()
            .map(|link| {
                let place = match (link.present, link.in_this_namespace) {
                    (false, _) => ", interface gone",
                    (true, false) => ", in another network namespace",
                    (true, true) => "",
                };
                let point = match link.point {
                    AttachPoint::Xdp(_) => link.mode,
                    AttachPoint::Tc(_) | AttachPoint::Clsact(_) => link.point.name(),
                };
                format!("{} ({point}{place})", link.interface)
            })
            .collect();
        println!("attached to  {}", interfaces.join(", "));
    }
    match &status.pins_problem {
        Some(problem) => println!("pins         incomplete: {}", Escaped(problem)),
        None if status.loaded => {
            println!(
                "pins         program and maps pinned in {}",
                status.pin_dir.display()
            )
        }
        None => println!(
            "pins         nothing pinned in {}",
            status.pin_dir.display()
        ),
    }
    println!("store        {}", status.store.display());
    let matched = if status.match_address == MatchAddress::Destination {
        "destination"
    } else {
        "source"
    };
    println!(
        "mode         {}, policy {}, malformed frames {}, matching {matched} addresses",
        status.mode.name(),
        status.policy.name(),
        match status.malformed {
            MalformedAction::Drop => "dropped",
            MalformedAction::Pass => "passed",
        }
    );
    println!(
        "entries      {} blocklist, {} allowlist",
        thousands(status.entries),
        thousands(status.allowlist_entries)
    );
    for count in &status.sources {
        println!(
            "  {:<10} {} from {}",
            count.list,
            thousands(count.entries),
            Escaped(&count.source)
        );
    }
    if let Some(next) = status.next_expiry {
        println!("next expiry  {}", utc(next));
    }
    agent(full);
    sampling(status);
    sizing(status);
    match &status.filter {
        None => println!(
            "filter       {}-bit fingerprints, sized for {} keys (built at attach)",
            status.fingerprint_bits,
            thousands(status.capacity)
        ),
        Some(filter) => {
            println!(
                "filter       {}-bit fingerprints, {} buckets x {} slots, {} (+ {} of block \
                 prefilters)",
                status.fingerprint_bits,
                thousands(filter.buckets as u64),
                filter.slots / filter.buckets.max(1),
                bytes(filter.bytes),
                bytes(PREFILTER_BYTES)
            );
            println!(
                "keys         {} ({:.2}% of slots)",
                thousands(filter.fingerprints as u64),
                filter.load_factor * 100.0
            );
            println!(
                "lengths      IPv4 {}; IPv6 {}",
                lengths(&status.ipv4_lengths),
                lengths(&status.ipv6_lengths)
            );
            println!(
                "false pos.   {:.2e} per IPv4 packet, {:.2e} per IPv6 packet",
                status.ipv4_packet_fpr.unwrap_or(0.0),
                status.ipv6_packet_fpr.unwrap_or(0.0)
            );
        }
    }
}

/// The status lines of drop sampling: the settings and, when loaded,
/// what the samplers did.
pub fn sampling(status: &Status) {
    let sampling = &status.sampling;
    if sampling.rate == 0 {
        println!("sampling     off (`cfctl sampling --rate N` turns it on)");
    } else {
        let one_in = if sampling.one_in > 1 {
            format!("one drop in {}", thousands(sampling.one_in.into()))
        } else {
            "every drop".to_owned()
        };
        println!(
            "sampling     {one_in}, up to {}/s per CPU (bursts of {}), {} frame bytes",
            thousands(sampling.rate.into()),
            thousands(sampling.burst.into()),
            sampling.frame_bytes
        );
    }
    if let Some(samplers) = &status.samplers {
        println!(
            "samples      {} sampled, {} lost to a full ring, {} left unsampled",
            thousands(samplers.sampled),
            thousands(samplers.lost),
            thousands(samplers.skipped)
        );
    }
}

/// The status line of the filter's sizing, and of its last resize.
fn sizing(status: &Status) {
    match status.sizing {
        Sizing::Auto => println!(
            "sizing       automatic, now for {} keys (grows above {:.0}% of slots, shrinks below \
             {:.0}%)",
            thousands(status.capacity),
            HIGH_WATERMARK * 100.0,
            LOW_WATERMARK * 100.0
        ),
        Sizing::Fixed => println!(
            "sizing       fixed at {} keys (`cfctl resize --capacity auto` lets it size itself)",
            thousands(status.capacity)
        ),
    }
    if let Some(ceiling) = status.max_memory {
        println!(
            "max memory   {} for the filter table (--max-memory)",
            bytesize::ByteSize(ceiling).display().iec()
        );
    }
    if let Some(resized) = &status.last_resize {
        println!(
            "last resize  {}: {} to {} keys, {}",
            utc(resized.at),
            thousands(resized.from),
            thousands(resized.to),
            resized.reason
        );
    }
}

/// `cfctl status`: the filter's and the store's, the agent's, and every
/// kind of source's.
#[derive(Serialize)]
pub struct FullStatus {
    #[serde(flatten)]
    filter: Status,
    agent: Option<AgentStatus>,
    #[serde(flatten)]
    sources: serde_json::Map<String, serde_json::Value>,
    #[serde(skip)]
    source_lines: Vec<String>,
}

impl FullStatus {
    /// The status of `control` and of the agent of its store in
    /// `state_dir`.
    pub fn of(control: &Control, state_dir: &Path) -> anyhow::Result<Self> {
        let (agent, sources) = agent::status::status(control.store(), state_dir)?;
        Ok(Self {
            filter: control.status()?,
            agent,
            source_lines: sources
                .iter()
                .flat_map(|source| source.lines.clone())
                .collect(),
            sources: sources
                .into_iter()
                .map(|source| (source.key.to_owned(), source.json))
                .collect(),
        })
    }
}

/// The agent's lines of `status`: whether it runs, and each source's.
fn agent(status: &FullStatus) {
    if let Some(agent) = &status.agent {
        let record = &agent.record;
        let running = if agent.running {
            format!("running (pid {}) since {}", record.pid, utc(record.started))
        } else {
            format!("not running (last started {})", utc(record.started))
        };
        println!("agent        {running}, {}", Escaped(&record.config));
        if let Some(metrics) = &record.metrics {
            println!("  metrics    http://{}/metrics", Escaped(metrics));
        }
    }
    for line in &status.source_lines {
        println!("{line}");
    }
}

/// The counters as a table: totals, or per-second rates over `seconds`.
pub fn counters(counters: &[CounterRecord], seconds: Option<f64>) {
    let unit = if seconds.is_some() { "/s" } else { "" };
    println!(
        "{:<8} {:<12} {:<6} {:>14} {:>16}",
        "",
        "outcome",
        "family",
        format!("packets{unit}"),
        format!("bytes{unit}")
    );
    for counter in counters {
        if counter.packets == 0 && counter.bytes == 0 && seconds.is_none() {
            continue;
        }
        let (packets, bytes) = match seconds {
            Some(seconds) => (
                format!("{:.1}", counter.packets as f64 / seconds),
                format!("{:.1}", counter.bytes as f64 / seconds),
            ),
            None => (thousands(counter.packets), thousands(counter.bytes)),
        };
        println!(
            "{:<8} {:<12} {:<6} {packets:>14} {bytes:>16}",
            counter.direction.name(),
            counter.outcome.name(),
            counter.family.name()
        );
    }
}

pub fn verify(report: &VerifyReport) {
    if report.problems.is_empty() {
        println!(
            "ok: the live filter holds exactly the {} keys of {} stored entries",
            thousands(report.keys as u64),
            thousands(report.entries as u64)
        );
    }
    if report.stale_prefilter_bits > 0 {
        println!(
            "note: {} prefilter bits are set that no key needs; each costs the packets of its \
             block one filter probe until the filter is rebuilt (`cfctl attach IFACE`)",
            thousands(report.stale_prefilter_bits as u64)
        );
    }
}

pub fn device_import(report: &DeviceImport) {
    println!(
        "pushed {} entries; the device holds {} and saved image {}",
        thousands(report.entries as u64),
        thousands(u64::from(report.device_entries)),
        report.sequence
    );
}

pub fn device_delete(report: &DeviceDelete) {
    println!("{} deleted", report.deleted.len());
    for net in &report.not_listed {
        eprintln!("cfctl: warning: the device did not hold {net}");
    }
}

/// A device's parameters and state, for reports.
#[derive(Serialize)]
pub struct DeviceStatus {
    device: String,
    protocol_version: u16,
    fingerprint_bits: u8,
    slots_per_bucket: u8,
    bucket_count: u32,
    capacity: u32,
    seed: u64,
    entries: u32,
    ipv4_lengths: Vec<u8>,
    ipv6_lengths: Vec<u8>,
    saved_sequence: Option<u32>,
    /// The journal of changes after the saved image: records written and
    /// room (a save, or a full journal, folds it into a new image).
    journal: Option<JournalFill>,
    /// Why the device last started: `power-on`, `pin`, `brownout`,
    /// `watchdog`, `software`, `panic`, `hardfault`, `low-power` or
    /// `unknown`.
    reset_cause: &'static str,
}

impl DeviceStatus {
    pub fn new(target: &str, info: &Info) -> Self {
        let active = |family, max| {
            let mut lengths: Vec<u8> = info.prefix_lengths.up_to(family, max).collect();
            lengths.reverse();
            lengths
        };
        Self {
            device: target.to_owned(),
            protocol_version: info.protocol_version,
            fingerprint_bits: info.fingerprint_bits,
            slots_per_bucket: info.slots_per_bucket,
            bucket_count: info.bucket_count,
            capacity: info.capacity,
            seed: info.seed,
            entries: info.entries,
            ipv4_lengths: active(AddressFamily::Ipv4, 32),
            ipv6_lengths: active(AddressFamily::Ipv6, 128),
            saved_sequence: info.saved_sequence,
            journal: info.journal,
            reset_cause: reset_cause_name(info.reset_cause),
        }
    }
}

/// The name of a reset cause in reports.
fn reset_cause_name(cause: ResetCause) -> &'static str {
    match cause {
        ResetCause::PowerOn => "power-on",
        ResetCause::Pin => "pin",
        ResetCause::Brownout => "brownout",
        ResetCause::Watchdog => "watchdog",
        ResetCause::Software => "software",
        ResetCause::Panic => "panic",
        ResetCause::HardFault => "hardfault",
        ResetCause::LowPower => "low-power",
        ResetCause::Unknown => "unknown",
    }
}

pub fn device_status(status: &DeviceStatus) {
    println!(
        "device       {} (protocol {})",
        status.device, status.protocol_version
    );
    println!(
        "filter       {}-bit fingerprints, {} buckets x {} slots",
        status.fingerprint_bits,
        thousands(u64::from(status.bucket_count)),
        status.slots_per_bucket
    );
    println!(
        "entries      {} of {} slots ({:.1}%)",
        thousands(u64::from(status.entries)),
        thousands(u64::from(status.capacity)),
        f64::from(status.entries) * 100.0 / f64::from(status.capacity.max(1))
    );
    println!(
        "lengths      IPv4 {}; IPv6 {}",
        lengths(&status.ipv4_lengths),
        lengths(&status.ipv6_lengths)
    );
    match status.saved_sequence {
        Some(sequence) => println!("saved        image {sequence}"),
        None => println!("saved        nothing saved yet"),
    }
    if let Some(journal) = status.journal {
        println!(
            "journal      {} of {} records since the image (a full journal is folded into a new image)",
            thousands(u64::from(journal.records)),
            thousands(u64::from(journal.capacity)),
        );
    }
    println!("started by   {}", status.reset_cause);
}

pub fn device_stats(device: &DeviceStats) {
    let stats = &device.requests;
    for (name, value) in [
        ("requests", stats.requests),
        ("frame errors", stats.frame_errors),
        ("request errors", stats.request_errors),
        ("added", stats.added),
        ("deleted", stats.deleted),
        ("checked", stats.checked),
        ("hits", stats.hits),
        ("saves", stats.saves),
        ("replayed", stats.replayed),
        ("UDP refused", stats.datagrams_refused),
        ("UDP stale", stats.datagrams_stale),
    ] {
        println!("{name:<15} {}", thousands(u64::from(value)));
    }
    let traffic = &device.traffic;
    println!("frames on the Ethernet port:");
    for (name, count) in [
        ("IPv4 passed", traffic.ipv4.passed),
        ("IPv4 dropped", traffic.ipv4.dropped),
        ("IPv4 malformed", traffic.ipv4.malformed),
        ("IPv6 passed", traffic.ipv6.passed),
        ("IPv6 dropped", traffic.ipv6.dropped),
        ("IPv6 malformed", traffic.ipv6.malformed),
        ("not IP", traffic.non_ip),
        ("malformed", traffic.malformed),
        ("not bridged", traffic.ignored),
    ] {
        println!(
            "  {name:<15} {} frames, {} bytes",
            thousands(count.frames),
            thousands(count.bytes)
        );
    }
}

/// `cfctl stats --by WHAT`: one table of the drops.
pub fn drops_by(report: &DropReport, by: DropsBy) {
    println!("{} sampled drops attributed", thousands(report.sampled));
    match by {
        DropsBy::Source => drop_origins(report),
        DropsBy::Entry => drop_entries(report),
        DropsBy::Address => drop_addresses(report),
        DropsBy::Interface => drop_interfaces(report),
    }
}

/// `cfctl top --once`: the tables of `top`, one after the other.
pub fn drops_top(report: &DropReport) {
    println!("{} sampled drops attributed", thousands(report.sampled));
    drop_origins(report);
    println!();
    drop_entries(report);
    println!();
    drop_addresses(report);
}

fn drop_origins(report: &DropReport) {
    println!(
        "{:<24} {:<6} {:<10} {:>12} {:>14} {:>9}",
        "source", "family", "outcome", "packets", "bytes", "sampled"
    );
    for row in &report.origins {
        println!(
            "{:<24} {:<6} {:<10} {:>12.0} {:>14.0} {:>9}",
            Escaped(&row.origin).to_string(),
            row.ip_type,
            row.outcome,
            row.figures.packets,
            row.figures.bytes,
            row.figures.sampled
        );
    }
}

fn drop_entries(report: &DropReport) {
    println!(
        "{:<43} {:>12} {:>9}  sources",
        "entry", "packets", "sampled"
    );
    for row in &report.entries {
        println!(
            "{:<43} {:>12.0} {:>9}  {}",
            row.entry.to_string(),
            row.figures.packets,
            row.figures.sampled,
            Escaped(&row.sources.join(","))
        );
    }
}

fn drop_addresses(report: &DropReport) {
    println!("{:<39} {:>9} {:>7}", "address", "sampled", "share");
    for row in &report.addresses {
        println!(
            "{:<39} {:>9} {:>6.1}%",
            row.address.to_string(),
            row.sampled,
            row.share * 100.0
        );
    }
}

fn drop_interfaces(report: &DropReport) {
    println!(
        "{:<16} {:>7} {:<8} {:<4} {:>12} {:>14} {:>9}",
        "interface", "index", "", "hook", "packets", "bytes", "sampled"
    );
    for row in &report.interfaces {
        println!(
            "{:<16} {:>7} {:<8} {:<4} {:>12.0} {:>14.0} {:>9}",
            Escaped(row.interface.as_deref().unwrap_or("-")).to_string(),
            row.ifindex,
            row.direction.name(),
            row.hook.name(),
            row.figures.packets,
            row.figures.bytes,
            row.figures.sampled
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_get_thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(1_000_025), "1,000,025");
    }
}
