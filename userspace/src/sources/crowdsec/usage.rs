//! The usage metrics the CrowdSec source pushes to the LAPI
//! (`POST /v1/usage-metrics`), as CrowdSec's remediation components do, so
//! that `cscli metrics show bouncers` and the CrowdSec console show what
//! the blocklist did. One push holds one window, from the last push the
//! LAPI took (or the agent's start) to now:
//!
//! * `dropped`, in units `packet` and `byte`, labels `origin` and
//!   `ip_type`: the drops by reported origin
//!   ([`crate::drops::OriginNames`]): the origin of the decision that
//!   speaks for an entry of source `crowdsec` (`lists:NAME` for a
//!   blocklist's, as the firewall bouncer labels them), a source's name
//!   for the entries of the others, and `policy` and `unlisted` for drops
//!   no entry explains. An address listed by two origins counts for both.
//!   Estimates from the sampled drops, rounded to whole packets and bytes,
//!   exact while the sampling keeps up with the drops.
//! * `processed`, units `packet` and `byte`, label `ip_type`: every IPv4
//!   and IPv6 packet the program saw (exact).
//! * `active_decisions`, unit `ip`, labels `origin` and `ip_type`: the
//!   networks source `crowdsec` lists now, by origin (not a window's
//!   change: the count itself).
//!
//! A push goes every `metrics_interval` while the agent reads the drops
//! of an attached blocklist, and once more when the agent stops. One the
//! LAPI does not take is not lost: the next push's window reaches back to
//! the last one taken. A LAPI older than the endpoint (it answers 404) is
//! told once, at WARN.

use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

use super::decisions::Decisions;
use super::lapi::LapiError;
use super::LapiState;
use crate::drops::Remediation;
use crate::time::unix_seconds;
use crate::{Family, Setting};

/// The bouncer type the pushes name, the one the `User-Agent` gives.
pub const BOUNCER_TYPE: &str = "crowdsec-cfctl-bouncer";
/// The longest the push at the agent's stop may take.
const STOP_PUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// The operating system's name and version, read at the first push.
static OS: LazyLock<(String, String)> = LazyLock::new(|| {
    let info = os_info::get();
    (info.os_type().to_string(), info.version().to_string())
});

/// Packets and bytes, whole.
type Counts = (u64, u64);

/// The cumulative figures since the agent started, as a push counts them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counted {
    dropped: BTreeMap<(String, Family), Counts>,
    processed: BTreeMap<Family, Counts>,
}

impl Counted {
    fn of(remediation: &Remediation) -> Self {
        Self {
            dropped: remediation
                .dropped
                .iter()
                .map(|(key, estimate)| {
                    let whole = (
                        estimate.packets.round() as u64,
                        estimate.bytes.round() as u64,
                    );
                    (key.clone(), whole)
                })
                .collect(),
            processed: remediation
                .processed
                .iter()
                .map(|(family, exact)| (*family, (exact.packets, exact.bytes)))
                .collect(),
        }
    }
}

/// The `AllMetrics` document of one push (`localapi_swagger.yaml`).
#[derive(Clone, Debug, Serialize)]
pub struct AllMetrics {
    remediation_components: [RemediationComponent; 1],
}

#[derive(Clone, Debug, Serialize)]
struct RemediationComponent {
    version: String,
    os: OsVersion,
    metrics: [DetailedMetrics; 1],
    feature_flags: [String; 0],
    utc_startup_timestamp: u64,
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_pull: Option<u64>,
}

#[derive(Clone, Debug, Serialize)]
struct OsVersion {
    name: String,
    version: String,
}

#[derive(Clone, Debug, Serialize)]
struct DetailedMetrics {
    meta: MetricsMeta,
    items: Vec<MetricsItem>,
}

#[derive(Clone, Debug, Serialize)]
struct MetricsMeta {
    window_size_seconds: u64,
    utc_now_timestamp: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
struct MetricsItem {
    name: &'static str,
    value: u64,
    unit: &'static str,
    labels: BTreeMap<&'static str, String>,
}

/// One push: its document, and the figures it counts up to.
#[derive(Clone, Debug)]
pub struct Push {
    /// What is posted.
    pub document: AllMetrics,
    counted: Counted,
    at: u64,
}

/// The push schedule and the figures pushed so far.
#[derive(Debug)]
pub struct UsageMetrics {
    /// None: the push is off.
    interval: Option<Duration>,
    started: u64,
    /// The figures as of the last attribution; none before the first.
    latest: Option<Counted>,
    /// The figures as of the last push the LAPI took.
    pushed: Counted,
    /// When the window of the next push starts, Unix seconds.
    window_start: u64,
    next: Instant,
    told_missing: bool,
}

impl UsageMetrics {
    /// A schedule of a push every `interval` (none: off), from now.
    pub fn new(interval: Option<Duration>) -> Self {
        let started = unix_seconds(SystemTime::now());
        Self {
            interval,
            started,
            latest: None,
            pushed: Counted::default(),
            window_start: started,
            next: Instant::now() + interval.unwrap_or_default(),
            told_missing: false,
        }
    }

    /// Takes the figures since the agent started.
    pub fn observe(&mut self, remediation: &Remediation) {
        self.latest = Some(Counted::of(remediation));
    }

    /// The push due at `now`, if one is (the next is then due an interval
    /// later, whether or not this one is taken).
    pub fn due(
        &mut self,
        now: Instant,
        decisions: &Decisions,
        last_pull: Option<u64>,
    ) -> Option<Push> {
        let interval = self.interval?;
        if now < self.next {
            return None;
        }
        let push = self.push(decisions, last_pull)?;
        self.next = now + interval;
        Some(push)
    }

    /// The push now, if the push is on and there is anything to count.
    fn push(&self, decisions: &Decisions, last_pull: Option<u64>) -> Option<Push> {
        self.interval?;
        let counted = self.latest.clone()?;
        let now = SystemTime::now();
        let at = unix_seconds(now);
        let mut items = Vec::new();
        let labelled = |origin: Option<&str>, family: Family| {
            let mut labels = BTreeMap::from([("ip_type", family.name().to_owned())]);
            if let Some(origin) = origin {
                labels.insert("origin", origin.to_owned());
            }
            labels
        };
        let mut both_units =
            |name, labels: BTreeMap<&'static str, String>, now: Counts, then: Counts| {
                for (value, unit) in [
                    (now.0.saturating_sub(then.0), "packet"),
                    (now.1.saturating_sub(then.1), "byte"),
                ] {
                    items.push(MetricsItem {
                        name,
                        value,
                        unit,
                        labels: labels.clone(),
                    });
                }
            };
        for ((origin, family), counts) in &counted.dropped {
            let then = self
                .pushed
                .dropped
                .get(&(origin.clone(), *family))
                .copied()
                .unwrap_or_default();
            both_units("dropped", labelled(Some(origin), *family), *counts, then);
        }
        for (family, counts) in &counted.processed {
            let then = self
                .pushed
                .processed
                .get(family)
                .copied()
                .unwrap_or_default();
            both_units("processed", labelled(None, *family), *counts, then);
        }
        for ((origin, family), count) in decisions.listed_by_origin(now) {
            items.push(MetricsItem {
                name: "active_decisions",
                value: count,
                unit: "ip",
                labels: labelled(Some(&origin), family),
            });
        }
        let component = RemediationComponent {
            version: format!("v{}", env!("CARGO_PKG_VERSION")),
            os: OsVersion {
                name: OS.0.clone(),
                version: OS.1.clone(),
            },
            metrics: [DetailedMetrics {
                meta: MetricsMeta {
                    window_size_seconds: at.saturating_sub(self.window_start),
                    utc_now_timestamp: at,
                },
                items,
            }],
            feature_flags: [],
            utc_startup_timestamp: self.started,
            kind: BOUNCER_TYPE,
            last_pull,
        };
        Some(Push {
            document: AllMetrics {
                remediation_components: [component],
            },
            counted,
            at,
        })
    }

    /// Records how `push` went: taken, its figures are the next window's
    /// start; not taken, the next push reaches back to the last one taken.
    pub fn record(&mut self, push: Push, result: Result<(), LapiError>, state: &mut LapiState) {
        match result {
            Ok(()) => {
                tracing::debug!(
                    window_start = self.window_start,
                    "usage metrics pushed to the LAPI"
                );
                self.pushed = push.counted;
                self.window_start = push.at;
                state.last_metrics_push = Some(push.at);
                state.metrics_push_error = None;
            }
            Err(LapiError::Status(404)) => {
                if !self.told_missing {
                    tracing::warn!(
                        "the LAPI has no usage-metrics endpoint (older than CrowdSec 1.6.3?): \
                         its console shows no remediation metrics of this agent"
                    );
                    self.told_missing = true;
                }
                state.metrics_push_error =
                    Some("the LAPI has no usage-metrics endpoint".to_owned());
            }
            Err(error) => {
                let error = error.to_string();
                if state.metrics_push_error.as_ref() != Some(&error) {
                    tracing::warn!(%error, "the LAPI did not take the usage metrics; the next push sends them");
                }
                state.metrics_push_error = Some(error);
            }
        }
    }

    /// The push at the agent's stop, if the push is on and there is
    /// anything to count, and how long it may take.
    pub fn at_stop(
        &self,
        decisions: &Decisions,
        last_pull: Option<u64>,
        timeout: Duration,
    ) -> Option<(Push, Duration)> {
        Some((
            self.push(decisions, last_pull)?,
            timeout.min(STOP_PUSH_TIMEOUT),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drops::{Estimate, Exact};

    const HOUR: Duration = Duration::from_secs(3600);

    fn remediation(dropped: &[(&str, Family, f64)], processed: u64) -> Remediation {
        Remediation {
            dropped: dropped
                .iter()
                .map(|(origin, family, packets)| {
                    let estimate = Estimate {
                        packets: *packets,
                        bytes: packets * 100.0,
                        sampled: 1,
                    };
                    (((*origin).to_owned(), *family), estimate)
                })
                .collect(),
            processed: BTreeMap::from([(
                Family::Ipv4,
                Exact {
                    packets: processed,
                    bytes: processed * 100,
                },
            )]),
        }
    }

    /// The items of `push` as (name, unit, labels, value).
    fn items(push: &Push) -> Vec<(String, String, String, u64)> {
        let document = serde_json::to_value(&push.document).unwrap();
        document["remediation_components"][0]["metrics"][0]["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| {
                (
                    item["name"].as_str().unwrap().to_owned(),
                    item["unit"].as_str().unwrap().to_owned(),
                    item["labels"].to_string(),
                    item["value"].as_u64().unwrap(),
                )
            })
            .collect()
    }

    fn value(push: &Push, name: &str, unit: &str, labels: &str) -> Option<u64> {
        items(push)
            .into_iter()
            .find(|item| item.0 == name && item.1 == unit && item.2 == labels)
            .map(|item| item.3)
    }

    const CAPI_V4: &str = r#"{"ip_type":"ipv4","origin":"CAPI"}"#;

    #[test]
    fn each_push_counts_its_window_and_one_not_taken_is_not_lost() {
        let decisions = Decisions::default();
        let mut state = LapiState::default();
        let mut usage = UsageMetrics::new(Some(HOUR));
        let later = |hours: u32| Instant::now() + HOUR * hours + Duration::from_secs(1);
        usage.observe(&remediation(&[("CAPI", Family::Ipv4, 10.4)], 50));
        assert!(
            usage.due(Instant::now(), &decisions, None).is_none(),
            "not due yet"
        );
        let first = usage.due(later(1), &decisions, Some(7)).expect("a push");
        assert!(
            usage.due(later(1), &decisions, None).is_none(),
            "due again an interval later"
        );
        assert_eq!(value(&first, "dropped", "packet", CAPI_V4), Some(10));
        assert_eq!(value(&first, "dropped", "byte", CAPI_V4), Some(1040));
        assert_eq!(
            value(&first, "processed", "packet", r#"{"ip_type":"ipv4"}"#),
            Some(50)
        );
        usage.record(first, Ok(()), &mut state);
        assert!(state.last_metrics_push.is_some());

        usage.observe(&remediation(
            &[
                ("CAPI", Family::Ipv4, 12.6),
                ("lists:l1", Family::Ipv6, 3.0),
            ],
            80,
        ));
        let second = usage.due(later(2), &decisions, None).expect("a push");
        assert_eq!(value(&second, "dropped", "packet", CAPI_V4), Some(3));
        usage.record(second, Err(LapiError::Status(500)), &mut state);
        assert_eq!(
            state.metrics_push_error.as_deref(),
            Some("the LAPI answered 500")
        );

        // The window not taken is in the next push.
        usage.observe(&remediation(
            &[
                ("CAPI", Family::Ipv4, 13.0),
                ("lists:l1", Family::Ipv6, 4.0),
            ],
            90,
        ));
        let third = usage.due(later(3), &decisions, None).expect("a push");
        assert_eq!(value(&third, "dropped", "packet", CAPI_V4), Some(3));
        assert_eq!(
            value(
                &third,
                "dropped",
                "packet",
                r#"{"ip_type":"ipv6","origin":"lists:l1"}"#
            ),
            Some(4)
        );
        assert_eq!(
            value(&third, "processed", "packet", r#"{"ip_type":"ipv4"}"#),
            Some(40)
        );
        usage.record(third, Err(LapiError::Status(404)), &mut state);
        assert!(usage.told_missing);
    }

    #[test]
    fn the_document_has_what_the_lapi_requires() {
        let mut usage = UsageMetrics::new(Some(HOUR));
        usage.observe(&remediation(&[("cscli", Family::Ipv6, 2.0)], 0));
        let (push, timeout) = usage
            .at_stop(&Decisions::default(), Some(1_700_000_000), HOUR)
            .expect("a push at the stop");
        assert_eq!(timeout, STOP_PUSH_TIMEOUT);
        let document = serde_json::to_value(&push.document).unwrap();
        let schema: serde_json::Value = serde_json::from_str(include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/usage-metrics.schema.json"
        )))
        .unwrap();
        let validator = jsonschema::validator_for(&schema).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&document)
            .map(|error| error.to_string())
            .collect();
        assert!(errors.is_empty(), "{errors:?} in {document}");
        // The schema is strict enough to catch a field missing or misspelt.
        for (field, misspelt) in [("version", "versoin"), ("utc_startup_timestamp", "startup")] {
            let mut wrong = document.clone();
            let component = &mut wrong["remediation_components"][0];
            let value = component[field].take();
            component.as_object_mut().unwrap().remove(field);
            component[misspelt] = value;
            assert!(!validator.is_valid(&wrong), "{field} misspelt passes");
        }
        let components = document["remediation_components"].as_array().unwrap();
        let component = &components[0];
        assert_eq!(component["type"], BOUNCER_TYPE);
        assert_eq!(
            component["version"],
            format!("v{}", env!("CARGO_PKG_VERSION")).as_str()
        );
        assert!(component["utc_startup_timestamp"].as_u64() > Some(1_600_000_000));
        assert!(component["os"]["name"].is_string() && component["os"]["version"].is_string());
        assert_eq!(component["feature_flags"], serde_json::json!([]));
        assert_eq!(component["last_pull"], 1_700_000_000);
        let meta = &component["metrics"][0]["meta"];
        assert!(meta["window_size_seconds"].is_u64() && meta["utc_now_timestamp"].is_u64());
        for item in component["metrics"][0]["items"].as_array().unwrap() {
            assert!(
                item["name"].is_string() && item["unit"].is_string(),
                "{item}"
            );
            assert!(item["value"].is_number(), "{item}");
        }
    }

    #[test]
    fn no_push_when_off_or_before_the_drops_are_read() {
        let decisions = Decisions::default();
        let far = Instant::now() + HOUR * 100;
        let mut off = UsageMetrics::new(None);
        off.observe(&remediation(&[], 1));
        assert!(off.due(far, &decisions, None).is_none());
        assert!(off.at_stop(&decisions, None, HOUR).is_none());
        let mut unread = UsageMetrics::new(Some(HOUR));
        assert!(unread.due(far, &decisions, None).is_none());
    }
}
