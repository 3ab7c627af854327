//! The agent's configuration: a TOML file of feeds and the metrics
//! endpoint, read and checked as a whole before anything changes. Every
//! problem is one line, `FILE:LINE: what is wrong`.
//!
//! ```toml
//! [metrics]
//! listen = "127.0.0.1:9640"      # the default; "" turns the endpoint off
//!
//! [[feed]]
//! name = "firehol_level1"        # its entries belong to source feed:firehol_level1
//! url = "https://iplists.firehol.org/files/firehol_level1.netset"
//! refresh = "1h"                 # at least 1 s
//! format = "auto"                # auto, plain, netset, spamhaus
//! list = "blocklist"             # or "allowlist"
//! timeout = "60s"                # per request
//! max_bytes = 67108864           # a larger body fails the refresh
//! max_entries = 4000000          # so does a list with more entries
//! allow_whole_family = false     # true takes 0.0.0.0/0 and ::/0 (refused by default)
//! # path = "/srv/lists/local.txt"  # instead of url: a local file
//!
//! [crowdsec]                     # follow a CrowdSec Local API (at most one)
//! url = "http://127.0.0.1:8080"  # its entries belong to source crowdsec
//! api_key_file = "/etc/cfctl/crowdsec.key"  # or api_key_env = "VAR"; never inline
//! # cert_file = "/etc/cfctl/bouncer.pem"  # with key_file: a TLS client certificate
//! # key_file = "/etc/cfctl/bouncer-key.pem"  # (https:// only; the API key is then optional)
//! pull = "10s"                   # at least 1 s
//! scopes = ["Ip", "Range"]       # the default (and all that is understood)
//! types = ["ban"]                # the default
//! origins = []                   # only these origins (empty: all)
//! exclude_origins = []           # never these
//! scenarios = []                 # only these scenarios (empty: all)
//! exclude_scenarios = []         # never these
//! ca_file = "/etc/cfctl/lapi-ca.pem"  # extra trusted roots for https://
//! timeout = "30s"                # per request
//! max_bytes = 67108864           # a larger answer is refused
//! allow_whole_family = false     # true takes a Range 0.0.0.0/0 or ::/0
//! ```

use std::collections::HashSet;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::netlist::ListFormat;
use crate::store::ListKind;
use crate::text::{excerpt, parse_duration, Escaped};

/// Where the metrics endpoint listens unless told otherwise.
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9640";
/// The largest feed body taken unless a feed says otherwise.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;
/// The most entries a feed may have unless it says otherwise.
pub const DEFAULT_MAX_ENTRIES: usize = 4 << 20;
/// The shortest refresh interval.
pub const MIN_REFRESH: Duration = Duration::from_secs(1);

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

/// The agent's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Where the metrics endpoint listens, if it does.
    pub metrics: Option<SocketAddr>,
    /// The feeds, in file order.
    pub feeds: Vec<FeedConfig>,
    /// The CrowdSec Local API followed, if one is.
    pub crowdsec: Option<CrowdsecConfig>,
}

/// The scopes a CrowdSec decision may have that the agent understands.
pub const CROWDSEC_SCOPES: [&str; 2] = ["Ip", "Range"];
/// The shortest pull interval.
pub const MIN_PULL: Duration = Duration::from_secs(1);

/// A bouncer's API key; never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(pub String);

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("ApiKey(..)")
    }
}

/// The CrowdSec Local API the agent follows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrowdsecConfig {
    /// Its base URL, without a trailing `/`.
    pub url: String,
    /// The bouncer's key, read from a file or the environment; `None`
    /// when the bouncer authenticates with [`Self::client_cert`] alone.
    pub api_key: Option<ApiKey>,
    /// The bouncer's TLS client certificate, if it has one.
    pub client_cert: Option<ClientCertFiles>,
    /// How often it is asked for changes.
    pub pull: Duration,
    /// The decision scopes taken (a subset of [`CROWDSEC_SCOPES`]).
    pub scopes: Vec<String>,
    /// The decision types taken.
    pub types: Vec<String>,
    /// Only decisions of these origins (empty: every origin).
    pub origins: Vec<String>,
    /// Never decisions of these origins.
    pub exclude_origins: Vec<String>,
    /// Only decisions of these scenarios (empty: every scenario).
    pub scenarios: Vec<String>,
    /// Never decisions of these scenarios.
    pub exclude_scenarios: Vec<String>,
    /// Extra trusted root certificates (PEM) for an `https://` URL.
    pub ca_file: Option<PathBuf>,
    /// How long one request may take.
    pub timeout: Duration,
    /// The largest answer taken.
    pub max_bytes: u64,
    /// Whether a decision for a whole family (`0.0.0.0/0`, `::/0`) is
    /// taken; ignored otherwise.
    pub allow_whole_family: bool,
}

/// A TLS client certificate and its private key, both PEM files read at
/// each pull (so a renewed certificate is taken without a reload).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientCertFiles {
    /// The certificate (and any intermediates), PEM.
    pub cert_file: PathBuf,
    /// Its private key, PEM.
    pub key_file: PathBuf,
}

/// Where a feed's list comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FeedLocation {
    /// An `http://` or `https://` URL.
    Url(String),
    /// A local file.
    Path(PathBuf),
}

/// One feed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeedConfig {
    /// Its name; its entries belong to source `feed:NAME`.
    pub name: String,
    /// Where its list comes from.
    pub location: FeedLocation,
    /// How often it is fetched.
    pub refresh: Duration,
    /// Its format, `None` to detect it.
    pub format: Option<ListFormat>,
    /// The list its entries go in.
    pub list: ListKind,
    /// How long one fetch may take.
    pub timeout: Duration,
    /// The largest body taken.
    pub max_bytes: u64,
    /// The most entries taken.
    pub max_entries: usize,
    /// Whether entries for a whole family (`0.0.0.0/0`, `::/0`) are
    /// taken; refused otherwise (the rest of the list is taken).
    pub allow_whole_family: bool,
}

impl FeedConfig {
    /// The source its entries belong to.
    pub fn source(&self) -> String {
        format!("feed:{}", self.name)
    }

    /// The settings that decide what a body applies as, as one text: a
    /// list applied under other ones is fetched again whole.
    pub fn applied_settings(&self) -> String {
        format!(
            "{:?}",
            (
                &self.location,
                self.format,
                self.list,
                self.max_bytes,
                self.max_entries,
                self.allow_whole_family
            )
        )
    }
}

/// The file as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    metrics: Option<Spanned<MetricsSection>>,
    #[serde(default)]
    feed: Vec<Spanned<FeedSection>>,
    #[serde(default)]
    crowdsec: Option<Spanned<CrowdsecSection>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CrowdsecSection {
    url: Spanned<String>,
    api_key_file: Option<Spanned<PathBuf>>,
    api_key_env: Option<Spanned<String>>,
    pull: Option<Spanned<String>>,
    scopes: Option<Spanned<Vec<String>>>,
    types: Option<Vec<String>>,
    #[serde(default)]
    origins: Vec<String>,
    #[serde(default)]
    exclude_origins: Vec<String>,
    #[serde(default)]
    scenarios: Vec<String>,
    #[serde(default)]
    exclude_scenarios: Vec<String>,
    ca_file: Option<PathBuf>,
    cert_file: Option<Spanned<PathBuf>>,
    key_file: Option<Spanned<PathBuf>>,
    timeout: Option<Spanned<String>>,
    max_bytes: Option<Spanned<u64>>,
    #[serde(default)]
    allow_whole_family: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MetricsSection {
    listen: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FeedSection {
    name: Spanned<String>,
    url: Option<Spanned<String>>,
    path: Option<Spanned<PathBuf>>,
    refresh: Spanned<String>,
    #[serde(default)]
    format: Option<Spanned<String>>,
    #[serde(default)]
    list: Option<Spanned<String>>,
    #[serde(default)]
    timeout: Option<Spanned<String>>,
    #[serde(default)]
    max_bytes: Option<Spanned<u64>>,
    #[serde(default)]
    max_entries: Option<Spanned<usize>>,
    #[serde(default)]
    allow_whole_family: bool,
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
        // Every reason is one line of printable text, whatever the file
        // holds: values quoted in it are cut and their control characters
        // escaped.
        let at = |span: Range<usize>, reason: String| ConfigError {
            file: file.to_owned(),
            line: line_of(text, span.start),
            reason: Escaped(&reason).to_string(),
        };
        let parsed: File = toml::from_str(text).map_err(|error| {
            let reason = error.message().trim_end().replace('\n', "; ");
            at(error.span().unwrap_or(0..0), reason)
        })?;
        let metrics = match parsed.metrics {
            None => Some(parse_listen(DEFAULT_METRICS_LISTEN).map_err(|reason| at(0..0, reason))?),
            Some(section) => {
                let listen = &section.get_ref().listen;
                match listen.get_ref().as_str() {
                    "" => None,
                    text => Some(parse_listen(text).map_err(|reason| at(listen.span(), reason))?),
                }
            }
        };
        let mut names = HashSet::new();
        let mut feeds = Vec::new();
        for feed in parsed.feed {
            let span = feed.span();
            let feed = feed.into_inner();
            let name = feed.name.get_ref().clone();
            if !names.insert(name.clone()) {
                return Err(at(
                    feed.name.span(),
                    format!("a second feed named '{}'", excerpt(&name)),
                ));
            }
            feeds.push(check_feed(feed, span, &at)?);
        }
        let crowdsec = match parsed.crowdsec {
            None => None,
            Some(section) => {
                let span = section.span();
                Some(check_crowdsec(section.into_inner(), span, &at)?)
            }
        };
        Ok(Self {
            metrics,
            feeds,
            crowdsec,
        })
    }
}

/// Checks one feed's section.
fn check_feed(
    feed: FeedSection,
    span: Range<usize>,
    at: &impl Fn(Range<usize>, String) -> ConfigError,
) -> Result<FeedConfig, ConfigError> {
    let name = feed.name.get_ref();
    let valid_name = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !valid_name {
        return Err(at(
            feed.name.span(),
            format!(
                "feed name '{}': use 1 to 64 letters, digits, '_', '-' or '.'",
                excerpt(name)
            ),
        ));
    }
    let within = |what: &str| format!("feed '{name}': {what}");
    let location = match (feed.url, feed.path) {
        (Some(url), None) => {
            let text = url.get_ref();
            if !(text.starts_with("http://") || text.starts_with("https://")) {
                return Err(at(
                    url.span(),
                    within(&format!(
                        "url '{}' is not http:// or https://",
                        excerpt(text)
                    )),
                ));
            }
            FeedLocation::Url(text.clone())
        }
        (None, Some(path)) => FeedLocation::Path(path.into_inner()),
        (Some(url), Some(_)) => {
            return Err(at(url.span(), within("give either url or path, not both")))
        }
        (None, None) => return Err(at(span, within("needs a url or a path"))),
    };
    let refresh = duration_setting(&feed.refresh, "refresh", MIN_REFRESH, at, &within)?;
    let timeout = optional_duration_setting(
        feed.timeout.as_ref(),
        "timeout",
        Duration::from_secs(1),
        Duration::from_secs(60),
        at,
        &within,
    )?;
    let format = match &feed.format {
        None => None,
        Some(format) if format.get_ref() == "auto" => None,
        Some(format) => Some(
            format
                .get_ref()
                .parse::<ListFormat>()
                .map_err(|error| at(format.span(), within(&error.to_string())))?,
        ),
    };
    let list = match feed
        .list
        .as_ref()
        .map(|list| (list.get_ref().as_str(), list.span()))
    {
        None | Some(("blocklist", _)) => ListKind::Blocklist,
        Some(("allowlist", _)) => ListKind::Allowlist,
        Some((other, span)) => {
            return Err(at(
                span,
                within(&format!(
                    "list '{}' is neither blocklist nor allowlist",
                    excerpt(other)
                )),
            ))
        }
    };
    let max_bytes = at_least_one(feed.max_bytes.as_ref(), DEFAULT_MAX_BYTES)
        .map_err(|span| at(span, within("max_bytes must be at least 1")))?;
    let max_entries = at_least_one(feed.max_entries.as_ref(), DEFAULT_MAX_ENTRIES)
        .map_err(|span| at(span, within("max_entries must be at least 1")))?;
    Ok(FeedConfig {
        name: name.clone(),
        location,
        refresh,
        format,
        list,
        timeout,
        max_bytes,
        max_entries,
        allow_whole_family: feed.allow_whole_family,
    })
}

/// Checks the `[crowdsec]` section.
fn check_crowdsec(
    section: CrowdsecSection,
    span: Range<usize>,
    at: &impl Fn(Range<usize>, String) -> ConfigError,
) -> Result<CrowdsecConfig, ConfigError> {
    let within = |what: &str| format!("crowdsec: {what}");
    let url = section.url.get_ref().trim_end_matches('/').to_owned();
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(at(
            section.url.span(),
            within(&format!(
                "url '{}' is not http:// or https://",
                excerpt(&url)
            )),
        ));
    }
    let client_cert = match (section.cert_file, section.key_file) {
        (Some(cert_file), Some(key_file)) => {
            if !url.starts_with("https://") {
                return Err(at(
                    cert_file.span(),
                    within("cert_file needs an https:// url"),
                ));
            }
            Some(ClientCertFiles {
                cert_file: cert_file.into_inner(),
                key_file: key_file.into_inner(),
            })
        }
        (Some(alone), None) | (None, Some(alone)) => {
            return Err(at(
                alone.span(),
                within("give both cert_file and key_file, or neither"),
            ))
        }
        (None, None) => None,
    };
    let api_key = match (&section.api_key_file, &section.api_key_env) {
        (Some(file), None) => Some(
            std::fs::read_to_string(file.get_ref())
                .map_err(|error| {
                    let file_name = file.get_ref().display().to_string();
                    at(
                        file.span(),
                        within(&format!(
                            "cannot read api_key_file {}: {error}",
                            excerpt(&file_name)
                        )),
                    )
                })?
                .trim()
                .to_owned(),
        ),
        (None, Some(variable)) => Some(std::env::var(variable.get_ref()).map_err(|_| {
            at(
                variable.span(),
                within(&format!(
                    "api_key_env: the environment has no variable {}",
                    excerpt(variable.get_ref())
                )),
            )
        })?),
        (Some(file), Some(_)) => {
            return Err(at(
                file.span(),
                within("give either api_key_file or api_key_env, not both"),
            ))
        }
        // CrowdSec authenticates a bouncer with a certificate by it alone.
        (None, None) if client_cert.is_some() => None,
        (None, None) => {
            return Err(at(
                span,
                within(
                    "needs api_key_file or api_key_env (the key is never written inline), \
                     or cert_file and key_file",
                ),
            ))
        }
    };
    if api_key
        .as_ref()
        .is_some_and(|key| key.is_empty() || key.chars().any(|c| c.is_ascii_control() || c == ' '))
    {
        let key_span = section
            .api_key_file
            .as_ref()
            .map_or_else(|| span.clone(), Spanned::span);
        return Err(at(
            key_span,
            within("the API key is empty or holds spaces or control characters"),
        ));
    }
    let pull = optional_duration_setting(
        section.pull.as_ref(),
        "pull",
        MIN_PULL,
        Duration::from_secs(10),
        at,
        &within,
    )?;
    let timeout = optional_duration_setting(
        section.timeout.as_ref(),
        "timeout",
        Duration::from_secs(1),
        Duration::from_secs(30),
        at,
        &within,
    )?;
    let scopes = match section.scopes {
        None => CROWDSEC_SCOPES.map(str::to_owned).to_vec(),
        Some(scopes) => {
            if let Some(unknown) = scopes
                .get_ref()
                .iter()
                .find(|scope| !CROWDSEC_SCOPES.contains(&scope.as_str()))
            {
                return Err(at(
                    scopes.span(),
                    within(&format!(
                        "scope '{}' is not one of Ip, Range",
                        excerpt(unknown)
                    )),
                ));
            }
            scopes.into_inner()
        }
    };
    let max_bytes = at_least_one(section.max_bytes.as_ref(), DEFAULT_MAX_BYTES)
        .map_err(|span| at(span, within("max_bytes must be at least 1")))?;
    Ok(CrowdsecConfig {
        url,
        api_key: api_key.map(ApiKey),
        client_cert,
        pull,
        scopes,
        types: section.types.unwrap_or_else(|| vec!["ban".to_owned()]),
        origins: section.origins,
        exclude_origins: section.exclude_origins,
        scenarios: section.scenarios,
        exclude_scenarios: section.exclude_scenarios,
        ca_file: section.ca_file,
        timeout,
        max_bytes,
        allow_whole_family: section.allow_whole_family,
    })
}

/// A count given (or `default`), or the span of a zero.
fn at_least_one<T: Copy + Default + PartialEq>(
    value: Option<&Spanned<T>>,
    default: T,
) -> Result<T, Range<usize>> {
    match value {
        Some(value) if *value.get_ref() == T::default() => Err(value.span()),
        Some(value) => Ok(*value.get_ref()),
        None => Ok(default),
    }
}

/// The duration setting `key`, of at least `min`, or an error at its span
/// in the words `within` gives.
fn duration_setting(
    value: &Spanned<String>,
    key: &str,
    min: Duration,
    at: &impl Fn(Range<usize>, String) -> ConfigError,
    within: &impl Fn(&str) -> String,
) -> Result<Duration, ConfigError> {
    parse_duration(value.get_ref(), min)
        .map_err(|reason| at(value.span(), within(&format!("{key} {reason}"))))
}

/// [`duration_setting`] for a setting that may be left out: `default`
/// when it is.
fn optional_duration_setting(
    value: Option<&Spanned<String>>,
    key: &str,
    min: Duration,
    default: Duration,
    at: &impl Fn(Range<usize>, String) -> ConfigError,
    within: &impl Fn(&str) -> String,
) -> Result<Duration, ConfigError> {
    value.map_or(Ok(default), |value| {
        duration_setting(value, key, min, at, within)
    })
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

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset.min(text.len()))
        .map_or(1, |before| before.matches('\n').count() + 1)
}
