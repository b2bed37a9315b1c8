//! Jittered exponential back-off, shared by the watcher (re-list / re-watch after errors) and
//! the work queue (per-key retries).

use std::time::Duration;

use rand::Rng;

/// An exponential back-off policy: `base · 2ⁿ` after the n-th consecutive failure, capped at
/// `max`, with optional "equal jitter" (the delay is drawn uniformly from `[d/2, d]`).
///
/// The defaults (5 ms → 1000 s) follow client-go's `DefaultControllerRateLimiter` per-item
/// limiter, which kube-runtime and Karmada's controllers use too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// The first delay. Default 5 ms (client-go `ItemExponentialFailureRateLimiter`).
    pub base: Duration,
    /// The largest delay. Default 1000 s (client-go).
    pub max: Duration,
    /// Whether to draw the delay from `[d/2, d]` so that many retrying clients spread out.
    /// Default false for the work queue (its tests assert exact doubling); the watcher
    /// turns it on.
    pub jitter: bool,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: Duration::from_millis(5),
            max: Duration::from_secs(1000),
            jitter: false,
        }
    }
}

// === impl Backoff ===

impl Backoff {
    /// A policy from `base` to `max`, without jitter.
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max,
            jitter: false,
        }
    }

    /// The same policy with jitter on or off.
    pub fn with_jitter(mut self, jitter: bool) -> Self {
        self.jitter = jitter;
        self
    }

    /// The delay before retry number `attempt` (0 = after the first failure): `base · 2^attempt`,
    /// capped at `max`, jittered if configured.
    pub fn delay(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX);
        let d = self.base.saturating_mul(factor).min(self.max);
        if self.jitter && !d.is_zero() {
            let half = d / 2;
            let nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
            half + Duration::from_nanos(rand::rng().random_range(0..=nanos))
        } else {
            d
        }
    }
}

/// A running back-off: counts consecutive failures and hands out the next delay.
#[derive(Clone, Debug)]
pub struct BackoffState {
    policy: Backoff,
    attempt: u32,
}

// === impl BackoffState ===

impl BackoffState {
    /// A fresh state (no failures yet).
    pub fn new(policy: Backoff) -> Self {
        Self { policy, attempt: 0 }
    }

    /// The delay to wait after one more failure.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.policy.delay(self.attempt);
        self.attempt = self.attempt.saturating_add(1);
        d
    }

    /// Forgets the failures after a success.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    /// Consecutive failures so far.
    pub fn attempts(&self) -> u32 {
        self.attempt
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_and_caps() {
        let b = Backoff::new(Duration::from_millis(10), Duration::from_millis(70));
        let got: Vec<u128> = (0..5).map(|i| b.delay(i).as_millis()).collect();
        assert_eq!(got, vec![10, 20, 40, 70, 70]);
        assert_eq!(
            b.delay(200),
            Duration::from_millis(70),
            "no overflow on huge attempts"
        );
    }

    #[test]
    fn jitter_stays_within_half_and_full() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(10)).with_jitter(true);
        for _ in 0..200 {
            let d = b.delay(1);
            assert!(
                d >= Duration::from_millis(100) && d <= Duration::from_millis(200),
                "{d:?}"
            );
        }
    }

    #[test]
    fn state_resets() {
        let mut s = BackoffState::new(Backoff::new(
            Duration::from_millis(1),
            Duration::from_secs(1),
        ));
        assert_eq!(s.next_delay(), Duration::from_millis(1));
        assert_eq!(s.next_delay(), Duration::from_millis(2));
        s.reset();
        assert_eq!(s.attempts(), 0);
        assert_eq!(s.next_delay(), Duration::from_millis(1));
    }
}

/// A back-off per key: consecutive attempts counted per key, each key's next delay from the
/// one policy. The work queue's failure back-off, and the scheduler's unschedulable retries
/// (SC-4.2/SC-4.4), are this.
#[derive(Clone, Debug)]
pub struct KeyedBackoff<T> {
    policy: Backoff,
    attempts: std::collections::HashMap<T, u32>,
}

// === impl KeyedBackoff ===

impl<T: std::hash::Hash + Eq> KeyedBackoff<T> {
    /// No key has attempts yet.
    pub fn new(policy: Backoff) -> Self {
        Self {
            policy,
            attempts: std::collections::HashMap::new(),
        }
    }

    /// The delay before `key`'s next attempt, counting one more.
    pub fn next_delay(&mut self, key: T) -> Duration {
        let n = self.attempts.entry(key).or_insert(0);
        let d = self.policy.delay(*n);
        *n = n.saturating_add(1);
        d
    }

    /// Forgets `key`'s attempts (after a success).
    pub fn forget(&mut self, key: &T) {
        self.attempts.remove(key);
    }

    /// `key`'s consecutive attempts so far.
    pub fn attempts(&self, key: &T) -> u32 {
        self.attempts.get(key).copied().unwrap_or(0)
    }
}
