//! The command line as a source: entries a person adds with `cfctl add`
//! (source `cli`, or a name given with `--source`), and the two rules for
//! what a person gives: a source name of the shape cfctl uses, and no
//! entry for a whole family without `--force`.

use std::time::SystemTime;

use ipnet::IpNet;

use crate::control::{ControlError, Result};
use crate::store::NewEntry;

/// The source of entries added on the command line unless `--source`
/// names another.
pub const SOURCE: &str = "cli";

/// The most bytes a source name may have.
pub const MAX_SOURCE_BYTES: usize = 200;

/// Checks a source name: `cli`, or `KIND:NAME` such as `file:drop.txt` or
/// `feed:firehol`; at most [`MAX_SOURCE_BYTES`], with no control
/// characters or spaces at the ends.
pub fn check_source_name(name: &str) -> Result<&str> {
    let valid = !name.is_empty()
        && name.len() <= MAX_SOURCE_BYTES
        && name.trim() == name
        && !name.chars().any(char::is_control);
    if valid {
        Ok(name)
    } else {
        Err(ControlError::InvalidSetting(format!(
            "'{}' is not a source name (`cli`, or `KIND:NAME` like `file:drop.txt` or \
             `feed:firehol`: at most {MAX_SOURCE_BYTES} bytes, no control characters)",
            crate::text::excerpt(name)
        )))
    }
}

/// The entries of `nets` that list every address of their family
/// (`0.0.0.0/0`, `::/0`), which cfctl adds only when `force` is set: a
/// blocklist entry that drops every packet of a family, or an allowlist
/// entry that lets every one through, is more often a slip than a wish.
/// Returns them, so the caller can warn when forced.
pub fn whole_families(nets: &[IpNet], force: bool) -> Result<Vec<IpNet>> {
    let whole: Vec<IpNet> = nets
        .iter()
        .copied()
        .filter(super::covers_a_whole_family)
        .collect();
    match whole.first() {
        Some(net) if !force => Err(ControlError::WholeFamily(*net)),
        _ => Ok(whole),
    }
}

/// `nets` as entries with one `comment` and one expiry.
pub fn entries<'a>(
    nets: &[IpNet],
    comment: Option<&'a str>,
    expires: Option<SystemTime>,
) -> Vec<NewEntry<'a>> {
    nets.iter()
        .map(|&net| NewEntry {
            net,
            comment,
            expires,
        })
        .collect()
}
