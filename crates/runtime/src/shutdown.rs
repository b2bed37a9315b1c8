//! The shutdown token shared by servers, controllers and the leader elector.

use std::future::Future;

use tokio_util::sync::CancellationToken;

/// Set (to anything) in a service process's environment, the process shuts down when its
/// stdin closes ([`Shutdown::trigger_when_stdin_closes`]). `flotilla bench failover
/// --processes` sets it on each service process it starts and keeps the pipe's other end,
/// so that a bench that is killed outright leaves no service running.
pub const EXIT_WITH_PARENT_ENV: &str = "FLOTILLA_EXIT_WITH_PARENT";

/// A cloneable "stop now" signal. Triggering it (or a parent of it) wakes every
/// [`Shutdown::triggered`] waiter; children can be triggered on their own (a leadership term
/// ends without the process ending).
#[derive(Clone, Debug, Default)]
pub struct Shutdown {
    token: CancellationToken,
}

// === impl Shutdown ===

impl Shutdown {
    /// A token that has not fired.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fires the token (and every child).
    pub fn trigger(&self) {
        self.token.cancel();
    }

    /// Whether the token has fired.
    pub fn is_triggered(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Resolves once the token has fired.
    pub fn triggered(&self) -> impl Future<Output = ()> + Send + 'static {
        self.token.clone().cancelled_owned()
    }

    /// A token that fires with this one, and can also be fired alone.
    pub fn child(&self) -> Self {
        Self {
            token: self.token.child_token(),
        }
    }

    /// The underlying cancellation token.
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// Fires the token once stdin reaches its end: the parent holding the pipe's other end
    /// exited, however it ended (a SIGKILL included, which runs no clean-up in the parent).
    /// Started by [`crate::Runtime::start`] when [`EXIT_WITH_PARENT_ENV`] is set. Spawns a
    /// task; returns at once.
    pub fn trigger_when_stdin_closes(&self) {
        let this = self.clone();
        // A plain thread, not tokio's stdin: a blocking read cannot be cancelled, and tokio
        // waits for its blocking threads when the runtime shuts down, so a process whose
        // stdin is still open (its parent alive) could never exit on its own, after a
        // SIGTERM or a failure. A detached thread ends with the process.
        let spawned = std::thread::Builder::new()
            .name("stdin-watch".into())
            .spawn(move || {
                use std::io::Read as _;
                let mut stdin = std::io::stdin().lock();
                let mut buf = [0u8; 256];
                loop {
                    match stdin.read(&mut buf) {
                        Ok(0) => break,
                        Err(e) if e.kind() != std::io::ErrorKind::Interrupted => break,
                        _ => {}
                    }
                }
                tracing::info!("stdin closed: the parent process is gone; shutting down");
                this.trigger();
            });
        if let Err(error) = spawned {
            tracing::warn!(%error, "cannot watch stdin: this process will not stop with its parent");
        }
    }

    /// Fires the token on SIGTERM or SIGINT (Ctrl-C). Spawns a task; returns at once.
    pub fn trigger_on_signals(&self) {
        let this = self.clone();
        tokio::spawn(async move {
            let signal = wait_for_signal().await;
            tracing::info!(signal, "shutting down");
            this.trigger();
        });
    }
}

#[cfg(unix)]
async fn wait_for_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = tokio::signal::ctrl_c() => "SIGINT",
        },
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGTERM; only SIGINT stops the process");
            let _ = tokio::signal::ctrl_c().await;
            "SIGINT"
        }
    }
}

#[cfg(not(unix))]
async fn wait_for_signal() -> &'static str {
    let _ = tokio::signal::ctrl_c().await;
    "Ctrl-C"
}

/// Until `shutdown` fires, calls `reload` every `period` (files read again, say): `reloaded`
/// runs when it took in something new, or succeeded again after failing; `failed` runs once
/// per run of failures, so that a file that stays unusable is reported once, not every
/// period. What was in use stays in use meanwhile.
pub(crate) async fn keep_reloaded<E>(
    shutdown: &Shutdown,
    period: std::time::Duration,
    reload: impl Fn() -> Result<bool, E>,
    reloaded: impl Fn(),
    failed: impl Fn(E),
) {
    let mut failing = false;
    loop {
        tokio::select! {
            () = shutdown.triggered() => return,
            () = tokio::time::sleep(period) => {}
        }
        match reload() {
            Ok(changed) => {
                if changed || failing {
                    reloaded();
                }
                failing = false;
            }
            Err(error) if !failing => {
                failing = true;
                failed(error);
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn children_fire_with_parents_but_not_back() {
        let root = Shutdown::new();
        let child = root.child();
        child.trigger();
        assert!(child.is_triggered());
        assert!(!root.is_triggered(), "a child does not stop its parent");
        let other = root.child();
        root.trigger();
        other.triggered().await;
        assert!(other.is_triggered());
    }
}
