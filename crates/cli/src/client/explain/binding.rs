//! `flotilla explain binding NS/NAME`: why a binding is where it is — Simulate, Explain per
//! tainted target, Assess of its eviction tasks, Plan of its Works.

use super::*;

pub(super) async fn explain_binding(args: ExplainBindingArgs) -> anyhow::Result<ExitCode> {
    let (ns, name) = split_binding(&args.binding, &args.namespace);
    let dry = &args.dry_run;
    let mut api = dry.server.api().await?;
    let binding = api
        .get_resource_binding(v1::GetResourceBindingRequest {
            namespace: ns.clone(),
            name: name.clone(),
        })
        .await
        .map_err(|s| status_error(format!("reading binding {ns}/{name}"), &s))?
        .into_inner();
    let (clusters, _) = list_all::<v1::Cluster>(&mut api, &Scope::default())
        .await
        .map_err(|s| status_error("listing clusters", &s))?;
    let at = dry.now.unwrap_or_else(now);
    let spec = binding.spec.clone().unwrap_or_default();
    let status = binding.status.clone().unwrap_or_default();
    let mut r = Report::default();

    r.section(&format!("Binding {ns}/{name}"));
    if let Some(res) = &spec.resource {
        r.line(
            2,
            format!(
                "Resource:        {} {} {} ({} replicas)",
                res.api_version,
                res.kind,
                words::qualified(&res.namespace, &res.name),
                spec.replicas
            ),
        );
    }
    r.line(
        2,
        format!(
            "Placement:       {}",
            words::placement_type(spec.placement.as_ref())
        ),
    );
    r.line(
        2,
        format!("Runs on:         {}", words::targets(&spec.clusters)),
    );
    r.line(
        2,
        format!(
            "Generation:      {} (scheduler observed {})",
            binding.generation(),
            status.scheduler_observed_generation
        ),
    );
    if let Some(t) = &status.last_scheduled_time {
        r.line(2, format!("Last scheduled:  {} ago", age(Some(t), &at)));
    }
    let tolerations = status
        .applied_placement
        .as_ref()
        .map(|p| p.cluster_tolerations.clone())
        .unwrap_or_default();
    r.line(
        2,
        format!(
            "Tolerations:     {} (of the placement last applied, A3)",
            words::list_spaced(tolerations.iter().map(words::toleration))
        ),
    );
    r.line(2, format!("Evaluated at:    {}", rfc3339(&at)));

    // Scheduling.
    r.section("Scheduling (Scheduler.Simulate)");
    match simulate(dry, &binding, &clusters, false, &at).await {
        Ok(sim) => print_simulation(&mut r, &sim, &spec.clusters),
        Err(e) => r.fail(format!("{e:#}")),
    }

    // Taints.
    r.section("NoExecute taints (TaintManager.Explain)");
    if spec.clusters.is_empty() {
        r.line(2, "the binding has no target cluster");
    }
    for target in &spec.clusters {
        let Some(cluster) = clusters.iter().find(|c| c.name() == target.name) else {
            r.line(2, format!("{}: the cluster does not exist", target.name));
            continue;
        };
        if no_execute(cluster).is_empty() {
            r.line(2, format!("{}: no NoExecute taint: stays", target.name));
            continue;
        }
        match explain_taints(dry, cluster, &binding, &at).await {
            Ok(ex) => print_explanation(&mut r, &target.name, &ex, &at),
            Err(e) => r.fail(format!("{e:#}")),
        }
    }

    // Eviction tasks.
    r.section("Eviction tasks (GracefulEviction.Assess)");
    if spec.graceful_eviction_tasks.is_empty() {
        r.line(2, "none");
    } else {
        match assess(dry, &binding, &at).await {
            Ok(a) => print_assessment(&mut r, &a, &at),
            Err(e) => r.fail(format!("{e:#}")),
        }
    }

    // Works.
    r.section("Works (WorkExecutor.Plan)");
    match plan(&mut api, dry, &binding, &clusters).await {
        Ok(p) => {
            print_plan(&mut r, &p);
            r.section("Overrides per cluster (OverridePolicy, ClusterOverridePolicy)");
            print_overrides(&mut r, &p);
        }
        Err(e) => r.fail(format!("{e:#}")),
    }

    print!("{}", r.text);
    if r.failures.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "error: {} section(s) could not be explained (see above)",
            r.failures.len()
        );
        Ok(ExitCode::FAILURE)
    }
}

pub(super) async fn simulate(
    dry: &DryRunArgs,
    binding: &v1::ResourceBinding,
    clusters: &[v1::Cluster],
    force: bool,
    at: &prost_types::Timestamp,
) -> anyhow::Result<v1::SimulateResponse> {
    let mut client = SchedulerClient::new(channel(dry, Service::Scheduler).await?);
    let request = v1::SimulateRequest {
        binding: Some(binding.clone()),
        clusters: clusters.to_vec(),
        options: None,
        force,
        now: Some(*at),
    };
    reply("Scheduler.Simulate", client.simulate(request).await)
}

pub(super) async fn explain_taints(
    dry: &DryRunArgs,
    cluster: &v1::Cluster,
    binding: &v1::ResourceBinding,
    at: &prost_types::Timestamp,
) -> anyhow::Result<v1::ExplainResponse> {
    let mut client = TaintManagerClient::new(channel(dry, Service::TaintManager).await?);
    let request = v1::ExplainRequest {
        cluster: Some(cluster.clone()),
        binding: Some(binding.clone()),
        options: None,
        now: Some(*at),
    };
    reply("TaintManager.Explain", client.explain(request).await)
}

pub(super) async fn assess(
    dry: &DryRunArgs,
    binding: &v1::ResourceBinding,
    at: &prost_types::Timestamp,
) -> anyhow::Result<v1::GracefulEvictionAssessResponse> {
    let mut client = GracefulEvictionClient::new(channel(dry, Service::GracefulEviction).await?);
    let request = v1::GracefulEvictionAssessRequest {
        binding: Some(binding.clone()),
        graceful_eviction_timeout: None,
        now: Some(*at),
    };
    reply("GracefulEviction.Assess", client.assess(request).await)
}

pub(super) async fn plan(
    api: &mut flotilla_proto::v1::api_client::ApiClient<Conn>,
    dry: &DryRunArgs,
    binding: &v1::ResourceBinding,
    clusters: &[v1::Cluster],
) -> anyhow::Result<v1::PlanResponse> {
    let spec = binding.spec.clone().unwrap_or_default();
    let workload = match &spec.resource {
        Some(res) => match api
            .get_workload(v1::GetWorkloadRequest {
                namespace: res.namespace.clone(),
                kind: flotilla_core::resource::kind_segment(
                    flotilla_core::resource::group(&res.api_version),
                    &res.kind,
                ),
                name: res.name.clone(),
            })
            .await
        {
            Ok(w) => Some(w.into_inner()),
            Err(s) if s.code() == tonic::Code::NotFound => None,
            Err(s) => return Err(status_error("reading the workload", &s)),
        },
        None => None,
    };
    let scope = Scope {
        namespace: Some(binding.namespace().to_owned()),
        ..Default::default()
    };
    let (works, _) = list_all::<v1::Work>(api, &scope)
        .await
        .map_err(|s| status_error("listing works", &s))?;
    let works: Vec<v1::Work> = works
        .into_iter()
        .filter(|w| {
            w.spec
                .as_ref()
                .and_then(|s| s.binding.as_ref())
                .is_some_and(|b| b.name == binding.name() && b.namespace == binding.namespace())
        })
        .collect();
    // the override policies in the template's scope (OV-1)
    let template_ns = spec
        .resource
        .as_ref()
        .map(|r| r.namespace.clone())
        .unwrap_or_default();
    let override_policies = if template_ns.is_empty() {
        Vec::new()
    } else {
        let ns_scope = Scope {
            namespace: Some(template_ns),
            ..Default::default()
        };
        list_all::<v1::OverridePolicy>(api, &ns_scope)
            .await
            .map_err(|s| status_error("listing override policies", &s))?
            .0
    };
    let (cluster_override_policies, _) =
        list_all::<v1::ClusterOverridePolicy>(api, &Scope::default())
            .await
            .map_err(|s| status_error("listing cluster override policies", &s))?;
    let mut client = WorkExecutorClient::new(channel(dry, Service::WorkExecutor).await?);
    let request = v1::PlanRequest {
        binding: Some(binding.clone()),
        workload,
        works,
        override_policies,
        cluster_override_policies,
        clusters: clusters.to_vec(),
    };
    reply("WorkExecutor.Plan", client.plan(request).await)
}

pub(super) fn print_simulation(
    r: &mut Report,
    sim: &v1::SimulateResponse,
    now_on: &[v1::TargetCluster],
) {
    if sim.needs_scheduling {
        r.line(
            2,
            format!(
                "Would reschedule: yes ({})",
                if sim.trigger.is_empty() {
                    "forced"
                } else {
                    &sim.trigger
                }
            ),
        );
    } else {
        r.line(
            2,
            "Would reschedule: no (no trigger fired; the current result stands)",
        );
    }
    if !sim.strategy.is_empty() {
        let mode = if sim.mode.is_empty() {
            String::new()
        } else {
            format!(", {} mode", sim.mode)
        };
        r.line(2, format!("Strategy:         {}{mode}", sim.strategy));
    }
    r.table_of("Filters", &sim.filter_results);
    r.table_of("Scores", &sim.scores);
    if !sim.selected_clusters.is_empty() {
        r.line(
            2,
            format!("Selected:         {}", sim.selected_clusters.join(",")),
        );
    }
    if !sim.affinity_name.is_empty() {
        r.line(2, format!("Affinity term:    {}", sim.affinity_name));
    }
    let mut result = words::targets(&sim.clusters);
    if sim.needs_scheduling {
        let mut a: Vec<_> = sim.clusters.iter().map(|c| (&c.name, c.replicas)).collect();
        let mut b: Vec<_> = now_on.iter().map(|c| (&c.name, c.replicas)).collect();
        a.sort();
        b.sort();
        result.push_str(if a == b {
            " (the same as now)"
        } else {
            " (differs from now)"
        });
    }
    r.line(2, format!("Result:           {result}"));
    if let Some(c) = &sim.scheduled_condition {
        r.line(
            2,
            format!(
                "Condition:        Scheduled={}",
                words::condition_summary(c)
            ),
        );
    }
    if !sim.reasons.is_empty() {
        r.line(2, "Why:");
        for reason in &sim.reasons {
            r.line(4, format!("- {reason}"));
        }
    }
}

pub(super) fn print_explanation(
    r: &mut Report,
    cluster: &str,
    ex: &v1::ExplainResponse,
    at: &prost_types::Timestamp,
) {
    let mut head = format!("{cluster}: {}", decision_words(ex.decision));
    if ex.decision == v1::EvictionDecision::EvictAfter as i32 {
        if let Some(d) = &ex.evict_after {
            let _ = write!(head, " after {}", human_duration(std_duration(d)));
        }
        if let Some(t) = &ex.evict_at {
            let _ = write!(head, " (at {})", rfc3339(t));
        }
    }
    if ex.decision == v1::EvictionDecision::EvictAfter as i32
        || ex.decision == v1::EvictionDecision::EvictNow as i32
    {
        let _ = write!(head, ", purge mode {}", words::purge_mode(ex.purge_mode));
    }
    r.line(2, head);
    for tt in &ex.tolerations {
        let taint = tt.taint.as_ref().map(words::taint).unwrap_or_default();
        let added = tt
            .taint
            .as_ref()
            .and_then(|t| t.time_added.as_ref())
            .map(|t| format!(" added {} ago", age(Some(t), at)))
            .unwrap_or_default();
        let by = match &tt.toleration {
            None => "NOT tolerated".to_owned(),
            Some(tol) => {
                let until = tt
                    .expires_at
                    .as_ref()
                    .map(|e| format!(" until {}", rfc3339(e)))
                    .unwrap_or_else(|| " forever".into());
                format!("tolerated by {}{until}", words::toleration(tol))
            }
        };
        r.line(4, format!("{taint}{added}: {by}"));
    }
    for reason in &ex.reasons {
        r.line(4, format!("- {reason}"));
    }
}

pub(super) fn print_assessment(
    r: &mut Report,
    a: &v1::GracefulEvictionAssessResponse,
    at: &prost_types::Timestamp,
) {
    for task in &a.assessments {
        let deadline = task
            .deadline
            .as_ref()
            .map(|d| {
                let left = millis(d) - millis(at);
                if left > 0 {
                    format!(
                        ", times out in {} (at {})",
                        human_duration(Duration::from_millis(left.unsigned_abs())),
                        rfc3339(d)
                    )
                } else {
                    format!(", timed out at {}", rfc3339(d))
                }
            })
            .unwrap_or_default();
        r.line(
            2,
            format!(
                "{}: {}{deadline}",
                task.from_cluster,
                outcome_words(task.outcome)
            ),
        );
        if !task.reason.is_empty() {
            r.line(4, &task.reason);
        }
    }
    if !a.evicted_clusters.is_empty() {
        r.line(
            2,
            format!(
                "Old copies removed from: {} (their Works go)",
                a.evicted_clusters.join(",")
            ),
        );
    }
    match &a.next_retry {
        Some(d) => r.line(
            2,
            format!("Next assessment in {}", human_duration(std_duration(d))),
        ),
        None => r.line(2, "Next assessment: when the binding changes"),
    }
    for c in &a.conditions {
        r.line(
            2,
            format!(
                "Condition {}={} ({}): {}",
                c.r#type,
                words::condition_status(c.status),
                c.reason,
                c.message
            ),
        );
    }
    for reason in &a.reasons {
        r.line(4, format!("- {reason}"));
    }
}

pub(super) fn print_plan(r: &mut Report, p: &v1::PlanResponse) {
    r.line(
        2,
        format!(
            "Kept on:          {}",
            words::list_or_none(&p.kept_clusters)
        ),
    );
    if !p.held_clusters.is_empty() {
        r.line(
            2,
            format!(
                "Held by eviction: {} (the old copies stay until their tasks end)",
                p.held_clusters.join(",")
            ),
        );
    }
    if !p.orphans.is_empty() {
        r.line(
            2,
            format!(
                "Orphans:          {}",
                p.orphans
                    .iter()
                    .map(|o| format!("{}/{}", o.cluster, o.name))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        );
    }
    if p.blocked {
        r.line(
            2,
            format!(
                "Blocked:          new Works wait until the Directly evicted Works on {} are gone",
                p.waiting_for_clusters.join(",")
            ),
        );
    }
    if let Some(c) = &p.fully_applied {
        r.line(
            2,
            format!("FullyApplied:     {}", words::condition_summary(c)),
        );
    }
    // WE-10: what a replica move holds, since when and until when (the dry run's own line)
    let moving = |reason: &&String| reason.starts_with("WE-10");
    if let Some(held) = p.reasons.iter().find(moving) {
        r.line(2, format!("Replica move:     {held}"));
    }
    for reason in p.reasons.iter().filter(|reason| !moving(reason)) {
        r.line(4, format!("- {reason}"));
    }
}

/// Per target cluster: the override policies applied and what they change, or why they
/// cannot apply.
pub(super) fn print_overrides(r: &mut Report, p: &v1::PlanResponse) {
    if p.overrides.is_empty() {
        r.line(2, "no override policy selects the template");
        return;
    }
    for o in &p.overrides {
        if !o.error.is_empty() {
            r.line(
                2,
                format!(
                    "{}: cannot apply: {} (its Work is left as it is)",
                    o.cluster, o.error
                ),
            );
            continue;
        }
        if o.applied.is_empty() {
            r.line(2, format!("{}: no rule targets this cluster", o.cluster));
            continue;
        }
        r.line(2, format!("{}: {}", o.cluster, o.applied.join(", ")));
        for change in &o.changes {
            r.line(4, change);
        }
    }
}

// ---------------------------------------------------------------------------------------
// what-if fail
// ---------------------------------------------------------------------------------------

impl TableRow for v1::ClusterFilterResult {
    const HEADERS: &'static [&'static str] = &["CLUSTER", "FEASIBLE", "FILTER", "REASON"];

    fn cells(&self) -> Vec<String> {
        let filter = if self.filter.is_empty() {
            "-"
        } else {
            &self.filter
        };
        vec![
            self.cluster.clone(),
            if self.feasible { "yes" } else { "no" }.into(),
            filter.to_owned(),
            self.reason.clone(),
        ]
    }
}

impl TableRow for v1::ClusterScore {
    const HEADERS: &'static [&'static str] =
        &["CLUSTER", "SCORE", "ALLOCATABLE", "AVAILABLE", "BOUNDED BY"];

    fn cells(&self) -> Vec<String> {
        vec![
            self.cluster.clone(),
            self.score.to_string(),
            self.allocatable_replicas.to_string(),
            self.available_replicas.to_string(),
            if self.bounded_by.is_empty() {
                "-".to_owned()
            } else {
                self.bounded_by.clone()
            },
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn es_2_the_scores_say_what_bounds_each_estimate() {
        let score = |bounded_by: &str| v1::ClusterScore {
            cluster: "member2".into(),
            score: 0,
            allocatable_replicas: 2,
            available_replicas: 2,
            bounded_by: bounded_by.into(),
        };
        assert_eq!(v1::ClusterScore::HEADERS[4], "BOUNDED BY");
        assert_eq!(score("cpu").cells(), ["member2", "0", "2", "2", "cpu"]);
        assert_eq!(score("").cells()[4], "-", "nothing estimated");
    }

    #[test]
    fn we_10_6_the_plan_says_what_a_replica_move_holds() {
        let held = "WE-10.1: member2 keeps 3 (plan 2) until member1 has 0 of 2 Ready; \
                    WE-10.4: held since 2026-11-27T10:00:00Z, at the latest until \
                    2026-11-27T10:10:00Z";
        let plan = v1::PlanResponse {
            kept_clusters: vec!["member1".into(), "member2".into()],
            reasons: vec!["WE-3.4/WE-4: one Work per target".into(), held.into()],
            ..Default::default()
        };
        let mut r = Report::default();
        print_plan(&mut r, &plan);
        assert!(
            r.text.contains(&format!("Replica move:     {held}")),
            "{}",
            r.text
        );
        assert_eq!(r.text.matches("WE-10.1").count(), 1, "{}", r.text);
        assert!(r.text.contains("- WE-3.4/WE-4"), "{}", r.text);
    }
}
