//! Builders and helpers shared by the scheduler's integration tests.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use flotilla_core::types::{
    Cluster, ClusterAffinity, ClusterPreferences, GracefulEvictionTask, ObjectReference, Placement,
    PurgeMode, ReplicaDivisionPreference, ReplicaSchedulingStrategy, ReplicaSchedulingType,
    ResourceBinding, SpreadConstraint, SpreadField, StaticClusterWeight, TAINT_NOT_READY, Taint,
    TaintEffect,
};
use flotilla_core::{Time, types::TargetCluster};
use flotilla_proto::v1;
use flotilla_store::typed::Typed;

/// A Ready-looking member serving `apps/v1` Deployments (SC-6.1), with unknown capacity.
pub fn cluster(name: &str) -> Cluster {
    Cluster::named(name).serving("apps/v1", &["Deployment"])
}

/// `cluster.karmada.io/not-ready` with `effect`.
pub fn not_ready(effect: TaintEffect) -> Taint {
    Taint::new(
        TAINT_NOT_READY,
        effect,
        Some(Time::from_secs(1_700_000_000)),
    )
}

/// A cluster carrying `taint`.
pub fn tainted(name: &str, taint: Taint) -> Cluster {
    let mut c = cluster(name);
    c.spec.taints.push(taint);
    c
}

/// Static weights by cluster name.
pub fn static_weights(weights: &[(&str, i64)]) -> ClusterPreferences {
    ClusterPreferences {
        static_weight_list: weights
            .iter()
            .map(|(name, weight)| StaticClusterWeight {
                target_cluster: ClusterAffinity {
                    cluster_names: vec![(*name).to_owned()],
                    ..Default::default()
                },
                weight: *weight,
            })
            .collect(),
        dynamic_weight: None,
    }
}

/// Seed example (b): Divided, Weighted by static weights member1:1, member2:2.
pub fn divided_static_placement() -> Placement {
    Placement {
        replica_scheduling: Some(ReplicaSchedulingStrategy {
            replica_scheduling_type: ReplicaSchedulingType::Divided,
            replica_division_preference: Some(ReplicaDivisionPreference::Weighted),
            weight_preference: Some(static_weights(&[("member1", 1), ("member2", 2)])),
        }),
        ..Default::default()
    }
}

/// Seed example (a): Duplicated, spread by cluster with minGroups = maxGroups = 2.
pub fn duplicated_spread_placement() -> Placement {
    Placement {
        spread_constraints: vec![SpreadConstraint {
            spread_by_field: Some(SpreadField::Cluster),
            min_groups: 2,
            max_groups: 2,
            ..Default::default()
        }],
        replica_scheduling: Some(ReplicaSchedulingStrategy {
            replica_scheduling_type: ReplicaSchedulingType::Duplicated,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A never-scheduled binding `<name>` in `default` for Deployment `<name>`.
pub fn binding(name: &str, placement: Placement, replicas: i32) -> ResourceBinding {
    let mut rb = ResourceBinding::default();
    rb.meta.name = format!("{name}-deployment");
    rb.meta.namespace = "default".to_owned();
    rb.spec.resource = ObjectReference {
        api_version: "apps/v1".to_owned(),
        kind: "Deployment".to_owned(),
        namespace: "default".to_owned(),
        name: name.to_owned(),
        uid: format!("uid-{name}"),
    };
    rb.spec.replicas = replicas;
    rb.spec.placement = Some(placement);
    rb
}

/// `[(name, replicas)]` as a domain result.
pub fn targets(list: &[(&str, i32)]) -> Vec<TargetCluster> {
    list.iter()
        .map(|(n, r)| TargetCluster::new(*n, *r))
        .collect()
}

/// The key of a binding.
pub fn binding_key(namespace: &str, name: &str) -> String {
    format!("bindings/{namespace}/{name}")
}

/// A taint-manager eviction task for `cluster` (TM-11).
pub fn taint_task(cluster: &str, replicas: Option<i32>) -> v1::GracefulEvictionTask {
    GracefulEvictionTask {
        from_cluster: cluster.to_owned(),
        purge_mode: PurgeMode::Gracefully,
        replicas,
        reason: "TaintUntolerated".to_owned(),
        producer: "TaintManager".to_owned(),
        ..Default::default()
    }
    .into()
}

/// Stores a domain cluster.
pub async fn create_cluster(typed: &Typed, c: Cluster) -> v1::Cluster {
    typed.create(v1::Cluster::from(c), None).await.unwrap()
}

/// Stores a domain binding.
pub async fn create_binding(typed: &Typed, rb: ResourceBinding) -> v1::ResourceBinding {
    typed
        .create(v1::ResourceBinding::from(rb), None)
        .await
        .unwrap()
}

/// Creates `rb` (see [`create_binding`]); its store key.
pub async fn create_binding_key(typed: &Typed, rb: ResourceBinding) -> String {
    let created = create_binding(typed, rb).await;
    binding_key("default", &created.metadata.as_ref().unwrap().name)
}

/// Reads a stored binding as a domain object.
pub async fn read_binding(typed: &Typed, key: &str) -> ResourceBinding {
    let wire: v1::ResourceBinding = typed.get(key).await.unwrap().expect("binding exists");
    ResourceBinding::try_from(wire).unwrap()
}

/// Read-modify-CAS a stored object, retrying on conflicts (as every Flotilla writer does).
pub use flotilla_runtime::testing::bindings::modify;

/// The taint manager's eviction (TM-11): in one CAS, remove `cluster` from `spec.clusters`
/// and append its task (with the replicas it had).
pub async fn evict(typed: &Typed, key: &str, cluster: &str) -> v1::ResourceBinding {
    modify(typed, key, |b: &mut v1::ResourceBinding| {
        let spec = b.spec.as_mut().unwrap();
        let replicas = spec
            .clusters
            .iter()
            .find(|t| t.name == cluster)
            .map(|t| t.replicas)
            .filter(|r| *r > 0);
        spec.clusters.retain(|t| t.name != cluster);
        spec.graceful_eviction_tasks
            .push(taint_task(cluster, replicas));
    })
    .await
}

/// Adds a taint to a stored cluster (a spec change: the generation moves).
pub async fn add_taint(typed: &Typed, cluster: &str, taint: Taint) -> v1::Cluster {
    modify(
        typed,
        &format!("clusters/{cluster}"),
        |c: &mut v1::Cluster| {
            c.spec
                .get_or_insert_with(Default::default)
                .taints
                .push(taint.clone().into());
        },
    )
    .await
}

/// Removes every taint of a stored cluster.
pub async fn clear_taints(typed: &Typed, cluster: &str) -> v1::Cluster {
    modify(
        typed,
        &format!("clusters/{cluster}"),
        |c: &mut v1::Cluster| {
            c.spec.get_or_insert_with(Default::default).taints.clear();
        },
    )
    .await
}

pub use flotilla_runtime::testing::{env_or, eventually, stop_task};

/// Waits until the stored binding satisfies `pred`; returns it.
pub async fn wait_binding(
    typed: &Typed,
    key: &str,
    what: &str,
    pred: impl Fn(&ResourceBinding) -> bool,
) -> ResourceBinding {
    eventually(Duration::from_secs(10), what, || async {
        let wire: Option<v1::ResourceBinding> = typed.get(key).await.unwrap();
        let rb = ResourceBinding::try_from(wire?).unwrap();
        pred(&rb).then_some(rb)
    })
    .await
}

/// The binding's `Scheduled` condition as (status, reason).
pub fn scheduled(rb: &ResourceBinding) -> Option<(String, String)> {
    rb.status
        .conditions
        .iter()
        .find(|c| c.type_ == "Scheduled")
        .map(|c| (c.status.as_str().to_owned(), c.reason.clone()))
}

/// Runs the scheduler on `store` through the one service shape
/// (`flotilla_runtime::service::spawn_config`): its gRPC service on `grpc`, `/metrics`,
/// `/livez`, `/readyz` on `admin`, until `shutdown` fires.
pub async fn run_scheduler(
    store: flotilla_store::StoreRef,
    config: flotilla_scheduler::Config,
    grpc: tokio::net::TcpListener,
    admin: Option<tokio::net::TcpListener>,
    shutdown: flotilla_runtime::Shutdown,
) -> anyhow::Result<()> {
    let task = flotilla_runtime::service::spawn_config::<flotilla_scheduler::Scheduler>(
        store,
        config,
        Duration::from_secs(30),
        grpc,
        admin,
        None,
        &shutdown,
    )
    .await?;
    task.await?
}

/// Starts the scheduler (see [`run_scheduler`]) on `store` with `config` on a task: its gRPC on
/// a fresh 127.0.0.1 port, the admin endpoints on another when `admin`. Returns the shutdown,
/// the task and the gRPC URL.
pub async fn spawn_scheduler(
    store: flotilla_store::StoreRef,
    config: flotilla_scheduler::Config,
    admin: bool,
) -> (
    flotilla_runtime::Shutdown,
    tokio::task::JoinHandle<anyhow::Result<()>>,
    String,
) {
    let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", grpc.local_addr().unwrap());
    let admin = match admin {
        true => Some(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()),
        false => None,
    };
    let shutdown = flotilla_runtime::Shutdown::new();
    let task = tokio::spawn(run_scheduler(store, config, grpc, admin, shutdown.clone()));
    (shutdown, task, url)
}
