//! `flotilla up --demo`: the seed scenario, played through the api and narrated step by step
//! as the services act.
//!
//! ```text
//!   Api.Watch{Clusters,ResourceBindings,Works} ──► World (latest objects) ──► milestones
//!        (resumed from the last revision;              each recorded the first time its
//!         re-listed after OUT_OF_RANGE)                 check holds; printed in order, once,
//!                                                       with the elapsed time
//!   actions between phases: CreateWorkload, CreatePropagationPolicy (Api),
//!                           MemberSim.SetFault on member1's own address (exempt from the hang)
//! ```
//!
//! Every wait has a deadline (derived from the timers) and fails with what was last seen.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
// The seed: Karmada's `samples/nginx`, Divided 1:2 over member1 and member2.
use flotilla_api::seed::{NGINX_MANIFEST as NGINX, seed_policy};
use flotilla_proto::v1;
use flotilla_proto::v1::api_client::ApiClient;
use flotilla_proto::v1::member_sim_client::MemberSimClient;
use indicatif::{ProgressBar, ProgressStyle};
use tokio::sync::mpsc;
use tonic::transport::Channel;

use flotilla_suite::timers::Effective;
use flotilla_suite::{Suite, channel};

use crate::client::words;

/// Namespace of the seed objects.
const NAMESPACE: &str = "default";
/// The seed binding: `<workload>-<kind lowercased>`.
const BINDING: &str = "nginx-deployment";
/// The failing member.
const FAILING: &str = "member1";
/// The member that takes over.
const SURVIVOR: &str = "member2";
/// Prefix of the controller taints (CH-11, CH-10).
const CONTROLLER_TAINT: &str = "cluster.karmada.io/";

// === the world as the watches show it ===

/// What the watches report.
#[derive(Debug)]
enum Update {
    /// A watch (re)starts from scratch: forget what it reported.
    Reset(Kind),
    Cluster(Box<v1::Cluster>, bool),
    Binding(Box<v1::ResourceBinding>, bool),
    Work(Box<v1::Work>, bool),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Clusters,
    Bindings,
    Works,
}

/// The latest objects the demo looks at.
#[derive(Debug, Default)]
struct World {
    clusters: BTreeMap<String, v1::Cluster>,
    binding: Option<v1::ResourceBinding>,
    /// The seed binding's Works, by cluster.
    works: BTreeMap<String, v1::Work>,
    /// An eviction task for member1 was seen on the binding.
    task_seen: bool,
}

fn meta_name(m: Option<&v1::ObjectMeta>) -> &str {
    m.map_or("", |m| m.name.as_str())
}

impl World {
    fn apply(&mut self, update: Update) {
        match update {
            Update::Reset(Kind::Clusters) => self.clusters.clear(),
            Update::Reset(Kind::Bindings) => self.binding = None,
            Update::Reset(Kind::Works) => self.works.clear(),
            Update::Cluster(c, deleted) => {
                let name = meta_name(c.metadata.as_ref()).to_owned();
                if deleted {
                    self.clusters.remove(&name);
                } else {
                    self.clusters.insert(name, *c);
                }
            }
            Update::Binding(b, deleted) => {
                if meta_name(b.metadata.as_ref()) != BINDING {
                    return;
                }
                if deleted {
                    self.binding = None;
                } else {
                    if tasks(&b).iter().any(|t| t.from_cluster == FAILING) {
                        self.task_seen = true;
                    }
                    self.binding = Some(*b);
                }
            }
            Update::Work(w, deleted) => {
                let Some(spec) = w.spec.as_ref() else { return };
                if spec.binding.as_ref().map(|b| b.name.as_str()) != Some(BINDING) {
                    return;
                }
                let cluster = spec.cluster.clone();
                if deleted {
                    self.works.remove(&cluster);
                } else {
                    self.works.insert(cluster, *w);
                }
            }
        }
    }

    fn cluster(&self, name: &str) -> Option<&v1::Cluster> {
        self.clusters.get(name)
    }

    /// A one-line summary for timeout messages.
    fn describe(&self) -> String {
        let mut parts = Vec::new();
        for (name, c) in &self.clusters {
            let ready = ready(c).map_or("no Ready condition".to_owned(), |(s, r)| {
                format!("Ready={} ({r})", words::condition_status(s))
            });
            let taints: Vec<String> = taints(c).iter().map(|t| taint_name(t)).collect();
            parts.push(format!("{name}: {ready}, taints [{}]", taints.join(", ")));
        }
        match &self.binding {
            Some(b) => {
                let t: Vec<String> = targets(b).iter().map(|(c, r)| format!("{c}:{r}")).collect();
                let tasks: Vec<String> = tasks(b).iter().map(|t| t.from_cluster.clone()).collect();
                let health: Vec<String> = b
                    .status
                    .as_ref()
                    .map(|s| {
                        s.aggregated_status
                            .iter()
                            .map(|i| {
                                format!(
                                    "{}:{}/{}",
                                    i.cluster_name,
                                    words::health(i.health),
                                    i.ready_replicas
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                parts.push(format!(
                    "binding {BINDING}: targets [{}], eviction tasks [{}], status [{}]",
                    t.join(", "),
                    tasks.join(", "),
                    health.join(", ")
                ));
            }
            None => parts.push(format!("binding {BINDING}: not created yet")),
        }
        let works: Vec<String> = self
            .works
            .iter()
            .map(|(c, w)| {
                let deleting = w
                    .metadata
                    .as_ref()
                    .is_some_and(|m| m.deletion_timestamp.is_some());
                format!("{c}{}", if deleting { " (deleting)" } else { "" })
            })
            .collect();
        parts.push(format!("Works on [{}]", works.join(", ")));
        parts.join("; ")
    }
}

fn ready(c: &v1::Cluster) -> Option<(i32, String)> {
    c.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.r#type == "Ready")
        .map(|c| (c.status, c.reason.clone()))
}

fn is_ready(c: &v1::Cluster) -> bool {
    ready(c).is_some_and(|(s, _)| s == v1::ConditionStatus::True as i32)
}

fn taints(c: &v1::Cluster) -> Vec<&v1::Taint> {
    c.spec
        .as_ref()
        .map(|s| s.taints.iter().collect())
        .unwrap_or_default()
}

fn taint_name(t: &v1::Taint) -> String {
    format!("{}:{}", t.key, words::effect(t.effect))
}

fn controller_taint(c: &v1::Cluster, effect: v1::TaintEffect) -> Option<String> {
    taints(c)
        .into_iter()
        .find(|t| t.key.starts_with(CONTROLLER_TAINT) && t.effect == effect as i32)
        .map(taint_name)
}

fn targets(b: &v1::ResourceBinding) -> Vec<(String, i32)> {
    b.target_pairs()
}

fn tasks(b: &v1::ResourceBinding) -> &[v1::GracefulEvictionTask] {
    b.spec
        .as_ref()
        .map_or(&[], |s| s.graceful_eviction_tasks.as_slice())
}

fn generation(b: &v1::ResourceBinding) -> i64 {
    b.metadata.as_ref().map_or(0, |m| m.generation)
}

/// The binding's result is `want` and the scheduler has seen the current generation.
fn scheduled_as(b: &v1::ResourceBinding, want: &[(&str, i32)]) -> bool {
    let want: Vec<(String, i32)> = want.iter().map(|(c, r)| ((*c).to_owned(), *r)).collect();
    targets(b) == want
        && b.status
            .as_ref()
            .is_some_and(|s| s.scheduler_observed_generation == generation(b))
}

/// Every target reports Healthy with all its replicas Ready, for the current generation.
fn all_ready(b: &v1::ResourceBinding) -> Option<Vec<(String, i32)>> {
    let status = b.status.as_ref()?;
    if status.aggregated_status_observed_generation != generation(b) {
        return None;
    }
    let t = targets(b);
    if t.is_empty() {
        return None;
    }
    t.iter()
        .map(|(cluster, replicas)| {
            status
                .aggregated_status
                .iter()
                .find(|i| {
                    &i.cluster_name == cluster
                        && i.health == v1::ResourceHealth::Healthy as i32
                        && i.ready_replicas >= *replicas
                })
                .map(|i| (cluster.clone(), i.ready_replicas))
        })
        .collect()
}

fn work_deleting(w: &v1::Work) -> bool {
    w.metadata
        .as_ref()
        .is_some_and(|m| m.deletion_timestamp.is_some())
}

// === watches ===

/// One `async fn` per line `name: watch_rpc(Request { [namespace] }) => kind, wrap;`: follows
/// one kind through the api (in the demo's namespace where `namespace` is given), resuming
/// from the last revision seen; `OUT_OF_RANGE` (compacted) or a fresh start re-lists from 0
/// after a `Reset`.
macro_rules! follow {
    ($($name:ident: $method:ident($req:ident { $($ns:ident)? }) => $kind:expr, $wrap:expr;)*) => {$(
        async fn $name(mut api: ApiClient<Channel>, tx: mpsc::Sender<Update>) {
            let mut revision = 0i64;
            loop {
                if revision == 0 && tx.send(Update::Reset($kind)).await.is_err() {
                    return;
                }
                let request = v1::$req {
                    $($ns: NAMESPACE.into(),)?
                    resource_version: revision,
                    ..Default::default()
                };
                match api.$method(request).await {
                    Ok(stream) => {
                        let mut stream = stream.into_inner();
                        loop {
                            match stream.message().await {
                                Ok(Some(ev)) => {
                                    revision = revision.max(ev.resource_version);
                                    let deleted = ev.r#type == v1::WatchEventType::Deleted as i32;
                                    if let Some(obj) = ev.object {
                                        if tx.send($wrap(Box::new(obj), deleted)).await.is_err() {
                                            return;
                                        }
                                    }
                                }
                                Ok(None) => break,
                                Err(status) => {
                                    if status.code() == tonic::Code::OutOfRange {
                                        revision = 0;
                                    }
                                    break;
                                }
                            }
                        }
                    }
                    Err(status) if status.code() == tonic::Code::OutOfRange => revision = 0,
                    Err(_) => {}
                }
                if tx.is_closed() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    )*};
}

follow! {
    follow_clusters: watch_clusters(WatchClustersRequest {}) => Kind::Clusters, Update::Cluster;
    follow_bindings: watch_resource_bindings(WatchResourceBindingsRequest { namespace }) =>
        Kind::Bindings, Update::Binding;
    follow_works: watch_works(WatchWorksRequest { namespace }) => Kind::Works, Update::Work;
}

// === narration ===

type Check = Box<dyn Fn(&World) -> Option<String> + Send>;

/// One step the demo waits for: printed once, when `check` first holds.
struct Milestone {
    waiting: String,
    check: Check,
    seen: Option<(Duration, String)>,
}

fn milestone(
    waiting: impl Into<String>,
    check: impl Fn(&World) -> Option<String> + Send + 'static,
) -> Milestone {
    Milestone {
        waiting: waiting.into(),
        check: Box::new(check),
        seen: None,
    }
}

struct Demo {
    rx: mpsc::Receiver<Update>,
    world: World,
    start: Instant,
    progress: ProgressBar,
    step_timeout: Duration,
}

impl Demo {
    fn say_at(&self, at: Duration, line: &str) {
        let text = format!("[{:>6.1}s] {line}", at.as_secs_f64());
        self.progress.suspend(|| println!("{text}"));
    }

    fn say(&self, line: &str) {
        self.say_at(self.start.elapsed(), line);
    }

    fn wait_for(&self, what: &str) {
        self.progress.set_message(what.to_owned());
    }

    /// Applies updates until every milestone has been seen; prints each once, in order.
    async fn phase(&mut self, mut milestones: Vec<Milestone>) -> anyhow::Result<()> {
        let mut next = 0;
        let mut since = Instant::now();
        loop {
            let now = self.start.elapsed();
            for m in milestones.iter_mut().filter(|m| m.seen.is_none()) {
                if let Some(msg) = (m.check)(&self.world) {
                    m.seen = Some((now, msg));
                }
            }
            while let Some((at, msg)) = milestones.get(next).and_then(|m| m.seen.clone()) {
                self.say_at(at, &msg);
                next += 1;
                since = Instant::now();
            }
            let Some(waiting) = milestones.get(next).map(|m| m.waiting.clone()) else {
                return Ok(());
            };
            self.wait_for(&waiting);
            match tokio::time::timeout_at((since + self.step_timeout).into(), self.rx.recv()).await
            {
                Ok(Some(update)) => self.world.apply(update),
                Ok(None) => anyhow::bail!("the api watches ended unexpectedly"),
                Err(_) => anyhow::bail!(
                    "timed out after {} waiting for {waiting}; last seen: {}",
                    humantime::format_duration(self.step_timeout),
                    self.world.describe()
                ),
            }
        }
    }

    /// Applies updates for `d`.
    async fn settle(&mut self, d: Duration) -> anyhow::Result<()> {
        let until = tokio::time::Instant::now() + d;
        loop {
            match tokio::time::timeout_at(until, self.rx.recv()).await {
                Ok(Some(update)) => self.world.apply(update),
                Ok(None) => anyhow::bail!("the api watches ended unexpectedly"),
                Err(_) => return Ok(()),
            }
        }
    }
}

async fn set_fault(addr: std::net::SocketAddr, mode: v1::FaultMode) -> anyhow::Result<()> {
    let channel = channel(&format!("http://{addr}")).await?;
    MemberSimClient::new(channel)
        .set_fault(v1::SetFaultRequest {
            mode: mode as i32,
            api_errors: None,
            watch_delay_ms: 0,
        })
        .await
        .with_context(|| format!("MemberSim.SetFault at {addr}"))?;
    Ok(())
}

fn exists_hint(status: &tonic::Status, what: &str) -> anyhow::Error {
    if status.code() == tonic::Code::AlreadyExists {
        anyhow!(
            "{what} already exists (an earlier demo on this store?): use a fresh store, e.g. \
             another --etcd-prefix"
        )
    } else {
        anyhow!("creating {what}: {:?}: {}", status.code(), status.message())
    }
}

/// Plays the seed scenario on a running suite.
pub async fn run(suite: &Suite, timers: &Effective) -> anyhow::Result<()> {
    let member = |name: &str| {
        suite
            .members
            .iter()
            .find(|m| m.spec.name == name)
            .map(|m| m.addr)
            .ok_or_else(|| anyhow!("no member named {name}"))
    };
    let failing_addr = member(FAILING)?;
    member(SURVIVOR)?;
    let member_names: Vec<String> = suite.members.iter().map(|m| m.spec.name.clone()).collect();

    let mut api = suite.api().await?;
    let (tx, rx) = mpsc::channel(1024);
    let watches = [
        tokio::spawn(follow_clusters(api.clone(), tx.clone())),
        tokio::spawn(follow_bindings(api.clone(), tx.clone())),
        tokio::spawn(follow_works(api.clone(), tx)),
    ];
    let _abort = AbortOnDrop(watches.iter().map(|w| w.abort_handle()).collect());

    let progress = ProgressBar::new_spinner();
    progress.set_style(
        ProgressStyle::with_template("  {spinner} {msg} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    progress.enable_steady_tick(Duration::from_millis(100));
    let mut demo = Demo {
        rx,
        world: World::default(),
        start: Instant::now(),
        progress,
        step_timeout: timers.step_timeout(),
    };
    let result = play(&mut demo, &mut api, &member_names, failing_addr, timers).await;
    demo.progress.finish_and_clear();
    result
}

struct AbortOnDrop(Vec<tokio::task::AbortHandle>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for h in &self.0 {
            h.abort();
        }
    }
}

async fn play(
    demo: &mut Demo,
    api: &mut ApiClient<Channel>,
    members: &[String],
    failing_addr: std::net::SocketAddr,
    timers: &Effective,
) -> anyhow::Result<()> {
    let h = |d: Duration| humantime::format_duration(d).to_string();
    demo.say("Seed scenario: nginx (3 replicas) on member1:1 + member2:2; member1 fails.");

    // 1. Every member Ready and untainted, so that the first schedule sees them all.
    let names = members.to_vec();
    demo.phase(vec![milestone(
        format!("members Ready ({})", members.join(", ")),
        move |w| {
            names
                .iter()
                .all(|n| {
                    w.cluster(n)
                        .is_some_and(|c| is_ready(c) && taints(c).is_empty())
                })
                .then(|| format!("member clusters Ready: {}", names.join(", ")))
        },
    )])
    .await?;

    // 2. The seed objects.
    api.create_workload(v1::CreateWorkloadRequest {
        workload: Some(v1::Workload {
            manifest: NGINX.into(),
            ..Default::default()
        }),
    })
    .await
    .map_err(|s| exists_hint(&s, "Deployment default/nginx"))?;
    demo.say("created Deployment default/nginx (3 replicas)");
    api.create_propagation_policy(v1::CreatePropagationPolicyRequest {
        propagation_policy: Some(seed_policy()),
    })
    .await
    .map_err(|s| exists_hint(&s, "PropagationPolicy default/nginx-propagation"))?;
    demo.say(
        "created PropagationPolicy default/nginx-propagation: Divided, static weights \
         member1:1, member2:2",
    );
    demo.phase(vec![
        milestone("the scheduler's result", |w| {
            let b = w.binding.as_ref()?;
            scheduled_as(b, &[(FAILING, 1), (SURVIVOR, 2)]).then(|| {
                format!("scheduled: ResourceBinding default/{BINDING} → member1:1, member2:2")
            })
        }),
        milestone("the replicas to become Ready", |w| {
            let ready = all_ready(w.binding.as_ref()?)?;
            (ready.len() == 2).then(|| {
                format!(
                    "running: {} (Works applied, member status aggregated)",
                    ready
                        .iter()
                        .map(|(c, r)| format!("{c} {r}/{r} Ready"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
        }),
    ])
    .await?;

    // 3. member1 stops answering.
    set_fault(failing_addr, v1::FaultMode::Unreachable).await?;
    demo.say(&format!(
        "✗ member1 fails: it stops answering probes and API calls (MemberSim.SetFault UNREACHABLE at {failing_addr})"
    ));
    let failure_threshold = timers.failure_threshold;
    let eviction_timeout = timers.failover_eviction_timeout;
    let toleration = timers.toleration;
    demo.phase(vec![
        milestone(
            format!(
                "cluster-health to notice (probe timeout {}, failure threshold {})",
                h(timers.probe_timeout),
                h(failure_threshold)
            ),
            move |w| {
                let (status, reason) = ready(w.cluster(FAILING)?)?;
                (status != v1::ConditionStatus::True as i32).then(|| {
                    format!(
                        "cluster-health: member1 Ready={} ({reason}) after the {} failure threshold",
                        words::condition_status(status),
                        h(failure_threshold)
                    )
                })
            },
        ),
        milestone("the NoSchedule taint", |w| {
            let t = controller_taint(w.cluster(FAILING)?, v1::TaintEffect::NoSchedule)?;
            Some(format!(
                "cluster-health: member1 tainted {t} — no new placements there"
            ))
        }),
        milestone(
            format!("the NoExecute taint (failover eviction timeout {})", h(eviction_timeout)),
            move |w| {
                let t = controller_taint(w.cluster(FAILING)?, v1::TaintEffect::NoExecute)?;
                Some(format!(
                    "cluster-health: member1 tainted {t} after the {} failover eviction timeout",
                    h(eviction_timeout)
                ))
            },
        ),
        milestone(
            format!("the eviction (default toleration {})", h(toleration)),
            move |w| {
                let b = w.binding.as_ref()?;
                let task = tasks(b).iter().find(|t| t.from_cluster == FAILING)?;
                let mode = v1::PurgeMode::try_from(task.purge_mode)
                    .map_or("?".to_owned(), |m| {
                        m.as_str_name()
                            .trim_start_matches("PURGE_MODE_")
                            .to_lowercase()
                    });
                Some(format!(
                    "taint-manager: evicted nginx from member1 once the {} toleration ran out — \
                     eviction task created ({}, producer {}, purge mode {mode}); member1's \
                     replicas keep serving meanwhile",
                    h(toleration),
                    task.reason,
                    task.producer
                ))
            },
        ),
        milestone("rescheduling", |w| {
            scheduled_as(w.binding.as_ref()?, &[(SURVIVOR, 3)])
                .then(|| "scheduler: rescheduled to member2:3".to_owned())
        }),
        milestone("the new replicas on member2", |w| {
            let ready = all_ready(w.binding.as_ref()?)?;
            (ready == vec![(SURVIVOR.to_owned(), 3)])
                .then(|| "member2: new replicas Ready (3/3)".to_owned())
        }),
        milestone("graceful eviction to finish", |w| {
            let b = w.binding.as_ref()?;
            (w.task_seen && tasks(b).is_empty()).then(|| {
                "graceful-eviction: eviction task removed — the replacement is healthy".to_owned()
            })
        }),
        milestone("member1's old Work", |w| match w.works.get(FAILING) {
            Some(work) if work_deleting(work) => Some(
                "work-executor: member1's old Work is marked for deletion and waits for member1 \
                 to answer (finalizer)"
                    .to_owned(),
            ),
            Some(_) => None,
            None => Some("work-executor: member1's old Work is gone".to_owned()),
        }),
    ])
    .await?;

    // 4. member1 answers again.
    set_fault(failing_addr, v1::FaultMode::Healthy).await?;
    demo.say("✓ member1 heals: it answers again (MemberSim.SetFault HEALTHY)");
    let success_threshold = timers.success_threshold;
    demo.phase(vec![
        milestone(
            format!(
                "member1 Ready again (success threshold {})",
                h(success_threshold)
            ),
            move |w| {
                is_ready(w.cluster(FAILING)?).then(|| {
                    format!(
                        "cluster-health: member1 Ready=True again after the {} success threshold",
                        h(success_threshold)
                    )
                })
            },
        ),
        milestone("member1's taints to go", |w| {
            let c = w.cluster(FAILING)?;
            (!taints(c)
                .iter()
                .any(|t| t.key.starts_with(CONTROLLER_TAINT)))
            .then(|| "cluster-health: member1's taints removed".to_owned())
        }),
        milestone("member1's old Work to be deleted", |w| {
            (!w.works.contains_key(FAILING))
                .then(|| "work-executor: old Work deleted — nginx removed from member1".to_owned())
        }),
    ])
    .await?;

    // 5. Nothing moves back (SC-3.8): give the scheduler a few probe periods to (not) act.
    let settle = (2 * timers.status_update_frequency).max(Duration::from_secs(1));
    demo.wait_for(&format!("{} to check that nothing moves back", h(settle)));
    demo.settle(settle).await?;
    let b = demo
        .world
        .binding
        .as_ref()
        .ok_or_else(|| anyhow!("the binding {BINDING} disappeared"))?;
    if targets(b) != vec![(SURVIVOR.to_owned(), 3)] {
        anyhow::bail!(
            "replicas moved after member1 recovered; last seen: {}",
            demo.world.describe()
        );
    }
    demo.say(
        "no move back: nginx stays on member2:3 (Divided workloads do not fail back on their \
         own, SC-3.8)",
    );
    demo.say(&format!(
        "demo complete in {:.1}s",
        demo.start.elapsed().as_secs_f64()
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn binding(targets: &[(&str, i32)], tasks: &[&str], generation: i64) -> v1::ResourceBinding {
        v1::ResourceBinding {
            metadata: Some(v1::ObjectMeta {
                name: BINDING.into(),
                namespace: NAMESPACE.into(),
                generation,
                ..Default::default()
            }),
            spec: Some(v1::ResourceBindingSpec {
                clusters: v1::TargetCluster::from_pairs(targets),
                graceful_eviction_tasks: v1::GracefulEvictionTask::from_clusters(tasks),
                ..Default::default()
            }),
            status: Some(v1::ResourceBindingStatus {
                scheduler_observed_generation: generation,
                aggregated_status_observed_generation: generation,
                aggregated_status: targets
                    .iter()
                    .map(|(n, r)| v1::AggregatedStatusItem {
                        cluster_name: (*n).into(),
                        health: v1::ResourceHealth::Healthy as i32,
                        ready_replicas: *r,
                        applied: true,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn world_tracks_the_seed_binding_and_remembers_the_task() {
        let mut w = World::default();
        w.apply(Update::Binding(
            Box::new(binding(&[("member2", 2)], &["member1"], 3)),
            false,
        ));
        assert!(w.task_seen);
        let b = binding(&[("member2", 3)], &[], 4);
        assert!(scheduled_as(&b, &[("member2", 3)]));
        assert_eq!(all_ready(&b), Some(vec![("member2".to_owned(), 3)]));
        w.apply(Update::Binding(Box::new(b), false));
        assert!(tasks(w.binding.as_ref().unwrap()).is_empty());
        // Another binding is ignored.
        let mut other = binding(&[("member3", 1)], &[], 1);
        other.metadata.as_mut().unwrap().name = "other".into();
        w.apply(Update::Binding(Box::new(other), false));
        assert_eq!(
            targets(w.binding.as_ref().unwrap()),
            vec![("member2".into(), 3)]
        );
        w.apply(Update::Reset(Kind::Bindings));
        assert!(w.binding.is_none());
    }

    #[test]
    fn readiness_needs_the_current_generation() {
        let mut b = binding(&[("member2", 3)], &[], 4);
        b.status
            .as_mut()
            .unwrap()
            .aggregated_status_observed_generation = 3;
        assert_eq!(
            all_ready(&b),
            None,
            "a status for an older placement is not Ready"
        );
        let mut b = binding(&[("member2", 3)], &[], 4);
        b.status.as_mut().unwrap().scheduler_observed_generation = 3;
        assert!(!scheduled_as(&b, &[("member2", 3)]));
    }

    #[test]
    fn the_seed_policy_is_valid_for_the_api() {
        let p = seed_policy();
        let weights = &p
            .spec
            .unwrap()
            .placement
            .unwrap()
            .replica_scheduling
            .unwrap();
        assert_eq!(
            weights
                .weight_preference
                .as_ref()
                .unwrap()
                .static_weight_list
                .len(),
            2
        );
        let manifest: serde_json::Value = serde_json::from_str(NGINX).unwrap();
        assert_eq!(manifest["spec"]["replicas"], 3);
    }
}
