//! A feed's `[[feed]]` section of the agent's configuration, read and
//! checked into a [`FeedConfig`].
//!
//! ```toml
//! [[feed]]
//! name = "firehol_level1"        # its entries belong to source feed:firehol_level1
//! url = "https://iplists.firehol.org/files/firehol_level1.netset"
//! # path = "/srv/lists/local.txt"  # instead of url: a local file
//! refresh = "1h"                 # at least 1 s
//! format = "auto"                # auto, plain, netset, spamhaus
//! list = "blocklist"             # or "allowlist"
//! timeout = "60s"                # per request
//! max_bytes = 67108864           # a larger body fails the refresh
//! max_entries = 4000000          # so does a list with more entries
//! allow_whole_family = false     # true takes 0.0.0.0/0 and ::/0 (refused by default)
//! min_entries = 1                # a list with fewer entries is refused
//! max_shrink = 0.5               # so is one that shrinks by more than this share
//! allow_shrink = false           # true takes any list, even an empty one
//! ```

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::{FeedConfig, FeedLocation};
use crate::netlist::ListFormat;
use crate::sources::settings::{ConfigError, Located};
use crate::store::ListKind;
use crate::text::excerpt;

/// The largest feed body taken unless a feed says otherwise.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;
/// The most entries a feed may have unless it says otherwise.
pub const DEFAULT_MAX_ENTRIES: usize = 4 << 20;
/// The shortest refresh interval.
pub const MIN_REFRESH: Duration = Duration::from_secs(1);
/// A list with fewer entries is refused unless a feed says otherwise.
pub const DEFAULT_MIN_ENTRIES: usize = 1;
/// A list that would shrink the feed by more than this share is refused
/// unless the feed says otherwise.
pub const DEFAULT_MAX_SHRINK: f64 = 0.5;

/// One `[[feed]]` table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Section {
    name: Spanned<String>,
    url: Option<Spanned<String>>,
    path: Option<Spanned<PathBuf>>,
    refresh: Spanned<String>,
    format: Option<Spanned<String>>,
    list: Option<Spanned<String>>,
    timeout: Option<Spanned<String>>,
    max_bytes: Option<Spanned<u64>>,
    max_entries: Option<Spanned<usize>>,
    #[serde(default)]
    allow_whole_family: bool,
    min_entries: Option<Spanned<usize>>,
    max_shrink: Option<Spanned<f64>>,
    #[serde(default)]
    allow_shrink: bool,
}

impl Section {
    /// The feed's name as written, and where.
    pub(super) fn name(&self) -> &Spanned<String> {
        &self.name
    }

    /// Checks the section (`span`: all of it) into a feed.
    pub(super) fn check(
        self,
        span: std::ops::Range<usize>,
        at: &Located<'_>,
    ) -> Result<FeedConfig, ConfigError> {
        let name = self.name.get_ref();
        let valid_name = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !valid_name {
            return Err(at.at(
                self.name.span(),
                format!(
                    "feed name '{}': use 1 to 64 letters, digits, '_', '-' or '.'",
                    excerpt(name)
                ),
            ));
        }
        let within = |what: &str| format!("feed '{name}': {what}");
        let location = match (self.url, self.path) {
            (Some(url), None) => {
                let text = url.get_ref();
                if !(text.starts_with("http://") || text.starts_with("https://")) {
                    return Err(at.at(
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
                return Err(at.at(url.span(), within("give either url or path, not both")))
            }
            (None, None) => return Err(at.at(span, within("needs a url or a path"))),
        };
        let format = match &self.format {
            None => None,
            Some(format) if format.get_ref() == "auto" => None,
            Some(format) => Some(
                format
                    .get_ref()
                    .parse::<ListFormat>()
                    .map_err(|error| at.at(format.span(), within(&error.to_string())))?,
            ),
        };
        let list = match self
            .list
            .as_ref()
            .map(|list| (list.get_ref().as_str(), list.span()))
        {
            None | Some(("blocklist", _)) => ListKind::Blocklist,
            Some(("allowlist", _)) => ListKind::Allowlist,
            Some((other, span)) => {
                return Err(at.at(
                    span,
                    within(&format!(
                        "list '{}' is neither blocklist nor allowlist",
                        excerpt(other)
                    )),
                ))
            }
        };
        let min_entries = match &self.min_entries {
            None => DEFAULT_MIN_ENTRIES,
            Some(min) => *min.get_ref(),
        };
        Ok(FeedConfig {
            name: name.clone(),
            location,
            refresh: at.duration(&self.refresh, "refresh", MIN_REFRESH, &within)?,
            format,
            list,
            timeout: at.optional_duration(
                self.timeout.as_ref(),
                "timeout",
                Duration::from_secs(1),
                Duration::from_secs(60),
                &within,
            )?,
            max_bytes: at.at_least_one(
                self.max_bytes.as_ref(),
                DEFAULT_MAX_BYTES,
                "max_bytes",
                &within,
            )?,
            max_entries: at.at_least_one(
                self.max_entries.as_ref(),
                DEFAULT_MAX_ENTRIES,
                "max_entries",
                &within,
            )?,
            allow_whole_family: self.allow_whole_family,
            min_entries,
            max_shrink: at.ratio(
                self.max_shrink.as_ref(),
                DEFAULT_MAX_SHRINK,
                "max_shrink",
                &within,
            )?,
            allow_shrink: self.allow_shrink,
        })
    }
}
