//! Builders and a harness shared by the graceful-eviction tests (included with `#[path]`):
//! the binding-controller support of `flotilla_runtime::testing`, on the graceful-eviction
//! service, plus the helpers only these tests need.

use std::time::Duration;

use flotilla_core::Time;
use flotilla_core::types::ResourceBinding;
use flotilla_graceful_eviction::Config;
pub use flotilla_graceful_eviction::GracefulEviction;
use flotilla_proto::v1;
pub use flotilla_runtime::testing::bindings::*;
pub use flotilla_runtime::testing::{Harness, eventually};
use flotilla_store::typed::Typed;

pub fn test_config() -> Config {
    let mut c = Config::new("test");
    c.lease_ttl = Duration::from_secs(5);
    c
}

// === graceful-eviction helpers ===

/// A task from the taint manager (unstamped when `created` is `None`).
pub fn task(cluster: &str, created: Option<Time>) -> flotilla_core::types::GracefulEvictionTask {
    flotilla_core::types::GracefulEvictionTask {
        from_cluster: cluster.into(),
        purge_mode: flotilla_core::types::PurgeMode::Gracefully,
        replicas: Some(1),
        reason: "TaintUntolerated".into(),
        message: "test".into(),
        producer: "TaintManager".into(),
        creation_timestamp: created,
        ..Default::default()
    }
}

pub fn item(
    cluster: &str,
    health: flotilla_core::types::ResourceHealth,
) -> flotilla_core::types::AggregatedStatusItem {
    flotilla_core::types::AggregatedStatusItem {
        cluster_name: cluster.into(),
        applied: true,
        health,
        ..Default::default()
    }
}

/// A binding on `targets` with `tasks` and an aggregated status; scheduled (observed
/// generation = 1 = the generation a create gives it).
pub fn evicting(
    name: &str,
    targets: &[&str],
    tasks: Vec<flotilla_core::types::GracefulEvictionTask>,
    status: Vec<flotilla_core::types::AggregatedStatusItem>,
) -> v1::ResourceBinding {
    let pairs: Vec<(&str, i32)> = targets.iter().map(|t| (*t, 1)).collect();
    let wire = binding(name, &pairs, vec![]);
    let mut b = ResourceBinding::try_from(wire).unwrap();
    b.meta.generation = 1;
    b.spec.graceful_eviction_tasks = tasks;
    b.status.aggregated_status = status;
    // as the work executor stamps it (I1a)
    b.status.aggregated_status_observed_generation = 1;
    b.into()
}

/// Binding `name` on member2 alone, evicting `task` (from member1), with member2's aggregated
/// `health` when given (see [`evicting`]).
pub fn on_member2(
    name: &str,
    task: flotilla_core::types::GracefulEvictionTask,
    health: Option<flotilla_core::types::ResourceHealth>,
) -> v1::ResourceBinding {
    let status = health.map(|h| vec![item("member2", h)]).unwrap_or_default();
    evicting(name, &["member2"], vec![task], status)
}

/// The graceful-eviction tasks of binding `name`.
pub async fn tasks_of(
    typed: &Typed,
    name: &str,
) -> Vec<flotilla_core::types::GracefulEvictionTask> {
    get_binding(typed, name).await.spec.graceful_eviction_tasks
}

/// Waits at most `timeout` until the first task of binding `name` is stamped; its stamp.
pub async fn wait_stamped(typed: &Typed, timeout: Duration, name: &str) -> Time {
    eventually(timeout, &format!("{name}'s task stamped"), || async {
        tasks_of(typed, name)
            .await
            .first()
            .and_then(|t| t.creation_timestamp)
    })
    .await
}

/// Waits at most `timeout` until binding `name` has no task left (`what` names the cause).
pub async fn wait_no_tasks(typed: &Typed, timeout: Duration, name: &str, what: &str) {
    eventually(timeout, what, || async {
        tasks_of(typed, name).await.is_empty().then_some(())
    })
    .await;
}

/// Read-modify-CAS of a binding (as another service would).
pub async fn update_binding(typed: &Typed, name: &str, f: impl Fn(&mut ResourceBinding)) {
    loop {
        let old: v1::ResourceBinding = typed.get(&binding_key(name)).await.unwrap().unwrap();
        let mut b = ResourceBinding::try_from(old.clone()).unwrap();
        f(&mut b);
        let mut new: v1::ResourceBinding = b.into();
        flotilla_store::typed::prepare_generation(&old, &mut new);
        // A write of the aggregated status is the work executor's: it stamps the generation
        // the status was computed for (I1a).
        let status_of =
            |b: &v1::ResourceBinding| b.status.as_ref().map(|s| s.aggregated_status.clone());
        if status_of(&old) != status_of(&new) {
            let generation = new.metadata.as_ref().map_or(0, |m| m.generation);
            if let Some(s) = new.status.as_mut() {
                s.aggregated_status_observed_generation = generation;
            }
        }
        match typed.update(&old, new).await {
            Ok(_) => return,
            Err(e) if e.is_conflict() => continue,
            Err(e) => panic!("{e}"),
        }
    }
}

/// The scheduler's SC-3.7 step (observed generation = generation), and the work executor
/// re-stamping its aggregated status for that generation (I1a).
pub async fn observe_generation(typed: &Typed, name: &str) {
    update_binding(typed, name, |b| {
        b.status.scheduler_observed_generation = b.meta.generation;
        b.status.aggregated_status_observed_generation = b.meta.generation;
    })
    .await;
}
