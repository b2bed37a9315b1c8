//! The handlers that differ by kind, each one method that the table in `grpc.rs` routes to:
//! admission for creates and updates, redaction of Secrets (always) and of Secret templates
//! (for a viewer), and the confinement of an agent to its own cluster's Works.

use flotilla_core::types::PropagationPolicy;
use flotilla_proto::v1;
use flotilla_runtime::authz::confine;
use flotilla_runtime::events::{EventType, Regarding};
use futures::StreamExt as _;
use tonic::{Request, Status};

use super::crud::PolicyKind;
use super::{ApiService, redact, redact_workload, viewer};
use crate::error::Error;
use crate::objects::NoHold;
use crate::watch::WatchResponseStream;
use flotilla_core::validation::{FieldError, FieldPath};

impl ApiService {
    /// Update of a Cluster: its status stays the stored one.
    pub(super) async fn update_cluster_admitted(
        &self,
        cluster: Option<v1::Cluster>,
    ) -> Result<v1::Cluster, Error> {
        let admit = |current: &v1::Cluster, new| self.admission().cluster_update(current, new);
        self.update(cluster, "cluster", false, admit).await
    }

    /// Create of a PropagationPolicy (`cluster_wide == false`) or ClusterPropagationPolicy
    /// (PD-1/PD-2 admission).
    pub(super) async fn create_propagation_admitted<K: PolicyKind<PropagationPolicy>>(
        &self,
        policy: Option<K>,
        cluster_wide: bool,
    ) -> Result<K, Error> {
        let admit = |p| self.admission().propagation_policy(p, None, cluster_wide);
        self.create_with(policy, admit).await
    }

    /// Update of a PropagationPolicy or ClusterPropagationPolicy, admitted against the stored
    /// one.
    pub(super) async fn update_propagation_admitted<K: PolicyKind<PropagationPolicy>>(
        &self,
        policy: Option<K>,
        cluster_wide: bool,
    ) -> Result<K, Error> {
        let admit = |current: &K, new| {
            self.admission()
                .propagation_policy(Some(new), Some(current), cluster_wide)
        };
        let fields = ["propagationPolicy", "clusterPropagationPolicy"];
        self.update_policy(policy, cluster_wide, fields, admit)
            .await
    }

    /// Create of a Secret; the answer carries its keys, not its values.
    pub(super) async fn create_secret_redacted(
        &self,
        secret: Option<v1::Secret>,
    ) -> Result<v1::Secret, Error> {
        let admit = |s| self.admission().secret(s);
        self.create_with(secret, admit).await.map(redact)
    }

    /// Get of a Secret, without its values.
    pub(super) async fn get_secret_redacted(
        &self,
        request: v1::GetSecretRequest,
    ) -> Result<v1::Secret, Error> {
        self.get(request).await.map(redact)
    }

    /// List of Secrets, without their values.
    pub(super) async fn list_secrets_redacted(
        &self,
        request: v1::ListSecretsRequest,
    ) -> Result<v1::ListSecretsResponse, Error> {
        let mut page: v1::ListSecretsResponse = self.list(request).await?;
        page.items = page.items.into_iter().map(redact).collect();
        Ok(page)
    }

    /// Update of a Secret; the answer carries its keys, not its values.
    pub(super) async fn update_secret_redacted(
        &self,
        secret: Option<v1::Secret>,
    ) -> Result<v1::Secret, Error> {
        let admit = |_: &v1::Secret, new| self.admission().secret(Some(new));
        self.update(secret, "secret", true, admit).await.map(redact)
    }

    /// Delete of a Secret; the answer carries its keys, not its values.
    pub(super) async fn delete_secret_redacted(
        &self,
        request: v1::DeleteSecretRequest,
    ) -> Result<v1::DeleteSecretResponse, Error> {
        let mut answer: v1::DeleteSecretResponse = self.delete(request, NoHold).await?;
        answer.secret = answer.secret.map(redact);
        Ok(answer)
    }

    /// Delete of an object without finalizers' holds.
    pub(super) async fn delete_now<Q: crate::requests::DeleteRequest>(
        &self,
        request: Q,
    ) -> Result<Q::Response, Error> {
        self.delete(request, NoHold).await
    }

    /// Create of a Workload.
    pub(super) async fn create_workload_admitted(
        &self,
        workload: Option<v1::Workload>,
    ) -> Result<v1::Workload, Error> {
        let admit = |w| self.admission().workload(w);
        self.create_with(workload, admit).await
    }

    /// Get of a Workload: a viewer reads Secret templates without their values.
    pub(super) async fn get_workload_for_caller(
        &self,
        request: Request<v1::GetWorkloadRequest>,
    ) -> Result<v1::Workload, Error> {
        let hide = viewer(request.extensions());
        let workload = self.get(request.into_inner()).await?;
        Ok(if hide {
            redact_workload(workload)
        } else {
            workload
        })
    }

    /// List of Workloads: a viewer reads Secret templates without their values.
    pub(super) async fn list_workloads_for_caller(
        &self,
        request: Request<v1::ListWorkloadsRequest>,
    ) -> Result<v1::ListWorkloadsResponse, Error> {
        let hide = viewer(request.extensions());
        let mut page: v1::ListWorkloadsResponse = self.list(request.into_inner()).await?;
        if hide {
            page.items = page.items.into_iter().map(redact_workload).collect();
        }
        Ok(page)
    }

    /// Watch of Workloads: a viewer reads Secret templates without their values.
    pub(super) async fn watch_workloads_for_caller(
        &self,
        request: Request<v1::WatchWorkloadsRequest>,
    ) -> Result<WatchResponseStream<v1::WatchWorkloadsResponse>, Error> {
        let hide = viewer(request.extensions());
        let stream = self.watch(request.into_inner()).await?;
        if !hide {
            return Ok(stream);
        }
        Ok(Box::pin(stream.map(|item| {
            item.map(|mut event| {
                event.object = event.object.map(redact_workload);
                event
            })
        })))
    }

    /// Get of a Work: an agent reads only its own cluster's (the method table lets agents
    /// through, `confine` narrows them; docs/design.md §9). Works carry their manifests,
    /// Secrets among them.
    pub(super) async fn get_work_confined(
        &self,
        request: Request<v1::GetWorkRequest>,
    ) -> Result<v1::Work, Status> {
        Ok(self.get(confined(request, |r| &r.cluster)?).await?)
    }

    /// List of Works, confined as [`ApiService::get_work_confined`].
    pub(super) async fn list_works_confined(
        &self,
        request: Request<v1::ListWorksRequest>,
    ) -> Result<v1::ListWorksResponse, Status> {
        Ok(self.list(confined(request, |r| &r.cluster)?).await?)
    }

    /// Watch of Works, confined as [`ApiService::get_work_confined`].
    pub(super) async fn watch_works_confined(
        &self,
        request: Request<v1::WatchWorksRequest>,
    ) -> Result<WatchResponseStream<v1::WatchWorksResponse>, Status> {
        Ok(self.watch(confined(request, |r| &r.cluster)?).await?)
    }

    /// GE-9.1 (Flotilla): releases the task of `cluster` that
    /// `suppressDeletion: true` holds, by setting it to false, with a compare-and-swap on the
    /// binding as read (re-read on a lost race unless the caller named a resourceVersion).
    /// Only that one field changes; the release is recorded as an event on the binding.
    pub(super) async fn release_eviction_task(
        &self,
        request: Request<v1::ReleaseEvictionTaskRequest>,
    ) -> Result<v1::ResourceBinding, Error> {
        let who = caller(&request);
        let req = request.into_inner();
        let key = crate::requests::binding_key(&req.namespace, &req.name)?;
        let cluster = crate::requests::key_part(&req.cluster, "cluster")?.to_owned();
        // released already: answered as it is, nothing written
        let current: v1::ResourceBinding = self.inner.objects.get(&key).await?;
        if !release_task(&mut current.clone(), &cluster)? {
            return Ok(current);
        }
        let mut released = false;
        let binding = self
            .edit_binding(&key, req.resource_version, |new| {
                released = release_task(new, &cluster)?;
                Ok(())
            })
            .await?;
        if released {
            tracing::info!(
                binding = %key, %cluster, by = %who,
                "eviction task released: suppressDeletion set to false (GE-9.1)"
            );
            self.binding_event(
                &binding,
                REASON_EVICTION_TASK_RELEASED,
                format!(
                    "the graceful eviction task of cluster {cluster} was released by {who}: \
                     suppressDeletion set to false, so its old copy will be deleted"
                ),
            );
        }
        Ok(binding)
    }

    /// `edit` applied to the binding at `key` with a compare-and-swap on it as read (re-read
    /// on a lost race unless the caller named a `resource_version`).
    async fn edit_binding(
        &self,
        key: &str,
        resource_version: i64,
        mut edit: impl FnMut(&mut v1::ResourceBinding) -> Result<(), Error>,
    ) -> Result<v1::ResourceBinding, Error> {
        self.inner
            .objects
            .update(
                key,
                resource_version,
                "",
                |current: &v1::ResourceBinding| {
                    let mut new = current.clone();
                    edit(&mut new)?;
                    Ok(new)
                },
            )
            .await
    }

    /// Records a Normal event on `binding`.
    fn binding_event(&self, binding: &v1::ResourceBinding, reason: &str, message: String) {
        let meta = binding.metadata.clone().unwrap_or_default();
        self.inner.recorder.record(
            Regarding::binding(&meta.namespace, &meta.name),
            EventType::Normal,
            reason,
            message,
            "",
        );
    }

    /// SC-3.4 (Flotilla's stand-in for Karmada's WorkloadRebalancer): sets
    /// `spec.rescheduleTriggeredAt` to the api's clock with a compare-and-swap on the binding
    /// as read, so the scheduler recomputes the binding's placement from scratch (Fresh
    /// mode). Only that field changes. The request is recorded as an event on the binding.
    ///
    /// The scheduler compares the time with its own `lastScheduledTime`; a scheduler whose
    /// clock runs ahead of the api's by more than the time since the last schedule ignores
    /// the request, as Karmada's does with the rebalancer's creation time.
    pub(super) async fn reschedule_binding(
        &self,
        request: Request<v1::RescheduleBindingRequest>,
    ) -> Result<v1::ResourceBinding, Error> {
        let who = caller(&request);
        let req = request.into_inner();
        let key = crate::requests::binding_key(&req.namespace, &req.name)?;
        let at = crate::objects::now_timestamp();
        let binding = self
            .edit_binding(&key, req.resource_version, |new| {
                new.spec
                    .get_or_insert_with(Default::default)
                    .reschedule_triggered_at = Some(at);
                Ok(())
            })
            .await?;
        tracing::info!(
            binding = %key, by = %who,
            "reschedule requested: rescheduleTriggeredAt set, the scheduler divides the \
             replicas again from scratch (SC-3.4)"
        );
        self.binding_event(
            &binding,
            REASON_RESCHEDULE_REQUESTED,
            format!(
                "{who} requested a fresh schedule: the replicas are divided again from the \
                 clusters' current state, and replicas that move are moved make before break"
            ),
        );
        Ok(binding)
    }

    /// The shard tables of the sharded services (`shards/<service>/…` in the store).
    pub(super) async fn shards(
        &self,
        request: v1::ListShardsRequest,
    ) -> Result<v1::ListShardsResponse, Error> {
        let service = request.service.trim();
        if service.len() > 63
            || !service
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        {
            return Err(Error::Invalid(vec![FieldError::invalid(
                &FieldPath::new("service"),
                "a service name: lowercase letters, digits and '-', at most 63 (e.g. scheduler)",
            )]));
        }
        let store = self.inner.objects.store();
        let names = if service.is_empty() {
            flotilla_runtime::shards::services(&**store).await?
        } else {
            vec![service.to_owned()]
        };
        let mut services = Vec::with_capacity(names.len());
        for name in names {
            let (members, rows) = flotilla_runtime::shards::table(&**store, &name).await?;
            if members.is_empty() && rows.is_empty() {
                continue;
            }
            let held = |id: &str| {
                rows.iter()
                    .filter(|r| r.lease.is_some_and(|l| format!("{:016x}", l.0) == id))
                    .count()
            };
            services.push(v1::ServiceShards {
                members: members
                    .iter()
                    .map(|m| v1::ShardMember {
                        id: m.id.clone(),
                        identity: m.identity.clone(),
                        shard_count: m.shards,
                        held: u32::try_from(held(&m.id)).unwrap_or(u32::MAX),
                    })
                    .collect(),
                shards: rows
                    .into_iter()
                    .map(|r| v1::Shard {
                        shard: r.shard,
                        owner: r.owner,
                        member: r.lease.map(|l| format!("{:016x}", l.0)).unwrap_or_default(),
                        term: r.term,
                    })
                    .collect(),
                service: name,
            });
        }
        Ok(v1::ListShardsResponse { services })
    }

    /// The other services' addresses (`--peer`).
    /// What the caller may call ([`flotilla_runtime::authz::review`] for each question).
    /// The auth layer put the caller's principal in; a call made in-process, past the layer,
    /// is the admin's, as an api without tokens or client certificates takes every caller.
    pub(super) async fn review_access(
        &self,
        request: Request<v1::ReviewAccessRequest>,
    ) -> Result<v1::ReviewAccessResponse, Error> {
        const MAX_QUESTIONS: usize = 256;
        let principal = request
            .extensions()
            .get::<flotilla_runtime::Caller>()
            .map_or(flotilla_runtime::Principal::Admin, |c| c.0.clone());
        let questions = request.into_inner().questions;
        if questions.len() > MAX_QUESTIONS {
            return Err(Error::Invalid(vec![FieldError::invalid(
                &FieldPath::new("questions"),
                format!(
                    "at most {MAX_QUESTIONS} questions (got {})",
                    questions.len()
                ),
            )]));
        }
        let answers = questions
            .iter()
            .map(|q| {
                let (allowed, reason) =
                    flotilla_runtime::authz::review(&principal, &q.method, &q.cluster);
                v1::AccessAnswer { allowed, reason }
            })
            .collect();
        tracing::debug!(%principal, questions = questions.len(), "access reviewed");
        Ok(v1::ReviewAccessResponse {
            principal: principal.to_string(),
            answers,
        })
    }

    pub(super) async fn peers(
        &self,
        _request: v1::GetPeersRequest,
    ) -> Result<v1::GetPeersResponse, Error> {
        Ok(v1::GetPeersResponse {
            peers: self.inner.peers.clone().into_iter().collect(),
        })
    }
}

/// The principal that made `request`, for logs and events.
fn caller<Q>(request: &Request<Q>) -> String {
    request
        .extensions()
        .get::<flotilla_runtime::Caller>()
        .map_or_else(|| "an in-process caller".to_owned(), |c| c.0.to_string())
}

/// Reason of the event a reschedule request records.
pub const REASON_RESCHEDULE_REQUESTED: &str = "RescheduleRequested";

/// Reason of the event a release records.
pub const REASON_EVICTION_TASK_RELEASED: &str = "EvictionTaskReleased";

/// Sets `suppressDeletion: false` on `binding`'s task for `cluster`. `Ok(false)` when it is
/// released already (nothing to write); INVALID_ARGUMENT on `cluster` when there is no such
/// task or nothing holds it.
fn release_task(binding: &mut v1::ResourceBinding, cluster: &str) -> Result<bool, Error> {
    let task = binding
        .spec
        .as_mut()
        .and_then(|s| {
            s.graceful_eviction_tasks
                .iter_mut()
                .find(|t| t.from_cluster == cluster)
        })
        .ok_or_else(|| {
            Error::invalid(
                "cluster",
                format!("the binding has no graceful eviction task for cluster {cluster:?}"),
            )
        })?;
    match task.suppress_deletion {
        Some(true) => {
            task.suppress_deletion = Some(false);
            Ok(true)
        }
        Some(false) => Ok(false),
        None => Err(Error::invalid(
            "cluster",
            format!(
                "the task of cluster {cluster:?} is not held by suppressDeletion (only a task \
                 of purge mode Never is; others end when the new copy is healthy or their \
                 grace period ends)"
            ),
        )),
    }
}

/// The message of `request`, once [`confine`] lets its caller act for the request's
/// `cluster`.
fn confined<Q>(request: Request<Q>, cluster: impl FnOnce(&Q) -> &str) -> Result<Q, Status> {
    confine(request.extensions(), cluster(request.get_ref()))?;
    Ok(request.into_inner())
}
