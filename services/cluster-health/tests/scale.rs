//! Measurements (ignored by default; `cargo test -p flotilla-cluster-health --test integration scale::
//! -- --ignored --nocapture`): 100 Push clusters behind one member-sim on a MemStore, and the
//! cost of one `assess`. Figures are printed, never asserted.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::*;
use flotilla_cluster_health::assess::{Inputs, Memory, Observation, Options, assess};
use flotilla_core::Time;
use flotilla_core::health::ProbeOutcome;
use flotilla_member_sim::Fault;
use flotilla_proto::v1;
use flotilla_store::typed::Typed;
use flotilla_store::{MemStore, StoreRef};

const CLUSTERS: usize = 100;

async fn count(store: &StoreRef, pred: impl Fn(&v1::Cluster) -> bool) -> usize {
    let (all, _) = Typed::new(store.clone())
        .list::<v1::Cluster>(None)
        .await
        .unwrap();
    all.iter().filter(|c| pred(c)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement"]
async fn hundred_clusters_ready_then_not_ready() {
    let store: StoreRef = Arc::new(MemStore::new());
    let m = Member::start("shared", 10_000, None).await;
    let mut config = fast_config("scale");
    config.frequency = Duration::from_millis(500);
    config.options.thresholds.failure = Duration::from_secs(1);
    let h = Health::start(store.clone(), config);
    let t0 = Instant::now();
    for i in 0..CLUSTERS {
        create(
            &store,
            cluster(&format!("m{i:03}"), v1::SyncMode::Push, &m.endpoint()),
        )
        .await;
    }
    let ready_true =
        |c: &v1::Cluster| ready(c).is_some_and(|(s, _)| s == v1::ConditionStatus::True);
    while count(&store, ready_true).await < CLUSTERS {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!(
        "{CLUSTERS} clusters created and Ready in {:?}",
        t0.elapsed()
    );
    let cut = Instant::now();
    m.sim.set_fault(Fault::Unreachable);
    let tainted = |c: &v1::Cluster| taints(c).contains(&NR_NS.to_owned());
    let mut first = None;
    loop {
        let n = count(&store, tainted).await;
        if n > 0 && first.is_none() {
            first = Some(cut.elapsed());
        }
        if n == CLUSTERS {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!(
        "unreachable → first cluster tainted after {:?}, all {CLUSTERS} after {:?} \
         (failure threshold 1s, probe timeout 250ms, frequency 500ms)",
        first.unwrap(),
        cut.elapsed()
    );
    h.stop().await;
}

#[test]
#[ignore = "measurement"]
fn assess_cost() {
    let options = Options::default();
    let mut c = cluster("m1", v1::SyncMode::Push, "http://x");
    c.status = Some(v1::ClusterStatus {
        conditions: vec![v1::Condition {
            r#type: "Ready".into(),
            status: v1::ConditionStatus::True as i32,
            reason: "ClusterReady".into(),
            message: "cluster is healthy and ready to accept workloads".into(),
            last_transition_time: Some(flotilla_proto::convert::time_to_timestamp(Time::EPOCH)),
        }],
        ..Default::default()
    });
    let o = Observation {
        outcome: ProbeOutcome {
            online: true,
            healthy: true,
        },
        message: String::new(),
        collected: None,
    };
    let n = 100_000;
    let t = Instant::now();
    for i in 0..n {
        let d = assess(Inputs {
            cluster: &c,
            observation: Some(&o),
            last_heartbeat: None,
            ready_transition: None,
            memory: Memory::default(),
            observing_since: flotilla_core::Time::EPOCH,
            policies: &[],
            options: &options,
            now: Time::from_secs(i),
        })
        .unwrap();
        assert!(!d.taints_changed);
    }
    println!("assess: {:?} per call", t.elapsed() / n as u32);
}
