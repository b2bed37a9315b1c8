//! Observability with tools nobody here wrote (issue 7), against the real service processes:
//!
//! - a third-party OTLP receiver (tests/otlp/receiver.py: the official `opentelemetry-proto`
//!   package + grpcio) collects the spans of a scripted seed failover; ONE trace holds spans
//!   of cluster-health, taint-manager, scheduler, work-executor and graceful-eviction, each
//!   step's span is the child of the previous service's span, and every parent is in it;
//! - planted secrets (a value inside the Deployment manifest, a bearer token in the
//!   `authorization` metadata of api calls) appear in no span and no log line;
//! - `/metrics` of every service, parsed by `prometheus_client`'s text parser, has the
//!   documented series, and they move during the failover.
//!
//! Python dependencies missing → the test FAILS saying how to install them (scripts/test.sh
//! installs them).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use flotilla_proto::v1;
use flotilla_tests::{
    Stack, Timers, binding_healthy, eventually, free_port, list_works, nginx_binding, set_fault,
    targets, tasks,
};

const T: Duration = Duration::from_secs(60);
/// Planted in the Deployment manifest (an env var value): must reach the member, and no
/// span or log line.
const MANIFEST_SECRET: &str = "canary-manifest-7f1c9e2b4a";
/// Sent as `authorization: Bearer …` on api calls: no span or log line may carry it.
const TOKEN_SECRET: &str = "canary-token-3d8a5c1f60";

const TRACED: [&str; 5] = [
    "flotilla-cluster-health",
    "flotilla-taint-manager",
    "flotilla-scheduler",
    "flotilla-work-executor",
    "flotilla-graceful-eviction",
];

fn otlp_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("otlp")
}

/// Fails (never skips) when the Python packages are missing.
fn require_python_deps() {
    let out = Command::new("python3")
        .args([
            "-c",
            "import grpc, prometheus_client; \
             from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc",
        ])
        .output()
        .expect("python3 is required by the observability test");
    assert!(
        out.status.success(),
        "the observability test needs Python's opentelemetry-proto, grpcio and \
         prometheus_client: `python3 -m pip install opentelemetry-proto grpcio \
         prometheus_client` (add --break-system-packages on a Debian system Python; \
         scripts/test.sh installs them): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The receiver process, killed on drop.
struct Receiver {
    child: Child,
    out: PathBuf,
    _dir: tempfile::TempDir,
}

impl Receiver {
    fn start() -> (Self, u16) {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("spans.jsonl");
        let port = free_port();
        let mut child = Command::new("python3")
            .arg(otlp_dir().join("receiver.py"))
            .arg(port.to_string())
            .arg(&out)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the OTLP receiver");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "the OTLP receiver did not start");
        (
            Receiver {
                child,
                out,
                _dir: dir,
            },
            port,
        )
    }

    fn spans(&self) -> Vec<Span> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("receiver writes JSON lines"))
            .collect()
    }

    fn raw(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Clone, Debug, serde::Deserialize)]
struct Span {
    service: String,
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    name: String,
    attributes: serde_json::Value,
}

/// A trace that holds every service in [`TRACED`], whose every parent is in it, and where
/// each failover step's span is a child of the previous step's service. `Err` says why the
/// best candidate is not there yet.
fn failover_trace(spans: &[Span]) -> Result<Vec<Span>, String> {
    let mut by_trace: HashMap<&str, Vec<&Span>> = HashMap::new();
    for s in spans {
        by_trace.entry(&s.trace_id).or_default().push(s);
    }
    let mut best = String::from("no trace yet");
    let mut best_services = 0;
    for (trace, spans) in by_trace {
        let services: BTreeSet<&str> = spans.iter().map(|s| s.service.as_str()).collect();
        let covered = TRACED.iter().filter(|s| services.contains(*s)).count();
        if covered < best_services {
            continue;
        }
        let ids: HashMap<&str, &Span> = spans.iter().map(|s| (s.span_id.as_str(), *s)).collect();
        let roots = spans.iter().filter(|s| s.parent_span_id.is_empty()).count();
        let dangling: Vec<&str> = spans
            .iter()
            .filter(|s| {
                !s.parent_span_id.is_empty() && !ids.contains_key(s.parent_span_id.as_str())
            })
            .map(|s| s.name.as_str())
            .collect();
        // (child service, parent services) links that must exist: each step continues the
        // span that wrote the context it read. The work executor continues the scheduler's
        // schedule result, or the eviction task when it reconciled before the scheduler
        // wrote; graceful eviction continues the last status writer of the failover.
        let links: [(&str, &[&str]); 4] = [
            ("flotilla-taint-manager", &["flotilla-cluster-health"]),
            ("flotilla-scheduler", &["flotilla-taint-manager"]),
            (
                "flotilla-work-executor",
                &["flotilla-scheduler", "flotilla-taint-manager"],
            ),
            (
                "flotilla-graceful-eviction",
                &[
                    "flotilla-work-executor",
                    "flotilla-scheduler",
                    "flotilla-taint-manager",
                ],
            ),
        ];
        let missing_links: Vec<String> = links
            .iter()
            .filter(|(child, parents)| {
                !spans.iter().any(|s| {
                    s.service == *child
                        && ids
                            .get(s.parent_span_id.as_str())
                            .is_some_and(|p| parents.contains(&p.service.as_str()))
                })
            })
            .map(|(c, p)| format!("{c} ← {p:?}"))
            .collect();
        if covered == TRACED.len() && dangling.is_empty() && roots == 1 && missing_links.is_empty()
        {
            return Ok(spans.into_iter().cloned().collect());
        }
        best_services = covered;
        best = format!(
            "trace {trace}: services {services:?}, {} spans, {roots} roots, dangling parents of \
             {dangling:?}, missing links {missing_links:?}",
            spans.len()
        );
    }
    Err(best)
}

/// `GET http://addr/metrics`, parsed by prometheus_client (tests/otlp/parse_metrics.py).
fn scrape(addr: &str) -> Vec<Sample> {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .unwrap();
    let mut resp = String::new();
    stream.read_to_string(&mut resp).unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(
        head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"),
        "{head}"
    );
    let mut child = Command::new("python3")
        .arg(otlp_dir().join("parse_metrics.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "prometheus_client cannot parse {addr}/metrics: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[derive(Clone, Debug, serde::Deserialize)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    /// `None` when not finite (+Inf, NaN).
    value: Option<f64>,
}

/// The sum of the samples named `name` whose labels include `labels`.
fn sum(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            labels
                .iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .filter_map(|s| s.value)
        .sum()
}

/// How much the series `name` (with `labels`) grew from the first scrape to the second.
fn growth(scrapes: (&[Sample], &[Sample]), name: &str, labels: &[(&str, &str)]) -> f64 {
    sum(scrapes.1, name, labels) - sum(scrapes.0, name, labels)
}

fn names(samples: &[Sample]) -> BTreeSet<String> {
    samples.iter().map(|s| s.name.clone()).collect()
}

fn with_token<T>(message: T) -> tonic::Request<T> {
    let mut req = tonic::Request::new(message);
    req.metadata_mut().insert(
        "authorization",
        format!("Bearer {TOKEN_SECRET}").parse().unwrap(),
    );
    req
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_failover_is_one_trace_and_metrics_move() {
    require_python_deps();
    let (receiver, port) = Receiver::start();
    let env = vec![
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT".to_owned(),
            format!("http://127.0.0.1:{port}"),
        ),
        ("OTEL_BSP_SCHEDULE_DELAY".to_owned(), "200".to_owned()),
    ];
    let mut stack = Stack::start_with_env(Timers::fast(), env).await;
    let api = stack
        .ready_push_members(&["member1", "member2"], &["--pod-startup-delay=500ms"], T)
        .await;

    let manifest = flotilla_api::testing::NGINX_MANIFEST.replace(
        r#""image": "nginx","#,
        &format!(
            r#""image": "nginx", "env": [{{"name": "DB_PASSWORD", "value": "{MANIFEST_SECRET}"}}],"#
        ),
    );
    assert!(manifest.contains(MANIFEST_SECRET), "the secret was planted");
    api.clone()
        .create_workload(with_token(v1::CreateWorkloadRequest {
            workload: Some(v1::Workload {
                manifest,
                ..Default::default()
            }),
        }))
        .await
        .expect("create workload");
    api.clone()
        .create_propagation_policy(with_token(v1::CreatePropagationPolicyRequest {
            propagation_policy: Some(flotilla_api::testing::seed_policy()),
        }))
        .await
        .expect("create policy");
    eventually(T, "nginx {member1:1, member2:2} and healthy", || async {
        let b = nginx_binding(&api).await?;
        (targets(&b) == vec![("member1".into(), 1), ("member2".into(), 2)] && binding_healthy(&b))
            .then_some(())
    })
    .await;
    // the planted secret really travels: it is in the Works the members get
    assert!(
        list_works(&api).await.iter().all(|w| w
            .spec
            .as_ref()
            .is_some_and(|s| s.manifest.contains(MANIFEST_SECRET))),
        "the Works carry the manifest with the planted value"
    );

    let services: Vec<String> = stack.admin_addrs.keys().cloned().collect();
    assert_eq!(services.len(), 6);
    let before: BTreeMap<String, Vec<Sample>> = services
        .iter()
        .map(|s| (s.clone(), scrape(&stack.admin_addrs[s])))
        .collect();

    // The failover: member1 stops answering → taints → eviction → {member2:3} → task removed.
    set_fault(&stack.members["member1"], v1::FaultMode::Unreachable).await;
    let saw_task = std::sync::atomic::AtomicBool::new(false);
    eventually(
        T,
        "nginx {member2:3}, healthy, eviction task removed",
        || async {
            let b = nginx_binding(&api).await?;
            if !tasks(&b).is_empty() {
                saw_task.store(true, std::sync::atomic::Ordering::SeqCst);
            }
            (targets(&b) == vec![("member2".into(), 3)]
                && tasks(&b).is_empty()
                && binding_healthy(&b)
                && saw_task.load(std::sync::atomic::Ordering::SeqCst))
            .then_some(())
        },
    )
    .await;
    let _ = api
        .clone()
        .get_resource_binding(with_token(v1::GetResourceBindingRequest {
            namespace: "default".into(),
            name: "nginx-deployment".into(),
        }))
        .await
        .expect("get binding");

    // One trace: probe → taint → eviction → reschedule → Works → task removal.
    let trace = {
        let start = std::time::Instant::now();
        loop {
            match failover_trace(&receiver.spans()) {
                Ok(t) => break t,
                Err(e) if start.elapsed() > Duration::from_secs(30) => {
                    panic!("no complete failover trace after 30 s: {e}")
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
    };
    let per_service: BTreeMap<&str, usize> = trace.iter().fold(BTreeMap::new(), |mut m, s| {
        *m.entry(s.service.as_str()).or_default() += 1;
        m
    });
    eprintln!("failover trace {}: {per_service:?}", trace[0].trace_id);
    let root = trace.iter().find(|s| s.parent_span_id.is_empty()).unwrap();
    assert_eq!(
        root.service, "flotilla-cluster-health",
        "the trace starts at the probe"
    );
    assert!(
        trace.iter().all(|s| s.attributes.is_object()),
        "attributes are exported"
    );

    // No secret in any span or log line.
    let spans = receiver.raw();
    assert!(!spans.is_empty());
    for secret in [MANIFEST_SECRET, TOKEN_SECRET] {
        assert!(
            !spans.contains(secret),
            "a span carries the secret {secret}"
        );
        for (name, process) in &stack.services {
            let log = process.log();
            assert!(!log.is_empty(), "{name} logged nothing");
            assert!(
                !log.contains(secret),
                "{name}'s log carries the secret {secret}"
            );
        }
    }

    // Metrics: documented series present on every service, and moving.
    let after: BTreeMap<String, Vec<Sample>> = services
        .iter()
        .map(|s| (s.clone(), scrape(&stack.admin_addrs[s])))
        .collect();
    for service in &services {
        let (b, a) = (&before[service], &after[service]);
        let present = names(a);
        for series in [
            "flotilla_grpc_server_requests_total",
            "flotilla_grpc_server_request_duration_seconds_count",
            "flotilla_etcd_request_duration_seconds_count",
            "flotilla_watcher_events_total",
        ] {
            assert!(
                present.contains(series),
                "{service}: {series} missing: {present:?}"
            );
        }
        assert!(
            sum(
                a,
                "flotilla_grpc_server_requests_total",
                &[("method", "/grpc.health.v1.Health/Check"), ("code", "OK")]
            ) >= 1.0,
            "{service}: health checks counted by method and code"
        );
        // Graceful eviction writes nothing in a failover whose replacement turns healthy in
        // time: the taint manager stamps the task (TM-11.4) and the work executor's status
        // write ends it (WE-8.6). What moves for it is what it watched.
        let moved = if service == "graceful-eviction" {
            "flotilla_watcher_events_total"
        } else {
            "flotilla_etcd_request_duration_seconds_count"
        };
        assert!(
            sum(a, moved, &[]) > sum(b, moved, &[]),
            "{service}: {moved} moved"
        );
        if service == "work-executor" {
            let ended = "flotilla_work_executor_eviction_tasks_ended_total";
            assert!(
                sum(a, ended, &[]) > sum(b, ended, &[]),
                "work-executor: {ended} moved (WE-8.6 ended the task)"
            );
        }
        if service != "api" {
            for suffix in [
                "_queue_depth",
                "_queue_oldest_seconds",
                "_reconcile_duration_seconds_count",
            ] {
                assert!(
                    present.iter().any(|n| n.ends_with(suffix)),
                    "{service}: no *{suffix} series"
                );
            }
            let reconciles = |s: &[Sample]| -> f64 {
                s.iter()
                    .filter(|x| {
                        x.name.ends_with("_reconcile_total")
                            && x.labels.get("result").map(String::as_str) == Some("ok")
                    })
                    .filter_map(|x| x.value)
                    .sum()
            };
            assert!(
                reconciles(a) > reconciles(b),
                "{service}: reconcile counts did not move during the failover"
            );
        }
    }
    // Event filters count what they drop. The work executor's execution queue lets through
    // the Work writes that change what it reads (a new spec, an apply) and drops those that
    // only bring the member's status (the pods turning Ready 500 ms after their apply).
    let we = &after["work-executor"];
    for outcome in ["queued", "skipped"] {
        let labels = [("filter", "work_executor_works"), ("outcome", outcome)];
        assert!(
            sum(we, "flotilla_filter_events_total", &labels) >= 1.0,
            "work-executor: no Work event was {outcome} by its execution filter"
        );
    }
    // The render memory (WE-4.7): the Work syncs that follow a Work's own writes (its status,
    // the member's) take it as unchanged without rendering it.
    for outcome in ["rendered", "remembered"] {
        let labels = [("outcome", outcome)];
        assert!(
            sum(we, "flotilla_work_executor_renders_total", &labels) >= 1.0,
            "work-executor: no Work was {outcome} by the binding controller"
        );
    }
    let tm = (&before["taint-manager"], &after["taint-manager"]);
    assert_eq!(
        sum(
            tm.1,
            "flotilla_taint_manager_evictions_total",
            &[("reason", "taint_untolerated")]
        ) + sum(
            tm.1,
            "flotilla_taint_manager_evictions_total",
            &[("reason", "toleration_expired")]
        ) - sum(tm.0, "flotilla_taint_manager_evictions_total", &[]),
        1.0,
        "one eviction, counted by reason"
    );
    for series in [
        "flotilla_taint_manager_eviction_rate",
        "flotilla_taint_manager_brake_state",
    ] {
        assert!(
            names(tm.1).contains(series),
            "taint-manager: {series} missing"
        );
    }
    let sc = (&before["scheduler"], &after["scheduler"]);
    let count = "flotilla_scheduler_schedule_duration_seconds_count";
    assert!(
        growth((sc.0, sc.1), count, &[]) > 0.0,
        "scheduling latency moved"
    );
    assert!(names(sc.1).contains("flotilla_scheduler_decisions_total"));
    let ch = (&before["cluster-health"], &after["cluster-health"]);
    let unreachable = [("result", "unreachable")];
    assert!(
        growth(
            (ch.0, ch.1),
            "flotilla_cluster_health_probes_total",
            &unreachable
        ) > 0.0,
        "failed probes counted"
    );
    let api_metrics = &after["api"];
    assert!(
        sum(
            api_metrics,
            "flotilla_grpc_server_requests_total",
            &[
                ("method", "/flotilla.v1.Api/CreateWorkload"),
                ("code", "OK")
            ]
        ) == 1.0,
        "api calls counted by method and code"
    );
    drop(stack);
}
