//! The service binaries as child processes: finding them, starting them on free loopback
//! ports, waiting until they serve, and the api client with its bearer token.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use flotilla_proto::v1;

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
    eventually(timeout, &format!("{addr} to serve"), || async {
        serving(addr).await.then_some(())
    })
    .await;
}

/// Whether the gRPC server at `addr` answers its health check with SERVING now (within a
/// second: whatever else holds the port may accept and never answer).
pub async fn serving(addr: &str) -> bool {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;
    let Ok(endpoint) = tonic::transport::Endpoint::from_shared(format!("http://{addr}")) else {
        return false;
    };
    let endpoint = endpoint
        .connect_timeout(Duration::from_secs(1))
        .timeout(Duration::from_secs(1));
    let Ok(channel) = endpoint.connect().await else {
        return false;
    };
    let answer = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await;
    answer.is_ok_and(|r| r.into_inner().status == 1)
}

/// The services of the control plane, by binary name without `flotilla-`: the one registry
/// that `flotilla up` and `flotilla bench` start from too.
pub fn control_plane() -> impl Iterator<Item = &'static str> {
    flotilla_suite::Service::ALL.into_iter().map(|s| s.name())
}

/// The stdout of a finished command, asserting that it succeeded: `what` names the command in
/// the failure message, which carries its stdout and stderr.
pub fn success_stdout(what: &str, out: std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
