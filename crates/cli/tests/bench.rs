//! `flotilla bench` as a real process, on small numbers: the failover bench on MemStore and
//! on a real etcd completes and prints every stage, the rate and the floor; the store bench
//! prints its table. (Timings are printed, never asserted.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use flotilla_store::testing::EtcdServer;

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

/// Every stage line reports all `n` bindings, and the summary lines are there.
fn assert_failover_report(out: &str, n: usize) {
    assert!(
        out.contains(&format!(
            "failover of {n} bindings off cluster-000 (1 of 5 clusters; {n} completed)"
        )),
        "{out}"
    );
    for stage in [
        "evicted",
        "rescheduled",
        "Works applied",
        "Ready",
        "task removed",
    ] {
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
    assert!(out.contains("NoExecute taint"), "{out}");
    assert!(out.contains("bindings/s"), "{out}");
    assert!(out.contains("the floor (target ≤ 3.5×)"), "{out}");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_bench_on_etcd_prints_the_etcd_floor() {
    let etcd = EtcdServer::start().await;
    let endpoints = etcd.endpoints().join(",");
    let out = tokio::task::spawn_blocking(move || {
        ok(
            &[
                "bench",
                "failover",
                "--clusters",
                "5",
                "--bindings",
                "50",
                "--store",
                "etcd",
                "--etcd-endpoints",
                &endpoints,
                "--etcd-prefix",
                "/flotilla-cli-test",
            ],
            Duration::from_secs(240),
        )
    })
    .await
    .unwrap();
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
