//! The recipe every leader-elected controller follows, in one place.
//!
//! ```text
//!   Elected::spawn(store, "leases/scheduler", identity, ttl, "scheduler", &shutdown)
//!     .fenced      the store, every write fenced by this replica's leadership (I8)
//!     .typed()     typed access to the fenced store
//!     .writes(batches, &shutdown)   Writes: typed, a BatchWriter and the recorder, fenced
//!     .recorder    Events, written as `component`
//!     .leader()    Some(Leadership) while leading: Controller::leader gates its workers
//!     .resign()    step down and stop campaigning (on shutdown)
//! ```

use std::sync::Arc;
use std::time::Duration;

use flotilla_store::typed::{Stored, Typed};
use flotilla_store::{Leadership, StoreRef};
use tokio::sync::watch;

use crate::batch::{BatchConfig, BatchWriter};
use crate::events::Recorder;
use crate::leader::{ElectionConfig, LeaderElector};
use crate::shutdown::Shutdown;

/// A replica's candidacy in one election, the store fenced by it and an event recorder.
#[derive(Debug)]
pub struct Elected {
    elector: LeaderElector,
    /// The store with every write fenced by this replica's leadership at the time of the
    /// write; a write without one fails with `LeadershipLost`.
    pub fenced: StoreRef,
    /// Records Events as the component (read from the unfenced store: an Event is not a
    /// decision, and a follower may say why it is waiting).
    pub recorder: Recorder,
}

// === impl Elected ===

impl Elected {
    /// Campaigns in the election under `prefix` as `identity` (lease `ttl`) until
    /// `shutdown` fires or [`Elected::resign`] is called; Events are written as `component`.
    pub fn spawn(
        store: StoreRef,
        prefix: &str,
        identity: &str,
        ttl: Duration,
        component: &str,
        shutdown: &Shutdown,
    ) -> Self {
        let elector = LeaderElector::spawn(
            store.clone(),
            prefix,
            ElectionConfig::new(identity).ttl(ttl),
            shutdown,
        );
        let fenced: StoreRef = Arc::new(elector.fenced_store(store.clone()));
        let recorder = Recorder::spawn(store, component, shutdown.clone());
        Elected {
            elector,
            fenced,
            recorder,
        }
    }

    /// Typed access to the fenced store.
    pub fn typed(&self) -> Typed {
        Typed::new(self.fenced.clone())
    }

    /// `Some` while this replica leads (for [`crate::Controller::leader`]).
    pub fn leader(&self) -> watch::Receiver<Option<Leadership>> {
        self.elector.subscribe()
    }

    /// What a controller writes with on the fenced store: typed access, a [`BatchWriter`]
    /// group-committing as `batches` says until `shutdown` fires, and the event recorder.
    pub fn writes<R: Stored + 'static>(
        &self,
        batches: BatchConfig,
        shutdown: &Shutdown,
    ) -> Writes<R> {
        let typed = self.typed();
        Writes {
            writer: BatchWriter::spawn_until(typed.clone(), batches, shutdown.clone()),
            typed,
            recorder: self.recorder.clone(),
        }
    }

    /// The elector itself.
    pub fn elector(&self) -> &LeaderElector {
        &self.elector
    }

    /// Steps down (if leading) and stops campaigning.
    pub async fn resign(self) {
        self.elector.resign().await;
    }

    /// Resigns when `shutdown` fires, on a task of its own; returns what is left (the fenced
    /// store, the recorder, and the leadership to follow).
    pub fn resign_on(self, shutdown: &Shutdown) -> Following {
        let leader = self.leader();
        let Elected {
            elector,
            fenced,
            recorder,
        } = self;
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            shutdown.triggered().await;
            elector.resign().await;
        });
        Following {
            fenced,
            recorder,
            leader,
        }
    }
}

/// What an elected controller writes with (see [`Elected::writes`]).
#[derive(Clone, derive_more::Debug)]
pub struct Writes<R> {
    /// Typed access to the fenced store (reads after a conflict go here too).
    #[debug(skip)]
    pub typed: Typed,
    /// Group-commits the controller's writes through the fenced store.
    pub writer: BatchWriter<R>,
    /// Records Events as the elected component.
    pub recorder: Recorder,
}

/// What [`Elected::resign_on`] leaves: the parts a controller needs once the candidacy runs by
/// itself.
#[derive(Debug)]
pub struct Following {
    /// The fenced store.
    pub fenced: StoreRef,
    /// The event recorder.
    pub recorder: Recorder,
    /// `Some` while this replica leads.
    pub leader: watch::Receiver<Option<Leadership>>,
}
