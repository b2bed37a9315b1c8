//! A whole control plane ([`Stack`]) with its members, on compressed [`Timers`].

use std::time::Duration;

use flotilla_proto::v1;
use flotilla_store::{EtcdConfig, EtcdStore};

use crate::*;

/// The graceful-eviction timeout of [`Timers::fast`] (the fault suite's I5 and I6 use it).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(60);

/// Compressed timers for scenario tests (production defaults are minutes).
#[derive(Clone, Debug)]
pub struct Timers {
    /// Extra flags per service (binary name without the `flotilla-` prefix).
    pub flags: Vec<(&'static str, Vec<String>)>,
}

impl Timers {
    /// Seconds-scale failover: probes every 200 ms, 1 s thresholds, NoExecute 1 s after the
    /// cluster turned bad, default tolerations of 1 s, pods Ready after 1 s.
    pub fn fast() -> Self {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        Timers {
            flags: vec![
                (
                    "api",
                    s(&[
                        "--default-not-ready-toleration-seconds=1",
                        "--default-unreachable-toleration-seconds=1",
                    ]),
                ),
                (
                    "cluster-health",
                    s(&[
                        "--cluster-status-update-frequency=200ms",
                        "--cluster-success-threshold=1s",
                        "--cluster-failure-threshold=1s",
                        "--cluster-monitor-period=200ms",
                        "--cluster-monitor-grace-period=2s",
                        "--cluster-startup-grace-period=3s",
                        "--failover-eviction-timeout=1s",
                        "--probe-timeout=300ms",
                    ]),
                ),
                (
                    "graceful-eviction",
                    vec![format!(
                        "--graceful-eviction-timeout={}s",
                        DEFAULT_GRACE.as_secs()
                    )],
                ),
                ("work-executor", s(&["--status-sync-period=200ms"])),
            ],
        }
    }

    /// The extra flags of one service.
    pub fn for_service(&self, service: &str) -> Vec<String> {
        self.flags
            .iter()
            .filter(|(s, _)| *s == service)
            .flat_map(|(_, f)| f.clone())
            .collect()
    }

    /// Replaces (or adds) one flag `--name=value` of a service.
    pub fn set(mut self, service: &'static str, flag: &str, value: &str) -> Self {
        let prefix = format!("--{flag}=");
        let entry = match self.flags.iter_mut().find(|(s, _)| *s == service) {
            Some(e) => e,
            None => {
                self.flags.push((service, vec![]));
                self.flags.last_mut().expect("just pushed")
            }
        };
        entry.1.retain(|f| !f.starts_with(&prefix));
        entry.1.push(format!("{prefix}{value}"));
        self
    }
}

/// A simulated member cluster process.
pub struct Member {
    /// Cluster name.
    pub name: String,
    /// Address serving MemberSim gRPC and /readyz (subject to faults).
    pub addr: String,
    /// Control address: the same RPCs with faults ignored (to heal an unreachable member).
    pub control_addr: String,
    /// The process.
    pub process: Process,
    /// A Pull cluster's `flotilla-agent` process.
    pub agent: Option<Process>,
    /// The bearer token that agent presents to the member's API server.
    pub agent_token: Option<String>,
}

/// A running Flotilla: etcd, the six control-plane services and member clusters, all real
/// processes on loopback, namespaced under a unique etcd prefix.
pub struct Stack {
    /// The etcd the stack uses.
    pub etcd: EtcdServer,
    /// The etcd key prefix of this stack.
    pub prefix: String,
    /// gRPC address of each service.
    pub addrs: std::collections::BTreeMap<String, String>,
    /// Admin (HTTP `/metrics`, `/livez`, `/readyz`) address of each service.
    pub admin_addrs: std::collections::BTreeMap<String, String>,
    /// Service processes, by name.
    pub services: std::collections::BTreeMap<String, Process>,
    /// Member clusters, by name.
    pub members: std::collections::BTreeMap<String, Member>,
    timers: Timers,
    env: Vec<(String, String)>,
    dir: tempfile::TempDir,
    /// Per service: etcd endpoints other than the stack's (e.g. a fault-injecting proxy).
    etcd_overrides: std::collections::BTreeMap<String, String>,
    /// Per service: extra environment (e.g. a skewed clock).
    service_env: std::collections::BTreeMap<String, Vec<(String, String)>>,
}

impl Stack {
    /// Starts etcd and the control plane with `timers`, and waits until every service serves.
    pub async fn start(timers: Timers) -> Self {
        Self::start_with_env(timers, Vec::new()).await
    }

    /// [`Stack::start`] with extra environment variables for every control-plane service
    /// (e.g. `OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub async fn start_with_env(timers: Timers, env: Vec<(String, String)>) -> Self {
        Self::start_on(EtcdServer::start().await, timers, env).await
    }

    /// [`Stack::start_with_env`] on a given etcd (e.g. a dedicated one a fault scenario may
    /// pause or compact).
    pub async fn start_on(etcd: EtcdServer, timers: Timers, env: Vec<(String, String)>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        // A namespace of its own (fixed width, ending in `/`, so that no stack's prefix is a
        // prefix of another's): stacks can share one etcd (FLOTILLA_ETCD_ENDPOINTS).
        let prefix = format!("/flotilla-test-{:016x}/", rand::random::<u64>());
        let mut stack = Stack {
            etcd,
            prefix,
            addrs: Default::default(),
            admin_addrs: Default::default(),
            services: Default::default(),
            members: Default::default(),
            timers,
            env,
            dir,
            etcd_overrides: Default::default(),
            service_env: Default::default(),
        };
        for service in control_plane() {
            stack.start_service(service);
        }
        for service in control_plane() {
            let addr = stack.addrs[service].clone();
            wait_serving(&addr, Duration::from_secs(30)).await;
        }
        stack
    }

    fn common_flags(&self, service: &str, grpc: &str, admin: &str) -> Vec<String> {
        let endpoints = self
            .etcd_overrides
            .get(service)
            .cloned()
            .unwrap_or_else(|| self.etcd.endpoints().join(","));
        vec![
            "--store=etcd".into(),
            format!("--etcd-endpoints={endpoints}"),
            format!("--etcd-prefix={}", self.prefix),
            format!("--grpc-addr={grpc}"),
            format!("--admin-addr={admin}"),
            // fast leader hand-over for restart tests
            "--lease-ttl=3s".into(),
        ]
    }

    /// Spawns `service`'s binary as `name` (its log's name) serving on `addr` and `admin`,
    /// with the stack's common flags, timers and environment.
    fn spawn_service(&self, service: &str, name: &str, addr: &str, admin: &str) -> Process {
        let mut args = self.common_flags(service, addr, admin);
        args.extend(self.timers.for_service(service));
        let mut env = self.env.clone();
        env.extend(self.service_env.get(service).cloned().unwrap_or_default());
        Process::spawn_with_env(
            self.dir.path(),
            name,
            &format!("flotilla-{service}"),
            &args,
            &env,
        )
    }

    /// Starts (or restarts) one control-plane service on its address.
    pub fn start_service(&mut self, service: &str) {
        let addr = self
            .addrs
            .get(service)
            .cloned()
            .unwrap_or_else(|| format!("127.0.0.1:{}", free_port()));
        let admin = format!("127.0.0.1:{}", free_port());
        let process = self.spawn_service(service, service, &addr, &admin);
        self.addrs.insert(service.to_string(), addr);
        self.admin_addrs.insert(service.to_string(), admin);
        self.services.insert(service.to_string(), process);
    }

    /// Starts another replica of `service` (same flags, its own ports), registered as
    /// `<service>-2` (then `-3`, …); the replicas share one leader election, or split the
    /// shards (`--shards`). Waits until it serves.
    pub async fn start_replica(&mut self, service: &str) -> String {
        let name = (2..)
            .map(|i| format!("{service}-{i}"))
            .find(|n| !self.addrs.contains_key(n))
            .expect("a free replica name");
        let addr = format!("127.0.0.1:{}", free_port());
        let admin = format!("127.0.0.1:{}", free_port());
        let process = self.spawn_service(service, &name, &addr, &admin);
        self.addrs.insert(name.clone(), addr.clone());
        self.admin_addrs.insert(name.clone(), admin);
        self.services.insert(name.clone(), process);
        wait_serving(&addr, Duration::from_secs(30)).await;
        name
    }

    /// Whether the replica registered as `name` leads its election now (its
    /// `flotilla_leader` gauge on `/metrics` is 1).
    pub async fn is_leader(&self, name: &str) -> bool {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = &self.admin_addrs[name];
        let Ok(mut conn) = tokio::net::TcpStream::connect(addr).await else {
            return false;
        };
        let request = format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n");
        if conn.write_all(request.as_bytes()).await.is_err() {
            return false;
        }
        let mut body = String::new();
        let _ = conn.read_to_string(&mut body).await;
        body.lines()
            .any(|l| l.starts_with("flotilla_leader{") && l.trim_end().ends_with(" 1"))
    }

    /// Restarts `service` talking to etcd through `endpoints` (e.g. a proxy that can cut its
    /// link) instead of the stack's etcd.
    pub async fn restart_service_via(&mut self, service: &str, endpoints: &str) {
        if let Some(mut p) = self.services.remove(service) {
            p.kill().await;
        }
        self.etcd_overrides
            .insert(service.to_owned(), endpoints.to_owned());
        self.start_service(service);
        wait_serving(&self.addrs[service].clone(), Duration::from_secs(30)).await;
    }

    /// Restarts `service` with extra environment variables (kept for later restarts).
    pub async fn restart_service_with_env(&mut self, service: &str, env: Vec<(String, String)>) {
        if let Some(mut p) = self.services.remove(service) {
            p.kill().await;
        }
        self.service_env.insert(service.to_owned(), env);
        self.start_service(service);
        wait_serving(&self.addrs[service].clone(), Duration::from_secs(30)).await;
    }

    /// SIGKILLs a control-plane service (it stays down until [`Stack::start_service`]).
    pub async fn kill_service(&mut self, service: &str) {
        if let Some(mut p) = self.services.remove(service) {
            p.kill().await;
        }
    }

    /// The api's address as an `http://` URL.
    pub fn api_url(&self) -> String {
        format!("http://{}", self.addrs["api"])
    }

    /// The real `flotilla` CLI against this stack's api: (success, stdout + stderr).
    pub async fn cli(&self, args: &[&str]) -> (bool, String) {
        let mut command = tokio::process::Command::new(bin_path("flotilla"));
        command.args(["--server", &self.api_url()]).args(args);
        command_output(&mut command).await
    }

    /// [`Stack::cli`] that must succeed: its output.
    pub async fn cli_ok(&self, args: &[&str]) -> String {
        let (ok, out) = self.cli(args).await;
        assert!(ok, "flotilla {args:?}: {out}");
        out
    }

    /// Starts a Push member cluster (member-sim) with extra flags; returns its address.
    pub async fn start_member(&mut self, name: &str, extra: &[&str]) -> String {
        let addr = format!("127.0.0.1:{}", free_port());
        let control_addr = format!("127.0.0.1:{}", free_port());
        let mut args = vec![
            format!("--name={name}"),
            format!("--listen={addr}"),
            format!("--control-listen={control_addr}"),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let process = Process::spawn(self.dir.path(), name, "flotilla-member-sim", &args);
        wait_serving(&control_addr, Duration::from_secs(20)).await;
        self.members.insert(
            name.to_string(),
            Member {
                name: name.into(),
                addr: addr.clone(),
                control_addr,
                process,
                agent: None,
                agent_token: None,
            },
        );
        addr
    }

    /// Starts a Pull member cluster: a member-sim with `extra` flags and a `flotilla-agent`
    /// process next to it that heartbeats to this stack's cluster-health every 200 ms,
    /// watches its Works on the api, applies them on the member-sim's Kubernetes API and
    /// reports their status to the work-executor. Returns the member-sim's address.
    pub async fn start_pull_member(&mut self, name: &str, extra: &[&str]) -> String {
        self.start_pull_member_with(name, extra, &[]).await
    }

    /// [`Stack::start_pull_member`] with `agent_extra` flags for its agent (a
    /// `--token-file`, say).
    pub async fn start_pull_member_with(
        &mut self,
        name: &str,
        extra: &[&str],
        agent_extra: &[&str],
    ) -> String {
        let addr = self.start_member(name, extra).await;
        // a credential for the member's API server: it must never show in the agent's log
        let token = format!("member-token-{:016x}", rand::random::<u64>());
        let token_file = self.dir.path().join(format!("{name}-token"));
        std::fs::write(&token_file, &token).unwrap();
        let args = vec![
            format!("--member-token-file={}", token_file.display()),
            "--log=debug".to_string(),
            format!("--cluster={name}"),
            format!("--member=http://{addr}"),
            format!("--api={}", self.addrs["api"]),
            format!("--cluster-health={}", self.addrs["cluster-health"]),
            format!("--work-executor={}", self.addrs["work-executor"]),
            "--heartbeat-interval=200ms".to_string(),
            "--status-interval=100ms".to_string(),
        ];
        let args: Vec<String> = args
            .into_iter()
            .chain(agent_extra.iter().map(|a| a.to_string()))
            .collect();
        // as in the FROM-scratch image: no operating-system trust store (a kube-rs client
        // that needs one cannot even be built)
        let no_trust_store = [
            ("SSL_CERT_FILE".to_owned(), "/nonexistent".to_owned()),
            ("SSL_CERT_DIR".to_owned(), "/nonexistent".to_owned()),
        ];
        let agent = Process::spawn_with_env(
            self.dir.path(),
            &format!("{name}-agent"),
            "flotilla-agent",
            &args,
            &no_trust_store,
        );
        if let Some(m) = self.members.get_mut(name) {
            m.agent = Some(agent);
            m.agent_token = Some(token);
        }
        addr
    }

    /// Starts a stack with `timers` and Push members member1 and member2 (pods start after
    /// 200ms), waiting (up to `timeout`) until both are Ready and untainted; the stack and an
    /// api client.
    pub async fn with_two_members(timers: Timers, timeout: Duration) -> (Self, ApiClient) {
        let mut stack = Stack::start(timers).await;
        let api = stack
            .ready_push_members(
                &["member1", "member2"],
                &["--pod-startup-delay=200ms"],
                timeout,
            )
            .await;
        (stack, api)
    }

    /// Starts member-sims `names` with `extra` flags, registers them as Push clusters and
    /// waits (up to `timeout`) until each is Ready and untainted; returns an api client.
    pub async fn ready_push_members(
        &mut self,
        names: &[&str],
        extra: &[&str],
        timeout: Duration,
    ) -> ApiClient {
        for name in names {
            self.start_member(name, extra).await;
        }
        self.register_push_members(names, timeout).await
    }

    /// Registers started members `names` as Push clusters and waits (up to `timeout`) until
    /// each is Ready and untainted; returns an api client.
    pub async fn register_push_members(&self, names: &[&str], timeout: Duration) -> ApiClient {
        let api = api_client(self).await;
        self.create_push_clusters(&api, names).await;
        wait_clusters_ready(&api, names, timeout).await;
        api
    }

    /// Creates a Push Cluster object for each started member (endpoint `http://<its
    /// --listen>`, region `eu`, label `env=test`).
    pub async fn create_push_clusters(&self, api: &ApiClient, names: &[&str]) {
        for name in names {
            let addr = &self.members[*name].addr;
            create_cluster(
                api,
                flotilla_api::testing::cluster(name, &format!("http://{addr}")),
            )
            .await;
        }
    }

    /// Starts member1 (capacity 100) and member2 (capacity 50), pods Ready 200 ms after
    /// they are applied, registers both as Push clusters and waits until they are Ready: an
    /// Aggregated placement over the two puts everything on member1.
    pub async fn ready_unequal_members(&mut self, timeout: Duration) -> ApiClient {
        for (name, capacity) in [("member1", 100), ("member2", 50)] {
            let capacity = format!("--capacity={capacity}");
            self.start_member(name, &["--pod-startup-delay=200ms", &capacity])
                .await;
        }
        let api = api_client(self).await;
        self.create_push_clusters(&api, &["member1", "member2"])
            .await;
        wait_clusters_ready(&api, &["member1", "member2"], timeout).await;
        api
    }

    /// [`Stack::start_on`] `etcd` with every revision from before its first write recorded.
    pub async fn start_recorded(
        etcd: EtcdServer,
        timers: Timers,
    ) -> (Self, history::HistoryRecorder) {
        let probe = etcd.store("history-probe").await;
        let from = eventually(Duration::from_secs(60), "etcd answers", || async {
            flotilla_store::Store::current_revision(&probe).await.ok()
        })
        .await
            + 1;
        let stack = Stack::start_on(etcd, timers, Vec::new()).await;
        let recorder = history::HistoryRecorder::start(stack.store().await, from);
        (stack, recorder)
    }

    /// [`Stack::verdict`] of a scenario (seed 0) that made member1 unhealthy and then healthy
    /// again: member2 must stay Ready and untainted throughout (I9); with `converged` the end
    /// state is checked too (I2, I3, I6).
    pub async fn verdict_member1_flapped(
        &self,
        recorder: history::HistoryRecorder,
        scenario: &str,
        converged: bool,
    ) -> Vec<history::Entry> {
        let expect = history::Expect {
            healthy_members: vec!["member2".into()],
            converged,
            ..Default::default()
        };
        let faults = ["member1 unhealthy, then healthy".to_owned()];
        self.verdict(recorder, scenario, 0, &faults, &expect).await
    }

    /// Stops `recorder` at the current revision and checks the history against `expect`:
    /// prints the report, and on a violation dumps the logs and panics. Returns the history
    /// for the scenario's own checks.
    pub async fn verdict(
        &self,
        recorder: history::HistoryRecorder,
        scenario: &str,
        seed: u64,
        faults: &[String],
        expect: &history::Expect,
    ) -> Vec<history::Entry> {
        recorder.settle(expect).await;
        // (with a dead etcd member the client may try its endpoint first: retry)
        let store = self.store().await;
        let until = eventually(Duration::from_secs(60), "etcd answers", || async {
            flotilla_store::Store::current_revision(&store).await.ok()
        })
        .await;
        let history = recorder.stop_at(until).await;
        let report = history::check(&history, expect);
        report.print(scenario, seed, faults);
        if !report.violations.is_empty() {
            self.dump_logs();
            panic!(
                "{scenario} (seed {seed}): {} invariant violation(s), first: {}",
                report.violations.len(),
                report.violations[0]
            );
        }
        history
    }

    /// A store client in this stack's etcd namespace: keys are those the services use
    /// (`clusters/…`, `bindings/…`), for checks behind the api's back and for the rare
    /// operator action no RPC offers.
    pub async fn store(&self) -> EtcdStore {
        let config = EtcdConfig::new(self.etcd.endpoints().to_vec()).with_namespace(&self.prefix);
        EtcdStore::connect(config).await.expect("connect to etcd")
    }

    /// Prints every process's log (for debugging a failing scenario).
    pub fn dump_logs(&self) {
        for p in self
            .services
            .values()
            .chain(self.members.values().map(|m| &m.process))
        {
            eprintln!("----- {} -----\n{}", p.name, p.log());
        }
    }
}

/// Runs `command` to its end: (success, stdout + stderr).
pub async fn command_output(command: &mut tokio::process::Command) -> (bool, String) {
    let out = command
        .output()
        .await
        .unwrap_or_else(|e| panic!("run {command:?}: {e}"));
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The real `kubectl` against a member-sim's Kubernetes API at `addr` (no kubeconfig, plain
/// HTTP): (success, stdout, stderr).
pub async fn member_kubectl(addr: &str, args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new("kubectl")
        .env("KUBECONFIG", "/dev/null")
        .env("HOME", std::env::temp_dir())
        .arg(format!("--server=http://{addr}"))
        .args(args)
        .output()
        .await
        .expect("kubectl is installed (scripts/test.sh installs Debian's kubectl)");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// An `Api` client of the stack.
pub async fn api_client(stack: &Stack) -> ApiClient {
    let channel = tonic::transport::Endpoint::from_shared(stack.api_url())
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    api_client_with(channel, None)
}

/// A client of a member-sim's control address (`flotilla.v1.MemberSim`).
async fn member_control(
    member: &Member,
) -> v1::member_sim_client::MemberSimClient<tonic::transport::Channel> {
    control_client(&member.control_addr).await
}

/// A client of the member-sim control address `addr` (faults ignored).
pub async fn control_client(
    addr: &str,
) -> v1::member_sim_client::MemberSimClient<tonic::transport::Channel> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    v1::member_sim_client::MemberSimClient::new(channel)
}

/// Sets a member's fault through its control address (works even when it is unreachable).
pub async fn set_fault(member: &Member, mode: flotilla_proto::v1::FaultMode) {
    set_fault_at(&member.control_addr, mode).await;
}

/// Sets the fault of the member-sim whose control address is `addr` (e.g. a
/// [`kube::RealMember`]'s proxy).
pub async fn set_fault_at(addr: &str, mode: flotilla_proto::v1::FaultMode) {
    control_client(addr)
        .await
        .set_fault(flotilla_proto::v1::SetFaultRequest {
            mode: mode as i32,
            api_errors: None,
            watch_delay_ms: 0,
        })
        .await
        .unwrap();
}

/// The state of a member-sim as its control address sees it (faults ignored).
pub async fn member_status(member: &Member) -> v1::GetStatsResponse {
    member_control(member)
        .await
        .get_stats(v1::GetStatsRequest {})
        .await
        .unwrap()
        .into_inner()
}
