//! The controller loop: N workers take keys from a [`WorkQueue`], run the reconciler on each,
//! and turn its [`Action`] (or the error policy's) into a requeue.
//!
//! ```text
//!   triggers: Stream<Event<K>> ──mapper──► WorkQueue<T> ◄── add_after(requeue / back-off)
//!                                               │ next()                  ▲
//!                        (only while leader)    ▼                         │
//!   worker × N ── info_span!("reconcile", controller, object.ref, reason) ── reconcile(key, ctx)
//!                   parent: trace_parent(key, ctx) (a stored traceparent) or none (a root)
//!                                               │ Ok(Action)   → forget back-off, requeue?
//!                                               │ Err(e)       → error_policy(&key, &e, &ctx)
//!                                               ▼ done(key)      requeue after max(policy, back-off)
//! ```
//!
//! Requeueing is a return value, never a sleep inside the reconciler. Metrics:
//! `flotilla_<name>_reconcile_total{result}` and
//! `flotilla_<name>_reconcile_duration_seconds{result}` with `result` = `ok` | `error` | `panic`.

use std::fmt::{self, Display};
use std::future::Future;
use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use flotilla_store::Leadership;
use futures::FutureExt;
use futures::Stream;
use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::Instrument;

use crate::queue::{Reason, WorkQueue, metric_component};
use crate::reflector::CacheBarrier;
use crate::shards::Held;
use crate::shutdown::Shutdown;
use crate::watcher::Event;

/// What to do with a key after a reconcile: run it again after a delay, or wait for the next
/// change. Only these two (kube-runtime's `Action`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Action {
    requeue_after: Option<Duration>,
}

// === impl Action ===

impl Action {
    /// Reconcile the key again after `duration` (unless a change triggers it earlier).
    pub fn requeue(duration: Duration) -> Self {
        Self {
            requeue_after: Some(duration),
        }
    }

    /// Do nothing until the key is queued again by a change.
    pub fn await_change() -> Self {
        Self {
            requeue_after: None,
        }
    }

    /// The requeue delay, if any.
    pub fn requeue_after(&self) -> Option<Duration> {
        self.requeue_after
    }
}

type ReconcileFn<T, Ctx, E> =
    Arc<dyn Fn(T, Arc<Ctx>) -> BoxFuture<'static, Result<Action, E>> + Send + Sync>;
type ErrorPolicyFn<T, Ctx, E> = Arc<dyn Fn(&T, &E, &Ctx) -> Action + Send + Sync>;
type TraceParentFn<T, Ctx> = Arc<dyn Fn(&T, &Ctx) -> Option<String> + Send + Sync>;

struct ResultMetrics {
    total: metrics::Counter,
    seconds: metrics::Histogram,
}

struct Metrics {
    ok: ResultMetrics,
    error: ResultMetrics,
    panic: ResultMetrics,
}

impl Metrics {
    fn new(name: &str) -> Self {
        let c = metric_component(name);
        let result = |r: &'static str| ResultMetrics {
            total: metrics::counter!(format!("flotilla_{c}_reconcile_total"), "result" => r),
            seconds: metrics::histogram!(
                format!("flotilla_{c}_reconcile_duration_seconds"),
                "result" => r
            ),
        };
        Self {
            ok: result("ok"),
            error: result("error"),
            panic: result("panic"),
        }
    }
}

/// A trigger: a future that feeds the queue until its stream ends.
type Trigger = BoxFuture<'static, ()>;

/// Which replicas' workers run: every replica's, the elected leader's, or each replica's on
/// the keys of the shards it holds.
#[derive(Clone, Debug)]
pub enum Gate {
    /// Workers always run (one replica, or tests).
    Always,
    /// Workers run while this replica leads ([`Controller::leader`]).
    Leader(watch::Receiver<Option<Leadership>>),
    /// Workers run on the keys of the shards held ([`Controller::shards`]).
    Shards(watch::Receiver<Held>),
}

/// A reconcile loop over a [`WorkQueue`] of keys `T`.
pub struct Controller<T, Ctx, E> {
    queue: WorkQueue<T>,
    reconcile: ReconcileFn<T, Ctx, E>,
    error_policy: ErrorPolicyFn<T, Ctx, E>,
    workers: usize,
    leader: Option<watch::Receiver<Option<Leadership>>>,
    triggers: Vec<Trigger>,
    metrics: Arc<Metrics>,
    trace_parent: Option<TraceParentFn<T, Ctx>>,
    barrier: CacheBarrier,
    ready: Vec<ReadyGate>,
    shards: Option<ShardGate<T>>,
}

/// Which shard a key is in.
type ShardOfFn<T> = Arc<dyn Fn(&T) -> u32 + Send + Sync>;
/// Every cached key of a shard (queued when the shard is acquired).
type KeysOfFn<T> = Arc<dyn Fn(u32) -> Vec<T> + Send + Sync>;

/// Gates keys by the shards this replica holds (see [`Controller::shards`]).
struct ShardGate<T> {
    held: watch::Receiver<Held>,
    shard_of: ShardOfFn<T>,
    keys_of: KeysOfFn<T>,
    state: Arc<std::sync::Mutex<GateState<T>>>,
}

impl<T> Clone for ShardGate<T> {
    fn clone(&self) -> Self {
        Self {
            held: self.held.clone(),
            shard_of: self.shard_of.clone(),
            keys_of: self.keys_of.clone(),
            state: self.state.clone(),
        }
    }
}

/// The shards ready for work (held, and the caches caught up since they were acquired), each
/// with its term and the token that ends the reconciles in flight when the shard is lost, and
/// the keys that came up while their shard was not ready.
struct GateState<T> {
    ready: std::collections::BTreeMap<u32, (flotilla_store::Revision, Shutdown)>,
    parked: std::collections::HashMap<u32, std::collections::HashSet<T>>,
}

impl<T: Eq + Hash + Clone> ShardGate<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, GateState<T>> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether `key` may be reconciled now, with the token that fires if its shard is lost
    /// meanwhile; if not, it is parked until its shard is ready. A shard counts only while
    /// it is still held in the term it became ready in (checked here too, so that a loss the
    /// follower has not processed yet already stops admitting).
    fn admit(&self, key: &T) -> Option<Shutdown> {
        let shard = (self.shard_of)(key);
        let mut state = self.lock();
        if let Some((term, lost)) = state.ready.get(&shard)
            && self.held.borrow().holds(shard, *term)
        {
            return Some(lost.clone());
        }
        state.parked.entry(shard).or_default().insert(key.clone());
        None
    }

    /// Drops the ready shards `now` no longer holds in their term, ending their reconciles
    /// in flight.
    fn drop_lost(&self, now: &Held, queue: &str) {
        let mut state = self.lock();
        let lost: Vec<u32> = state
            .ready
            .iter()
            .filter(|(s, (t, _))| !now.holds(**s, *t))
            .map(|(s, _)| *s)
            .collect();
        for s in &lost {
            if let Some((_, token)) = state.ready.remove(s) {
                token.trigger();
            }
        }
        if !lost.is_empty() {
            tracing::info!(
                queue,
                shards = ?lost,
                ready = state.ready.len(),
                "shards lost: reconciles in flight on them stopped; their keys wait"
            );
        }
    }

    /// Follows the held shards until `shutdown`: a shard lost stops admitting at once and
    /// ends its reconciles in flight; a shard acquired is admitted only after `barrier` (the
    /// caches caught up with the store as of after the acquisition), in the term it was
    /// acquired in, and then its parked and cached keys are queued.
    async fn follow(self, barrier: CacheBarrier, queue: WorkQueue<T>, shutdown: Shutdown)
    where
        T: Display + Send + Sync + 'static,
    {
        let mut held = self.held.clone();
        loop {
            let now = held.borrow_and_update().clone();
            self.drop_lost(&now, queue.name());
            let pending: Vec<(u32, flotilla_store::Revision)> = {
                let state = self.lock();
                now.terms
                    .iter()
                    .filter(|(s, t)| state.ready.get(s).map(|(rt, _)| rt) != Some(t))
                    .map(|(s, t)| (*s, *t))
                    .collect()
            };
            if !pending.is_empty() {
                // Wait for the caches, still dropping what is lost meanwhile.
                let wait = barrier.wait();
                tokio::pin!(wait);
                loop {
                    tokio::select! {
                        () = shutdown.triggered() => return,
                        () = &mut wait => break,
                        r = held.changed() => {
                            if r.is_err() {
                                return;
                            }
                            let now = held.borrow_and_update().clone();
                            self.drop_lost(&now, queue.name());
                        }
                    }
                }
                let current = held.borrow().clone();
                let mut queued = 0usize;
                let mut acquired = Vec::new();
                for (s, t) in pending {
                    if !current.holds(s, t) {
                        continue;
                    }
                    let parked = {
                        let mut state = self.lock();
                        state.ready.insert(s, (t, shutdown.child()));
                        state.parked.remove(&s).unwrap_or_default()
                    };
                    acquired.push(s);
                    for key in parked.into_iter().chain((self.keys_of)(s)) {
                        queue.add_with_reason(key, Reason::Custom("shard acquired".into()));
                        queued += 1;
                    }
                }
                if !acquired.is_empty() {
                    tracing::info!(queue = queue.name(), shards = ?acquired, queued, "shards ready: caches caught up; working on their keys");
                }
                continue;
            }
            tokio::select! {
                () = shutdown.triggered() => return,
                r = held.changed() => if r.is_err() {
                    return;
                },
            }
        }
    }
}

/// Resolves when one cache holds a full list; names it for the log.
type ReadyGate = (String, BoxFuture<'static, usize>);

impl<T, Ctx, E> fmt::Debug for Controller<T, Ctx, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Controller")
            .field("queue", &self.queue)
            .field("workers", &self.workers)
            .field("leader_gated", &self.leader.is_some())
            .field("shard_gated", &self.shards.is_some())
            .field("triggers", &self.triggers.len())
            .finish_non_exhaustive()
    }
}

// === impl Controller ===

impl<T, Ctx, E> Controller<T, Ctx, E>
where
    T: Clone + Eq + Hash + Display + Send + Sync + 'static,
    Ctx: Send + Sync + 'static,
    E: Display + Send + 'static,
{
    /// A controller with one worker. `reconcile(key, ctx)` reads the current state and acts;
    /// `error_policy(&key, &error, &ctx)` decides what follows a failure: `await_change()`
    /// drops the key until it changes, `requeue(d)` retries after `max(d, back-off)` where the
    /// queue's per-key back-off doubles with each consecutive failure (and resets on success).
    ///
    /// Metric handles are taken from the recorder installed now.
    pub fn new<R, Fut, P>(queue: WorkQueue<T>, reconcile: R, error_policy: P) -> Self
    where
        R: Fn(T, Arc<Ctx>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
        P: Fn(&T, &E, &Ctx) -> Action + Send + Sync + 'static,
    {
        Self {
            metrics: Arc::new(Metrics::new(queue.name())),
            queue,
            reconcile: Arc::new(move |key, ctx| reconcile(key, ctx).boxed()),
            error_policy: Arc::new(error_policy),
            workers: 1,
            leader: None,
            triggers: Vec::new(),
            trace_parent: None,
            barrier: CacheBarrier::default(),
            ready: Vec::new(),
            shards: None,
        }
    }

    /// Starts no worker before `cache` holds a full list (its watcher's first `InitDone`):
    /// decisions are never made on a partial view of the store. Triggers feed the queue
    /// meanwhile. Call once per cache the reconciler reads.
    pub fn ready_after<K>(mut self, name: &str, cache: &crate::reflector::Cache<K>) -> Self
    where
        K: Send + Sync + 'static,
    {
        let cache = cache.clone();
        self.ready.push((
            name.to_owned(),
            async move {
                cache.wait_until_ready().await;
                cache.len()
            }
            .boxed(),
        ));
        self
    }

    /// Before the workers start on a newly won leadership, wait until these caches reflect
    /// the store's revision at that moment (see [`CacheBarrier`]): a new leader never acts
    /// on caches older than the store it now leads.
    pub fn barrier(mut self, barrier: CacheBarrier) -> Self {
        self.barrier = barrier;
        self
    }

    /// Continues a stored trace: before each reconcile, `f(&key, &ctx)` may return the W3C
    /// `traceparent` the object carries (read from a cache; see [`crate::trace`]), and the
    /// `reconcile` span is created as a child of that span. Without it (or when `f` returns
    /// `None`) every reconcile span is the root of a trace of its own.
    pub fn trace_parent<F>(mut self, f: F) -> Self
    where
        F: Fn(&T, &Ctx) -> Option<String> + Send + Sync + 'static,
    {
        self.trace_parent = Some(Arc::new(f));
        self
    }

    /// Runs `n` workers (at least 1). Keys are never reconciled concurrently with themselves.
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n.max(1);
        self
    }

    /// Runs the workers only while `leader` holds a leadership (see
    /// [`crate::leader::LeaderElector::subscribe`]); keys keep queueing meanwhile.
    pub fn leader(mut self, leader: watch::Receiver<Option<Leadership>>) -> Self {
        self.leader = Some(leader);
        self
    }

    /// Reconciles only the keys of the shards `held` names (see [`crate::shards`]): a key
    /// whose shard (`shard_of`) is not held is parked; when a shard is acquired, after the
    /// [`Controller::barrier`] passes for that term, its parked keys and every key
    /// `keys_of(shard)` lists (the cached objects of the shard) are queued. A shard lost stops
    /// admitting its keys at once; reconciles in flight finish, and their writes are fenced by
    /// the shard ([`crate::shards::ShardFencedStore`]). Instead of [`Controller::leader`].
    pub fn shards<S, K>(mut self, held: watch::Receiver<Held>, shard_of: S, keys_of: K) -> Self
    where
        S: Fn(&T) -> u32 + Send + Sync + 'static,
        K: Fn(u32) -> Vec<T> + Send + Sync + 'static,
    {
        self.shards = Some(ShardGate {
            held,
            shard_of: Arc::new(shard_of),
            keys_of: Arc::new(keys_of),
            state: Arc::new(std::sync::Mutex::new(GateState {
                ready: Default::default(),
                parked: Default::default(),
            })),
        });
        self
    }

    /// Gates the workers by `gate`: [`Gate::Leader`] as [`Controller::leader`],
    /// [`Gate::Shards`] as [`Controller::shards`] (with `shard_of` and `keys_of`), each with
    /// `barrier` before a new term's work; [`Gate::Always`] leaves the controller as it is.
    pub fn gated<S, K>(self, gate: Gate, barrier: CacheBarrier, shard_of: S, keys_of: K) -> Self
    where
        S: Fn(&T) -> u32 + Send + Sync + 'static,
        K: Fn(u32) -> Vec<T> + Send + Sync + 'static,
    {
        match gate {
            Gate::Always => self,
            Gate::Leader(leader) => self.leader(leader).barrier(barrier),
            Gate::Shards(held) => self.shards(held, shard_of, keys_of).barrier(barrier),
        }
    }

    /// Feeds the queue from `events` (typically a [`crate::reflector::reflect`]ed watcher)
    /// through `mapper`, e.g. a cluster change to the keys of the bindings on it. Triggers run
    /// from [`Controller::run`] until shutdown, whether or not this replica leads.
    pub fn watches<K, S, F>(mut self, events: S, mapper: F) -> Self
    where
        K: Send + Sync + 'static,
        S: Stream<Item = Event<K>> + Send + 'static,
        F: Fn(&Event<K>) -> Vec<T> + Send + Sync + 'static,
    {
        let queue = self.queue.clone();
        self.triggers.push(queue.feed(events, mapper).boxed());
        self
    }

    /// Feeds the queue from `events` through `on_event`, for triggers a list of keys cannot
    /// express: `on_event` may keep state between events (it is `FnMut`), delay keys
    /// ([`WorkQueue::add_after`]) or queue keys elsewhere too, through the queues and context
    /// it captures. Runs like [`Controller::watches`].
    pub fn watches_with<K, S, F>(mut self, events: S, mut on_event: F) -> Self
    where
        K: Send + Sync + 'static,
        S: Stream<Item = Event<K>> + Send + 'static,
        F: FnMut(&Event<K>) + Send + 'static,
    {
        self.triggers.push(
            async move {
                let mut events = std::pin::pin!(events);
                while let Some(event) = futures::StreamExt::next(&mut events).await {
                    on_event(&event);
                }
            }
            .boxed(),
        );
        self
    }

    /// The queue the controller works from.
    pub fn queue(&self) -> &WorkQueue<T> {
        &self.queue
    }

    /// Runs until `shutdown` fires: triggers feed the queue, and workers reconcile (while
    /// leader, if gated). On shutdown, in-flight reconciles are finished first.
    pub async fn run(self, ctx: Arc<Ctx>, shutdown: Shutdown) {
        let Self {
            queue,
            reconcile,
            error_policy,
            workers,
            leader,
            triggers,
            metrics,
            trace_parent,
            barrier,
            ready,
            shards,
        } = self;
        let worker = Worker {
            gate: shards.clone(),
            metrics,
            trace_parent,
            queue: queue.clone(),
            reconcile,
            error_policy,
            ctx,
        };
        let mut trigger_tasks = JoinSet::new();
        for t in triggers {
            trigger_tasks.spawn(t);
        }
        if !ready.is_empty() {
            let (names, gates): (Vec<String>, Vec<_>) = ready.into_iter().unzip();
            tokio::select! {
                () = shutdown.triggered() => {
                    trigger_tasks.shutdown().await;
                    return;
                }
                sizes = futures::future::join_all(gates) => {
                    let synced: Vec<String> = names
                        .iter()
                        .zip(sizes)
                        .map(|(name, len)| format!("{name}={len}"))
                        .collect();
                    tracing::info!(queue = queue.name(), caches = %synced.join(" "), "caches synced");
                }
            }
        }
        if let Some(gate) = shards {
            trigger_tasks.spawn(gate.follow(barrier, queue.clone(), shutdown.clone()));
            worker.run_term(workers, &shutdown, &shutdown).await;
            trigger_tasks.shutdown().await;
            return;
        }
        match leader {
            None => worker.run_term(workers, &shutdown, &shutdown).await,
            Some(mut leader) => loop {
                tokio::select! {
                    () = shutdown.triggered() => break,
                    held = wait_leading(&mut leader) => {
                        if !held {
                            // The elector is gone: nobody will ever make us leader again.
                            shutdown.triggered().await;
                            break;
                        }
                    }
                }
                let term = shutdown.child();
                let lost = {
                    let term = term.clone();
                    let mut leader = leader.clone();
                    tokio::spawn(async move {
                        let _ = leader.wait_for(Option::is_none).await;
                        term.trigger();
                    })
                };
                tokio::select! {
                    () = term.triggered() => {}
                    () = barrier.wait() => {
                        tracing::info!(queue = queue.name(), "leading: starting workers");
                        worker.run_term(workers, &term, &shutdown).await;
                    }
                }
                lost.abort();
                if shutdown.is_triggered() {
                    break;
                }
                tracing::info!(queue = queue.name(), "no longer leading: workers stopped");
            },
        }
        trigger_tasks.shutdown().await;
    }
}

/// Waits until `leader` holds a leadership; false if the elector is gone.
async fn wait_leading(leader: &mut watch::Receiver<Option<Leadership>>) -> bool {
    leader.wait_for(Option::is_some).await.is_ok()
}

struct Worker<T, Ctx, E> {
    queue: WorkQueue<T>,
    reconcile: ReconcileFn<T, Ctx, E>,
    error_policy: ErrorPolicyFn<T, Ctx, E>,
    ctx: Arc<Ctx>,
    metrics: Arc<Metrics>,
    trace_parent: Option<TraceParentFn<T, Ctx>>,
    gate: Option<ShardGate<T>>,
}

impl<T, Ctx, E> Clone for Worker<T, Ctx, E> {
    fn clone(&self) -> Self {
        Self {
            gate: self.gate.clone(),
            trace_parent: self.trace_parent.clone(),
            queue: self.queue.clone(),
            reconcile: self.reconcile.clone(),
            error_policy: self.error_policy.clone(),
            ctx: self.ctx.clone(),
            metrics: self.metrics.clone(),
        }
    }
}

// === impl Worker ===

impl<T, Ctx, E> Worker<T, Ctx, E>
where
    T: Clone + Eq + Hash + Display + Send + Sync + 'static,
    Ctx: Send + Sync + 'static,
    E: Display + Send + 'static,
{
    /// Runs `n` workers until `term` fires. A reconcile in flight when the term ends because
    /// leadership was lost is abandoned (its writes are fenced) and its key queued again; on
    /// shutdown it is allowed to finish.
    async fn run_term(&self, n: usize, term: &Shutdown, shutdown: &Shutdown) {
        let mut set = JoinSet::new();
        for _ in 0..n {
            let w = self.clone();
            let term = term.clone();
            let shutdown = shutdown.clone();
            set.spawn(async move { w.work(term, shutdown).await });
        }
        while let Some(res) = set.join_next().await {
            if let Err(e) = res
                && e.is_panic()
            {
                tracing::error!(
                    queue = self.queue.name(),
                    "a worker panicked outside a reconcile"
                );
            }
        }
    }

    async fn work(self, term: Shutdown, shutdown: Shutdown) {
        loop {
            let item = tokio::select! {
                biased;
                () = term.triggered() => return,
                item = self.queue.next() => match item {
                    Some(item) => item,
                    None => return,
                },
            };
            let key = item.key;
            // Sharded: the key's shard must be ready; a reconcile on it ends if it is lost.
            let shard_lost = match &self.gate {
                None => None,
                Some(gate) => match gate.admit(&key) {
                    Some(lost) => Some(lost),
                    None => {
                        // Not our shard (or not ready yet): parked until it is.
                        self.queue.done(&key);
                        continue;
                    }
                },
            };
            let span = tracing::info_span!(
                "reconcile",
                controller = self.queue.name(),
                "object.ref" = %key,
                reason = %item.reason,
            );
            // Stored contexts only matter when spans are exported: skip the cache lookup
            // of every reconcile otherwise.
            let parent = self
                .trace_parent
                .as_ref()
                .filter(|_| crate::trace::exporting())
                .and_then(|f| f(&key, &self.ctx));
            crate::trace::set_parent(&span, parent.as_deref());
            let run = self.reconcile_one(key.clone()).instrument(span);
            tokio::pin!(run);
            let lost = async {
                match &shard_lost {
                    Some(token) => token.triggered().await,
                    None => std::future::pending().await,
                }
            };
            let finished = tokio::select! {
                () = &mut run => true,
                () = term.triggered() => {
                    if shutdown.is_triggered() {
                        // Shutting down rather than deposed: let the reconcile finish.
                        run.await;
                        true
                    } else {
                        false
                    }
                }
                () = lost => {
                    if shutdown.is_triggered() {
                        run.await;
                        true
                    } else {
                        // Its shard went to another replica: abandon it (its writes are
                        // fenced) and queue it again, to be parked until the shard is back.
                        tracing::info!("object.ref" = %key, "shard lost mid-reconcile; abandoned");
                        self.queue.done(&key);
                        self.queue
                            .add_with_reason(key, Reason::Custom("shard lost".into()));
                        continue;
                    }
                }
            };
            if !finished {
                tracing::info!("object.ref" = %key, "leadership lost mid-reconcile; queued again");
                self.queue.done(&key);
                self.queue
                    .add_with_reason(key, Reason::Custom("leadership regained".into()));
                return;
            }
        }
    }

    async fn reconcile_one(&self, key: T) {
        let start = Instant::now();
        let fut = (self.reconcile)(key.clone(), self.ctx.clone());
        let outcome = AssertUnwindSafe(fut).catch_unwind().await;
        let elapsed = start.elapsed().as_secs_f64();
        match outcome {
            Ok(Ok(action)) => {
                self.metrics.ok.total.increment(1);
                self.metrics.ok.seconds.record(elapsed);
                self.queue.forget(&key);
                self.queue.done(&key);
                if let Some(d) = action.requeue_after() {
                    self.queue.add_after(key, d, Reason::Requeue);
                }
            }
            Ok(Err(error)) => {
                self.metrics.error.total.increment(1);
                self.metrics.error.seconds.record(elapsed);
                let action = (self.error_policy)(&key, &error, &self.ctx);
                let backoff = self.queue.next_backoff(&key);
                tracing::warn!(%error, requeue = ?action.requeue_after().map(|d| d.max(backoff)), "reconcile failed");
                self.queue.done(&key);
                if let Some(d) = action.requeue_after() {
                    self.queue.add_after(key, d.max(backoff), Reason::Backoff);
                }
            }
            Err(_panic) => {
                self.metrics.panic.total.increment(1);
                self.metrics.panic.seconds.record(elapsed);
                tracing::error!("reconcile panicked; retrying with back-off");
                let backoff = self.queue.next_backoff(&key);
                self.queue.done(&key);
                self.queue.add_after(key, backoff, Reason::Backoff);
            }
        }
    }
}

#[cfg(test)]
mod tests;
