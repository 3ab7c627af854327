//! How the agent sleeps between passes: in `poll`, on the socket its
//! signal handlers write to (the self-pipe pattern, so a signal wakes it
//! at once), the socket each finished fetch writes to, and the store watch
//! ([`super::watch`]); until the next thing due, or without a timeout when
//! nothing is. SIGTERM and SIGINT end the agent, SIGHUP reloads its
//! configuration.

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};

use super::watch::StoreWatch;
use super::{AgentError, MAX_IDLE};

/// After another process opens the store, the agent waits until the store
/// has been left alone this long (and at most [`MAX_IDLE`]) before its
/// pass, so that a run of commands does not wait for the agent's turns.
const SETTLE: Duration = Duration::from_millis(100);

/// The flags the signal handlers set, and the socket they write a byte to.
pub(super) struct Signals {
    pub(super) stop: Arc<AtomicBool>,
    pub(super) reload: Arc<AtomicBool>,
    wake: UnixStream,
}

/// Why a sleep ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Woken {
    /// Another process opened the store, and has left it alone since.
    pub(super) store_touched: bool,
}

impl Signals {
    /// Installs the handlers of SIGTERM, SIGINT and SIGHUP.
    pub(super) fn install() -> Result<Self, AgentError> {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let (wake, written) = UnixStream::pair().map_err(AgentError::Signals)?;
        wake.set_nonblocking(true).map_err(AgentError::Signals)?;
        let signals = Self {
            stop: Arc::new(AtomicBool::new(false)),
            reload: Arc::new(AtomicBool::new(false)),
            wake,
        };
        for (signal, flag) in [
            (SIGTERM, &signals.stop),
            (SIGINT, &signals.stop),
            (SIGHUP, &signals.reload),
        ] {
            // The flag first: the byte that wakes the sleeper must find it set.
            signal_hook::flag::register(signal, Arc::clone(flag)).map_err(AgentError::Signals)?;
            let written = written.try_clone().map_err(AgentError::Signals)?;
            signal_hook::low_level::pipe::register(signal, written).map_err(AgentError::Signals)?;
        }
        Ok(signals)
    }

    /// Whether a signal asked the agent to end.
    pub(super) fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Sleeps until `next` (if any), a signal, a byte on `fetched` (a fetch
    /// finished), or the store has settled after `watch` said another
    /// process opened it.
    pub(super) fn sleep_until(
        &self,
        next: Option<Instant>,
        watch: &mut Option<StoreWatch>,
        fetched: &UnixStream,
    ) -> Woken {
        let mut touches: Option<(Instant, Instant)> = None;
        loop {
            // The sockets emptied before the flags are read, so that a
            // signal that comes in between wakes the next poll.
            let fetch_done = drain(fetched);
            drain(&self.wake);
            let now = Instant::now();
            if super::store_touched(watch) {
                touches = Some((touches.map_or(now, |(first, _)| first), now));
            }
            let settled_at = touches.map(|(first, last)| (last + SETTLE).min(first + MAX_IDLE));
            let wake_at = [next, settled_at].into_iter().flatten().min();
            let settled = settled_at.is_some_and(|at| now >= at);
            if fetch_done
                || settled
                || wake_at.is_some_and(|at| now >= at)
                || self.stopping()
                || self.reload.load(Ordering::SeqCst)
            {
                return Woken {
                    store_touched: touches.is_some(),
                };
            }
            // No timeout (nothing is due): until a signal, a fetch or an
            // opening of the store.
            let timeout = wake_at.and_then(|at| Timespec::try_from(at - now).ok());
            let mut fds = vec![
                PollFd::new(&self.wake, PollFlags::IN),
                PollFd::new(fetched, PollFlags::IN),
            ];
            fds.extend(
                watch
                    .as_ref()
                    .map(|watch| PollFd::new(watch, PollFlags::IN)),
            );
            match poll(&mut fds, timeout.as_ref()) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(error) => {
                    tracing::warn!(%error, "cannot wait in poll; sleeping instead");
                    std::thread::sleep(wake_at.map_or(MAX_IDLE, |at| (at - now).min(MAX_IDLE)));
                }
            }
        }
    }
}

/// Reads every byte waiting on `socket`; whether there was any.
fn drain(mut socket: &UnixStream) -> bool {
    let mut any = false;
    while socket.read(&mut [0; 64]).is_ok_and(|read| read > 0) {
        any = true;
    }
    any
}
