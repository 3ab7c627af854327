//! `cfctl agent`: the long-running service that keeps the blocklist current
//! by itself. It schedules three things around the one update path
//! ([`Control::change`]) and never touches the store's tables or the maps
//! itself:
//!
//! * **feeds** ([`feed`]): each feed is fetched when due (network I/O,
//!   outside any lock) and its list becomes all that its source
//!   `feed:NAME` lists, in one change; a failed fetch or a bad list keeps
//!   the last good one. The configuration declares the feeds: after the
//!   first pass that follows a start or a reload, a `feed:` source the
//!   configuration no longer names (for that list) lists nothing, and its
//!   recorded state is gone;
//! * **expiry**: listings whose time has come end in one batched change
//!   per list; the agent sleeps until the next expiry, or until another
//!   process has opened the store ([`watch`]: a command may have added a
//!   listing that expires sooner);
//! * **a CrowdSec Local API** ([`crowdsec`]), pulled when due (network
//!   I/O outside any lock): its decisions become entries of source
//!   `crowdsec` through [`Change::Add`], [`Change::Delete`] and, for a
//!   whole list, [`Change::Replace`]; while it cannot be reached, the
//!   entries stay and pulls back off exponentially (with jitter) up to
//!   [`MAX_BACKOFF`];
//! * **metrics** ([`metrics`]): a Prometheus text endpoint.
//!
//! One agent keeps a store at a time ([`lock`]). Between changes it holds
//! no lock on the store itself: each pass opens the store,
//! applies what is due and closes it, so `cfctl` commands run beside it and
//! wait at most for one update. An idle agent leaves the store alone (no
//! pass, so no device flush) until something is due or another process
//! has opened the store. SIGHUP reloads the configuration (a bad
//! one is logged and the old one kept); SIGTERM and SIGINT end the agent
//! after the pass in progress, leaving the XDP attachment in place.

pub mod config;
pub mod crowdsec;
pub mod feed;
pub mod lock;
pub mod metrics;
pub mod watch;

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::control::{Change, Control, ControlError, DirCheck, NoProgress, StoreUse};
use crate::store::{
    unix_seconds, AgentState, FeedState, ListKind, NewEntry, StoreError, StoreTransaction,
};
use config::{Config, ConfigError, CrowdsecConfig, FeedConfig};
use feed::Fetched;
use lock::{AgentLock, LockError};
use metrics::Metrics;
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use watch::StoreWatch;

/// The longest the agent sleeps between passes when it cannot watch the
/// store (no inotify), and the longest it waits after another process
/// first opens the store: a listing that a command adds while the agent
/// sleeps expires at most this late.
pub const MAX_IDLE: Duration = Duration::from_millis(500);
/// After another process opens the store, the agent waits until the store
/// has been left alone this long (and at most [`MAX_IDLE`]) before its
/// pass, so that a run of commands does not wait for the agent's turns.
const SETTLE: Duration = Duration::from_millis(100);
/// The longest wait between pulls of an unreachable CrowdSec LAPI.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);

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
    /// Refresh every feed and end the expired listings once, then exit.
    pub once: bool,
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
    /// The signal handlers could not be installed.
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

/// The flags the signal handlers set, and the socket they write a byte to
/// so that a sleeping agent wakes at once (the self-pipe pattern).
struct Signals {
    stop: Arc<AtomicBool>,
    reload: Arc<AtomicBool>,
    wake: UnixStream,
}

impl Signals {
    fn install() -> Result<Self, AgentError> {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let (wake, written) = UnixStream::pair().map_err(AgentError::Signals)?;
        wake.set_nonblocking(true).map_err(AgentError::Signals)?;
        let signals = Self {
            stop: Arc::new(AtomicBool::new(false)),
            reload: Arc::new(AtomicBool::new(false)),
            wake,
        };
        for (signal, flag) in [
            (SIGTERM, &signals.stop),
            (SIGINT, &signals.stop),
            (SIGHUP, &signals.reload),
        ] {
            // The flag first: the byte that wakes the sleeper must find it set.
            signal_hook::flag::register(signal, Arc::clone(flag)).map_err(AgentError::Signals)?;
            let written = written.try_clone().map_err(AgentError::Signals)?;
            signal_hook::low_level::pipe::register(signal, written).map_err(AgentError::Signals)?;
        }
        Ok(signals)
    }

    /// Sleeps until `next` (if any), a signal, or the store has settled
    /// after `watch` said another process opened it: in `poll` on the
    /// signals' socket and the watch, so nothing wakes the agent in
    /// between.
    fn sleep_until(&self, next: Option<Instant>, watch: &mut Option<StoreWatch>) {
        let mut touches: Option<(Instant, Instant)> = None;
        loop {
            // The socket emptied before the flags are read, so that a
            // signal that comes in between wakes the next poll.
            while (&self.wake).read(&mut [0; 64]).is_ok_and(|read| read > 0) {}
            let now = Instant::now();
            if store_touched(watch) {
                touches = Some((touches.map_or(now, |(first, _)| first), now));
            }
            let settled_at = touches.map(|(first, last)| (last + SETTLE).min(first + MAX_IDLE));
            let wake_at = [next, settled_at].into_iter().flatten().min();
            if wake_at.is_some_and(|at| now >= at)
                || self.stop.load(Ordering::SeqCst)
                || self.reload.load(Ordering::SeqCst)
            {
                return;
            }
            // No timeout (the agent has nothing due): until a signal or
            // an opening of the store.
            let timeout = wake_at.and_then(|at| Timespec::try_from(at - now).ok());
            let mut fds = vec![PollFd::new(&self.wake, PollFlags::IN)];
            fds.extend(
                watch
                    .as_ref()
                    .map(|watch| PollFd::new(watch, PollFlags::IN)),
            );
            match poll(&mut fds, timeout.as_ref()) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(error) => {
                    tracing::warn!(%error, "cannot wait in poll; sleeping instead");
                    std::thread::sleep(wake_at.map_or(MAX_IDLE, |at| (at - now).min(MAX_IDLE)));
                }
            }
        }
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

/// Runs the agent until SIGTERM or SIGINT (or one pass, with `once`),
/// holding the store's [`AgentLock`] all along.
pub fn run(options: &AgentOptions) -> Result<(), AgentError> {
    let _lock = AgentLock::acquire(&options.state_dir)?;
    let mut config = Config::load(&options.config)?;
    let signals = Signals::install()?;
    let metrics = Arc::new(Metrics::new(&options.pin_dir));
    let _server = match (config.metrics, options.once) {
        (Some(address), false) => Some(
            metrics::serve(Arc::clone(&metrics), address)
                .map_err(|error| AgentError::Metrics { address, error })?,
        ),
        _ => None,
    };
    let mut agent = Agent {
        options: options.clone(),
        metrics,
        due: HashMap::new(),
        lapi: Lapi::default(),
        retire_pending: true,
        watch: None,
    };
    agent.record_state(&config)?;
    if !options.once {
        agent.watch = StoreWatch::new(&options.state_dir)
            .inspect_err(|error| {
                tracing::warn!(%error, "cannot watch the store; looking at it every {MAX_IDLE:?}");
            })
            .ok();
    }
    tracing::info!(feeds = config.feeds.len(), metrics = ?config.metrics, "agent started");
    loop {
        if signals.reload.swap(false, Ordering::SeqCst) {
            config = agent.reload(config);
        }
        let next = match agent.pass(&config) {
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
        if options.once || signals.stop.load(Ordering::SeqCst) {
            break;
        }
        signals.sleep_until(next, &mut agent.watch);
        if signals.stop.load(Ordering::SeqCst) {
            break;
        }
    }
    tracing::info!("agent stopped; the XDP attachment stays");
    Ok(())
}

/// One fetch, with how long it took.
struct Fetch<'c> {
    feed: &'c FeedConfig,
    result: Result<Fetched, feed::FetchError>,
    took: Duration,
}

/// One pull of the CrowdSec LAPI, with when it was sent and how long it
/// took.
struct Pull<'c> {
    lapi: &'c CrowdsecConfig,
    /// Whether it asked for the whole list.
    startup: bool,
    attempted: SystemTime,
    answer: Result<crowdsec::Answer, crowdsec::PullError>,
    took: Duration,
}

struct Agent {
    options: AgentOptions,
    metrics: Arc<Metrics>,
    /// When each feed is next due.
    due: HashMap<String, Instant>,
    /// How the CrowdSec LAPI is followed.
    lapi: Lapi,
    /// Whether feeds the configuration no longer names may still list
    /// entries (after a start or a reload).
    retire_pending: bool,
    /// Opens of the store by other processes (none: it cannot be watched,
    /// or the agent runs once).
    watch: Option<StoreWatch>,
}

/// What the agent keeps in memory about the CrowdSec LAPI it follows.
#[derive(Default)]
struct Lapi {
    /// When it is next pulled (now, if never).
    due: Option<Instant>,
    /// Whether this process applied the last pull's answer, so that the
    /// next pull may ask for the changes only. False at the start: every
    /// start asks for the whole list, as CrowdSec's own bouncers do, so
    /// no pull waits for a transaction that marks it in flight.
    synced: bool,
    /// Pulls failed in a row.
    failures: u32,
    /// Ignored-decision reasons already logged.
    logged: std::collections::HashSet<String>,
}

impl Lapi {
    /// The wait after `failures` failed pulls in a row: the interval,
    /// doubled per failure up to [`MAX_BACKOFF`], then shortened by a
    /// random part of up to a half so a fleet does not retry in step.
    fn wait(&self, pull: Duration) -> Duration {
        if self.failures == 0 {
            return pull;
        }
        let doubled = pull.saturating_mul(1 << self.failures.min(16));
        let wait = doubled.min(MAX_BACKOFF.max(pull));
        let jitter = (crate::filter::random_seed() % 1000) as f64 / 2000.0;
        wait.mul_f64(1.0 - jitter)
    }
}

impl Agent {
    fn open(&self) -> Result<Control, ControlError> {
        Control::open_with_notices(
            &self.options.pin_dir,
            &self.options.state_dir,
            StoreUse::Create,
            self.options.state_dir_check,
            Rc::new(|_| {}),
        )
    }

    /// The configuration read again (SIGHUP), or the old one if the new
    /// one is bad.
    fn reload(&mut self, old: Config) -> Config {
        match Config::load(&self.options.config) {
            Ok(new) => {
                tracing::info!(feeds = new.feeds.len(), "configuration reloaded");
                self.due
                    .retain(|name, _| new.feeds.iter().any(|feed| &feed.name == name));
                if new.crowdsec != old.crowdsec {
                    self.lapi = Lapi::default();
                }
                self.retire_pending = true;
                if let Err(error) = self.record_state(&new) {
                    tracing::warn!(%error, "cannot record the agent's state");
                }
                new
            }
            Err(error) => {
                tracing::error!(%error, "the new configuration is refused; keeping the old one");
                old
            }
        }
    }

    /// One pass: fetch the feeds that are due and pull the CrowdSec LAPI if
    /// it is (network I/O, holding no lock), then, in one visit to the
    /// store, end the expired listings and apply what was fetched and
    /// pulled. Returns when the next pass is due, if anything is (another
    /// process opening the store also calls for one).
    fn pass(&mut self, config: &Config) -> Result<Option<Instant>, AgentError> {
        let now = Instant::now();
        let due: Vec<&FeedConfig> = config
            .feeds
            .iter()
            .filter(|feed| self.due.get(&feed.name).is_none_or(|&at| at <= now))
            .collect();
        let states = match due.is_empty() {
            true => HashMap::new(),
            false => self.open()?.store().feed_states()?.into_iter().collect(),
        };
        let fetches: Vec<Fetch<'_>> = due
            .into_iter()
            .map(|feed| {
                let started = Instant::now();
                let state = states.get(&feed.name).cloned().unwrap_or_default();
                let result = feed::fetch(feed, &state);
                let took = started.elapsed();
                Fetch { feed, result, took }
            })
            .collect();
        let pull = config
            .crowdsec
            .as_ref()
            .filter(|_| self.lapi.due.is_none_or(|at| at <= Instant::now()))
            .map(|lapi| self.pull(lapi));
        let mut control = self.open()?;
        self.expire(&mut control)?;
        for fetch in fetches {
            let mut state = states.get(&fetch.feed.name).cloned().unwrap_or_default();
            self.apply(&mut control, fetch, &mut state)?;
        }
        if let Some(pull) = pull {
            self.take_pull(&mut control, pull)?;
        }
        if self.retire_pending {
            // After the fetches and the pull, so that a renamed feed's (or
            // a moved LAPI's) new list is in before the old one goes.
            retire_unconfigured_feeds(&mut control, config)?;
            retire_unfollowed_crowdsec(&mut control, config)?;
            self.retire_pending = false;
        }
        // Under the store's lock: what others did before now is read below.
        store_touched(&mut self.watch);
        self.metrics.observe_store(control.store())?;
        let next_expiry = control.store().next_expiry()?;
        drop(control);
        let now = Instant::now();
        let unwatched = self.watch.is_none().then_some(now + MAX_IDLE);
        let expiry =
            next_expiry.map(|at| now + at.duration_since(SystemTime::now()).unwrap_or_default());
        Ok([unwatched, expiry, self.lapi.due]
            .into_iter()
            .flatten()
            .chain(self.due.values().copied())
            .min())
    }

    /// Pulls the CrowdSec LAPI once: the whole list unless this process
    /// has applied the answer of the pull before.
    fn pull<'c>(&self, lapi: &'c CrowdsecConfig) -> Pull<'c> {
        let startup = !self.lapi.synced;
        let attempted = SystemTime::now();
        let started = Instant::now();
        let answer = crowdsec::pull(lapi, startup);
        Pull {
            lapi,
            startup,
            attempted,
            answer,
            took: started.elapsed(),
        }
    }

    /// Applies a pull's answer and records the LAPI's state (in one more
    /// transaction); schedules the next pull.
    fn take_pull(&mut self, control: &mut Control, pull: Pull<'_>) -> Result<(), AgentError> {
        let lapi = pull.lapi;
        let mut state = control
            .store()
            .crowdsec_state(&lapi.url)?
            .unwrap_or_default();
        let counts_before = state.counts.clone();
        state.last_attempt = Some(unix_seconds(pull.attempted));
        let outcome = match pull.answer {
            Ok(answer) => {
                let changes = crowdsec::take_answer(
                    lapi,
                    &mut state,
                    &answer,
                    pull.startup,
                    SystemTime::now(),
                );
                self.apply_decisions(control, &changes, answer.new.len(), pull.took)
            }
            Err(error) => Err(error.to_string()),
        };
        // Until an answer is applied, the next pull asks for everything:
        // the LAPI has moved its cursor past the changes it sent.
        self.lapi.synced = outcome.is_ok();
        state.synced = outcome.is_ok();
        match outcome {
            Ok(()) => {
                if self.lapi.failures > 0 {
                    tracing::info!(url = %lapi.url, "the CrowdSec LAPI answers again");
                }
                self.lapi.failures = 0;
                state.last_success = state.last_attempt;
                state.last_error = None;
            }
            Err(error) => {
                if self.lapi.failures == 0 || state.last_error.as_ref() != Some(&error) {
                    tracing::error!(url = %lapi.url, %error, "CrowdSec pull failed; the entries stay as they are");
                }
                self.lapi.failures = self.lapi.failures.saturating_add(1);
                state.last_error = Some(error);
            }
        }
        self.metrics.crowdsec(&counts_before, &state);
        let mut txn = control.store().begin()?;
        txn.set_crowdsec_state(&lapi.url, &state)?;
        txn.commit()?;
        self.lapi.due = Some(Instant::now() + self.lapi.wait(lapi.pull));
        Ok(())
    }

    /// Makes the source `crowdsec` follow `changes`.
    fn apply_decisions(
        &mut self,
        control: &mut Control,
        changes: &crowdsec::Changes,
        received: usize,
        pull_took: Duration,
    ) -> Result<(), String> {
        for reason in &changes.ignored {
            if self.lapi.logged.insert(reason.clone()) {
                tracing::warn!(%reason, "CrowdSec decisions ignored (logged once)");
            }
        }
        let started = Instant::now();
        let entries = changes.entries();
        let mut apply = |change| {
            control
                .change(ListKind::Blocklist, change, &NoProgress)
                .map_err(|error| error.to_string())
        };
        let (added, deleted) = if changes.replace {
            let report = apply(Change::Replace {
                source: crowdsec::SOURCE,
                entries: &entries,
            })?;
            (report.added, report.deleted)
        } else {
            let mut counts = (0, 0);
            if !entries.is_empty() {
                let report = apply(Change::Add {
                    source: crowdsec::SOURCE,
                    entries: &entries,
                })?;
                counts.0 = report.added;
            }
            if !changes.unlisted.is_empty() {
                let report = apply(Change::Delete {
                    source: Some(crowdsec::SOURCE),
                    nets: &changes.unlisted,
                })?;
                counts.1 = report.deleted;
            }
            counts
        };
        let took = started.elapsed();
        if changes.replace || added > 0 || deleted > 0 {
            self.metrics.update("crowdsec", took);
            tracing::info!(
                startup = changes.replace,
                received,
                listed = entries.len(),
                added,
                deleted,
                pull_seconds = pull_took.as_secs_f64(),
                apply_seconds = took.as_secs_f64(),
                "CrowdSec decisions applied"
            );
        }
        Ok(())
    }

    /// Ends the expired listings.
    fn expire(&self, control: &mut Control) -> Result<(), AgentError> {
        let started = Instant::now();
        let reports = control.expire_due()?;
        if reports.iter().any(|report| report.expired > 0) {
            self.metrics.update("expire", started.elapsed());
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

    /// Applies one fetch (its list replaces its source's entries, or the
    /// last good list stays), records the feed's state and schedules its
    /// next refresh.
    fn apply(
        &mut self,
        control: &mut Control,
        fetch: Fetch<'_>,
        state: &mut FeedState,
    ) -> Result<(), AgentError> {
        let feed = fetch.feed;
        let now = unix_seconds(SystemTime::now());
        state.last_attempt = Some(now);
        let outcome = match fetch.result {
            Ok(Fetched::NotModified) => {
                state.not_modified += 1;
                Ok("not_modified")
            }
            Ok(Fetched::Body {
                bytes,
                etag,
                last_modified,
            }) => self
                .replace(control, feed, &bytes, fetch.took)
                .map(|(entries, refused)| {
                    state.updated += 1;
                    state.entries = entries;
                    state.refused = refused;
                    state.etag = etag;
                    state.last_modified = last_modified;
                    state.applied_with = Some(feed.applied_settings());
                    "updated"
                }),
            Err(error) => Err(error.to_string()),
        };
        let result = match outcome {
            Ok(result) => {
                state.last_success = Some(now);
                state.last_error = None;
                result
            }
            Err(error) => {
                tracing::error!(feed = %feed.name, %error, "refresh failed; the last good list stays");
                state.failed += 1;
                state.last_error = Some(error);
                "failed"
            }
        };
        self.metrics.feed(&feed.name, result, state);
        let mut txn = control.store().begin()?;
        txn.set_feed_state(&feed.name, state)?;
        txn.commit()?;
        self.due
            .insert(feed.name.clone(), Instant::now() + feed.refresh);
        Ok(())
    }

    /// Parses `bytes` as `feed`'s list and makes it all that the feed's
    /// source lists, but for entries of a whole family the feed does not
    /// allow; the number of entries taken and refused, or why not.
    fn replace(
        &self,
        control: &mut Control,
        feed: &FeedConfig,
        bytes: &[u8],
        fetch_took: Duration,
    ) -> Result<(usize, usize), String> {
        let started = Instant::now();
        let list = feed::parse(feed, bytes).map_err(|error| error.to_string())?;
        let (entries, refused): (Vec<NewEntry<'_>>, Vec<NewEntry<'_>>) =
            NewEntry::from_list(&list, None)
                .partition(|entry| feed.allow_whole_family || entry.net.prefix_len() != 0);
        if let Some(first) = refused.first() {
            tracing::warn!(
                feed = %feed.name,
                refused = refused.len(),
                first = %first.net,
                "feed entries that cover every address of their family are refused \
                 (allow_whole_family = true takes them); the rest of the list is applied"
            );
        }
        let source = feed.source();
        let change = Change::Replace {
            source: &source,
            entries: &entries,
        };
        let report = control
            .change(feed.list, change, &NoProgress)
            .map_err(|error| error.to_string())?;
        let took = started.elapsed();
        self.metrics.update("feed", took);
        tracing::info!(
            feed = %feed.name,
            entries = entries.len(),
            added = report.added,
            deleted = report.deleted,
            fetch_seconds = fetch_took.as_secs_f64(),
            apply_seconds = took.as_secs_f64(),
            "feed refreshed"
        );
        Ok((entries.len(), refused.len()))
    }

    /// Records the agent's process, start and configuration in the store.
    fn record_state(&self, config: &Config) -> Result<(), AgentError> {
        let state = AgentState {
            pid: std::process::id(),
            started: unix_seconds(SystemTime::now()),
            config: self.options.config.display().to_string(),
            feeds: config.feeds.iter().map(|feed| feed.name.clone()).collect(),
            metrics: config.metrics.map(|address| address.to_string()),
            crowdsec: config.crowdsec.as_ref().map(|lapi| lapi.url.clone()),
        };
        let control = self.open()?;
        let mut txn = control.store().begin()?;
        txn.set_agent_state(&state)?;
        txn.commit()?;
        Ok(())
    }
}

/// Withdraws the entries of source `crowdsec` when `config` follows no
/// CrowdSec Local API, and forgets the state of every LAPI it does not
/// follow, so that following one again starts with its whole list (a
/// LAPI whose URL changed replaces the source's entries at its first
/// pull).
fn retire_unfollowed_crowdsec(control: &mut Control, config: &Config) -> Result<(), AgentError> {
    let followed = config.crowdsec.as_ref().map(|lapi| lapi.url.as_str());
    let listed = control
        .store()
        .source_counts(ListKind::Blocklist)?
        .into_iter()
        .any(|(source, count)| source == crowdsec::SOURCE && count > 0);
    if followed.is_none() && listed {
        let change = Change::Replace {
            source: crowdsec::SOURCE,
            entries: &[],
        };
        let report = control.change(ListKind::Blocklist, change, &NoProgress)?;
        tracing::info!(
            withdrawn = report.deleted,
            "CrowdSec no longer configured: its decisions are withdrawn"
        );
    }
    let forgotten: Vec<String> = control
        .store()
        .crowdsec_urls()?
        .into_iter()
        .filter(|url| Some(url.as_str()) != followed)
        .collect();
    forget(control, &forgotten, |txn, url| {
        txn.remove_crowdsec_state(url)
    })
}

/// Removes the agent's state of each of `names` with `remove`, in one
/// transaction (none when there are none).
fn forget(
    control: &Control,
    names: &[String],
    remove: impl Fn(&mut StoreTransaction<'_>, &str) -> Result<(), StoreError>,
) -> Result<(), AgentError> {
    if names.is_empty() {
        return Ok(());
    }
    let mut txn = control.store().begin()?;
    for name in names {
        remove(&mut txn, name)?;
    }
    txn.commit()?;
    Ok(())
}

/// Empties every `feed:` source that `config` does not name for its list,
/// in one change per source, and forgets the state of feeds it does not
/// name at all: a `feed:` source belongs to the agent, and the
/// configuration says which feeds there are.
fn retire_unconfigured_feeds(control: &mut Control, config: &Config) -> Result<(), AgentError> {
    for list in ListKind::ALL {
        let configured: HashSet<String> = config
            .feeds
            .iter()
            .filter(|feed| feed.list == list)
            .map(FeedConfig::source)
            .collect();
        for (source, count) in control.store().source_counts(list)? {
            if !source.starts_with("feed:") || configured.contains(&source) || count == 0 {
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
                "feed no longer configured: its entries are withdrawn"
            );
        }
    }
    let named: HashSet<&str> = config.feeds.iter().map(|feed| feed.name.as_str()).collect();
    let forgotten: Vec<String> = control
        .store()
        .feed_states()?
        .into_iter()
        .map(|(name, _)| name)
        .filter(|name| !named.contains(name.as_str()))
        .collect();
    forget(control, &forgotten, |txn, name| txn.remove_feed_state(name))
}
