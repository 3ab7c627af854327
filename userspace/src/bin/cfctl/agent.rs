//! `cfctl agent`: checks the agent's configuration, or runs the agent
//! (`cfctl::agent`) with its log on standard error.

use std::io::IsTerminal;

use anyhow::bail;
use cfctl::agent::config::{Config, FeedLocation};
use cfctl::agent::{self, AgentOptions};
use cfctl::control::require_privileges;
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
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        // Colours only on a terminal: not in journald or a log file.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
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
    feeds: Vec<FeedSummary>,
    crowdsec: Option<CrowdsecSummary>,
}

#[derive(Serialize)]
struct CrowdsecSummary {
    url: String,
    pull_seconds: u64,
    scopes: Vec<String>,
    types: Vec<String>,
}

#[derive(Serialize)]
struct FeedSummary {
    name: String,
    source: String,
    location: String,
    refresh_seconds: u64,
    format: &'static str,
    list: &'static str,
}

impl ConfigSummary {
    fn of(config: &Config) -> Self {
        Self {
            metrics: config.metrics.map(|address| address.to_string()),
            feeds: config
                .feeds
                .iter()
                .map(|feed| FeedSummary {
                    name: feed.name.clone(),
                    source: feed.source(),
                    location: match &feed.location {
                        FeedLocation::Url(url) => url.clone(),
                        FeedLocation::Path(path) => path.display().to_string(),
                    },
                    refresh_seconds: feed.refresh.as_secs(),
                    format: feed.format.map_or("auto", |format| format.name()),
                    list: feed.list.name(),
                })
                .collect(),
            crowdsec: config.crowdsec.as_ref().map(|lapi| CrowdsecSummary {
                url: lapi.url.clone(),
                pull_seconds: lapi.pull.as_secs(),
                scopes: lapi.scopes.clone(),
                types: lapi.types.clone(),
            }),
        }
    }
}

fn config_summary(summary: &ConfigSummary) {
    match &summary.metrics {
        Some(address) => println!("metrics  http://{address}/metrics"),
        None => println!("metrics  off"),
    }
    if summary.feeds.is_empty() && summary.crowdsec.is_none() {
        println!("no feeds: the agent only ends expired listings");
    }
    if let Some(lapi) = &summary.crowdsec {
        println!(
            "crowdsec {} -> blocklist of crowdsec, every {}, scopes {}, types {}",
            lapi.url,
            humantime::format_duration(std::time::Duration::from_secs(lapi.pull_seconds)),
            lapi.scopes.join(","),
            lapi.types.join(",")
        );
    }
    for feed in &summary.feeds {
        println!(
            "feed     {} -> {} of {}, every {}, format {}: {}",
            feed.name,
            feed.list,
            feed.source,
            humantime::format_duration(std::time::Duration::from_secs(feed.refresh_seconds)),
            feed.format,
            feed.location
        );
    }
}
