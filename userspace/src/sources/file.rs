//! List files as a source: `cfctl import FILE` lists the file's entries
//! under source `file:FILE` (or a name given with `--source`), added to
//! what the source lists or, with `--replace`, as all that it lists. The
//! feeds take their lists' entries the same way.

use std::time::SystemTime;

use crate::netlist::ParsedList;
use crate::store::NewEntry;

/// The source a list read from `name` belongs to unless told otherwise.
pub fn source_of(name: &str) -> String {
    format!("file:{name}")
}

/// The entries of a parsed list, with their comments, expiring at
/// `expires` if given.
pub fn entries(list: &ParsedList, expires: Option<SystemTime>) -> Vec<NewEntry<'_>> {
    list.entries
        .iter()
        .map(|listed| NewEntry {
            net: listed.net,
            comment: listed.comment.as_deref(),
            expires,
        })
        .collect()
}
