//! The verbs on the program's sampled drops: `stats --by`, `top` and
//! `capture`. Each takes the samples over from the agent while it runs
//! ([`DropReader`]), and `stats --by` and `top` attribute them
//! ([`Attribution`]), looking the sampled addresses up in the store.

use std::cell::RefCell;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use cfctl::control::{require_privileges, DropReader};
use cfctl::drops::capture::Capture;
use cfctl::drops::report::DropReport;
use cfctl::drops::{Attribution, Covers, Sample, SourceNames};

use crate::cli::{CaptureArgs, DropsBy, GlobalOptions, StatsArgs, TopArgs};
use crate::{print, report};

/// How long one read of the ring waits for events at most: how often
/// the loops look at their deadlines and keys.
const SLICE: Duration = Duration::from_millis(100);

/// Most samples one store read looks up: a batch this large is shared
/// out before its interval ends.
const MAX_BATCH: usize = 1 << 16;

/// Reads and attributes the sampled drops, calling `batch` every
/// `interval` with the attribution so far until it returns false, or
/// until `stop` (asked every [`SLICE`]) says so.
fn attribute(
    global: &GlobalOptions,
    interval: Duration,
    mut stop: impl FnMut() -> anyhow::Result<bool>,
    mut batch: impl FnMut(&Attribution) -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    require_privileges("read the pinned blocklist's sampled drops")?;
    let mut reader = DropReader::open(&global.pin_dir, &global.state_dir)?;
    let (exact, unsampled) = reader.exact()?;
    let mut attribution = Attribution::new(exact, unsampled);
    let mut covers = Covers::default();
    let mut samples = Vec::new();
    loop {
        let due = Instant::now() + interval;
        while let Some(left) = due.checked_duration_since(Instant::now()) {
            reader.read(left.min(SLICE), |event| {
                samples.extend(Sample::from_event(event))
            })?;
            if stop()? {
                return Ok(());
            }
            if samples.len() >= MAX_BATCH {
                break;
            }
        }
        if covers.resolve_from(&global.state_dir, global.state_dir_check(), &samples)? {
            let (exact, unsampled) = reader.exact()?;
            attribution.record(&samples, &covers, exact, unsampled, &SourceNames);
            samples.clear();
        }
        if !batch(&attribution)? {
            return Ok(());
        }
    }
}

/// How often `stats --by` shares out what came, to see whether its
/// count is reached.
const STATS_BATCH: Duration = Duration::from_secs(1);

/// The report of the drops of `seconds`, or of the first `count` samples
/// attributed.
fn report_of(
    global: &GlobalOptions,
    seconds: Duration,
    count: Option<u64>,
    limit: usize,
) -> anyhow::Result<DropReport> {
    let deadline = Instant::now() + seconds;
    let mut shown = None;
    attribute(
        global,
        STATS_BATCH.min(seconds),
        || Ok(false),
        |attribution| {
            let done = Instant::now() >= deadline
                || count.is_some_and(|count| attribution.sampled() >= count);
            if done {
                shown = Some(attribution.report(limit));
            }
            Ok(!done)
        },
    )?;
    Ok(shown.expect("the last batch made the report"))
}

/// `cfctl stats --by`: the drops of `--seconds` (or `--count`), grouped.
pub fn stats_by(global: &GlobalOptions, args: &StatsArgs, by: DropsBy) -> anyhow::Result<()> {
    let shown = report_of(global, args.seconds, args.count, args.limit)?;
    print(global, &shown, |shown| report::drops_by(shown, by))
}

/// `cfctl top`: a live view, or one with `--once`.
pub fn top(global: &GlobalOptions, args: &TopArgs) -> anyhow::Result<()> {
    if args.once {
        let shown = report_of(global, args.interval, None, args.limit)?;
        return print(global, &shown, report::drops_top);
    }
    if global.json {
        bail!("`cfctl top --json` needs --once (or use `cfctl stats --by WHAT --json`)");
    }
    let screen = RefCell::new(crate::top::Screen::open()?);
    let result = attribute(
        global,
        args.interval,
        || screen.borrow_mut().quit_pressed(),
        |attribution| {
            screen.borrow_mut().draw(&attribution.report(args.limit))?;
            Ok(true)
        },
    );
    screen.into_inner().close();
    result
}

/// `cfctl capture --dropped`: sampled frames to a pcap file.
pub fn capture(global: &GlobalOptions, args: &CaptureArgs) -> anyhow::Result<()> {
    require_privileges("read the pinned blocklist's sampled drops")?;
    let mut reader = DropReader::open(&global.pin_dir, &global.state_dir)?;
    if reader.frame_bytes()? == 0 {
        bail!("the sampled drops carry no frame bytes: `cfctl sampling --frame-bytes 128` first");
    }
    let out: Box<dyn Write> = if args.file.as_os_str() == "-" {
        Box::new(std::io::stdout().lock())
    } else {
        let file = File::create(&args.file)
            .with_context(|| format!("cannot create {}", args.file.display()))?;
        Box::new(file)
    };
    let mut capture = Capture::new(BufWriter::new(out)).context("cannot write the pcap header")?;
    let interrupted = crate::interrupted()?;
    let deadline = args.seconds.map(|seconds| Instant::now() + seconds);
    let wanted = args.count.unwrap_or(u64::MAX);
    let mut failed = None;
    while capture.written() < wanted
        && deadline.is_none_or(|at| Instant::now() < at)
        && !interrupted.load(std::sync::atomic::Ordering::Relaxed)
    {
        reader.read(SLICE, |event| {
            if failed.is_none() && capture.written() < wanted {
                if let Err(error) = capture.write(event) {
                    failed = Some(error);
                }
            }
        })?;
        if let Some(error) = failed.take() {
            return Err(error).with_context(|| format!("cannot write {}", args.file.display()));
        }
    }
    let written = capture.written();
    capture
        .finish()
        .with_context(|| format!("cannot write {}", args.file.display()))?;
    if args.file.as_os_str() != "-" {
        print(
            global,
            &serde_json::json!({ "file": args.file, "frames": written }),
            |_| eprintln!("{written} frames written to {}", args.file.display()),
        )?;
    }
    Ok(())
}
