//! The store against an exact model, with property tests: random adds,
//! replaces and deletes by three sources, with comments and expiries, on a
//! store that a fourth source fills first. Small adds take the store's
//! lookup paths and large ones its ordered pass over the whole list; a
//! replace, and a read of one source's entries, take that source's
//! networks from the index by source while it lists fewer than a
//! sixteenth of the list, and read the whole list once it lists more; a
//! source leaves the index at that line and comes back below half of it
//! (the base list is sized so that the sources cross both lines, and the
//! base source itself is out of the index). All must give the model's
//! reports and contents after every change.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cfctl::store::{ListKind, NewEntry, Store};
use ipnet::{IpNet, Ipv4Net};
use proptest::prelude::*;

const SOURCES: [&str; 3] = ["cli", "file:a", "feed:b"];
/// The networks the operations draw from: a few overlap the base list.
const UNIVERSE: u32 = 48;
/// Networks the base source lists before the operations start.
const BASE: u32 = 400;

fn universe_net(index: u32) -> IpNet {
    let address = Ipv4Addr::from(0xc612_0000 + index * 4);
    IpNet::V4(
        Ipv4Net::new(address, 30 + u8::from(index.is_multiple_of(3)) * 2)
            .expect("a length")
            .trunc(),
    )
}

/// One membership in the model: comment and expiry (ms since the epoch).
type Held = (Option<String>, Option<u64>);

#[derive(Clone, Debug)]
struct Given {
    net: u32,
    comment: Option<u8>,
    expires: Option<u64>,
}

#[derive(Clone, Debug)]
enum Operation {
    Add(usize, Vec<Given>),
    Replace(usize, Vec<Given>),
    Delete(Option<usize>, Vec<u32>),
}

fn given() -> impl Strategy<Value = Given> {
    (
        0..UNIVERSE,
        proptest::option::weighted(0.3, 0..3u8),
        proptest::option::weighted(0.3, 1..4u64),
    )
        .prop_map(|(net, comment, expires)| Given {
            net,
            comment,
            expires: expires.map(|hours| 4_000_000_000_000 + hours * 3_600_000),
        })
}

fn operation() -> impl Strategy<Value = Operation> {
    // Up to 6 entries: a lookup per network; up to 40: an ordered pass.
    let entries = prop_oneof![
        proptest::collection::vec(given(), 0..6),
        proptest::collection::vec(given(), 20..40),
    ];
    prop_oneof![
        (0..SOURCES.len(), entries.clone())
            .prop_map(|(source, entries)| Operation::Add(source, entries)),
        (0..SOURCES.len(), entries)
            .prop_map(|(source, entries)| Operation::Replace(source, entries)),
        (
            proptest::option::of(0..SOURCES.len()),
            proptest::collection::vec(0..UNIVERSE, 0..8)
        )
            .prop_map(|(source, nets)| Operation::Delete(source, nets)),
    ]
}

/// network -> source -> membership
type Model = BTreeMap<IpNet, BTreeMap<String, Held>>;

fn comment_text(comment: u8) -> String {
    format!("comment {comment}")
}

fn to_time(millis: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(millis)
}

/// The model's entries of `given`: first of each network.
fn first_of_each(given: &[Given]) -> Vec<(IpNet, Option<String>, Option<u64>)> {
    let mut seen = BTreeSet::new();
    given
        .iter()
        .filter(|entry| seen.insert(entry.net))
        .map(|entry| {
            (
                universe_net(entry.net),
                entry.comment.map(comment_text),
                entry.expires,
            )
        })
        .collect()
}

/// Joins `source` to `net` in the model; what the list did: "added",
/// "joined" or "kept".
fn model_join(
    model: &mut Model,
    source: &str,
    net: IpNet,
    comment: Option<String>,
    expires: Option<u64>,
) -> &'static str {
    let members = model.entry(net).or_default();
    let outcome = match (members.get(source), members.is_empty()) {
        (Some(_), _) => "kept",
        (None, true) => "added",
        (None, false) => "joined",
    };
    let comment = comment.or_else(|| members.get(source).and_then(|held| held.0.clone()));
    members.insert(source.to_owned(), (comment, expires));
    outcome
}

/// Removes `source` from `net` in the model; "removed", "still" or
/// "missing".
fn model_leave(model: &mut Model, source: &str, net: IpNet) -> &'static str {
    let Some(members) = model.get_mut(&net) else {
        return "missing";
    };
    if members.remove(source).is_none() {
        return "missing";
    }
    if members.is_empty() {
        model.remove(&net);
        "removed"
    } else {
        "still"
    }
}

fn stored(store: &Store) -> Model {
    store
        .entries(ListKind::Blocklist, None)
        .expect("reading the entries")
        .into_iter()
        .map(|entry| {
            let members = entry
                .sources
                .into_iter()
                .map(|member| {
                    let expires = member.expires.map(|time| {
                        u64::try_from(
                            time.duration_since(UNIX_EPOCH)
                                .expect("after the epoch")
                                .as_millis(),
                        )
                        .expect("fits")
                    });
                    (member.source, (member.comment, expires))
                })
                .collect();
            (entry.net, members)
        })
        .collect()
}

fn sorted(mut nets: Vec<IpNet>) -> Vec<IpNet> {
    nets.sort_unstable();
    nets
}

fn run(operations: &[Operation]) {
    let dir = tempfile::tempdir().expect("a state directory");
    let store = Store::open(dir.path()).expect("a store");
    let mut model = Model::new();
    let base: Vec<NewEntry<'static>> = (0..BASE)
        .map(|index| NewEntry {
            net: IpNet::V4(
                Ipv4Net::new(Ipv4Addr::from(0xc613_0000 + index * 256), 24).expect("a length"),
            ),
            comment: None,
            expires: None,
        })
        .collect();
    let mut txn = store.begin().expect("a transaction");
    txn.add(ListKind::Blocklist, "file:base", &base)
        .expect("the base list");
    txn.commit().expect("a commit");
    for entry in &base {
        model_join(&mut model, "file:base", entry.net, None, None);
    }

    for operation in operations {
        let mut txn = store.begin().expect("a transaction");
        match operation {
            Operation::Add(source, given) | Operation::Replace(source, given) => {
                let source = SOURCES[*source];
                let comments: Vec<Option<String>> = given
                    .iter()
                    .map(|entry| entry.comment.map(comment_text))
                    .collect();
                let entries: Vec<NewEntry<'_>> = given
                    .iter()
                    .zip(&comments)
                    .map(|(entry, comment)| NewEntry {
                        net: universe_net(entry.net),
                        comment: comment.as_deref(),
                        expires: entry.expires.map(to_time),
                    })
                    .collect();
                let unique = first_of_each(given);
                let repeated = given.len() - unique.len();
                let (mut added, mut joined, mut kept) = (Vec::new(), Vec::new(), 0usize);
                let (mut removed, mut still) = (Vec::new(), Vec::new());
                if let Operation::Replace(..) = operation {
                    let keep: BTreeSet<IpNet> = unique.iter().map(|(net, ..)| *net).collect();
                    let dropped: Vec<IpNet> = model
                        .iter()
                        .filter(|(net, members)| {
                            members.contains_key(source) && !keep.contains(net)
                        })
                        .map(|(net, _)| *net)
                        .collect();
                    for net in dropped {
                        match model_leave(&mut model, source, net) {
                            "removed" => removed.push(net),
                            _ => still.push(net),
                        }
                    }
                }
                for (net, comment, expires) in unique {
                    match model_join(&mut model, source, net, comment, expires) {
                        "added" => added.push(net),
                        "joined" => joined.push(net),
                        _ => kept += 1,
                    }
                }
                if let Operation::Add(..) = operation {
                    let report = txn
                        .add(ListKind::Blocklist, source, &entries)
                        .expect("an add");
                    assert_eq!(sorted(report.added), sorted(added), "{operation:?}");
                    assert_eq!(sorted(report.joined), sorted(joined), "{operation:?}");
                    assert_eq!(report.already_listed.len(), kept, "{operation:?}");
                    assert_eq!(report.repeated, repeated, "{operation:?}");
                } else {
                    // What the writes run beside is told is what they did.
                    let (report, told) = txn
                        .replace_beside(ListKind::Blocklist, source, &entries, Clone::clone)
                        .expect("a replace");
                    assert_eq!(told, report, "{operation:?}");
                    assert_eq!(sorted(report.added), sorted(added), "{operation:?}");
                    assert_eq!(sorted(report.joined), sorted(joined), "{operation:?}");
                    assert_eq!(sorted(report.removed), sorted(removed), "{operation:?}");
                    assert_eq!(sorted(report.still_listed), sorted(still), "{operation:?}");
                    assert_eq!(report.kept, kept, "{operation:?}");
                    assert_eq!(report.repeated, repeated, "{operation:?}");
                }
            }
            Operation::Delete(source, nets) => {
                let mut unique: Vec<IpNet> = Vec::new();
                for net in nets.iter().map(|&index| universe_net(index)) {
                    if !unique.contains(&net) {
                        unique.push(net);
                    }
                }
                let (mut deleted, mut still, mut missing) = (Vec::new(), Vec::new(), Vec::new());
                for &net in &unique {
                    let outcome = match source {
                        Some(source) => model_leave(&mut model, SOURCES[*source], net),
                        None => match model.remove(&net) {
                            Some(_) => "removed",
                            None => "missing",
                        },
                    };
                    match outcome {
                        "removed" => deleted.push(net),
                        "still" => still.push(net),
                        _ => missing.push(net),
                    }
                }
                let report = txn
                    .delete(
                        ListKind::Blocklist,
                        source.map(|source| SOURCES[source]),
                        unique,
                    )
                    .expect("a delete");
                assert_eq!(sorted(report.deleted), sorted(deleted), "{operation:?}");
                assert_eq!(sorted(report.still_listed), sorted(still), "{operation:?}");
                assert_eq!(sorted(report.missing), sorted(missing), "{operation:?}");
            }
        }
        txn.commit().expect("a commit");
        assert_eq!(stored(&store), model, "after {operation:?}");
        for source in SOURCES {
            let listed = store
                .entries(ListKind::Blocklist, Some(source))
                .expect("a source's entries")
                .len();
            let modelled = model
                .values()
                .filter(|members| members.contains_key(source))
                .count();
            assert_eq!(listed, modelled, "{source} after {operation:?}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn the_store_keeps_the_models_memberships(operations in proptest::collection::vec(operation(), 1..24)) {
        run(&operations);
    }
}
