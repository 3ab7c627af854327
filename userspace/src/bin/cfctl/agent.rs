//! `cfctl agent`: checks the agent's configuration, or runs the agent
//! (`cfctl::agent`) with its log on standard error.

use anyhow::bail;
use cfctl::agent::config::Config;
use cfctl::agent::{self, AgentOptions};
use cfctl::control::require_privileges;
use cfctl::text::Escaped;
use serde::Serialize;

use crate::cli::{AgentArgs, GlobalOptions};
use crate::print;

/// Runs `cfctl agent`.
pub fn run(global: &GlobalOptions, args: &AgentArgs) -> anyhow::Result<()> {
    if global.device.is_some() {
        bail!("`cfctl agent` keeps the XDP blocklist; it does not drive --device");
    }
    if args.check_config {
        let config = Config::load(&args.config)?;
        return print(global, &ConfigSummary::of(&config), config_summary);
    }
    require_privileges("run the agent on the pinned blocklist and its store")?;
    agent::log::init(args.log_level.as_deref(), args.log_format)?;
    agent::run(&AgentOptions {
        config: args.config.clone(),
        pin_dir: global.pin_dir.clone(),
        state_dir: global.state_dir.clone(),
        state_dir_check: global.state_dir_check(),
        once: args.once,
    })?;
    Ok(())
}

/// What a configuration sets up, as `--check-config` prints it.
#[derive(Serialize)]
struct ConfigSummary {
    metrics: Option<String>,
    sources: Vec<serde_json::Value>,
    #[serde(skip)]
    lines: Vec<String>,
}

impl ConfigSummary {
    fn of(config: &Config) -> Self {
        let (lines, sources) = config.sources.iter().map(|source| source.summary()).unzip();
        Self {
            metrics: config.metrics.map(|address| address.to_string()),
            sources,
            lines,
        }
    }
}

fn config_summary(summary: &ConfigSummary) {
    match &summary.metrics {
        Some(address) => println!("metrics  http://{address}/metrics"),
        None => println!("metrics  off"),
    }
    if summary.lines.is_empty() {
        println!("no sources: the agent only ends expired listings");
    }
    for line in &summary.lines {
        println!("{}", Escaped(line));
    }
}
