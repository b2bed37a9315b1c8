//! Test harness for Flotilla's scenario tests: a real etcd (from
//! [`flotilla_store::testing`]) and the real service binaries as child processes on free
//! loopback ports.
//!
//! ```text
//!   EtcdServer ──► etcd (container, binary, or FLOTILLA_ETCD_ENDPOINTS)
//!   Stack::start ─► flotilla-api, flotilla-cluster-health, flotilla-taint-manager,
//!                   flotilla-scheduler, flotilla-graceful-eviction, flotilla-work-executor
//!                   (each with its own --etcd-prefix namespace, so tests share one etcd)
//!   Stack::member ─► flotilla-member-sim (push or pull), faults by RPC
//! ```
//!
//! Service binaries are found next to the test executable's directory
//! (`target/<profile>/flotilla-<service>`); `scripts/test.sh` builds them first
//! (`cargo build --workspace --bins`). A missing binary fails the test with that hint.
//!
//! Helpers shared by the scenarios: reading clusters, bindings (targets, tasks, conditions,
//! aggregated status) and Works through the api; waiting for clusters to be Ready or tainted;
//! [`Recorder`]s that keep every change of an api watch (so that "never happened" is checked
//! on the whole history, not on polls); and a store client in the stack's etcd namespace.
//!
//! Every test is its own process under nextest and every [`Stack`] its own etcd namespace, so
//! tests run in parallel; they mostly wait on (compressed) timers, so more test threads than
//! cores pay off, and with `FLOTILLA_ETCD_ENDPOINTS` they share one etcd instead of starting
//! one each:
//!
//! ```text
//! FLOTILLA_ETCD_ENDPOINTS=http://127.0.0.1:2379 cargo nextest run -p flotilla-tests --test-threads 4
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod history;
pub mod kube;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

pub use flotilla_store::testing::EtcdServer;

use flotilla_proto::v1;
use flotilla_store::{EtcdConfig, EtcdStore};

/// The api client the scenarios use: every call carries the bearer token it was made with,
/// if any ([`api_client_with`]).
pub type ApiClient = v1::api_client::ApiClient<
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Bearer>,
>;

/// Adds `authorization: Bearer <token>` to every call (nothing without a token).
#[derive(Clone, Debug, Default)]
pub struct Bearer(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl tonic::service::Interceptor for Bearer {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// An api client on `channel` whose calls carry `token` (none: no credentials).
pub fn api_client_with(channel: tonic::transport::Channel, token: Option<&str>) -> ApiClient {
    let bearer = Bearer(token.map(|t| {
        format!("Bearer {t}")
            .parse()
            .expect("a token is valid metadata")
    }));
    v1::api_client::ApiClient::with_interceptor(channel, bearer)
}

/// A free TCP port on 127.0.0.1 for a child process to listen on (the probe listener is
/// closed before returning).
///
/// The port is picked at random *below* the kernel's ephemeral range, and never handed out
/// twice by this process: a port from `bind(":0")` is an ephemeral one, which the kernel may
/// give again to the next `bind(":0")` or to any outgoing connection (e.g. a service's etcd
/// client) before the child binds it — seen as two services of one stack getting the same
/// port and one of them never serving.
pub fn free_port() -> u16 {
    use std::collections::HashSet;
    use std::sync::{Mutex, OnceLock};
    static HANDED_OUT: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    let handed_out = HANDED_OUT.get_or_init(Default::default);
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    const LOW: u16 = 10_000;
    if ephemeral_low > LOW + 1000 {
        for _ in 0..1000 {
            let port = rand::random_range(LOW..ephemeral_low);
            let mut taken = handed_out.lock().unwrap();
            if taken.contains(&port) {
                continue;
            }
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                taken.insert(port);
                return port;
            }
        }
    }
    // An unusual port range: fall back to the kernel's choice (still never twice).
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if handed_out.lock().unwrap().insert(port) {
            return port;
        }
    }
}

/// The path of a workspace binary built by cargo, e.g. `flotilla-scheduler`.
pub fn bin_path(name: &str) -> PathBuf {
    // test executables live in target/<profile>/deps/
    let exe = std::env::current_exe().expect("current exe");
    let profile_dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .to_path_buf();
    let path = profile_dir.join(name);
    assert!(
        path.exists(),
        "binary {} not found; build the services first: `cargo build --workspace --bins` \
         (scripts/test.sh does this)",
        path.display()
    );
    path
}

/// A child process killed on drop; its output goes to a log file that is printed when the
/// test panics.
pub struct Process {
    /// The program name.
    pub name: String,
    child: Child,
    log: PathBuf,
    /// Print only this many last lines of the log when the test panics (a kube-apiserver
    /// writes a lot).
    tail: Option<usize>,
}

impl Process {
    /// Spawns `bin` with `args`, logging to a file in `dir`.
    pub fn spawn(dir: &std::path::Path, name: &str, bin: &str, args: &[String]) -> Self {
        Self::spawn_with_env(dir, name, bin, args, &[])
    }

    /// [`Process::spawn`] with extra environment variables.
    pub fn spawn_with_env(
        dir: &std::path::Path,
        name: &str,
        bin: &str,
        args: &[String],
        env: &[(String, String)],
    ) -> Self {
        Self::spawn_program(dir, name, &bin_path(bin), args, env)
    }

    /// [`Process::spawn_with_env`] of any program (e.g. a Kubernetes binary).
    pub fn spawn_program(
        dir: &std::path::Path,
        name: &str,
        program: &std::path::Path,
        args: &[String],
        env: &[(String, String)],
    ) -> Self {
        let bin = program.display().to_string();
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let err = out.try_clone().unwrap();
        // the caller's FLOTILLA_LOG wins over the test run's, which wins over `info`
        let log_level = env
            .iter()
            .find(|(k, _)| k == "FLOTILLA_LOG")
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var("FLOTILLA_LOG").ok())
            .unwrap_or_else(|| "info".into());
        let child = Command::new(program)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("FLOTILLA_LOG", log_level)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {bin}: {e}"));
        let tail = (!bin.contains("flotilla-")).then_some(80);
        Process {
            name: name.into(),
            child,
            log,
            tail,
        }
    }

    /// The process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Kills the process (SIGKILL) and waits for it.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    /// Freezes (`true`, SIGSTOP) or thaws (`false`, SIGCONT) the process.
    pub fn freeze(&self, stop: bool) {
        let pid = self.pid().expect("the process runs");
        let status = std::process::Command::new("kill")
            .arg(if stop { "-STOP" } else { "-CONT" })
            .arg(pid.to_string())
            .status();
        assert!(status.is_ok_and(|s| s.success()), "kill -STOP/-CONT {pid}");
    }

    /// Whether it exited already.
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.log();
            let shown = match self.tail {
                Some(n) => {
                    let lines: Vec<&str> = log.lines().collect();
                    lines[lines.len().saturating_sub(n)..].join("\n")
                }
                None => log,
            };
            eprintln!(
                "----- {} log ({}) -----\n{shown}",
                self.name,
                self.log.display(),
            );
        }
    }
}

/// Polls `f` until it returns `Some`, or panics after `timeout` with `what`.
pub use flotilla_runtime::testing::eventually;

/// Waits until a gRPC server answers `grpc.health.v1.Health/Check` with SERVING.
pub async fn wait_serving(addr: &str, timeout: Duration) {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;
    let url = format!("http://{addr}");
    eventually(timeout, &format!("{addr} to serve"), || {
        let url = url.clone();
        async move {
            let channel = tonic::transport::Endpoint::from_shared(url)
                .ok()?
                .connect()
                .await
                .ok()?;
            let mut client = HealthClient::new(channel);
            let resp = client
                .check(HealthCheckRequest {
                    service: String::new(),
                })
                .await
                .ok()?;
            (resp.into_inner().status == 1).then_some(())
        }
    })
    .await;
}

/// The services of the control plane, by binary name without `flotilla-`: the one registry
/// that `flotilla up` and `flotilla bench` start from too.
pub fn control_plane() -> impl Iterator<Item = &'static str> {
    flotilla_suite::Service::ALL.into_iter().map(|s| s.name())
}

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

    /// Starts a second replica of `service` (same flags, its own ports), registered as
    /// `<service>-2`; the replicas share one leader election. Waits until it serves.
    pub async fn start_replica(&mut self, service: &str) -> String {
        let name = format!("{service}-2");
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

// ---------------------------------------------------------------------------------------
// Reading objects through the api
// ---------------------------------------------------------------------------------------

/// The condition of `type_` in `conditions`.
pub fn condition<'a>(conditions: &'a [v1::Condition], type_: &str) -> Option<&'a v1::Condition> {
    conditions.iter().find(|c| c.r#type == type_)
}

/// A cluster, or `None` if the api does not answer with it.
pub async fn get_cluster(api: &ApiClient, name: &str) -> Option<v1::Cluster> {
    api.clone()
        .get_cluster(v1::GetClusterRequest { name: name.into() })
        .await
        .ok()
        .map(|r| r.into_inner())
}

/// The status of a cluster's `Ready` condition (UNSPECIFIED when it has none).
pub fn ready_status(c: &v1::Cluster) -> v1::ConditionStatus {
    c.status
        .as_ref()
        .and_then(|s| condition(&s.conditions, "Ready"))
        .and_then(|c| v1::ConditionStatus::try_from(c.status).ok())
        .unwrap_or(v1::ConditionStatus::Unspecified)
}

/// Whether a cluster carries the taint (key, effect).
pub fn has_taint(c: &v1::Cluster, key: &str, effect: v1::TaintEffect) -> bool {
    c.spec.as_ref().is_some_and(|s| {
        s.taints
            .iter()
            .any(|t| t.key == key && t.effect == effect as i32)
    })
}

/// The cluster's taints as `key:Effect`.
pub fn taint_names(c: &v1::Cluster) -> Vec<String> {
    let taints = c.spec.as_ref().map_or(&[][..], |s| &s.taints);
    taints.iter().map(taint_name).collect()
}

/// A taint as `key:Effect` (the number of an effect the proto does not know).
fn taint_name(t: &v1::Taint) -> String {
    let effect = v1::TaintEffect::try_from(t.effect)
        .map_or_else(|_| t.effect.to_string(), |e| e.as_str_name().to_owned());
    format!("{}:{effect}", t.key)
}

/// Waits until every named cluster is Ready, untainted and reports its API enablements
/// (so that the first schedule sees all of them as candidates).
pub async fn wait_clusters_ready(api: &ApiClient, names: &[&str], timeout: Duration) {
    for name in names {
        eventually(timeout, &format!("{name} Ready and untainted"), || async {
            let c = get_cluster(api, name).await?;
            let status = c.status.as_ref()?;
            (ready_status(&c) == v1::ConditionStatus::True
                && !status.api_enablements.is_empty()
                && c.spec.as_ref()?.taints.is_empty())
            .then_some(())
        })
        .await;
    }
}

/// Waits until a cluster carries the taint (key, effect); returns the cluster.
pub async fn wait_taint(
    api: &ApiClient,
    name: &str,
    key: &str,
    effect: v1::TaintEffect,
    timeout: Duration,
) -> v1::Cluster {
    eventually(
        timeout,
        &format!("{name} tainted {key}:{}", effect.as_str_name()),
        || async {
            let c = get_cluster(api, name).await?;
            has_taint(&c, key, effect).then_some(c)
        },
    )
    .await
}

/// A binding, or `None` if absent.
pub async fn get_binding(
    api: &ApiClient,
    namespace: &str,
    name: &str,
) -> Option<v1::ResourceBinding> {
    api.clone()
        .get_resource_binding(v1::GetResourceBindingRequest {
            namespace: namespace.into(),
            name: name.into(),
        })
        .await
        .ok()
        .map(|r| r.into_inner())
}

/// The binding of the seed workload `default/nginx` (Deployment): `default/nginx-deployment`.
pub async fn nginx_binding(api: &ApiClient) -> Option<v1::ResourceBinding> {
    get_binding(api, "default", "nginx-deployment").await
}

/// Waits (up to `timeout`) until the seed binding satisfies `ready`; returns it.
pub async fn wait_nginx(
    api: &ApiClient,
    timeout: Duration,
    what: &str,
    ready: impl Fn(&v1::ResourceBinding) -> bool,
) -> v1::ResourceBinding {
    let ready = &ready;
    eventually(timeout, what, move || async move {
        let b = nginx_binding(api).await?;
        ready(&b).then_some(b)
    })
    .await
}

/// Waits (up to `timeout`) until the seed binding targets exactly `expected` (name, replicas,
/// sorted by name) and is healthy ([`binding_healthy`]); returns it.
pub async fn wait_nginx_healthy(
    api: &ApiClient,
    timeout: Duration,
    expected: &[(&str, i32)],
) -> v1::ResourceBinding {
    let what = format!("nginx on {expected:?}, healthy");
    wait_nginx(api, timeout, &what, |b| {
        targeted(b, expected) && binding_healthy(b)
    })
    .await
}

/// Whether `spec.clusters` is exactly `expected` (name, replicas, sorted by name).
pub fn targeted(b: &v1::ResourceBinding, expected: &[(&str, i32)]) -> bool {
    let targets = targets(b);
    targets
        .iter()
        .map(|(c, r)| (c.as_str(), *r))
        .eq(expected.iter().copied())
}

/// `spec.clusters` as sorted (name, replicas).
pub fn targets(b: &v1::ResourceBinding) -> Vec<(String, i32)> {
    b.target_pairs()
}

/// The target names of `spec.clusters`, sorted.
pub fn target_names(b: &v1::ResourceBinding) -> Vec<String> {
    targets(b).into_iter().map(|(n, _)| n).collect()
}

/// The eviction tasks of a binding.
pub fn eviction_tasks(b: &v1::ResourceBinding) -> Vec<v1::GracefulEvictionTask> {
    b.spec
        .as_ref()
        .map(|s| s.graceful_eviction_tasks.clone())
        .unwrap_or_default()
}

/// The `fromCluster` of every eviction task of a binding.
pub fn tasks(b: &v1::ResourceBinding) -> Vec<String> {
    eviction_tasks(b)
        .into_iter()
        .map(|t| t.from_cluster)
        .collect()
}

/// A condition of a binding's status.
pub fn binding_condition<'a>(b: &'a v1::ResourceBinding, type_: &str) -> Option<&'a v1::Condition> {
    condition(&b.status.as_ref()?.conditions, type_)
}

/// The aggregated status item of one cluster.
pub fn status_item<'a>(
    b: &'a v1::ResourceBinding,
    cluster: &str,
) -> Option<&'a v1::AggregatedStatusItem> {
    b.status
        .as_ref()?
        .aggregated_status
        .iter()
        .find(|i| i.cluster_name == cluster)
}

/// Whether every target of the binding reports Healthy with all its replicas Ready, in
/// status aggregated for the binding's current generation.
pub fn binding_healthy(b: &v1::ResourceBinding) -> bool {
    let (Some(status), Some(meta)) = (b.status.as_ref(), b.metadata.as_ref()) else {
        return false;
    };
    let t = targets(b);
    !t.is_empty()
        && status.aggregated_status_observed_generation == meta.generation
        && t.iter().all(|(cluster, replicas)| {
            status_item(b, cluster).is_some_and(|i| {
                i.health == v1::ResourceHealth::Healthy as i32 && i.ready_replicas == *replicas
            })
        })
}

/// The cluster of a Work.
pub fn work_cluster(w: &v1::Work) -> &str {
    w.spec.as_ref().map_or("", |s| s.cluster.as_str())
}

/// Whether a Work is marked for deletion.
pub fn work_deleting(w: &v1::Work) -> bool {
    w.metadata
        .as_ref()
        .is_some_and(|m| m.deletion_timestamp.is_some())
}

/// The resourceVersion of an object's metadata.
pub fn resource_version(meta: Option<&v1::ObjectMeta>) -> i64 {
    meta.map_or(0, |m| m.resource_version)
}

/// `pub async fn $name(api) -> Vec<Item>`: every object of a kind (one unpaged List), for
/// each `$name = $rpc($request) -> $item;` row.
macro_rules! list_every {
    ($($name:ident = $rpc:ident($request:ident) -> $item:ident;)*) => {$(
        #[doc = concat!("Every ", stringify!($item), " in the stack (one unpaged List).")]
        pub async fn $name(api: &ApiClient) -> Vec<v1::$item> {
            let list = api.clone().$rpc(v1::$request::default()).await;
            list.unwrap().into_inner().items
        }
    )*};
}

list_every! {
    list_bindings = list_resource_bindings(ListResourceBindingsRequest) -> ResourceBinding;
    list_works = list_works(ListWorksRequest) -> Work;
    list_clusters = list_clusters(ListClustersRequest) -> Cluster;
    list_policies = list_propagation_policies(ListPropagationPoliciesRequest) -> PropagationPolicy;
    list_workloads = list_workloads(ListWorkloadsRequest) -> Workload;
    list_taint_policies = list_cluster_taint_policies(ListClusterTaintPoliciesRequest)
        -> ClusterTaintPolicy;
}

/// The names of `objects`, in order.
pub fn names<R: flotilla_proto::Resource>(objects: &[R]) -> Vec<String> {
    objects.iter().map(|o| o.name().to_owned()).collect()
}

/// `pub async fn $name(api, namespace, name) -> Result<Item, Status>`: one namespaced object.
macro_rules! get_namespaced {
    ($(#[$doc:meta])* $name:ident = $rpc:ident($request:ident) -> $item:ident) => {
        $(#[$doc])*
        pub async fn $name(
            api: &ApiClient,
            namespace: &str,
            name: &str,
        ) -> Result<v1::$item, tonic::Status> {
            let request = v1::$request {
                namespace: namespace.into(),
                name: name.into(),
            };
            Ok(api.clone().$rpc(request).await?.into_inner())
        }
    };
}

get_namespaced!(
    /// A PropagationPolicy, or the api's error.
    get_policy = get_propagation_policy(GetPropagationPolicyRequest) -> PropagationPolicy
);
get_namespaced!(
    /// A Secret (its values blanked, as the api answers), or the api's error.
    get_secret = get_secret(GetSecretRequest) -> Secret
);

/// The Work of one cluster (the scenarios propagate one workload), if any.
pub async fn cluster_work(api: &ApiClient, cluster: &str) -> Option<v1::Work> {
    list_works(api)
        .await
        .into_iter()
        .find(|w| work_cluster(w) == cluster)
}

/// The clusters that have a Work, sorted.
pub async fn work_clusters(api: &ApiClient) -> Vec<String> {
    let mut clusters: Vec<String> = list_works(api)
        .await
        .iter()
        .map(|w| work_cluster(w).to_owned())
        .collect();
    clusters.sort();
    clusters
}

// ---------------------------------------------------------------------------------------
// Creating the seed objects
// ---------------------------------------------------------------------------------------

/// Creates the seed workload `default/nginx` (3 replicas) and `policy`.
pub async fn create_nginx(api: &ApiClient, policy: v1::PropagationPolicy) {
    api.clone()
        .create_workload(v1::CreateWorkloadRequest {
            workload: Some(flotilla_api::testing::nginx_workload()),
        })
        .await
        .expect("create workload");
    try_create_policy(api, policy).await.expect("create policy");
}

/// Creates a Pull Cluster `name` (region `eu`, label `env=test`) through the api.
pub async fn create_pull_cluster(api: &ApiClient, name: &str) {
    // The Push fixture without an endpoint, in Pull mode.
    let mut cluster = flotilla_api::testing::cluster(name, "");
    cluster
        .spec
        .as_mut()
        .expect("a fixture cluster has a spec")
        .sync_mode = v1::SyncMode::Pull as i32;
    create_cluster(api, cluster).await;
}

/// Creates `cluster` through the api (panics, naming it, if the api refuses).
pub async fn create_cluster(api: &ApiClient, cluster: v1::Cluster) {
    let name = cluster.metadata.clone().unwrap_or_default().name;
    try_create_cluster(api, cluster)
        .await
        .unwrap_or_else(|e| panic!("create cluster {name}: {e}"));
}

/// `pub async fn $name(api, object) -> Result<Item, Status>`: creates an object through the
/// api (the stored object or the api's error), for each `$name = $rpc($request { $field })
/// -> $item;` row.
macro_rules! try_create {
    ($($name:ident = $rpc:ident($request:ident { $field:ident }) -> $item:ident;)*) => {$(
        #[doc = concat!(
            "Creates a ",
            stringify!($item),
            " through the api: the stored one or the error."
        )]
        pub async fn $name(api: &ApiClient, object: v1::$item) -> Result<v1::$item, tonic::Status> {
            let request = v1::$request { $field: Some(object) };
            Ok(api.clone().$rpc(request).await?.into_inner())
        }
    )*};
}

try_create! {
    try_create_cluster = create_cluster(CreateClusterRequest { cluster }) -> Cluster;
    try_create_policy =
        create_propagation_policy(CreatePropagationPolicyRequest { propagation_policy })
        -> PropagationPolicy;
}

/// The seed policy (Deployment `default/nginx`) with another placement and failover
/// behaviour.
pub fn nginx_policy(
    placement: v1::Placement,
    failover: Option<v1::FailoverBehavior>,
) -> v1::PropagationPolicy {
    let mut policy = flotilla_api::testing::seed_policy();
    let spec = policy.spec.as_mut().expect("seed policy has a spec");
    spec.placement = Some(placement);
    spec.propagate_deps = failover.as_ref().is_some_and(|f| f.application.is_some());
    spec.failover = failover;
    policy
}

/// Replicas divided over member1 and member2 by `preference` (Aggregated or Weighted).
pub fn divided_over_members(preference: v1::ReplicaDivisionPreference) -> v1::Placement {
    v1::Placement {
        cluster_affinity: Some(cluster_names(&["member1", "member2"])),
        replica_scheduling: Some(v1::ReplicaSchedulingStrategy {
            replica_scheduling_type: v1::ReplicaSchedulingType::Divided as i32,
            replica_division_preference: preference as i32,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A cluster affinity naming clusters.
pub fn cluster_names(names: &[&str]) -> v1::ClusterAffinity {
    v1::ClusterAffinity {
        cluster_names: names.iter().map(|n| n.to_string()).collect(),
        ..Default::default()
    }
}

// ---------------------------------------------------------------------------------------
// Watch recorders
// ---------------------------------------------------------------------------------------

/// One change seen by a [`Recorder`].
#[derive(Clone, Debug)]
pub struct Seen<T> {
    /// ADDED, MODIFIED or DELETED.
    pub kind: v1::WatchEventType,
    /// The object after the change (its last state for DELETED).
    pub object: T,
    /// The store revision of the change.
    pub revision: i64,
}

/// Records every change of an api watch stream in the background, from the state at the
/// moment it started (sent as ADDED) on, so that a scenario can assert on everything that
/// happened — including states too short-lived for polling to see.
pub struct Recorder<T> {
    seen: std::sync::Arc<std::sync::Mutex<Vec<Seen<T>>>>,
    error: std::sync::Arc<std::sync::Mutex<Option<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl<T: Clone + Send + 'static> Recorder<T> {
    /// Everything seen so far, in order. Panics if the watch broke (a broken watch would make
    /// "never happened" assertions vacuous).
    pub fn seen(&self) -> Vec<Seen<T>> {
        if let Some(e) = self.error.lock().unwrap().as_ref() {
            panic!("the watch recorder broke: {e}");
        }
        self.seen.lock().unwrap().clone()
    }

    /// The objects seen (every version), in order.
    pub fn objects(&self) -> Vec<T> {
        self.seen().into_iter().map(|s| s.object).collect()
    }

    async fn start<S, F>(mut stream: tonic::Streaming<S>, split: F) -> Self
    where
        S: Send + 'static,
        F: Fn(S) -> (i32, Option<T>, i64) + Send + 'static,
    {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let error = std::sync::Arc::new(std::sync::Mutex::new(None));
        let (synced_tx, synced_rx) = tokio::sync::oneshot::channel();
        let task = {
            let seen = seen.clone();
            let error = error.clone();
            tokio::spawn(async move {
                let mut synced = Some(synced_tx);
                loop {
                    match stream.message().await {
                        Ok(Some(msg)) => {
                            let (kind, object, revision) = split(msg);
                            let kind = v1::WatchEventType::try_from(kind)
                                .unwrap_or(v1::WatchEventType::Unspecified);
                            match (kind, object) {
                                (v1::WatchEventType::Bookmark, _) => {
                                    if let Some(tx) = synced.take() {
                                        let _ = tx.send(());
                                    }
                                }
                                (kind, Some(object)) => seen.lock().unwrap().push(Seen {
                                    kind,
                                    object,
                                    revision,
                                }),
                                (kind, None) => {
                                    *error.lock().unwrap() =
                                        Some(format!("{kind:?} event without an object"));
                                }
                            }
                        }
                        Ok(None) => {
                            *error.lock().unwrap() = Some("the stream ended".into());
                            return;
                        }
                        Err(e) => {
                            *error.lock().unwrap() = Some(e.to_string());
                            return;
                        }
                    }
                }
            })
        };
        tokio::time::timeout(Duration::from_secs(10), synced_rx)
            .await
            .expect("the watch sends its initial state within 10 s")
            .expect("the watch recorder stopped before its initial state");
        Recorder { seen, error, task }
    }
}

impl<T> Drop for Recorder<T> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `pub async fn $name(api) -> Recorder<Item>`: records every change of every object of a
/// kind (initial state first, as ADDED).
macro_rules! record_every {
    ($(#[$doc:meta])* $name:ident = $rpc:ident($request:ident) -> $response:ident($item:ident)) => {
        $(#[$doc])*
        pub async fn $name(api: &ApiClient) -> Recorder<v1::$item> {
            let watch = api.clone().$rpc(v1::$request::default()).await;
            let stream = watch.expect(stringify!($rpc)).into_inner();
            Recorder::start(stream, |m: v1::$response| (m.r#type, m.object, m.resource_version))
                .await
        }
    };
}

record_every!(
    /// Records every change of every Work (initial state first, as ADDED).
    record_works = watch_works(WatchWorksRequest) -> WatchWorksResponse(Work)
);
record_every!(
    /// Records every change of every binding (initial state first, as ADDED).
    record_bindings = watch_resource_bindings(WatchResourceBindingsRequest)
        -> WatchResourceBindingsResponse(ResourceBinding)
);

// ---------------------------------------------------------------------------------------
// Errors and the store behind the api
// ---------------------------------------------------------------------------------------

/// The `google.rpc.BadRequest` field violations of an error status, as (field, description).
pub fn field_violations(status: &tonic::Status) -> Vec<(String, String)> {
    use tonic_types::StatusExt;
    status
        .get_details_bad_request()
        .map(|b| {
            b.field_violations
                .into_iter()
                .map(|v| (v.field, v.description))
                .collect()
        })
        .unwrap_or_default()
}

/// Every key of the stack's namespace with its mod revision, except leader-election leases
/// (renewed on their own) and events: the objects, as the services stored them.
pub async fn object_revisions(store: &EtcdStore) -> std::collections::BTreeMap<String, i64> {
    use flotilla_store::Store;
    let (kvs, _) = store.list("", 0).await.expect("list the stack's keys");
    kvs.into_iter()
        .filter(|kv| !kv.key.starts_with("leases/") && !kv.key.starts_with("events/"))
        .map(|kv| (kv.key, kv.mod_revision))
        .collect()
}

/// A multi-member etcd cluster of the `etcd` binary on loopback (data on `/dev/shm` when it
/// exists), for the fault suite: the shape a production user runs, whose members can be
/// SIGKILLed one at a time. Removed on drop.
pub struct EtcdCluster {
    /// Client URLs, one per member.
    pub endpoints: Vec<String>,
    members: Vec<Option<std::process::Child>>,
    _dirs: Vec<tempfile::TempDir>,
    /// The members' host names, for [`EtcdCluster::start_named`].
    hosts: Option<HostsNames>,
}

impl EtcdCluster {
    /// Starts `n` members and waits until the cluster answers.
    pub async fn start(n: usize) -> Self {
        let token = format!("flotilla-test-{:08x}", rand::random::<u32>());
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
        let initial = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("e{i}=http://127.0.0.1:{peer}"))
            .collect::<Vec<_>>()
            .join(",");
        let shm = std::path::Path::new("/dev/shm");
        let mut dirs = Vec::new();
        let mut members = Vec::new();
        let mut endpoints = Vec::new();
        for (i, (client, peer)) in ports.iter().enumerate() {
            let dir = if shm.is_dir() {
                tempfile::tempdir_in(shm).unwrap()
            } else {
                tempfile::tempdir().unwrap()
            };
            let url = format!("http://127.0.0.1:{client}");
            let child = std::process::Command::new("etcd")
                .args([
                    format!("--name=e{i}"),
                    format!("--data-dir={}", dir.path().join("data").display()),
                    format!("--listen-client-urls={url}"),
                    format!("--advertise-client-urls={url}"),
                    format!("--listen-peer-urls=http://127.0.0.1:{peer}"),
                    format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"),
                    format!("--initial-cluster={initial}"),
                    "--initial-cluster-state=new".into(),
                    format!("--initial-cluster-token={token}"),
                    "--heartbeat-interval=50".into(),
                    "--election-timeout=500".into(),
                    "--logger=zap".into(),
                    "--log-level=error".into(),
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start an etcd member (is Debian's etcd-server installed?)");
            members.push(Some(child));
            endpoints.push(url);
            dirs.push(dir);
        }
        let cluster = EtcdCluster {
            endpoints,
            members,
            _dirs: dirs,
            hosts: None,
        };
        // every member answers on its own endpoint
        for endpoint in &cluster.endpoints {
            let config = EtcdConfig::new(vec![endpoint.clone()]);
            eventually(
                Duration::from_secs(30),
                &format!("etcd member {endpoint} answers"),
                || {
                    let config = config.clone();
                    async move {
                        let store = EtcdStore::connect(config).await.ok()?;
                        use flotilla_store::Store;
                        store.current_revision().await.ok()
                    }
                },
            )
            .await;
        }
        cluster
    }

    /// Like [`EtcdCluster::start`], but clients reach each member by a host name of its own
    /// (`flotilla-etcd-<random>-e<i>`, written into `/etc/hosts` for 127.0.0.1), as in
    /// docker-compose or a StatefulSet. [`EtcdCluster::forget_name`] then makes one name stop
    /// resolving, as a dead member's name does there. Editing `/etc/hosts` needs root, which
    /// the test machines and CI have; the names are removed again when the cluster drops.
    pub async fn start_named(n: usize) -> Self {
        let mut cluster = Self::start(n).await;
        let tag = format!("{:08x}", rand::random::<u32>());
        let mut names = Vec::new();
        for (i, endpoint) in cluster.endpoints.iter_mut().enumerate() {
            let name = format!("flotilla-etcd-{tag}-e{i}");
            *endpoint = endpoint.replace("127.0.0.1", &name);
            names.push(name);
        }
        cluster.hosts = Some(HostsNames::add(names));
        cluster
    }

    /// Removes member `i`'s host name from `/etc/hosts`: it stops resolving.
    pub fn forget_name(&mut self, i: usize) {
        if let Some(hosts) = &mut self.hosts {
            hosts.remove(i);
        }
    }

    /// The cluster as the [`EtcdServer`] a [`Stack`] runs on (every member's endpoint).
    pub fn server(&self) -> EtcdServer {
        EtcdServer::external(self.endpoints.clone())
    }

    /// SIGKILLs member `i` (it stays down).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}

/// Host names written into `/etc/hosts` (each for 127.0.0.1), removed one by one or on drop.
/// glibc reads the file on every lookup, so a removed name stops resolving at once.
struct HostsNames {
    names: Vec<Option<String>>,
}

impl HostsNames {
    const FILE: &'static str = "/etc/hosts";

    fn add(names: Vec<String>) -> Self {
        let mut text = std::fs::read_to_string(Self::FILE).expect("read /etc/hosts");
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        for name in &names {
            text.push_str(&format!("127.0.0.1 {name}\n"));
        }
        // written in place: /etc/hosts is often a bind mount that cannot be renamed over
        std::fs::write(Self::FILE, text).unwrap_or_else(|e| {
            panic!("cannot write /etc/hosts ({e}): this test edits it and needs root")
        });
        HostsNames {
            names: names.into_iter().map(Some).collect(),
        }
    }

    fn remove(&mut self, i: usize) {
        if let Some(name) = self.names.get_mut(i).and_then(Option::take) {
            Self::drop_lines(&[name]);
        }
    }

    fn drop_lines(names: &[String]) {
        let Ok(text) = std::fs::read_to_string(Self::FILE) else {
            return;
        };
        let kept: String = text
            .lines()
            .filter(|l| !names.iter().any(|n| l.split_whitespace().nth(1) == Some(n)))
            .map(|l| format!("{l}\n"))
            .collect();
        let _ = std::fs::write(Self::FILE, kept);
    }
}

impl Drop for HostsNames {
    fn drop(&mut self) {
        let left: Vec<String> = self.names.iter().flatten().cloned().collect();
        if !left.is_empty() {
            Self::drop_lines(&left);
        }
    }
}

/// Steady API use while a fault happens: reads (list clusters, get the seed binding) and
/// writes (create then delete a Secret), one round every 20 ms, each call counted, each failure
/// kept with when it happened; and [`ApiLoad::WATCHES`] binding watches held open throughout,
/// each of which must neither fail nor end. Nothing retries here: a failed call is what a
/// user would see.
pub struct ApiLoad {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<LoadReport>,
    watches: Vec<tokio::task::JoinHandle<Option<(Duration, String, String)>>>,
}

/// What an [`ApiLoad`] saw.
#[derive(Debug, Default)]
pub struct LoadReport {
    /// Calls made.
    pub requests: usize,
    /// The failed ones: `(time since the load started, call, error)`.
    pub failures: Vec<(Duration, String, String)>,
}

impl std::fmt::Display for LoadReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} of {} API calls failed",
            self.failures.len(),
            self.requests
        )?;
        for (at, call, error) in self.failures.iter().take(10) {
            write!(f, "\n  {:.2}s {call}: {error}", at.as_secs_f64())?;
        }
        Ok(())
    }
}

impl ApiLoad {
    /// How many watches an [`ApiLoad`] holds open: the api opens a store watch for each, and
    /// the client's balancer spreads them over the etcd members, so that one is on any
    /// member lost (all miss one of three with a chance of (2/3)^12, under 1%).
    pub const WATCHES: usize = 12;

    /// Starts the load against `api`; `tag` keeps its Secrets' names apart.
    pub fn start(api: &ApiClient, tag: &str) -> Self {
        let (stop, _) = tokio::sync::watch::channel(false);
        let started = std::time::Instant::now();
        let watches = (0..Self::WATCHES)
            .map(|i| {
                let (mut api, mut stopped) = (api.clone(), stop.subscribe());
                tokio::spawn(async move {
                    let broke = |why: String| {
                        Some((
                            started.elapsed(),
                            format!("WatchResourceBindings #{i}"),
                            why,
                        ))
                    };
                    let request = v1::WatchResourceBindingsRequest {
                        allow_bookmarks: true,
                        ..Default::default()
                    };
                    let mut stream = match api.watch_resource_bindings(request).await {
                        Ok(r) => r.into_inner(),
                        Err(s) => return broke(format!("{:?}: {}", s.code(), s.message())),
                    };
                    loop {
                        tokio::select! {
                            _ = stopped.changed() => return None,
                            item = stream.message() => match item {
                                Ok(Some(_)) => {}
                                Ok(None) => return broke("the stream ended".into()),
                                Err(s) => {
                                    return broke(format!("{:?}: {}", s.code(), s.message()));
                                }
                            },
                        }
                    }
                })
            })
            .collect();
        let mut stopped = stop.subscribe();
        let (mut api, tag) = (api.clone(), tag.to_owned());
        let task = tokio::spawn(async move {
            let mut report = LoadReport::default();
            let mut round = 0u64;
            while !*stopped.borrow() {
                round += 1;
                let name = format!("load-{tag}-{round}");
                let mut record = |call: &str, result: Result<(), tonic::Status>| {
                    report.requests += 1;
                    if let Err(status) = result {
                        report.failures.push((
                            started.elapsed(),
                            call.to_owned(),
                            format!("{:?}: {}", status.code(), status.message()),
                        ));
                    }
                };
                let r = api
                    .list_clusters(v1::ListClustersRequest::default())
                    .await
                    .map(drop);
                record("ListClusters", r);
                let r = api
                    .get_resource_binding(v1::GetResourceBindingRequest {
                        namespace: "default".into(),
                        name: "nginx-deployment".into(),
                    })
                    .await
                    .map(drop);
                record("GetResourceBinding", r);
                let r = api
                    .create_secret(v1::CreateSecretRequest {
                        secret: Some(v1::Secret {
                            metadata: Some(v1::ObjectMeta {
                                name: name.clone(),
                                namespace: "default".into(),
                                ..Default::default()
                            }),
                            data: [("token".to_owned(), b"not-a-secret".to_vec())].into(),
                            r#type: "Opaque".into(),
                        }),
                    })
                    .await
                    .map(drop);
                let created = r.is_ok();
                record("CreateSecret", r);
                if created {
                    let r = api
                        .delete_secret(v1::DeleteSecretRequest {
                            namespace: "default".into(),
                            name,
                            preconditions: None,
                        })
                        .await
                        .map(drop);
                    record("DeleteSecret", r);
                }
                tokio::select! {
                    _ = stopped.changed() => {}
                    () = tokio::time::sleep(Duration::from_millis(20)) => {}
                }
            }
            report
        });
        ApiLoad {
            stop,
            task,
            watches,
        }
    }

    /// Stops the load and returns what it saw.
    pub async fn stop(self) -> LoadReport {
        let _ = self.stop.send(true);
        let mut report = self.task.await.expect("the API load task");
        for watch in self.watches {
            report.requests += 1;
            if let Some(broke) = watch.await.expect("a watch task") {
                report.failures.push(broke);
            }
        }
        report
    }
}
