//! The progress bar of long imports, refreshes and resizes: drawn on
//! standard error when it is a terminal, nothing otherwise.

use std::io::IsTerminal;
use std::time::Duration;

use cfctl::control::update::Progress;
use indicatif::{ProgressBar, ProgressStyle};

/// A progress bar on standard error, shown only on a terminal.
pub struct Bar(Option<ProgressBar>);

impl Bar {
    /// A bar for a job of `entries` entries: drawn if standard error is a
    /// terminal and the job is long.
    pub fn new(entries: usize) -> Self {
        const LONG_JOB: usize = 20_000;
        Self((std::io::stderr().is_terminal() && entries >= LONG_JOB).then(ProgressBar::no_length))
    }
}

impl Progress for Bar {
    fn start(&self, stage: &str, total: u64) {
        let Some(bar) = &self.0 else { return };
        bar.reset();
        if total > 0 {
            bar.set_length(total);
            bar.set_style(
                ProgressStyle::with_template("{msg:32} [{bar:30}] {pos}/{len} ({eta})")
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
        } else {
            bar.set_style(ProgressStyle::default_spinner());
            bar.enable_steady_tick(Duration::from_millis(100));
        }
        bar.set_message(stage.to_owned());
    }

    fn advance(&self, steps: u64) {
        if let Some(bar) = &self.0 {
            bar.inc(steps);
        }
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}
