//! What goes in and out of the store: entries to add ([`NewEntry`]),
//! stored ones with their sources ([`Entry`], [`Membership`]), and what a
//! change did.

use std::time::SystemTime;

use ipnet::IpNet;

/// An entry to add for one source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewEntry<'a> {
    /// The network (host bits zero).
    pub net: IpNet,
    /// Its comment (a Spamhaus SBL id), if any.
    pub comment: Option<&'a str>,
    /// When the source's listing of it ends, if it does.
    pub expires: Option<SystemTime>,
}

/// One source's listing of a network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Membership {
    /// The source: `cli`, `file:NAME`, `feed:NAME`, ...
    pub source: String,
    /// Its comment, if any.
    pub comment: Option<String>,
    /// When the source first listed it (whole seconds).
    pub added: SystemTime,
    /// When the source's listing ends, if it does.
    pub expires: Option<SystemTime>,
}

/// A stored entry: a network and every source that lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The network.
    pub net: IpNet,
    /// Its sources, by source id (the order they were first seen).
    pub sources: Vec<Membership>,
}

/// What an add did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AddReport {
    /// Networks that were not listed by any source and now are.
    pub added: Vec<IpNet>,
    /// Networks other sources listed, now listed by this one too.
    pub joined: Vec<IpNet>,
    /// Networks this source listed already: kept, with the new comment and
    /// expiry if given.
    pub already_listed: Vec<IpNet>,
    /// Entries that repeated an earlier entry's network, ignored.
    pub repeated: usize,
}

/// What a delete did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeleteReport {
    /// Networks that are not listed by any source any more.
    pub deleted: Vec<IpNet>,
    /// Networks this source no longer lists that other sources still do.
    pub still_listed: Vec<IpNet>,
    /// Networks this source did not list.
    pub missing: Vec<IpNet>,
}

/// What a replace of one source's entries did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplaceReport {
    /// Networks that were not listed by any source and now are.
    pub added: Vec<IpNet>,
    /// Networks other sources listed, now listed by this one too.
    pub joined: Vec<IpNet>,
    /// Networks that are not listed by any source any more.
    pub removed: Vec<IpNet>,
    /// Networks this source no longer lists that other sources still do.
    pub still_listed: Vec<IpNet>,
    /// Networks the source listed before and still does: their time added
    /// is kept, comment and expiry are the new ones.
    pub kept: usize,
    /// Entries that repeated an earlier entry's network, ignored.
    pub repeated: usize,
}

/// What an expiry sweep did, per list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExpireReport {
    /// Memberships that expired.
    pub expired: usize,
    /// Networks that are not listed by any source any more.
    pub removed: Vec<IpNet>,
}
