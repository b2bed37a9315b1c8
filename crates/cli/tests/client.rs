//! The client commands end to end: the `flotilla` binary against a real `flotilla up` (its
//! own process, every service on loopback ports, the in-memory store, three member-sims,
//! demo timers), over real sockets.
//!
//! - the seed (Karmada's documented Deployment + PropagationPolicy, weights member1:1
//!   member2:2) applied through `apply -f`, `explain` and `what-if` checked for content,
//!   member1 failed through `cluster fail`, the binding watched (`get rb -w`) to {member2:3};
//! - an invalid file (a NoSchedule toleration with tolerationSeconds, an unknown field)
//!   reports the document, the field and the reason, exits 1 and applies nothing, not even
//!   the valid first document; the server's own INVALID_ARGUMENT is printed with its field;
//! - taint/untaint, cordon/uncordon, join/unjoin, delete, usage errors (exit 2).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use flotilla_core::testing::{deployment_yaml, log_level_field_overrider};

use crate::assert_has;

const BIN: &str = env!("CARGO_BIN_EXE_flotilla");
const TIMEOUT: Duration = Duration::from_secs(120);

/// Karmada's failover documentation (failover-analysis.md, "Divided schedule type"),
/// unchanged: the seed scenario.
const SEED: &str = include_str!("../../kube/testdata/karmada-divided.yaml");

/// A running `flotilla up`, killed (and reaped) on drop.
struct Up {
    child: Child,
    server: String,
    dir: tempfile::TempDir,
}

impl Up {
    fn start() -> Up {
        let dir = tempfile::tempdir().unwrap();
        let base = crate::pick_base(20000);
        let out = std::fs::File::create(dir.path().join("up.out")).unwrap();
        let child = Command::new(BIN)
            .args(["up", "--base-port", &base.to_string(), "--log", "warn"])
            .arg("--log-file")
            .arg(dir.path().join("up.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::from(out.try_clone().unwrap()))
            .stderr(Stdio::from(out))
            .spawn()
            .expect("spawn flotilla up");
        let up = Up {
            child,
            server: format!("127.0.0.1:{base}"),
            dir,
        };
        up.eventually("three Ready clusters", |up| {
            let out = up.cli(&["get", "clusters", "-o", "json"]);
            if !out.status.success() {
                return None;
            }
            let list: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
            let ready = list["items"]
                .as_array()?
                .iter()
                .filter(|c| {
                    c["status"]["conditions"].as_array().is_some_and(|conds| {
                        conds
                            .iter()
                            .any(|x| x["type"] == "Ready" && x["status"] == "True")
                    })
                })
                .count();
            (ready == 3).then_some(())
        });
        up
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .env("FLOTILLA_SERVER", &self.server)
            .env_remove("FLOTILLA_NAMESPACE")
            .stdin(Stdio::null());
        cmd
    }

    fn cli(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run flotilla")
    }

    /// Runs a command that must succeed; returns its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert!(
            out.status.success(),
            "flotilla {args:?} failed ({:?})\nstdout:\n{}\nstderr:\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        serde_json::from_str(&self.ok(&all)).unwrap()
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn eventually<T>(&self, what: &str, mut f: impl FnMut(&Up) -> Option<T>) -> T {
        let start = Instant::now();
        loop {
            if let Some(v) = f(self) {
                return v;
            }
            assert!(
                start.elapsed() < TIMEOUT,
                "timed out after {TIMEOUT:?} waiting for {what}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn logs(&self) -> String {
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        format!(
            "----- flotilla up -----\n{}\n----- services -----\n{}",
            read(&self.dir.path().join("up.out")),
            read(&self.dir.path().join("up.log"))
        )
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `member1:1,member2:2` of a binding in the proto3 JSON mapping.
fn targets(binding: &serde_json::Value) -> String {
    let mut t: Vec<String> = binding["spec"]["clusters"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| format!("{}:{}", c["name"].as_str().unwrap_or(""), c["replicas"]))
                .collect()
        })
        .unwrap_or_default();
    t.sort();
    t.join(",")
}

/// The line of `what-if` output about `binding` (`namespace/name`).
#[track_caller]
fn binding_row<'a>(what_if: &'a str, binding: &str) -> &'a str {
    what_if
        .lines()
        .find(|l| l.starts_with(binding))
        .unwrap_or_else(|| panic!("the binding is not named:\n{what_if}"))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts that `out` exited with 1 and that its standard error says every one of `parts`.
#[track_caller]
fn assert_failed(out: &Output, parts: &[&str]) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_has(&err, parts);
}

#[test]
fn seed_failover_through_the_cli() {
    let up = Up::start();
    let seed = up.write("nginx.yaml", SEED);
    let applied = up.ok(&["apply", "-f", seed.to_str().unwrap()]);
    assert_has(
        &applied,
        &[
            "deployment/nginx created",
            "propagationpolicy/nginx-propagation created",
        ],
    );

    // Scheduled by weight, applied and healthy.
    up.eventually("the binding on member1:1,member2:2, fully applied", |up| {
        let b = up.json(&["get", "rb", "nginx-deployment"]);
        let applied = b["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "FullyApplied" && c["status"] == "True");
        (targets(&b) == "member1:1,member2:2" && applied).then_some(())
    });
    let table = up.ok(&["get", "rb"]);
    assert!(table.starts_with("NAMESPACE   NAME"), "{table}");
    assert_has(&table, &["nginx-deployment", "member1:1,member2:2"]);
    // Re-applying the same file changes nothing.
    let again = up.ok(&["apply", "-f", seed.to_str().unwrap()]);
    assert!(
        again.contains("propagationpolicy/nginx-propagation unchanged"),
        "{again}"
    );

    // Why it is where it is.
    let explain = up.ok(&["explain", "binding", "default/nginx-deployment"]);
    for want in [
        "Runs on:         member1:1,member2:2",
        "Scheduling (Scheduler.Simulate)",
        "ClusterAffinity",
        "member1: no NoExecute taint: stays",
        "Works (WorkExecutor.Plan)",
        "Kept on:          member1,member2",
    ] {
        assert!(explain.contains(want), "missing {want:?} in:\n{explain}");
    }
    let member3 = explain
        .lines()
        .find(|l| l.trim_start().starts_with("member3 "))
        .unwrap_or_else(|| panic!("no filter row for member3:\n{explain}"));
    assert!(
        member3.contains(" no "),
        "member3 is filtered out: {member3}"
    );

    // What if member1 failed: the binding would move to member2 with all three replicas.
    let what_if = up.ok(&["what-if", "fail", "member1"]);
    let row = binding_row(&what_if, "default/nginx-deployment");
    assert!(row.contains("member2:3"), "{what_if}");
    assert!(
        row.contains("after 2s"),
        "demo tolerations are 2s: {what_if}"
    );
    assert!(
        what_if.contains(
            "1 binding(s) would move (0 without room for every replica), 0 would have nowhere \
             to go"
        ),
        "{what_if}"
    );
    // Nothing was changed by the dry runs.
    assert_eq!(
        targets(&up.json(&["get", "rb", "nginx-deployment"])),
        "member1:1,member2:2"
    );

    // Watch the binding while member1 fails.
    let mut watch = up
        .command(&["get", "rb", "nginx-deployment", "-w"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let stdout = watch.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let failed = up.ok(&["cluster", "fail", "member1"]);
    assert!(
        failed.contains("cluster/member1 is now unreachable"),
        "{failed}"
    );
    let start = Instant::now();
    let mut seen = Vec::new();
    let moved = loop {
        match rx.recv_timeout(Duration::from_millis(500)) {
            Ok(line) => {
                let done = line.contains(" member2:3 ");
                seen.push(line);
                if done {
                    break true;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) if start.elapsed() < TIMEOUT => {}
            Err(_) => break false,
        }
    };
    let _ = watch.kill();
    let _ = watch.wait();
    assert!(
        moved,
        "the watch never showed member2:3; it printed:\n{}\n{}",
        seen.join("\n"),
        up.logs()
    );
    assert!(seen[0].starts_with("NAMESPACE"), "a header first: {seen:?}");
    assert!(
        seen[1].contains("member1:1,member2:2"),
        "then the current row: {seen:?}"
    );
    // a row is printed only when a printed column changed (AGE aside), as kubectl does
    let rows: Vec<Vec<&str>> = seen[1..]
        .iter()
        .map(|l| {
            let mut t: Vec<&str> = l.split_whitespace().collect();
            t.pop();
            t
        })
        .collect();
    for pair in rows.windows(2) {
        assert_ne!(pair[0], pair[1], "the same row printed twice: {seen:#?}");
    }

    // The eviction finishes once member2's replicas are Ready.
    up.eventually("{member2:3} without eviction tasks", |up| {
        let b = up.json(&["get", "rb", "nginx-deployment"]);
        let tasks = b["spec"]["gracefulEvictionTasks"]
            .as_array()
            .map_or(0, Vec::len);
        (targets(&b) == "member2:3" && tasks == 0).then_some(())
    });
    let clusters = up.ok(&["get", "clusters"]);
    let m1 = clusters.lines().find(|l| l.starts_with("member1")).unwrap();
    assert!(
        m1.contains("cluster.karmada.io/not-ready:NoExecute"),
        "{clusters}"
    );
    let described = up.ok(&["describe", "rb", "nginx-deployment"]);
    assert_has(
        &described,
        &[
            "Clusters:             member2:3",
            "EvictWorkloadFromCluster",
        ],
    );

    // After the failover, explain says why member1 is gone.
    let explain = up.ok(&["explain", "binding", "nginx-deployment", "-n", "default"]);
    assert!(explain.contains("Runs on:         member2:3"), "{explain}");
    let m1 = explain
        .lines()
        .find(|l| l.trim_start().starts_with("member1 "))
        .unwrap_or_else(|| panic!("no filter row for member1:\n{explain}"));
    assert!(m1.contains("TaintToleration"), "{explain}");

    // explain cluster: member1 as cluster-health sees it now, and what an hour-long outage
    // of member2 would make of it (ClusterHealth.Assess; nothing written).
    let m1 = up.ok(&["explain", "cluster", "member1"]);
    assert_has(
        &m1,
        &[
            "Ready now:       False",
            "cluster.karmada.io/not-ready:NoExecute",
        ],
    );
    let m2 = up.ok(&[
        "explain",
        "cluster",
        "member2",
        "--probe",
        "unreachable",
        "--for",
        "1h",
    ]);
    assert_has(
        &m2,
        &[
            "Ready:           False (ClusterNotReachable)",
            "Taints added:    cluster.karmada.io/not-ready:NoSchedule",
            "CH-11",
        ],
    );
    let still = up.ok(&["get", "cluster", "member2"]);
    assert!(
        !still.contains("not-ready"),
        "explain wrote nothing: {still}"
    );

    let healed = up.ok(&["cluster", "heal", "member1"]);
    assert!(
        healed.contains("is now healthy (was unreachable)"),
        "{healed}"
    );
}

#[test]
fn invalid_input_applies_nothing_and_edits_are_compare_and_swap() {
    let up = Up::start();

    // Document 2 tolerates a NoSchedule taint for a while: invalid (only NoExecute has
    // tolerationSeconds). Document 1, a valid Deployment, must not be created either. An
    // unknown field, likewise.
    let web = SEED.split("---").next().unwrap().replace("nginx", "web");
    let bad = include_str!("../../kube/testdata/toleration-seconds-on-no-schedule.yaml")
        .replace("nginx", "web");
    let unknown = "apiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata:\n  name: typo\n\
             spec:\n  resourceSelectors:\n  - apiVersion: apps/v1\n    kind: Deployment\n    name: web\n  \
             placement:\n    clusterAfinity:\n      clusterNames: [member1]\n";
    for (file, doc, want) in [
        (
            "bad.yaml",
            bad.as_str(),
            &[
                "document 2 (PropagationPolicy default/bad)",
                "spec.placement.clusterTolerations[0].effect",
                "when `tolerationSeconds` is set",
                "nothing was applied",
            ][..],
        ),
        (
            "unknown.yaml",
            unknown,
            &[
                "document 2 (PropagationPolicy default/typo)",
                "spec.placement",
                "unknown field `clusterAfinity`",
            ][..],
        ),
    ] {
        let path = up.write(file, &format!("{web}---\n{doc}"));
        let out = up.cli(&["apply", "-f", path.to_str().unwrap()]);
        assert_failed(&out, want);
        assert!(out.stdout.is_empty(), "nothing reported as applied");
    }

    // Nothing was created.
    let workloads = up.json(&["get", "workloads", "-A"]);
    assert!(
        workloads["items"].as_array().is_none_or(Vec::is_empty),
        "{workloads}"
    );
    let pps = up.json(&["get", "pp", "-A"]);
    assert!(pps["items"].as_array().is_none_or(Vec::is_empty), "{pps}");
    let out = up.cli(&["get", "deploy", "web"]);
    assert_failed(&out, &["not found"]);

    // A rule only the server knows: NoExecute taints in ClusterTaintPolicies are off by
    // default (--allow-no-execute-taint-policy); the server's field violation is printed,
    // naming the document, and the ConfigMap before it in the file is not created either
    // (the server admits the whole file before it writes any of it).
    let ctp = up.write(
        "ctp.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: before-the-policy\ndata:\n  a: b\n---\n\
         apiVersion: policy.karmada.io/v1alpha1\nkind: ClusterTaintPolicy\nmetadata:\n  name: evict\n\
         spec:\n  addOnConditions:\n  - conditionType: Ready\n    operator: NotIn\n    statusValues: [\"True\"]\n  \
         taints:\n  - key: not-ready\n    effect: NoExecute\n",
    );
    let out = up.cli(&["apply", "-f", ctp.to_str().unwrap()]);
    assert_failed(
        &out,
        &[
            "rejected by the server (invalid)",
            "nothing was applied",
            "clustertaintpolicy/evict (document 2 of",
            "spec.taints[0].effect",
        ],
    );
    let out = up.cli(&["get", "workloads", "-A"]);
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("before-the-policy"),
        "the ConfigMap was not created"
    );

    // Taints: CAS updates of the cluster's user taints.
    let tainted = up.ok(&["taint", "cluster", "member3", "maintenance=true:NoSchedule"]);
    assert!(tainted.contains("cluster/member3 tainted"), "{tainted}");
    let row = up.ok(&["get", "cluster", "member3"]);
    assert!(row.contains("maintenance=true:NoSchedule"), "{row}");
    let out = up.cli(&[
        "taint",
        "cluster",
        "member3",
        "maintenance=later:NoSchedule",
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a changed value needs --overwrite"
    );
    up.ok(&[
        "taint",
        "cluster",
        "member3",
        "maintenance=later:NoSchedule",
        "--overwrite",
    ]);
    assert!(
        up.ok(&["get", "cluster", "member3"])
            .contains("maintenance=later:NoSchedule")
    );
    let out = up.cli(&[
        "taint",
        "cluster",
        "member3",
        "cluster.karmada.io/not-ready:NoExecute",
    ]);
    assert_failed(&out, &["belong to cluster-health"]);
    up.ok(&["untaint", "cluster", "member3", "maintenance"]);
    assert!(
        !up.ok(&["get", "cluster", "member3"])
            .contains("maintenance")
    );

    // Cordon adds a NoSchedule taint outside cluster.karmada.io/*; uncordon removes it.
    assert!(up.ok(&["cordon", "member3"]).contains("cordoned"));
    assert!(up.ok(&["cordon", "member3"]).contains("already cordoned"));
    let c = up.json(&["get", "cluster", "member3"]);
    assert_eq!(
        c["spec"]["taints"][0]["key"],
        "cluster.flotilla.io/unschedulable"
    );
    assert_eq!(c["spec"]["taints"][0]["effect"], "NoSchedule");
    assert!(up.ok(&["uncordon", "member3"]).contains("uncordoned"));
    assert!(up.json(&["get", "cluster", "member3"])["spec"]["taints"].is_null());

    // Join and unjoin.
    let joined = up.ok(&[
        "join",
        "member9",
        "--endpoint",
        "http://127.0.0.1:9",
        "--region",
        "eu-central-1",
        "--label",
        "env=test",
    ]);
    assert!(joined.contains("cluster/member9 joined"), "{joined}");
    let c = up.json(&["get", "cluster", "member9"]);
    assert_eq!(c["spec"]["apiEndpoint"], "http://127.0.0.1:9");
    assert_eq!(c["metadata"]["labels"]["env"], "test");
    let gone = up.ok(&["unjoin", "member9"]);
    assert!(gone.contains("cluster/member9"), "{gone}");
    up.eventually("member9 to go", |up| {
        (up.cli(&["get", "cluster", "member9"]).status.code() == Some(1)).then_some(())
    });

    // describe names a cluster's credentials Secret (never its values)
    let member8 = up.write(
        "member8.yaml",
        "apiVersion: cluster.karmada.io/v1alpha1\nkind: Cluster\nmetadata: {name: member8}\n\
         spec:\n  apiEndpoint: http://127.0.0.1:9\n  syncMode: Push\n  \
         secretRef: {namespace: karmada-cluster, name: member8}\n",
    );
    up.ok(&["apply", "-f", member8.to_str().unwrap()]);
    let described = up.ok(&["describe", "cluster", "member8"]);
    assert!(
        described
            .lines()
            .any(|l| l.starts_with("Secret Ref:") && l.ends_with("karmada-cluster/member8")),
        "{described}"
    );
    up.ok(&["unjoin", "member8"]);

    // A workload that may only run on member1 would have nowhere to go if member1 failed.
    let solo = up.write(
        "solo.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: solo}\nspec:\n  replicas: 2\n\
         ---\napiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {name: solo}\n\
         spec:\n  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: solo}]\n  \
         placement:\n    clusterAffinity: {clusterNames: [member1]}\n    \
         replicaScheduling: {replicaSchedulingType: Divided}\n",
    );
    up.ok(&["apply", "-f", solo.to_str().unwrap()]);
    up.eventually("solo on member1:2", |up| {
        (targets(&up.json(&["get", "rb", "solo-deployment"])) == "member1:2").then_some(())
    });
    let what_if = up.ok(&["what-if", "fail", "member1"]);
    let row = binding_row(&what_if, "default/solo-deployment");
    assert!(row.contains("NOWHERE TO GO"), "{what_if}");
    assert_has(
        &what_if,
        &[
            "default/solo-deployment: nowhere to go:",
            "0 binding(s) would move (0 without room for every replica), 1 would have nowhere \
             to go",
        ],
    );
    // SC-4.6: replicas of 60 CPUs, one on each member (100 CPUs each); if member1 failed,
    // member2 would have no room for its replica: what-if says so, and how many
    let big = up.write(
        "big.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: big}\nspec:\n  replicas: 2\n  \
         template:\n    spec:\n      containers:\n        - name: big\n          image: busybox\n          \
         resources: {requests: {cpu: \"60\"}}\n\
         ---\napiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {name: big}\n\
         spec:\n  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: big}]\n  \
         placement:\n    clusterAffinity: {clusterNames: [member1, member2]}\n    \
         replicaScheduling:\n      replicaSchedulingType: Divided\n      \
         replicaDivisionPreference: Weighted\n      weightPreference: {dynamicWeight: AvailableReplicas}\n",
    );
    up.ok(&["apply", "-f", big.to_str().unwrap()]);
    up.eventually("big on member1:1 and member2:1", |up| {
        (targets(&up.json(&["get", "rb", "big-deployment"])) == "member1:1,member2:1").then_some(())
    });
    // (once cluster-health has counted the new pods' CPU into member2's summary)
    let what_if = up.eventually("member2's summary counting big's CPU", |up| {
        let out = up.ok(&["what-if", "fail", "member1"]);
        binding_row(&out, "default/big-deployment")
            .contains("WITHOUT ROOM")
            .then_some(out)
    });
    let row = binding_row(&what_if, "default/big-deployment");
    assert!(row.contains("member2:1 (1 WITHOUT ROOM)"), "{what_if}");
    assert_has(
        &what_if,
        &[
            "default/big-deployment: 1 replica(s) would not fit",
            "not enough to schedule",
            "would move (1 without room for every replica)",
        ],
    );
    up.ok(&["delete", "-f", big.to_str().unwrap()]);
    let events = up.ok(&["get", "events"]);
    assert!(
        events.contains("resourcebinding/solo-deployment"),
        "{events}"
    );
    let described = up.ok(&["describe", "cluster", "member1"]);
    assert_has(&described, &["Sync Mode:            Push", "Ready"]);

    // Apply, then delete, a policy; -o yaml prints the object.
    let seed = up.write("seed.yaml", SEED);
    up.ok(&["apply", "-f", seed.to_str().unwrap()]);
    let yaml = up.ok(&["get", "pp", "nginx-propagation", "-o", "yaml"]);
    assert_has(
        &yaml,
        &["name: nginx-propagation", "replicaSchedulingType: Divided"],
    );
    assert!(
        up.ok(&["delete", "pp", "nginx-propagation"])
            .contains("propagationpolicy/nginx-propagation")
    );
    up.eventually("the policy to go", |up| {
        (up.cli(&["get", "pp", "nginx-propagation"]).status.code() == Some(1)).then_some(())
    });
}

#[test]
fn usage_errors_exit_2_and_unreachable_servers_exit_1() {
    let run = |args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .env_remove("FLOTILLA_SERVER")
            .output()
            .unwrap()
    };
    assert_eq!(run(&["get"]).status.code(), Some(2));
    assert_eq!(run(&["get", "gadgets"]).status.code(), Some(2));
    assert_eq!(
        run(&["taint", "cluster", "m1", "k=v:Sometimes"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(run(&["apply"]).status.code(), Some(2));
    assert_eq!(
        run(&["explain", "binding", "a/b", "--now", "yesterday"])
            .status
            .code(),
        Some(2)
    );
    let out = run(&[
        "get",
        "clusters",
        "--server",
        "127.0.0.1:1",
        "--request-timeout",
        "2s",
    ]);
    assert_failed(&out, &["cannot reach the Flotilla api"]);
    // Every command explains itself with an example.
    for cmd in [
        "apply", "get", "describe", "delete", "taint", "untaint", "cordon", "uncordon", "join",
        "unjoin",
    ] {
        let out = run(&[cmd, "--help"]);
        assert!(out.status.success(), "{cmd} --help");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("flotilla "),
            "{cmd} --help has an example:\n{text}"
        );
    }
    for cmd in [
        &["cluster", "fail", "--help"][..],
        &["cluster", "heal", "--help"],
        &["explain", "binding", "--help"],
        &["what-if", "fail", "--help"],
    ] {
        let out = run(cmd);
        assert!(out.status.success(), "{cmd:?}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("Example"),
            "{cmd:?}"
        );
    }
}

/// A Namespace, and two Deployments `clash` of different API groups.
fn platform() -> String {
    [
        "\
apiVersion: v1
kind: Namespace
metadata:
  name: team-a
  namespace: default
",
        deployment_yaml("clash", None, 1, "app", "nginx").as_str(),
        "\
apiVersion: example.com/v1
kind: Deployment
metadata: {name: clash}
spec: {size: 3}
",
        "\
apiVersion: policy.karmada.io/v1alpha1
kind: ClusterPropagationPolicy
metadata: {name: namespaces}
spec:
  resourceSelectors:
  - {apiVersion: v1, kind: Namespace}
  placement:
    clusterAffinity: {clusterNames: [member1, member2]}
",
    ]
    .join("---\n")
}

/// RM-1 and CR-2 through the CLI: a Namespace becomes a ClusterResourceBinding (`get crb`),
/// and two groups' Deployments of one name are two templates.
#[test]
fn cluster_scoped_templates_and_api_groups_through_the_cli() {
    let up = Up::start();
    let file = up.write("platform.yaml", &platform());
    let out = up.cli(&["apply", "-f", file.to_str().unwrap()]);
    let (stdout, err) = (String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(out.status.success(), "{stdout}\n{err}");
    assert_has(
        &stdout,
        &["namespace/team-a created", "deployment/clash created"],
    );
    assert!(
        stdout.contains("deployment.example.com/clash created"),
        "the other group's Deployment is another object: {stdout}"
    );
    assert!(
        err.contains("metadata.namespace ignored: Namespace is cluster-scoped"),
        "{err}"
    );
    let crb = up.eventually("the Namespace's ClusterResourceBinding on both", |up| {
        let b = up.json(&["get", "crb", "team-a-namespace"]);
        // (0 replicas: the proto3 JSON mapping leaves the field out)
        (targets(&b) == "member1:null,member2:null").then_some(b)
    });
    assert_eq!(crb["metadata"]["namespace"], serde_json::Value::Null);
    let table = up.ok(&["get", "crb"]);
    assert!(table.contains("team-a-namespace"), "{table}");
    let rbs = up.ok(&["get", "rb"]);
    assert!(
        !rbs.contains("team-a-namespace"),
        "not a namespaced binding: {rbs}"
    );
    // kubectl's -A lists the namespaced kind only
    let all = up.ok(&["get", "rb", "-A"]);
    assert!(
        !all.contains("team-a-namespace"),
        "get rb -A lists no ClusterResourceBinding: {all}"
    );
    // kubectl's names for built-in kinds; a cluster-wide one lists without a namespace
    let namespaces = up.ok(&["get", "ns"]);
    assert!(namespaces.contains("team-a"), "{namespaces}");
    // a comma list: one table per kind, in the order given
    let both = up.ok(&["get", "ns,crb"]);
    let (ns_at, crb_at) = (
        both.find("team-a").expect("the Namespace row"),
        both.find("team-a-namespace").expect("the binding row"),
    );
    assert!(ns_at < crb_at, "{both}");
    assert_eq!(
        both.trim_end().split("\n\n").count(),
        2,
        "two tables apart by a blank line: {both}"
    );
    let workloads = up.ok(&["get", "deployments"]);
    assert_eq!(
        workloads.matches("clash").count(),
        2,
        "both groups' Deployments: {workloads}"
    );
    // naming one by its group
    up.ok(&["delete", "workload", "Deployment.example.com/clash"]);
    let left = up.ok(&["get", "deployments"]);
    assert_eq!(left.matches("clash").count(), 1, "{left}");
}

/// kubectl's habits: connection flags before the command, `taint KEY:EFFECT-`, `cordon cluster
/// NAME`, `get policies`, `delete -f`.
#[test]
fn kubectl_habits() {
    let up = Up::start();
    // --server before the command wins over a wrong FLOTILLA_SERVER
    let out = up
        .command(&["--server", &up.server, "get", "clusters"])
        .env("FLOTILLA_SERVER", "127.0.0.1:1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("member1"));

    let taints = |up: &Up| -> Vec<String> {
        let c = up.json(&["get", "cluster", "member1"]);
        c["spec"]["taints"]
            .as_array()
            .map(|ts| {
                ts.iter()
                    .map(|t| format!("{}:{}", t["key"].as_str().unwrap_or(""), t["effect"]))
                    .collect()
            })
            .unwrap_or_default()
    };
    up.ok(&["taint", "cluster", "member1", "maintenance=yes:NoSchedule"]);
    assert_eq!(taints(&up).len(), 1, "{:?}", taints(&up));
    let removed = up.ok(&["taint", "cluster", "member1", "maintenance:NoSchedule-"]);
    assert!(removed.contains("cluster/member1 untainted"), "{removed}");
    assert!(taints(&up).is_empty(), "{:?}", taints(&up));
    // removing a taint that is not there is an error, as in kubectl
    let out = up.cli(&["taint", "cluster", "member1", "maintenance-"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("has no taint maintenance"),
        "{}",
        stderr(&out)
    );

    let cordoned = up.ok(&["cordon", "cluster", "member1"]);
    assert!(cordoned.contains("cluster/member1 cordoned"), "{cordoned}");
    assert_eq!(taints(&up).len(), 1);
    up.ok(&["uncordon", "cluster", "member1"]);
    assert!(taints(&up).is_empty());
    let out = up.cli(&["cordon", "deployment", "member1"]);
    assert!(!out.status.success(), "only clusters are cordoned");

    let seed = up.write("nginx.yaml", SEED);
    up.ok(&["apply", "-f", seed.to_str().unwrap()]);
    let policies = up.ok(&["get", "policies"]);
    assert!(policies.contains("nginx-propagation"), "{policies}");
    let deleted = up.ok(&["delete", "-f", seed.to_str().unwrap()]);
    assert_has(
        &deleted,
        &[
            "deployment/nginx deleted",
            "propagationpolicy/nginx-propagation deleted",
        ],
    );
    let out = up.cli(&["get", "pp", "nginx-propagation"]);
    assert!(!out.status.success(), "the policy is gone");

    // `flotilla describe … | head`: a closed stdout ends the command quietly (no panic),
    // with what a shell reports for a tool a closed pipe ended
    let mut child = up
        .command(&["describe", "cluster", "member1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(141), "{}", stderr(&out));
    assert!(stderr(&out).is_empty(), "quietly: {}", stderr(&out));
}

/// One object of every kind `apply` takes, in Karmada's YAML.
const EVERY_KIND: &str = r#"apiVersion: policy.karmada.io/v1alpha1
kind: ClusterPropagationPolicy
metadata:
  name: configs
spec:
  resourceSelectors:
    - apiVersion: v1
      kind: ConfigMap
  placement:
    clusterAffinity:
      clusterNames: [member1, member2]
    clusterTolerations:
      - key: cluster.karmada.io/not-ready
        operator: Exists
        effect: NoExecute
        tolerationSeconds: 30
    spreadConstraints:
      - spreadByField: cluster
        maxGroups: 2
        minGroups: 1
  failover:
    cluster:
      purgeMode: Gracefully
      failback:
        stabilizationWindowSeconds: 0
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-config
  namespace: default
data:
  config.yaml: "log:\n  level: info\n"
---
apiVersion: policy.karmada.io/v1alpha1
kind: ClusterTaintPolicy
metadata:
  name: not-ready
spec:
  addOnConditions:
    - conditionType: Ready
      operator: NotIn
      statusValues: ["True"]
  removeOnConditions:
    - conditionType: Ready
      operator: In
      statusValues: ["True"]
  taints:
    - key: example.com/not-ready
      effect: NoSchedule
---
apiVersion: policy.karmada.io/v1alpha1
kind: OverridePolicy
metadata:
  name: regional
  namespace: default
spec:
  resourceSelectors:
    - apiVersion: apps/v1
      kind: Deployment
      name: nginx
  overrideRules:
    - targetCluster:
        clusterNames: [member1]
      overriders:
        imageOverrider:
          - predicate:
              path: /spec/template/spec/containers/0/image
            component: Registry
            operator: replace
            value: eu.registry.example.com
        argsOverrider:
          - containerName: nginx
            operator: add
            value: ["--region=eu"]
        plaintext:
          - path: /metadata/annotations/tier
            operator: add
            value: {level: 1}
---
apiVersion: policy.karmada.io/v1alpha1
kind: ClusterOverridePolicy
metadata:
  name: config-level
spec:
  resourceSelectors:
    - apiVersion: v1
      kind: ConfigMap
  overrideRules:
    - overriders:
        labelsOverrider:
          - operator: add
            value: {mesh: eu}
"#;

/// Every kind the CLI applies: [`EVERY_KIND`] and the last overrider of its last policy.
fn every_kind() -> String {
    format!("{EVERY_KIND}{}", log_level_field_overrider(8))
}

/// `get -o yaml` (and `-o json`) of every kind applies back unchanged; a listing (kubectl's
/// `kind: List`) too. Bindings and Works print in Karmada's shape but are the controllers'.
#[test]
fn get_output_applies_back_for_every_kind() {
    let up = Up::start();
    let seed = up.write("seed.yaml", SEED);
    up.ok(&["apply", "-f", seed.to_str().unwrap()]);
    let every = up.write("every.yaml", &every_kind());
    let out = up.ok(&["apply", "-f", every.to_str().unwrap()]);
    assert!(out.contains("overridepolicy/regional created"), "{out}");
    let mut n = 0;
    let mut applies_back = |args: &[&str], format: &str| {
        let mut get = args.to_vec();
        get.extend(["-o", format]);
        let printed = up.ok(&get);
        n += 1;
        let file = up.write(&format!("printed-{n}.{format}"), &printed);
        let out = up.ok(&["apply", "-f", file.to_str().unwrap()]);
        assert!(
            !out.contains("created") && !out.contains("configured") && out.contains("unchanged"),
            "{args:?} -o {format} did not apply back unchanged:\n{out}\nprinted:\n{printed}"
        );
        printed
    };
    let pp = applies_back(&["get", "pp", "nginx-propagation"], "yaml");
    assert!(
        pp.starts_with("apiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\n"),
        "{pp}"
    );
    assert!(
        pp.contains("replicaSchedulingType: Divided") && pp.contains("weight: 2"),
        "{pp}"
    );
    let cpp = applies_back(&["get", "cpp", "configs"], "yaml");
    assert!(
        cpp.contains("effect: NoExecute")
            && cpp.contains("tolerationSeconds: 30")
            && cpp.contains("spreadByField: cluster")
            && cpp.contains("purgeMode: Gracefully"),
        "{cpp}"
    );
    applies_back(&["get", "cpp", "configs"], "json");
    let ctp = applies_back(&["get", "ctp", "not-ready"], "yaml");
    assert!(
        ctp.contains("- 'True'") || ctp.contains("- \"True\""),
        "{ctp}"
    );
    let op = applies_back(&["get", "op", "regional"], "yaml");
    assert!(
        op.contains("operator: replace")
            && op.contains("path: /spec/template/spec/containers/0/image"),
        "Karmada's overrider shape: {op}"
    );
    applies_back(&["get", "cop", "config-level"], "yaml");
    applies_back(&["get", "cop", "config-level"], "json");
    let deploy = applies_back(&["get", "deployment", "nginx"], "yaml");
    assert!(
        deploy.starts_with("apiVersion: apps/v1\nkind: Deployment\n"),
        "the template itself: {deploy}"
    );
    applies_back(&["get", "configmap", "web-config"], "yaml");
    applies_back(&["get", "cluster", "member1"], "yaml");
    // listings: kubectl's List
    let list = applies_back(&["get", "op"], "yaml");
    assert!(list.starts_with("apiVersion: v1\nitems:"), "{list}");
    applies_back(&["get", "clusters"], "json");
    applies_back(&["get", "policies", "-A"], "yaml");

    // the controllers' kinds print in Karmada's shape, and apply says they are not the user's
    let rb = up.eventually("the binding scheduled", |up| {
        let yaml = up.ok(&["get", "rb", "nginx-deployment", "-o", "yaml"]);
        yaml.contains("clusters:").then_some(yaml)
    });
    assert!(
        rb.starts_with("apiVersion: work.karmada.io/v1alpha2\nkind: ResourceBinding\n"),
        "{rb}"
    );
    let file = up.write("rb.yaml", &rb);
    let out = up.cli(&["apply", "-f", file.to_str().unwrap()]);
    assert_failed(&out, &["written by Flotilla's controllers"]);
    let works = up.ok(&["get", "works", "-A", "-o", "json"]);
    let works: serde_json::Value = serde_json::from_str(&works).unwrap();
    assert_eq!(works["kind"], "List");
    assert!(
        works["items"][0]["spec"]["workload"]["manifests"][0].is_object(),
        "a Work's manifest is an object, in Karmada's place: {works}"
    );
    assert!(
        works["items"][0]["metadata"]["namespace"]
            .as_str()
            .is_some_and(|ns| ns.starts_with("karmada-es-")),
        "a Work is in its cluster's execution namespace: {works}"
    );
}
