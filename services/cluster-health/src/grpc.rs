//! `flotilla.v1.ClusterHealth`: Pull agents' heartbeats, and `Assess`, the dry run of the very
//! rules the controller applies (convert → [`assess`] → convert).

use std::sync::Arc;
use std::time::Duration;

use flotilla_core::Time;
use flotilla_core::health::{MonitorEntry, ProbeOutcome, ThresholdState};
use flotilla_core::types::{ClusterTaintPolicy, ConditionStatus};
use flotilla_proto::convert::{WireEnum, time_to_timestamp, timestamp_to_time};
use flotilla_proto::v1;
use flotilla_proto::v1::cluster_health_server::{ClusterHealth, ClusterHealthServer};
use flotilla_runtime::Cache;
use flotilla_runtime::rpc::metadata_str;
use flotilla_store::StoreRef;
use flotilla_store::typed::Typed;
use tonic::Request;

use crate::assess::{Inputs, Memory, NoExecuteTaints, Observation, Options, assess};
use crate::controller::cluster_key;
use crate::error::Error;
use crate::heartbeat;

/// Metadata naming the caller's cluster (sent by Pull agents).
pub const CLUSTER_METADATA: &str = "x-flotilla-cluster";

/// The ClusterHealth service.
#[derive(Clone, Debug)]
pub struct ClusterHealthService {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    options: Options,
    clusters: Cache<v1::Cluster>,
    policies: Cache<ClusterTaintPolicy>,
    /// The heartbeat records as this replica last saw them: where a write starts from.
    heartbeats: Cache<v1::HeartbeatRecord>,
    store: StoreRef,
    clock: flotilla_runtime::Clock,
}

/// The tonic server for `service` (with Flotilla's decode limit).
pub fn server(service: ClusterHealthService) -> ClusterHealthServer<ClusterHealthService> {
    flotilla_runtime::decode_limited!(ClusterHealthServer::new(service))
}

fn duration_to_wire(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

fn duration_from_wire(
    d: Option<&prost_types::Duration>,
    field: &str,
    default: Duration,
) -> Result<Duration, Error> {
    d.map_or(Ok(default), |d| {
        flotilla_proto::convert::duration_from_wire(d)
            .map_err(|_| Error::invalid(field, "must be a non-negative duration"))
    })
}

fn time_from_wire(ts: Option<&prost_types::Timestamp>, field: &str) -> Result<Option<Time>, Error> {
    ts.map(|ts| timestamp_to_time(ts).map_err(|e| Error::convert_at(field, e)))
        .transpose()
}

/// A request's `options`: every field left out keeps its value in `defaults`.
fn options_from_wire(o: &v1::ClusterHealthOptions, defaults: Options) -> Result<Options, Error> {
    let d = |wire: &Option<prost_types::Duration>, field: &str, default: Duration| {
        duration_from_wire(wire.as_ref(), &format!("options.{field}"), default)
    };
    let thresholds = flotilla_core::health::Thresholds {
        success: d(
            &o.success_threshold,
            "successThreshold",
            defaults.thresholds.success,
        )?,
        failure: d(
            &o.failure_threshold,
            "failureThreshold",
            defaults.thresholds.failure,
        )?,
    };
    let grace = flotilla_core::health::MonitorGrace {
        startup: d(
            &o.startup_grace_period,
            "startupGracePeriod",
            defaults.grace.startup,
        )?,
        monitor: d(
            &o.monitor_grace_period,
            "monitorGracePeriod",
            defaults.grace.monitor,
        )?,
    };
    let no_execute = match v1::NoExecuteTaintMode::try_from(o.no_execute_taints) {
        Ok(v1::NoExecuteTaintMode::Unspecified) => defaults.no_execute,
        Ok(v1::NoExecuteTaintMode::Auto) => NoExecuteTaints::Auto,
        Ok(v1::NoExecuteTaintMode::Policy) => NoExecuteTaints::Policy,
        Err(_) => {
            return Err(Error::invalid(
                "options.noExecuteTaints",
                format!("unknown NoExecuteTaintMode value {}", o.no_execute_taints),
            ));
        }
    };
    Ok(Options {
        thresholds,
        grace,
        failover_eviction_timeout: d(
            &o.failover_eviction_timeout,
            "failoverEvictionTimeout",
            defaults.failover_eviction_timeout,
        )?,
        no_execute,
        monitor_period: d(&o.monitor_period, "monitorPeriod", defaults.monitor_period)?,
    })
}

// === impl ClusterHealthService ===

impl ClusterHealthService {
    /// A service that validates heartbeats against `clusters` (falling back to the store on a
    /// miss), records them in `store` (unfenced: any replica takes heartbeats), starting each
    /// write from the record in `heartbeats` (its watch of `heartbeats/`) rather than a read
    /// (#31), and assesses with `options` and the stored `policies`.
    pub fn new(
        options: Options,
        clusters: Cache<v1::Cluster>,
        policies: Cache<ClusterTaintPolicy>,
        heartbeats: Cache<v1::HeartbeatRecord>,
        store: StoreRef,
        clock: flotilla_runtime::Clock,
    ) -> Self {
        ClusterHealthService {
            inner: Arc::new(Inner {
                options,
                clusters,
                policies,
                heartbeats,
                store,
                clock,
            }),
        }
    }

    async fn cluster(&self, name: &str) -> Result<Option<Arc<v1::Cluster>>, Error> {
        if let Some(c) = self.inner.clusters.get(&cluster_key(name)) {
            return Ok(Some(c));
        }
        // not (yet) in the cache: the store decides
        Ok(Typed::new(self.inner.store.clone())
            .get(&cluster_key(name))
            .await?
            .map(Arc::new))
    }

    /// Validates and records one heartbeat (from the cluster named by [`CLUSTER_METADATA`],
    /// when the caller sends it).
    pub async fn record_heartbeat(
        &self,
        request: Request<v1::HeartbeatRequest>,
    ) -> Result<v1::HeartbeatResponse, Error> {
        let caller = metadata_str(&request, CLUSTER_METADATA);
        // an agent heartbeats only for its own cluster (docs/design.md §9)
        flotilla_runtime::authz::confine(request.extensions(), &request.get_ref().cluster_name)
            .map_err(|denied| Error::PermissionDenied(denied.message().to_owned()))?;
        let v1::HeartbeatRequest {
            cluster_name,
            cluster_uid,
            probe,
            status,
            sent_at,
        } = request.into_inner();
        if cluster_name.is_empty() {
            return Err(Error::required("clusterName"));
        }
        let Some(probe) = probe else {
            return Err(Error::required("probe"));
        };
        if let Some(ts) = &sent_at {
            time_from_wire(Some(ts), "sentAt")?;
        }
        if let Some(caller) = caller
            && caller != cluster_name
        {
            return Err(Error::PermissionDenied(format!(
                "the caller speaks for cluster {caller:?}, not {cluster_name:?}"
            )));
        }
        let Some(cluster) = self.cluster(&cluster_name).await? else {
            return Err(Error::NotFound(format!("cluster {cluster_name} not found")));
        };
        let uid = cluster.metadata.as_ref().map_or("", |m| m.uid.as_str());
        let sync_mode = cluster.spec.as_ref().map_or(0, |s| s.sync_mode);
        if sync_mode != v1::SyncMode::Pull as i32 {
            return Err(Error::FailedPrecondition(format!(
                "cluster {cluster_name} is not a Pull cluster: its health is probed, not heartbeated"
            )));
        }
        if !cluster_uid.is_empty() && cluster_uid != uid {
            return Err(Error::FailedPrecondition(format!(
                "cluster {cluster_name} has uid {uid}, not {cluster_uid}: it was re-created"
            )));
        }
        let now = self.inner.clock.now();
        let record = v1::HeartbeatRecord {
            cluster_name: cluster_name.clone(),
            cluster_uid: uid.to_owned(),
            renew_time: Some(time_to_timestamp(now)),
            probe: Some(probe),
            status: status.map(|mut s| {
                s.conditions.clear();
                s
            }),
            sent_at,
        };
        let known = self
            .inner
            .heartbeats
            .get_object(&heartbeat::key(&cluster_name))
            .map(|o| heartbeat::Known {
                revision: o.revision,
                renew_time: heartbeat::renew_time(&o.value),
            });
        heartbeat::record_over(&*self.inner.store, &record, known).await?;
        let lease = self.inner.options.grace.monitor;
        Ok(v1::HeartbeatResponse {
            renew_time: record.renew_time,
            lease_duration: Some(duration_to_wire(lease)),
            // CH-7: lease duration × 0.25
            renew_interval: Some(duration_to_wire(lease / 4)),
        })
    }

    /// `Heartbeat`: [`Self::record_heartbeat`], counted and traced.
    async fn heartbeat(
        &self,
        request: Request<v1::HeartbeatRequest>,
    ) -> Result<v1::HeartbeatResponse, Error> {
        let cluster = request.get_ref().cluster_name.clone();
        let result = self.record_heartbeat(request).await;
        let label = if result.is_ok() { "ok" } else { "rejected" };
        metrics::counter!("flotilla_cluster_health_heartbeats_total", "result" => label)
            .increment(1);
        match &result {
            Ok(_) => tracing::debug!(cluster = %cluster, "heartbeat recorded"),
            Err(e) => tracing::debug!(cluster = %cluster, error = %e, "heartbeat rejected"),
        }
        result
    }

    /// The dry run: the request's inputs through [`assess`].
    pub async fn assess(
        &self,
        request: Request<v1::ClusterHealthAssessRequest>,
    ) -> Result<v1::ClusterHealthAssessResponse, Error> {
        let v1::ClusterHealthAssessRequest {
            cluster,
            probe,
            last_heartbeat_time,
            threshold,
            monitor,
            options,
            now,
            taint_policies,
        } = request.into_inner();
        let Some(cluster) = cluster else {
            return Err(Error::required("cluster"));
        };
        let defaults = self.inner.options;
        let options = match options {
            None => defaults,
            Some(o) => options_from_wire(&o, defaults)?,
        };
        let now = time_from_wire(now.as_ref(), "now")?.unwrap_or_else(|| self.inner.clock.now());
        let last_heartbeat = time_from_wire(last_heartbeat_time.as_ref(), "lastHeartbeatTime")?;
        let policies: Vec<ClusterTaintPolicy> = if taint_policies.is_empty() {
            self.inner
                .policies
                .list()
                .iter()
                .map(|p| (**p).clone())
                .collect()
        } else {
            taint_policies
                .into_iter()
                .enumerate()
                .map(|(i, p)| {
                    ClusterTaintPolicy::try_from(p)
                        .map_err(|e| Error::convert_at(&format!("taintPolicies[{i}]"), e))
                })
                .collect::<Result<_, _>>()?
        };
        let threshold = threshold
            .map(|t| {
                let observed =
                    ConditionStatus::from_wire_required(t.ready_status, "threshold.readyStatus")
                        .map_err(|e| Error::invalid(&e.field, e.message))?;
                Ok::<_, Error>(ThresholdState {
                    observed,
                    since: time_from_wire(t.threshold_start.as_ref(), "threshold.thresholdStart")?,
                })
            })
            .transpose()?;
        let current_ready = flotilla_core::types::Cluster::try_from(cluster.clone())
            .map_err(|e| Error::convert_at("cluster", e))?
            .ready()
            .cloned();
        let mut ready_transition = None;
        let monitor = match monitor {
            None => None,
            Some(m) => {
                ready_transition = time_from_wire(
                    m.ready_transition_timestamp.as_ref(),
                    "monitor.readyTransitionTimestamp",
                )?;
                Some(MonitorEntry {
                    probe_timestamp: time_from_wire(
                        m.probe_timestamp.as_ref(),
                        "monitor.probeTimestamp",
                    )?
                    .unwrap_or(now),
                    saved_ready: current_ready,
                    last_heartbeat,
                })
            }
        };
        let observation = probe.map(|p| Observation {
            outcome: ProbeOutcome {
                online: p.online,
                healthy: p.online && p.healthy,
            },
            message: p.message,
            collected: None,
        });
        let d = assess(Inputs {
            cluster: &cluster,
            observation: observation.as_ref(),
            last_heartbeat,
            ready_transition,
            memory: Memory { threshold, monitor },
            observing_since: flotilla_core::Time::EPOCH,
            policies: &policies,
            options: &options,
            now,
        })
        .map_err(|e| Error::convert_at("cluster", e))?;
        let ready_transition =
            ready_transition.or(d.ready.as_ref().and_then(|r| r.last_transition_time));
        Ok(v1::ClusterHealthAssessResponse {
            ready: d.ready.clone().map(v1::Condition::from),
            status_changed: d.status_changed,
            taints: d.taints.iter().cloned().map(v1::Taint::from).collect(),
            added_taints: d.added.iter().cloned().map(v1::Taint::from).collect(),
            removed_taints: d.removed.iter().cloned().map(v1::Taint::from).collect(),
            threshold: d.memory.threshold.map(|t| v1::ThresholdState {
                ready_status: v1::ConditionStatus::from(t.observed).into(),
                threshold_start: t.since.map(time_to_timestamp),
            }),
            monitor: d.memory.monitor.as_ref().map(|m| v1::MonitorState {
                probe_timestamp: Some(time_to_timestamp(m.probe_timestamp)),
                ready_transition_timestamp: ready_transition.map(time_to_timestamp),
            }),
            requeue_after: d.requeue_after.map(duration_to_wire),
            reasons: d.reasons,
            conditions: d.status.conditions,
            collect_status: d.collect,
            taints_changed: d.taints_changed,
        })
    }
}

flotilla_runtime::unary_service! {
    impl ClusterHealth for ClusterHealthService {
        heartbeat(v1::HeartbeatRequest) -> v1::HeartbeatResponse = Self::heartbeat;
        assess(v1::ClusterHealthAssessRequest) -> v1::ClusterHealthAssessResponse = Self::assess;
    }
}
