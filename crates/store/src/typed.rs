//! The typed layer: protobuf-encoded objects under the key layout of docs/design.md §3.
//!
//! ```text
//!   clusters/<name>                       Cluster
//!   policies/<ns>/<name>                  PropagationPolicy
//!   clusterpolicies/<name>                ClusterPropagationPolicy
//!   clustertaintpolicies/<name>           ClusterTaintPolicy
//!   overridepolicies/<ns>/<name>          OverridePolicy
//!   clusteroverridepolicies/<name>        ClusterOverridePolicy
//!   secrets/<ns>/<name>                   Secret (member credentials)
//!   workloads/<ns>/<kind>[.<group>]/<name>  Workload (resource template)
//!   bindings/<ns>/<name>                  ResourceBinding (ClusterResourceBinding: <ns> empty)
//!   works/<cluster>/<ns>/<name>           Work
//!   events/<ns>/<name>                    Event (on a TTL lease)
//! ```
//!
//! A cluster-scoped template (a Namespace, a ClusterRole) has an empty `<ns>` segment, and so
//! have its binding — a ClusterResourceBinding — and its Works: `workloads//Namespace/team-a`,
//! `bindings//team-a-namespace`. Every controller watches `bindings/` and so serves both binding
//! kinds alike (CR-3).
//!
//! `metadata.resourceVersion` is the key's mod_revision: it is never stored in the value,
//! only filled in on read. `create` fails with [`StoreError::AlreadyExists`] when the key
//! exists; `update` and `delete` carry a precondition (the revision the caller read) and fail
//! with [`StoreError::Conflict`] when it is stale — there is no last-writer-wins path.
//! `metadata.generation` starts at 1 and is bumped by `update` only when the spec changes
//! (everything but metadata and status).

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use flotilla_core::resource;
use flotilla_proto::Resource;
use flotilla_proto::v1;

use crate::StoreRef;
use crate::error::{Result, StoreError};
use crate::types::{
    Compare, CompareOp, KeyValue, LeaseId, MAX_TXN_OPS, Op, Revision, Txn, TxnResponse,
};

/// A wire resource stored under its own key.
pub trait Stored: Resource {
    /// The key prefix of the kind, ending with `/`.
    const PREFIX: &'static str;

    /// The object's key (relative to the store namespace).
    fn key(&self) -> String;

    /// Clears the status (if the kind has one), leaving metadata and spec.
    fn clear_status(&mut self);

    /// Whether the spec (everything but metadata and status) is the same in both. The
    /// default compares encodings with metadata and status stripped; kinds made of
    /// metadata, `spec` and `status` alone compare their `spec` fields in place, which
    /// copies nothing (every update of such an object asks, docs/design.md §7).
    fn same_spec(&self, other: &Self) -> bool {
        let strip = |o: &Self| {
            let mut o = o.clone();
            o.clear_status();
            *o.meta_mut() = v1::ObjectMeta::default();
            o.encode_to_vec()
        };
        strip(self) == strip(other)
    }
}

/// The key of a cluster-scoped object.
pub fn cluster_scoped_key(prefix: &str, name: &str) -> String {
    format!("{prefix}{name}")
}

/// The key of a namespaced object.
pub fn namespaced_key(prefix: &str, namespace: &str, name: &str) -> String {
    format!("{prefix}{namespace}/{name}")
}

/// The key of a Workload: `workloads/<ns>/<kind>[.<group>]/<name>` (RM-1: the API group is
/// part of a template's identity, so `example.com/v1 Deployment x` and `apps/v1 Deployment x`
/// are two templates).
pub fn workload_key(namespace: &str, api_version: &str, kind: &str, name: &str) -> String {
    let segment = resource::kind_segment(resource::group(api_version), kind);
    workload_key_of_segment(namespace, &segment, name)
}

/// The key of a Workload from its kind segment (`Deployment.apps`, see
/// [`resource::kind_segment`]).
pub fn workload_key_of_segment(namespace: &str, segment: &str, name: &str) -> String {
    format!("{}{namespace}/{segment}/{name}", v1::Workload::PREFIX)
}

/// The key of a Work (`works/<cluster>/<ns>/<name>`).
pub fn work_key(cluster: &str, namespace: &str, name: &str) -> String {
    format!("{}{cluster}/{namespace}/{name}", v1::Work::PREFIX)
}

/// The prefix of every Work on one cluster.
pub fn works_on_cluster_prefix(cluster: &str) -> String {
    format!("{}{cluster}/", v1::Work::PREFIX)
}

macro_rules! stored {
    ($ty:ident, $prefix:literal, cluster, $status:tt) => {
        impl Stored for v1::$ty {
            const PREFIX: &'static str = $prefix;
            fn key(&self) -> String {
                cluster_scoped_key(Self::PREFIX, self.name())
            }
            fn clear_status(&mut self) {
                stored!(@clear self, $status);
            }
            stored!(@same_spec_fn $status);
        }
    };
    ($ty:ident, $prefix:literal, namespaced, $status:tt) => {
        impl Stored for v1::$ty {
            const PREFIX: &'static str = $prefix;
            fn key(&self) -> String {
                namespaced_key(Self::PREFIX, self.namespace(), self.name())
            }
            fn clear_status(&mut self) {
                stored!(@clear self, $status);
            }
            stored!(@same_spec_fn $status);
        }
    };
    (@clear $self:ident, status) => {
        $self.status = None;
    };
    (@clear $self:ident, none) => {};
    (@same_spec_fn status) => {
        fn same_spec(&self, other: &Self) -> bool {
            // metadata, spec and status are the message's only fields
            self.spec == other.spec
        }
    };
    (@same_spec_fn none) => {};
}

stored!(Cluster, "clusters/", cluster, status);
stored!(PropagationPolicy, "policies/", namespaced, none);
stored!(ClusterPropagationPolicy, "clusterpolicies/", cluster, none);
stored!(ClusterTaintPolicy, "clustertaintpolicies/", cluster, none);
stored!(OverridePolicy, "overridepolicies/", namespaced, none);
stored!(
    ClusterOverridePolicy,
    "clusteroverridepolicies/",
    cluster,
    none
);
stored!(Secret, "secrets/", namespaced, none);
stored!(ResourceBinding, "bindings/", namespaced, status);
stored!(Event, "events/", namespaced, none);
stored!(StatusCollection, "statuscollections/", cluster, none);

impl Stored for v1::Workload {
    const PREFIX: &'static str = "workloads/";
    fn key(&self) -> String {
        workload_key(self.namespace(), &self.api_version, &self.kind, self.name())
    }
    fn clear_status(&mut self) {
        self.status.clear();
    }
}

impl Stored for v1::Work {
    const PREFIX: &'static str = "works/";
    fn key(&self) -> String {
        let cluster = self.spec.as_ref().map_or("", |s| s.cluster.as_str());
        work_key(cluster, self.namespace(), self.name())
    }
    fn clear_status(&mut self) {
        self.status = None;
    }
    fn same_spec(&self, other: &Self) -> bool {
        // metadata, spec and status are the message's only fields
        self.spec == other.spec
    }
}

/// Decodes a stored value and fills in `resourceVersion` from the key's mod revision.
pub fn decode<R: Stored>(kv: &KeyValue) -> Result<R> {
    let mut obj = R::decode(kv.value.as_ref()).map_err(StoreError::codec)?;
    obj.meta_mut().resource_version = kv.mod_revision;
    Ok(obj)
}

/// Encodes an object for storage (without its resourceVersion).
pub fn encode<R: Stored>(obj: &R) -> Bytes {
    let mut obj = obj.clone();
    encode_mut(&mut obj)
}

/// [`encode`] of an object the caller may change: its resourceVersion is left out for the
/// encoding and put back, which spares the copy `encode` makes (every write of a failover
/// went through that copy).
fn encode_mut<R: Stored>(obj: &mut R) -> Bytes {
    let revision = std::mem::take(&mut obj.meta_mut().resource_version);
    let bytes = Bytes::from(obj.encode_to_vec());
    obj.meta_mut().resource_version = revision;
    bytes
}

/// Whether the spec (everything but metadata and status) differs.
pub fn spec_changed<R: Stored>(old: &R, new: &R) -> bool {
    !old.same_spec(new)
}

/// Sets `new.generation`: the old one, plus one if the spec changed. Callers that need the
/// generation they are about to write (the scheduler's observed generation) call this first;
/// [`Typed::update`] calls it too and is idempotent with it.
pub fn prepare_generation<R: Stored>(old: &R, new: &mut R) {
    let generation = old.generation().max(1) + i64::from(spec_changed(old, new));
    new.meta_mut().generation = generation;
}

/// The wall clock now, at millisecond precision (as Flotilla keeps every timestamp).
pub fn now_timestamp() -> prost_types::Timestamp {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    prost_types::Timestamp {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        // milliseconds, as the rest of Flotilla keeps
        nanos: i32::try_from(d.subsec_millis() * 1_000_000).unwrap_or(0),
    }
}

/// A random RFC 4122 version-4 id (object uids, permanent ids).
pub fn new_uid() -> String {
    let a: u64 = rand::random();
    let b: u64 = rand::random();
    // RFC 4122 version-4 layout
    let b = (b & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000;
    let a = (a & 0xffff_ffff_ffff_0fff) | 0x0000_0000_0000_4000;
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}

/// One guarded update in a batch: the object as read, and what to write.
#[derive(Clone, Debug)]
pub struct Update<R> {
    /// The object as read (its resourceVersion is the precondition), as the cache shares it:
    /// an update copies only what it writes.
    pub old: Arc<R>,
    /// The new object.
    pub new: R,
    /// Other keys the write was derived from, each with the mod revision it had when read
    /// (0: absent): the write commits only if they are all unchanged, in the same
    /// transaction. E.g. an eviction guarded by the cluster whose taint caused it, or a Work
    /// guarded by the binding revision it was rendered from. A write that fails on a guard
    /// reports a `Conflict` on the guard's key.
    pub guards: Vec<(String, Revision)>,
}

impl<R> Update<R> {
    /// An update guarded by `old`'s resourceVersion only.
    pub fn new(old: impl Into<Arc<R>>, new: R) -> Self {
        Self {
            old: old.into(),
            new,
            guards: Vec::new(),
        }
    }

    /// Also requires `key` to still be at `revision` (0: absent) when the write commits.
    pub fn guarded_by(mut self, key: impl Into<String>, revision: Revision) -> Self {
        self.guards.push((key.into(), revision));
        self
    }
}

/// Typed access to a [`crate::Store`].
#[derive(Clone)]
pub struct Typed {
    store: StoreRef,
    /// Compares and operations the store may add to a transaction per write it carries (a
    /// shard-fenced store adds a fence and a stamp per shard written: at most one each per
    /// write). [`Typed::update_many`] leaves room for them.
    per_write_overhead: usize,
}

// === impl Typed ===

impl std::fmt::Debug for Typed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Typed").finish_non_exhaustive()
    }
}

impl Typed {
    /// Wraps a store.
    pub fn new(store: StoreRef) -> Self {
        Typed {
            store,
            per_write_overhead: 0,
        }
    }

    /// Typed access to a store that adds up to `overhead` compares and as many operations to
    /// a transaction per write in it (1 for a shard-fenced store: its fence and its stamp),
    /// so that [`Typed::update_many`] keeps each transaction within etcd's limits.
    pub fn with_per_write_overhead(store: StoreRef, overhead: usize) -> Self {
        Typed {
            store,
            per_write_overhead: overhead,
        }
    }

    /// The underlying byte store.
    pub fn store(&self) -> &StoreRef {
        &self.store
    }

    /// Reads one object.
    pub async fn get<R: Stored>(&self, key: &str) -> Result<Option<R>> {
        match self.store.get(key).await? {
            Some(kv) => decode(&kv).map(Some),
            None => Ok(None),
        }
    }

    /// Reads every object under `prefix` (default: the kind's prefix) as one snapshot.
    pub async fn list<R: Stored>(&self, prefix: Option<&str>) -> Result<(Vec<R>, Revision)> {
        let (kvs, revision) = self.store.list(prefix.unwrap_or(R::PREFIX), 500).await?;
        let objs = kvs.iter().map(decode).collect::<Result<Vec<R>>>()?;
        Ok((objs, revision))
    }

    /// Creates an object: assigns uid, creationTimestamp and generation 1 when missing;
    /// fails with [`StoreError::AlreadyExists`] if the key exists.
    pub async fn create<R: Stored>(&self, mut obj: R, lease: Option<LeaseId>) -> Result<R> {
        let meta = obj.meta_mut();
        if meta.uid.is_empty() {
            meta.uid = new_uid();
        }
        if meta.creation_timestamp.is_none() {
            meta.creation_timestamp = Some(now_timestamp());
        }
        if meta.generation == 0 {
            meta.generation = 1;
        }
        let key = obj.key();
        let revision = self.store.create(&key, encode_mut(&mut obj), lease).await?;
        obj.meta_mut().resource_version = revision;
        Ok(obj)
    }

    /// Writes `new` if the key still has `old`'s resourceVersion; bumps the generation on a
    /// spec change. [`StoreError::Conflict`] when stale, [`StoreError::NotFound`] when gone.
    pub async fn update<R: Stored>(&self, old: &R, mut new: R) -> Result<R> {
        let key = old.key();
        if new.key() != key {
            return Err(StoreError::InvalidArgument(format!(
                "update would move {} from {key} to {}",
                R::KIND,
                new.key()
            )));
        }
        prepare_generation(old, &mut new);
        let expected = old.resource_version();
        let txn = Txn::new()
            .when(Compare::mod_revision(&key, CompareOp::Equal, expected))
            .and_then(Op::put(&key, encode_mut(&mut new)));
        match self.store.txn(txn).await? {
            TxnResponse::Committed { revision, .. } => {
                new.meta_mut().resource_version = revision;
                Ok(new)
            }
            TxnResponse::Failed { current, .. } => Err(stale(&key, expected, current.first())),
        }
    }

    /// Deletes an object; with `precondition`, only if its resourceVersion still matches.
    pub async fn delete(&self, key: &str, precondition: Option<Revision>) -> Result<Revision> {
        let mut txn = Txn::new().and_then(Op::delete(key));
        txn = match precondition {
            Some(rv) => txn.when(Compare::mod_revision(key, CompareOp::Equal, rv)),
            None => txn.when(Compare::create_revision(key, CompareOp::Greater, 0)),
        };
        match self.store.txn(txn).await? {
            TxnResponse::Committed { revision, .. } => Ok(revision),
            TxnResponse::Failed { current, .. } => {
                Err(stale(key, precondition.unwrap_or(0), current.first()))
            }
        }
    }

    /// Applies many guarded updates in as few transactions as possible (each update keeps its
    /// own compare; at most `MAX_TXN_OPS / 2` per transaction). Returns one result per
    /// update, in order: the written object, or the conflict. Losers are not retried here —
    /// the caller re-reads and re-decides them (docs/design.md §7).
    pub async fn update_many<R: Stored>(&self, updates: Vec<Update<R>>) -> Result<Vec<Result<R>>> {
        const CHUNK: usize = MAX_TXN_OPS / 2;
        let mut out: Vec<Option<Result<R>>> = Vec::with_capacity(updates.len());
        let mut prepared = Vec::with_capacity(updates.len());
        for Update {
            old,
            mut new,
            guards,
        } in updates
        {
            prepare_generation(&*old, &mut new);
            let key = old.key();
            if new.key() != key {
                out.push(Some(Err(StoreError::InvalidArgument(format!(
                    "update would move {key}"
                )))));
                prepared.push(None);
            } else {
                out.push(None);
                let bytes = encode_mut(&mut new);
                prepared.push(Some((key, old.resource_version(), new, guards, bytes)));
            }
        }
        let pending: Vec<usize> = (0..prepared.len())
            .filter(|i| prepared[*i].is_some())
            .collect();
        // Chunks of at most CHUNK writes and MAX_TXN_OPS - 2 compares (guards add compares;
        // a leadership fence adds one more; a shard-fenced store one per write at most, its
        // `per_write_overhead`, and as many puts), as etcd limits both per transaction.
        let overhead = self.per_write_overhead;
        let chunk = (MAX_TXN_OPS / (1 + overhead)).clamp(1, CHUNK);
        let mut chunks: Vec<Vec<usize>> = Vec::new();
        let mut compares = 0;
        for &i in &pending {
            let n = 1 + overhead + prepared[i].as_ref().map_or(0, |p| p.3.len());
            match chunks.last_mut() {
                Some(c) if c.len() < chunk && compares + n <= MAX_TXN_OPS - 2 => {
                    c.push(i);
                    compares += n;
                }
                _ => {
                    chunks.push(vec![i]);
                    compares = n;
                }
            }
        }
        for chunk in chunks {
            let mut live: Vec<usize> = chunk;
            // A failed compare aborts the whole transaction: drop the losers and retry the
            // rest (at most once per loser).
            while !live.is_empty() {
                let mut txn = Txn::new();
                // compare index → the update it belongs to (guards add compares)
                let mut owner_of_compare: Vec<(usize, Option<usize>)> = Vec::new();
                for &i in &live {
                    if let Some((key, rv, _, guards, bytes)) = &prepared[i] {
                        txn = txn
                            .when(Compare::mod_revision(key, CompareOp::Equal, *rv))
                            .and_then(Op::put(key, bytes.clone()));
                        owner_of_compare.push((i, None));
                        for (g, (gkey, grev)) in guards.iter().enumerate() {
                            txn = txn.when(Compare::mod_revision(gkey, CompareOp::Equal, *grev));
                            owner_of_compare.push((i, Some(g)));
                        }
                    }
                }
                match self.store.txn(txn).await? {
                    TxnResponse::Committed { revision, .. } => {
                        for &i in &live {
                            if let Some((_, _, new, _, _)) = prepared[i].take() {
                                let mut new = new;
                                new.meta_mut().resource_version = revision;
                                out[i] = Some(Ok(new));
                            }
                        }
                        live.clear();
                    }
                    TxnResponse::Failed {
                        failed, current, ..
                    } => {
                        // the first failed compare of each loser says why it lost
                        let mut lost: Vec<(usize, Option<usize>, usize)> = Vec::new();
                        for &f in &failed {
                            if let Some(&(i, guard)) = owner_of_compare.get(f)
                                && !lost.iter().any(|(j, _, _)| *j == i)
                            {
                                lost.push((i, guard, f));
                            }
                        }
                        if lost.is_empty() {
                            // a compare we did not add failed (e.g. a leadership fence)
                            return Err(StoreError::LeadershipLost {
                                key: "fence".into(),
                            });
                        }
                        let mut losers: Vec<usize> = lost.iter().map(|(i, _, _)| *i).collect();
                        losers.sort_unstable();
                        for (i, guard, f) in lost {
                            if let Some((key, rv, _, guards, _)) = prepared[i].take() {
                                out[i] = Some(Err(match guard.and_then(|g| guards.get(g)) {
                                    None => stale(&key, rv, current.get(f)),
                                    Some((gkey, grev)) => StoreError::Conflict {
                                        key: gkey.clone(),
                                        expected_revision: *grev,
                                        actual_revision: current
                                            .get(f)
                                            .and_then(|c| c.as_ref())
                                            .map_or(0, |kv| kv.mod_revision),
                                    },
                                }));
                            }
                        }
                        live.retain(|i| losers.binary_search(i).is_err());
                    }
                }
            }
        }
        Ok(out
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(StoreError::Internal("update not attempted".into()))))
            .collect())
    }
}

fn stale(key: &str, expected: Revision, current: Option<&Option<KeyValue>>) -> StoreError {
    match current.and_then(|c| c.as_ref()) {
        None if expected != 0 => StoreError::NotFound {
            key: key.to_owned(),
        },
        None => StoreError::Conflict {
            key: key.to_owned(),
            expected_revision: expected,
            actual_revision: 0,
        },
        Some(kv) => StoreError::Conflict {
            key: key.to_owned(),
            expected_revision: expected,
            actual_revision: kv.mod_revision,
        },
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::MemStore;
    use crate::testing::binding;

    fn typed() -> Typed {
        Typed::new(Arc::new(MemStore::new()))
    }

    #[tokio::test]
    async fn create_get_and_already_exists() {
        let t = typed();
        let b = t.create(binding("a", 1), None).await.unwrap();
        assert!(b.resource_version() > 0);
        assert_eq!(b.generation(), 1);
        assert_eq!(b.meta().unwrap().uid.len(), 36);
        let got: v1::ResourceBinding = t.get("bindings/default/a").await.unwrap().unwrap();
        assert_eq!(got, b);
        let err = t.create(binding("a", 2), None).await.unwrap_err();
        assert!(matches!(err, StoreError::AlreadyExists { .. }), "{err}");
    }

    #[tokio::test]
    async fn update_bumps_generation_on_spec_change_only() {
        let t = typed();
        let b = t.create(binding("a", 1), None).await.unwrap();
        let mut status_only = b.clone();
        status_only.status = Some(v1::ResourceBindingStatus {
            scheduler_observed_generation: 1,
            ..Default::default()
        });
        let b2 = t.update(&b, status_only).await.unwrap();
        assert_eq!(b2.generation(), 1, "status-only change");
        let mut label_only = b2.clone();
        label_only.meta_mut().labels.insert("x".into(), "y".into());
        let b3 = t.update(&b2, label_only).await.unwrap();
        assert_eq!(b3.generation(), 1, "metadata-only change");
        let mut spec = b3.clone();
        spec.spec.as_mut().unwrap().replicas = 5;
        let b4 = t.update(&b3, spec).await.unwrap();
        assert_eq!(b4.generation(), 2, "spec change");
        assert!(b4.resource_version() > b3.resource_version());
    }

    /// The in-place `same_spec` of the kinds made of metadata, spec and status says what the
    /// encoding comparison says: metadata and status changes are not spec changes, an absent
    /// spec differs from an empty one.
    #[test]
    fn same_spec_in_place_agrees_with_encodings() {
        fn encoded<R: Stored>(a: &R, b: &R) -> bool {
            let strip = |o: &R| {
                let mut o = o.clone();
                o.clear_status();
                *o.meta_mut() = v1::ObjectMeta::default();
                o.encode_to_vec()
            };
            strip(a) == strip(b)
        }
        type Edit<'a, R> = (&'a str, &'a dyn Fn(&mut R));
        fn check<R: Stored>(kind: &str, base: &R, edits: &[Edit<'_, R>]) {
            for (name, edit) in edits {
                let mut other = base.clone();
                edit(&mut other);
                assert_eq!(
                    base.same_spec(&other),
                    encoded(base, &other),
                    "{kind}: {name}"
                );
            }
        }
        let b = binding("a", 2);
        check::<v1::ResourceBinding>(
            "binding",
            &b,
            &[
                ("unchanged", &|_| {}),
                ("label", &|o| {
                    o.meta_mut().labels.insert("x".into(), "y".into());
                }),
                ("status", &|o| {
                    o.status
                        .get_or_insert_with(Default::default)
                        .scheduler_observed_generation = 3
                }),
                ("replicas", &|o| o.spec.as_mut().unwrap().replicas = 5),
                ("task", &|o| {
                    o.spec
                        .as_mut()
                        .unwrap()
                        .graceful_eviction_tasks
                        .push(Default::default())
                }),
                ("no spec", &|o| o.spec = None),
            ],
        );
        let work = v1::Work {
            metadata: Some(v1::ObjectMeta {
                name: "w".into(),
                ..Default::default()
            }),
            spec: Some(v1::WorkSpec {
                cluster: "m1".into(),
                ..Default::default()
            }),
            status: None,
        };
        check::<v1::Work>(
            "work",
            &work,
            &[
                ("status", &|o| o.status = Some(Default::default())),
                ("generation", &|o| o.meta_mut().generation = 9),
                ("replicas", &|o| o.spec.as_mut().unwrap().replicas = Some(2)),
                ("empty spec", &|o| o.spec = Some(Default::default())),
            ],
        );
        let cluster = v1::Cluster::default();
        check::<v1::Cluster>(
            "cluster",
            &cluster,
            &[
                ("status", &|o| o.status = Some(Default::default())),
                ("empty spec", &|o| o.spec = Some(Default::default())),
            ],
        );
    }

    #[tokio::test]
    async fn stale_update_and_delete_conflict() {
        let t = typed();
        let b = t.create(binding("a", 1), None).await.unwrap();
        let mut newer = b.clone();
        newer.spec.as_mut().unwrap().replicas = 2;
        let b2 = t.update(&b, newer).await.unwrap();
        // writing from the stale read fails, nothing is written
        let mut stale_write = b.clone();
        stale_write.spec.as_mut().unwrap().replicas = 9;
        let err = t.update(&b, stale_write).await.unwrap_err();
        assert!(
            matches!(err, StoreError::Conflict { actual_revision, .. } if actual_revision == b2.resource_version()),
            "{err}"
        );
        let now: v1::ResourceBinding = t.get("bindings/default/a").await.unwrap().unwrap();
        assert_eq!(now.spec.unwrap().replicas, 2);
        // delete with a stale precondition fails; with the current one it works
        let err = t
            .delete("bindings/default/a", Some(b.resource_version()))
            .await
            .unwrap_err();
        assert!(err.is_conflict(), "{err}");
        t.delete("bindings/default/a", Some(b2.resource_version()))
            .await
            .unwrap();
        let err = t.delete("bindings/default/a", None).await.unwrap_err();
        assert!(
            matches!(err, StoreError::NotFound { .. }) || err.is_conflict(),
            "{err}"
        );
        // updating a deleted object reports NotFound
        let mut again = b2.clone();
        again.spec.as_mut().unwrap().replicas = 3;
        assert!(matches!(
            t.update(&b2, again).await.unwrap_err(),
            StoreError::NotFound { .. }
        ));
    }

    #[tokio::test]
    async fn update_many_writes_winners_and_reports_losers() {
        let t = typed();
        let mut olds = vec![];
        for i in 0..100 {
            olds.push(t.create(binding(&format!("b{i}"), 1), None).await.unwrap());
        }
        // someone else changes b7 and b70 first
        for i in [7usize, 70] {
            let mut n = olds[i].clone();
            n.spec.as_mut().unwrap().replicas = 42;
            t.update(&olds[i], n).await.unwrap();
        }
        let updates = olds
            .iter()
            .map(|o| {
                let mut n = o.clone();
                n.spec.as_mut().unwrap().replicas = 3;
                Update {
                    old: o.clone().into(),
                    new: n,
                    guards: Vec::new(),
                }
            })
            .collect();
        let results = t.update_many(updates).await.unwrap();
        assert_eq!(results.len(), 100);
        for (i, r) in results.iter().enumerate() {
            if i == 7 || i == 70 {
                assert!(r.as_ref().unwrap_err().is_conflict(), "b{i} must lose");
            } else {
                assert_eq!(r.as_ref().unwrap().generation(), 2, "b{i}");
            }
        }
        let (all, _) = t.list::<v1::ResourceBinding>(None).await.unwrap();
        let replicas: Vec<i32> = all
            .iter()
            .map(|b| b.spec.as_ref().unwrap().replicas)
            .collect();
        assert_eq!(replicas.iter().filter(|r| **r == 42).count(), 2);
        assert_eq!(replicas.iter().filter(|r| **r == 3).count(), 98);
    }

    #[test]
    fn keys_follow_the_layout() {
        let mut w = v1::Work::default();
        w.meta_mut().name = "nginx-687f7fb96f".into();
        w.meta_mut().namespace = "default".into();
        w.spec = Some(v1::WorkSpec {
            cluster: "member1".into(),
            ..Default::default()
        });
        assert_eq!(w.key(), "works/member1/default/nginx-687f7fb96f");
        let mut c = v1::Cluster::default();
        c.meta_mut().name = "member1".into();
        assert_eq!(c.key(), "clusters/member1");
        let workload = |api_version: &str, kind: &str, namespace: &str, name: &str| {
            let mut w = v1::Workload {
                api_version: api_version.into(),
                kind: kind.into(),
                ..Default::default()
            };
            w.meta_mut().name = name.into();
            w.meta_mut().namespace = namespace.into();
            w
        };
        let mut wl = workload("apps/v1", "Deployment", "default", "nginx");
        assert_eq!(wl.key(), "workloads/default/Deployment.apps/nginx");
        wl.api_version = "example.com/v1".into();
        assert_eq!(wl.key(), "workloads/default/Deployment.example.com/nginx");
        let ns = workload("v1", "Namespace", "", "team-a");
        assert_eq!(ns.key(), "workloads//Namespace/team-a");
        let mut crb = v1::ResourceBinding::default();
        crb.meta_mut().name = "team-a-namespace".into();
        assert_eq!(crb.key(), "bindings//team-a-namespace");
        assert_eq!(works_on_cluster_prefix("m1"), "works/m1/");
    }
}
