//! `cfctl agent`: the long-running service that keeps the blocklist
//! current by itself. It is a scheduler of the sources its configuration
//! declares ([`crate::sources`]) around the one update path
//! ([`Control::change`]); it never touches the store's tables or the maps
//! itself.
//!
//! * **Fetches.** When a source is due, its fetch runs on a thread of its
//!   own (network or file I/O, bounded in time, holding no lock): a slow or
//!   hung source delays no other, nor the expiry sweep, nor a signal.
//! * **Passes.** What the fetches brought back is applied one at a time,
//!   in one visit to the store: the pass opens the store, ends the expired
//!   listings (one batched change per list), applies each finished fetch
//!   through its source, withdraws the entries and forgets the state of
//!   sources the configuration no longer declares (after a start or a
//!   reload), and closes the store. An idle agent leaves the store alone
//!   (no pass, so no device flush) until something is due or another
//!   process has opened the store ([`watch`]: a command may have added a
//!   listing that expires sooner).
//! * **Metrics** ([`metrics`]): a Prometheus text endpoint.
//! * **Drops** ([`drops`]): the program's sampled drops, read on a thread
//!   of their own and attributed to sources and entries every few
//!   seconds, for the metrics, the optional log line per drop, and the
//!   sources that report them (the CrowdSec source's usage metrics).
//!
//! One agent keeps a store at a time ([`lock`]). Between passes it holds
//! no lock on the store itself, so `cfctl` commands run beside it and wait
//! at most for one pass. SIGHUP reloads the configuration (a bad one is
//! logged and the old one kept; sources whose configuration is the same
//! run on); SIGTERM and SIGINT end the agent after the pass in progress
//! and each source's last words ([`crate::sources::Source::stop`]),
//! leaving the XDP attachment in place ([`signals`]).

pub mod config;
pub mod drops;
pub mod lock;
pub mod log;
pub mod metrics;
mod notify;
mod signals;
pub mod status;
pub mod watch;

use std::collections::HashSet;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use ipnet::IpNet;

use crate::control::{Change, Control, ControlError, DirCheck, NoProgress, StoreUse};
use crate::drops::OriginNames;
use crate::sources::settings::ConfigError;
use crate::sources::{AnySource, Fetched, SourceConfig, KINDS};
use crate::store::ListKind;
use crate::time::unix_seconds;
use config::Config;
use drops::DropWatch;
use lock::{AgentLock, LockError};
use metrics::Metrics;
use notify::Notifier;
use signals::Signals;
use status::AgentRecord;
use watch::StoreWatch;

/// The longest the agent sleeps between passes when it cannot watch the
/// store (no inotify), and the longest it waits after another process
/// first opens the store: a listing that a command adds while the agent
/// sleeps expires at most this late.
pub const MAX_IDLE: Duration = Duration::from_millis(500);

/// How the agent runs.
#[derive(Clone, Debug)]
pub struct AgentOptions {
    /// The configuration file.
    pub config: PathBuf,
    /// The pin directory of the blocklist.
    pub pin_dir: PathBuf,
    /// The state directory of the store.
    pub state_dir: PathBuf,
    /// How the state directory is checked before the store is opened.
    pub state_dir_check: DirCheck,
    /// Fetch every source and end the expired listings once, then exit.
    pub once: bool,
}

impl AgentOptions {
    /// Whether `running` may be fetched now: no fetch of it runs, and (run
    /// once) none was applied.
    fn may_fetch(&self, running: &Running) -> bool {
        !(running.in_flight || self.once && running.fetched)
    }
}

/// Why the agent stopped.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The configuration is bad.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The store or the live filter failed (boxed: it is large, and rare).
    #[error(transparent)]
    Control(Box<ControlError>),
    /// The metrics endpoint could not start.
    #[error("cannot serve metrics on {address}: {error}")]
    Metrics {
        /// Where it should have listened.
        address: std::net::SocketAddr,
        /// What failed.
        error: std::io::Error,
    },
    /// The signal handlers or the fetches' wake-up socket could not be
    /// set up.
    #[error("cannot install the signal handlers: {0}")]
    Signals(std::io::Error),
    /// Another agent keeps the store, or its lock cannot be taken.
    #[error(transparent)]
    Lock(#[from] LockError),
}

impl From<ControlError> for AgentError {
    fn from(error: ControlError) -> Self {
        AgentError::Control(Box::new(error))
    }
}

impl From<crate::store::StoreError> for AgentError {
    fn from(error: crate::store::StoreError) -> Self {
        ControlError::from(error).into()
    }
}

/// Whether `watch` saw another process open the store since the last call.
/// A watch that fails to read is dropped, with a warning: the agent then
/// looks at the store every [`MAX_IDLE`], as without inotify, and this once
/// it counts as an opening.
fn store_touched(watch: &mut Option<StoreWatch>) -> bool {
    match watch.as_mut().map(StoreWatch::store_touched) {
        None => false,
        Some(Ok(touched)) => touched,
        Some(Err(error)) => {
            tracing::warn!(%error, "cannot read the store watch; looking at the store every {MAX_IDLE:?}");
            *watch = None;
            true
        }
    }
}

/// Runs the agent until SIGTERM or SIGINT (or one pass over every source,
/// with `once`), holding the store's [`AgentLock`] all along.
pub fn run(options: &AgentOptions) -> Result<(), AgentError> {
    let _lock = AgentLock::acquire(&options.state_dir)?;
    let config = Config::load(&options.config)?;
    let signals = Signals::install()?;
    let metrics = Arc::new(Metrics::new(&options.pin_dir).map_err(|error| {
        AgentError::Signals(std::io::Error::other(format!("the metrics: {error}")))
    })?);
    let _server = match (config.metrics, options.once) {
        (Some(address), false) => Some(
            metrics::serve(Arc::clone(&metrics), address)
                .map_err(|error| AgentError::Metrics { address, error })?,
        ),
        _ => None,
    };
    let mut agent = Agent::new(options, metrics, config)?;
    if !options.once {
        agent.drops = Some(
            DropWatch::start(&options.pin_dir, &options.state_dir, &agent.config.drops)
                .map_err(AgentError::Signals)?,
        );
        agent.watch = StoreWatch::new(&options.state_dir)
            .inspect_err(|error| {
                tracing::warn!(%error, "cannot watch the store; looking at it every {MAX_IDLE:?}");
            })
            .ok();
    }
    tracing::info!(
        sources = agent.sources.len(),
        metrics = ?agent.config.metrics,
        "agent started"
    );
    let mut notifier = Notifier::from_environment();
    let mut touched = true;
    loop {
        if signals
            .reload
            .swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            notifier.reloading();
            agent.reload();
            notifier.reloaded();
        }
        agent.start_due_fetches();
        let next = match agent.pass(touched) {
            Ok(next) => next,
            // A long command (an import of millions of entries) may hold
            // the store longer than one wait for it: the agent waits again.
            Err(AgentError::Control(error))
                if !options.once && matches!(*error, ControlError::StoreBusy { .. }) =>
            {
                tracing::warn!(%error, "the store is still busy; waiting again");
                Some(Instant::now())
            }
            Err(error) => return Err(error),
        };
        notifier.pass(agent.every_source_fetched(), agent.status_line());
        notifier.ping();
        if (options.once && agent.every_source_fetched()) || signals.stopping() {
            break;
        }
        let next = [next, notifier.due()].into_iter().flatten().min();
        touched = signals
            .sleep_until(next, &mut agent.watch, &agent.fetched)
            .store_touched;
        if signals.stopping() {
            break;
        }
    }
    notifier.stopping();
    for running in &mut agent.sources {
        running.source.stop();
    }
    tracing::info!("agent stopped; the XDP attachment stays");
    Ok(())
}

/// A source the agent runs.
struct Running {
    /// Tells its fetches' results from those of a source a reload dropped.
    id: u64,
    config: Box<dyn SourceConfig>,
    source: Box<dyn AnySource>,
    /// Whether its fetch is running.
    in_flight: bool,
    /// Whether a fetch of it was applied since the agent started.
    fetched: bool,
}

/// The reported origins of the drops, as the running sources name them.
struct SourceOrigins<'a>(&'a [Running]);

impl OriginNames for SourceOrigins<'_> {
    fn origin_of(&self, source: &str, net: &IpNet) -> Option<String> {
        // Only a blocklist's entries drop; a source that lists allows
        // names no finer origin.
        self.0
            .iter()
            .find(|running| running.source.name() == source)
            .and_then(|running| running.source.origin_of(net))
    }
}

/// What a finished fetch sends: its source's id, and what it brought
/// back.
type Finished = (u64, Fetched);

struct Agent {
    options: AgentOptions,
    metrics: Arc<Metrics>,
    config: Config,
    sources: Vec<Running>,
    next_id: u64,
    /// Where finished fetches send what they brought back, and write a
    /// byte to wake the sleeping agent.
    results: (Sender<Finished>, Receiver<Finished>),
    wake: UnixStream,
    fetched: UnixStream,
    /// Whether sources the configuration no longer declares may still
    /// list entries or keep state (after a start or a reload).
    retire_pending: bool,
    /// When the next listing expires, as of the last pass.
    next_expiry: Option<SystemTime>,
    /// Opens of the store by other processes (none: it cannot be watched,
    /// or the agent runs once).
    watch: Option<StoreWatch>,
    /// The sampled drops (none when the agent runs once).
    drops: Option<DropWatch>,
}

impl Agent {
    fn new(
        options: &AgentOptions,
        metrics: Arc<Metrics>,
        config: Config,
    ) -> Result<Self, AgentError> {
        let (wake, fetched) = UnixStream::pair().map_err(AgentError::Signals)?;
        fetched.set_nonblocking(true).map_err(AgentError::Signals)?;
        let mut agent = Self {
            options: options.clone(),
            metrics,
            config: Config {
                metrics: config.metrics,
                drops: config.drops.clone(),
                sources: Vec::new(),
            },
            sources: Vec::new(),
            next_id: 0,
            results: channel(),
            wake,
            fetched,
            retire_pending: true,
            next_expiry: None,
            watch: None,
            drops: None,
        };
        agent.take(config)?;
        Ok(agent)
    }

    fn open(&self) -> Result<Control, ControlError> {
        Control::open_with_notices(
            &self.options.pin_dir,
            &self.options.state_dir,
            StoreUse::Create,
            self.options.state_dir_check,
            // What the control plane tells a command's user (a repaired
            // update, a filter that resized itself) goes to the log.
            Rc::new(|notice: &str| tracing::info!(notice, "filter")),
        )
    }

    /// Runs `config`: keeps the sources whose configuration is the same,
    /// builds the others (with the states they recorded), and records the
    /// agent's state.
    fn take(&mut self, config: Config) -> Result<(), AgentError> {
        let control = self.open()?;
        let mut old = std::mem::take(&mut self.sources);
        for source_config in &config.sources {
            let kept = old
                .iter()
                .position(|running| running.config.same_as(source_config.as_ref()));
            let running = match kept {
                Some(index) => old.swap_remove(index),
                None => {
                    self.next_id += 1;
                    Running {
                        id: self.next_id,
                        source: source_config.build(control.store())?,
                        config: source_config.boxed(),
                        in_flight: false,
                        fetched: false,
                    }
                }
            };
            self.sources.push(running);
        }
        let record = AgentRecord {
            pid: std::process::id(),
            started: unix_seconds(SystemTime::now()),
            config: self.options.config.display().to_string(),
            sources: config
                .sources
                .iter()
                .map(|source| source.source().1)
                .collect(),
            metrics: config.metrics.map(|address| address.to_string()),
        };
        let mut txn = control.store().begin()?;
        record.save(&mut txn)?;
        txn.commit()?;
        if let Some(drops) = &mut self.drops {
            drops.configure(&config.drops);
        }
        self.config = config;
        self.retire_pending = true;
        Ok(())
    }

    /// The configuration read again (SIGHUP), or the old one kept if the
    /// new one is bad.
    fn reload(&mut self) {
        match Config::load(&self.options.config) {
            Ok(new) => {
                let sources = new.sources.len();
                match self.take(new) {
                    Ok(()) => tracing::info!(sources, "configuration reloaded"),
                    Err(error) => tracing::error!(%error, "cannot take the new configuration"),
                }
            }
            Err(error) => {
                tracing::error!(%error, "the new configuration is refused; keeping the old one");
            }
        }
    }

    /// Starts the fetch of every source that is due and has none running.
    fn start_due_fetches(&mut self) {
        let now = Instant::now();
        for running in &mut self.sources {
            if !self.options.may_fetch(running) || running.source.due() > now {
                continue;
            }
            running.in_flight = true;
            let fetch = running.source.fetch();
            let (id, results) = (running.id, self.results.0.clone());
            let wake = self.wake.try_clone();
            let spawned = std::thread::Builder::new()
                .name(format!("fetch {}", running.source.name()))
                .spawn(move || {
                    let fetched = fetch();
                    if results.send((id, fetched)).is_ok() {
                        if let Ok(mut wake) = wake {
                            let _ = wake.write_all(&[1]);
                        }
                    }
                });
            if let Err(error) = spawned {
                tracing::error!(source = running.source.name(), %error, "cannot start a fetch");
                running.in_flight = false;
            }
        }
    }

    /// What the agent is doing, in a line (systemd's status).
    fn status_line(&self) -> String {
        let waiting = self
            .sources
            .iter()
            .filter(|running| !running.fetched)
            .count();
        match waiting {
            0 => format!("following {} sources", self.sources.len()),
            _ => format!(
                "waiting for the first fetch of {waiting} of {} sources",
                self.sources.len()
            ),
        }
    }

    /// Whether every source has been fetched and applied once (the end of
    /// a `--once` run).
    fn every_source_fetched(&self) -> bool {
        self.sources.iter().all(|running| running.fetched)
    }

    /// One pass: applies what the finished fetches brought back, ends the
    /// expired listings and retires sources no longer configured, in one
    /// visit to the store, when any of that is to do or another process
    /// has `touched` the store. Returns when the next pass is due, if
    /// anything is (a finished fetch also calls for one).
    fn pass(&mut self, touched: bool) -> Result<Option<Instant>, AgentError> {
        let mut fetched = Vec::new();
        while let Ok((id, result)) = self.results.1.try_recv() {
            if let Some(index) = self.sources.iter().position(|running| running.id == id) {
                self.sources[index].in_flight = false;
                fetched.push((index, result));
            }
        }
        let expiry_due = self.next_expiry.is_some_and(|at| at <= SystemTime::now());
        let may_change = !fetched.is_empty()
            || expiry_due
            || self.retire_pending
            || touched
            || self.watch.is_none();
        let drops_need_store = self.drops.as_mut().is_some_and(DropWatch::needs_store);
        if may_change || drops_need_store {
            let mut control = self.open()?;
            self.expire(&mut control)?;
            for (index, result) in fetched {
                let running = &mut self.sources[index];
                running.source.apply(&mut control, result)?;
                running.fetched = true;
            }
            if self.retire_pending {
                // After the fetches, so that a renamed source's new list
                // is in before the old one goes.
                self.retire(&mut control)?;
                self.retire_pending = false;
            }
            if let Some(drops) = &mut self.drops {
                if may_change {
                    drops.forget_lookups();
                }
                if let Err(error) = drops.resolve(control.store()) {
                    tracing::warn!(%error, "cannot look the sampled drops' addresses up");
                }
            }
            // Under the store's lock: what others did before now is read
            // below.
            store_touched(&mut self.watch);
            let configured: Vec<(ListKind, String)> = self
                .sources
                .iter()
                .map(|running| running.config.source())
                .collect();
            self.metrics.observe_store(control.store(), &configured)?;
            self.metrics.observe_settings(&control.settings()?);
            self.next_expiry = control.store().next_expiry()?;
        }
        if let Some(drops) = &mut self.drops {
            if let Some(remediation) = drops.attribute(&self.metrics, &SourceOrigins(&self.sources))
            {
                for running in &mut self.sources {
                    running.source.observe(&remediation);
                }
            }
        }
        let now = Instant::now();
        let unwatched = self.watch.is_none().then_some(now + MAX_IDLE);
        let expiry = self
            .next_expiry
            .map(|at| now + at.duration_since(SystemTime::now()).unwrap_or_default());
        let due = self
            .sources
            .iter()
            .filter(|running| self.options.may_fetch(running))
            .map(|running| running.source.due());
        let drops = self.drops.as_ref().map(DropWatch::due);
        Ok([unwatched, expiry, drops]
            .into_iter()
            .flatten()
            .chain(due)
            .min())
    }

    /// Ends the expired listings.
    fn expire(&self, control: &mut Control) -> Result<(), AgentError> {
        let started = Instant::now();
        let reports = control.expire_due()?;
        if reports.iter().any(|report| report.expired > 0) {
            crate::sources::record_update("expire", started.elapsed());
            for report in reports.iter().filter(|report| report.expired > 0) {
                tracing::info!(
                    expired = report.expired,
                    deleted = report.deleted,
                    seconds = started.elapsed().as_secs_f64(),
                    "expired listings ended"
                );
            }
        }
        Ok(())
    }

    /// Withdraws the entries of every source of a kind the agent runs that
    /// the configuration no longer declares (for its list), and forgets
    /// the state of every such source: the configuration says which
    /// sources there are.
    fn retire(&self, control: &mut Control) -> Result<(), AgentError> {
        let configured: HashSet<(ListKind, String)> = self
            .sources
            .iter()
            .map(|running| running.config.source())
            .collect();
        for list in ListKind::ALL {
            for (source, count) in control.store().source_counts(list)? {
                let owned = KINDS.iter().any(|kind| kind.owns(&source));
                if !owned || count == 0 || configured.contains(&(list, source.clone())) {
                    continue;
                }
                let change = Change::Replace {
                    source: &source,
                    entries: &[],
                };
                let report = control.change(list, change, &NoProgress)?;
                tracing::info!(
                    %source,
                    list = list.name(),
                    withdrawn = report.deleted,
                    "source no longer configured: its entries are withdrawn"
                );
            }
        }
        let mut forgotten = Vec::new();
        for kind in KINDS {
            let kept: HashSet<String> = self
                .sources
                .iter()
                .filter(|running| running.config.kind().section() == kind.section())
                .map(|running| running.config.state_key())
                .collect();
            for (key, _) in control
                .store()
                .states::<serde_json::Value>(kind.namespace())?
            {
                if !kept.contains(&key) {
                    forgotten.push((*kind, key));
                }
            }
        }
        if forgotten.is_empty() {
            return Ok(());
        }
        let mut txn = control.store().begin()?;
        for (kind, key) in &forgotten {
            txn.remove_state(kind.namespace(), key)?;
        }
        txn.commit()?;
        for (kind, key) in &forgotten {
            kind.forget(key);
        }
        Ok(())
    }
}
