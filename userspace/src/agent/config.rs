//! The agent's configuration: a TOML file of sources and the metrics
//! endpoint, read and checked as a whole before anything changes. Every
//! problem is one line, `FILE:LINE: what is wrong`.
//!
//! The agent reads two sections itself:
//!
//! ```toml
//! [metrics]
//! listen = "127.0.0.1:9640"      # the default; "" turns the endpoint off
//!
//! [drops]
//! log = false                    # a log line per sampled drop
//! log_per_minute = 60            # at most this many such lines a minute
//! ```
//!
//! Every other section declares sources, and the kind of source it names
//! reads and checks it ([`crate::sources::KINDS`], which documents each).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use crate::sources::settings::{ConfigError, Located};
use crate::sources::{SourceConfig, KINDS};
use crate::text::excerpt;

/// Where the metrics endpoint listens unless told otherwise.
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9640";

/// The sections the agent reads itself.
const METRICS_SECTION: &str = "metrics";
const DROPS_SECTION: &str = "drops";

/// The most log lines of sampled drops a minute `log_per_minute` allows.
const MAX_LOG_PER_MINUTE: usize = 6000;

/// The agent's configuration.
#[derive(Debug)]
pub struct Config {
    /// Where the metrics endpoint listens, if it does.
    pub metrics: Option<SocketAddr>,
    /// What the agent does with the sampled drops.
    pub drops: DropsConfig,
    /// The sources, by kind, each kind's in file order; their names are
    /// unique.
    pub sources: Vec<Box<dyn SourceConfig>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MetricsSection {
    listen: Spanned<String>,
}

/// The `[drops]` section: a log line per sampled drop, or not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DropsConfig {
    /// Whether each sampled drop is logged.
    pub log: bool,
    /// At most this many such lines a minute.
    pub log_per_minute: usize,
}

impl Default for DropsConfig {
    fn default() -> Self {
        Self {
            log: false,
            log_per_minute: 60,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DropsSection {
    #[serde(default)]
    log: bool,
    log_per_minute: Option<Spanned<i64>>,
}

impl Config {
    /// Reads and checks the configuration in `file`.
    pub fn load(file: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(file).map_err(|error| ConfigError {
            file: file.to_owned(),
            line: 0,
            reason: format!("cannot read the configuration: {error}"),
        })?;
        Self::parse(&text, file)
    }

    /// Parses and checks the configuration `text`, read from `file`.
    pub fn parse(text: &str, file: &Path) -> Result<Self, ConfigError> {
        let at = Located::new(text, file);
        let document = toml::de::DeTable::parse(text).map_err(|error| {
            let reason = error.message().trim_end().replace('\n', "; ");
            at.at(error.span().unwrap_or(0..0), reason)
        })?;
        let mut metrics =
            Some(parse_listen(DEFAULT_METRICS_LISTEN).map_err(|reason| at.at(0..0, reason))?);
        let mut drops = DropsConfig::default();
        let mut sources: Vec<Box<dyn SourceConfig>> = Vec::new();
        for (key, value) in document.into_inner() {
            let (name, span) = (key.get_ref().as_ref(), key.span());
            if name == DROPS_SECTION {
                let section: DropsSection = at.section(value)?;
                drops.log = section.log;
                if let Some(per_minute) = section.log_per_minute {
                    let value = *per_minute.get_ref();
                    drops.log_per_minute = usize::try_from(value)
                        .ok()
                        .filter(|value| (1..=MAX_LOG_PER_MINUTE).contains(value))
                        .ok_or_else(|| {
                            at.at(
                                per_minute.span(),
                                format!(
                                    "log_per_minute {value} is out of range (1 to {MAX_LOG_PER_MINUTE})"
                                ),
                            )
                        })?;
                }
                continue;
            }
            if name == METRICS_SECTION {
                let section: MetricsSection = at.section(value)?;
                let listen = &section.listen;
                metrics = match listen.get_ref().as_str() {
                    "" => None,
                    text => {
                        Some(parse_listen(text).map_err(|reason| at.at(listen.span(), reason))?)
                    }
                };
                continue;
            }
            let Some(kind) = KINDS.iter().find(|kind| kind.section() == name) else {
                let known: Vec<&str> = [METRICS_SECTION, DROPS_SECTION]
                    .into_iter()
                    .chain(KINDS.iter().map(|kind| kind.section()))
                    .collect();
                return Err(at.at(
                    span,
                    format!(
                        "unknown section '{}' (the sections are {})",
                        excerpt(name),
                        known.join(", ")
                    ),
                ));
            };
            sources.extend(kind.configure(value, &at)?);
        }
        let mut names = HashSet::new();
        if let Some(twice) = sources
            .iter()
            .map(|source| source.source())
            .find(|source| !names.insert(source.1.clone()))
        {
            return Err(at.at(0..0, format!("two sources list entries as {}", twice.1)));
        }
        Ok(Self {
            metrics,
            drops,
            sources,
        })
    }
}

/// A listen address: `HOST:PORT` with a literal IP.
fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    text.parse().map_err(|_| {
        format!(
            "metrics listen '{}' is not an address like 127.0.0.1:9640 (or \"\" for none)",
            excerpt(text)
        )
    })
}
