//! Time as `MemStore` sees it, so that lease expiry is deterministic in tests.
//!
//! [`TokioClock`] follows tokio's clock, so `tokio::time::pause()` / `advance()` drive it;
//! [`ManualClock`] only moves when a test calls [`ManualClock::advance`].

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::watch;

/// A monotonic clock measured from an arbitrary origin.
pub trait Clock: Send + Sync + 'static {
    /// The time elapsed since the clock's origin.
    fn now(&self) -> Duration;

    /// Resolves once `now() >= deadline`.
    fn sleep_until(&self, deadline: Duration) -> BoxFuture<'static, ()>;
}

/// The production clock: `tokio::time::Instant`, which honours tokio's paused time.
#[derive(Clone, Debug)]
pub struct TokioClock {
    origin: tokio::time::Instant,
}

impl Default for TokioClock {
    fn default() -> Self {
        Self {
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    fn sleep_until(&self, deadline: Duration) -> BoxFuture<'static, ()> {
        let at = self.origin + deadline;
        Box::pin(tokio::time::sleep_until(at))
    }
}

/// A clock that stands still until a test moves it. Clones share the same time.
#[derive(Clone, Debug)]
pub struct ManualClock {
    now: Arc<watch::Sender<Duration>>,
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl ManualClock {
    /// A clock at time zero.
    pub fn new() -> Self {
        Self {
            now: Arc::new(watch::Sender::new(Duration::ZERO)),
        }
    }

    /// Moves the clock forward; sleepers whose deadline has passed wake up.
    pub fn advance(&self, by: Duration) {
        self.now.send_modify(|now| *now += by);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        *self.now.borrow()
    }

    fn sleep_until(&self, deadline: Duration) -> BoxFuture<'static, ()> {
        let mut rx = self.now.subscribe();
        Box::pin(async move {
            // An error means the clock was dropped: time will never pass, sleep forever.
            if rx.wait_for(|now| *now >= deadline).await.is_err() {
                futures::future::pending::<()>().await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn manual_clock_wakes_sleepers_on_advance() {
        let clock = ManualClock::new();
        let sleeper = tokio::spawn(clock.sleep_until(Duration::from_secs(5)));
        clock.advance(Duration::from_secs(2));
        assert!(!sleeper.is_finished());
        clock.advance(Duration::from_secs(3));
        tokio::time::timeout(Duration::from_secs(5), sleeper)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(clock.now(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_follows_paused_time() {
        let clock = TokioClock::default();
        tokio::time::advance(Duration::from_secs(7)).await;
        assert_eq!(clock.now(), Duration::from_secs(7));
    }
}
