//! `cfctl agent` as a separate process for the agent tests: started with a
//! configuration in a temp dir, its log kept, killed by PID on drop; and
//! the polls those tests wait with (a deadline is a hang guard, never a
//! measured time).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use super::cli::Cfctl;

/// A port on 127.0.0.1 that nothing listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

/// `cfctl agent` running for `cfctl`'s directories, killed by PID on drop.
pub struct Agent {
    pub child: Child,
    config: PathBuf,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Agent {
    pub fn start(cfctl: &Cfctl, config: &str) -> Self {
        Self::start_with(cfctl, config, |command| command)
    }

    /// [`Self::start`] as systemd would start a `Type=notify` service with
    /// `WatchdogSec`: `NOTIFY_SOCKET` names `socket`, `WATCHDOG_USEC` is
    /// `watchdog_usec` and `WATCHDOG_PID` the agent's PID (a shell sets it
    /// to its own and then runs the agent in its place).
    pub fn start_under_systemd(
        cfctl: &Cfctl,
        config: &str,
        socket: &std::path::Path,
        watchdog_usec: u64,
    ) -> Self {
        Self::start_with(cfctl, config, |agent| {
            let mut shell = std::process::Command::new("sh");
            shell
                .args(["-c", "WATCHDOG_PID=$$ exec \"$@\"", "sh"])
                .arg(agent.get_program())
                .args(agent.get_args())
                .env("NOTIFY_SOCKET", socket)
                .env("WATCHDOG_USEC", watchdog_usec.to_string());
            shell
        })
    }

    /// [`Self::start`], the command line changed by `wrap`.
    fn start_with(
        cfctl: &Cfctl,
        config: &str,
        wrap: impl FnOnce(std::process::Command) -> std::process::Command,
    ) -> Self {
        let dir = tempfile::tempdir().expect("a directory for the agent");
        let file = dir.path().join("agent.toml");
        std::fs::write(&file, config).expect("writing the configuration");
        let log = dir.path().join("agent.log");
        let child =
            wrap(cfctl.command(&["agent", "--config", file.to_str().expect("a UTF-8 path")]))
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).expect("a log file"))
                .spawn()
                .expect("starting cfctl agent");
        Self {
            child,
            config: file,
            log,
            _dir: dir,
        }
    }

    /// Rewrites the configuration and sends SIGHUP.
    pub fn reload(&self, config: &str) {
        std::fs::write(&self.config, config).expect("writing the configuration");
        self.signal(libc::SIGHUP);
    }

    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on the PID of a child this test started.
        unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then the exit status (failing after a minute, where an
    /// agent that missed the signal would hang the test).
    pub fn terminate(self) -> std::process::ExitStatus {
        self.terminate_with_log().0
    }

    /// [`Self::terminate`], and everything the agent logged.
    pub fn terminate_with_log(mut self) -> (std::process::ExitStatus, String) {
        self.signal(libc::SIGTERM);
        let mut status = None;
        wait_for("the agent to end on SIGTERM", || {
            status = self.child.try_wait().expect("the agent's status");
            status.is_some()
        });
        (status.expect("an exit status"), self.log())
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits for `condition`, failing with `what` after a minute.
pub fn wait_for(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !condition() {
        assert!(Instant::now() < deadline, "gave up waiting: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn listed(cfctl: &Cfctl, address: &str) -> bool {
    cfctl.run(&["check", "--quiet", address]).status.code() == Some(0)
}

/// A metrics scrape as served: its content type and its body.
pub fn scrape_body(port: u16) -> (String, String) {
    let mut response = ureq::get(&format!("http://127.0.0.1:{port}/metrics"))
        .call()
        .expect("scraping the metrics");
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = response.body_mut().read_to_string().expect("a text body");
    (content_type, body)
}

/// A metrics scrape, as `name{labels}` -> value.
pub fn scrape(port: u16) -> Vec<(String, f64)> {
    scrape_body(port)
        .1
        .lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let (name, value) = line.rsplit_once(' ').expect("a sample line");
            (name.to_owned(), value.parse().expect("a number"))
        })
        .collect()
}

/// The value of sample `name` in a scrape.
pub fn sample(samples: &[(String, f64)], name: &str) -> Option<f64> {
    samples
        .iter()
        .find(|(sampled, _)| sampled == name)
        .map(|&(_, value)| value)
}
