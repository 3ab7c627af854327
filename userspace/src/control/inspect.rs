//! What the control plane can tell without changing anything: `status`,
//! `check`, `verify` and the counters. (Opening the live filter still
//! repairs it first if a crashed update left its mark.)

use std::net::IpAddr;
use std::path::Path;

use filter_core::{AddressFamily, NetKey};
use ipnet::IpNet;

use super::error::{ControlError, Result};
use super::report::{CheckResult, CounterRecord, EntryRecord, SourceCount, Status, VerifyReport};
use super::Control;
use crate::plan::{CheckReport, CheckVerdict, KeyPlan, PlanLimits};
use crate::store::{Entry, ListKind};
use crate::time::unix_seconds;
use crate::xdp::{LiveFilter, PinDir, TrafficDirection};
use crate::{Family, Outcome, Setting};

impl Control {
    /// The entries of `list` that contain `address`, longest first.
    fn covering(&self, list: ListKind, address: IpAddr) -> Result<Vec<Entry>> {
        Ok(self
            .store
            .covering(list, &[address])?
            .pop()
            .unwrap_or_default())
    }

    /// Which entries cover `address`, and what the live filter says.
    pub fn check(&self, address: IpAddr) -> Result<CheckResult> {
        let covering = self.covering(ListKind::Blocklist, address)?;
        let allowlisted = self.covering(ListKind::Allowlist, address)?;
        let mut result = CheckResult {
            address,
            verdict: "not_attached",
            covering: Vec::new(),
            allowlisted: allowlisted.into_iter().map(EntryRecord::from).collect(),
            filter_hit: None,
            other_store: false,
        };
        if let Some((mut live, same_store)) = self.live()? {
            let limits = PlanLimits {
                ipv4_lengths: cfxdp::MAX_PREFIX_LENGTHS,
                ipv6_lengths: cfxdp::MAX_PREFIX_LENGTHS,
                max_keys: u64::MAX,
            };
            let probes = KeyPlan::with_lengths([], live.lengths(), limits)?.probe_keys(address);
            let hits = live.contains(&probes)?;
            let report = CheckReport {
                address,
                covering: covering.iter().map(|entry| entry.net).collect(),
                filter_hit: probes
                    .iter()
                    .zip(hits)
                    .find_map(|(key, hit)| hit.then_some(*key)),
            };
            result.verdict = match report.verdict() {
                CheckVerdict::Listed => "listed",
                CheckVerdict::NotListed => "not_listed",
                CheckVerdict::FalsePositive => "false_positive",
                CheckVerdict::MissingFromFilter => "missing_from_filter",
            };
            result.filter_hit = report.filter_hit.map(|key| describe_key(&key));
            result.other_store = !same_store;
        }
        result.covering = covering.into_iter().map(EntryRecord::from).collect();
        Ok(result)
    }

    /// Recomputes the filter keys from the store with the live active
    /// lengths and compares them with the live table; checks every page of
    /// the store first.
    pub fn verify(&mut self) -> Result<VerifyReport> {
        self.store.check_integrity()?;
        let (mut live, same_store) = self
            .live()?
            .ok_or_else(|| ControlError::NotAttached(self.pins.path().to_owned()))?;
        let settings = self.settings()?;
        let nets = self.store.nets(ListKind::Blocklist)?;
        let mut report = VerifyReport {
            entries: nets.len(),
            keys: 0,
            fingerprints: live.summary()?.fingerprints,
            missing_keys: 0,
            stale_prefilter_bits: 0,
            problems: Vec::new(),
        };
        if !same_store {
            report.problems.push(self.other_store().to_string());
            return Ok(report);
        }
        let plan = match KeyPlan::with_lengths(nets, live.lengths(), settings.plan_limits) {
            Ok(plan) => plan,
            Err(error) => {
                report.problems.push(format!(
                    "the live active prefix lengths cannot hold the stored entries: {error}"
                ));
                return Ok(report);
            }
        };
        report.keys = plan.key_count();
        let (live_bits, exact) = (live.prefilter(), plan.prefilter());
        report.stale_prefilter_bits = [AddressFamily::Ipv4, AddressFamily::Ipv6]
            .into_iter()
            .flat_map(|family| live_bits.masks(family).iter().zip(exact.masks(family)))
            .map(|(live, exact)| (live & !exact).count_ones() as usize)
            .sum();
        let keys: Vec<_> = plan.keys().copied().collect();
        report.missing_keys = live
            .contains(&keys)?
            .into_iter()
            .filter(|present| !present)
            .count();
        if report.missing_keys > 0 {
            report.problems.push(format!(
                "{} of {} filter keys are missing from the live filter",
                report.missing_keys, report.keys
            ));
        }
        if report.fingerprints != report.keys {
            report.problems.push(format!(
                "the live filter holds {} fingerprints for {} keys",
                report.fingerprints, report.keys
            ));
        }
        if live.seed() != settings.seed {
            report
                .problems
                .push("the live filter's seed is not the stored one".to_owned());
        }
        Ok(report)
    }

    /// Entries per source, blocklist first.
    fn source_counts(&self) -> Result<Vec<SourceCount>> {
        let mut counts = Vec::new();
        for list in ListKind::ALL {
            for (source, entries) in self.store.source_counts(list)? {
                counts.push(SourceCount {
                    list: list.name(),
                    source,
                    entries,
                });
            }
        }
        Ok(counts)
    }

    /// The state of everything.
    pub fn status(&self) -> Result<Status> {
        let settings = self.settings()?;
        let mut status = Status {
            pin_dir: self.pins.path().to_owned(),
            store: self.store.path().to_owned(),
            loaded: false,
            other_store: false,
            pins_problem: None,
            interfaces: self.pins.attachments(),
            mode: settings.mode,
            policy: settings.policy,
            malformed: settings.malformed,
            match_address: settings.match_address,
            capacity: settings.capacity,
            sizing: settings.sizing,
            last_resize: settings.last_resize.clone(),
            max_memory: settings.max_memory,
            fingerprint_bits: settings.shape.fingerprint_bits(),
            sampling: settings.sampling,
            samplers: None,
            entries: self.store.entry_count(ListKind::Blocklist)?,
            allowlist_entries: self.store.entry_count(ListKind::Allowlist)?,
            sources: self.source_counts()?,
            next_expiry: self.store.next_expiry()?.map(unix_seconds),
            ipv4_lengths: Vec::new(),
            ipv6_lengths: Vec::new(),
            filter: None,
            ipv4_packet_fpr: None,
            ipv6_packet_fpr: None,
        };
        let live = match self.live() {
            Ok(live) => live,
            Err(error @ ControlError::Incomplete { .. }) => {
                status.pins_problem = Some(error.to_string());
                None
            }
            Err(error) => return Err(error),
        };
        if let Some((mut live, same_store)) = live {
            status.loaded = true;
            status.other_store = !same_store;
            status.mode = live.mode();
            status.policy = live.policy();
            status.malformed = live.malformed_action();
            status.fingerprint_bits = live.shape().fingerprint_bits();
            status.sampling = live.maps().sampling();
            status.samplers = Some(live.maps().sampler_counts()?);
            let lengths = live.lengths();
            let summary = live.summary()?;
            let per_packet = |probes: usize| 1.0 - (1.0 - summary.expected_fpr).powi(probes as i32);
            status.ipv4_packet_fpr = Some(per_packet(lengths.ipv4().len()));
            status.ipv6_packet_fpr = Some(per_packet(lengths.ipv6().len()));
            status.ipv4_lengths = lengths.ipv4().to_vec();
            status.ipv6_lengths = lengths.ipv6().to_vec();
            status.filter = Some(summary);
        }
        Ok(status)
    }
}

/// The occupancy of the live filter pinned in `pin_dir`, if one is (no
/// store needed).
pub fn live_summary(pin_dir: &Path) -> Option<crate::filter::TableSummary> {
    PinDir::new(pin_dir)
        .open()
        .ok()
        .flatten()
        .and_then(|mut live| live.summary().ok())
}

/// Reads every counter of the blocklist pinned in `pin_dir` (no store
/// needed, so this works while another cfctl holds it).
pub fn read_counters(pin_dir: &Path) -> Result<Vec<CounterRecord>> {
    let counters = open_pinned(pin_dir)?.counters()?;
    Ok(TrafficDirection::ALL
        .iter()
        .flat_map(|&direction| {
            Outcome::ALL
                .iter()
                .map(move |&outcome| (direction, outcome))
        })
        .flat_map(|(direction, outcome)| {
            Family::ALL
                .iter()
                .map(move |&family| (direction, outcome, family))
        })
        .map(|(direction, outcome, family)| {
            let counter = counters.get_in(direction, outcome, family);
            CounterRecord {
                direction,
                outcome,
                family,
                packets: counter.packets,
                bytes: counter.bytes,
            }
        })
        .collect())
}

/// The live filter of the blocklist pinned in `pin_dir`: an error if
/// none is, or if its pins are incomplete.
pub(super) fn open_pinned(pin_dir: &Path) -> Result<LiveFilter> {
    PinDir::new(pin_dir)
        .open()
        .map_err(|source| ControlError::Incomplete {
            pin_dir: pin_dir.to_owned(),
            source: Box::new(source),
        })?
        .ok_or_else(|| ControlError::NotAttached(pin_dir.to_owned()))
}

/// `198.18.0.0/24`-style text for a filter key.
fn describe_key(key: &NetKey) -> String {
    let [_, first, second] = *key.words();
    let net = match key.family() {
        AddressFamily::Ipv4 => IpNet::new(IpAddr::V4((first as u32).into()), key.prefix_len()),
        AddressFamily::Ipv6 => IpNet::new(
            IpAddr::V6((u128::from(first) << 64 | u128::from(second)).into()),
            key.prefix_len(),
        ),
    };
    net.map_or_else(|_| format!("{key:?}"), |net| net.to_string())
}
