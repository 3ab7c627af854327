//! Feeds: lists fetched over HTTP(S) or read from a file on their own
//! refresh intervals ([`fetch`]), each the whole of what its source
//! `feed:NAME` lists, swapped in with one [`Change::Replace`].
//!
//! A refresh that fails (the server, the connection, a bad list) keeps
//! the last good list. So does one that looks like a collapse rather than
//! news, unless the feed allows it (`allow_shrink`): a list with fewer
//! than `min_entries` entries (an empty body, by default), or one that
//! would shrink the feed by more than `max_shrink` of its entries. Entries
//! for a whole family (`0.0.0.0/0`, `::/0`) are refused, and the rest of
//! the list taken, unless the feed sets `allow_whole_family`. Every
//! refusal shows in `cfctl status`, the metrics and the log, at WARN.
//!
//! A feed's state (its validators for conditional requests, its counts,
//! how its last refresh went) is state `NAME` of namespace `feed`.

mod config;
pub mod fetch;

use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::{Duration, Instant, SystemTime};

use prometheus::{GaugeVec, IntCounterVec, IntGaugeVec, Opts};
use serde::{Deserialize, Serialize};
use toml::Spanned;

use self::config::Section;
pub use self::config::{DEFAULT_MAX_BYTES, DEFAULT_MAX_ENTRIES, MIN_REFRESH};
use self::fetch::{FetchError, Fetched, Validators};
use super::settings::{ConfigError, Located};
use super::{file, AnySource, Kind, Source, SourceConfig, SourceStatus};
use crate::control::{Change, Control, ControlError, NoProgress};
use crate::netlist::ListFormat;
use crate::store::{ListKind, NewEntry, Store, StoreError};
use crate::text::Escaped;
use crate::time::unix_seconds;

/// The kind of source `[[feed]]` sections declare.
pub struct Feeds;

/// The feeds, as [`super::KINDS`] registers them.
pub const FEEDS: Feeds = Feeds;

/// The namespace of the feeds' states.
const NAMESPACE: &str = "feed";

/// Where a feed's list comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FeedLocation {
    /// An `http://` or `https://` URL.
    Url(String),
    /// A local file.
    Path(PathBuf),
}

/// One feed.
#[derive(Clone, Debug, PartialEq)]
pub struct FeedConfig {
    /// Its name; its entries belong to source `feed:NAME`.
    pub name: String,
    /// Where its list comes from.
    pub location: FeedLocation,
    /// How often it is fetched.
    pub refresh: Duration,
    /// Its format, `None` to detect it.
    pub format: Option<ListFormat>,
    /// The list its entries go in.
    pub list: ListKind,
    /// How long one fetch may take.
    pub timeout: Duration,
    /// The largest body taken.
    pub max_bytes: u64,
    /// The most entries taken.
    pub max_entries: usize,
    /// Whether entries for a whole family (`0.0.0.0/0`, `::/0`) are
    /// taken; refused otherwise (the rest of the list is taken).
    pub allow_whole_family: bool,
    /// A list with fewer entries is refused (unless `allow_shrink`).
    pub min_entries: usize,
    /// A list that would shrink the feed by more than this share of its
    /// entries is refused (unless `allow_shrink`).
    pub max_shrink: f64,
    /// Whether any list is taken, however small.
    pub allow_shrink: bool,
}

impl FeedConfig {
    /// The source its entries belong to.
    pub fn source(&self) -> String {
        format!("feed:{}", self.name)
    }

    /// The settings that decide what a body applies as, as one text: a
    /// list applied under other ones is fetched again whole.
    fn applied_settings(&self) -> String {
        format!(
            "{:?}",
            (
                &self.location,
                self.format,
                self.list,
                self.max_bytes,
                self.max_entries,
                self.allow_whole_family
            )
        )
    }

    /// Why a list of `entries` entries is refused, when it is, for a feed
    /// that lists `listed` now.
    fn refusal(&self, entries: usize, listed: usize) -> Option<String> {
        if self.allow_shrink {
            return None;
        }
        if entries < self.min_entries {
            return Some(format!(
                "the list has {entries} entries, fewer than min_entries = {}",
                self.min_entries
            ));
        }
        let kept = listed as f64 * (1.0 - self.max_shrink);
        (entries < listed && (entries as f64) < kept).then(|| {
            format!(
                "the list would shrink the feed from {listed} to {entries} entries, by more than \
                 max_shrink = {}",
                self.max_shrink
            )
        })
    }
}

/// What the agent remembers of a feed between refreshes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FeedState {
    /// The last good answer's `ETag`, sent back as `If-None-Match`.
    pub etag: Option<String>,
    /// The last good answer's `Last-Modified`, sent back as
    /// `If-Modified-Since`.
    pub last_modified: Option<String>,
    /// The feed's settings the last good list was applied with: under
    /// other settings, the validators are not sent (an unchanged list may
    /// now apply otherwise).
    pub applied_with: Option<String>,
    /// Where the last good list came from, if a redirect took it elsewhere.
    pub redirected_to: Option<String>,
    /// When a refresh was last tried, Unix seconds.
    pub last_attempt: Option<u64>,
    /// When a refresh last succeeded (an updated or an unchanged list).
    pub last_success: Option<u64>,
    /// Why the last refresh failed or was refused, if it was.
    pub last_error: Option<String>,
    /// Entries of the last good list that were taken.
    pub entries: usize,
    /// Entries of the last good list that were refused: each covers a
    /// whole family (`0.0.0.0/0`, `::/0`) and the feed does not allow it.
    pub refused: usize,
    /// Refreshes that changed the list.
    pub updated: u64,
    /// Refreshes the server answered with 304 Not Modified.
    pub not_modified: u64,
    /// Refreshes that failed (the last good list stayed).
    pub failed: u64,
    /// Lists refused as a collapse: too few entries, or too steep a
    /// shrink (the last good list stayed).
    pub collapses_refused: u64,
}

/// The feeds' metrics, one series per feed from its start to its removal.
struct FeedMetrics {
    refreshes: IntCounterVec,
    entries: IntGaugeVec,
    refused: IntGaugeVec,
    up: IntGaugeVec,
    last_success: GaugeVec,
    last_attempt: GaugeVec,
}

static METRICS: LazyLock<FeedMetrics> =
    LazyLock::new(|| {
        let by_feed = |name: &str, help: &str| {
            IntGaugeVec::new(Opts::new(name, help), &["feed"]).expect("a valid metric")
        };
        let time_by_feed = |name: &str, help: &str| {
            GaugeVec::new(Opts::new(name, help), &["feed"]).expect("a valid metric")
        };
        FeedMetrics {
        refreshes: IntCounterVec::new(
            Opts::new(
                "cfctl_feed_refreshes_total",
                "Feed refreshes by result: updated, not_modified, refused (a collapse: the last \
                 good list stays), failed",
            ),
            &["feed", "result"],
        )
        .expect("a valid metric"),
        entries: by_feed("cfctl_feed_entries", "Entries of each feed's last good list"),
        refused: by_feed(
            "cfctl_feed_refused_entries",
            "Entries of each feed's last good list refused: they cover a whole family",
        ),
        up: by_feed(
            "cfctl_feed_up",
            "Whether each feed's last refresh succeeded",
        ),
        last_success: time_by_feed(
            "cfctl_feed_last_success_timestamp_seconds",
            "When each feed last refreshed successfully (0: never)",
        ),
        last_attempt: time_by_feed(
            "cfctl_feed_last_attempt_timestamp_seconds",
            "When each feed's refresh was last tried (0: never)",
        ),
    }
    });

impl FeedMetrics {
    /// Shows `state` as feed `name`'s.
    fn show(&self, name: &str, state: &FeedState) {
        self.entries
            .with_label_values(&[name])
            .set(state.entries as i64);
        self.refused
            .with_label_values(&[name])
            .set(state.refused as i64);
        self.up.with_label_values(&[name]).set(i64::from(
            state.last_error.is_none() && state.last_success.is_some(),
        ));
        let time = |seconds: Option<u64>| seconds.map_or(0.0, |seconds| seconds as f64);
        self.last_success
            .with_label_values(&[name])
            .set(time(state.last_success));
        self.last_attempt
            .with_label_values(&[name])
            .set(time(state.last_attempt));
        for result in ["updated", "not_modified", "refused", "failed"] {
            self.refreshes.with_label_values(&[name, result]);
        }
    }
}

impl Kind for Feeds {
    fn section(&self) -> &'static str {
        "feed"
    }

    fn namespace(&self) -> &'static str {
        NAMESPACE
    }

    fn owns(&self, source: &str) -> bool {
        source.starts_with("feed:")
    }

    fn configure(
        &self,
        section: Spanned<toml::de::DeValue<'_>>,
        at: &Located<'_>,
    ) -> Result<Vec<Box<dyn SourceConfig>>, ConfigError> {
        let sections: Vec<Spanned<Section>> = at.section(section)?;
        let mut feeds: Vec<Box<dyn SourceConfig>> = Vec::new();
        let mut names = std::collections::HashSet::new();
        for section in sections {
            let span = section.span();
            let section = section.into_inner();
            let name = section.name();
            if !names.insert(name.get_ref().clone()) {
                return Err(at.at(
                    name.span(),
                    format!(
                        "a second feed named '{}'",
                        crate::text::excerpt(name.get_ref())
                    ),
                ));
            }
            feeds.push(Box::new(section.check(span, at)?));
        }
        Ok(feeds)
    }

    fn register_metrics(&self, registry: &prometheus::Registry) -> prometheus::Result<()> {
        let metrics = &*METRICS;
        registry.register(Box::new(metrics.refreshes.clone()))?;
        registry.register(Box::new(metrics.entries.clone()))?;
        registry.register(Box::new(metrics.refused.clone()))?;
        registry.register(Box::new(metrics.up.clone()))?;
        registry.register(Box::new(metrics.last_success.clone()))?;
        registry.register(Box::new(metrics.last_attempt.clone()))
    }

    fn forget(&self, key: &str) {
        let metrics = &*METRICS;
        let _ = metrics.entries.remove_label_values(&[key]);
        let _ = metrics.refused.remove_label_values(&[key]);
        let _ = metrics.up.remove_label_values(&[key]);
        let _ = metrics.last_success.remove_label_values(&[key]);
        let _ = metrics.last_attempt.remove_label_values(&[key]);
        for result in ["updated", "not_modified", "refused", "failed"] {
            let _ = metrics.refreshes.remove_label_values(&[key, result]);
        }
    }

    fn status(&self, store: &Store) -> Result<Option<SourceStatus>, StoreError> {
        let feeds: Vec<(String, FeedState)> = store.states(NAMESPACE)?;
        let lines = feeds
            .iter()
            .map(|(name, state)| status_line(name, state))
            .collect();
        let json = feeds
            .into_iter()
            .map(|(name, state)| {
                let mut json = super::status_json(&state);
                if let Some(fields) = json.as_object_mut() {
                    fields.insert("name".to_owned(), name.into());
                }
                json
            })
            .collect();
        Ok(Some(SourceStatus {
            key: "feeds",
            json: serde_json::Value::Array(json),
            lines,
        }))
    }
}

/// A feed's line in `cfctl status`.
fn status_line(name: &str, state: &FeedState) -> String {
    let last = super::last_outcome(state.last_success, state.last_error.as_deref(), "refreshed");
    let refused = match state.refused {
        0 => String::new(),
        refused => format!(
            " ({} refused: whole family)",
            crate::text::thousands(refused as u64)
        ),
    };
    let collapses = match state.collapses_refused {
        0 => String::new(),
        refused => format!(", {refused} refused as a collapse"),
    };
    let redirected = state
        .redirected_to
        .as_ref()
        .map(|url| format!(", from {}", Escaped(url)))
        .unwrap_or_default();
    format!(
        "  feed {:<12} {} entries{refused}, {last} ({} updated, {} unchanged, {} \
         failed{collapses}){redirected}",
        Escaped(name),
        crate::text::thousands(state.entries as u64),
        state.updated,
        state.not_modified,
        state.failed
    )
}

impl SourceConfig for FeedConfig {
    fn kind(&self) -> &'static dyn Kind {
        &FEEDS
    }

    fn source(&self) -> (ListKind, String) {
        (self.list, FeedConfig::source(self))
    }

    fn state_key(&self) -> String {
        self.name.clone()
    }

    fn summary(&self) -> (String, serde_json::Value) {
        let location = match &self.location {
            FeedLocation::Url(url) => url.clone(),
            FeedLocation::Path(path) => path.display().to_string(),
        };
        let format = self.format.map_or("auto", ListFormat::name);
        let line = format!(
            "feed     {} -> {} of {}, every {}, format {}: {}",
            self.name,
            self.list.name(),
            FeedConfig::source(self),
            humantime::format_duration(self.refresh),
            format,
            location
        );
        let json = serde_json::json!({
            "name": self.name,
            "source": FeedConfig::source(self),
            "location": location,
            "refresh_seconds": self.refresh.as_secs(),
            "format": format,
            "list": self.list.name(),
        });
        (line, json)
    }

    fn build(&self, store: &Store) -> Result<Box<dyn AnySource>, StoreError> {
        let state: FeedState = store.state(NAMESPACE, &self.name)?.unwrap_or_default();
        METRICS.show(&self.name, &state);
        Ok(Box::new(Feed {
            source: FeedConfig::source(self),
            config: self.clone(),
            state,
            due: Instant::now(),
        }))
    }

    crate::same_configuration!();
}

/// A running feed.
struct Feed {
    source: String,
    config: FeedConfig,
    state: FeedState,
    due: Instant,
}

/// What one refresh brought back, and how long it took.
struct Refresh {
    fetched: Result<Fetched, FetchError>,
    took: Duration,
}

impl Source for Feed {
    type Fetched = Refresh;

    fn name(&self) -> &str {
        &self.source
    }

    fn due(&self) -> Instant {
        self.due
    }

    fn fetch(&mut self) -> Box<dyn FnOnce() -> Refresh + Send> {
        let config = self.config.clone();
        let applied_here =
            self.state.applied_with.as_deref() == Some(config.applied_settings().as_str());
        let validators = match applied_here {
            true => Validators {
                etag: self.state.etag.clone(),
                last_modified: self.state.last_modified.clone(),
            },
            false => Validators::default(),
        };
        Box::new(move || {
            let started = Instant::now();
            let fetched = fetch::fetch(&config, &validators);
            Refresh {
                fetched,
                took: started.elapsed(),
            }
        })
    }

    fn apply(&mut self, control: &mut Control, refresh: Refresh) -> Result<(), ControlError> {
        let now = unix_seconds(SystemTime::now());
        self.state.last_attempt = Some(now);
        let outcome = match refresh.fetched {
            Ok(Fetched::NotModified) => {
                self.state.not_modified += 1;
                Ok("not_modified")
            }
            Ok(Fetched::Body {
                bytes,
                etag,
                last_modified,
                redirected_to,
            }) => match self.replace(control, &bytes, refresh.took) {
                Ok(true) => {
                    self.state.etag = etag;
                    self.state.last_modified = last_modified;
                    self.state.applied_with = Some(self.config.applied_settings());
                    self.state.redirected_to = redirected_to;
                    Ok("updated")
                }
                Ok(false) => Ok("refused"),
                Err(error) => Err(error),
            },
            Err(error) => Err(error.to_string()),
        };
        let name = self.config.name.as_str();
        let result = match outcome {
            Ok("refused") => "refused",
            Ok(result) => {
                self.state.last_success = Some(now);
                self.state.last_error = None;
                result
            }
            Err(error) => {
                tracing::error!(feed = %name, %error, "refresh failed; the last good list stays");
                self.state.failed += 1;
                self.state.last_error = Some(error);
                "failed"
            }
        };
        METRICS.refreshes.with_label_values(&[name, result]).inc();
        METRICS.show(name, &self.state);
        let mut txn = control.store().begin()?;
        txn.set_state(NAMESPACE, name, &self.state)?;
        txn.commit()?;
        self.due = Instant::now() + self.config.refresh;
        Ok(())
    }
}

impl Feed {
    /// Parses `bytes` as the feed's list and makes it all that the feed's
    /// source lists, but for entries of a whole family the feed does not
    /// allow; whether it was applied (false: refused as a collapse), or
    /// why not (the last good list stays).
    fn replace(
        &mut self,
        control: &mut Control,
        bytes: &[u8],
        fetch_took: Duration,
    ) -> Result<bool, String> {
        let feed = &self.config;
        let started = Instant::now();
        let list = fetch::parse(feed, bytes).map_err(|error| error.to_string())?;
        let (entries, refused): (Vec<NewEntry<'_>>, Vec<NewEntry<'_>>) =
            file::entries(&list, None).into_iter().partition(|entry| {
                feed.allow_whole_family || !super::covers_a_whole_family(&entry.net)
            });
        if let Some(reason) = feed.refusal(entries.len(), self.state.entries) {
            tracing::warn!(
                feed = %feed.name,
                %reason,
                "the list looks like a collapse and is refused; the last good list stays \
                 (allow_shrink = true takes it)"
            );
            self.state.collapses_refused += 1;
            self.state.last_error = Some(format!("refused: {reason}"));
            return Ok(false);
        }
        if let Some(first) = refused.first() {
            tracing::warn!(
                feed = %feed.name,
                refused = refused.len(),
                first = %first.net,
                "feed entries that cover every address of their family are refused \
                 (allow_whole_family = true takes them); the rest of the list is applied"
            );
        }
        let source = FeedConfig::source(feed);
        let change = Change::Replace {
            source: &source,
            entries: &entries,
        };
        let report = control
            .change(feed.list, change, &NoProgress)
            .map_err(|error| error.to_string())?;
        let took = started.elapsed();
        super::record_update("feed", took);
        tracing::info!(
            feed = %feed.name,
            entries = entries.len(),
            added = report.added,
            deleted = report.deleted,
            fetch_seconds = fetch_took.as_secs_f64(),
            apply_seconds = took.as_secs_f64(),
            "feed refreshed"
        );
        self.state.updated += 1;
        self.state.entries = entries.len();
        self.state.refused = refused.len();
        Ok(true)
    }
}
