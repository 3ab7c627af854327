//! Parsing blocklist files into CIDR entries.
//!
//! Three formats, IPv4 and IPv6 alike, one address or CIDR per line:
//!
//! * [`ListFormat::Plain`]: `#` starts a comment anywhere on a line; the text
//!   of a comment that follows an address becomes that entry's comment.
//! * [`ListFormat::Netset`]: FireHOL `.netset` / `.ipset` files: whole-line
//!   `#` comments (the header), and nothing but the address on entry lines.
//! * [`ListFormat::Spamhaus`]: Spamhaus DROP / DROPv6: `;` comments, entry
//!   lines `CIDR ; SBLnnn` whose comment (the SBL id) is kept.
//!
//! [`ListFormat::detect`] chooses one from the file name and contents.
//! Addresses and CIDRs are read by the `ipnet` crate; a bare address is a
//! host prefix (`/32` or `/128`).
//!
//! # Host bits
//!
//! A CIDR with bits set beyond its prefix (`10.1.2.3/8`) is rejected, with
//! the network it would have meant in the message. `ipset` silently
//! normalises such a line to `10.0.0.0/8`, but in a blocklist a stray prefix
//! length more often means a typo that would block 16 million addresses
//! than a network written loosely, so cfctl asks instead of guessing.
//!
//! # IPv4-mapped IPv6 and whole families
//!
//! An IPv4-mapped IPv6 address or prefix (`::ffff:198.18.0.1`, or
//! `::ffff:198.18.0.0/112`) names IPv4 packets, which never carry it: it is
//! read as the IPv4 network it maps (`198.18.0.1/32`, `198.18.0.0/16`). A
//! prefix of length 0 (`0.0.0.0/0`, `::/0`) parses like any other; the
//! control plane asks for `--force` before it lists a whole family.
//!
//! # Errors and bounds
//!
//! Parsing a file is all or nothing: any invalid line makes the whole parse
//! fail with `file:line: reason: 'text'` (and how many more lines are bad),
//! unless [`ParseOptions::skip_invalid`] is set, in which case bad lines are
//! returned as warnings next to the good entries. The quoted text is cut
//! ([`crate::text::excerpt`]); cfctl escapes it where it prints it. The
//! input is read one line at a time, as a stream (standard input, pipes,
//! devices, files over 256 MiB) or from memory (smaller files, feed
//! bodies; from 1 MiB on in two halves at once, with the result of one
//! parse of the whole): a line longer than [`MAX_LINE_BYTES`] (no blocklist
//! has one; `/dev/zero` is one endless line) or more than
//! [`ParseOptions::max_entries`] entries end the parse at once with an
//! error, whatever `skip_invalid` says, and comments are bounded by
//! [`crate::text::check_comment`]. Comments are read back from cfctl's
//! export escaping ([`crate::text::unescape`]).
//!
//! This module does not deduplicate or merge entries (the store keeps the
//! set), does not resolve host names and does not read IP ranges
//! (`a.b.c.d-e.f.g.h`).

mod stream;

use std::fmt;
use std::io::{self, BufRead, BufReader, Read};
use std::net::IpAddr;
use std::path::Path;

use ipnet::{IpNet, Ipv4Net};

use crate::text::CommentProblem;
use stream::{LineReader, ListParser};

/// Lines [`ListFormat::detect`] looks at.
pub const DETECTION_LINES: usize = 64;
/// The longest line a list may have, in bytes (its line break excluded):
/// room for every line `cfctl export` writes (the longest network, ` # `,
/// the longest escaped comment), so that an export always imports.
pub const MAX_LINE_BYTES: usize = 8192;
const _: () = assert!(
    MAX_LINE_BYTES
        >= "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128 # ".len()
            + crate::text::MAX_ESCAPED_COMMENT_BYTES
);
/// The most entries a list may have unless [`ParseOptions::max_entries`]
/// says otherwise (about 2 GB of parsed entries).
pub const MAX_ENTRIES: usize = 1 << 25;
/// The most invalid lines kept for reporting; the rest are only counted.
pub const MAX_REPORTED_LINES: usize = 100;

/// The format of a blocklist file; see the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListFormat {
    /// One address or CIDR per line, `#` comments anywhere.
    Plain,
    /// FireHOL `.netset` / `.ipset`: `#` header lines, bare entries.
    Netset,
    /// Spamhaus DROP / DROPv6: `CIDR ; SBLnnn`, `;` comments.
    Spamhaus,
}

impl ListFormat {
    /// Every format, for help texts and errors.
    pub const ALL: [ListFormat; 3] = [ListFormat::Plain, ListFormat::Netset, ListFormat::Spamhaus];

    /// The format's name as given on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            ListFormat::Plain => "plain",
            ListFormat::Netset => "netset",
            ListFormat::Spamhaus => "spamhaus",
        }
    }

    /// The format of a file named `source_name` from its first
    /// [`DETECTION_LINES`] non-blank lines: Spamhaus if one starts with `;`
    /// or is an entry with a `;` comment (a `;` after a `#` is part of a
    /// plain comment); FireHOL's netset if the name ends
    /// in `.netset` or `.ipset` or a `#` comment mentions FireHOL; plain
    /// otherwise.
    pub fn detect(source_name: &str, first_lines: &str) -> ListFormat {
        let lines = first_lines
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty())
            .take(DETECTION_LINES);
        let mut firehol_header = false;
        for line in lines {
            let before_hash = line.split('#').next().unwrap_or_default();
            if line.starts_with(';') || before_hash.contains(';') {
                return ListFormat::Spamhaus;
            }
            firehol_header |= line.starts_with('#') && line.contains("FireHOL");
        }
        let netset_name = [".netset", ".ipset"]
            .iter()
            .any(|extension| source_name.ends_with(extension));
        if netset_name || firehol_header {
            ListFormat::Netset
        } else {
            ListFormat::Plain
        }
    }

    const fn comment_marker(self) -> char {
        match self {
            ListFormat::Plain | ListFormat::Netset => '#',
            ListFormat::Spamhaus => ';',
        }
    }
}

impl fmt::Display for ListFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for ListFormat {
    type Err = UnknownFormat;

    /// Accepts the names of [`ListFormat::ALL`], and `ipset` for netset.
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        match name {
            "ipset" => Ok(ListFormat::Netset),
            _ => ListFormat::ALL
                .into_iter()
                .find(|format| format.name() == name)
                .ok_or_else(|| UnknownFormat(name.to_owned())),
        }
    }
}

/// A format name that [`ListFormat::from_str`](std::str::FromStr) does not know.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown list format '{0}' (expected plain, netset or spamhaus)")]
pub struct UnknownFormat(pub String);

/// How to parse a list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParseOptions {
    /// The format, or `None` to [detect](ListFormat::detect) it.
    pub format: Option<ListFormat>,
    /// Return invalid lines as warnings instead of failing.
    pub skip_invalid: bool,
    /// The most entries the list may have.
    pub max_entries: usize,
}

impl Default for ParseOptions {
    /// Detect the format, fail on invalid lines, at most [`MAX_ENTRIES`].
    fn default() -> Self {
        Self {
            format: None,
            skip_invalid: false,
            max_entries: MAX_ENTRIES,
        }
    }
}

/// One entry of a list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedNet {
    /// The network (host bits are zero).
    pub net: IpNet,
    /// The comment on the entry's line (a Spamhaus SBL id), if any.
    pub comment: Option<String>,
    /// The 1-based line number.
    pub line: usize,
}

/// A parsed list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedList {
    /// The file name (or `-` for standard input) as given.
    pub source: String,
    /// The format it was parsed as.
    pub format: ListFormat,
    /// Its entries, in file order (duplicates kept).
    pub entries: Vec<ListedNet>,
    /// Lines skipped because [`ParseOptions::skip_invalid`] was set: the
    /// first [`MAX_REPORTED_LINES`].
    pub skipped: Vec<LineError>,
    /// How many lines were skipped in all.
    pub skipped_count: usize,
}

/// Why a line is not an entry.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LineProblem {
    /// Neither an address nor a CIDR.
    #[error("not an IP address or CIDR")]
    NotANetwork,
    /// A CIDR whose prefix length is too long for its family.
    #[error("prefix length out of range (at most /32 for IPv4, /128 for IPv6)")]
    PrefixTooLong,
    /// A CIDR with bits set beyond its prefix.
    #[error("host bits are set beyond the prefix length (the network is {network})")]
    HostBitsSet {
        /// The network the CIDR lies in.
        network: IpNet,
    },
    /// Text after the address where the format allows none.
    #[error("unexpected text after the address (a {format} list has one address per line)")]
    TrailingText {
        /// The format being parsed.
        format: ListFormat,
    },
    /// Bytes that are not UTF-8.
    #[error("the line is not valid UTF-8")]
    NotUtf8,
    /// The comment cannot be stored.
    #[error(transparent)]
    Comment(#[from] CommentProblem),
}

/// An invalid line: `file:line: reason: 'text'`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{source_name}:{line}: {problem}: '{text}'")]
pub struct LineError {
    /// The file name as given.
    pub source_name: String,
    /// The 1-based line number.
    pub line: usize,
    /// The offending text: the line, trimmed, lossily decoded if not UTF-8,
    /// and cut by [`crate::text::excerpt`].
    pub text: String,
    /// What is wrong with it.
    pub problem: LineProblem,
}

/// A list that could not be parsed.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    /// The file could not be read.
    #[error("{source_name}: cannot read the list: {error}")]
    Read {
        /// The file name as given.
        source_name: String,
        /// The I/O error.
        #[source]
        error: io::Error,
    },
    /// At least one line is invalid (and `skip_invalid` was not set).
    #[error("{}{}", first_invalid(.errors), more_invalid(*.count))]
    InvalidLines {
        /// The first [`MAX_REPORTED_LINES`] invalid lines.
        errors: Vec<LineError>,
        /// How many lines are invalid in all.
        count: usize,
    },
    /// A line longer than [`MAX_LINE_BYTES`]: not a blocklist.
    #[error(
        "{source_name}:{line}: the line is longer than {MAX_LINE_BYTES} bytes, which no \
         blocklist has (is this a list of addresses?): '{text}'"
    )]
    LineTooLong {
        /// The file name as given.
        source_name: String,
        /// The 1-based line number.
        line: usize,
        /// The start of the line, cut by [`crate::text::excerpt`].
        text: String,
    },
    /// More entries than [`ParseOptions::max_entries`].
    #[error("{source_name}:{line}: the list has more than {max} entries, the most accepted")]
    TooManyEntries {
        /// The file name as given.
        source_name: String,
        /// The line of the first entry too many.
        line: usize,
        /// The limit.
        max: usize,
    },
}

impl ListError {
    /// The line at which the error ended the list (0 for one with no
    /// line: a read error, invalid lines).
    fn line(&self) -> usize {
        match self {
            ListError::LineTooLong { line, .. } | ListError::TooManyEntries { line, .. } => *line,
            ListError::Read { .. } | ListError::InvalidLines { .. } => 0,
        }
    }

    /// The error of a list read from line `lines + 1` on, as the error of
    /// the whole.
    fn shifted(mut self, lines: usize) -> Self {
        if let ListError::LineTooLong { line, .. } | ListError::TooManyEntries { line, .. } =
            &mut self
        {
            *line += lines;
        }
        self
    }
}

fn first_invalid(errors: &[LineError]) -> String {
    errors.first().map(ToString::to_string).unwrap_or_default()
}

fn more_invalid(count: usize) -> String {
    match count {
        0 | 1 => String::new(),
        2 => " (and 1 more invalid line)".to_owned(),
        count => format!(" (and {} more invalid lines)", count - 1),
    }
}

/// Parses one address or CIDR, as given on a command line: a bare address
/// is a host prefix; host bits must be zero; an IPv4-mapped IPv6 network is
/// the IPv4 network it maps.
pub fn parse_net(text: &str) -> Result<IpNet, LineProblem> {
    let text = text.trim();
    // Most lines of a large list are bare addresses: read those as one,
    // without a CIDR parse that would fail first.
    let parsed = match text.contains('/') {
        true => text.parse::<IpNet>().ok(),
        false => text.parse::<IpAddr>().ok().map(IpNet::from),
    };
    let Some(net) = parsed else {
        return Err(cidr_problem(text));
    };
    if net.addr() != net.network() {
        return Err(LineProblem::HostBitsSet {
            network: net.trunc(),
        });
    }
    Ok(unmap_ipv4(net))
}

/// Parses a network whose host bits may be set, as a LAPI's `Range`
/// decision names one (`198.18.0.7/24` is `198.18.0.0/24`), unmapping an
/// IPv4-mapped one like [`parse_net`].
pub fn parse_range(text: &str) -> Option<IpNet> {
    text.trim()
        .parse::<IpNet>()
        .ok()
        .map(|net| unmap_ipv4(net.trunc()))
}

/// Parses an address given alone (`cfctl check`, a LAPI's `Ip`
/// decision): an IPv4-mapped IPv6 address is the IPv4 address it maps.
pub fn parse_address(text: &str) -> Option<IpAddr> {
    text.trim()
        .parse::<IpAddr>()
        .ok()
        .map(|address| address.to_canonical())
}

/// The IPv4 network an IPv4-mapped IPv6 network (`::ffff:a.b.c.d/n`, host
/// bits zero) stands for; other networks as they are.
fn unmap_ipv4(net: IpNet) -> IpNet {
    let IpNet::V6(v6) = net else {
        return net;
    };
    let Some(address) = v6.network().to_ipv4_mapped() else {
        return net;
    };
    // With its host bits zero, a network whose address is mapped is at
    // least /96 long, and at most 32 bits longer.
    v6.prefix_len()
        .checked_sub(96)
        .and_then(|len| Ipv4Net::new(address, len).ok())
        .map_or(net, IpNet::V4)
}

/// The line of a plain list that `cfctl export` writes for `net` and its
/// `comment`: the comment escaped ([`crate::text::escape_comment`]), so
/// that this module reads back exactly `net` and `comment`.
pub fn export_line(net: &IpNet, comment: Option<&str>) -> String {
    match comment {
        Some(comment) => format!("{net} # {}", crate::text::escape_comment(comment)),
        None => net.to_string(),
    }
}

/// Distinguishes a bad prefix length from text that is no network at all.
fn cidr_problem(text: &str) -> LineProblem {
    let prefix_too_long = text.split_once('/').is_some_and(|(address, len)| {
        let max = match address.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V4(_)) => 32,
            Ok(std::net::IpAddr::V6(_)) => 128,
            Err(_) => return false,
        };
        len.parse::<u32>().is_ok_and(|len| len > max)
    });
    if prefix_too_long {
        LineProblem::PrefixTooLong
    } else {
        LineProblem::NotANetwork
    }
}

/// Regular files up to this size are read whole and parsed as bytes (in
/// halves, when long); larger ones, and pipes and devices, as a stream.
const MAX_FILE_IN_MEMORY: u64 = 1 << 28;

/// Parses the list in the file at `path`, named by its path as given.
pub fn parse_file(path: &Path, options: ParseOptions) -> Result<ParsedList, ListError> {
    let source_name = path.display().to_string();
    let read_error = |error| ListError::Read {
        source_name: source_name.clone(),
        error,
    };
    let mut file = std::fs::File::open(path).map_err(read_error)?;
    let regular = file
        .metadata()
        .is_ok_and(|metadata| metadata.is_file() && metadata.len() <= MAX_FILE_IN_MEMORY);
    if !regular {
        return parse_reader(BufReader::new(file), &source_name, options);
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(read_error)?;
    parse_bytes(&bytes, &source_name, options)
}

/// Lists held in memory at least this long are parsed in two halves at
/// once (a feed of 10^6 addresses is 14 MB): half the wait on two cores.
const PARALLEL_PARSE_BYTES: usize = 1 << 20;

/// Parses a list held in memory: a long one in two halves at once, split
/// at the line end after its middle, with the result (entries, invalid
/// lines, the first error that ends the list) of one parse of the whole.
pub fn parse_bytes(
    bytes: &[u8],
    source_name: &str,
    options: ParseOptions,
) -> Result<ParsedList, ListError> {
    if bytes.len() < PARALLEL_PARSE_BYTES {
        return parse_reader(bytes, source_name, options);
    }
    parse_in_halves(bytes, middle_line_start(bytes), source_name, options)
}

/// Where [`parse_bytes`] splits a long list: the start of the first line
/// after its middle (its end, when no line starts there).
pub fn middle_line_start(bytes: &[u8]) -> usize {
    let middle = bytes.len() / 2;
    bytes[middle..]
        .iter()
        .position(|&byte| byte == b'\n')
        .map_or(bytes.len(), |at| middle + at + 1)
}

/// Parses a list held in memory in two halves at once, split at `at`,
/// with the result of one parse of the whole ([`parse_reader`]). A split
/// that does not start a line, or leaves a half empty, parses the whole
/// on one thread.
pub fn parse_in_halves(
    bytes: &[u8],
    at: usize,
    source_name: &str,
    options: ParseOptions,
) -> Result<ParsedList, ListError> {
    let starts_a_line = at > 0 && at < bytes.len() && bytes[at - 1] == b'\n';
    if !starts_a_line {
        return parse_reader(bytes, source_name, options);
    }
    let format = match options.format {
        Some(format) => format,
        None => {
            // A parse that detects the format reads the first lines before
            // it parses any: an error among them comes first.
            let mut lines = LineReader::new(source_name);
            match detect_format(&mut &*bytes, source_name, &mut lines) {
                (_, _, Some(error)) => return Err(error),
                (detected, _, None) => detected,
            }
        }
    };
    let (first, second) = bytes.split_at(at);
    // The halves do not know each other's entries: the bound applies to
    // the whole once they are joined.
    let halves = ParseOptions {
        format: Some(format),
        max_entries: usize::MAX,
        ..options
    };
    let (first, second) = std::thread::scope(|scope| {
        let second = scope.spawn(move || read_lines(second, source_name, halves));
        (read_lines(first, source_name, halves), second.join())
    });
    let second = second.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    let (offset, first_stop) = (first.lines, first.stopped);
    let list = first.parser.followed_by(second.parser, offset);
    // Whichever would have ended one parse of the whole first: an error of
    // the first half, the entry bound, an error of the second half.
    let over_bound =
        list.entries()
            .get(options.max_entries)
            .map(|entry| ListError::TooManyEntries {
                source_name: source_name.to_owned(),
                line: entry.line,
                max: options.max_entries,
            });
    let second_stop = second.stopped.map(|error| error.shifted(offset));
    match [first_stop, over_bound, second_stop]
        .into_iter()
        .flatten()
        .min_by_key(ListError::line)
    {
        Some(error) => Err(error),
        None => list.finish(),
    }
}

/// Parses a list read from `reader` one line at a time; `source_name`
/// names it in errors and entries (`-` for standard input).
pub fn parse_reader(
    reader: impl BufRead,
    source_name: &str,
    options: ParseOptions,
) -> Result<ParsedList, ListError> {
    let read = read_lines(reader, source_name, options);
    match read.stopped {
        Some(error) => Err(error),
        None => read.parser.finish(),
    }
}

/// The lines of a list parsed up to its end or the error that ends it.
struct ReadLines<'a> {
    parser: ListParser<'a>,
    /// How many lines were read.
    lines: usize,
    /// The error that ended the list early, if one did.
    stopped: Option<ListError>,
}

/// Reads and parses the lines of `reader` (see [`parse_reader`]).
fn read_lines<'a>(
    mut reader: impl BufRead,
    source_name: &'a str,
    options: ParseOptions,
) -> ReadLines<'a> {
    let mut lines = LineReader::new(source_name);
    let (format, head, mut stopped) = match options.format {
        Some(format) => (format, Vec::new(), None),
        None => detect_format(&mut reader, source_name, &mut lines),
    };
    let mut parser = ListParser::new(source_name, format, options);
    let mut line = Vec::new();
    if stopped.is_none() {
        let mut parse = || {
            for (index, raw) in head.iter().enumerate() {
                parser.line(index + 1, raw)?;
            }
            while lines.next(&mut reader, &mut line)? {
                parser.line(lines.number, &line)?;
            }
            Ok(())
        };
        stopped = parse().err();
    }
    ReadLines {
        parser,
        lines: lines.number,
        stopped,
    }
}

/// The format [`ListFormat::detect`] finds in the first
/// [`DETECTION_LINES`] lines `lines` reads from `reader`, those lines, and
/// the error that ended the list among them, if one did.
fn detect_format(
    reader: &mut impl BufRead,
    source_name: &str,
    lines: &mut LineReader<'_>,
) -> (ListFormat, Vec<Vec<u8>>, Option<ListError>) {
    let mut head = Vec::new();
    let mut line = Vec::new();
    let mut stopped = None;
    while head.len() < DETECTION_LINES {
        match lines.next(reader, &mut line) {
            Ok(true) => head.push(std::mem::take(&mut line)),
            Ok(false) => break,
            Err(error) => {
                stopped = Some(error);
                break;
            }
        }
    }
    let text: Vec<_> = head
        .iter()
        .map(|line| String::from_utf8_lossy(line))
        .collect();
    let format = ListFormat::detect(source_name, &text.join("\n"));
    (format, head, stopped)
}

#[cfg(test)]
mod tests;
