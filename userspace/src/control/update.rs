//! The update path: one change of a list, in the store and in the live
//! filter, in the order that keeps the live filter a superset of the
//! committed store at every instant, crash or not.
//!
//! 1. A store transaction records the change (nothing is visible yet).
//! 2. The live filter is marked as being changed by this process
//!    ([`LiveFilter::begin_update`]).
//! 3. Everything the change adds goes into the live filter: for a small
//!    change, the new keys of an exact [`KeyDiff`] (their prefilter bits
//!    first; `filter-core` writes each relocation's destination before
//!    clearing its source); for a bulk change, a rebuild, or a replace, a
//!    new table holding the old and the new entries together, swapped in
//!    atomically. New allowlist entries go into the tries.
//! 4. The transaction commits.
//! 5. Everything the change removes leaves the live filter: the diff's
//!    keys, then the prefilter bits no stored entry needs (each checked
//!    against every entry that can mark it); for a bulk change, a table of
//!    the new entries alone is swapped in. Removed allowlist entries leave
//!    the tries.
//! 6. The mark is cleared.
//!
//! A listed address is therefore never unblocked, and an allowlisted one
//! never blocked, by a change in flight: a crash between 3 and 6 leaves
//! only extra keys (or extra allowlist entries) and the mark, and the next
//! cfctl command to open the filter rebuilds it from the committed store
//! before doing anything else ([`Control::repair`]). A full filter undoes
//! step 3 completely (prefilter bits too) and commits nothing; a failed
//! commit repairs the filter from the store.
//!
//! One exception, for a replace (or a bulk delete) whose old and new
//! entries together do not fit the table: the table of the new entries
//! alone is swapped in before the commit. Until the commit, the entries
//! being removed are not blocked although the store still lists them; a
//! crash there leaves the mark, and the repair blocks them again.
//!
//! For tests, `CFCTL_CRASH_AT=<point>` makes cfctl abort at a named point
//! of this path ([`crash_point`]), the way `kill -9` would.

use foldhash::{HashSet, HashSetExt};
use std::net::IpAddr;
use std::time::SystemTime;

use ipnet::IpNet;

use super::capacity::WayOut;
use super::diff::planned_diff;
use super::error::{ControlError, Result};
use super::report::{ChangeReport, FilterUpdate};
use super::Control;
use crate::plan::{ActiveLengths, KeyDiff, KeyPlan, PlanError, PlanLimits};
use crate::store::{ListKind, NewEntry, Store, StoreTransaction};
use crate::xdp::{LiveFilter, XdpError};

/// Reports the progress of long operations (a progress bar on a terminal).
pub trait Progress {
    /// A stage of `total` steps (0: unknown) starts.
    fn start(&self, stage: &str, total: u64);
    /// `steps` more steps of the current stage are done.
    fn advance(&self, steps: u64);
}

/// Reports nothing.
pub struct NoProgress;

impl Progress for NoProgress {
    fn start(&self, _stage: &str, _total: u64) {}
    fn advance(&self, _steps: u64) {}
}

/// A change of one list.
#[derive(Clone, Copy, Debug)]
pub enum Change<'a> {
    /// `source` lists these entries too (those it listed already take the
    /// new comment and expiry).
    Add {
        /// The source.
        source: &'a str,
        /// The entries.
        entries: &'a [NewEntry<'a>],
    },
    /// `source` (every source, if `None`) no longer lists these networks.
    Delete {
        /// The source, or `None` for every one.
        source: Option<&'a str>,
        /// The networks.
        nets: &'a [IpNet],
    },
    /// These entries are all that `source` lists (ipset swap semantics,
    /// for one source).
    Replace {
        /// The source.
        source: &'a str,
        /// The entries.
        entries: &'a [NewEntry<'a>],
    },
    /// Every membership that expires at `until` or before ends.
    Expire {
        /// The time expiry is checked against.
        until: SystemTime,
    },
}

/// A change with each network to delete once; the store drops repeated
/// entries of an add or a replace itself (the first of each kept).
enum UniqueChange<'a> {
    Add(&'a str, &'a [NewEntry<'a>]),
    Delete(Option<&'a str>, Vec<IpNet>),
    Replace(&'a str, &'a [NewEntry<'a>]),
    Expire(SystemTime),
}

impl<'a> Change<'a> {
    /// The change without networks to delete given again, and how many
    /// were.
    fn without_repeats(self) -> (UniqueChange<'a>, usize) {
        match self {
            Change::Add { source, entries } => (UniqueChange::Add(source, entries), 0),
            Change::Delete { source, nets } => {
                let mut seen = HashSet::with_capacity(nets.len());
                let unique: Vec<IpNet> = nets
                    .iter()
                    .copied()
                    .filter(|net| seen.insert(*net))
                    .collect();
                let repeated = nets.len() - unique.len();
                (UniqueChange::Delete(source, unique), repeated)
            }
            Change::Replace { source, entries } => (UniqueChange::Replace(source, entries), 0),
            Change::Expire { until } => (UniqueChange::Expire(until), 0),
        }
    }
}

impl UniqueChange<'_> {
    fn operation(&self) -> &'static str {
        match self {
            UniqueChange::Add(..) => "add",
            UniqueChange::Delete(..) => "delete",
            UniqueChange::Replace(..) => "replace",
            UniqueChange::Expire(_) => "expire",
        }
    }

    /// The source changed, `*` for every source.
    fn source(&self) -> &str {
        match self {
            UniqueChange::Add(source, _) | UniqueChange::Replace(source, _) => source,
            UniqueChange::Delete(source, _) => source.unwrap_or("*"),
            UniqueChange::Expire(_) => "*",
        }
    }
}

/// Aborts the process, as `kill -9` would, if the environment variable
/// `CFCTL_CRASH_AT` names `point`: the crash tests' way to stop cfctl at
/// every step of the update path.
pub(crate) fn crash_point(point: &str) {
    if std::env::var_os("CFCTL_CRASH_AT").is_some_and(|at| at == point) {
        std::process::abort();
    }
}

/// How an exact diff went.
enum Written<'s> {
    /// Written and committed.
    Done(FilterUpdate),
    /// The new keys did not fit beside the old ones; nothing changed.
    TooFull(Box<StoreTransaction<'s>>),
}

/// What a blocklist change does to the live filter.
enum LivePlan {
    /// The exact diff of a small change.
    Diff(KeyDiff),
    /// Whole tables.
    Tables(Box<Tables>),
}

/// The key plans of the whole tables a change swaps in.
struct Tables {
    /// The list after the change.
    new: KeyPlan,
    /// The list before and after together, when the change removes
    /// entries (an error if that does not fit a plan).
    union: Option<std::result::Result<KeyPlan, PlanError>>,
}

impl Tables {
    /// The plans of the committed list of `store` that gains `added` and
    /// loses `removed`.
    fn plan(store: &Store, added: &[IpNet], removed: &[IpNet], limits: PlanLimits) -> Result<Self> {
        let gone: HashSet<IpNet> = removed.iter().copied().collect();
        let new: Vec<IpNet> = store
            .nets(ListKind::Blocklist)?
            .into_iter()
            .filter(|net| !gone.contains(net))
            .chain(added.iter().copied())
            .collect();
        let union = (!removed.is_empty())
            .then(|| KeyPlan::build(new.iter().chain(removed).copied(), limits));
        Ok(Self {
            new: KeyPlan::build(new, limits)?,
            union,
        })
    }
}

/// What `added` and `removed` do to the live filter of `lengths`, planned
/// from the committed `store` (beside the store's writes): the exact diff
/// of a small change ([`planned_diff`]), whole tables otherwise.
fn live_plan(
    store: &Store,
    added: &[IpNet],
    removed: &[IpNet],
    lengths: &ActiveLengths,
    limits: PlanLimits,
) -> Result<LivePlan> {
    Ok(
        match planned_diff(store, added, removed, lengths, limits)? {
            Some(diff) => LivePlan::Diff(diff),
            None => LivePlan::Tables(Box::new(Tables::plan(store, added, removed, limits)?)),
        },
    )
}

/// What the store part of a change did to the list as a whole, for the
/// live part.
struct Recorded {
    added: Vec<IpNet>,
    removed: Vec<IpNet>,
}

impl Control {
    /// Ends every membership that has expired, in the store and the live
    /// filter: one batched update per list that has any. A filter built
    /// from another store is left alone (and the store too, until a command
    /// takes the filter over).
    pub fn expire_due(&mut self) -> Result<Vec<ChangeReport>> {
        let now = SystemTime::now();
        if self.store.next_expiry()?.is_none_or(|next| next > now) {
            return Ok(Vec::new());
        }
        let mut reports = Vec::new();
        for list in ListKind::ALL {
            match self.change(list, Change::Expire { until: now }, &NoProgress) {
                Ok(report) => reports.push(report),
                Err(ControlError::OtherStore { .. }) => break,
                Err(error) => return Err(error),
            }
        }
        Ok(reports)
    }

    /// Applies `change` to `list`, in the store and in the live filter; see
    /// the module documentation for the order and what happens on failure.
    /// A filter that sizes itself ([`super::sizing`]) grows first when the
    /// change is sure not to fit, or when it finds that it does not, and
    /// follows the load after it.
    pub fn change(
        &mut self,
        list: ListKind,
        change: Change<'_>,
        progress: &dyn Progress,
    ) -> Result<ChangeReport> {
        let grown_ahead = self.grow_ahead_of(list, &change)?;
        let mut report = match self.change_once(list, change, progress) {
            Err(ControlError::Full { wanted, .. }) if self.sizes_itself()? => {
                let grown = self.grow_for(wanted)?;
                let mut report = self.change_once(list, change, progress)?;
                report.resized = Some(grown);
                report
            }
            other => other?,
        };
        report.resized = report.resized.or(grown_ahead);
        if let Some(resized) = self.follow_the_load(report.filter)? {
            report.resized = Some(resized);
        }
        Ok(report)
    }

    /// [`Control::change`], for the filter as it is.
    fn change_once(
        &mut self,
        list: ListKind,
        change: Change<'_>,
        progress: &dyn Progress,
    ) -> Result<ChangeReport> {
        let (change, repeated) = change.without_repeats();
        // Before the transaction: a repair or a takeover writes the store.
        let live = self.live_for_update()?;
        let mut txn = self.store.begin()?;
        let mut report = ChangeReport {
            operation: change.operation(),
            source: change.source().to_owned(),
            repeated,
            added: 0,
            joined: 0,
            deleted: 0,
            still_listed: Vec::new(),
            kept: 0,
            expired: 0,
            already_listed: Vec::new(),
            not_listed: Vec::new(),
            filter: FilterUpdate::NotAttached,
            resized: None,
        };
        // What a blocklist change does to the live filter, planned from the
        // committed store while the transaction is written.
        let lengths = live
            .as_ref()
            .filter(|_| list == ListKind::Blocklist)
            .map(LiveFilter::lengths);
        let limits = self.settings()?.plan_limits;
        let store = &self.store;
        let plan = |added: &[IpNet], removed: &[IpNet]| {
            let lengths = lengths.as_ref()?;
            let changed = added.len() + removed.len();
            (changed > 0).then(|| live_plan(store, added, removed, lengths, limits))
        };
        let (recorded, planned) = record(&mut txn, list, &change, &mut report, progress, plan)?;
        let Some(mut live) = live else {
            progress.start("committing", 0);
            txn.commit()?;
            return Ok(report);
        };
        if recorded.added.is_empty() && recorded.removed.is_empty() {
            txn.commit()?;
            report.filter = FilterUpdate::Unchanged;
            return Ok(report);
        }
        live.begin_update();
        let updated = match list {
            ListKind::Allowlist => self.update_allowlist(&mut live, txn, &recorded),
            ListKind::Blocklist => {
                self.update_blocklist(&mut live, txn, &recorded, planned, limits, progress)
            }
        };
        if updated.is_ok() {
            live.end_update();
        }
        report.filter = updated?;
        Ok(report)
    }

    /// Steps 3 to 5 for the allowlist: new entries into the tries before
    /// the commit, removed ones out after it.
    fn update_allowlist(
        &self,
        live: &mut LiveFilter,
        txn: StoreTransaction<'_>,
        recorded: &Recorded,
    ) -> Result<FilterUpdate> {
        let (added, removed) = (
            address_pairs(&recorded.added),
            address_pairs(&recorded.removed),
        );
        live.update_allowlist(&added, &[])?;
        crash_point("allowlist-added");
        self.commit_or_repair(live, txn)?;
        crash_point("committed");
        live.update_allowlist(&[], &removed)?;
        Ok(FilterUpdate::Allowlist)
    }

    /// Steps 3 to 5 for the blocklist: the `planned` exact diff for a
    /// small change, whole tables for a large one or one the live lengths
    /// cannot take.
    fn update_blocklist(
        &self,
        live: &mut LiveFilter,
        txn: StoreTransaction<'_>,
        recorded: &Recorded,
        planned: Option<Result<LivePlan>>,
        limits: PlanLimits,
        progress: &dyn Progress,
    ) -> Result<FilterUpdate> {
        let (txn, tables) = match planned.transpose()? {
            Some(LivePlan::Diff(diff)) => match self.write_diff(live, txn, &diff, progress)? {
                Written::Done(update) => return Ok(update),
                Written::TooFull(txn) => (*txn, None),
            },
            Some(LivePlan::Tables(tables)) => (txn, Some(*tables)),
            None => (txn, None),
        };
        // A bulk change, a rebuild the plan asks for, a live filter whose
        // lengths no longer fit the store, or a change whose new keys do
        // not fit beside the ones it removes: whole tables.
        let tables = match tables {
            Some(tables) => tables,
            None => Tables::plan(&self.store, &recorded.added, &recorded.removed, limits)?,
        };
        self.swap_tables(live, txn, tables, progress)
    }

    /// Writes a small change's exact diff: inserts, commit, removes, the
    /// bits no entry needs any more.
    /// If the new keys do not fit while the old ones are still there, and
    /// the change removes some, the filter is as it was and the
    /// transaction comes back for whole tables.
    fn write_diff<'s>(
        &self,
        live: &mut LiveFilter,
        txn: StoreTransaction<'s>,
        diff: &KeyDiff,
        progress: &dyn Progress,
    ) -> Result<Written<'s>> {
        progress.start("writing the live filter", 0);
        // A failed insert undoes itself.
        match live.insert(&diff.insert) {
            Err(XdpError::Full(_)) if !diff.remove.is_empty() => {
                return Ok(Written::TooFull(Box::new(txn)))
            }
            Err(error) => return Err(unchanged(live, error)),
            Ok(()) => {}
        }
        crash_point("inserted");
        progress.start("committing", 0);
        self.commit_or_repair(live, txn)?;
        crash_point("committed");
        live.remove(&diff.remove)?;
        crash_point("removed");
        live.clear_bits(&diff.clear_bits);
        Ok(Written::Done(FilterUpdate::Incremental {
            inserted: diff.insert.len(),
            removed: diff.remove.len(),
        }))
    }

    /// Swaps in a table of the old and the new entries, commits, then (if
    /// entries were removed) a table of the new ones alone.
    fn swap_tables(
        &self,
        live: &mut LiveFilter,
        txn: StoreTransaction<'_>,
        tables: Tables,
        progress: &dyn Progress,
    ) -> Result<FilterUpdate> {
        progress.start("building and swapping in the new filter", 0);
        // Entries removed: first a table of the old and new ones together,
        // so the commit never finds a stored entry missing.
        let union_live = match tables.union {
            None => false,
            Some(union) => {
                let swapped = union
                    .map_err(ControlError::from)
                    .and_then(|union| live.install(&union).map_err(ControlError::from));
                match swapped {
                    Ok(()) => true,
                    // Too large together: the new table alone, before the commit.
                    Err(ControlError::Xdp(XdpError::Full(_)) | ControlError::Plan(_)) => false,
                    Err(error) => return Err(error),
                }
            }
        };
        crash_point("union-installed");
        if !union_live {
            live.install(&tables.new)
                .map_err(|error| unchanged(live, error))?;
            crash_point("installed");
        }
        progress.start("committing", 0);
        self.commit_or_repair(live, txn)?;
        crash_point("committed");
        if union_live {
            live.install(&tables.new)
                .map_err(|error| WayOut::Resize.explain(error))?;
        }
        Ok(FilterUpdate::Rebuilt {
            keys: tables.new.key_count(),
        })
    }

    /// Commits `txn`; if that fails, rebuilds the live filter from the
    /// store as it is (the commit may or may not have landed).
    fn commit_or_repair(&self, live: &mut LiveFilter, txn: StoreTransaction<'_>) -> Result<()> {
        txn.commit().map_err(|error| match self.repair(live) {
            Ok(()) => error.into(),
            Err(repair) => repair,
        })
    }

    /// Rebuilds the live filter and allowlist from the committed store and
    /// clears the update mark: after a failed commit, or when a crashed
    /// process left the mark.
    pub(super) fn repair(&self, live: &mut LiveFilter) -> Result<()> {
        let settings = self.settings()?;
        let plan = KeyPlan::build(self.store.nets(ListKind::Blocklist)?, settings.plan_limits)?;
        live.install(&plan)
            .map_err(|error| WayOut::Resize.explain(error))?;
        live.set_allowlist(&self.stored_allowlist()?)?;
        live.end_update();
        Ok(())
    }
}

/// The error of a write that left the live filter as it was (a full
/// filter): the update is over, and the way out is a resize.
fn unchanged(live: &LiveFilter, error: XdpError) -> ControlError {
    live.end_update();
    WayOut::Resize.explain(error)
}

/// Step 1: records `change` in `txn` and in `report`, and runs `plan` on
/// what the list gains and loses (for an add or a replace, beside the
/// store's writes).
fn record<P: Send>(
    txn: &mut StoreTransaction<'_>,
    list: ListKind,
    change: &UniqueChange<'_>,
    report: &mut ChangeReport,
    progress: &dyn Progress,
    plan: impl FnOnce(&[IpNet], &[IpNet]) -> P + Send,
) -> Result<(Recorded, P)> {
    let recorded = match change {
        UniqueChange::Add(source, entries) => {
            progress.start("storing entries", entries.len() as u64);
            let (stored, planned) =
                txn.add_beside(list, source, counted(entries, progress), |stored| {
                    plan(&stored.added, &[])
                })?;
            report.repeated = stored.repeated;
            report.joined = stored.joined.len();
            report.already_listed = stored.already_listed;
            report.added = stored.added.len();
            let recorded = Recorded {
                added: stored.added,
                removed: Vec::new(),
            };
            return Ok((recorded, planned));
        }
        UniqueChange::Delete(source, nets) => {
            let stored = txn.delete(list, *source, nets.iter().copied())?;
            report.not_listed = stored.missing;
            report.still_listed = stored.still_listed;
            Recorded {
                added: Vec::new(),
                removed: stored.deleted,
            }
        }
        UniqueChange::Replace(source, entries) => {
            progress.start("storing entries", entries.len() as u64);
            let (stored, planned) =
                txn.replace_beside(list, source, counted(entries, progress), |stored| {
                    plan(&stored.added, &stored.removed)
                })?;
            report.repeated = stored.repeated;
            report.kept = stored.kept;
            report.joined = stored.joined.len();
            report.still_listed = stored.still_listed;
            report.added = stored.added.len();
            report.deleted = stored.removed.len();
            let recorded = Recorded {
                added: stored.added,
                removed: stored.removed,
            };
            return Ok((recorded, planned));
        }
        UniqueChange::Expire(until) => {
            let stored = txn.expire(list, *until)?;
            report.expired = stored.expired;
            Recorded {
                added: Vec::new(),
                removed: stored.removed,
            }
        }
    };
    report.added = recorded.added.len();
    report.deleted = recorded.removed.len();
    let planned = plan(&recorded.added, &recorded.removed);
    Ok((recorded, planned))
}

/// Counts entries through `progress` as they are stored.
fn counted<'a>(
    entries: &'a [NewEntry<'a>],
    progress: &'a dyn Progress,
) -> impl Iterator<Item = &'a NewEntry<'a>> + 'a {
    entries.iter().enumerate().map(move |(index, entry)| {
        if index % 4096 == 4095 {
            progress.advance(4096);
        }
        entry
    })
}

/// Networks as the (address, prefix length) pairs the allowlist takes.
pub(super) fn address_pairs(nets: &[IpNet]) -> Vec<(IpAddr, u8)> {
    nets.iter()
        .map(|net| (net.network(), net.prefix_len()))
        .collect()
}
