//! Domain types with Karmada's names (docs/semantics.md). These are plain data: the wire
//! format lives in `flotilla-proto`, which converts to and from these at the edge.
//!
//! The propagation-policy family (from [`PropagationSpec`] down) is also the one model of
//! Karmada's YAML: its serde form is Karmada's, so that the CLI reads `apply -f` documents
//! and writes `get -o yaml` with these derives, and a round trip holds by construction
//! (docs/design.md, "One model of Karmada's objects"). Where the domain is flatter than
//! Karmada's YAML (`decisionConditions`, `statePreservation.rules`, `failback`, a
//! `clusterAffinities` term's inline affinity), a small adapter in [`shape`] maps the one to
//! the other.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::time::Time;

/// Well-known taint key added while a cluster's Ready condition is False (CH-11).
pub const TAINT_NOT_READY: &str = "cluster.karmada.io/not-ready";
/// Well-known taint key added while a cluster's Ready condition is Unknown (CH-11).
pub const TAINT_UNREACHABLE: &str = "cluster.karmada.io/unreachable";
/// Taint key added when a cluster is being deleted (v1.5 behaviour, A2 / CH-15).
pub const TAINT_TERMINATING: &str = "cluster.karmada.io/terminating";
/// The condition type that carries a cluster's health.
pub const CONDITION_READY: &str = "Ready";
/// The binding condition written by the scheduler (SC-4).
pub const CONDITION_SCHEDULED: &str = "Scheduled";
/// The binding condition written by the work executor (WE-8.4).
pub const CONDITION_FULLY_APPLIED: &str = "FullyApplied";
/// Flotilla's condition: the binding has eviction tasks but no replacement target (A6).
pub const CONDITION_REPLACEMENT_PENDING: &str = "ReplacementPending";
/// Producer name of tasks created by the taint manager (§1.8).
pub const PRODUCER_TAINT_MANAGER: &str = "TaintManager";
/// Reason of tasks created by the taint manager (§1.8).
pub const REASON_TAINT_UNTOLERATED: &str = "TaintUntolerated";
/// Producer name of tasks created by application failover (§1.8).
pub const PRODUCER_APPLICATION_FAILOVER: &str = "resource-binding-application-failover-controller";
/// Reason of tasks created by application failover (§1.8).
pub const REASON_APPLICATION_FAILURE: &str = "ApplicationFailure";
/// The default scheduler name (PD-2).
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

/// Metadata common to every stored object (a subset of Kubernetes' ObjectMeta).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectMeta {
    /// Object name.
    pub name: String,
    /// Namespace; empty for cluster-scoped objects.
    pub namespace: String,
    /// Unique id assigned at creation.
    pub uid: String,
    /// The store revision of the last write (etcd mod_revision); 0 before the first write.
    pub resource_version: i64,
    /// Bumped on every spec change, never on status-only changes.
    pub generation: i64,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
    /// When the object was created.
    pub creation_timestamp: Option<Time>,
    /// When deletion was requested; the object lingers while finalizers remain.
    pub deletion_timestamp: Option<Time>,
    /// Finalizers that must be removed before the object disappears.
    pub finalizers: Vec<String>,
    /// Server-side apply's bookkeeping: which manager owns which fields. Only the Kubernetes
    /// API gateway reads or changes it; every other writer carries it over unchanged.
    pub managed_fields: Vec<ManagedFieldsEntry>,
}

/// One field manager's fields (Kubernetes' `ManagedFieldsEntry`), the field set kept as the
/// FieldsV1 JSON text it is written in (docs/kubernetes-api.md, "Server-side apply").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ManagedFieldsEntry {
    /// The manager's name.
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// The API version the fields are named in.
    pub api_version: String,
    /// When the manager last changed the object.
    pub time: Option<Time>,
    /// `FieldsV1`.
    pub fields_type: String,
    /// The field set, FieldsV1 JSON text.
    pub fields_v1: String,
    /// The subresource written; empty for the main resource.
    pub subresource: String,
}

// ---------------------------------------------------------------------------------------
// Taints and tolerations
// ---------------------------------------------------------------------------------------

/// The effect of a taint (Kubernetes semantics).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub enum TaintEffect {
    /// New placements must tolerate the taint.
    NoSchedule,
    /// A soft NoSchedule; Karmada's filters ignore it (SC-6.2).
    PreferNoSchedule,
    /// Existing placements are evicted unless tolerated (TM-*).
    NoExecute,
}

impl TaintEffect {
    /// The Kubernetes spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }
}

/// A cluster taint. Equality ignores [`Taint::trace_context`] (it is not part of what the
/// taint means).
#[derive(Clone, Debug)]
pub struct Taint {
    /// Taint key, a qualified name.
    pub key: String,
    /// Taint value, a label value (may be empty).
    pub value: String,
    /// What the taint does.
    pub effect: TaintEffect,
    /// When it was added; a taint without it never triggers a timed eviction (TM-8.3).
    pub time_added: Option<Time>,
    /// Opaque W3C trace context of the step that added it (Flotilla extension; empty when
    /// none). The rules never read it.
    pub trace_context: String,
}

impl PartialEq for Taint {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
            && self.value == other.value
            && self.effect == other.effect
            && self.time_added == other.time_added
    }
}

impl Eq for Taint {}

impl Taint {
    /// A taint with an empty value.
    pub fn new(key: impl Into<String>, effect: TaintEffect, time_added: Option<Time>) -> Self {
        Taint {
            key: key.into(),
            value: String::new(),
            effect,
            time_added,
            trace_context: String::new(),
        }
    }

    /// Identity of a taint is (key, effect); the value is ignored (CH-12.1).
    pub fn same_identity(&self, other: &Taint) -> bool {
        self.key == other.key && self.effect == other.effect
    }
}

/// How a toleration compares values. Reads `""` as Equal, as Kubernetes does, and refuses
/// Lt/Gt by name (Karmada does not support them on cluster tolerations).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(try_from = "String")]
pub enum TolerationOperator {
    /// Value must be equal (the default when empty).
    #[default]
    Equal,
    /// Any value; with an empty key, any taint.
    Exists,
}

/// A toleration of a cluster taint (Kubernetes semantics; Lt/Gt are not supported).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Toleration {
    /// Key to match; empty matches every key (only with Exists).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key: String,
    /// Comparison operator.
    #[serde(default)]
    pub operator: TolerationOperator,
    /// Value to compare with `Equal`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    /// Effect to match; unset (or `""`) matches every effect.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "shape::empty_is_none"
    )]
    pub effect: Option<TaintEffect>,
    /// For NoExecute: how long the taint is tolerated after its `timeAdded`; unset: forever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<i64>,
}

impl TryFrom<String> for TolerationOperator {
    type Error = String;

    fn try_from(value: String) -> Result<Self, String> {
        match value.as_str() {
            "" | "Equal" => Ok(TolerationOperator::Equal),
            "Exists" => Ok(TolerationOperator::Exists),
            "Lt" | "Gt" => Err(format!(
                "Unsupported value: \"{value}\": supported values: \"Equal\", \"Exists\" \
                 (Karmada does not support Lt/Gt on cluster tolerations)"
            )),
            _ => Err(format!(
                "unknown variant `{value}`, expected `Equal` or `Exists`"
            )),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Cluster
// ---------------------------------------------------------------------------------------

/// How the control plane talks to a member cluster.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SyncMode {
    /// The control plane probes the member and applies Works to it.
    #[default]
    Push,
    /// An agent in the member heartbeats and pulls its Works.
    Pull,
}

/// Status of a condition. Reads YAML's `True`/`False` (booleans) as the strings Kubernetes
/// means.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(try_from = "shape::StatusValue")]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// Nobody knows (e.g. status stopped being posted).
    #[default]
    Unknown,
}

impl ConditionStatus {
    /// The Kubernetes spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

/// A status condition (metav1.Condition).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Condition {
    /// Condition type, e.g. `Ready`.
    pub type_: String,
    /// Status.
    pub status: ConditionStatus,
    /// CamelCase reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// When the status last changed.
    pub last_transition_time: Option<Time>,
}

/// Find a condition by type.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// An API group/version and the kinds a member serves.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApiEnablement {
    /// `group/version`, or `version` for the core group.
    pub group_version: String,
    /// Kinds served in that group/version.
    pub kinds: Vec<String>,
}

/// Cluster spec (owned by the api service; controller taints by cluster-health).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterSpec {
    /// Push or Pull.
    pub sync_mode: SyncMode,
    /// The member's API endpoint (for Push probes and apply).
    pub api_endpoint: String,
    /// Cloud provider, used by field selectors and spread.
    pub provider: String,
    /// Region, used by field selectors and spread.
    pub region: String,
    /// Zones, used by field selectors and spread.
    pub zones: Vec<String>,
    /// Taints, user's and controller's.
    pub taints: Vec<Taint>,
    /// Karmada's resource models: grades of node size, standardized (ES-4.1); empty when
    /// estimates come from the summed summary.
    pub resource_models: Vec<crate::capacity::ResourceModel>,
}

/// Cluster status (owned by cluster-health).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterStatus {
    /// Conditions (`Ready`, `CompleteAPIEnablements`).
    pub conditions: Vec<Condition>,
    /// API resources the member serves.
    pub api_enablements: Vec<ApiEnablement>,
    /// Member's Kubernetes version.
    pub kubernetes_version: String,
    /// What the member's nodes offer and its pods take (ES-3); `None` until cluster-health
    /// has collected it, which the scheduler reads as "no estimate" (SC-8).
    pub resource_summary: Option<crate::capacity::Summary>,
}

/// A member cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cluster {
    /// Metadata; `labels` are matched by label selectors.
    pub meta: ObjectMeta,
    /// Spec.
    pub spec: ClusterSpec,
    /// Status.
    pub status: ClusterStatus,
}

impl Cluster {
    /// A cluster called `name`, with nothing else set.
    pub fn named(name: &str) -> Self {
        Cluster {
            meta: ObjectMeta {
                name: name.to_owned(),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// The same cluster, also serving `kinds` of `group_version` (SC-6.1's API enablements).
    pub fn serving(mut self, group_version: &str, kinds: &[&str]) -> Self {
        self.status.api_enablements.push(ApiEnablement {
            group_version: group_version.to_owned(),
            kinds: kinds.iter().map(|k| (*k).to_owned()).collect(),
        });
        self
    }

    /// The cluster's name.
    pub fn name(&self) -> &str {
        &self.meta.name
    }

    /// The Ready condition, if any.
    pub fn ready(&self) -> Option<&Condition> {
        find_condition(&self.status.conditions, CONDITION_READY)
    }
}

// ---------------------------------------------------------------------------------------
// Placement
// ---------------------------------------------------------------------------------------

/// Operator of a label or field selector requirement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum SelectorOperator {
    /// Value in the set.
    In,
    /// Value not in the set (or key absent).
    NotIn,
    /// Key present.
    Exists,
    /// Key absent.
    DoesNotExist,
}

/// One requirement of a label selector.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LabelSelectorRequirement {
    /// Label key.
    pub key: String,
    /// Operator.
    pub operator: SelectorOperator,
    /// Values for In / NotIn.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// A Kubernetes label selector.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LabelSelector {
    /// Exact matches, ANDed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Requirements, ANDed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// A field selector over a cluster's `provider`, `region` and `zone`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FieldSelector {
    /// Requirements, ANDed; keys are `provider`, `region` or `zone`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// Which clusters a placement may use.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterAffinity {
    /// Label selector on cluster labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Field selector on provider / region / zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_selector: Option<FieldSelector>,
    /// If non-empty, only these clusters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_names: Vec<String>,
    /// Never these clusters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
}

/// A named affinity term of `clusterAffinities`, tried in order (SC-19). Karmada's YAML
/// writes the affinity inline, beside `affinityName`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(from = "shape::AffinityTerm", into = "shape::AffinityTerm")]
pub struct ClusterAffinityTerm {
    /// Term name, 1–32 chars, unique.
    pub affinity_name: String,
    /// The affinity.
    pub affinity: ClusterAffinity,
}

/// A field to spread by (lower case in Karmada's YAML).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum SpreadField {
    /// Each cluster is its own group.
    Cluster,
    /// Group by region.
    Region,
    /// Group by zone.
    Zone,
    /// Group by provider.
    Provider,
}

/// A spread constraint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SpreadConstraint {
    /// Spread by a well-known field (exclusive with `spreadByLabel`); `""` reads as unset.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "shape::empty_is_none"
    )]
    pub spread_by_field: Option<SpreadField>,
    /// Spread by a cluster label (exclusive with `spreadByField`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub spread_by_label: String,
    /// Maximum number of groups; 0 = unset.
    #[serde(default, skip_serializing_if = "shape::is_zero")]
    pub max_groups: i32,
    /// Minimum number of groups.
    #[serde(default, skip_serializing_if = "shape::is_zero")]
    pub min_groups: i32,
}

/// Duplicated or Divided.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ReplicaSchedulingType {
    /// Every selected cluster runs all replicas.
    Duplicated,
    /// Replicas are divided among the selected clusters (CRD default when
    /// `replicaScheduling` is given, PD-2).
    #[default]
    Divided,
}

/// How Divided replicas are split.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ReplicaDivisionPreference {
    /// Pack into as few clusters as possible.
    Aggregated,
    /// By static or dynamic weights.
    Weighted,
}

/// A static weight for the clusters matching an affinity.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StaticClusterWeight {
    /// Which clusters get the weight.
    #[serde(default)]
    pub target_cluster: ClusterAffinity,
    /// The weight, ≥ 1.
    pub weight: i64,
}

/// Dynamic weight factor; Karmada supports only AvailableReplicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum DynamicWeightFactor {
    /// Weight by available replicas.
    AvailableReplicas,
}

/// Weights for Divided + Weighted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterPreferences {
    /// Static weights.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub static_weight_list: Vec<StaticClusterWeight>,
    /// Dynamic weights (wins over static when set, SC-14.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamic_weight: Option<DynamicWeightFactor>,
}

/// Replica scheduling strategy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReplicaSchedulingStrategy {
    /// Duplicated or Divided (absent: Divided, the CRD default, PD-2).
    #[serde(default)]
    pub replica_scheduling_type: ReplicaSchedulingType,
    /// For Divided: Aggregated or Weighted (PD-1.3 defaults an empty one to Weighted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_division_preference: Option<ReplicaDivisionPreference>,
    /// For Weighted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_preference: Option<ClusterPreferences>,
}

/// Where and how a resource is placed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Placement {
    /// A single affinity (exclusive with `clusterAffinities`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_affinity: Option<ClusterAffinity>,
    /// Ordered affinity terms (SC-19).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_affinities: Vec<ClusterAffinityTerm>,
    /// Tolerations of cluster taints.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_tolerations: Vec<Toleration>,
    /// Spread constraints.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spread_constraints: Vec<SpreadConstraint>,
    /// Replica scheduling; unset behaves as Duplicated (PD-2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_scheduling: Option<ReplicaSchedulingStrategy>,
}

// ---------------------------------------------------------------------------------------
// Failover behaviour
// ---------------------------------------------------------------------------------------

/// Whether a policy may take a template another policy has claimed (PL-3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum Preemption {
    /// A claimed template stays with its policy (Karmada's default).
    #[default]
    Never,
    /// Take it from a policy of lower precedence (see PL-3).
    Always,
}

/// PL-7: what happens when a template's object already exists on a member and Flotilla did
/// not create it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ConflictResolution {
    /// The Work fails; the member's object is left alone (Karmada's default).
    #[default]
    Abort,
    /// The object is taken over.
    Overwrite,
}

impl ConflictResolution {
    /// Whether this is the default (not printed).
    pub fn is_abort(&self) -> bool {
        *self == ConflictResolution::Abort
    }
}

/// How the old copy is removed on eviction (A4). The deprecated spellings `Immediately` and
/// `Graciously` read as `Directly` and `Gracefully`, as Karmada ≤ v1.18 does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum PurgeMode {
    /// Delete the old Work at once; create new Works only once it is gone.
    #[serde(alias = "Immediately")]
    Directly,
    /// Keep the old Work until the new placement is healthy or the grace period ends.
    #[default]
    #[serde(alias = "Graciously")]
    Gracefully,
    /// Keep the old Work until a human decides (application failover only).
    Never,
}

impl PurgeMode {
    /// The Karmada spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            PurgeMode::Directly => "Directly",
            PurgeMode::Gracefully => "Gracefully",
            PurgeMode::Never => "Never",
        }
    }
}

/// One state-preservation rule (TM-10).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StatePreservationRule {
    /// Label name the value is stored under.
    pub alias_label_name: String,
    /// JSONPath into the resource status.
    pub json_path: String,
}

/// Cluster failover behaviour (`failover.cluster`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterFailoverBehavior {
    /// Purge mode; unset: Gracefully (TM-9).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purge_mode: Option<PurgeMode>,
    /// State preservation rules (`statePreservation.rules`).
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "shape::rules")]
    #[schemars(with = "shape::rules::StatePreservation<Vec<StatePreservationRule>>")]
    pub state_preservation: Vec<StatePreservationRule>,
    /// Opt-in failback (A11): seconds an evicted cluster must stay healthy
    /// (`failback.stabilizationWindowSeconds`).
    #[serde(
        default,
        rename = "failback",
        skip_serializing_if = "Option::is_none",
        with = "shape::failback"
    )]
    #[schemars(with = "Option<shape::failback::Failback>")]
    pub failback_stabilization_window_seconds: Option<i64>,
}

/// Application failover behaviour (`failover.application`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ApplicationFailoverBehavior {
    /// `decisionConditions.tolerationSeconds` (default 300, PD-2).
    #[serde(
        default,
        rename = "decisionConditions",
        skip_serializing_if = "Option::is_none",
        with = "shape::decision_conditions"
    )]
    #[schemars(with = "Option<shape::decision_conditions::DecisionConditions>")]
    pub toleration_seconds: Option<i64>,
    /// Purge mode (default Gracefully, PD-2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purge_mode: Option<PurgeMode>,
    /// Grace period for Gracefully (default 600, PD-1.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_period_seconds: Option<i64>,
    /// State preservation rules (`statePreservation.rules`).
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "shape::rules")]
    #[schemars(with = "shape::rules::StatePreservation<Vec<StatePreservationRule>>")]
    pub state_preservation: Vec<StatePreservationRule>,
}

/// Suspension of a policy / binding (WE-6.5): Works are kept but not applied to the members
/// it names.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Suspension {
    /// Stop applying to every cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatching: Option<bool>,
    /// Stop applying to these clusters only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatching_on_clusters: Option<SuspendClusters>,
}

/// The clusters dispatching is suspended on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SuspendClusters {
    /// Cluster names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_names: Vec<String>,
}

impl Suspension {
    /// WE-6.5: whether dispatching to `cluster` is suspended (Karmada's
    /// `GetSuspendDispatching` and its per-cluster list).
    pub fn suspends(&self, cluster: &str) -> bool {
        self.dispatching == Some(true)
            || self
                .dispatching_on_clusters
                .as_ref()
                .is_some_and(|c| c.cluster_names.iter().any(|n| n == cluster))
    }
}

/// Failover behaviour of a policy / binding.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FailoverBehavior {
    /// Cluster failover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterFailoverBehavior>,
    /// Application failover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application: Option<ApplicationFailoverBehavior>,
}

// ---------------------------------------------------------------------------------------
// Policies
// ---------------------------------------------------------------------------------------

/// Selects resource templates.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ResourceSelector {
    /// API version, e.g. `apps/v1`.
    #[serde(default)]
    pub api_version: String,
    /// Kind, e.g. `Deployment`.
    #[serde(default)]
    pub kind: String,
    /// Namespace (defaulted to the policy's, PD-1.1).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name; empty = any.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Label selector; ignored when `name` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
}

/// Spec shared by PropagationPolicy and ClusterPropagationPolicy, in Karmada's YAML shape.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PropagationSpec {
    /// Which templates the policy applies to.
    #[serde(default)]
    pub resource_selectors: Vec<ResourceSelector>,
    /// Higher wins among matching policies.
    #[serde(default, skip_serializing_if = "shape::is_zero")]
    pub priority: i32,
    /// Placement.
    #[serde(default)]
    pub placement: Placement,
    /// Failover behaviour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<FailoverBehavior>,
    /// Propagate dependencies (required by application failover).
    #[serde(default, skip_serializing_if = "shape::is_false")]
    pub propagate_deps: bool,
    /// Scheduler name (default `default-scheduler`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scheduler_name: String,
    /// PL-3: whether it may take a template another policy claimed.
    #[serde(default)]
    pub preemption: Preemption,
    /// PL-6: when policy changes reach the templates it claimed; unset: at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activation_preference: Option<ActivationPreference>,
    /// PL-2, WE-6.1: member objects stay when their Works are deleted.
    #[serde(default, skip_serializing_if = "shape::is_false")]
    pub preserve_resources_on_deletion: bool,
    /// WE-6.5: dispatching suspended, everywhere or on named clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspension: Option<Suspension>,
    /// PL-7: what to do with a member object Flotilla did not create.
    #[serde(default, skip_serializing_if = "ConflictResolution::is_abort")]
    pub conflict_resolution: ConflictResolution,
}

/// When a policy's changes reach the templates it already claimed (PL-6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ActivationPreference {
    /// Only at each template's next change.
    Lazy,
}

/// A namespaced or cluster-wide propagation policy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PropagationPolicy {
    /// Metadata; an empty namespace means a ClusterPropagationPolicy.
    pub meta: ObjectMeta,
    /// Spec.
    pub spec: PropagationSpec,
}

/// A condition on a cluster condition (CH-16).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MatchCondition {
    /// Condition type.
    pub condition_type: String,
    /// In or NotIn (others never match, CH-18).
    pub operator: SelectorOperator,
    /// Status values.
    #[serde(default)]
    pub status_values: Vec<ConditionStatus>,
}

/// A taint a ClusterTaintPolicy manages.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TaintSpec {
    /// Key.
    pub key: String,
    /// Value.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    /// Effect; required (`""` is refused by name).
    #[serde(deserialize_with = "shape::required_effect")]
    pub effect: TaintEffect,
}

/// ClusterTaintPolicy (CH-16). Its spec in Karmada's YAML is [`shape::TaintPolicySpec`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterTaintPolicy {
    /// Metadata.
    pub meta: ObjectMeta,
    /// Clusters the policy applies to; unset: all.
    pub target_clusters: Option<ClusterAffinity>,
    /// Add the taints when all of these match.
    pub add_on_conditions: Vec<MatchCondition>,
    /// Remove the taints when all of these match.
    pub remove_on_conditions: Vec<MatchCondition>,
    /// The taints.
    pub taints: Vec<TaintSpec>,
}

// ---------------------------------------------------------------------------------------
// Binding
// ---------------------------------------------------------------------------------------

/// Which template a binding is for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectReference {
    /// API version.
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Template uid.
    pub uid: String,
}

impl ObjectReference {
    /// A reference to the template `namespace/name` of `api_version` `kind`, without a uid.
    pub fn new(api_version: &str, kind: &str, namespace: &str, name: &str) -> Self {
        ObjectReference {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            uid: String::new(),
        }
    }
}

/// A scheduling result entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TargetCluster {
    /// Cluster name.
    pub name: String,
    /// Replicas on it.
    pub replicas: i32,
}

impl TargetCluster {
    /// Shorthand constructor.
    pub fn new(name: impl Into<String>, replicas: i32) -> Self {
        TargetCluster {
            name: name.into(),
            replicas,
        }
    }
}

/// An eviction in progress (§1.7).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GracefulEvictionTask {
    /// The cluster being evicted.
    pub from_cluster: String,
    /// Purge mode.
    pub purge_mode: PurgeMode,
    /// Replicas the evicted target had (only if > 0).
    pub replicas: Option<i32>,
    /// CamelCase reason.
    pub reason: String,
    /// Message.
    pub message: String,
    /// Who created the task.
    pub producer: String,
    /// Per-task timeout (exclusive with `suppress_deletion`).
    pub grace_period_seconds: Option<i64>,
    /// `Some(true)` keeps the old copy until a human flips it; `Some(false)` removes now.
    pub suppress_deletion: Option<bool>,
    /// Preserved state as labels (TM-10).
    pub preserved_label_state: BTreeMap<String, String>,
    /// Target names before the failover.
    pub clusters_before_failover: Vec<String>,
    /// Stamped by the graceful-eviction service (GE-3.1).
    pub creation_timestamp: Option<Time>,
    /// W3C trace context of the step that created the task (observability).
    pub trace_context: String,
}

/// Health of a resource on one member.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ResourceHealth {
    /// Healthy.
    Healthy,
    /// Unhealthy.
    Unhealthy,
    /// Not known (not collected, or apply failed).
    #[default]
    Unknown,
}

/// Per-cluster status of a binding's resource (WE-8).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AggregatedStatusItem {
    /// Cluster name.
    pub cluster_name: String,
    /// Whether the Work was applied.
    pub applied: bool,
    /// Apply error, if any.
    pub applied_message: String,
    /// Health.
    pub health: ResourceHealth,
    /// Ready replicas reported by the member.
    pub ready_replicas: i32,
    /// The resource's `status` on the member as JSON text (empty when none was collected):
    /// what state preservation reads (TM-10).
    pub status: String,
}

impl AggregatedStatusItem {
    /// The status of a Work applied on `cluster`, its resource in `health`, no replicas ready.
    pub fn applied(cluster: &str, health: ResourceHealth) -> Self {
        AggregatedStatusItem {
            cluster_name: cluster.to_owned(),
            applied: true,
            health,
            ..Default::default()
        }
    }
}

/// Per-replica resource requests (Karmada's `replicaRequirements`, ES-1), which the
/// scheduler divides each cluster's free resources by (ES-2, SC-8).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplicaRequirements {
    /// What one replica requests: cpu in millicores, every other resource in its unit;
    /// only positive amounts.
    pub resource_request: crate::capacity::ResourceList,
}

impl ReplicaRequirements {
    /// Requirements of these `(resource, amount)` pairs.
    pub fn of(pairs: &[(&str, i64)]) -> Self {
        ReplicaRequirements {
            resource_request: pairs.iter().map(|(n, a)| ((*n).to_owned(), *a)).collect(),
        }
    }
}

/// A binding's spec.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceBindingSpec {
    /// The template.
    pub resource: ObjectReference,
    /// Desired replicas (0 for non-workloads).
    pub replicas: i32,
    /// Per-replica requests.
    pub replica_requirements: Option<ReplicaRequirements>,
    /// Copy of the policy's placement.
    pub placement: Option<Placement>,
    /// The scheduling result.
    pub clusters: Vec<TargetCluster>,
    /// Evictions in progress.
    pub graceful_eviction_tasks: Vec<GracefulEvictionTask>,
    /// Clusters required by dependants (`requiredBy[].clusters`, flattened).
    pub required_by_clusters: Vec<String>,
    /// An explicit reschedule request (Fresh mode, SC-3.4).
    pub reschedule_triggered_at: Option<Time>,
    /// Copy of the policy's failover behaviour.
    pub failover: Option<FailoverBehavior>,
    /// Scheduler name.
    pub scheduler_name: String,
    /// Dependencies follow the template (`propagateDeps`, DEP-2).
    pub propagate_deps: bool,
    /// Copy of the policy's `preserveResourcesOnDeletion` (PL-2, WE-6.1).
    pub preserve_resources_on_deletion: bool,
    /// Copy of the policy's `suspension` (WE-6.5).
    pub suspension: Option<Suspension>,
    /// Copy of the policy's `conflictResolution` (PL-7).
    pub conflict_resolution: ConflictResolution,
}

/// A binding's status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceBindingStatus {
    /// `Scheduled`, `FullyApplied`, `ReplacementPending`.
    pub conditions: Vec<Condition>,
    /// Generation the scheduler last acted on.
    pub scheduler_observed_generation: i64,
    /// Name of the ClusterAffinities term in use.
    pub scheduler_observing_affinity_name: String,
    /// When the scheduler last wrote a result.
    pub last_scheduled_time: Option<Time>,
    /// The placement the scheduler last applied (A3: the taint manager reads tolerations
    /// from here, never from the live policy; Karmada keeps it in an annotation).
    pub applied_placement: Option<Placement>,
    /// Per-cluster status.
    pub aggregated_status: Vec<AggregatedStatusItem>,
    /// The generation `aggregated_status` was computed for (Flotilla, I1a).
    pub aggregated_status_observed_generation: i64,
    /// A11: clusters evicted by the taint manager that the binding may fail back to.
    pub failback_clusters: Vec<String>,
    /// SC-6.7: clusters application failover evicted the binding from, kept out of its
    /// placement.
    pub application_failover_clusters: Vec<String>,
    /// SC-4.6 (Flotilla, A16): replicas the scheduler could not place for lack of room; the
    /// result carries the rest. 0 when every replica is placed.
    pub unschedulable_replicas: i32,
}

/// A ResourceBinding: a template, its placement and where it runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceBinding {
    /// Metadata.
    pub meta: ObjectMeta,
    /// Spec.
    pub spec: ResourceBindingSpec,
    /// Status.
    pub status: ResourceBindingStatus,
}

impl ResourceBinding {
    /// Whether `cluster` is in the scheduling result.
    pub fn targets(&self, cluster: &str) -> bool {
        self.spec.clusters.iter().any(|t| t.name == cluster)
    }

    /// Whether `cluster` has an eviction task.
    pub fn has_task_for(&self, cluster: &str) -> bool {
        self.spec
            .graceful_eviction_tasks
            .iter()
            .any(|t| t.from_cluster == cluster)
    }
}

pub mod shape;
