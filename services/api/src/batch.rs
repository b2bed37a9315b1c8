//! Group commit of the detector's binding writes (DESIGN §7: batch independent CAS writes).
//!
//! ```text
//!   reconcile × N ──write(Create | Update | Delete)──► channel ──► writer task
//!        ▲ Ok / Conflict / error                                   │ up to 64 per Txn,
//!        └──────────── one reply per write ◄───────────────────────┘ each with its own
//!                                                                    compare; losers are
//!                                                                    answered Conflict and
//!                                                                    the rest re-sent
//! ```
//!
//! Every write keeps its own precondition (create: absent; update and delete: the
//! resourceVersion read), so batching changes how many round trips a burst costs, never
//! what a write may overwrite. Writes go through the store given (the leader-fenced one in
//! production): a failed fence fails the whole batch with `LeadershipLost`.

use std::collections::HashSet;

use flotilla_proto::Resource;
use flotilla_proto::v1;
use flotilla_runtime::Shutdown;
use flotilla_store::typed::{Stored, encode, prepare_generation};
use flotilla_store::{Compare, CompareOp, MAX_TXN_OPS, Op, StoreError, StoreRef, Txn, TxnResponse};
use tokio::sync::{mpsc, oneshot};

use crate::admission::new_permanent_id;
use crate::objects::now_timestamp;

/// Writes per transaction (each is one compare and one operation).
const BATCH: usize = MAX_TXN_OPS / 2;

/// One guarded binding write.
#[derive(Clone, Debug)]
pub enum Write {
    /// Create the binding if its key is absent (uid, creationTimestamp, generation 1 are set).
    Create(Box<v1::ResourceBinding>),
    /// Replace `old` (compared by resourceVersion) with `new`; the generation is bumped on a
    /// spec change.
    Update {
        /// As read.
        old: Box<v1::ResourceBinding>,
        /// To write.
        new: Box<v1::ResourceBinding>,
    },
    /// Delete the key if it is still at `revision`.
    Delete {
        /// The binding key.
        key: String,
        /// Its resourceVersion as read.
        revision: i64,
    },
}

type Reply = oneshot::Sender<Result<(), StoreError>>;

/// Hands writes to the group-commit task; cheap to clone.
#[derive(Clone, Debug)]
pub struct BatchWriter {
    tx: mpsc::Sender<(Write, Reply)>,
}

// === impl BatchWriter ===

impl BatchWriter {
    /// Starts the writer task on `store` until `shutdown`.
    pub fn spawn(store: StoreRef, shutdown: Shutdown) -> Self {
        let (tx, rx) = mpsc::channel(4 * BATCH);
        tokio::spawn(run(store, rx, shutdown));
        BatchWriter { tx }
    }

    /// Submits one write and waits for its outcome: `Ok`, a `Conflict` (re-read and
    /// re-decide), or the store's error.
    pub async fn write(&self, write: Write) -> Result<(), StoreError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send((write, reply))
            .await
            .map_err(|_| StoreError::Internal("the binding writer has stopped".into()))?;
        rx.await
            .map_err(|_| StoreError::Internal("the binding writer has stopped".into()))?
    }
}

async fn run(store: StoreRef, mut rx: mpsc::Receiver<(Write, Reply)>, shutdown: Shutdown) {
    loop {
        let first = tokio::select! {
            w = rx.recv() => w,
            () = shutdown.triggered() => None,
        };
        let Some(first) = first else { return };
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(w) => batch.push(w),
                Err(_) => break,
            }
        }
        commit(&store, batch).await;
    }
}

/// A prepared write: its key, its compare and its operation.
struct Prepared {
    compare: Compare,
    op: Op,
    reply: Reply,
}

fn prepare(write: Write) -> (String, Compare, Op) {
    match write {
        Write::Create(mut b) => {
            let meta = b.meta_mut();
            meta.uid = new_permanent_id();
            meta.creation_timestamp = Some(now_timestamp());
            meta.generation = 1;
            let key = b.key();
            let op = Op::put(key.clone(), encode(&*b));
            (key.clone(), Compare::absent(key), op)
        }
        Write::Update { old, mut new } => {
            prepare_generation(&*old, &mut *new);
            let key = old.key();
            let op = Op::put(key.clone(), encode(&*new));
            let compare =
                Compare::mod_revision(key.clone(), CompareOp::Equal, old.resource_version());
            (key, compare, op)
        }
        Write::Delete { key, revision } => (
            key.clone(),
            Compare::mod_revision(key.clone(), CompareOp::Equal, revision),
            Op::delete(key),
        ),
    }
}

fn conflict(key: String) -> StoreError {
    StoreError::Conflict {
        key,
        expected_revision: 0,
        actual_revision: 0,
    }
}

async fn commit(store: &StoreRef, batch: Vec<(Write, Reply)>) {
    let mut keys = HashSet::new();
    let mut live: Vec<Prepared> = Vec::with_capacity(batch.len());
    for (write, reply) in batch {
        let (key, compare, op) = prepare(write);
        if keys.insert(key.clone()) {
            live.push(Prepared { compare, op, reply });
        } else {
            // One key twice in a transaction is refused by etcd: the later one re-decides.
            let _ = reply.send(Err(conflict(key)));
        }
    }
    // A failed compare aborts the whole transaction: answer the losers and re-send the rest
    // (each round drops at least one write, so this ends).
    while !live.is_empty() {
        let mut txn = Txn::new();
        for p in &live {
            txn = txn.when(p.compare.clone()).and_then(p.op.clone());
        }
        match store.txn(txn).await {
            Ok(TxnResponse::Committed { .. }) => {
                for p in live.drain(..) {
                    let _ = p.reply.send(Ok(()));
                }
            }
            Ok(TxnResponse::Failed { failed, .. }) => {
                let ours: HashSet<usize> = failed.into_iter().filter(|i| *i < live.len()).collect();
                if ours.is_empty() {
                    // A compare we did not add failed: the leadership fence.
                    for p in live.drain(..) {
                        let _ = p.reply.send(Err(StoreError::LeadershipLost {
                            key: "fence".into(),
                        }));
                    }
                    return;
                }
                let mut kept = Vec::with_capacity(live.len());
                for (i, p) in live.into_iter().enumerate() {
                    if ours.contains(&i) {
                        let _ = p.reply.send(Err(conflict(p.compare.key.clone())));
                    } else {
                        kept.push(p);
                    }
                }
                live = kept;
            }
            Err(error) => {
                let message = error.to_string();
                let mut replies = live.drain(..).map(|p| p.reply);
                if let Some(first) = replies.next() {
                    let _ = first.send(Err(error));
                }
                for reply in replies {
                    let _ = reply.send(Err(StoreError::Internal(message.clone())));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use flotilla_store::MemStore;
    use flotilla_store::typed::Typed;

    use super::*;
    use flotilla_store::testing::binding;

    #[tokio::test]
    async fn every_write_keeps_its_own_precondition() {
        let store: StoreRef = Arc::new(MemStore::new());
        let typed = Typed::new(store.clone());
        let a = typed.create(binding("a", 1), None).await.unwrap();
        let mut a2 = a.clone();
        a2.spec.as_mut().unwrap().replicas = 2;
        let a2 = typed.update(&a, a2).await.unwrap();
        let writer = BatchWriter::spawn(store.clone(), Shutdown::new());
        let mut stale = a.clone();
        stale.spec.as_mut().unwrap().replicas = 9;
        let mut fresh = a2.clone();
        fresh.spec.as_mut().unwrap().replicas = 3;
        let (r_stale, r_create, r_dup, r_fresh) = tokio::join!(
            writer.write(Write::Update {
                old: Box::new(a.clone()),
                new: Box::new(stale),
            }),
            writer.write(Write::Create(Box::new(binding("b", 1)))),
            writer.write(Write::Create(Box::new(binding("a", 7)))),
            writer.write(Write::Update {
                old: Box::new(a2.clone()),
                new: Box::new(fresh),
            }),
        );
        assert!(r_stale.unwrap_err().is_conflict(), "stale update loses");
        r_create.unwrap();
        assert!(
            r_dup.unwrap_err().is_conflict(),
            "create of an existing key loses"
        );
        // the fresh update wins unless it shared the key with the stale one in a batch
        let now: v1::ResourceBinding = typed.get("bindings/default/a").await.unwrap().unwrap();
        match r_fresh {
            Ok(()) => {
                assert_eq!(now.spec.unwrap().replicas, 3);
                assert_eq!(now.metadata.unwrap().generation, 3);
            }
            Err(e) => {
                assert!(e.is_conflict());
                assert_eq!(
                    now.spec.unwrap().replicas,
                    2,
                    "nothing lost, nothing forced"
                );
            }
        }
        let b: v1::ResourceBinding = typed.get("bindings/default/b").await.unwrap().unwrap();
        let meta = b.metadata.unwrap();
        assert_eq!(meta.generation, 1);
        assert!(!meta.uid.is_empty() && meta.creation_timestamp.is_some());
        let r = writer
            .write(Write::Delete {
                key: "bindings/default/b".into(),
                revision: 1,
            })
            .await;
        assert!(r.unwrap_err().is_conflict(), "stale delete loses");
        writer
            .write(Write::Delete {
                key: "bindings/default/b".into(),
                revision: meta.resource_version,
            })
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            typed
                .get::<v1::ResourceBinding>("bindings/default/b")
                .await
                .unwrap()
                .is_none()
        );
    }
}
