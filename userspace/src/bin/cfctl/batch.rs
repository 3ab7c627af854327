//! `cfctl batch`: list changes read from standard input, one command a
//! line, applied by one process and answered a line each. A caller that
//! makes many small changes (fail2ban's `cfctl.py` action, a script) keeps
//! one batch open instead of starting a cfctl per change.
//!
//! The store is opened when a line arrives and kept while more lines are
//! waiting, then closed: a burst of lines shares one open, and between
//! bursts other cfctl commands and the agent have the store to themselves.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::fd::{AsFd, AsRawFd};

use anyhow::{anyhow, bail, Context as _};
use cfctl::control::{require_privileges, ChangeReport, Control, StoreUse};
use clap::Parser;

use crate::cli::{BatchLine, GlobalOptions};
use crate::xdp::{ListChange, Progress};
use crate::{error_line, parse_error_line, report};

/// Answers every line of standard input until it ends; fails (exit
/// status 1) if any command failed.
pub fn run(global: &GlobalOptions) -> anyhow::Result<()> {
    require_privileges("use the pinned blocklist and its store")?;
    let input = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .context("cannot read standard input")?;
    let mut input = BufReader::new(File::from(input));
    let mut control = None;
    let (mut commands, mut failed) = (0usize, 0usize);
    let mut line = Vec::new();
    for number in 1u64.. {
        line.clear();
        if input
            .read_until(b'\n', &mut line)
            .context("cannot read standard input")?
            == 0
        {
            break;
        }
        let outcome = match std::str::from_utf8(&line).map(str::trim) {
            Ok(text) if text.is_empty() || text.starts_with('#') => continue,
            Ok(text) => apply_line(global, &mut control, text),
            Err(_) => Err(anyhow!("not UTF-8")),
        };
        commands += 1;
        match outcome {
            Ok(change) => answer(global, number, Ok(&change))?,
            Err(error) => {
                failed += 1;
                // What failed may have left the control plane in any state:
                // the next line opens it afresh.
                control = None;
                answer(global, number, Err(&error))?;
            }
        }
        if input.buffer().is_empty() && !input_waiting(input.get_ref()) {
            control = None;
        }
    }
    if failed > 0 {
        bail!("{failed} of {commands} commands failed");
    }
    Ok(())
}

/// Parses one line and applies its change, opening the store if the
/// batch does not hold it.
fn apply_line(
    global: &GlobalOptions,
    control: &mut Option<Control>,
    text: &str,
) -> anyhow::Result<ChangeReport> {
    let words = shlex::split(text).ok_or_else(|| anyhow!("unbalanced quotes or a trailing \\"))?;
    let line =
        BatchLine::try_parse_from(&words).map_err(|error| anyhow!(parse_error_line(&error)))?;
    let change = ListChange::of(&line.command).ok_or_else(|| {
        anyhow!(
            "`{}` is not a change: a batch takes add, del, allow add, allow del and import",
            line.command.name()
        )
    })?;
    if let ListChange::Import(args) = change {
        if args.file.as_os_str() == "-" {
            bail!("import - would read the batch's own input: give the list's file");
        }
    }
    let control = match control {
        Some(control) => control,
        None => control.insert(crate::xdp::open(global, StoreUse::Create)?),
    };
    change.apply(global, control, Progress::Hidden)
}

/// Writes the answer to line `number`: `ok: SUMMARY` or `error: line N:
/// WHY`, or with `--json` an object with `line`, `ok` and the `report` or
/// the `error`.
fn answer(
    global: &GlobalOptions,
    number: u64,
    outcome: Result<&ChangeReport, &anyhow::Error>,
) -> anyhow::Result<()> {
    match (global.json, outcome) {
        (true, Ok(change)) => report::json(&serde_json::json!({
            "line": number, "ok": true, "report": change,
        })),
        (true, Err(error)) => report::json(&serde_json::json!({
            "line": number, "ok": false, "error": error_line(error),
        })),
        (false, Ok(change)) => {
            println!("ok: {}", report::change_summary(change));
            Ok(())
        }
        (false, Err(error)) => {
            println!("error: line {number}: {}", error_line(error));
            Ok(())
        }
    }
}

/// Whether `input` has something to read now (a line, or its end).
fn input_waiting(input: &File) -> bool {
    let mut poll = libc::pollfd {
        fd: input.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, and a timeout of 0: poll returns at once.
    unsafe { libc::poll(&mut poll, 1, 0) > 0 }
}
