//! Where cfctl keeps things unless told otherwise (`--pin-dir`,
//! `--state-dir`, `--config`): one place for every default path, which
//! the command line, its help and the service units take.

/// The bpffs directory of the pinned program, maps and links.
pub const PIN_DIR: &str = "/sys/fs/bpf/cfctl";
/// The directory of the store (`cfctl.redb`) and the agent's lock.
pub const STATE_DIR: &str = "/var/lib/cfctl";
/// The agent's configuration.
pub const AGENT_CONFIG: &str = "/etc/cfctl/agent.toml";
