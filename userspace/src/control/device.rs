//! cfctl's serial target: the blocklist verbs on a filter device (the
//! firmware), on top of [`DeviceClient`].
//!
//! A device keeps no entry list, only its filter, so:
//!
//! * `import` builds the whole filter on the host with `filter-core` from a
//!   [`KeyPlan`] and pushes it as a snapshot (the device checks it in full
//!   before it replaces its live filter, and saves it): the list *replaces*
//!   what the device held. The device probes every active prefix length up
//!   to the address's own, so its plan may activate every entry length and
//!   expand nothing: each entry is exactly one filter key, which keeps a
//!   later `del` of an imported entry exact;
//! * `add` and `del` send one key per entry at the entry's own length; the
//!   device counts copies, so an entry added twice needs two deletes. An
//!   add that finds the device full deletes what it added: nothing is
//!   half-applied;
//! * `check` asks the device; `status`, `stats` and `save` pass through.

use filter_core::protocol::{self, Info, Item, Prefix, PrefixLengths, Stats, Traffic};
use filter_core::Fingerprint;
use ipnet::IpNet;
use std::net::IpAddr;
use std::time::Duration;

pub use crate::device::PortSettings;
use crate::device::{DeviceClient, DeviceError, LinkTiming, Port};
use crate::filter::{self, by_shape};
use crate::plan::{KeyPlan, PlanError, PlanLimits};
use crate::FilterShape;

/// How long to wait for each answer (a snapshot commit verifies and saves
/// the whole filter), resending a request after a second of silence: a
/// resent request is answered again but executed once (request ids, see
/// [`crate::device::link`]).
const DEVICE_TIMING: LinkTiming = LinkTiming {
    deadline: Duration::from_secs(30),
    resend_after: Duration::from_secs(1),
};

/// Why a device operation failed.
#[derive(Debug, thiserror::Error)]
pub enum DeviceControlError {
    /// The link or the device failed.
    #[error("{target}: {source}")]
    Device {
        /// The device as given.
        target: String,
        /// What went wrong.
        source: DeviceError,
    },
    /// The entries cannot be planned for the device.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The list does not fit in the device's filter.
    #[error("{target}: the device's filter of {slots} slots cannot hold {keys} entries")]
    Full {
        /// The device as given.
        target: String,
        /// Entries given.
        keys: usize,
        /// Slots of the device's filter.
        slots: u32,
    },
    /// The device's filter has a shape cfctl cannot build.
    #[error(
        "{target}: cannot build a filter of {bits}-bit fingerprints in {slots}-slot buckets \
         (cfctl builds 8/8, 16/4 and 32/4)"
    )]
    UnknownShape {
        /// The device as given.
        target: String,
        /// Fingerprint width.
        bits: u8,
        /// Slots per bucket.
        slots: u8,
    },
}

type Result<T, E = DeviceControlError> = std::result::Result<T, E>;

/// What an import did.
/// The counters of `cfctl --device ... stats`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DeviceStats {
    /// Of the requests (at the top level of the JSON).
    #[serde(flatten)]
    pub requests: Stats,
    /// Of the frames checked on the device's Ethernet port.
    pub traffic: Traffic,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct DeviceImport {
    /// Entries pushed.
    pub entries: usize,
    /// Entries in the device's filter after the commit.
    pub device_entries: u32,
    /// Sequence number of the saved image.
    pub sequence: u32,
}

/// What a delete did, per entry.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DeviceDelete {
    /// Entries the device held and deleted.
    pub deleted: Vec<IpNet>,
    /// Entries the device did not hold.
    pub not_listed: Vec<IpNet>,
}

/// A connected filter device.
pub struct DeviceControl {
    target: String,
    client: DeviceClient<Box<dyn Port>>,
    info: Info,
}

impl DeviceControl {
    /// Connects to `target` (a serial port or pty, a unix socket, or
    /// `tcp:HOST:PORT`) and says hello.
    pub fn open(target: &str, settings: &PortSettings) -> Result<Self> {
        let (client, info) =
            DeviceClient::open(target, settings, DEVICE_TIMING).map_err(|source| {
                DeviceControlError::Device {
                    target: target.to_owned(),
                    source,
                }
            })?;
        Ok(Self {
            target: target.to_owned(),
            client,
            info,
        })
    }

    fn device_error(&self, source: DeviceError) -> DeviceControlError {
        DeviceControlError::Device {
            target: self.target.clone(),
            source,
        }
    }

    /// The device's parameters and state, fresh from the device.
    pub fn info(&mut self) -> Result<Info> {
        self.info = self
            .client
            .hello()
            .map_err(|error| self.device_error(error))?;
        Ok(self.info)
    }

    /// Replaces the device's filter with one holding `nets`, built on the
    /// host and pushed as a snapshot (which the device also saves).
    pub fn import(&mut self, nets: &[IpNet]) -> Result<DeviceImport> {
        let limits = PlanLimits {
            ipv4_lengths: 33,
            ipv6_lengths: 129,
            max_keys: u64::from(self.info.capacity),
        };
        let plan = KeyPlan::build(nets.iter().copied(), limits)?;
        let shape = match (self.info.fingerprint_bits, self.info.slots_per_bucket) {
            (8, 8) => FilterShape::Fingerprint8,
            (16, 4) => FilterShape::Fingerprint16,
            (32, 4) => FilterShape::Fingerprint32,
            (bits, slots) => {
                return Err(DeviceControlError::UnknownShape {
                    target: self.target.clone(),
                    bits,
                    slots,
                })
            }
        };
        let seed = filter::random_seed();
        let bucket_count = self.info.bucket_count as usize;
        let snapshot =
            by_shape!(shape, snapshot_of(&plan, bucket_count, seed)).ok_or_else(|| {
                DeviceControlError::Full {
                    target: self.target.clone(),
                    keys: plan.key_count(),
                    slots: self.info.capacity,
                }
            })?;
        let mut lengths = PrefixLengths::new();
        for family in [
            filter_core::AddressFamily::Ipv4,
            filter_core::AddressFamily::Ipv6,
        ] {
            for &len in plan.lengths().get(family) {
                lengths.insert(family, len);
            }
        }
        let (device_entries, sequence) = self
            .client
            .push_snapshot(&snapshot, lengths)
            .map_err(|error| self.device_error(error))?;
        Ok(DeviceImport {
            entries: plan.entry_count(),
            device_entries,
            sequence,
        })
    }

    /// Adds `nets`; if the device fills up, deletes what this call added
    /// and fails.
    pub fn add(&mut self, nets: &[IpNet]) -> Result<usize> {
        let items: Vec<Item<'_>> = nets.iter().map(|net| Item::Net(prefix_of(net))).collect();
        let mut added = 0;
        for batch in items.chunks(protocol::MAX_BATCH) {
            match self.client.add_batch(batch) {
                Ok(count) => added += count,
                Err(DeviceError::Refused(protocol::Error::Full { added: partial })) => {
                    added += usize::from(partial);
                    for item in &items[..added.min(items.len())] {
                        self.client
                            .delete(*item)
                            .map_err(|error| self.device_error(error))?;
                    }
                    return Err(DeviceControlError::Full {
                        target: self.target.clone(),
                        keys: self.info.entries as usize + items.len(),
                        slots: self.info.capacity,
                    });
                }
                Err(error) => return Err(self.device_error(error)),
            }
        }
        Ok(added)
    }

    /// Deletes one copy of each of `nets`.
    pub fn delete(&mut self, nets: &[IpNet]) -> Result<DeviceDelete> {
        let mut report = DeviceDelete {
            deleted: Vec::new(),
            not_listed: Vec::new(),
        };
        for net in nets {
            let found = self
                .client
                .delete(Item::Net(prefix_of(net)))
                .map_err(|error| self.device_error(error))?;
            if found {
                report.deleted.push(*net);
            } else {
                report.not_listed.push(*net);
            }
        }
        Ok(report)
    }

    /// Whether the device reports `address` listed.
    pub fn check(&mut self, address: IpAddr) -> Result<bool> {
        let item = Item::Net(prefix_of(&IpNet::from(address)));
        self.client
            .check(item)
            .map_err(|error| self.device_error(error))
    }

    /// The device's counters: of requests, and of the frames it checked
    /// on its Ethernet port.
    pub fn stats(&mut self) -> Result<DeviceStats> {
        let requests = self
            .client
            .stats()
            .map_err(|error| self.device_error(error))?;
        let traffic = self
            .client
            .traffic()
            .map_err(|error| self.device_error(error))?;
        Ok(DeviceStats { requests, traffic })
    }

    /// Saves the live filter to the device's flash; returns the image's
    /// sequence number.
    pub fn save(&mut self) -> Result<u32> {
        self.client.save().map_err(|error| self.device_error(error))
    }
}

/// The protocol's prefix of `net`.
fn prefix_of(net: &IpNet) -> Prefix {
    match net {
        IpNet::V4(net) => Prefix::V4 {
            address: net.network().octets(),
            len: net.prefix_len(),
        },
        IpNet::V6(net) => Prefix::V6 {
            address: net.network().octets(),
            len: net.prefix_len(),
        },
    }
}

/// The snapshot of a filter of `bucket_count` buckets keyed with `seed`
/// holding every key of `plan`; `None` if they do not fit.
fn snapshot_of<F: Fingerprint, const S: usize>(
    plan: &KeyPlan,
    bucket_count: usize,
    seed: u64,
) -> Option<Vec<u8>> {
    let filter = filter::build::<F, S>(plan.keys(), bucket_count, seed).ok()?;
    let mut snapshot = vec![0u8; usize::try_from(filter.snapshot_len()).ok()?];
    filter.write_snapshot(&mut snapshot).ok()?;
    Some(snapshot)
}
