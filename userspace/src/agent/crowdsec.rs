//! Following a CrowdSec Local API (LAPI) as a bouncer: pulling
//! `GET /v1/decisions/stream` ([`pull`], network I/O outside any lock,
//! bounded in time and bytes) and turning an answer into changes of the
//! source [`SOURCE`] ([`take_answer`]), without touching the store.
//!
//! Invariants:
//! * an answer is taken whole or not at all: invalid JSON or a body over
//!   the limit changes nothing, and the next pull asks for the whole list
//!   (`startup=true`), since the LAPI has already moved this bouncer's
//!   cursor past the changes it sent;
//! * a network is listed by [`SOURCE`] exactly while at least one taken,
//!   live decision names it; its expiry is the latest of theirs and its
//!   comment names the decision that lasts longest (`origin/scenario #id`);
//!   a decision the LAPI lists as deleted ends every decision taken for
//!   its network before it ended (the LAPI lists a value as deleted, under
//!   any one of its decisions' ids, only once nothing bans it any more);
//! * a decision the agent does not follow (scope, type, origin, scenario,
//!   or a value that is no address or network) is counted as ignored and
//!   the rest of the answer is taken.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::Read;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ipnet::IpNet;
use serde::Deserialize;

use super::config::{ClientCertFiles, CrowdsecConfig};
use crate::netlist;
use crate::store::{unix_seconds, CrowdsecDecision, CrowdsecState, NewEntry};
use crate::text::{self, excerpt, MAX_COMMENT_BYTES};

/// The source the LAPI's decisions belong to.
pub const SOURCE: &str = "crowdsec";

/// The `User-Agent` the agent announces to the LAPI.
pub fn user_agent() -> String {
    format!("cfctl-xdp-bouncer/{}", env!("CARGO_PKG_VERSION"))
}

/// One decision as the LAPI sends it.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct Decision {
    /// Its id.
    pub id: u64,
    /// The address or network.
    pub value: String,
    /// `Ip`, `Range`, or a scope the agent does not follow.
    pub scope: String,
    /// `ban`, `captcha`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// The time it has left, as a Go duration (`59m59.5s`).
    pub duration: String,
    /// Where it came from.
    pub origin: String,
    /// Why.
    pub scenario: String,
}

/// One answer of `/v1/decisions/stream`.
#[derive(Debug, Default, Deserialize)]
pub struct Answer {
    /// Decisions new since the last pull (all of them, on startup).
    #[serde(default, deserialize_with = "null_is_empty")]
    pub new: Vec<Decision>,
    /// Decisions deleted or expired since the last pull.
    #[serde(default, deserialize_with = "null_is_empty")]
    pub deleted: Vec<Decision>,
}

fn null_is_empty<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<Decision>, D::Error> {
    Ok(Option::<Vec<Decision>>::deserialize(deserializer)?.unwrap_or_default())
}

/// Why a pull failed; the entries stay as they are.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    /// The request or the connection failed.
    #[error("cannot reach the LAPI: {0}")]
    Http(String),
    /// The LAPI refused the key.
    #[error("the LAPI refused the API key (403 Forbidden): check the bouncer's key")]
    Forbidden,
    /// The LAPI answered with another error.
    #[error("the LAPI answered {0}")]
    Status(u16),
    /// The answer is larger than allowed.
    #[error("the answer is larger than max_bytes ({0} bytes); nothing taken from it")]
    TooLarge(u64),
    /// The answer is not the JSON expected.
    #[error("the answer is not a decision stream: {0}; nothing taken from it")]
    Json(String),
    /// A TLS file (`ca_file`, `cert_file` or `key_file`) cannot be used.
    #[error("{key} {path}: {reason}")]
    TlsFile {
        /// The configuration key naming it.
        key: &'static str,
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
}

/// The PEM items of the file `key` names, or why it cannot be read.
fn pem_items(
    key: &'static str,
    path: &Path,
) -> Result<Vec<ureq::tls::PemItem<'static>>, PullError> {
    let error = |reason: String| PullError::TlsFile {
        key,
        path: path.display().to_string(),
        reason,
    };
    let pem = std::fs::read(path).map_err(|reason| error(reason.to_string()))?;
    ureq::tls::parse_pem(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|reason| error(reason.to_string()))
}

/// The certificates in the PEM file `key` names (at least one), or why
/// not.
fn certificates(
    key: &'static str,
    path: &Path,
) -> Result<Vec<ureq::tls::Certificate<'static>>, PullError> {
    let certificates: Vec<_> = pem_items(key, path)?
        .into_iter()
        .filter_map(|item| match item {
            ureq::tls::PemItem::Certificate(certificate) => Some(certificate),
            _ => None,
        })
        .collect();
    if certificates.is_empty() {
        return Err(no_pem_item(key, path, "certificate"));
    }
    Ok(certificates)
}

/// The error of a TLS file that holds no PEM `what`.
fn no_pem_item(key: &'static str, path: &Path, what: &str) -> PullError {
    PullError::TlsFile {
        key,
        path: path.display().to_string(),
        reason: format!("holds no PEM {what}"),
    }
}

/// The client certificate (with any intermediates) and key `files` name.
fn client_cert(files: &ClientCertFiles) -> Result<ureq::tls::ClientCert, PullError> {
    let chain = certificates("cert_file", &files.cert_file)?;
    let key = pem_items("key_file", &files.key_file)?
        .into_iter()
        .find_map(|item| match item {
            ureq::tls::PemItem::PrivateKey(key) => Some(key),
            _ => None,
        })
        .ok_or_else(|| no_pem_item("key_file", &files.key_file, "private key"))?;
    Ok(ureq::tls::ClientCert::new_with_certs(&chain, key))
}

fn tls_config(config: &CrowdsecConfig) -> Result<ureq::tls::TlsConfig, PullError> {
    let mut tls = ureq::tls::TlsConfig::builder();
    if let Some(path) = &config.ca_file {
        let roots = certificates("ca_file", path)?;
        tls = tls.root_certs(ureq::tls::RootCerts::new_with_certs(&roots));
    }
    if let Some(files) = &config.client_cert {
        tls = tls.client_cert(Some(client_cert(files)?));
    }
    Ok(tls.build())
}

/// Asks the LAPI for the decisions changed since this key's last pull,
/// or for all of them (`startup`).
pub fn pull(config: &CrowdsecConfig, startup: bool) -> Result<Answer, PullError> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(config.timeout))
        .http_status_as_error(false)
        .user_agent(user_agent())
        .tls_config(tls_config(config)?)
        .build()
        .into();
    let url = format!("{}/v1/decisions/stream?startup={startup}", config.url);
    let mut request = agent.get(&url);
    if let Some(key) = &config.api_key {
        request = request.header("X-Api-Key", &key.0);
    }
    let response = request
        .call()
        .map_err(|error| PullError::Http(error.to_string()))?;
    match response.status().as_u16() {
        200 => {}
        403 => return Err(PullError::Forbidden),
        status => return Err(PullError::Status(status)),
    }
    let mut body = Vec::new();
    response
        .into_body()
        .into_reader()
        .take(config.max_bytes.saturating_add(1))
        .read_to_end(&mut body)
        .map_err(|error| PullError::Http(format!("reading the answer: {error}")))?;
    if body.len() as u64 > config.max_bytes {
        return Err(PullError::TooLarge(config.max_bytes));
    }
    serde_json::from_slice(&body).map_err(|error| PullError::Json(error.to_string()))
}

/// The longest Go duration: `i64::MAX` nanoseconds, about 292 years.
const MAX_GO_DURATION_SECONDS: f64 = i64::MAX as f64 / 1e9;

/// Parses a Go duration (`1h2m3.5s`, `-1.6s`, `16.9ms`, `0s`); a negative
/// one is zero. Like Go, refuses one beyond `i64::MAX` nanoseconds, so that
/// a decision's end cannot overflow the clock.
pub fn parse_go_duration(text: &str) -> Option<Duration> {
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest.is_empty() {
        return None;
    }
    let mut seconds = 0.0f64;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest.get(..number_end)?.parse().ok()?;
        rest = rest.get(number_end..)?;
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match rest.get(..unit_end)? {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = rest.get(unit_end..)?;
        seconds += number * scale;
    }
    if seconds > MAX_GO_DURATION_SECONDS {
        return None;
    }
    if negative || text == "0" {
        return Some(Duration::ZERO);
    }
    Duration::try_from_secs_f64(seconds).ok()
}

/// Why a decision is not taken.
fn ignored_because(config: &CrowdsecConfig, decision: &Decision) -> Option<String> {
    let listed = |list: &[String], value: &str| list.iter().any(|item| item == value);
    if !config
        .scopes
        .iter()
        .any(|scope| scope.eq_ignore_ascii_case(&decision.scope))
    {
        return Some(format!("scope '{}' not followed", excerpt(&decision.scope)));
    }
    if !listed(&config.types, &decision.kind) {
        return Some(format!("type '{}' not followed", excerpt(&decision.kind)));
    }
    if (!config.origins.is_empty() && !listed(&config.origins, &decision.origin))
        || listed(&config.exclude_origins, &decision.origin)
    {
        return Some(format!(
            "origin '{}' not followed",
            excerpt(&decision.origin)
        ));
    }
    if (!config.scenarios.is_empty() && !listed(&config.scenarios, &decision.scenario))
        || listed(&config.exclude_scenarios, &decision.scenario)
    {
        return Some(format!(
            "scenario '{}' not followed",
            excerpt(&decision.scenario)
        ));
    }
    None
}

/// The network a decision names, or why it is not taken: it names none,
/// or a whole family (`0.0.0.0/0`, `::/0`) that `config` does not allow.
fn network(config: &CrowdsecConfig, decision: &Decision) -> Result<IpNet, String> {
    let bad = || {
        format!(
            "{} value '{}' is not an {}",
            decision.scope,
            excerpt(&decision.value),
            if decision.scope.eq_ignore_ascii_case("Ip") {
                "address"
            } else {
                "address/prefix network"
            }
        )
    };
    let net = if decision.scope.eq_ignore_ascii_case("Ip") {
        netlist::parse_address(&decision.value)
            .map(IpNet::from)
            .ok_or_else(bad)?
    } else {
        netlist::parse_range(&decision.value).ok_or_else(bad)?
    };
    if net.prefix_len() == 0 && !config.allow_whole_family {
        return Err(format!(
            "{net} covers every address of its family (allow_whole_family = true takes it)"
        ));
    }
    Ok(net)
}

fn unix_millis(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

/// What one answer changes in the source [`SOURCE`].
#[derive(Debug, Default)]
pub struct Changes {
    /// The whole list replaces the source's (a startup answer).
    pub replace: bool,
    /// Networks listed, with the expiry and comment they take.
    pub listed: Vec<(IpNet, SystemTime, String)>,
    /// Networks no longer listed.
    pub unlisted: Vec<IpNet>,
    /// Why decisions were ignored (one line each, repeats removed).
    pub ignored: BTreeSet<String>,
}

impl Changes {
    /// The entries to add (or to replace the source's with).
    pub fn entries(&self) -> Vec<NewEntry<'_>> {
        self.listed
            .iter()
            .map(|(net, expires, comment)| NewEntry {
                net: *net,
                comment: Some(comment),
                expires: Some(*expires),
            })
            .collect()
    }
}

/// Takes `answer` into `state` at `now` and returns the changes that make
/// the source match it (every network of `state`, with a `startup`
/// answer).
pub fn take_answer(
    config: &CrowdsecConfig,
    state: &mut CrowdsecState,
    answer: &Answer,
    startup: bool,
    now: SystemTime,
) -> Changes {
    let mut changes = Changes {
        replace: startup,
        ..Changes::default()
    };
    let mut touched = BTreeSet::new();
    if startup {
        state.decisions.clear();
    }
    // What the source lists now: only these can be unlisted.
    let listed_before: HashSet<IpNet> = state.decisions.values().map(|taken| taken.net).collect();
    // The LAPI sends, for each value, only its longest decision as new,
    // and lists a value as deleted (under any of its decisions' ids) once
    // no decision bans it any more, repeating that in the next few
    // answers: a deleted decision ends every decision for its network
    // taken before it ended (so a repeat spares a newer one).
    let now_ms = unix_millis(now);
    for decision in &answer.deleted {
        let Ok(net) = network(config, decision) else {
            continue;
        };
        let ended_ms = decision
            .duration
            .strip_prefix('-')
            .and_then(parse_go_duration)
            .map_or(now_ms, |ago| now_ms.saturating_sub(ago.as_millis() as u64));
        let before = state.decisions.len();
        state
            .decisions
            .retain(|_, taken| taken.net != net || taken.taken_ms > ended_ms);
        if state.decisions.len() != before {
            touched.insert(net);
        }
    }
    for decision in &answer.new {
        let counts = state.counts.entry(decision.origin.clone()).or_default();
        counts.received += 1;
        let taken = match ignored_because(config, decision) {
            Some(reason) => Err(reason),
            None => network(config, decision).and_then(|net| {
                let left = parse_go_duration(&decision.duration).ok_or_else(|| {
                    format!(
                        "duration '{}' is not a Go duration",
                        excerpt(&decision.duration)
                    )
                })?;
                Ok((net, left))
            }),
        };
        match taken {
            Ok((net, left)) => {
                counts.applied += 1;
                touched.insert(net);
                let replaced = state.decisions.insert(
                    decision.id,
                    CrowdsecDecision {
                        net,
                        expires: unix_seconds(now + left),
                        origin: decision.origin.clone(),
                        scenario: decision.scenario.clone(),
                        taken_ms: now_ms,
                    },
                );
                // An id sent again for another network moves the decision.
                if let Some(replaced) = replaced {
                    touched.insert(replaced.net);
                }
            }
            Err(reason) => {
                counts.ignored += 1;
                changes.ignored.insert(reason);
            }
        }
    }
    let now_seconds = unix_seconds(now);
    let expired: Vec<u64> = state
        .decisions
        .iter()
        .filter(|(_, decision)| decision.expires <= now_seconds)
        .map(|(&id, _)| id)
        .collect();
    for id in expired {
        if let Some(decision) = state.decisions.remove(&id) {
            state.counts.entry(decision.origin).or_default().expired += 1;
            touched.insert(decision.net);
        }
    }
    // The decision that lasts longest speaks for each network.
    let mut longest: HashMap<IpNet, (u64, &CrowdsecDecision)> = HashMap::new();
    for (&id, decision) in &state.decisions {
        let slot = longest.entry(decision.net).or_insert((id, decision));
        if decision.expires > slot.1.expires {
            *slot = (id, decision);
        }
    }
    let listed = |net: &IpNet| {
        longest.get(net).map(|&(id, decision)| {
            (
                *net,
                UNIX_EPOCH + Duration::from_secs(decision.expires),
                comment(id, decision),
            )
        })
    };
    if startup {
        let all: BTreeSet<IpNet> = longest.keys().copied().collect();
        changes.listed = all.iter().filter_map(listed).collect();
    } else {
        for net in touched {
            match listed(&net) {
                Some(entry) => changes.listed.push(entry),
                None if listed_before.contains(&net) => changes.unlisted.push(net),
                None => {}
            }
        }
    }
    changes
}

/// A network's comment, `origin/scenario #id` of the decision that speaks
/// for it: the origin and scenario cut so that the whole fits a comment
/// (the LAPI bounds neither), the id always kept.
fn comment(id: u64, decision: &CrowdsecDecision) -> String {
    let id = format!(" #{id}");
    let reason = format!("{}/{}", decision.origin, decision.scenario);
    text::cut(reason, MAX_COMMENT_BYTES - id.len()) + &id
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::config::ApiKey;

    fn config() -> CrowdsecConfig {
        CrowdsecConfig {
            url: "http://127.0.0.1:1".into(),
            api_key: Some(ApiKey("k".into())),
            client_cert: None,
            pull: Duration::from_secs(10),
            scopes: vec!["Ip".into(), "Range".into()],
            types: vec!["ban".into()],
            origins: vec![],
            exclude_origins: vec!["CAPI".into()],
            scenarios: vec![],
            exclude_scenarios: vec![],
            ca_file: None,
            timeout: Duration::from_secs(1),
            max_bytes: 1 << 20,
            allow_whole_family: false,
        }
    }

    fn decision(id: u64, scope: &str, value: &str, duration: &str) -> Decision {
        Decision {
            id,
            value: value.into(),
            scope: scope.into(),
            kind: "ban".into(),
            duration: duration.into(),
            origin: "cscli".into(),
            scenario: "manual".into(),
        }
    }

    #[test]
    fn go_durations_parse() {
        let secs = |text: &str| parse_go_duration(text).map(|d| d.as_secs_f64());
        assert_eq!(secs("59m59.5s"), Some(3599.5));
        assert_eq!(secs("4h0m0s"), Some(14400.0));
        assert_eq!(secs("1h2m3s"), Some(3723.0));
        assert_eq!(secs("16ms"), Some(0.016));
        assert_eq!(secs("1.5µs"), Some(1.5e-6));
        assert_eq!(secs("-1.606978886s"), Some(0.0));
        assert_eq!(secs("0s"), Some(0.0));
        assert_eq!(secs("2562047h"), Some(2562047.0 * 3600.0));
        for bad in [
            "",
            "-",
            "5",
            "5x",
            "1h5",
            "s",
            "1..2s",
            "forever",
            "2562048h",
            "-2562048h",
        ] {
            assert_eq!(parse_go_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn an_id_sent_again_for_another_network_moves_its_decision() {
        let config = config();
        let mut state = CrowdsecState::default();
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let first = Answer {
            new: vec![decision(1, "Ip", "198.18.0.1", "1h")],
            deleted: vec![],
        };
        take_answer(&config, &mut state, &first, true, now);
        let moved = Answer {
            new: vec![decision(1, "Ip", "198.18.0.2", "1h")],
            deleted: vec![],
        };
        let changes = take_answer(&config, &mut state, &moved, false, now);
        let listed: Vec<IpNet> = changes.listed.iter().map(|(net, ..)| *net).collect();
        assert_eq!(listed, ["198.18.0.2/32".parse::<IpNet>().unwrap()]);
        assert_eq!(
            changes.unlisted,
            ["198.18.0.1/32".parse::<IpNet>().unwrap()]
        );
        // Within one answer, the first network was never listed: nothing to
        // unlist.
        let twice = Answer {
            new: vec![
                decision(2, "Ip", "198.18.0.3", "1h"),
                decision(2, "Ip", "198.18.0.4", "1h"),
            ],
            deleted: vec![],
        };
        let changes = take_answer(&config, &mut state, &twice, false, now);
        assert_eq!(changes.listed.len(), 1);
        assert!(changes.unlisted.is_empty(), "{:?}", changes.unlisted);
    }

    #[test]
    fn a_duration_beyond_gos_limit_is_ignored_not_a_panic() {
        let config = config();
        let mut state = CrowdsecState::default();
        let answer = Answer {
            new: vec![decision(1, "Ip", "198.18.0.1", "4000000000000000h")],
            deleted: vec![],
        };
        let changes = take_answer(&config, &mut state, &answer, true, SystemTime::now());
        assert!(changes.listed.is_empty());
        assert_eq!(changes.ignored.len(), 1, "{:?}", changes.ignored);
    }

    #[test]
    fn a_network_stays_while_any_decision_for_it_lives() {
        let config = config();
        let mut state = CrowdsecState::default();
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let net: IpNet = "198.18.0.1/32".parse().unwrap();
        let answer = Answer {
            new: vec![
                decision(1, "Ip", "198.18.0.1", "1h"),
                decision(2, "Ip", "198.18.0.1", "2h"),
                decision(3, "Range", "198.19.0.7/24", "1h"),
                decision(4, "Country", "FR", "1h"),
                decision(5, "Ip", "not-an-ip", "1h"),
                Decision {
                    origin: "CAPI".into(),
                    ..decision(6, "Ip", "198.18.0.9", "1h")
                },
            ],
            deleted: vec![],
        };
        let changes = take_answer(&config, &mut state, &answer, true, now);
        assert!(changes.replace);
        let listed: Vec<(IpNet, u64, &str)> = changes
            .listed
            .iter()
            .map(|(net, at, comment)| (*net, unix_seconds(*at), comment.as_str()))
            .collect();
        assert_eq!(
            listed,
            [
                (net, 1_007_200, "cscli/manual #2"),
                (
                    "198.19.0.0/24".parse().unwrap(),
                    1_003_600,
                    "cscli/manual #3"
                ),
            ]
        );
        assert_eq!(changes.ignored.len(), 3, "{:?}", changes.ignored);
        let cscli = state.counts["cscli"];
        assert_eq!((cscli.received, cscli.applied, cscli.ignored), (5, 3, 2));

        // A value listed as deleted under another of its decisions' ids
        // ends it (the LAPI names one decision per value).
        let delete_ago = |id, ago| Answer {
            new: vec![],
            deleted: vec![decision(id, "Ip", "198.18.0.1", ago)],
        };
        let delete = |id| delete_ago(id, "-1s");
        let deleted_at = now + Duration::from_secs(2);
        let changes = take_answer(&config, &mut state, &delete(7), false, deleted_at);
        assert!(changes.listed.is_empty());
        assert_eq!(changes.unlisted, [net]);
        assert!(state.decisions.values().all(|taken| taken.net != net));
        // A deletion repeated by the LAPI changes nothing.
        let changes = take_answer(&config, &mut state, &delete(1), false, deleted_at);
        assert!(changes.listed.is_empty() && changes.unlisted.is_empty());
        // A repeated deletion spares a decision taken after it.
        let later_ban = Answer {
            new: vec![decision(8, "Ip", "198.18.0.1", "1h")],
            deleted: vec![],
        };
        take_answer(&config, &mut state, &later_ban, false, deleted_at);
        let repeat_at = deleted_at + Duration::from_secs(1);
        // (the LAPI repeats it with the time since it ended)
        let changes = take_answer(&config, &mut state, &delete_ago(7, "-2s"), false, repeat_at);
        assert!(changes.unlisted.is_empty(), "{changes:?}");
        assert!(state.decisions.contains_key(&8));
        state.decisions.remove(&8);

        // A decision that outlives its duration ends without the LAPI.
        let later = now + Duration::from_secs(3600);
        let changes = take_answer(&config, &mut state, &Answer::default(), false, later);
        assert_eq!(
            changes.unlisted,
            ["198.19.0.0/24".parse::<IpNet>().unwrap()]
        );
        assert_eq!(state.counts["cscli"].expired, 1);
        assert!(state.decisions.is_empty());
    }

    #[test]
    fn whole_family_ranges_are_ignored_unless_allowed() {
        let answer = Answer {
            new: vec![
                decision(1, "Range", "0.0.0.0/0", "1h"),
                decision(2, "Range", "::/0", "1h"),
                decision(3, "Range", "::ffff:0:0/96", "1h"),
                decision(4, "Ip", "198.18.0.1", "1h"),
            ],
            deleted: vec![],
        };
        let mut state = CrowdsecState::default();
        let changes = take_answer(&config(), &mut state, &answer, true, SystemTime::now());
        assert_eq!(changes.listed.len(), 1, "{:?}", changes.listed);
        assert_eq!(state.counts["cscli"].ignored, 3);
        assert!(
            changes
                .ignored
                .iter()
                .all(|reason| reason.contains("covers every address of its family")),
            "{:?}",
            changes.ignored
        );
        let allowing = CrowdsecConfig {
            allow_whole_family: true,
            ..config()
        };
        let mut state = CrowdsecState::default();
        let changes = take_answer(&allowing, &mut state, &answer, true, SystemTime::now());
        assert_eq!(changes.listed.len(), 3, "{:?}", changes.listed);
    }

    #[test]
    fn ipv4_mapped_decisions_are_ipv4() {
        let config = config();
        let mut state = CrowdsecState::default();
        let answer = Answer {
            new: vec![
                decision(1, "Range", "::ffff:198.18.70.0/120", "1h"),
                decision(2, "Ip", "::ffff:198.18.0.5", "1h"),
            ],
            deleted: vec![],
        };
        let changes = take_answer(&config, &mut state, &answer, true, SystemTime::now());
        let listed: Vec<String> = changes
            .listed
            .iter()
            .map(|(net, ..)| net.to_string())
            .collect();
        assert_eq!(listed, ["198.18.0.5/32", "198.18.70.0/24"]);
        // Its deletion, sent mapped too, ends it.
        let deleted = Answer {
            new: vec![],
            deleted: vec![decision(1, "Range", "::ffff:198.18.70.0/120", "-1s")],
        };
        let later = SystemTime::now() + Duration::from_secs(2);
        let changes = take_answer(&config, &mut state, &deleted, false, later);
        assert_eq!(
            changes.unlisted,
            ["198.18.70.0/24".parse::<IpNet>().unwrap()]
        );
    }

    #[test]
    fn a_long_scenario_makes_a_comment_that_fits_and_exports() {
        let config = config();
        let mut state = CrowdsecState::default();
        let answer = Answer {
            new: vec![Decision {
                scenario: "\u{1f}s".repeat(750),
                ..decision(u64::MAX, "Ip", "198.18.0.1", "1h")
            }],
            deleted: vec![],
        };
        let changes = take_answer(&config, &mut state, &answer, true, SystemTime::now());
        let (net, _, comment) = &changes.listed[0];
        assert!(
            comment.len() <= MAX_COMMENT_BYTES,
            "{} bytes",
            comment.len()
        );
        assert!(comment.starts_with("cscli/\u{1f}s"), "{comment:?}");
        assert!(
            comment.ends_with(&format!("... #{}", u64::MAX)),
            "{comment:?}"
        );
        let line = netlist::export_line(net, Some(comment));
        let list = netlist::parse_bytes(line.as_bytes(), "export", Default::default())
            .expect("the export line reads back");
        assert_eq!(list.entries[0].comment.as_deref(), Some(comment.as_str()));
    }

    #[test]
    fn a_stream_answer_with_nulls_parses() {
        let answer: Answer = serde_json::from_str(
            r#"{"deleted":null,"new":[{"duration":"2.4s","id":2,"origin":"cscli","scenario":"m","scope":"Range","type":"ban","value":"198.19.0.0/24"}]}"#,
        )
        .unwrap();
        assert_eq!((answer.new.len(), answer.deleted.len()), (1, 0));
        assert!(serde_json::from_str::<Answer>("[1, 2]").is_err());
    }
}
