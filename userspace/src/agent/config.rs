//! The agent's configuration: a TOML file of sources and the metrics
//! endpoint, read and checked as a whole before anything changes. Every
//! problem is one line, `FILE:LINE: what is wrong`.
//!
//! The agent reads one section itself:
//!
//! ```toml
//! [metrics]
//! listen = "127.0.0.1:9640"      # the default; "" turns the endpoint off
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

/// The section the agent reads itself.
const METRICS_SECTION: &str = "metrics";

/// The agent's configuration.
#[derive(Debug)]
pub struct Config {
    /// Where the metrics endpoint listens, if it does.
    pub metrics: Option<SocketAddr>,
    /// The sources, by kind, each kind's in file order; their names are
    /// unique.
    pub sources: Vec<Box<dyn SourceConfig>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MetricsSection {
    listen: Spanned<String>,
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
        let mut sources: Vec<Box<dyn SourceConfig>> = Vec::new();
        for (key, value) in document.into_inner() {
            let (name, span) = (key.get_ref().as_ref(), key.span());
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
                let known: Vec<&str> = std::iter::once(METRICS_SECTION)
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
        Ok(Self { metrics, sources })
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
