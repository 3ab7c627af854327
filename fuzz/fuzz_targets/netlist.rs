//! Every blocklist parser (plain, FireHOL netset, Spamhaus, and format
//! detection) and the address/CIDR parser, on any bytes: never a panic;
//! every entry is a network with its host bits clear that reads back as
//! itself; a strict parse that succeeds gives the same entries as a
//! lenient one, which then skips nothing; a lenient parse fails only for
//! the whole list (a line too long, too many entries), and then the strict
//! one fails too; the list parsed in two halves at once (split at the
//! line end after its middle, as a long list in memory is) gives what one
//! parse of the whole gives; the agent's log line for a refused list, which
//! quotes it, holds no control character but its line break. The first
//! input byte picks the format and the entry limit, the rest is the list.
#![no_main]

use cfctl::netlist::{
    middle_line_start, parse_bytes, parse_in_halves, parse_net, parse_reader, ListError,
    ListFormat, ParseOptions,
};
use std::io::Write;
use std::sync::{Arc, Mutex};

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, list)) = data.split_first() else {
        return;
    };
    let format = match selector % 4 {
        0 => None,
        n => Some(ListFormat::ALL[usize::from(n) - 1]),
    };
    // A small limit now and then, so that the limit's path runs too.
    let max_entries = if selector & 4 != 0 {
        usize::from(selector >> 3)
    } else {
        ParseOptions::default().max_entries
    };
    let options = |skip_invalid| ParseOptions {
        format,
        skip_invalid,
        max_entries,
    };
    let at = middle_line_start(list);
    let whole = parse_reader(list, "fuzz.txt", options(true));
    match (whole, parse_in_halves(list, at, "fuzz.txt", options(true))) {
        (Ok(whole), Ok(halves)) => assert_eq!(whole, halves),
        (Err(whole), Err(halves)) => assert_eq!(whole.to_string(), halves.to_string()),
        (whole, halves) => panic!("whole {whole:?}, halves {halves:?}"),
    }
    let strict = parse_bytes(list, "fuzz.txt", options(false));
    if let Err(error) = &strict {
        logs_escaped(error);
    }
    let lenient = match parse_bytes(list, "fuzz.txt", options(true)) {
        Ok(lenient) => lenient,
        Err(ListError::LineTooLong { .. } | ListError::TooManyEntries { .. }) => {
            assert!(strict.is_err(), "only the lenient parse failed");
            return;
        }
        Err(error) => panic!("a lenient parse failed on a line: {error}"),
    };
    assert!(lenient.entries.len() <= max_entries);
    let lines = list.split(|&byte| byte == b'\n').count();
    for entry in &lenient.entries {
        assert_eq!(
            entry.net,
            entry.net.trunc(),
            "host bits set in {}",
            entry.net
        );
        assert_eq!(parse_net(&entry.net.to_string()), Ok(entry.net));
        assert!((1..=lines).contains(&entry.line));
    }
    if let Ok(strict) = strict {
        assert_eq!(strict.entries, lenient.entries);
        assert!(lenient.skipped.is_empty());
    }
    for line in list.split(|&byte| byte == b'\n') {
        if let Ok(net) = parse_net(&String::from_utf8_lossy(line)) {
            assert_eq!(net, net.trunc());
            assert_eq!(parse_net(&net.to_string()), Ok(net));
        }
    }
});

/// A buffer the agent's log writes into.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl Write for Log {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("the log").extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Logs `error` as the agent logs a failed refresh, and checks the line.
fn logs_escaped(error: &ListError) {
    let log = Log::default();
    let writer = log.clone();
    let filter = cfctl::agent::log::filter(Some("info")).expect("a level");
    let destination = cfctl::agent::log::Destination::default();
    let subscriber = cfctl::agent::log::subscriber(move || writer.clone(), destination, filter);
    tracing::subscriber::with_default(subscriber, || {
        tracing::error!(feed = "fuzz", %error, "refresh failed; the last good list stays");
    });
    let line = String::from_utf8(log.0.lock().expect("the log").clone()).expect("UTF-8");
    assert_eq!(line.matches('\n').count(), 1, "{line:?}");
    assert!(
        !line
            .trim_end_matches('\n')
            .chars()
            .any(|c| c.is_control() || ('\u{202a}'..='\u{202e}').contains(&c)),
        "{line:?}"
    );
}
