//! `flotilla what-if fail CLUSTER`: where each binding on a cluster would go if it failed now
//! (Explain for when, the taint manager's eviction, Simulate for where).

use super::*;

/// The taint-manager's eviction of `cluster` from `binding` (TM-11) with `purge_mode` at
/// `at`, as a new generation of the binding (the spec changed), ready to be simulated.
pub fn evicted_copy(
    binding: &v1::ResourceBinding,
    cluster: &str,
    purge_mode: i32,
    at: &prost_types::Timestamp,
) -> anyhow::Result<v1::ResourceBinding> {
    let mut domain = core::ResourceBinding::try_from(binding.clone())
        .map_err(|e| anyhow::anyhow!("the binding cannot be read: {e}"))?;
    let mode = core::PurgeMode::from_wire(purge_mode, "purgeMode")
        .ok()
        .flatten()
        .unwrap_or(core::PurgeMode::Gracefully);
    graceful_evict_cluster(
        &mut domain.spec,
        cluster,
        &EvictOptions::taint_manager(
            mode,
            format!("what-if: {cluster} fails"),
            flotilla_core::Time::from_millis(
                at.seconds.saturating_mul(1000) + i64::from(at.nanos) / 1_000_000,
            ),
        ),
    );
    let mut copy = v1::ResourceBinding::from(domain);
    let meta = copy.meta_mut();
    meta.generation += 1;
    Ok(copy)
}

/// `cluster` as it would look once failed at `at`: Ready=False and the not-ready
/// NoSchedule and NoExecute taints (CH-11, CH-10).
pub fn failed_copy(cluster: &v1::Cluster, at: &prost_types::Timestamp) -> v1::Cluster {
    let mut c = cluster.clone();
    let spec = c.spec.get_or_insert_with(Default::default);
    for effect in [v1::TaintEffect::NoSchedule, v1::TaintEffect::NoExecute] {
        let e = effect as i32;
        if !spec
            .taints
            .iter()
            .any(|t| t.key == core::TAINT_NOT_READY && t.effect == e)
        {
            spec.taints.push(v1::Taint {
                key: core::TAINT_NOT_READY.into(),
                value: String::new(),
                effect: e,
                time_added: Some(*at),
                trace_context: String::new(),
            });
        }
    }
    let status = c.status.get_or_insert_with(Default::default);
    status
        .conditions
        .retain(|x| x.r#type != core::CONDITION_READY);
    status.conditions.push(v1::Condition {
        r#type: core::CONDITION_READY.into(),
        status: v1::ConditionStatus::False as i32,
        reason: "ClusterNotReady".into(),
        message: "what-if: the cluster fails".into(),
        last_transition_time: Some(*at),
    });
    c
}

/// What happens to one binding.
pub(super) enum Fate {
    /// Tolerates the taints forever, or eviction does not apply.
    Stays(String),
    /// Already being evicted from the cluster.
    AlreadyEvicted,
    /// Evicted at `when` (None = now) and rescheduled to `to`.
    Moves {
        when: Option<prost_types::Timestamp>,
        to: Vec<v1::TargetCluster>,
        /// SC-4.6: replicas the surviving clusters have no room for, and why.
        short: Option<(i32, String)>,
    },
    /// Evicted, but no cluster fits.
    Nowhere {
        when: Option<prost_types::Timestamp>,
        why: String,
    },
    /// A dry-run call failed.
    Unknown(String),
}

pub(super) async fn fate(
    dry: &DryRunArgs,
    failed: &v1::Cluster,
    clusters_after: &[v1::Cluster],
    binding: &v1::ResourceBinding,
    at: &prost_types::Timestamp,
) -> Fate {
    let cluster = failed.name();
    let targets = binding
        .spec
        .as_ref()
        .is_some_and(|s| s.clusters.iter().any(|c| c.name == cluster));
    if !targets {
        return Fate::AlreadyEvicted;
    }
    let ex = match explain_taints(dry, failed, binding, at).await {
        Ok(ex) => ex,
        Err(e) => return Fate::Unknown(format!("{e:#}")),
    };
    let when = match v1::EvictionDecision::try_from(ex.decision) {
        Ok(v1::EvictionDecision::EvictNow) => None,
        Ok(v1::EvictionDecision::EvictAfter) => ex.evict_at,
        _ => {
            let why = ex
                .reasons
                .first()
                .cloned()
                .unwrap_or_else(|| decision_words(ex.decision).to_owned());
            return Fate::Stays(why);
        }
    };
    let sim_at = when.unwrap_or(*at);
    let evicted = match evicted_copy(binding, cluster, ex.purge_mode, &sim_at) {
        Ok(b) => b,
        Err(e) => return Fate::Unknown(format!("{e:#}")),
    };
    let sim = match simulate(dry, &evicted, clusters_after, true, &sim_at).await {
        Ok(s) => s,
        Err(e) => return Fate::Unknown(format!("{e:#}")),
    };
    let scheduled = sim
        .scheduled_condition
        .as_ref()
        .is_none_or(|c| c.status == v1::ConditionStatus::True as i32);
    if !sim.clusters.is_empty() && sim.unschedulable_replicas > 0 {
        // SC-4.6: what fits moves, the rest has no room
        let why = sim
            .scheduled_condition
            .as_ref()
            .map(|c| c.message.clone())
            .unwrap_or_default();
        return Fate::Moves {
            when,
            to: sim.clusters,
            short: Some((sim.unschedulable_replicas, why)),
        };
    }
    if sim.clusters.is_empty() || !scheduled {
        // The scheduler's own summary; else each cluster's failed filter.
        let mut why = sim
            .scheduled_condition
            .as_ref()
            .map(|c| c.message.trim_end_matches('.').to_owned())
            .filter(|m| !m.is_empty())
            .unwrap_or_default();
        if why.is_empty() {
            why = sim
                .filter_results
                .iter()
                .filter(|f| !f.feasible)
                .map(|f| format!("{}: {} ({})", f.cluster, f.filter, f.reason))
                .collect::<Vec<_>>()
                .join("; ");
        }
        if why.is_empty() {
            why = "no cluster fits the placement".into();
        }
        return Fate::Nowhere { when, why };
    }
    Fate::Moves {
        when,
        to: sim.clusters,
        short: None,
    }
}

pub(super) fn when_words(
    when: Option<&prost_types::Timestamp>,
    at: &prost_types::Timestamp,
) -> String {
    match when {
        None => "now".into(),
        Some(t) => {
            let left = (millis(t) - millis(at)).max(0);
            format!(
                "after {} ({})",
                human_duration(Duration::from_millis(left.unsigned_abs())),
                rfc3339(t)
            )
        }
    }
}

pub(super) async fn what_if_fail(args: WhatIfFailArgs) -> anyhow::Result<ExitCode> {
    let dry = &args.dry_run;
    let mut api = dry.server.api().await?;
    let (clusters, _) = list_all::<v1::Cluster>(&mut api, &Scope::default())
        .await
        .map_err(|s| status_error("listing clusters", &s))?;
    let Some(cluster) = clusters.iter().find(|c| c.name() == args.cluster) else {
        anyhow::bail!("cluster {:?} not found", args.cluster);
    };
    let at = dry.now.unwrap_or_else(now);
    let failed = failed_copy(cluster, &at);
    let clusters_after: Vec<v1::Cluster> = clusters
        .iter()
        .map(|c| {
            if c.name() == args.cluster {
                failed.clone()
            } else {
                c.clone()
            }
        })
        .collect();
    let scope = Scope {
        namespace: None,
        cluster: Some(args.cluster.clone()),
        ..Default::default()
    };
    let (bindings, _) = list_all::<v1::ResourceBinding>(&mut api, &scope)
        .await
        .map_err(|s| status_error("listing bindings", &s))?;

    println!(
        "What if {} fails at {}: it turns NotReady and gets {}:NoSchedule and \
         {}:NoExecute.",
        args.cluster,
        rfc3339(&at),
        core::TAINT_NOT_READY,
        core::TAINT_NOT_READY
    );
    if bindings.is_empty() {
        println!("No binding runs on {}: nothing would move.", args.cluster);
        return Ok(ExitCode::SUCCESS);
    }
    println!();
    let mut table = Table::new(["BINDING", "NOW", "EVICTED", "WOULD RUN ON"]);
    let mut details = Vec::new();
    let (mut moving, mut nowhere, mut staying, mut unknown) = (0, 0, 0, 0);
    let mut short_of_room = 0;
    for b in &bindings {
        let id = words::qualified(b.namespace(), b.name());
        let now_on = words::targets(
            &b.spec
                .as_ref()
                .map(|s| s.clusters.clone())
                .unwrap_or_default(),
        );
        let row = match fate(dry, &failed, &clusters_after, b, &at).await {
            Fate::Stays(why) => {
                staying += 1;
                details.push(format!("{id}: stays on {}: {why}", args.cluster));
                vec![id, now_on, "never".into(), "(unchanged)".into()]
            }
            Fate::AlreadyEvicted => {
                staying += 1;
                vec![
                    id,
                    now_on,
                    "already (eviction task)".into(),
                    "(unchanged)".into(),
                ]
            }
            Fate::Moves { when, to, short } => {
                moving += 1;
                let mut on = words::targets(&to);
                if let Some((n, why)) = short {
                    short_of_room += 1;
                    on.push_str(&format!(" ({n} WITHOUT ROOM)"));
                    details.push(format!(
                        "{id}: {n} replica(s) would not fit and stay unschedulable until room \
                         appears; the copy on {} keeps serving until its eviction times out: \
                         {why}",
                        args.cluster
                    ));
                }
                vec![id, now_on, when_words(when.as_ref(), &at), on]
            }
            Fate::Nowhere { when, why } => {
                nowhere += 1;
                details.push(format!("{id}: nowhere to go: {why}"));
                vec![
                    id,
                    now_on,
                    when_words(when.as_ref(), &at),
                    "NOWHERE TO GO".into(),
                ]
            }
            Fate::Unknown(e) => {
                unknown += 1;
                details.push(format!("{id}: could not be simulated: {e}"));
                vec![id, now_on, "?".into(), "?".into()]
            }
        };
        table.row(row);
    }
    print!("{}", table.render());
    if !details.is_empty() {
        println!();
        for d in &details {
            println!("{d}");
        }
    }
    println!();
    println!(
        "{moving} binding(s) would move ({short_of_room} without room for every replica), \
         {nowhere} would have nowhere to go, {staying} would stay{}.",
        if unknown > 0 {
            format!(", {unknown} could not be simulated")
        } else {
            String::new()
        }
    );
    println!(
        "Times count from the NoExecute taint; with --no-execute-taints auto, cluster-health \
         adds it --failover-eviction-timeout after the cluster turns NotReady."
    );
    Ok(if unknown == 0 {
        ExitCode::SUCCESS
    } else {
        eprintln!("error: {unknown} binding(s) could not be simulated");
        ExitCode::FAILURE
    })
}
