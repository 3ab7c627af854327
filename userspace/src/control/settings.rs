//! The filter's settings ([`FilterSettings`]): what `attach` builds the
//! filter with, kept in the store beside the entries (state `filter` of
//! namespace `filter`) so that `attach` after a reboot builds the same
//! filter, and the store's id that ties a filter to the store it was
//! built from.

use serde::{Deserialize, Serialize};

use super::error::Result;
use super::sizing::{Resized, Sizing, MIN_AUTO_CAPACITY};
use super::Control;
use crate::plan::PlanLimits;
use crate::xdp::Sampling;
use crate::{FilterShape, MalformedAction, MatchAddress, Mode, Policy};

/// The namespace and key of the settings in the store's state.
const STATE: (&str, &str) = ("filter", "filter");

/// Filter parameters kept with the entries, so that `attach` after a reboot
/// builds the same filter. Missing fields read as their defaults.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FilterSettings {
    /// Keys the filter is sized for.
    pub capacity: u64,
    /// Whether the filter sizes itself ([`super::sizing`]); settings stored
    /// before there was a choice keep their capacity.
    #[serde(default = "Sizing::stored_before_auto")]
    pub sizing: Sizing,
    /// The filter's last change of size, and why.
    pub last_resize: Option<Resized>,
    /// The most bytes the filter's table may take (`--max-memory`); none:
    /// as much as the machine's memory allows.
    pub max_memory: Option<u64>,
    /// Fingerprint width and slots per bucket (stored as the width: 8, 16
    /// or 32).
    #[serde(rename = "fingerprint_bits", with = "shape_bits")]
    pub shape: FilterShape,
    /// Hash seed of the filter.
    pub seed: u64,
    /// Which address of a packet is matched.
    #[serde(with = "crate::setting_names")]
    pub match_address: MatchAddress,
    /// Drop, or only count.
    #[serde(with = "crate::setting_names")]
    pub mode: Mode,
    /// Drop listed packets, or everything not allowlisted.
    #[serde(with = "crate::setting_names")]
    pub policy: Policy,
    /// What happens to a malformed frame (in enforce mode).
    #[serde(with = "crate::setting_names")]
    pub malformed: MalformedAction,
    /// How drops are sampled for attribution and capture.
    pub sampling: Sampling,
    /// Probe budgets and key limit of the prefix plan.
    pub plan_limits: PlanLimits,
    /// This store's id, written into the live filter built from it so that
    /// a filter and its store recognise each other; zero until a filter is
    /// first built.
    pub store_id: u64,
}

impl FilterSettings {
    /// Gives the store an id if it has none yet.
    pub fn claim_store_id(&mut self) {
        while self.store_id == 0 {
            self.store_id = crate::filter::random_seed();
        }
    }
}

impl Default for FilterSettings {
    /// Sized for the store (from [`MIN_AUTO_CAPACITY`] keys), 16-bit fingerprints, seed 0 (choose one when building),
    /// source matching, enforce, deny, malformed frames dropped (the
    /// kernel's IP layer drops every frame the program calls malformed but
    /// one with more VLAN tags than it follows), default sampling,
    /// default plan limits, no id yet.
    fn default() -> Self {
        Self {
            capacity: MIN_AUTO_CAPACITY,
            sizing: Sizing::Auto,
            last_resize: None,
            max_memory: None,
            shape: FilterShape::Fingerprint16,
            seed: 0,
            match_address: MatchAddress::Source,
            mode: Mode::Enforce,
            policy: Policy::Deny,
            malformed: MalformedAction::Drop,
            sampling: Sampling::default(),
            plan_limits: PlanLimits::default(),
            store_id: 0,
        }
    }
}

/// Serde for a [`FilterShape`] as its fingerprint width.
mod shape_bits {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::FilterShape;

    pub fn serialize<S: Serializer>(shape: &FilterShape, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u32(shape.fingerprint_bits())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<FilterShape, D::Error> {
        let bits = u32::deserialize(deserializer)?;
        FilterShape::from_bits(bits).ok_or_else(|| {
            serde::de::Error::custom(format!("fingerprints of {bits} bits (8, 16 or 32)"))
        })
    }
}

impl Control {
    /// The stored settings, or the defaults.
    pub fn settings(&self) -> Result<FilterSettings> {
        let (namespace, key) = STATE;
        Ok(self.store.state(namespace, key)?.unwrap_or_default())
    }

    /// Stores `settings`.
    pub(super) fn save_settings(&self, settings: &FilterSettings) -> Result<()> {
        let (namespace, key) = STATE;
        let mut txn = self.store.begin()?;
        txn.set_state(namespace, key, settings)?;
        txn.commit()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_stored_before_auto_sizing_keep_their_capacity() {
        let stored: FilterSettings =
            serde_json::from_str(r#"{"capacity": 16384, "fingerprint_bits": 16}"#)
                .expect("settings of an earlier cfctl");
        assert_eq!(stored.sizing, Sizing::Fixed);
        assert_eq!(stored.capacity, 16384);
        assert_eq!(FilterSettings::default().sizing, Sizing::Auto);
        let written = serde_json::to_string(&FilterSettings::default()).expect("JSON");
        let read: FilterSettings = serde_json::from_str(&written).expect("settings");
        assert_eq!(read, FilterSettings::default());
    }
}
