//! A real etcd for tests and benchmarks (feature `test-util`). Never a silent skip.
//!
//! ```text
//!   EtcdServer::start()       (a) FLOTILLA_ETCD_ENDPOINTS set → use it (shared: isolate by
//!                                 a unique key namespace per test, see EtcdServer::store)
//!   EtcdServer::dedicated()   (b) `docker info` answers and image flotilla/etcd-local:3.4.23
//!        │  skips (a)             exists → a container on a free 127.0.0.1 port (docker rm -f
//!        │                        on drop)
//!        │                    (c) `etcd` on PATH → a child on free 127.0.0.1 ports with a temp
//!        │                        data dir (killed on drop)
//!        ▼                    (d) otherwise: panic, saying how to install etcd
//!   wait until a status call answers (10 s at most)
//! ```
//!
//! `FLOTILLA_ETCD_SOURCE=docker|binary` forces (b) or (c).
//!
//! Use [`EtcdServer::dedicated`] for anything that compacts: compaction is global to an etcd.
//! A small `sh` watchdog also removes the instance if the test process dies without running
//! destructors (a `kill -9`, a nextest timeout).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::etcd::{EtcdConfig, EtcdStore, EtcdTls};

/// The environment variable naming external etcd endpoints (comma-separated).
pub const ENDPOINTS_ENV: &str = "FLOTILLA_ETCD_ENDPOINTS";
/// The locally built image `docker/etcd-local/build.sh` produces.
pub const DOCKER_IMAGE: &str = "flotilla/etcd-local:3.4.23";
/// Forces the dedicated instance's source: `docker` or `binary` (e.g. to benchmark etcd
/// without Docker's port proxy). Unset: Docker image if present, else the binary.
pub const SOURCE_ENV: &str = "FLOTILLA_ETCD_SOURCE";
/// How long a started etcd has to answer.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// Raft timing for test instances: a 10 ms heartbeat makes a fresh single member elect itself
/// at once and lowers etcd's minimum lease TTL to 1 s (it is 2 s at the defaults).
use crate::etcd::{FAST_RAFT, single_member_flags};

/// Where an [`EtcdServer`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EtcdSource {
    /// `FLOTILLA_ETCD_ENDPOINTS`: shared, not owned.
    External,
    /// A container of [`DOCKER_IMAGE`].
    Docker,
    /// The `etcd` binary from PATH.
    Binary,
}

/// A running etcd that the test can use; owned instances are removed on drop.
#[derive(Debug)]
pub struct EtcdServer {
    endpoints: Vec<String>,
    tls: Option<EtcdTls>,
    source: EtcdSource,
    owned: Option<Owned>,
    started_in: Duration,
}

#[derive(Debug)]
enum Owned {
    Container {
        id: String,
        watchdog: Option<Child>,
    },
    Process {
        child: Child,
        watchdog: Option<Child>,
        _data: tempfile::TempDir,
    },
}

// === impl EtcdServer ===

impl EtcdServer {
    /// An etcd for tests that do not compact: the external one if `FLOTILLA_ETCD_ENDPOINTS`
    /// is set, otherwise a dedicated one. Panics (never skips) if there is none.
    pub async fn start() -> Self {
        if let Ok(endpoints) = std::env::var(ENDPOINTS_ENV) {
            let endpoints: Vec<String> = endpoints
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| {
                    if s.contains("://") {
                        s.to_owned()
                    } else {
                        format!("http://{s}")
                    }
                })
                .collect();
            assert!(!endpoints.is_empty(), "{ENDPOINTS_ENV} is set but empty");
            let mut server = Self {
                endpoints,
                tls: None,
                source: EtcdSource::External,
                owned: None,
                started_in: Duration::ZERO,
            };
            if let Err((_, reason)) = server.wait_ready(None).await {
                server.startup_failed(&reason);
            }
            return server;
        }
        Self::dedicated().await
    }

    /// An etcd of the test's own (Docker image, else the `etcd` binary), for tests that
    /// compact or otherwise affect the whole server. Panics (never skips) if neither exists.
    pub async fn dedicated() -> Self {
        let started = Instant::now();
        let forced = std::env::var(SOURCE_ENV).ok();
        let use_docker = match forced.as_deref() {
            Some("docker") => {
                assert!(
                    docker_image_available(),
                    "{SOURCE_ENV}=docker but no Docker engine answers or {DOCKER_IMAGE} is \
                     missing: run docker/etcd-local/build.sh"
                );
                true
            }
            Some("binary") => false,
            Some(other) => panic!("{SOURCE_ENV}={other}: expected `docker` or `binary`"),
            None => docker_image_available(),
        };
        let mut server = if use_docker {
            let mut server = Self::start_container();
            if let Err((_, reason)) = server.wait_ready(None).await {
                server.startup_failed(&reason);
            }
            server
        } else if let Some(etcd) = find_on_path("etcd") {
            Self::start_binary_ready(&etcd, None).await
        } else {
            panic!(
                "no etcd available for this test: install it with `apt-get install -y etcd-server` \
                 (Debian's etcd 3.4), build the image with `docker/etcd-local/build.sh`, set \
                 {ENDPOINTS_ENV}=http://HOST:PORT, or run `scripts/test.sh`"
            );
        };
        server.started_in = started.elapsed();
        server
    }

    fn start_container() -> Self {
        let out = Command::new("docker")
            .args(["run", "-d", "--rm", "-p", "127.0.0.1::2379"])
            // Data on tmpfs: a test etcd needs no durability, and fsync latency on a loaded
            // 2-core CI machine made requests time out ("etcdserver: request timed out").
            .args(["--tmpfs", "/var/lib/etcd:rw,uid=1000,gid=1000,mode=0700"])
            .arg(DOCKER_IMAGE)
            .args(FAST_RAFT)
            .output()
            .expect("run docker");
        assert!(
            out.status.success(),
            "docker run {DOCKER_IMAGE} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let watchdog = watchdog(&format!("docker rm -f {id} >/dev/null 2>&1"));
        let mut server = Self {
            endpoints: Vec::new(),
            tls: None,
            source: EtcdSource::Docker,
            owned: Some(Owned::Container {
                id: id.clone(),
                watchdog,
            }),
            started_in: Duration::ZERO,
        };
        let port = Command::new("docker")
            .args(["port", &id, "2379/tcp"])
            .output()
            .expect("docker port");
        let mapped = String::from_utf8_lossy(&port.stdout);
        let addr = mapped
            .lines()
            .find(|l| l.starts_with("127.0.0.1:"))
            .unwrap_or_else(|| panic!("docker port gave no 127.0.0.1 mapping: {mapped:?}"))
            .trim()
            .to_owned();
        server.endpoints = vec![format!("http://{addr}")];
        server
    }

    fn start_binary(etcd: &std::path::Path, tls: Option<&TestCerts>, name: &str) -> Self {
        let data = tempfile::Builder::new()
            .prefix("flotilla-etcd-")
            .tempdir_in(fast_temp_dir())
            .expect("temp dir for etcd");
        let client = free_port();
        let peer = free_port();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let client_url = format!("{scheme}://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let log = std::fs::File::create(data.path().join("etcd.log")).expect("etcd log file");
        let mut cmd = Command::new(etcd);
        cmd.args(single_member_flags(
            name,
            &data.path().join("data"),
            &client_url,
            &peer_url,
        ));
        if let Some(certs) = tls {
            cmd.arg(format!("--cert-file={}", certs.server_cert.display()))
                .arg(format!("--key-file={}", certs.server_key.display()))
                .arg(format!("--trusted-ca-file={}", certs.ca.display()))
                .arg("--client-cert-auth");
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn etcd");
        let watchdog = watchdog(&format!("kill {} 2>/dev/null", child.id()));
        Self {
            endpoints: vec![client_url],
            tls: tls.map(TestCerts::client_tls),
            source: EtcdSource::Binary,
            owned: Some(Owned::Process {
                child,
                watchdog,
                _data: data,
            }),
            started_in: Duration::ZERO,
        }
    }

    /// An etcd of the test's own (the binary) that requires mutual TLS with `certs`.
    /// [`EtcdServer::store`] connects with the client certificate.
    pub async fn dedicated_tls(certs: &TestCerts) -> Self {
        let etcd = find_on_path("etcd").unwrap_or_else(|| {
            panic!(
                "no etcd binary for the TLS test: install it with `apt-get install -y etcd-server`"
            )
        });
        let started = Instant::now();
        let mut server = Self::start_binary_ready(&etcd, Some(certs)).await;
        server.started_in = started.elapsed();
        server
    }

    /// The client TLS settings, for a TLS instance.
    pub fn tls(&self) -> Option<&EtcdTls> {
        self.tls.as_ref()
    }

    fn log_path(&self) -> Option<PathBuf> {
        match &self.owned {
            Some(Owned::Process { _data, .. }) => Some(_data.path().join("etcd.log")),
            _ => None,
        }
    }

    /// Waits until the instance answers. For an instance we started, also checks that the
    /// member answering is ours (`member`), since another test's etcd may have taken a port
    /// between our probe and etcd's bind. `Err(true)` means "start again on other ports".
    async fn wait_ready(&mut self, member: Option<&str>) -> Result<(), (bool, String)> {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        let mut last_err = String::new();
        while Instant::now() < deadline {
            if let Some(Owned::Process { child, .. }) = &mut self.owned
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err((true, format!("etcd exited with {status}")));
            }
            let config = EtcdConfig {
                connect_timeout: Duration::from_millis(500),
                request_timeout: Duration::from_millis(500),
                tls: self.tls.clone(),
                ..EtcdConfig::new(self.endpoints.clone())
            };
            match EtcdStore::connect(config).await {
                Ok(store) => match store.status().await {
                    Ok(_) => {
                        let Some(member) = member else { return Ok(()) };
                        let members = store.client().clone().member_list().await;
                        let names: Vec<String> = members
                            .map(|m| m.members().iter().map(|m| m.name().to_owned()).collect())
                            .unwrap_or_default();
                        if names.iter().any(|n| n == member) {
                            return Ok(());
                        }
                        if !names.is_empty() {
                            return Err((true, format!("port taken by another etcd ({names:?})")));
                        }
                    }
                    Err(e) => last_err = e.to_string(),
                },
                Err(e) => last_err = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err((
            false,
            format!("no answer within {STARTUP_TIMEOUT:?}: {last_err}"),
        ))
    }

    /// Panics with the reason and the tail of etcd's log.
    fn startup_failed(&self, reason: &str) -> ! {
        let tail = self
            .log_path()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .map(|s| {
                let mut lines: Vec<&str> = s.lines().rev().take(20).collect();
                lines.reverse();
                lines.join("\n")
            })
            .unwrap_or_default();
        panic!(
            "etcd ({:?} at {:?}) did not start: {reason}\n{tail}",
            self.source, self.endpoints
        );
    }

    /// Starts the binary, retrying on other ports when a port race is detected.
    async fn start_binary_ready(etcd: &std::path::Path, tls: Option<&TestCerts>) -> Self {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let name = unique_member_name();
            let mut server = Self::start_binary(etcd, tls, &name);
            match server.wait_ready(Some(&name)).await {
                Ok(()) => return server,
                Err((true, reason)) if attempt < 5 => {
                    tracing::warn!(
                        attempt,
                        reason,
                        "etcd did not start; retrying on other ports"
                    );
                }
                Err((_, reason)) => server.startup_failed(&reason),
            }
        }
    }

    /// The client URLs.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// Where this etcd came from.
    pub fn source(&self) -> EtcdSource {
        self.source
    }

    /// An etcd this test does not own (e.g. a cluster it started itself), at `endpoints`.
    pub fn external(endpoints: Vec<String>) -> Self {
        Self {
            endpoints,
            tls: None,
            source: EtcdSource::External,
            owned: None,
            started_in: Duration::ZERO,
        }
    }

    /// Freezes this etcd (SIGSTOP, or `docker pause`): every request hangs, and leases do
    /// not run out, until [`EtcdServer::resume`]. Panics on an external etcd, which is not
    /// this test's to pause (use [`EtcdServer::dedicated`]).
    pub fn pause(&self) {
        self.freeze(true);
    }

    /// Ends a [`EtcdServer::pause`].
    pub fn resume(&self) {
        self.freeze(false);
    }

    fn freeze(&self, stop: bool) {
        let status = match &self.owned {
            Some(Owned::Process { child, .. }) => Command::new("kill")
                .arg(if stop { "-STOP" } else { "-CONT" })
                .arg(child.id().to_string())
                .status(),
            Some(Owned::Container { id, .. }) => Command::new("docker")
                .arg(if stop { "pause" } else { "unpause" })
                .arg(id)
                .stdout(Stdio::null())
                .status(),
            None => {
                panic!("an external etcd cannot be paused by a test; use EtcdServer::dedicated()")
            }
        };
        assert!(
            status.is_ok_and(|s| s.success()),
            "could not {} etcd",
            if stop { "pause" } else { "resume" }
        );
    }

    /// How long starting it took (zero for an external etcd).
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// A store under a namespace no other test uses: `/flotilla-test/<name>-<unique>/`.
    pub async fn store(&self, name: &str) -> EtcdStore {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let unique = format!(
            "{:x}{:x}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed) ^ rand::random::<u32>() as u64
        );
        let config = EtcdConfig {
            tls: self.tls.clone(),
            ..EtcdConfig::new(self.endpoints.clone())
                .with_namespace(format!("/flotilla-test/{name}-{unique}/"))
        };
        EtcdStore::connect(config)
            .await
            .expect("connect to test etcd")
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        match self.owned.take() {
            Some(Owned::Container { id, watchdog }) => {
                let _ = Command::new("docker")
                    .args(["rm", "-f", &id])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
                stop(watchdog);
            }
            Some(Owned::Process {
                child, watchdog, ..
            }) => {
                stop(Some(child));
                stop(watchdog);
            }
            None => {}
        }
    }
}

/// Where test etcds keep their data: `/dev/shm` (memory) when it is writable, else the
/// system temp dir. A test etcd needs no durability, and fsync latency on a loaded CI
/// machine made its requests time out.
fn fast_temp_dir() -> std::path::PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    let writable = tempfile::Builder::new()
        .prefix("flotilla-probe-")
        .tempdir_in(shm)
        .is_ok();
    if writable {
        shm.to_owned()
    } else {
        std::env::temp_dir()
    }
}

fn stop(child: Option<Child>) {
    if let Some(mut child) = child {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Runs `cleanup` once this process is gone, so that a killed test leaves nothing behind.
fn watchdog(cleanup: &str) -> Option<Child> {
    let script = format!(
        "while kill -0 {} 2>/dev/null; do sleep 1; done; {cleanup}",
        std::process::id()
    );
    Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()
}

/// A member name no other instance on this machine uses (it also seeds the cluster token).
fn unique_member_name() -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    format!(
        "flotilla-test-{}-{}-{:x}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed),
        rand::random::<u32>()
    )
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// Whether a Docker engine answers and the local etcd image exists (checked once per process).
pub fn docker_image_available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let quiet = |args: &[&str]| {
            Command::new("docker")
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        quiet(&["info"]) && quiet(&["image", "inspect", DOCKER_IMAGE])
    })
}

/// A throw-away CA with a server and a client certificate for 127.0.0.1/localhost, made
/// with the `openssl` command in a temp dir (removed on drop).
#[derive(Debug)]
pub struct TestCerts {
    /// The CA certificate (PEM).
    pub ca: PathBuf,
    /// The server certificate (PEM), signed by the CA.
    pub server_cert: PathBuf,
    /// The server key (PEM).
    pub server_key: PathBuf,
    /// The client certificate (PEM), signed by the CA.
    pub client_cert: PathBuf,
    /// The client key (PEM).
    pub client_key: PathBuf,
    _dir: tempfile::TempDir,
}

impl TestCerts {
    /// Generates the certificates. Panics if `openssl` is missing (`apt-get install openssl`).
    pub fn generate() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("flotilla-certs-")
            .tempdir()
            .expect("temp dir for certificates");
        let p = |name: &str| dir.path().join(name);
        std::fs::write(
            p("ext.cnf"),
            "[req]\ndistinguished_name=dn\n[dn]\n[ext]\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n\
             extendedKeyUsage=serverAuth,clientAuth\n",
        )
        .expect("write openssl config");
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(dir.path())
                .output()
                .unwrap_or_else(|e| {
                    panic!("cannot run openssl ({e}): install it with `apt-get install -y openssl`")
                });
            assert!(
                out.status.success(),
                "openssl {args:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=flotilla-test-ca",
        ]);
        for name in ["server", "client"] {
            let (key, csr, pem) = (
                format!("{name}.key"),
                format!("{name}.csr"),
                format!("{name}.pem"),
            );
            openssl(&[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &csr,
                "-subj",
                &format!("/CN={name}"),
                "-config",
                "ext.cnf",
            ]);
            openssl(&[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &pem,
                "-days",
                "2",
                "-extfile",
                "ext.cnf",
                "-extensions",
                "ext",
            ]);
        }
        Self {
            ca: p("ca.pem"),
            server_cert: p("server.pem"),
            server_key: p("server.key"),
            client_cert: p("client.pem"),
            client_key: p("client.key"),
            _dir: dir,
        }
    }

    /// The client side: CA, client certificate and key.
    pub fn client_tls(&self) -> EtcdTls {
        EtcdTls {
            ca_file: Some(self.ca.clone()),
            cert_file: Some(self.client_cert.clone()),
            key_file: Some(self.client_key.clone()),
            domain_name: None,
        }
    }
}

/// A ResourceBinding `default/<name>` with `replicas` (store, batch-writer and api tests).
pub fn binding(name: &str, replicas: i32) -> flotilla_proto::v1::ResourceBinding {
    use flotilla_proto::v1;
    v1::ResourceBinding {
        metadata: Some(v1::ObjectMeta {
            name: name.into(),
            namespace: "default".into(),
            ..Default::default()
        }),
        spec: Some(v1::ResourceBindingSpec {
            replicas,
            ..Default::default()
        }),
        status: None,
    }
}
