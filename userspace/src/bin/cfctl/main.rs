//! `cfctl`: the command-line control plane of the XDP cuckoo-filter
//! blocklist and of filter devices. Parses the command line (see `cli`),
//! runs each command on `cfctl::control` (see `xdp` and `device`),
//! prints the report (see `report`) and turns any error into one line on
//! standard error and a non-zero exit status.

mod agent;
mod batch;
mod cli;
mod device;
mod drops;
mod input;
mod progress;
mod report;
mod top;
mod xdp;

use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::Context as _;
use cfctl::text::Escaped;
use clap::{CommandFactory, Parser};

use cli::{Cli, Command, GlobalOptions};

fn main() -> ExitCode {
    // Like other command-line tools, end quietly when the reader of the
    // output goes away (`cfctl list | head`) instead of failing to print.
    // SAFETY: resets a signal disposition before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) if !error.use_stderr() => {
            let _ = error.print();
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            eprintln!("cfctl: {} (see cfctl --help)", parse_error_line(&error));
            return ExitCode::from(2);
        }
    };
    let checking = matches!(cli.command, Command::Check(_));
    // A panic is a bug: it ends as one line too, not a backtrace. (The
    // store catches redb's panics on a damaged file itself.)
    std::panic::set_hook(Box::new(|info| {
        let location = info
            .location()
            .map(|at| format!(" at {}:{}", at.file(), at.line()))
            .unwrap_or_default();
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|message| (*message).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        *PANIC
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = format!("{message}{location}");
    }));
    let outcome = std::panic::catch_unwind(|| run(cli)).unwrap_or_else(|_| {
        let panic = PANIC
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        Err(anyhow::anyhow!(
            "internal error, a bug in cfctl (please report it): {panic}"
        ))
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) if error.is::<NotListed>() => ExitCode::from(1),
        Err(error) => {
            eprintln!("cfctl: {}", error_line(&error));
            // `check` answers like grep: 1 is "not listed", so errors are 2.
            ExitCode::from(if checking { 2 } else { 1 })
        }
    }
}

/// The answer of a `check` that found no entry listing the address: exit
/// status 1, nothing printed.
#[derive(Debug, thiserror::Error)]
#[error("not listed")]
struct NotListed;

/// Ends a `check`: prints `report` (unless `quiet`) and answers with the
/// exit status.
pub(crate) fn answer_check<T: serde::Serialize>(
    global: &GlobalOptions,
    quiet: bool,
    listed: bool,
    report: &T,
    human: impl FnOnce(&T),
) -> anyhow::Result<()> {
    if !quiet {
        print(global, report, human)?;
    }
    if listed {
        Ok(())
    } else {
        Err(NotListed.into())
    }
}

/// The message and location of the last panic, which the panic hook keeps
/// for `main` instead of printing them.
static PANIC: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

/// An error and its causes in one line. Errors quote input (lines, file
/// and interface names): no control character in it reaches a terminal.
pub(crate) fn error_line(error: &anyhow::Error) -> String {
    let chain: Vec<String> = error.chain().map(ToString::to_string).collect();
    Escaped(&dedup_chain(&chain)).to_string()
}

/// clap's message for a command line it cannot parse, in one line: what
/// is wrong, without the usage and tips that follow it.
pub(crate) fn parse_error_line(error: &clap::Error) -> String {
    let rendered = error.render().to_string();
    let message: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .take_while(|line| !line.is_empty() && !line.starts_with("Usage:"))
        .collect();
    match message.join(" ") {
        line if line.is_empty() => "invalid command line".to_owned(),
        line => line.trim_start_matches("error: ").to_owned(),
    }
}

/// Joins an error chain with ": ", leaving out messages that repeat the
/// end of the previous one (transparent wrappers).
fn dedup_chain(chain: &[String]) -> String {
    let mut line = String::new();
    for message in chain {
        if line.ends_with(message.as_str()) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(message);
    }
    line
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let global = &cli.global;
    match &cli.command {
        Command::Man(args) => man(args.out.as_deref()),
        Command::Completions(args) => {
            clap_complete::generate(
                args.shell,
                &mut Cli::command(),
                "cfctl",
                &mut std::io::stdout(),
            );
            Ok(())
        }
        Command::Agent(args) => agent::run(global, args),
        Command::Batch if global.device.is_none() => batch::run(global),
        command => match &global.device {
            Some(target) => device::run(global, target, command),
            None => xdp::run(global, command),
        },
    }
}

/// A flag SIGINT and SIGTERM set, for a command that ends cleanly on
/// them (a capture finishes its file).
pub(crate) fn interrupted() -> anyhow::Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&flag))
            .context("cannot handle SIGINT and SIGTERM")?;
    }
    Ok(flag)
}

/// Prints `value` as JSON with `--json`, else with `human`.
pub(crate) fn print<T: serde::Serialize>(
    global: &GlobalOptions,
    value: &T,
    human: impl FnOnce(&T),
) -> anyhow::Result<()> {
    if global.json {
        report::json(value)
    } else {
        human(value);
        Ok(())
    }
}

/// Writes the man page to standard output, or every page into `out`.
fn man(out: Option<&Path>) -> anyhow::Result<()> {
    let command = Cli::command();
    let Some(dir) = out else {
        let mut stdout = std::io::stdout().lock();
        clap_mangen::Man::new(command).render(&mut stdout)?;
        return Ok(());
    };
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    clap_mangen::generate_to(command, dir)
        .with_context(|| format!("writing man pages to {}", dir.display()))?;
    Ok(())
}
