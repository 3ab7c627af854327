//! Time as cfctl records and shows it: points in time as Unix seconds or
//! milliseconds (what the store, the states and the JSON reports hold),
//! the monotonic clock of the XDP program's events,
//! and back. Every conversion is here, so that all agree on the epoch, on
//! rounding (always down) and on times before 1970 (read as the epoch).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `time` in whole seconds since the Unix epoch (0 before it).
pub fn unix_seconds(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// `time` in whole milliseconds since the Unix epoch (0 before it).
pub fn unix_millis(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |since| {
        u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
    })
}

/// `time` in seconds since the Unix epoch, with its fraction (Prometheus
/// timestamps).
pub fn unix_seconds_f64(time: SystemTime) -> f64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0.0, |since| since.as_secs_f64())
}

/// The time `seconds` after the Unix epoch.
pub fn from_unix_seconds(seconds: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(seconds)
}

/// The time `millis` after the Unix epoch.
pub fn from_unix_millis(millis: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(millis)
}

/// `seconds` since the Unix epoch as a UTC date and time, as reports show
/// it: `YYYY-MM-DD HH:MM:SSZ`.
pub fn utc(seconds: u64) -> String {
    humantime::format_rfc3339_seconds(from_unix_seconds(seconds))
        .to_string()
        .replacen('T', " ", 1)
}

/// The wall-clock time of a `CLOCK_MONOTONIC` reading in nanoseconds
/// (what the XDP program stamps its events with), by the two clocks'
/// difference now.
pub fn from_monotonic_nanos(nanos: u64) -> SystemTime {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec to write to.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    let monotonic_now = Duration::new(now.tv_sec as u64, now.tv_nsec as u32);
    let at = Duration::from_nanos(nanos);
    let wall_now = SystemTime::now();
    match monotonic_now.checked_sub(at) {
        Some(ago) => wall_now - ago,
        None => wall_now + (at - monotonic_now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_utc_civil_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00Z");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00Z");
        assert_eq!(utc(1_764_460_800), "2025-11-30 00:00:00Z");
        assert_eq!(utc(4_107_542_399), "2100-02-28 23:59:59Z");
    }
}
