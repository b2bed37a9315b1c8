//! `get -o yaml|json`: objects in Kubernetes' form, which `flotilla apply -f` reads back
//! (`flotilla_kube::form`, shared with the Kubernetes API gateway: one printer, one shape).

use super::output::Named;

/// `msg` as a Kubernetes object (`flotilla_kube::form::kubernetes`), without its
/// `managedFields`, as `kubectl get -o yaml` prints an object: server-side apply's
/// bookkeeping is noise to a reader (`kubectl get --show-managed-fields` shows it).
pub fn kubernetes<M: Named>(msg: &M) -> anyhow::Result<serde_json::Value> {
    let mut object = flotilla_kube::form::kubernetes(M::FULL_NAME, &msg.encode_to_vec())?;
    if let Some(meta) = object
        .get_mut("metadata")
        .and_then(serde_json::Value::as_object_mut)
    {
        meta.remove("managedFields");
    }
    Ok(object)
}

pub use flotilla_kube::form::list;
