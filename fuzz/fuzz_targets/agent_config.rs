//! The agent's configuration reader on any text: never a panic; a
//! configuration it accepts keeps every promise the agent relies on
//! (sources of unique names, feeds refreshed at least once a second,
//! limits of at least one); one it refuses is one line, `FILE:LINE:
//! reason`, naming a line the text has.
#![no_main]

use std::collections::HashSet;
use std::path::Path;

use cfctl::agent::config::Config;
use cfctl::sources::feed::{FeedConfig, MIN_REFRESH};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Config::parse(text, Path::new("agent.toml")) {
        Ok(config) => {
            let mut names = HashSet::new();
            for source in &config.sources {
                let (_, name) = source.source();
                assert!(names.insert(name.clone()), "two sources named {name}");
                let Some(feed) = source.as_any().downcast_ref::<FeedConfig>() else {
                    continue;
                };
                assert!(
                    feed.refresh >= MIN_REFRESH,
                    "{}: refresh {:?}",
                    feed.name,
                    feed.refresh
                );
                assert!(
                    feed.max_bytes >= 1 && feed.max_entries >= 1,
                    "{}",
                    feed.name
                );
                assert!(!feed.timeout.is_zero(), "{}: no timeout", feed.name);
                assert!((0.0..=1.0).contains(&feed.max_shrink), "{}", feed.name);
            }
        }
        Err(error) => {
            let message = error.to_string();
            assert!(
                !message.contains('\n'),
                "a message of several lines: {message:?}"
            );
            assert!(
                message.starts_with(&format!("agent.toml:{}: ", error.line)),
                "{message}"
            );
            assert!(
                (1..=text.lines().count().max(1) + 1).contains(&error.line),
                "line {} of a text of {} lines",
                error.line,
                text.lines().count()
            );
        }
    }
});
