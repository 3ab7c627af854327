//! The loader-independent cfctl flow on a real `filter-core` cuckoo filter
//! in process memory: parse a list, store it in a transaction, apply the
//! plan's key diff to the filter before committing, then check addresses,
//! including a false positive of the approximate filter.

use std::net::{IpAddr, Ipv4Addr};

use cfctl::netlist::{parse_bytes, ParseOptions};
use cfctl::plan::{CheckVerdict, KeyDiff, KeyPlan, PlanLimits};
use cfctl::store::{ListKind, Store};
use filter_core::{CuckooFilter, NetKey};
use ipnet::IpNet;

const SEED: u64 = 0x5eed;

type Filter = CuckooFilter<u8, 4, Vec<[u8; 4]>>;

fn apply(filter: &mut Filter, diff: &KeyDiff) {
    for key in &diff.insert {
        filter
            .insert_hash(key.hash(SEED))
            .expect("room in the filter");
    }
    for key in &diff.remove {
        assert!(filter.remove_hash(key.hash(SEED)));
    }
}

#[test]
fn import_delete_and_check_against_a_filter() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    // 8-bit fingerprints in a small table: false positives are easy to find.
    let mut filter = Filter::with_storage(vec![[0u8; 4]; 256], SEED).unwrap();

    let list = parse_bytes(
        b"; test feed\n198.18.0.0/16 ; SBL1\n198.18.4.0/22 ; SBL2\n198.19.1.1 ; SBL3\n",
        "feed.txt",
        ParseOptions::default(),
    )
    .unwrap();
    let mut txn = store.begin().unwrap();
    let report = txn
        .add(
            ListKind::Blocklist,
            "file:feed.txt",
            &cfctl::sources::file::entries(&list, None),
        )
        .unwrap();
    // First import: plan from scratch and fill the filter, then commit.
    let mut plan = KeyPlan::build(report.added.iter().copied(), PlanLimits::default()).unwrap();
    let all_keys = KeyDiff {
        insert: plan.keys().copied().collect(),
        ..KeyDiff::default()
    };
    apply(&mut filter, &all_keys);
    txn.commit().unwrap();
    assert_eq!(plan.lengths().ipv4(), [32, 22, 16]);

    let check = |plan: &KeyPlan, filter: &Filter, address: &str| {
        plan.check(address.parse().unwrap(), |key: &NetKey| {
            filter.contains_hash(key.hash(SEED))
        })
    };
    let report = check(&plan, &filter, "198.18.5.5");
    assert_eq!(report.verdict(), CheckVerdict::Listed);
    let covering: Vec<String> = report.covering.iter().map(ToString::to_string).collect();
    assert_eq!(covering, ["198.18.4.0/22", "198.18.0.0/16"]);
    let sbl = store
        .entry(ListKind::Blocklist, &report.covering[0])
        .unwrap()
        .unwrap()
        .sources[0]
        .comment
        .clone();
    assert_eq!(sbl.as_deref(), Some("SBL2"));

    // Delete the /16: the /22 inside it stays listed, the rest goes.
    let mut txn = store.begin().unwrap();
    let deleted = txn
        .delete(
            ListKind::Blocklist,
            Some("file:feed.txt"),
            ["198.18.0.0/16".parse().unwrap()],
        )
        .unwrap()
        .deleted;
    let diff = plan.update(&[], &deleted).unwrap();
    apply(&mut filter, &diff);
    txn.commit().unwrap();
    assert_eq!(diff.remove.len(), 1);
    assert_eq!(
        check(&plan, &filter, "198.18.5.5").verdict(),
        CheckVerdict::Listed
    );
    assert_ne!(
        check(&plan, &filter, "198.18.9.9").verdict(),
        CheckVerdict::Listed
    );

    // Some unlisted address matches by accident: a false positive, which
    // check tells apart from a listed one.
    let false_positive = (0u32..1 << 16)
        .map(|index| IpAddr::from(Ipv4Addr::from(0xc613_0000 | index)))
        .filter(|address| *address != IpAddr::from(Ipv4Addr::new(198, 19, 1, 1)))
        .map(|address| plan.check(address, |key: &NetKey| filter.contains_hash(key.hash(SEED))))
        .find(|report| report.verdict() == CheckVerdict::FalsePositive)
        .expect("a false positive among 65536 addresses");
    assert!(false_positive.covering.is_empty());

    // The store, reopened, plans to the same keys.
    drop(store);
    let store = Store::open(dir.path()).unwrap();
    let nets: Vec<IpNet> = store.nets(ListKind::Blocklist).unwrap();
    let replanned = KeyPlan::build(nets, PlanLimits::default()).unwrap();
    let mut keys: Vec<NetKey> = replanned.keys().copied().collect();
    let mut live: Vec<NetKey> = plan.keys().copied().collect();
    keys.sort_by_key(|key| *key.words());
    live.sort_by_key(|key| *key.words());
    assert_eq!(keys, live);
}
