//! Time as a value. `flotilla-core` never reads a clock: every rule that depends on time
//! takes `now: Time` from its caller.

use std::fmt;
use std::ops::{Add, Sub};
use std::time::Duration;

/// A point in time: milliseconds since the Unix epoch (UTC).
///
/// Karmada stores `metav1.Time` with second precision; we keep milliseconds so that
/// compressed test timers (sub-second thresholds) still order correctly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(i64);

// === impl Time ===

impl Time {
    /// The Unix epoch.
    pub const EPOCH: Time = Time(0);

    /// A time from milliseconds since the epoch.
    pub const fn from_millis(millis: i64) -> Self {
        Time(millis)
    }

    /// A time from whole seconds since the epoch.
    pub const fn from_secs(secs: i64) -> Self {
        Time(secs.saturating_mul(1000))
    }

    /// Milliseconds since the epoch.
    pub const fn as_millis(self) -> i64 {
        self.0
    }

    /// `self + secs` seconds (saturating; negative seconds move backwards).
    pub const fn plus_secs(self, secs: i64) -> Self {
        Time(self.0.saturating_add(secs.saturating_mul(1000)))
    }

    /// The non-negative duration from `earlier` to `self`; zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Time) -> Duration {
        let diff = self.0.saturating_sub(earlier.0);
        Duration::from_millis(u64::try_from(diff).unwrap_or(0))
    }
}

impl Add<Duration> for Time {
    type Output = Time;
    fn add(self, rhs: Duration) -> Time {
        let ms = i64::try_from(rhs.as_millis()).unwrap_or(i64::MAX);
        Time(self.0.saturating_add(ms))
    }
}

impl Sub<Duration> for Time {
    type Output = Time;
    fn sub(self, rhs: Duration) -> Time {
        let ms = i64::try_from(rhs.as_millis()).unwrap_or(i64::MAX);
        Time(self.0.saturating_sub(ms))
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:03}s",
            self.0.div_euclid(1000),
            self.0.rem_euclid(1000)
        )
    }
}

/// Whole seconds of a duration, rounded up, as Karmada requeues "after the remaining whole
/// seconds" (GE-8.4).
pub fn ceil_secs(d: Duration) -> u64 {
    let s = d.as_secs();
    if d.subsec_nanos() > 0 { s + 1 } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_and_orders() {
        let t = Time::from_secs(10);
        assert_eq!(t + Duration::from_millis(1500), Time::from_millis(11_500));
        assert_eq!(t - Duration::from_secs(11), Time::from_millis(-1000));
        assert_eq!(t.plus_secs(-10), Time::EPOCH);
        assert_eq!(Time::from_secs(5).saturating_since(t), Duration::ZERO);
        assert_eq!(
            t.saturating_since(Time::from_secs(4)),
            Duration::from_secs(6)
        );
        assert_eq!(ceil_secs(Duration::from_millis(1001)), 2);
        assert_eq!(ceil_secs(Duration::from_secs(3)), 3);
        assert_eq!(Time::from_millis(1234).to_string(), "1.234s");
    }
}
