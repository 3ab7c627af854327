//! The CrowdSec Local API as a bouncer sees it: pulling
//! `GET /v1/decisions/stream` ([`pull`]: bounded in time and bytes, the
//! answer parsed on the fetching thread), pushing usage metrics to
//! `POST /v1/usage-metrics` ([`push_usage`]), with an API key or a TLS
//! client certificate, and a cheap probe ([`reachable`]: a TCP connection
//! to its address) that tells when an unreachable LAPI answers again.
//! Nothing here touches the store.

use std::io::Read;
use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use super::config::{ClientCertFiles, CrowdsecConfig};

/// The `User-Agent` the agent announces to the LAPI, in the form the
/// bouncer specification gives (`crowdsec-<name>-bouncer/v<version>`),
/// from which the LAPI records the bouncer's type and version.
pub fn user_agent() -> String {
    format!("crowdsec-cfctl-bouncer/v{}", env!("CARGO_PKG_VERSION"))
}

/// One decision as the LAPI sends it.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct Decision {
    /// Its id.
    pub id: u64,
    /// The address or network.
    pub value: String,
    /// `Ip`, `Range`, or a scope the agent does not follow.
    pub scope: String,
    /// `ban`, `captcha`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// The time it has left, as a Go duration (`59m59.5s`).
    pub duration: String,
    /// Where it came from.
    pub origin: String,
    /// Why.
    pub scenario: String,
}

/// One answer of `/v1/decisions/stream`.
#[derive(Debug, Default, Deserialize)]
pub struct Answer {
    /// Decisions new since the last pull (all of them, on startup).
    #[serde(default, deserialize_with = "null_is_empty")]
    pub new: Vec<Decision>,
    /// Decisions deleted or expired since the last pull.
    #[serde(default, deserialize_with = "null_is_empty")]
    pub deleted: Vec<Decision>,
}

fn null_is_empty<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<Decision>, D::Error> {
    Ok(Option::<Vec<Decision>>::deserialize(deserializer)?.unwrap_or_default())
}

/// Why a request to the LAPI failed (a pull's entries stay as they are).
#[derive(Debug, thiserror::Error)]
pub enum LapiError {
    /// The connection failed (nothing answered).
    #[error("cannot reach the LAPI: {0}")]
    Unreachable(String),
    /// The request failed once connected.
    #[error("the request to the LAPI failed: {0}")]
    Http(String),
    /// The LAPI refused the key.
    #[error("the LAPI refused the API key (403 Forbidden): check the bouncer's key")]
    Forbidden,
    /// The LAPI answered with another error.
    #[error("the LAPI answered {0}")]
    Status(u16),
    /// The LAPI refused what was sent, and said why.
    #[error("the LAPI answered {status}: {message}")]
    Refused {
        /// The status.
        status: u16,
        /// Its message, cut to fit a line.
        message: String,
    },
    /// The answer is larger than allowed.
    #[error("the answer is larger than max_bytes ({0} bytes); nothing taken from it")]
    TooLarge(u64),
    /// The answer is not the JSON expected.
    #[error("the answer is not a decision stream: {0}; nothing taken from it")]
    Json(String),
    /// A TLS file (`ca_file`, `cert_file` or `key_file`) cannot be used.
    #[error("{key} {path}: {reason}")]
    TlsFile {
        /// The configuration key naming it.
        key: &'static str,
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
}

/// The PEM items of the file `key` names, or why it cannot be read.
fn pem_items(
    key: &'static str,
    path: &Path,
) -> Result<Vec<ureq::tls::PemItem<'static>>, LapiError> {
    let error = |reason: String| LapiError::TlsFile {
        key,
        path: path.display().to_string(),
        reason,
    };
    let pem = std::fs::read(path).map_err(|reason| error(reason.to_string()))?;
    ureq::tls::parse_pem(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|reason| error(reason.to_string()))
}

/// The certificates in the PEM file `key` names (at least one), or why
/// not.
fn certificates(
    key: &'static str,
    path: &Path,
) -> Result<Vec<ureq::tls::Certificate<'static>>, LapiError> {
    let certificates: Vec<_> = pem_items(key, path)?
        .into_iter()
        .filter_map(|item| match item {
            ureq::tls::PemItem::Certificate(certificate) => Some(certificate),
            _ => None,
        })
        .collect();
    if certificates.is_empty() {
        return Err(no_pem_item(key, path, "certificate"));
    }
    Ok(certificates)
}

/// The error of a TLS file that holds no PEM `what`.
fn no_pem_item(key: &'static str, path: &Path, what: &str) -> LapiError {
    LapiError::TlsFile {
        key,
        path: path.display().to_string(),
        reason: format!("holds no PEM {what}"),
    }
}

/// The client certificate (with any intermediates) and key `files` name.
fn client_cert(files: &ClientCertFiles) -> Result<ureq::tls::ClientCert, LapiError> {
    let chain = certificates("cert_file", &files.cert_file)?;
    let key = pem_items("key_file", &files.key_file)?
        .into_iter()
        .find_map(|item| match item {
            ureq::tls::PemItem::PrivateKey(key) => Some(key),
            _ => None,
        })
        .ok_or_else(|| no_pem_item("key_file", &files.key_file, "private key"))?;
    Ok(ureq::tls::ClientCert::new_with_certs(&chain, key))
}

fn tls_config(config: &CrowdsecConfig) -> Result<ureq::tls::TlsConfig, LapiError> {
    let mut tls = ureq::tls::TlsConfig::builder();
    if let Some(path) = &config.ca_file {
        let roots = certificates("ca_file", path)?;
        tls = tls.root_certs(ureq::tls::RootCerts::new_with_certs(&roots));
    }
    if let Some(files) = &config.client_cert {
        tls = tls.client_cert(Some(client_cert(files)?));
    }
    Ok(tls.build())
}

/// A client for `config`'s LAPI whose requests give up after `timeout`.
fn client(config: &CrowdsecConfig, timeout: Duration) -> Result<ureq::Agent, LapiError> {
    Ok(ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .user_agent(user_agent())
        .tls_config(tls_config(config)?)
        .build()
        .into())
}

/// `request` with the bouncer's key, if it has one.
fn with_key<B>(
    config: &CrowdsecConfig,
    request: ureq::RequestBuilder<B>,
) -> ureq::RequestBuilder<B> {
    match &config.api_key {
        Some(key) => request.header("X-Api-Key", &key.0),
        None => request,
    }
}

/// The error of a request that got no answer.
fn failed(error: ureq::Error) -> LapiError {
    match error {
        ureq::Error::Io(_) | ureq::Error::HostNotFound | ureq::Error::ConnectionFailed => {
            LapiError::Unreachable(error.to_string())
        }
        error => LapiError::Http(error.to_string()),
    }
}

/// Asks the LAPI for the decisions changed since this key's last pull,
/// or for all of them (`startup`).
pub fn pull(config: &CrowdsecConfig, startup: bool) -> Result<Answer, LapiError> {
    let url = format!("{}/v1/decisions/stream?startup={startup}", config.url);
    let request = with_key(config, client(config, config.timeout)?.get(&url));
    let response = request.call().map_err(failed)?;
    match response.status().as_u16() {
        200 => {}
        403 => return Err(LapiError::Forbidden),
        status => return Err(LapiError::Status(status)),
    }
    let mut body = Vec::new();
    response
        .into_body()
        .into_reader()
        .take(config.max_bytes.saturating_add(1))
        .read_to_end(&mut body)
        .map_err(|error| LapiError::Http(format!("reading the answer: {error}")))?;
    if body.len() as u64 > config.max_bytes {
        return Err(LapiError::TooLarge(config.max_bytes));
    }
    serde_json::from_slice(&body).map_err(|error| LapiError::Json(error.to_string()))
}

/// The longest message of a refusal kept.
const MAX_REFUSAL: u64 = 4096;

/// Posts `metrics` (an `AllMetrics` document) to the LAPI's
/// `/v1/usage-metrics`, giving up after `timeout`. A LAPI older than the
/// endpoint answers [`LapiError::Status`] 404.
pub fn push_usage(
    config: &CrowdsecConfig,
    metrics: &impl serde::Serialize,
    timeout: Duration,
) -> Result<(), LapiError> {
    let url = format!("{}/v1/usage-metrics", config.url);
    let body = serde_json::to_vec(metrics)
        .map_err(|error| LapiError::Http(format!("encoding the usage metrics: {error}")))?;
    let request = with_key(config, client(config, timeout)?.post(&url))
        .header("Content-Type", "application/json");
    let response = request.send(&body[..]).map_err(failed)?;
    let status = response.status().as_u16();
    match status {
        200..=299 => Ok(()),
        403 => Err(LapiError::Forbidden),
        400 | 422 => {
            let mut body = String::new();
            let _ = response
                .into_body()
                .into_reader()
                .take(MAX_REFUSAL)
                .read_to_string(&mut body);
            let message = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|answer| answer["message"].as_str().map(str::to_owned))
                .unwrap_or(body);
            Err(LapiError::Refused {
                status,
                message: crate::text::excerpt(message.trim()),
            })
        }
        status => Err(LapiError::Status(status)),
    }
}

/// Whether a TCP connection to the LAPI's address opens within `timeout`:
/// what an unreachable LAPI is probed with before the next pull.
pub fn reachable(config: &CrowdsecConfig, timeout: Duration) -> bool {
    let Ok(uri) = config.url.parse::<ureq::http::Uri>() else {
        return false;
    };
    let Some(host) = uri.host() else {
        return false;
    };
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("https") {
            443
        } else {
            80
        });
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (host, port).to_socket_addrs().is_ok_and(|mut addresses| {
        addresses.any(|address| TcpStream::connect_timeout(&address, timeout).is_ok())
    })
}
