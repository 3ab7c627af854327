use super::*;

const DROPPED_V4: (Outcome, Family) = (Outcome::Dropped, Family::Ipv4);

fn sample(address: &str, prefix_len: Option<u8>, frame_len: u32) -> Sample {
    let address: IpAddr = address.parse().unwrap();
    Sample {
        at_ns: 0,
        address: Some(address),
        family: match address {
            IpAddr::V4(_) => Family::Ipv4,
            IpAddr::V6(_) => Family::Ipv6,
        },
        outcome: Outcome::Dropped,
        prefix_len,
        ifindex: 7,
        direction: TrafficDirection::Ingress,
        hook: ProgramHook::Xdp,
        frame_len,
    }
}

/// Covers of 198.18.174.1 (listed by `feed:a` as a /24 and by `cli` as a
/// /32) and of 198.18.174.2 (the /24 only).
fn covers() -> Covers {
    let wide = Cover {
        net: "198.18.174.0/24".parse().unwrap(),
        sources: vec!["feed:a".into()],
    };
    let narrow = Cover {
        net: "198.18.174.1/32".parse().unwrap(),
        sources: vec!["cli".into()],
    };
    let mut covers = Covers::default();
    covers
        .resolved
        .insert("198.18.174.1".parse().unwrap(), vec![narrow, wide.clone()]);
    covers
        .resolved
        .insert("198.18.174.2".parse().unwrap(), vec![wide]);
    covers
        .resolved
        .insert("198.18.174.9".parse().unwrap(), vec![]);
    covers
}

/// An IPv4 event of `outcome` whose probe at `prefix_len` hit.
fn event(outcome: Outcome, prefix_len: u8) -> DropEvent {
    DropEvent {
        timestamp_ns: 5,
        address: [0; 16],
        frame_len: 64,
        ifindex: 2,
        rx_queue: 1,
        direction: TrafficDirection::Ingress as u8,
        hook: ProgramHook::Xdp as u8,
        family: Family::Ipv4 as u8,
        outcome: outcome as u8,
        prefix_len,
        captured: 0,
        frame: [0; cfxdp::MAX_EVENT_FRAME_BYTES],
    }
}

fn exact(packets: u64, bytes: u64) -> [((Outcome, Family), Exact); 1] {
    [(DROPPED_V4, Exact { packets, bytes })]
}

/// The IPv4 drops of origin `name` in `tally`.
fn dropped_v4(tally: &BTreeMap<OriginKey, Estimate>, name: &str) -> Estimate {
    tally
        .get(&OriginKey {
            origin: name.into(),
            outcome: Outcome::Dropped,
            family: Family::Ipv4,
        })
        .copied()
        .unwrap_or_default()
}

fn origin(attribution: &Attribution, name: &str) -> Estimate {
    dropped_v4(attribution.origins(), name)
}

#[test]
fn every_drop_sampled_counts_exactly_and_for_every_source() {
    let mut attribution = Attribution::new(exact(10, 1000), 5);
    let samples = [
        sample("198.18.174.1", Some(32), 100),
        sample("198.18.174.2", Some(24), 60),
        sample("198.18.174.2", Some(24), 60),
        sample("198.18.174.9", Some(24), 70),
        sample("198.18.174.3", None, 80),
    ];
    attribution.record(&samples, &covers(), exact(15, 1370), 5, &SourceNames);
    assert_eq!(
        origin(&attribution, "feed:a"),
        Estimate {
            packets: 3.0,
            bytes: 220.0,
            sampled: 3
        }
    );
    assert_eq!(origin(&attribution, "cli").packets, 1.0);
    assert_eq!(origin(&attribution, UNLISTED_ORIGIN).bytes, 70.0);
    assert_eq!(origin(&attribution, POLICY_ORIGIN).packets, 1.0);
    let wide: IpNet = "198.18.174.0/24".parse().unwrap();
    assert_eq!(attribution.entries()[&wide].estimate.packets, 3.0);
    assert_eq!(attribution.entries()[&wide].sources, ["feed:a"]);
    let arriving_at_xdp = InterfaceKey {
        ifindex: 7,
        direction: TrafficDirection::Ingress,
        hook: ProgramHook::Xdp,
    };
    assert_eq!(attribution.interfaces()[&arriving_at_xdp].sampled, 5);
    assert_eq!(attribution.sampled(), 5);
    assert_eq!(
        attribution.top_addresses(1),
        [("198.18.174.2".parse().unwrap(), 2)]
    );
}

#[test]
fn sampled_drops_share_the_exact_counters() {
    let mut attribution = Attribution::new(exact(0, 0), 0);
    let samples = [
        sample("198.18.174.1", Some(32), 100),
        sample("198.18.174.2", Some(24), 300),
    ];
    // 100 drops of 8000 bytes, two of them sampled.
    attribution.record(&samples, &covers(), exact(100, 8000), 98, &SourceNames);
    assert_eq!(origin(&attribution, "feed:a").packets, 100.0);
    assert_eq!(origin(&attribution, "cli").packets, 50.0);
    assert_eq!(origin(&attribution, "cli").bytes, 2000.0);
    assert_eq!(origin(&attribution, "feed:a").bytes, 8000.0);
}

#[test]
fn drops_without_a_sample_wait_for_the_next_batch() {
    let mut attribution = Attribution::new(exact(0, 0), 0);
    attribution.record(&[], &covers(), exact(40, 4000), 40, &SourceNames);
    assert!(attribution.origins().is_empty());
    let samples = [sample("198.18.174.2", Some(24), 100)];
    attribution.record(&samples, &covers(), exact(50, 5000), 49, &SourceNames);
    assert_eq!(origin(&attribution, "feed:a").packets, 50.0);
    assert_eq!(origin(&attribution, "feed:a").bytes, 5000.0);
}

#[test]
fn malformed_frames_are_not_attributed() {
    let mut attribution = Attribution::new(exact(0, 0), 0);
    let malformed = Sample::from_event(&event(Outcome::Malformed, NO_PREFIX)).unwrap();
    assert_eq!(malformed.address, None);
    attribution.record(&[malformed], &covers(), exact(0, 0), 0, &SourceNames);
    assert!(attribution.origins().is_empty());
    assert_eq!(attribution.sampled(), 0);
}

#[test]
fn events_decode() {
    let mut event = event(Outcome::WouldDrop, 24);
    event.address[..4].copy_from_slice(&[198, 18, 174, 1]);
    let decoded = Sample::from_event(&event).unwrap();
    assert_eq!(decoded.address, Some("198.18.174.1".parse().unwrap()));
    assert_eq!(decoded.outcome, Outcome::WouldDrop);
    assert_eq!(decoded.prefix_len, Some(24));
    event.family = Family::Ipv6 as u8;
    event.address = "2001:db8::1".parse::<Ipv6Addr>().unwrap().octets();
    event.prefix_len = NO_PREFIX;
    let decoded = Sample::from_event(&event).unwrap();
    assert_eq!(decoded.address, Some("2001:db8::1".parse().unwrap()));
    assert_eq!(decoded.prefix_len, None);
    event.outcome = 200;
    assert_eq!(Sample::from_event(&event), None);
}

#[test]
fn entries_past_the_bound_share_one_line() {
    let mut attribution = Attribution::new(exact(0, 0), 0);
    let mut covers = Covers::default();
    let mut samples = Vec::new();
    for index in 0..=MAX_ENTRIES as u32 {
        let address = IpAddr::V4(Ipv4Addr::from(0xc612_0000 + index));
        covers.resolved.insert(
            address,
            vec![Cover {
                net: IpNet::new(address, 32).unwrap(),
                sources: vec!["feed:a".into()],
            }],
        );
        samples.push(Sample {
            address: Some(address),
            ..sample("198.18.174.1", Some(32), 60)
        });
    }
    attribution.record(&samples, &covers, exact(0, 0), 0, &SourceNames);
    assert_eq!(attribution.entries().len(), MAX_ENTRIES);
    assert_eq!(attribution.other_entries().sampled, 1);
    assert_eq!(
        origin(&attribution, "feed:a").sampled,
        MAX_ENTRIES as u64 + 1
    );
}

#[test]
fn drops_paid_by_exact_samples_are_not_owed_later() {
    let mut attribution = Attribution::new(exact(0, 0), 0);
    let one = [sample("198.18.174.2", Some(24), 100)];
    attribution.record(&one, &covers(), exact(1, 100), 0, &SourceNames);
    // Sampling falls behind: 10 drops, one sample, which stands for them
    // all and not for the drop the first batch paid already.
    attribution.record(&one, &covers(), exact(11, 1100), 9, &SourceNames);
    assert_eq!(origin(&attribution, "feed:a").packets, 11.0);
}

/// Names the /32 of `cli` by a finer origin, like the CrowdSec source's
/// decisions.
struct FinerForCli;

impl OriginNames for FinerForCli {
    fn origin_of(&self, source: &str, net: &IpNet) -> Option<String> {
        (source == "cli" && net.prefix_len() == 32).then(|| "lists:test".to_owned())
    }
}

#[test]
fn reported_origins_take_the_finer_names_and_keep_the_sources_beside() {
    let mut attribution = Attribution::new(exact(0, 0), 0);
    let samples = [
        sample("198.18.174.1", Some(32), 100),
        sample("198.18.174.2", Some(24), 60),
        sample("198.18.174.9", Some(24), 70),
    ];
    attribution.record(&samples, &covers(), exact(3, 230), 0, &FinerForCli);
    let reported = |name: &str| dropped_v4(attribution.reported_origins(), name).packets;
    assert_eq!(reported("lists:test"), 1.0);
    assert_eq!(reported("feed:a"), 2.0);
    assert_eq!(reported("cli"), 0.0);
    assert_eq!(reported(UNLISTED_ORIGIN), 1.0);
    assert_eq!(origin(&attribution, "cli").packets, 1.0);
}
