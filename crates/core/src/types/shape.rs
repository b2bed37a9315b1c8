//! Where the domain types are flatter than Karmada's YAML: the serde adapters that map the
//! one to the other, so that the types in [`super`] read and write Karmada's shape.

use schemars::JsonSchema;
use serde::de::{DeserializeOwned, IntoDeserializer};
use serde::{Deserialize, Deserializer, Serialize};

use super::{
    ClusterAffinity, ClusterAffinityTerm, ClusterTaintPolicy, ConditionStatus, FieldSelector,
    LabelSelector, MatchCondition, ObjectMeta, TaintEffect, TaintSpec,
};

/// An enum where Kubernetes writes `""` for "unset": `""` and an absent field read as `None`.
pub fn empty_is_none<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    match Option::<String>::deserialize(deserializer)? {
        None => Ok(None),
        Some(s) if s.is_empty() => Ok(None),
        Some(s) => T::deserialize(s.into_deserializer())
            .map(Some)
            .map_err(|e: serde::de::value::Error| serde::de::Error::custom(e)),
    }
}

/// A condition status as YAML may write it: `True`/`False` unquoted read as booleans.
#[derive(Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum StatusValue {
    /// `True` or `False` unquoted.
    Bool(bool),
    /// `"True"`, `"False"` or `"Unknown"`.
    Text(String),
}

impl TryFrom<StatusValue> for ConditionStatus {
    type Error = String;

    fn try_from(value: StatusValue) -> Result<Self, String> {
        match value {
            StatusValue::Bool(true) => Ok(ConditionStatus::True),
            StatusValue::Bool(false) => Ok(ConditionStatus::False),
            StatusValue::Text(s) => match s.as_str() {
                "True" => Ok(ConditionStatus::True),
                "False" => Ok(ConditionStatus::False),
                "Unknown" => Ok(ConditionStatus::Unknown),
                other => Err(format!(
                    "invalid value: {other:?}, expected one of \"True\", \"False\", \"Unknown\""
                )),
            },
        }
    }
}

/// A taint's effect, which a ClusterTaintPolicy must name (`""` is refused by name).
pub fn required_effect<'de, D: Deserializer<'de>>(d: D) -> Result<TaintEffect, D::Error> {
    match empty_is_none(d)? {
        Some(effect) => Ok(effect),
        None => Err(serde::de::Error::custom(
            "Required value: a taint needs an effect (NoSchedule or NoExecute)",
        )),
    }
}

/// A ClusterTaintPolicy's `spec` in Karmada's YAML; the domain type keeps these fields beside
/// its metadata.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TaintPolicySpec {
    /// Clusters the policy applies to; absent: all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_clusters: Option<ClusterAffinity>,
    /// Add the taints when all of these match.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub add_on_conditions: Vec<MatchCondition>,
    /// Remove the taints when all of these match.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove_on_conditions: Vec<MatchCondition>,
    /// The taints.
    #[serde(default)]
    pub taints: Vec<TaintSpec>,
}

impl TaintPolicySpec {
    /// The policy with this spec and `meta`.
    pub fn into_policy(self, meta: ObjectMeta) -> ClusterTaintPolicy {
        let TaintPolicySpec {
            target_clusters,
            add_on_conditions,
            remove_on_conditions,
            taints,
        } = self;
        ClusterTaintPolicy {
            meta,
            target_clusters,
            add_on_conditions,
            remove_on_conditions,
            taints,
        }
    }
}

impl From<ClusterTaintPolicy> for TaintPolicySpec {
    fn from(policy: ClusterTaintPolicy) -> Self {
        let ClusterTaintPolicy {
            meta: _,
            target_clusters,
            add_on_conditions,
            remove_on_conditions,
            taints,
        } = policy;
        TaintPolicySpec {
            target_clusters,
            add_on_conditions,
            remove_on_conditions,
            taints,
        }
    }
}

/// `skip_serializing_if` for a zero count.
#[allow(clippy::trivially_copy_pass_by_ref)] // serde hands the field by reference
pub fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// `skip_serializing_if` for a false flag.
#[allow(clippy::trivially_copy_pass_by_ref)] // serde hands the field by reference
pub fn is_false(b: &bool) -> bool {
    !*b
}

/// A `clusterAffinities` term as Karmada writes it: the affinity inline beside its name.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AffinityTerm {
    #[serde(default)]
    affinity_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    label_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    field_selector: Option<FieldSelector>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    cluster_names: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    exclude: Vec<String>,
}

impl From<AffinityTerm> for ClusterAffinityTerm {
    fn from(t: AffinityTerm) -> Self {
        let AffinityTerm {
            affinity_name,
            label_selector,
            field_selector,
            cluster_names,
            exclude,
        } = t;
        ClusterAffinityTerm {
            affinity_name,
            affinity: ClusterAffinity {
                label_selector,
                field_selector,
                cluster_names,
                exclude,
            },
        }
    }
}

impl From<ClusterAffinityTerm> for AffinityTerm {
    fn from(t: ClusterAffinityTerm) -> Self {
        let ClusterAffinityTerm {
            affinity_name,
            affinity:
                ClusterAffinity {
                    label_selector,
                    field_selector,
                    cluster_names,
                    exclude,
                },
        } = t;
        AffinityTerm {
            affinity_name,
            label_selector,
            field_selector,
            cluster_names,
            exclude,
        }
    }
}

/// `statePreservation: {rules: [...]}` for a list of rules.
pub mod rules {
    use schemars::JsonSchema;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::types::StatePreservationRule;

    #[derive(Serialize, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    #[schemars(bound = "R: JsonSchema + Default + Serialize")]
    /// State preservation: what of a workload's status is carried to its next cluster.
    pub struct StatePreservation<R> {
        #[serde(default)]
        /// The rules.
        pub rules: R,
    }

    /// Writes `{rules: [...]}`.
    pub fn serialize<S: Serializer>(
        rules: &[StatePreservationRule],
        s: S,
    ) -> Result<S::Ok, S::Error> {
        StatePreservation { rules }.serialize(s)
    }

    /// Reads `{rules: [...]}`; `null` reads as no rules.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<StatePreservationRule>, D::Error> {
        let sp = Option::<StatePreservation<Vec<StatePreservationRule>>>::deserialize(d)?;
        Ok(sp.map(|s| s.rules).unwrap_or_default())
    }
}

/// `failback: {stabilizationWindowSeconds: N}` for `Some(N)`.
pub mod failback {
    use schemars::JsonSchema;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    /// Failback: workloads return to a cluster once it has been healthy long enough.
    pub struct Failback {
        // 0 is valid, and a writer that leaves zeroes out leaves it out
        #[serde(default)]
        /// Seconds an evicted cluster must stay healthy before workloads return to it.
        pub stabilization_window_seconds: i64,
    }

    /// Writes `{stabilizationWindowSeconds: N}` (only called for `Some`).
    #[allow(clippy::ref_option)] // serde's `with` hands the field by reference
    pub fn serialize<S: Serializer>(window: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
        window
            .map(|w| Failback {
                stabilization_window_seconds: w,
            })
            .serialize(s)
    }

    /// Reads `{stabilizationWindowSeconds: N}` as `Some(N)`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
        Ok(Option::<Failback>::deserialize(d)?.map(|f| f.stabilization_window_seconds))
    }
}

/// `decisionConditions: {tolerationSeconds: N}` for `Some(N)`.
pub mod decision_conditions {
    use schemars::JsonSchema;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    /// When an unhealthy application is moved.
    pub struct DecisionConditions {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        /// Seconds an application may stay unhealthy before it is moved.
        pub toleration_seconds: Option<i64>,
    }

    /// Writes `{tolerationSeconds: N}` (only called for `Some`).
    #[allow(clippy::ref_option)] // serde's `with` hands the field by reference
    pub fn serialize<S: Serializer>(seconds: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
        DecisionConditions {
            toleration_seconds: *seconds,
        }
        .serialize(s)
    }

    /// Reads `{tolerationSeconds: N}`; `{}` reads as unset.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
        Ok(Option::<DecisionConditions>::deserialize(d)?.and_then(|c| c.toleration_seconds))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use crate::types::{
        PropagationSpec, PurgeMode, ReplicaSchedulingType, SpreadField, TolerationOperator,
    };

    /// Karmada's YAML, with every place where its shape and the domain's differ.
    const KARMADA: &str = r#"
resourceSelectors:
- {apiVersion: apps/v1, kind: Deployment, name: nginx}
priority: 3
preemption: Always
propagateDeps: true
placement:
  clusterAffinities:
  - affinityName: primary
    clusterNames: [member1]
  - affinityName: backup
    labelSelector: {matchLabels: {tier: backup}}
    exclude: [member9]
  clusterTolerations:
  - {key: cluster.karmada.io/not-ready, operator: "", effect: "", tolerationSeconds: 30}
  spreadConstraints:
  - {spreadByField: region, maxGroups: 2, minGroups: 1}
  - {spreadByField: "", spreadByLabel: team}
  replicaScheduling:
    replicaDivisionPreference: Weighted
    weightPreference: {dynamicWeight: AvailableReplicas}
failover:
  application:
    decisionConditions: {tolerationSeconds: 120}
    purgeMode: Immediately
    statePreservation:
      rules: [{aliasLabelName: app.state, jsonPath: "{.status.phase}"}]
  cluster:
    purgeMode: Graciously
    failback: {stabilizationWindowSeconds: 0}
"#;

    #[test]
    fn karmada_yaml_reads_into_the_domain_shape_and_writes_back_the_same() {
        let spec: PropagationSpec = serde_norway::from_str(KARMADA).unwrap();
        let terms = &spec.placement.cluster_affinities;
        assert_eq!(terms[1].affinity_name, "backup");
        assert_eq!(
            terms[1].affinity.exclude,
            ["member9"],
            "the inline affinity"
        );
        let toleration = &spec.placement.cluster_tolerations[0];
        assert_eq!(
            toleration.operator,
            TolerationOperator::Equal,
            "\"\" is Equal"
        );
        assert_eq!(toleration.effect, None, "\"\" is every effect");
        let spread = &spec.placement.spread_constraints;
        assert_eq!(spread[0].spread_by_field, Some(SpreadField::Region));
        assert_eq!(spread[1].spread_by_field, None);
        let rs = spec.placement.replica_scheduling.as_ref().unwrap();
        assert_eq!(
            rs.replica_scheduling_type,
            ReplicaSchedulingType::Divided,
            "the CRD default"
        );
        let failover = spec.failover.as_ref().unwrap();
        let app = failover.application.as_ref().unwrap();
        assert_eq!(app.toleration_seconds, Some(120));
        assert_eq!(
            app.purge_mode,
            Some(PurgeMode::Directly),
            "deprecated alias"
        );
        assert_eq!(app.state_preservation[0].alias_label_name, "app.state");
        let cluster = failover.cluster.as_ref().unwrap();
        assert_eq!(cluster.purge_mode, Some(PurgeMode::Gracefully));
        assert_eq!(cluster.failback_stabilization_window_seconds, Some(0));

        // written back in Karmada's shape, and read again into the same value
        let json = serde_json::to_value(&spec).unwrap();
        assert_eq!(
            json["failover"]["application"]["decisionConditions"]["tolerationSeconds"],
            120
        );
        assert_eq!(
            json["failover"]["application"]["statePreservation"]["rules"][0]["jsonPath"],
            "{.status.phase}"
        );
        assert_eq!(
            json["failover"]["cluster"]["failback"]["stabilizationWindowSeconds"],
            0
        );
        assert_eq!(
            json["placement"]["clusterAffinities"][1]["labelSelector"]["matchLabels"]["tier"],
            "backup"
        );
        assert_eq!(
            json["placement"]["spreadConstraints"][0]["spreadByField"],
            "region"
        );
        assert_eq!(json["failover"]["application"]["purgeMode"], "Directly");
        let again: PropagationSpec = serde_json::from_value(json).unwrap();
        assert_eq!(again, spec);
    }

    #[test]
    fn bad_values_name_their_field() {
        let err = |yaml: &str| {
            serde_norway::from_str::<PropagationSpec>(yaml)
                .unwrap_err()
                .to_string()
        };
        let e = err("placement: {clusterTolerations: [{key: k, operator: Lt}]}");
        assert!(e.contains("Karmada does not support Lt/Gt"), "{e}");
        let e = err("placement: {clusterAfinity: {}}");
        assert!(e.contains("unknown field `clusterAfinity`"), "{e}");
        let e = err("placement: {spreadConstraints: [{spreadByField: planet}]}");
        assert!(e.contains("unknown variant `planet`"), "{e}");
        let e = err("failover: {cluster: {failback: {window: 3}}}");
        assert!(e.contains("unknown field `window`"), "{e}");
    }

    #[test]
    fn a_taint_policy_spec_reads_karmada_yaml_and_writes_it_back() {
        use crate::types::shape::TaintPolicySpec;
        use crate::types::{ConditionStatus, TaintEffect};
        let yaml = r#"
targetClusters: {clusterNames: [member1]}
addOnConditions:
- {conditionType: Ready, operator: In, statusValues: [False, "Unknown"]}
removeOnConditions:
- {conditionType: Ready, operator: In, statusValues: [True]}
taints:
- {key: cluster.karmada.io/not-ready, effect: NoExecute}
"#;
        let spec: TaintPolicySpec = serde_norway::from_str(yaml).unwrap();
        assert_eq!(
            spec.add_on_conditions[0].status_values,
            [ConditionStatus::False, ConditionStatus::Unknown],
            "YAML's False is the string Kubernetes means"
        );
        assert_eq!(spec.taints[0].effect, TaintEffect::NoExecute);
        let json = serde_json::to_value(&spec).unwrap();
        assert_eq!(json["removeOnConditions"][0]["statusValues"][0], "True");
        assert_eq!(
            serde_json::from_value::<TaintPolicySpec>(json).unwrap(),
            spec
        );
        let e = serde_norway::from_str::<TaintPolicySpec>("taints: [{key: k, effect: \"\"}]")
            .unwrap_err()
            .to_string();
        assert!(e.contains("Required value: a taint needs an effect"), "{e}");
        let e = serde_norway::from_str::<TaintPolicySpec>(
            "addOnConditions: [{conditionType: Ready, operator: In, statusValues: [Maybe]}]",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("\"Maybe\""), "{e}");
    }
}
