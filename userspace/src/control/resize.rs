//! Resizes: `cfctl resize`, and those of a filter that sizes itself
//! ([`super::sizing`] has the rules), each one gap-free rebuild recorded
//! with its reason.

use foldhash::HashSet;
use ipnet::IpNet;

use super::capacity::{check_capacity, check_ceiling};
use super::error::{ControlError, Result};
use super::report::{FilterUpdate, TableSummary};
use super::sizing::{
    auto_capacity, load, new_capacity, CapacityChoice, Resized, Sizing, HIGH_WATERMARK,
    LOW_WATERMARK,
};
use super::update::Change;
use super::{Control, FilterSettings};
use crate::plan::KeyPlan;
use crate::store::ListKind;
use crate::text::thousands;
use crate::time::unix_seconds;

/// Sets the capacity of `settings` as `choice` says; `keys` is what the
/// filter will hold, for a filter that sizes itself.
pub(super) fn choose_capacity(settings: &mut FilterSettings, choice: CapacityChoice, keys: usize) {
    match choice {
        CapacityChoice::Keys(capacity) => {
            settings.sizing = Sizing::Fixed;
            settings.capacity = capacity;
        }
        CapacityChoice::Auto => {
            settings.sizing = Sizing::Auto;
            settings.capacity = auto_capacity(keys, settings.shape);
        }
    }
}

impl Control {
    /// Whether the stored settings let the filter size itself.
    pub(super) fn sizes_itself(&self) -> Result<bool> {
        Ok(self.settings()?.sizing == Sizing::Auto)
    }

    /// After a change that reached the filter as `update`: grows or
    /// shrinks a filter that sizes itself whose load left the watermarks;
    /// what it did, if anything. A rebuilt table says how many keys it
    /// holds. After keys written into the live table, the stored entries
    /// are a lower bound of its keys (a CIDR may take several), which
    /// costs nothing to read; the keys are counted (a plan of the whole
    /// list) only when that bound is past a watermark.
    pub(super) fn follow_the_load(&mut self, update: FilterUpdate) -> Result<Option<Resized>> {
        let settings = self.settings()?;
        if settings.sizing != Sizing::Auto {
            return Ok(None);
        }
        let keys = match update {
            FilterUpdate::Rebuilt { keys } => keys,
            FilterUpdate::Incremental { .. } => {
                let entries = self.store.entry_count(ListKind::Blocklist)?;
                let entries = usize::try_from(entries).unwrap_or(usize::MAX);
                let bound = load(entries, settings.capacity, settings.shape);
                if (LOW_WATERMARK..=HIGH_WATERMARK).contains(&bound) {
                    return Ok(None);
                }
                let nets = self.store.nets(ListKind::Blocklist)?;
                KeyPlan::build(nets, settings.plan_limits)?.key_count()
            }
            _ => return Ok(None),
        };
        let Some((capacity, reason)) = new_capacity(keys, settings.capacity, settings.shape) else {
            return Ok(None);
        };
        self.resize_to(capacity, Sizing::Auto, &reason).map(Some)
    }

    /// Grows a filter that sizes itself before `change` of `list`, when
    /// the change is sure to push its load past the high watermark: the
    /// list after an add holds at least the larger of what it holds and
    /// the distinct networks added, after a replace at least those it is
    /// given, each at least one key. Growing first writes the store once,
    /// where a change that finds the filter full is undone and applied
    /// again after the growth. Sized for that lower bound, so a change
    /// that turns out larger still grows again on the way
    /// ([`Control::change`]).
    pub(super) fn grow_ahead_of(
        &mut self,
        list: ListKind,
        change: &Change<'_>,
    ) -> Result<Option<Resized>> {
        let entries = match change {
            Change::Add { entries, .. } | Change::Replace { entries, .. } => *entries,
            Change::Delete { .. } | Change::Expire { .. } => return Ok(None),
        };
        let settings = self.settings()?;
        let past_the_watermark =
            |keys: usize| load(keys, settings.capacity, settings.shape) > HIGH_WATERMARK;
        if list != ListKind::Blocklist
            || settings.sizing != Sizing::Auto
            || !past_the_watermark(entries.len())
            || self.live()?.is_none()
        {
            return Ok(None);
        }
        let distinct = entries
            .iter()
            .map(|entry| entry.net)
            .collect::<HashSet<IpNet>>()
            .len();
        let listed = match change {
            Change::Add { .. } => usize::try_from(self.store.entry_count(list)?).unwrap_or(0),
            _ => 0,
        };
        let at_least = distinct.max(listed);
        if !past_the_watermark(at_least) {
            return Ok(None);
        }
        let reason = format!(
            "a change of {} entries needs at least {} keys",
            thousands(distinct as u64),
            thousands(at_least as u64)
        );
        self.resize_to(
            auto_capacity(at_least, settings.shape),
            Sizing::Auto,
            &reason,
        )
        .map(Some)
    }

    /// Grows a filter that sizes itself so that `wanted` keys fit, before
    /// a change that did not fit is applied again.
    pub(super) fn grow_for(&mut self, wanted: usize) -> Result<Resized> {
        let reason = format!(
            "a change needed {} keys, more than the filter held",
            thousands(wanted as u64)
        );
        let shape = self.settings()?.shape;
        self.resize_to(auto_capacity(wanted, shape), Sizing::Auto, &reason)
    }

    /// `cfctl resize`: the filter rebuilt for `choice` (a fixed capacity,
    /// or sized for the store and following it from then on).
    pub fn resize(&mut self, choice: CapacityChoice) -> Result<TableSummary> {
        let (capacity, sizing) = match choice {
            CapacityChoice::Auto => {
                let settings = self.settings()?;
                let nets = self.store.nets(ListKind::Blocklist)?;
                let plan = KeyPlan::build(nets, settings.plan_limits)?;
                (
                    auto_capacity(plan.key_count(), settings.shape),
                    Sizing::Auto,
                )
            }
            CapacityChoice::Keys(capacity) => (capacity, Sizing::Fixed),
        };
        self.resize_to(capacity, sizing, "cfctl resize")?;
        let mut live = self
            .live_for_update()?
            .ok_or_else(|| ControlError::NotAttached(self.pins.path().to_owned()))?;
        Ok(live.summary()?)
    }

    /// Rebuilds the attached filter for `to` keys and records it, with
    /// `reason`, in one write of the settings: a program whose filter holds
    /// `to` keys is loaded, filled from the store, and swapped in on every
    /// link atomically (each link switches from the old program to the new
    /// one; both hold every entry), then pinned in place of the old one. The
    /// new program shares the old one's counters and samples, so the counts
    /// and the readers go on.
    fn resize_to(&mut self, to: u64, sizing: Sizing, reason: &str) -> Result<Resized> {
        let old = self
            .live_for_update()?
            .ok_or_else(|| ControlError::NotAttached(self.pins.path().to_owned()))?;
        check_capacity(to, old.shape())?;
        let mut settings = self.settings()?;
        check_ceiling(to, old.shape(), settings.max_memory)?;
        let from = settings.capacity;
        settings.capacity = to;
        settings.shape = old.shape();
        settings.seed = old.seed();
        settings.mode = old.mode();
        settings.malformed = old.malformed_action();
        let plan = KeyPlan::build(self.store.nets(ListKind::Blocklist)?, settings.plan_limits)?;
        self.install_program(&settings, &plan, Some(old.maps().shared()?))?;
        let resized = Resized {
            at: unix_seconds(std::time::SystemTime::now()),
            from,
            to,
            reason: reason.to_owned(),
        };
        settings.sizing = sizing;
        settings.last_resize = Some(resized.clone());
        self.save_settings(&settings)?;
        if sizing == Sizing::Auto {
            (self.notice)(&format!(
                "the filter resized itself from {from} to {to} keys: {reason}"
            ));
        }
        Ok(resized)
    }
}
