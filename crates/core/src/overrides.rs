//! OverridePolicy and ClusterOverridePolicy overriders (OV-1..OV-3): pure functions that adapt a
//! rendered manifest to one cluster.
//!
//! ```text
//!   policies that select the template ──order (OV-3)──► ClusterOverridePolicies, then
//!       OverridePolicies, each ascending by selector specificity, then name
//!   each rule whose targetCluster matches the cluster, in spec order:
//!       image ► command ► args ► labels ► annotations ► field ► plaintext   (OV-2)
//!   a rule that cannot apply (a `replace` of a missing path, …) is an error and the
//!   manifest is left exactly as it was: never half-patched
//! ```
//!
//! The semantics follow Karmada's `pkg/util/overridemanager` (see docs/rules.md, OV).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::affinity::{cluster_matches_affinity, label_selector_matches};
use crate::types::{Cluster, ClusterAffinity, ObjectMeta, ResourceSelector};

/// An overrider's operator (`add`, `remove`, `replace` in Karmada's YAML).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Operator {
    /// Add (append, insert, or overwrite an existing key).
    Add,
    /// Remove.
    Remove,
    /// Replace an existing value.
    Replace,
}

/// One JSON-patch operation at an RFC 6901 path (a plaintext overrider, and inside a
/// fieldOverrider where Karmada calls the path `subPath`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchOperation {
    /// The path (`/spec/replicas`).
    #[serde(alias = "subPath")]
    pub path: String,
    /// What to do.
    pub operator: Operator,
    /// The value for add and replace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
}

/// The part of an image an imageOverrider changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ImageComponent {
    /// `docker.io` of `docker.io/library/nginx:1.27`.
    Registry,
    /// `library/nginx`.
    Repository,
    /// `1.27` (or a `sha256:…` digest).
    Tag,
}

/// An imageOverrider.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImageOverrider {
    /// A path to one image field; unset: every container image at the kind's default path.
    /// Karmada's YAML writes it as `predicate: {path: …}`.
    #[serde(
        rename = "predicate",
        default,
        skip_serializing_if = "Option::is_none",
        with = "predicate"
    )]
    #[schemars(with = "Option<predicate::Predicate>")]
    pub predicate_path: Option<String>,
    /// The part changed.
    pub component: ImageComponent,
    /// Add appends `value` to the component, replace sets it, remove clears it.
    pub operator: Operator,
    /// The value.
    #[serde(default)]
    pub value: String,
}

/// `predicate: {path: …}` as an optional path.
pub(crate) mod predicate {
    use schemars::JsonSchema;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize, JsonSchema)]
    pub struct Predicate {
        /// The path of the image field.
        pub path: String,
    }

    #[allow(clippy::ref_option)] // serde's `with` hands the field by reference
    pub fn serialize<S: Serializer>(path: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
        path.as_ref()
            .map(|p| Predicate { path: p.clone() })
            .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        Ok(Option::<Predicate>::deserialize(d)?.map(|p| p.path))
    }
}

/// A commandOverrider or argsOverrider.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CommandArgsOverrider {
    /// The container (every container of that name).
    pub container_name: String,
    /// Add appends the values; remove deletes every entry equal to one of them.
    pub operator: Operator,
    /// The values.
    #[serde(default)]
    pub value: Vec<String>,
}

/// A labelsOverrider or annotationsOverrider (on the object's own metadata).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MapOverrider {
    /// Add sets the keys; remove deletes existing ones; replace changes existing ones.
    pub operator: Operator,
    /// The keys and values.
    #[serde(default)]
    pub value: BTreeMap<String, String>,
}

/// A fieldOverrider: patches inside a string field that holds JSON or YAML. Karmada's YAML
/// has `json:` and `yaml:` lists of `{subPath, operator, value}`; when both are given the
/// YAML ones apply, as in Karmada.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(try_from = "FieldOverriderDoc", into = "FieldOverriderDoc")]
pub struct FieldOverrider {
    /// RFC 6901 path of the string field (`/data/config.yaml`).
    pub field_path: String,
    /// Whether the field holds YAML (else JSON).
    pub yaml: bool,
    /// The operations, paths relative to the parsed document.
    pub operations: Vec<PatchOperation>,
}

/// A fieldOverrider as Karmada's YAML writes it.
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FieldOverriderDoc {
    field_path: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    json: Vec<SubPatch>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    yaml: Vec<SubPatch>,
}

#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SubPatch {
    sub_path: String,
    operator: Operator,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    value: Option<Value>,
}

impl TryFrom<FieldOverriderDoc> for FieldOverrider {
    type Error = String;

    /// Karmada's webhook: exactly one of `json` and `yaml`.
    fn try_from(doc: FieldOverriderDoc) -> Result<Self, String> {
        let yaml = !doc.yaml.is_empty();
        if yaml && !doc.json.is_empty() {
            return Err("a fieldOverrider has both yaml and json set; only one is allowed".into());
        }
        if !yaml && doc.json.is_empty() {
            return Err("a fieldOverrider must have either json or yaml set".into());
        }
        let ops = if yaml { doc.yaml } else { doc.json };
        Ok(FieldOverrider {
            field_path: doc.field_path,
            yaml,
            operations: ops
                .into_iter()
                .map(|p| PatchOperation {
                    path: p.sub_path,
                    operator: p.operator,
                    value: p.value,
                })
                .collect(),
        })
    }
}

impl From<FieldOverrider> for FieldOverriderDoc {
    fn from(o: FieldOverrider) -> Self {
        let ops: Vec<SubPatch> = o
            .operations
            .into_iter()
            .map(|p| SubPatch {
                sub_path: p.path,
                operator: p.operator,
                value: p.value,
            })
            .collect();
        let (json, yaml) = if o.yaml {
            (Vec::new(), ops)
        } else {
            (ops, Vec::new())
        };
        FieldOverriderDoc {
            field_path: o.field_path,
            json,
            yaml,
        }
    }
}

/// The overriders of one rule, serialised in Karmada's shape (`imageOverrider`, …), as the
/// `policy.karmada.io/applied-overrides` annotation records them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Overriders {
    /// plaintext: JSON patches, applied as one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plaintext: Vec<PatchOperation>,
    /// imageOverrider.
    #[serde(
        default,
        rename = "imageOverrider",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub image: Vec<ImageOverrider>,
    /// commandOverrider.
    #[serde(
        default,
        rename = "commandOverrider",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub command: Vec<CommandArgsOverrider>,
    /// argsOverrider.
    #[serde(
        default,
        rename = "argsOverrider",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub args: Vec<CommandArgsOverrider>,
    /// labelsOverrider.
    #[serde(
        default,
        rename = "labelsOverrider",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub labels: Vec<MapOverrider>,
    /// annotationsOverrider.
    #[serde(
        default,
        rename = "annotationsOverrider",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub annotations: Vec<MapOverrider>,
    /// fieldOverrider.
    #[serde(
        default,
        rename = "fieldOverrider",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub field: Vec<FieldOverrider>,
}

impl Overriders {
    /// Whether the rule changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == Overriders::default()
    }
}

/// Why overriders could not apply.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OverrideError {
    /// A path that does not exist (replace, remove), or whose parent does not (add).
    #[error("{op} {path}: {reason}")]
    Patch {
        /// `add`, `remove` or `replace`.
        op: &'static str,
        /// The path.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// An image that is not an image reference.
    #[error("{path}: {reason}")]
    Image {
        /// Where the image is.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A fieldOverrider's field is missing, not a string, or not JSON/YAML.
    #[error("{path}: {reason}")]
    Field {
        /// The field path.
        path: String,
        /// What is wrong.
        reason: String,
    },
}

// ---------------------------------------------------------------------------------------
// JSON patch (RFC 6902 add, remove, replace on RFC 6901 paths)
// ---------------------------------------------------------------------------------------

fn op_name(op: Operator) -> &'static str {
    match op {
        Operator::Add => "add",
        Operator::Remove => "remove",
        Operator::Replace => "replace",
    }
}

/// The unescaped tokens of an RFC 6901 pointer (`""` is the whole document).
fn tokens(path: &str) -> Result<Vec<String>, String> {
    if path.is_empty() {
        return Ok(Vec::new());
    }
    let rest = path
        .strip_prefix('/')
        .ok_or_else(|| "a path starts with /".to_owned())?;
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

/// Applies one operation to `doc`.
pub fn apply_patch(doc: &mut Value, op: &PatchOperation) -> Result<(), OverrideError> {
    let err = |reason: &str| OverrideError::Patch {
        op: op_name(op.operator),
        path: op.path.clone(),
        reason: reason.to_owned(),
    };
    let mut tokens = tokens(&op.path).map_err(|e| err(&e))?;
    let Some(last) = tokens.pop() else {
        // the whole document
        return match (op.operator, &op.value) {
            (Operator::Remove, _) => Err(err("cannot remove the whole document")),
            (_, Some(v)) => {
                *doc = v.clone();
                Ok(())
            }
            (_, None) => Err(err("a value is required")),
        };
    };
    let mut parent = &mut *doc;
    for t in &tokens {
        parent = match parent {
            Value::Object(map) => map.get_mut(t.as_str()),
            Value::Array(list) => t.parse::<usize>().ok().and_then(|i| list.get_mut(i)),
            _ => None,
        }
        .ok_or_else(|| err("the path does not exist"))?;
    }
    let value = || op.value.clone().ok_or_else(|| err("a value is required"));
    match parent {
        Value::Object(map) => match op.operator {
            Operator::Add => {
                map.insert(last, value()?);
            }
            Operator::Replace => {
                let slot = map
                    .get_mut(last.as_str())
                    .ok_or_else(|| err("the path does not exist"))?;
                *slot = value()?;
            }
            Operator::Remove => {
                map.remove(last.as_str())
                    .ok_or_else(|| err("the path does not exist"))?;
            }
        },
        Value::Array(list) => {
            let index = if last == "-" && op.operator == Operator::Add {
                list.len()
            } else {
                last.parse::<usize>()
                    .map_err(|_| err("not an index of the list"))?
            };
            match op.operator {
                Operator::Add if index <= list.len() => list.insert(index, value()?),
                Operator::Replace if index < list.len() => list[index] = value()?,
                Operator::Remove if index < list.len() => {
                    list.remove(index);
                }
                _ => return Err(err("the index is out of range")),
            }
        }
        _ => return Err(err("the parent is not an object or a list")),
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Images
// ---------------------------------------------------------------------------------------

/// An image reference split as Karmada's image parser splits it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Image {
    /// The registry: the first segment when it has a `.` or `:` or is `localhost`.
    pub registry: String,
    /// The repository.
    pub repository: String,
    /// The tag.
    pub tag: String,
    /// The digest (`sha256:…`, without `@`).
    pub digest: String,
}

impl Image {
    /// Parses `[registry/]repository[:tag][@digest]`.
    pub fn parse(text: &str) -> Result<Image, String> {
        if text.is_empty()
            || text
                .chars()
                .any(|c| c.is_ascii_uppercase() || c.is_whitespace())
        {
            return Err(format!("{text:?} is not a valid image reference"));
        }
        let (rest, digest) = match text.split_once('@') {
            Some((r, d)) => (r, d.to_owned()),
            None => (text, String::new()),
        };
        let (name, tag) = match rest.rsplit_once(':') {
            Some((n, t)) if !t.contains('/') => (n, t.to_owned()),
            _ => (rest, String::new()),
        };
        let (registry, repository) = match name.split_once('/') {
            Some((first, repo))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                (first.to_owned(), repo.to_owned())
            }
            _ => (String::new(), name.to_owned()),
        };
        if repository.is_empty() {
            return Err(format!("{text:?} has no repository"));
        }
        Ok(Image {
            registry,
            repository,
            tag,
            digest,
        })
    }

    /// The reference again (a tag wins over a digest, as in Karmada).
    pub fn render(&self) -> String {
        let mut out = String::new();
        if !self.registry.is_empty() {
            out.push_str(&self.registry);
            out.push('/');
        }
        out.push_str(&self.repository);
        if !self.tag.is_empty() {
            out.push(':');
            out.push_str(&self.tag);
        } else if !self.digest.is_empty() {
            out.push('@');
            out.push_str(&self.digest);
        }
        out
    }

    /// Applies an imageOverrider's component change.
    pub fn apply(&mut self, component: ImageComponent, operator: Operator, value: &str) {
        let edit = |current: &mut String| match operator {
            Operator::Add => current.push_str(value),
            Operator::Replace => value.clone_into(current),
            Operator::Remove => current.clear(),
        };
        match component {
            ImageComponent::Registry => edit(&mut self.registry),
            ImageComponent::Repository => edit(&mut self.repository),
            ImageComponent::Tag => match operator {
                Operator::Remove => {
                    if self.tag.is_empty() {
                        self.digest.clear();
                    } else {
                        self.tag.clear();
                    }
                }
                _ => {
                    let mut tag = self.tag.clone();
                    edit(&mut tag);
                    if tag.starts_with("sha256:") {
                        self.digest = tag;
                        self.tag.clear();
                    } else if is_tag(&tag) {
                        self.tag = tag;
                        self.digest.clear();
                    }
                    // anything else is ignored, as Karmada ignores it
                }
            },
        }
    }
}

fn is_tag(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 128
        && text
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// The pod spec path of the kinds whose containers image, command and args overriders change
/// by default (Karmada: Pod, and the workload kinds with a pod template; not CronJob).
fn pod_spec_pointer(api_version: &str, kind: &str) -> Option<&'static str> {
    match (api_version, kind) {
        ("v1", "Pod") => Some("/spec"),
        ("apps/v1", "Deployment" | "ReplicaSet" | "DaemonSet" | "StatefulSet")
        | ("batch/v1", "Job") => Some("/spec/template/spec"),
        _ => None,
    }
}

fn containers_mut(manifest: &mut Value) -> Vec<&mut Map<String, Value>> {
    let api_version = manifest
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let kind = manifest
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let Some(pointer) = pod_spec_pointer(&api_version, &kind) else {
        return Vec::new();
    };
    manifest
        .pointer_mut(pointer)
        .and_then(|pod| pod.get_mut("containers"))
        .and_then(Value::as_array_mut)
        .map(|list| list.iter_mut().filter_map(Value::as_object_mut).collect())
        .unwrap_or_default()
}

fn override_image(manifest: &mut Value, o: &ImageOverrider) -> Result<(), OverrideError> {
    let change = |path: &str, current: &str| -> Result<String, OverrideError> {
        let mut image = Image::parse(current).map_err(|reason| OverrideError::Image {
            path: path.to_owned(),
            reason,
        })?;
        image.apply(o.component, o.operator, &o.value);
        Ok(image.render())
    };
    match &o.predicate_path {
        Some(path) => {
            let current = manifest
                .pointer(path)
                .and_then(Value::as_str)
                .ok_or_else(|| OverrideError::Image {
                    path: path.clone(),
                    reason: "no image string at this path".into(),
                })?
                .to_owned();
            let new = change(path, &current)?;
            if let Some(slot) = manifest.pointer_mut(path) {
                *slot = Value::String(new);
            }
        }
        None => {
            for container in containers_mut(manifest) {
                if let Some(Value::String(image)) = container.get_mut("image") {
                    *image = change("image", image)?;
                }
            }
        }
    }
    Ok(())
}

fn override_command_args(
    manifest: &mut Value,
    field: &str,
    o: &CommandArgsOverrider,
) -> Result<(), OverrideError> {
    for container in containers_mut(manifest) {
        if container.get("name").and_then(Value::as_str) != Some(o.container_name.as_str()) {
            continue;
        }
        let mut list: Vec<Value> = container
            .get(field)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        match o.operator {
            Operator::Add => list.extend(o.value.iter().cloned().map(Value::String)),
            Operator::Remove => {
                list.retain(|v| !v.as_str().is_some_and(|s| o.value.iter().any(|x| x == s)));
            }
            Operator::Replace => continue,
        }
        container.insert(field.to_owned(), Value::Array(list));
    }
    Ok(())
}

fn override_map(manifest: &mut Value, field: &str, o: &MapOverrider) -> Result<(), OverrideError> {
    let Some(root) = manifest.as_object_mut() else {
        return Ok(());
    };
    let meta = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(meta) = meta.as_object_mut() else {
        return Ok(());
    };
    if o.operator == Operator::Add && !meta.get(field).is_some_and(Value::is_object) {
        meta.insert(field.to_owned(), Value::Object(Map::new()));
    }
    let Some(map) = meta.get_mut(field).and_then(Value::as_object_mut) else {
        return Ok(());
    };
    for (k, v) in &o.value {
        match o.operator {
            Operator::Add => {
                map.insert(k.clone(), Value::String(v.clone()));
            }
            Operator::Replace => {
                if let Some(slot) = map.get_mut(k) {
                    *slot = Value::String(v.clone());
                }
            }
            Operator::Remove => {
                map.remove(k);
            }
        }
    }
    Ok(())
}

fn override_field(manifest: &mut Value, o: &FieldOverrider) -> Result<(), OverrideError> {
    let err = |reason: String| OverrideError::Field {
        path: o.field_path.clone(),
        reason,
    };
    let text = match manifest.pointer(&o.field_path) {
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(err("is not a string".into())),
        None => return Err(err("does not exist".into())),
    };
    let mut doc: Value = if o.yaml {
        serde_norway::from_str(&text).map_err(|e| err(format!("is not YAML: {e}")))?
    } else {
        serde_json::from_str(&text).map_err(|e| err(format!("is not JSON: {e}")))?
    };
    for op in &o.operations {
        apply_patch(&mut doc, op)?;
    }
    let new = if o.yaml {
        serde_norway::to_string(&doc).map_err(|e| err(format!("cannot be written as YAML: {e}")))?
    } else {
        doc.to_string()
    };
    if let Some(slot) = manifest.pointer_mut(&o.field_path) {
        *slot = Value::String(new);
    }
    Ok(())
}

/// OV-2: applies one rule's overriders to `manifest` in Karmada's order — image, command,
/// args, labels, annotations, field, plaintext — all or nothing: on an error `manifest` is
/// left exactly as it was.
pub fn apply_overriders(manifest: &mut Value, o: &Overriders) -> Result<(), OverrideError> {
    let mut work = manifest.clone();
    for image in &o.image {
        override_image(&mut work, image)?;
    }
    for c in &o.command {
        override_command_args(&mut work, "command", c)?;
    }
    for a in &o.args {
        override_command_args(&mut work, "args", a)?;
    }
    for l in &o.labels {
        override_map(&mut work, "labels", l)?;
    }
    for a in &o.annotations {
        override_map(&mut work, "annotations", a)?;
    }
    for f in &o.field {
        override_field(&mut work, f)?;
    }
    for p in &o.plaintext {
        apply_patch(&mut work, p)?;
    }
    *manifest = work;
    Ok(())
}

/// How specifically an override policy selects a template (OV-3): no selectors or match-all,
/// a label selector, a name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Specificity {
    /// No selectors, or one that selects by kind only.
    All,
    /// A label selector.
    Labels,
    /// A name.
    Name,
}

// ---------------------------------------------------------------------------------------
// Policies (OV-1, OV-3)
// ---------------------------------------------------------------------------------------

/// One override rule: the clusters it is for and what it changes there (Karmada's YAML).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OverrideRule {
    /// The clusters (unset: every cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_cluster: Option<ClusterAffinity>,
    /// The overriders.
    #[serde(default)]
    pub overriders: Overriders,
}

/// The spec shared by OverridePolicy and ClusterOverridePolicy, as Karmada's YAML writes it.
/// Reading also takes Karmada's deprecated top-level `targetCluster` + `overriders` as one
/// rule; that is the manifest reader's (`crates/kube/src/manifest.rs`), since combining them with
/// `overrideRules` is an error to report by field.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OverrideSpec {
    /// Which templates the policy adapts (none: every template in its scope).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resource_selectors: Vec<ResourceSelector>,
    /// The rules, applied in order.
    pub override_rules: Vec<OverrideRule>,
}

/// An OverridePolicy (namespaced) or ClusterOverridePolicy (`meta.namespace` empty).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OverridePolicy {
    /// Metadata.
    pub meta: ObjectMeta,
    /// Spec.
    pub spec: OverrideSpec,
}

/// What an override policy is matched against: the template's identity and labels.
#[derive(Clone, Copy, Debug)]
pub struct Template<'a> {
    /// `apps/v1`.
    pub api_version: &'a str,
    /// `Deployment`.
    pub kind: &'a str,
    /// Empty for cluster-scoped templates.
    pub namespace: &'a str,
    /// The name.
    pub name: &'a str,
    /// The template's labels.
    pub labels: &'a BTreeMap<String, String>,
}

/// OV-1: how one resource selector matches a template, as Karmada's
/// `ResourceSelectorPriority`: apiVersion and kind equal, the namespace (if set) equal; then
/// a name must be equal, else a label selector must match, else it matches the whole kind.
pub fn selector_match(selector: &ResourceSelector, t: &Template<'_>) -> Option<Specificity> {
    if selector.api_version != t.api_version || selector.kind != t.kind {
        return None;
    }
    if !selector.namespace.is_empty() && selector.namespace != t.namespace {
        return None;
    }
    if !selector.name.is_empty() {
        return (selector.name == t.name).then_some(Specificity::Name);
    }
    match &selector.label_selector {
        None => Some(Specificity::All),
        Some(ls) => label_selector_matches(ls, t.labels).then_some(Specificity::Labels),
    }
}

/// OV-1: how a policy matches a template: no selectors match everything (in the policy's
/// scope); otherwise the most specific matching selector decides.
pub fn policy_match(spec: &OverrideSpec, t: &Template<'_>) -> Option<Specificity> {
    if spec.resource_selectors.is_empty() {
        return Some(Specificity::All);
    }
    spec.resource_selectors
        .iter()
        .filter_map(|s| selector_match(s, t))
        .max()
}

/// One policy's rule as applied: recorded in the Work's `policy.karmada.io/applied-overrides`
/// (or `applied-cluster-overrides`) annotation as a JSON list, as Karmada records it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppliedOverrider {
    /// The policy's name.
    pub policy_name: String,
    /// The rule's overriders.
    pub overriders: Overriders,
}

/// The overrides applied to one cluster's manifest.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Applied {
    /// From ClusterOverridePolicies, in the order applied.
    pub cluster: Vec<AppliedOverrider>,
    /// From OverridePolicies of the template's namespace, in the order applied.
    pub namespaced: Vec<AppliedOverrider>,
}

impl Applied {
    /// Whether nothing applied.
    pub fn is_empty(&self) -> bool {
        self.cluster.is_empty() && self.namespaced.is_empty()
    }
}

/// A policy whose rule could not apply.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{policy}: {error}")]
pub struct PolicyError {
    /// `ClusterOverridePolicy NAME` or `OverridePolicy NS/NAME`.
    pub policy: String,
    /// Why.
    pub error: OverrideError,
}

/// OV-1..OV-3: adapts `manifest` (the template as rendered for `cluster`) with every
/// override policy that selects `template` and has a rule for `cluster`:
/// ClusterOverridePolicies first, then (for a namespaced template) the OverridePolicies of
/// its namespace, each group ascending by how specifically it selects the template, then by
/// name; a policy's rules in spec order. All or nothing: on an error `manifest` is left as
/// it was and the error names the policy.
pub fn apply_policies(
    manifest: &mut Value,
    template: &Template<'_>,
    cluster: &Cluster,
    policies: &[&OverridePolicy],
) -> Result<Applied, PolicyError> {
    let mut matching: Vec<(bool, Specificity, String, &OverridePolicy)> = policies
        .iter()
        .filter(|p| {
            // OverridePolicies adapt only templates of their own namespace
            p.meta.namespace.is_empty()
                || (!template.namespace.is_empty() && p.meta.namespace == template.namespace)
        })
        .filter_map(|p| {
            policy_match(&p.spec, template)
                .map(|s| (p.meta.namespace.is_empty(), s, p.meta.name.clone(), *p))
        })
        .collect();
    matching.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then(a.1.cmp(&b.1))
            .then_with(|| a.2.cmp(&b.2))
    });
    let mut work = manifest.clone();
    let mut applied = Applied::default();
    for (cluster_wide, _, name, policy) in matching {
        for rule in &policy.spec.override_rules {
            if rule
                .target_cluster
                .as_ref()
                .is_some_and(|a| !cluster_matches_affinity(cluster, a))
            {
                continue;
            }
            apply_overriders(&mut work, &rule.overriders).map_err(|error| PolicyError {
                policy: if cluster_wide {
                    format!("ClusterOverridePolicy {name}")
                } else {
                    format!("OverridePolicy {}/{name}", policy.meta.namespace)
                },
                error,
            })?;
            let record = AppliedOverrider {
                policy_name: name.clone(),
                overriders: rule.overriders.clone(),
            };
            if cluster_wide {
                applied.cluster.push(record);
            } else {
                applied.namespaced.push(record);
            }
        }
    }
    *manifest = work;
    Ok(applied)
}

/// The differences between two manifests, one `PATH: OLD → NEW` line per changed leaf (RFC
/// 6901 paths; `(absent)` for a missing side; lists of different lengths as a whole), in
/// path order: what overrides changed, for people.
pub fn diff(before: &Value, after: &Value) -> Vec<String> {
    let mut out = Vec::new();
    diff_at(&mut String::new(), Some(before), Some(after), &mut out);
    out
}

fn diff_at(path: &mut String, a: Option<&Value>, b: Option<&Value>, out: &mut Vec<String>) {
    if a == b {
        return;
    }
    let show = |v: Option<&Value>| v.map_or_else(|| "(absent)".to_owned(), Value::to_string);
    match (a, b) {
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let len = path.len();
                path.push('/');
                path.push_str(&k.replace('~', "~0").replace('/', "~1"));
                diff_at(path, x.get(k), y.get(k), out);
                path.truncate(len);
            }
        }
        (Some(Value::Array(x)), Some(Value::Array(y))) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                let len = path.len();
                path.push('/');
                path.push_str(&i.to_string());
                diff_at(path, Some(p), Some(q), out);
                path.truncate(len);
            }
        }
        _ => out.push(format!("{path}: {} → {}", show(a), show(b))),
    }
}

#[cfg(test)]
mod tests;
