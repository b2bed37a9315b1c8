//! One watch per prefix per process: [`shared_watcher`] hands every caller that watches the
//! same prefix of the same store, with the same decoder and the same list/watch behaviour, a
//! subscription to one [`watcher`] instead of a watch of its own.
//!
//! `flotilla up` and `flotilla bench` run every service in one process on one store handle,
//! and five of the six watch the bindings: without sharing, etcd sends every binding version
//! five times, the process receives and frames it five times, and five watch streams are kept
//! alive. With it, one watch per prefix reaches the process and its events are fanned out as
//! `Arc`s. A service binary on its own shares only between its own controllers. See
//! docs/design.md §7 ("One watch per prefix").
//!
//! ```text
//!   shared_watcher(store, "bindings/", config, decode)  ── first poll ──► registry lookup
//!        │ key = (store handle, prefix, K, decoder, page size, relist, progress interval)
//!        ├─ found: subscribe (replay of the hub's state, then live events)
//!        └─ not found: spawn a hub task on watcher(…), register it (weakly), subscribe
//!
//!   hub task: watcher ─► Event ─► hub state (objects, revision, list in progress)
//!                           └───► every subscriber's unbounded queue (Arc clones)
//!             last subscriber gone ─► deregister, drop the watch
//! ```
//!
//! A subscriber sees exactly the protocol a [`watcher`] yields, so a [`crate::reflect`]ed
//! cache over it behaves as over a watch of its own: one that joins a running hub first gets
//! the hub's current state as a list (`Init`, one `InitApply` per object, `InitDone` at the
//! hub's revision), or, while the hub is itself (re-)listing, the part of that list read so
//! far, and then every later event in order. Queues are unbounded, like a client-go shared
//! informer's per-listener buffer: one slow subscriber delays no other, and holds at most
//! what its own watch would have left buffered in the connection.
//!
//! A consumer that joins a running watch is told what the watch holds, as a client-go shared
//! informer tells a handler added late: the state as of the watch's last event, which may be
//! older than the store while that event is on its way, or while a broken watch waits to be
//! resumed. A leader never decides on it alone: its [`crate::CacheBarrier`] compares its
//! caches with a listing of the store. Unlike a watch of its own, a shared watch reads on
//! whether or not its consumers do (every controller reads its feeds all the time), and its
//! metrics carry the name of its first consumer, so in `flotilla up` the `watch` label of
//! a shared prefix depends on which service subscribed first. If the hub's task ends with
//! consumers left (its runtime shut down, a decoder panicked), their streams end.
//!
//! Sharing is decided by the store handle's identity, so services given different handles
//! (a fault-injecting wrapper, another store) keep watches of their own. Decoders must be
//! stateless (zero-sized: a `fn` item or a closure that captures nothing), which is checked
//! at compile time, because the first subscriber's decoder decodes for all.

use std::any::{Any, TypeId};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Display;
use std::pin::Pin;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use flotilla_store::{KeyValue, Revision, Store};
use futures::{Stream, StreamExt};
use tokio::sync::{Notify, mpsc};

use super::{Event, Object, WatcherConfig, watcher};

/// What makes two watches the same watch.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct HubKey {
    /// The address of the store handle's allocation. The hub's task holds the handle (in its
    /// watch) until after it has deregistered, so the address cannot be reused by another
    /// store while the hub is registered.
    store: usize,
    prefix: String,
    value: TypeId,
    decoder: TypeId,
    page_size: usize,
    relist_on_break: bool,
    progress_interval: Duration,
}

/// A registered hub: the typed hub to join, and its head count for [`shared_watches`].
#[derive(Clone)]
struct Registered {
    hub: Weak<dyn Any + Send + Sync>,
    census: Weak<dyn Census>,
}

/// What [`shared_watches`] asks a hub of any value type.
trait Census: Send + Sync {
    fn subscribers(&self) -> usize;
}

impl<K: Send + Sync> Census for Hub<K> {
    fn subscribers(&self) -> usize {
        self.state()
            .subscribers
            .iter()
            .filter(|tx| !tx.is_closed())
            .count()
    }
}

/// The registry of live hubs: weak, so that a hub whose task was dropped (its runtime shut
/// down) is simply not found.
static HUBS: LazyLock<Mutex<HashMap<HubKey, Registered>>> = LazyLock::new(Mutex::default);

fn hubs() -> MutexGuard<'static, HashMap<HubKey, Registered>> {
    // Every mutation is one map insert or remove: a panic cannot leave it half-done.
    HUBS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The state a hub replays to a subscriber that joins late, and its subscribers.
struct State<K> {
    /// The objects as of `revision`, once a list has completed.
    objects: BTreeMap<String, Object<K>>,
    /// The revision `objects` reflects (a list's, an event's or a progress mark).
    revision: Revision,
    /// Whether a list has completed.
    synced: bool,
    /// A list in progress: its revision and the objects read so far.
    listing: Option<(Revision, Vec<Object<K>>)>,
    subscribers: Vec<mpsc::UnboundedSender<Event<K>>>,
}

impl<K> State<K> {
    fn apply(&mut self, event: &Event<K>) {
        match event {
            Event::Init { revision } => self.listing = Some((*revision, Vec::new())),
            Event::InitApply(object) => {
                if let Some((_, objects)) = self.listing.as_mut() {
                    objects.push(object.clone());
                }
            }
            Event::InitDone { revision } => {
                let listed = self.listing.take().map(|(_, o)| o).unwrap_or_default();
                self.objects = listed.into_iter().map(|o| (o.key.clone(), o)).collect();
                self.revision = *revision;
                self.synced = true;
            }
            Event::Apply(object) => {
                let newer = self
                    .objects
                    .get(&object.key)
                    .is_none_or(|o| o.revision <= object.revision);
                if newer {
                    self.objects.insert(object.key.clone(), object.clone());
                }
                self.revision = self.revision.max(object.revision);
            }
            Event::Delete { key, revision } => {
                if self
                    .objects
                    .get(key)
                    .is_some_and(|o| o.revision <= *revision)
                {
                    self.objects.remove(key);
                }
                self.revision = self.revision.max(*revision);
            }
            Event::Progress { revision } => self.revision = self.revision.max(*revision),
        }
    }

    /// What a subscriber joining now must be told first to be where the hub is.
    fn replay(&self) -> Vec<Event<K>> {
        if let Some((revision, listed)) = &self.listing {
            // A (re-)list is under way: its start and what it read so far; the rest and its
            // `InitDone` come live.
            std::iter::once(Event::Init {
                revision: *revision,
            })
            .chain(listed.iter().cloned().map(Event::InitApply))
            .collect()
        } else if self.synced {
            std::iter::once(Event::Init {
                revision: self.revision,
            })
            .chain(self.objects.values().cloned().map(Event::InitApply))
            .chain(std::iter::once(Event::InitDone {
                revision: self.revision,
            }))
            .collect()
        } else {
            Vec::new()
        }
    }
}

struct Hub<K> {
    state: Mutex<State<K>>,
    /// Woken when a subscriber leaves, so that a quiet hub notices it has none left.
    left: Notify,
    name: String,
    /// `flotilla_watcher_subscribers{watch}`, moved by what joins and leaves (two hubs may
    /// carry one name: a name is not an identity).
    subscribers: metrics::Gauge,
}

impl<K> Hub<K> {
    fn state(&self) -> MutexGuard<'_, State<K>> {
        // Every mutation keeps the state consistent between statements that can panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a subscriber with the replay of the current state already queued.
    fn subscribe(&self) -> mpsc::UnboundedReceiver<Event<K>> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut state = self.state();
        for event in state.replay() {
            // The receiver is in hand: this cannot fail.
            let _ = tx.send(event);
        }
        state.subscribers.push(tx);
        self.subscribers.increment(1.0);
        rx
    }

    /// Drops the subscribers that left; whether any is left.
    fn prune(&self, state: &mut State<K>) -> bool {
        let before = state.subscribers.len();
        state.subscribers.retain(|tx| !tx.is_closed());
        self.subscribers
            .decrement((before - state.subscribers.len()) as f64);
        !state.subscribers.is_empty()
    }

    /// Hands `event` to every subscriber; false when none is left.
    fn fan_out(&self, event: Event<K>) -> bool {
        let mut state = self.state();
        state.apply(&event);
        for tx in &state.subscribers {
            // A subscriber that left is pruned below.
            let _ = tx.send(event.clone());
        }
        self.prune(&mut state)
    }
}

/// Where a hub is registered, so that it can take itself out.
struct Registration {
    key: HubKey,
    hub: Weak<dyn Any + Send + Sync>,
}

impl Registration {
    /// Removes the registry entry, unless another hub has taken the key meanwhile.
    fn remove_from(&self, hubs: &mut HashMap<HubKey, Registered>) {
        if hubs.get(&self.key).is_some_and(|r| r.hub.ptr_eq(&self.hub)) {
            hubs.remove(&self.key);
        }
    }
}

/// A subscription: the hub's events for one consumer. Dropping it tells the hub.
struct Subscription<K> {
    events: mpsc::UnboundedReceiver<Event<K>>,
    hub: Arc<Hub<K>>,
}

impl<K> Stream for Subscription<K> {
    type Item = Event<K>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Event<K>>> {
        self.events.poll_recv(cx)
    }
}

impl<K> Drop for Subscription<K> {
    fn drop(&mut self) {
        self.events.close();
        self.hub.left.notify_one();
    }
}

/// [`watcher`] of `prefix` on `store`, shared with every other `shared_watcher` of this
/// process on the same store handle, prefix, value type and decoder with the same page size,
/// re-list behaviour and progress interval (see the module docs). The first subscriber's
/// name and back-off serve the shared watch. The subscription starts on the first poll.
///
/// `decode` must be zero-sized (a `fn` item, or a closure that captures nothing): the first
/// subscriber's decoder decodes for every subscriber.
pub fn shared_watcher<K, E, D>(
    store: Arc<dyn Store>,
    prefix: impl Into<String>,
    config: WatcherConfig,
    decode: D,
) -> impl Stream<Item = Event<K>> + Send + 'static
where
    K: Send + Sync + 'static,
    E: Display + 'static,
    D: Fn(&KeyValue) -> Result<K, E> + Send + Sync + 'static,
{
    const {
        assert!(
            std::mem::size_of::<D>() == 0,
            "a shared watch's decoder must capture nothing"
        )
    };
    let prefix = prefix.into();
    futures::stream::once(async move { subscribe(store, prefix, config, decode) }).flatten()
}

fn subscribe<K, E, D>(
    store: Arc<dyn Store>,
    prefix: String,
    config: WatcherConfig,
    decode: D,
) -> Subscription<K>
where
    K: Send + Sync + 'static,
    E: Display + 'static,
    D: Fn(&KeyValue) -> Result<K, E> + Send + Sync + 'static,
{
    let key = HubKey {
        store: Arc::as_ptr(&store).cast::<()>() as usize,
        prefix: prefix.clone(),
        value: TypeId::of::<K>(),
        decoder: TypeId::of::<D>(),
        page_size: config.page_size,
        relist_on_break: config.relist_on_break,
        progress_interval: config.progress_interval,
    };
    let mut hubs = hubs();
    if let Some(hub) = hubs
        .get(&key)
        .and_then(|r| r.hub.upgrade())
        .and_then(|hub| hub.downcast::<Hub<K>>().ok())
    {
        let events = hub.subscribe();
        tracing::debug!(watch = %hub.name, prefix = %prefix, "sharing a watch");
        return Subscription { events, hub };
    }
    let name = config.name.clone().unwrap_or_else(|| prefix.clone());
    let hub = Arc::new(Hub {
        state: Mutex::new(State {
            objects: BTreeMap::new(),
            revision: 0,
            synced: false,
            listing: None,
            subscribers: Vec::new(),
        }),
        left: Notify::new(),
        subscribers: metrics::gauge!("flotilla_watcher_subscribers", "watch" => name.clone()),
        name,
    });
    let erased: Arc<dyn Any + Send + Sync> = hub.clone();
    let weak = Arc::downgrade(&erased);
    let census: Arc<dyn Census> = hub.clone();
    hubs.retain(|_, r| r.hub.strong_count() > 0);
    hubs.insert(
        key.clone(),
        Registered {
            hub: weak.clone(),
            census: Arc::downgrade(&census),
        },
    );
    let events = hub.subscribe();
    drop(hubs);
    let registration = Registration { key, hub: weak };
    let upstream = watcher(store, prefix, config, decode);
    tokio::spawn(run(hub.clone(), upstream, registration));
    Subscription { events, hub }
}

/// The hub's task: fans the watch out until no subscriber is left.
async fn run<K>(
    hub: Arc<Hub<K>>,
    upstream: impl Stream<Item = Event<K>> + Send,
    registration: Registration,
) where
    K: Send + Sync + 'static,
{
    // However the task ends (its last consumer left, its runtime shut down, a decoder
    // panicked), the hub is deregistered and its consumers' queues are closed, so that their
    // streams end rather than wait forever on a hub that is gone.
    let closing = Closing {
        hub: hub.clone(),
        registration,
    };
    let mut upstream = std::pin::pin!(upstream);
    loop {
        let left = hub.left.notified();
        let alive = tokio::select! {
            event = upstream.next() => match event {
                Some(event) => hub.fan_out(event),
                // A watcher never ends; if it did, its consumers' streams end with it.
                None => return,
            },
            () = left => hub.prune(&mut hub.state()),
        };
        if !alive && retire(&hub, &closing.registration) {
            tracing::debug!(watch = %hub.name, "the last subscriber left; closing the shared watch");
            return;
        }
    }
}

/// Deregisters the hub and closes every consumer's queue when the hub's task ends; both
/// under the registry's lock, so that no consumer can join in between.
struct Closing<K> {
    hub: Arc<Hub<K>>,
    registration: Registration,
}

impl<K> Drop for Closing<K> {
    fn drop(&mut self) {
        let mut hubs = hubs();
        self.registration.remove_from(&mut hubs);
        let mut state = self.hub.state();
        let open = state.subscribers.len();
        state.subscribers.clear();
        self.hub.subscribers.decrement(open as f64);
    }
}

/// Deregisters the hub if it still has no subscriber (checked under the registry's lock, which
/// every new subscriber takes first, so none can join a hub that is going away).
fn retire<K>(hub: &Hub<K>, registration: &Registration) -> bool {
    let mut hubs = hubs();
    if hub.prune(&mut hub.state()) {
        return false;
    }
    registration.remove_from(&mut hubs);
    true
}

/// The shared watches open on `store` (this very handle): each watched prefix with its
/// consumers, one entry per store watch, sorted. For tests and diagnostics: in `flotilla up`
/// the bindings are two watches (the full decode, five consumers; cluster-health's slim one).
pub fn shared_watches(store: &Arc<dyn Store>) -> Vec<(String, usize)> {
    let address = Arc::as_ptr(store).cast::<()>() as usize;
    let mut out: Vec<(String, usize)> = hubs()
        .iter()
        .filter(|(key, _)| key.store == address)
        .filter_map(|(key, r)| Some((key.prefix.clone(), r.census.upgrade()?.subscribers())))
        .collect();
    out.sort();
    out
}
