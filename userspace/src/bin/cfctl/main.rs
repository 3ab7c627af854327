//! `cfctl`: the command-line control plane of the XDP cuckoo-filter
//! blocklist and of filter devices. Parses the command line (see `cli`),
//! runs each command on `userspace::control`, prints the report (see
//! `report`) and turns any error into one line on standard error and exit
//! status 1.

mod cli;
mod report;

use std::io::Write;
use std::net::IpAddr;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::{CommandFactory, Parser};
use ipnet::IpNet;
use userspace::blocklist::{self, ListFormat, ParseOptions, ParsedList};
use userspace::control::device::DeviceControl;
use userspace::control::{
    self, attach, fingerprint_bits_for_fpr, require_privileges, AttachOptions, Change, Control,
    EntryRecord, NoProgress, StoreUse,
};
use userspace::store::{ListKind, NewEntry};
use userspace::text::{self, Escaped};
use userspace::xdp::PinDir;
use userspace::Setting;

use cli::{AllowCommand, Cli, Command, FormatArg, GlobalOptions};

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
            let rendered = error.render().to_string();
            let first = rendered.lines().next().unwrap_or("invalid command line");
            eprintln!(
                "cfctl: {} (see cfctl --help)",
                first.trim_start_matches("error: ")
            );
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
            let chain: Vec<String> = error.chain().map(ToString::to_string).collect();
            // Errors quote input (lines, file and interface names): one line,
            // no control characters reach the terminal.
            eprintln!("cfctl: {}", Escaped(&dedup_chain(&chain)));
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
fn answer_check<T: serde::Serialize>(
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
        Command::Man(args) => return man(args.out.as_deref()),
        Command::Completions(args) => {
            clap_complete::generate(
                args.shell,
                &mut Cli::command(),
                "cfctl",
                &mut std::io::stdout(),
            );
            return Ok(());
        }
        _ => {}
    }
    if let Some(target) = &global.device {
        return run_device(global, target, &cli.command);
    }
    match &cli.command {
        Command::Stats(args) => return stats(global, args.watch),
        Command::Save => {
            bail!("`cfctl save` needs --device (the XDP store is saved on every change)")
        }
        _ => {}
    }
    let action = match &cli.command {
        Command::Attach(_) => "attach XDP programs",
        Command::Detach(_) => "detach XDP programs",
        Command::Resize(_) => "load a resized XDP program",
        _ => "use the pinned blocklist and its store",
    };
    require_privileges(action)?;
    if let Command::Detach(args) = &cli.command {
        let interfaces = (!args.all).then_some(args.interfaces.as_slice());
        let report = attach::detach(&PinDir::new(&global.pin_dir), interfaces, args.keep_state)?;
        return print(global, &report, report::detach);
    }
    let store_use = match &cli.command {
        Command::Attach(_) | Command::Add(_) | Command::Import(_) => StoreUse::Create,
        Command::Allow(AllowCommand::Add(_)) => StoreUse::Create,
        _ => StoreUse::Existing,
    };
    let mut control = Control::open_with_notices(
        &global.pin_dir,
        &global.state_dir,
        store_use,
        Box::new(|notice| eprintln!("cfctl: {}", Escaped(notice))),
    )?;
    control.set_force(global.force);
    match &cli.command {
        Command::Attach(args) => {
            let fingerprint_bits = match (&args.fingerprint_bits, args.fpr) {
                (Some(bits), _) => Some(bits.parse()?),
                (None, Some(fpr)) => Some(fingerprint_bits_for_fpr(fpr)?),
                (None, None) => None,
            };
            let options = AttachOptions {
                capacity: args.capacity,
                fingerprint_bits,
                match_address: args.match_address,
                policy: args.policy,
            };
            let report = control.attach(&args.interfaces, args.mode, options)?;
            print(global, &report, report::attach)
        }
        Command::Add(args) => add(global, &mut control, ListKind::Blocklist, args),
        Command::Del(args) => delete(global, &mut control, ListKind::Blocklist, &args.entries),
        Command::Allow(AllowCommand::Add(args)) => {
            add(global, &mut control, ListKind::Allowlist, args)
        }
        Command::Allow(AllowCommand::Del(args)) => {
            delete(global, &mut control, ListKind::Allowlist, &args.entries)
        }
        Command::Allow(AllowCommand::List) => list(global, &control, ListKind::Allowlist),
        Command::Check(args) => {
            let result = control.check(parse_address(&args.address)?)?;
            let listed = !result.covering.is_empty();
            answer_check(global, args.quiet, listed, &result, report::check)
        }
        Command::List => list(global, &control, ListKind::Blocklist),
        Command::Export => {
            let entries = records(&control, ListKind::Blocklist)?;
            if global.json {
                report::json(&entries)
            } else {
                report::export(&entries)
            }
        }
        Command::Import(args) => {
            let list = read_list(global, args)?;
            let entries: Vec<NewEntry<'_>> = NewEntry::from_list(&list).collect();
            let change = if args.replace {
                Change::Replace(&entries)
            } else {
                Change::Add(&entries)
            };
            let bar = report::Bar::new(entries.len());
            let report = control.change(ListKind::Blocklist, change, &bar)?;
            drop(bar);
            print(global, &report, report::change)
        }
        Command::Status => {
            let status = control.status()?;
            print(global, &status, report::status)
        }
        Command::Mode(args) => {
            control.set_mode(args.mode)?;
            let name = args.mode.name();
            print(global, &serde_json::json!({ "mode": name }), |_| {
                println!("mode: {name}")
            })
        }
        Command::Verify => {
            let report = control.verify()?;
            print(global, &report, report::verify)?;
            if let Some(problem) = report.problems.first() {
                bail!(
                    "verify failed: {problem}{} (`cfctl attach IFACE` rebuilds the filter from \
                     the store)",
                    match report.problems.len() {
                        1 => String::new(),
                        more => format!(" (and {} more problems)", more - 1),
                    }
                );
            }
            Ok(())
        }
        Command::Resize(args) => {
            let summary = control.resize(args.capacity)?;
            print(global, &summary, |summary| {
                println!(
                    "resized: {} buckets, {} keys ({:.1}% of slots); swapped in on every link",
                    report::thousands(summary.buckets as u64),
                    report::thousands(summary.fingerprints as u64),
                    summary.load_factor * 100.0
                )
            })
        }
        Command::Stats(_)
        | Command::Save
        | Command::Man(_)
        | Command::Completions(_)
        | Command::Detach(_) => {
            unreachable!("handled before the store is opened")
        }
    }
}

/// Prints `value` as JSON with `--json`, else with `human`.
fn print<T: serde::Serialize>(
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

/// Parses every `ADDR|CIDR` argument before anything changes.
fn parse_nets(texts: &[String]) -> anyhow::Result<Vec<IpNet>> {
    texts
        .iter()
        .map(|given| {
            blocklist::parse_net(given).with_context(|| format!("'{}'", text::excerpt(given)))
        })
        .collect()
}

fn parse_address(given: &str) -> anyhow::Result<IpAddr> {
    given
        .trim()
        .parse()
        .with_context(|| format!("'{}': not an IP address", text::excerpt(given)))
}

fn add(
    global: &GlobalOptions,
    control: &mut Control,
    list: ListKind,
    args: &cli::AddArgs,
) -> anyhow::Result<()> {
    let nets = parse_nets(&args.entries)?;
    warn_whole_families(&nets, global.force)?;
    let comment = match args.comment.as_deref() {
        Some(comment) => text::check_comment(comment).context("--comment")?,
        None => None,
    };
    let entries: Vec<NewEntry<'_>> = nets
        .iter()
        .map(|&net| NewEntry {
            net,
            source: "cli",
            comment,
        })
        .collect();
    let report = control.change(list, Change::Add(&entries), &NoProgress)?;
    print(global, &report, report::change)
}

fn delete(
    global: &GlobalOptions,
    control: &mut Control,
    list: ListKind,
    texts: &[String],
) -> anyhow::Result<()> {
    let nets = parse_nets(texts)?;
    let report = control.change(list, Change::Delete(&nets), &NoProgress)?;
    print(global, &report, report::change)
}

fn records(control: &Control, list: ListKind) -> anyhow::Result<Vec<EntryRecord>> {
    Ok(control
        .store()
        .entries(list)?
        .into_iter()
        .map(EntryRecord::from)
        .collect())
}

fn list(global: &GlobalOptions, control: &Control, list: ListKind) -> anyhow::Result<()> {
    let entries = records(control, list)?;
    print(global, &entries, |entries| report::entries(entries))
}

/// Refuses entries for a whole family unless `force`, and warns about them
/// when forced.
fn warn_whole_families(nets: &[IpNet], force: bool) -> anyhow::Result<()> {
    for net in control::whole_families(nets, force)? {
        eprintln!("cfctl: warning: {net} covers every address of its family");
    }
    Ok(())
}

/// Parses the import's list, all or nothing (or skipping bad lines, each
/// reported); entries for a whole family need `--force`.
fn read_list(global: &GlobalOptions, args: &cli::ImportArgs) -> anyhow::Result<ParsedList> {
    let options = ParseOptions {
        format: match args.format {
            FormatArg::Auto => None,
            FormatArg::Plain => Some(ListFormat::Plain),
            FormatArg::Netset => Some(ListFormat::Netset),
            FormatArg::Spamhaus => Some(ListFormat::Spamhaus),
        },
        skip_invalid: args.skip_invalid,
        ..ParseOptions::default()
    };
    let list = if args.file == Path::new("-") {
        blocklist::parse_reader(std::io::stdin().lock(), "-", options)?
    } else {
        blocklist::parse_file(&args.file, options)?
    };
    for skipped in &list.skipped {
        eprintln!("cfctl: skipped {}", Escaped(&skipped.to_string()));
    }
    if list.skipped_count > list.skipped.len() {
        eprintln!(
            "cfctl: skipped {} more invalid lines",
            list.skipped_count - list.skipped.len()
        );
    }
    let nets: Vec<IpNet> = list.entries.iter().map(|entry| entry.net).collect();
    warn_whole_families(&nets, global.force)?;
    Ok(list)
}

/// `cfctl stats`: totals, or rates every interval with `--watch`.
fn stats(global: &GlobalOptions, watch: Option<Duration>) -> anyhow::Result<()> {
    require_privileges("read the pinned blocklist counters")?;
    let Some(interval) = watch else {
        let counters = control::read_counters(&global.pin_dir)?;
        return print(global, &counters, |counters| {
            report::counters(counters, None)
        });
    };
    let seconds = interval.as_secs_f64();
    let mut before = control::read_counters(&global.pin_dir)?;
    loop {
        std::thread::sleep(interval);
        let now = control::read_counters(&global.pin_dir)?;
        // Counters that never counted anything stay out of the table.
        let deltas: Vec<_> = now
            .iter()
            .zip(&before)
            .filter(|(now, _)| now.packets > 0)
            .map(|(now, before)| control::CounterRecord {
                packets: now.packets.saturating_sub(before.packets),
                bytes: now.bytes.saturating_sub(before.bytes),
                ..*now
            })
            .collect();
        if global.json {
            report::json(&serde_json::json!({ "seconds": seconds, "counters": deltas }))?;
        } else {
            report::counters(&deltas, Some(seconds));
            println!();
        }
        std::io::stdout().flush()?;
        before = now;
    }
}

/// The verbs on a filter device.
fn run_device(global: &GlobalOptions, target: &str, command: &Command) -> anyhow::Result<()> {
    // Parse before connecting, so that bad input fails fast and changes
    // nothing.
    let nets = match command {
        Command::Add(args) => {
            let nets = parse_nets(&args.entries)?;
            warn_whole_families(&nets, global.force)?;
            nets
        }
        Command::Del(args) => parse_nets(&args.entries)?,
        Command::Import(args) => read_list(global, args)?
            .entries
            .into_iter()
            .map(|entry| entry.net)
            .collect(),
        _ => Vec::new(),
    };
    let address = match command {
        Command::Check(args) => Some(parse_address(&args.address)?),
        _ => None,
    };
    if !matches!(
        command,
        Command::Add(_)
            | Command::Del(_)
            | Command::Import(_)
            | Command::Check(_)
            | Command::Status
            | Command::Stats(_)
            | Command::Save
    ) {
        bail!(
            "`cfctl {}` has no meaning for a device; a device takes add, del, check, import, \
             status, stats and save",
            command.name()
        );
    }
    let mut device = DeviceControl::open(target, global.baud)?;
    match command {
        Command::Add(_) => {
            let added = device.add(&nets)?;
            print(global, &serde_json::json!({ "added": added }), |_| {
                println!("{added} added")
            })
        }
        Command::Del(_) => {
            let report = device.delete(&nets)?;
            print(global, &report, report::device_delete)
        }
        Command::Import(_) => {
            let report = device.import(&nets)?;
            print(global, &report, report::device_import)
        }
        Command::Check(args) => {
            let address = address.context("an address to check")?;
            let listed = device.check(address)?;
            let value = serde_json::json!({ "address": address, "listed": listed });
            answer_check(global, args.quiet, listed, &value, |_| {
                if listed {
                    println!("{address} is listed on the device")
                } else {
                    println!("{address}: not listed")
                }
            })
        }
        Command::Status => {
            let info = device.info()?;
            let status = report::DeviceStatus::new(target, &info);
            print(global, &status, report::device_status)
        }
        Command::Stats(_) => {
            let stats = device.stats()?;
            print(global, &stats, report::device_stats)
        }
        Command::Save => {
            let sequence = device.save()?;
            print(
                global,
                &serde_json::json!({ "saved_sequence": sequence }),
                |_| println!("saved image {sequence}"),
            )
        }
        _ => unreachable!("checked above"),
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
