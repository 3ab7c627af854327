//! The verbs on the XDP blocklist and its store: each command opens the
//! control plane the way it needs it (creating the store only for commands
//! that add something), runs, and prints its report.

use std::io::Write;
use std::rc::Rc;
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context as _};
use cfctl::control::{
    self, attach, require_privileges, shape_for_fpr, AttachOptions, Change, ChangeReport, Control,
    EntryRecord, ListKind, NoProgress, StoreUse,
};
use cfctl::sources::{cli, file};
use cfctl::text::{self, Escaped};
use cfctl::Setting;

use crate::cli::{
    AddArgs, AllowCommand, AttachArgs, Command, DelArgs, GlobalOptions, ImportArgs, ListArgs,
};
use crate::input::{nets_to_add, parse_address, parse_nets, read_list};
use crate::progress;
use crate::{answer_check, print, report};

/// Runs `command` on the blocklist pinned in `--pin-dir` and the store in
/// `--state-dir`.
pub fn run(global: &GlobalOptions, command: &Command) -> anyhow::Result<()> {
    match command {
        Command::Stats(args) => {
            return match args.by {
                Some(by) => crate::drops::stats_by(global, args, by),
                None => stats(global, args.watch),
            }
        }
        Command::Top(args) => return crate::drops::top(global, args),
        Command::Capture(args) => return crate::drops::capture(global, args),
        Command::Save => {
            bail!("`cfctl save` needs --device (the XDP store is saved on every change)")
        }
        _ => {}
    }
    require_privileges(match command {
        Command::Attach(_) => "attach BPF programs",
        Command::Detach(_) => "detach BPF programs",
        Command::Resize(_) => "load a resized BPF program",
        _ => "use the pinned blocklist and its store",
    })?;
    if let Command::Attach(AttachArgs {
        interfaces,
        wait_for_interface: Some(patience),
        ..
    }) = command
    {
        // Before the store is opened: nothing else waits on it meanwhile.
        attach::wait_for_interfaces(interfaces, *patience)?;
    }
    if let Command::Detach(args) = command {
        let interfaces = (!args.all).then_some(args.interfaces.as_slice());
        let direction = args.direction.map(Into::into);
        let report = attach::detach(&global.pin_dir, interfaces, direction, args.keep_state)?;
        return print(global, &report, report::detach);
    }
    let store_use = match command {
        Command::Attach(_) | Command::Add(_) | Command::Import(_) => StoreUse::Create,
        Command::Allow(AllowCommand::Add(_)) => StoreUse::Create,
        Command::Sampling(args) if !args.changes() => StoreUse::Read,
        Command::List(_)
        | Command::Export(_)
        | Command::Check(_)
        | Command::Status
        | Command::Verify
        | Command::Allow(AllowCommand::List(_)) => StoreUse::Read,
        _ => StoreUse::Existing,
    };
    let mut control = open(global, store_use)?;
    let outcome = on_store(global, &mut control, command);
    // cfctl exits right after the command: the store need not be closed.
    control.close_at_exit();
    outcome
}

/// Opens the control plane on `--pin-dir` and `--state-dir` for
/// `store_use`, with notices on standard error, and first ends the
/// listings that have expired (a use that only reads opens the store
/// read-only when none has).
pub fn open(global: &GlobalOptions, store_use: StoreUse) -> anyhow::Result<Control> {
    let notice: Rc<dyn Fn(&str)> = Rc::new(|notice| eprintln!("cfctl: {}", Escaped(notice)));
    let check = global.state_dir_check();
    let mut control = match store_use {
        StoreUse::Read => {
            Control::open_for_reading(&global.pin_dir, &global.state_dir, check, notice)?
        }
        _ => {
            let mut control = Control::open_with_notices(
                &global.pin_dir,
                &global.state_dir,
                store_use,
                check,
                notice,
            )?;
            control.expire_due()?;
            control
        }
    };
    control.set_force(global.force);
    Ok(control)
}

/// Runs a command that needs the store.
fn on_store(
    global: &GlobalOptions,
    control: &mut Control,
    command: &Command,
) -> anyhow::Result<()> {
    if let Some(change) = ListChange::of(command) {
        let report = change.apply(global, control, Progress::Shown)?;
        return print(global, &report, report::change);
    }
    match command {
        Command::Attach(args) => attach(global, control, args),
        Command::Allow(AllowCommand::List(args)) => {
            list(global, control, ListKind::Allowlist, args)
        }
        Command::Check(args) => {
            let result = control.check(parse_address(&args.address)?)?;
            let listed = !result.covering.is_empty();
            answer_check(global, args.quiet, listed, &result, report::check)
        }
        Command::List(args) => list(global, control, ListKind::Blocklist, args),
        Command::Export(args) => {
            let entries = records(control, ListKind::Blocklist, args)?;
            match global.json {
                true => report::json(&entries),
                false => report::export(&entries),
            }
        }
        Command::Status => print(
            global,
            &report::FullStatus::of(control, &global.state_dir)?,
            report::status,
        ),
        Command::Mode(args) => {
            control.set_mode(args.mode)?;
            let name = args.mode.name();
            print(global, &serde_json::json!({ "mode": name }), |_| {
                println!("mode: {name}")
            })
        }
        Command::Sampling(args) => {
            if args.changes() {
                let sampling = args.applied_to(control.settings()?.sampling);
                control.set_sampling(sampling)?;
            }
            let status = control.status()?;
            let shown = serde_json::json!({
                "sampling": status.sampling,
                "samplers": status.samplers,
            });
            print(global, &shown, |_| report::sampling(&status))
        }
        Command::Malformed(args) => {
            control.set_malformed_action(args.action)?;
            let name = args.action.name();
            print(global, &serde_json::json!({ "malformed": name }), |_| {
                println!("malformed frames: {name}")
            })
        }
        Command::Verify => verify(global, control),
        Command::Resize(args) => {
            let summary = control.resize(args.capacity)?;
            print(global, &summary, report::resize)
        }
        Command::Add(_)
        | Command::Del(_)
        | Command::Allow(AllowCommand::Add(_) | AllowCommand::Del(_))
        | Command::Import(_) => unreachable!("a list change, applied above"),
        Command::Stats(_)
        | Command::Top(_)
        | Command::Batch
        | Command::Capture(_)
        | Command::Save
        | Command::Agent(_)
        | Command::Detach(_)
        | Command::Man(_)
        | Command::Completions(_) => unreachable!("handled before the store is opened"),
    }
}

fn attach(global: &GlobalOptions, control: &mut Control, args: &AttachArgs) -> anyhow::Result<()> {
    let shape = match (args.fingerprint_bits, args.fpr) {
        (Some(shape), _) => Some(shape),
        (None, Some(fpr)) => Some(shape_for_fpr(fpr)?),
        (None, None) => None,
    };
    let options = AttachOptions {
        capacity: args.capacity,
        shape,
        match_address: args.match_address,
        policy: args.policy,
        malformed: args.malformed,
        max_memory: args.max_memory,
    };
    let point = args.attach_point().map_err(anyhow::Error::msg)?;
    let report = control.attach(&args.interfaces, point, options)?;
    print(global, &report, report::attach)
}

/// A command that changes a list: what `cfctl batch` takes.
#[derive(Clone, Copy)]
pub enum ListChange<'a> {
    Add(ListKind, &'a AddArgs),
    Delete(ListKind, &'a DelArgs),
    Import(&'a ImportArgs),
}

/// Whether an import shows its progress on the terminal.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    Shown,
    Hidden,
}

impl<'a> ListChange<'a> {
    /// The change `command` makes, if it is one.
    pub fn of(command: &'a Command) -> Option<Self> {
        Some(match command {
            Command::Add(args) => Self::Add(ListKind::Blocklist, args),
            Command::Del(args) => Self::Delete(ListKind::Blocklist, args),
            Command::Allow(AllowCommand::Add(args)) => Self::Add(ListKind::Allowlist, args),
            Command::Allow(AllowCommand::Del(args)) => Self::Delete(ListKind::Allowlist, args),
            Command::Import(args) => Self::Import(args),
            _ => return None,
        })
    }

    /// Parses the change's input and applies it, all or nothing.
    pub fn apply(
        self,
        global: &GlobalOptions,
        control: &mut Control,
        shown: Progress,
    ) -> anyhow::Result<ChangeReport> {
        match self {
            Self::Add(list, args) => add(global, control, list, args),
            Self::Delete(list, args) => delete(control, list, args),
            Self::Import(args) => import(global, control, args, shown),
        }
    }
}

fn add(
    global: &GlobalOptions,
    control: &mut Control,
    list: ListKind,
    args: &AddArgs,
) -> anyhow::Result<ChangeReport> {
    let nets = nets_to_add(global, &args.entries)?;
    let source = cli::check_source_name(&args.source)?;
    let comment = match args.comment.as_deref() {
        Some(comment) => text::check_comment(comment).context("--comment")?,
        None => None,
    };
    let expires = args.timeout.map(|timeout| SystemTime::now() + timeout);
    let entries = cli::entries(&nets, comment, expires);
    let change = Change::Add {
        source,
        entries: &entries,
    };
    Ok(control.change(list, change, &NoProgress)?)
}

fn delete(control: &mut Control, list: ListKind, args: &DelArgs) -> anyhow::Result<ChangeReport> {
    let nets = parse_nets(&args.entries)?;
    let source = args
        .source
        .as_deref()
        .map(cli::check_source_name)
        .transpose()?;
    let change = Change::Delete {
        source,
        nets: &nets,
    };
    Ok(control.change(list, change, &NoProgress)?)
}

fn import(
    global: &GlobalOptions,
    control: &mut Control,
    args: &ImportArgs,
    shown: Progress,
) -> anyhow::Result<ChangeReport> {
    let list = read_list(global, args)?;
    let source = match &args.source {
        Some(source) => source.clone(),
        None => file::source_of(&list.source),
    };
    let source = cli::check_source_name(&source)?;
    let expires = args.timeout.map(|timeout| SystemTime::now() + timeout);
    let entries = file::entries(&list, expires);
    let change = match args.replace {
        true => Change::Replace {
            source,
            entries: &entries,
        },
        false => Change::Add {
            source,
            entries: &entries,
        },
    };
    let report = match shown {
        Progress::Shown => {
            let bar = progress::Bar::new(entries.len());
            control.change(ListKind::Blocklist, change, &bar)?
        }
        Progress::Hidden => control.change(ListKind::Blocklist, change, &NoProgress)?,
    };
    Ok(report)
}

fn verify(global: &GlobalOptions, control: &mut Control) -> anyhow::Result<()> {
    let report = control.verify()?;
    print(global, &report, report::verify)?;
    if let Some(problem) = report.problems.first() {
        bail!(
            "verify failed: {problem}{} (`cfctl attach IFACE` rebuilds the filter from the \
             store)",
            match report.problems.len() {
                1 => String::new(),
                more => format!(" (and {} more problems)", more - 1),
            }
        );
    }
    Ok(())
}

fn records(control: &Control, list: ListKind, args: &ListArgs) -> anyhow::Result<Vec<EntryRecord>> {
    Ok(control
        .store()
        .entries(list, args.source.as_deref())?
        .into_iter()
        .map(EntryRecord::from)
        .collect())
}

fn list(
    global: &GlobalOptions,
    control: &Control,
    list: ListKind,
    args: &ListArgs,
) -> anyhow::Result<()> {
    let entries = records(control, list, args)?;
    print(global, &entries, |entries| report::entries(entries))
}

/// `cfctl stats`: totals, or rates every interval with `--watch`. Needs no
/// store, so it works while another cfctl holds it.
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
