//! Attach, detach, resize and mode: putting a program filled from the store
//! on interfaces (their XDP hook, or their TC hook on ingress or egress),
//! and taking it off.
//!
//! A program is installed ([`Control::install_program`]) in one way for
//! every case: load a new one with a filter built from the store, move
//! every pinned link to it with `bpf_link_update` (no packet goes
//! unfiltered), then pin it in place of the old one. That is the first
//! attach (no links yet), a resize (a larger table), and the repair of a
//! pin directory whose map pins were removed. An attach that finds a
//! complete pinned program of its own store only rebuilds its filter,
//! which repairs an interrupted update as well.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::capacity::{check_capacity, check_ceiling, WayOut};
use super::error::{ControlError, Result};
use super::report::{AttachReport, Attachment, DetachReport};
use super::resize::choose_capacity;
use super::sizing::{CapacityChoice, MemoryCeiling, Sizing};
use super::FilterSettings;
use super::{AttachOptions, Control};
use crate::plan::KeyPlan;
use crate::store::ListKind;
use crate::xdp::interface::{interface_index, interface_mtu, wait_for_interface};
use crate::xdp::maps::SharedMaps;
use crate::xdp::{
    os_error_code, AttachPoint, FilterProgram, HookHolder, LiveFilter, LoadOptions, PinDir,
    Sampling, TrafficDirection, XdpError,
};
use crate::{MalformedAction, Mode, Setting};

impl Control {
    /// Builds the filter from the store and attaches the program to every
    /// interface in `interfaces` at `point` with a pinned link (see the
    /// module documentation). Interfaces with a cfctl link there keep it;
    /// one with a link elsewhere in the same direction is refused.
    pub fn attach(
        &mut self,
        interfaces: &[String],
        point: AttachPoint,
        options: AttachOptions,
    ) -> Result<AttachReport> {
        let indexes = interfaces
            .iter()
            .map(|interface| interface_index(interface))
            .collect::<Result<Vec<u32>, XdpError>>()?;
        // The store is about to become the whole live filter: make sure
        // every page of it is what was written.
        self.store.check_integrity()?;
        let stored = self.settings()?;
        let mut settings = stored.clone();
        apply_options(&mut settings, options);
        settings.claim_store_id();
        let plan = KeyPlan::build(self.store.nets(ListKind::Blocklist)?, settings.plan_limits)?;
        // A new program is sized as asked, or for the store; a pinned one
        // keeps its size (resize changes it).
        let sized = |settings: &mut FilterSettings| {
            match options.capacity {
                Some(choice) => choose_capacity(settings, choice, plan.key_count()),
                None if settings.sizing == Sizing::Auto => {
                    choose_capacity(settings, CapacityChoice::Auto, plan.key_count());
                }
                None => {}
            }
            check_capacity(settings.capacity, settings.shape)?;
            check_ceiling(settings.capacity, settings.shape, settings.max_memory)
        };
        // (Opening the live filter repairs an interrupted update first, so
        // its leftovers are not taken for a list.)
        let loaded = match self.live() {
            Ok(Some((live, same_store))) => {
                check_capacity(settings.capacity, settings.shape)?;
                let refill = Refill {
                    own: same_store,
                    stored: &stored,
                    plan: &plan,
                    options,
                    point,
                };
                self.refill(live, &mut settings, refill)?;
                false
            }
            Ok(None) => {
                sized(&mut settings)?;
                if settings.seed == 0 {
                    settings.seed = crate::filter::random_seed();
                }
                self.pins.prepare()?;
                self.install_program(&settings, &plan, None)?;
                true
            }
            // Map pins removed: a new program takes over the links.
            Err(ControlError::Incomplete { .. }) => {
                sized(&mut settings)?;
                self.install_program(&settings, &plan, None)?;
                true
            }
            Err(error) => return Err(error),
        };
        let mut report = AttachReport {
            attached: Vec::new(),
            already_attached: Vec::new(),
            loaded,
            entries: plan.entry_count(),
            keys: plan.key_count(),
        };
        self.attach_links(interfaces, &indexes, point, &mut report)?;
        self.save_settings(&settings)?;
        Ok(report)
    }

    /// Pins a link of the program at `point` on each interface that has
    /// none in that direction yet; one that has a link on another hook in
    /// that direction is refused. If the first one fails on a program this
    /// attach loaded, nothing is left pinned.
    fn attach_links(
        &self,
        interfaces: &[String],
        indexes: &[u32],
        point: AttachPoint,
        report: &mut AttachReport,
    ) -> Result<()> {
        let existing = self.pins.attachments();
        let direction = point.direction().name();
        for (interface, &index) in interfaces.iter().zip(indexes) {
            let there = existing
                .iter()
                .find(|link| &link.interface == interface && link.direction == direction);
            match there {
                // (An XDP link in the other mode stays as it is.)
                Some(link) if link.hook != point.hook() => {
                    return Err(ControlError::Conflict(format!(
                        "{interface} already has the blocklist on {direction} ({} {}): `cfctl \
                         detach {interface}` first to move it",
                        link.hook, link.mode
                    )))
                }
                Some(_) => {
                    report.already_attached.push(interface.clone());
                    continue;
                }
                None if report.attached.contains(interface) => {
                    report.already_attached.push(interface.clone());
                    continue;
                }
                None => {}
            }
            if let Err(error) = self.pins.attach(interface, index, point) {
                if report.loaded && existing.is_empty() && report.attached.is_empty() {
                    self.pins.remove();
                }
                return Err(attach_error(interface, index, point, error));
            }
            report.attached.push(interface.clone());
        }
        Ok(())
    }

    /// Rebuilds the filter of the pinned program from the store, after
    /// checking that it is this store's filter (or `--force`) and that an
    /// empty store does not silently empty a filter that holds keys. A pin
    /// directory without the program for the attach point (pinned by a
    /// cfctl without that hook) gets a new program with every hook's
    /// instead, built from the store, which takes over the links and goes
    /// on with the old one's counts.
    fn refill(
        &self,
        mut live: LiveFilter,
        settings: &mut FilterSettings,
        refill: Refill<'_>,
    ) -> Result<()> {
        check_compatible(&live, refill.stored, refill.options)?;
        if !refill.own && !self.force {
            return Err(self.other_store());
        }
        if refill.plan.key_count() == 0 && !self.force {
            let keys = live.summary()?.fingerprints;
            if keys > 0 {
                return Err(ControlError::EmptyStore {
                    store: self.store.path().to_owned(),
                    pin_dir: self.pins.path().to_owned(),
                    keys,
                });
            }
        }
        settings.seed = live.seed();
        if !self.pins.has_program_for(refill.point) {
            self.install_program(settings, refill.plan, Some(live.maps().shared()?))?;
            return Ok(());
        }
        live.begin_update();
        live.install(refill.plan)
            .map_err(|error| WayOut::Resize.explain(error))?;
        self.apply_live_settings(&mut live, settings)?;
        live.end_update();
        Ok(())
    }

    /// Loads a program for `settings` filled with `plan` and the stored
    /// allowlist, moves every pinned link to it, and pins it in place of
    /// the old one; it shares the counters and samples of `shared` if
    /// given (see [`FilterProgram::load_sharing`]).
    pub(super) fn install_program(
        &self,
        settings: &FilterSettings,
        plan: &KeyPlan,
        shared: Option<SharedMaps<'_>>,
    ) -> Result<FilterProgram> {
        let mut blocklist = self.load_filled(settings, plan, shared)?;
        for (attachment, link) in self.pins.links() {
            blocklist.take_over_pinned_link(&link, attachment.point)?;
        }
        self.pins.unpin_program_and_maps();
        if let Err(error) = self.pins.pin(&mut blocklist) {
            if self.pins.links().is_empty() {
                self.pins.remove();
            }
            return Err(error.into());
        }
        Ok(blocklist)
    }

    /// Loads a program for `settings` and fills it with `plan`, the stored
    /// allowlist, the verdict settings, and the store's id.
    fn load_filled(
        &self,
        settings: &FilterSettings,
        plan: &KeyPlan,
        shared: Option<SharedMaps<'_>>,
    ) -> Result<FilterProgram> {
        let shape = settings.shape;
        let capacity = usize::try_from(settings.capacity).unwrap_or(usize::MAX);
        let options = LoadOptions {
            seed: settings.seed,
            match_address: settings.match_address,
            ..LoadOptions::for_capacity(shape, capacity).ok_or_else(|| {
                ControlError::InvalidSetting(format!("a capacity of {capacity} keys is too large"))
            })?
        };
        // Keys that cannot fit fail before anything is loaded.
        let slots = options.bucket_count.saturating_mul(shape.slots());
        if plan.key_count() > slots {
            let full = crate::filter::FilterFull {
                wanted: plan.key_count(),
                slots,
            };
            return Err(WayOut::LargerCapacity.full(full));
        }
        let mut blocklist = match shared {
            Some(shared) => FilterProgram::load_sharing(&options, shared)?,
            None => FilterProgram::load(&options)?,
        };
        let live = blocklist.live();
        live.install(plan)
            .map_err(|error| WayOut::LargerCapacity.explain(error))?;
        self.apply_live_settings(live, settings)?;
        Ok(blocklist)
    }

    /// Gives `live` the stored allowlist, the verdict and sampling
    /// settings, and the store's id.
    fn apply_live_settings(&self, live: &mut LiveFilter, settings: &FilterSettings) -> Result<()> {
        live.set_allowlist(&self.stored_allowlist()?)?;
        live.set_verdict_settings(settings.mode, settings.policy, settings.malformed);
        live.maps().set_sampling(&settings.sampling);
        live.set_store_id(settings.store_id);
        Ok(())
    }

    /// Switches between enforce and monitor mode (live and stored).
    pub fn set_mode(&mut self, mode: Mode) -> Result<()> {
        let mut settings = self.settings()?;
        settings.mode = mode;
        if let Some(live) = self.live_for_update()? {
            live.set_mode(mode);
        }
        self.save_settings(&settings)
    }

    /// Changes how drops are sampled (live and stored); an error naming
    /// the setting out of range changes nothing.
    pub fn set_sampling(&mut self, sampling: Sampling) -> Result<()> {
        if let Some((name, value, range)) = sampling.invalid() {
            return Err(ControlError::InvalidSetting(format!(
                "--{name} {value} is out of range ({range})"
            )));
        }
        let mut settings = self.settings()?;
        settings.sampling = sampling;
        if let Some(live) = self.live_for_update()? {
            live.maps().set_sampling(&sampling);
        }
        self.save_settings(&settings)
    }

    /// Chooses whether malformed frames are dropped or passed (live and
    /// stored).
    pub fn set_malformed_action(&mut self, action: MalformedAction) -> Result<()> {
        let mut settings = self.settings()?;
        settings.malformed = action;
        if let Some(live) = self.live_for_update()? {
            live.set_malformed_action(action);
        }
        self.save_settings(&settings)
    }
}

/// What an attach to a pinned program refills it for.
struct Refill<'a> {
    /// Whether the pinned filter was built from this store.
    own: bool,
    /// The settings as stored before this attach.
    stored: &'a FilterSettings,
    /// The store's keys.
    plan: &'a KeyPlan,
    options: AttachOptions,
    /// Where the attach puts the program.
    point: AttachPoint,
}

/// Waits at most `patience` for each of `interfaces` to exist (see
/// [`wait_for_interface`]). Needs no store: an attach that waits opens it
/// after.
pub fn wait_for_interfaces(interfaces: &[String], patience: Duration) -> Result<()> {
    for interface in interfaces {
        wait_for_interface(interface, patience)?;
    }
    Ok(())
}

/// Detaches from `interfaces` (every interface if `None`), in `direction`
/// only if given, else in both. When no link is left, the program and
/// maps are unpinned too unless `keep_state`. Needs no store: it never
/// touches one.
pub fn detach(
    pin_dir: &Path,
    interfaces: Option<&[String]>,
    direction: Option<TrafficDirection>,
    keep_state: bool,
) -> Result<DetachReport> {
    let pins = &PinDir::new(pin_dir);
    let links = pins.links();
    let in_direction =
        |link: &Attachment| direction.is_none_or(|direction| link.point.direction() == direction);
    let chosen: Vec<&(Attachment, PathBuf)> = match interfaces {
        None => links
            .iter()
            .filter(|(link, _)| in_direction(link))
            .collect(),
        Some(names) => {
            let mut chosen = Vec::new();
            for name in names {
                let before = chosen.len();
                chosen.extend(
                    links
                        .iter()
                        .filter(|(link, _)| &link.interface == name && in_direction(link)),
                );
                if chosen.len() == before {
                    return Err(ControlError::NotAttachedTo(name.clone()));
                }
            }
            chosen
        }
    };
    let mut report = DetachReport {
        detached: Vec::new(),
        unloaded: false,
    };
    for (link, path) in chosen {
        pins.detach(path, link.point)?;
        if !report.detached.contains(&link.interface) {
            report.detached.push(link.interface.clone());
        }
    }
    if pins.links().is_empty() && !keep_state && pins.path().exists() {
        pins.remove();
        report.unloaded = true;
    }
    Ok(report)
}

/// Applies `options` to `settings`, but for the capacity (which a new
/// program takes, see [`Control::attach`]).
fn apply_options(settings: &mut FilterSettings, options: AttachOptions) {
    if let Some(shape) = options.shape {
        settings.shape = shape;
    }
    if let Some(match_address) = options.match_address {
        settings.match_address = match_address;
    }
    if let Some(policy) = options.policy {
        settings.policy = policy;
    }
    if let Some(malformed) = options.malformed {
        settings.malformed = malformed;
    }
    match options.max_memory {
        Some(MemoryCeiling::Bytes(bytes)) => settings.max_memory = Some(bytes),
        Some(MemoryCeiling::Unbounded) => settings.max_memory = None,
        None => {}
    }
}

/// Refuses options that the pinned program cannot take without a reload.
fn check_compatible(
    live: &LiveFilter,
    settings: &FilterSettings,
    options: AttachOptions,
) -> Result<()> {
    if options.shape.is_some_and(|wanted| wanted != live.shape()) {
        return Err(ControlError::Conflict(format!(
            "the attached filter has {}-bit fingerprints; `cfctl detach --all` first to change \
             the width",
            live.shape().fingerprint_bits()
        )));
    }
    if options
        .match_address
        .is_some_and(|wanted| wanted != settings.match_address)
    {
        return Err(ControlError::Conflict(
            "the attached program matches the other address; `cfctl detach --all` first to \
             change --match"
                .to_owned(),
        ));
    }
    let asked = match options.capacity {
        Some(CapacityChoice::Keys(keys)) => Some((Sizing::Fixed, keys)),
        Some(CapacityChoice::Auto) => Some((Sizing::Auto, settings.capacity)),
        None => None,
    };
    if asked.is_some_and(|asked| asked != (settings.sizing, settings.capacity)) {
        return Err(ControlError::Conflict(format!(
            "the attached filter is sized for {} keys; use `cfctl resize --capacity N|auto` to \
             change its size",
            settings.capacity
        )));
    }
    Ok(())
}

/// Explains a failed attach to `interface` (index `index`) at `point`.
fn attach_error(interface: &str, index: u32, point: AttachPoint, error: XdpError) -> ControlError {
    let code = os_error_code(&error);
    match point {
        AttachPoint::Tc(_) => {
            return match code {
                Some(libc::EINVAL | libc::EOPNOTSUPP) => ControlError::TcxUnsupported {
                    interface: interface.to_owned(),
                    kernel: kernel_release(),
                },
                _ => ControlError::Xdp(error),
            }
        }
        AttachPoint::Clsact(_) => return ControlError::Xdp(error),
        AttachPoint::Xdp(_) => {}
    }
    match code {
        Some(libc::EBUSY | libc::EEXIST) => ControlError::InterfaceBusy {
            interface: interface.to_owned(),
            holder: match HookHolder::of(index) {
                Ok(Some(holder)) => holder.to_string(),
                _ => "which cfctl cannot name".to_owned(),
            },
        },
        Some(libc::EOPNOTSUPP) => ControlError::NativeUnsupported(interface.to_owned()),
        Some(libc::ERANGE) => ControlError::NativeMtu {
            interface: interface.to_owned(),
            mtu: interface_mtu(interface),
        },
        _ => ControlError::Xdp(error),
    }
}

/// The running kernel's release (`uname -r`), as far as it can be read.
fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|release| release.trim().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned())
}
