//! The wall clock the services decide with, passed to them as a parameter ([`Clock`] in
//! [`crate::service::Parts`]) instead of read from the system where a decision is made.
//!
//! A reconcile reads it once and hands `now` to the pure rules of `flotilla-core`, which never
//! read a clock. Production runs on [`Clock::system`]; a test that must see time pass (a
//! toleration expiring, a grace period ending) drives a [`ManualClock`] instead of sleeping.
//! Timers (a requeue after `d`) still run on tokio's clock, so tests that advance a
//! [`ManualClock`] wake the affected keys by changing an object or by the short requeues the
//! services already use.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use flotilla_core::Time;

/// A source of wall-clock time.
pub trait WallClock: Send + Sync + fmt::Debug + 'static {
    /// The current time.
    fn now(&self) -> Time;
}

/// The clock a service decides with: cheap to clone, shared.
#[derive(Clone, Debug)]
pub struct Clock(Arc<dyn WallClock>);

impl Clock {
    /// The system's wall clock.
    pub fn system() -> Self {
        Clock(Arc::new(SystemClock))
    }

    /// A clock that moves only when `manual` is advanced.
    pub fn manual(manual: &ManualClock) -> Self {
        Clock(Arc::new(manual.clone()))
    }

    /// The current time.
    pub fn now(&self) -> Time {
        self.0.now()
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::system()
    }
}

/// The system's wall clock (`SystemTime`), in milliseconds.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl WallClock for SystemClock {
    fn now(&self) -> Time {
        let d = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Time::from_millis(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }
}

/// A clock for tests: it reads what it was set to and moves only through
/// [`ManualClock::advance`] and [`ManualClock::set`]. Clones share the time.
#[derive(Clone, Debug)]
pub struct ManualClock(Arc<Mutex<Time>>);

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: Time) -> Self {
        ManualClock(Arc::new(Mutex::new(start)))
    }

    /// A clock standing at the system's current time.
    pub fn at_system_time() -> Self {
        Self::new(SystemClock.now())
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut now = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *now = *now + by;
    }

    /// Sets the clock to `to` (which may be earlier: a clock stepping back).
    pub fn set(&self, to: Time) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = to;
    }
}

impl WallClock for ManualClock {
    fn now(&self) -> Time {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told_and_clones_share_it() {
        let manual = ManualClock::new(Time::from_secs(100));
        let clock = Clock::manual(&manual);
        assert_eq!(clock.now(), Time::from_secs(100));
        manual.advance(Duration::from_secs(5));
        assert_eq!(clock.clone().now(), Time::from_secs(105));
        manual.set(Time::from_secs(90));
        assert_eq!(clock.now(), Time::from_secs(90), "a clock may step back");
    }

    #[test]
    fn the_system_clock_is_the_wall_clock() {
        let before = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        let now = Clock::system().now().as_millis();
        assert!(i128::from(now) >= i128::try_from(before).unwrap_or(0));
    }
}
