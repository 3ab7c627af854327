//! Reading a section of the agent's configuration: every problem one line,
//! `FILE:LINE: what is wrong`, at the line of the value at fault
//! ([`Located`]), and the checks that every section shares (durations
//! with a floor, counts of at least one, ratios).

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use toml::Spanned;

use crate::text::{parse_duration, Escaped};

/// A configuration problem: where, and what.
#[derive(Debug, thiserror::Error)]
#[error("{}:{line}: {reason}", .file.display())]
pub struct ConfigError {
    /// The file.
    pub file: PathBuf,
    /// The 1-based line (0 when the file cannot be read).
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

/// The text of a configuration file, to say where in it a problem is.
pub struct Located<'t> {
    text: &'t str,
    file: &'t Path,
}

impl<'t> Located<'t> {
    /// The configuration `text`, read from `file`.
    pub fn new(text: &'t str, file: &'t Path) -> Self {
        Self { text, file }
    }

    /// The error `reason` at the bytes `span` of the text. Every reason
    /// is one line of printable text, whatever the file holds: values
    /// quoted in it are cut and their control characters escaped.
    pub fn at(&self, span: Range<usize>, reason: impl AsRef<str>) -> ConfigError {
        ConfigError {
            file: self.file.to_owned(),
            line: line_of(self.text, span.start),
            reason: Escaped(reason.as_ref()).to_string(),
        }
    }

    /// Deserialises `value` (a section, or a table of an array of them)
    /// into `T`, or the parser's error at its place.
    pub fn section<T: DeserializeOwned>(
        &self,
        value: Spanned<toml::de::DeValue<'_>>,
    ) -> Result<T, ConfigError> {
        let span = value.span();
        T::deserialize(toml::de::ValueDeserializer::from(value)).map_err(|error| {
            let reason = error.message().trim_end().replace('\n', "; ");
            self.at(error.span().unwrap_or(span), reason)
        })
    }

    /// The duration setting `key`, of at least `min`, or an error at its
    /// place in the words `within` gives.
    pub fn duration(
        &self,
        value: &Spanned<String>,
        key: &str,
        min: Duration,
        within: &impl Fn(&str) -> String,
    ) -> Result<Duration, ConfigError> {
        parse_duration(value.get_ref(), min)
            .map_err(|reason| self.at(value.span(), within(&format!("{key} {reason}"))))
    }

    /// [`Located::duration`] for a setting that may be left out: `default`
    /// when it is.
    pub fn optional_duration(
        &self,
        value: Option<&Spanned<String>>,
        key: &str,
        min: Duration,
        default: Duration,
        within: &impl Fn(&str) -> String,
    ) -> Result<Duration, ConfigError> {
        value.map_or(Ok(default), |value| self.duration(value, key, min, within))
    }

    /// A count given (or `default`) of at least one.
    pub fn at_least_one<T: Copy + Default + PartialEq>(
        &self,
        value: Option<&Spanned<T>>,
        default: T,
        key: &str,
        within: &impl Fn(&str) -> String,
    ) -> Result<T, ConfigError> {
        match value {
            Some(value) if *value.get_ref() == T::default() => {
                Err(self.at(value.span(), within(&format!("{key} must be at least 1"))))
            }
            Some(value) => Ok(*value.get_ref()),
            None => Ok(default),
        }
    }

    /// A share given (or `default`) from 0 to 1.
    pub fn ratio(
        &self,
        value: Option<&Spanned<f64>>,
        default: f64,
        key: &str,
        within: &impl Fn(&str) -> String,
    ) -> Result<f64, ConfigError> {
        match value {
            Some(value) if !(0.0..=1.0).contains(value.get_ref()) => {
                Err(self.at(value.span(), within(&format!("{key} must be from 0 to 1"))))
            }
            Some(value) => Ok(*value.get_ref()),
            None => Ok(default),
        }
    }
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset.min(text.len()))
        .map_or(1, |before| before.matches('\n').count() + 1)
}
