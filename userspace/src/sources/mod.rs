//! Where entries come from. A source turns something from outside into
//! changes of the store's entries, which it hands to the one update path,
//! [`Control::change`]; it never touches the store's tables, the plan or
//! the maps itself. Its entries belong to its source name (`cli`,
//! `file:NAME`, `feed:NAME`, `crowdsec`).
//!
//! | module | source | driven by |
//! |---|---|---|
//! | [`cli`] | `cli` and any name given with `--source` | a command line |
//! | [`mod@file`] | `file:PATH` | `cfctl import` |
//! | [`feed`] | `feed:NAME` | the agent, on each feed's refresh interval |
//! | [`crowdsec`] | `crowdsec` | the agent, pulling a CrowdSec Local API |
//!
//! # Sources the agent runs
//!
//! A kind of source the agent runs ([`Kind`]) owns its section of the
//! agent's configuration, which it reads and checks itself into one
//! [`SourceConfig`] per source; its persisted state, under a namespace of
//! the store's generic state ([`crate::store::Store::state`]); its
//! metrics; and its status lines. A [`Source`] built from a configuration
//! says when it is next due, hands the agent a fetch to run on a thread of
//! its own (network or file I/O, bounded in time, no store: a slow source
//! never delays another one), and applies what the fetch brought back,
//! one change at a time through [`Control::change`].
//!
//! Adding a kind of source is a new module with a [`Kind`], a
//! [`SourceConfig`] and a [`Source`], and one line in [`KINDS`].

pub mod cli;
pub mod crowdsec;
pub mod feed;
pub mod file;
pub mod settings;

use std::any::Any;
use std::fmt::Debug;
use std::sync::LazyLock;
use std::time::Instant;

use ipnet::IpNet;
use serde::Serialize;

use crate::control::{Control, ControlError};
use crate::drops::Remediation;
use crate::store::{ListKind, Store, StoreError};
use settings::{ConfigError, Located};

/// Every kind of source the agent runs: the one place a kind is registered.
pub const KINDS: &[&dyn Kind] = &[&feed::FEEDS, &crowdsec::LAPI];

/// One kind of source the agent runs.
pub trait Kind: Sync {
    /// Its section in the agent's configuration (`feed` for `[[feed]]`).
    fn section(&self) -> &'static str;

    /// The namespace of its sources' states in the store.
    fn namespace(&self) -> &'static str;

    /// Whether the store source `source` belongs to this kind.
    fn owns(&self, source: &str) -> bool;

    /// Reads and checks its section of the configuration (`section`, with
    /// the places of its values in the file, for errors).
    fn configure(
        &self,
        section: toml::Spanned<toml::de::DeValue<'_>>,
        at: &Located<'_>,
    ) -> Result<Vec<Box<dyn SourceConfig>>, ConfigError>;

    /// Registers its metrics (once, when the agent starts).
    fn register_metrics(&self, registry: &prometheus::Registry) -> prometheus::Result<()>;

    /// Drops the metrics of its source whose state key is `key`, gone from
    /// the configuration.
    fn forget(&self, key: &str);

    /// Its part of `cfctl status`, from the states its sources recorded:
    /// `None` when it has none.
    fn status(&self, store: &Store) -> Result<Option<SourceStatus>, StoreError>;
}

/// A kind's part of `cfctl status`.
#[derive(Clone, Debug)]
pub struct SourceStatus {
    /// Its key in `status --json`.
    pub key: &'static str,
    /// What `status --json` shows under it.
    pub json: serde_json::Value,
    /// What `status` shows, one line each, escaped.
    pub lines: Vec<String>,
}

/// The configuration of one source the agent runs.
pub trait SourceConfig: Debug + Send + Sync + 'static {
    /// Its kind.
    fn kind(&self) -> &'static dyn Kind;

    /// The list its entries go in and the store source they belong to.
    fn source(&self) -> (ListKind, String);

    /// The key of its state in its kind's namespace.
    fn state_key(&self) -> String;

    /// What `cfctl agent --check-config` says of it: one line, and JSON.
    fn summary(&self) -> (String, serde_json::Value);

    /// Builds the source, with the state it recorded in `store`.
    fn build(&self, store: &Store) -> Result<Box<dyn AnySource>, StoreError>;

    /// This, for [`SourceConfig::same_as`].
    fn as_any(&self) -> &dyn Any;

    /// A copy of this configuration.
    fn boxed(&self) -> Box<dyn SourceConfig>;

    /// Whether `other` configures exactly this (a reload keeps a source
    /// whose configuration is the same).
    fn same_as(&self, other: &dyn SourceConfig) -> bool;
}

/// A source the agent runs.
pub trait Source: Send + 'static {
    /// What one fetch brings back.
    type Fetched: Send + 'static;

    /// Its name in logs (its store source name).
    fn name(&self) -> &str;

    /// When it is next due.
    fn due(&self) -> Instant;

    /// A fetch to run on a thread of its own: everything it needs moved
    /// into it, bounded in time, no store.
    fn fetch(&mut self) -> Box<dyn FnOnce() -> Self::Fetched + Send>;

    /// Applies what a fetch brought back through `control`, records the
    /// source's state and schedules its next fetch. An error is the store
    /// or the live filter failing (what a source fails at itself, it
    /// records and reports).
    fn apply(&mut self, control: &mut Control, fetched: Self::Fetched) -> Result<(), ControlError>;

    /// The origin reported for the drops of `net`, which it lists, where
    /// it knows one finer than its name ([`crate::drops::OriginNames`]).
    fn origin_of(&self, _net: &IpNet) -> Option<String> {
        None
    }

    /// Takes what the blocklist did since the agent started (after each
    /// attribution of the sampled drops).
    fn observe(&mut self, _remediation: &Remediation) {}

    /// Its last words when the agent stops: bounded in time, no store.
    fn stop(&mut self) {}
}

/// What a fetch brought back, its type erased, as the agent carries it.
pub type Fetched = Box<dyn Any + Send>;

/// A fetch, its result's type erased.
pub type Fetch = Box<dyn FnOnce() -> Fetched + Send>;

/// A [`Source`] with the type of its fetches erased, as the agent holds
/// every source.
pub trait AnySource: Send {
    /// [`Source::name`].
    fn name(&self) -> &str;
    /// [`Source::due`].
    fn due(&self) -> Instant;
    /// [`Source::fetch`].
    fn fetch(&mut self) -> Fetch;
    /// [`Source::apply`] on what this source's fetch brought back.
    fn apply(&mut self, control: &mut Control, fetched: Fetched) -> Result<(), ControlError>;
    /// [`Source::origin_of`].
    fn origin_of(&self, net: &IpNet) -> Option<String>;
    /// [`Source::observe`].
    fn observe(&mut self, remediation: &Remediation);
    /// [`Source::stop`].
    fn stop(&mut self);
}

impl<S: Source> AnySource for S {
    fn name(&self) -> &str {
        Source::name(self)
    }

    fn due(&self) -> Instant {
        Source::due(self)
    }

    fn fetch(&mut self) -> Fetch {
        let fetch = Source::fetch(self);
        Box::new(move || Box::new(fetch()) as Fetched)
    }

    fn apply(&mut self, control: &mut Control, fetched: Fetched) -> Result<(), ControlError> {
        match fetched.downcast::<S::Fetched>() {
            Ok(fetched) => Source::apply(self, control, *fetched),
            // The agent hands each source its own fetches only.
            Err(_) => Ok(()),
        }
    }

    fn origin_of(&self, net: &IpNet) -> Option<String> {
        Source::origin_of(self, net)
    }

    fn observe(&mut self, remediation: &Remediation) {
        Source::observe(self, remediation);
    }

    fn stop(&mut self) {
        Source::stop(self);
    }
}

/// Implements [`SourceConfig::as_any`], [`SourceConfig::boxed`] and
/// [`SourceConfig::same_as`] for a configuration type that is `Clone` and
/// `PartialEq`.
#[macro_export]
macro_rules! same_configuration {
    () => {
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }

        fn boxed(&self) -> Box<dyn $crate::sources::SourceConfig> {
            Box::new(self.clone())
        }

        fn same_as(&self, other: &dyn $crate::sources::SourceConfig) -> bool {
            other.as_any().downcast_ref::<Self>() == Some(self)
        }
    };
}

/// Updates applied to the store and the live filter, by kind (`feed`, a
/// LAPI's, `expire`): how many, and how long each took.
struct UpdateMetrics {
    count: prometheus::IntCounterVec,
    seconds: prometheus::HistogramVec,
}

static UPDATES: LazyLock<UpdateMetrics> = LazyLock::new(|| UpdateMetrics {
    count: prometheus::IntCounterVec::new(
        prometheus::Opts::new(
            "cfctl_updates_total",
            "Updates applied to the store and the live filter, by kind",
        ),
        &["kind"],
    )
    .expect("a valid metric"),
    seconds: prometheus::HistogramVec::new(
        prometheus::HistogramOpts::new(
            "cfctl_update_duration_seconds",
            "Time to apply an update, from a fetched list, a pull or an expiry to the live filter",
        )
        .buckets(prometheus::exponential_buckets(0.001, 2.0, 16).expect("valid buckets")),
        &["kind"],
    )
    .expect("a valid metric"),
});

/// Records an update of `kind` that took `took`.
pub fn record_update(kind: &str, took: std::time::Duration) {
    UPDATES.count.with_label_values(&[kind]).inc();
    UPDATES
        .seconds
        .with_label_values(&[kind])
        .observe(took.as_secs_f64());
}

/// Registers the update metrics every kind records into, and each kind's
/// own (once, when the agent starts).
pub fn register_metrics(registry: &prometheus::Registry) -> prometheus::Result<()> {
    registry.register(Box::new(UPDATES.count.clone()))?;
    registry.register(Box::new(UPDATES.seconds.clone()))?;
    for kind in KINDS {
        kind.register_metrics(registry)?;
    }
    Ok(())
}

/// Whether `net` lists every address of its family (`0.0.0.0/0`, `::/0`):
/// more often a slip than a wish, which every source refuses unless told.
pub fn covers_a_whole_family(net: &IpNet) -> bool {
    net.prefix_len() == 0
}

/// How a source's last fetch went, for its status: `failing: ERROR`,
/// `DONE TIME` or `never DONE`.
pub fn last_outcome(last_success: Option<u64>, last_error: Option<&str>, done: &str) -> String {
    match (last_success, last_error) {
        (_, Some(error)) => format!("failing: {}", crate::text::Escaped(error)),
        (Some(at), None) => format!("{done} {}", crate::time::utc(at)),
        (None, None) => format!("never {done}"),
    }
}

/// Serialises `value` for a status (a state that cannot be serialised is
/// shown as null).
pub fn status_json<T: Serialize>(value: &T) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or_default()
}
