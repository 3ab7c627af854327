//! The agent's Prometheus text endpoint (`GET /metrics`, loopback by
//! default), served by a small HTTP server thread.
//!
//! The agent's own numbers (entries per source, next expiry, feed
//! refreshes, update latency) are kept in `prometheus-client` metrics that
//! its passes update. The data plane's numbers (packets and bytes by
//! outcome and family, the filter's load and expected false-positive rate)
//! are read from the pinned maps at each scrape ([`DataPlane`]), without
//! the store, so a scrape never waits for an update.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::control::inspect::read_counters;
use crate::store::{CrowdsecState, DecisionCounts, FeedState, ListKind, Store, StoreError};
use crate::xdp::PinDir;
use crate::Setting;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabels {
    list: String,
    source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FeedLabels {
    feed: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefreshLabels {
    feed: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    origin: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpdateLabels {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CounterLabels {
    outcome: String,
    family: String,
}

/// The agent's metrics.
pub struct Metrics {
    registry: Mutex<Registry>,
    entries: Family<SourceLabels, Gauge>,
    next_expiry: Gauge<f64, AtomicU64>,
    refreshes: Family<RefreshLabels, Counter>,
    feed_entries: Family<FeedLabels, Gauge>,
    feed_refused: Family<FeedLabels, Gauge>,
    feed_up: Family<FeedLabels, Gauge>,
    feed_last_success: Family<FeedLabels, Gauge<f64, AtomicU64>>,
    feed_last_attempt: Family<FeedLabels, Gauge<f64, AtomicU64>>,
    updates: Family<UpdateLabels, Counter>,
    update_seconds: Family<UpdateLabels, Histogram>,
    crowdsec_decisions: Family<DecisionLabels, Counter>,
    crowdsec_pulls: Family<ResultLabels, Counter>,
    crowdsec_up: Gauge,
    crowdsec_last_pull: Gauge<f64, AtomicU64>,
}

fn seconds_since_epoch(time: SystemTime) -> f64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0.0, |since| since.as_secs_f64())
}

impl Metrics {
    /// The metrics of an agent whose blocklist is pinned in `pin_dir`.
    pub fn new(pin_dir: &Path) -> Self {
        let mut registry = Registry::with_prefix("cfctl");
        let metrics = Self {
            registry: Mutex::new(Registry::default()),
            entries: Family::default(),
            next_expiry: Gauge::default(),
            refreshes: Family::default(),
            feed_entries: Family::default(),
            feed_refused: Family::default(),
            feed_up: Family::default(),
            feed_last_success: Family::default(),
            feed_last_attempt: Family::default(),
            updates: Family::default(),
            update_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 16))
            }),
            crowdsec_decisions: Family::default(),
            crowdsec_pulls: Family::default(),
            crowdsec_up: Gauge::default(),
            crowdsec_last_pull: Gauge::default(),
        };
        registry.register(
            "crowdsec_decisions",
            "CrowdSec decisions by origin and result: received, applied, ignored, expired",
            metrics.crowdsec_decisions.clone(),
        );
        registry.register(
            "crowdsec_pulls",
            "Pulls of the CrowdSec LAPI by result: ok, failed",
            metrics.crowdsec_pulls.clone(),
        );
        registry.register(
            "crowdsec_up",
            "Whether the last pull of the CrowdSec LAPI succeeded",
            metrics.crowdsec_up.clone(),
        );
        registry.register(
            "crowdsec_last_pull_timestamp_seconds",
            "When the CrowdSec LAPI was last pulled",
            metrics.crowdsec_last_pull.clone(),
        );
        registry.register(
            "entries",
            "Entries each source lists",
            metrics.entries.clone(),
        );
        registry.register(
            "next_expiry_timestamp_seconds",
            "When the next listing expires (0: none does)",
            metrics.next_expiry.clone(),
        );
        registry.register(
            "feed_refreshes",
            "Feed refreshes by result: updated, not_modified, failed",
            metrics.refreshes.clone(),
        );
        registry.register(
            "feed_entries",
            "Entries of each feed's last good list",
            metrics.feed_entries.clone(),
        );
        registry.register(
            "feed_refused_entries",
            "Entries of each feed's last good list refused: they cover a whole family",
            metrics.feed_refused.clone(),
        );
        registry.register(
            "feed_up",
            "Whether each feed's last refresh succeeded",
            metrics.feed_up.clone(),
        );
        registry.register(
            "feed_last_success_timestamp_seconds",
            "When each feed last refreshed successfully",
            metrics.feed_last_success.clone(),
        );
        registry.register(
            "feed_last_attempt_timestamp_seconds",
            "When each feed's refresh was last tried",
            metrics.feed_last_attempt.clone(),
        );
        registry.register(
            "updates",
            "Updates applied to the store and the live filter",
            metrics.updates.clone(),
        );
        registry.register(
            "update_duration_seconds",
            "Time to apply an update, from a fetched list or an expiry to the live filter",
            metrics.update_seconds.clone(),
        );
        let started = Gauge::<f64, AtomicU64>::default();
        started.set(seconds_since_epoch(SystemTime::now()));
        registry.register(
            "agent_start_time_seconds",
            "When the agent started",
            started,
        );
        registry.register_collector(Box::new(DataPlane {
            pin_dir: pin_dir.to_owned(),
        }));
        *metrics
            .registry
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = registry;
        metrics
    }

    /// Records an update of `kind` (`feed`, `expire`) that took `took`.
    pub fn update(&self, kind: &str, took: Duration) {
        let labels = UpdateLabels {
            kind: kind.to_owned(),
        };
        self.updates.get_or_create(&labels).inc();
        self.update_seconds
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    /// Records a refresh of feed `name` with `result` and its new state.
    pub fn feed(&self, name: &str, result: &str, state: &FeedState) {
        let feed = FeedLabels {
            feed: name.to_owned(),
        };
        self.refreshes
            .get_or_create(&RefreshLabels {
                feed: name.to_owned(),
                result: result.to_owned(),
            })
            .inc();
        self.feed_entries
            .get_or_create(&feed)
            .set(state.entries as i64);
        self.feed_refused
            .get_or_create(&feed)
            .set(state.refused as i64);
        self.feed_up
            .get_or_create(&feed)
            .set(i64::from(state.last_error.is_none()));
        let time = |seconds: Option<u64>| seconds.map_or(0.0, |seconds| seconds as f64);
        self.feed_last_success
            .get_or_create(&feed)
            .set(time(state.last_success));
        self.feed_last_attempt
            .get_or_create(&feed)
            .set(time(state.last_attempt));
    }

    /// Records a pull of the CrowdSec LAPI: the decisions counted since
    /// `before` and whether it succeeded.
    pub fn crowdsec(&self, before: &BTreeMap<String, DecisionCounts>, state: &CrowdsecState) {
        for (origin, counts) in &state.counts {
            let old = before.get(origin).copied().unwrap_or_default();
            for (result, now, then) in [
                ("received", counts.received, old.received),
                ("applied", counts.applied, old.applied),
                ("ignored", counts.ignored, old.ignored),
                ("expired", counts.expired, old.expired),
            ] {
                self.crowdsec_decisions
                    .get_or_create(&DecisionLabels {
                        origin: origin.clone(),
                        result: result.to_owned(),
                    })
                    .inc_by(now.saturating_sub(then));
            }
        }
        let up = state.last_error.is_none();
        self.crowdsec_pulls
            .get_or_create(&ResultLabels {
                result: if up { "ok" } else { "failed" }.to_owned(),
            })
            .inc();
        self.crowdsec_up.set(i64::from(up));
        self.crowdsec_last_pull
            .set(state.last_attempt.map_or(0.0, |seconds| seconds as f64));
    }

    /// Takes the entries per source and the next expiry from `store`.
    pub fn observe_store(&self, store: &Store) -> Result<(), StoreError> {
        self.entries.clear();
        for list in ListKind::ALL {
            for (source, count) in store.source_counts(list)? {
                self.entries
                    .get_or_create(&SourceLabels {
                        list: list.name().to_owned(),
                        source,
                    })
                    .set(count as i64);
            }
        }
        self.next_expiry
            .set(store.next_expiry()?.map_or(0.0, seconds_since_epoch));
        Ok(())
    }

    /// The text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        let registry = self
            .registry
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if prometheus_client::encoding::text::encode(&mut text, &registry).is_err() {
            text.clear();
        }
        text
    }
}

/// The data plane's numbers, read from the pinned maps at each scrape.
#[derive(Debug)]
struct DataPlane {
    pin_dir: PathBuf,
}

impl Collector for DataPlane {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let Ok(counters) = read_counters(&self.pin_dir) else {
            return Ok(());
        };
        for (name, help, value) in [
            (
                "packets",
                "Packets seen by the XDP program, by outcome and family",
                0,
            ),
            (
                "bytes",
                "Bytes seen by the XDP program, by outcome and family",
                1,
            ),
        ] {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for counter in &counters {
                let labels = CounterLabels {
                    outcome: counter.outcome.name().to_owned(),
                    family: counter.family.name().to_owned(),
                };
                let count = if value == 0 {
                    counter.packets
                } else {
                    counter.bytes
                };
                ConstCounter::new(count).encode(family.encode_family(&labels)?)?;
            }
        }
        let summary = PinDir::new(&self.pin_dir)
            .open()
            .ok()
            .flatten()
            .and_then(|mut live| live.summary().ok());
        if let Some(summary) = summary {
            for (name, help, value) in [
                (
                    "filter_load_ratio",
                    "Occupied slots of the live filter",
                    summary.load_factor,
                ),
                (
                    "filter_expected_fpr",
                    "False-positive rate per probe expected at the live filter's load",
                    summary.expected_fpr,
                ),
                (
                    "filter_fingerprints",
                    "Fingerprints in the live filter",
                    summary.fingerprints as f64,
                ),
                (
                    "filter_slots",
                    "Slots of the live filter",
                    summary.slots as f64,
                ),
            ] {
                let gauge = ConstGauge::new(value);
                gauge.encode(encoder.encode_descriptor(
                    name,
                    help,
                    None,
                    gauge.metric_type(),
                )?)?;
            }
        }
        Ok(())
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
    tiny_http::Header::from_bytes("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
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
