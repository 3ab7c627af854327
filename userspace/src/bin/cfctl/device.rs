//! The verbs on a filter device (`--device`): the input is parsed before
//! the device is opened, so bad input fails fast and changes nothing.

use std::net::IpAddr;

use anyhow::bail;
use cfctl::control::device::{DeviceControl, PortSettings};
use ipnet::IpNet;

use crate::cli::{Command, GlobalOptions};
use crate::input::{nets_to_add, parse_address, parse_nets, read_list};
use crate::{answer_check, print, report};

/// What a device command needs from the input.
enum DeviceInput {
    Nets(Vec<IpNet>),
    Address(IpAddr),
    Nothing,
}

/// Runs `command` on the device `target`.
pub fn run(global: &GlobalOptions, target: &str, command: &Command) -> anyhow::Result<()> {
    let input = match command {
        Command::Add(args) => DeviceInput::Nets(nets_to_add(global, &args.entries)?),
        Command::Del(args) => DeviceInput::Nets(parse_nets(&args.entries)?),
        Command::Import(args) => DeviceInput::Nets(
            read_list(global, args)?
                .entries
                .into_iter()
                .map(|entry| entry.net)
                .collect(),
        ),
        Command::Check(args) => DeviceInput::Address(parse_address(&args.address)?),
        Command::Stats(args) if args.by.is_some() => {
            bail!("`cfctl stats --by` has no meaning for a device: it samples the XDP program's drops")
        }
        Command::Status | Command::Stats(_) | Command::Save => DeviceInput::Nothing,
        _ => bail!(
            "`cfctl {}` has no meaning for a device; a device takes add, del, check, import, \
             status, stats and save",
            command.name()
        ),
    };
    let settings = PortSettings {
        baud: global.baud,
        key_file: global.device_key.clone(),
    };
    let mut device = DeviceControl::open(target, &settings)?;
    match (command, input) {
        (Command::Add(_), DeviceInput::Nets(nets)) => {
            let added = device.add(&nets)?;
            print(global, &serde_json::json!({ "added": added }), |_| {
                println!("{added} added")
            })
        }
        (Command::Del(_), DeviceInput::Nets(nets)) => {
            let report = device.delete(&nets)?;
            print(global, &report, report::device_delete)
        }
        (Command::Import(_), DeviceInput::Nets(nets)) => {
            let report = device.import(&nets)?;
            print(global, &report, report::device_import)
        }
        (Command::Check(args), DeviceInput::Address(address)) => {
            let listed = device.check(address)?;
            let value = serde_json::json!({ "address": address, "listed": listed });
            answer_check(global, args.quiet, listed, &value, |_| {
                if listed {
                    println!("{address} is listed on the device")
                } else {
                    println!("{address}: not listed")
                }
            })
        }
        (Command::Status, _) => {
            let info = device.info()?;
            let status = report::DeviceStatus::new(target, &info);
            print(global, &status, report::device_status)
        }
        (Command::Stats(_), _) => {
            let stats = device.stats()?;
            print(global, &stats, report::device_stats)
        }
        (Command::Save, _) => {
            let sequence = device.save()?;
            print(
                global,
                &serde_json::json!({ "saved_sequence": sequence }),
                |_| println!("saved image {sequence}"),
            )
        }
        _ => unreachable!("the input matches the command"),
    }
}
