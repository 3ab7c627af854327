//! `cfctl agent` following a real CrowdSec Local API: the LAPI (from the
//! crowdsec package that `./x setup` unpacks into target/crowdsec) runs on
//! 127.0.0.1 with a free port and its sqlite database in a temp dir,
//! driven by `cscli`; the agent attached to a veth pair in a namespace;
//! real traffic. Needs root, iproute2 and ping.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::agent::{free_port, listed, sample, scrape, wait_for, Agent};
use common::cli::attached;
use common::feed_server::{Answer, FeedServer};
use common::netns::check_traffic;

/// Runs `command`, which must succeed (`what` names it if not); its
/// standard output, trimmed.
fn succeeds(command: &mut Command, what: &str) -> String {
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("running {what}: {error}"));
    assert!(
        output.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// Runs cscli with the LAPI configuration `config`; its standard output.
fn cscli(config: &Path, args: &[&str]) -> String {
    succeeds(
        Command::new(common::unpacked_bin("crowdsec", "cscli"))
            .arg("-c")
            .arg(config)
            .args(args),
        &format!("cscli {args:?}"),
    )
}

/// Writes a test CA (`ca.pem`) and certificates it signs into `dir`, with
/// openssl: `server` for 127.0.0.1, and client certificates `bouncer`
/// (OU bouncer-ou) and `cscli` (OU agent-ou), the OUs a LAPI accepts from
/// bouncers and machines; each `NAME.pem` with its `NAME.key`.
fn make_certificates(dir: &Path) {
    // ./x setup installs openssl.
    let openssl = |args: &[&str]| {
        succeeds(
            Command::new("openssl").current_dir(dir).args(args),
            &format!("openssl {args:?}"),
        )
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509", "-days", "2", "-subj", "/CN=cfctl test CA"];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign",
    ]);
    openssl(&ca);
    let client = "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n";
    for (name, subject, extensions) in [
        (
            "server",
            "/CN=127.0.0.1",
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        ),
        ("bouncer", "/OU=bouncer-ou/CN=cfctl", client),
        ("cscli", "/OU=agent-ou/CN=cscli", client),
    ] {
        let (key, csr, ext, pem) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.ext"),
            format!("{name}.pem"),
        );
        let mut request = vec!["req", "-subj", subject, "-keyout", &key, "-out", &csr];
        request.extend(ec);
        openssl(&request);
        std::fs::write(dir.join(&ext), extensions).expect("the extensions");
        openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &ext,
            "-out",
            &pem,
        ]);
    }
}

/// How a test LAPI speaks.
#[derive(Clone, Copy, PartialEq)]
enum Transport {
    Http,
    /// HTTPS with a certificate for 127.0.0.1 from a test CA (`ca.pem`
    /// in its directory).
    Https,
    /// HTTPS that also requires a client certificate from that CA
    /// (`bouncer.pem` and `bouncer.key` for a bouncer); cscli then logs
    /// in with one (`cscli.pem`) instead of a password.
    HttpsClientCerts,
}

/// Starts the LAPI alone (`-no-cs`) with `config`, logging into `dir`.
fn serve(config: &Path, dir: &Path) -> Child {
    Command::new(common::unpacked_bin("crowdsec", "crowdsec"))
        .arg("-c")
        .arg(config)
        .arg("-no-cs")
        .stdout(std::fs::File::create(dir.join("lapi.log")).expect("a log"))
        .stderr(Stdio::null())
        .spawn()
        .expect("starting the LAPI")
}

/// A CrowdSec LAPI of its own, killed by PID on drop.
struct Lapi {
    child: Child,
    config: PathBuf,
    url: String,
    dir: tempfile::TempDir,
}

impl Lapi {
    fn start() -> Self {
        Self::start_with(Transport::Http)
    }

    fn start_with(transport: Transport) -> Self {
        let dir = tempfile::tempdir().expect("a directory for the LAPI");
        let root = dir.path();
        for sub in ["cfg", "data", "hub"] {
            std::fs::create_dir(root.join(sub)).expect("a LAPI directory");
        }
        std::fs::write(root.join("hub/.index.json"), "{}").expect("the hub index");
        std::fs::write(
            root.join("cfg/profiles.yaml"),
            "name: default_ip_remediation\nfilters:\n - Alert.Remediation == true && Alert.GetScope() == \"Ip\"\ndecisions:\n - type: ban\n   duration: 4h\non_success: break\n",
        )
        .expect("the profiles");
        let port = free_port();
        let r = root.display();
        let (scheme, tls_lines) = match transport {
            Transport::Http => ("http", String::new()),
            Transport::Https | Transport::HttpsClientCerts => {
                make_certificates(root);
                let mut lines = format!(
                    "    tls:\n      cert_file: {r}/server.pem\n      key_file: {r}/server.key\n"
                );
                if transport == Transport::HttpsClientCerts {
                    lines.push_str(&format!(
                        "      client_verification: RequireAndVerifyClientCert\n      ca_cert_path: {r}/ca.pem\n      bouncers_allowed_ou: [bouncer-ou]\n      agents_allowed_ou: [agent-ou]\n"
                    ));
                }
                ("https", lines)
            }
        };
        let config = root.join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "common:\n  daemonize: false\n  log_media: stdout\n  log_level: info\n\
                 config_paths:\n  config_dir: {r}/cfg\n  data_dir: {r}/data\n  hub_dir: {r}/hub\n  index_path: {r}/hub/.index.json\n\
                 db_config:\n  type: sqlite\n  db_path: {r}/data/crowdsec.db\n  use_wal: true\n\
                 api:\n  client:\n    credentials_path: {r}/creds.yaml\n    insecure_skip_verify: true\n  server:\n    profiles_path: {r}/cfg/profiles.yaml\n    listen_uri: 127.0.0.1:{port}\n{tls_lines}\
                 prometheus:\n  enabled: false\n"
            ),
        )
        .expect("the LAPI configuration");
        let creds = root.join("creds.yaml");
        let creds = creds.to_str().expect("a UTF-8 path");
        cscli(
            &config,
            &["machines", "add", "test", "--auto", "--force", "-f", creds],
        );
        // cscli writes an http:// URL; it reaches an HTTPS LAPI only so.
        let written = std::fs::read_to_string(creds).expect("the credentials");
        let url = format!("{scheme}://127.0.0.1:{port}");
        let written = match transport {
            // A password and a certificate are mutually exclusive.
            Transport::HttpsClientCerts => format!(
                "url: {url}\nca_cert_path: {r}/ca.pem\ncert_path: {r}/cscli.pem\nkey_path: {r}/cscli.key\n"
            ),
            _ => written.replace(&format!("http://127.0.0.1:{port}"), &url),
        };
        std::fs::write(creds, written).expect("the credentials");
        let child = serve(&config, root);
        let lapi = Self {
            child,
            config,
            url,
            dir,
        };
        lapi.wait_listening();
        lapi
    }

    fn wait_listening(&self) {
        let address = self
            .url
            .split_once("://")
            .map_or("", |(_, address)| address);
        wait_for("the LAPI to listen", || {
            std::net::TcpStream::connect(address).is_ok()
        });
    }

    /// Kills the LAPI (by PID) and starts it again on the same port and
    /// database once `while_down` has run.
    fn restart_after(&mut self, while_down: impl FnOnce()) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        while_down();
        self.child = serve(&self.config, self.dir.path());
        self.wait_listening();
    }

    /// Runs cscli against this LAPI; its standard output.
    fn cscli(&self, args: &[&str]) -> String {
        cscli(&self.config, args)
    }

    /// A new bouncer's key, written to a file; the file.
    fn bouncer_key_file(&self, name: &str) -> PathBuf {
        let key = self.cscli(&["bouncers", "add", name, "-o", "raw"]);
        let file = self.dir.path().join(format!("{name}.key"));
        std::fs::write(&file, key).expect("writing the key");
        file
    }

    /// An agent configuration following this LAPI with `key_file`, its
    /// metrics on `metrics_port` (0: none).
    fn agent_config(&self, key_file: &Path, metrics_port: u16) -> String {
        let listen = match metrics_port {
            0 => String::new(),
            port => format!("127.0.0.1:{port}"),
        };
        format!(
            "[metrics]\nlisten = \"{listen}\"\n\n[crowdsec]\nurl = \"{}\"\napi_key_file = \"{}\"\npull = \"1s\"\n",
            self.url,
            key_file.display()
        )
    }
}

impl Drop for Lapi {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn decisions_added_deleted_and_expiring_reach_the_traffic() {
    let lapi = Lapi::start();
    let (network, cfctl) = attached(150, "crowdsec-basic", "1000", "skb");
    let key = lapi.bouncer_key_file("basic");
    let port = free_port();
    let agent = Agent::start(&cfctl, &lapi.agent_config(&key, port));
    let (v4, v6) = (network.v4(3).to_string(), network.v6(3).to_string());
    lapi.cscli(&["decisions", "add", "--ip", &v6, "--duration", "1h"]);
    lapi.cscli(&["decisions", "add", "--range", &format!("{v4}/32")]);
    // The same address twice: one entry, which stays while either lasts.
    lapi.cscli(&["decisions", "add", "--ip", &v6, "--duration", "2h"]);
    wait_for("both decisions listed", || {
        listed(&cfctl, &v4) && listed(&cfctl, &v6)
    });
    check_traffic(&network, true);
    let entries = cfctl.json(&["list", "--source", "crowdsec"]);
    assert_eq!(
        entries.as_array().map(Vec::len),
        Some(2),
        "one entry per network: {entries}"
    );

    lapi.cscli(&["decisions", "delete", "--ip", &v6]);
    lapi.cscli(&["decisions", "delete", "--range", &format!("{v4}/32")]);
    wait_for("both decisions gone", || {
        !listed(&cfctl, &v4) && !listed(&cfctl, &v6)
    });
    check_traffic(&network, false);

    let short = network.v4(9).to_string();
    lapi.cscli(&["decisions", "add", "--ip", &short, "--duration", "3s"]);
    wait_for("the short decision listed", || listed(&cfctl, &short));
    wait_for("the short decision expired", || !listed(&cfctl, &short));

    // Status and metrics count the decisions by origin.
    let status = cfctl.json(&["status"]);
    let crowdsec = &status["crowdsec"];
    assert_eq!(crowdsec["url"], lapi.url.as_str(), "{status}");
    assert_eq!(crowdsec["last_error"], serde_json::Value::Null);
    assert!(
        crowdsec["origins"]["cscli"]["applied"].as_u64() >= Some(3),
        "{status}"
    );
    let samples = scrape(port);
    let decisions = |result: &str| {
        sample(
            &samples,
            &format!("cfctl_crowdsec_decisions_total{{origin=\"cscli\",result=\"{result}\"}}"),
        )
    };
    assert!(decisions("applied") >= Some(3.0), "{samples:?}");
    assert_eq!(sample(&samples, "cfctl_crowdsec_up"), Some(1.0));
    // The LAPI takes the bouncer's type and version from its User-Agent.
    let bouncers: serde_json::Value =
        serde_json::from_str(&lapi.cscli(&["bouncers", "list", "-o", "json"])).expect("JSON");
    let bouncer = bouncers
        .as_array()
        .and_then(|bouncers| bouncers.iter().find(|bouncer| bouncer["name"] == "basic"))
        .unwrap_or_else(|| panic!("the bouncer in {bouncers}"));
    assert_eq!(bouncer["type"], "crowdsec-cfctl-bouncer", "{bouncer}");
    assert_eq!(
        bouncer["version"],
        format!("v{}", env!("CARGO_PKG_VERSION")).as_str(),
        "{bouncer}"
    );
    assert!(
        !agent.log().contains("ERROR"),
        "the agent logged an error:\n{}",
        agent.log()
    );
    // This LAPI (CrowdSec 1.4) predates the usage-metrics endpoint: the
    // push when the agent stops (once it has attributed drops) is one
    // warning, and the agent ends cleanly.
    let banned = network.v4(11);
    lapi.cscli(&["decisions", "add", "--ip", &banned.to_string()]);
    wait_for("the decision listed", || {
        listed(&cfctl, &banned.to_string())
    });
    let frame = common::udp_frame(banned, common::Tags::None);
    let series = "cfctl_dropped_packets_total{ip_type=\"ipv4\",origin=\"crowdsec\"}";
    wait_for("the drops of a listed address attributed", || {
        network.send_frames(std::slice::from_ref(&frame));
        std::thread::sleep(std::time::Duration::from_millis(200));
        sample(&scrape(port), series).is_some()
    });
    let (status, log) = agent.terminate_with_log();
    assert!(status.success(), "{log}");
    let warnings: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("no usage-metrics endpoint"))
        .collect();
    assert_eq!(warnings.len(), 1, "{log}");
    assert!(warnings[0].contains("WARN"), "{log}");
}

/// When the crowdsec source's listing of `address`'s /32 or /128 ends,
/// Unix seconds (none: not listed).
fn crowdsec_expiry(cfctl: &common::cli::Cfctl, address: &str) -> Option<u64> {
    cfctl.listing_expiry("crowdsec", address).flatten()
}

#[test]
fn a_decision_added_again_for_longer_extends_the_entry_and_a_shorter_one_does_not_cut_it() {
    let lapi = Lapi::start();
    let (network, cfctl) = attached(184, "crowdsec-extend", "1000", "skb");
    let key = lapi.bouncer_key_file("extend");
    let agent = Agent::start(&cfctl, &lapi.agent_config(&key, 0));
    let address = network.v4(3).to_string();
    lapi.cscli(&["decisions", "add", "--ip", &address, "--duration", "2m"]);
    wait_for("the decision listed", || listed(&cfctl, &address));
    let first = crowdsec_expiry(&cfctl, &address).expect("an expiry");

    // The same address banned again for ten hours: the entry lasts that
    // long, not two minutes.
    lapi.cscli(&["decisions", "add", "--ip", &address, "--duration", "10h"]);
    wait_for("the expiry extended", || {
        crowdsec_expiry(&cfctl, &address).is_some_and(|expiry| expiry >= first + 9 * 3600)
    });
    let extended = crowdsec_expiry(&cfctl, &address).expect("an expiry");

    // A shorter ban added later changes nothing: a marker decision added
    // after it shows that the agent has taken both.
    lapi.cscli(&["decisions", "add", "--ip", &address, "--duration", "1m"]);
    let marker = network.v4(4).to_string();
    lapi.cscli(&["decisions", "add", "--ip", &marker, "--duration", "1h"]);
    wait_for("the marker listed", || listed(&cfctl, &marker));
    assert_eq!(crowdsec_expiry(&cfctl, &address), Some(extended));
    assert!(
        !agent.log().contains("ERROR"),
        "the agent logged an error:\n{}",
        agent.log()
    );
}

#[test]
fn a_lapi_outage_and_an_agent_killed_lose_nothing() {
    let mut lapi = Lapi::start();
    let (network, cfctl) = attached(151, "crowdsec-outage", "1000", "skb");
    let key = lapi.bouncer_key_file("outage");
    let config = lapi.agent_config(&key, 0);
    let agent = Agent::start(&cfctl, &config);
    let (v4, v6) = (network.v4(3).to_string(), network.v6(3).to_string());
    lapi.cscli(&["decisions", "add", "--ip", &v4]);
    wait_for("the first decision", || listed(&cfctl, &v4));

    // The LAPI goes away: the agent keeps enforcing and says so, once.
    lapi.restart_after(|| {
        wait_for("the agent to notice", || {
            agent.log().contains("CrowdSec pull failed")
        });
        std::thread::sleep(std::time::Duration::from_secs(3));
        assert!(
            listed(&cfctl, &v4),
            "the entry stays while the LAPI is down"
        );
        assert_eq!(
            agent.log().matches("CrowdSec pull failed").count(),
            1,
            "one line per outage:\n{}",
            agent.log()
        );
    });
    lapi.cscli(&["decisions", "add", "--ip", &v6]);
    wait_for("the decision added after the outage", || {
        listed(&cfctl, &v6)
    });
    assert!(agent.log().contains("the CrowdSec LAPI answers again"));
    check_traffic(&network, true);

    // The agent dies without warning; meanwhile one decision goes and one
    // comes. A new agent converges: nothing stale, nothing twice.
    drop(agent);
    let other = network.v4(9).to_string();
    lapi.cscli(&["decisions", "delete", "--ip", &v6]);
    lapi.cscli(&["decisions", "add", "--ip", &other]);
    let _agent = Agent::start(&cfctl, &config);
    wait_for("the new agent to converge", || {
        listed(&cfctl, &other) && !listed(&cfctl, &v6)
    });
    let entries = cfctl.json(&["list", "--source", "crowdsec"]);
    assert_eq!(entries.as_array().map(Vec::len), Some(2), "{entries}");
}

/// A stream answer with these decisions as new: (scope, value).
fn stream(new: &[(&str, &str)]) -> String {
    let decisions: Vec<serde_json::Value> = new
        .iter()
        .enumerate()
        .map(|(id, (scope, value))| {
            serde_json::json!({"id": id + 1, "scope": scope, "value": value, "type": "ban",
                "duration": "59m59.5s", "origin": "test", "scenario": "fake"})
        })
        .collect();
    serde_json::json!({"new": decisions, "deleted": null}).to_string()
}

/// A stream answer with these decisions as new: (value, origin,
/// scenario), each an `Ip` ban of an hour.
fn stream_from(new: &[(&str, &str, &str)]) -> String {
    let decisions: Vec<serde_json::Value> = new
        .iter()
        .enumerate()
        .map(|(id, (value, origin, scenario))| {
            serde_json::json!({"id": id + 1, "scope": "Ip", "value": value, "type": "ban",
                "duration": "59m59.5s", "origin": origin, "scenario": scenario})
        })
        .collect();
    serde_json::json!({"new": decisions, "deleted": null}).to_string()
}

/// An agent configuration following the fake LAPI `lapi` every second,
/// with `extra` settings for it, and the directory of its key file.
fn fake_lapi_config(lapi: &FeedServer, extra: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("a directory for the key");
    let key = dir.path().join("key");
    std::fs::write(&key, "not-a-secret\n").expect("writing the key");
    let config = format!(
        "[metrics]\nlisten = \"\"\n\n[crowdsec]\nurl = \"http://{}\"\napi_key_file = \"{}\"\npull = \"1s\"\n{extra}",
        lapi.address,
        key.display()
    );
    (dir, config)
}

/// A decision the LAPI's stream cursor skipped (its whole list has it, no
/// answer of changes ever does) is listed at the next resync, and one the
/// whole list no longer has is withdrawn: the resync asks for the whole
/// list and applies the difference.
#[test]
fn a_resync_brings_back_what_the_changes_missed() {
    let cfctl = common::cli::Cfctl::new("crowdsec-resync");
    let (first, missed) = ("198.18.167.3", "198.18.167.4");
    let lapi = FeedServer::start(Answer::Stream {
        whole: stream(&[("Ip", first)]),
        changes: stream(&[]),
    });
    let (_key, config) = fake_lapi_config(&lapi, "resync = \"10s\"\n");
    let _agent = Agent::start(&cfctl, &config);
    wait_for("the first decision", || listed(&cfctl, first));
    lapi.set(Answer::Stream {
        whole: stream(&[("Ip", first), ("Ip", missed)]),
        changes: stream(&[]),
    });
    wait_for("the missed decision at a resync", || listed(&cfctl, missed));
    lapi.set(Answer::Stream {
        whole: stream(&[("Ip", missed)]),
        changes: stream(&[]),
    });
    wait_for("the withdrawn decision at a resync", || {
        !listed(&cfctl, first)
    });
    assert_eq!(crowdsec_nets(&cfctl), [format!("{missed}/32")]);
    let status = cfctl.json(&["status"]);
    assert!(
        status["crowdsec"]["last_resync"].as_u64() > Some(0),
        "{status}"
    );
}

/// A pull that changes nothing opens the store once: the agent pulls
/// first and then applies the answer and records the pull in one visit
/// (it used to open the store four times a pull, flushing the disk at
/// each opening and closing).
#[test]
fn a_pull_that_changes_nothing_opens_the_store_once() {
    let cfctl = common::cli::Cfctl::new("crowdsec-quiet");
    cfctl.ok(&["add", "198.18.160.1"]);
    let lapi = FeedServer::start(Answer::List(stream(&[])));
    let (_key, config) = fake_lapi_config(&lapi, "");
    let _agent = Agent::start(&cfctl, &config);
    let pulls = || lapi.requests.lock().expect("the requests").len();
    wait_for("the first pull", || pulls() >= 1);
    // Closings watched too: inotify merges an event into an unread one
    // just like it, so only opens and closes in turn count every opening.
    let mut watch = inotify::Inotify::init().expect("inotify");
    watch
        .watches()
        .add(
            cfctl.state_dir(),
            inotify::WatchMask::OPEN | inotify::WatchMask::CLOSE,
        )
        .expect("watching the state directory");
    let first = pulls();
    wait_for("four more pulls", || pulls() >= first + 4);
    let mut buffer = [0; 4096];
    let opens = watch.read_events(&mut buffer).map_or(0, |events| {
        events
            .filter(|event| {
                event.mask.contains(inotify::EventMask::OPEN)
                    && event.name == Some(std::ffi::OsStr::new(cfctl::store::Store::FILE_NAME))
            })
            .count()
    });
    let pulled = pulls() - first;
    // One more pass may have begun between the two counts.
    assert!(
        opens <= pulled + 1,
        "{opens} openings of the store for {pulled} pulls"
    );
}

#[test]
fn bad_answers_are_one_log_line_and_change_nothing() {
    let (network, cfctl) = attached(152, "crowdsec-bad", "1000", "skb");
    let (v4, v6, other) = (
        network.v4(3).to_string(),
        network.v6(3).to_string(),
        network.v4(9).to_string(),
    );
    let lapi = FeedServer::start(Answer::List(stream(&[("Ip", &v4)])));
    let max_bytes = 4096;
    let (_key, config) = fake_lapi_config(&lapi, &format!("max_bytes = {max_bytes}\n"));
    let agent = Agent::start(&cfctl, &config);
    wait_for("the first decision", || listed(&cfctl, &v4));
    let entries = || cfctl.ok(&["list", "--source", "crowdsec"]);
    let before = entries();

    let padded = format!("{}{}", stream(&[("Ip", &other)]), " ".repeat(max_bytes));
    for (answer, logged) in [
        (
            Answer::List("{\"new\": [".to_owned()),
            "is not a decision stream",
        ),
        (Answer::List(padded), "larger than max_bytes (4096 bytes)"),
        (Answer::Status(403), "refused the API key (403 Forbidden)"),
    ] {
        lapi.set(answer);
        wait_for(logged, || agent.log().contains(logged));
        assert_eq!(entries(), before, "after {logged}");
        assert!(!listed(&cfctl, &other));
    }

    // Decisions the agent does not follow are logged once and skipped;
    // the rest of the answer is taken.
    lapi.set(Answer::List(stream(&[
        ("Country", "FR"),
        ("Ip", "not-an-address"),
        ("Range", "198.18.0.0/33"),
        ("Ip", &v6),
    ])));
    wait_for("the good decision of a mixed answer", || {
        listed(&cfctl, &v6)
    });
    std::thread::sleep(std::time::Duration::from_secs(2));
    let log = agent.log();
    for reason in [
        "scope 'Country' not followed",
        "Ip value 'not-an-address' is not an address",
        "Range value '198.18.0.0/33' is not an address/prefix network",
    ] {
        assert_eq!(log.matches(reason).count(), 1, "{reason}:\n{log}");
    }
    assert!(
        !listed(&cfctl, &v4),
        "the whole list after a failed pull replaces the old one"
    );
}

#[test]
fn a_lapi_no_longer_followed_takes_its_decisions_with_it() {
    let (network, cfctl) = attached(146, "crowdsec-gone", "1000", "skb");
    let (v4, other) = (network.v4(3).to_string(), network.v4(4).to_string());
    let lapi = FeedServer::start(Answer::List(stream(&[("Ip", &v4)])));
    let (_key, following) = fake_lapi_config(&lapi, "");
    let agent = Agent::start(&cfctl, &following);
    wait_for("the decision", || listed(&cfctl, &v4));
    cfctl.ok(&["add", &other]);

    agent.reload("[metrics]\nlisten = \"\"\n");
    wait_for("the decision withdrawn", || !listed(&cfctl, &v4));
    assert!(crowdsec_nets(&cfctl).is_empty());
    assert!(listed(&cfctl, &other), "the command line's entry stays");
    assert!(agent.log().contains("source no longer configured"));

    // Followed again, the LAPI is asked for its whole list: it moved this
    // bouncer past the decisions withdrawn.
    lapi.requests.lock().expect("the requests").clear();
    agent.reload(&following);
    wait_for("the decision back", || listed(&cfctl, &v4));
    let requests = lapi.requests.lock().expect("the requests").clone();
    assert!(
        requests
            .first()
            .is_some_and(|url| url.contains("startup=true")),
        "{requests:?}"
    );
}

/// The networks `cfctl` lists for source crowdsec, sorted.
fn crowdsec_nets(cfctl: &common::cli::Cfctl) -> Vec<String> {
    let entries = cfctl.json(&["list", "--source", "crowdsec"]);
    let mut nets: Vec<String> = entries
        .as_array()
        .expect("a list of entries")
        .iter()
        .map(|entry| entry["net"].as_str().expect("a network").to_owned())
        .collect();
    nets.sort();
    nets
}

#[test]
fn three_agents_follow_one_lapi_to_the_same_list() {
    let lapi = Lapi::start();
    let hosts: Vec<_> = (153..156)
        .map(|subnet| attached(subnet, &format!("crowdsec-fleet{subnet}"), "1000", "skb"))
        .collect();
    let _agents: Vec<Agent> = hosts
        .iter()
        .enumerate()
        .map(|(index, (_, cfctl))| {
            let key = lapi.bouncer_key_file(&format!("fleet{index}"));
            Agent::start(cfctl, &lapi.agent_config(&key, 0))
        })
        .collect();
    let mut expected = Vec::new();
    for (network, _) in &hosts {
        for address in [network.v4(3), network.v6(3)] {
            lapi.cscli(&["decisions", "add", "--ip", &address.to_string()]);
            expected.push(ipnet::IpNet::from(address).to_string());
        }
    }
    lapi.cscli(&["decisions", "add", "--range", "198.19.250.0/24"]);
    lapi.cscli(&["decisions", "add", "--ip", "198.19.251.1"]);
    lapi.cscli(&["decisions", "delete", "--ip", "198.19.251.1"]);
    expected.push("198.19.250.0/24".to_owned());
    expected.sort();
    for (network, cfctl) in &hosts {
        wait_for("every agent to converge", || {
            crowdsec_nets(cfctl) == expected
        });
        check_traffic(network, true);
    }
}

#[test]
fn an_https_lapi_is_trusted_through_ca_file_only() {
    let lapi = Lapi::start_with(Transport::Https);
    let (_network, cfctl) = attached(156, "crowdsec-tls", "1000", "skb");
    let key = lapi.bouncer_key_file("tls");
    let without_ca = lapi.agent_config(&key, 0);
    let agent = Agent::start(&cfctl, &without_ca);
    lapi.cscli(&["decisions", "add", "--ip", "198.19.252.1"]);
    wait_for("an untrusted certificate refused", || {
        agent.log().contains("CrowdSec pull failed")
    });
    assert!(!listed(&cfctl, "198.19.252.1"));
    let ca = lapi.dir.path().join("ca.pem");
    agent.reload(&format!("{without_ca}ca_file = \"{}\"\n", ca.display()));
    wait_for("the decision over HTTPS", || listed(&cfctl, "198.19.252.1"));
}

#[test]
fn a_lapi_requiring_client_certificates_serves_the_agent_with_one_only() {
    let lapi = Lapi::start_with(Transport::HttpsClientCerts);
    let (_network, cfctl) = attached(158, "crowdsec-mtls", "1000", "skb");
    let dir = lapi.dir.path();
    // An API key alone does not pass the handshake.
    let key = lapi.bouncer_key_file("mtls");
    let with_key = format!(
        "{}ca_file = \"{}\"\n",
        lapi.agent_config(&key, 0),
        dir.join("ca.pem").display()
    );
    let agent = Agent::start(&cfctl, &with_key);
    lapi.cscli(&["decisions", "add", "--ip", "198.19.252.2"]);
    wait_for("the agent without a certificate refused", || {
        agent.log().contains("CrowdSec pull failed")
    });
    assert!(!listed(&cfctl, "198.19.252.2"));
    // The certificate alone, without an API key, does.
    let with_certificate = with_key
        .lines()
        .filter(|line| !line.starts_with("api_key_file"))
        .chain([
            format!("cert_file = \"{}\"", dir.join("bouncer.pem").display()).as_str(),
            format!("key_file = \"{}\"", dir.join("bouncer.key").display()).as_str(),
        ])
        .collect::<Vec<_>>()
        .join("\n");
    agent.reload(&format!("{with_certificate}\n"));
    wait_for("the decision over mutual TLS", || {
        listed(&cfctl, "198.19.252.2")
    });
}

/// Entries source `crowdsec` lists, from `cfctl status`.
fn crowdsec_entries(cfctl: &common::cli::Cfctl) -> u64 {
    let status = cfctl.json(&["status"]);
    status["sources"]
        .as_array()
        .and_then(|sources| sources.iter().find(|source| source["source"] == "crowdsec"))
        .and_then(|source| source["entries"].as_u64())
        .unwrap_or(0)
}

/// Not a test: 10^5 decisions imported into the LAPI (`cscli decisions
/// import`) while an agent runs (`pull = "1s"`, `resync = "60s"`), then
/// all of them deleted (`cscli decisions delete --all`). Prints how long
/// after cscli returned the agent listed every decision (the LAPI's
/// stream cursor can skip some during a bulk import; the resync brings
/// them back), and how long after the delete the source was empty, with
/// what the agent logged for each pull (its pull and apply seconds). Run
/// it alone: `flock /tmp/cfxdp-kernel.lock cargo test -p cfctl --release
/// --test crowdsec -- --ignored --nocapture bulk_decisions`.
#[test]
#[ignore = "a benchmark; prints its numbers"]
fn bulk_decisions_with_an_agent_running() {
    use std::time::{Duration, Instant};
    const DECISIONS: u32 = 100_000;
    let lapi = Lapi::start();
    let (_network, cfctl) = attached(157, "crowdsec-bench", "262144", "skb");
    let mut csv = String::from("duration,scope,value\n");
    let base = u32::from(std::net::Ipv4Addr::new(198, 18, 0, 0));
    for index in 0..DECISIONS {
        csv.push_str(&format!(
            "24h,ip,{}\n",
            std::net::Ipv4Addr::from(base + index)
        ));
    }
    let file = lapi.dir.path().join("decisions.csv");
    std::fs::write(&file, csv).expect("writing the decisions");
    let key = lapi.bouncer_key_file("bench");
    let config = lapi.agent_config(&key, 0) + "resync = \"60s\"\n";
    let agent = Agent::start(&cfctl, &config);
    wait_for("the agent's first pull", || {
        agent.log().contains("CrowdSec decisions applied")
    });
    let started = Instant::now();
    lapi.cscli(&[
        "decisions",
        "import",
        "-i",
        file.to_str().expect("a UTF-8 path"),
    ]);
    let imported = Instant::now();
    eprintln!(
        "cscli decisions import of {DECISIONS}: {:.1} s",
        (imported - started).as_secs_f64()
    );
    let mut short_of_all = u64::from(DECISIONS);
    while crowdsec_entries(&cfctl) < u64::from(DECISIONS) {
        assert!(
            imported.elapsed() < Duration::from_secs(180),
            "not every decision listed 3 minutes after the import"
        );
        if imported.elapsed() < Duration::from_secs(5) {
            short_of_all = u64::from(DECISIONS) - crowdsec_entries(&cfctl);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "every decision listed {:.1} s after cscli returned ({short_of_all} missing 5 s after it)",
        imported.elapsed().as_secs_f64()
    );
    lapi.cscli(&["decisions", "delete", "--all"]);
    let deleted = Instant::now();
    while crowdsec_entries(&cfctl) > 0 {
        assert!(
            deleted.elapsed() < Duration::from_secs(180),
            "decisions still listed 3 minutes after the delete"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "every decision withdrawn {:.2} s after cscli returned",
        deleted.elapsed().as_secs_f64()
    );
    for line in agent
        .log()
        .lines()
        .filter(|line| line.contains("CrowdSec decisions applied"))
        .filter(|line| !line.contains("added=0 deleted=0"))
    {
        eprintln!("{line}");
    }
}

/// Elements of nftables set `set` of table `table` (family `family`) in
/// the calling thread's network namespace; 0 before the set exists.
fn nft_set_elements(family: &str, table: &str, set: &str) -> usize {
    let output = Command::new("nft")
        .args(["-j", "list", "set", family, table, set])
        .output()
        .expect("running nft (./x bench-agent installs it)");
    if !output.status.success() {
        return 0;
    }
    let listing: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("nft's JSON listing");
    listing["nftables"]
        .as_array()
        .and_then(|objects| {
            objects
                .iter()
                .find_map(|object| object["set"]["elem"].as_array())
        })
        .map_or(0, Vec::len)
}

/// Not a test: `cfctl agent` and Debian's `crowdsec-firewall-bouncer`
/// (nftables) side by side, both started at the same instant against one
/// LAPI holding 10^5 `ip` decisions; prints how long each took from its
/// start until it enforced all of them (cfctl: source `crowdsec` lists
/// them; the bouncer: its nftables set holds them). Everything runs in
/// the test network's namespace: the LAPI on its 127.0.0.1, the bouncer's
/// tables its own. Run it alone, through `./x bench-agent`, which unpacks
/// the bouncer and installs nft.
#[test]
#[ignore = "a benchmark; prints its numbers"]
fn cfctl_and_the_firewall_bouncer_take_one_lapis_decisions() {
    use std::time::{Duration, Instant};
    const DECISIONS: usize = 100_000;
    let (network, cfctl) = attached(168, "crowdsec-side", "262144", "skb");
    let bouncer = common::unpacked_bin("crowdsec-firewall-bouncer", "crowdsec-firewall-bouncer");
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                network.enter();
                let lapi = Lapi::start();
                let mut csv = String::from("duration,scope,value\n");
                let base = u32::from(std::net::Ipv4Addr::new(198, 18, 0, 0));
                for index in 0..DECISIONS as u32 {
                    csv.push_str(&format!("24h,ip,{}\n", std::net::Ipv4Addr::from(base + index)));
                }
                let file = lapi.dir.path().join("decisions.csv");
                std::fs::write(&file, csv).expect("writing the decisions");
                lapi.cscli(&["decisions", "import", "-i", file.to_str().expect("a UTF-8 path")]);
                let agent_key = lapi.bouncer_key_file("cfctl");
                let bouncer_key = lapi.bouncer_key_file("firewall");
                let dir = lapi.dir.path().display();
                let bouncer_config = lapi.dir.path().join("firewall-bouncer.yaml");
                std::fs::write(
                    &bouncer_config,
                    format!(
                        "mode: nftables\npid_dir: {dir}\nupdate_frequency: 1s\ndaemonize: false\n\
                         log_mode: file\nlog_dir: {dir}\nlog_level: info\n\
                         api_url: {}/\napi_key: {}\ndisable_ipv6: false\ndeny_action: DROP\n\
                         deny_log: false\nsupported_decisions_types:\n  - ban\n\
                         nftables:\n  ipv4:\n    enabled: true\n    set-only: false\n    table: crowdsec\n    chain: crowdsec-chain\n\
                         \x20 ipv6:\n    enabled: true\n    set-only: false\n    table: crowdsec6\n    chain: crowdsec6-chain\n\
                         prometheus:\n  enabled: false\n",
                        lapi.url,
                        std::fs::read_to_string(&bouncer_key).expect("the key").trim()
                    ),
                )
                .expect("the bouncer's configuration");
                let started = Instant::now();
                let agent = Agent::start(&cfctl, &lapi.agent_config(&agent_key, 0));
                let mut firewall = Command::new(&bouncer)
                    .arg("-c")
                    .arg(&bouncer_config)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("starting the firewall bouncer");
                let (mut cfctl_done, mut firewall_done) = (None, None);
                while cfctl_done.is_none() || firewall_done.is_none() {
                    assert!(
                        started.elapsed() < Duration::from_secs(1200),
                        "not done after 20 minutes: cfctl {cfctl_done:?}, the bouncer {firewall_done:?}"
                    );
                    if cfctl_done.is_none() && crowdsec_entries(&cfctl) == DECISIONS as u64 {
                        cfctl_done = Some(started.elapsed());
                    }
                    if firewall_done.is_none()
                        && nft_set_elements("ip", "crowdsec", "crowdsec-blacklists") >= DECISIONS
                    {
                        firewall_done = Some(started.elapsed());
                    }
                    std::thread::sleep(Duration::from_millis(500));
                }
                let _ = firewall.kill();
                let _ = firewall.wait();
                drop(agent);
                for (tool, took) in [("cfctl agent", cfctl_done), ("crowdsec-firewall-bouncer", firewall_done)] {
                    let seconds = took.expect("a time").as_secs_f64();
                    eprintln!(
                        "{tool}: {DECISIONS} decisions enforced {seconds:.1} s after its start ({:.0} decisions/s)",
                        DECISIONS as f64 / seconds
                    );
                }
            })
            .join()
            .expect("the benchmark's thread");
    });
}

/// Not a test: ban-to-drop latency with `pull = "1s"`, beside a feed that
/// trickles one byte a second. Each repetition
/// waits a different part of the pull interval (so the bans fall evenly
/// over its phases, rather than each just after the pull that ended the
/// last one), adds one `--ip` decision with cscli, then runs the pinned
/// program on a frame from that address (BPF_PROG_TEST_RUN, every
/// millisecond) until it drops; prints the time from cscli's return to
/// the first drop, and the median and maximum of the repetitions. Run it alone:
/// `flock /tmp/cfxdp-kernel.lock cargo test -p cfctl --release --test
/// crowdsec -- --ignored --nocapture ban_to_drop`.
#[test]
#[ignore = "a benchmark; prints its numbers"]
fn ban_to_drop_latency() {
    use cfctl::xdp::test_run::XdpAction;
    use std::time::{Duration, Instant};
    const REPETITIONS: u8 = 15;
    let lapi = Lapi::start();
    let (_network, cfctl) = attached(159, "crowdsec-latency", "1000", "skb");
    let key = lapi.bouncer_key_file("latency");
    // A feed beside it that sends one byte a second, never done within
    // the run.
    let slow = FeedServer::start(Answer::Trickle(
        "198.18.159.200\n".repeat(100),
        Duration::from_secs(1),
    ));
    let config = format!(
        "{}\n[[feed]]\nname = \"slow\"\nurl = \"{}\"\nrefresh = \"1s\"\ntimeout = \"3600s\"\n",
        lapi.agent_config(&key, 0),
        slow.url()
    );
    let agent = Agent::start(&cfctl, &config);
    wait_for("the agent's first pull", || {
        agent.log().contains("CrowdSec decisions applied")
    });
    let verdict = cfctl.pinned_verdict();
    let drops = |source: std::net::IpAddr| verdict(source) == XdpAction::Drop;
    let mut latencies = Vec::new();
    for repetition in 1..=REPETITIONS {
        let address = std::net::Ipv4Addr::new(198, 19, 253, repetition);
        assert!(!drops(address.into()), "{address} dropped before its ban");
        std::thread::sleep(Duration::from_millis(
            u64::from(repetition) * 1000 / u64::from(REPETITIONS),
        ));
        lapi.cscli(&["decisions", "add", "--ip", &address.to_string()]);
        let banned = Instant::now();
        while !drops(address.into()) {
            assert!(
                banned.elapsed() < Duration::from_secs(30),
                "{address} not dropped 30 s after its ban"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let latency = banned.elapsed().as_secs_f64();
        eprintln!(
            "ban {repetition}: dropped {:.0} ms after cscli returned",
            latency * 1e3
        );
        latencies.push(latency);
    }
    assert!(
        slow.trickling.load(std::sync::atomic::Ordering::SeqCst),
        "the slow feed was still being fetched"
    );
    latencies.sort_by(f64::total_cmp);
    eprintln!(
        "ban to drop, pull = 1s, a feed trickling beside it, {REPETITIONS} bans: median {:.0} ms, min {:.0} ms, max {:.0} ms",
        latencies[latencies.len() / 2] * 1e3,
        latencies[0] * 1e3,
        latencies[latencies.len() - 1] * 1e3
    );
}

/// The value of the item `name` in `unit` with exactly `labels` in a
/// usage-metrics document.
fn usage_item(
    document: &serde_json::Value,
    name: &str,
    unit: &str,
    labels: serde_json::Value,
) -> Option<u64> {
    document["remediation_components"][0]["metrics"][0]["items"]
        .as_array()?
        .iter()
        .find(|item| item["name"] == name && item["unit"] == unit && item["labels"] == labels)
        .and_then(|item| item["value"].as_u64())
}

/// When the agent stops, it pushes the usage metrics of its window to the
/// LAPI: the drops by the origin of the decision that speaks for each
/// address (`lists:NAME` for a blocklist's), exact when every drop is
/// sampled, the drops of other sources under their names, every packet
/// processed, and the active decisions by origin and family, in the
/// document the LAPI's schema requires (one remediation component; the
/// required fields of each part).
#[test]
fn usage_metrics_count_the_drops_by_the_decisions_origins() {
    let (network, cfctl) = attached(186, "crowdsec-usage", "4096", "skb");
    let host = |n: u8| network.v4(n).to_string();
    let (capi, cscli, list, warm, marker) = (host(3), host(4), host(5), host(6), host(7));
    let v6 = network.v6(3).to_string();
    cfctl.ok(&["add", &warm]);
    cfctl.ok(&["add", &marker, "--source", "marker"]);
    let lapi = FeedServer::start(Answer::Stream {
        whole: stream_from(&[
            (&capi, "CAPI", "crowdsecurity/ssh-bf"),
            (&cscli, "cscli", "manual"),
            (&list, "lists", "firehol_test"),
            (&v6, "cscli", "manual"),
        ]),
        changes: stream_from(&[]),
    });
    let port = free_port();
    let (_key, config) = fake_lapi_config(&lapi, "");
    let config = config.replace("listen = \"\"", &format!("listen = \"127.0.0.1:{port}\""));
    let started = std::time::SystemTime::now();
    let agent = Agent::start(&cfctl, &config);
    wait_for("the decisions listed", || {
        [&capi, &cscli, &list, &v6]
            .iter()
            .all(|address| listed(&cfctl, address))
    });
    let frames = |address: &str, count: usize| {
        let frame = common::udp_frame(address.parse().expect("an address"), common::Tags::None);
        vec![frame; count]
    };
    let frame_len = frames(&capi, 1)[0].len() as u64;
    let dropped = |origin: &str| {
        sample(
            &scrape(port),
            &format!("cfctl_dropped_packets_total{{ip_type=\"ipv4\",origin=\"{origin}\"}}"),
        )
    };
    // Drops before the agent's first attribution are not shared out.
    wait_for("the agent's first attribution", || {
        network.send_frames(&frames(&warm, 1));
        std::thread::sleep(std::time::Duration::from_millis(200));
        dropped("cli").is_some()
    });
    for (address, count) in [(&capi, 10), (&cscli, 30), (&list, 20), (&marker, 1)] {
        network.send_frames(&frames(address, count));
    }
    wait_for("the frames attributed", || dropped("marker").is_some());
    assert!(agent.terminate().success());

    let posts = lapi.posts.lock().expect("the posts").clone();
    assert_eq!(posts.len(), 1, "one push, at the stop: {posts:?}");
    let post = &posts[0];
    assert_eq!(post.url, "/v1/usage-metrics");
    for header in [
        "X-Api-Key: not-a-secret".to_owned(),
        "Content-Type: application/json".to_owned(),
        format!(
            "User-Agent: crowdsec-cfctl-bouncer/v{}",
            env!("CARGO_PKG_VERSION")
        ),
    ] {
        assert!(
            post.headers
                .iter()
                .any(|sent| sent.eq_ignore_ascii_case(&header)),
            "{header} in {:?}",
            post.headers
        );
    }
    let document: serde_json::Value = serde_json::from_str(&post.body).expect("JSON");
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/usage-metrics.schema.json"),
        )
        .expect("the schema"),
    )
    .expect("the schema's JSON");
    let validator = jsonschema::validator_for(&schema).expect("a valid schema");
    let errors: Vec<String> = validator
        .iter_errors(&document)
        .map(|error| error.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:?} in {document}");
    let component = &document["remediation_components"][0];
    assert_eq!(component["type"], "crowdsec-cfctl-bouncer", "{document}");
    let since = |at: &serde_json::Value| {
        at.as_u64().expect("a timestamp") as i64
            - started
                .duration_since(std::time::UNIX_EPOCH)
                .expect("after 1970")
                .as_secs() as i64
    };
    assert!(
        (-1..=1).contains(&since(&component["utc_startup_timestamp"])),
        "{document}"
    );
    let meta = &component["metrics"][0]["meta"];
    let window = meta["window_size_seconds"].as_i64().expect("a window");
    assert!(
        window >= 0 && window <= since(&meta["utc_now_timestamp"]) + 1,
        "{document}"
    );

    let v4 = |origin: &str| serde_json::json!({"origin": origin, "ip_type": "ipv4"});
    for (origin, packets) in [
        ("CAPI", 10),
        ("cscli", 30),
        ("lists:firehol_test", 20),
        ("marker", 1),
    ] {
        assert_eq!(
            usage_item(&document, "dropped", "packet", v4(origin)),
            Some(packets),
            "{origin}: {document}"
        );
        assert_eq!(
            usage_item(&document, "dropped", "byte", v4(origin)),
            Some(packets * frame_len),
            "{origin}: {document}"
        );
    }
    assert!(usage_item(&document, "dropped", "packet", v4("cli")) >= Some(1));
    let processed = usage_item(
        &document,
        "processed",
        "packet",
        serde_json::json!({"ip_type": "ipv4"}),
    );
    assert!(processed >= Some(62), "{document}");
    for (origin, family) in [
        ("CAPI", "ipv4"),
        ("cscli", "ipv4"),
        ("lists:firehol_test", "ipv4"),
        ("cscli", "ipv6"),
    ] {
        let labels = serde_json::json!({"origin": origin, "ip_type": family});
        assert_eq!(
            usage_item(&document, "active_decisions", "ip", labels),
            Some(1),
            "{document}"
        );
    }
}

/// `metrics_interval = "0"` turns the push off, at the stop too.
#[test]
fn no_usage_metrics_are_pushed_when_turned_off() {
    let (network, cfctl) = attached(187, "crowdsec-no-usage", "4096", "skb");
    let (address, warm) = (network.v4(3).to_string(), network.v4(4).to_string());
    cfctl.ok(&["add", &warm]);
    let lapi = FeedServer::start(Answer::Stream {
        whole: stream_from(&[(&address, "cscli", "manual")]),
        changes: stream_from(&[]),
    });
    let port = free_port();
    let (_key, config) = fake_lapi_config(&lapi, "metrics_interval = \"0\"\n");
    let config = config.replace("listen = \"\"", &format!("listen = \"127.0.0.1:{port}\""));
    let agent = Agent::start(&cfctl, &config);
    wait_for("the decision listed", || listed(&cfctl, &address));
    // Past the first attribution, so that a push would have figures.
    let frame = common::udp_frame(warm.parse().expect("an address"), common::Tags::None);
    let series = "cfctl_dropped_packets_total{ip_type=\"ipv4\",origin=\"cli\"}";
    wait_for("the agent's drops attributed", || {
        network.send_frames(std::slice::from_ref(&frame));
        std::thread::sleep(std::time::Duration::from_millis(200));
        sample(&scrape(port), series).is_some()
    });
    assert!(agent.terminate().success());
    assert!(lapi.posts.lock().expect("the posts").is_empty());
}
