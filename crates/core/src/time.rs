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

/// RFC 3339 in UTC with milliseconds (`2026-11-22T12:36:04.967Z`), as the API's timestamps
/// print, so that the times in rule explanations and logs can be read and compared with them.
impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let millis = self.0.rem_euclid(1000);
        let secs = self.0.div_euclid(1000);
        let (year, month, day) = civil_from_days(secs.div_euclid(86_400));
        let of_day = secs.rem_euclid(86_400);
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
            of_day / 3600,
            of_day % 3600 / 60,
            of_day % 60
        )
    }
}

/// The proleptic Gregorian (year, month, day) of a count of days since 1970-01-01: shift the
/// epoch to 0000-03-01 so that the leap day ends each year, then count 400-year eras (146,097
/// days), years within the era and days within the year, months from March.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468; // days from 0000-03-01 to 1970-01-01
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
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
    }

    #[test]
    fn display_is_rfc3339_utc_with_millis() {
        // expected values from Python's datetime
        for (millis, text) in [
            (0, "1970-01-01T00:00:00.000Z"),
            (1234, "1970-01-01T00:00:01.234Z"),
            (-1, "1969-12-31T23:59:59.999Z"),
            (951_782_400_000, "2000-02-29T00:00:00.000Z"),
            (1_709_251_199_999, "2024-02-29T23:59:59.999Z"),
            (1_795_350_964_967, "2026-11-22T12:36:04.967Z"),
            (4_102_444_800_000, "2100-01-01T00:00:00.000Z"),
        ] {
            assert_eq!(Time::from_millis(millis).to_string(), text, "{millis}");
        }
    }

    #[test]
    fn every_day_from_1900_to_2298_follows_the_one_before() {
        // 1900-01-01 .. 2298-07-01: each day is the next calendar day (month lengths, leap
        // years incl. 1900 and 2100 not leap, 2000 leap)
        let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        let days_in = |y: i64, m: i64| match m {
            2 if leap(y) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        let mut prev = civil_from_days(-25_567); // 1900-01-01
        assert_eq!(prev, (1900, 1, 1));
        for d in -25_566..120_000 {
            let (y, m, day) = civil_from_days(d);
            let (py, pm, pd) = prev;
            let expected = if pd < days_in(py, pm) {
                (py, pm, pd + 1)
            } else if pm < 12 {
                (py, pm + 1, 1)
            } else {
                (py + 1, 1, 1)
            };
            assert_eq!((y, m, day), expected, "day {d}");
            prev = (y, m, day);
        }
    }
}
