//! Which prefix lengths the data plane probes: the bounds of a plan
//! ([`PlanLimits`]), the active lengths of a filter ([`ActiveLengths`],
//! longest first, the one probe order every room uses), and the choice of
//! the best lengths for a set of entries ([`choose_lengths`]); see the
//! [module documentation](super) for the dynamic programme.

use filter_core::AddressFamily;
use serde::{Deserialize, Serialize};

/// Default bound on expanded keys: 16 Mi keys, as many as the largest filter
/// the data plane is sized for.
pub const DEFAULT_MAX_KEYS: u64 = 1 << 24;

/// Bounds on a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PlanLimits {
    /// Most active IPv4 prefix lengths (probes per IPv4 packet).
    pub ipv4_lengths: usize,
    /// Most active IPv6 prefix lengths (probes per IPv6 packet).
    pub ipv6_lengths: usize,
    /// Most expanded keys, both families together.
    pub max_keys: u64,
}

impl Default for PlanLimits {
    /// The data plane's probe budget for both families, [`DEFAULT_MAX_KEYS`].
    fn default() -> Self {
        Self {
            ipv4_lengths: cfxdp::MAX_PREFIX_LENGTHS,
            ipv6_lengths: cfxdp::MAX_PREFIX_LENGTHS,
            max_keys: DEFAULT_MAX_KEYS,
        }
    }
}

impl PlanLimits {
    /// The probe budget of `family`.
    pub const fn budget(&self, family: AddressFamily) -> usize {
        match family {
            AddressFamily::Ipv4 => self.ipv4_lengths,
            AddressFamily::Ipv6 => self.ipv6_lengths,
        }
    }
}

/// Active prefix lengths per family, longest first: what the XDP program
/// probes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ActiveLengths {
    pub(super) ipv4: Vec<u8>,
    pub(super) ipv6: Vec<u8>,
}

impl ActiveLengths {
    /// Lengths for each family, in any order, duplicates ignored; `None` if
    /// a length is longer than its family's addresses.
    pub fn new(ipv4: &[u8], ipv6: &[u8]) -> Option<Self> {
        Some(Self {
            ipv4: probe_order(AddressFamily::Ipv4, ipv4)?,
            ipv6: probe_order(AddressFamily::Ipv6, ipv6)?,
        })
    }

    /// The IPv4 lengths, longest first.
    pub fn ipv4(&self) -> &[u8] {
        &self.ipv4
    }

    /// The IPv6 lengths, longest first.
    pub fn ipv6(&self) -> &[u8] {
        &self.ipv6
    }

    /// The lengths of `family`, longest first.
    pub fn get(&self, family: AddressFamily) -> &[u8] {
        match family {
            AddressFamily::Ipv4 => &self.ipv4,
            AddressFamily::Ipv6 => &self.ipv6,
        }
    }

    /// The shortest active length of `family` that is at least `len`.
    pub(super) fn target(&self, family: AddressFamily, len: u8) -> Option<u8> {
        self.get(family)
            .iter()
            .rev()
            .copied()
            .find(|&active| active >= len)
    }
}

fn probe_order(family: AddressFamily, lengths: &[u8]) -> Option<Vec<u8>> {
    let mut sorted = lengths.to_vec();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    sorted.dedup();
    match sorted.first() {
        Some(&longest) if longest > family.max_prefix_len() => None,
        _ => Some(sorted),
    }
}

/// Keys an entry of length `len` expands to at length `target`, `None` if
/// more than `u128` can count.
pub(super) fn expansion_size(len: u8, target: u8) -> Option<u128> {
    1u128.checked_shl(u32::from(target - len))
}

/// The best active lengths for a family whose entries have `histogram[len]`
/// entries of each length: at most `budget` lengths, longest first, and the
/// number of keys they expand to (saturating). Empty if there are no
/// entries; `None` if there are entries and the budget is zero.
pub fn choose_lengths(histogram: &[u64], budget: usize) -> Option<(Vec<u8>, u128)> {
    let present: Vec<(u8, u64)> = (0u8..=u8::MAX)
        .zip(histogram.iter().copied())
        .filter(|&(_, count)| count > 0)
        .collect();
    if present.is_empty() {
        return Some((Vec::new(), 0));
    }
    if budget == 0 {
        return None;
    }
    // cost(from, to): keys for the present lengths at indices from..=to,
    // all expanded to the length at `to`.
    let cost = |from: usize, to: usize| -> u128 {
        let (target, _) = present[to];
        present[from..=to].iter().fold(0u128, |sum, &(len, count)| {
            let per_entry = expansion_size(len, target).unwrap_or(u128::MAX);
            sum.saturating_add(per_entry.saturating_mul(u128::from(count)))
        })
    };
    let n = present.len();
    let rounds = budget.min(n);
    // best[j][i] and the previous active index that achieved it.
    let mut best = vec![vec![(u128::MAX, None::<usize>); n]; rounds];
    for (i, slot) in best[0].iter_mut().enumerate() {
        *slot = (cost(0, i), None);
    }
    for j in 1..rounds {
        for i in j..n {
            let candidate = (j - 1..i)
                .map(|p| (best[j - 1][p].0.saturating_add(cost(p + 1, i)), Some(p)))
                .min_by_key(|&(keys, _)| keys);
            if let Some(candidate) = candidate {
                best[j][i] = candidate;
            }
        }
    }
    // Fewest keys; among equals, fewest lengths (fewer probes per packet).
    let (mut round, mut keys) = (0, best[0][n - 1].0);
    for (j, row) in best.iter().enumerate().skip(1) {
        if row[n - 1].0 < keys {
            (round, keys) = (j, row[n - 1].0);
        }
    }
    let mut lengths = Vec::with_capacity(round + 1);
    let mut index = Some(n - 1);
    while let Some(i) = index {
        lengths.push(present[i].0);
        index = best[round][i].1;
        round = round.saturating_sub(1);
    }
    Some((lengths, keys))
}
