//! `flotilla bench` as a real process, on small numbers: the failover bench on MemStore and
//! on a real etcd completes and prints every stage, the rate and the floor; the store bench
//! prints its table. (Timings are printed, never asserted.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use flotilla_store::testing::EtcdServer;

use crate::assert_has;

const BIN: &str = env!("CARGO_BIN_EXE_flotilla");

fn run(args: &[&str], timeout: Duration) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("out");
    let err_path = dir.path().join("err");
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(std::fs::File::create(&out_path).unwrap()))
        .stderr(Stdio::from(std::fs::File::create(&err_path).unwrap()))
        .spawn()
        .expect("spawn flotilla");
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let s = child.wait().unwrap();
            eprintln!("flotilla {args:?} timed out after {timeout:?}");
            break s;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output {
        status,
        stdout: std::fs::read(&out_path).unwrap_or_default(),
        stderr: std::fs::read(&err_path).unwrap_or_default(),
    }
}

fn ok(args: &[&str], timeout: Duration) -> String {
    let out = run(args, timeout);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "flotilla {args:?}: {:?}\n--- stdout ---\n{stdout}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// What `--json` printed: one JSON object.
fn json_report(out: &str) -> serde_json::Value {
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("not one JSON object ({e}): {out}"))
}

/// The stages of a failover, in the order the bench reports them.
const STAGES: [&str; 5] = [
    "evicted",
    "rescheduled",
    "Works applied",
    "Ready",
    "task removed",
];

/// Every stage line reports all `n` bindings, and the summary lines are there.
fn assert_failover_report(out: &str, n: usize) {
    assert!(
        out.contains(&format!(
            "failover of {n} bindings off cluster-000 (1 of 5 clusters; {n} completed)"
        )),
        "{out}"
    );
    for stage in STAGES {
        let line = out
            .lines()
            .find(|l| l.trim_start().starts_with(stage) && !l.contains("not Ready"))
            .unwrap_or_else(|| panic!("no {stage} line:\n{out}"));
        let cols: Vec<&str> = line[line.find(stage).unwrap() + stage.len()..]
            .split_whitespace()
            .collect();
        assert_eq!(cols.len(), 5, "count p50 p90 p99 max: {line}");
        assert_eq!(cols[0], n.to_string(), "{line}");
        for c in &cols[1..] {
            c.parse::<f64>()
                .unwrap_or_else(|_| panic!("{c} is not seconds: {line}"));
        }
    }
    assert_has(
        out,
        &["NoExecute taint", "bindings/s", "the floor (goal ≤ 3.5×)"],
    );
    // The members ran in their own process: their CPU is told apart from the control
    // plane's, and the control plane's memory is reported.
    assert_has(
        out,
        &[
            "control plane (this process)",
            ", members ",
            "control-plane CPU per failed-over binding",
            "control-plane memory:",
        ],
    );
}

/// Whether `v` is a number.
fn number(v: &serde_json::Value) -> bool {
    v.as_f64().is_some()
}

/// Whether `v` is a number above zero.
fn positive(v: &serde_json::Value) -> bool {
    v.as_f64().is_some_and(|x| x > 0.0)
}

#[test]
fn failover_bench_on_memstore_reports_every_stage() {
    let out = ok(
        &[
            "bench",
            "failover",
            "--clusters",
            "5",
            "--bindings",
            "50",
            "--store",
            "mem",
        ],
        Duration::from_secs(180),
    );
    assert_failover_report(&out, 50);
    assert!(out.contains("store floor (same run, MemStore)"), "{out}");
}

/// Runs `flotilla <args> --store etcd --etcd-endpoints <a new etcd> --etcd-prefix <prefix>`
/// and returns that etcd (still running) and what was printed.
async fn ok_on_etcd(args: &[&str], prefix: &str) -> (EtcdServer, String) {
    let etcd = EtcdServer::start().await;
    let mut argv: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    argv.extend([
        "--store".to_owned(),
        "etcd".to_owned(),
        "--etcd-endpoints".to_owned(),
        etcd.endpoints().join(","),
        "--etcd-prefix".to_owned(),
        prefix.to_owned(),
    ]);
    let out = tokio::task::spawn_blocking(move || {
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        ok(&argv, Duration::from_secs(240))
    })
    .await
    .unwrap();
    (etcd, out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_bench_on_etcd_prints_the_etcd_floor() {
    let (etcd, out) = ok_on_etcd(
        &["bench", "failover", "--clusters", "5", "--bindings", "50"],
        "/flotilla-cli-test",
    )
    .await;
    assert_failover_report(&out, 50);
    assert!(
        out.contains("etcd floor (same run, etcd (raw etcd-client))"),
        "{out}"
    );
    // The run cleaned up after itself on an etcd it does not own.
    let mut client = etcd_client::Client::connect(etcd.endpoints(), None)
        .await
        .unwrap();
    let left = client
        .get(
            "/flotilla-cli-test/",
            Some(
                etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_count_only(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(left.count(), 0, "keys left under /flotilla-cli-test/");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_bench_prints_the_table() {
    let etcd = EtcdServer::start().await;
    let endpoints = etcd.endpoints().join(",");
    let out = tokio::task::spawn_blocking(move || {
        ok(
            &[
                "bench",
                "store",
                "--quick",
                "--etcd-endpoints",
                &endpoints,
                "--etcd-prefix",
                "/flotilla-cli-test-store",
            ],
            Duration::from_secs(240),
        )
    })
    .await
    .unwrap();
    for needle in [
        "EtcdStore",
        "raw etcd",
        "MemStore",
        "DESIGN §7",
        "guarded-64 txn keys/s",
        "watch latency p99 (ms)",
    ] {
        assert!(out.contains(needle), "{needle}:\n{out}");
    }
}

/// `--json`: one JSON object on stdout with every figure (the human report on stderr), and
/// the members' process gone after the run.
#[test]
fn failover_bench_json_carries_every_figure() {
    let out = run(
        &[
            "bench",
            "failover",
            "--clusters",
            "3",
            "--bindings",
            "10",
            "--store",
            "mem",
            "--json",
        ],
        Duration::from_secs(180),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("failover of 10 bindings"), "{stderr}");
    let report = json_report(&stdout);
    assert_eq!(report["affected"], 10, "{report}");
    assert_eq!(report["completed"], 10, "{report}");
    for stage in STAGES {
        assert_eq!(report["stages"][stage]["bindings"], 10, "{stage}: {report}");
    }
    assert!(positive(&report["end_to_end_s"]), "{report}");
    assert!(positive(&report["floor"]["keys_per_s"]), "{report}");
    assert!(
        number(&report["writes"]["binding_versions_per_binding"]),
        "{report}"
    );
    assert!(number(&report["cpu"]["control_plane_s"]), "{report}");
    assert!(number(&report["cpu"]["members_s"]), "{report}");
    assert!(
        positive(&report["memory_mib"]["control_plane_rss"]),
        "{report}"
    );
    assert_eq!(report["config"]["bindings"], 10, "{report}");
    // No members' process outlives the bench (they may take a moment to exit).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let Ok(ps) = Command::new("pgrep")
            .args(["-f", "bench members --clusters 3"])
            .output()
        else {
            break; // (no pgrep here)
        };
        if ps.stdout.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "left behind: {}",
            String::from_utf8_lossy(&ps.stdout)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `--processes`: the six service binaries (built beside `flotilla` by `cargo build
/// --workspace --bins`) run as processes of their own on the run's etcd, and the report gives
/// each one's CPU and memory; afterwards none of them is left running. On MemStore the flag is
/// refused: separate processes share state only through etcd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_bench_runs_each_service_as_its_own_process() {
    let refused = run(
        &["bench", "failover", "--processes", "--store", "mem"],
        Duration::from_secs(60),
    );
    assert!(!refused.status.success());
    assert_has(
        &String::from_utf8_lossy(&refused.stderr),
        &["--processes needs --store etcd"],
    );

    let (_etcd, out) = ok_on_etcd(
        &[
            "bench",
            "failover",
            "--clusters",
            "3",
            "--bindings",
            "10",
            "--processes",
            "--json",
        ],
        "/flotilla-cli-test-processes",
    )
    .await;
    let report = json_report(&out);
    assert_eq!(report["completed"], 10, "{report}");
    assert_eq!(report["cpu"]["processes"], true, "{report}");
    let services = report["cpu"]["services_s"].as_object().unwrap();
    for name in flotilla_suite::Service::ALL.map(|s| s.name()) {
        let s = &services[name];
        assert!(number(&s["cpu_s"]), "{name}: {report}");
        assert!(positive(&s["rss_mib"]), "{name}: {report}");
    }
    assert!(positive(&report["cpu"]["control_plane_s"]), "{report}");
    let ps = Command::new("pgrep")
        .args(["-f", "etcd-prefix=/flotilla-cli-test-processes"])
        .output();
    if let Ok(ps) = ps {
        assert!(
            ps.stdout.is_empty(),
            "left behind: {}",
            String::from_utf8_lossy(&ps.stdout)
        );
    }
}

/// The processes whose command line names `prefix` (the service processes of one bench).
fn processes_of(prefix: &str) -> String {
    let ps = Command::new("pgrep")
        .args(["-af", &format!("etcd-prefix={prefix}")])
        .output()
        .expect("pgrep");
    String::from_utf8_lossy(&ps.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bench_killed_outright_leaves_no_service_process_behind() {
    let etcd = EtcdServer::start().await;
    let prefix = "/flotilla-cli-test-sigkill";
    let mut bench = Command::new(BIN)
        .args([
            "bench",
            "failover",
            "--clusters",
            "3",
            "--bindings",
            "2000",
            "--processes",
        ])
        .args(["--store", "etcd", "--etcd-prefix", prefix])
        .args(["--etcd-endpoints", &etcd.endpoints().join(",")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn flotilla");
    let deadline = Instant::now() + Duration::from_secs(120);
    let services = loop {
        let found = processes_of(prefix);
        if flotilla_suite::Service::ALL
            .iter()
            .all(|s| found.contains(&format!("flotilla-{}", s.name())))
        {
            break found;
        }
        assert!(
            bench.try_wait().unwrap().is_none(),
            "the bench ended before its services were up"
        );
        assert!(Instant::now() < deadline, "services not up: {found}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // SIGKILL: the bench runs no clean-up of its own
    bench.kill().unwrap();
    bench.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = processes_of(prefix);
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still running 30 s after the bench was killed (started: {services}): {left}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[test]
fn a_service_tied_to_its_parent_still_stops_on_sigterm() {
    // started as `bench --processes` starts it: stdin a pipe held open by the parent
    let bin = std::path::Path::new(BIN).with_file_name("flotilla-taint-manager");
    let mut service = Command::new(bin)
        .args([
            "--store",
            "mem",
            "--grpc-addr",
            "127.0.0.1:0",
            "--admin-addr",
            "127.0.0.1:0",
        ])
        .env(flotilla_runtime::EXIT_WITH_PARENT_ENV, "1")
        .env("FLOTILLA_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn flotilla-taint-manager");
    let _held = service.stdin.take();
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        service.try_wait().unwrap().is_none(),
        "it runs while stdin is open"
    );
    let term = Command::new("kill")
        .args(["-TERM", &service.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = service.try_wait().unwrap() {
            break s;
        }
        if Instant::now() >= deadline {
            let _ = service.kill();
            panic!("still running 20 s after SIGTERM: stdin's read held the runtime");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_bench_reports_decisions_and_the_service_on_etcd() {
    let (_etcd, out) = ok_on_etcd(
        &[
            "bench",
            "schedule",
            "--clusters",
            "5",
            "--bindings",
            "200",
            "--rounds",
            "1",
            "--json",
        ],
        "/flotilla-cli-test-schedule",
    )
    .await;
    let report = json_report(&out);
    for shape in ["first_placement", "failover"] {
        assert!(
            positive(&report["decisions_per_s"][shape]),
            "{shape}: {report}"
        );
    }
    assert_eq!(report["with_writes"]["store"], "etcd", "{report}");
    assert!(
        positive(&report["with_writes"]["bindings_per_s"]),
        "{report}"
    );
    assert!(
        number(&report["with_writes"]["floor"]["keys_per_s"]),
        "{report}"
    );
}

#[test]
fn latency_and_idle_benches_report_their_figures() {
    let out = ok(
        &[
            "bench", "latency", "--rounds", "2", "--store", "mem", "--json",
        ],
        Duration::from_secs(180),
    );
    let report = json_report(&out);
    assert_eq!(report["rounds"], 2, "{report}");
    assert!(positive(&report["p50_s"]), "{report}");
    assert!(number(&report["floor_s"]), "{report}");

    let out = ok(
        &[
            "bench",
            "idle",
            "--clusters",
            "5",
            "--window",
            "2s",
            "--store",
            "mem",
            "--json",
        ],
        Duration::from_secs(180),
    );
    let report = json_report(&out);
    assert_eq!(report["clusters"], 5, "{report}");
    assert!(number(&report["control_plane_cores"]), "{report}");
    assert!(number(&report["heartbeats_cpu_s"]), "{report}");
}

#[test]
fn bad_flags_are_explained() {
    let out = run(
        &["bench", "failover", "--clusters", "1", "--store", "mem"],
        Duration::from_secs(30),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--clusters must be at least 2"), "{err}");
}
