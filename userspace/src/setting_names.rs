//! Serde for the ABI's settings ([`crate::Setting`]) by name: `mode:
//! "monitor"`, not `mode: 1`, in the store's settings and in every JSON
//! report. Use as `#[serde(with = "crate::setting_names")]`; reading also
//! takes a setting's older aliases.

use serde::{Deserialize, Deserializer, Serializer};

use crate::Setting;

/// Writes `value` as its name.
pub fn serialize<S: Serializer, T: Setting>(value: &T, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(value.name())
}

/// Reads a value from its name or an alias.
pub fn deserialize<'de, D: Deserializer<'de>, T: Setting>(deserializer: D) -> Result<T, D::Error> {
    let name = String::deserialize(deserializer)?;
    T::from_name(&name).ok_or_else(|| {
        let known: Vec<&str> = T::ALL.iter().map(|value| value.name()).collect();
        serde::de::Error::custom(format!(
            "unknown value '{name}' (expected {})",
            known.join(", ")
        ))
    })
}
