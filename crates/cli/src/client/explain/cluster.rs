//! `flotilla explain cluster NAME [--probe P [--for D]]`: what cluster-health would write for
//! an assumed probe (ClusterHealth.Assess), without writing it.

use super::*;

/// The Assess request of `flotilla explain cluster`: the stored cluster, the assumed probe and,
/// with `--for`, a threshold memory that has seen the probe's Ready status since `at - for`.
pub(super) fn cluster_assess_request(
    cluster: v1::Cluster,
    probe: Option<ProbeArg>,
    seen_for: Option<Duration>,
    at: prost_types::Timestamp,
) -> v1::ClusterHealthAssessRequest {
    let probe = probe.map(|p| v1::ProbeResult {
        online: p != ProbeArg::Unreachable,
        healthy: p == ProbeArg::Healthy,
        message: String::new(),
    });
    let threshold = match (&probe, seen_for) {
        (Some(p), Some(d)) => {
            let since = prost_types::Timestamp {
                seconds: at
                    .seconds
                    .saturating_sub(i64::try_from(d.as_secs()).unwrap_or(i64::MAX)),
                nanos: at.nanos,
            };
            Some(v1::ThresholdState {
                ready_status: if p.healthy {
                    v1::ConditionStatus::True as i32
                } else {
                    v1::ConditionStatus::False as i32
                },
                threshold_start: Some(since),
            })
        }
        _ => None,
    };
    v1::ClusterHealthAssessRequest {
        cluster: Some(cluster),
        probe,
        threshold,
        now: Some(at),
        ..Default::default()
    }
}

pub(super) fn ready_words(c: Option<&v1::Condition>) -> String {
    match c {
        None => "no Ready condition".to_owned(),
        Some(c) => format!(
            "{} ({}){}",
            words::condition_status(c.status),
            if c.reason.is_empty() { "-" } else { &c.reason },
            c.last_transition_time
                .as_ref()
                .map(|t| format!(" since {}", rfc3339(t)))
                .unwrap_or_default()
        ),
    }
}

pub(super) async fn explain_cluster(args: ExplainClusterArgs) -> anyhow::Result<ExitCode> {
    let dry = &args.dry_run;
    let mut api = dry.server.api().await?;
    let cluster = api
        .get_cluster(v1::GetClusterRequest {
            name: args.cluster.clone(),
        })
        .await
        .map_err(|s| status_error(format!("reading cluster {}", args.cluster), &s))?
        .into_inner();
    let at = dry.now.unwrap_or_else(now);
    let stored_ready = cluster
        .status
        .as_ref()
        .and_then(|s| words::condition(&s.conditions, core::CONDITION_READY))
        .cloned();
    let stored_taints: Vec<String> = cluster
        .spec
        .as_ref()
        .map(|s| s.taints.iter().map(words::taint).collect())
        .unwrap_or_default();
    let request = cluster_assess_request(cluster.clone(), args.probe, args.for_, at);
    let mut client = ClusterHealthClient::new(channel(dry, Service::ClusterHealth).await?);
    let resp = reply("ClusterHealth.Assess", client.assess(request).await)?;

    let mut r = Report::default();
    r.section(&format!("Cluster {}", args.cluster));
    r.line(
        2,
        format!(
            "Sync mode:       {}",
            words::sync_mode(cluster.spec.as_ref().map_or(0, |s| s.sync_mode))
        ),
    );
    r.line(
        2,
        format!("Ready now:       {}", ready_words(stored_ready.as_ref())),
    );
    r.line(
        2,
        format!("Taints now:      {}", words::list_or_none(&stored_taints)),
    );
    r.line(
        2,
        format!(
            "Assumed probe:   {}",
            match (
                args.probe
                    .and_then(|p| clap::ValueEnum::to_possible_value(&p)),
                args.for_
            ) {
                (None, _) => "none (no new observation)".to_owned(),
                (Some(p), None) => p.get_name().to_owned(),
                (Some(p), Some(d)) =>
                    format!("{} for {}", p.get_name(), humantime::format_duration(d)),
            }
        ),
    );
    r.line(2, format!("At:              {}", rfc3339(&at)));

    r.section("cluster-health would write (nothing is written)");
    r.line(
        2,
        format!(
            "Ready:           {}{}",
            ready_words(resp.ready.as_ref()),
            if resp.status_changed {
                "   (changed)"
            } else {
                "   (unchanged)"
            }
        ),
    );
    let taints = |ts: &[v1::Taint]| words::list_or_none(ts.iter().map(words::taint));
    r.line(
        2,
        format!("Taints added:    {}", taints(&resp.added_taints)),
    );
    r.line(
        2,
        format!("Taints removed:  {}", taints(&resp.removed_taints)),
    );
    r.line(2, format!("Taints then:     {}", taints(&resp.taints)));
    r.line(
        2,
        format!(
            "Look again in:   {}",
            resp.requeue_after.as_ref().map_or_else(
                || "only on new input".to_owned(),
                |d| human_duration(std_duration(d))
            )
        ),
    );
    r.section("Why");
    if resp.reasons.is_empty() {
        r.line(2, "no rule applies: nothing to change");
    }
    for reason in &resp.reasons {
        r.line(2, reason);
    }
    print!("{}", r.text);
    Ok(ExitCode::SUCCESS)
}
