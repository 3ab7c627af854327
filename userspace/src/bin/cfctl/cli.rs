//! cfctl's command line: every command, option and help text (the man page
//! and shell completions are generated from these definitions).

use std::path::PathBuf;
use std::time::Duration;

use cfctl::agent::log::LogFormat;
use cfctl::control::{
    tcx_supported, AttachMode, AttachPoint, CapacityChoice, MemoryCeiling, Sampling,
    TrafficDirection,
};
use cfctl::control::{DirCheck, FilterSettings};
use cfctl::paths;
use cfctl::sources::cli::SOURCE as CLI_SOURCE;
use cfctl::{FilterShape, MalformedAction, MatchAddress, Mode, Policy, Setting, MAX_VLAN_TAGS};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand, ValueEnum};

const ABOUT: &str = "Keep an XDP cuckoo-filter blocklist (or a filter device) up to date";

const LONG_ABOUT: &str = "\
cfctl loads an XDP program that drops packets whose source (or destination) \
address is on a blocklist, attaches it to network interfaces, and keeps its \
filter up to date from the command line and from blocklist feeds (FireHOL \
netsets, Spamhaus DROP/DROPv6, plain lists; IPv4 and IPv6, addresses and \
CIDRs).

The exact list of entries lives in a transactional store in the state \
directory; the in-kernel cuckoo filter is derived from it. Every entry \
belongs to one or more sources (cli, file:NAME, feed:NAME), each of which \
may list it until a time of its own; an entry stays listed until every \
source that lists it drops it or expires. Every change is \
written to the store and to the live filter together: a listed address never \
disappears from the filter, even for an instant, and a change that cannot be \
applied in full changes nothing. The attachment outlives cfctl (the program, \
its maps and its links are pinned in the pin directory), and `cfctl attach` \
after a reboot rebuilds the filter from the store.

With --device, the same verbs (add, del, check, import, status, stats, save) \
drive a microcontroller running the filter firmware over a serial link.";

/// The long help's examples, files and exit statuses.
fn examples() -> String {
    format!(
        "\
Examples:
  cfctl attach eth0                       load and attach, filter from the store
  cfctl import firehol_level1.netset      add a feed's entries (all or nothing)
  cfctl import --replace spamhaus_drop.txt    swap that file's entries atomically
  cfctl add 198.18.9.9 --timeout 1h       listed for an hour
  cfctl add 198.18.7.0/24 2001:db8:bad::1
  cfctl check 198.18.7.9                  which entry lists it, if any
  cfctl stats --watch 1                   packets and bytes per second
  cfctl --device /dev/ttyUSB0 import list.txt   push a list to a device

Files:
  {pin_dir:<21} pinned program, maps and links (--pin-dir)
  {state_dir:<21} the entry store, cfctl.redb (--state-dir)
  {config:<21} the agent's configuration (agent --config)

Exit status: 0 on success, 1 on any error (one line on standard error), \
2 for a command line that cannot be parsed. `cfctl check` answers like grep: \
0 if the address is listed, 1 if not, 2 on error.",
        pin_dir = paths::PIN_DIR,
        state_dir = paths::STATE_DIR,
        config = paths::AGENT_CONFIG,
    )
}

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "cfctl",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    after_long_help = examples(),
    propagate_version = true
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalOptions,
    #[command(subcommand)]
    pub command: Command,
}

/// One line of `cfctl batch`: a command with no global options.
#[derive(Debug, Parser)]
#[command(name = "cfctl batch", no_binary_name = true)]
pub struct BatchLine {
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command takes.
#[derive(Debug, Args)]
pub struct GlobalOptions {
    /// Print reports as JSON (one object; `stats --watch` prints one per
    /// interval).
    #[arg(long, global = true)]
    pub json: bool,
    /// The bpffs directory holding the pinned program, maps and links
    /// (bpffs is mounted at /sys/fs/bpf if it is missing).
    #[arg(long, global = true, value_name = "DIR", default_value = paths::PIN_DIR)]
    pub pin_dir: PathBuf,
    /// The directory holding the entry store.
    #[arg(long, global = true, value_name = "DIR", default_value = paths::STATE_DIR)]
    pub state_dir: PathBuf,
    /// Drive a filter device instead of XDP: a serial port or pty, a unix
    /// socket, tcp:HOST:PORT (a ser2net-style serial server), or
    /// udp:HOST:PORT (a device on the network, with --device-key).
    #[arg(long, global = true, value_name = "PATH|tcp:HOST:PORT|udp:HOST:PORT")]
    pub device: Option<String>,
    /// Baud rate of a serial device.
    #[arg(long, global = true, value_name = "N", default_value_t = 115_200)]
    pub baud: u32,
    /// The key a device on the network (udp:) seals its datagrams under:
    /// a file of 64 hex digits that only its owner may read.
    #[arg(long, global = true, value_name = "FILE")]
    pub device_key: Option<PathBuf>,
    /// Do what cfctl refuses by default: add 0.0.0.0/0 or ::/0 (every
    /// address of a family), or rebuild a pinned filter from a store it
    /// was not built from (another --state-dir, or a store restored from a
    /// backup), or from an empty store.
    #[arg(long, global = true)]
    pub force: bool,
    /// Open the store even if the state directory is writable by another
    /// user or group, or owned by another user (refused by default: that
    /// user could replace the store). For a directory shared on purpose.
    #[arg(long, global = true)]
    pub trust_state_dir: bool,
}

impl GlobalOptions {
    /// How the state directory is checked before the store is opened.
    pub fn state_dir_check(&self) -> DirCheck {
        if self.trust_state_dir {
            DirCheck::Waived
        } else {
            DirCheck::Private
        }
    }
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Load the blocklist program and attach it to interfaces.
    ///
    /// The first attach loads the program, builds its filter from the store
    /// and pins program, maps and one link per interface; later attaches
    /// reuse the pinned program, so every interface shares one filter.
    /// Attaching again rebuilds the filter from the store (which repairs it
    /// after an interrupted update). Settings given here are stored and
    /// apply after a reboot too.
    Attach(AttachArgs),
    /// Detach from interfaces.
    ///
    /// When no interface is left, the program and its maps are unpinned
    /// (counters are lost) unless --keep-state. The entry store is never
    /// touched: attach again to get the same list back.
    Detach(DetachArgs),
    /// Add addresses or CIDRs to the blocklist.
    Add(AddArgs),
    /// Delete entries from the blocklist.
    ///
    /// Only exact entries are deleted (as `cfctl list` shows them); a
    /// filter key leaves the filter only when no remaining entry covers it.
    Del(DelArgs),
    /// Change or show the allowlist, which always wins over the blocklist.
    #[command(subcommand)]
    Allow(AllowCommand),
    /// Tell whether an address is listed, and by which entry.
    ///
    /// Warns when the filter matches an address no entry covers: a false
    /// positive of the approximate filter (packets from it are dropped too).
    /// Exit status, like grep's: 0 if an entry lists the address, 1 if none
    /// does, 2 on error.
    Check(CheckArgs),
    /// List the blocklist entries with their sources, comments, times added
    /// and expiries.
    List(ListArgs),
    /// Print the blocklist as a plain list that `cfctl import` reads back.
    Export(ListArgs),
    /// Apply changes read from standard input, one command a line, each
    /// answered on a line of its own.
    ///
    /// A line is an add, del, allow add, allow del or import command as it
    /// would follow `cfctl` (words quoted as a shell quotes them, no global
    /// options); blank lines and lines starting with # are skipped. Each
    /// command is applied on its own, all or nothing, and answered with
    /// `ok: WHAT CHANGED` or `error: line N: WHY` (with --json, an object
    /// a line); a failed command does not end the batch. The store is
    /// held only while lines are waiting, so other cfctl commands and the
    /// agent take turns with a batch that stays open (fail2ban's cfctl.py
    /// action keeps one). Exit status 1 if any command failed.
    Batch,
    /// Add every entry of a blocklist file, all or nothing.
    ///
    /// Any invalid line aborts the import with FILE:LINE: reason, and
    /// nothing changes (unless --skip-invalid). The entries belong to the
    /// source file:FILE (or --source); with --replace the file becomes all
    /// that source lists, swapped in atomically, and other sources' entries
    /// stay. On a device, the list always replaces what the device held.
    Import(ImportArgs),
    /// Show interfaces, settings, entries, filter load and expected
    /// false-positive rate.
    Status,
    /// Show packet and byte counters by outcome and family, or which
    /// sources, entries, addresses or interfaces the drops come from.
    ///
    /// With --by, cfctl reads the program's sampled drops for --seconds
    /// and shares the exact drop counters out among the entries covering
    /// each sampled address (an address two sources list counts for
    /// both). Figures are exact while the sampling keeps up with every
    /// drop, estimates otherwise.
    Stats(StatsArgs),
    /// Watch the sources, entries and addresses dropped most, refreshing
    /// in place (q or Ctrl-C ends it); --once prints one view and ends.
    Top(TopArgs),
    /// Write sampled dropped frames to a pcap file that tcpdump -r and
    /// Wireshark read.
    ///
    /// Each frame is cut at the sampling's frame bytes (cfctl sampling
    /// --frame-bytes, at most 128) and keeps its original length. Ends
    /// after --count frames or --seconds, or at Ctrl-C.
    Capture(CaptureArgs),
    /// Show or change how dropped packets are sampled for stats --by, top,
    /// capture and the agent's drop figures.
    ///
    /// A dropped packet is a candidate with probability 1/--one-in; each
    /// CPU then samples candidates up to --rate per second, in bursts of
    /// at most --burst, with the frame's first --frame-bytes bytes. Drops
    /// left unsampled are counted, so shares stay unbiased. --rate 0 turns
    /// sampling off; flags not given keep their value. With no flag, shows
    /// the settings and what the samplers did.
    Sampling(SamplingArgs),
    /// Drop listed packets (enforce) or only count them (monitor).
    Mode(ModeArgs),
    /// Drop malformed frames or pass them.
    #[command(long_about = malformed_about())]
    Malformed(MalformedArgs),
    /// Recompute the filter from the store and compare it with the live one.
    Verify,
    /// Rebuild the filter with another capacity and swap it in with no gap.
    ///
    /// A new program with the resized filter replaces the old one on every
    /// link atomically, and counts on from the old program's counters. A
    /// filter that sizes itself (`--capacity auto`, the default) resizes
    /// itself the same way when a change needs it.
    Resize(ResizeArgs),
    /// Save a device's filter to its flash as a new image (devices only).
    ///
    /// A device keeps every add, delete and clear in flash once it has
    /// answered it (a journal after its image, folded into a new image when
    /// full); a save folds the journal in at once.
    Save,
    /// Keep the blocklist current: refresh feeds, end expired listings and
    /// serve metrics, until SIGTERM.
    ///
    /// Each feed (an HTTP(S) URL or a file, refreshed on its own interval
    /// with conditional requests) is parsed like `cfctl import` and its list
    /// replaces what source feed:NAME lists, atomically; a failed refresh or
    /// a bad list keeps the last good one. Listings added with --timeout end
    /// on time. The agent holds the store only while it applies a change, so
    /// other cfctl commands run beside it. SIGHUP reloads the configuration
    /// (a bad one is refused and the old one kept). The XDP attachment stays
    /// when the agent stops. `cfctl status` shows the agent, its feeds and
    /// its LAPI.
    Agent(AgentArgs),
    /// Print the man page (cfctl.1), or write a page per command to a
    /// directory.
    Man(ManArgs),
    /// Print a shell completion script.
    Completions(CompletionsArgs),
}

impl Command {
    /// The command's name, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Attach(_) => "attach",
            Command::Detach(_) => "detach",
            Command::Add(_) => "add",
            Command::Del(_) => "del",
            Command::Allow(_) => "allow",
            Command::Check(_) => "check",
            Command::List(_) => "list",
            Command::Export(_) => "export",
            Command::Import(_) => "import",
            Command::Batch => "batch",
            Command::Status => "status",
            Command::Stats(_) => "stats",
            Command::Top(_) => "top",
            Command::Capture(_) => "capture",
            Command::Sampling(_) => "sampling",
            Command::Mode(_) => "mode",
            Command::Malformed(_) => "malformed",
            Command::Verify => "verify",
            Command::Resize(_) => "resize",
            Command::Save => "save",
            Command::Agent(_) => "agent",
            Command::Man(_) => "man",
            Command::Completions(_) => "completions",
        }
    }
}

/// The long help of `cfctl malformed`.
fn malformed_about() -> String {
    format!(
        "Drop malformed frames or pass them.\n\n\
         A frame is malformed when it ends before its IP header does, has an impossible IP \
         header (a wrong version, an IPv4 header length under 20), or has more than \
         {MAX_VLAN_TAGS} stacked VLAN tags. The kernel's IP layer drops every such frame but \
         the last kind, which it may deliver while the program cannot see its address: \
         dropping them (the default) is the safe choice. In monitor mode they pass, counted as \
         malformed."
    )
}

/// Parses a run-time setting by the name the ABI gives it
/// ([`Setting::name`]), and offers those names in help and completions.
fn setting<T: Setting + Clone + Send + Sync + 'static>() -> impl TypedValueParser<Value = T> {
    PossibleValuesParser::new(T::ALL.iter().map(|value| value.name()))
        .map(|name| T::from_name(&name).expect("one of the possible values"))
}

/// Parses a `--timeout`: a humantime duration of at least a second.
fn timeout(text: &str) -> Result<Duration, String> {
    cfctl::text::parse_duration(text, Duration::from_secs(1))
}

/// Parses how the XDP program runs on an interface: `native` or `skb`.
/// How a program is attached, as `attach --mode` names it: the XDP
/// hook's modes and the TC hook's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum HookMode {
    /// XDP in the driver.
    Native,
    /// XDP in the generic network stack.
    Skb,
    /// TC with a tcx link (Linux 6.6 or later).
    Tcx,
    /// TC as a filter on the clsact qdisc (any kernel).
    Clsact,
}

/// The hooks a program can run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Hook {
    /// The XDP hook: ingress only, before the kernel allocates anything;
    /// the fastest, and one program per interface.
    Xdp,
    /// The TC hook (a tcx link on Linux 6.6 or later, else a clsact
    /// filter): ingress or egress, shared with the other programs there.
    Tc,
}

/// Which packets the program sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Direction {
    /// Arriving packets, checked by source address (with `--match source`).
    Ingress,
    /// Leaving packets (TC hook only), checked by destination address:
    /// the host cannot reach a listed address.
    Egress,
}

impl From<Direction> for TrafficDirection {
    fn from(direction: Direction) -> Self {
        match direction {
            Direction::Ingress => TrafficDirection::Ingress,
            Direction::Egress => TrafficDirection::Egress,
        }
    }
}

#[derive(Debug, Args)]
pub struct AgentArgs {
    /// The configuration file (TOML: [metrics] listen, and [[feed]] tables
    /// with name, url or path, refresh, format, list, timeout, max_bytes,
    /// max_entries).
    #[arg(long, value_name = "FILE", default_value = paths::AGENT_CONFIG)]
    pub config: PathBuf,
    /// Refresh every feed and end the expired listings once, then exit.
    #[arg(long, conflicts_with = "check_config")]
    pub once: bool,
    /// Check the configuration, print what it sets up, and exit.
    #[arg(long)]
    pub check_config: bool,
    /// The levels logged: error, warn, info, debug or trace, or a tracing
    /// filter such as `info,cfctl=debug` [default: RUST_LOG, else info].
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// The log's lines: text, or one JSON object per event.
    #[arg(long, value_name = "FORMAT", value_parser = log_format(), default_value = "text")]
    pub log_format: LogFormat,
}

/// The log formats, by name.
fn log_format() -> impl TypedValueParser<Value = LogFormat> {
    PossibleValuesParser::new(LogFormat::ALL.map(|(name, _)| name)).map(|name| {
        LogFormat::ALL
            .into_iter()
            .find_map(|(known, format)| (known == name).then_some(format))
            .expect("one of the possible values")
    })
}

#[derive(Debug, Args)]
pub struct AttachArgs {
    /// Interfaces to attach to.
    #[arg(required = true, value_name = "IFACE")]
    pub interfaces: Vec<String>,
    /// The hook the program runs on.
    #[arg(long, value_enum, default_value = "xdp")]
    pub hook: Hook,
    /// Which packets it checks; egress needs `--hook tc`. One list serves
    /// both: a listed address can neither send to the host nor be reached
    /// from it (`--match destination` turns both around).
    #[arg(long, value_enum, default_value = "ingress")]
    pub direction: Direction,
    /// How the program runs. XDP: native (in the driver; fastest, the
    /// driver must support XDP) or skb (in the generic network stack; any
    /// interface) [default: native]. TC: tcx (a link, Linux 6.6 or later)
    /// or clsact (a filter on the clsact qdisc, first in its chain, on any
    /// kernel) [default: tcx where the kernel has it]
    #[arg(long, value_enum)]
    pub mode: Option<HookMode>,
    /// Keys the filter is sized for, fixed; or `auto`: sized for the
    /// store, growing and shrinking with it [stored; default auto]
    #[arg(long, value_name = "N|auto", value_parser = capacity_choice)]
    pub capacity: Option<CapacityChoice>,
    /// The most memory the filter's table may take (`64MiB`, `1GiB`), or
    /// `none`: a filter that sizes itself grows no further, a larger
    /// capacity is refused [stored; default none]
    #[arg(long, value_name = "SIZE|none", value_parser = memory_ceiling)]
    pub max_memory: Option<MemoryCeiling>,
    #[arg(long, value_name = "P", conflicts_with = "fingerprint_bits", help = stored(
        "Target false-positive rate per probe; picks the narrowest fingerprint that reaches it",
        format!("{}-bit", FilterSettings::default().shape.fingerprint_bits()),
    ))]
    pub fpr: Option<f64>,
    #[arg(long, value_name = "BITS", value_parser = fingerprint_shape(), help = stored(
        "Fingerprint width",
        FilterSettings::default().shape.fingerprint_bits().to_string(),
    ))]
    pub fingerprint_bits: Option<FilterShape>,
    #[arg(long = "match", value_parser = setting::<MatchAddress>(), help = stored(
        "Match packets' source or destination addresses",
        FilterSettings::default().match_address.name().to_owned(),
    ))]
    pub match_address: Option<MatchAddress>,
    #[arg(long, value_parser = setting::<Policy>(), help = stored(
        "Deny listed addresses, or allow only allowlisted ones",
        FilterSettings::default().policy.name().to_owned(),
    ))]
    pub policy: Option<Policy>,
    #[arg(long, value_parser = setting::<MalformedAction>(), help = stored(
        "Drop or pass malformed frames (see `cfctl malformed --help`)",
        FilterSettings::default().malformed.name().to_owned(),
    ))]
    pub malformed: Option<MalformedAction>,
    /// Wait this long (`60s`, `2m`) for an interface that does not exist
    /// yet, instead of refusing at once: for a service that may start
    /// before the interface's driver, or where no udev announces it (in a
    /// container), as the attach unit does
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub wait_for_interface: Option<Duration>,
}

impl AttachArgs {
    /// Where the program goes, from `--hook`, `--direction` and `--mode`.
    pub fn attach_point(&self) -> Result<AttachPoint, String> {
        match (self.hook, self.direction, self.mode) {
            (Hook::Xdp, _, Some(HookMode::Tcx | HookMode::Clsact)) => {
                Err("--mode tcx and clsact are the TC hook's: attach with `--hook tc`".to_owned())
            }
            (Hook::Xdp, Direction::Ingress, mode) => Ok(AttachPoint::Xdp(match mode {
                Some(HookMode::Skb) => AttachMode::Skb,
                _ => AttachMode::Native,
            })),
            (Hook::Xdp, Direction::Egress, _) => Err(
                "the XDP hook sees arriving packets only: attach with `--hook tc --direction \
                 egress`"
                    .to_owned(),
            ),
            (Hook::Tc, _, Some(HookMode::Native | HookMode::Skb)) => Err(
                "--mode native and skb are the XDP hook's; the TC hook's are tcx and clsact"
                    .to_owned(),
            ),
            (Hook::Tc, direction, Some(HookMode::Tcx)) => Ok(AttachPoint::Tc(direction.into())),
            (Hook::Tc, direction, Some(HookMode::Clsact)) => {
                Ok(AttachPoint::Clsact(direction.into()))
            }
            (Hook::Tc, direction, None) if tcx_supported() => Ok(AttachPoint::Tc(direction.into())),
            (Hook::Tc, direction, None) => Ok(AttachPoint::Clsact(direction.into())),
        }
    }
}

/// The help of an `attach` option whose value is stored, with its
/// default.
fn stored(what: &str, default: String) -> String {
    format!("{what} [stored; default {default}]")
}

/// Parses `--max-memory`: a size, or `none`.
fn memory_ceiling(text: &str) -> Result<MemoryCeiling, String> {
    match text {
        "none" => Ok(MemoryCeiling::Unbounded),
        size => size
            .parse::<bytesize::ByteSize>()
            .map(|size| MemoryCeiling::Bytes(size.as_u64()))
            .map_err(|_| format!("'{size}' is neither a size (such as 64MiB) nor 'none'")),
    }
}

/// Parses `--capacity`: a number of keys, or `auto`.
fn capacity_choice(text: &str) -> Result<CapacityChoice, String> {
    match text {
        "auto" => Ok(CapacityChoice::Auto),
        keys => keys
            .parse()
            .map(CapacityChoice::Keys)
            .map_err(|_| format!("'{keys}' is neither a number of keys nor 'auto'")),
    }
}

/// Parses a fingerprint width into its filter shape, and offers the
/// widths there are in help and completions.
fn fingerprint_shape() -> impl TypedValueParser<Value = FilterShape> {
    let widths: Vec<String> = FilterShape::ALL
        .iter()
        .map(|shape| shape.fingerprint_bits().to_string())
        .collect();
    PossibleValuesParser::new(widths).map(|bits| {
        bits.parse()
            .ok()
            .and_then(FilterShape::from_bits)
            .expect("one of the possible values")
    })
}

#[derive(Debug, Args)]
pub struct DetachArgs {
    /// Interfaces to detach from.
    #[arg(
        value_name = "IFACE",
        required_unless_present = "all",
        conflicts_with = "all"
    )]
    pub interfaces: Vec<String>,
    /// Detach from every interface.
    #[arg(long)]
    pub all: bool,
    /// Detach only the program that checks these packets [default: both
    /// directions]
    #[arg(long, value_enum)]
    pub direction: Option<Direction>,
    /// Keep the program and maps pinned when no interface is left.
    #[arg(long)]
    pub keep_state: bool,
}

#[derive(Debug, Args)]
pub struct AddArgs {
    /// Addresses (a host prefix) or CIDRs, IPv4 or IPv6; host bits must be
    /// zero. An IPv4-mapped IPv6 address (::ffff:198.18.0.1) is stored as
    /// the IPv4 address it maps.
    #[arg(required = true, value_name = "ADDR|CIDR")]
    pub entries: Vec<String>,
    /// A comment stored with the entries (at most 1024 bytes).
    #[arg(long, value_name = "TEXT")]
    pub comment: Option<String>,
    /// The source that lists them: an entry stays listed until every source
    /// that lists it drops it.
    #[arg(long, value_name = "NAME", default_value = CLI_SOURCE)]
    pub source: String,
    /// Unlist them after this long (`90s`, `1h30m`, `7d`); adding an entry
    /// again renews it.
    #[arg(long, value_name = "DURATION", value_parser = timeout)]
    pub timeout: Option<Duration>,
}

#[derive(Debug, Args)]
pub struct DelArgs {
    /// Entries to delete, exactly as listed.
    #[arg(required = true, value_name = "ADDR|CIDR")]
    pub entries: Vec<String>,
    /// Only this source's listing goes, and other sources keep theirs;
    /// without --source, every source's (a feed lists them again at its
    /// next refresh: allowlist an address to keep it passing).
    #[arg(long, value_name = "NAME")]
    pub source: Option<String>,
}

/// Allowlist commands.
#[derive(Debug, Subcommand)]
pub enum AllowCommand {
    /// Add addresses or CIDRs to the allowlist.
    Add(AddArgs),
    /// Delete entries from the allowlist.
    Del(DelArgs),
    /// List the allowlist.
    List(ListArgs),
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only the entries this source lists.
    #[arg(long, value_name = "NAME")]
    pub source: Option<String>,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The address to check.
    #[arg(value_name = "ADDR")]
    pub address: String,
    /// Print nothing; answer with the exit status only: 0 if an entry
    /// lists the address, 1 if none does, 2 on error.
    #[arg(short, long)]
    pub quiet: bool,
}

/// A blocklist file format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    /// Detect from the file name and its first lines.
    Auto,
    /// One address or CIDR per line; `#` comments anywhere.
    Plain,
    /// FireHOL .netset/.ipset: `#` header lines, bare entries.
    Netset,
    /// Spamhaus DROP/DROPv6: `CIDR ; SBLnnn`, `;` comments.
    Spamhaus,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The list to import, or - for standard input.
    #[arg(value_name = "FILE|-")]
    pub file: PathBuf,
    /// The file's format.
    #[arg(long, value_enum, default_value_t = FormatArg::Auto)]
    pub format: FormatArg,
    /// Make the file the whole of its source's entries, swapped in
    /// atomically (the source's entries not in it are deleted; other
    /// sources' entries stay).
    #[arg(long)]
    pub replace: bool,
    /// Skip invalid lines (each is reported) instead of aborting.
    #[arg(long)]
    pub skip_invalid: bool,
    /// The source the entries belong to [default: file:FILE]; with
    /// --replace, only this source's entries are replaced.
    #[arg(long, value_name = "NAME")]
    pub source: Option<String>,
    /// Unlist the entries after this long (`90s`, `1h30m`, `7d`).
    #[arg(long, value_name = "DURATION", value_parser = timeout)]
    pub timeout: Option<Duration>,
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Print rates every SECONDS (0.1 to 86400) until interrupted.
    #[arg(long, value_name = "SECONDS", value_parser = watch_interval, conflicts_with = "by")]
    pub watch: Option<Duration>,
    /// Show the drops by source, entry, address or interface.
    #[arg(long, value_enum, value_name = "WHAT")]
    pub by: Option<DropsBy>,
    /// With --by: how long to read the sampled drops (0.1 to 86400).
    #[arg(long, value_name = "SECONDS", value_parser = watch_interval, default_value = "10", requires = "by")]
    pub seconds: Duration,
    /// With --by: end once this many sampled drops are attributed (or
    /// --seconds have passed).
    #[arg(long, value_name = "N", requires = "by")]
    pub count: Option<u64>,
    /// With --by: the most rows shown.
    #[arg(long, value_name = "N", default_value_t = 20, requires = "by")]
    pub limit: usize,
}

/// What `stats --by` groups the drops by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DropsBy {
    /// The source of the entries covering the address.
    Source,
    /// The blocklist entry.
    Entry,
    /// The dropped address.
    Address,
    /// The interface the packet arrived on.
    Interface,
}

#[derive(Debug, Args)]
pub struct TopArgs {
    /// Print one view (after --interval) and end; with --json, as JSON.
    #[arg(long)]
    pub once: bool,
    /// Refresh every SECONDS (0.1 to 86400).
    #[arg(long, value_name = "SECONDS", value_parser = watch_interval, default_value = "2")]
    pub interval: Duration,
    /// The most rows of each table.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub limit: usize,
}

#[derive(Debug, Args)]
pub struct CaptureArgs {
    /// Capture dropped frames (and, in monitor mode, those enforce mode
    /// drops): the only kind there is.
    #[arg(long, required = true)]
    pub dropped: bool,
    /// The pcap file to write (`-` for standard output).
    #[arg(short = 'w', long = "write", value_name = "FILE")]
    pub file: PathBuf,
    /// End after this many frames.
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    /// End after this long (0.1 to 86400 seconds).
    #[arg(long, value_name = "SECONDS", value_parser = watch_interval)]
    pub seconds: Option<Duration>,
}

/// The shortest and longest `stats --watch` intervals, in seconds.
const WATCH_SECONDS: std::ops::RangeInclusive<f64> = 0.1..=86_400.0;

/// Parses a `--watch` interval within [`WATCH_SECONDS`].
fn watch_interval(text: &str) -> Result<Duration, String> {
    let seconds: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("'{text}' is not a number of seconds"))?;
    if !WATCH_SECONDS.contains(&seconds) {
        return Err(format!(
            "the interval must be {} to {} seconds",
            WATCH_SECONDS.start(),
            WATCH_SECONDS.end()
        ));
    }
    Ok(Duration::from_secs_f64(seconds))
}

#[derive(Debug, Args)]
pub struct SamplingArgs {
    /// Samples per second and CPU at most (0: off; default 1000).
    #[arg(long, value_name = "N")]
    pub rate: Option<u32>,
    /// Samples one CPU takes at once at most (default 1000).
    #[arg(long, value_name = "N")]
    pub burst: Option<u32>,
    /// Sample one drop in N at random (default 1: every drop).
    #[arg(long, value_name = "N")]
    pub one_in: Option<u32>,
    /// Bytes of each sampled frame kept for capture, 0 to 128 (default
    /// 128).
    #[arg(long, value_name = "N")]
    pub frame_bytes: Option<u32>,
}

impl SamplingArgs {
    /// `current` with the flags given.
    pub fn applied_to(&self, current: Sampling) -> Sampling {
        Sampling {
            rate: self.rate.unwrap_or(current.rate),
            burst: self.burst.unwrap_or(current.burst),
            one_in: self.one_in.unwrap_or(current.one_in),
            frame_bytes: self.frame_bytes.unwrap_or(current.frame_bytes),
        }
    }

    /// Whether any flag is given.
    pub fn changes(&self) -> bool {
        self.rate.is_some()
            || self.burst.is_some()
            || self.one_in.is_some()
            || self.frame_bytes.is_some()
    }
}

#[derive(Debug, Args)]
pub struct ModeArgs {
    /// enforce (drop listed packets) or monitor (pass them and count them
    /// as would-drop).
    #[arg(value_parser = setting::<Mode>())]
    pub mode: Mode,
}

#[derive(Debug, Args)]
pub struct MalformedArgs {
    /// drop (in enforce mode) or pass.
    #[arg(value_parser = setting::<MalformedAction>())]
    pub action: MalformedAction,
}

#[derive(Debug, Args)]
pub struct ResizeArgs {
    /// Keys the new filter is sized for, fixed from then on; or `auto`:
    /// sized for the store, growing and shrinking with it.
    #[arg(long, value_name = "N|auto", required = true, value_parser = capacity_choice)]
    pub capacity: CapacityChoice,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write cfctl.1 and one page per command (cfctl-attach.1, ...) here
    /// instead of printing cfctl.1.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}
