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
use crate::controller::Gate;
use crate::events::Recorder;
use crate::leader::{ElectionConfig, LeaderElector};
use crate::shards::{Held, ShardConfig, ShardKeyFn, ShardOwner};
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

/// How a replica of a controller service takes part: it campaigns for leadership, or it holds
/// shards of the service's keys (`--shards N`, docs/design.md §10). Either way it gives the
/// store its writes go through (fenced by the leadership, or by the shards of the keys
/// written), an event recorder, and the [`Gate`] its controller's workers follow.
#[derive(Debug)]
pub struct Replica {
    membership: Membership,
    /// The store whose writes are fenced by this replica's leadership or shards.
    pub fenced: StoreRef,
    /// Records Events as the component (unfenced: an Event is not a decision).
    pub recorder: Recorder,
}

#[derive(Debug)]
enum Membership {
    Elected(LeaderElector),
    Sharded(ShardOwner),
}

/// How [`Replica::spawn`] shards, when it does.
#[derive(Clone)]
pub struct Sharding {
    /// How many shards (every replica must agree).
    pub shards: u32,
    /// The shard of each store key the service writes.
    pub key_shard: ShardKeyFn,
}

impl std::fmt::Debug for Sharding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sharding")
            .field("shards", &self.shards)
            .finish_non_exhaustive()
    }
}

// === impl Replica ===

impl Replica {
    /// Campaigns in `election` (e.g. `leases/scheduler`) or, with `sharding`, joins
    /// `component`'s shard group; as `identity`, with leases of `ttl`, until `shutdown`.
    pub fn spawn(
        store: StoreRef,
        component: &str,
        election: &str,
        identity: &str,
        ttl: Duration,
        sharding: Option<Sharding>,
        shutdown: &Shutdown,
    ) -> Self {
        let recorder = Recorder::spawn(store.clone(), component, shutdown.clone());
        match sharding {
            None => {
                let elector = LeaderElector::spawn(
                    store.clone(),
                    election,
                    ElectionConfig::new(identity).ttl(ttl),
                    shutdown,
                );
                let fenced: StoreRef = Arc::new(elector.fenced_store(store));
                Replica {
                    membership: Membership::Elected(elector),
                    fenced,
                    recorder,
                }
            }
            Some(Sharding { shards, key_shard }) => {
                let owner = ShardOwner::spawn(
                    store.clone(),
                    ShardConfig::new(component, shards, identity).ttl(ttl),
                    shutdown,
                );
                let fenced: StoreRef = Arc::new(owner.fenced_store(store, key_shard));
                Replica {
                    membership: Membership::Sharded(owner),
                    fenced,
                    recorder,
                }
            }
        }
    }

    /// What the controller's workers follow.
    pub fn gate(&self) -> Gate {
        match &self.membership {
            Membership::Elected(e) => Gate::Leader(e.subscribe()),
            Membership::Sharded(o) => Gate::Shards(o.subscribe()),
        }
    }

    /// The shards held, when sharded.
    pub fn held(&self) -> Option<watch::Receiver<Held>> {
        match &self.membership {
            Membership::Elected(_) => None,
            Membership::Sharded(o) => Some(o.subscribe()),
        }
    }

    /// Steps down or gives up every shard, and stops.
    pub async fn resign(self) {
        match self.membership {
            Membership::Elected(e) => e.resign().await,
            Membership::Sharded(o) => o.resign().await,
        }
    }
}
