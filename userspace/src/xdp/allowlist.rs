//! The allowlist of a blocklist: one LPM trie per family, whose entries
//! pass whatever the filter says, and the per-family entry counts in the
//! config that let the program skip a trie while it is empty. A count goes
//! up before an entry is inserted and is set exactly after every change,
//! so the program never skips a trie that holds an entry.

use std::collections::HashSet;
use std::mem::offset_of;
use std::net::IpAddr;
use std::sync::atomic::Ordering;

use aya::maps::lpm_trie::Key;
use aya::maps::{LpmTrie, Map, MapData, MapError};
use cfxdp::{Config, ALLOW_V4_MAP, ALLOW_V6_MAP};
use filter_core::AddressFamily;

use super::maps::FilterMaps;
use super::{Result, XdpError};
use crate::plan::family_of_address;

impl FilterMaps {
    /// Adds `address/prefix_len` to the allowlist.
    pub fn allow(&mut self, address: IpAddr, prefix_len: u8) -> Result<()> {
        self.update_allowlist(&[(address, prefix_len)], &[])
    }

    /// Removes `address/prefix_len` from the allowlist.
    pub fn disallow(&mut self, address: IpAddr, prefix_len: u8) -> Result<()> {
        self.update_allowlist(&[], &[(address, prefix_len)])
    }

    /// Adds the `allow` entries (address, prefix length) to the allowlist,
    /// then removes the `disallow` ones, and stores the entry counts of the
    /// families changed once, at the end. If an add fails (the trie is
    /// full), the adds before it are taken back and nothing is removed.
    pub fn update_allowlist(
        &mut self,
        allow: &[(IpAddr, u8)],
        disallow: &[(IpAddr, u8)],
    ) -> Result<()> {
        let result = self.apply_allowlist_changes(allow, disallow);
        let families: HashSet<AddressFamily> = allow
            .iter()
            .chain(disallow)
            .map(|&(address, _)| family_of_address(address))
            .collect();
        for family in families {
            self.count_allowlist(family)?;
        }
        result
    }

    fn apply_allowlist_changes(
        &mut self,
        allow: &[(IpAddr, u8)],
        disallow: &[(IpAddr, u8)],
    ) -> Result<()> {
        for (index, &(address, prefix_len)) in allow.iter().enumerate() {
            if let Err(error) = self.change_allowlist(address, prefix_len, true) {
                for &(done, done_len) in &allow[..index] {
                    let _ = self.change_allowlist(done, done_len, false);
                }
                return Err(error);
            }
        }
        for &(address, prefix_len) in disallow {
            self.change_allowlist(address, prefix_len, false)?;
        }
        Ok(())
    }

    /// Makes the allowlist exactly `entries` (address, prefix length):
    /// adds the missing ones first, then removes the others, so an address
    /// that stays allowlisted is never dropped on the way.
    pub fn set_allowlist(&mut self, entries: &[(IpAddr, u8)]) -> Result<()> {
        let mut result = entries.iter().try_for_each(|&(address, prefix_len)| {
            self.change_allowlist(address, prefix_len, true)
        });
        if result.is_ok() {
            let keep: HashSet<(IpAddr, u8)> = entries.iter().copied().collect();
            result = remove_other_keys(
                &mut self.allow_v4,
                ALLOW_V4_MAP,
                &keep,
                |octets: [u8; 4]| IpAddr::from(octets),
            )
            .and_then(|()| {
                remove_other_keys(
                    &mut self.allow_v6,
                    ALLOW_V6_MAP,
                    &keep,
                    |octets: [u8; 16]| IpAddr::from(octets),
                )
            });
        }
        self.count_allowlist(AddressFamily::Ipv4)?;
        self.count_allowlist(AddressFamily::Ipv6)?;
        result
    }

    /// The config field that tells the program whether the allowlist of
    /// `family` may hold entries.
    fn allowlist_entries_field(family: AddressFamily) -> usize {
        match family {
            AddressFamily::Ipv4 => offset_of!(Config, allowlist_ipv4_entries),
            AddressFamily::Ipv6 => offset_of!(Config, allowlist_ipv6_entries),
        }
    }

    /// Stores the number of entries in the allowlist of `family` into the
    /// config, after a change.
    fn count_allowlist(&mut self, family: AddressFamily) -> Result<()> {
        let entries = match family {
            AddressFamily::Ipv4 => trie_len::<[u8; 4]>(&mut self.allow_v4, ALLOW_V4_MAP)?,
            AddressFamily::Ipv6 => trie_len::<[u8; 16]>(&mut self.allow_v6, ALLOW_V6_MAP)?,
        };
        self.store_config_u32(Self::allowlist_entries_field(family), entries);
        Ok(())
    }

    /// Inserts (`add`) or removes one allowlist entry. Before an insert,
    /// the family's entry count goes up by one, so the program looks the
    /// new entry up as soon as it is there; callers store the exact count
    /// afterwards ([`Self::count_allowlist`]).
    fn change_allowlist(&mut self, address: IpAddr, prefix_len: u8, add: bool) -> Result<()> {
        let family = family_of_address(address);
        if prefix_len > family.max_prefix_len() {
            return Err(XdpError::BadPrefixLength {
                family,
                len: prefix_len,
            });
        }
        if add {
            if let Some(entries) = self
                .fields()
                .atomic_u32(Self::allowlist_entries_field(family))
            {
                entries.fetch_add(1, Ordering::AcqRel);
            }
        }
        match address {
            IpAddr::V4(address) => change_trie(
                &mut self.allow_v4,
                ALLOW_V4_MAP,
                Key::new(u32::from(prefix_len), address.octets()),
                add,
            ),
            IpAddr::V6(address) => change_trie(
                &mut self.allow_v6,
                ALLOW_V6_MAP,
                Key::new(u32::from(prefix_len), address.octets()),
                add,
            ),
        }
    }
}

/// The number of entries in the allowlist trie `map`.
fn trie_len<K: aya::Pod>(map: &mut Map, name: &'static str) -> Result<u32> {
    let trie = LpmTrie::<&mut MapData, K, u8>::try_from(map)
        .map_err(|source| XdpError::Map { name, source })?;
    let mut entries = 0u32;
    for key in trie.keys() {
        key.map_err(|source| XdpError::Map { name, source })?;
        entries += 1;
    }
    Ok(entries)
}

/// Removes from the allowlist trie `map` every key whose (address, prefix
/// length) is not in `keep`.
fn remove_other_keys<K: aya::Pod>(
    map: &mut Map,
    name: &'static str,
    keep: &HashSet<(IpAddr, u8)>,
    address_of: fn(K) -> IpAddr,
) -> Result<()> {
    let mut trie = LpmTrie::<&mut MapData, K, u8>::try_from(map)
        .map_err(|source| XdpError::Map { name, source })?;
    let others = trie
        .keys()
        .collect::<Result<Vec<Key<K>>, MapError>>()
        .map_err(|source| XdpError::Map { name, source })?
        .into_iter()
        .filter(|key| {
            let prefix_len = u8::try_from(key.prefix_len()).unwrap_or(u8::MAX);
            !keep.contains(&(address_of(key.data()), prefix_len))
        })
        .collect::<Vec<_>>();
    for key in others {
        trie.remove(&key)
            .map_err(|source| XdpError::Map { name, source })?;
    }
    Ok(())
}

/// Inserts (`add`) or removes `key` in the allowlist trie `map`.
fn change_trie<K: aya::Pod>(
    map: &mut Map,
    name: &'static str,
    key: Key<K>,
    add: bool,
) -> Result<()> {
    let mut trie = LpmTrie::<&mut MapData, K, u8>::try_from(map)
        .map_err(|source| XdpError::Map { name, source })?;
    let result = if add {
        trie.insert(&key, 1, 0)
    } else {
        trie.remove(&key)
    };
    result.map_err(|source| XdpError::Map { name, source })
}
