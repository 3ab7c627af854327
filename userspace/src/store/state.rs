//! State kept beside the entries: the filter's settings, the agent's own
//! record, each source's memory between runs. The store knows none of
//! them: a state is a value of any serde type under a namespace (who owns
//! it: `filter`, `agent`, `feed`, ...) and a key within it, kept as JSON in
//! one table, `state`, so that a new field with a default, or a new
//! source's namespace, needs no schema change.

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::schema::STATE;
use super::{InStore, Store, StoreError, StoreTransaction};

impl Store {
    /// The state `key` of `namespace`, if one is recorded.
    pub fn state<T: DeserializeOwned>(
        &self,
        namespace: &str,
        key: &str,
    ) -> Result<Option<T>, StoreError> {
        let json = self.guarded(|| {
            let txn = self.db.begin_read().in_store(self)?;
            let table = txn.open_table(STATE).in_store(self)?;
            Ok(table
                .get((namespace, key))
                .in_store(self)?
                .map(|value| value.value().to_owned()))
        })?;
        json.map(|json| self.decode_state(namespace, key, &json))
            .transpose()
    }

    /// Every state of `namespace`, in key order.
    pub fn states<T: DeserializeOwned>(
        &self,
        namespace: &str,
    ) -> Result<Vec<(String, T)>, StoreError> {
        let rows = self.guarded(|| {
            let txn = self.db.begin_read().in_store(self)?;
            let table = txn.open_table(STATE).in_store(self)?;
            let mut rows = Vec::new();
            for row in table.range((namespace, "")..).in_store(self)? {
                let (key, json) = row.in_store(self)?;
                let (found, key) = key.value();
                if found != namespace {
                    break;
                }
                rows.push((key.to_owned(), json.value().to_owned()));
            }
            Ok(rows)
        })?;
        rows.into_iter()
            .map(|(key, json)| {
                let state = self.decode_state(namespace, &key, &json)?;
                Ok((key, state))
            })
            .collect()
    }

    fn decode_state<T: DeserializeOwned>(
        &self,
        namespace: &str,
        key: &str,
        json: &str,
    ) -> Result<T, StoreError> {
        serde_json::from_str(json)
            .map_err(|error| self.corrupt(format!("state {namespace}/{key}: {error}")))
    }
}

impl StoreTransaction<'_> {
    /// Records `value` as the state `key` of `namespace`.
    pub fn set_state<T: Serialize>(
        &mut self,
        namespace: &str,
        key: &str,
        value: &T,
    ) -> Result<(), StoreError> {
        let store = self.store;
        let json = serde_json::to_string(value)
            .map_err(|error| store.corrupt(format!("state {namespace}/{key}: {error}")))?;
        store.guarded(|| {
            let mut table = self.txn.open_table(STATE).in_store(store)?;
            table
                .insert((namespace, key), json.as_str())
                .in_store(store)?;
            Ok(())
        })
    }

    /// Forgets the state `key` of `namespace`, if there is one.
    pub fn remove_state(&mut self, namespace: &str, key: &str) -> Result<(), StoreError> {
        let store = self.store;
        store.guarded(|| {
            let mut table = self.txn.open_table(STATE).in_store(store)?;
            table.remove((namespace, key)).in_store(store)?;
            Ok(())
        })
    }
}
