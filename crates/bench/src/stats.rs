//! Percentiles of measured durations.

use std::time::Duration;

/// Summary of a set of durations.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// How many.
    pub count: usize,
    /// Median.
    pub p50: Duration,
    /// 90th percentile.
    pub p90: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Largest.
    pub max: Duration,
}

/// The nearest-rank percentile `q` (0..=1) of sorted `samples`.
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Summary {
    /// Summarises `samples` (any order); `None` when empty.
    pub fn of(mut samples: Vec<Duration>) -> Option<Summary> {
        if samples.is_empty() {
            return None;
        }
        samples.sort();
        Some(Summary {
            count: samples.len(),
            p50: percentile(&samples, 0.50),
            p90: percentile(&samples, 0.90),
            p99: percentile(&samples, 0.99),
            max: samples[samples.len() - 1],
        })
    }
}

/// Seconds with 3 decimals.
pub fn secs(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64())
}

/// A number with thousands separators.
pub fn thousands(n: f64) -> String {
    let s = format!("{:.0}", n.max(0.0));
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let ms = |v: u64| Duration::from_millis(v);
        let s = Summary::of((1..=100).rev().map(ms).collect()).unwrap();
        assert_eq!(s.count, 100);
        assert_eq!(s.p50, ms(50));
        assert_eq!(s.p90, ms(90));
        assert_eq!(s.p99, ms(99));
        assert_eq!(s.max, ms(100));
        let one = Summary::of(vec![ms(7)]).unwrap();
        assert_eq!((one.p50, one.p99, one.max), (ms(7), ms(7), ms(7)));
        assert!(Summary::of(vec![]).is_none());
    }

    #[test]
    fn formatting() {
        assert_eq!(thousands(1234567.4), "1,234,567");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(secs(Duration::from_millis(2500)), "2.500");
    }
}
