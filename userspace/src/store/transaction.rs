//! Write transactions ([`StoreTransaction`]): one source's entries added,
//! deleted or replaced, expired memberships swept, states written
//! ([`super::state`]), all or nothing at [`commit`](StoreTransaction::commit).
//!
//! Every change is made of moves on one list ([`super::writer`]). A
//! network is listed while at least one membership holds it, so the
//! reports say which networks the list gained or lost as a whole: those
//! are what the filter must change.

use std::time::SystemTime;

use ipnet::IpNet;
use redb::{ReadableTable, WriteTransaction};

use super::schema::{encode_expiry, encode_net, NetBytes, SOURCES};
use super::writer::{in_order, Held, ListWriter, Moved, SourceIds, Steps};
use super::{
    AddReport, DeleteReport, ExpireReport, InStore, ListKind, NewEntry, ReplaceReport, Store,
    StoreError,
};
use crate::time::unix_seconds;

/// A write transaction: nothing it does is visible, or persisted, before
/// [`commit`](Self::commit); dropping it discards everything.
pub struct StoreTransaction<'s> {
    pub(super) store: &'s Store,
    pub(super) txn: WriteTransaction,
    pub(super) now: SystemTime,
    pub(super) sources: SourceIds,
}

impl StoreTransaction<'_> {
    /// The id of source `name`, recorded if new.
    fn source_id(&mut self, name: &str) -> Result<u32, StoreError> {
        let mut table = self.txn.open_table(SOURCES).in_store(self.store)?;
        self.sources.id(&mut table, name).in_store(self.store)
    }

    fn writer(&self, list: ListKind) -> Result<ListWriter<'_>, StoreError> {
        ListWriter::open(&self.txn, list, unix_seconds(self.now)).in_store(self.store)
    }

    /// Source `source` lists `entries` in `list` (later repeats of a
    /// network are ignored); networks it listed already keep their time
    /// added and take the new comment and expiry.
    pub fn add<'e, 'a: 'e>(
        &mut self,
        list: ListKind,
        source: &str,
        entries: impl IntoIterator<Item = &'e NewEntry<'a>>,
    ) -> Result<AddReport, StoreError> {
        self.add_beside(list, source, entries, |_| ())
            .map(|(report, ())| report)
    }

    /// [`add`](Self::add), and `beside` run with its report on another
    /// thread while the entries are written: the report is known once the
    /// list has been read (as for [`replace_beside`](Self::replace_beside)).
    pub fn add_beside<'e, 'a: 'e, R: Send>(
        &mut self,
        list: ListKind,
        source: &str,
        entries: impl IntoIterator<Item = &'e NewEntry<'a>>,
        beside: impl FnOnce(&AddReport) -> R + Send,
    ) -> Result<(AddReport, R), StoreError> {
        let source = self.source_id(source)?;
        let (entries, repeated) = in_order(entries);
        let read = |writer: &ListWriter<'_>| {
            let nets: Vec<NetBytes> = entries.iter().map(|(net, _)| *net).collect();
            let held = writer.held_many(source, &nets).in_store(self.store)?;
            let mut report = AddReport {
                repeated,
                ..AddReport::default()
            };
            for ((_, entry), held) in entries.iter().zip(&held) {
                match held.joined() {
                    Moved::List => report.added.push(entry.net),
                    Moved::OthersToo => report.joined.push(entry.net),
                    Moved::Nothing => report.already_listed.push(entry.net),
                }
            }
            Ok((report, held))
        };
        let write = |writer: &mut ListWriter<'_>, held: Vec<Held>| {
            let joining = held
                .iter()
                .filter(|held| !matches!(held.joined(), Moved::Nothing))
                .count();
            let after = writer.count_of(source)? + joining as u64;
            writer.settle_index(source, after)?;
            writer.join_all(
                source,
                entries
                    .iter()
                    .zip(held)
                    .map(|((net, entry), held)| (*net, held, entry.comment, entry.expires)),
            )
        };
        self.read_then_write(list, read, write, beside)
    }

    /// Source `source` (every source, if `None`) no longer lists `nets` in
    /// `list`.
    pub fn delete(
        &mut self,
        list: ListKind,
        source: Option<&str>,
        nets: impl IntoIterator<Item = IpNet>,
    ) -> Result<DeleteReport, StoreError> {
        let store = self.store;
        let source = match source {
            None => None,
            Some(name) => match self.sources.get(name) {
                Some(id) => Some(id),
                None => {
                    return Ok(DeleteReport {
                        missing: nets.into_iter().collect(),
                        ..DeleteReport::default()
                    })
                }
            },
        };
        store.guarded(|| {
            let mut writer = self.writer(list)?;
            let mut report = DeleteReport::default();
            for net in nets {
                let key = encode_net(&net);
                let moved = match source {
                    Some(source) => writer.leave(source, key),
                    None => writer.leave_all(key),
                };
                match moved.in_store(store)? {
                    Moved::List => report.deleted.push(net),
                    Moved::OthersToo => report.still_listed.push(net),
                    Moved::Nothing => report.missing.push(net),
                }
            }
            writer.finish().in_store(store)?;
            Ok(report)
        })
    }

    /// Makes `entries` the whole of what source `source` lists in `list`
    /// (ipset swap semantics, for one source; later repeats ignored).
    pub fn replace<'a>(
        &mut self,
        list: ListKind,
        source: &str,
        entries: impl IntoIterator<Item = NewEntry<'a>>,
    ) -> Result<ReplaceReport, StoreError> {
        let entries: Vec<NewEntry<'a>> = entries.into_iter().collect();
        self.replace_beside(list, source, &entries, |_| ())
            .map(|(report, ())| report)
    }

    /// [`replace`](Self::replace), and `beside` run with its report on
    /// another thread while the replacement is written: the report is known
    /// once the list has been read, so work that needs only the change
    /// (planning the filter keys around it) overlaps the writes.
    pub fn replace_beside<'e, 'a: 'e, R: Send>(
        &mut self,
        list: ListKind,
        source: &str,
        entries: impl IntoIterator<Item = &'e NewEntry<'a>>,
        beside: impl FnOnce(&ReplaceReport) -> R + Send,
    ) -> Result<(ReplaceReport, R), StoreError> {
        let source = self.source_id(source)?;
        let (entries, repeated) = in_order(entries);
        let store = self.store;
        let read = |writer: &ListWriter<'_>| {
            let steps = writer.replacement(source, &entries).in_store(store)?;
            let report = steps.report(repeated, |net| store.decode_net(net))?;
            Ok((report, steps))
        };
        let write = |writer: &mut ListWriter<'_>, steps: Steps<'_, '_>| {
            writer.settle_index(source, entries.len() as u64)?;
            writer.take_steps(source, steps.steps)
        };
        self.read_then_write(list, read, write, beside)
    }

    /// Removes from `list` every membership that expires at `until` or
    /// before.
    pub fn expire(
        &mut self,
        list: ListKind,
        until: SystemTime,
    ) -> Result<ExpireReport, StoreError> {
        let store = self.store;
        let until = encode_expiry(Some(until));
        store.guarded(|| {
            let mut writer = self.writer(list)?;
            let mut due = Vec::new();
            for row in writer
                .expiry
                .range((1, 0, &[0; 18])..=(until, u32::MAX, &[u8::MAX; 18]))
                .in_store(store)?
            {
                let (_, source, &net) = row.in_store(store)?.0.value();
                due.push((source, net));
            }
            let mut report = ExpireReport {
                expired: due.len(),
                removed: Vec::new(),
            };
            for (source, net) in due {
                if let Moved::List = writer.leave(source, net).in_store(store)? {
                    report.removed.push(store.decode_net(&net)?);
                }
            }
            writer.finish().in_store(store)?;
            Ok(report)
        })
    }

    /// A change of `list` whose report `read` knows from what the list
    /// holds, before `write` makes it: `beside` runs with the report on
    /// another thread while the writes are made, so work that needs only
    /// the change (planning the filter keys around it) overlaps them. A
    /// panic in `beside` is resumed once the writes are done.
    fn read_then_write<T: Sync, P, R: Send>(
        &self,
        list: ListKind,
        read: impl FnOnce(&ListWriter<'_>) -> Result<(T, P), StoreError>,
        write: impl FnOnce(&mut ListWriter<'_>, P) -> Result<(), redb::Error>,
        beside: impl FnOnce(&T) -> R + Send,
    ) -> Result<(T, R), StoreError> {
        let store = self.store;
        let (report, beside) = store.guarded(|| {
            let mut writer = self.writer(list)?;
            let (report, prepared) = read(&writer)?;
            let (written, beside) = std::thread::scope(|scope| {
                let beside = scope.spawn(|| beside(&report));
                let written = write(&mut writer, prepared).and_then(|()| writer.finish());
                (written, beside.join())
            });
            written.in_store(store)?;
            Ok((report, beside))
        })?;
        // Outside `guarded`, which would take a panic for redb's.
        let beside = beside.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        Ok((report, beside))
    }

    /// Makes every change of the transaction durable, atomically.
    pub fn commit(self) -> Result<(), StoreError> {
        let store = self.store;
        store.guarded(|| self.txn.commit().in_store(store))
    }
}
