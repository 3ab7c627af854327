//! Fetching a feed: an HTTP(S) GET with conditional-request validators
//! (`If-None-Match` from the last `ETag`, `If-Modified-Since` from the
//! last `Last-Modified`, sent only when the last good list was applied
//! under the feed's settings of now), or a local file; bounded in time and
//! bytes; redirects followed, and the URL the body came from kept. The
//! body is parsed all or nothing ([`parse`], bounded in entries). Nothing
//! here touches the store: a fetch runs on a thread of its own.

use std::io::Read;

use ureq::ResponseExt;

use super::{FeedConfig, FeedLocation};
use crate::netlist::{self, ParseOptions, ParsedList};

/// What a fetch found.
#[derive(Debug)]
pub enum Fetched {
    /// A body, with the validators to send next time.
    Body {
        /// The list as fetched.
        bytes: Vec<u8>,
        /// Its `ETag`.
        etag: Option<String>,
        /// Its `Last-Modified`.
        last_modified: Option<String>,
        /// Where it came from after redirects, if not the feed's URL.
        redirected_to: Option<String>,
    },
    /// The server says the list has not changed since the last good one.
    NotModified,
}

/// Why a fetch failed; the last good list stays.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The request or the connection failed.
    #[error("{0}")]
    Http(String),
    /// The server answered with an error.
    #[error("the server answered {status} {reason}")]
    Status {
        /// The status code.
        status: u16,
        /// Its reason phrase.
        reason: String,
    },
    /// The body is larger than the feed allows.
    #[error("the body is larger than max_bytes ({max} bytes)")]
    TooLarge {
        /// The limit.
        max: u64,
    },
    /// A local file could not be read.
    #[error("cannot read {path}: {error}")]
    File {
        /// The file.
        path: String,
        /// What failed.
        error: std::io::Error,
    },
}

/// The `User-Agent` of the agent's requests.
pub fn user_agent() -> String {
    format!("cfctl-agent/{}", env!("CARGO_PKG_VERSION"))
}

/// The validators of the last good list, sent with a fetch of its URL.
#[derive(Clone, Debug, Default)]
pub struct Validators {
    /// Its `ETag`, sent as `If-None-Match`.
    pub etag: Option<String>,
    /// Its `Last-Modified`, sent as `If-Modified-Since`.
    pub last_modified: Option<String>,
}

/// Fetches `feed`, conditionally on `validators`.
pub fn fetch(feed: &FeedConfig, validators: &Validators) -> Result<Fetched, FetchError> {
    match &feed.location {
        FeedLocation::Url(url) => fetch_url(feed, url, validators),
        FeedLocation::Path(path) => {
            let file_error = |error| FetchError::File {
                path: path.display().to_string(),
                error,
            };
            let file = std::fs::File::open(path).map_err(file_error)?;
            let bytes = read_bounded(file, feed.max_bytes, file_error)?;
            Ok(Fetched::Body {
                bytes,
                etag: None,
                last_modified: None,
                redirected_to: None,
            })
        }
    }
}

fn fetch_url(feed: &FeedConfig, url: &str, validators: &Validators) -> Result<Fetched, FetchError> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(feed.timeout))
        .http_status_as_error(false)
        .user_agent(user_agent())
        .build()
        .into();
    let mut request = agent.get(url);
    if let Some(etag) = &validators.etag {
        request = request.header("If-None-Match", etag);
    }
    if let Some(last_modified) = &validators.last_modified {
        request = request.header("If-Modified-Since", last_modified);
    }
    let response = request
        .call()
        .map_err(|error| FetchError::Http(error.to_string()))?;
    let status = response.status();
    if status.as_u16() == 304 {
        return Ok(Fetched::NotModified);
    }
    if !status.is_success() {
        return Err(FetchError::Status {
            status: status.as_u16(),
            reason: status.canonical_reason().unwrap_or_default().to_owned(),
        });
    }
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    };
    let (etag, last_modified) = (header("etag"), header("last-modified"));
    let final_url = response.get_uri().to_string();
    let redirected_to = (final_url != url).then_some(final_url);
    let bytes = read_bounded(
        response.into_body().into_reader(),
        feed.max_bytes,
        |error| FetchError::Http(format!("reading the body: {error}")),
    )?;
    Ok(Fetched::Body {
        bytes,
        etag,
        last_modified,
        redirected_to,
    })
}

/// Reads all of `reader`, failing past `max` bytes.
fn read_bounded(
    reader: impl Read,
    max: u64,
    io_error: impl FnOnce(std::io::Error) -> FetchError,
) -> Result<Vec<u8>, FetchError> {
    let mut body = Vec::new();
    reader
        .take(max.saturating_add(1))
        .read_to_end(&mut body)
        .map_err(io_error)?;
    if body.len() as u64 > max {
        return Err(FetchError::TooLarge { max });
    }
    Ok(body)
}

/// Parses a fetched body as `feed`'s list, all or nothing.
pub fn parse(feed: &FeedConfig, bytes: &[u8]) -> Result<ParsedList, netlist::ListError> {
    let options = ParseOptions {
        format: feed.format,
        max_entries: feed.max_entries,
        ..ParseOptions::default()
    };
    netlist::parse_bytes(bytes, &feed.source(), options)
}
