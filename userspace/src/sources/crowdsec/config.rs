//! The `[crowdsec]` section of the agent's configuration, read and
//! checked into a [`CrowdsecConfig`].
//!
//! ```toml
//! [crowdsec]                     # follow a CrowdSec Local API (at most one)
//! url = "http://127.0.0.1:8080"  # its entries belong to source crowdsec
//! api_key_file = "/etc/cfctl/crowdsec.key"  # or api_key_env = "VAR"; never inline
//! # cert_file = "/etc/cfctl/bouncer.pem"  # with key_file: a TLS client certificate
//! # key_file = "/etc/cfctl/bouncer-key.pem"  # (https:// only; the API key is then optional)
//! pull = "10s"                   # at least 1 s
//! resync = "5m"                  # the whole list again, the difference applied
//! scopes = ["Ip", "Range"]       # the default (and all that is understood)
//! types = ["ban"]                # the default
//! origins = []                   # only these origins (empty: all)
//! exclude_origins = []           # never these
//! scenarios = []                 # only these scenarios (empty: all)
//! exclude_scenarios = []         # never these
//! scenarios_containing = []      # only scenarios holding one of these (empty: all)
//! scenarios_not_containing = []  # never scenarios holding one of these
//! ca_file = "/etc/cfctl/lapi-ca.pem"  # extra trusted roots for https://
//! timeout = "30s"                # per request
//! max_bytes = 67108864           # a larger answer is refused
//! allow_whole_family = false     # true takes a Range 0.0.0.0/0 or ::/0
//! metrics_interval = "30m"       # usage metrics pushed to the LAPI; at least 10m, "0": off
//! ```

use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::sources::settings::{ConfigError, Located};
use crate::text::excerpt;

/// The largest answer taken unless the section says otherwise.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;
/// How often the whole list is asked for again unless the section says
/// otherwise.
pub const DEFAULT_RESYNC: Duration = Duration::from_secs(300);
/// The shortest resync interval.
pub const MIN_RESYNC: Duration = Duration::from_secs(10);

/// How often usage metrics are pushed unless the section says otherwise.
pub const DEFAULT_METRICS_INTERVAL: Duration = Duration::from_secs(30 * 60);
/// The shortest push interval (the LAPI keeps every push it takes).
pub const MIN_METRICS_INTERVAL: Duration = Duration::from_secs(10 * 60);

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
    /// Only decisions whose scenario holds one of these (empty: every
    /// scenario), as the firewall bouncer's `scenarios_containing`.
    pub scenarios_containing: Vec<String>,
    /// Never decisions whose scenario holds one of these.
    pub scenarios_not_containing: Vec<String>,
    /// Extra trusted root certificates (PEM) for an `https://` URL.
    pub ca_file: Option<PathBuf>,
    /// How long one request may take.
    pub timeout: Duration,
    /// How often the whole list is asked for again, and only the
    /// difference applied: what the LAPI's cursor missed comes back.
    pub resync: Duration,
    /// The largest answer taken.
    pub max_bytes: u64,
    /// Whether a decision for a whole family (`0.0.0.0/0`, `::/0`) is
    /// taken; ignored otherwise.
    pub allow_whole_family: bool,
    /// How often usage metrics are pushed to the LAPI ([`super::usage`]);
    /// none: never.
    pub metrics_interval: Option<Duration>,
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

/// The `[crowdsec]` table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Section {
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
    #[serde(default)]
    scenarios_containing: Vec<String>,
    #[serde(default)]
    scenarios_not_containing: Vec<String>,
    ca_file: Option<PathBuf>,
    cert_file: Option<Spanned<PathBuf>>,
    key_file: Option<Spanned<PathBuf>>,
    timeout: Option<Spanned<String>>,
    resync: Option<Spanned<String>>,
    max_bytes: Option<Spanned<u64>>,
    #[serde(default)]
    allow_whole_family: bool,
    metrics_interval: Option<Spanned<String>>,
}

/// Checks the `[crowdsec]` section.
pub(super) fn check(
    section: Section,
    span: Range<usize>,
    at: &Located<'_>,
) -> Result<CrowdsecConfig, ConfigError> {
    let within = |what: &str| format!("crowdsec: {what}");
    let url = section.url.get_ref().trim_end_matches('/').to_owned();
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(at.at(
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
                return Err(at.at(cert_file.span(), within("cert_file needs an https:// url")));
            }
            Some(ClientCertFiles {
                cert_file: cert_file.into_inner(),
                key_file: key_file.into_inner(),
            })
        }
        (Some(alone), None) | (None, Some(alone)) => {
            return Err(at.at(
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
                    at.at(
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
            at.at(
                variable.span(),
                within(&format!(
                    "api_key_env: the environment has no variable {}",
                    excerpt(variable.get_ref())
                )),
            )
        })?),
        (Some(file), Some(_)) => {
            return Err(at.at(
                file.span(),
                within("give either api_key_file or api_key_env, not both"),
            ))
        }
        // CrowdSec authenticates a bouncer with a certificate by it alone.
        (None, None) if client_cert.is_some() => None,
        (None, None) => {
            return Err(at.at(
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
        return Err(at.at(
            key_span,
            within("the API key is empty or holds spaces or control characters"),
        ));
    }
    let pull = at.optional_duration(
        section.pull.as_ref(),
        "pull",
        MIN_PULL,
        Duration::from_secs(10),
        &within,
    )?;
    let timeout = at.optional_duration(
        section.timeout.as_ref(),
        "timeout",
        Duration::from_secs(1),
        Duration::from_secs(30),
        &within,
    )?;
    let resync = at.optional_duration(
        section.resync.as_ref(),
        "resync",
        MIN_RESYNC,
        DEFAULT_RESYNC,
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
                return Err(at.at(
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
    let metrics_interval = match &section.metrics_interval {
        Some(off) if off.get_ref().trim() == "0" => None,
        interval => Some(at.optional_duration(
            interval.as_ref(),
            "metrics_interval",
            MIN_METRICS_INTERVAL,
            DEFAULT_METRICS_INTERVAL,
            &|reason| within(&format!("{reason} (or \"0\" to push no usage metrics)")),
        )?),
    };
    let max_bytes = at.at_least_one(
        section.max_bytes.as_ref(),
        DEFAULT_MAX_BYTES,
        "max_bytes",
        &within,
    )?;
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
        scenarios_containing: section.scenarios_containing,
        scenarios_not_containing: section.scenarios_not_containing,
        ca_file: section.ca_file,
        timeout,
        resync,
        max_bytes,
        allow_whole_family: section.allow_whole_family,
        metrics_interval,
    })
}
