//! Push members, reached through their Kubernetes API (`flotilla-member`): the target a
//! Cluster names, and one manifest applied or deleted.

pub use flotilla_member::{MemberError, Members, ObjectRef, Target};
use flotilla_proto::v1;
use flotilla_runtime::Cache;
use serde_json::Value;

/// How to reach `cluster`'s API server: its `spec.apiEndpoint`, and the credentials of the
/// Secret its `secretRef` names (from the cache of Secrets).
pub fn target_of(
    secrets: &Cache<v1::Secret>,
    cluster: &v1::Cluster,
) -> Result<Target, MemberError> {
    let secret = flotilla_member::secret_key_of(cluster).and_then(|key| secrets.get(&key));
    flotilla_member::target_of(cluster, secret.as_deref())
}

/// The member object a Work's manifest names.
pub fn object_ref(resource: &v1::ObjectReference) -> ObjectRef {
    ObjectRef {
        api_version: resource.api_version.clone(),
        kind: resource.kind.clone(),
        namespace: resource.namespace.clone(),
        name: resource.name.clone(),
    }
}

/// Applies a Work's manifest (JSON text) on `cluster` by server-side apply and reads back
/// the member's view of it. With `only_ours` (PL-7: `conflictResolution: Abort`, before the
/// Work's first apply) an object the member has that Flotilla did not create is left alone:
/// [`MemberError::NotOurs`].
pub async fn apply(
    members: &Members,
    secrets: &Cache<v1::Secret>,
    cluster: &v1::Cluster,
    manifest: &str,
    only_ours: bool,
) -> Result<v1::ManifestStatus, MemberError> {
    let name = cluster.metadata.as_ref().map_or("", |m| m.name.as_str());
    let object: Value = serde_json::from_str(manifest)
        .map_err(|e| MemberError::BadObject(format!("the Work's manifest: {e}")))?;
    let member = members.member(name, &target_of(secrets, cluster)?)?;
    let applied = if only_ours {
        member.apply_if_ours(&object).await?
    } else {
        member.apply(&object).await?
    };
    Ok(flotilla_member::status::manifest_status(&applied))
}

/// Deletes a Work's object from `cluster`; `Ok(false)` when it was already absent.
pub async fn delete(
    members: &Members,
    secrets: &Cache<v1::Secret>,
    cluster: &v1::Cluster,
    resource: &v1::ObjectReference,
) -> Result<bool, MemberError> {
    let name = cluster.metadata.as_ref().map_or("", |m| m.name.as_str());
    let member = members.member(name, &target_of(secrets, cluster)?)?;
    member.delete(&object_ref(resource)).await
}
