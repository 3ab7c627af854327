//! The agent's metrics endpoint (`GET /metrics`, loopback by default),
//! served by a small HTTP server thread in the Prometheus text format
//! (`text/plain; version=0.0.4`): `HELP` and `TYPE` for every family,
//! counters named `_total`, units in the names (`_seconds`, `_ratio`).
//!
//! The agent's own numbers (entries per source, the next expiry, its
//! start, how the filter is sized and its last resize) and those of every kind of source ([`crate::sources`]: feed
//! refreshes, LAPI pulls, update latency) are kept in metrics its
//! passes update. A series, once shown, stays until what it counts is gone
//! from the configuration: a source with no entries shows 0. The data
//! plane's numbers (packets and bytes by direction, outcome and family, the filter's
//! load and expected false-positive rate) are read from the pinned maps at
//! each scrape ([`DataPlane`]), without the store, so a scrape never waits
//! for an update.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{CounterVec, Encoder, Gauge, IntCounterVec, IntGaugeVec, Opts, Registry};

use crate::control::sampled::sampler_counts;
use crate::control::sizing::{Sizing, HIGH_WATERMARK, LOW_WATERMARK};
use crate::control::{live_summary, read_counters, FilterSettings, TableSummary};
use crate::drops::{Attribution, OriginKey};
use crate::store::{ListKind, Store, StoreError};
use crate::time::unix_seconds_f64;
use crate::Setting;

/// The agent's metrics.
pub struct Metrics {
    registry: Registry,
    entries: IntGaugeVec,
    next_expiry: Gauge,
    sizing: SizingMetrics,
    drops: DropMetrics,
    /// The (list, source) series of `entries` shown so far.
    shown: Mutex<HashSet<(String, String)>>,
}

/// A metric definition that cannot fail (its name and labels are
/// constants).
fn defined<T>(metric: prometheus::Result<T>) -> T {
    metric.expect("a valid metric definition")
}

impl Metrics {
    /// The metrics of an agent whose blocklist is pinned in `pin_dir`,
    /// with every kind of source's.
    pub fn new(pin_dir: &Path) -> prometheus::Result<Self> {
        let registry = Registry::new();
        let metrics = Self {
            entries: defined(IntGaugeVec::new(
                Opts::new("cfctl_entries", "Entries each source lists, by list"),
                &["list", "source"],
            )),
            next_expiry: defined(Gauge::new(
                "cfctl_next_expiry_timestamp_seconds",
                "When the next listing expires (0: none does)",
            )),
            shown: Mutex::new(HashSet::new()),
            sizing: SizingMetrics::new(),
            drops: DropMetrics::new(),
            registry,
        };
        let started = defined(Gauge::new(
            "cfctl_agent_start_time_seconds",
            "When the agent started",
        ));
        started.set(unix_seconds_f64(SystemTime::now()));
        metrics.registry.register(Box::new(started))?;
        metrics
            .registry
            .register(Box::new(metrics.entries.clone()))?;
        metrics
            .registry
            .register(Box::new(metrics.next_expiry.clone()))?;
        metrics.sizing.register(&metrics.registry)?;
        metrics.drops.register(&metrics.registry)?;
        metrics
            .registry
            .register(Box::new(DataPlane::new(pin_dir)))?;
        crate::sources::register_metrics(&metrics.registry)?;
        Ok(metrics)
    }

    /// Takes the entries per source and the next expiry from `store`; a
    /// source of `configured` that lists nothing shows 0.
    pub fn observe_store(
        &self,
        store: &Store,
        configured: &[(ListKind, String)],
    ) -> Result<(), StoreError> {
        let mut now: HashSet<(String, String)> = configured
            .iter()
            .map(|(list, source)| (list.name().to_owned(), source.clone()))
            .collect();
        for (list, source) in &now {
            self.entries.with_label_values(&[list, source]).set(0);
        }
        for list in ListKind::ALL {
            for (source, count) in store.source_counts(list)? {
                if count == 0 && !configured.contains(&(list, source.clone())) {
                    continue;
                }
                self.entries
                    .with_label_values(&[list.name(), source.as_str()])
                    .set(count as i64);
                now.insert((list.name().to_owned(), source));
            }
        }
        let mut shown = self
            .shown
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for (list, source) in shown.difference(&now) {
            let _ = self.entries.remove_label_values(&[list, source]);
        }
        *shown = now;
        self.next_expiry
            .set(store.next_expiry()?.map_or(0.0, unix_seconds_f64));
        Ok(())
    }

    /// Takes how the filter is sized, and its last resize, from the
    /// stored `settings`.
    pub fn observe_settings(&self, settings: &FilterSettings) {
        self.sizing.observe(settings);
    }

    /// Takes the drops by origin from `attribution`.
    pub fn observe_drops(&self, attribution: &Attribution) {
        self.drops.observe(attribution);
    }

    /// The text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut text = Vec::new();
        if prometheus::TextEncoder::new()
            .encode(&self.registry.gather(), &mut text)
            .is_err()
        {
            text.clear();
        }
        String::from_utf8(text).unwrap_or_default()
    }
}

/// How the filter is sized ([`crate::control::sizing`]), from the stored
/// settings.
struct SizingMetrics {
    capacity: Gauge,
    auto: Gauge,
    high_watermark: Gauge,
    low_watermark: Gauge,
    last_resize: Gauge,
    last_resize_info: IntGaugeVec,
}

impl SizingMetrics {
    fn new() -> Self {
        let gauge = |name: &str, help: &str| defined(Gauge::new(name, help));
        Self {
            capacity: gauge(
                "cfctl_filter_capacity_keys",
                "Keys the filter is sized for (attach builds it so)",
            ),
            auto: gauge(
                "cfctl_filter_sizes_itself",
                "1 if the filter grows and shrinks with the list, 0 if its capacity is fixed",
            ),
            high_watermark: gauge(
                "cfctl_filter_high_watermark_ratio",
                "Load above which a filter that sizes itself grows",
            ),
            low_watermark: gauge(
                "cfctl_filter_low_watermark_ratio",
                "Load below which a filter that sizes itself shrinks",
            ),
            last_resize: gauge(
                "cfctl_filter_last_resize_timestamp_seconds",
                "When the filter was last resized (0: never)",
            ),
            last_resize_info: defined(IntGaugeVec::new(
                Opts::new(
                    "cfctl_filter_last_resize_info",
                    "The last resize: capacities before and after, in keys, and why",
                ),
                &["from", "to", "reason"],
            )),
        }
    }

    fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        for gauge in [
            &self.capacity,
            &self.auto,
            &self.high_watermark,
            &self.low_watermark,
            &self.last_resize,
        ] {
            registry.register(Box::new(gauge.clone()))?;
        }
        registry.register(Box::new(self.last_resize_info.clone()))
    }

    fn observe(&self, settings: &FilterSettings) {
        self.capacity.set(settings.capacity as f64);
        self.auto
            .set(f64::from(u8::from(settings.sizing == Sizing::Auto)));
        self.high_watermark.set(HIGH_WATERMARK);
        self.low_watermark.set(LOW_WATERMARK);
        self.last_resize_info.reset();
        match &settings.last_resize {
            Some(resized) => {
                self.last_resize.set(resized.at as f64);
                self.last_resize_info
                    .with_label_values(&[
                        resized.from.to_string().as_str(),
                        resized.to.to_string().as_str(),
                        resized.reason.as_str(),
                    ])
                    .set(1);
            }
            None => self.last_resize.set(0.0),
        }
    }
}

/// The drops by origin and family ([`crate::drops`]), with the firewall
/// bouncer's label names (`origin`, `ip_type`): packets the program
/// dropped, and in monitor mode those it would have dropped.
struct DropMetrics {
    dropped: [CounterVec; 2],
    would_drop: [CounterVec; 2],
    /// What each series showed so far (packets, bytes): counters only
    /// grow by the attribution's gains.
    shown: Mutex<std::collections::HashMap<OriginKey, (f64, f64)>>,
}

impl DropMetrics {
    fn new() -> Self {
        let counters = |name: &str, help: &str| {
            defined(CounterVec::new(
                Opts::new(name, format!("{help}, by the origin of the entries covering the address (a source's name, `policy` or `unlisted`) and its family; estimated from the sampled drops when the sampling does not keep up with every drop")),
                &["origin", "ip_type"],
            ))
        };
        Self {
            dropped: [
                counters("cfctl_dropped_packets_total", "Packets dropped"),
                counters("cfctl_dropped_bytes_total", "Bytes of the packets dropped"),
            ],
            would_drop: [
                counters(
                    "cfctl_would_drop_packets_total",
                    "Packets monitor mode passed that enforce mode drops",
                ),
                counters(
                    "cfctl_would_drop_bytes_total",
                    "Bytes of the packets monitor mode passed that enforce mode drops",
                ),
            ],
            shown: Mutex::new(std::collections::HashMap::new()),
        }
    }

    fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        for family in self.dropped.iter().chain(&self.would_drop) {
            registry.register(Box::new(family.clone()))?;
        }
        Ok(())
    }

    fn observe(&self, attribution: &Attribution) {
        let mut shown = self
            .shown
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for (key, estimate) in attribution.origins() {
            let [packets, bytes] = match key.outcome {
                crate::Outcome::WouldDrop => &self.would_drop,
                _ => &self.dropped,
            };
            let labels = [key.origin.as_str(), key.family.name()];
            let (packets_shown, bytes_shown) = shown.entry(key.clone()).or_default();
            packets
                .with_label_values(&labels)
                .inc_by((estimate.packets - *packets_shown).max(0.0));
            bytes
                .with_label_values(&labels)
                .inc_by((estimate.bytes - *bytes_shown).max(0.0));
            *packets_shown = packets_shown.max(estimate.packets);
            *bytes_shown = bytes_shown.max(estimate.bytes);
        }
    }
}

/// The data plane's numbers, read from the pinned maps at each scrape.
struct DataPlane {
    pin_dir: PathBuf,
    descs: Vec<Desc>,
}

/// A gauge of the live filter, and how its value is read from the
/// filter's summary.
type FilterGauge = (Gauge, fn(&TableSummary) -> f64);

/// The data plane's families, new and empty: counters by outcome and
/// family, and the live filter's gauges.
struct DataPlaneFamilies {
    packets: IntCounterVec,
    bytes: IntCounterVec,
    samples: IntCounterVec,
    filter: [FilterGauge; 4],
}

impl DataPlaneFamilies {
    fn new() -> Self {
        let counters = |name: &str, help: &str| {
            defined(IntCounterVec::new(
                Opts::new(name, help),
                &["direction", "outcome", "family"],
            ))
        };
        let gauge = |name: &str, help: &str| defined(Gauge::new(name, help));
        Self {
            packets: counters(
                "cfctl_packets_total",
                "Packets the blocklist programs saw (XDP, TC), by direction (ingress, egress), outcome and family",
            ),
            bytes: counters(
                "cfctl_bytes_total",
                "Bytes the blocklist programs saw (whole frames), by direction, outcome and family",
            ),
            samples: defined(IntCounterVec::new(
                Opts::new(
                    "cfctl_drop_samples_total",
                    "Drops the XDP program sampled for the attribution (sampled), lost to a full ring (lost), or left unsampled by the rate and the one-in-N draw (skipped)",
                ),
                &["result"],
            )),
            filter: [
                (
                    gauge(
                        "cfctl_filter_load_ratio",
                        "Occupied slots of the live filter",
                    ),
                    |summary| summary.load_factor,
                ),
                (
                    gauge(
                        "cfctl_filter_expected_false_positive_ratio",
                        "False-positive rate per probe expected at the live filter's load",
                    ),
                    |summary| summary.expected_fpr,
                ),
                (
                    gauge(
                        "cfctl_filter_fingerprints",
                        "Fingerprints in the live filter",
                    ),
                    |summary| summary.fingerprints as f64,
                ),
                (
                    gauge("cfctl_filter_slots", "Slots of the live filter"),
                    |summary| summary.slots as f64,
                ),
            ],
        }
    }
}

impl DataPlane {
    fn new(pin_dir: &Path) -> Self {
        let families = DataPlaneFamilies::new();
        let mut descs: Vec<Desc> = Vec::new();
        descs.extend(families.packets.desc().into_iter().cloned());
        descs.extend(families.bytes.desc().into_iter().cloned());
        descs.extend(families.samples.desc().into_iter().cloned());
        for (gauge, _) in &families.filter {
            descs.extend(gauge.desc().into_iter().cloned());
        }
        Self {
            pin_dir: pin_dir.to_owned(),
            descs,
        }
    }
}

impl Collector for DataPlane {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let families = DataPlaneFamilies::new();
        let mut collected = Vec::new();
        if let Ok(counters) = read_counters(&self.pin_dir) {
            for counter in &counters {
                let labels = [
                    counter.direction.name(),
                    counter.outcome.name(),
                    counter.family.name(),
                ];
                families
                    .packets
                    .with_label_values(&labels)
                    .inc_by(counter.packets);
                families
                    .bytes
                    .with_label_values(&labels)
                    .inc_by(counter.bytes);
            }
            collected.extend(families.packets.collect());
            collected.extend(families.bytes.collect());
        }
        if let Ok(sampler) = sampler_counts(&self.pin_dir) {
            for (result, count) in [
                ("sampled", sampler.sampled),
                ("lost", sampler.lost),
                ("skipped", sampler.skipped),
            ] {
                families.samples.with_label_values(&[result]).inc_by(count);
            }
            collected.extend(families.samples.collect());
        }
        if let Some(summary) = live_summary(&self.pin_dir) {
            for (gauge, value) in &families.filter {
                gauge.set(value(&summary));
                collected.extend(gauge.collect());
            }
        }
        collected
    }
}

/// Serves `metrics` on `address` from a thread that lives as long as the
/// returned handle.
pub fn serve(metrics: Arc<Metrics>, address: SocketAddr) -> std::io::Result<Server> {
    let server = Arc::new(
        tiny_http::Server::http(address)
            .map_err(|error| std::io::Error::other(error.to_string()))?,
    );
    let serving = Arc::clone(&server);
    let thread = std::thread::spawn(move || {
        for request in serving.incoming_requests() {
            let response = match (request.method(), request.url()) {
                (tiny_http::Method::Get, "/metrics") => {
                    tiny_http::Response::from_string(metrics.encode()).with_header(text_header())
                }
                _ => tiny_http::Response::from_string("cfctl agent: GET /metrics\n")
                    .with_status_code(404),
            };
            let _ = request.respond(response);
        }
    });
    Ok(Server {
        server,
        thread: Some(thread),
    })
}

fn text_header() -> tiny_http::Header {
    tiny_http::Header::from_bytes("Content-Type", prometheus::TEXT_FORMAT)
        .expect("a constant, valid header")
}

/// The running endpoint; dropping it stops the server.
pub struct Server {
    server: Arc<tiny_http::Server>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
