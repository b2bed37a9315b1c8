//! Sharded ownership over etcd leases (docs/design.md §10): the replicas of one service split
//! its keys into a fixed number of shards and each shard is held by at most one replica, with
//! fenced writes.
//!
//! ```text
//!   ShardOwner task (one per replica):
//!     lease_grant(ttl) ─► put shards/<svc>/members/<lease hex> = "<N>:<identity>" (on the lease)
//!       list + watch shards/<svc>/ ─► members, owner keys
//!       on every change: desired = SH-3 over the live members (rendezvous: sticky)
//!         lost     owner key gone or re-created            ─► drop it (publish first)
//!         release  held, not desired: publish without it, then delete its key (compare term)
//!         claim    desired, no owner key: create shards/<svc>/owners/<NNNN> on the lease
//!                  (compare create_revision == 0); its create revision is the term
//!       keep-alive every ttl/3; no success in time (local deadline) or lease gone ─► drop all
//!     publishes Held { shard ─► term } on a tokio watch
//!
//!   ShardFencedStore: every write Txn, for each shard its keys fall in, also
//!       compares create_revision(owner key) == term       (the fence)
//!       puts the owner key again, same value and lease    (the stamp: who wrote, in history)
//!   so a replica that lost a shard (expired, released, paused past its lease) cannot write
//!   to it, whatever its timers think.
//! ```
//!
//! Hand-off never has two owners: the old owner publishes the loss before it deletes its key,
//! and the new one can create the key only once it is gone. A dead replica's keys go with its
//! lease, so its shards are taken within the lease TTL.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use flotilla_store::{
    Compare, CompareOp, DeleteResponse, Event as StoreEvent, KeyValue, LeaseId, Op, OpResult,
    RangeRequest, Revision, Store, StoreError, Txn, TxnResponse, WatchEvent, WatchStream, Wrapper,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::backoff::{Backoff, BackoffState};
use crate::leader::next_or_pending;
use crate::shutdown::Shutdown;

/// The prefix under which `service`'s shard members and owners live.
pub fn service_prefix(service: &str) -> String {
    format!("shards/{service}/")
}

/// The member key of the replica on `lease`.
pub fn member_key(service: &str, lease: LeaseId) -> String {
    format!("shards/{service}/members/{:016x}", lease.0)
}

/// The owner key of `shard`.
pub fn owner_key(service: &str, shard: u32) -> String {
    format!("shards/{service}/owners/{shard:04}")
}

/// How a [`ShardOwner`] takes part.
#[derive(Clone, Debug)]
pub struct ShardConfig {
    /// The service whose keys are sharded (`scheduler`, `work-executor`).
    pub service: String,
    /// How many shards the keyspace has. Every replica must agree; replicas that see another
    /// count among the live members hold nothing until they agree.
    pub shards: u32,
    /// This replica's identity (e.g. `host:pid`), the value of its member and owner keys.
    pub identity: String,
    /// The lease TTL: how long a dead replica's shards stay unowned. Default 15 s.
    pub ttl: Duration,
    /// Back-off between failed attempts to get a lease or to register.
    pub retry: Backoff,
}

impl ShardConfig {
    /// The defaults for `service` with `shards` shards, as `identity`.
    pub fn new(service: impl Into<String>, shards: u32, identity: impl Into<String>) -> Self {
        Self {
            service: service.into(),
            shards: shards.max(1),
            identity: identity.into(),
            ttl: Duration::from_secs(15),
            retry: Backoff::new(Duration::from_millis(200), Duration::from_secs(10))
                .with_jitter(true),
        }
    }

    /// Sets the lease TTL.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }
}

/// What one replica holds now: each shard with its term (the create revision of its owner
/// key). Empty while the replica has no lease.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Held {
    /// The lease the owner keys are attached to.
    pub lease: Option<LeaseId>,
    /// The shards held, with their terms.
    pub terms: BTreeMap<u32, Revision>,
    /// How many shards the keyspace has.
    pub shards: u32,
}

impl Held {
    /// Whether `shard` is held, in term `term`.
    pub fn holds(&self, shard: u32, term: Revision) -> bool {
        self.terms.get(&shard) == Some(&term)
    }

    /// The share of all shards held (0..=1).
    pub fn share(&self) -> f64 {
        if self.shards == 0 {
            return 0.0;
        }
        self.terms.len() as f64 / f64::from(self.shards)
    }
}

/// One row of [`table`]: a shard, who holds it and since when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardRow {
    /// The shard.
    pub shard: u32,
    /// The holder's identity; empty when the shard is unowned.
    pub owner: String,
    /// The holder's lease (its member id), if owned.
    pub lease: Option<LeaseId>,
    /// The term: the owner key's create revision (0 when unowned).
    pub term: Revision,
}

/// A live member of a service's shard group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardMember {
    /// Its member id (its lease, in hex).
    pub id: String,
    /// The shard count it runs with.
    pub shards: u32,
    /// Its identity.
    pub identity: String,
}

/// The services with shard groups in `store` (`shards/<svc>/…`), sorted.
pub async fn services(store: &dyn Store) -> flotilla_store::Result<Vec<String>> {
    let (kvs, _) = store.list("shards/", 1000).await?;
    Ok(kvs
        .iter()
        .filter_map(|kv| kv.key.strip_prefix("shards/")?.split('/').next())
        .map(str::to_owned)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect())
}

/// `service`'s members and its shard table as the store has them now: one row per shard of
/// the count its members run with (or per owner key found, when no member is live).
pub async fn table(
    store: &dyn Store,
    service: &str,
) -> flotilla_store::Result<(Vec<ShardMember>, Vec<ShardRow>)> {
    let (kvs, _) = store.list(&service_prefix(service), 1000).await?;
    let mut state = GroupState::default();
    for kv in kvs {
        state.apply_put(service, kv);
    }
    let members: Vec<ShardMember> = state.members.values().cloned().collect();
    let count = members
        .iter()
        .map(|m| m.shards)
        .max()
        .unwrap_or(0)
        .max(state.owners.keys().next_back().map_or(0, |s| s + 1));
    let rows = (0..count)
        .map(|shard| match state.owners.get(&shard) {
            Some(kv) => ShardRow {
                shard,
                owner: String::from_utf8_lossy(&kv.value).into_owned(),
                lease: kv.lease,
                term: kv.create_revision,
            },
            None => ShardRow {
                shard,
                owner: String::new(),
                lease: None,
                term: 0,
            },
        })
        .collect();
    Ok((members, rows))
}

/// A replica's membership in its service's shard group. Stop it with [`ShardOwner::resign`]
/// (or the [`Shutdown`] it was spawned with): it drops its shards at once and revokes its
/// lease, so the others take them without waiting for the TTL.
#[derive(Debug)]
pub struct ShardOwner {
    rx: watch::Receiver<Held>,
    stop: Shutdown,
    task: JoinHandle<()>,
    service: String,
    identity: String,
}

impl ShardOwner {
    /// Joins `config.service`'s shard group until `shutdown` fires.
    pub fn spawn(store: Arc<dyn Store>, config: ShardConfig, shutdown: &Shutdown) -> Self {
        let (tx, rx) = watch::channel(Held {
            shards: config.shards,
            ..Held::default()
        });
        let stop = shutdown.child();
        let service = config.service.clone();
        let identity = config.identity.clone();
        let metrics = ShardMetrics::new(&service);
        let run = Run {
            store,
            config,
            tx,
            stop: stop.clone(),
            metrics,
        };
        let task = tokio::spawn(run.run());
        Self {
            rx,
            stop,
            task,
            service,
            identity,
        }
    }

    /// The service whose shards these are.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// What this replica holds now.
    pub fn held(&self) -> Held {
        self.rx.borrow().clone()
    }

    /// Follows what this replica holds.
    pub fn subscribe(&self) -> watch::Receiver<Held> {
        self.rx.clone()
    }

    /// A store whose every write is fenced by the shards its keys fall in (`shard_of_key`
    /// maps a store key to its shard; a write to a key in no shard is refused).
    pub fn fenced_store(
        &self,
        inner: Arc<dyn Store>,
        shard_of_key: ShardKeyFn,
    ) -> ShardFencedStore {
        ShardFencedStore {
            inner,
            held: self.subscribe(),
            service: self.service.clone(),
            identity: Bytes::from(self.identity.clone().into_bytes()),
            shard_of_key,
        }
    }

    /// Drops every shard, revokes the lease and stops.
    pub async fn resign(mut self) {
        self.stop.trigger();
        if let Err(e) = (&mut self.task).await
            && e.is_panic()
        {
            tracing::error!(service = %self.service, "shard owner panicked");
        }
    }
}

impl Drop for ShardOwner {
    fn drop(&mut self) {
        self.stop.trigger();
    }
}

struct ShardMetrics {
    owned: metrics::Gauge,
    members: metrics::Gauge,
    acquired: metrics::Counter,
    released: metrics::Counter,
    lost: metrics::Counter,
}

impl ShardMetrics {
    fn new(service: &str) -> Self {
        let service = service.to_owned();
        let change = |c: &'static str| metrics::counter!("flotilla_shard_rebalances_total", "service" => service.clone(), "change" => c);
        Self {
            owned: metrics::gauge!("flotilla_shards_owned", "service" => service.clone()),
            members: metrics::gauge!("flotilla_shard_members", "service" => service.clone()),
            acquired: change("acquired"),
            released: change("released"),
            lost: change("lost"),
        }
    }
}

/// Members and owner keys of one group, as the watch shows them.
#[derive(Default)]
struct GroupState {
    /// By member id (lease hex).
    members: BTreeMap<String, ShardMember>,
    /// By shard.
    owners: BTreeMap<u32, KeyValue>,
}

enum Parsed {
    Member(String),
    Owner(u32),
    Other,
}

fn parse_key(service: &str, key: &str) -> Parsed {
    let Some(rest) = key.strip_prefix(&service_prefix(service)) else {
        return Parsed::Other;
    };
    if let Some(id) = rest.strip_prefix("members/") {
        return Parsed::Member(id.to_owned());
    }
    if let Some(shard) = rest.strip_prefix("owners/")
        && let Ok(s) = shard.parse::<u32>()
    {
        return Parsed::Owner(s);
    }
    Parsed::Other
}

impl GroupState {
    /// Applies a put; whether who holds or who is a member changed (a stamp, the same holder
    /// writing its key again, changes neither).
    fn apply_put(&mut self, service: &str, kv: KeyValue) -> bool {
        match parse_key(service, &kv.key) {
            Parsed::Member(id) => {
                let text = String::from_utf8_lossy(&kv.value);
                let (n, identity) = text.split_once(':').unwrap_or(("0", &text));
                let member = ShardMember {
                    id: id.clone(),
                    shards: n.parse().unwrap_or(0),
                    identity: identity.to_owned(),
                };
                self.members.insert(id, member.clone()) != Some(member)
            }
            Parsed::Owner(s) => {
                // A put older than what we know (our own claim, recorded before the watch
                // delivered it) does not go back in time.
                let same_holder = |cur: &KeyValue| {
                    cur.create_revision == kv.create_revision && cur.lease == kv.lease
                };
                match self.owners.get(&s) {
                    Some(cur) if cur.mod_revision > kv.mod_revision => false,
                    Some(cur) if same_holder(cur) => {
                        self.owners.insert(s, kv);
                        false
                    }
                    _ => {
                        self.owners.insert(s, kv);
                        true
                    }
                }
            }
            Parsed::Other => false,
        }
    }

    /// Applies a delete; whether anything changed.
    fn apply_delete(&mut self, service: &str, key: &str, revision: Revision) -> bool {
        match parse_key(service, key) {
            Parsed::Member(id) => self.members.remove(&id).is_some(),
            Parsed::Owner(s) => {
                if self
                    .owners
                    .get(&s)
                    .is_some_and(|cur| cur.mod_revision <= revision)
                {
                    self.owners.remove(&s);
                    true
                } else {
                    false
                }
            }
            Parsed::Other => false,
        }
    }
}

struct Run {
    store: Arc<dyn Store>,
    config: ShardConfig,
    tx: watch::Sender<Held>,
    stop: Shutdown,
    metrics: ShardMetrics,
}

enum TermEnd {
    Stopped,
    Lost(String),
}

impl Run {
    async fn run(self) {
        let mut backoff = BackoffState::new(self.config.retry);
        while !self.stop.is_triggered() {
            let sent = Instant::now();
            // Bounded by a TTL: a grant slower than that gives a lease too short to use, and
            // a hung one would keep this replica out of the group for the client's timeout.
            let granted = tokio::select! {
                () = self.stop.triggered() => break,
                r = tokio::time::timeout(self.config.ttl, self.store.lease_grant(self.config.ttl)) => {
                    r.unwrap_or_else(|_| Err(StoreError::unavailable("lease grant outlasted a lease TTL")))
                }
            };
            let (lease, valid_until) = match granted {
                Ok(lease) => (lease.id, sent + lease.ttl),
                Err(error) => {
                    let delay = backoff.next_delay();
                    tracing::warn!(service = %self.config.service, %error, retry_in = ?delay, "shards: cannot get a lease");
                    self.pause(delay).await;
                    continue;
                }
            };
            let began = Instant::now();
            let end = self.term(lease, valid_until).await;
            self.publish(BTreeMap::new(), None);
            self.revoke(lease).await;
            match end {
                TermEnd::Stopped => break,
                TermEnd::Lost(reason) => {
                    // A term that lasted a TTL was a success: the back-off starts over, so
                    // that a long-lived replica's occasional loss is not met with the
                    // longest delay its earlier losses built up.
                    if began.elapsed() >= self.config.ttl {
                        backoff.reset();
                    }
                    let delay = backoff.next_delay();
                    tracing::warn!(service = %self.config.service, %reason, retry_in = ?delay, "shards: membership ended; joining again");
                    self.pause(delay).await;
                }
            }
        }
        self.publish(BTreeMap::new(), None);
        tracing::info!(service = %self.config.service, "shards: left the group");
    }

    async fn pause(&self, delay: Duration) {
        tokio::select! {
            () = self.stop.triggered() => {}
            () = tokio::time::sleep(delay) => {}
        }
    }

    async fn revoke(&self, lease: LeaseId) {
        // Bounded by a TTL: by then the lease has expired anyway.
        let revoked = tokio::time::timeout(self.config.ttl, self.store.lease_revoke(lease))
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::unavailable(
                    "lease revoke outlasted a lease TTL",
                ))
            });
        match revoked {
            Ok(()) | Err(StoreError::LeaseNotFound { .. }) => {}
            Err(error) => {
                tracing::debug!(service = %self.config.service, %error, "lease revoke failed; it will expire");
            }
        }
    }

    fn publish(&self, terms: BTreeMap<u32, Revision>, lease: Option<LeaseId>) {
        self.metrics.owned.set(terms.len() as f64);
        let next = Held {
            lease,
            terms,
            shards: self.config.shards,
        };
        self.tx.send_if_modified(|held| {
            if *held == next {
                false
            } else {
                *held = next;
                true
            }
        });
    }

    /// One lease: register, then follow the group until the lease is lost or we stop.
    async fn term(&self, lease: LeaseId, mut valid_until: Instant) -> TermEnd {
        let service = &self.config.service;
        let margin = self.config.ttl / 10;
        let renew = (self.config.ttl / 3).max(Duration::from_millis(10));
        let me = format!("{:016x}", lease.0);
        let value = format!("{}:{}", self.config.shards, self.config.identity);
        if let Err(e) = self
            .store
            .put(&member_key(service, lease), Bytes::from(value), Some(lease))
            .await
        {
            return TermEnd::Lost(format!("cannot register: {e}"));
        }
        tracing::info!(%service, member = %me, identity = %self.config.identity, shards = self.config.shards, "shards: joined the group");
        let mut state = GroupState::default();
        let mut watch: Option<WatchStream> = None;
        let mut held: BTreeMap<u32, Revision> = BTreeMap::new();
        let mut warned_count = false;
        let mut next_renew = Instant::now() + renew;
        let mut unlisted_since: Option<Instant> = None;
        loop {
            let expires = valid_until.checked_sub(margin).unwrap_or(valid_until);
            if watch.is_none() {
                match tokio::time::timeout_at(expires, self.relist()).await {
                    Ok(Ok((s, w))) => {
                        state = s;
                        watch = Some(w);
                        unlisted_since = None;
                    }
                    Ok(Err(error)) => {
                        // Blind, we would keep our member key (so that the others leave our
                        // shards alone) without seeing what changes: give up after a TTL.
                        let since = *unlisted_since.get_or_insert_with(Instant::now);
                        if since.elapsed() >= self.config.ttl {
                            self.lose_all(&mut held);
                            return TermEnd::Lost(format!(
                                "cannot list the group for a lease TTL: {error}"
                            ));
                        }
                        tracing::warn!(%service, %error, "shards: cannot list the group; retrying");
                    }
                    Err(_) => {
                        self.lose_all(&mut held);
                        return TermEnd::Lost("listing the group outlasted the lease".into());
                    }
                }
                if watch.is_some()
                    && let Err(reason) = self
                        .rebalance_until(
                            expires,
                            &me,
                            lease,
                            &mut state,
                            &mut held,
                            &mut warned_count,
                        )
                        .await
                {
                    return TermEnd::Lost(reason);
                }
            }
            tokio::select! {
                () = self.stop.triggered() => {
                    if !held.is_empty() {
                        tracing::info!(%service, shards = ?held.keys().collect::<Vec<_>>(), "shards: releasing every shard (stopping)");
                    }
                    return TermEnd::Stopped;
                }
                () = tokio::time::sleep_until(expires) => {
                    self.lose_all(&mut held);
                    return TermEnd::Lost("no keep-alive succeeded in time; the lease may expire".into());
                }
                () = tokio::time::sleep_until(next_renew) => {
                    next_renew = Instant::now() + renew;
                    let sent = Instant::now();
                    // Bounded by the deadline: a keep-alive that hangs must not keep us
                    // believing we hold shards past it.
                    match tokio::time::timeout_at(expires, self.store.lease_keep_alive(lease)).await {
                        Ok(Ok(ttl)) => valid_until = sent + ttl,
                        Ok(Err(e @ StoreError::LeaseNotFound { .. })) => {
                            self.lose_all(&mut held);
                            return TermEnd::Lost(e.to_string());
                        }
                        Ok(Err(error)) => tracing::warn!(%service, %error, "shards: lease keep-alive failed"),
                        Err(_) => {
                            self.lose_all(&mut held);
                            return TermEnd::Lost("no keep-alive succeeded in time; the lease may expire".into());
                        }
                    }
                    let expires = valid_until.checked_sub(margin).unwrap_or(valid_until);
                    // A periodic look, in case a claim failed for a reason no event repeats.
                    if watch.is_some()
                        && let Err(reason) = self.rebalance_until(expires, &me, lease, &mut state, &mut held, &mut warned_count).await
                    {
                        return TermEnd::Lost(reason);
                    }
                }
                item = next_or_pending(&mut watch) => {
                    match item {
                        Some(Ok(WatchEvent::Batch(batch))) => {
                            let mut changed = false;
                            for ev in batch.events {
                                changed |= match ev {
                                    StoreEvent::Put(kv) => state.apply_put(service, kv),
                                    StoreEvent::Delete { key, mod_revision, .. } => {
                                        state.apply_delete(service, &key, mod_revision)
                                    }
                                };
                            }
                            // Stamps (every fenced write puts its shard's owner key again)
                            // change nothing to look at.
                            if changed
                                && let Err(reason) = self.rebalance_until(expires, &me, lease, &mut state, &mut held, &mut warned_count).await
                            {
                                return TermEnd::Lost(reason);
                            }
                        }
                        Some(Ok(WatchEvent::Progress { .. })) => {}
                        Some(Err(error)) => {
                            tracing::debug!(%service, %error, "shards: group watch broke; listing again");
                            watch = None;
                        }
                        None => watch = None,
                    }
                }
            }
        }
    }

    /// [`Run::rebalance`], given up (with every shard) if it runs past `expires`, when the
    /// lease may be gone.
    async fn rebalance_until(
        &self,
        expires: Instant,
        me: &str,
        lease: LeaseId,
        state: &mut GroupState,
        held: &mut BTreeMap<u32, Revision>,
        warned_count: &mut bool,
    ) -> Result<(), String> {
        let done = tokio::time::timeout_at(
            expires,
            self.rebalance(me, lease, state, held, warned_count),
        )
        .await;
        match done {
            Ok(r) => r,
            Err(_) => {
                self.lose_all(held);
                Err("rebalancing outlasted the lease".into())
            }
        }
    }

    async fn relist(&self) -> flotilla_store::Result<(GroupState, WatchStream)> {
        let service = &self.config.service;
        let resp = self
            .store
            .range(RangeRequest {
                prefix: service_prefix(service),
                ..RangeRequest::default()
            })
            .await?;
        let mut state = GroupState::default();
        for kv in resp.kvs {
            state.apply_put(service, kv);
        }
        let watch = self
            .store
            .watch(&service_prefix(service), Some(resp.revision + 1))
            .await?;
        Ok((state, watch))
    }

    fn lose_all(&self, held: &mut BTreeMap<u32, Revision>) {
        if !held.is_empty() {
            self.metrics.lost.increment(held.len() as u64);
            tracing::warn!(service = %self.config.service, shards = ?held.keys().collect::<Vec<_>>(), "shards: lost every shard");
            held.clear();
            self.publish(BTreeMap::new(), None);
        }
    }

    /// Brings what we hold in line with SH-3 over the members we see. `Err` ends the term.
    async fn rebalance(
        &self,
        me: &str,
        lease: LeaseId,
        state: &mut GroupState,
        held: &mut BTreeMap<u32, Revision>,
        warned_count: &mut bool,
    ) -> Result<(), String> {
        let service = &self.config.service;
        let n = self.config.shards;
        self.metrics.members.set(state.members.len() as f64);
        if !state.members.contains_key(me) {
            self.lose_all(held);
            return Err("our member key is gone".into());
        }
        let disagree: Vec<&ShardMember> =
            state.members.values().filter(|m| m.shards != n).collect();
        let desired: BTreeSet<u32> = if disagree.is_empty() {
            *warned_count = false;
            let ids: Vec<&str> = state.members.keys().map(String::as_str).collect();
            flotilla_core::shard::desired_shards(me, &ids, n)
                .into_iter()
                .collect()
        } else {
            if !*warned_count {
                tracing::error!(%service, shards = n, others = ?disagree.iter().map(|m| format!("{}={}", m.identity, m.shards)).collect::<Vec<_>>(),
                    "shards: replicas disagree on the shard count (--shards); holding nothing until they agree");
                *warned_count = true;
            }
            BTreeSet::new()
        };
        let mut changed = false;
        // Lost: our key is gone, re-created, or not on our lease.
        let lost: Vec<u32> = held
            .iter()
            .filter(|(s, term)| {
                state
                    .owners
                    .get(s)
                    .is_none_or(|kv| kv.create_revision != **term || kv.lease != Some(lease))
            })
            .map(|(s, _)| *s)
            .collect();
        for s in lost {
            held.remove(&s);
            self.metrics.lost.increment(1);
            tracing::warn!(%service, shard = s, "shards: lost a shard (its owner key is gone or not ours)");
            changed = true;
        }
        // Release: publish first, then delete.
        let release: Vec<(u32, Revision)> = held
            .iter()
            .filter(|(s, _)| !desired.contains(s))
            .map(|(s, t)| (*s, *t))
            .collect();
        if !release.is_empty() {
            for (s, _) in &release {
                held.remove(s);
            }
            self.publish(held.clone(), Some(lease));
            changed = false;
            for (s, term) in release {
                self.metrics.released.increment(1);
                tracing::info!(%service, shard = s, term, "shards: releasing a shard to another replica");
                self.delete_owner(state, s, term).await;
            }
        }
        // Stray keys on our lease that we do not hold (a claim whose reply was lost, a delete
        // that failed): adopt them if desired, else delete them again.
        let strays: Vec<(u32, Revision)> = state
            .owners
            .iter()
            .filter(|(s, kv)| kv.lease == Some(lease) && !held.contains_key(s))
            .map(|(s, kv)| (*s, kv.create_revision))
            .collect();
        for (s, term) in strays {
            if desired.contains(&s) {
                held.insert(s, term);
                self.metrics.acquired.increment(1);
                tracing::info!(%service, shard = s, term, "shards: holding a shard (adopted our own key)");
                changed = true;
            } else {
                self.delete_owner(state, s, term).await;
            }
        }
        // Claim: desired shards with no owner key.
        let unowned: Vec<u32> = desired
            .iter()
            .copied()
            .filter(|s| !state.owners.contains_key(s))
            .collect();
        for s in unowned {
            let key = owner_key(service, s);
            let txn = Txn::new()
                .when(Compare::absent(key.clone()))
                .and_then(Op::put_with_lease(
                    key.clone(),
                    Bytes::from(self.config.identity.clone().into_bytes()),
                    lease,
                ));
            match self.store.txn(txn).await {
                Ok(TxnResponse::Committed { revision, .. }) => {
                    held.insert(s, revision);
                    state.owners.insert(
                        s,
                        KeyValue {
                            key,
                            value: Bytes::from(self.config.identity.clone().into_bytes()),
                            create_revision: revision,
                            mod_revision: revision,
                            version: 1,
                            lease: Some(lease),
                        },
                    );
                    self.metrics.acquired.increment(1);
                    tracing::info!(%service, shard = s, term = revision, "shards: holding a shard");
                    changed = true;
                }
                Ok(TxnResponse::Failed { current, .. }) => {
                    // Someone holds it after all; the watch will show us.
                    if let Some(Some(kv)) = current.into_iter().next() {
                        state.apply_put(service, kv);
                    }
                }
                Err(error) => {
                    tracing::debug!(%service, shard = s, %error, "shards: claim failed; will look again");
                }
            }
        }
        if changed {
            self.publish(held.clone(), Some(lease));
        }
        Ok(())
    }

    /// Deletes our owner key of `shard` (if still of `term`) and forgets it in `state`.
    async fn delete_owner(&self, state: &mut GroupState, shard: u32, term: Revision) {
        let key = owner_key(&self.config.service, shard);
        let txn = Txn::new()
            .when(Compare::create_revision(
                key.clone(),
                CompareOp::Equal,
                term,
            ))
            .and_then(Op::delete(key));
        match self.store.txn(txn).await {
            Ok(TxnResponse::Committed { .. }) => {
                if state
                    .owners
                    .get(&shard)
                    .is_some_and(|kv| kv.create_revision == term)
                {
                    state.owners.remove(&shard);
                }
            }
            Ok(TxnResponse::Failed { .. }) => {}
            Err(error) => {
                tracing::warn!(service = %self.config.service, shard, %error, "shards: cannot delete our owner key; will try again");
            }
        }
    }
}

/// Maps a store key (as the fenced store sees it) to its shard; `None`: not a sharded key.
pub type ShardKeyFn = Arc<dyn Fn(&str) -> Option<u32> + Send + Sync>;

/// The [`ShardKeyFn`] of objects stored under `prefix` (`bindings/`): the rest of the key
/// (`<namespace>/<name>`) is the SH-1 shard key. Keys elsewhere are in no shard.
pub fn prefix_shards(prefix: &'static str, shards: u32) -> ShardKeyFn {
    Arc::new(move |key: &str| {
        key.strip_prefix(prefix)
            .map(|rest| flotilla_core::shard::shard_of(rest, shards))
    })
}

/// A [`Store`] whose every write is fenced by the shards of the keys it writes (see the
/// module docs). A write to a shard not held, or a key in no shard, fails with
/// [`StoreError::LeadershipLost`] / [`StoreError::InvalidArgument`]. Reads, watches and
/// leases pass through.
pub struct ShardFencedStore {
    inner: Arc<dyn Store>,
    held: watch::Receiver<Held>,
    service: String,
    identity: Bytes,
    shard_of_key: ShardKeyFn,
}

impl std::fmt::Debug for ShardFencedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardFencedStore")
            .field("service", &self.service)
            .field("held", &*self.held.borrow())
            .finish_non_exhaustive()
    }
}

impl ShardFencedStore {
    /// Fenced by whatever `held` says at each write, stamping as `identity`. Usually made by
    /// [`ShardOwner::fenced_store`].
    pub fn new(
        inner: Arc<dyn Store>,
        held: watch::Receiver<Held>,
        service: &str,
        identity: &str,
        shard_of_key: ShardKeyFn,
    ) -> Self {
        Self {
            inner,
            held,
            service: service.to_owned(),
            identity: Bytes::from(identity.to_owned().into_bytes()),
            shard_of_key,
        }
    }

    /// `txn` with, for each shard it writes, the fence compare and the stamp put appended;
    /// returns it with the index of the first fence compare and the number of the caller's
    /// operations.
    fn guard(&self, mut txn: Txn) -> flotilla_store::Result<(Txn, Vec<String>, usize)> {
        let mut shards = BTreeSet::new();
        for op in &txn.success {
            if matches!(op, Op::Get { .. }) {
                continue;
            }
            let key = op.key();
            match (self.shard_of_key)(key) {
                Some(s) => {
                    shards.insert(s);
                }
                None => {
                    return Err(StoreError::InvalidArgument(format!(
                        "{key}: not a key of {}'s shards; a sharded replica writes only sharded keys",
                        self.service
                    )));
                }
            }
        }
        let held = self.held.borrow().clone();
        let (Some(lease), ops) = (held.lease, txn.success.len()) else {
            return Err(StoreError::LeadershipLost {
                key: format!("{}(no shards held)", service_prefix(&self.service)),
            });
        };
        let mut fences = Vec::with_capacity(shards.len());
        for s in shards {
            let key = owner_key(&self.service, s);
            let Some(term) = held.terms.get(&s) else {
                return Err(StoreError::LeadershipLost { key });
            };
            txn.compares.push(Compare::create_revision(
                key.clone(),
                CompareOp::Equal,
                *term,
            ));
            txn.success.push(Op::put_with_lease(
                key.clone(),
                self.identity.clone(),
                lease,
            ));
            fences.push(key);
        }
        Ok((txn, fences, ops))
    }

    async fn fenced_txn(&self, txn: Txn) -> flotilla_store::Result<TxnResponse> {
        let fence_at = txn.compares.len();
        let (txn, fences, ops) = self.guard(txn)?;
        match self.inner.txn(txn).await? {
            TxnResponse::Failed {
                revision,
                failed,
                mut current,
            } => {
                if let Some(i) = failed.iter().find(|i| **i >= fence_at) {
                    return Err(StoreError::LeadershipLost {
                        key: fences[*i - fence_at].clone(),
                    });
                }
                current.truncate(fence_at);
                Ok(TxnResponse::Failed {
                    revision,
                    failed,
                    current,
                })
            }
            TxnResponse::Committed {
                revision,
                mut results,
            } => {
                results.truncate(ops);
                Ok(TxnResponse::Committed { revision, results })
            }
        }
    }
}

#[async_trait]
impl Wrapper for ShardFencedStore {
    fn inner(&self) -> &dyn Store {
        &*self.inner
    }

    async fn put(
        &self,
        key: &str,
        value: Bytes,
        lease: Option<LeaseId>,
    ) -> flotilla_store::Result<Revision> {
        let op = Op::Put {
            key: key.to_owned(),
            value,
            lease,
        };
        match self.fenced_txn(Txn::new().and_then(op)).await? {
            TxnResponse::Committed { revision, .. } => Ok(revision),
            TxnResponse::Failed { .. } => Err(StoreError::Internal(
                "fenced put failed without a failed compare".into(),
            )),
        }
    }

    async fn delete(&self, key: &str) -> flotilla_store::Result<DeleteResponse> {
        let txn = Txn::new().and_then(Op::get(key)).and_then(Op::delete(key));
        match self.fenced_txn(txn).await? {
            TxnResponse::Committed { revision, results } => {
                let prev = match results.into_iter().next() {
                    Some(OpResult::Get(prev)) => prev,
                    _ => None,
                };
                Ok(DeleteResponse { revision, prev })
            }
            TxnResponse::Failed { .. } => Err(StoreError::Internal(
                "fenced delete failed without a failed compare".into(),
            )),
        }
    }

    async fn txn(&self, txn: Txn) -> flotilla_store::Result<TxnResponse> {
        self.fenced_txn(txn).await
    }
}
