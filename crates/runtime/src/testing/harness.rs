//! A service under test on a task, and polling for what it eventually writes.
//!
//! ```text
//!   Harness::start::<TaintManager>(store, config)   the service's own `start` (the one
//!                  service shape), its controllers only: no gRPC server
//!   Harness::spawn("name", store, |store, readiness, shutdown| future)   anything else
//!     .typed     read and write the store as other services would
//!     .stop()    fire the shutdown; the service must return Ok within 10 s
//!   eventually(timeout, what, || async { Some(..) })   poll every 20 ms
//!   stop_task(&shutdown, timeout, task, what)   fire a shutdown, the task must end Ok in time
//!   env_or("FLOTILLA_…", default)   a test's size from the environment
//! ```

use std::fmt;
use std::future::Future;
use std::time::Duration;

use flotilla_store::StoreRef;
use flotilla_store::typed::Typed;
use tokio::task::JoinHandle;

use crate::server::Readiness;
use crate::shutdown::Shutdown;

/// Polls `f` every 20 ms until it returns `Some`, for at most `timeout` (then panics, naming
/// `what`).
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Environment variable `var` parsed as a `T`, or `default` when it is unset or does not parse
/// (e.g. the size of a scale test).
pub fn env_or<T: std::str::FromStr>(var: &str, default: T) -> T {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Fires `shutdown` and waits at most `timeout` for `task` to end with `Ok`; panics naming
/// `what` when it does not stop in time, panicked or failed.
pub async fn stop_task<T, E: fmt::Debug>(
    shutdown: &Shutdown,
    timeout: Duration,
    task: JoinHandle<Result<T, E>>,
    what: &str,
) -> T {
    shutdown.trigger();
    match tokio::time::timeout(timeout, task).await {
        Err(_) => panic!("{what}: not stopped within {timeout:?}"),
        Ok(Err(e)) => panic!("{what}: {e}"),
        Ok(Ok(Err(e))) => panic!("{what}: {e:?}"),
        Ok(Ok(Ok(v))) => v,
    }
}

/// A running service (its `run_with`, on a task) and typed access to its store.
#[derive(derive_more::Debug)]
pub struct Harness {
    /// The store the service runs on.
    #[debug(skip)]
    pub typed: Typed,
    /// Stops the service.
    #[debug(skip)]
    pub shutdown: Shutdown,
    name: &'static str,
    #[debug(skip)]
    task: JoinHandle<()>,
}

// === impl Harness ===

impl Harness {
    /// Runs `run(store, readiness, shutdown)` on a task: a service's `run_with` with its
    /// config bound. `name` is what the panics of a failed or stuck service say.
    pub fn spawn<F, Fut, E>(name: &'static str, store: StoreRef, run: F) -> Self
    where
        F: FnOnce(StoreRef, Readiness, Shutdown) -> Fut,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: fmt::Debug,
    {
        let shutdown = Shutdown::new();
        let service = run(store.clone(), Readiness::new(), shutdown.clone());
        let task = tokio::spawn(async move {
            if let Err(e) = service.await {
                panic!("{name} failed: {e:?}");
            }
        });
        Harness {
            typed: Typed::new(store),
            shutdown,
            name,
            task,
        }
    }

    /// Starts `S` on `store` through the one service shape (`S::start`) and runs what it
    /// runs (its controllers and elections); its gRPC routes are not served.
    pub fn start<S: crate::service::Service>(store: StoreRef, config: S::Config) -> Self {
        Self::start_clocked::<S>(store, config, crate::Clock::system())
    }

    /// [`Harness::start`] on `clock` (a [`crate::ManualClock`] the test advances).
    pub fn start_clocked<S: crate::service::Service>(
        store: StoreRef,
        config: S::Config,
        clock: crate::Clock,
    ) -> Self {
        Self::spawn(S::NAME, store, move |store, readiness, shutdown| {
            let parts = crate::service::Parts {
                store,
                readiness,
                shutdown,
                clock,
            };
            S::start(&parts, config).run
        })
    }

    /// Fires the shutdown and waits (10 s at most) for the service to return `Ok`.
    pub async fn stop(self) {
        self.shutdown.trigger();
        let name = self.name;
        match tokio::time::timeout(Duration::from_secs(10), self.task).await {
            Err(_) => panic!("{name} stops"),
            Ok(Err(e)) => panic!("{name} failed: {e}"),
            Ok(Ok(())) => {}
        }
    }
}
