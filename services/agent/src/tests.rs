//! The agent against fake control-plane services and a real member-sim (its Kubernetes
//! API).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use flotilla_member_sim::{Fault, Sim};
use flotilla_proto::v1;
use flotilla_proto::v1::cluster_health_server::{ClusterHealth, ClusterHealthServer};
use flotilla_proto::v1::work_executor_server::{WorkExecutor, WorkExecutorServer};
use flotilla_runtime::Shutdown;
use flotilla_runtime::rpc::metadata_str;
use flotilla_runtime::testing::{assert_help_names, rejected_flags};
use futures::future::BoxFuture;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::{Request, Response, Status};

use super::*;
use v1::WatchEventType::{Added, Bookmark, Modified};

type WatchFeed = mpsc::UnboundedSender<Result<v1::WatchWorksResponse, Status>>;

#[derive(Clone)]
struct FakeControlPlane {
    heartbeats: mpsc::UnboundedSender<v1::HeartbeatRequest>,
    auth: mpsc::UnboundedSender<Option<String>>,
    reports: mpsc::UnboundedSender<(Option<String>, v1::ReportWorkStatusRequest)>,
    watches: mpsc::UnboundedSender<(v1::WatchWorksRequest, WatchFeed)>,
}

impl FakeControlPlane {
    async fn heartbeat(
        &self,
        request: Request<v1::HeartbeatRequest>,
    ) -> Result<v1::HeartbeatResponse, Status> {
        let _ = self.auth.send(metadata_str(&request, "authorization"));
        let _ = self.heartbeats.send(request.into_inner());
        Ok(v1::HeartbeatResponse::default())
    }

    async fn report_work_status(
        &self,
        request: Request<v1::ReportWorkStatusRequest>,
    ) -> Result<v1::ReportWorkStatusResponse, Status> {
        let cluster = metadata_str(&request, CLUSTER_METADATA);
        let _ = self.reports.send((cluster, request.into_inner()));
        Ok(v1::ReportWorkStatusResponse::default())
    }

    /// The RPCs the agent never calls.
    async fn unimplemented<T, R>(&self, _request: Request<T>) -> Result<R, Status> {
        Err(Status::unimplemented("fake"))
    }
}

flotilla_runtime::unary_service! {
    impl ClusterHealth for FakeControlPlane {
        heartbeat(v1::HeartbeatRequest) -> v1::HeartbeatResponse = Self::heartbeat;
        assess(v1::ClusterHealthAssessRequest) -> v1::ClusterHealthAssessResponse =
            Self::unimplemented;
    }
}

flotilla_runtime::unary_service! {
    impl WorkExecutor for FakeControlPlane {
        get_work_status(v1::GetWorkStatusRequest) -> v1::GetWorkStatusResponse =
            Self::unimplemented;
        report_work_status(v1::ReportWorkStatusRequest) -> v1::ReportWorkStatusResponse =
            Self::report_work_status;
        plan(v1::PlanRequest) -> v1::PlanResponse = Self::unimplemented;
    }
}

/// Only `Api.WatchWorks` of the api service: every call hands the test its request and a
/// sender that feeds the stream.
#[derive(Clone)]
struct FakeApi(FakeControlPlane);

impl tonic::server::NamedService for FakeApi {
    const NAME: &'static str = "flotilla.v1.Api";
}

struct WatchWorksSvc(FakeControlPlane);

impl tonic::server::ServerStreamingService<v1::WatchWorksRequest> for WatchWorksSvc {
    type Response = v1::WatchWorksResponse;
    type ResponseStream = UnboundedReceiverStream<Result<v1::WatchWorksResponse, Status>>;
    type Future = std::future::Ready<Result<Response<Self::ResponseStream>, Status>>;

    fn call(&mut self, request: Request<v1::WatchWorksRequest>) -> Self::Future {
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = self.0.watches.send((request.into_inner(), tx));
        std::future::ready(Ok(Response::new(UnboundedReceiverStream::new(rx))))
    }
}

impl tower::Service<http::Request<tonic::body::Body>> for FakeApi {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let fake = self.0.clone();
        Box::pin(async move {
            if req.uri().path() != "/flotilla.v1.Api/WatchWorks" {
                return Ok(Status::unimplemented("fake api").into_http());
            }
            let codec =
                tonic_prost::ProstCodec::<v1::WatchWorksResponse, v1::WatchWorksRequest>::default();
            let mut grpc = tonic::server::Grpc::new(codec);
            Ok(grpc.server_streaming(WatchWorksSvc(fake), req).await)
        })
    }
}

struct Fakes {
    addr: SocketAddr,
    heartbeats: mpsc::UnboundedReceiver<v1::HeartbeatRequest>,
    auth: mpsc::UnboundedReceiver<Option<String>>,
    reports: mpsc::UnboundedReceiver<(Option<String>, v1::ReportWorkStatusRequest)>,
    watches: mpsc::UnboundedReceiver<(v1::WatchWorksRequest, WatchFeed)>,
}

async fn fakes(shutdown: &Shutdown) -> Fakes {
    let (htx, heartbeats) = mpsc::unbounded_channel();
    let (atx, auth) = mpsc::unbounded_channel();
    let (rtx, reports) = mpsc::unbounded_channel();
    let (wtx, watches) = mpsc::unbounded_channel();
    let fake = FakeControlPlane {
        heartbeats: htx,
        auth: atx,
        reports: rtx,
        watches: wtx,
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tonic::transport::Server::builder()
        .add_service(ClusterHealthServer::new(fake.clone()))
        .add_service(WorkExecutorServer::new(fake.clone()))
        .add_service(FakeApi(fake))
        .serve_with_incoming_shutdown(
            tokio_stream::wrappers::TcpListenerStream::new(listener),
            shutdown.triggered(),
        );
    tokio::spawn(server);
    Fakes {
        addr,
        heartbeats,
        auth,
        reports,
        watches,
    }
}

/// Receives until `done` holds, returning that item.
async fn recv_until<T>(
    rx: &mut mpsc::UnboundedReceiver<T>,
    what: &str,
    done: impl Fn(&T) -> bool,
) -> T {
    loop {
        let item = recv(rx, what).await;
        if done(&item) {
            return item;
        }
    }
}

async fn recv<T>(rx: &mut mpsc::UnboundedReceiver<T>, what: &str) -> T {
    tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .unwrap_or_else(|_| panic!("no {what} within 5s"))
        .unwrap_or_else(|| panic!("{what} channel closed"))
}

/// A member-sim serving its Kubernetes API on 127.0.0.1:0.
async fn member_sim(delay: Duration, shutdown: &Shutdown) -> (Arc<Sim>, String) {
    let (sim, addr) = flotilla_member_sim::spawn_local("m1", 10, delay, shutdown)
        .await
        .unwrap();
    (sim, format!("http://{addr}"))
}

fn config(fakes: &Fakes, member: &str) -> Config {
    let addr = fakes.addr.to_string();
    Config {
        cluster: "m1".into(),
        member: Target::plain(member),
        api: addr.clone(),
        cluster_health: format!("http://{addr}"),
        work_executor: addr,
        token: Some(Token::new("t0ken")),
        heartbeat_interval: Duration::from_millis(100),
        status_interval: Duration::from_millis(50),
        member_timeout: Duration::from_millis(500),
        status_source: StatusSource::Watch,
        security: SecurityArgs::default(),
    }
}

/// The fake control plane, and an agent running against it for a member-sim answering
/// after `delay`; all stop when the shutdown is triggered.
async fn start_agent(delay: Duration) -> (Shutdown, Fakes, Arc<Sim>) {
    let shutdown = Shutdown::new();
    let fakes = fakes(&shutdown).await;
    let (sim, member) = member_sim(delay, &shutdown).await;
    tokio::spawn(run(config(&fakes, &member), shutdown.clone()));
    (shutdown, fakes, sim)
}

fn deployment(name: &str, replicas: i32) -> serde_json::Value {
    serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default",
                     "labels": {"resourcebinding.karmada.io/permanent-id": "p1"}},
        "spec": {"replicas": replicas}})
}

fn work(name: &str, generation: i64, replicas: i32, deleting: bool) -> v1::Work {
    v1::Work {
        metadata: Some(v1::ObjectMeta {
            name: format!("{name}-work"),
            namespace: "default".into(),
            uid: format!("uid-{name}"),
            generation,
            deletion_timestamp: deleting.then_some(prost_types::Timestamp {
                seconds: 1,
                nanos: 0,
            }),
            ..Default::default()
        }),
        spec: Some(v1::WorkSpec {
            cluster: "m1".into(),
            resource: Some(v1::ObjectReference {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                namespace: "default".into(),
                name: name.into(),
                uid: String::new(),
            }),
            manifest: deployment(name, replicas).to_string(),
            replicas: Some(replicas),
            ..Default::default()
        }),
        status: None,
    }
}

/// Feeds one watch event to the agent.
fn send_event(feed: &WatchFeed, t: v1::WatchEventType, work: Option<v1::Work>, rv: i64) {
    feed.send(Ok(v1::WatchWorksResponse {
        r#type: t as i32,
        object: work,
        resource_version: rv,
    }))
    .unwrap();
}

/// Replicas of Deployment `name` on the member, if it exists.
fn replicas(sim: &Sim, name: &str) -> Option<i32> {
    sim.objects("apps/v1", "Deployment", Some("default"))
        .into_iter()
        .find(|o| o["metadata"]["name"] == name)
        .and_then(|o| o["spec"]["replicas"].as_i64())
        .map(|n| i32::try_from(n).unwrap())
}

#[tokio::test]
async fn heartbeats_carry_the_members_health_and_status() {
    let (shutdown, mut f, sim) = start_agent(Duration::from_millis(50)).await;

    let hb = recv(&mut f.heartbeats, "heartbeat").await;
    assert_eq!(hb.cluster_name, "m1");
    let probe = hb.probe.unwrap();
    assert!(probe.online && probe.healthy, "{probe:?}");
    let status = hb.status.unwrap();
    assert!(status.api_enablements.iter().any(
        |e| e.group_version == "apps/v1" && e.resources.iter().any(|r| r.kind == "Deployment")
    ));
    assert!(
        status.kubernetes_version.starts_with("v1.33"),
        "{}",
        status.kubernetes_version
    );
    assert_eq!(
        status.resource_summary.unwrap().allocatable_replicas,
        Some(10)
    );
    assert!(hb.sent_at.is_some());

    // unhealthy: heartbeats go on, reporting healthy = false
    sim.set_fault(Fault::Unhealthy);
    let hb = recv_until(&mut f.heartbeats, "unhealthy heartbeat", |hb| {
        !hb.probe.as_ref().unwrap().healthy
    })
    .await;
    assert!(hb.probe.unwrap().online);
    assert!(
        hb.status.is_none(),
        "nothing collected from an unhealthy member"
    );
    // unreachable: the agent still heartbeats, saying the member does not answer
    sim.set_fault(Fault::Unreachable);
    recv_until(&mut f.heartbeats, "offline heartbeat", |hb| {
        !hb.probe.as_ref().unwrap().online
    })
    .await;
    sim.set_fault(Fault::Healthy);
    recv_until(&mut f.heartbeats, "heartbeat after healing", |hb| {
        hb.probe.as_ref().unwrap().healthy
    })
    .await;
    shutdown.trigger();
}

#[tokio::test]
async fn applies_reports_and_follows_its_works() {
    let (shutdown, mut f, sim) = start_agent(Duration::from_millis(200)).await;

    // a fresh agent lists from 0, for its own cluster only
    let (req, feed) = recv(&mut f.watches, "watch").await;
    assert_eq!((req.cluster.as_str(), req.resource_version), ("m1", 0));
    send_event(&feed, Added, Some(work("a", 1, 2, false)), 5);
    send_event(&feed, Bookmark, None, 5);

    // applied at once (0 Ready, Unhealthy), then reported again when the pods are Ready
    let (cluster, first) = recv(&mut f.reports, "first report").await;
    assert_eq!(
        cluster.as_deref(),
        Some("m1"),
        "x-flotilla-cluster metadata"
    );
    let key = first.work.clone().unwrap();
    assert_eq!(
        (
            key.cluster.as_str(),
            key.namespace.as_str(),
            key.name.as_str()
        ),
        ("m1", "default", "a-work")
    );
    assert_eq!(first.work_uid, "uid-a");
    assert!(!first.manifest_deleted);
    let st = first.status.unwrap();
    assert!(st.applied);
    assert_eq!(st.observed_generation, 1);
    assert_eq!(st.conditions[0].reason, "AppliedSuccessful");
    assert_eq!(
        (st.ready_replicas, st.health),
        (0, v1::ResourceHealth::Unhealthy as i32)
    );
    let (_, ready) = recv(&mut f.reports, "report after start-up").await;
    let st = ready.status.unwrap();
    assert_eq!(
        (st.ready_replicas, st.health),
        (2, v1::ResourceHealth::Healthy as i32)
    );
    assert_eq!(replicas(&sim, "a"), Some(2));
    assert_eq!(
        sim.objects("apps/v1", "Deployment", None)[0]["metadata"]["managedFields"][0]["manager"],
        "flotilla",
        "applied by server-side apply as the flotilla field manager"
    );

    // a new generation is applied (scale to 3); a status-only change is not re-applied
    send_event(&feed, Modified, Some(work("a", 2, 3, false)), 6);
    recv_until(&mut f.reports, "report of generation 2", |(_, r)| {
        r.status.as_ref().unwrap().observed_generation == 2
    })
    .await;
    assert_eq!(replicas(&sim, "a"), Some(3));
    send_event(&feed, Modified, Some(work("a", 2, 3, false)), 7);

    // the server ends the stream: the agent resumes from the last revision it saw
    drop(feed);
    let (req, feed) = recv(&mut f.watches, "resumed watch").await;
    assert_eq!(req.resource_version, 7);
    // ... and on OUT_OF_RANGE (compacted) it re-lists from 0
    feed.send(Err(Status::out_of_range("compacted"))).unwrap();
    let (req, feed) = recv(&mut f.watches, "re-list").await;
    assert_eq!(req.resource_version, 0);
    // the fresh list no longer has a-work: it is deleted from the member
    send_event(&feed, Added, Some(work("b", 1, 1, false)), 9);
    send_event(&feed, Bookmark, None, 9);
    flotilla_runtime::testing::eventually(
        Duration::from_secs(5),
        "a deleted after the re-list",
        || {
            let gone = replicas(&sim, "a").is_none();
            async move { gone.then_some(()) }
        },
    )
    .await;
    assert_eq!(replicas(&sim, "b"), Some(1));

    // deletion: the object goes and the agent says so (the Work may then be released)
    send_event(&feed, Modified, Some(work("b", 1, 1, true)), 10);
    let (_, r) = recv_until(&mut f.reports, "deletion report", |(_, r)| {
        r.manifest_deleted
    })
    .await;
    assert_eq!(r.work.unwrap().name, "b-work");
    assert!(r.status.is_none());
    assert_eq!(replicas(&sim, "b"), None);
    shutdown.trigger();
}

/// WE-7.1 (the regression of a Pull member scaled up in a failover): the member's watch
/// delivers the post-apply object late, so right after the apply of generation 2 the agent's
/// watch cache still holds generation 1's object, Healthy with its 2 ready replicas. No report
/// may say generation 2 is Healthy before 4 replicas are ready; the agent reports generation 2
/// at once from the apply's own answer (not Healthy), and Healthy once the watch shows it.
#[tokio::test]
async fn a_scale_up_is_never_reported_healthy_from_the_watch_cache_of_before_it() {
    let (shutdown, mut f, sim) = start_agent(Duration::from_millis(300)).await;
    let (_, feed) = recv(&mut f.watches, "watch").await;
    send_event(&feed, Added, Some(work("a", 1, 2, false)), 5);
    send_event(&feed, Bookmark, None, 5);
    recv_until(&mut f.reports, "generation 1 Healthy", |(_, r)| {
        r.status
            .as_ref()
            .is_some_and(|s| s.health == v1::ResourceHealth::Healthy as i32)
    })
    .await;

    let watch_delay = Duration::from_millis(1500);
    sim.set_watch_delay(watch_delay).unwrap();
    let applied_at = tokio::time::Instant::now();
    send_event(&feed, Modified, Some(work("a", 2, 4, false)), 6);
    let mut first_of_2: Option<Duration> = None;
    let mut reports_of_2 = Vec::new();
    loop {
        let (_, r) = tokio::time::timeout(Duration::from_secs(10), f.reports.recv())
            .await
            .expect("generation 2 Healthy within 10 s")
            .unwrap();
        let Some(st) = r.status else { continue };
        if st.observed_generation != 2 {
            continue;
        }
        first_of_2.get_or_insert(applied_at.elapsed());
        let healthy = st.health == v1::ResourceHealth::Healthy as i32;
        reports_of_2.push((applied_at.elapsed(), st.health, st.ready_replicas));
        assert!(
            !healthy || st.ready_replicas >= 4,
            "generation 2 (4 replicas) reported Healthy with {} ready: {reports_of_2:?}",
            st.ready_replicas
        );
        assert!(
            st.member_generation >= 2,
            "the report records the apply's answer: {st:?}"
        );
        if healthy {
            break;
        }
    }
    let first = first_of_2.unwrap();
    assert!(
        first < watch_delay,
        "generation 2 is reported from the apply's answer without waiting for the watch \
         ({first:?}; {reports_of_2:?})"
    );
    assert_eq!(replicas(&sim, "a"), Some(4));
    shutdown.trigger();
}

/// WE-7.1: the apply's answer stands in only until a reading of the member that counts has
/// been reported; when the member cannot be read later (here: unreachable, listed by
/// `--status-source=list`), the last report stands, and the old answer (0 ready, Unhealthy)
/// is not sent again over it.
#[tokio::test]
async fn without_a_reading_the_last_report_stands_not_the_old_apply_answer() {
    let shutdown = Shutdown::new();
    let mut f = fakes(&shutdown).await;
    let (sim, member) = member_sim(Duration::from_millis(100), &shutdown).await;
    let mut cfg = config(&f, &member);
    cfg.status_source = StatusSource::List;
    tokio::spawn(run(cfg, shutdown.clone()));
    let (_, feed) = recv(&mut f.watches, "watch").await;
    send_event(&feed, Added, Some(work("a", 1, 2, false)), 5);
    send_event(&feed, Bookmark, None, 5);
    recv_until(&mut f.reports, "Healthy with 2 ready", |(_, r)| {
        r.status.as_ref().is_some_and(|s| {
            s.health == v1::ResourceHealth::Healthy as i32 && s.ready_replicas == 2
        })
    })
    .await;
    sim.set_fault(Fault::Unreachable);
    let later = tokio::time::timeout(Duration::from_secs(3), f.reports.recv()).await;
    if let Ok(Some((_, r))) = later {
        panic!("a report without a reading of the member: {r:?}");
    }
    sim.set_fault(Fault::Healthy);
    shutdown.trigger();
}

#[tokio::test]
async fn a_failed_apply_is_reported_and_retried_until_the_member_takes_it() {
    let (shutdown, mut f, sim) = start_agent(Duration::from_millis(10)).await;
    let (_, feed) = recv(&mut f.watches, "watch").await;
    // every apply fails (F11)
    sim.set_api_errors(Some(v1::ApiErrors {
        apply_error_percent: 100,
        ..Default::default()
    }))
    .unwrap();
    send_event(&feed, Added, Some(work("c", 1, 1, false)), 3);
    let (_, r) = recv(&mut f.reports, "failure report").await;
    let st = r.status.unwrap();
    assert!(!st.applied);
    assert_eq!(st.conditions[0].reason, "AppliedFailed");
    assert!(st.applied_message.contains("500"), "{}", st.applied_message);
    // the member heals: the next retry applies it
    sim.set_api_errors(None).unwrap();
    recv_until(&mut f.reports, "applied after the retry", |(_, r)| {
        r.status.as_ref().unwrap().applied
    })
    .await;
    assert_eq!(replicas(&sim, "c"), Some(1));
    shutdown.trigger();
}

/// Regression: the agent keeps what it applied in memory only. A restarted agent that saw a
/// deleting Work used to report it Deleted without deleting anything, leaving the object on
/// the member for good. Now the Work's manifest names the object, which is deleted when the
/// member's copy carries the manifest's permanent-id label, and left alone when it does not.
#[tokio::test]
async fn a_restarted_agent_deletes_what_it_applied_and_nothing_else() {
    let shutdown = Shutdown::new();
    let mut f = fakes(&shutdown).await;
    let (sim, member) = member_sim(Duration::from_millis(10), &shutdown).await;
    let first = Shutdown::new();
    tokio::spawn(run(config(&f, &member), first.clone()));
    let (_, feed) = recv(&mut f.watches, "watch").await;
    send_event(&feed, Added, Some(work("d", 1, 1, false)), 3);
    recv_until(&mut f.reports, "d applied", |(_, r)| {
        r.status.as_ref().is_some_and(|s| s.applied)
    })
    .await;
    assert_eq!(replicas(&sim, "d"), Some(1));
    // someone else's Deployment "e", without Flotilla's label
    let other = flotilla_member::Member::new(
        &Target::plain(member.clone()),
        Duration::from_secs(2),
        Arc::new(tokio::sync::Semaphore::new(1)),
    )
    .unwrap();
    other
        .apply(
            &serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "e", "namespace": "default"}, "spec": {"replicas": 4}}),
        )
        .await
        .unwrap();

    // the agent restarts with nothing in memory; both Works are being deleted meanwhile
    first.trigger();
    drop(feed);
    let second = Shutdown::new();
    tokio::spawn(run(config(&f, &member), second.clone()));
    let (req, feed) = recv(&mut f.watches, "watch after the restart").await;
    assert_eq!(req.resource_version, 0, "a restarted agent lists afresh");
    send_event(&feed, Added, Some(work("d", 1, 1, true)), 5);
    send_event(&feed, Added, Some(work("e", 1, 1, true)), 5);
    send_event(&feed, Bookmark, None, 5);
    let mut deleted = std::collections::BTreeSet::new();
    while deleted.len() < 2 {
        let (_, r) = recv_until(&mut f.reports, "deletion reports", |(_, r)| {
            r.manifest_deleted
        })
        .await;
        deleted.insert(r.work.unwrap().name);
    }
    assert_eq!(
        replicas(&sim, "d"),
        None,
        "the object applied before the restart is deleted"
    );
    assert_eq!(
        replicas(&sim, "e"),
        Some(4),
        "an object Flotilla did not apply is left alone"
    );
    second.trigger();
    shutdown.trigger();
}

#[test]
fn flags_validate_and_keep_tokens_out_of_debug() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret-token\n").unwrap();
    let a = <Args as clap::Parser>::try_parse_from([
        "flotilla-agent",
        "--cluster=edge",
        "--member=http://127.0.0.1:6443",
        "--api=127.0.0.1:1",
        "--cluster-health=127.0.0.1:2",
        "--work-executor=127.0.0.1:3",
        &format!("--token-file={}", token.display()),
        &format!("--member-token-file={}", token.display()),
    ])
    .unwrap();
    let c = a.validate().unwrap();
    assert_eq!(c.heartbeat_interval, Duration::from_secs(10));
    assert_eq!(c.member.token.as_deref(), Some("s3cret-token"));
    assert_eq!(
        c.member.token_file.as_deref(),
        Some(token.as_path()),
        "read again by the member client (rotation)"
    );
    let printed = format!("{c:?}");
    assert!(!printed.contains("s3cret"), "{printed}");

    let a = <Args as clap::Parser>::try_parse_from([
        "flotilla-agent",
        "--cluster= ",
        "--member=http://m",
        "--api=a",
        "--cluster-health=b",
        "--work-executor=c",
        "--status-interval=0s",
        "--token-file=/nonexistent/token",
    ])
    .unwrap();
    assert_eq!(
        rejected_flags(a.validate()),
        ["cluster", "status-interval", "token-file"]
    );
    assert_help_names::<Args>(&[
        "--member",
        "--api",
        "--heartbeat-interval",
        "--status-interval",
        "--token-file",
    ]);
}

#[tokio::test]
async fn calls_carry_the_bearer_token() {
    let (shutdown, mut f, _sim) = start_agent(Duration::from_millis(10)).await;
    let auth = recv(&mut f.auth, "an authorized call").await;
    assert_eq!(auth.as_deref(), Some("Bearer t0ken"));
    shutdown.trigger();
}

/// A rotated client certificate is used by new calls on the same channel, with no restart:
/// the server (mutual TLS, principals from the CN) first sees agent:edge1, then the viewer
/// whose certificate replaced it in the same files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_client_certificate_takes_over_without_a_restart() {
    use flotilla_proto::v1::scheduler_client::SchedulerClient;
    use flotilla_runtime::security::SecurityArgs as Sec;
    use flotilla_runtime::testing::grpc::{dev_certs, serve_mtls_loopback};

    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    dev_certs(&certs, &["agent:edge1", "viewer"]);
    let (addr, shutdown) = serve_mtls_loopback(&certs, "api", "ca.pem").await;
    let port = addr.port();

    // the agent's files, rotated in place later
    let (cert, key) = (
        dir.path().join("client.pem"),
        dir.path().join("client-key.pem"),
    );
    std::fs::copy(certs.join("agent-edge1.pem"), &cert).unwrap();
    std::fs::copy(certs.join("agent-edge1-key.pem"), &key).unwrap();
    let client_tls = Sec {
        tls_cert: Some(cert.clone()),
        tls_key: Some(key.clone()),
        tls_ca: Some(certs.join("ca.pem")),
        ..Sec::default()
    };
    let addr = format!("https://localhost:{port}");
    let channel = tls_following_channel(
        &client_tls,
        move |security| endpoint(security, &addr).map(|e| e.timeout(Duration::from_secs(5))),
        Duration::from_millis(200),
        shutdown.clone(),
    )
    .unwrap();
    let mut client = SchedulerClient::new(channel);
    let denied = client
        .simulate(v1::SimulateRequest::default())
        .await
        .unwrap_err();
    assert_eq!(denied.code(), tonic::Code::PermissionDenied, "{denied:?}");
    assert!(
        denied.message().contains("agent:edge1"),
        "{}",
        denied.message()
    );

    std::fs::copy(certs.join("viewer.pem"), &cert).unwrap();
    std::fs::copy(certs.join("viewer-key.pem"), &key).unwrap();
    let started = std::time::Instant::now();
    loop {
        let code = client
            .simulate(v1::SimulateRequest::default())
            .await
            .unwrap_err()
            .code();
        // the viewer may call a dry run; this server does not serve it
        if code == tonic::Code::Unimplemented {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the rotated certificate was not used: still {code:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    shutdown.trigger();
}
