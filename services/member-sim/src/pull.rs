//! Pull mode: the simulated member runs its own agent (Karmada's karmada-agent).
//!
//! ```text
//!   heartbeats ── every --heartbeat-interval while reachable ──► ClusterHealth.Heartbeat
//!                 (probe: online, healthy = fault != unhealthy; status: apiEnablements,
//!                  kubernetesVersion, resourceSummary)
//!
//!   works ── Api.WatchWorks{cluster} (from 0: ADDED…, BOOKMARK, then changes; resumed from
//!            the last resourceVersion, re-listed on OUT_OF_RANGE, jittered back-off)
//!            │ Work generation changed → apply its manifest locally (WE-6.5; suspended
//!            │ dispatching → skip); deletionTimestamp / DELETED → delete locally
//!            │ (unless preserveResourcesOnDeletion, WE-6.1)
//!            ▼
//!          WorkExecutor.ReportWorkStatus for every Work whose status changed (applied,
//!          health, ready replicas), also when pods turn Ready later
//! ```
//!
//! While the member is unreachable the agent is cut off too: no heartbeats, the watch is
//! dropped and resumed once healed.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use flotilla_proto::v1;
use flotilla_proto::v1::api_client::ApiClient;
use flotilla_proto::v1::cluster_health_client::ClusterHealthClient;
use flotilla_proto::v1::work_executor_client::WorkExecutorClient;
use flotilla_runtime::Shutdown;
use flotilla_runtime::backoff::{Backoff, BackoffState};
use flotilla_store::typed::now_timestamp;
use futures::StreamExt;
use tokio::time::Instant;
use tonic::Code;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};

use crate::sim::{Fault, ResourceKey, Sim, key_of, parse_apply};

/// Metadata naming the agent's cluster on its calls (the work executor refuses reports
/// about another cluster's Works with PERMISSION_DENIED).
pub const CLUSTER_METADATA: &str = "x-flotilla-cluster";
/// How long one unary RPC of the agent may take.
pub const RPC_TIMEOUT: Duration = Duration::from_secs(10);
/// Status reports in flight at once.
const REPORT_CONCURRENCY: usize = 16;
/// Status scans are at least this far apart (pods of many Works turn Ready at nearby times).
const MIN_SCAN_INTERVAL: Duration = Duration::from_millis(100);
/// Retry delay for reports that failed for a transient reason.
const REPORT_RETRY: Duration = Duration::from_secs(1);

/// Where the agent reports and what it is called (`--cluster`, `--api`, `--cluster-health`,
/// `--work-executor`, `--heartbeat-interval`).
#[derive(Clone, Debug)]
pub struct PullConfig {
    /// The Cluster's name in Flotilla.
    pub cluster: String,
    /// The api service (`Api.WatchWorks`).
    pub api: String,
    /// The cluster-health service (`ClusterHealth.Heartbeat`).
    pub cluster_health: String,
    /// The work-executor service (`WorkExecutor.ReportWorkStatus`).
    pub work_executor: String,
    /// How often to heartbeat (Karmada: lease duration 40s × 0.25 = 10s, CH-7).
    pub heartbeat_interval: Duration,
}

/// Why the agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    /// An address is not a valid URI.
    #[error("invalid address {addr:?}")]
    Address {
        /// The address as given.
        addr: String,
        /// The parser's complaint.
        #[source]
        source: tonic::transport::Error,
    },
}

/// An endpoint for `addr` (`host:port` or `http://host:port`).
pub fn endpoint(addr: &str) -> Result<Endpoint, PullError> {
    let uri = if addr.contains("://") {
        addr.to_owned()
    } else {
        format!("http://{addr}")
    };
    Endpoint::from_shared(uri)
        .map(|e| e.connect_timeout(Duration::from_secs(5)))
        .map_err(|source| PullError::Address {
            addr: addr.to_owned(),
            source,
        })
}

/// The heartbeat the agent sends now: its own probe (CH-2) and the status it collected
/// (CH-5.2).
pub fn heartbeat_request(sim: &Sim) -> v1::HeartbeatRequest {
    let (healthy, code, message) = sim.probe();
    v1::HeartbeatRequest {
        cluster_name: sim.name().to_owned(),
        cluster_uid: String::new(),
        probe: Some(v1::ProbeResult {
            online: true,
            healthy,
            message: format!("/readyz answered {code}: {message}"),
        }),
        status: Some(v1::ClusterStatus {
            conditions: Vec::new(),
            api_enablements: Sim::api_enablements(),
            kubernetes_version: crate::sim::KUBERNETES_VERSION.into(),
            resource_summary: Some(sim.resource_summary()),
        }),
        sent_at: Some(now_timestamp()),
    }
}

/// Runs the agent until `shutdown` fires.
pub async fn run(sim: Arc<Sim>, config: PullConfig, shutdown: Shutdown) -> Result<(), PullError> {
    let health = endpoint(&config.cluster_health)?
        .timeout(RPC_TIMEOUT)
        .connect_lazy();
    let executor = endpoint(&config.work_executor)?
        .timeout(RPC_TIMEOUT)
        .connect_lazy();
    // No request timeout on the watch: it is a stream that lasts. HTTP/2 keep-alives notice
    // a dead server instead.
    let api = endpoint(&config.api)?
        .http2_keep_alive_interval(Duration::from_secs(10))
        .keep_alive_timeout(Duration::from_secs(5))
        .keep_alive_while_idle(true)
        .connect_lazy();
    tracing::info!(
        cluster = %config.cluster,
        api = %config.api,
        cluster_health = %config.cluster_health,
        work_executor = %config.work_executor,
        "pull agent starting"
    );
    let agent = WorkAgent::new(sim.clone(), config.cluster.clone(), executor);
    tokio::join!(
        heartbeats(
            sim,
            ClusterHealthClient::new(health),
            config.heartbeat_interval,
            shutdown.clone()
        ),
        agent.run(ApiClient::new(api), shutdown),
    );
    Ok(())
}

/// Heartbeats every `interval` while the member is reachable (and at once when the fault
/// changes), until `shutdown`.
pub async fn heartbeats(
    sim: Arc<Sim>,
    mut client: ClusterHealthClient<Channel>,
    interval: Duration,
    shutdown: Shutdown,
) {
    let mut faults = sim.subscribe_fault();
    let mut failing = false;
    loop {
        tokio::select! {
            () = shutdown.triggered() => return,
            () = sim.wait_reachable() => {}
        }
        let mut request = tonic::Request::new(heartbeat_request(&sim));
        if let Ok(v) = MetadataValue::try_from(sim.name()) {
            request.metadata_mut().insert(CLUSTER_METADATA, v);
        }
        match client.heartbeat(request).await {
            Ok(_) => {
                if failing {
                    tracing::info!(cluster = %sim.name(), "heartbeats accepted again");
                }
                failing = false;
            }
            Err(status) => {
                if failing {
                    tracing::debug!(cluster = %sim.name(), %status, "heartbeat failed");
                } else {
                    tracing::warn!(cluster = %sim.name(), %status, "heartbeat failed");
                }
                failing = true;
            }
        }
        faults.borrow_and_update();
        tokio::select! {
            () = shutdown.triggered() => return,
            () = tokio::time::sleep(interval) => {}
            _ = faults.changed() => {}
        }
    }
}

/// What the agent did with one Work.
#[derive(Clone, Debug, PartialEq)]
enum Outcome {
    /// Applied; the object on the member is `ResourceKey`.
    Applied,
    /// Could not be applied.
    Failed(String),
    /// Dispatching suspended: nothing applied, nothing reported (WE-6.5).
    Suspended,
    /// The Work is being deleted; the member object was removed (or preserved).
    Deleted,
}

#[derive(Clone, Debug)]
struct Tracked {
    uid: String,
    generation: i64,
    resource: Option<ResourceKey>,
    preserve: bool,
    outcome: Outcome,
    since: prost_types::Timestamp,
    reported: Option<Report>,
}

/// One status report of a Work (compared with the last one sent, to send only changes).
#[derive(Clone, Debug, PartialEq)]
struct Report {
    status: Option<v1::WorkStatus>,
    manifest_deleted: bool,
}

/// The Works half of the agent: one task owns the state (no locks).
struct WorkAgent {
    sim: Arc<Sim>,
    cluster: String,
    executor: WorkExecutorClient<Channel>,
    works: HashMap<(String, String), Tracked>,
    dirty: HashSet<(String, String)>,
    scan_all: bool,
    last_scan: Instant,
    retry_at: Option<Instant>,
}

impl WorkAgent {
    fn new(sim: Arc<Sim>, cluster: String, executor: Channel) -> Self {
        Self {
            sim,
            cluster,
            executor: WorkExecutorClient::new(executor),
            works: HashMap::new(),
            dirty: HashSet::new(),
            scan_all: false,
            last_scan: Instant::now(),
            retry_at: None,
        }
    }

    async fn run(mut self, mut api: ApiClient<Channel>, shutdown: Shutdown) {
        let mut backoff = BackoffState::new(
            Backoff::new(Duration::from_millis(100), Duration::from_secs(10)).with_jitter(true),
        );
        let mut revision: i64 = 0;
        loop {
            tokio::select! {
                () = shutdown.triggered() => return,
                () = self.sim.wait_reachable() => {}
            }
            let request = v1::WatchWorksRequest {
                namespace: String::new(),
                cluster: self.cluster.clone(),
                label_selector: String::new(),
                resource_version: revision,
                allow_bookmarks: true,
            };
            let opened = tokio::select! {
                () = shutdown.triggered() => return,
                opened = api.watch_works(request) => opened,
            };
            let mut stream = match opened {
                Ok(resp) => resp.into_inner(),
                Err(status) => {
                    if status.code() == Code::OutOfRange {
                        revision = 0;
                    }
                    let delay = backoff.next_delay();
                    tracing::warn!(cluster = %self.cluster, %status, ?delay, "cannot watch works");
                    tokio::select! {
                        () = shutdown.triggered() => return,
                        () = tokio::time::sleep(delay) => {}
                    }
                    continue;
                }
            };
            tracing::info!(cluster = %self.cluster, from = revision, "watching works");
            // From revision 0 the server lists first: Works missing from that list are gone.
            let mut listing: Option<HashSet<(String, String)>> = (revision == 0).then(HashSet::new);
            let mut faults = self.sim.subscribe_fault();
            loop {
                let wake = self.next_wake();
                tokio::select! {
                    () = shutdown.triggered() => return,
                    msg = stream.message() => match msg {
                        Ok(Some(ev)) => {
                            backoff.reset();
                            revision = revision.max(ev.resource_version);
                            self.handle_event(ev, &mut listing);
                        }
                        Ok(None) => {
                            tracing::info!(cluster = %self.cluster, "works watch ended; resuming");
                            break;
                        }
                        Err(status) => {
                            if status.code() == Code::OutOfRange {
                                revision = 0;
                            }
                            tracing::warn!(cluster = %self.cluster, %status, "works watch failed; resuming");
                            break;
                        }
                    },
                    () = sleep_until(wake) => {
                        self.scan_all = true;
                    }
                    _ = faults.changed() => {}
                }
                if self.sim.fault() == Fault::Unreachable {
                    tracing::info!(cluster = %self.cluster, "unreachable: works watch dropped");
                    break;
                }
                self.report().await;
            }
            drop(stream);
            let delay = backoff.next_delay();
            tokio::select! {
                () = shutdown.triggered() => return,
                () = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// When statuses must be looked at again: a pod turns Ready, or a failed report retries.
    fn next_wake(&self) -> Option<Instant> {
        let ready = self
            .sim
            .next_ready_at()
            .map(|t| t.max(self.last_scan + MIN_SCAN_INTERVAL));
        match (ready, self.retry_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn handle_event(
        &mut self,
        ev: v1::WatchWorksResponse,
        listing: &mut Option<HashSet<(String, String)>>,
    ) {
        let kind = v1::WatchEventType::try_from(ev.r#type).unwrap_or_default();
        match kind {
            v1::WatchEventType::Added | v1::WatchEventType::Modified => {
                if let Some(work) = ev.object {
                    if let (Some(seen), Some(meta)) = (listing.as_mut(), work.metadata.as_ref()) {
                        seen.insert((meta.namespace.clone(), meta.name.clone()));
                    }
                    self.apply_work(work);
                }
            }
            v1::WatchEventType::Deleted => {
                if let Some(meta) = ev.object.and_then(|w| w.metadata) {
                    self.forget(&(meta.namespace, meta.name));
                }
            }
            v1::WatchEventType::Bookmark => {
                if let Some(seen) = listing.take() {
                    let gone: Vec<_> = self
                        .works
                        .keys()
                        .filter(|k| !seen.contains(*k))
                        .cloned()
                        .collect();
                    for id in gone {
                        self.forget(&id);
                    }
                }
            }
            v1::WatchEventType::Unspecified => {}
        }
    }

    /// A Work was added or changed: apply it when its generation moved (WE-6), delete its
    /// object when it is being deleted (WE-6.1, 6.2).
    fn apply_work(&mut self, work: v1::Work) {
        let meta = work.metadata.unwrap_or_default();
        let spec = work.spec.unwrap_or_default();
        if spec.cluster != self.cluster {
            tracing::debug!(work = %meta.name, cluster = %spec.cluster, "a Work of another cluster; ignored");
            return;
        }
        let id = (meta.namespace.clone(), meta.name.clone());
        let deleting = meta.deletion_timestamp.is_some();
        if let Some(t) = self.works.get(&id)
            && t.uid == meta.uid
            && t.generation == meta.generation
            && (t.outcome == Outcome::Deleted) == deleting
        {
            // A status-only change (our own report, typically): nothing to do.
            return;
        }
        let previous = self.works.remove(&id);
        let mut tracked = Tracked {
            uid: meta.uid.clone(),
            generation: meta.generation,
            resource: previous.as_ref().and_then(|p| p.resource.clone()),
            preserve: spec.preserve_resources_on_deletion,
            outcome: Outcome::Suspended,
            since: now_timestamp(),
            reported: previous.as_ref().and_then(|p| p.reported.clone()),
        };
        if deleting {
            if let Some(key) = tracked.resource.take()
                && !tracked.preserve
            {
                self.sim.delete(&key);
                self.scan_all = true;
            }
            tracked.outcome = Outcome::Deleted;
        } else if spec.suspend_dispatching {
            tracked.outcome = Outcome::Suspended;
        } else {
            let resource = spec.resource.filter(|r| !r.name.is_empty());
            match parse_apply(&spec.manifest, resource, spec.replicas) {
                Ok(apply) => {
                    let key = key_of(&apply.resource);
                    if let Some(old) = tracked.resource.take()
                        && old != key
                    {
                        self.sim.delete(&old);
                        self.scan_all = true;
                    }
                    self.sim.apply(apply);
                    tracked.resource = Some(key);
                    tracked.outcome = Outcome::Applied;
                }
                Err(e) => tracked.outcome = Outcome::Failed(e.to_string()),
            }
        }
        if let Some(p) = &previous
            && p.outcome == tracked.outcome
        {
            tracked.since = p.since;
        }
        tracing::debug!(work = %meta.name, namespace = %meta.namespace, generation = meta.generation, outcome = ?tracked.outcome, "work handled");
        self.works.insert(id.clone(), tracked);
        self.dirty.insert(id);
    }

    /// A Work is gone: delete its object unless it asked to be preserved.
    fn forget(&mut self, id: &(String, String)) {
        if let Some(t) = self.works.remove(id) {
            if let Some(key) = t.resource
                && !t.preserve
            {
                self.sim.delete(&key);
            }
            self.scan_all = true;
        }
        self.dirty.remove(id);
    }

    /// What to report for a tracked Work; `None` when nothing is reported.
    fn report_of(&self, t: &Tracked) -> Option<Report> {
        let condition = |ok: bool, reason: &str, message: String| v1::Condition {
            r#type: "Applied".into(),
            status: if ok {
                v1::ConditionStatus::True
            } else {
                v1::ConditionStatus::False
            }
            .into(),
            reason: reason.into(),
            message,
            last_transition_time: Some(t.since),
        };
        let failed = |message: String| v1::WorkStatus {
            conditions: vec![condition(false, "AppliedFailed", message.clone())],
            applied: false,
            applied_message: message,
            health: v1::ResourceHealth::Unknown.into(),
            ready_replicas: 0,
            resource_status: String::new(),
            observed_generation: t.generation,
        };
        let status = match &t.outcome {
            Outcome::Suspended => return None,
            // WE-6.2 on the agent's side: the manifest is gone (or preserved, WE-6.1), so
            // the work executor may release the Work.
            Outcome::Deleted => {
                return Some(Report {
                    status: None,
                    manifest_deleted: true,
                });
            }
            Outcome::Failed(e) => failed(format!("Failed to apply all manifests (0/1): {e}")),
            Outcome::Applied => {
                let key = t.resource.as_ref()?;
                match self.sim.get(key) {
                    Ok(m) => v1::WorkStatus {
                        conditions: vec![condition(
                            true,
                            "AppliedSuccessful",
                            "Manifest has been successfully applied".into(),
                        )],
                        applied: true,
                        applied_message: String::new(),
                        health: m.health,
                        ready_replicas: m.ready_replicas,
                        resource_status: m.status,
                        observed_generation: t.generation,
                    },
                    Err(e) => failed(format!("{e} on the member")),
                }
            }
        };
        Some(Report {
            status: Some(status),
            manifest_deleted: false,
        })
    }

    /// Reports every Work whose status differs from the last one reported.
    async fn report(&mut self) {
        let now = Instant::now();
        let candidates: Vec<(String, String)> =
            if self.scan_all || self.retry_at.is_some_and(|t| t <= now) {
                self.scan_all = false;
                self.retry_at = None;
                self.last_scan = now;
                self.dirty.clear();
                self.works.keys().cloned().collect()
            } else {
                self.dirty.drain().collect()
            };
        let mut requests = Vec::new();
        for id in candidates {
            let Some(t) = self.works.get(&id) else {
                continue;
            };
            let Some(report) = self.report_of(t) else {
                continue;
            };
            if t.reported.as_ref() == Some(&report) {
                continue;
            }
            let mut request = tonic::Request::new(v1::ReportWorkStatusRequest {
                work: Some(v1::WorkKey {
                    cluster: self.cluster.clone(),
                    namespace: id.0.clone(),
                    name: id.1.clone(),
                }),
                work_uid: t.uid.clone(),
                status: report.status.clone(),
                manifest_deleted: report.manifest_deleted,
            });
            if let Ok(v) = MetadataValue::try_from(self.cluster.as_str()) {
                request.metadata_mut().insert(CLUSTER_METADATA, v);
            }
            requests.push((id.clone(), report, request));
        }
        if requests.is_empty() {
            return;
        }
        let client = self.executor.clone();
        let results: Vec<_> = futures::stream::iter(requests)
            .map(|(id, report, req)| {
                let mut client = client.clone();
                async move {
                    let res = client.report_work_status(req).await;
                    (id, report, res)
                }
            })
            .buffer_unordered(REPORT_CONCURRENCY)
            .collect()
            .await;
        let mut failures = 0usize;
        for (id, report, res) in results {
            let done = match res {
                Ok(_) => true,
                // The Work changed or vanished meanwhile: the watch brings the news.
                Err(s)
                    if matches!(
                        s.code(),
                        Code::Aborted
                            | Code::NotFound
                            | Code::FailedPrecondition
                            | Code::InvalidArgument
                    ) =>
                {
                    tracing::debug!(work = %id.1, status = %s, "status report refused");
                    true
                }
                Err(s) => {
                    if failures == 0 {
                        tracing::warn!(work = %id.1, status = %s, "status report failed; will retry");
                    }
                    failures += 1;
                    false
                }
            };
            if done && let Some(t) = self.works.get_mut(&id) {
                t.reported = Some(report);
            }
        }
        if failures > 0 {
            self.retry_at = Some(Instant::now() + REPORT_RETRY);
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}
