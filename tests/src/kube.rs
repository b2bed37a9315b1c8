//! Real Kubernetes API servers as member clusters (docs/real-kubernetes.md).
//!
//! ```text
//!   RealMember::start(name)
//!     openssl ─► a CA, the API server's serving certificate (127.0.0.1), a service-account key
//!     kube-apiserver ──► the shared test etcd, under its own --etcd-prefix
//!     kube-controller-manager, kube-scheduler ──► the API server (admin token)
//!     flotilla-member-sim --kube-apiserver (node mode): Nodes + Leases, kubelet for their pods,
//!                          and on --listen a TCP proxy where the faults apply
//!   Flotilla reaches the member at https://127.0.0.1:<proxy>, as a user's kubeconfig says
//! ```
//!
//! The binaries come from `scripts/kube-build.sh` (Kubernetes 1.20.2 from Debian's source
//! package, cached outside the clone): `FLOTILLA_KUBE_BIN` names their directory, else the
//! newest cached build is used. A missing build fails the test with that hint; it is never
//! skipped.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::{Process, eventually, free_port};

/// The directory holding `kube-apiserver`, `kube-controller-manager` and `kube-scheduler`.
pub fn kube_bin_dir() -> PathBuf {
    let has_all = |d: &Path| {
        [
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
        ]
        .iter()
        .all(|b| d.join(b).is_file())
    };
    if let Ok(dir) = std::env::var("FLOTILLA_KUBE_BIN") {
        let dir = PathBuf::from(dir);
        assert!(
            has_all(&dir),
            "FLOTILLA_KUBE_BIN={} lacks kube-apiserver, kube-controller-manager or kube-scheduler",
            dir.display()
        );
        return dir;
    }
    let cache = std::env::var("FLOTILLA_KUBE_CACHE").map_or_else(
        |_| {
            PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()))
                .join(".cache/flotilla/kubernetes")
        },
        PathBuf::from,
    );
    let mut found: Vec<PathBuf> = std::fs::read_dir(&cache)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|d| has_all(d) && d.join(".recipe").is_file())
        .collect();
    found.sort();
    found.pop().unwrap_or_else(|| {
        panic!(
            "no Kubernetes binaries in {}: run scripts/kube-build.sh (scripts/test.sh does), or \
             set FLOTILLA_KUBE_BIN to a directory holding kube-apiserver, \
             kube-controller-manager and kube-scheduler",
            cache.display()
        )
    })
}

/// Runs `program args`, panicking with its output when it fails.
fn run(program: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    crate::success_stdout(&format!("{program} {args:?}"), out)
}

/// The member's certificates and keys, made with openssl.
fn make_pki(dir: &Path) {
    let p = |f: &str| dir.join(f).display().to_string();
    run(
        "openssl",
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=flotilla-test-member-ca",
            "-keyout",
            &p("ca-key.pem"),
            "-out",
            &p("ca.pem"),
        ],
    );
    run(
        "openssl",
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=kube-apiserver",
            "-keyout",
            &p("apiserver-key.pem"),
            "-out",
            &p("apiserver.csr"),
        ],
    );
    std::fs::write(
        dir.join("san.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost,IP:192.0.2.1,DNS:kubernetes.default.svc\n",
    )
    .expect("write san.cnf");
    run(
        "openssl",
        &[
            "x509",
            "-req",
            "-in",
            &p("apiserver.csr"),
            "-CA",
            &p("ca.pem"),
            "-CAkey",
            &p("ca-key.pem"),
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            &p("apiserver.pem"),
            "-extfile",
            &p("san.cnf"),
        ],
    );
    run("openssl", &["genrsa", "-out", &p("sa.key"), "2048"]);
}

/// A kubeconfig with one context `name` for `server`, its CA embedded (as kind writes
/// them) and a token.
fn kubeconfig(name: &str, server: &str, ca: &Path, token: &str) -> String {
    use base64::Engine as _;
    let ca = std::fs::read(ca).expect("read ca.pem");
    let ca = base64::engine::general_purpose::STANDARD.encode(ca);
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: {name}\n\
         clusters:\n- name: {name}\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n\
         users:\n- name: {name}-admin\n  user:\n    token: {token}\n\
         contexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}-admin\n"
    )
}

/// One member cluster on a real kube-apiserver (see the module docs).
pub struct RealMember {
    /// The cluster's name (also its kubeconfig context's).
    pub name: String,
    /// `https://127.0.0.1:<port>` of the API server itself.
    pub apiserver: String,
    /// `https://127.0.0.1:<port>` of member-sim's proxy: where Flotilla reaches the member
    /// (and where `unreachable` cuts it off).
    pub endpoint: String,
    /// member-sim's control address (flotilla.v1.MemberSim, faults ignored).
    pub control_addr: String,
    /// The CA of the API server's certificate.
    pub ca: PathBuf,
    /// A kubeconfig whose context `name` reaches the member through the proxy as
    /// cluster-admin (the "user's kubeconfig" the README's steps start from).
    pub kubeconfig: PathBuf,
    /// A kubeconfig straight to the API server, for the tests' own looks (faults bypassed).
    pub direct_kubeconfig: PathBuf,
    /// This member's files (certificates, kubeconfigs, logs).
    pub dir: PathBuf,
    /// The processes: apiserver, controller-manager, scheduler, member-sim.
    pub processes: Vec<Process>,
}

impl RealMember {
    /// Starts a member `name` on `etcd` (endpoints, comma-separated) in `dir`, with `nodes`
    /// simulated Nodes taking `capacity` pods in all, pods Ready `startup` after they are
    /// bound; returns once the API server is ready and every node is Ready.
    pub async fn start(
        dir: &Path,
        name: &str,
        etcd: &str,
        nodes: u32,
        capacity: u32,
        startup: &str,
    ) -> Self {
        Self::start_sized(dir, name, etcd, nodes, capacity, startup, "8").await
    }

    /// [`RealMember::start`], each node with `node_cpu` allocatable CPU (member-sim's
    /// `--node-cpu`, a quantity), so that the real kube-scheduler leaves Pending the pods
    /// whose CPU requests fit no node.
    pub async fn start_sized(
        dir: &Path,
        name: &str,
        etcd: &str,
        nodes: u32,
        capacity: u32,
        startup: &str,
        node_cpu: &str,
    ) -> Self {
        let bins = kube_bin_dir();
        let dir = dir.join(name);
        std::fs::create_dir_all(&dir).expect("member dir");
        make_pki(&dir);
        let p = |f: &str| dir.join(f).display().to_string();
        let token = format!("admin-{:016x}", rand::random::<u64>());
        std::fs::write(
            dir.join("tokens.csv"),
            format!("{token},admin,admin,system:masters\n"),
        )
        .expect("tokens.csv");
        std::fs::write(dir.join("admin.token"), &token).expect("admin.token");
        let port = free_port();
        let apiserver = format!("https://127.0.0.1:{port}");
        let ca = dir.join("ca.pem");
        let direct_kubeconfig = dir.join("direct.kubeconfig");
        std::fs::write(
            &direct_kubeconfig,
            kubeconfig(name, &apiserver, &ca, &token),
        )
        .expect("direct kubeconfig");
        let user_kubeconfig = dir.join("admin.kubeconfig");
        let prefix = format!("/kube-{name}-{:08x}", rand::random::<u32>());
        let mut processes = Vec::new();
        let args = |a: &[String]| a.to_vec();
        processes.push(Process::spawn_program(
            &dir,
            &format!("{name}-kube-apiserver"),
            &bins.join("kube-apiserver"),
            &args(&[
                format!("--etcd-servers={etcd}"),
                format!("--etcd-prefix={prefix}"),
                format!("--secure-port={port}"),
                "--bind-address=127.0.0.1".into(),
                // must not be a loopback address; a documentation address works
                "--advertise-address=192.0.2.1".into(),
                format!("--tls-cert-file={}", p("apiserver.pem")),
                format!("--tls-private-key-file={}", p("apiserver-key.pem")),
                format!("--client-ca-file={}", p("ca.pem")),
                format!("--token-auth-file={}", p("tokens.csv")),
                "--authorization-mode=RBAC".into(),
                format!("--service-account-key-file={}", p("sa.key")),
                format!("--service-account-signing-key-file={}", p("sa.key")),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
                "--insecure-port=0".into(),
                "--service-cluster-ip-range=10.96.0.0/24".into(),
                "--profiling=false".into(),
            ]),
            &[],
        ));
        let mut member = Self {
            name: name.into(),
            apiserver,
            endpoint: String::new(),
            control_addr: String::new(),
            ca,
            kubeconfig: user_kubeconfig,
            direct_kubeconfig: direct_kubeconfig.clone(),
            dir: dir.clone(),
            processes,
        };
        eventually(
            Duration::from_secs(60),
            "the API server is ready",
            || async {
                let (ok, out) = member.kubectl(&["get", "--raw", "/readyz"]).await;
                (ok && out.trim() == "ok").then_some(())
            },
        )
        .await;
        // the controller manager and the scheduler, on the API server directly
        let kc = direct_kubeconfig.display().to_string();
        for (component, own) in [
            (
                "kube-controller-manager",
                vec![
                    format!("--service-account-private-key-file={}", p("sa.key")),
                    format!("--root-ca-file={}", p("ca.pem")),
                    "--use-service-account-credentials=false".into(),
                    "--controllers=*".into(),
                ],
            ),
            ("kube-scheduler", vec![]),
        ] {
            let mut flags = vec![
                format!("--kubeconfig={kc}"),
                "--leader-elect=false".into(),
                "--port=0".into(),
                "--secure-port=0".into(),
            ];
            flags.extend(own);
            member.processes.push(Process::spawn_program(
                &dir,
                &format!("{name}-{component}"),
                &bins.join(component),
                &flags,
                &[],
            ));
        }
        // member-sim last, on ports picked just before it starts: ports picked before the API
        // server's start-up may be taken by another test's process by now (a CI run saw
        // "Address already in use"); when they are, it exits, and starts again on others.
        for attempt in 1.. {
            let proxy = free_port();
            member.endpoint = format!("https://127.0.0.1:{proxy}");
            member.control_addr = format!("127.0.0.1:{}", free_port());
            std::fs::write(
                &member.kubeconfig,
                kubeconfig(name, &member.endpoint, &member.ca, &token),
            )
            .expect("admin kubeconfig");
            let control_addr = member.control_addr.clone();
            let mut sim = Process::spawn(
                &dir,
                &format!("{name}-member-sim"),
                "flotilla-member-sim",
                &args(&[
                    format!("--name={name}"),
                    format!("--listen=127.0.0.1:{proxy}"),
                    format!("--control-listen={control_addr}"),
                    format!("--kube-apiserver={}", member.apiserver),
                    format!("--kube-ca={}", p("ca.pem")),
                    format!("--kube-token-file={}", p("admin.token")),
                    format!("--nodes={nodes}"),
                    format!("--capacity={capacity}"),
                    format!("--node-cpu={node_cpu}"),
                    format!("--pod-startup-delay={startup}"),
                ]),
            );
            let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
            let serving = loop {
                if sim.exited() {
                    break false;
                }
                if crate::serving(&control_addr).await {
                    break true;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "timed out after 20s waiting for {control_addr} to serve"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            if serving {
                member.processes.push(sim);
                break;
            }
            assert!(attempt < 3, "member-sim exited three times: {}", sim.log());
            eprintln!(
                "member-sim exited (attempt {attempt}); starting it on other ports: {}",
                sim.log()
            );
        }
        eventually(Duration::from_secs(60), "every node Ready", || async {
            let (ok, out) = member
                .kubectl(&[
                    "get",
                    "nodes",
                    "-o",
                    "jsonpath={range .items[*]}{.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}",
                ])
                .await;
            let ready = out.lines().filter(|l| l.trim() == "True").count();
            (ok && ready == nodes as usize).then_some(())
        })
        .await;
        // the default ServiceAccount, which pods need, exists once the controllers run
        eventually(
            Duration::from_secs(60),
            "the default ServiceAccount",
            || async {
                let (ok, _) = member
                    .kubectl(&["get", "serviceaccount", "default", "-n", "default"])
                    .await;
                ok.then_some(())
            },
        )
        .await;
        member
    }

    /// The real kubectl straight to the API server as cluster-admin: (success, stdout +
    /// stderr).
    pub async fn kubectl(&self, args: &[&str]) -> (bool, String) {
        // (kubectl is installed by scripts/test.sh)
        let mut command = tokio::process::Command::new("kubectl");
        command
            .arg(format!("--kubeconfig={}", self.direct_kubeconfig.display()))
            .args(args);
        crate::command_output(&mut command).await
    }

    /// [`RealMember::kubectl`] that must succeed; its stdout.
    pub async fn kubectl_ok(&self, args: &[&str]) -> String {
        let (ok, out) = self.kubectl(args).await;
        assert!(ok, "kubectl {args:?} on {}: {out}", self.name);
        out
    }

    /// A JSON object from `kubectl get -o json`, or `None` when it does not exist.
    pub async fn get_json(&self, args: &[&str]) -> Option<serde_json::Value> {
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", "json"]);
        let (ok, out) = self.kubectl(&a).await;
        if !ok {
            assert!(out.contains("NotFound"), "kubectl {a:?}: {out}");
            return None;
        }
        Some(serde_json::from_str(&out).expect("kubectl -o json"))
    }

    /// A [`flotilla_member::Target`] of this API server (its CA), as its admin (a token file).
    pub fn admin_target(&self) -> flotilla_member::Target {
        let mut target = flotilla_member::Target::plain(self.endpoint.clone());
        target.ca_pem = Some(std::fs::read(&self.ca).expect("the API server's CA"));
        target.token_file = Some(self.dir.join("admin.token"));
        target
    }

    /// Every process's log.
    pub fn dump_logs(&self) {
        for p in &self.processes {
            eprintln!("----- {} -----\n{}", p.name, p.log());
        }
    }
}

/// The minor version of the `kubectl` on PATH (`32` for 1.32), read once. The suite runs
/// with the image's kubectl (1.32) and Debian's (1.20); a few steps use what only newer
/// kubectls have, and say so where they are left out.
pub fn kubectl_minor() -> u32 {
    static MINOR: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *MINOR.get_or_init(|| {
        let out = std::process::Command::new("kubectl")
            .args(["version", "--client", "-o", "json"])
            .output()
            .expect("kubectl runs");
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("kubectl version JSON");
        v["clientVersion"]["minor"]
            .as_str()
            .and_then(|m| m.trim_end_matches('+').parse().ok())
            .expect("a minor version")
    })
}

/// The flag that makes `kubectl get` print `metadata.managedFields`: kubectl 1.21+ hides
/// them without `--show-managed-fields`; older ones always print them and lack the flag, so
/// a flag that changes nothing there (`--show-kind=false`, the default) keeps the arguments.
pub fn show_managed_fields() -> &'static str {
    if kubectl_minor() >= 21 {
        "--show-managed-fields"
    } else {
        "--show-kind=false"
    }
}
