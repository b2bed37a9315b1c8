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
//! default value (`dependentOverrides: []`, ...). A Cluster's
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
use flotilla_core::types::shape::TaintPolicySpec;
use flotilla_core::validation::{
    FieldError, FieldErrors, FieldPath, Limits, WorkloadTemplate, validate_cluster,
    validate_cluster_taint_policy, validate_cluster_taint_policy_conflicts,
    validate_override_policy, validate_propagation_policy, validate_workload,
};
use flotilla_proto::v1;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::Deserialize;
use serde::de::IgnoredAny;

/// Group/version of Karmada's policies.
pub const POLICY_API_VERSION: &str = "policy.karmada.io/v1alpha1";
/// Flotilla's own group/version for Clusters.
pub const FLOTILLA_API_VERSION: &str = "flotilla.io/v1alpha1";
/// Karmada's group/version for Clusters (accepted too).
pub const KARMADA_CLUSTER_API_VERSION: &str = "cluster.karmada.io/v1alpha1";

/// The metadata a Kubernetes API server sets: never part of what a user writes (a body's
/// `resourceVersion` is read only as a precondition).
pub const SERVER_SET_METADATA: [&str; 7] = [
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "deletionTimestamp",
    "managedFields",
    "selfLink",
];

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
    /// Bindings applied to release held eviction tasks (GE-9.1), in order.
    pub releases: Vec<Release>,
}

/// A ResourceBinding or ClusterResourceBinding document whose tasks say
/// `suppressDeletion: false`: what Karmada's guide has a user edit to release a task of purge
/// mode Never (GE-9.1). Nothing else of a binding is applied: the controllers write it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release {
    /// Where the document came from.
    pub source: String,
    /// Its index in the source.
    pub index: usize,
    /// `resourcebinding` or `clusterresourcebinding`.
    pub word: &'static str,
    /// The binding's namespace (empty for a ClusterResourceBinding).
    pub namespace: String,
    /// The binding's name.
    pub name: String,
    /// The clusters whose tasks to release.
    pub clusters: Vec<String>,
}

/// GE-9.1: reads a binding document as a [`Release`]; errors on `ctx` when it releases
/// nothing.
fn read_release(
    ctx: &mut Ctx<'_>,
    value: &serde_norway::Value,
    kind: &str,
    opts: &ReadOptions,
) -> Option<Release> {
    let cluster_scoped = kind == "ClusterResourceBinding";
    let meta = value.get("metadata");
    let name = meta
        .and_then(|m| str_field(m, "name"))
        .unwrap_or_default()
        .to_owned();
    if name.is_empty() {
        ctx.error("metadata.name", "Required value: the binding's name");
        return None;
    }
    let namespace = if cluster_scoped {
        String::new()
    } else {
        meta.and_then(|m| str_field(m, "namespace"))
            .map_or_else(|| opts.namespace.clone(), str::to_owned)
    };
    let tasks = value
        .get("spec")
        .and_then(|s| s.get("gracefulEvictionTasks"))
        .and_then(serde_norway::Value::as_sequence)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let clusters: Vec<String> = tasks
        .iter()
        .filter(|t| {
            t.get("suppressDeletion")
                .and_then(serde_norway::Value::as_bool)
                == Some(false)
        })
        .filter_map(|t| str_field(t, "fromCluster").map(str::to_owned))
        .collect();
    if clusters.is_empty() {
        ctx.error(
            "spec.gracefulEvictionTasks",
            "Forbidden: a binding is written by Flotilla's controllers; applying one only \
             releases a held eviction task, so set suppressDeletion: false on that task \
             (or run `flotilla release rb NAME --cluster CLUSTER`)",
        );
        return None;
    }
    ctx.warnings.push(format!(
        "{kind} {}: only gracefulEvictionTasks[].suppressDeletion: false is applied; the \
         other fields of a binding are the controllers' and are left as stored",
        if cluster_scoped {
            name.clone()
        } else {
            format!("{namespace}/{name}")
        }
    ));
    Some(Release {
        source: ctx.source.to_owned(),
        index: ctx.index,
        word: if cluster_scoped {
            "clusterresourcebinding"
        } else {
            "resourcebinding"
        },
        namespace,
        name,
        clusters,
    })
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
    let api_version = str_field(&value, "apiVersion").unwrap_or_default();
    if let (
        Some(("work.karmada.io", _)),
        Some(kind @ ("ResourceBinding" | "ClusterResourceBinding")),
    ) = (api_version.split_once('/'), str_field(&value, "kind"))
    {
        let kind = kind.to_owned();
        if let Some(release) = read_release(&mut ctx, &value, &kind, opts) {
            parsed.releases.push(release);
        }
    } else if let Some(object) = read_document(&mut ctx, value, opts) {
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
            let mut value = value;
            unsupported_policy_fields(ctx, &mut value);
            let doc: Envelope<core::PropagationSpec> = ctx.typed(value)?;
            propagation_policy(ctx, doc, cluster_wide, opts)
        }
        ("policy.karmada.io", "ClusterTaintPolicy") => {
            check_version(ctx, &api_version, POLICY_API_VERSION)?;
            let doc: Envelope<TaintPolicySpec> = ctx.typed(value)?;
            cluster_taint_policy(ctx, doc)
        }
        ("policy.karmada.io", "OverridePolicy" | "ClusterOverridePolicy") => {
            check_version(ctx, &api_version, POLICY_API_VERSION)?;
            let cluster_wide = kind == "ClusterOverridePolicy";
            let doc: Envelope<OverrideSpecDoc> = ctx.typed(value)?;
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
            let doc: Envelope<ClusterSpecDoc> = ctx.typed(value)?;
            cluster(ctx, doc)
        }
        // Flotilla keeps no rebalancer object; its one action is the reschedule request
        ("apps.karmada.io", "WorkloadRebalancer") => {
            ctx.error(
                "kind",
                "not supported yet: Flotilla keeps no WorkloadRebalancer object. Request the \
                 fresh schedule it would trigger with `flotilla reschedule rb NAME` for each \
                 workload's binding"
                    .to_owned(),
            );
            None
        }
        ("work.karmada.io", _) | ("flotilla.io", _) => {
            ctx.error(
                "kind",
                format!(
                    "Unsupported value: {kind:?}: Works are written by Flotilla's controllers \
                     and cannot be applied (a binding can be, only to release a held eviction \
                     task)"
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
        // CR-5: the rest of Karmada's API is refused by name, never taken for a template
        _ if flotilla_core::resource::not_a_template(&api_version, &kind).is_some() => {
            let why = flotilla_core::resource::not_a_template(&api_version, &kind);
            ctx.error("kind", why.unwrap_or_default());
            None
        }
        _ => workload(ctx, value, &api_version, &kind, opts),
    }
}

/// The JSON schema of a Karmada kind's `spec` as this reader takes it, from the very serde
/// types that read it (so `kubectl explain` and the reader cannot disagree), or `None` for a
/// kind whose spec is not read from a document (bindings and Works are the controllers').
/// Fields Karmada has and Flotilla refuses (`UNSUPPORTED_POLICY_FIELDS`) are not in it.
pub fn spec_schema(kind: &str, generator: &mut SchemaGenerator) -> Option<Schema> {
    Some(match kind {
        "PropagationPolicy" | "ClusterPropagationPolicy" => {
            generator.subschema_for::<core::PropagationSpec>()
        }
        "OverridePolicy" | "ClusterOverridePolicy" => generator.subschema_for::<OverrideSpecDoc>(),
        "ClusterTaintPolicy" => generator.subschema_for::<TaintPolicySpec>(),
        "Cluster" => generator.subschema_for::<ClusterSpecDoc>(),
        _ => return None,
    })
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

/// A Kubernetes object as a document holds it: `spec` is the kind's own shape (for the policy
/// kinds, the domain type's serde form: crates/core/src/types.rs). `apiVersion` and `kind`
/// were dispatched on already, and `status` is accepted and ignored.
#[allow(dead_code)] // apiVersion, kind and status are read only to be accepted
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Envelope<S> {
    api_version: String,
    kind: String,
    #[serde(default)]
    metadata: MetaDoc,
    #[serde(default)]
    spec: S,
    status: Option<IgnoredAny>,
}

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

#[derive(Clone, Copy, Debug, Deserialize, JsonSchema)]
#[schemars(rename = "TaintEffect")]
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

/// An OverridePolicy's spec; the overriders are read straight into the core types, which
/// carry Karmada's field names.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(rename = "OverrideSpec")]
struct OverrideSpecDoc {
    /// Which templates the policy adapts (none: every template in its scope).
    #[serde(default)]
    resource_selectors: Vec<core::ResourceSelector>,
    /// The rules, applied in order.
    override_rules: Option<Vec<OverrideRule>>,
    /// Deprecated (Karmada's single rule, read as one rule): use overrideRules.
    target_cluster: Option<core::ClusterAffinity>,
    /// Deprecated (with targetCluster, the single rule): use overrideRules.
    overriders: Option<Overriders>,
}

#[derive(Clone, Copy, Debug, Deserialize, JsonSchema)]
#[schemars(rename = "ClusterSyncMode")]
enum SyncModeDoc {
    Push,
    Pull,
}

/// A taint on the cluster: what may not be scheduled to it, or runs there no longer.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(rename = "Taint")]
struct TaintDoc {
    /// The taint's key, a qualified name.
    key: String,
    /// The taint's value (may be empty).
    #[serde(default)]
    value: String,
    /// NoSchedule, PreferNoSchedule or NoExecute.
    effect: EffectDoc,
    /// When the taint was added (RFC 3339); a NoExecute taint's toleration seconds count
    /// from it.
    time_added: Option<String>,
}

/// One grade of a cluster's resource models.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(rename = "ResourceModel")]
struct ResourceModelDoc {
    /// The grade; neighbouring grades differ.
    grade: u32,
    /// One range [min, max) per resource, in the same order in every grade.
    ranges: Vec<ResourceModelRangeDoc>,
}

/// The range [min, max) of one resource in a grade of the resource models.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(rename = "ResourceModelRange")]
struct ResourceModelRangeDoc {
    /// The resource: cpu, memory, ephemeral-storage or an extended resource.
    name: String,
    /// Inclusive lower bound, a quantity.
    min: QuantityDoc,
    /// Exclusive upper bound, a quantity.
    max: QuantityDoc,
}

/// A Kubernetes quantity, written as a string (`"1500m"`, `"4Gi"`) or a number (`2`).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
enum QuantityDoc {
    /// `"1500m"`, `"4Gi"`.
    Text(String),
    /// `2`.
    Int(i64),
    /// `0.5`.
    Float(f64),
}

impl QuantityDoc {
    fn text(&self) -> String {
        match self {
            QuantityDoc::Text(s) => s.clone(),
            QuantityDoc::Int(n) => n.to_string(),
            QuantityDoc::Float(f) => f.to_string(),
        }
    }
}

/// A member cluster: how Flotilla reaches it and where it is.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(rename = "ClusterSpec")]
struct ClusterSpecDoc {
    /// Push (the control plane applies to the member) or Pull (an agent in the member does).
    sync_mode: Option<SyncModeDoc>,
    /// The member's Kubernetes API URL (Push).
    #[serde(default)]
    api_endpoint: String,
    /// The cloud provider's name, for placement by field.
    #[serde(default)]
    provider: String,
    /// The region, for placement and spread by region.
    #[serde(default)]
    region: String,
    /// Deprecated: use zones.
    zone: Option<String>,
    /// The zones, for placement and spread by zone.
    #[serde(default)]
    zones: Vec<String>,
    /// The cluster's taints.
    #[serde(default)]
    taints: Vec<TaintDoc>,
    /// Karmada's cluster id (accepted and ignored, with a warning).
    #[schemars(with = "Option<String>")]
    id: Option<IgnoredAny>,
    /// The Secret (in karmada-cluster) with the member's credentials.
    secret_ref: Option<SecretRefDoc>,
    /// The Secret with the impersonator's token.
    impersonator_secret_ref: Option<SecretRefDoc>,
    /// Do not verify the member's serving certificate.
    // Karmada's spelling (`InsecureSkipTLSVerification bool json:"insecureSkipTLSVerification"`),
    // which camelCase would not produce
    #[serde(rename = "insecureSkipTLSVerification", default)]
    insecure_skip_tls_verification: bool,
    /// Not supported: Flotilla reaches members without a proxy.
    // Karmada features Flotilla does not implement.
    #[serde(rename = "proxyURL")]
    #[schemars(with = "Option<String>")]
    proxy_url: Option<serde_norway::Value>,
    /// Not supported: Flotilla reaches members without a proxy.
    #[schemars(with = "Option<BTreeMap<String, String>>")]
    proxy_header: Option<serde_norway::Value>,
    /// Grades of node size the estimator counts replicas by (Karmada's
    /// CustomizedClusterResourceModeling): by grade, the same resources' ranges in each.
    #[serde(default)]
    resource_models: Vec<ResourceModelDoc>,
    /// What the member declares it can hold (Flotilla's).
    capacity: Option<CapacityDoc>,
}

/// A Secret by namespace and name (Karmada's `LocalSecretReference`).
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(rename = "LocalSecretReference")]
struct SecretRefDoc {
    /// The Secret's namespace.
    #[serde(default)]
    namespace: String,
    /// The Secret's name.
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
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(rename = "Capacity")]
struct CapacityDoc {
    /// CPU, in thousandths of a core.
    #[serde(default)]
    cpu_millis: i64,
    /// Memory, in bytes.
    #[serde(default)]
    memory_bytes: i64,
    /// Pods.
    #[serde(default)]
    pods: i64,
}

// ---------------------------------------------------------------------------------------
// Conversion and validation
// ---------------------------------------------------------------------------------------

/// Karmada policy fields Flotilla does not carry yet: accepted only with their default
/// value, refused by name otherwise. They are taken out of the document before it is read
/// into the domain type, which does not have them.
/// A field, whether a value is its default (accepted), and why another value is refused.
type Unsupported = (&'static str, fn(&serde_norway::Value) -> bool, &'static str);

const UNSUPPORTED_POLICY_FIELDS: [Unsupported; 3] = [
    (
        "association",
        |v| v.is_null() || v.as_bool() == Some(false),
        "deprecated in Karmada; use `propagateDeps: true`",
    ),
    (
        "dependentOverrides",
        |v| v.is_null() || v.as_sequence().is_some_and(Vec::is_empty),
        "not supported yet: Flotilla does not hold a workload back until the named \
         OverridePolicies exist; apply the OverridePolicies and this policy in one file \
         instead (`flotilla apply -f` writes a file in one transaction, so no workload is \
         propagated without its overrides)",
    ),
    (
        "schedulePriority",
        serde_norway::Value::is_null,
        "not supported yet: Flotilla's scheduler does not order its queue by priority class \
         (a backlog is scheduled in arrival order); remove the field, and use `priority` with \
         `preemption` to decide which policy claims a workload",
    ),
];

/// The same for `spec.placement`.
const UNSUPPORTED_PLACEMENT_FIELDS: [Unsupported; 1] = [(
    "workloadAffinity",
    serde_norway::Value::is_null,
    "not supported yet: the scheduler places each binding on its own and does not look at \
     where the other workloads of a group run; place the workloads with clusterAffinity or \
     spreadConstraints instead",
)];

/// The same for each term of `spec.placement.clusterAffinities`.
const UNSUPPORTED_AFFINITY_TERM_FIELDS: [Unsupported; 1] = [(
    "overflowAffinities",
    |v| v.is_null() || v.as_sequence().is_some_and(Vec::is_empty),
    "not supported yet: Flotilla fills one affinity term at a time and does not spill the \
     replicas that do not fit onto overflow clusters; list the clusters to fall back on as a \
     later clusterAffinities term instead",
)];

/// Refuses (and removes) the [`UNSUPPORTED_POLICY_FIELDS`] of a policy document, and those of
/// its placement and its placement's affinity terms.
fn unsupported_policy_fields(ctx: &mut Ctx<'_>, document: &mut serde_norway::Value) {
    let Some(spec) = document
        .get_mut("spec")
        .and_then(serde_norway::Value::as_mapping_mut)
    else {
        return;
    };
    let path = FieldPath::new("spec");
    refuse_unsupported(ctx, spec, &path, &UNSUPPORTED_POLICY_FIELDS);
    let Some(placement) = spec
        .get_mut("placement")
        .and_then(serde_norway::Value::as_mapping_mut)
    else {
        return;
    };
    let path = path.child("placement");
    refuse_unsupported(ctx, placement, &path, &UNSUPPORTED_PLACEMENT_FIELDS);
    let terms = placement
        .get_mut("clusterAffinities")
        .and_then(serde_norway::Value::as_sequence_mut);
    for (i, term) in terms.into_iter().flatten().enumerate() {
        if let Some(term) = term.as_mapping_mut() {
            let at = path.child("clusterAffinities").index(i);
            refuse_unsupported(ctx, term, &at, &UNSUPPORTED_AFFINITY_TERM_FIELDS);
        }
    }
}

/// Removes the fields of `table` from `mapping` (at `path`), refusing by name each one whose
/// value is not its default.
fn refuse_unsupported(
    ctx: &mut Ctx<'_>,
    mapping: &mut serde_norway::Mapping,
    path: &FieldPath,
    table: &[Unsupported],
) {
    for (field, accepted, why) in table {
        let Some(value) = mapping.remove(*field) else {
            continue;
        };
        if !accepted(&value) {
            let shown = serde_json::to_string(&value).unwrap_or_default();
            ctx.error(
                path.child(field).as_str(),
                format!("Unsupported value: {shown}: {why}"),
            );
        }
    }
}

fn propagation_policy(
    ctx: &mut Ctx<'_>,
    doc: Envelope<core::PropagationSpec>,
    cluster_wide: bool,
    opts: &ReadOptions,
) -> Option<Object> {
    let Envelope { metadata, spec, .. } = doc;
    let own = metadata.namespace.as_deref();
    let namespace = policy_namespace(ctx, own, cluster_wide, "ClusterPropagationPolicy", opts);
    let policy = core::PropagationPolicy {
        meta: metadata.into_core(namespace.clone()),
        spec,
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
    doc: Envelope<OverrideSpecDoc>,
    cluster_wide: bool,
    opts: &ReadOptions,
) -> Option<Object> {
    let Envelope { metadata, spec, .. } = doc;
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
        }
        None if target_cluster.is_some() || overriders.is_some() => vec![OverrideRule {
            target_cluster,
            overriders: overriders.unwrap_or_default(),
        }],
        None => Vec::new(),
    };
    let mut policy = OverridePolicy {
        meta: metadata.into_core(namespace.clone()),
        spec: OverrideSpec {
            resource_selectors,
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

fn cluster_taint_policy(ctx: &mut Ctx<'_>, doc: Envelope<TaintPolicySpec>) -> Option<Object> {
    let Envelope { metadata, spec, .. } = doc;
    ignore_namespace(ctx, metadata.namespace.as_deref(), "ClusterTaintPolicy");
    let policy = spec.into_policy(metadata.into_core(String::new()));
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

fn cluster(ctx: &mut Ctx<'_>, doc: Envelope<ClusterSpecDoc>) -> Option<Object> {
    let Envelope { metadata, spec, .. } = doc;
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
            resource_models: resource_models(
                ctx,
                &path.child("resourceModels"),
                spec.resource_models,
            ),
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
            ..Default::default()
        });
    }
    Some(Object::Cluster(wire))
}

/// A cluster's resource models, amounts parsed and standardized as Karmada stores them
/// (ES-4.1); each amount that is not a quantity is an error at its path.
fn resource_models(
    ctx: &mut Ctx<'_>,
    path: &FieldPath,
    docs: Vec<ResourceModelDoc>,
) -> Vec<flotilla_core::capacity::ResourceModel> {
    let mut models = Vec::with_capacity(docs.len());
    for (i, doc) in docs.into_iter().enumerate() {
        let mut ranges = Vec::with_capacity(doc.ranges.len());
        for (j, r) in doc.ranges.into_iter().enumerate() {
            let p = path.index(i).child("ranges").index(j);
            let mut amount = |field: &str, q: &QuantityDoc| {
                let text = q.text();
                flotilla_core::capacity::amount(&r.name, &text).unwrap_or_else(|e| {
                    ctx.error(
                        p.child(field).as_str(),
                        format!("Invalid value: {text:?} is not a quantity: {e}"),
                    );
                    0
                })
            };
            let (min, max) = (amount("min", &r.min), amount("max", &r.max));
            ranges.push(flotilla_core::capacity::ModelRange {
                name: r.name,
                min,
                max,
            });
        }
        models.push(flotilla_core::capacity::ResourceModel {
            grade: doc.grade,
            ranges,
        });
    }
    flotilla_core::capacity::models::standardize(&mut models);
    models
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
    // What a server sets (an exported object applied again) is not part of the template.
    for key in SERVER_SET_METADATA {
        metadata.remove(key);
    }
    // Finalizers are the control plane's to hold (a delete waits for them), not part of the
    // manifest that goes to the members.
    let finalizers: Vec<String> = match metadata.remove("finalizers") {
        None | Some(serde_json::Value::Null) => Vec::new(),
        Some(serde_json::Value::Array(items)) => {
            let mut out = Vec::new();
            for (i, item) in items.iter().enumerate() {
                match item.as_str() {
                    Some(f) => out.push(f.to_owned()),
                    None => ctx.error(
                        &format!("metadata.finalizers[{i}]"),
                        "Invalid value: finalizers are strings",
                    ),
                }
            }
            out
        }
        Some(_) => {
            ctx.error("metadata.finalizers", "Invalid value: must be a list");
            Vec::new()
        }
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
    if let Some(obj) = json.as_object_mut() {
        obj.remove("status");
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
            finalizers,
            ..Default::default()
        }),
        api_version: api_version.to_owned(),
        kind: kind.to_owned(),
        manifest,
        replicas: 0,
        status: String::new(),
        replica_requirements: None,
    }))
}

mod fields;

#[cfg(test)]
mod tests;
