//! The program's sampled drops: the sampling settings in the config
//! ([`Sampling`]), the per-CPU samplers' counts ([`SamplerCounts`]) and the
//! reader of the ring of [`DropEvent`]s ([`DropEvents`]).
//!
//! The program samples a drop when a `1 / one_in` draw and then its CPU's
//! token bucket (`rate` per second, at most `burst` at once) let it, and
//! copies the frame's first `frame_bytes` bytes into the event. The
//! settings are config fields the program reads once per dropped packet,
//! so they change at run time with one atomic store each.

use std::mem::{offset_of, size_of};
use std::time::Duration;

use aya::maps::{Map, MapData, PerCpuArray, RingBuf};
use cfxdp::{Config, DropEvent, Sampler, DROP_EVENTS_MAP, MAX_EVENT_FRAME_BYTES, SAMPLERS_MAP};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use serde::{Deserialize, Serialize};

use super::maps::FilterMaps;
use super::{PinDir, Result, XdpError};

const NANOS_PER_SECOND: u64 = 1_000_000_000;

/// How the program samples its drops. Missing fields read as their
/// defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Sampling {
    /// Events per second and CPU at most; 0 turns sampling off.
    pub rate: u32,
    /// Events one CPU writes at once at most (the bucket's depth).
    pub burst: u32,
    /// One drop in this many is a candidate (1: every one).
    pub one_in: u32,
    /// Frame bytes each event carries, 0 to [`MAX_EVENT_FRAME_BYTES`].
    pub frame_bytes: u32,
}

impl Sampling {
    /// Most events per second and CPU a setting may ask for.
    pub const MAX_RATE: u32 = 1_000_000;
    /// Most one-in-N a setting may ask for.
    pub const MAX_ONE_IN: u32 = 1_000_000;

    /// The first field out of range, as (name, value, what it must be).
    pub fn invalid(&self) -> Option<(&'static str, u32, String)> {
        let fields = [
            ("rate", self.rate, 0, Self::MAX_RATE),
            ("burst", self.burst, 1, Self::MAX_RATE),
            ("one-in", self.one_in, 1, Self::MAX_ONE_IN),
            (
                "frame-bytes",
                self.frame_bytes,
                0,
                MAX_EVENT_FRAME_BYTES as u32,
            ),
        ];
        fields
            .into_iter()
            .find(|&(_, value, low, high)| !(low..=high).contains(&value))
            .map(|(name, value, low, high)| (name, value, format!("{low} to {high}")))
    }
}

impl Default for Sampling {
    /// 1,000 events per second and CPU in bursts of up to 1,000, every
    /// drop a candidate, 128 frame bytes: exact attribution up to that
    /// rate, and at most about 170 KiB/s per CPU to read.
    fn default() -> Self {
        Self {
            rate: 1000,
            burst: 1000,
            one_in: 1,
            frame_bytes: MAX_EVENT_FRAME_BYTES as u32,
        }
    }
}

/// What the samplers did, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SamplerCounts {
    /// Events written to the ring.
    pub sampled: u64,
    /// Events lost to a full ring.
    pub lost: u64,
    /// Drops the draw or the bucket left unsampled.
    pub skipped: u64,
}

impl FilterMaps {
    /// Makes the program sample as `sampling` says (a valid setting, see
    /// [`Sampling::invalid`]).
    pub fn set_sampling(&self, sampling: &Sampling) {
        for (offset, value) in [
            (offset_of!(Config, sample_rate), sampling.rate),
            (offset_of!(Config, sample_burst), sampling.burst),
            (offset_of!(Config, sample_one_in), sampling.one_in),
            (offset_of!(Config, sample_frame_bytes), sampling.frame_bytes),
        ] {
            self.store_config_u32(offset, value);
        }
        let interval_ns = NANOS_PER_SECOND
            .checked_div(u64::from(sampling.rate))
            .unwrap_or(0);
        let credit_ns = interval_ns * u64::from(sampling.burst.max(1));
        // The interval last: it switches sampling on or off.
        for (offset, value) in [
            (offset_of!(Config, sample_credit_ns), credit_ns),
            (offset_of!(Config, sample_interval_ns), interval_ns),
        ] {
            self.store_config_u64(offset, value);
        }
    }

    /// The live sampling settings.
    pub fn sampling(&self) -> Sampling {
        let config = self.config();
        Sampling {
            rate: config.sample_rate,
            burst: config.sample_burst,
            one_in: config.sample_one_in,
            frame_bytes: config.sample_frame_bytes,
        }
    }

    /// The samplers' counts, summed over CPUs.
    pub fn sampler_counts(&self) -> Result<SamplerCounts> {
        let map_error = |source| XdpError::Map {
            name: SAMPLERS_MAP,
            source,
        };
        let samplers =
            PerCpuArray::<&MapData, [u64; size_of::<Sampler>() / 8]>::try_from(&self.samplers)
                .map_err(map_error)?;
        let per_cpu = samplers.get(&0, 0).map_err(map_error)?;
        Ok(per_cpu.iter().fold(SamplerCounts::default(), |sum, words| {
            let sampler = sampler_of(words);
            SamplerCounts {
                sampled: sum.sampled + sampler.sampled,
                lost: sum.lost + sampler.lost,
                skipped: sum.skipped + sampler.skipped,
            }
        }))
    }
}

/// A [`Sampler`] from its words as the map holds them.
fn sampler_of(words: &[u64; size_of::<Sampler>() / 8]) -> Sampler {
    let [credit_ns, refilled_ns, sampled, lost, skipped, skip_run, empty_run] = *words;
    Sampler {
        credit_ns,
        refilled_ns,
        sampled,
        lost,
        skipped,
        skip_run,
        empty_run,
    }
}

/// The reader of a pinned program's ring of sampled drops. The ring has
/// one consumer position: see [`crate::control::sampled`] for how readers
/// take turns.
pub struct DropEvents {
    ring: RingBuf<MapData>,
    maps: FilterMaps,
}

impl DropEvents {
    /// The ring of the program pinned in `pins`; `None` if none is.
    pub fn open(pins: &PinDir) -> Result<Option<Self>> {
        let Some(live) = pins.open()? else {
            return Ok(None);
        };
        let path = pins.path().join(DROP_EVENTS_MAP);
        let ring = MapData::from_pin(&path)
            .and_then(Map::from_map_data)
            .and_then(RingBuf::try_from)
            .map_err(|source| XdpError::OpenPinned { path, source })?;
        Ok(Some(Self {
            ring,
            maps: live.into_maps(),
        }))
    }

    /// Waits until the ring is half full or `timeout` has passed, then
    /// hands every event waiting to `each`; how many there were. The
    /// program wakes a reader only at half full (a wakeup would cost the
    /// dropping CPU an interrupt), so a reader reads on its own schedule:
    /// `timeout` is how late it may see an event.
    pub fn poll(&mut self, timeout: Duration, mut each: impl FnMut(&DropEvent)) -> Result<usize> {
        let timeout = Timespec::try_from(timeout).ok();
        let mut fds = [PollFd::new(&self.ring, PollFlags::IN)];
        match poll(&mut fds, timeout.as_ref()) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(error) => {
                return Err(XdpError::Poll {
                    name: DROP_EVENTS_MAP,
                    source: error.into(),
                })
            }
        }
        Ok(self.drain(&mut each))
    }

    fn drain(&mut self, each: &mut impl FnMut(&DropEvent)) -> usize {
        let mut read = 0;
        while let Some(item) = self.ring.next() {
            if item.len() >= size_of::<DropEvent>() {
                // SAFETY: the item holds a whole DropEvent, written by the
                // program; any bytes are a valid DropEvent.
                let event = unsafe { item.as_ptr().cast::<DropEvent>().read_unaligned() };
                each(&event);
                read += 1;
            }
        }
        read
    }

    /// The frame bytes the program copies into each event now.
    pub fn frame_bytes(&self) -> u32 {
        self.maps.sampling().frame_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_out_of_range_are_named_with_their_bounds() {
        assert_eq!(Sampling::default().invalid(), None);
        let off = Sampling {
            rate: 0,
            ..Sampling::default()
        };
        assert_eq!(off.invalid(), None);
        let too_long = Sampling {
            frame_bytes: 129,
            ..Sampling::default()
        };
        assert_eq!(
            too_long.invalid(),
            Some(("frame-bytes", 129, "0 to 128".to_owned()))
        );
        let no_burst = Sampling {
            burst: 0,
            ..Sampling::default()
        };
        assert_eq!(no_burst.invalid().map(|(name, ..)| name), Some("burst"));
        let never = Sampling {
            one_in: 0,
            ..Sampling::default()
        };
        assert_eq!(never.invalid().map(|(name, ..)| name), Some("one-in"));
    }
}
