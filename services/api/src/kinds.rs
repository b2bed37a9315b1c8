//! What the generic CRUD and watch code needs to know per kind: its watch response message
//! and how to name an object from its key alone.

use flotilla_core::resource;
use flotilla_proto::v1::{self, WatchEventType};
use flotilla_store::typed::Stored;

/// A kind the api serves.
pub trait ApiKind: Stored + Send + Sync + 'static {
    /// The message of the kind's Watch stream.
    type WatchResponse: Send + 'static;

    /// Builds one watch message.
    fn watch_response(
        type_: WatchEventType,
        object: Option<Self>,
        resource_version: i64,
    ) -> Self::WatchResponse;

    /// The object as far as its key tells (for a DELETED event whose last state the store no
    /// longer has): name, namespace and whatever else the key holds.
    fn tombstone(key: &str) -> Self {
        let parts: Vec<&str> = key.split('/').collect();
        let mut obj = Self::default();
        let meta = obj.meta_mut();
        meta.name = parts.last().copied().unwrap_or_default().to_owned();
        if Self::NAMESPACED && parts.len() >= 3 {
            meta.namespace = parts[parts.len() - 2].to_owned();
        }
        obj
    }
}

macro_rules! api_kind {
    ($($ty:ident => $resp:ident $(, tombstone = $tomb:path)?;)*) => {$(
        impl ApiKind for v1::$ty {
            type WatchResponse = v1::$resp;

            fn watch_response(
                type_: WatchEventType,
                object: Option<Self>,
                resource_version: i64,
            ) -> v1::$resp {
                v1::$resp {
                    r#type: type_ as i32,
                    object,
                    resource_version,
                }
            }

            $(fn tombstone(key: &str) -> Self {
                $tomb(key)
            })?
        }
    )*};
}

api_kind! {
    Cluster => WatchClustersResponse;
    PropagationPolicy => WatchPropagationPoliciesResponse;
    ClusterPropagationPolicy => WatchClusterPropagationPoliciesResponse;
    ClusterTaintPolicy => WatchClusterTaintPoliciesResponse;
    OverridePolicy => WatchOverridePoliciesResponse;
    ClusterOverridePolicy => WatchClusterOverridePoliciesResponse;
    Secret => WatchSecretsResponse;
    ResourceBinding => WatchResourceBindingsResponse;
    Event => WatchEventsResponse;
    Workload => WatchWorkloadsResponse, tombstone = workload_tombstone;
    Work => WatchWorksResponse, tombstone = work_tombstone;
}

/// `workloads/<ns>/<kind>[.<group>]/<name>` (the version is not in the key, so `apiVersion`
/// stays empty).
fn workload_tombstone(key: &str) -> v1::Workload {
    match key.split('/').collect::<Vec<_>>().as_slice() {
        [_, ns, segment, name] => v1::Workload {
            kind: resource::split_kind_segment(segment).0.to_owned(),
            ..named(ns, name)
        },
        _ => v1::Workload::default(),
    }
}

/// `works/<cluster>/<ns>/<name>`.
fn work_tombstone(key: &str) -> v1::Work {
    match key.split('/').collect::<Vec<_>>().as_slice() {
        [_, cluster, ns, name] => v1::Work {
            spec: Some(v1::WorkSpec {
                cluster: (*cluster).to_owned(),
                ..Default::default()
            }),
            ..named(ns, name)
        },
        _ => v1::Work::default(),
    }
}

/// An empty object with only its namespace and name set.
fn named<T: Stored>(namespace: &str, name: &str) -> T {
    let mut obj = T::default();
    let meta = obj.meta_mut();
    meta.namespace = namespace.to_owned();
    meta.name = name.to_owned();
    obj
}

#[cfg(test)]
mod tests {
    use flotilla_proto::Resource;

    use super::*;

    #[test]
    fn tombstones_name_the_object_from_its_key() {
        let b = v1::ResourceBinding::tombstone("bindings/default/nginx-deployment");
        assert_eq!((b.namespace(), b.name()), ("default", "nginx-deployment"));
        let c = v1::Cluster::tombstone("clusters/member1");
        assert_eq!((c.namespace(), c.name()), ("", "member1"));
        let w = v1::Workload::tombstone("workloads/default/Deployment.apps/nginx");
        assert_eq!(
            (w.namespace(), w.kind.as_str(), w.name()),
            ("default", "Deployment", "nginx")
        );
        let work = v1::Work::tombstone("works/member1/default/nginx-abc");
        assert_eq!(work.spec.unwrap().cluster, "member1");
        assert_eq!(work.metadata.unwrap().name, "nginx-abc");
    }
}
