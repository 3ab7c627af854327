//! Following a CrowdSec Local API (LAPI) as a bouncer: its decisions
//! become entries of the source [`SOURCE`].
//!
//! * **Pulls.** Every `pull` interval the agent asks
//!   `GET /v1/decisions/stream` for the changes since its last pull
//!   ([`lapi`]); the first pull after a start, after an answer that was not
//!   applied, and every `resync` interval ask for the whole list
//!   (`startup=true`). The first of those replaces what the source lists;
//!   a resync changes only the difference, so a decision the LAPI's cursor
//!   skipped comes back by itself, and one that ended is withdrawn. A
//!   resync that withdraws nearly everything is logged loudly and applied:
//!   the LAPI is the authority.
//! * **Bookkeeping** ([`decisions`]): which decisions live, indexed by
//!   network and id, so that 10^5 deletions cost what 10^5 additions do.
//! * **Outages.** A pull that fails keeps the entries as they are. The
//!   next ones back off exponentially (with jitter) up to
//!   [`MAX_BACKOFF`]; while nothing answers at all, the LAPI's address is
//!   probed every `pull` interval (a TCP connection), and the pull comes as
//!   soon as it answers.
//!
//! * **Usage metrics** ([`usage`]): what the blocklist dropped, by the
//!   decisions' origins, pushed to the LAPI every `metrics_interval` with
//!   a pull, and once more when the agent stops.
//!
//! The source's state (how its pulls went, its counts by origin) is state
//! `URL` of namespace `crowdsec`: a LAPI at another URL starts afresh.

pub mod config;
pub mod decisions;
pub mod lapi;
pub mod usage;

use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::time::{Duration, Instant, SystemTime};

use ipnet::IpNet;
use prometheus::{Gauge, IntCounterVec, IntGauge, Opts};
use serde::{Deserialize, Serialize};
use toml::Spanned;

pub use self::config::CrowdsecConfig;
use self::decisions::{Changes, DecisionCounts, Decisions, Taking};
use self::lapi::{Answer, LapiError};
use self::usage::{Push, UsageMetrics};
use super::settings::{ConfigError, Located};
use super::{AnySource, Kind, Source, SourceConfig, SourceStatus};
use crate::control::{Change, Control, ControlError, NoProgress};
use crate::drops::Remediation;
use crate::store::{ListKind, Store, StoreError};
use crate::text::Escaped;
use crate::time::unix_seconds;

/// The source the LAPI's decisions belong to.
pub const SOURCE: &str = "crowdsec";

/// The longest wait between pulls of a LAPI that fails.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// A resync that would withdraw more than this share of what the source
/// lists (of at least [`LOUD_WITHDRAWAL_FLOOR`] networks) is logged at
/// WARN.
const LOUD_WITHDRAWAL_SHARE: f64 = 0.9;
const LOUD_WITHDRAWAL_FLOOR: usize = 100;

/// The namespace of the source's state.
const NAMESPACE: &str = "crowdsec";

/// The kind of source the `[crowdsec]` section declares.
pub struct Lapis;

/// The CrowdSec LAPI, as [`super::KINDS`] registers it.
pub const LAPI: Lapis = Lapis;

/// What the agent records of a LAPI between pulls.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LapiState {
    /// Whether the last pull's answer was applied.
    pub synced: bool,
    /// Decisions taken and live after the last pull.
    pub live_decisions: usize,
    /// When a pull was last tried, Unix seconds.
    pub last_attempt: Option<u64>,
    /// When a pull last succeeded.
    pub last_success: Option<u64>,
    /// When the whole list was last taken.
    pub last_resync: Option<u64>,
    /// Why the last pull failed, if it did.
    pub last_error: Option<String>,
    /// Decisions by origin: received, applied, ignored, expired.
    pub counts: BTreeMap<String, DecisionCounts>,
    /// When the LAPI last took the usage metrics.
    pub last_metrics_push: Option<u64>,
    /// Why the last push of usage metrics was not taken, if it was not.
    pub metrics_push_error: Option<String>,
}

/// The LAPI's metrics.
struct LapiMetrics {
    decisions: IntCounterVec,
    pulls: IntCounterVec,
    live: IntGauge,
    up: IntGauge,
    last_pull: Gauge,
}

static METRICS: LazyLock<LapiMetrics> = LazyLock::new(|| LapiMetrics {
    decisions: IntCounterVec::new(
        Opts::new(
            "cfctl_crowdsec_decisions_total",
            "CrowdSec decisions by origin and result: received, applied, ignored, expired",
        ),
        &["origin", "result"],
    )
    .expect("a valid metric"),
    pulls: IntCounterVec::new(
        Opts::new(
            "cfctl_crowdsec_pulls_total",
            "Pulls of the CrowdSec LAPI by result: ok, failed, resync (the whole list)",
        ),
        &["result"],
    )
    .expect("a valid metric"),
    live: IntGauge::new(
        "cfctl_crowdsec_live_decisions",
        "CrowdSec decisions taken and live",
    )
    .expect("a valid metric"),
    up: IntGauge::new(
        "cfctl_crowdsec_up",
        "Whether the last pull of the CrowdSec LAPI succeeded",
    )
    .expect("a valid metric"),
    last_pull: Gauge::new(
        "cfctl_crowdsec_last_pull_timestamp_seconds",
        "When the CrowdSec LAPI was last pulled (0: never)",
    )
    .expect("a valid metric"),
});

impl LapiMetrics {
    /// Shows `state`, and the counts it gained since `before`.
    fn show(&self, before: &BTreeMap<String, DecisionCounts>, state: &LapiState) {
        for (origin, counts) in &state.counts {
            let old = before.get(origin).copied().unwrap_or_default();
            for (result, now, then) in [
                ("received", counts.received, old.received),
                ("applied", counts.applied, old.applied),
                ("ignored", counts.ignored, old.ignored),
                ("expired", counts.expired, old.expired),
            ] {
                self.decisions
                    .with_label_values(&[origin.as_str(), result])
                    .inc_by(now.saturating_sub(then));
            }
        }
        for result in ["ok", "failed", "resync"] {
            self.pulls.with_label_values(&[result]);
        }
        self.live.set(state.live_decisions as i64);
        self.up.set(i64::from(
            state.last_error.is_none() && state.last_success.is_some(),
        ));
        self.last_pull
            .set(state.last_attempt.map_or(0.0, |seconds| seconds as f64));
    }
}

impl Kind for Lapis {
    fn section(&self) -> &'static str {
        "crowdsec"
    }

    fn namespace(&self) -> &'static str {
        NAMESPACE
    }

    fn owns(&self, source: &str) -> bool {
        source == SOURCE
    }

    fn configure(
        &self,
        section: Spanned<toml::de::DeValue<'_>>,
        at: &Located<'_>,
    ) -> Result<Vec<Box<dyn SourceConfig>>, ConfigError> {
        let span = section.span();
        let section: config::Section = at.section(section)?;
        Ok(vec![Box::new(config::check(section, span, at)?)])
    }

    fn register_metrics(&self, registry: &prometheus::Registry) -> prometheus::Result<()> {
        let metrics = &*METRICS;
        registry.register(Box::new(metrics.decisions.clone()))?;
        registry.register(Box::new(metrics.pulls.clone()))?;
        registry.register(Box::new(metrics.live.clone()))?;
        registry.register(Box::new(metrics.up.clone()))?;
        registry.register(Box::new(metrics.last_pull.clone()))
    }

    fn forget(&self, _key: &str) {
        // One LAPI at most: its series stay, at their last values.
    }

    fn status(&self, store: &Store) -> Result<Option<SourceStatus>, StoreError> {
        let states: Vec<(String, LapiState)> = store.states(NAMESPACE)?;
        let Some((url, state)) = states.into_iter().next() else {
            return Ok(None);
        };
        let last = super::last_outcome(state.last_success, state.last_error.as_deref(), "pulled");
        let mut lines = vec![format!(
            "  crowdsec   {} {} decisions, {last}",
            Escaped(&url),
            crate::text::thousands(state.live_decisions as u64)
        )];
        match (&state.metrics_push_error, state.last_metrics_push) {
            (Some(error), _) => {
                lines.push(format!("    usage metrics not pushed: {}", Escaped(error)))
            }
            (None, Some(at)) => {
                lines.push(format!("    usage metrics pushed {}", crate::time::utc(at)))
            }
            (None, None) => {}
        }
        for (origin, counts) in &state.counts {
            lines.push(format!(
                "    {:<12} {} received, {} applied, {} ignored, {} expired",
                Escaped(origin),
                counts.received,
                counts.applied,
                counts.ignored,
                counts.expired
            ));
        }
        let json = serde_json::json!({
            "url": url,
            "synced": state.synced,
            "decisions": state.live_decisions,
            "last_attempt": state.last_attempt,
            "last_success": state.last_success,
            "last_resync": state.last_resync,
            "last_error": state.last_error,
            "origins": state.counts,
            "last_metrics_push": state.last_metrics_push,
            "metrics_push_error": state.metrics_push_error,
        });
        Ok(Some(SourceStatus {
            key: "crowdsec",
            json,
            lines,
        }))
    }
}

impl SourceConfig for CrowdsecConfig {
    fn kind(&self) -> &'static dyn Kind {
        &LAPI
    }

    fn source(&self) -> (ListKind, String) {
        (ListKind::Blocklist, SOURCE.to_owned())
    }

    fn state_key(&self) -> String {
        self.url.clone()
    }

    fn summary(&self) -> (String, serde_json::Value) {
        let line = format!(
            "crowdsec {} -> blocklist of {SOURCE}, every {}, scopes {}, types {}",
            self.url,
            humantime::format_duration(self.pull),
            self.scopes.join(","),
            self.types.join(",")
        );
        let json = serde_json::json!({
            "url": self.url,
            "pull_seconds": self.pull.as_secs(),
            "resync_seconds": self.resync.as_secs(),
            "metrics_interval_seconds": self.metrics_interval.map(|interval| interval.as_secs()),
            "scopes": self.scopes,
            "types": self.types,
        });
        (line, json)
    }

    fn build(&self, store: &Store) -> Result<Box<dyn AnySource>, StoreError> {
        let state: LapiState = store.state(NAMESPACE, &self.url)?.unwrap_or_default();
        METRICS.show(&state.counts, &state);
        let now = Instant::now();
        Ok(Box::new(Lapi {
            config: self.clone(),
            state,
            decisions: Decisions::default(),
            synced: false,
            failures: 0,
            due: now,
            backoff_until: now,
            next_resync: now,
            logged: std::collections::HashSet::new(),
            usage: UsageMetrics::new(self.metrics_interval),
        }))
    }

    crate::same_configuration!();
}

/// A followed LAPI.
struct Lapi {
    config: CrowdsecConfig,
    state: LapiState,
    decisions: Decisions,
    /// Whether this process applied the last answer, so that the next pull
    /// may ask for the changes only. False at the start: every start asks
    /// for the whole list, as CrowdSec's own bouncers do.
    synced: bool,
    /// Pulls failed in a row.
    failures: u32,
    due: Instant,
    /// Until when a failing LAPI is only probed (when nothing answered).
    backoff_until: Instant,
    next_resync: Instant,
    /// Ignored-decision reasons already logged.
    logged: std::collections::HashSet<String>,
    usage: UsageMetrics,
}

/// What a pull asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ask {
    /// The changes since the last pull.
    Changes,
    /// The whole list, replacing what the source lists.
    Everything,
    /// The whole list, compared with what the source lists.
    Resync,
}

/// What one fetch brought back.
enum Pulled {
    /// The probe found nothing answering: no pull was made.
    Unreachable,
    /// A pull, with when it was sent and how long it took, and the push
    /// of usage metrics that went with it, if one was due.
    Answer {
        ask: Ask,
        attempted: SystemTime,
        answer: Result<Answer, LapiError>,
        took: Duration,
        pushed: Option<(Box<Push>, Result<(), LapiError>)>,
    },
}

impl Lapi {
    /// The wait after `failures` failed pulls in a row: the interval,
    /// doubled per failure up to [`MAX_BACKOFF`], then shortened by a
    /// random part of up to a half so a fleet does not retry in step.
    fn backoff(&self) -> Duration {
        let pull = self.config.pull;
        if self.failures == 0 {
            return pull;
        }
        let doubled = pull.saturating_mul(1 << self.failures.min(16));
        let wait = doubled.min(MAX_BACKOFF.max(pull));
        let jitter = (crate::filter::random_seed() % 1000) as f64 / 2000.0;
        wait.mul_f64(1.0 - jitter)
    }

    /// Takes a pull's answer and applies what it changes; why not, if not.
    fn take(
        &mut self,
        control: &mut Control,
        ask: Ask,
        answer: &Answer,
        pull_took: Duration,
    ) -> Result<(), String> {
        let taking = match ask {
            Ask::Changes => Taking::Changes,
            Ask::Resync => Taking::Resync,
            Ask::Everything => Taking::Replace,
        };
        let listed_before = self.decisions.listed();
        let changes = self.decisions.take(
            &self.config,
            answer,
            taking,
            SystemTime::now(),
            &mut self.state.counts,
        );
        for reason in &changes.ignored {
            if self.logged.insert(reason.clone()) {
                tracing::warn!(%reason, "CrowdSec decisions ignored (logged once)");
            }
        }
        let withdrawn = changes.unlisted.len();
        if ask == Ask::Resync
            && listed_before >= LOUD_WITHDRAWAL_FLOOR
            && withdrawn as f64 > listed_before as f64 * LOUD_WITHDRAWAL_SHARE
        {
            tracing::warn!(
                withdrawn,
                listed = listed_before,
                "the LAPI's whole list withdraws nearly every decision at once; applying it \
                 (the LAPI is the authority)"
            );
        }
        let started = Instant::now();
        let (added, deleted) = apply_changes(control, &changes, ask)?;
        self.decisions.applied(&changes);
        let took = started.elapsed();
        if ask != Ask::Changes || added > 0 || deleted > 0 {
            super::record_update(SOURCE, took);
            tracing::info!(
                whole = ask != Ask::Changes,
                received = answer.new.len(),
                listed = changes.listed.len(),
                added,
                deleted,
                pull_seconds = pull_took.as_secs_f64(),
                apply_seconds = took.as_secs_f64(),
                "CrowdSec decisions applied"
            );
        }
        Ok(())
    }
}

/// Applies `changes` (asked with `ask`) to the source; the numbers of
/// networks added and deleted, or why not.
fn apply_changes(
    control: &mut Control,
    changes: &Changes,
    ask: Ask,
) -> Result<(usize, usize), String> {
    let entries = changes.entries();
    let mut apply = |change| {
        control
            .change(ListKind::Blocklist, change, &NoProgress)
            .map_err(|error| error.to_string())
    };
    if ask == Ask::Everything {
        let report = apply(Change::Replace {
            source: SOURCE,
            entries: &entries,
        })?;
        return Ok((report.added, report.deleted));
    }
    let mut counts = (0, 0);
    if !entries.is_empty() {
        counts.0 = apply(Change::Add {
            source: SOURCE,
            entries: &entries,
        })?
        .added;
    }
    if !changes.unlisted.is_empty() {
        counts.1 = apply(Change::Delete {
            source: Some(SOURCE),
            nets: &changes.unlisted,
        })?
        .deleted;
    }
    Ok(counts)
}

impl Source for Lapi {
    type Fetched = Pulled;

    fn name(&self) -> &str {
        SOURCE
    }

    fn due(&self) -> Instant {
        self.due
    }

    fn fetch(&mut self) -> Box<dyn FnOnce() -> Pulled + Send> {
        let now = Instant::now();
        let ask = if !self.synced {
            Ask::Everything
        } else if now >= self.next_resync {
            Ask::Resync
        } else {
            Ask::Changes
        };
        let probe_first = self.failures > 0 && now < self.backoff_until;
        let push = self
            .usage
            .due(now, &self.decisions, self.state.last_success);
        let config = self.config.clone();
        Box::new(move || {
            if probe_first && !lapi::reachable(&config, config.timeout.min(config.pull)) {
                return Pulled::Unreachable;
            }
            let attempted = SystemTime::now();
            let started = Instant::now();
            let answer = lapi::pull(&config, ask != Ask::Changes);
            let took = started.elapsed();
            let pushed = push.map(|push| {
                let result = lapi::push_usage(&config, &push.document, config.timeout);
                (Box::new(push), result)
            });
            Pulled::Answer {
                ask,
                attempted,
                answer,
                took,
                pushed,
            }
        })
    }

    fn apply(&mut self, control: &mut Control, pulled: Pulled) -> Result<(), ControlError> {
        let Pulled::Answer {
            ask,
            attempted,
            answer,
            took,
            pushed,
        } = pulled
        else {
            self.due = Instant::now() + self.config.pull;
            return Ok(());
        };
        let counts_before = self.state.counts.clone();
        self.state.last_attempt = Some(unix_seconds(attempted));
        let unreachable = matches!(answer, Err(LapiError::Unreachable(_)));
        let outcome = match answer {
            Ok(answer) => self.take(control, ask, &answer, took),
            Err(error) => Err(error.to_string()),
        };
        // Until an answer is applied, the next pull asks for everything:
        // the LAPI has moved its cursor past the changes it sent.
        self.synced = outcome.is_ok();
        self.state.synced = self.synced;
        let now = Instant::now();
        match outcome {
            Ok(()) => {
                if self.failures > 0 {
                    tracing::info!(url = %self.config.url, "the CrowdSec LAPI answers again");
                }
                self.failures = 0;
                self.state.last_success = self.state.last_attempt;
                self.state.last_error = None;
                if ask != Ask::Changes {
                    self.next_resync = now + self.config.resync;
                    self.state.last_resync = self.state.last_attempt;
                    METRICS.pulls.with_label_values(&["resync"]).inc();
                }
                METRICS.pulls.with_label_values(&["ok"]).inc();
                self.due = now + self.config.pull;
            }
            Err(error) => {
                if self.failures == 0 || self.state.last_error.as_ref() != Some(&error) {
                    tracing::error!(url = %self.config.url, %error, "CrowdSec pull failed; the entries stay as they are");
                }
                self.failures = self.failures.saturating_add(1);
                self.state.last_error = Some(error);
                METRICS.pulls.with_label_values(&["failed"]).inc();
                self.backoff_until = now + self.backoff();
                // Nothing answered: probe every interval until it does.
                self.due = match unreachable {
                    true => now + self.config.pull,
                    false => self.backoff_until,
                };
            }
        }
        if let Some((push, result)) = pushed {
            self.usage.record(*push, result, &mut self.state);
        }
        self.state.live_decisions = self.decisions.live(SystemTime::now());
        METRICS.show(&counts_before, &self.state);
        let mut txn = control.store().begin()?;
        txn.set_state(NAMESPACE, &self.config.url, &self.state)?;
        txn.commit()?;
        Ok(())
    }

    fn origin_of(&self, net: &IpNet) -> Option<String> {
        self.decisions.origin_of(net)
    }

    fn observe(&mut self, remediation: &Remediation) {
        self.usage.observe(remediation);
    }

    fn stop(&mut self) {
        let last_pull = self.state.last_success;
        let Some((push, timeout)) =
            self.usage
                .at_stop(&self.decisions, last_pull, self.config.timeout)
        else {
            return;
        };
        let result = lapi::push_usage(&self.config, &push.document, timeout);
        if result.is_ok() {
            tracing::info!("usage metrics pushed to the LAPI at the stop");
        }
        self.usage.record(push, result, &mut self.state);
    }
}
