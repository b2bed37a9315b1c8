//! Group-commit tests on MemStore. `#[tokio::test]` runs on one thread, so writes queued
//! together (by `join_all`'s first poll) are all waiting when the writer task first runs.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use flotilla_proto::{Resource, v1};
use flotilla_store::{Leadership, LeaseId, MemStore, StoreRef};
use futures::future::join_all;

use super::*;
use crate::leader::FencedStore;
use flotilla_store::testing::binding;

fn scaled(b: &v1::ResourceBinding, replicas: i32) -> v1::ResourceBinding {
    let mut new = b.clone();
    new.spec.as_mut().unwrap().replicas = replicas;
    new
}

/// `old` → `old` scaled to `replicas`, guarded by `old`'s resourceVersion.
fn rescale(old: v1::ResourceBinding, replicas: i32) -> Update<v1::ResourceBinding> {
    let new = scaled(&old, replicas);
    Update::new(old, new)
}

fn replicas(b: &v1::ResourceBinding) -> i32 {
    b.spec.as_ref().unwrap().replicas
}

async fn created(typed: &Typed, names: &[impl AsRef<str>]) -> Vec<v1::ResourceBinding> {
    let mut out = Vec::new();
    for name in names {
        out.push(typed.create(binding(name.as_ref(), 1), None).await.unwrap());
    }
    out
}

fn mem() -> (StoreRef, Typed) {
    let store: StoreRef = Arc::new(MemStore::new());
    (store.clone(), Typed::new(store))
}

/// How many writes each transaction (revision) carried, in revision order.
fn batch_sizes(written: &[v1::ResourceBinding]) -> Vec<usize> {
    let mut by_revision: BTreeMap<i64, usize> = BTreeMap::new();
    for b in written {
        *by_revision.entry(b.resource_version()).or_default() += 1;
    }
    by_revision.into_values().collect()
}

#[tokio::test]
async fn writes_queued_together_share_transactions() {
    let (_, typed) = mem();
    let names: Vec<String> = (0..20).map(|i| format!("b{i:02}")).collect();
    let old = created(&typed, &names).await;

    // One batch: everything that is waiting, in one transaction.
    let writer = BatchWriter::spawn(typed.clone(), BatchConfig::default());
    let results = join_all(old.iter().map(|b| writer.update(b.clone(), scaled(b, 2)))).await;
    let written: Vec<_> = results.into_iter().map(Result::unwrap).collect();
    assert_eq!(batch_sizes(&written), vec![20]);
    for (b, name) in written.iter().zip(&names) {
        assert_eq!(b.name(), name, "each caller gets its own object back");
        assert_eq!(replicas(b), 2);
        assert_eq!(b.generation(), 2, "a spec change bumps the generation");
    }

    // At most max_batch per update_many call.
    let writer = BatchWriter::spawn(typed.clone(), BatchConfig::default().max_batch(8));
    let results = join_all(
        written
            .iter()
            .map(|b| writer.update(b.clone(), scaled(b, 3))),
    )
    .await;
    let written: Vec<_> = results.into_iter().map(Result::unwrap).collect();
    assert_eq!(batch_sizes(&written), vec![8, 8, 4]);
    let stored: v1::ResourceBinding = typed.get("bindings/default/b19").await.unwrap().unwrap();
    assert_eq!(replicas(&stored), 3);
}

#[tokio::test]
async fn a_lone_write_goes_out_at_once() {
    let (_, typed) = mem();
    let old = created(&typed, &["a"]).await.remove(0);
    let writer = BatchWriter::spawn(typed.clone(), BatchConfig::default().linger_yields(4));
    let written = writer.update(old.clone(), scaled(&old, 5)).await.unwrap();
    assert_eq!(replicas(&written), 5);
    assert!(written.resource_version() > old.resource_version());
}

#[tokio::test]
async fn each_write_gets_its_own_conflict() {
    let (_, typed) = mem();
    let old = created(&typed, &["a", "b", "c"]).await;
    let stale_b = old[1].clone();
    typed.update(&old[1], scaled(&old[1], 7)).await.unwrap();
    let mut ghost = binding("ghost", 1);
    ghost.meta_mut().resource_version = old[2].resource_version();

    let writer = BatchWriter::spawn(typed.clone(), BatchConfig::default());
    let results = writer
        .update_all(vec![
            rescale(old[0].clone(), 2),
            rescale(stale_b, 2),
            rescale(old[2].clone(), 2),
            rescale(ghost, 2),
            Update::new(binding("fresh", 4), binding("fresh", 4)),
        ])
        .await;
    let [a, b, c, ghost, fresh] = <[_; 5]>::try_from(results).unwrap();
    assert_eq!(
        batch_sizes(&[a.unwrap(), c.unwrap(), fresh.unwrap()]),
        vec![3]
    );
    assert!(
        matches!(b.unwrap_err(), StoreError::Conflict { key, .. } if key == "bindings/default/b"),
        "the stale write, and only it, lost"
    );
    assert!(matches!(ghost.unwrap_err(), StoreError::NotFound { .. }));
    let b: v1::ResourceBinding = typed.get("bindings/default/b").await.unwrap().unwrap();
    assert_eq!(replicas(&b), 7, "the loser overwrote nothing");
    let fresh: v1::ResourceBinding = typed.get("bindings/default/fresh").await.unwrap().unwrap();
    assert_eq!(fresh.generation(), 1, "resourceVersion 0 creates");
}

#[tokio::test]
async fn a_lost_fence_fails_every_write_of_the_batch() {
    let (store, typed) = mem();
    let old = created(&typed, &["a", "b"]).await;
    let leader_key = "leases/test/1";
    let fencing_revision = store.put(leader_key, "me".into(), None).await.unwrap();
    let leadership = Leadership {
        key: leader_key.into(),
        fencing_revision,
        lease: LeaseId(1),
    };
    let fenced: StoreRef = Arc::new(FencedStore::new(store.clone(), leadership));
    let writer = BatchWriter::spawn(Typed::new(fenced), BatchConfig::default());

    let a = writer
        .update(old[0].clone(), scaled(&old[0], 2))
        .await
        .unwrap();
    assert_eq!(replicas(&a), 2, "written while the term lasts");

    // The term ends (another replica's key replaces ours).
    store.delete(leader_key).await.unwrap();
    let results = join_all([
        writer.update(a.clone(), scaled(&a, 3)),
        writer.update(old[1].clone(), scaled(&old[1], 3)),
    ])
    .await;
    for result in results {
        assert!(
            matches!(result, Err(StoreError::LeadershipLost { ref key }) if key == leader_key),
            "{result:?}"
        );
    }
    let b: v1::ResourceBinding = typed.get("bindings/default/b").await.unwrap().unwrap();
    assert_eq!(replicas(&b), 1, "nothing written after the term");
}

#[tokio::test]
async fn shutdown_commits_what_is_queued_then_refuses() {
    let (_, typed) = mem();
    let old = created(&typed, &["a", "b", "c"]).await;
    let shutdown = Shutdown::new();
    let writer = BatchWriter::spawn_until(typed.clone(), BatchConfig::default(), shutdown.clone());

    let mut queued = std::pin::pin!(join_all(
        old.iter().map(|b| writer.update(b.clone(), scaled(b, 2)))
    ));
    assert!(
        futures::poll!(&mut queued).is_pending(),
        "queued, not yet written"
    );
    shutdown.trigger();
    for result in queued.await {
        assert_eq!(
            replicas(&result.unwrap()),
            2,
            "queued before shutdown: committed"
        );
    }

    let b: v1::ResourceBinding = typed.get("bindings/default/b").await.unwrap().unwrap();
    let refused = writer.update(b.clone(), scaled(&b, 3)).await.unwrap_err();
    assert!(matches!(refused, StoreError::Internal(_)), "{refused}");
    assert!(!refused.is_conflict() && !refused.is_retryable());
    let b: v1::ResourceBinding = typed.get("bindings/default/b").await.unwrap().unwrap();
    assert_eq!(replicas(&b), 2, "nothing written after shutdown");
}

#[tokio::test]
async fn one_write_per_key_holds_the_second_for_the_next_batch() {
    let (_, typed) = mem();
    let old = created(&typed, &["a", "b"]).await;
    let both = |writer: BatchWriter<v1::ResourceBinding>| {
        let (a, b) = (old[0].clone(), old[1].clone());
        async move {
            writer
                .update_all(vec![rescale(a.clone(), 2), rescale(a, 3), rescale(b, 2)])
                .await
        }
    };

    // Without the option the key is written twice in one transaction, which the store
    // refuses: the whole batch fails.
    let results = both(BatchWriter::spawn(typed.clone(), BatchConfig::default())).await;
    for result in results {
        assert!(
            matches!(result, Err(StoreError::InvalidArgument(_))),
            "{result:?}"
        );
    }

    let config = BatchConfig::default().one_write_per_key(true);
    let results = both(BatchWriter::spawn(typed.clone(), config)).await;
    let [first, second, b] = <[_; 3]>::try_from(results).unwrap();
    let (first, b) = (first.unwrap(), b.unwrap());
    assert_eq!(
        batch_sizes(&[first.clone(), b]),
        vec![2],
        "a and b in one batch"
    );
    assert!(
        second.unwrap_err().is_conflict(),
        "the second write of a is stale by then"
    );
    let a: v1::ResourceBinding = typed.get("bindings/default/a").await.unwrap().unwrap();
    assert_eq!(replicas(&a), 2);
}

#[tokio::test]
async fn concurrent_batches_answer_each_write() {
    let (_, typed) = mem();
    let names: Vec<String> = (0..30).map(|i| format!("b{i:02}")).collect();
    let old = created(&typed, &names).await;
    let config = BatchConfig::default().max_batch(4).concurrency(3);
    let writer = BatchWriter::spawn(typed.clone(), config);
    let results = join_all(
        old.iter()
            .enumerate()
            .map(|(i, b)| writer.update(b.clone(), scaled(b, i32::try_from(i).unwrap()))),
    )
    .await;
    let written: Vec<_> = results.into_iter().map(Result::unwrap).collect();
    for (i, (b, name)) in written.iter().zip(&names).enumerate() {
        assert_eq!(b.name(), name);
        assert_eq!(replicas(b), i32::try_from(i).unwrap());
    }
    assert!(batch_sizes(&written).iter().all(|n| *n <= 4));
}

#[tokio::test]
async fn lingering_lets_writes_about_to_be_sent_join_the_batch() {
    let (_, typed) = mem();
    let names: Vec<String> = (0..6).map(|i| format!("b{i}")).collect();
    for linger in [0, 4] {
        let old = created(&typed, &names).await;
        let writer =
            BatchWriter::spawn(typed.clone(), BatchConfig::default().linger_yields(linger));
        // Five workers that have not run yet, and one write sent now.
        let others: Vec<_> = old[1..]
            .iter()
            .map(|b| {
                let (writer, b) = (writer.clone(), b.clone());
                tokio::spawn(async move { writer.update(b.clone(), scaled(&b, 2)).await })
            })
            .collect();
        let mut written = vec![
            writer
                .update(old[0].clone(), scaled(&old[0], 2))
                .await
                .unwrap(),
        ];
        for other in others {
            written.push(other.await.unwrap().unwrap());
        }
        let sizes = batch_sizes(&written);
        if linger == 0 {
            assert_eq!(sizes, vec![1, 5], "the first write went out alone");
        } else {
            assert_eq!(sizes, vec![6], "the writer waited for the others");
        }
        for name in &names {
            typed
                .delete(&format!("bindings/default/{name}"), None)
                .await
                .unwrap();
        }
    }
}

fn work(name: &str) -> v1::Work {
    v1::Work {
        metadata: Some(v1::ObjectMeta {
            name: name.into(),
            namespace: "ns".into(),
            generation: 1,
            ..Default::default()
        }),
        spec: Some(v1::WorkSpec {
            cluster: "c".into(),
            ..Default::default()
        }),
        status: None,
    }
}

/// The work executor's writer (moved here with the writer): one write per key, so a stale
/// update and a create of the same Work can be sent together.
#[tokio::test]
async fn creates_updates_and_conflicts_each_get_their_own_result() {
    let typed = Typed::new(Arc::new(MemStore::new()));
    let b = BatchWriter::spawn(
        typed.clone(),
        BatchConfig::default().one_write_per_key(true),
    );
    // resourceVersion 0 = create if absent, generation 1
    let created = b.update(work("a"), work("a")).await.unwrap();
    assert_eq!(created.generation(), 1);
    let stale = created.clone();
    let mut next = created.clone();
    next.spec.as_mut().unwrap().manifest = "{}".into();
    let updated = b.update(created, next.clone()).await.unwrap();
    assert_eq!(updated.generation(), 2, "spec change bumps the generation");
    let results = b
        .update_all(vec![
            Update::new(stale, next),
            Update::new(work("b"), work("b")),
            Update::new(work("a"), work("a")),
        ])
        .await;
    assert!(results[0].as_ref().unwrap_err().is_conflict(), "stale");
    assert!(results[1].is_ok(), "independent create committed");
    assert!(results[2].as_ref().unwrap_err().is_conflict(), "exists");
    let stored: v1::Work = typed.get("works/c/ns/b").await.unwrap().unwrap();
    assert_eq!(stored.name(), "b");
}
