//! Reading a list as a stream: one line at a time, each at most
//! [`MAX_LINE_BYTES`] long ([`LineReader`]), parsed into entries and
//! invalid lines as it comes, with the entry and report bounds
//! ([`ListParser`]).

use std::borrow::Cow;
use std::io::{BufRead, Read};

use ipnet::IpNet;

use super::{
    parse_net, LineError, LineProblem, ListError, ListFormat, ListedNet, ParseOptions, ParsedList,
    MAX_LINE_BYTES, MAX_REPORTED_LINES,
};
use crate::text;

/// Reads the lines of a list, each at most [`MAX_LINE_BYTES`] long.
pub(super) struct LineReader<'a> {
    source_name: &'a str,
    /// The 1-based number of the line read last.
    pub(super) number: usize,
}

impl<'a> LineReader<'a> {
    pub(super) fn new(source_name: &'a str) -> Self {
        Self {
            source_name,
            number: 0,
        }
    }

    /// Reads the next line into `line` (without its `\n`); false at the end
    /// of the input.
    pub(super) fn next(
        &mut self,
        reader: &mut impl BufRead,
        line: &mut Vec<u8>,
    ) -> Result<bool, ListError> {
        line.clear();
        let read = Read::take(reader, MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', line)
            .map_err(|error| ListError::Read {
                source_name: self.source_name.to_owned(),
                error,
            })?;
        if read == 0 {
            return Ok(false);
        }
        self.number += 1;
        if line.last() == Some(&b'\n') {
            line.pop();
        } else if line.len() > MAX_LINE_BYTES {
            return Err(ListError::LineTooLong {
                source_name: self.source_name.to_owned(),
                line: self.number,
                text: text::excerpt(&String::from_utf8_lossy(line)),
            });
        }
        Ok(true)
    }
}

/// The entries and invalid lines of a list being parsed.
pub(super) struct ListParser<'a> {
    source_name: &'a str,
    format: ListFormat,
    options: ParseOptions,
    entries: Vec<ListedNet>,
    invalid: Vec<LineError>,
    invalid_count: usize,
}

impl<'a> ListParser<'a> {
    pub(super) fn new(source_name: &'a str, format: ListFormat, options: ParseOptions) -> Self {
        Self {
            source_name,
            format,
            options,
            entries: Vec::new(),
            invalid: Vec::new(),
            invalid_count: 0,
        }
    }

    /// Parses line `number`.
    pub(super) fn line(&mut self, number: usize, raw: &[u8]) -> Result<(), ListError> {
        let (text, parsed) = match std::str::from_utf8(raw) {
            Ok(text) => (
                Cow::Borrowed(text),
                parse_line(text.trim_start_matches('\u{feff}'), self.format),
            ),
            Err(_) => (String::from_utf8_lossy(raw), Err(LineProblem::NotUtf8)),
        };
        match parsed {
            Ok(Some((net, comment))) => {
                if self.entries.len() == self.options.max_entries {
                    return Err(ListError::TooManyEntries {
                        source_name: self.source_name.to_owned(),
                        line: number,
                        max: self.options.max_entries,
                    });
                }
                self.entries.push(ListedNet {
                    net,
                    comment,
                    line: number,
                });
            }
            Ok(None) => {}
            Err(problem) => {
                self.invalid_count += 1;
                if self.invalid.len() < MAX_REPORTED_LINES {
                    self.invalid.push(LineError {
                        source_name: self.source_name.to_owned(),
                        line: number,
                        text: text::excerpt(text.trim()),
                        problem,
                    });
                }
            }
        }
        Ok(())
    }

    /// The entries so far.
    pub(super) fn entries(&self) -> &[ListedNet] {
        &self.entries
    }

    /// This parser of the first `lines` lines of a list followed by
    /// `later`, the parser of the lines after them: `later`'s entries and
    /// invalid lines as this parser would have taken them.
    pub(super) fn followed_by(mut self, later: ListParser<'_>, lines: usize) -> Self {
        self.entries
            .extend(later.entries.into_iter().map(|entry| ListedNet {
                line: entry.line + lines,
                ..entry
            }));
        let room = MAX_REPORTED_LINES.saturating_sub(self.invalid.len());
        self.invalid
            .extend(later.invalid.into_iter().take(room).map(|error| LineError {
                line: error.line + lines,
                ..error
            }));
        self.invalid_count += later.invalid_count;
        self
    }

    pub(super) fn finish(self) -> Result<ParsedList, ListError> {
        if self.invalid_count > 0 && !self.options.skip_invalid {
            return Err(ListError::InvalidLines {
                errors: self.invalid,
                count: self.invalid_count,
            });
        }
        Ok(ParsedList {
            source: self.source_name.to_owned(),
            format: self.format,
            entries: self.entries,
            skipped: self.invalid,
            skipped_count: self.invalid_count,
        })
    }
}

/// One line: `None` for a blank or comment line, else the entry and its
/// comment.
fn parse_line(
    line: &str,
    format: ListFormat,
) -> Result<Option<(IpNet, Option<String>)>, LineProblem> {
    let (body, comment) = match line.split_once(format.comment_marker()) {
        Some((body, comment)) => (body.trim(), Some(comment.trim())),
        None => (line.trim(), None),
    };
    if body.is_empty() {
        return Ok(None);
    }
    let comment = match (format, comment) {
        (ListFormat::Netset, Some(_)) => return Err(LineProblem::TrailingText { format }),
        (_, comment) => {
            let comment = text::unescape(comment.unwrap_or_default());
            text::check_comment(&comment)?.map(str::to_owned)
        }
    };
    if body.split_whitespace().nth(1).is_some() {
        return Err(LineProblem::TrailingText { format });
    }
    Ok(Some((parse_net(body)?, comment)))
}
