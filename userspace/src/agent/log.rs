//! The agent's log: one line per event on standard error, every field and
//! message escaped as `cfctl status` escapes text from outside
//! ([`crate::text::Escaped`]): a feed line, a LAPI's scenario or an error
//! that quotes them can neither move the cursor, recolour the terminal nor
//! start a line that looks like another event.

use std::fmt::{self, Debug, Write as _};
use std::io::IsTerminal;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FormatFields, MakeWriter};

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

/// A subscriber that writes the agent's log to `writer`, escaped, in
/// colour only where `ansi` says so.
pub fn subscriber<W>(writer: W, ansi: bool) -> impl tracing::Subscriber + Send + Sync
where
    W: for<'writer> MakeWriter<'writer> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .with_writer(writer)
        .with_target(false)
        .with_ansi(ansi)
        .fmt_fields(EscapedFields)
        .finish()
}

/// Sends the agent's log to standard error (in colour only on a terminal,
/// not in journald or a log file).
pub fn init() {
    let ansi = std::io::stderr().is_terminal();
    // A second initialisation (none happens) would keep the first.
    let _ = tracing::subscriber::set_global_default(subscriber(std::io::stderr, ansi));
}
