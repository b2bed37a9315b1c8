//! The api over gRPC on 127.0.0.1:0 and a MemStore: CRUD of every kind, bad input
//! (INVALID_ARGUMENT naming the field, nothing written), optimistic concurrency, watches,
//! paging, and the detector (seed workload, policy changes, precedence, conflicts).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use flotilla_api::batch::BatchWriter;
use flotilla_api::claim::{LABEL_CLUSTER_POLICY_NAME, LABEL_POLICY_NAME};
use flotilla_api::detector::{CacheWriters, Ctx, reconcile};
use flotilla_api::testing::{
    self, NGINX_MANIFEST, TestApi, application_directly, cluster, deployment_selector, labelled,
    named, nginx_workload, object_meta, seed_policy, static_weights,
};
use flotilla_core::validation::PERMANENT_ID_LABEL_POLICY;
use flotilla_proto::Resource;
use flotilla_proto::v1::{self, WatchEventType, api_client::ApiClient};
use flotilla_runtime::Recorder;
use flotilla_runtime::watcher::{Event, Object};
use flotilla_store::typed::{Stored, Typed};
use flotilla_store::{MemStore, StoreRef};
use tonic::transport::Channel;
use tonic::{Code, Response, Status, Streaming};
use tonic_types::StatusExt;

type Client = ApiClient<Channel>;

async fn setup() -> (StoreRef, TestApi, Client) {
    let store: StoreRef = Arc::new(MemStore::new());
    let api = testing::serve(store.clone(), testing::config()).await;
    let client = api.client().await;
    (store, api, client)
}

/// [`flotilla_runtime::testing::eventually`] for at most 10 s.
async fn eventually<T, Fut>(what: &str, f: impl FnMut() -> Fut) -> T
where
    Fut: Future<Output = Option<T>>,
{
    flotilla_runtime::testing::eventually(Duration::from_secs(10), what, f).await
}

/// The answer to `call`, which must succeed (the counterpart of [`expect_invalid`]).
async fn accepted<T>(call: impl Future<Output = Result<Response<T>, Status>>) -> T {
    call.await.unwrap().into_inner()
}

/// Updates workload `w` (a manifest of 3 replicas, as the seed's) to `replicas`; the
/// workload as stored.
async fn scale(client: &mut Client, w: &v1::Workload, replicas: i32) -> v1::Workload {
    let mut scaled = w.clone();
    scaled.manifest = scaled
        .manifest
        .replace("\"replicas\": 3", &format!("\"replicas\": {replicas}"));
    client
        .update_workload(v1::UpdateWorkloadRequest {
            workload: Some(scaled),
        })
        .await
        .unwrap()
        .into_inner()
}

/// Every key except the election's, with its mod revision.
async fn snapshot(store: &StoreRef) -> Vec<(String, i64)> {
    let (kvs, _) = store.list("", 0).await.unwrap();
    kvs.into_iter()
        .filter(|kv| !kv.key.starts_with("leases/"))
        .map(|kv| (kv.key, kv.mod_revision))
        .collect()
}

/// The stored keys under `prefix` (e.g. `"workloads/"`), in key order.
async fn keys_under(store: &StoreRef, prefix: &str) -> Vec<String> {
    snapshot(store)
        .await
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| k.starts_with(prefix))
        .collect()
}

fn bad_fields(status: &Status) -> Vec<String> {
    status
        .get_details_bad_request()
        .map(|b| b.field_violations.into_iter().map(|v| v.field).collect())
        .unwrap_or_default()
}

/// The call fails with INVALID_ARGUMENT naming `field` (in the details and the message),
/// and the store is unchanged.
async fn expect_invalid<T: std::fmt::Debug>(
    store: &StoreRef,
    field: &str,
    call: impl Future<Output = Result<Response<T>, Status>>,
) {
    let before = snapshot(store).await;
    let err = call.await.expect_err(&format!("{field}: must be rejected"));
    assert_eq!(err.code(), Code::InvalidArgument, "{field}: {err:?}");
    let fields = bad_fields(&err);
    assert!(
        fields.iter().any(|f| f == field),
        "expected a violation at {field}, got {fields:?} ({})",
        err.message()
    );
    assert!(err.message().contains(field), "{}", err.message());
    assert_eq!(
        snapshot(store).await,
        before,
        "{field}: nothing may be written"
    );
}

async fn next<M: std::fmt::Debug>(stream: &mut Streaming<M>) -> M {
    tokio::time::timeout(Duration::from_secs(5), stream.message())
        .await
        .expect("a watch message within 5 s")
        .expect("no stream error")
        .expect("the stream is open")
}

fn create_cluster(c: v1::Cluster) -> v1::CreateClusterRequest {
    v1::CreateClusterRequest { cluster: Some(c) }
}

fn create_pp(p: v1::PropagationPolicy) -> v1::CreatePropagationPolicyRequest {
    v1::CreatePropagationPolicyRequest {
        propagation_policy: Some(p),
    }
}

fn create_workload(w: v1::Workload) -> v1::CreateWorkloadRequest {
    v1::CreateWorkloadRequest { workload: Some(w) }
}

fn kind_only(name: &str, priority: i32) -> v1::PropagationSpec {
    v1::PropagationSpec {
        resource_selectors: vec![deployment_selector("")],
        priority,
        placement: Some(v1::Placement {
            cluster_affinity: Some(v1::ClusterAffinity {
                cluster_names: vec![format!("{name}-cluster")],
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn pp(name: &str, spec: v1::PropagationSpec) -> v1::PropagationPolicy {
    v1::PropagationPolicy {
        metadata: Some(v1::ObjectMeta {
            name: name.into(),
            namespace: "default".into(),
            ..Default::default()
        }),
        spec: Some(spec),
    }
}

fn work(cluster: &str, name: &str) -> v1::Work {
    v1::Work {
        metadata: object_meta("default", name),
        spec: Some(v1::WorkSpec {
            cluster: cluster.into(),
            manifest: "{}".into(),
            ..Default::default()
        }),
        status: None,
    }
}

fn policy_label(b: &v1::ResourceBinding) -> String {
    let labels = &b.metadata.as_ref().unwrap().labels;
    labels
        .get(LABEL_POLICY_NAME)
        .or_else(|| labels.get(LABEL_CLUSTER_POLICY_NAME))
        .cloned()
        .unwrap_or_default()
}

mod apply;
mod crud;
mod detector;
mod resource_model;
mod watch;
