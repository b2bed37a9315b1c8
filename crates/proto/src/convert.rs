//! Conversions between the wire types ([`crate::v1`]) and the domain types
//! ([`flotilla_core::types`]).
//!
//! - `From<domain> for wire` is infallible.
//! - `TryFrom<wire> for domain` rejects what the domain cannot represent: unknown enum
//!   values, UNSPECIFIED where a value is required, and malformed timestamps. The error's
//!   [`ConvertError::field`] is the JSON path of the bad field relative to the converted
//!   message, with proto3 JSON (lowerCamelCase) names, e.g. `spec.taints[2].effect`.
//! - An absent message field reads as the domain default (proto3 has no required fields).
//!
//! UNSPECIFIED enum values read as follows: where the domain field is an `Option`, as `None`
//! (e.g. a toleration's effect: every effect); where Kubernetes gives the empty value a
//! meaning, as that meaning (a toleration's operator: Equal; `replicaSchedulingType`:
//! Divided, the CRD default, PD-2); everywhere else they are rejected.
//!
//! Both directions destructure every struct, so a field added to a domain type or to a
//! message fails to compile here until it is mapped or explicitly skipped.
//!
//! Wire fields the domain does not model are dropped by `TryFrom` and left empty by `From`:
//! `ClusterSpec.capacity`, `ResourceSummary.allocatableReplicas` (the domain computes it from
//! the summary, ES-2; `From` writes the pods still allowed), `ApiResource.name`,
//! `AggregatedStatusItem.status`, `ResourceQuantities.pods` in replica requirements, and the
//! namespace/name/replicas of `requiredBy[]` entries (the domain keeps only the flattened
//! cluster names, which `From` writes as a single unnamed entry). `Workload`, `Work` and
//! `Event` have no domain counterpart yet. Timestamps are kept to the millisecond (finer
//! nanoseconds are truncated).

use std::fmt;

use flotilla_core::Time;
use flotilla_core::capacity;
use flotilla_core::types as domain;
use prost_types::Timestamp;

use crate::v1;

// ---------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------

/// A wire message that cannot be converted into a domain value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ConvertError {
    /// JSON path of the offending field relative to the converted message, with proto3 JSON
    /// names, e.g. `spec.gracefulEvictionTasks[0].purgeMode`; empty for the message itself.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

// === impl ConvertError ===

impl ConvertError {
    /// An error at `field` (a JSON path, possibly empty).
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        ConvertError {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The same error seen from the parent message: `effect` within `taints[2]` becomes
    /// `taints[2].effect`.
    #[must_use]
    pub fn within(mut self, parent: &str) -> Self {
        self.field = if self.field.is_empty() {
            parent.to_owned()
        } else if self.field.starts_with('[') {
            format!("{parent}{}", self.field)
        } else {
            format!("{parent}.{}", self.field)
        };
        self
    }

    /// The same error seen from a repeated field: within `parent[index]`.
    #[must_use]
    pub fn at_index(self, parent: &str, index: usize) -> Self {
        self.within(&format!("{parent}[{index}]"))
    }
}

// ---------------------------------------------------------------------------------------
// Timestamps
// ---------------------------------------------------------------------------------------

/// Seconds of 0001-01-01T00:00:00Z, the earliest valid `google.protobuf.Timestamp`.
const MIN_TIMESTAMP_SECONDS: i64 = -62_135_596_800;
/// Seconds of 9999-12-31T23:59:59Z, the latest valid `google.protobuf.Timestamp`.
const MAX_TIMESTAMP_SECONDS: i64 = 253_402_300_799;

/// A domain time as a wire timestamp (exact: milliseconds fit in nanoseconds).
pub fn time_to_timestamp(time: Time) -> Timestamp {
    let millis = time.as_millis();
    // rem_euclid(1000) is in 0..1000, so the nanos are in 0..1e9 and fit an i32.
    let nanos = (millis.rem_euclid(1000) * 1_000_000) as i32;
    Timestamp {
        seconds: millis.div_euclid(1000),
        nanos,
    }
}

/// A wire duration as a `std::time::Duration`: negative durations and nanos outside
/// `[0, 999999999]` are refused. prost-types' own `TryFrom` panics on `seconds: i64::MIN`
/// (it negates it), which a caller can send; every service converts through this instead.
pub fn duration_from_wire(d: &prost_types::Duration) -> Result<std::time::Duration, ConvertError> {
    if !(0..1_000_000_000).contains(&d.nanos) {
        return Err(ConvertError::new(
            "",
            format!("nanos {} outside [0, 999999999]", d.nanos),
        ));
    }
    let seconds = u64::try_from(d.seconds)
        .map_err(|_| ConvertError::new("", format!("seconds {} is negative", d.seconds)))?;
    Ok(std::time::Duration::new(seconds, d.nanos.unsigned_abs()))
}

/// A wire timestamp as a domain time, truncated to the millisecond. Rejects nanos outside
/// `0..1e9` and seconds outside the years 1..=9999, as the Timestamp specification requires.
pub fn timestamp_to_time(ts: &Timestamp) -> Result<Time, ConvertError> {
    if !(0..1_000_000_000).contains(&ts.nanos) {
        return Err(ConvertError::new(
            "",
            format!("nanos {} outside [0, 999999999]", ts.nanos),
        ));
    }
    if !(MIN_TIMESTAMP_SECONDS..=MAX_TIMESTAMP_SECONDS).contains(&ts.seconds) {
        return Err(ConvertError::new(
            "",
            format!("seconds {} outside the years 0001..=9999", ts.seconds),
        ));
    }
    // In range, seconds × 1000 cannot overflow.
    Ok(Time::from_millis(
        ts.seconds * 1000 + i64::from(ts.nanos / 1_000_000),
    ))
}

fn opt_timestamp(time: Option<Time>) -> Option<Timestamp> {
    time.map(time_to_timestamp)
}

fn opt_time(ts: Option<Timestamp>, field: &str) -> Result<Option<Time>, ConvertError> {
    ts.map(|ts| timestamp_to_time(&ts).map_err(|e| e.within(field)))
        .transpose()
}

// ---------------------------------------------------------------------------------------
// Enums
// ---------------------------------------------------------------------------------------

/// A domain enum with a wire counterpart of the same name and variants (plus UNSPECIFIED).
///
/// Use it for enum fields of requests that are not converted as part of a message, e.g.
/// `domain::PurgeMode::from_wire(req.default_purge_mode, "options.defaultPurgeMode")`.
pub trait WireEnum: Sized + fmt::Debug {
    /// The enum's name in the proto files.
    const NAME: &'static str;

    /// Decodes a raw wire value: `Ok(None)` for UNSPECIFIED, an error at `field` for a value
    /// the enum does not define.
    fn from_wire(raw: i32, field: &str) -> Result<Option<Self>, ConvertError>;

    /// Decodes a raw wire value that must be set: UNSPECIFIED is an error at `field`.
    fn from_wire_required(raw: i32, field: &str) -> Result<Self, ConvertError> {
        Self::from_wire(raw, field)?.ok_or_else(|| {
            ConvertError::new(
                field,
                format!("{} must be set, not UNSPECIFIED", Self::NAME),
            )
        })
    }

    /// Decodes a raw wire value whose UNSPECIFIED means the domain default.
    fn from_wire_or_default(raw: i32, field: &str) -> Result<Self, ConvertError>
    where
        Self: Default,
    {
        Ok(Self::from_wire(raw, field)?.unwrap_or_default())
    }
}

/// `From<domain::E> for v1::E` and `WireEnum for domain::E`, variant by variant. Both
/// matches are exhaustive, so a variant added on either side fails to compile here.
macro_rules! wire_enum {
    ($name:ident { $($variant:ident),+ $(,)? }) => {
        impl From<domain::$name> for v1::$name {
            fn from(value: domain::$name) -> Self {
                match value {
                    $(domain::$name::$variant => v1::$name::$variant,)+
                }
            }
        }

        impl WireEnum for domain::$name {
            const NAME: &'static str = stringify!($name);

            fn from_wire(raw: i32, field: &str) -> Result<Option<Self>, ConvertError> {
                let wire = v1::$name::try_from(raw).map_err(|_| {
                    ConvertError::new(field, format!("unknown {} value {raw}", Self::NAME))
                })?;
                Ok(match wire {
                    v1::$name::Unspecified => None,
                    $(v1::$name::$variant => Some(domain::$name::$variant),)+
                })
            }
        }
    };
}

wire_enum!(TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute
});
wire_enum!(TolerationOperator { Equal, Exists });
wire_enum!(SyncMode { Push, Pull });
wire_enum!(ConditionStatus {
    True,
    False,
    Unknown
});
wire_enum!(SelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist
});
wire_enum!(SpreadField {
    Cluster,
    Region,
    Zone,
    Provider
});
wire_enum!(ReplicaSchedulingType {
    Duplicated,
    Divided
});
wire_enum!(ReplicaDivisionPreference {
    Aggregated,
    Weighted
});
wire_enum!(DynamicWeightFactor { AvailableReplicas });
wire_enum!(Preemption { Never, Always });
wire_enum!(ConflictResolution { Abort, Overwrite });
wire_enum!(ActivationPreference { Lazy });
wire_enum!(PurgeMode {
    Directly,
    Gracefully,
    Never
});
wire_enum!(ResourceHealth {
    Healthy,
    Unhealthy,
    Unknown
});

/// The raw wire value of a domain enum.
fn enc<D, W>(value: D) -> i32
where
    W: From<D> + Into<i32>,
{
    W::from(value).into()
}

/// The raw wire value of an optional domain enum (UNSPECIFIED for `None`).
fn enc_opt<D, W>(value: Option<D>) -> i32
where
    W: From<D> + Into<i32> + Default,
{
    value.map_or_else(W::default, W::from).into()
}

// ---------------------------------------------------------------------------------------
// Collections and nested messages
// ---------------------------------------------------------------------------------------

fn to_wire<D, W: From<D>>(items: Vec<D>) -> Vec<W> {
    items.into_iter().map(W::from).collect()
}

fn list<W, D>(items: Vec<W>, field: &str) -> Result<Vec<D>, ConvertError>
where
    D: TryFrom<W, Error = ConvertError>,
{
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| D::try_from(item).map_err(|e| e.at_index(field, i)))
        .collect()
}

fn opt<W, D>(item: Option<W>, field: &str) -> Result<Option<D>, ConvertError>
where
    D: TryFrom<W, Error = ConvertError>,
{
    item.map(|item| D::try_from(item).map_err(|e| e.within(field)))
        .transpose()
}

/// A message field the domain always has: absent reads as the domain default.
fn msg<W, D>(item: Option<W>, field: &str) -> Result<D, ConvertError>
where
    D: TryFrom<W, Error = ConvertError> + Default,
{
    Ok(opt(item, field)?.unwrap_or_default())
}

// ---------------------------------------------------------------------------------------
// Common
// ---------------------------------------------------------------------------------------

impl From<domain::ObjectMeta> for v1::ObjectMeta {
    fn from(meta: domain::ObjectMeta) -> Self {
        let domain::ObjectMeta {
            name,
            namespace,
            uid,
            resource_version,
            generation,
            labels,
            annotations,
            creation_timestamp,
            deletion_timestamp,
            finalizers,
            managed_fields,
        } = meta;
        v1::ObjectMeta {
            name,
            namespace,
            uid,
            resource_version,
            generation,
            labels,
            annotations,
            creation_timestamp: opt_timestamp(creation_timestamp),
            deletion_timestamp: opt_timestamp(deletion_timestamp),
            finalizers,
            managed_fields: managed_fields.into_iter().map(Into::into).collect(),
        }
    }
}

impl From<domain::ManagedFieldsEntry> for v1::ManagedFieldsEntry {
    fn from(entry: domain::ManagedFieldsEntry) -> Self {
        let domain::ManagedFieldsEntry {
            manager,
            operation,
            api_version,
            time,
            fields_type,
            fields_v1,
            subresource,
        } = entry;
        v1::ManagedFieldsEntry {
            manager,
            operation,
            api_version,
            time: opt_timestamp(time),
            fields_type,
            fields_v1,
            subresource,
        }
    }
}

impl TryFrom<v1::ManagedFieldsEntry> for domain::ManagedFieldsEntry {
    type Error = ConvertError;

    fn try_from(entry: v1::ManagedFieldsEntry) -> Result<Self, ConvertError> {
        let v1::ManagedFieldsEntry {
            manager,
            operation,
            api_version,
            time,
            fields_type,
            fields_v1,
            subresource,
        } = entry;
        Ok(domain::ManagedFieldsEntry {
            manager,
            operation,
            api_version,
            time: opt_time(time, "managedFields.time")?,
            fields_type,
            fields_v1,
            subresource,
        })
    }
}

impl TryFrom<v1::ObjectMeta> for domain::ObjectMeta {
    type Error = ConvertError;

    fn try_from(meta: v1::ObjectMeta) -> Result<Self, ConvertError> {
        let v1::ObjectMeta {
            name,
            namespace,
            uid,
            resource_version,
            generation,
            labels,
            annotations,
            creation_timestamp,
            deletion_timestamp,
            finalizers,
            managed_fields,
        } = meta;
        Ok(domain::ObjectMeta {
            name,
            namespace,
            uid,
            resource_version,
            generation,
            labels,
            annotations,
            creation_timestamp: opt_time(creation_timestamp, "creationTimestamp")?,
            deletion_timestamp: opt_time(deletion_timestamp, "deletionTimestamp")?,
            finalizers,
            managed_fields: managed_fields
                .into_iter()
                .map(TryFrom::try_from)
                .collect::<Result<_, _>>()?,
        })
    }
}

impl From<domain::Condition> for v1::Condition {
    fn from(condition: domain::Condition) -> Self {
        let domain::Condition {
            type_,
            status,
            reason,
            message,
            last_transition_time,
        } = condition;
        v1::Condition {
            r#type: type_,
            status: enc::<_, v1::ConditionStatus>(status),
            reason,
            message,
            last_transition_time: opt_timestamp(last_transition_time),
        }
    }
}

impl TryFrom<v1::Condition> for domain::Condition {
    type Error = ConvertError;

    fn try_from(condition: v1::Condition) -> Result<Self, ConvertError> {
        let v1::Condition {
            r#type,
            status,
            reason,
            message,
            last_transition_time,
        } = condition;
        Ok(domain::Condition {
            type_: r#type,
            status: WireEnum::from_wire_required(status, "status")?,
            reason,
            message,
            last_transition_time: opt_time(last_transition_time, "lastTransitionTime")?,
        })
    }
}

impl From<domain::LabelSelectorRequirement> for v1::LabelSelectorRequirement {
    fn from(req: domain::LabelSelectorRequirement) -> Self {
        let domain::LabelSelectorRequirement {
            key,
            operator,
            values,
        } = req;
        v1::LabelSelectorRequirement {
            key,
            operator: enc::<_, v1::SelectorOperator>(operator),
            values,
        }
    }
}

impl TryFrom<v1::LabelSelectorRequirement> for domain::LabelSelectorRequirement {
    type Error = ConvertError;

    fn try_from(req: v1::LabelSelectorRequirement) -> Result<Self, ConvertError> {
        let v1::LabelSelectorRequirement {
            key,
            operator,
            values,
        } = req;
        Ok(domain::LabelSelectorRequirement {
            key,
            operator: WireEnum::from_wire_required(operator, "operator")?,
            values,
        })
    }
}

impl From<domain::LabelSelector> for v1::LabelSelector {
    fn from(selector: domain::LabelSelector) -> Self {
        let domain::LabelSelector {
            match_labels,
            match_expressions,
        } = selector;
        v1::LabelSelector {
            match_labels,
            match_expressions: to_wire(match_expressions),
        }
    }
}

impl TryFrom<v1::LabelSelector> for domain::LabelSelector {
    type Error = ConvertError;

    fn try_from(selector: v1::LabelSelector) -> Result<Self, ConvertError> {
        let v1::LabelSelector {
            match_labels,
            match_expressions,
        } = selector;
        Ok(domain::LabelSelector {
            match_labels,
            match_expressions: list(match_expressions, "matchExpressions")?,
        })
    }
}

impl From<domain::FieldSelector> for v1::FieldSelector {
    fn from(selector: domain::FieldSelector) -> Self {
        let domain::FieldSelector { match_expressions } = selector;
        v1::FieldSelector {
            match_expressions: to_wire(match_expressions),
        }
    }
}

impl TryFrom<v1::FieldSelector> for domain::FieldSelector {
    type Error = ConvertError;

    fn try_from(selector: v1::FieldSelector) -> Result<Self, ConvertError> {
        let v1::FieldSelector { match_expressions } = selector;
        Ok(domain::FieldSelector {
            match_expressions: list(match_expressions, "matchExpressions")?,
        })
    }
}

impl From<domain::ObjectReference> for v1::ObjectReference {
    fn from(reference: domain::ObjectReference) -> Self {
        let domain::ObjectReference {
            api_version,
            kind,
            namespace,
            name,
            uid,
        } = reference;
        v1::ObjectReference {
            api_version,
            kind,
            namespace,
            name,
            uid,
        }
    }
}

impl TryFrom<v1::ObjectReference> for domain::ObjectReference {
    type Error = ConvertError;

    fn try_from(reference: v1::ObjectReference) -> Result<Self, ConvertError> {
        let v1::ObjectReference {
            api_version,
            kind,
            namespace,
            name,
            uid,
        } = reference;
        Ok(domain::ObjectReference {
            api_version,
            kind,
            namespace,
            name,
            uid,
        })
    }
}

// ---------------------------------------------------------------------------------------
// Taints and tolerations
// ---------------------------------------------------------------------------------------

impl From<domain::Taint> for v1::Taint {
    fn from(taint: domain::Taint) -> Self {
        let domain::Taint {
            key,
            value,
            effect,
            time_added,
            trace_context,
        } = taint;
        v1::Taint {
            key,
            value,
            effect: enc::<_, v1::TaintEffect>(effect),
            time_added: opt_timestamp(time_added),
            trace_context,
        }
    }
}

impl TryFrom<v1::Taint> for domain::Taint {
    type Error = ConvertError;

    fn try_from(taint: v1::Taint) -> Result<Self, ConvertError> {
        let v1::Taint {
            key,
            value,
            effect,
            time_added,
            trace_context,
        } = taint;
        Ok(domain::Taint {
            key,
            value,
            effect: WireEnum::from_wire_required(effect, "effect")?,
            time_added: opt_time(time_added, "timeAdded")?,
            trace_context,
        })
    }
}

impl From<domain::Toleration> for v1::Toleration {
    fn from(toleration: domain::Toleration) -> Self {
        let domain::Toleration {
            key,
            operator,
            value,
            effect,
            toleration_seconds,
        } = toleration;
        v1::Toleration {
            key,
            operator: enc::<_, v1::TolerationOperator>(operator),
            value,
            effect: enc_opt::<_, v1::TaintEffect>(effect),
            toleration_seconds,
        }
    }
}

impl TryFrom<v1::Toleration> for domain::Toleration {
    type Error = ConvertError;

    fn try_from(toleration: v1::Toleration) -> Result<Self, ConvertError> {
        let v1::Toleration {
            key,
            operator,
            value,
            effect,
            toleration_seconds,
        } = toleration;
        Ok(domain::Toleration {
            key,
            // Kubernetes: an empty operator is Equal.
            operator: WireEnum::from_wire_or_default(operator, "operator")?,
            value,
            // An empty effect matches every effect.
            effect: WireEnum::from_wire(effect, "effect")?,
            toleration_seconds,
        })
    }
}

// ---------------------------------------------------------------------------------------
// Cluster
// ---------------------------------------------------------------------------------------

impl From<domain::ApiEnablement> for v1::ApiEnablement {
    fn from(enablement: domain::ApiEnablement) -> Self {
        let domain::ApiEnablement {
            group_version,
            kinds,
        } = enablement;
        v1::ApiEnablement {
            group_version,
            resources: kinds
                .into_iter()
                .map(|kind| v1::ApiResource {
                    name: String::new(),
                    kind,
                })
                .collect(),
        }
    }
}

impl TryFrom<v1::ApiEnablement> for domain::ApiEnablement {
    type Error = ConvertError;

    fn try_from(enablement: v1::ApiEnablement) -> Result<Self, ConvertError> {
        let v1::ApiEnablement {
            group_version,
            resources,
        } = enablement;
        Ok(domain::ApiEnablement {
            group_version,
            kinds: resources
                .into_iter()
                .map(|v1::ApiResource { name: _, kind }| kind)
                .collect(),
        })
    }
}

impl From<domain::ClusterSpec> for v1::ClusterSpec {
    fn from(spec: domain::ClusterSpec) -> Self {
        let domain::ClusterSpec {
            sync_mode,
            api_endpoint,
            provider,
            region,
            zones,
            taints,
            resource_models,
        } = spec;
        v1::ClusterSpec {
            sync_mode: enc::<_, v1::SyncMode>(sync_mode),
            api_endpoint,
            provider,
            region,
            zones,
            taints: to_wire(taints),
            resource_models: to_wire(resource_models),
            // how to reach the member: not an input of any rule
            capacity: None,
            secret_ref: None,
            impersonator_secret_ref: None,
            insecure_skip_tls_verification: false,
        }
    }
}

impl TryFrom<v1::ClusterSpec> for domain::ClusterSpec {
    type Error = ConvertError;

    fn try_from(spec: v1::ClusterSpec) -> Result<Self, ConvertError> {
        let v1::ClusterSpec {
            sync_mode,
            api_endpoint,
            provider,
            region,
            zones,
            taints,
            capacity: _,
            secret_ref: _,
            impersonator_secret_ref: _,
            insecure_skip_tls_verification: _,
            resource_models,
        } = spec;
        Ok(domain::ClusterSpec {
            sync_mode: WireEnum::from_wire_required(sync_mode, "syncMode")?,
            api_endpoint,
            provider,
            region,
            zones,
            taints: list(taints, "taints")?,
            resource_models: list(resource_models, "resourceModels")?,
        })
    }
}

impl From<domain::ClusterStatus> for v1::ClusterStatus {
    fn from(status: domain::ClusterStatus) -> Self {
        let domain::ClusterStatus {
            conditions,
            api_enablements,
            kubernetes_version,
            resource_summary,
        } = status;
        v1::ClusterStatus {
            conditions: to_wire(conditions),
            api_enablements: to_wire(api_enablements),
            kubernetes_version,
            resource_summary: resource_summary.map(|s| v1::ResourceSummary {
                allocatable_replicas: Some(
                    capacity::max_replicas(Some(&s), &[], &capacity::ResourceList::new()).max(0),
                ),
                allocatable: Some(quantities(&s.allocatable)),
                allocated: Some(quantities(&s.allocated)),
                allocating: Some(quantities(&s.allocating)),
                allocatable_modelings: s
                    .allocatable_modelings
                    .iter()
                    .map(|m| v1::AllocatableModeling {
                        grade: m.grade,
                        count: m.count,
                    })
                    .collect(),
            }),
        }
    }
}

impl TryFrom<v1::ClusterStatus> for domain::ClusterStatus {
    type Error = ConvertError;

    fn try_from(status: v1::ClusterStatus) -> Result<Self, ConvertError> {
        let v1::ClusterStatus {
            conditions,
            api_enablements,
            kubernetes_version,
            resource_summary,
        } = status;
        Ok(domain::ClusterStatus {
            conditions: list(conditions, "conditions")?,
            api_enablements: list(api_enablements, "apiEnablements")?,
            kubernetes_version,
            resource_summary: resource_summary.and_then(summary),
        })
    }
}

impl From<capacity::ResourceModel> for v1::ResourceModel {
    fn from(model: capacity::ResourceModel) -> Self {
        let capacity::ResourceModel { grade, ranges } = model;
        v1::ResourceModel {
            grade,
            ranges: ranges
                .into_iter()
                .map(|r| v1::ResourceModelRange {
                    min: flotilla_core::quantity::format(&r.name, r.min),
                    max: flotilla_core::quantity::format(&r.name, r.max),
                    name: r.name,
                })
                .collect(),
        }
    }
}

impl TryFrom<v1::ResourceModel> for capacity::ResourceModel {
    type Error = ConvertError;

    fn try_from(model: v1::ResourceModel) -> Result<Self, ConvertError> {
        let v1::ResourceModel { grade, ranges } = model;
        let ranges = ranges
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                let v1::ResourceModelRange { name, min, max } = r;
                let amount = |text: &str, field: &str| {
                    capacity::amount(&name, text).map_err(|e| {
                        ConvertError::new(field, format!("{text:?} is not a quantity: {e}"))
                            .at_index("ranges", i)
                    })
                };
                Ok(capacity::ModelRange {
                    min: amount(&min, "min")?,
                    max: amount(&max, "max")?,
                    name,
                })
            })
            .collect::<Result<_, ConvertError>>()?;
        Ok(capacity::ResourceModel { grade, ranges })
    }
}

/// The domain's summary of a reported one (ES-3). A summary that carries only
/// `allocatableReplicas` (a reporter of pods alone) reads as that many free pods; a negative
/// count (Karmada's "unknown") as no summary.
fn summary(s: v1::ResourceSummary) -> Option<capacity::Summary> {
    let v1::ResourceSummary {
        allocatable,
        allocated,
        allocatable_replicas,
        allocating,
        allocatable_modelings,
    } = s;
    match allocatable {
        Some(allocatable) => Some(capacity::Summary {
            allocatable: resource_list(&allocatable),
            allocated: allocated.as_ref().map(resource_list).unwrap_or_default(),
            allocating: allocating.as_ref().map(resource_list).unwrap_or_default(),
            allocatable_modelings: allocatable_modelings
                .into_iter()
                .map(|m| capacity::AllocatableModeling {
                    grade: m.grade,
                    count: m.count,
                })
                .collect(),
        }),
        None => allocatable_replicas
            .filter(|n| *n >= 0)
            .map(|n| capacity::Summary {
                allocatable: [(capacity::PODS.to_owned(), n)].into(),
                ..Default::default()
            }),
    }
}

/// A resource list on the wire: cpu, memory and pods in their fields, the rest in `scalar`;
/// zero amounts are left out (a resource absent and one of 0 estimate alike, ES-2.3).
pub fn quantities(list: &capacity::ResourceList) -> v1::ResourceQuantities {
    let mut q = v1::ResourceQuantities::default();
    for (name, &amount) in list.iter().filter(|(_, a)| **a != 0) {
        match name.as_str() {
            "cpu" => q.cpu_millis = amount,
            "memory" => q.memory_bytes = amount,
            capacity::PODS => q.pods = amount,
            _ => {
                q.scalar.insert(name.clone(), amount);
            }
        }
    }
    q
}

/// The resource list of wire quantities (zero amounts left out), the inverse of
/// [`quantities`].
pub fn resource_list(q: &v1::ResourceQuantities) -> capacity::ResourceList {
    let named = [
        ("cpu", q.cpu_millis),
        ("memory", q.memory_bytes),
        (capacity::PODS, q.pods),
    ];
    named
        .into_iter()
        .map(|(n, a)| (n.to_owned(), a))
        .chain(q.scalar.iter().map(|(n, a)| (n.clone(), *a)))
        .filter(|(_, a)| *a != 0)
        .collect()
}

impl From<domain::Cluster> for v1::Cluster {
    fn from(cluster: domain::Cluster) -> Self {
        let domain::Cluster { meta, spec, status } = cluster;
        v1::Cluster {
            metadata: Some(meta.into()),
            spec: Some(spec.into()),
            status: Some(status.into()),
        }
    }
}

impl TryFrom<v1::Cluster> for domain::Cluster {
    type Error = ConvertError;

    fn try_from(cluster: v1::Cluster) -> Result<Self, ConvertError> {
        let v1::Cluster {
            metadata,
            spec,
            status,
        } = cluster;
        Ok(domain::Cluster {
            meta: msg(metadata, "metadata")?,
            spec: msg(spec, "spec")?,
            status: msg(status, "status")?,
        })
    }
}

// ---------------------------------------------------------------------------------------
// Placement
// ---------------------------------------------------------------------------------------

impl From<domain::ClusterAffinity> for v1::ClusterAffinity {
    fn from(affinity: domain::ClusterAffinity) -> Self {
        let domain::ClusterAffinity {
            label_selector,
            field_selector,
            cluster_names,
            exclude,
        } = affinity;
        v1::ClusterAffinity {
            label_selector: label_selector.map(Into::into),
            field_selector: field_selector.map(Into::into),
            cluster_names,
            exclude,
        }
    }
}

impl TryFrom<v1::ClusterAffinity> for domain::ClusterAffinity {
    type Error = ConvertError;

    fn try_from(affinity: v1::ClusterAffinity) -> Result<Self, ConvertError> {
        let v1::ClusterAffinity {
            label_selector,
            field_selector,
            cluster_names,
            exclude,
        } = affinity;
        Ok(domain::ClusterAffinity {
            label_selector: opt(label_selector, "labelSelector")?,
            field_selector: opt(field_selector, "fieldSelector")?,
            cluster_names,
            exclude,
        })
    }
}

impl From<domain::ClusterAffinityTerm> for v1::ClusterAffinityTerm {
    fn from(term: domain::ClusterAffinityTerm) -> Self {
        let domain::ClusterAffinityTerm {
            affinity_name,
            affinity,
        } = term;
        // Karmada inlines the affinity's fields next to the term's name.
        let v1::ClusterAffinity {
            label_selector,
            field_selector,
            cluster_names,
            exclude,
        } = affinity.into();
        v1::ClusterAffinityTerm {
            affinity_name,
            label_selector,
            field_selector,
            cluster_names,
            exclude,
        }
    }
}

impl TryFrom<v1::ClusterAffinityTerm> for domain::ClusterAffinityTerm {
    type Error = ConvertError;

    fn try_from(term: v1::ClusterAffinityTerm) -> Result<Self, ConvertError> {
        let v1::ClusterAffinityTerm {
            affinity_name,
            label_selector,
            field_selector,
            cluster_names,
            exclude,
        } = term;
        // The inlined fields keep their paths (`clusterAffinities[1].labelSelector...`).
        let affinity = v1::ClusterAffinity {
            label_selector,
            field_selector,
            cluster_names,
            exclude,
        };
        Ok(domain::ClusterAffinityTerm {
            affinity_name,
            affinity: affinity.try_into()?,
        })
    }
}

impl From<domain::SpreadConstraint> for v1::SpreadConstraint {
    fn from(constraint: domain::SpreadConstraint) -> Self {
        let domain::SpreadConstraint {
            spread_by_field,
            spread_by_label,
            max_groups,
            min_groups,
        } = constraint;
        v1::SpreadConstraint {
            spread_by_field: enc_opt::<_, v1::SpreadField>(spread_by_field),
            spread_by_label,
            max_groups,
            min_groups,
        }
    }
}

impl TryFrom<v1::SpreadConstraint> for domain::SpreadConstraint {
    type Error = ConvertError;

    fn try_from(constraint: v1::SpreadConstraint) -> Result<Self, ConvertError> {
        let v1::SpreadConstraint {
            spread_by_field,
            spread_by_label,
            max_groups,
            min_groups,
        } = constraint;
        Ok(domain::SpreadConstraint {
            spread_by_field: WireEnum::from_wire(spread_by_field, "spreadByField")?,
            spread_by_label,
            max_groups,
            min_groups,
        })
    }
}

impl From<domain::StaticClusterWeight> for v1::StaticClusterWeight {
    fn from(weight: domain::StaticClusterWeight) -> Self {
        let domain::StaticClusterWeight {
            target_cluster,
            weight,
        } = weight;
        v1::StaticClusterWeight {
            target_cluster: Some(target_cluster.into()),
            weight,
        }
    }
}

impl TryFrom<v1::StaticClusterWeight> for domain::StaticClusterWeight {
    type Error = ConvertError;

    fn try_from(weight: v1::StaticClusterWeight) -> Result<Self, ConvertError> {
        let v1::StaticClusterWeight {
            target_cluster,
            weight,
        } = weight;
        Ok(domain::StaticClusterWeight {
            target_cluster: msg(target_cluster, "targetCluster")?,
            weight,
        })
    }
}

impl From<domain::ClusterPreferences> for v1::ClusterPreferences {
    fn from(preferences: domain::ClusterPreferences) -> Self {
        let domain::ClusterPreferences {
            static_weight_list,
            dynamic_weight,
        } = preferences;
        v1::ClusterPreferences {
            static_weight_list: to_wire(static_weight_list),
            dynamic_weight: enc_opt::<_, v1::DynamicWeightFactor>(dynamic_weight),
        }
    }
}

impl TryFrom<v1::ClusterPreferences> for domain::ClusterPreferences {
    type Error = ConvertError;

    fn try_from(preferences: v1::ClusterPreferences) -> Result<Self, ConvertError> {
        let v1::ClusterPreferences {
            static_weight_list,
            dynamic_weight,
        } = preferences;
        Ok(domain::ClusterPreferences {
            static_weight_list: list(static_weight_list, "staticWeightList")?,
            dynamic_weight: WireEnum::from_wire(dynamic_weight, "dynamicWeight")?,
        })
    }
}

impl From<domain::ReplicaSchedulingStrategy> for v1::ReplicaSchedulingStrategy {
    fn from(strategy: domain::ReplicaSchedulingStrategy) -> Self {
        let domain::ReplicaSchedulingStrategy {
            replica_scheduling_type,
            replica_division_preference,
            weight_preference,
        } = strategy;
        v1::ReplicaSchedulingStrategy {
            replica_scheduling_type: enc::<_, v1::ReplicaSchedulingType>(replica_scheduling_type),
            replica_division_preference: enc_opt::<_, v1::ReplicaDivisionPreference>(
                replica_division_preference,
            ),
            weight_preference: weight_preference.map(Into::into),
        }
    }
}

impl TryFrom<v1::ReplicaSchedulingStrategy> for domain::ReplicaSchedulingStrategy {
    type Error = ConvertError;

    fn try_from(strategy: v1::ReplicaSchedulingStrategy) -> Result<Self, ConvertError> {
        let v1::ReplicaSchedulingStrategy {
            replica_scheduling_type,
            replica_division_preference,
            weight_preference,
        } = strategy;
        Ok(domain::ReplicaSchedulingStrategy {
            // UNSPECIFIED is the CRD default, Divided (PD-2).
            replica_scheduling_type: WireEnum::from_wire_or_default(
                replica_scheduling_type,
                "replicaSchedulingType",
            )?,
            replica_division_preference: WireEnum::from_wire(
                replica_division_preference,
                "replicaDivisionPreference",
            )?,
            weight_preference: opt(weight_preference, "weightPreference")?,
        })
    }
}

impl From<domain::Placement> for v1::Placement {
    fn from(placement: domain::Placement) -> Self {
        let domain::Placement {
            cluster_affinity,
            cluster_affinities,
            cluster_tolerations,
            spread_constraints,
            replica_scheduling,
        } = placement;
        v1::Placement {
            cluster_affinity: cluster_affinity.map(Into::into),
            cluster_affinities: to_wire(cluster_affinities),
            cluster_tolerations: to_wire(cluster_tolerations),
            spread_constraints: to_wire(spread_constraints),
            replica_scheduling: replica_scheduling.map(Into::into),
        }
    }
}

impl TryFrom<v1::Placement> for domain::Placement {
    type Error = ConvertError;

    fn try_from(placement: v1::Placement) -> Result<Self, ConvertError> {
        let v1::Placement {
            cluster_affinity,
            cluster_affinities,
            cluster_tolerations,
            spread_constraints,
            replica_scheduling,
        } = placement;
        Ok(domain::Placement {
            cluster_affinity: opt(cluster_affinity, "clusterAffinity")?,
            cluster_affinities: list(cluster_affinities, "clusterAffinities")?,
            cluster_tolerations: list(cluster_tolerations, "clusterTolerations")?,
            spread_constraints: list(spread_constraints, "spreadConstraints")?,
            replica_scheduling: opt(replica_scheduling, "replicaScheduling")?,
        })
    }
}

// ---------------------------------------------------------------------------------------
// Failover behaviour
// ---------------------------------------------------------------------------------------

impl From<domain::StatePreservationRule> for v1::StatePreservationRule {
    fn from(rule: domain::StatePreservationRule) -> Self {
        let domain::StatePreservationRule {
            alias_label_name,
            json_path,
        } = rule;
        v1::StatePreservationRule {
            alias_label_name,
            json_path,
        }
    }
}

impl TryFrom<v1::StatePreservationRule> for domain::StatePreservationRule {
    type Error = ConvertError;

    fn try_from(rule: v1::StatePreservationRule) -> Result<Self, ConvertError> {
        let v1::StatePreservationRule {
            alias_label_name,
            json_path,
        } = rule;
        Ok(domain::StatePreservationRule {
            alias_label_name,
            json_path,
        })
    }
}

/// Rules as `statePreservation`: absent when there are none.
fn state_preservation_to_wire(
    rules: Vec<domain::StatePreservationRule>,
) -> Option<v1::StatePreservation> {
    (!rules.is_empty()).then(|| v1::StatePreservation {
        rules: to_wire(rules),
    })
}

fn state_preservation_from_wire(
    preservation: Option<v1::StatePreservation>,
    field: &str,
) -> Result<Vec<domain::StatePreservationRule>, ConvertError> {
    match preservation {
        None => Ok(Vec::new()),
        Some(v1::StatePreservation { rules }) => list(rules, "rules").map_err(|e| e.within(field)),
    }
}

impl From<domain::ClusterFailoverBehavior> for v1::ClusterFailoverBehavior {
    fn from(behavior: domain::ClusterFailoverBehavior) -> Self {
        let domain::ClusterFailoverBehavior {
            purge_mode,
            state_preservation,
            failback_stabilization_window_seconds,
        } = behavior;
        v1::ClusterFailoverBehavior {
            purge_mode: enc_opt::<_, v1::PurgeMode>(purge_mode),
            state_preservation: state_preservation_to_wire(state_preservation),
            failback: failback_stabilization_window_seconds.map(|seconds| v1::Failback {
                stabilization_window_seconds: seconds,
            }),
        }
    }
}

impl TryFrom<v1::ClusterFailoverBehavior> for domain::ClusterFailoverBehavior {
    type Error = ConvertError;

    fn try_from(behavior: v1::ClusterFailoverBehavior) -> Result<Self, ConvertError> {
        let v1::ClusterFailoverBehavior {
            purge_mode,
            state_preservation,
            failback,
        } = behavior;
        Ok(domain::ClusterFailoverBehavior {
            purge_mode: WireEnum::from_wire(purge_mode, "purgeMode")?,
            state_preservation: state_preservation_from_wire(
                state_preservation,
                "statePreservation",
            )?,
            failback_stabilization_window_seconds: failback.map(
                |v1::Failback {
                     stabilization_window_seconds,
                 }| stabilization_window_seconds,
            ),
        })
    }
}

impl From<domain::ApplicationFailoverBehavior> for v1::ApplicationFailoverBehavior {
    fn from(behavior: domain::ApplicationFailoverBehavior) -> Self {
        let domain::ApplicationFailoverBehavior {
            toleration_seconds,
            purge_mode,
            grace_period_seconds,
            state_preservation,
        } = behavior;
        v1::ApplicationFailoverBehavior {
            decision_conditions: toleration_seconds.map(|seconds| v1::DecisionConditions {
                toleration_seconds: Some(seconds),
            }),
            purge_mode: enc_opt::<_, v1::PurgeMode>(purge_mode),
            grace_period_seconds,
            state_preservation: state_preservation_to_wire(state_preservation),
        }
    }
}

impl TryFrom<v1::ApplicationFailoverBehavior> for domain::ApplicationFailoverBehavior {
    type Error = ConvertError;

    fn try_from(behavior: v1::ApplicationFailoverBehavior) -> Result<Self, ConvertError> {
        let v1::ApplicationFailoverBehavior {
            decision_conditions,
            purge_mode,
            grace_period_seconds,
            state_preservation,
        } = behavior;
        Ok(domain::ApplicationFailoverBehavior {
            toleration_seconds: decision_conditions
                .and_then(|v1::DecisionConditions { toleration_seconds }| toleration_seconds),
            purge_mode: WireEnum::from_wire(purge_mode, "purgeMode")?,
            grace_period_seconds,
            state_preservation: state_preservation_from_wire(
                state_preservation,
                "statePreservation",
            )?,
        })
    }
}

impl From<domain::FailoverBehavior> for v1::FailoverBehavior {
    fn from(behavior: domain::FailoverBehavior) -> Self {
        let domain::FailoverBehavior {
            cluster,
            application,
        } = behavior;
        v1::FailoverBehavior {
            application: application.map(Into::into),
            cluster: cluster.map(Into::into),
        }
    }
}

impl TryFrom<v1::FailoverBehavior> for domain::FailoverBehavior {
    type Error = ConvertError;

    fn try_from(behavior: v1::FailoverBehavior) -> Result<Self, ConvertError> {
        let v1::FailoverBehavior {
            application,
            cluster,
        } = behavior;
        Ok(domain::FailoverBehavior {
            cluster: opt(cluster, "cluster")?,
            application: opt(application, "application")?,
        })
    }
}

impl From<domain::Suspension> for v1::Suspension {
    fn from(suspension: domain::Suspension) -> Self {
        let domain::Suspension {
            dispatching,
            dispatching_on_clusters,
        } = suspension;
        v1::Suspension {
            dispatching,
            dispatching_on_clusters: dispatching_on_clusters.map(|c| v1::SuspendClusters {
                cluster_names: c.cluster_names,
            }),
        }
    }
}

impl From<v1::Suspension> for domain::Suspension {
    fn from(suspension: v1::Suspension) -> Self {
        let v1::Suspension {
            dispatching,
            dispatching_on_clusters,
        } = suspension;
        domain::Suspension {
            dispatching,
            dispatching_on_clusters: dispatching_on_clusters.map(|c| domain::SuspendClusters {
                cluster_names: c.cluster_names,
            }),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Policies
// ---------------------------------------------------------------------------------------

impl From<domain::ResourceSelector> for v1::ResourceSelector {
    fn from(selector: domain::ResourceSelector) -> Self {
        let domain::ResourceSelector {
            api_version,
            kind,
            namespace,
            name,
            label_selector,
        } = selector;
        v1::ResourceSelector {
            api_version,
            kind,
            namespace,
            name,
            label_selector: label_selector.map(Into::into),
        }
    }
}

impl TryFrom<v1::ResourceSelector> for domain::ResourceSelector {
    type Error = ConvertError;

    fn try_from(selector: v1::ResourceSelector) -> Result<Self, ConvertError> {
        let v1::ResourceSelector {
            api_version,
            kind,
            namespace,
            name,
            label_selector,
        } = selector;
        Ok(domain::ResourceSelector {
            api_version,
            kind,
            namespace,
            name,
            label_selector: opt(label_selector, "labelSelector")?,
        })
    }
}

impl From<domain::PropagationSpec> for v1::PropagationSpec {
    fn from(spec: domain::PropagationSpec) -> Self {
        let domain::PropagationSpec {
            resource_selectors,
            priority,
            placement,
            failover,
            propagate_deps,
            scheduler_name,
            preemption,
            activation_preference,
            preserve_resources_on_deletion,
            suspension,
            conflict_resolution,
        } = spec;
        v1::PropagationSpec {
            conflict_resolution: enc::<_, v1::ConflictResolution>(conflict_resolution),
            preserve_resources_on_deletion,
            suspension: suspension.map(Into::into),
            preemption: enc::<_, v1::Preemption>(preemption),
            activation_preference: enc_opt::<_, v1::ActivationPreference>(activation_preference),
            resource_selectors: to_wire(resource_selectors),
            priority,
            placement: Some(placement.into()),
            failover: failover.map(Into::into),
            propagate_deps,
            scheduler_name,
        }
    }
}

impl TryFrom<v1::PropagationSpec> for domain::PropagationSpec {
    type Error = ConvertError;

    fn try_from(spec: v1::PropagationSpec) -> Result<Self, ConvertError> {
        let v1::PropagationSpec {
            resource_selectors,
            priority,
            placement,
            failover,
            propagate_deps,
            scheduler_name,
            preemption,
            activation_preference,
            preserve_resources_on_deletion,
            suspension,
            conflict_resolution,
        } = spec;
        Ok(domain::PropagationSpec {
            conflict_resolution: WireEnum::from_wire_or_default(
                conflict_resolution,
                "conflictResolution",
            )?,
            preserve_resources_on_deletion,
            suspension: suspension.map(Into::into),
            preemption: WireEnum::from_wire_or_default(preemption, "preemption")?,
            activation_preference: WireEnum::from_wire(
                activation_preference,
                "activationPreference",
            )?,
            resource_selectors: list(resource_selectors, "resourceSelectors")?,
            priority,
            placement: msg(placement, "placement")?,
            failover: opt(failover, "failover")?,
            propagate_deps,
            scheduler_name,
        })
    }
}

impl From<domain::PropagationPolicy> for v1::PropagationPolicy {
    fn from(policy: domain::PropagationPolicy) -> Self {
        let domain::PropagationPolicy { meta, spec } = policy;
        v1::PropagationPolicy {
            metadata: Some(meta.into()),
            spec: Some(spec.into()),
        }
    }
}

impl TryFrom<v1::PropagationPolicy> for domain::PropagationPolicy {
    type Error = ConvertError;

    fn try_from(policy: v1::PropagationPolicy) -> Result<Self, ConvertError> {
        let v1::PropagationPolicy { metadata, spec } = policy;
        Ok(domain::PropagationPolicy {
            meta: msg(metadata, "metadata")?,
            spec: msg(spec, "spec")?,
        })
    }
}

/// The domain models both policy kinds as [`domain::PropagationPolicy`]; a cluster-wide one
/// has an empty namespace.
impl From<domain::PropagationPolicy> for v1::ClusterPropagationPolicy {
    fn from(policy: domain::PropagationPolicy) -> Self {
        let domain::PropagationPolicy { meta, spec } = policy;
        v1::ClusterPropagationPolicy {
            metadata: Some(meta.into()),
            spec: Some(spec.into()),
        }
    }
}

impl TryFrom<v1::ClusterPropagationPolicy> for domain::PropagationPolicy {
    type Error = ConvertError;

    fn try_from(policy: v1::ClusterPropagationPolicy) -> Result<Self, ConvertError> {
        let v1::ClusterPropagationPolicy { metadata, spec } = policy;
        Ok(domain::PropagationPolicy {
            meta: msg(metadata, "metadata")?,
            spec: msg(spec, "spec")?,
        })
    }
}

impl From<domain::MatchCondition> for v1::MatchCondition {
    fn from(condition: domain::MatchCondition) -> Self {
        let domain::MatchCondition {
            condition_type,
            operator,
            status_values,
        } = condition;
        v1::MatchCondition {
            condition_type,
            operator: enc::<_, v1::SelectorOperator>(operator),
            status_values: status_values
                .into_iter()
                .map(enc::<_, v1::ConditionStatus>)
                .collect(),
        }
    }
}

impl TryFrom<v1::MatchCondition> for domain::MatchCondition {
    type Error = ConvertError;

    fn try_from(condition: v1::MatchCondition) -> Result<Self, ConvertError> {
        let v1::MatchCondition {
            condition_type,
            operator,
            status_values,
        } = condition;
        Ok(domain::MatchCondition {
            condition_type,
            operator: WireEnum::from_wire_required(operator, "operator")?,
            status_values: status_values
                .into_iter()
                .enumerate()
                .map(|(i, raw)| WireEnum::from_wire_required(raw, &format!("statusValues[{i}]")))
                .collect::<Result<_, _>>()?,
        })
    }
}

impl From<domain::TaintSpec> for v1::TaintSpec {
    fn from(taint: domain::TaintSpec) -> Self {
        let domain::TaintSpec { key, value, effect } = taint;
        v1::TaintSpec {
            key,
            value,
            effect: enc::<_, v1::TaintEffect>(effect),
        }
    }
}

impl TryFrom<v1::TaintSpec> for domain::TaintSpec {
    type Error = ConvertError;

    fn try_from(taint: v1::TaintSpec) -> Result<Self, ConvertError> {
        let v1::TaintSpec { key, value, effect } = taint;
        Ok(domain::TaintSpec {
            key,
            value,
            effect: WireEnum::from_wire_required(effect, "effect")?,
        })
    }
}

impl From<domain::ClusterTaintPolicy> for v1::ClusterTaintPolicy {
    fn from(policy: domain::ClusterTaintPolicy) -> Self {
        let domain::ClusterTaintPolicy {
            meta,
            target_clusters,
            add_on_conditions,
            remove_on_conditions,
            taints,
        } = policy;
        v1::ClusterTaintPolicy {
            metadata: Some(meta.into()),
            spec: Some(v1::ClusterTaintPolicySpec {
                target_clusters: target_clusters.map(Into::into),
                add_on_conditions: to_wire(add_on_conditions),
                remove_on_conditions: to_wire(remove_on_conditions),
                taints: to_wire(taints),
            }),
        }
    }
}

impl TryFrom<v1::ClusterTaintPolicy> for domain::ClusterTaintPolicy {
    type Error = ConvertError;

    fn try_from(policy: v1::ClusterTaintPolicy) -> Result<Self, ConvertError> {
        let v1::ClusterTaintPolicy { metadata, spec } = policy;
        let v1::ClusterTaintPolicySpec {
            target_clusters,
            add_on_conditions,
            remove_on_conditions,
            taints,
        } = spec.unwrap_or_default();
        let in_spec = |e: ConvertError| e.within("spec");
        Ok(domain::ClusterTaintPolicy {
            meta: msg(metadata, "metadata")?,
            target_clusters: opt(target_clusters, "targetClusters").map_err(in_spec)?,
            add_on_conditions: list(add_on_conditions, "addOnConditions").map_err(in_spec)?,
            remove_on_conditions: list(remove_on_conditions, "removeOnConditions")
                .map_err(in_spec)?,
            taints: list(taints, "taints").map_err(in_spec)?,
        })
    }
}

// ---------------------------------------------------------------------------------------
// ResourceBinding
// ---------------------------------------------------------------------------------------

impl From<domain::TargetCluster> for v1::TargetCluster {
    fn from(target: domain::TargetCluster) -> Self {
        let domain::TargetCluster { name, replicas } = target;
        v1::TargetCluster { name, replicas }
    }
}

impl TryFrom<v1::TargetCluster> for domain::TargetCluster {
    type Error = ConvertError;

    fn try_from(target: v1::TargetCluster) -> Result<Self, ConvertError> {
        let v1::TargetCluster { name, replicas } = target;
        Ok(domain::TargetCluster { name, replicas })
    }
}

impl From<domain::GracefulEvictionTask> for v1::GracefulEvictionTask {
    fn from(task: domain::GracefulEvictionTask) -> Self {
        let domain::GracefulEvictionTask {
            from_cluster,
            purge_mode,
            replicas,
            reason,
            message,
            producer,
            grace_period_seconds,
            suppress_deletion,
            preserved_label_state,
            clusters_before_failover,
            creation_timestamp,
            trace_context,
        } = task;
        v1::GracefulEvictionTask {
            from_cluster,
            purge_mode: enc::<_, v1::PurgeMode>(purge_mode),
            replicas,
            reason,
            message,
            producer,
            grace_period_seconds,
            suppress_deletion,
            preserved_label_state,
            clusters_before_failover,
            creation_timestamp: opt_timestamp(creation_timestamp),
            trace_context,
        }
    }
}

impl TryFrom<v1::GracefulEvictionTask> for domain::GracefulEvictionTask {
    type Error = ConvertError;

    fn try_from(task: v1::GracefulEvictionTask) -> Result<Self, ConvertError> {
        let v1::GracefulEvictionTask {
            from_cluster,
            purge_mode,
            replicas,
            reason,
            message,
            producer,
            grace_period_seconds,
            suppress_deletion,
            preserved_label_state,
            clusters_before_failover,
            creation_timestamp,
            trace_context,
        } = task;
        Ok(domain::GracefulEvictionTask {
            from_cluster,
            purge_mode: WireEnum::from_wire_required(purge_mode, "purgeMode")?,
            replicas,
            reason,
            message,
            producer,
            grace_period_seconds,
            suppress_deletion,
            preserved_label_state,
            clusters_before_failover,
            creation_timestamp: opt_time(creation_timestamp, "creationTimestamp")?,
            trace_context,
        })
    }
}

impl From<domain::AggregatedStatusItem> for v1::AggregatedStatusItem {
    fn from(item: domain::AggregatedStatusItem) -> Self {
        let domain::AggregatedStatusItem {
            cluster_name,
            applied,
            applied_message,
            health,
            ready_replicas,
            status,
        } = item;
        v1::AggregatedStatusItem {
            cluster_name,
            status,
            applied,
            applied_message,
            health: enc::<_, v1::ResourceHealth>(health),
            ready_replicas,
        }
    }
}

impl TryFrom<v1::AggregatedStatusItem> for domain::AggregatedStatusItem {
    type Error = ConvertError;

    fn try_from(item: v1::AggregatedStatusItem) -> Result<Self, ConvertError> {
        let v1::AggregatedStatusItem {
            cluster_name,
            status,
            applied,
            applied_message,
            health,
            ready_replicas,
        } = item;
        Ok(domain::AggregatedStatusItem {
            status,
            cluster_name,
            applied,
            applied_message,
            health: WireEnum::from_wire_required(health, "health")?,
            ready_replicas,
        })
    }
}

impl From<domain::ReplicaRequirements> for v1::ReplicaRequirements {
    fn from(requirements: domain::ReplicaRequirements) -> Self {
        let domain::ReplicaRequirements { resource_request } = requirements;
        let mut request = quantities(&resource_request);
        // each replica is one pod (ES-2.3): a request of pods is not carried
        request.pods = 0;
        v1::ReplicaRequirements {
            resource_request: Some(request),
        }
    }
}

impl TryFrom<v1::ReplicaRequirements> for domain::ReplicaRequirements {
    type Error = ConvertError;

    fn try_from(requirements: v1::ReplicaRequirements) -> Result<Self, ConvertError> {
        let v1::ReplicaRequirements { resource_request } = requirements;
        let mut resource_request = resource_request
            .as_ref()
            .map(resource_list)
            .unwrap_or_default();
        resource_request.remove(capacity::PODS);
        Ok(domain::ReplicaRequirements { resource_request })
    }
}

impl From<domain::ResourceBindingSpec> for v1::ResourceBindingSpec {
    fn from(spec: domain::ResourceBindingSpec) -> Self {
        let domain::ResourceBindingSpec {
            resource,
            replicas,
            replica_requirements,
            placement,
            clusters,
            graceful_eviction_tasks,
            required_by_clusters,
            reschedule_triggered_at,
            failover,
            scheduler_name,
            propagate_deps,
            preserve_resources_on_deletion,
            suspension,
            conflict_resolution,
        } = spec;
        // The domain flattens `requiredBy[].clusters`; write them back as one unnamed entry.
        let required_by = if required_by_clusters.is_empty() {
            Vec::new()
        } else {
            vec![v1::BindingSnapshot {
                namespace: String::new(),
                name: String::new(),
                clusters: required_by_clusters
                    .into_iter()
                    .map(|name| v1::TargetCluster { name, replicas: 0 })
                    .collect(),
            }]
        };
        v1::ResourceBindingSpec {
            resource: Some(resource.into()),
            replicas,
            replica_requirements: replica_requirements.map(Into::into),
            placement: placement.map(Into::into),
            clusters: to_wire(clusters),
            graceful_eviction_tasks: to_wire(graceful_eviction_tasks),
            required_by,
            reschedule_triggered_at: opt_timestamp(reschedule_triggered_at),
            failover: failover.map(Into::into),
            scheduler_name,
            propagate_deps,
            preserve_resources_on_deletion,
            suspension: suspension.map(Into::into),
            conflict_resolution: enc::<_, v1::ConflictResolution>(conflict_resolution),
        }
    }
}

impl TryFrom<v1::ResourceBindingSpec> for domain::ResourceBindingSpec {
    type Error = ConvertError;

    fn try_from(spec: v1::ResourceBindingSpec) -> Result<Self, ConvertError> {
        let v1::ResourceBindingSpec {
            resource,
            replicas,
            replica_requirements,
            placement,
            clusters,
            graceful_eviction_tasks,
            required_by,
            reschedule_triggered_at,
            failover,
            scheduler_name,
            propagate_deps,
            preserve_resources_on_deletion,
            suspension,
            conflict_resolution,
        } = spec;
        Ok(domain::ResourceBindingSpec {
            conflict_resolution: WireEnum::from_wire_or_default(
                conflict_resolution,
                "conflictResolution",
            )?,
            preserve_resources_on_deletion,
            suspension: suspension.map(Into::into),
            resource: msg(resource, "resource")?,
            replicas,
            replica_requirements: opt(replica_requirements, "replicaRequirements")?,
            placement: opt(placement, "placement")?,
            clusters: list(clusters, "clusters")?,
            graceful_eviction_tasks: list(graceful_eviction_tasks, "gracefulEvictionTasks")?,
            required_by_clusters: required_by
                .into_iter()
                .flat_map(|snapshot| snapshot.clusters)
                .map(|target| target.name)
                .collect(),
            reschedule_triggered_at: opt_time(reschedule_triggered_at, "rescheduleTriggeredAt")?,
            failover: opt(failover, "failover")?,
            scheduler_name,
            propagate_deps,
        })
    }
}

impl From<domain::ResourceBindingStatus> for v1::ResourceBindingStatus {
    fn from(status: domain::ResourceBindingStatus) -> Self {
        let domain::ResourceBindingStatus {
            conditions,
            scheduler_observed_generation,
            scheduler_observing_affinity_name,
            last_scheduled_time,
            applied_placement,
            aggregated_status,
            aggregated_status_observed_generation,
            failback_clusters,
            application_failover_clusters,
            unschedulable_replicas,
        } = status;
        v1::ResourceBindingStatus {
            failback_clusters,
            application_failover_clusters,
            unschedulable_replicas,
            aggregated_status_observed_generation,
            conditions: to_wire(conditions),
            scheduler_observed_generation,
            scheduler_observing_affinity_name,
            last_scheduled_time: opt_timestamp(last_scheduled_time),
            applied_placement: applied_placement.map(Into::into),
            aggregated_status: to_wire(aggregated_status),
            // Not modelled by the rules: services that write it write the wire object.
            trace_context: String::new(),
        }
    }
}

impl TryFrom<v1::ResourceBindingStatus> for domain::ResourceBindingStatus {
    type Error = ConvertError;

    fn try_from(status: v1::ResourceBindingStatus) -> Result<Self, ConvertError> {
        let v1::ResourceBindingStatus {
            conditions,
            scheduler_observed_generation,
            scheduler_observing_affinity_name,
            last_scheduled_time,
            applied_placement,
            aggregated_status,
            aggregated_status_observed_generation,
            trace_context: _,
            failback_clusters,
            application_failover_clusters,
            unschedulable_replicas,
        } = status;
        Ok(domain::ResourceBindingStatus {
            aggregated_status_observed_generation,
            failback_clusters,
            application_failover_clusters,
            unschedulable_replicas,
            conditions: list(conditions, "conditions")?,
            scheduler_observed_generation,
            scheduler_observing_affinity_name,
            last_scheduled_time: opt_time(last_scheduled_time, "lastScheduledTime")?,
            applied_placement: opt(applied_placement, "appliedPlacement")?,
            aggregated_status: list(aggregated_status, "aggregatedStatus")?,
        })
    }
}

impl From<domain::ResourceBinding> for v1::ResourceBinding {
    fn from(binding: domain::ResourceBinding) -> Self {
        let domain::ResourceBinding { meta, spec, status } = binding;
        v1::ResourceBinding {
            metadata: Some(meta.into()),
            spec: Some(spec.into()),
            status: Some(status.into()),
        }
    }
}

impl TryFrom<v1::ResourceBinding> for domain::ResourceBinding {
    type Error = ConvertError;

    fn try_from(binding: v1::ResourceBinding) -> Result<Self, ConvertError> {
        let v1::ResourceBinding {
            metadata,
            spec,
            status,
        } = binding;
        Ok(domain::ResourceBinding {
            meta: msg(metadata, "metadata")?,
            spec: msg(spec, "spec")?,
            status: msg(status, "status")?,
        })
    }
}

mod overrides;

#[cfg(test)]
mod tests;
