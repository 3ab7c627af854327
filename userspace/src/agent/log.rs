//! The agent's log: one line per event on standard error, as text or as
//! JSON objects ([`LogFormat`]), at the levels `--log-level` or else
//! `RUST_LOG` gives (a `tracing` filter: `info` unless set). Text has every
//! field and message escaped as `cfctl status` escapes text from outside
//! ([`crate::text::Escaped`]): a feed line, a LAPI's scenario or an error
//! that quotes them can neither move the cursor, recolour the terminal nor
//! start a line that looks like another event. Where standard error is the
//! journal (systemd's `JOURNAL_STREAM` names it), each text line starts
//! with its syslog priority (`<3>` error, `<4>` warning, `<6>` info, `<7>`
//! debug and trace, as sd-daemon(3) describes), which the journal takes
//! as the line's priority, and carries no time of its own.

use std::fmt::{self, Debug, Write as _};
use std::io::IsTerminal;
use std::os::unix::fs::MetadataExt;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

use crate::text::Escaped;

/// Formats an event's fields escaped: the message as it is, the others as
/// `name=value`, separated by spaces.
#[derive(Clone, Copy, Debug, Default)]
pub struct EscapedFields;

impl<'writer> FormatFields<'writer> for EscapedFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = Escaping {
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

/// Writes each field it visits, escaped.
struct Escaping<'writer> {
    writer: Writer<'writer>,
    first: bool,
    result: fmt::Result,
}

impl Escaping<'_> {
    fn write(&mut self, field: &Field, value: &str) {
        if self.result.is_err() {
            return;
        }
        let separator = if std::mem::take(&mut self.first) {
            ""
        } else {
            " "
        };
        self.result = match field.name() {
            "message" => write!(self.writer, "{separator}{}", Escaped(value)),
            name => write!(self.writer, "{separator}{name}={}", Escaped(value)),
        };
    }
}

impl Visit for Escaping<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.write(field, value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = write!(text, "{value:?}");
        self.write(field, &text);
    }
}

/// How the log's lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// One line of text per event, escaped.
    #[default]
    Text,
    /// One JSON object per event (`timestamp`, `level`, `fields`).
    Json,
}

impl LogFormat {
    /// Every format, by name.
    pub const ALL: [(&'static str, LogFormat); 2] = [("text", Self::Text), ("json", Self::Json)];
}

/// Why the log cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// `--log-level` or `RUST_LOG` is not a filter.
    #[error("{setting} '{value}' is not a log level or tracing filter (error, warn, info, debug, trace; or e.g. cfctl=debug): {reason}")]
    Filter {
        /// `--log-level` or `RUST_LOG`.
        setting: &'static str,
        /// What it said.
        value: String,
        /// Why it is not a filter.
        reason: String,
    },
}

/// The filter `level` (from `--log-level`) or else `RUST_LOG` gives, or
/// `info`.
pub fn filter(level: Option<&str>) -> Result<EnvFilter, LogError> {
    let (setting, value) = match level {
        Some(level) => ("--log-level", level.to_owned()),
        None => match std::env::var(EnvFilter::DEFAULT_ENV) {
            Ok(value) if !value.trim().is_empty() => ("RUST_LOG", value),
            _ => ("the default", "info".to_owned()),
        },
    };
    EnvFilter::try_new(&value).map_err(|error| LogError::Filter {
        setting,
        value: crate::text::excerpt(&value),
        reason: error.to_string(),
    })
}

/// The syslog priority of `level`, as the journal reads it from a line's
/// start.
fn priority(level: Level) -> u8 {
    match level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        Level::DEBUG | Level::TRACE => 7,
    }
}

/// An event format that starts each line with the event's priority.
struct JournalPriority<F>(F);

impl<S, N, F> FormatEvent<S, N> for JournalPriority<F>
where
    S: Subscriber + for<'span> LookupSpan<'span>,
    N: for<'writer> FormatFields<'writer> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        context: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        write!(writer, "<{}>", priority(*event.metadata().level()))?;
        self.0.format_event(context, writer, event)
    }
}

/// Where the log goes, and how.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Destination {
    /// The lines' format.
    pub format: LogFormat,
    /// In colour (a terminal).
    pub ansi: bool,
    /// Into the journal: priorities at the lines' start, no time.
    pub journal: bool,
}

/// A subscriber that writes the agent's log to `writer` as `destination`
/// says, at the levels `filter` lets through.
pub fn subscriber<W>(
    writer: W,
    destination: Destination,
    filter: EnvFilter,
) -> Box<dyn Subscriber + Send + Sync>
where
    W: for<'writer> MakeWriter<'writer> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt()
        .with_writer(writer)
        .with_env_filter(filter)
        .with_target(false);
    match destination {
        Destination {
            format: LogFormat::Json,
            ..
        } => Box::new(builder.json().flatten_event(false).finish()),
        Destination { journal: true, .. } => {
            let format = tracing_subscriber::fmt::format()
                .with_target(false)
                .with_ansi(false)
                .without_time();
            Box::new(
                builder
                    .fmt_fields(EscapedFields)
                    .event_format(JournalPriority(format))
                    .finish(),
            )
        }
        Destination { ansi, .. } => {
            Box::new(builder.with_ansi(ansi).fmt_fields(EscapedFields).finish())
        }
    }
}

/// Whether standard error is the journal's stream: `JOURNAL_STREAM`
/// (`DEVICE:INODE`, set by systemd) names the file standard error is.
fn stderr_is_journal() -> bool {
    let Ok(stream) = std::env::var("JOURNAL_STREAM") else {
        return false;
    };
    let Ok(stderr) = std::fs::metadata("/proc/self/fd/2") else {
        return false;
    };
    stream == format!("{}:{}", stderr.dev(), stderr.ino())
}

/// Sends the agent's log to standard error in `format` at the levels
/// `level` (or `RUST_LOG`) lets through: in colour only on a terminal;
/// with priorities where it is the journal.
pub fn init(level: Option<&str>, format: LogFormat) -> Result<(), LogError> {
    let destination = Destination {
        format,
        ansi: std::io::stderr().is_terminal(),
        journal: stderr_is_journal(),
    };
    let subscriber = subscriber(std::io::stderr, destination, filter(level)?);
    // A second initialisation (none happens) would keep the first.
    let _ = tracing::subscriber::set_global_default(subscriber);
    Ok(())
}
