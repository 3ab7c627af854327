//! Which stored entries an exact update must plan beside a change: those
//! that can share a filter key with a changed network. Under given active
//! lengths, an entry `E` shares a key with a changed network `N` only if
//! both expand to the same active length and one contains the other.
//!
//! [`KeySharing`] finds them either way round: as the few networks to look
//! up ([`KeySharing::candidates`], for a small change), or as a test to run
//! over every stored entry ([`KeySharing::shares`], for a large change,
//! whose candidates would outnumber a read of the whole store).

use foldhash::HashSet;
use ipnet::IpNet;

use super::{family_of, prefixes_of, ActiveLengths};
use filter_core::AddressFamily;

/// The changed networks of an update, indexed for both questions.
pub struct KeySharing<'a> {
    lengths: &'a ActiveLengths,
    /// The changed networks that have an active length, in address order.
    ordered: Vec<IpNet>,
    /// The same, for lookups.
    changed: HashSet<IpNet>,
    /// The prefix lengths the changed networks have, per family, shortest
    /// first.
    changed_lengths: [Vec<u8>; 2],
}

fn family_slot(family: AddressFamily) -> usize {
    match family {
        AddressFamily::Ipv4 => 0,
        AddressFamily::Ipv6 => 1,
    }
}

impl<'a> KeySharing<'a> {
    /// Indexes `changed` under `lengths`. A network longer than every
    /// active length of its family shares nothing (the update will ask for
    /// a rebuild).
    pub fn new(changed: impl IntoIterator<Item = IpNet>, lengths: &'a ActiveLengths) -> Self {
        let mut ordered: Vec<IpNet> = changed
            .into_iter()
            .filter(|net| lengths.target(family_of(net), net.prefix_len()).is_some())
            .collect();
        ordered.sort_unstable();
        ordered.dedup();
        let mut changed_lengths = [Vec::new(), Vec::new()];
        for net in &ordered {
            changed_lengths[family_slot(family_of(net))].push(net.prefix_len());
        }
        for family_lengths in &mut changed_lengths {
            family_lengths.sort_unstable();
            family_lengths.dedup();
        }
        let changed = ordered.iter().copied().collect();
        Self {
            lengths,
            ordered,
            changed,
            changed_lengths,
        }
    }

    /// Every network that, if stored, would share a key with a changed
    /// one: each changed network's prefixes down to just above the next
    /// shorter active length, and its subnets down to its target length.
    /// `None` if there are more than `max`.
    pub fn candidates(&self, max: usize) -> Option<Vec<IpNet>> {
        let mut candidates = Vec::new();
        for net in &self.ordered {
            let active = self.lengths.get(family_of(net));
            let len = net.prefix_len();
            let target = self.lengths.target(family_of(net), len)?;
            let shortest = active
                .iter()
                .copied()
                .find(|&active| active < target)
                .map_or(0, |floor| floor + 1);
            let subnets = 1usize.checked_shl(u32::from(target - len) + 1)?;
            let prefixes = usize::from(len - shortest.min(len)) + 1;
            if candidates.len() + subnets + prefixes > max {
                return None;
            }
            candidates.extend(prefixes_of(net.network(), shortest..=len));
            for sub_len in len + 1..=target {
                candidates.extend(net.subnets(sub_len).into_iter().flatten());
            }
        }
        Some(candidates)
    }

    /// Whether the stored entry `stored` can share a key with a changed
    /// network.
    pub fn shares(&self, stored: &IpNet) -> bool {
        let family = family_of(stored);
        let Some(target) = self.lengths.target(family, stored.prefix_len()) else {
            return false;
        };
        // Changed networks inside it no longer than its target expand to
        // the same length. An entry of an active length has one: itself.
        let inside = match target == stored.prefix_len() {
            true => self.changed.contains(stored),
            // A contiguous run in address order, from the first at or
            // after it.
            false => {
                let first = self.ordered.partition_point(|net| net < stored);
                self.ordered[first..]
                    .iter()
                    .take_while(|net| stored.contains(*net))
                    .any(|net| net.prefix_len() <= target)
            }
        };
        if inside {
            return true;
        }
        // Changed networks containing it, with the same target.
        self.changed_lengths[family_slot(family)]
            .iter()
            .take_while(|&&len| len < stored.prefix_len())
            .filter(|&&len| self.lengths.target(family, len) == Some(target))
            .any(|&len| {
                prefixes_of(stored.network(), [len]).any(|prefix| self.changed.contains(&prefix))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(text: &str) -> IpNet {
        text.parse().expect("a network")
    }

    /// Both ways of finding the sharing entries agree on every stored
    /// entry of a small universe: the candidates are exactly the entries
    /// `shares` accepts.
    #[test]
    fn candidates_and_the_scan_agree() {
        let lengths = ActiveLengths::new(&[32, 24, 16], &[128, 64]).expect("valid lengths");
        let changed = [
            net("198.18.1.7/32"),
            net("198.18.2.0/23"),
            net("198.19.0.0/16"),
            net("2001:db8::/64"),
        ];
        let sharing = KeySharing::new(changed, &lengths);
        let candidates: HashSet<IpNet> = sharing
            .candidates(1 << 20)
            .expect("few candidates")
            .into_iter()
            .collect();
        let mut universe = Vec::new();
        for len in 8..=32 {
            for base in [
                "198.18.1.7",
                "198.18.2.200",
                "198.18.3.1",
                "198.19.77.1",
                "198.20.0.1",
            ] {
                universe.push(
                    IpNet::new(base.parse().expect("an address"), len)
                        .expect("a length")
                        .trunc(),
                );
            }
        }
        for len in [32, 48, 56, 60, 63, 64, 65, 100, 128] {
            universe.push(
                IpNet::new("2001:db8::1".parse().expect("an address"), len)
                    .expect("a length")
                    .trunc(),
            );
        }
        for stored in universe {
            assert_eq!(
                sharing.shares(&stored),
                candidates.contains(&stored),
                "{stored}"
            );
        }
    }

    #[test]
    fn too_many_candidates_is_none() {
        let lengths = ActiveLengths::new(&[32], &[]).expect("valid lengths");
        let sharing = KeySharing::new([net("198.18.0.0/16")], &lengths);
        assert!(sharing.candidates(1000).is_none());
        assert!(sharing.shares(&net("198.18.5.5/32")));
        assert!(sharing.shares(&net("198.0.0.0/8")));
        assert!(!sharing.shares(&net("198.19.0.0/16")));
    }
}
