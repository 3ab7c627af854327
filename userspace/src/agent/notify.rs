//! What the agent tells systemd (`Type=notify`, sd_notify(3), through the
//! `sd-notify` crate): `READY=1` once every source's first fetch has been
//! applied (or its failure recorded), so that `systemctl start` returns
//! when the filter holds what the sources gave; a `STATUS=` line after
//! each pass; `RELOADING=1` and `READY=1` around a reload (SIGHUP);
//! `STOPPING=1`; and, under `WatchdogSec=`, `WATCHDOG=1` at half the
//! interval from the main loop, so a loop that hangs is restarted. Without
//! `NOTIFY_SOCKET` (not under systemd) nothing is sent.

use std::time::{Duration, Instant};

use sd_notify::NotifyState;

/// The agent's messages to systemd.
#[derive(Debug)]
pub struct Notifier {
    ready: bool,
    /// Half the watchdog's interval, if systemd watches.
    ping_every: Option<Duration>,
    next_ping: Instant,
    status: String,
    told_failure: bool,
}

impl Notifier {
    /// A notifier for the service manager the environment names, if any.
    pub fn from_environment() -> Self {
        let mut usec = 0;
        let ping_every = sd_notify::watchdog_enabled(false, &mut usec)
            .then(|| Duration::from_micros(usec) / 2)
            .filter(|every| !every.is_zero());
        Self {
            ready: false,
            ping_every,
            next_ping: Instant::now(),
            status: String::new(),
            told_failure: false,
        }
    }

    fn send(&mut self, states: &[NotifyState<'_>]) {
        if let Err(error) = sd_notify::notify(false, states) {
            if !std::mem::replace(&mut self.told_failure, true) {
                tracing::warn!(%error, "cannot notify the service manager");
            }
        }
    }

    /// Says `status`, and that the agent is ready if `ready` and it has
    /// not said so yet.
    pub fn pass(&mut self, ready: bool, status: String) {
        let becomes_ready = ready && !self.ready;
        if !becomes_ready && status == self.status {
            return;
        }
        self.ready |= ready;
        let line = NotifyState::Status(&status);
        match becomes_ready {
            true => self.send(&[NotifyState::Ready, line]),
            false => self.send(&[line]),
        }
        self.status = status;
    }

    /// Says the configuration is being reloaded.
    pub fn reloading(&mut self) {
        match NotifyState::monotonic_usec_now() {
            Ok(now) => self.send(&[NotifyState::Reloading, now]),
            Err(_) => self.send(&[NotifyState::Reloading]),
        }
    }

    /// Says the reload is over.
    pub fn reloaded(&mut self) {
        self.send(&[NotifyState::Ready]);
    }

    /// Says the agent is stopping.
    pub fn stopping(&mut self) {
        self.send(&[NotifyState::Stopping]);
    }

    /// Tells the watchdog the loop is alive, if a ping is due.
    pub fn ping(&mut self) {
        let Some(every) = self.ping_every else {
            return;
        };
        let now = Instant::now();
        if now >= self.next_ping {
            self.send(&[NotifyState::Watchdog]);
            self.next_ping = now + every;
        }
    }

    /// When the next ping is due, if systemd watches.
    pub fn due(&self) -> Option<Instant> {
        self.ping_every.map(|_| self.next_ping)
    }
}
