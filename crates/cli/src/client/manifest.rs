//! Reading `apply -f` files: multi-document YAML (or JSON) in Karmada's shapes, converted to
//! Flotilla's wire objects and validated with the same rules the api runs, so that a bad
//! file is reported in full before anything is applied.
//!
//! ```text
//!   text ──serde_norway──► one Value per document ──apiVersion/kind──► Karmada-shaped struct
//!        (deny_unknown_fields; serde_path_to_error names the field)
//!     ──► flotilla_core types ──default (PD-1/2) + validate (core::validation)──► FieldErrors
//!     ──► flotilla_proto::convert (From<core>) ──► v1::PropagationPolicy, v1::Cluster, ...
//! ```
//!
//! Accepted documents:
//! - `policy.karmada.io/v1alpha1` PropagationPolicy, ClusterPropagationPolicy and
//!   ClusterTaintPolicy with Karmada's field names and enum spellings (the deprecated purge
//!   modes `Immediately`/`Graciously` read as `Directly`/`Gracefully`, as Karmada ≤ v1.18 does);
//! - `flotilla.io/v1alpha1` or `cluster.karmada.io/v1alpha1` Cluster;
//! - anything else (e.g. an `apps/v1` Deployment) as a Workload whose manifest is the
//!   document as JSON.
//!
//! Karmada fields that Flotilla does not implement are rejected unless they hold their
//! default value (`preemption: Never`, `conflictResolution: Abort`, ...). A Cluster's
//! `secretRef` names the Secret with its credentials; a `v1` Secret in `karmada-cluster` is
//! such a credential (stored by the api, never printed), any other Secret a template. `status`
//! and server-set metadata (uid, resourceVersion, ...) are ignored, so that the output of
//! `kubectl get -o yaml` of a Karmada object applies.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use flotilla_core::defaults::{DefaultingOptions, default_propagation_spec};
use flotilla_core::overrides::{OverridePolicy, OverrideRule, OverrideSpec, Overriders};
use flotilla_core::resource;
use flotilla_core::types as core;
use flotilla_core::validation::{
    FieldError, FieldErrors, FieldPath, Limits, WorkloadTemplate, validate_cluster,
    validate_cluster_taint_policy, validate_cluster_taint_policy_conflicts,
    validate_override_policy, validate_propagation_policy, validate_workload,
};
use flotilla_proto::v1;
use serde::Deserialize;
use serde::de::IgnoredAny;

/// Group/version of Karmada's policies.
pub const POLICY_API_VERSION: &str = "policy.karmada.io/v1alpha1";
/// Flotilla's own group/version for Clusters.
pub const FLOTILLA_API_VERSION: &str = "flotilla.io/v1alpha1";
/// Karmada's group/version for Clusters (accepted too).
pub const KARMADA_CLUSTER_API_VERSION: &str = "cluster.karmada.io/v1alpha1";

/// A document that parsed and validated.
#[derive(Clone, Debug)]
pub struct Document {
    /// Where it came from (`deploy.yaml`, `-` for stdin).
    pub source: String,
    /// 1-based index of the document in its source.
    pub index: usize,
    /// The wire object to create or update.
    pub object: Object,
}

/// A wire object read from a document.
#[derive(Clone, Debug)]
pub enum Object {
    /// A member cluster.
    Cluster(v1::Cluster),
    /// A namespaced propagation policy.
    PropagationPolicy(v1::PropagationPolicy),
    /// A cluster-wide propagation policy.
    ClusterPropagationPolicy(v1::ClusterPropagationPolicy),
    /// A cluster taint policy (with its domain form, to check conflicts between policies).
    ClusterTaintPolicy(v1::ClusterTaintPolicy, core::ClusterTaintPolicy),
    /// A namespaced override policy.
    OverridePolicy(v1::OverridePolicy),
    /// A cluster-wide override policy.
    ClusterOverridePolicy(v1::ClusterOverridePolicy),
    /// A member cluster's credentials: a `v1` Secret in `karmada-cluster`.
    Secret(v1::Secret),
    /// A resource template, e.g. a Deployment.
    Workload(v1::Workload),
}

// === impl Object ===

impl Object {
    /// The kind as written in the document (`PropagationPolicy`, `Deployment`, ...).
    pub fn kind(&self) -> &str {
        match self {
            Object::Cluster(_) => "Cluster",
            Object::PropagationPolicy(_) => "PropagationPolicy",
            Object::ClusterPropagationPolicy(_) => "ClusterPropagationPolicy",
            Object::ClusterTaintPolicy(..) => "ClusterTaintPolicy",
            Object::OverridePolicy(_) => "OverridePolicy",
            Object::ClusterOverridePolicy(_) => "ClusterOverridePolicy",
            Object::Secret(_) => "Secret",
            Object::Workload(w) => &w.kind,
        }
    }

    /// `(namespace, name)`; the namespace is empty for cluster-scoped kinds.
    pub fn id(&self) -> (String, String) {
        let meta = match self {
            Object::Cluster(o) => o.metadata.as_ref(),
            Object::PropagationPolicy(o) => o.metadata.as_ref(),
            Object::ClusterPropagationPolicy(o) => o.metadata.as_ref(),
            Object::ClusterTaintPolicy(o, _) => o.metadata.as_ref(),
            Object::OverridePolicy(o) => o.metadata.as_ref(),
            Object::ClusterOverridePolicy(o) => o.metadata.as_ref(),
            Object::Secret(o) => o.metadata.as_ref(),
            Object::Workload(o) => o.metadata.as_ref(),
        };
        meta.map(|m| (m.namespace.clone(), m.name.clone()))
            .unwrap_or_default()
    }

    /// The kind with its API group where that tells two kinds apart (RM-1): a workload's
    /// `Deployment.example.com`, but `Deployment` for apps/v1's (the group a bare kind
    /// means) and for Flotilla's own kinds.
    pub fn qualified_kind(&self) -> String {
        match self {
            Object::Workload(w) => {
                resource::qualified_kind(resource::group(&w.api_version), &w.kind)
            }
            other => other.kind().to_owned(),
        }
    }

    /// `kind/name` in kubectl's lower-case style, e.g. `propagationpolicy/nginx-propagation`,
    /// `deployment.example.com/clash`.
    pub fn handle(&self) -> String {
        format!(
            "{}/{}",
            self.qualified_kind().to_ascii_lowercase(),
            self.id().1
        )
    }

    /// The object as one item of an `Api.Apply`.
    pub fn to_apply(&self) -> v1::apply_object::Object {
        use v1::apply_object::Object as Apply;
        match self.clone() {
            Object::Cluster(o) => Apply::Cluster(o),
            Object::PropagationPolicy(o) => Apply::PropagationPolicy(o),
            Object::ClusterPropagationPolicy(o) => Apply::ClusterPropagationPolicy(o),
            Object::ClusterTaintPolicy(o, _) => Apply::ClusterTaintPolicy(o),
            Object::OverridePolicy(o) => Apply::OverridePolicy(o),
            Object::ClusterOverridePolicy(o) => Apply::ClusterOverridePolicy(o),
            Object::Secret(o) => Apply::Secret(o),
            Object::Workload(o) => Apply::Workload(o),
        }
    }
}

/// One problem with one document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DocError {
    /// Where the document came from.
    pub source: String,
    /// 1-based index of the document (0 = the file as a whole).
    pub index: usize,
    /// `Kind ns/name` as far as known.
    pub object: String,
    /// JSON path of the field (empty when the whole document is wrong).
    pub field: String,
    /// What is wrong.
    pub reason: String,
}

impl fmt::Display for DocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.source)?;
        if self.index > 0 {
            write!(f, "document {}", self.index)?;
            if !self.object.is_empty() {
                write!(f, " ({})", self.object)?;
            }
            write!(f, ": ")?;
        }
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.reason)
    }
}

/// The outcome of reading one source.
#[derive(Debug, Default)]
pub struct Parsed {
    /// Documents that parsed and validated, in order.
    pub documents: Vec<Document>,
    /// Every problem found.
    pub errors: Vec<DocError>,
    /// Things that were ignored.
    pub warnings: Vec<String>,
}

/// How documents are read.
#[derive(Clone, Debug)]
pub struct ReadOptions {
    /// Namespace for documents without one (`-n`, default `default`).
    pub namespace: String,
    /// Whether `-n` was given: a document in another namespace is then an error (kubectl).
    pub namespace_explicit: bool,
}

/// Reads every document of `text` (from `source`), converts and validates each one.
pub fn read(source: &str, text: &str, opts: &ReadOptions) -> Parsed {
    let mut parsed = Parsed::default();
    let mut index = 0;
    for de in serde_norway::Deserializer::from_str(text) {
        index += 1;
        let mut value = match serde_norway::Value::deserialize(de) {
            Ok(v) => v,
            Err(e) => {
                parsed.errors.push(DocError {
                    source: source.into(),
                    index,
                    object: String::new(),
                    field: String::new(),
                    reason: format!("not valid YAML: {e}"),
                });
                // The parser cannot find the next document after a syntax error.
                break;
            }
        };
        if value.is_null() {
            continue; // an empty document, e.g. after a trailing `---`
        }
        if let Err(e) = value.apply_merge() {
            parsed
                .errors
                .push(doc_error(source, index, "", "", format!("{e}")));
            continue;
        }
        // kubectl's `kind: List` (what `get -o yaml` prints for several objects): its items
        // are read as documents of their own
        let items = if str_field(&value, "kind") == Some("List")
            && str_field(&value, "apiVersion") == Some("v1")
        {
            match value.get("items") {
                Some(serde_norway::Value::Sequence(items)) => items.clone(),
                _ => Vec::new(),
            }
        } else {
            vec![value]
        };
        for value in items {
            read_one(&mut parsed, source, index, value, opts);
        }
    }
    parsed
}

fn read_one(
    parsed: &mut Parsed,
    source: &str,
    index: usize,
    value: serde_norway::Value,
    opts: &ReadOptions,
) {
    let mut ctx = Ctx {
        source,
        index,
        object: String::new(),
        kind_name: Default::default(),
        errors: vec![],
        warnings: vec![],
    };
    if let Some(object) = read_document(&mut ctx, value, opts) {
        parsed.documents.push(Document {
            source: source.into(),
            index,
            object,
        });
    }
    parsed.errors.append(&mut ctx.errors);
    parsed.warnings.append(&mut ctx.warnings);
}

/// Checks between documents (of every source): no object twice, and ClusterTaintPolicies
/// that do not manage the same taint (CH-16.2).
pub fn cross_check(documents: &[Document]) -> Vec<DocError> {
    let mut errors = Vec::new();
    let mut seen: HashMap<(String, String, String), &Document> = HashMap::new();
    for doc in documents {
        let (ns, name) = doc.object.id();
        let key = (doc.object.qualified_kind(), ns, name);
        if let Some(first) = seen.get(&key) {
            errors.push(DocError {
                source: doc.source.clone(),
                index: doc.index,
                object: describe(&doc.object),
                field: "metadata.name".into(),
                reason: format!(
                    "Duplicate value: the same object as {}: document {}",
                    first.source, first.index
                ),
            });
        } else {
            seen.insert(key, doc);
        }
    }
    for (i, doc) in documents.iter().enumerate() {
        let Object::ClusterTaintPolicy(_, policy) = &doc.object else {
            continue;
        };
        // Only the earlier documents: each conflict is reported once, on the later one.
        let earlier: Vec<core::ClusterTaintPolicy> = documents[..i]
            .iter()
            .filter_map(|d| match &d.object {
                Object::ClusterTaintPolicy(_, p) => Some(p.clone()),
                _ => None,
            })
            .collect();
        for e in validate_cluster_taint_policy_conflicts(policy, &earlier) {
            errors.push(field_error(doc, e));
        }
    }
    errors
}

/// A validation error of a parsed document.
pub fn field_error(doc: &Document, e: FieldError) -> DocError {
    DocError {
        source: doc.source.clone(),
        index: doc.index,
        object: describe(&doc.object),
        field: e.field.clone(),
        reason: format!("{}: {}", e.kind, e.message),
    }
}

/// `Kind ns/name`.
pub fn describe(object: &Object) -> String {
    let (ns, name) = object.id();
    if ns.is_empty() {
        format!("{} {name}", object.kind())
    } else {
        format!("{} {ns}/{name}", object.kind())
    }
}

fn doc_error(source: &str, index: usize, object: &str, field: &str, reason: String) -> DocError {
    DocError {
        source: source.into(),
        index,
        object: object.into(),
        field: field.into(),
        reason,
    }
}

/// Per-document state: where errors go.
struct Ctx<'a> {
    source: &'a str,
    index: usize,
    /// `Kind ns/name` as far as known.
    object: String,
    /// `Kind`, `name`: to complete `object` once the namespace is resolved.
    kind_name: (String, String),
    errors: Vec<DocError>,
    warnings: Vec<String>,
}

impl Ctx<'_> {
    fn error(&mut self, field: &str, reason: impl Into<String>) {
        self.errors.push(doc_error(
            self.source,
            self.index,
            &self.object,
            field,
            reason.into(),
        ));
    }

    fn field_errors(&mut self, errs: FieldErrors) {
        for e in errs {
            self.error(&e.field, format!("{}: {}", e.kind, e.message));
        }
    }

    fn warn(&mut self, text: impl fmt::Display) {
        let object = if self.object.is_empty() {
            String::new()
        } else {
            format!(" ({})", self.object)
        };
        self.warnings.push(format!(
            "{}: document {}{object}: {text}",
            self.source, self.index
        ));
    }

    /// Deserializes `value` into `T`, reporting the failing field's path.
    fn typed<T: serde::de::DeserializeOwned>(&mut self, value: serde_norway::Value) -> Option<T> {
        match serde_path_to_error::deserialize::<_, T>(value) {
            Ok(v) => Some(v),
            Err(e) => {
                let path = e.path().to_string();
                let path = if path == "." { String::new() } else { path };
                let reason = e.into_inner().to_string();
                self.error(&path, reason);
                None
            }
        }
    }
}

fn str_field<'a>(value: &'a serde_norway::Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(serde_norway::Value::as_str)
}

fn read_document(
    ctx: &mut Ctx<'_>,
    value: serde_norway::Value,
    opts: &ReadOptions,
) -> Option<Object> {
    if !value.is_mapping() {
        ctx.error("", "a document must be a mapping (a Kubernetes object)");
        return None;
    }
    let api_version = str_field(&value, "apiVersion")
        .unwrap_or_default()
        .to_owned();
    let kind = str_field(&value, "kind").unwrap_or_default().to_owned();
    let meta = value.get("metadata");
    let name = meta
        .and_then(|m| str_field(m, "name"))
        .unwrap_or_default()
        .to_owned();
    let namespace = meta
        .and_then(|m| str_field(m, "namespace"))
        .map(str::to_owned);
    ctx.kind_name = (kind.clone(), name.clone());
    let cluster_scoped = matches!(
        kind.as_str(),
        "Cluster" | "ClusterPropagationPolicy" | "ClusterTaintPolicy" | "ClusterOverridePolicy"
    );
    ctx.object = if kind.is_empty() {
        String::new()
    } else if cluster_scoped {
        format!("{kind} {name}")
    } else {
        let ns = namespace.clone().unwrap_or_else(|| opts.namespace.clone());
        format!("{kind} {ns}/{name}")
    };
    if api_version.is_empty() {
        ctx.error(
            "apiVersion",
            "Required value: every document needs an apiVersion",
        );
    }
    if kind.is_empty() {
        ctx.error("kind", "Required value: every document needs a kind");
    }
    if api_version.is_empty() || kind.is_empty() {
        return None;
    }
    let group = api_version.split_once('/').map_or("", |(g, _)| g);
    match (group, kind.as_str()) {
        ("policy.karmada.io", "PropagationPolicy" | "ClusterPropagationPolicy") => {
            check_version(ctx, &api_version, POLICY_API_VERSION)?;
            let cluster_wide = kind == "ClusterPropagationPolicy";
            let doc: PolicyDoc = ctx.typed(value)?;
            propagation_policy(ctx, doc, cluster_wide, opts)
        }
        ("policy.karmada.io", "ClusterTaintPolicy") => {
            check_version(ctx, &api_version, POLICY_API_VERSION)?;
            let doc: TaintPolicyDoc = ctx.typed(value)?;
            cluster_taint_policy(ctx, doc)
        }
        ("policy.karmada.io", "OverridePolicy" | "ClusterOverridePolicy") => {
            check_version(ctx, &api_version, POLICY_API_VERSION)?;
            let cluster_wide = kind == "ClusterOverridePolicy";
            let doc: OverridePolicyDoc = ctx.typed(value)?;
            override_policy(ctx, doc, cluster_wide, opts)
        }
        ("policy.karmada.io", other) => {
            ctx.error(
                "kind",
                format!(
                    "Unsupported value: {other:?}: Flotilla applies PropagationPolicy, \
                     ClusterPropagationPolicy, OverridePolicy, ClusterOverridePolicy and \
                     ClusterTaintPolicy of {POLICY_API_VERSION}"
                ),
            );
            None
        }
        ("flotilla.io" | "cluster.karmada.io", "Cluster") => {
            if api_version != FLOTILLA_API_VERSION && api_version != KARMADA_CLUSTER_API_VERSION {
                ctx.error(
                    "apiVersion",
                    format!(
                        "Unsupported value: {api_version:?}: supported values: \
                         \"{FLOTILLA_API_VERSION}\", \"{KARMADA_CLUSTER_API_VERSION}\""
                    ),
                );
                return None;
            }
            let doc: ClusterDoc = ctx.typed(value)?;
            cluster(ctx, doc)
        }
        ("work.karmada.io", _) | ("flotilla.io", _) => {
            ctx.error(
                "kind",
                format!(
                    "Unsupported value: {kind:?}: bindings and Works are written by Flotilla's \
                     controllers and cannot be applied"
                ),
            );
            None
        }
        // Karmada keeps member credentials in karmada-cluster, a namespace it never
        // propagates from: such a Secret is a credential, any other a resource template
        ("", "Secret")
            if value
                .get("metadata")
                .and_then(|m| m.get("namespace"))
                .and_then(serde_norway::Value::as_str)
                == Some(CREDENTIALS_NAMESPACE) =>
        {
            let doc: SecretDoc = ctx.typed(value)?;
            credentials_secret(ctx, doc)
        }
        _ => workload(ctx, value, &api_version, &kind, opts),
    }
}

/// The namespace of member credentials (Karmada's `karmada-cluster`).
pub const CREDENTIALS_NAMESPACE: &str = "karmada-cluster";

/// A `v1` Secret holding a member's credentials.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SecretDoc {
    #[allow(dead_code)]
    api_version: String,
    #[allow(dead_code)]
    kind: String,
    #[serde(default)]
    metadata: MetaDoc,
    #[serde(default)]
    data: BTreeMap<String, String>,
    #[serde(default)]
    string_data: BTreeMap<String, String>,
    #[serde(default, rename = "type")]
    type_: String,
    #[allow(dead_code)]
    immutable: Option<IgnoredAny>,
}

fn credentials_secret(ctx: &mut Ctx<'_>, doc: SecretDoc) -> Option<Object> {
    use base64::Engine as _;
    let SecretDoc {
        metadata,
        data,
        string_data,
        type_,
        ..
    } = doc;
    let meta = metadata.into_core(CREDENTIALS_NAMESPACE.to_owned());
    let mut values = std::collections::BTreeMap::new();
    for (key, encoded) in data {
        match base64::engine::general_purpose::STANDARD.decode(encoded.trim()) {
            Ok(v) => {
                values.insert(key, v);
            }
            // the value itself is never echoed
            Err(_) => ctx.error(
                &format!("data[{key}]"),
                "Invalid value: not base64 (values are never shown by `get`; give the real value)",
            ),
        }
    }
    for (key, text) in string_data {
        values.insert(key, text.into_bytes());
    }
    Some(Object::Secret(v1::Secret {
        metadata: Some(v1::ObjectMeta::from(meta)),
        data: values,
        r#type: type_,
    }))
}

fn check_version(ctx: &mut Ctx<'_>, got: &str, want: &str) -> Option<()> {
    if got == want {
        Some(())
    } else {
        ctx.error(
            "apiVersion",
            format!("Unsupported value: {got:?}: supported values: \"{want}\""),
        );
        None
    }
}

/// The namespace of a namespaced document: its own, else `-n`; with an explicit `-n` they
/// must agree (as kubectl requires).
fn namespace_of(ctx: &mut Ctx<'_>, own: Option<&str>, opts: &ReadOptions) -> String {
    let ns = resolve_namespace(ctx, own, opts);
    ctx.object = format!("{} {ns}/{}", ctx.kind_name.0, ctx.kind_name.1);
    ns
}

/// A cluster-scoped document's own namespace is ignored, with a warning when it names one.
fn ignore_namespace(ctx: &mut Ctx<'_>, own: Option<&str>, kind: &str) {
    if own.is_some_and(|ns| !ns.is_empty()) {
        ctx.warn(format!(
            "metadata.namespace ignored: {kind} is cluster-scoped"
        ));
    }
}

/// The namespace of a policy document: none for a cluster-wide kind (`kind`, whose own
/// namespace is ignored), else [`namespace_of`].
fn policy_namespace(
    ctx: &mut Ctx<'_>,
    own: Option<&str>,
    cluster_wide: bool,
    kind: &str,
    opts: &ReadOptions,
) -> String {
    if cluster_wide {
        ignore_namespace(ctx, own, kind);
        String::new()
    } else {
        namespace_of(ctx, own, opts)
    }
}

fn resolve_namespace(ctx: &mut Ctx<'_>, own: Option<&str>, opts: &ReadOptions) -> String {
    match own {
        Some(ns) if !ns.is_empty() => {
            if opts.namespace_explicit && ns != opts.namespace {
                ctx.error(
                    "metadata.namespace",
                    format!(
                        "Invalid value: {ns:?} does not match the namespace given with -n \
                         ({:?})",
                        opts.namespace
                    ),
                );
            }
            ns.to_owned()
        }
        _ => opts.namespace.clone(),
    }
}

// ---------------------------------------------------------------------------------------
// Documents in Karmada's shapes
// ---------------------------------------------------------------------------------------

/// `metadata`. Server-set fields are accepted and ignored.
#[allow(dead_code)] // the ignored fields are read only to be accepted
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct MetaDoc {
    #[serde(default)]
    name: String,
    namespace: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    #[serde(default)]
    finalizers: Vec<String>,
    uid: Option<IgnoredAny>,
    resource_version: Option<IgnoredAny>,
    generation: Option<IgnoredAny>,
    creation_timestamp: Option<IgnoredAny>,
    deletion_timestamp: Option<IgnoredAny>,
    deletion_grace_period_seconds: Option<IgnoredAny>,
    managed_fields: Option<IgnoredAny>,
    self_link: Option<IgnoredAny>,
    owner_references: Option<IgnoredAny>,
}

impl MetaDoc {
    fn into_core(self, namespace: String) -> core::ObjectMeta {
        let MetaDoc {
            name,
            labels,
            annotations,
            finalizers,
            ..
        } = self;
        core::ObjectMeta {
            name,
            namespace,
            labels,
            annotations,
            finalizers,
            ..Default::default()
        }
    }
}

#[derive(Clone, Copy, Debug, Deserialize)]
enum EffectDoc {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
    #[serde(rename = "")]
    Any,
}

impl EffectDoc {
    fn core(self) -> Option<core::TaintEffect> {
        match self {
            EffectDoc::NoSchedule => Some(core::TaintEffect::NoSchedule),
            EffectDoc::PreferNoSchedule => Some(core::TaintEffect::PreferNoSchedule),
            EffectDoc::NoExecute => Some(core::TaintEffect::NoExecute),
            EffectDoc::Any => None,
        }
    }
}

#[derive(Clone, Copy, Debug, Deserialize)]
enum TolerationOperatorDoc {
    Equal,
    Exists,
    #[serde(rename = "")]
    Empty,
    Lt,
    Gt,
}

#[derive(Clone, Copy, Debug, Deserialize)]
enum SelectorOperatorDoc {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

impl SelectorOperatorDoc {
    fn core(self) -> core::SelectorOperator {
        match self {
            SelectorOperatorDoc::In => core::SelectorOperator::In,
            SelectorOperatorDoc::NotIn => core::SelectorOperator::NotIn,
            SelectorOperatorDoc::Exists => core::SelectorOperator::Exists,
            SelectorOperatorDoc::DoesNotExist => core::SelectorOperator::DoesNotExist,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RequirementDoc {
    key: String,
    operator: SelectorOperatorDoc,
    #[serde(default)]
    values: Vec<String>,
}

impl RequirementDoc {
    fn core(self) -> core::LabelSelectorRequirement {
        core::LabelSelectorRequirement {
            key: self.key,
            operator: self.operator.core(),
            values: self.values,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct LabelSelectorDoc {
    #[serde(default)]
    match_labels: BTreeMap<String, String>,
    #[serde(default)]
    match_expressions: Vec<RequirementDoc>,
}

impl LabelSelectorDoc {
    fn core(self) -> core::LabelSelector {
        core::LabelSelector {
            match_labels: self.match_labels,
            match_expressions: self
                .match_expressions
                .into_iter()
                .map(RequirementDoc::core)
                .collect(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FieldSelectorDoc {
    #[serde(default)]
    match_expressions: Vec<RequirementDoc>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct AffinityDoc {
    label_selector: Option<LabelSelectorDoc>,
    field_selector: Option<FieldSelectorDoc>,
    #[serde(default)]
    cluster_names: Vec<String>,
    #[serde(default)]
    exclude: Vec<String>,
}

impl AffinityDoc {
    fn core(self) -> core::ClusterAffinity {
        core::ClusterAffinity {
            label_selector: self.label_selector.map(LabelSelectorDoc::core),
            field_selector: self.field_selector.map(|f| core::FieldSelector {
                match_expressions: f
                    .match_expressions
                    .into_iter()
                    .map(RequirementDoc::core)
                    .collect(),
            }),
            cluster_names: self.cluster_names,
            exclude: self.exclude,
        }
    }
}

/// A `clusterAffinities` term: Karmada inlines the affinity next to `affinityName`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct AffinityTermDoc {
    #[serde(default)]
    affinity_name: String,
    label_selector: Option<LabelSelectorDoc>,
    field_selector: Option<FieldSelectorDoc>,
    #[serde(default)]
    cluster_names: Vec<String>,
    #[serde(default)]
    exclude: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TolerationDoc {
    #[serde(default)]
    key: String,
    operator: Option<TolerationOperatorDoc>,
    #[serde(default)]
    value: String,
    effect: Option<EffectDoc>,
    toleration_seconds: Option<i64>,
}

#[derive(Clone, Copy, Debug, Deserialize)]
enum SpreadFieldDoc {
    #[serde(rename = "cluster")]
    Cluster,
    #[serde(rename = "region")]
    Region,
    #[serde(rename = "zone")]
    Zone,
    #[serde(rename = "provider")]
    Provider,
    #[serde(rename = "")]
    Unset,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SpreadDoc {
    spread_by_field: Option<SpreadFieldDoc>,
    #[serde(default)]
    spread_by_label: String,
    #[serde(default)]
    max_groups: i32,
    #[serde(default)]
    min_groups: i32,
}

#[derive(Clone, Copy, Debug, Deserialize)]
enum SchedulingTypeDoc {
    Duplicated,
    Divided,
}

#[derive(Clone, Copy, Debug, Deserialize)]
enum DivisionPreferenceDoc {
    Aggregated,
    Weighted,
}

#[derive(Clone, Copy, Debug, Deserialize)]
enum DynamicWeightDoc {
    AvailableReplicas,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct StaticWeightDoc {
    #[serde(default)]
    target_cluster: AffinityDoc,
    weight: i64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct WeightPreferenceDoc {
    #[serde(default)]
    static_weight_list: Vec<StaticWeightDoc>,
    dynamic_weight: Option<DynamicWeightDoc>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ReplicaSchedulingDoc {
    replica_scheduling_type: Option<SchedulingTypeDoc>,
    replica_division_preference: Option<DivisionPreferenceDoc>,
    weight_preference: Option<WeightPreferenceDoc>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PlacementDoc {
    cluster_affinity: Option<AffinityDoc>,
    #[serde(default)]
    cluster_affinities: Vec<AffinityTermDoc>,
    #[serde(default)]
    cluster_tolerations: Vec<TolerationDoc>,
    #[serde(default)]
    spread_constraints: Vec<SpreadDoc>,
    replica_scheduling: Option<ReplicaSchedulingDoc>,
}

#[derive(Clone, Copy, Debug, Deserialize)]
enum PurgeModeDoc {
    #[serde(alias = "Immediately")]
    Directly,
    #[serde(alias = "Graciously")]
    Gracefully,
    Never,
}

impl PurgeModeDoc {
    fn core(self) -> core::PurgeMode {
        match self {
            PurgeModeDoc::Directly => core::PurgeMode::Directly,
            PurgeModeDoc::Gracefully => core::PurgeMode::Gracefully,
            PurgeModeDoc::Never => core::PurgeMode::Never,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct StateRuleDoc {
    alias_label_name: String,
    json_path: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct StatePreservationDoc {
    #[serde(default)]
    rules: Vec<StateRuleDoc>,
}

impl StatePreservationDoc {
    fn core(self) -> Vec<core::StatePreservationRule> {
        self.rules
            .into_iter()
            .map(|r| core::StatePreservationRule {
                alias_label_name: r.alias_label_name,
                json_path: r.json_path,
            })
            .collect()
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DecisionConditionsDoc {
    toleration_seconds: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ApplicationFailoverDoc {
    decision_conditions: Option<DecisionConditionsDoc>,
    purge_mode: Option<PurgeModeDoc>,
    grace_period_seconds: Option<i64>,
    state_preservation: Option<StatePreservationDoc>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FailbackDoc {
    // 0 is valid, and `get -o yaml` leaves a zero out
    #[serde(default)]
    stabilization_window_seconds: i64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ClusterFailoverDoc {
    purge_mode: Option<PurgeModeDoc>,
    state_preservation: Option<StatePreservationDoc>,
    /// Flotilla's opt-in failback (A11).
    failback: Option<FailbackDoc>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FailoverDoc {
    application: Option<ApplicationFailoverDoc>,
    cluster: Option<ClusterFailoverDoc>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ResourceSelectorDoc {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    name: String,
    label_selector: Option<LabelSelectorDoc>,
}

impl ResourceSelectorDoc {
    fn core(self) -> core::ResourceSelector {
        core::ResourceSelector {
            api_version: self.api_version,
            kind: self.kind,
            namespace: self.namespace,
            name: self.name,
            label_selector: self.label_selector.map(LabelSelectorDoc::core),
        }
    }
}

/// An OverridePolicy's spec; the overriders are read straight into the core types, which
/// carry Karmada's field names.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct OverrideSpecDoc {
    #[serde(default)]
    resource_selectors: Vec<ResourceSelectorDoc>,
    override_rules: Option<Vec<OverrideRuleDoc>>,
    // Karmada's deprecated single rule, read as one rule
    target_cluster: Option<AffinityDoc>,
    overriders: Option<Overriders>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct OverrideRuleDoc {
    target_cluster: Option<AffinityDoc>,
    #[serde(default)]
    overriders: Overriders,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)] // apiVersion and kind were dispatched on already
struct OverridePolicyDoc {
    api_version: String,
    kind: String,
    #[serde(default)]
    metadata: MetaDoc,
    #[serde(default)]
    spec: OverrideSpecDoc,
    status: Option<IgnoredAny>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PolicySpecDoc {
    #[serde(default)]
    resource_selectors: Vec<ResourceSelectorDoc>,
    #[serde(default)]
    priority: i32,
    #[serde(default)]
    placement: PlacementDoc,
    failover: Option<FailoverDoc>,
    #[serde(default)]
    propagate_deps: bool,
    #[serde(default)]
    scheduler_name: String,
    // Karmada fields Flotilla does not implement: accepted only with their default values.
    association: Option<bool>,
    preemption: Option<String>,
    conflict_resolution: Option<String>,
    dependent_overrides: Option<Vec<serde_norway::Value>>,
    activation_preference: Option<String>,
    suspension: Option<serde_norway::Value>,
    preserve_resources_on_deletion: Option<bool>,
    schedule_priority: Option<serde_norway::Value>,
}

#[allow(dead_code)] // apiVersion, kind and status are read only to be accepted
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PolicyDoc {
    api_version: String,
    kind: String,
    #[serde(default)]
    metadata: MetaDoc,
    #[serde(default)]
    spec: PolicySpecDoc,
    status: Option<IgnoredAny>,
}

/// A condition status; YAML's `True`/`False` read as the strings Kubernetes means.
#[derive(Clone, Copy, Debug)]
struct StatusValueDoc(core::ConditionStatus);

impl<'de> Deserialize<'de> for StatusValueDoc {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = StatusValueDoc;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("one of \"True\", \"False\", \"Unknown\"")
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Ok(StatusValueDoc(if v {
                    core::ConditionStatus::True
                } else {
                    core::ConditionStatus::False
                }))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                match v {
                    "True" => Ok(StatusValueDoc(core::ConditionStatus::True)),
                    "False" => Ok(StatusValueDoc(core::ConditionStatus::False)),
                    "Unknown" => Ok(StatusValueDoc(core::ConditionStatus::Unknown)),
                    other => Err(E::invalid_value(serde::de::Unexpected::Str(other), &self)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct MatchConditionDoc {
    condition_type: String,
    operator: SelectorOperatorDoc,
    #[serde(default)]
    status_values: Vec<StatusValueDoc>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TaintSpecDoc {
    key: String,
    #[serde(default)]
    value: String,
    effect: EffectDoc,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TaintPolicySpecDoc {
    target_clusters: Option<AffinityDoc>,
    #[serde(default)]
    add_on_conditions: Vec<MatchConditionDoc>,
    #[serde(default)]
    remove_on_conditions: Vec<MatchConditionDoc>,
    #[serde(default)]
    taints: Vec<TaintSpecDoc>,
}

#[allow(dead_code)] // apiVersion, kind and status are read only to be accepted
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TaintPolicyDoc {
    api_version: String,
    kind: String,
    #[serde(default)]
    metadata: MetaDoc,
    #[serde(default)]
    spec: TaintPolicySpecDoc,
    status: Option<IgnoredAny>,
}

#[derive(Clone, Copy, Debug, Deserialize)]
enum SyncModeDoc {
    Push,
    Pull,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TaintDoc {
    key: String,
    #[serde(default)]
    value: String,
    effect: EffectDoc,
    time_added: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ClusterSpecDoc {
    sync_mode: Option<SyncModeDoc>,
    #[serde(default)]
    api_endpoint: String,
    #[serde(default)]
    provider: String,
    #[serde(default)]
    region: String,
    zone: Option<String>,
    #[serde(default)]
    zones: Vec<String>,
    #[serde(default)]
    taints: Vec<TaintDoc>,
    // Karmada's cluster id (ignored with a warning).
    id: Option<IgnoredAny>,
    // The Secret with the member's credentials.
    secret_ref: Option<SecretRefDoc>,
    impersonator_secret_ref: Option<SecretRefDoc>,
    // Karmada's spelling (`InsecureSkipTLSVerification bool json:"insecureSkipTLSVerification"`),
    // which camelCase would not produce
    #[serde(rename = "insecureSkipTLSVerification", default)]
    insecure_skip_tls_verification: bool,
    // Karmada features Flotilla does not implement.
    #[serde(rename = "proxyURL")]
    proxy_url: Option<serde_norway::Value>,
    proxy_header: Option<serde_norway::Value>,
    resource_models: Option<serde_norway::Value>,
    // Flotilla's declared member capacity (`ClusterSpec.capacity`)
    capacity: Option<CapacityDoc>,
}

/// Karmada's `LocalSecretReference`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SecretRefDoc {
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    name: String,
}

impl SecretRefDoc {
    fn wire(self) -> v1::SecretReference {
        v1::SecretReference {
            namespace: self.namespace,
            name: self.name,
        }
    }
}

/// `spec.capacity` of a Cluster: what a member declares it can hold.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CapacityDoc {
    #[serde(default)]
    cpu_millis: i64,
    #[serde(default)]
    memory_bytes: i64,
    #[serde(default)]
    pods: i64,
}

#[allow(dead_code)] // apiVersion, kind and status are read only to be accepted
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ClusterDoc {
    api_version: String,
    kind: String,
    #[serde(default)]
    metadata: MetaDoc,
    #[serde(default)]
    spec: ClusterSpecDoc,
    status: Option<IgnoredAny>,
}

// ---------------------------------------------------------------------------------------
// Conversion and validation
// ---------------------------------------------------------------------------------------

fn toleration(ctx: &mut Ctx<'_>, t: TolerationDoc, path: &FieldPath) -> core::Toleration {
    let operator = match t.operator {
        None | Some(TolerationOperatorDoc::Equal | TolerationOperatorDoc::Empty) => {
            core::TolerationOperator::Equal
        }
        Some(TolerationOperatorDoc::Exists) => core::TolerationOperator::Exists,
        Some(op @ (TolerationOperatorDoc::Lt | TolerationOperatorDoc::Gt)) => {
            ctx.error(
                path.child("operator").as_str(),
                format!(
                    "Unsupported value: \"{op:?}\": supported values: \"Equal\", \"Exists\" \
                     (Karmada does not support Lt/Gt on cluster tolerations)"
                ),
            );
            core::TolerationOperator::Equal
        }
    };
    core::Toleration {
        key: t.key,
        operator,
        value: t.value,
        effect: t.effect.and_then(EffectDoc::core),
        toleration_seconds: t.toleration_seconds,
    }
}

fn placement(ctx: &mut Ctx<'_>, p: PlacementDoc) -> core::Placement {
    let path = FieldPath::new("spec").child("placement");
    let tolerations_path = path.child("clusterTolerations");
    let cluster_tolerations = p
        .cluster_tolerations
        .into_iter()
        .enumerate()
        .map(|(i, t)| toleration(ctx, t, &tolerations_path.index(i)))
        .collect();
    core::Placement {
        cluster_affinity: p.cluster_affinity.map(AffinityDoc::core),
        cluster_affinities: p
            .cluster_affinities
            .into_iter()
            .map(|t| core::ClusterAffinityTerm {
                affinity_name: t.affinity_name,
                affinity: AffinityDoc {
                    label_selector: t.label_selector,
                    field_selector: t.field_selector,
                    cluster_names: t.cluster_names,
                    exclude: t.exclude,
                }
                .core(),
            })
            .collect(),
        cluster_tolerations,
        spread_constraints: p
            .spread_constraints
            .into_iter()
            .map(|s| core::SpreadConstraint {
                spread_by_field: match s.spread_by_field {
                    Some(SpreadFieldDoc::Cluster) => Some(core::SpreadField::Cluster),
                    Some(SpreadFieldDoc::Region) => Some(core::SpreadField::Region),
                    Some(SpreadFieldDoc::Zone) => Some(core::SpreadField::Zone),
                    Some(SpreadFieldDoc::Provider) => Some(core::SpreadField::Provider),
                    Some(SpreadFieldDoc::Unset) | None => None,
                },
                spread_by_label: s.spread_by_label,
                max_groups: s.max_groups,
                min_groups: s.min_groups,
            })
            .collect(),
        replica_scheduling: p
            .replica_scheduling
            .map(|rs| core::ReplicaSchedulingStrategy {
                replica_scheduling_type: match rs.replica_scheduling_type {
                    Some(SchedulingTypeDoc::Duplicated) => core::ReplicaSchedulingType::Duplicated,
                    // PD-2: the CRD default is Divided.
                    Some(SchedulingTypeDoc::Divided) | None => core::ReplicaSchedulingType::Divided,
                },
                replica_division_preference: rs.replica_division_preference.map(|p| match p {
                    DivisionPreferenceDoc::Aggregated => {
                        core::ReplicaDivisionPreference::Aggregated
                    }
                    DivisionPreferenceDoc::Weighted => core::ReplicaDivisionPreference::Weighted,
                }),
                weight_preference: rs.weight_preference.map(|w| core::ClusterPreferences {
                    static_weight_list: w
                        .static_weight_list
                        .into_iter()
                        .map(|s| core::StaticClusterWeight {
                            target_cluster: s.target_cluster.core(),
                            weight: s.weight,
                        })
                        .collect(),
                    dynamic_weight: w.dynamic_weight.map(|DynamicWeightDoc::AvailableReplicas| {
                        core::DynamicWeightFactor::AvailableReplicas
                    }),
                }),
            }),
    }
}

fn failover(f: FailoverDoc) -> core::FailoverBehavior {
    core::FailoverBehavior {
        cluster: f.cluster.map(|c| core::ClusterFailoverBehavior {
            purge_mode: c.purge_mode.map(PurgeModeDoc::core),
            state_preservation: c
                .state_preservation
                .map(StatePreservationDoc::core)
                .unwrap_or_default(),
            failback_stabilization_window_seconds: c
                .failback
                .map(|f| f.stabilization_window_seconds),
        }),
        application: f.application.map(|a| core::ApplicationFailoverBehavior {
            toleration_seconds: a.decision_conditions.and_then(|d| d.toleration_seconds),
            purge_mode: a.purge_mode.map(PurgeModeDoc::core),
            grace_period_seconds: a.grace_period_seconds,
            state_preservation: a
                .state_preservation
                .map(StatePreservationDoc::core)
                .unwrap_or_default(),
        }),
    }
}

/// Rejects Karmada policy fields Flotilla does not implement, unless they hold the default.
fn unsupported_policy_fields(ctx: &mut Ctx<'_>, spec: &PolicySpecDoc) {
    let path = FieldPath::new("spec");
    let mut unsupported = |field: &str, why: String| {
        ctx.error(path.child(field).as_str(), why);
    };
    if spec.association == Some(true) {
        unsupported(
            "association",
            "Unsupported value: true: deprecated in Karmada; use `propagateDeps: true`".into(),
        );
    }
    if let Some(p) = spec
        .preemption
        .as_deref()
        .filter(|p| !matches!(*p, "Never" | "Always"))
    {
        unsupported(
            "preemption",
            format!("Unsupported value: {p:?}: supported values: \"Always\", \"Never\""),
        );
    }
    if let Some(c) = spec
        .conflict_resolution
        .as_deref()
        .filter(|c| *c != "Abort")
    {
        unsupported(
            "conflictResolution",
            format!("Unsupported value: {c:?}: Flotilla supports only \"Abort\""),
        );
    }
    if spec
        .dependent_overrides
        .as_ref()
        .is_some_and(|d| !d.is_empty())
    {
        unsupported(
            "dependentOverrides",
            "Forbidden: OverridePolicies are not supported by Flotilla".into(),
        );
    }
    if let Some(a) = spec
        .activation_preference
        .as_deref()
        .filter(|a| !a.is_empty())
    {
        unsupported(
            "activationPreference",
            format!("Unsupported value: {a:?}: Flotilla applies policy changes at once"),
        );
    }
    if spec.suspension.as_ref().is_some_and(|s| !s.is_null()) {
        unsupported(
            "suspension",
            "Forbidden: suspending dispatching is not supported by Flotilla".into(),
        );
    }
    if spec.preserve_resources_on_deletion == Some(true) {
        unsupported(
            "preserveResourcesOnDeletion",
            "Unsupported value: true: not supported by Flotilla".into(),
        );
    }
    if spec
        .schedule_priority
        .as_ref()
        .is_some_and(|s| !s.is_null())
    {
        unsupported(
            "schedulePriority",
            "Forbidden: scheduling priority is not supported by Flotilla".into(),
        );
    }
}

fn propagation_policy(
    ctx: &mut Ctx<'_>,
    doc: PolicyDoc,
    cluster_wide: bool,
    opts: &ReadOptions,
) -> Option<Object> {
    let PolicyDoc { metadata, spec, .. } = doc;
    let own = metadata.namespace.as_deref();
    let namespace = policy_namespace(ctx, own, cluster_wide, "ClusterPropagationPolicy", opts);
    unsupported_policy_fields(ctx, &spec);
    let placement = placement(ctx, spec.placement);
    let policy = core::PropagationPolicy {
        meta: metadata.into_core(namespace.clone()),
        spec: core::PropagationSpec {
            resource_selectors: spec
                .resource_selectors
                .into_iter()
                .map(ResourceSelectorDoc::core)
                .collect(),
            priority: spec.priority,
            placement,
            failover: spec.failover.map(failover),
            propagate_deps: spec.propagate_deps,
            scheduler_name: spec.scheduler_name,
            preemption: if spec.preemption.as_deref() == Some("Always") {
                core::Preemption::Always
            } else {
                core::Preemption::Never
            },
        },
    };
    // The validators expect defaulted input, as the api defaults before it validates.
    let mut defaulted = policy.clone();
    default_propagation_spec(
        &mut defaulted.spec,
        &namespace,
        &DefaultingOptions::default(),
    );
    ctx.field_errors(validate_propagation_policy(
        &defaulted,
        cluster_wide,
        &Limits::default(),
    ));
    Some(if cluster_wide {
        Object::ClusterPropagationPolicy(v1::ClusterPropagationPolicy::from(policy))
    } else {
        Object::PropagationPolicy(v1::PropagationPolicy::from(policy))
    })
}

fn override_policy(
    ctx: &mut Ctx<'_>,
    doc: OverridePolicyDoc,
    cluster_wide: bool,
    opts: &ReadOptions,
) -> Option<Object> {
    let OverridePolicyDoc { metadata, spec, .. } = doc;
    let own = metadata.namespace.as_deref();
    let namespace = policy_namespace(ctx, own, cluster_wide, "ClusterOverridePolicy", opts);
    let OverrideSpecDoc {
        resource_selectors,
        override_rules,
        target_cluster,
        overriders,
    } = spec;
    // Karmada's webhook: the deprecated pair and overrideRules cannot be combined
    let override_rules = match override_rules {
        Some(rules) => {
            if target_cluster.is_some() {
                ctx.error(
                    "spec.targetCluster",
                    "overrideRules and targetCluster can't co-exist",
                );
            }
            if overriders.as_ref().is_some_and(|o| !o.is_empty()) {
                ctx.error(
                    "spec.overriders",
                    "overrideRules and overriders can't co-exist",
                );
            }
            rules
                .into_iter()
                .map(|r| OverrideRule {
                    target_cluster: r.target_cluster.map(AffinityDoc::core),
                    overriders: r.overriders,
                })
                .collect()
        }
        None if target_cluster.is_some() || overriders.is_some() => vec![OverrideRule {
            target_cluster: target_cluster.map(AffinityDoc::core),
            overriders: overriders.unwrap_or_default(),
        }],
        None => Vec::new(),
    };
    let mut policy = OverridePolicy {
        meta: metadata.into_core(namespace.clone()),
        spec: OverrideSpec {
            resource_selectors: resource_selectors
                .into_iter()
                .map(ResourceSelectorDoc::core)
                .collect(),
            override_rules,
        },
    };
    // as the api defaults before it validates
    if !cluster_wide {
        for selector in &mut policy.spec.resource_selectors {
            if selector.namespace.is_empty() {
                selector.namespace.clone_from(&namespace);
            }
        }
    }
    ctx.field_errors(validate_override_policy(
        &policy,
        cluster_wide,
        &Limits::default(),
    ));
    Some(if cluster_wide {
        Object::ClusterOverridePolicy(policy.into())
    } else {
        Object::OverridePolicy(policy.into())
    })
}

fn cluster_taint_policy(ctx: &mut Ctx<'_>, doc: TaintPolicyDoc) -> Option<Object> {
    let TaintPolicyDoc { metadata, spec, .. } = doc;
    ignore_namespace(ctx, metadata.namespace.as_deref(), "ClusterTaintPolicy");
    let taints_path = FieldPath::new("spec").child("taints");
    let mut taints = Vec::new();
    for (i, t) in spec.taints.into_iter().enumerate() {
        match t.effect.core() {
            Some(effect) => taints.push(core::TaintSpec {
                key: t.key,
                value: t.value,
                effect,
            }),
            None => ctx.error(
                taints_path.index(i).child("effect").as_str(),
                "Required value: a taint needs an effect (NoSchedule or NoExecute)",
            ),
        }
    }
    let conditions = |list: Vec<MatchConditionDoc>| {
        list.into_iter()
            .map(|c| core::MatchCondition {
                condition_type: c.condition_type,
                operator: c.operator.core(),
                status_values: c.status_values.into_iter().map(|s| s.0).collect(),
            })
            .collect()
    };
    let policy = core::ClusterTaintPolicy {
        meta: metadata.into_core(String::new()),
        target_clusters: spec.target_clusters.map(AffinityDoc::core),
        add_on_conditions: conditions(spec.add_on_conditions),
        remove_on_conditions: conditions(spec.remove_on_conditions),
        taints,
    };
    // NoExecute taints are allowed here; the api decides (--allow-no-execute-taint-policy).
    ctx.field_errors(validate_cluster_taint_policy(
        &policy,
        true,
        &Limits::default(),
    ));
    Some(Object::ClusterTaintPolicy(
        v1::ClusterTaintPolicy::from(policy.clone()),
        policy,
    ))
}

fn cluster(ctx: &mut Ctx<'_>, doc: ClusterDoc) -> Option<Object> {
    let ClusterDoc { metadata, spec, .. } = doc;
    ignore_namespace(ctx, metadata.namespace.as_deref(), "Cluster");
    let path = FieldPath::new("spec");
    if spec.id.is_some() {
        ctx.warn("spec.id is ignored: Flotilla names clusters by their name");
    }
    if spec.impersonator_secret_ref.is_some() {
        ctx.warn(
            "spec.impersonatorSecretRef is kept but never used: Flotilla has no proxy that \
             impersonates users",
        );
    }
    if let Some(r) = &spec.secret_ref
        && (r.name.is_empty() || r.namespace.is_empty())
    {
        ctx.error(
            path.child("secretRef").as_str(),
            "Required value: secretRef needs a namespace and a name",
        );
    }
    let secret_ref = spec.secret_ref.map(SecretRefDoc::wire);
    let impersonator_secret_ref = spec.impersonator_secret_ref.map(SecretRefDoc::wire);
    let insecure = spec.insecure_skip_tls_verification;
    for (field, present) in [
        ("proxyURL", spec.proxy_url.is_some()),
        ("proxyHeader", spec.proxy_header.is_some()),
        ("resourceModels", spec.resource_models.is_some()),
    ] {
        if present {
            ctx.error(
                path.child(field).as_str(),
                "Forbidden: not supported by Flotilla",
            );
        }
    }
    let capacity = spec.capacity;
    let mut zones = spec.zones;
    if let Some(zone) = spec.zone {
        if zones.is_empty() {
            zones.push(zone);
        } else {
            ctx.error(
                path.child("zone").as_str(),
                "Invalid value: `zone` and `zones` cannot both be set",
            );
        }
    }
    let taints_path = path.child("taints");
    let mut taints = Vec::new();
    for (i, t) in spec.taints.into_iter().enumerate() {
        let p = taints_path.index(i);
        let Some(effect) = t.effect.core() else {
            ctx.error(
                p.child("effect").as_str(),
                "Required value: a taint needs an effect (NoSchedule or NoExecute)",
            );
            continue;
        };
        let time_added = match t
            .time_added
            .as_deref()
            .map(str::parse::<prost_types::Timestamp>)
        {
            None => None,
            Some(Ok(ts)) => flotilla_proto::convert::timestamp_to_time(&ts).ok(),
            Some(Err(e)) => {
                ctx.error(
                    p.child("timeAdded").as_str(),
                    format!("Invalid value: not an RFC 3339 time: {e}"),
                );
                None
            }
        };
        taints.push(core::Taint {
            key: t.key,
            value: t.value,
            effect,
            time_added,
            trace_context: String::new(),
        });
    }
    let cluster = core::Cluster {
        meta: metadata.into_core(String::new()),
        spec: core::ClusterSpec {
            sync_mode: match spec.sync_mode {
                Some(SyncModeDoc::Pull) => core::SyncMode::Pull,
                Some(SyncModeDoc::Push) | None => core::SyncMode::Push,
            },
            api_endpoint: spec.api_endpoint,
            provider: spec.provider,
            region: spec.region,
            zones,
            taints,
        },
        status: core::ClusterStatus::default(),
    };
    ctx.field_errors(validate_cluster(&cluster, &Limits::default()));
    let mut wire = v1::Cluster::from(cluster);
    wire.status = None;
    // (wire fields the domain does not model)
    if let Some(spec) = wire.spec.as_mut() {
        spec.secret_ref = secret_ref;
        spec.impersonator_secret_ref = impersonator_secret_ref;
        spec.insecure_skip_tls_verification = insecure;
    }
    if let (Some(c), Some(spec)) = (capacity, wire.spec.as_mut()) {
        spec.capacity = Some(v1::ResourceQuantities {
            cpu_millis: c.cpu_millis,
            memory_bytes: c.memory_bytes,
            pods: c.pods,
        });
    }
    Some(Object::Cluster(wire))
}

fn workload(
    ctx: &mut Ctx<'_>,
    value: serde_norway::Value,
    api_version: &str,
    kind: &str,
    opts: &ReadOptions,
) -> Option<Object> {
    let mut json = match serde_json::to_value(&value) {
        Ok(j) => j,
        Err(e) => {
            ctx.error("", format!("cannot be read as JSON: {e}"));
            return None;
        }
    };
    let Some(obj) = json.as_object_mut() else {
        ctx.error("", "a document must be a mapping (a Kubernetes object)");
        return None;
    };
    let metadata = obj
        .entry("metadata")
        .or_insert_with(|| serde_json::Value::Object(Default::default()));
    let Some(metadata) = metadata.as_object_mut() else {
        ctx.error("metadata", "Invalid value: must be a mapping");
        return None;
    };
    let own_ns = metadata
        .get("namespace")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned);
    let namespace = if resource::scope_of(api_version, kind) == resource::Scope::Cluster {
        // CR-4: a cluster-scoped object (Namespace, ClusterRole, ...) has no namespace
        if metadata.remove("namespace").is_some() {
            ctx.warn(format!(
                "metadata.namespace ignored: {kind} is cluster-scoped"
            ));
        }
        String::new()
    } else {
        let namespace = namespace_of(ctx, own_ns.as_deref(), opts);
        // As kubectl does, the object lands in the namespace it is applied to.
        metadata.insert("namespace".into(), namespace.clone().into());
        namespace
    };
    let name = metadata
        .get("name")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let labels: BTreeMap<String, String> = match metadata.get("labels") {
        None | Some(serde_json::Value::Null) => BTreeMap::new(),
        Some(serde_json::Value::Object(map)) => {
            let mut labels = BTreeMap::new();
            for (k, v) in map {
                match v.as_str() {
                    Some(s) => {
                        labels.insert(k.clone(), s.to_owned());
                    }
                    None => ctx.error(
                        &format!("metadata.labels[{k}]"),
                        "Invalid value: label values must be strings",
                    ),
                }
            }
            labels
        }
        Some(_) => {
            ctx.error("metadata.labels", "Invalid value: must be a mapping");
            BTreeMap::new()
        }
    };
    let replicas = match json.pointer("/spec/replicas") {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => match v.as_i64() {
            Some(n) => Some(n),
            None => {
                ctx.error("spec.replicas", "Invalid value: must be an integer");
                None
            }
        },
    };
    for field in fields::unknown_fields(api_version, kind, &json) {
        // kubectl's strict field validation in Warn mode: the object applies, the user is told
        ctx.warn(format!("unknown field \"{field}\""));
    }
    let manifest = json.to_string();
    let meta = core::ObjectMeta {
        name,
        namespace,
        labels,
        ..Default::default()
    };
    ctx.field_errors(validate_workload(
        &WorkloadTemplate {
            meta: &meta,
            api_version,
            kind,
            replicas,
            replica_requirements: None,
            manifest_bytes: manifest.len(),
        },
        &Limits::default(),
    ));
    Some(Object::Workload(v1::Workload {
        metadata: Some(v1::ObjectMeta {
            name: meta.name,
            namespace: meta.namespace,
            ..Default::default()
        }),
        api_version: api_version.to_owned(),
        kind: kind.to_owned(),
        manifest,
        replicas: 0,
        replica_requirements: None,
    }))
}

mod fields;

#[cfg(test)]
mod tests;
