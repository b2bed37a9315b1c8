//! Failover (PD-3.3, PD-4) and (Cluster)PropagationPolicy create and update.

use std::collections::BTreeMap;

use super::{EditCase, Want, assert_errs, rename, run_edits};
use crate::types::*;
use crate::validation::FieldErrorKind::*;
use crate::validation::*;

fn app(toleration: Option<i64>, purge: Option<PurgeMode>, grace: Option<i64>) -> FailoverBehavior {
    FailoverBehavior {
        cluster: None,
        application: Some(ApplicationFailoverBehavior {
            toleration_seconds: toleration,
            purge_mode: purge,
            grace_period_seconds: grace,
            state_preservation: vec![],
        }),
    }
}

fn run(cases: &[(&str, FailoverBehavior, Want)]) {
    for (name, f, want) in cases {
        assert_errs(name, &validate_failover(f, true, &Limits::default()), want);
    }
}

const G: Option<PurgeMode> = Some(PurgeMode::Gracefully);
const D: Option<PurgeMode> = Some(PurgeMode::Directly);
const N: Option<PurgeMode> = Some(PurgeMode::Never);

#[test]
fn pd_3_3_application_toleration_seconds() {
    let cap = ONE_YEAR_SECONDS;
    const PATH: &str = "spec.failover.application.decisionConditions.tolerationSeconds";
    run(&[
        ("default (unset)", app(None, D, None), &[]),
        ("zero", app(Some(0), D, None), &[]),
        ("the cap", app(Some(cap), D, None), &[]),
        ("negative", app(Some(-1), D, None), &[(PATH, OutOfRange)]),
        (
            "cap + 1",
            app(Some(cap + 1), D, None),
            &[(PATH, OutOfRange)],
        ),
    ]);
}

#[test]
fn pd_3_3_grace_period_required_iff_gracefully() {
    run(&[
        ("Gracefully with 600", app(None, G, Some(600)), &[]),
        ("Gracefully with 1", app(None, G, Some(1)), &[]),
        (
            "Gracefully without grace period",
            app(None, G, None),
            &[("spec.failover.application.gracePeriodSeconds", Required)],
        ),
        (
            "unset purge mode is Gracefully (PD-2)",
            app(None, None, None),
            &[("spec.failover.application.gracePeriodSeconds", Required)],
        ),
        (
            "unset purge mode with a grace period",
            app(None, None, Some(600)),
            &[],
        ),
        ("Directly without grace period", app(None, D, None), &[]),
        ("Never without grace period", app(None, N, None), &[]),
        (
            "Directly with a grace period",
            app(None, D, Some(600)),
            &[("spec.failover.application.gracePeriodSeconds", Forbidden)],
        ),
        (
            "Never with a grace period",
            app(None, N, Some(600)),
            &[("spec.failover.application.gracePeriodSeconds", Forbidden)],
        ),
    ]);
}

#[test]
fn pd_3_3_grace_period_positive_and_capped() {
    let cap = ONE_YEAR_SECONDS;
    run(&[
        ("the cap", app(None, G, Some(cap)), &[]),
        (
            "zero",
            app(None, G, Some(0)),
            &[("spec.failover.application.gracePeriodSeconds", OutOfRange)],
        ),
        (
            "negative",
            app(None, G, Some(-5)),
            &[("spec.failover.application.gracePeriodSeconds", OutOfRange)],
        ),
        (
            "cap + 1",
            app(None, G, Some(cap + 1)),
            &[("spec.failover.application.gracePeriodSeconds", OutOfRange)],
        ),
        (
            "zero with Directly: both problems",
            app(None, D, Some(0)),
            &[
                ("spec.failover.application.gracePeriodSeconds", Forbidden),
                ("spec.failover.application.gracePeriodSeconds", OutOfRange),
            ],
        ),
    ]);
}

fn cluster_failover(purge: Option<PurgeMode>, failback: Option<i64>) -> FailoverBehavior {
    FailoverBehavior {
        cluster: Some(ClusterFailoverBehavior {
            purge_mode: purge,
            state_preservation: vec![],
            failback_stabilization_window_seconds: failback,
        }),
        application: None,
    }
}

#[test]
fn pd_3_3_cluster_purge_mode_directly_or_gracefully() {
    run(&[
        ("unset", cluster_failover(None, None), &[]),
        ("Directly", cluster_failover(D, None), &[]),
        ("Gracefully", cluster_failover(G, None), &[]),
        (
            "Never is application-only",
            cluster_failover(N, None),
            &[("spec.failover.cluster.purgeMode", NotSupported)],
        ),
    ]);
}

#[test]
fn a11_failback_stabilization_window_bounds() {
    let cap = ONE_YEAR_SECONDS;
    run(&[
        ("zero", cluster_failover(None, Some(0)), &[]),
        ("the cap", cluster_failover(None, Some(cap)), &[]),
        (
            "negative",
            cluster_failover(None, Some(-1)),
            &[(
                "spec.failover.cluster.failback.stabilizationWindowSeconds",
                OutOfRange,
            )],
        ),
        (
            "cap + 1",
            cluster_failover(None, Some(cap + 1)),
            &[(
                "spec.failover.cluster.failback.stabilizationWindowSeconds",
                OutOfRange,
            )],
        ),
    ]);
}

fn rule(alias: &str, json_path: &str) -> StatePreservationRule {
    StatePreservationRule {
        alias_label_name: alias.to_owned(),
        json_path: json_path.to_owned(),
    }
}

#[test]
fn pd_3_3_state_preservation_alias_label_names() {
    let mut both = app(None, D, None);
    if let Some(a) = &mut both.application {
        a.state_preservation = vec![
            rule("failover.example.com/replicas", "{ .replicas }"),
            rule("bad alias", "{ .x }"),
            rule("failover.example.com/replicas", ""),
        ];
    }
    both.cluster = Some(ClusterFailoverBehavior {
        purge_mode: None,
        state_preservation: vec![
            rule("", "{ .a }"),
            rule("ok", "{ .b\n }"),
            rule("wildcard", "{ .items[*].id }"),
        ],
        failback_stabilization_window_seconds: None,
    });
    run(&[(
        "aliases are unique label keys, jsonPath required",
        both,
        &[
            (
                "spec.failover.application.statePreservation.rules[1].aliasLabelName",
                Invalid,
            ),
            (
                "spec.failover.application.statePreservation.rules[2].aliasLabelName",
                Duplicate,
            ),
            (
                "spec.failover.application.statePreservation.rules[2].jsonPath",
                Required,
            ),
            (
                "spec.failover.cluster.statePreservation.rules[0].aliasLabelName",
                Required,
            ),
            (
                "spec.failover.cluster.statePreservation.rules[1].jsonPath",
                Invalid,
            ),
            // TM-10.1: only paths that name one value
            (
                "spec.failover.cluster.statePreservation.rules[2].jsonPath",
                Invalid,
            ),
        ],
    )]);
}

#[test]
fn application_failover_requires_propagate_deps() {
    let limits = Limits::default();
    let f = app(None, D, None);
    assert_errs(
        "propagateDeps true",
        &validate_failover(&f, true, &limits),
        &[],
    );
    assert_errs(
        "propagateDeps false",
        &validate_failover(&f, false, &limits),
        &[("spec.propagateDeps", Invalid)],
    );
    let c = cluster_failover(None, None);
    assert_errs(
        "cluster failover alone",
        &validate_failover(&c, false, &limits),
        &[],
    );
    assert_errs(
        "empty failover",
        &validate_failover(&FailoverBehavior::default(), false, &limits),
        &[],
    );
}

fn selector(api_version: &str, kind: &str, namespace: &str, name: &str) -> ResourceSelector {
    ResourceSelector {
        api_version: api_version.to_owned(),
        kind: kind.to_owned(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        label_selector: None,
    }
}

fn policy() -> PropagationPolicy {
    PropagationPolicy {
        meta: ObjectMeta {
            name: "nginx-propagation".to_owned(),
            namespace: "default".to_owned(),
            labels: BTreeMap::from([(
                PERMANENT_ID_LABEL_POLICY.to_owned(),
                "6b1f0a2c-0d3e-4f5a-8b9c-123456789abc".to_owned(),
            )]),
            ..ObjectMeta::default()
        },
        spec: PropagationSpec {
            resource_selectors: vec![selector("apps/v1", "Deployment", "default", "nginx")],
            priority: 0,
            placement: Placement {
                cluster_affinity: Some(ClusterAffinity {
                    cluster_names: vec!["member1".to_owned(), "member2".to_owned()],
                    ..ClusterAffinity::default()
                }),
                ..Placement::default()
            },
            failover: Some(app(Some(300), G, Some(600))),
            propagate_deps: true,
            scheduler_name: DEFAULT_SCHEDULER_NAME.to_owned(),
            ..PropagationSpec::default()
        },
    }
}

#[test]
fn propagation_policy_create() {
    struct Case {
        name: &'static str,
        cluster_wide: bool,
        edit: fn(&mut PropagationPolicy),
        want: Want,
    }
    let cases = [
        Case {
            name: "valid",
            cluster_wide: false,
            edit: |_| {},
            want: &[],
        },
        Case {
            name: "valid cluster-wide",
            cluster_wide: true,
            edit: |p| {
                p.meta.namespace.clear();
                p.spec.resource_selectors[0].namespace = "any-namespace".to_owned();
            },
            want: &[],
        },
        Case {
            name: "selector namespace empty (defaulted later, PD-1.1)",
            cluster_wide: false,
            edit: |p| p.spec.resource_selectors[0].namespace.clear(),
            want: &[],
        },
        Case {
            name: "selector namespace must equal the policy's",
            cluster_wide: false,
            edit: |p| p.spec.resource_selectors[0].namespace = "kube-system".to_owned(),
            want: &[("spec.resourceSelectors[0].namespace", Forbidden)],
        },
        Case {
            name: "at least one selector",
            cluster_wide: false,
            edit: |p| p.spec.resource_selectors.clear(),
            want: &[("spec.resourceSelectors", Required)],
        },
        Case {
            name: "apiVersion and kind required",
            cluster_wide: false,
            edit: |p| p.spec.resource_selectors[0] = selector("", "", "", ""),
            want: &[
                ("spec.resourceSelectors[0].apiVersion", Required),
                ("spec.resourceSelectors[0].kind", Required),
            ],
        },
        Case {
            name: "apiVersion, kind and name formats",
            cluster_wide: false,
            edit: |p| p.spec.resource_selectors[0] = selector("apps/", "1Deploy", "", "a/b"),
            want: &[
                ("spec.resourceSelectors[0].apiVersion", Invalid),
                ("spec.resourceSelectors[0].kind", Invalid),
                ("spec.resourceSelectors[0].name", Invalid),
            ],
        },
        Case {
            name: "selector label selector",
            cluster_wide: false,
            edit: |p| {
                p.spec.resource_selectors[0].label_selector = Some(LabelSelector {
                    match_labels: BTreeMap::from([("app".to_owned(), "bad value".to_owned())]),
                    match_expressions: vec![],
                });
            },
            want: &[(
                "spec.resourceSelectors[0].labelSelector.matchLabels[app]",
                Invalid,
            )],
        },
        Case {
            name: "128 selectors",
            cluster_wide: false,
            edit: |p| p.spec.resource_selectors = vec![p.spec.resource_selectors[0].clone(); 128],
            want: &[],
        },
        Case {
            name: "129 selectors",
            cluster_wide: false,
            edit: |p| p.spec.resource_selectors = vec![p.spec.resource_selectors[0].clone(); 129],
            want: &[("spec.resourceSelectors", TooMany)],
        },
        Case {
            name: "namespaced policy needs a namespace",
            cluster_wide: false,
            edit: |p| {
                p.meta.namespace.clear();
                p.spec.resource_selectors[0].namespace.clear();
            },
            want: &[("metadata.namespace", Required)],
        },
        Case {
            name: "cluster-wide policy has no namespace",
            cluster_wide: true,
            edit: |_| {},
            want: &[("metadata.namespace", Forbidden)],
        },
        Case {
            name: "name is a DNS subdomain",
            cluster_wide: false,
            edit: |p| p.meta.name = "Nginx_Propagation".to_owned(),
            want: &[("metadata.name", Invalid)],
        },
        Case {
            name: "scheduler name",
            cluster_wide: false,
            edit: |p| p.spec.scheduler_name = "My Scheduler".to_owned(),
            want: &[("spec.schedulerName", Invalid)],
        },
        Case {
            name: "empty scheduler name means the default",
            cluster_wide: false,
            edit: |p| p.spec.scheduler_name.clear(),
            want: &[],
        },
        Case {
            name: "any priority",
            cluster_wide: false,
            edit: |p| p.spec.priority = i32::MIN,
            want: &[],
        },
        Case {
            name: "placement and failover errors are included",
            cluster_wide: false,
            edit: |p| {
                p.spec.propagate_deps = false;
                p.spec.placement.cluster_affinities = vec![ClusterAffinityTerm::default()];
            },
            want: &[
                ("spec.propagateDeps", Invalid),
                ("spec.placement.clusterAffinities", Forbidden),
                ("spec.placement.clusterAffinities[0].affinityName", Required),
            ],
        },
    ];
    for c in cases {
        let mut p = policy();
        (c.edit)(&mut p);
        assert_errs(
            c.name,
            &validate_propagation_policy(&p, c.cluster_wide, &Limits::default()),
            c.want,
        );
    }
}

#[test]
fn propagation_policy_update_scheduler_name_immutable() {
    let cases: Vec<EditCase<PropagationPolicy>> = vec![
        EditCase {
            name: "spec changes are fine",
            edit: |p| p.spec.priority = 10,
            want: &[],
        },
        EditCase {
            name: "empty is the default scheduler",
            edit: |p| p.spec.scheduler_name.clear(),
            want: &[],
        },
        EditCase {
            name: "scheduler name changed",
            edit: |p| p.spec.scheduler_name = "other-scheduler".to_owned(),
            want: &[("spec.schedulerName", Forbidden)],
        },
        EditCase {
            name: "permanent id changed",
            edit: |p| {
                p.meta
                    .labels
                    .insert(PERMANENT_ID_LABEL_POLICY.to_owned(), "other".to_owned());
            },
            want: &[(
                "metadata.labels[propagationpolicy.karmada.io/permanent-id]",
                Forbidden,
            )],
        },
        EditCase {
            name: "permanent id removed",
            edit: |p| {
                p.meta.labels.clear();
            },
            want: &[(
                "metadata.labels[propagationpolicy.karmada.io/permanent-id]",
                Forbidden,
            )],
        },
        EditCase {
            name: "name and namespace",
            edit: |p| rename(&mut p.meta, "other", "other"),
            want: &[
                ("metadata.name", Forbidden),
                ("metadata.namespace", Forbidden),
            ],
        },
    ];
    let old = policy();
    run_edits(cases, policy, |new| {
        validate_propagation_policy_update(&old, new)
    });
    // A permanent id may be added to a policy that had none.
    let mut old = policy();
    old.meta.labels.clear();
    assert_errs(
        "id added",
        &validate_propagation_policy_update(&old, &policy()),
        &[],
    );
}
