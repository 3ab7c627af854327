//! Runs the real `cfctl` binary with a private pin directory on bpffs and a
//! private state directory, so that tests run in parallel; the guard
//! detaches everything and removes both directories on drop, also when a
//! test fails.

use std::fs::OpenOptions;
use std::net::IpAddr;
use std::os::fd::AsFd;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use cfctl::xdp::test_run::{run_xdp, XdpAction};

use super::netns::{ensure_bpffs, TestNetwork};
use super::require_root;

/// A test network on `subnet` and cfctl attached (in `mode`, native or
/// skb) to its host end with a filter for `capacity` keys (bind both: the
/// cfctl guard, second, is dropped first).
pub fn attached(subnet: u8, name: &str, capacity: &str, mode: &str) -> (TestNetwork, Cfctl) {
    let network = TestNetwork::new(subnet);
    let cfctl = Cfctl::new(name);
    cfctl.ok(&[
        "attach",
        &network.host_link,
        "--capacity",
        capacity,
        "--mode",
        mode,
    ]);
    (network, cfctl)
}

/// The cfctl binary cargo built for these tests.
pub fn binary() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cfctl"))
}

/// cfctl with its own pin and state directories.
pub struct Cfctl {
    pin_dir: PathBuf,
    state: tempfile::TempDir,
}

impl Cfctl {
    /// Directories named after `name` (unique per test).
    pub fn new(name: &str) -> Self {
        require_root();
        ensure_bpffs();
        let pin_dir = PathBuf::from(format!(
            "/sys/fs/bpf/cfctl-test-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&pin_dir);
        Self {
            pin_dir,
            state: tempfile::tempdir().expect("creating a state directory"),
        }
    }

    pub fn pin_dir(&self) -> &Path {
        &self.pin_dir
    }

    /// The verdict of the pinned program for a UDP frame from `source`,
    /// run with BPF_PROG_TEST_RUN (the store and the traffic untouched).
    pub fn pinned_verdict(&self) -> impl Fn(IpAddr) -> XdpAction {
        let verdict = self.pinned_frame_verdict();
        move |source| verdict(&super::udp_frame(source, super::Tags::None))
    }

    /// The verdict for a UDP frame from `source` of the program pinned at
    /// this moment, or `None` while none is (a resize unpins the old
    /// program before it pins the new one; the link runs one of them
    /// throughout).
    pub fn verdict_now(&self, source: IpAddr) -> Option<XdpAction> {
        let program = aya::programs::Xdp::from_pin(
            self.pin_dir.join("program"),
            aya_obj::programs::XdpAttachType::Interface,
        )
        .ok()?;
        let fd = program.fd().ok()?;
        let frame = super::udp_frame(source, super::Tags::None);
        Some(
            run_xdp(fd.as_fd(), &frame, 1)
                .expect("BPF_PROG_TEST_RUN")
                .action,
        )
    }

    /// The verdict of the pinned program for a frame, run with
    /// BPF_PROG_TEST_RUN.
    pub fn pinned_frame_verdict(&self) -> impl Fn(&[u8]) -> XdpAction {
        let program = aya::programs::Xdp::from_pin(
            self.pin_dir.join("program"),
            aya_obj::programs::XdpAttachType::Interface,
        )
        .expect("the pinned program");
        move |frame| {
            let fd = program.fd().expect("the program's fd");
            run_xdp(fd.as_fd(), frame, 1)
                .expect("BPF_PROG_TEST_RUN")
                .action
        }
    }

    /// Packets of `outcome`/`family` in `cfctl stats --json`, in
    /// `direction` (`ingress` or `egress`).
    pub fn packets_in(&self, direction: &str, outcome: &str, family: &str) -> u64 {
        self.json(&["stats"])
            .as_array()
            .expect("a list of counters")
            .iter()
            .find(|counter| {
                counter["direction"] == direction
                    && counter["outcome"] == outcome
                    && counter["family"] == family
            })
            .and_then(|counter| counter["packets"].as_u64())
            .expect("the counter")
    }

    /// Packets of `outcome`/`family` in `cfctl stats --json`, arriving.
    pub fn packets(&self, outcome: &str, family: &str) -> u64 {
        self.packets_in("ingress", outcome, family)
    }

    /// Waits until a cfctl process holds the sampled drops' reader lock.
    pub fn wait_until_reading(&self) {
        let path = self.state_dir().join("drops.lock");
        let started = Instant::now();
        loop {
            if let Ok(lock) = OpenOptions::new().write(true).open(&path) {
                // SAFETY: flock on a descriptor this test owns.
                let free =
                    unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
                if !free {
                    return;
                }
            }
            assert!(
                started.elapsed() < PATIENCE,
                "nothing reads the sampled drops"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `cfctl --json stats --by BY --count COUNT --seconds 60` while
    /// `traffic` runs once the command reads the samples: its report.
    pub fn stats_by_during(
        &self,
        by: &str,
        count: u64,
        traffic: impl FnOnce(),
    ) -> serde_json::Value {
        let count = count.to_string();
        let stats = self
            .command(&[
                "--json",
                "stats",
                "--by",
                by,
                "--count",
                &count,
                "--seconds",
                "60",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting cfctl stats");
        self.wait_until_reading();
        traffic();
        serde_json::from_str(&output_of(stats)).expect("JSON")
    }

    pub fn state_dir(&self) -> &Path {
        self.state.path()
    }

    /// `cfctl --pin-dir .. --state-dir .. ARGS`, not started.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = binary();
        command
            .arg("--pin-dir")
            .arg(&self.pin_dir)
            .arg("--state-dir")
            .arg(self.state.path())
            .args(args);
        command
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("running cfctl")
    }

    /// Runs cfctl to its end where it must end by itself (a refusal, a
    /// bounded input): one that runs on is the defect under test, so it
    /// is killed, and the test fails, after a minute.
    pub fn run_to_end(&self, args: &[&str]) -> Output {
        let mut child = self
            .command(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("starting cfctl");
        for _ in 0..600 {
            if child.try_wait().expect("waiting for cfctl").is_some() {
                return child.wait_with_output().expect("reading cfctl's output");
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("cfctl {} did not end", args.join(" "));
    }

    /// Runs cfctl, which must succeed; returns its standard output.
    pub fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(
            output.status.success(),
            "cfctl {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).expect("UTF-8 output")
    }

    /// Runs cfctl with `--json`, which must succeed; returns the report.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut with_json = vec!["--json"];
        with_json.extend_from_slice(args);
        serde_json::from_str(&self.ok(&with_json)).expect("cfctl --json prints JSON")
    }

    /// Runs `cfctl --json check ADDRESS`; returns the report, after checking
    /// that the exit status gives the same answer (0 listed, 1 not).
    pub fn check(&self, address: &str) -> serde_json::Value {
        let output = self.run(&["--json", "check", address]);
        let report: serde_json::Value =
            serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
                panic!(
                    "cfctl check {address}: {}",
                    String::from_utf8_lossy(&output.stderr)
                )
            });
        let listed = report["covering"]
            .as_array()
            .is_some_and(|covering| !covering.is_empty());
        assert_eq!(
            output.status.code(),
            Some(if listed { 0 } else { 1 }),
            "cfctl check {address}: the exit status contradicts the report {report}"
        );
        report
    }

    /// The expiry (Unix seconds) of `source`'s listing of `address`'s host
    /// entry (its /32 or /128): `Some(None)` for a listing that never
    /// expires, `None` if `source` does not list it.
    pub fn listing_expiry(&self, source: &str, address: &str) -> Option<Option<u64>> {
        let entries = self.json(&["list", "--source", source]);
        let entry = entries.as_array()?.iter().find(|entry| {
            entry["net"].as_str().and_then(|net| net.split('/').next()) == Some(address)
        })?;
        let member = entry["sources"]
            .as_array()?
            .iter()
            .find(|member| member["source"] == source)?;
        Some(member["expires"].as_u64())
    }

    /// Runs cfctl, which must fail with exactly one line on standard error;
    /// returns that line.
    pub fn fails(&self, args: &[&str]) -> String {
        expect_one_error_line(&self.run(args), &args.join(" "))
    }
}

/// The one line of standard error of a failed cfctl run.
pub fn expect_one_error_line(output: &Output, what: &str) -> String {
    assert!(!output.status.success(), "cfctl {what} should fail");
    assert!(
        output.stdout.is_empty(),
        "cfctl {what} printed a report though it failed"
    );
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(
        stderr.lines().count(),
        1,
        "cfctl {what}: one line of error expected, got {stderr:?}"
    );
    stderr.trim_end().to_owned()
}

impl Drop for Cfctl {
    fn drop(&mut self) {
        let _ = self.run(&["detach", "--all"]);
        let _ = std::fs::remove_dir_all(&self.pin_dir);
    }
}

/// The longest a wait for a cfctl process lasts before it fails the test.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Waits for `child` to end by itself (killing it and failing the test
/// after [`PATIENCE`]); its standard output.
pub fn output_of(child: Child) -> String {
    let started = Instant::now();
    let mut child = child;
    while child.try_wait().expect("waiting for cfctl").is_none() {
        if started.elapsed() > PATIENCE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("cfctl did not end");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().expect("reading cfctl's output");
    assert!(
        output.status.success(),
        "cfctl failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 output")
}
