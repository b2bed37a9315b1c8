//! `Api.Apply`: a whole file's objects admitted first, then written in one transaction.
//!
//! More objects than one etcd transaction holds (128) are written in transactions of 128, in
//! order, after all of them were admitted; only a concurrent write can then stop a later one.
//!
//! ```text
//!   objects[0..n] ──admit each (create, or update on what is stored)──► any problem?
//!        │                                                              └► INVALID_ARGUMENT,
//!        ▼                                                                 objects[i].<field>,
//!   one Txn: per object  compare (absent | modRevision read)               nothing written
//!                        put (created, configured) or nothing (unchanged)
//!        └► a compare failed (someone wrote meanwhile): ABORTED, nothing written
//! ```

use std::collections::HashSet;

use flotilla_core::validation::{FieldError, FieldErrorKind, FieldPath};
use flotilla_proto::Resource;
use flotilla_proto::v1;
use flotilla_store::typed::{encode, new_uid, prepare_generation};
use flotilla_store::{Compare, CompareOp, MAX_TXN_OPS, Op, Txn, TxnResponse};
use prost::bytes::Bytes;

use crate::error::Error;
use crate::kinds::ApiKind;
use crate::objects::{carry_server_meta, keep_times_of_a_no_op, now_timestamp, reset_for_create};

use super::ApiService;

/// One object, admitted: where it goes and what to write.
struct Planned {
    key: String,
    outcome: v1::ApplyOutcome,
    /// The mod revision read (`None`: the key must still be absent).
    read: Option<i64>,
    /// What to write; `None` when the object is unchanged.
    value: Option<Bytes>,
}

/// `objects[i].` in front of every field error of `error` (other errors pass through).
fn at_index(i: usize, error: Error) -> Error {
    match error {
        Error::Invalid(errs) => Error::Invalid(
            errs.into_iter()
                .map(|e| FieldError {
                    field: if e.field.is_empty() {
                        format!("objects[{i}]")
                    } else {
                        format!("objects[{i}].{}", e.field)
                    },
                    ..e
                })
                .collect(),
        ),
        other => other,
    }
}

/// What an apply keeps of the stored object when the document does not say: its finalizers
/// and its permanent-id labels (PD-1.6), as `kubectl apply` keeps what others set.
/// A replace (`keep_finalizers` false) sets the finalizers the object has, as a Kubernetes
/// PUT does.
fn keep_server_set<R: Resource>(current: &R, new: &mut R, keep_finalizers: bool) {
    let Some(current) = current.meta() else {
        return;
    };
    let meta = new.meta_mut();
    if keep_finalizers && meta.finalizers.is_empty() {
        meta.finalizers.clone_from(&current.finalizers);
    }
    for (k, v) in &current.labels {
        if k.ends_with("/permanent-id") {
            meta.labels.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
}

impl ApiService {
    /// Admits every object of `request`, then writes them all in one transaction (or, for a
    /// dry run, only says what would happen).
    pub(super) async fn apply_objects(
        &self,
        request: v1::ApplyRequest,
    ) -> Result<v1::ApplyResponse, Error> {
        let mode = v1::ApplyMode::try_from(request.mode)
            .map_err(|_| Error::invalid("mode", format!("unknown apply mode {}", request.mode)))?;
        let objects = request.objects;
        // ClusterTaintPolicies are checked against the stored ones this request does not
        // replace, and against each other.
        let in_request: Vec<v1::ClusterTaintPolicy> = objects
            .iter()
            .filter_map(|o| match &o.object {
                Some(v1::apply_object::Object::ClusterTaintPolicy(p)) => Some(p.clone()),
                _ => None,
            })
            .collect();
        let stored_policies = if in_request.is_empty() {
            Vec::new()
        } else {
            self.cluster_taint_policies().await?
        };
        let mut problems = Vec::new();
        let mut plans = Vec::with_capacity(objects.len());
        for (i, object) in objects.into_iter().enumerate() {
            match self.plan(object, mode, &in_request, &stored_policies).await {
                Ok(plan) => plans.push(plan),
                Err(Error::Invalid(errs)) => {
                    if let Error::Invalid(errs) = at_index(i, Error::Invalid(errs)) {
                        problems.extend(errs);
                    }
                }
                Err(other) => return Err(other),
            }
        }
        let mut keys = HashSet::new();
        for (i, plan) in plans.iter().enumerate() {
            if !keys.insert(plan.key.clone()) {
                problems.push(FieldError::new(
                    &FieldPath::new(&format!("objects[{i}]")),
                    FieldErrorKind::Duplicate,
                    format!("{} appears twice in one apply", plan.key),
                ));
            }
        }
        if !problems.is_empty() {
            return Err(Error::Invalid(problems));
        }
        let outcomes = plans.iter().map(|p| p.outcome.clone()).collect();
        if request.dry_run || plans.iter().all(|p| p.value.is_none()) {
            return Ok(v1::ApplyResponse {
                outcomes,
                resource_version: 0,
            });
        }
        // One transaction holds at most MAX_TXN_OPS (etcd's limit) objects: a larger file is
        // written in transactions of that many, in order, each all or nothing. Every object
        // was admitted above, so only a concurrent write can stop a later one.
        let total = plans.len();
        let mut written = 0;
        let mut revision = 0;
        let mut plans = plans.into_iter().peekable();
        while plans.peek().is_some() {
            let chunk: Vec<Planned> = plans.by_ref().take(MAX_TXN_OPS).collect();
            let len = chunk.len();
            let mut txn = Txn::new();
            for plan in chunk {
                txn = txn.when(match plan.read {
                    None => Compare::absent(&plan.key),
                    Some(revision) => Compare::mod_revision(&plan.key, CompareOp::Equal, revision),
                });
                if let Some(value) = plan.value {
                    txn = txn.and_then(Op::put(&plan.key, value));
                }
            }
            match self.objects().store().txn(txn).await? {
                TxnResponse::Committed { revision: r, .. } => revision = r,
                TxnResponse::Failed { .. } => {
                    let written_note = if written == 0 {
                        "nothing was written".to_owned()
                    } else {
                        format!(
                            "objects[0..{written}] were written (in transactions of \
                             {MAX_TXN_OPS}), objects[{written}..{total}] were not"
                        )
                    };
                    return Err(Error::Aborted(format!(
                        "an object of the apply was written by someone else meanwhile; \
                         {written_note}; apply again"
                    )));
                }
            }
            written += len;
        }
        Ok(v1::ApplyResponse {
            outcomes,
            resource_version: revision,
        })
    }

    /// One object: admitted as a create when its key is free, as an update of what is
    /// stored otherwise.
    async fn plan(
        &self,
        object: v1::ApplyObject,
        mode: v1::ApplyMode,
        policies_in_request: &[v1::ClusterTaintPolicy],
        stored_policies: &[v1::ClusterTaintPolicy],
    ) -> Result<Planned, Error> {
        use v1::apply_object::Object;
        let admission = self.admission();
        match object.object {
            None => Err(Error::required("object", "one object kind is required")),
            Some(Object::Cluster(c)) => {
                self.plan_kind(
                    mode,
                    c,
                    |c| admission.cluster(Some(c)),
                    |cur, new| admission.cluster_update(cur, new),
                )
                .await
            }
            Some(Object::PropagationPolicy(p)) => {
                self.plan_kind(
                    mode,
                    p,
                    |p| admission.propagation_policy(Some(p), None, false),
                    |cur, new| admission.propagation_policy(Some(new), Some(cur), false),
                )
                .await
            }
            Some(Object::ClusterPropagationPolicy(p)) => {
                self.plan_kind(
                    mode,
                    p,
                    |p| admission.propagation_policy(Some(p), None, true),
                    |cur, new| admission.propagation_policy(Some(new), Some(cur), true),
                )
                .await
            }
            Some(Object::ClusterTaintPolicy(p)) => {
                let name = p.name().to_owned();
                let others: Vec<v1::ClusterTaintPolicy> = stored_policies
                    .iter()
                    .filter(|s| !policies_in_request.iter().any(|r| r.name() == s.name()))
                    .chain(policies_in_request.iter().filter(|r| r.name() != name))
                    .cloned()
                    .collect();
                self.plan_kind(
                    mode,
                    p,
                    |p| admission.cluster_taint_policy(Some(p), &others),
                    |_, new| admission.cluster_taint_policy(Some(new), &others),
                )
                .await
            }
            Some(Object::OverridePolicy(p)) => {
                self.plan_kind(
                    mode,
                    p,
                    |p| admission.override_policy(Some(p), false),
                    |_, new| admission.override_policy(Some(new), false),
                )
                .await
            }
            Some(Object::ClusterOverridePolicy(p)) => {
                self.plan_kind(
                    mode,
                    p,
                    |p| admission.override_policy(Some(p), true),
                    |_, new| admission.override_policy(Some(new), true),
                )
                .await
            }
            Some(Object::Secret(s)) => {
                self.plan_kind(
                    mode,
                    s,
                    |s| admission.secret(Some(s)),
                    |_, new| admission.secret(Some(new)),
                )
                .await
            }
            Some(Object::Workload(w)) => {
                self.plan_kind(
                    mode,
                    w,
                    |w| admission.workload(Some(w)),
                    |cur, new| {
                        let mut admitted = admission.workload(Some(new))?;
                        carry_server_meta(cur, &mut admitted);
                        // the aggregated status stays the work executor's (IN-4)
                        admitted.status.clone_from(&cur.status);
                        Ok(admitted)
                    },
                )
                .await
            }
        }
    }

    async fn plan_kind<R: ApiKind>(
        &self,
        mode: v1::ApplyMode,
        object: R,
        admit_create: impl FnOnce(R) -> Result<R, Error>,
        admit_update: impl FnOnce(&R, R) -> Result<R, Error>,
    ) -> Result<Planned, Error> {
        // Admitted as a create first: the key (a workload's comes from its manifest), and
        // every check of the object on its own.
        let mut fresh = object.clone();
        fresh.meta_mut().resource_version = 0;
        reset_for_create(&mut fresh)?;
        let mut created = admit_create(fresh)?;
        let key = created.key();
        let outcome = |action: &str, obj: &R| v1::ApplyOutcome {
            kind: R::KIND.to_owned(),
            namespace: obj.namespace().to_owned(),
            name: obj.name().to_owned(),
            action: action.to_owned(),
        };
        let precondition = object.resource_version();
        if mode == v1::ApplyMode::Create && precondition != 0 {
            return Err(Error::invalid(
                "metadata.resourceVersion",
                "must not be set on an object to be created",
            ));
        }
        let stored = self.objects().typed().get::<R>(&key).await?;
        match (&stored, mode) {
            (Some(_), v1::ApplyMode::Create) => {
                return Err(Error::AlreadyExists(format!(
                    "{} {} already exists",
                    R::KIND,
                    display_name(&created)
                )));
            }
            (None, v1::ApplyMode::Update) => {
                return Err(Error::NotFound(format!(
                    "{} {} not found",
                    R::KIND,
                    display_name(&created)
                )));
            }
            (Some(current), v1::ApplyMode::Update)
                if precondition != 0 && precondition != current.resource_version() =>
            {
                return Err(Error::Aborted(format!(
                    "{} {} was modified: resourceVersion {precondition} was given, {} is stored; \
                     read it again and apply your change to the latest version",
                    R::KIND,
                    display_name(&created),
                    current.resource_version()
                )));
            }
            _ => {}
        }
        match stored {
            None => {
                let meta = created.meta_mut();
                meta.uid = new_uid();
                meta.creation_timestamp = Some(now_timestamp());
                meta.generation = 1;
                Ok(Planned {
                    outcome: outcome("created", &created),
                    value: Some(encode(&created)),
                    read: None,
                    key,
                })
            }
            Some(current) => {
                let mut new = object;
                keep_server_set(&current, &mut new, mode != v1::ApplyMode::Update);
                carry_server_meta(&current, &mut new);
                let mut new = admit_update(&current, new)?;
                prepare_generation(&current, &mut new);
                keep_times_of_a_no_op(&current, &mut new);
                let value = encode(&new);
                let unchanged = value == encode(&current);
                Ok(Planned {
                    outcome: outcome(if unchanged { "unchanged" } else { "configured" }, &new),
                    value: (!unchanged).then_some(value),
                    read: Some(current.resource_version()),
                    key,
                })
            }
        }
    }
}

/// `namespace/name`, or `name` for a cluster-scoped object.
fn display_name<R: Resource>(object: &R) -> String {
    if object.namespace().is_empty() {
        object.name().to_owned()
    } else {
        format!("{}/{}", object.namespace(), object.name())
    }
}
