//! Text that comes from outside (comments, file names, input lines): the
//! bounds it must keep, and how it is escaped so that what cfctl prints or
//! exports means exactly what it was given.
//!
//! * **Bounds.** A comment holds at most [`MAX_COMMENT_BYTES`]
//!   ([`check_comment`] refuses a longer one from a person; one cfctl
//!   composes from what a program sent is shortened with [`cut`]); an
//!   input line quoted in an error is cut to
//!   [`EXCERPT_CHARS`] characters ([`excerpt`]); a duration (a listing's
//!   timeout, a refresh interval) is at most [`MAX_DURATION`]
//!   ([`parse_duration`]), so that adding it to the clock cannot overflow.
//! * **Display.** [`Escaped`] prints text with every control character,
//!   line or paragraph separator and bidirectional-override character
//!   written as `\u{..}`, and backslashes doubled, so text can neither
//!   move the cursor, recolour the terminal nor start a new line of output.
//!   Text is kept as it came everywhere else (the store, reports, errors)
//!   and escaped where it is printed for people.
//! * **Export.** The same escaping makes a comment one line of a plain
//!   list, with leading and trailing spaces escaped too (a list's parser
//!   trims them); [`unescape`] reverses it exactly, so `cfctl export` read
//!   back by `cfctl import` gives the same comments, whatever they hold.
//!   An escaped comment is at most [`MAX_ESCAPED_COMMENT_BYTES`] long, which
//!   a list's line may always hold.

use std::fmt;
use std::time::Duration;

/// The most bytes of UTF-8 a comment may hold.
pub const MAX_COMMENT_BYTES: usize = 1024;
/// The most bytes a comment takes once escaped for export: six per byte
/// at most (a one-byte control character becomes `\u{1f}`; a wider
/// character that is escaped takes at most three bytes per byte).
pub const MAX_ESCAPED_COMMENT_BYTES: usize = 6 * MAX_COMMENT_BYTES;
/// The most characters of an input line quoted in an error message.
pub const EXCERPT_CHARS: usize = 80;

/// The longest duration accepted: 100 years of 365.25 days.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 31_557_600);

/// Parses a humantime duration (`90s`, `1h30m`, `7d`) of at least `min`
/// and at most [`MAX_DURATION`], or says why not in a phrase naming the
/// text.
pub fn parse_duration(text: &str, min: Duration) -> Result<Duration, String> {
    let quoted = excerpt(text);
    let duration = humantime::parse_duration(text.trim())
        .map_err(|error| format!("'{quoted}' is not a duration like 90s, 1h30m or 7d: {error}"))?;
    if duration < min {
        return Err(format!(
            "'{quoted}' is shorter than {}",
            humantime::format_duration(min)
        ));
    }
    if duration > MAX_DURATION {
        return Err(format!("'{quoted}' is longer than 100 years"));
    }
    Ok(duration)
}

/// Why a comment is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CommentProblem {
    /// Longer than [`MAX_COMMENT_BYTES`].
    #[error("the comment is {0} bytes long; at most {MAX_COMMENT_BYTES} are kept")]
    TooLong(usize),
}

/// `comment` if it is short enough to store, `None` if empty.
pub fn check_comment(comment: &str) -> Result<Option<&str>, CommentProblem> {
    match comment.len() {
        0 => Ok(None),
        len if len > MAX_COMMENT_BYTES => Err(CommentProblem::TooLong(len)),
        _ => Ok(Some(comment)),
    }
}

/// `text` cut to at most `max_bytes` (at least 3) on a character
/// boundary, ending in `...` when it was cut: for comments cfctl composes
/// from what a program sent (a LAPI decision's origin and scenario),
/// which must be stored, not refused.
pub fn cut(mut text: String, max_bytes: usize) -> String {
    const MARK: &str = "...";
    if text.len() > max_bytes {
        let mut end = max_bytes.saturating_sub(MARK.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str(MARK);
    }
    text
}

/// Whether `c` is written as `\u{..}` rather than as itself: control
/// characters, line and paragraph separators, and the invisible marks that
/// reorder text (bidirectional overrides, embeddings and isolates).
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200e}' | '\u{200f}' | '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// Text from outside, displayed with [`needs_escape`] characters and
/// backslashes escaped (see the module documentation).
#[derive(Clone, Copy, Debug)]
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_escaped(f, self.0, needs_escape)
    }
}

/// `comment` as the text after `# ` on a line of a plain list: escaped
/// like [`Escaped`], and its leading and trailing white space too.
pub fn escape_comment(comment: &str) -> String {
    let (start, end) = (
        comment.len() - comment.trim_start().len(),
        comment.trim_end().len(),
    );
    let mut out = String::with_capacity(comment.len());
    for (index, c) in comment.char_indices() {
        let edge_space = c.is_whitespace() && (index < start || index >= end);
        // Writing to a String cannot fail.
        let _ = write_escaped(&mut out, c.encode_utf8(&mut [0; 4]), |_| {
            edge_space || needs_escape(c)
        });
    }
    out
}

/// Writes `text` with backslashes doubled and the characters `escape`
/// picks as `\u{hex}`.
fn write_escaped(
    out: &mut impl fmt::Write,
    text: &str,
    escape: impl Fn(char) -> bool,
) -> fmt::Result {
    for c in text.chars() {
        match c {
            '\\' => out.write_str(r"\\")?,
            c if escape(c) => write!(out, "\\u{{{:x}}}", u32::from(c))?,
            c => out.write_char(c)?,
        }
    }
    Ok(())
}

/// Reverses [`escape_comment`]: `\\` is a backslash and `\u{hex}` the
/// character; any other backslash stays as it is (lists not written by
/// cfctl have comments like `C:\lists`).
pub fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        if let Some(after) = rest.strip_prefix(r"\\") {
            out.push('\\');
            rest = after;
        } else if let Some((c, after)) = escaped_char(rest) {
            out.push(c);
            rest = after;
        } else {
            out.push('\\');
            rest = &rest[1..];
        }
    }
    out.push_str(rest);
    out
}

/// The character of a `\u{hex}` escape at the start of `text`, and the
/// text after it.
fn escaped_char(text: &str) -> Option<(char, &str)> {
    let (hex, after) = text.strip_prefix(r"\u{")?.split_once('}')?;
    if hex.is_empty() || hex.len() > 6 {
        return None;
    }
    let c = u32::from_str_radix(hex, 16).ok().and_then(char::from_u32)?;
    Some((c, after))
}

/// At most [`EXCERPT_CHARS`] characters of an input line, with how much
/// was left out.
pub fn excerpt(line: &str) -> String {
    match line.char_indices().nth(EXCERPT_CHARS) {
        None => line.to_owned(),
        Some((cut, _)) => format!("{}... ({} more bytes)", &line[..cut], line.len() - cut),
    }
}

/// `1234567` as `1,234,567`.
pub fn thousands(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_escapes_what_moves_the_cursor_or_reorders_text() {
        let shown = Escaped("a\nb\x1b[31mc\\d\u{202e}e\u{9b}f é").to_string();
        assert_eq!(shown, r"a\u{a}b\u{1b}[31mc\\d\u{202e}e\u{9b}f é");
        assert!(!shown.chars().any(needs_escape));
    }

    #[test]
    fn every_character_of_the_first_256_round_trips_through_export() {
        let all: String = (0u32..=0xff).filter_map(char::from_u32).collect();
        for comment in [
            all.as_str(),
            " padded ",
            r"\u{41} is not A",
            r"C:\lists\u",
            "\t",
        ] {
            let exported = escape_comment(comment);
            assert!(!exported.chars().any(needs_escape), "{exported:?}");
            assert_eq!(exported.trim(), exported, "{exported:?}");
            assert_eq!(unescape(&exported), comment);
        }
    }

    #[test]
    fn unescape_keeps_backslashes_it_does_not_know() {
        assert_eq!(
            unescape(r"C:\lists\new \u{zz} \u{110000} \u{}"),
            r"C:\lists\new \u{zz} \u{110000} \u{}"
        );
        assert_eq!(unescape(r"a\u{1b}b\\"), "a\u{1b}b\\");
    }

    #[test]
    fn long_composed_comments_are_cut_on_a_character_boundary() {
        assert_eq!(cut("short".to_owned(), MAX_COMMENT_BYTES), "short");
        let exact = "y".repeat(MAX_COMMENT_BYTES);
        assert_eq!(cut(exact.clone(), MAX_COMMENT_BYTES), exact);
        for filler in ["z", "é", "\u{2028}", "\u{1f600}"] {
            let long = filler.repeat(MAX_COMMENT_BYTES + 1);
            let cut = cut(long.clone(), MAX_COMMENT_BYTES);
            assert!(cut.len() <= MAX_COMMENT_BYTES, "{filler:?}: {}", cut.len());
            assert!(
                cut.len() > MAX_COMMENT_BYTES - 8,
                "{filler:?}: {}",
                cut.len()
            );
            assert!(cut.ends_with("...") && long.starts_with(&cut[..cut.len() - 3]));
        }
    }

    #[test]
    fn comments_are_bounded() {
        assert_eq!(check_comment(""), Ok(None));
        assert_eq!(check_comment("SBL1"), Ok(Some("SBL1")));
        let long = "x".repeat(MAX_COMMENT_BYTES + 1);
        assert_eq!(
            check_comment(&long),
            Err(CommentProblem::TooLong(MAX_COMMENT_BYTES + 1))
        );
    }

    #[test]
    fn durations_are_bounded() {
        let second = Duration::from_secs(1);
        assert_eq!(
            parse_duration(" 1h30m ", second),
            Ok(Duration::from_secs(5400))
        );
        assert_eq!(parse_duration("100years", second), Ok(MAX_DURATION));
        assert_eq!(
            parse_duration("500000000000y", second),
            Err("'500000000000y' is longer than 100 years".to_owned())
        );
        assert_eq!(
            parse_duration("10ms", second),
            Err("'10ms' is shorter than 1s".to_owned())
        );
        assert!(parse_duration("soon", second)
            .unwrap_err()
            .starts_with("'soon' is not a duration like 90s, 1h30m or 7d: "));
    }

    #[test]
    fn excerpts_are_cut() {
        assert_eq!(excerpt("a\u{7}b"), "a\u{7}b");
        let long = "y".repeat(100_000);
        let cut = excerpt(&long);
        assert_eq!(cut.len(), EXCERPT_CHARS + "... (99920 more bytes)".len());
        assert!(cut.ends_with("... (99920 more bytes)"));
    }
}
