//! `get -o yaml|json`: objects in Kubernetes' form, which `flotilla apply -f` reads back
//! (`flotilla_kube::form`, shared with the Kubernetes API gateway: one printer, one shape).

use super::output::Named;

/// `msg` as a Kubernetes object (`flotilla_kube::form::kubernetes`).
pub fn kubernetes<M: Named>(msg: &M) -> anyhow::Result<serde_json::Value> {
    flotilla_kube::form::kubernetes(M::FULL_NAME, &msg.encode_to_vec())
}

pub use flotilla_kube::form::list;
