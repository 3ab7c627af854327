//! The agent's share of the sampled drops ([`crate::drops`]).
//!
//! A thread reads the samples ([`DropReader`]) in slices of
//! [`READ_SLICE`], letting the reader lock go for a moment between them
//! so that a command (`cfctl capture`, `top`, `stats --by`) can take the
//! samples over, into a buffer of at most [`MAX_BUFFERED`] samples (more
//! are counted and left out). Every [`ATTRIBUTE_EVERY`] a pass
//! attributes what came: the addresses not looked up yet are looked up
//! in the store the pass holds open, the drops are shared out, the
//! metrics take the new figures, and with `[drops] log = true` each
//! sampled drop is logged (at most `log_per_minute` lines a minute). The
//! lookups are forgotten after every pass that may have changed the
//! store. Each pass also sums what a CrowdSec bouncer reports in its usage
//! metrics ([`Remediation`]): the drops by reported origin, and every
//! packet the program saw, since the agent started.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::config::DropsConfig;
use super::metrics::Metrics;
use crate::control::sampled::{exact_drops, DropReader};
use crate::drops::{Attribution, Covers, Exact, OriginNames, Remediation, Sample};
use crate::store::{Store, StoreError};
use crate::{Family, Outcome, Setting};

/// How long the reader thread holds the samples at a time.
const READ_SLICE: Duration = Duration::from_secs(1);
/// How long it lets them go between slices.
const LET_GO: Duration = Duration::from_millis(50);
/// How long it waits before it tries again to open the samples of a
/// blocklist that is not attached.
const REOPEN_EVERY: Duration = Duration::from_secs(5);
/// How often a sleeping reader thread looks whether it must stop.
const STOP_CHECK_EVERY: Duration = Duration::from_millis(500);
/// How often the samples are attributed.
pub const ATTRIBUTE_EVERY: Duration = Duration::from_secs(5);
/// Most samples waiting for a pass.
const MAX_BUFFERED: usize = 1 << 16;

/// Samples waiting for a pass.
#[derive(Default)]
struct Buffer {
    samples: Vec<Sample>,
    /// Samples left out because the buffer was full.
    left_out: u64,
}

/// The reader thread, the attribution and its schedule.
pub struct DropWatch {
    pin_dir: PathBuf,
    buffer: Arc<Mutex<Buffer>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Started at the first attribution, from the counters then.
    attribution: Option<Attribution>,
    covers: Covers,
    /// Samples taken from the buffer and not attributed yet.
    pending: Vec<Sample>,
    due: Instant,
    log: DropLog,
    processed: Processed,
}

impl DropWatch {
    /// Starts reading the samples of the blocklist pinned in `pin_dir`
    /// (the reader lock in `state_dir`).
    pub fn start(pin_dir: &Path, state_dir: &Path, config: &DropsConfig) -> std::io::Result<Self> {
        let buffer = Arc::new(Mutex::new(Buffer::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (buffer, stop) = (Arc::clone(&buffer), Arc::clone(&stop));
            let (pin_dir, state_dir) = (pin_dir.to_owned(), state_dir.to_owned());
            std::thread::Builder::new()
                .name("drops".into())
                .spawn(move || read_samples(&pin_dir, &state_dir, &buffer, &stop))?
        };
        Ok(Self {
            pin_dir: pin_dir.to_owned(),
            buffer,
            stop,
            thread: Some(thread),
            attribution: None,
            covers: Covers::default(),
            pending: Vec::new(),
            due: Instant::now() + ATTRIBUTE_EVERY,
            log: DropLog::new(config),
            processed: Processed::default(),
        })
    }

    /// Takes the new `config` (the log's settings).
    pub fn configure(&mut self, config: &DropsConfig) {
        self.log = DropLog::new(config);
    }

    /// When the next attribution is due.
    pub fn due(&self) -> Instant {
        self.due
    }

    /// Whether an attribution is due now, and needs the store for
    /// addresses not looked up yet.
    pub fn needs_store(&mut self) -> bool {
        if Instant::now() < self.due {
            return false;
        }
        self.take_buffered();
        self.pending
            .iter()
            .filter_map(|sample| sample.address)
            .any(|address| self.covers.get(address).is_none())
    }

    /// Looks the pending samples' addresses up in `store`, which the pass
    /// holds open.
    pub fn resolve(&mut self, store: &Store) -> Result<(), StoreError> {
        self.covers.resolve(store, &self.pending)
    }

    /// Forgets the lookups: the store may have changed.
    pub fn forget_lookups(&mut self) {
        self.covers.forget();
    }

    /// Attributes the pending samples if it is time (`names` giving the
    /// reported origins), feeds `metrics`, and returns what a bouncer
    /// reports of it.
    pub fn attribute(&mut self, metrics: &Metrics, names: &dyn OriginNames) -> Option<Remediation> {
        if Instant::now() < self.due {
            return None;
        }
        self.due = Instant::now() + ATTRIBUTE_EVERY;
        self.take_buffered();
        let (counters, unsampled) = match exact_drops(&self.pin_dir) {
            Ok(exact) => exact,
            Err(error) => {
                tracing::debug!(%error, "no drop counters to attribute the samples to");
                self.pending.clear();
                return None;
            }
        };
        self.processed.count(&counters);
        let Some(attribution) = &mut self.attribution else {
            // Drops before the first attribution are not shared out.
            self.attribution = Some(Attribution::new(counters, unsampled));
            self.pending.clear();
            return None;
        };
        attribution.record(&self.pending, &self.covers, counters, unsampled, names);
        metrics.observe_drops(attribution);
        for sample in &self.pending {
            self.log.line(sample, &self.covers);
        }
        self.pending.clear();
        Some(Remediation {
            dropped: attribution
                .reported_origins()
                .iter()
                .filter(|(key, _)| key.outcome == Outcome::Dropped)
                .map(|(key, estimate)| ((key.origin.clone(), key.family), *estimate))
                .collect(),
            processed: self.processed.since_start.clone(),
        })
    }

    fn take_buffered(&mut self) {
        let mut buffer = self
            .buffer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if buffer.left_out > 0 {
            tracing::warn!(
                left_out = buffer.left_out,
                "sampled drops came faster than the agent attributes them; some were left out"
            );
            buffer.left_out = 0;
        }
        self.pending.append(&mut buffer.samples);
    }
}

impl Drop for DropWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Every packet the program counted, by family, since the agent first
/// read its counters: a counter that went back (the program attached
/// anew) counts from zero again.
#[derive(Default)]
struct Processed {
    /// The counters as last read, summed over outcomes; none before the
    /// first read.
    last: Option<BTreeMap<Family, Exact>>,
    since_start: BTreeMap<Family, Exact>,
}

impl Processed {
    fn count(&mut self, counters: &[((Outcome, Family), Exact)]) {
        let mut now: BTreeMap<Family, Exact> = [Family::Ipv4, Family::Ipv6]
            .into_iter()
            .map(|family| (family, Exact::default()))
            .collect();
        for ((_, family), exact) in counters {
            if let Some(total) = now.get_mut(family) {
                total.packets += exact.packets;
                total.bytes += exact.bytes;
            }
        }
        let last = self
            .last
            .replace(now.clone())
            .unwrap_or_else(|| now.clone());
        for (family, total) in now {
            let before = last.get(&family).copied().unwrap_or_default();
            let gained = match total.packets < before.packets {
                true => total,
                false => Exact {
                    packets: total.packets - before.packets,
                    bytes: total.bytes.saturating_sub(before.bytes),
                },
            };
            let sum = self.since_start.entry(family).or_default();
            sum.packets += gained.packets;
            sum.bytes += gained.bytes;
        }
    }
}

/// The reader thread: reads slices of samples into `buffer` until `stop`.
fn read_samples(pin_dir: &Path, state_dir: &Path, buffer: &Mutex<Buffer>, stop: &AtomicBool) {
    let mut reader = None;
    let mut told = false;
    while !stop.load(Ordering::SeqCst) {
        let Some(open) = &mut reader else {
            match DropReader::open_paused(pin_dir, state_dir) {
                Ok(opened) => {
                    tracing::info!("reading the sampled drops");
                    reader = Some(opened);
                }
                Err(error) => {
                    if !told {
                        tracing::info!(%error, "no sampled drops to read yet; trying again every {REOPEN_EVERY:?}");
                        told = true;
                    }
                    sleep_unless(stop, REOPEN_EVERY);
                }
            }
            continue;
        };
        match open.resume() {
            Ok(true) => {}
            Ok(false) | Err(_) => {
                // A command reads them now.
                sleep_unless(stop, READ_SLICE);
                continue;
            }
        }
        let until = Instant::now() + READ_SLICE;
        let mut failed = false;
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            // One wait per slice: an idle agent wakes about twice a
            // second for the samples (the program wakes it early when
            // its ring is half full).
            let read = open.read(left, |event| {
                let Some(sample) = Sample::from_event(event) else {
                    return;
                };
                let mut buffer = buffer
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                if buffer.samples.len() < MAX_BUFFERED {
                    buffer.samples.push(sample);
                } else {
                    buffer.left_out += 1;
                }
            });
            if let Err(error) = read {
                tracing::warn!(%error, "reading the sampled drops failed; opening them again");
                failed = true;
                break;
            }
        }
        open.pause();
        if failed {
            reader = None;
            told = false;
        }
        sleep_unless(stop, LET_GO);
    }
}

/// Sleeps `duration` in short steps, ending early once `stop` is set.
fn sleep_unless(stop: &AtomicBool, duration: Duration) {
    let until = Instant::now() + duration;
    while !stop.load(Ordering::SeqCst) {
        let Some(left) = until.checked_duration_since(Instant::now()) else {
            return;
        };
        std::thread::sleep(left.min(STOP_CHECK_EVERY));
    }
}

/// The optional log line per sampled drop, at most `per_minute` a
/// minute.
struct DropLog {
    enabled: bool,
    per_minute: usize,
    /// When the lines of the last minute were logged.
    logged: VecDeque<Instant>,
    /// Lines left out since the last one logged.
    left_out: u64,
}

impl DropLog {
    fn new(config: &DropsConfig) -> Self {
        Self {
            enabled: config.log,
            per_minute: config.log_per_minute,
            logged: VecDeque::new(),
            left_out: 0,
        }
    }

    fn line(&mut self, sample: &Sample, covers: &Covers) {
        if !self.enabled {
            return;
        }
        let now = Instant::now();
        while self
            .logged
            .front()
            .is_some_and(|at| now.duration_since(*at) >= Duration::from_secs(60))
        {
            self.logged.pop_front();
        }
        if self.logged.len() >= self.per_minute {
            self.left_out += 1;
            return;
        }
        self.logged.push_back(now);
        let covering = sample
            .address
            .and_then(|address| covers.get(address))
            .unwrap_or_default();
        let entries: Vec<String> = covering.iter().map(|cover| cover.net.to_string()).collect();
        let mut sources: Vec<&str> = covering
            .iter()
            .flat_map(|cover| cover.sources.iter().map(String::as_str))
            .collect();
        sources.sort_unstable();
        sources.dedup();
        tracing::info!(
            at = %crate::time::utc(crate::time::unix_seconds(crate::time::from_monotonic_nanos(sample.at_ns))),
            address = %sample.address.map(|address| address.to_string()).unwrap_or_default(),
            entry = %entries.join(","),
            source = %sources.join(","),
            ifindex = sample.ifindex,
            outcome = sample.outcome.name(),
            left_out = std::mem::take(&mut self.left_out),
            "sampled drop"
        );
    }
}
