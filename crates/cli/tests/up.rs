//! `flotilla up` as a real process: the demo runs to the end with compressed timers and
//! narrates the seed scenario in order; plain `up` prints its listen table, serves (gRPC
//! health SERVING on the api, admin `/readyz`) and stops cleanly on SIGTERM.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_flotilla");

/// Waits for `child` up to `timeout`; kills it if it is still running then.
fn wait(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Spawns `flotilla` with `args` in `dir`, its output to `up.out` and its log to `up.log`;
/// returns the child and those two paths.
fn spawn_up(dir: &Path, args: &[&str]) -> (Child, PathBuf, PathBuf) {
    let out_path = dir.join("up.out");
    let log_path = dir.join("up.log");
    let out = std::fs::File::create(&out_path).unwrap();
    let child = Command::new(BIN)
        .args(args)
        .arg("--log-file")
        .arg(&log_path)
        .stdin(Stdio::null())
        .stdout(Stdio::from(out.try_clone().unwrap()))
        .stderr(Stdio::from(out))
        .spawn()
        .unwrap_or_else(|e| panic!("spawn flotilla {args:?}: {e}"));
    (child, out_path, log_path)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn tail(path: &Path, lines: usize) -> String {
    let text = read(path);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Asserts that `needles` occur in `text` in this order, each exactly once.
fn assert_in_order(text: &str, needles: &[&str]) {
    let mut from = 0;
    for n in needles {
        assert_eq!(
            text.matches(n).count(),
            1,
            "{n:?} should be narrated exactly once:\n{text}"
        );
        let at = text[from..]
            .find(n)
            .unwrap_or_else(|| panic!("{n:?} missing or out of order after byte {from}:\n{text}"));
        from += at + n.len();
    }
}

#[test]
fn demo_narrates_the_seed_failover_in_order_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let base = crate::pick_base(20050);
    let (mut child, out_path, log_path) = spawn_up(
        dir.path(),
        &[
            "up",
            "--demo",
            "--base-port",
            &base.to_string(),
            "--status-update-frequency=200ms",
            "--probe-timeout=300ms",
            "--failure-threshold=500ms",
            "--success-threshold=500ms",
            "--failover-eviction-timeout=500ms",
            "--default-toleration-seconds=0",
            "--pod-startup-delay=300ms",
            "--status-sync-period=200ms",
            "--log=info",
        ],
    );
    let status = wait(&mut child, Duration::from_secs(240));
    let text = read(&out_path);
    let ok = status.is_some_and(|s| s.success());
    assert!(
        ok,
        "flotilla up --demo ended with {status:?}\n--- output ---\n{text}\n--- log (tail) ---\n{}",
        tail(&log_path, 40)
    );
    assert!(
        text.contains(&format!("api                 127.0.0.1:{base}")),
        "{text}"
    );
    assert_in_order(
        &text,
        &[
            "member clusters Ready: member1, member2, member3",
            "created Deployment default/nginx (3 replicas)",
            "created PropagationPolicy default/nginx-propagation",
            "scheduled: ResourceBinding default/nginx-deployment → member1:1, member2:2",
            "running: member1 1/1 Ready, member2 2/2 Ready",
            "✗ member1 fails",
            "member1 Ready=False (ClusterNotReachable)",
            "member1 tainted cluster.karmada.io/not-ready:NoSchedule",
            "member1 tainted cluster.karmada.io/not-ready:NoExecute",
            "eviction task created (TaintUntolerated, producer TaintManager, purge mode gracefully)",
            "scheduler: rescheduled to member2:3",
            "member2: new replicas Ready (3/3)",
            "graceful-eviction: eviction task removed",
            "member1's old Work is marked for deletion and waits for member1",
            "✓ member1 heals",
            "member1 Ready=True again",
            "member1's taints removed",
            "old Work deleted",
            "no move back: nginx stays on member2:3",
            "demo complete",
            "Stopped.",
        ],
    );
}

/// `GET path` on `addr` over HTTP/1.0; the status code.
fn http_status(addr: &str, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut response = String::new();
    s.read_to_string(&mut response).ok()?;
    response.split_whitespace().nth(1)?.parse().ok()
}

async fn serving(addr: &str) -> bool {
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus};
    let Ok(channel) = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
    else {
        return false;
    };
    let mut client = HealthClient::new(channel);
    for service in ["", "flotilla.v1.Api"] {
        let ok = client
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .is_ok_and(|r| r.into_inner().status == ServingStatus::Serving as i32);
        if !ok {
            return false;
        }
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_prints_where_it_listens_serves_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let base = crate::pick_base(20050);
    let kubeconfig = dir.path().join("up.kubeconfig");
    let (mut child, out_path, log_path) = spawn_up(
        dir.path(),
        &[
            "up",
            "--base-port",
            &base.to_string(),
            "--members",
            "a,b",
            "--write-kubeconfig",
            kubeconfig.to_str().unwrap(),
        ],
    );

    // The table, once everything serves.
    let deadline = Instant::now() + Duration::from_secs(90);
    while !read(&out_path).contains("Press Ctrl-C to stop.") {
        assert!(
            child.try_wait().unwrap().is_none(),
            "flotilla up exited early:\n{}\n{}",
            read(&out_path),
            tail(&log_path, 30)
        );
        assert!(
            Instant::now() < deadline,
            "no listen table within 90s:\n{}",
            read(&out_path)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let table = read(&out_path);
    for (name, offset) in [
        ("api", 0),
        ("cluster-health", 1),
        ("taint-manager", 2),
        ("scheduler", 3),
        ("graceful-eviction", 4),
        ("work-executor", 5),
    ] {
        let line = table
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} line in:\n{table}"));
        assert!(
            line.contains(&format!("127.0.0.1:{}", base + offset))
                && line.contains(&format!("127.0.0.1:{}", base + 20 + offset)),
            "{name}: {line}"
        );
    }
    assert!(
        table.contains(&format!("http://127.0.0.1:{}", base + 11)),
        "{table}"
    );
    assert!(
        table.contains(&format!("http://127.0.0.1:{}", base + 12)),
        "{table}"
    );
    assert!(
        table.contains("access: open, no credentials") && table.contains("loopback only"),
        "up says that it is open and where: {table}"
    );

    // It serves: gRPC health on the api, /readyz on an admin port.
    let api = format!("127.0.0.1:{base}");
    assert!(serving(&api).await, "the api does not report SERVING");
    assert_eq!(
        http_status(&format!("127.0.0.1:{}", base + 23), "/readyz"),
        Some(200),
        "the scheduler's admin /readyz"
    );

    // The kubeconfig it wrote (and named) takes the real kubectl to its Kubernetes API; the
    // one `flotilla kubeconfig` prints for it does the same.
    assert!(
        table.contains(&format!("kubeconfig: {}", kubeconfig.display())),
        "{table}"
    );
    let kubectl = |config: &Path| {
        let out = Command::new("kubectl")
            .arg(format!("--kubeconfig={}", config.display()))
            .args(["get", "clusters", "-o", "name"])
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (ok, out) = kubectl(&kubeconfig);
    assert!(ok, "kubectl --kubeconfig: {out}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "cluster.cluster.karmada.io/a",
            "cluster.cluster.karmada.io/b"
        ]
    );
    let printed = dir.path().join("printed.kubeconfig");
    let made = Command::new(BIN)
        .args([
            "kubeconfig",
            "--server",
            &format!("http://127.0.0.1:{}", base + 6),
            "-o",
            printed.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let (ok, out) = kubectl(&printed);
    assert!(ok && out.contains("cluster.cluster.karmada.io/a"), "{out}");

    // SIGTERM stops everything gracefully.
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = wait(&mut child, Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| s.success()),
        "after SIGTERM: {status:?}\n{}",
        read(&out_path)
    );
    assert!(read(&out_path).contains("Stopped."));
    assert!(
        TcpListener::bind(("127.0.0.1", base)).is_ok(),
        "the api port is still taken after exit"
    );
}

#[test]
fn a_taken_port_is_a_clear_error() {
    let base = crate::pick_base(20050);
    let _taken = TcpListener::bind(("127.0.0.1", base + 3)).unwrap();
    let out = Command::new(BIN)
        .args(["up", "--base-port", &base.to_string()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "cannot listen on 127.0.0.1:{} for scheduler",
            base + 3
        )) && err.contains("--base-port"),
        "{err}"
    );
}
