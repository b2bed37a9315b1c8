//! The default interpreter on real processes: a Divided Job runs a share of its completions
//! on each member (WE-4.2), as Karmada's binding controller divides them, read back from each
//! member's own Kubernetes API with kubectl.
//!
//! Real processes: etcd, the six control-plane services, two member-sims, the `flotilla` CLI
//! and kubectl.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use flotilla_tests::{Stack, Timers, eventually, member_kubectl};

const T: Duration = Duration::from_secs(45);

/// Karmada's user guide shape: a Job of 10 completions, 3 at a time, Divided 1:2 over
/// member1 and member2.
const JOB: &str = r#"apiVersion: batch/v1
kind: Job
metadata: {name: batch, namespace: default}
spec:
  parallelism: 3
  completions: 10
  template:
    spec:
      restartPolicy: Never
      containers: [{name: work, image: busybox, command: ["true"]}]
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {name: batch, namespace: default}
spec:
  resourceSelectors: [{apiVersion: batch/v1, kind: Job, name: batch}]
  placement:
    clusterAffinity: {clusterNames: [member1, member2]}
    replicaScheduling:
      replicaSchedulingType: Divided
      replicaDivisionPreference: Weighted
      weightPreference:
        staticWeightList:
        - targetCluster: {clusterNames: [member1]}
          weight: 1
        - targetCluster: {clusterNames: [member2]}
          weight: 2
"#;

/// Regression (#30): the Job's parallelism was divided but its completions stayed whole on
/// every member, so each ran all 10. Now member1 runs 1 at a time for 3 completions and
/// member2 2 at a time for 7: 10 in all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn we_4_2_a_divided_jobs_completions_run_split_on_the_members() {
    let (stack, _api) = Stack::with_two_members(Timers::fast(), T).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("job.yaml");
    std::fs::write(&file, JOB).unwrap();
    stack.cli_ok(&["apply", "-f", file.to_str().unwrap()]).await;
    for (member, want) in [("member1", "1/3"), ("member2", "2/7")] {
        let addr = stack.members[member].addr.clone();
        let args = [
            "get",
            "job",
            "batch",
            "-n",
            "default",
            "-o",
            "jsonpath={.spec.parallelism}/{.spec.completions}",
        ];
        eventually(T, &format!("the Job on {member} runs {want}"), || async {
            let (ok, out, _) = member_kubectl(&addr, &args).await;
            (ok && out == want).then_some(())
        })
        .await;
    }
}
