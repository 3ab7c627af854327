//! fail2ban with cfctl's action (`userspace/dist/fail2ban/action.d/cfctl.py`):
//! the real fail2ban from Debian's package (unpacked into target/fail2ban
//! by `./x setup`) runs in the foreground with its configuration, socket,
//! log and database in a temp dir; a jail watches a log file the test
//! writes, and the failures of a source in a namespace get its packets
//! dropped by the attached blocklist. Only 198.18.0.0/15 and 2001:db8::/32
//! addresses are used; fail2ban is stopped by PID on drop. Needs root,
//! iproute2, ping and python3.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::agent::{listed, wait_for};
use common::cli::{attached, Cfctl};
use common::netns::check_traffic;

/// A fail2ban server of its own, stopped by PID on drop.
struct Fail2ban {
    child: Child,
    config: PathBuf,
    socket: PathBuf,
    /// The log files jails `test` and `repeat` watch.
    watched: PathBuf,
    repeat: PathBuf,
    dir: tempfile::TempDir,
}

impl Fail2ban {
    /// Starts fail2ban with three jails acting through `cfctl`, each on a
    /// log file of its own and banning after 3 failures: `test` (bans of
    /// 10 minutes), `repeat` (bans of 2 seconds, of 10 minutes for a repeat
    /// offender: `bantime.increment`) and `perm` (permanent bans).
    fn start(cfctl: &Cfctl) -> Self {
        Self::start_with(cfctl, "", &[])
    }

    /// [`Self::start`] with more jails (`extra_jails`, sections of
    /// jail.conf in which `{root}` is fail2ban's directory) and the
    /// actions they use (name, text).
    fn start_with(cfctl: &Cfctl, extra_jails: &str, extra_actions: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().expect("a directory for fail2ban");
        let root = dir.path();
        let config = root.join("config");
        for sub in ["action.d", "filter.d"] {
            std::fs::create_dir_all(config.join(sub)).expect("a configuration directory");
        }
        let action = Path::new(env!("CARGO_MANIFEST_DIR")).join("dist/fail2ban/action.d/cfctl.py");
        std::fs::copy(action, config.join("action.d/cfctl.py")).expect("the action");
        for (name, text) in extra_actions {
            std::fs::write(config.join(format!("action.d/{name}.conf")), text).expect("an action");
        }
        std::fs::write(
            config.join("filter.d/test.conf"),
            "[Definition]\nfailregex = ^Failed login from <HOST>$\nignoreregex =\ndatepattern = {NONE}\n",
        )
        .expect("the filter");
        let r = root.display();
        std::fs::write(
            config.join("fail2ban.conf"),
            format!(
                "[Definition]\nloglevel = INFO\nlogtarget = {r}/fail2ban.log\nsocket = {r}/fail2ban.sock\n\
                 pidfile = {r}/fail2ban.pid\ndbfile = {r}/fail2ban.sqlite3\ndbpurgeage = 1d\n"
            ),
        )
        .expect("fail2ban.conf");
        let command = cfctl.command(&[]);
        let mut cfctl_line = vec![command.get_program().to_string_lossy().into_owned()];
        cfctl_line.extend(
            command
                .get_args()
                .map(|arg| arg.to_string_lossy().into_owned()),
        );
        let cfctl_line = cfctl_line.join(" ");
        let (watched, repeat, quiet) = (
            root.join("auth.log"),
            root.join("repeat.log"),
            root.join("quiet.log"),
        );
        for log in [&watched, &repeat, &quiet] {
            std::fs::write(log, "").expect("a log file");
        }
        std::fs::write(
            config.join("jail.conf"),
            format!(
                "[DEFAULT]\nbackend = polling\nfindtime = 10m\nmaxretry = 3\n\
                 action = cfctl.py[cfctl=\"{cfctl_line}\"]\n\n\
                 [test]\nenabled = true\nfilter = test\nlogpath = {}\nbantime = 600\n\n\
                 [repeat]\nenabled = true\nfilter = test\nlogpath = {}\nbantime = 2\n\
                 bantime.increment = true\nbantime.multipliers = 1 300\n\n\
                 [perm]\nenabled = true\nfilter = test\nlogpath = {}\nbantime = -1\n\n{}",
                watched.display(),
                repeat.display(),
                quiet.display(),
                extra_jails.replace("{root}", &r.to_string())
            ),
        )
        .expect("jail.conf");
        let socket = root.join("fail2ban.sock");
        let child = Self::command("fail2ban-server", &config, &socket)
            .args(["-f", "-x"])
            .arg("-p")
            .arg(root.join("fail2ban.pid"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(root.join("server.err")).expect("a log"))
            .spawn()
            .expect("starting fail2ban-server");
        let server = Self {
            child,
            config,
            socket,
            watched,
            repeat,
            dir,
        };
        wait_for("fail2ban to answer", || {
            server
                .client_status(&["ping"])
                .is_some_and(|out| out.contains("pong"))
        });
        server
    }

    /// fail2ban's `program` with its modules, configuration and socket.
    fn command(program: &str, config: &Path, socket: &Path) -> Command {
        let binary = common::unpacked_bin("fail2ban", program);
        let modules = binary
            .parent()
            .and_then(Path::parent)
            .expect("the unpacked usr")
            .join("lib/python3/dist-packages");
        let mut command = Command::new("python3");
        command
            .arg(binary)
            .env("PYTHONPATH", modules)
            .arg("-c")
            .arg(config)
            .arg("-s")
            .arg(socket);
        command
    }

    /// `fail2ban-client ARGS`'s output, if it succeeds.
    fn client_status(&self, args: &[&str]) -> Option<String> {
        let output = Self::command("fail2ban-client", &self.config, &self.socket)
            .args(args)
            .output()
            .expect("running fail2ban-client");
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// `fail2ban-client ARGS`, which must succeed.
    fn client(&self, args: &[&str]) -> String {
        self.client_status(args)
            .unwrap_or_else(|| panic!("fail2ban-client {args:?} failed; its log:\n{}", self.log()))
    }

    /// Writes 3 failed logins of `address` to the log jail `jail` watches.
    fn fail(&self, jail: &str, address: &str) {
        let file = match jail {
            "repeat" => &self.repeat,
            _ => &self.watched,
        };
        let mut log = std::fs::OpenOptions::new()
            .append(true)
            .open(file)
            .expect("the watched log");
        for _ in 0..3 {
            writeln!(log, "Failed login from {address}").expect("writing the log");
        }
    }

    /// Waits for `condition`, failing with `what` and fail2ban's log
    /// after a minute.
    fn wait_for(&self, what: &str, condition: impl FnMut() -> bool) {
        self.wait_within(std::time::Duration::from_secs(60), what, condition);
    }

    /// [`Self::wait_for`] with ten minutes' patience (a benchmark).
    fn wait_for_long(&self, what: &str, condition: impl FnMut() -> bool) {
        self.wait_within(std::time::Duration::from_secs(600), what, condition);
    }

    fn wait_within(
        &self,
        patience: std::time::Duration,
        what: &str,
        mut condition: impl FnMut() -> bool,
    ) {
        let deadline = std::time::Instant::now() + patience;
        while !condition() {
            assert!(
                std::time::Instant::now() < deadline,
                "gave up waiting: {what}; fail2ban's log:\n{}",
                self.log()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// The pids of the `cfctl batch` processes fail2ban's actions keep.
    fn batches(&self) -> Vec<i32> {
        let tasks = format!("/proc/{}/task", self.child.id());
        let mut pids = Vec::new();
        for task in std::fs::read_dir(tasks).expect("fail2ban's threads") {
            let children = std::fs::read_to_string(task.expect("a thread").path().join("children"))
                .unwrap_or_default();
            pids.extend(
                children
                    .split_whitespace()
                    .filter_map(|pid| pid.parse::<i32>().ok()),
            );
        }
        pids.retain(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|line| line.split(|&byte| byte == 0).any(|word| word == b"batch"))
        });
        pids
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("fail2ban.log")).unwrap_or_default()
    }
}

impl Drop for Fail2ban {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn fail2ban_bans_reach_the_traffic_and_unbans_let_it_through() {
    let (network, cfctl) = attached(190, "fail2ban", "1000", "skb");
    let (v4, v6) = (network.v4(3).to_string(), network.v6(3).to_string());
    let by_hand = network.v4(9).to_string();
    cfctl.ok(&["add", &by_hand]);
    let fail2ban = Fail2ban::start(&cfctl);
    fail2ban.fail("test", &v4);
    fail2ban.fail("test", &v6);
    fail2ban.wait_for("both sources banned", || {
        cfctl.listing_expiry("fail2ban:test", &v4).is_some()
            && cfctl.listing_expiry("fail2ban:test", &v6).is_some()
    });
    check_traffic(&network, true);
    let first_expiry = cfctl
        .listing_expiry("fail2ban:test", &v4)
        .flatten()
        .expect("a ban of 10 minutes expires");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    assert!(
        (now + 500..=now + 700).contains(&first_expiry),
        "{first_expiry} at {now}"
    );

    // An unban deletes the jail's listing: the traffic passes again.
    fail2ban.client(&["set", "test", "unbanip", &v4]);
    fail2ban.client(&["set", "test", "unbanip", &v6]);
    fail2ban.wait_for("both sources unbanned", || {
        !listed(&cfctl, &v4) && !listed(&cfctl, &v6)
    });
    check_traffic(&network, false);

    // The action's `cfctl batch` processes, killed, are started again at
    // the next ban.
    let batches = fail2ban.batches();
    assert_eq!(batches.len(), 3, "one batch for each jail");
    for pid in batches {
        // SAFETY: kill has no memory preconditions; the pid is a child of
        // the fail2ban this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    fail2ban.client(&["set", "test", "banip", &v4]);
    fail2ban.wait_for("the ban after the batch was killed", || listed(&cfctl, &v4));
    fail2ban.client(&["set", "test", "unbanip", &v4]);
    fail2ban.wait_for("the unban after it", || !listed(&cfctl, &v4));

    // A repeat offender's second ban is increased (bantime.increment),
    // and fail2ban prolongs the ban it made: the entry's expiry moves out.
    let repeat = network.v4(5).to_string();
    fail2ban.fail("repeat", &repeat);
    fail2ban.wait_for("the first ban, of 2 seconds, over", || {
        fail2ban.log().contains(&format!("[repeat] Unban {repeat}"))
    });
    fail2ban.fail("repeat", &repeat);
    fail2ban.wait_for("the repeat offender's ban prolonged", || {
        cfctl
            .listing_expiry("fail2ban:repeat", &repeat)
            .flatten()
            .is_some_and(|expires| expires > now + 300)
    });

    // A permanent ban (bantime = -1) has no expiry.
    let forever = network.v4(7).to_string();
    fail2ban.client(&["set", "perm", "banip", &forever]);
    fail2ban.wait_for("the permanent ban", || {
        cfctl.listing_expiry("fail2ban:perm", &forever) == Some(None)
    });

    // Stopping fail2ban withdraws its jails' entries and nothing else.
    fail2ban.client(&["stop"]);
    fail2ban.wait_for("the jails' entries withdrawn", || {
        !listed(&cfctl, &v4) && !listed(&cfctl, &forever)
    });
    assert!(listed(&cfctl, &by_hand));
    let log = fail2ban.log();
    assert!(!log.contains("ERROR"), "{log}");
}

/// fail2ban's per-ban action for the strongest common alternative: the
/// `ipset -exist add` that `iptables-ipset` runs for each ban (without its
/// iptables rules, whose cost is paid once at the start).
const IPSET_ACTION: &str = "[Definition]\n\
    actionstart = ipset -exist create f2b-<name> hash:ip timeout 0\n\
    actionstop = ipset destroy f2b-<name>\n\
    actionban = ipset -exist add f2b-<name> <ip> timeout 0\n\
    actionunban = ipset -exist del f2b-<name> <ip>\n";

/// How long fail2ban takes to apply `count` bans of jail `jail` given at
/// once (`banip` with every address), until `applied` says they all are.
fn time_bans(
    fail2ban: &Fail2ban,
    jail: &str,
    addresses: &[String],
    mut applied: impl FnMut() -> usize,
) -> std::time::Duration {
    let started = std::time::Instant::now();
    let mut args = vec!["set", jail, "banip"];
    args.extend(addresses.iter().map(String::as_str));
    fail2ban.client(&args);
    // Looked at four times a second: often enough, and rarely enough
    // that the looking costs the bans little.
    fail2ban.wait_for_long(&format!("{} bans of {jail}", addresses.len()), || {
        std::thread::sleep(std::time::Duration::from_millis(200));
        applied() >= addresses.len()
    });
    started.elapsed()
}

/// A measurement, not a test: 1,000 bans given to fail2ban at once,
/// applied through cfctl's action into an attached filter, and through
/// the `ipset add` of fail2ban's ipset actions, in the same run (three
/// rounds, alternating). Run by `./x bench-agent`; needs ipset.
#[test]
#[ignore = "a benchmark: ./x bench-agent"]
fn a_thousand_fail2ban_bans() {
    let (_network, cfctl) = attached(191, "fail2ban-bench", "4096", "skb");
    let jails =
        "[bench]\nenabled = true\nfilter = test\nlogpath = {root}/quiet.log\nbantime = 3600\n\n\
        [bench6]\nenabled = true\nfilter = test\nlogpath = {root}/quiet.log\nbantime = 3600\n\
        action = ipset-only\n";
    let fail2ban = Fail2ban::start_with(&cfctl, jails, &[("ipset-only", IPSET_ACTION)]);
    let ipset_entries = || {
        let output = Command::new("ipset")
            .args(["list", "f2b-bench6", "-terse"])
            .output()
            .expect("running ipset");
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .find_map(|line| line.strip_prefix("Number of entries: "))
            .and_then(|count| count.trim().parse().ok())
            .unwrap_or(0)
    };
    let cfctl_entries = || {
        cfctl
            .json(&["list", "--source", "fail2ban:bench"])
            .as_array()
            .map_or(0, Vec::len)
    };
    for round in 0..3u32 {
        let addresses: Vec<String> = (0..1000u32)
            .map(|index| {
                let host = 0xc612_c000 + round * 1024 + index; // 198.18.192.0/20
                std::net::Ipv4Addr::from(host).to_string()
            })
            .collect();
        let ours = time_bans(&fail2ban, "bench", &addresses, cfctl_entries);
        let theirs = time_bans(&fail2ban, "bench6", &addresses, ipset_entries);
        println!(
            "round {round}: cfctl action {:.2} s, ipset action {:.2} s, ratio {:.2}",
            ours.as_secs_f64(),
            theirs.as_secs_f64(),
            ours.as_secs_f64() / theirs.as_secs_f64()
        );
        fail2ban.client(&["unban", "--all"]);
        fail2ban.wait_for_long("every ban lifted", || {
            cfctl_entries() == 0 && ipset_entries() == 0
        });
    }
}
