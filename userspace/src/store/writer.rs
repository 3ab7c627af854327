//! The moves of memberships in one list inside a write transaction
//! ([`ListWriter`]): a source *joins* a network (a new membership, or a
//! renewed one) or *leaves* it, and the counts follow; what each move did
//! to the list as a whole says what the filter must change.

use super::schema::{
    encode_expiry, encode_net, memberships_of, networks_of, CountKey, ExpiryKey, MemberKey,
    MemberValue, NetBytes, SourceKey, ALL_SOURCES, COUNTS, UNINDEXED,
};
use super::{ListKind, NewEntry, ReplaceReport, StoreError};
use ipnet::IpNet;
use redb::{ReadableTable, ReadableTableMetadata, Table, WriteTransaction};
use std::collections::{HashMap, HashSet};
use std::ops::Bound;
use std::time::SystemTime;

/// Source names and their ids, as in the `sources` table.
pub(super) struct SourceIds {
    ids: HashMap<String, u32>,
    next: u32,
}

impl SourceIds {
    pub(super) fn from_names(names: HashMap<u32, String>) -> Self {
        let next = names.keys().max().map_or(0, |max| max + 1);
        let ids = names.into_iter().map(|(id, name)| (name, id)).collect();
        Self { ids, next }
    }

    /// The id of `name`, if it has one.
    pub(super) fn get(&self, name: &str) -> Option<u32> {
        self.ids.get(name).copied()
    }

    /// The id of `name`, recorded in `table` if new.
    pub(super) fn id(
        &mut self,
        table: &mut Table<u32, &'static str>,
        name: &str,
    ) -> Result<u32, redb::StorageError> {
        if let Some(id) = self.get(name) {
            return Ok(id);
        }
        let id = self.next;
        table.insert(id, name)?;
        self.ids.insert(name.to_owned(), id);
        self.next += 1;
        Ok(id)
    }
}

/// What a membership move did to the list as a whole.
pub(super) enum Moved {
    /// The network was not listed and now is / was listed and now is not.
    List,
    /// Other sources list it, before and after.
    OthersToo,
    /// Nothing: the source listed it already (join: renewed) or did not
    /// (leave).
    Nothing,
}

/// What a list holds of one network for one source.
#[derive(Default)]
pub(super) struct Held {
    /// Whether other sources list it.
    others: bool,
    /// The source's own membership, if it has one.
    own: Option<Membership>,
}

/// A membership as stored.
pub(super) struct Membership {
    comment: Option<String>,
    added: u64,
    expires: u64,
}

impl Held {
    /// Takes in one membership row of the network: the source's own, or
    /// another source's.
    pub(super) fn note(&mut self, own: bool, (comment, added, expires): (Option<&str>, u64, u64)) {
        if own {
            self.own = Some(Membership {
                comment: comment.map(str::to_owned),
                added,
                expires,
            });
        } else {
            self.others = true;
        }
    }
}

impl Held {
    /// What the source joining the network does to the list.
    pub(super) fn joined(&self) -> Moved {
        match (&self.own, self.others) {
            (Some(_), _) => Moved::Nothing,
            (None, true) => Moved::OthersToo,
            (None, false) => Moved::List,
        }
    }
}

impl Membership {
    /// Whether listing it again as `entry` says would change nothing (a
    /// renewal keeps the comment unless the entry gives one).
    pub(super) fn same_as(&self, entry: &NewEntry<'_>) -> bool {
        entry
            .comment
            .is_none_or(|comment| self.comment.as_deref() == Some(comment))
            && encode_expiry(entry.expires) == self.expires
    }
}

/// One network a replacement changes: an entry to list (and what the list
/// holds of its network), or, without one, a network the source drops.
pub(super) struct Step<'e, 'a> {
    net: NetBytes,
    entry: Option<&'e NewEntry<'a>>,
    held: Held,
}

/// A membership a change adds: its row is written after the change's
/// other moves ([`ListWriter::insert_new`]).
struct NewMembership<'c> {
    net: NetBytes,
    comment: Option<&'c str>,
    /// As stored ([`encode_expiry`]).
    expires: u64,
}

impl<'c> NewMembership<'c> {
    /// Its row's value in `members`, added at `added` (Unix seconds).
    fn value(&self, added: u64) -> (Option<&'c str>, u64, u64) {
        (self.comment, added, self.expires)
    }
}

/// The steps of a replacement, and the entries it keeps unchanged.
#[derive(Default)]
pub(super) struct Steps<'e, 'a> {
    pub(super) steps: Vec<Step<'e, 'a>>,
    pub(super) unchanged: usize,
}

impl<'e, 'a> Steps<'e, 'a> {
    /// Takes in network `net`, of which the list holds `held`, as entry
    /// `entry` lists it or (without one) as the source no longer does.
    pub(super) fn take(&mut self, net: NetBytes, entry: Option<&'e NewEntry<'a>>, held: Held) {
        match (entry, &held.own) {
            (Some(entry), Some(own)) if own.same_as(entry) => self.unchanged += 1,
            (None, None) => {}
            _ => self.steps.push(Step { net, entry, held }),
        }
    }

    /// Takes in the entries before listed network `net` (networks the
    /// list lacks), then `net`, of which the list holds `held`, with its
    /// entry if the next one lists it.
    pub(super) fn take_through(
        &mut self,
        entries: &mut std::iter::Peekable<std::slice::Iter<'e, (NetBytes, NewEntry<'a>)>>,
        net: NetBytes,
        held: Held,
    ) {
        while let Some((before, entry)) = entries.next_if(|(next, _)| *next < net) {
            self.take(*before, Some(entry), Held::default());
        }
        let entry = entries
            .next_if(|(next, _)| *next == net)
            .map(|(_, entry)| entry);
        self.take(net, entry, held);
    }
}

impl Steps<'_, '_> {
    /// What taking the steps does to the list, with `repeated` entries
    /// ignored; `decode` reads a stored network.
    pub(super) fn report(
        &self,
        repeated: usize,
        decode: impl Fn(&NetBytes) -> Result<IpNet, StoreError>,
    ) -> Result<ReplaceReport, StoreError> {
        let mut report = ReplaceReport {
            repeated,
            kept: self.unchanged,
            ..ReplaceReport::default()
        };
        for Step { net, entry, held } in &self.steps {
            match (entry, held.own.is_some(), held.others) {
                (Some(_), true, _) => report.kept += 1,
                (Some(entry), false, true) => report.joined.push(entry.net),
                (Some(entry), false, false) => report.added.push(entry.net),
                (None, _, true) => report.still_listed.push(decode(net)?),
                (None, _, false) => report.removed.push(decode(net)?),
            }
        }
        Ok(report)
    }
}

/// How many rows an ordered pass over a list reads in the time of one
/// range read (lookup) of a network: wanting fewer networks than a
/// `ROWS_PER_LOOKUP`th of the list, read each on its own; more, read the
/// list in one pass. The adds here and the update path (which looks up or
/// reads the entries around a change) choose by it, and so does a
/// replacement (see `ListWriter::replacement`).
pub const ROWS_PER_LOOKUP: u64 = 16;

/// Whether `wanted` networks of a list of `rows` memberships are read
/// faster in one ordered pass over the list than one by one
/// ([`ROWS_PER_LOOKUP`]).
pub(super) fn one_pass_reads(wanted: u64, rows: u64) -> bool {
    wanted.saturating_mul(ROWS_PER_LOOKUP) >= rows
}

/// The shortest run of new memberships between two rows of a list that
/// [`ListWriter::insert_new`] writes through a cursor before it inserts
/// the rest one by one.
const CURSOR_RUN: usize = 64;

/// Copies of `entries` keyed by their stored form, in order, the first of
/// any repeats kept (ordered writes touch each page of a table once), and
/// how many repeats there were. Copies, not references: the writes then
/// read the entries in order, where references to entries given in another
/// order would miss the cache on every one of a large list.
pub(super) fn in_order<'e, 'a: 'e>(
    entries: impl IntoIterator<Item = &'e NewEntry<'a>>,
) -> (Vec<(NetBytes, NewEntry<'a>)>, usize) {
    let mut entries: Vec<(NetBytes, NewEntry<'a>)> = entries
        .into_iter()
        .map(|entry| (encode_net(&entry.net), *entry))
        .collect();
    let given = entries.len();
    entries.sort_by_key(|(net, _)| *net);
    entries.dedup_by_key(|(net, _)| *net);
    let repeated = given - entries.len();
    (entries, repeated)
}

/// The open tables of one list inside a write transaction, and the count
/// changes to write when done.
pub(super) struct ListWriter<'t> {
    pub(super) list: ListKind,
    pub(super) members: Table<'t, MemberKey, MemberValue>,
    pub(super) expiry: Table<'t, ExpiryKey, ()>,
    pub(super) by_source: Table<'t, SourceKey, ()>,
    /// The `unindexed_sources` table, and the list's ids in it.
    pub(super) unindexed_table: Table<'t, CountKey, ()>,
    pub(super) unindexed: HashSet<u32>,
    pub(super) counts: Table<'t, CountKey, u64>,
    pub(super) deltas: HashMap<u32, i64>,
    pub(super) now: u64,
}

impl<'t> ListWriter<'t> {
    pub(super) fn open(
        txn: &'t WriteTransaction,
        list: ListKind,
        now: u64,
    ) -> Result<Self, redb::Error> {
        let tables = list.tables();
        let unindexed_table = txn.open_table(UNINDEXED)?;
        let mut unindexed = HashSet::new();
        for row in unindexed_table.range((list.code(), 0)..=(list.code(), u32::MAX))? {
            unindexed.insert(row?.0.value().1);
        }
        Ok(Self {
            list,
            members: txn.open_table(tables.members)?,
            expiry: txn.open_table(tables.expiry)?,
            by_source: txn.open_table(tables.by_source)?,
            unindexed_table,
            unindexed,
            counts: txn.open_table(COUNTS)?,
            deltas: HashMap::new(),
            now,
        })
    }

    /// Whether any source lists `net`.
    pub(super) fn listed(&self, net: NetBytes) -> Result<bool, redb::Error> {
        Ok(self.members.range(memberships_of(&net))?.next().is_some())
    }

    /// What the list holds of `net` for `source`: one range read of its
    /// memberships.
    pub(super) fn held(&self, source: u32, net: NetBytes) -> Result<Held, redb::Error> {
        let mut held = Held::default();
        for row in self.members.range(memberships_of(&net))? {
            let (key, value) = row?;
            held.note(key.value().1 == source, value.value());
        }
        Ok(held)
    }

    /// Whether `wanted` networks are read faster in one ordered pass over
    /// the list than one by one ([`ROWS_PER_LOOKUP`]).
    pub(super) fn one_pass_for(&self, wanted: u64) -> Result<bool, redb::Error> {
        Ok(one_pass_reads(wanted, self.members.len()?))
    }

    /// What the list holds of each of `nets` (sorted, distinct) for
    /// `source`. Many networks are read in one ordered pass over the
    /// memberships between the first and the last; a few, one range read
    /// each.
    pub(super) fn held_many(
        &self,
        source: u32,
        nets: &[NetBytes],
    ) -> Result<Vec<Held>, redb::Error> {
        let (Some(&first), Some(&last)) = (nets.first(), nets.last()) else {
            return Ok(Vec::new());
        };
        if !self.one_pass_for(u64::try_from(nets.len()).unwrap_or(u64::MAX))? {
            return nets.iter().map(|&net| self.held(source, net)).collect();
        }
        let mut held: Vec<Held> = nets.iter().map(|_| Held::default()).collect();
        let mut index = 0;
        for row in self.members.range((&first, 0)..=(&last, u32::MAX))? {
            let (key, value) = row?;
            let (&net, member) = key.value();
            while nets[index] < net {
                index += 1;
            }
            if nets[index] == net {
                held[index].note(member == source, value.value());
            }
        }
        Ok(held)
    }

    /// What making `entries` (sorted, distinct) all that `source` lists
    /// takes: a [`Step`] for each entry the source does not list as given
    /// and for each network it lists that `entries` lack, in order. A
    /// source that lists few of the list's networks ([`ROWS_PER_LOOKUP`])
    /// has them read from the index by source, and only those and the
    /// entries' own are read, as an add reads them. One that lists many is
    /// replaced in one ordered pass over the whole list, which also tells
    /// what the list holds of each entry: no lookups.
    pub(super) fn replacement<'e, 'a>(
        &self,
        source: u32,
        entries: &'e [(NetBytes, NewEntry<'a>)],
    ) -> Result<Steps<'e, 'a>, redb::Error> {
        let mut steps = Steps::default();
        if let Some(mut nets) = self.few_nets_of(source)? {
            nets.extend(entries.iter().map(|(net, _)| *net));
            nets.sort_unstable();
            nets.dedup();
            let mut new = entries.iter().peekable();
            for (net, held) in nets.iter().zip(self.held_many(source, &nets)?) {
                let entry = new.next_if(|(next, _)| next == net).map(|(_, entry)| entry);
                steps.take(*net, entry, held);
            }
            return Ok(steps);
        }
        let mut new = entries.iter().peekable();
        // Each network's memberships are adjacent rows.
        let mut group: Option<(NetBytes, Held)> = None;
        for row in self.members.iter()? {
            let (key, value) = row?;
            let (&net, member) = key.value();
            if let Some((current, held)) = group.take_if(|(current, _)| *current != net) {
                steps.take_through(&mut new, current, held);
            }
            let (_, held) = group.get_or_insert_with(|| (net, Held::default()));
            held.note(member == source, value.value());
        }
        if let Some((current, held)) = group {
            steps.take_through(&mut new, current, held);
        }
        // Entries after the last listed network: the list lacks them.
        for (net, entry) in new {
            steps.take(*net, Some(entry), Held::default());
        }
        Ok(steps)
    }

    /// Source `source` joins each network of `joins` (sorted, distinct),
    /// of which the list holds what each says, with its comment and expiry
    /// ([`join`](Self::join)).
    pub(super) fn join_all<'c>(
        &mut self,
        source: u32,
        joins: impl IntoIterator<Item = (NetBytes, Held, Option<&'c str>, Option<SystemTime>)>,
    ) -> Result<(), redb::Error> {
        let mut new = Vec::new();
        for (net, held, comment, expires) in joins {
            self.join(source, net, held, comment, expires, &mut new)?;
        }
        self.insert_new(source, &new)
    }

    /// Source `source`, whose hold on `net` is `held`, lists it with
    /// `comment` until `expires`; a membership it had keeps its time added
    /// (and its comment, unless `comment` replaces it). A renewal that
    /// changes nothing writes nothing, so a refresh that keeps most of a
    /// list costs only the reads. A new membership's row is left in `new`,
    /// for [`insert_new`](Self::insert_new) to write with the others.
    fn join<'c>(
        &mut self,
        source: u32,
        net: NetBytes,
        held: Held,
        comment: Option<&'c str>,
        expires: Option<SystemTime>,
        new: &mut Vec<NewMembership<'c>>,
    ) -> Result<(), redb::Error> {
        let expires = encode_expiry(expires);
        let moved = held.joined();
        if let Some(own) = held.own {
            let comment = comment.or(own.comment.as_deref());
            if comment != own.comment.as_deref() || expires != own.expires {
                self.members
                    .insert((&net, source), (comment, own.added, expires))?;
            }
            if own.expires != expires {
                if own.expires != 0 {
                    self.expiry.remove((own.expires, source, &net))?;
                }
                if expires != 0 {
                    self.expiry.insert((expires, source, &net), ())?;
                }
            }
            return Ok(());
        }
        new.push(NewMembership {
            net,
            comment,
            expires,
        });
        if self.indexed(source) {
            self.by_source.insert((source, &net), ())?;
        }
        if expires != 0 {
            self.expiry.insert((expires, source, &net), ())?;
        }
        *self.deltas.entry(source).or_default() += 1;
        if let Moved::List = moved {
            *self.deltas.entry(ALL_SOURCES).or_default() += 1;
        }
        Ok(())
    }

    /// Writes `source`'s new memberships `new` (sorted by network; the list
    /// has none of them). A run of them that falls between two adjacent
    /// rows of the list goes in through a cursor, which fills pages in
    /// order with no search of the tree per row: on an empty list, or past
    /// its last row, all of them at once, about 3.5 times faster than one
    /// insert each. Once a run is shorter than [`CURSOR_RUN`], the list's
    /// rows interleave with the new ones, and the rest are inserted one by
    /// one: moving a cursor past a row writes out its pending run, which
    /// costs more than a short run saves.
    fn insert_new(&mut self, source: u32, new: &[NewMembership<'_>]) -> Result<(), redb::Error> {
        let mut rest = new;
        while let Some(first) = rest.first() {
            let mut cursor = self
                .members
                .lower_bound_mut(Bound::Included((&first.net, source)))?;
            let next_row = cursor.peek_next()?.map(|(key, _)| {
                let (&net, member) = key.value();
                (net, member)
            });
            let run = rest
                .iter()
                .take_while(|row| next_row.is_none_or(|next| (row.net, source) < next))
                .count();
            let (run_rows, after) = rest.split_at(run);
            for row in run_rows {
                cursor.insert_before((&row.net, source), row.value(self.now))?;
            }
            cursor.close()?;
            rest = after;
            if run < CURSOR_RUN {
                break;
            }
        }
        for row in rest {
            self.members
                .insert((&row.net, source), row.value(self.now))?;
        }
        Ok(())
    }

    /// Source `source` no longer lists `net`.
    pub(super) fn leave(&mut self, source: u32, net: NetBytes) -> Result<Moved, redb::Error> {
        if !self.drop_membership(source, net)? {
            return Ok(Moved::Nothing);
        }
        let others = self.listed(net)?;
        Ok(self.count_leave(others))
    }

    /// Takes the steps of a replacement for `source`: lists each step's
    /// entry, or leaves its network (which the source lists).
    pub(super) fn take_steps(
        &mut self,
        source: u32,
        steps: Vec<Step<'_, '_>>,
    ) -> Result<(), redb::Error> {
        let mut new = Vec::new();
        let mut dropped = Vec::new();
        for Step { net, entry, held } in steps {
            match entry {
                Some(entry) => {
                    self.join(source, net, held, entry.comment, entry.expires, &mut new)?;
                }
                None => dropped.push((net, held)),
            }
        }
        self.drop_all(source, &dropped)?;
        self.insert_new(source, &new)
    }

    /// Removes `source`'s memberships of the networks of `dropped` (sorted,
    /// distinct; the source lists each as its [`Held`] says) from every
    /// table. Many of them leave in one pass over the memberships between
    /// the first and the last, which rewrites each page once (redb's
    /// `retain_in`: a replace dropping half of 10^6 rows about 3 to 4 times
    /// faster than a delete each); a few, a delete each
    /// ([`one_pass_reads`]).
    fn drop_all(&mut self, source: u32, dropped: &[(NetBytes, Held)]) -> Result<(), redb::Error> {
        let (Some((first, _)), Some((last, _))) = (dropped.first(), dropped.last()) else {
            return Ok(());
        };
        if !self.one_pass_for(dropped.len() as u64)? {
            for (net, held) in dropped {
                if self.drop_membership(source, *net)? {
                    self.count_leave(held.others);
                }
            }
            return Ok(());
        }
        let mut next = dropped.iter().map(|(net, _)| net).peekable();
        self.members
            .retain_in((first, source)..=(last, source), |(net, member), _| {
                while next.next_if(|wanted| *wanted < net).is_some() {}
                !(member == source && next.peek() == Some(&net))
            })?;
        for (net, held) in dropped {
            let expires = held.own.as_ref().map_or(0, |own| own.expires);
            self.forget_membership(source, *net, expires)?;
            self.count_leave(held.others);
        }
        Ok(())
    }

    /// Removes `source`'s membership of `net` from every table; whether it
    /// had one.
    fn drop_membership(&mut self, source: u32, net: NetBytes) -> Result<bool, redb::Error> {
        let Some(expires) = self
            .members
            .remove((&net, source))?
            .map(|old| old.value().2)
        else {
            return Ok(false);
        };
        self.forget_membership(source, net, expires)?;
        Ok(true)
    }

    /// Removes what the tables beside the memberships hold of `source`'s
    /// membership of `net`, which expires at `expires` (as stored), and
    /// counts it gone: its row in `members` is gone already.
    fn forget_membership(
        &mut self,
        source: u32,
        net: NetBytes,
        expires: u64,
    ) -> Result<(), redb::Error> {
        if self.indexed(source) {
            self.by_source.remove((source, &net))?;
        }
        if expires != 0 {
            self.expiry.remove((expires, source, &net))?;
        }
        *self.deltas.entry(source).or_default() -= 1;
        Ok(())
    }

    /// Counts a membership gone: the list loses the network unless
    /// `others` still list it.
    pub(super) fn count_leave(&mut self, others: bool) -> Moved {
        if others {
            Moved::OthersToo
        } else {
            *self.deltas.entry(ALL_SOURCES).or_default() -= 1;
            Moved::List
        }
    }

    /// No source lists `net` any more.
    pub(super) fn leave_all(&mut self, net: NetBytes) -> Result<Moved, redb::Error> {
        let mut sources = Vec::new();
        for row in self.members.range(memberships_of(&net))? {
            sources.push(row?.0.value().1);
        }
        let mut moved = Moved::Nothing;
        for source in sources {
            moved = self.leave(source, net)?;
        }
        Ok(moved)
    }

    /// Every network `source` lists, from the index by source, if the
    /// index holds them and reading them one by one costs less than one
    /// pass over the list (see [`ROWS_PER_LOOKUP`]).
    pub(super) fn few_nets_of(&self, source: u32) -> Result<Option<Vec<NetBytes>>, redb::Error> {
        if !self.indexed(source) || self.one_pass_for(self.count_of(source)?)? {
            return Ok(None);
        }
        let mut nets = Vec::new();
        for row in self.by_source.range(networks_of(source))? {
            let (_, &net) = row?.0.value();
            nets.push(net);
        }
        Ok(Some(nets))
    }

    /// Whether the index by source holds `source`'s memberships.
    pub(super) fn indexed(&self, source: u32) -> bool {
        !self.unindexed.contains(&source)
    }

    /// Before a change that leaves `source` listing `after` networks:
    /// takes it out of the index by source if its networks will be read in
    /// one pass over the list anyway ([`one_pass_reads`]), where the index
    /// would only double the cost of every write of its memberships; puts
    /// it back, from one pass over the memberships, once it lists less than
    /// half that line, so a source whose share wavers around the line is
    /// not dropped from the index and rebuilt on every change.
    pub(super) fn settle_index(&mut self, source: u32, after: u64) -> Result<(), redb::Error> {
        let rows = (self.members.len()?)
            .saturating_sub(self.count_of(source)?)
            .saturating_add(after);
        let key = (self.list.code(), source);
        if self.indexed(source) && one_pass_reads(after, rows) {
            self.by_source
                .retain_in(networks_of(source), |_, ()| false)?;
            self.unindexed_table.insert(key, ())?;
            self.unindexed.insert(source);
        } else if !self.indexed(source) && !one_pass_reads(after.saturating_mul(2), rows) {
            let mut nets = Vec::new();
            for row in self.members.iter()? {
                let (&net, member) = row?.0.value();
                if member == source {
                    nets.push(net);
                }
            }
            for net in &nets {
                self.by_source.insert((source, net), ())?;
            }
            self.unindexed_table.remove(key)?;
            self.unindexed.remove(&source);
        }
        Ok(())
    }

    /// How many networks `source` lists, as last written.
    pub(super) fn count_of(&self, source: u32) -> Result<u64, redb::Error> {
        let key = (self.list.code(), source);
        Ok(self.counts.get(key)?.map_or(0, |count| count.value()))
    }

    /// Writes the count changes.
    pub(super) fn finish(mut self) -> Result<(), redb::Error> {
        for (source, delta) in std::mem::take(&mut self.deltas) {
            let key = (self.list.code(), source);
            let count = self.count_of(source)?;
            let count = count.saturating_add_signed(delta);
            if count == 0 {
                self.counts.remove(key)?;
            } else {
                self.counts.insert(key, count)?;
            }
        }
        Ok(())
    }
}
