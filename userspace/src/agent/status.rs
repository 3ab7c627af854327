//! What `cfctl status` shows of the agent: what it recorded of itself
//! when it started or reloaded (state `agent` of namespace `agent`),
//! whether it runs now (whether a process holds its lock), and each kind
//! of source's status from the states its sources recorded.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::lock::AgentLock;
use crate::sources::{SourceStatus, KINDS};
use crate::store::{Store, StoreError, StoreTransaction};

/// The namespace and key of the agent's record in the store's state.
const STATE: (&str, &str) = ("agent", "agent");

/// What the agent records of itself.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AgentRecord {
    /// Its process id.
    pub pid: u32,
    /// When it started, Unix seconds.
    pub started: u64,
    /// Its configuration file.
    pub config: String,
    /// The store sources of the sources it runs.
    pub sources: Vec<String>,
    /// Where its metrics endpoint listens, if it does.
    pub metrics: Option<String>,
}

impl AgentRecord {
    /// Records it in `txn`.
    pub(super) fn save(&self, txn: &mut StoreTransaction<'_>) -> Result<(), StoreError> {
        let (namespace, key) = STATE;
        txn.set_state(namespace, key, self)
    }
}

/// The agent as `cfctl status` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct AgentStatus {
    /// What it recorded of itself.
    #[serde(flatten)]
    pub record: AgentRecord,
    /// Whether it runs now.
    pub running: bool,
}

/// The agent of the store in `state_dir`, if one ever ran, and every kind
/// of source's status.
pub fn status(
    store: &Store,
    state_dir: &Path,
) -> Result<(Option<AgentStatus>, Vec<SourceStatus>), StoreError> {
    let (namespace, key) = STATE;
    let agent = store
        .state::<AgentRecord>(namespace, key)?
        .map(|record| AgentStatus {
            record,
            running: AgentLock::is_held(state_dir),
        });
    let mut sources = Vec::new();
    for kind in KINDS {
        sources.extend(kind.status(store)?);
    }
    Ok((agent, sources))
}
