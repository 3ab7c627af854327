//! The command line's and list files' input, parsed before anything
//! changes: networks and addresses given as arguments, and lists to import,
//! with the rule that entries for a whole family need `--force`.

use std::net::IpAddr;
use std::path::Path;

use anyhow::Context as _;
use cfctl::netlist::{self, ListFormat, ParseOptions, ParsedList};
use cfctl::sources::cli;
use cfctl::text::{self, Escaped};
use ipnet::IpNet;

use crate::cli::{FormatArg, GlobalOptions, ImportArgs};

/// Parses every `ADDR|CIDR` argument.
pub fn parse_nets(texts: &[String]) -> anyhow::Result<Vec<IpNet>> {
    texts
        .iter()
        .map(|given| {
            netlist::parse_net(given).with_context(|| format!("'{}'", text::excerpt(given)))
        })
        .collect()
}

/// Parses an `ADDR` argument (an IPv4-mapped one is the IPv4 address).
pub fn parse_address(given: &str) -> anyhow::Result<IpAddr> {
    netlist::parse_address(given)
        .with_context(|| format!("'{}': not an IP address", text::excerpt(given)))
}

/// Parses `ADDR|CIDR` arguments to add: entries for a whole family need
/// `--force`.
pub fn nets_to_add(global: &GlobalOptions, texts: &[String]) -> anyhow::Result<Vec<IpNet>> {
    let nets = parse_nets(texts)?;
    warn_whole_families(&nets, global.force)?;
    Ok(nets)
}

/// Refuses entries for a whole family unless `force`, and warns about them
/// when forced.
fn warn_whole_families(nets: &[IpNet], force: bool) -> anyhow::Result<()> {
    for net in cli::whole_families(nets, force)? {
        eprintln!("cfctl: warning: {net} covers every address of its family");
    }
    Ok(())
}

/// Parses the import's list, all or nothing (or skipping bad lines, each
/// reported); entries for a whole family need `--force`.
pub fn read_list(global: &GlobalOptions, args: &ImportArgs) -> anyhow::Result<ParsedList> {
    let options = ParseOptions {
        format: match args.format {
            FormatArg::Auto => None,
            FormatArg::Plain => Some(ListFormat::Plain),
            FormatArg::Netset => Some(ListFormat::Netset),
            FormatArg::Spamhaus => Some(ListFormat::Spamhaus),
        },
        skip_invalid: args.skip_invalid,
        ..ParseOptions::default()
    };
    let list = if args.file == Path::new("-") {
        netlist::parse_reader(std::io::stdin().lock(), "-", options)?
    } else {
        netlist::parse_file(&args.file, options)?
    };
    for skipped in &list.skipped {
        eprintln!("cfctl: skipped {}", Escaped(&skipped.to_string()));
    }
    if list.skipped_count > list.skipped.len() {
        eprintln!(
            "cfctl: skipped {} more invalid lines",
            list.skipped_count - list.skipped.len()
        );
    }
    let nets: Vec<IpNet> = list.entries.iter().map(|entry| entry.net).collect();
    warn_whole_families(&nets, global.force)?;
    Ok(list)
}
