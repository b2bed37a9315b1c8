//! Server-side apply (`application/apply-patch+yaml`) and the field ownership every write
//! keeps in `metadata.managedFields`, as kube-apiserver does it (docs/kubernetes-api.md,
//! "Server-side apply"). Pure: the caller gives the time and does the write.
//!
//! ```text
//!   apply(live, managed, config, manager, force)
//!     SSA-1  config's field set: every leaf, every keyed list item ("k:{…}"), every set
//!            value ("v:…"); atomic lists and atomic structs are one leaf
//!     SSA-2  merged = live ⊕ config (objects by key, keyed lists item by item, sets as a
//!            union, everything else replaced)
//!     SSA-3  a field of the config whose value differs from live and that another manager
//!            owns is a conflict: refused, unless force, which takes it from them
//!     SSA-4  what the manager applied last time and no longer applies, and nobody else
//!            owns, is removed from the object
//!     SSA-5  the manager's Apply entry becomes the config's field set
//!   update(live, managed, new, manager)          (create, replace, every other patch)
//!     SSA-6  the fields a write adds or changes become the writer's (its Update entry);
//!            every other manager loses them, and every owner loses what it removes
//! ```
//!
//! Lists merge as Kubernetes' schemas say for built-in kinds (containers by `name`, a
//! container's ports by `containerPort` and `protocol`, …); in Karmada's kinds, which are
//! custom resources without list types, every list is atomic, as for a CRD.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

/// A field path, its elements in FieldsV1 spelling: `f:spec`, `k:{"name":"nginx"}`,
/// `v:"finalizer"`, `i:0`.
pub type Path = Vec<String>;

/// A set of field paths (one manager's fields).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSet(BTreeSet<Path>);

impl FieldSet {
    /// The paths of a FieldsV1 document (`{"f:spec":{"f:replicas":{}}}`): a key names a
    /// child, `.` the node itself, and an empty object a leaf.
    pub fn from_fields_v1(value: &Value) -> Result<Self, String> {
        fn walk(v: &Value, path: &mut Path, out: &mut BTreeSet<Path>) -> Result<(), String> {
            let Some(map) = v.as_object() else {
                return Err(format!("{}: expected an object", path.join(".")));
            };
            if map.is_empty() && !path.is_empty() {
                out.insert(path.clone());
            }
            for (key, child) in map {
                if key == "." {
                    out.insert(path.clone());
                    continue;
                }
                if !["f:", "k:", "v:", "i:"].iter().any(|p| key.starts_with(p)) {
                    return Err(format!("{key:?}: not a FieldsV1 path element"));
                }
                path.push(key.clone());
                walk(child, path, out)?;
                path.pop();
            }
            Ok(())
        }
        let mut out = BTreeSet::new();
        walk(value, &mut Vec::new(), &mut out)?;
        Ok(Self(out))
    }

    /// The FieldsV1 document of these paths.
    pub fn to_fields_v1(&self) -> Value {
        #[derive(Default)]
        struct Node {
            member: bool,
            children: std::collections::BTreeMap<String, Node>,
        }
        fn render(node: &Node) -> Value {
            let mut map = Map::new();
            if node.member && !node.children.is_empty() {
                map.insert(".".into(), Value::Object(Map::new()));
            }
            for (k, child) in &node.children {
                map.insert(k.clone(), render(child));
            }
            Value::Object(map)
        }
        let mut root = Node::default();
        for path in &self.0 {
            let mut node = &mut root;
            for element in path {
                node = node.children.entry(element.clone()).or_default();
            }
            node.member = true;
        }
        render(&root)
    }

    /// No paths.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `path` is in the set.
    pub fn contains(&self, path: &Path) -> bool {
        self.0.contains(path)
    }

    /// Whether `path` or a path below it is in the set.
    fn covers(&self, path: &Path) -> bool {
        self.0
            .range(path.clone()..)
            .next()
            .is_some_and(|p| p.starts_with(path))
    }

    fn without(&self, other: &FieldSet) -> FieldSet {
        FieldSet(self.0.difference(&other.0).cloned().collect())
    }

    fn union(&self, other: &FieldSet) -> FieldSet {
        FieldSet(self.0.union(&other.0).cloned().collect())
    }

    /// The paths, in order.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.0.iter()
    }
}

/// Which operation a manager's entry records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// Server-side apply: the entry is what the manager last applied.
    Apply,
    /// Any other write: the fields the manager set.
    Update,
}

impl Operation {
    /// Kubernetes' spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One manager's entry of `managedFields`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The manager's name.
    pub manager: String,
    /// Apply or Update.
    pub operation: Operation,
    /// The API version the fields are named in.
    pub api_version: String,
    /// RFC 3339, as written.
    pub time: String,
    /// Its fields.
    pub fields: FieldSet,
}

impl Entry {
    /// An entry as the object's `metadata.managedFields[i]` holds it.
    pub fn from_json(value: &Value) -> Result<Entry, String> {
        let text = |key: &str| value.get(key).and_then(Value::as_str).unwrap_or_default();
        let operation = match text("operation") {
            "Apply" => Operation::Apply,
            "Update" => Operation::Update,
            other => return Err(format!("operation {other:?}: expected Apply or Update")),
        };
        Ok(Entry {
            manager: text("manager").to_owned(),
            operation,
            api_version: text("apiVersion").to_owned(),
            time: text("time").to_owned(),
            fields: FieldSet::from_fields_v1(value.get("fieldsV1").unwrap_or(&Value::Null))?,
        })
    }

    /// The entries of an object in its Kubernetes form (none when it has none).
    pub fn of(object: &Value) -> Result<Vec<Entry>, String> {
        object
            .pointer("/metadata/managedFields")
            .and_then(Value::as_array)
            .map(|items| items.iter().map(Entry::from_json).collect())
            .unwrap_or_else(|| Ok(Vec::new()))
    }

    /// The entry as `metadata.managedFields[i]`.
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "manager": self.manager,
            "operation": self.operation.as_str(),
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": self.fields.to_fields_v1(),
        })
    }
}

/// How the lists of a kind merge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schema {
    /// A Kubernetes built-in kind: Kubernetes' list types.
    Builtin,
    /// A custom resource (Karmada's kinds): every list atomic, metadata's as everywhere.
    Custom,
}

/// How a list merges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ListType {
    /// Items matched by these fields.
    Map(&'static [&'static str]),
    /// Scalars, a set.
    Set,
    /// Replaced whole: one leaf.
    Atomic,
}

fn list_type(schema: Schema, names: &[String]) -> ListType {
    let Some((field, parent)) = names.split_last() else {
        return ListType::Atomic;
    };
    if schema == Schema::Custom && names.first().map(String::as_str) != Some("metadata") {
        return ListType::Atomic;
    }
    let container = parent.last().is_some_and(|p| {
        matches!(
            p.as_str(),
            "containers" | "initContainers" | "ephemeralContainers"
        )
    });
    match field.as_str() {
        // Kubernetes' list-map keys where they are more than the patch merge key
        "ports" if container => ListType::Map(&["containerPort", "protocol"]),
        "ports" if parent.last().map(String::as_str) == Some("spec") => {
            ListType::Map(&["port", "protocol"])
        }
        "topologySpreadConstraints" => ListType::Map(&["topologyKey", "whenUnsatisfiable"]),
        _ => match crate::smp::strategy(parent, field) {
            crate::smp::ListStrategy::Key(key) => ListType::Map(key_fields(key)),
            crate::smp::ListStrategy::Union => ListType::Set,
            crate::smp::ListStrategy::Replace => ListType::Atomic,
        },
    }
}

/// The one-field key of a merge key, as a static slice.
fn key_fields(key: &'static str) -> &'static [&'static str] {
    match key {
        "name" => &["name"],
        "containerPort" => &["containerPort"],
        "port" => &["port"],
        "mountPath" => &["mountPath"],
        "devicePath" => &["devicePath"],
        "ip" => &["ip"],
        "topologyKey" => &["topologyKey"],
        "type" => &["type"],
        "uid" => &["uid"],
        _ => &[],
    }
}

/// What no manager owns: identity and what the server sets (kube-apiserver strips the same
/// before it computes field sets), and status, which a write of the main resource resets.
fn ignored(path: &Path) -> bool {
    match path.as_slice() {
        [top] => matches!(top.as_str(), "f:apiVersion" | "f:kind" | "f:status"),
        [meta, field] if meta == "f:metadata" => matches!(
            field.as_str(),
            "f:name"
                | "f:namespace"
                | "f:uid"
                | "f:resourceVersion"
                | "f:generation"
                | "f:creationTimestamp"
                | "f:deletionTimestamp"
                | "f:deletionGracePeriodSeconds"
                | "f:selfLink"
                | "f:managedFields"
        ),
        _ => false,
    }
}

/// A built-in kind's fields that are Go structs held by value: they exist in an empty
/// object, so a write never "adds" them and no Update entry owns them as a node.
const VALUE_STRUCTS: [&str; 8] = [
    "metadata",
    "spec",
    "status",
    "template",
    "jobTemplate",
    "strategy",
    "updateStrategy",
    "resources",
];

/// A label selector of a built-in kind is atomic (`matchLabels` and `matchExpressions`
/// together are one value).
fn atomic_struct(schema: Schema, names: &[String], value: &Map<String, Value>) -> bool {
    schema == Schema::Builtin
        && names.last().is_some_and(|n| n == "selector")
        && (value.contains_key("matchLabels") || value.contains_key("matchExpressions"))
}

/// `k:{…}` of a keyed list's item, or `None` when it lacks every key field.
fn item_key(item: &Value, keys: &[&str]) -> Option<String> {
    let map = item.as_object()?;
    // a port's protocol is part of its key, TCP when unset (kube-apiserver keys it so too)
    let key: Map<String, Value> = keys
        .iter()
        .filter_map(|k| match map.get(*k) {
            Some(v) => Some(((*k).to_owned(), v.clone())),
            None if *k == "protocol" => Some(("protocol".into(), Value::from("TCP"))),
            None => None,
        })
        .collect();
    if !key.keys().any(|k| k != "protocol") {
        return None;
    }
    Some(format!("k:{}", Value::Object(key)))
}

/// The fields of an object: its leaves (scalars, atomic values, set members) and the nodes
/// that hold fields (keyed list items; with `nodes`, objects too).
#[derive(Default)]
struct Fields {
    leaves: FieldSet,
    nodes: FieldSet,
}

impl Fields {
    fn all(&self) -> FieldSet {
        self.leaves.union(&self.nodes)
    }
}

/// The field set of `value` (SSA-1). With `nodes`, the objects that a write can add are
/// members too (an Update entry's `.`).
fn field_set(value: &Value, schema: Schema, nodes: bool) -> Fields {
    struct Walk {
        schema: Schema,
        nodes: bool,
        out: Fields,
    }
    impl Walk {
        fn leaf(&mut self, path: &Path) {
            self.out.leaves.0.insert(path.clone());
        }

        fn value(&mut self, v: &Value, names: &mut Vec<String>, path: &mut Path) {
            match v {
                Value::Object(map) => {
                    if path.is_empty() {
                        self.fields(map, names, path);
                    } else if map.is_empty() || atomic_struct(self.schema, names, map) {
                        self.leaf(path);
                    } else {
                        let value_struct = self.schema == Schema::Builtin
                            && names
                                .last()
                                .is_some_and(|n| VALUE_STRUCTS.contains(&n.as_str()));
                        if self.nodes && !value_struct {
                            self.out.nodes.0.insert(path.clone());
                        }
                        self.fields(map, names, path);
                    }
                }
                Value::Array(items) => match list_type(self.schema, names) {
                    _ if items.is_empty() => self.leaf(path),
                    ListType::Atomic => self.leaf(path),
                    ListType::Set => {
                        for item in items {
                            let mut p = path.clone();
                            p.push(format!("v:{item}"));
                            self.leaf(&p);
                        }
                    }
                    ListType::Map(keys) => {
                        let keyed: Option<Vec<String>> =
                            items.iter().map(|i| item_key(i, keys)).collect();
                        let Some(keyed) = keyed else {
                            self.leaf(path);
                            return;
                        };
                        for (item, key) in items.iter().zip(keyed) {
                            path.push(key);
                            self.out.nodes.0.insert(path.clone());
                            if let Value::Object(map) = item {
                                self.fields(map, names, path);
                            }
                            path.pop();
                        }
                    }
                },
                _ => self.leaf(path),
            }
        }

        fn fields(&mut self, map: &Map<String, Value>, names: &mut Vec<String>, path: &mut Path) {
            for (k, child) in map {
                path.push(format!("f:{k}"));
                if !ignored(path) {
                    names.push(k.clone());
                    self.value(child, names, path);
                    names.pop();
                }
                path.pop();
            }
        }
    }
    let mut walk = Walk {
        schema,
        nodes,
        out: Fields::default(),
    };
    walk.value(value, &mut Vec::new(), &mut Vec::new());
    walk.out
}

/// The value at `path` in `value`.
fn value_at<'a>(value: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut here = value;
    for element in path {
        here = step(here, element)?;
    }
    Some(here)
}

fn step<'a>(here: &'a Value, element: &str) -> Option<&'a Value> {
    if let Some(field) = element.strip_prefix("f:") {
        return here.get(field);
    }
    let items = here.as_array()?;
    if let Some(key) = element.strip_prefix("k:") {
        let key: Map<String, Value> = serde_json::from_str(key).ok()?;
        return items.iter().find(|item| {
            key.iter().all(|(k, v)| {
                item.get(k) == Some(v) || (k == "protocol" && item.get(k).is_none() && v == "TCP")
            })
        });
    }
    if let Some(v) = element.strip_prefix("v:") {
        let v: Value = serde_json::from_str(v).ok()?;
        return items.iter().find(|item| **item == v);
    }
    let i: usize = element.strip_prefix("i:")?.parse().ok()?;
    items.get(i)
}

/// Removes what `path` names from `value` (nothing when it is not there).
fn remove_at(value: &mut Value, path: &[String]) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    let mut here = value;
    for element in parent {
        let next = match element.strip_prefix("f:") {
            Some(field) => here.get_mut(field),
            None => {
                let Some(found) = step(here, element).cloned() else {
                    return;
                };
                here.as_array_mut()
                    .and_then(|items| items.iter_mut().find(|i| **i == found))
            }
        };
        let Some(next) = next else {
            return;
        };
        here = next;
    }
    if let Some(field) = last.strip_prefix("f:") {
        if let Some(map) = here.as_object_mut() {
            map.remove(field);
        }
        return;
    }
    let Some(found) = step(here, last).cloned() else {
        return;
    };
    if let Some(items) = here.as_array_mut()
        && let Some(i) = items.iter().position(|item| *item == found)
    {
        items.remove(i);
    }
}

/// `config` merged into `live` (SSA-2).
fn merge(live: &Value, config: &Value, schema: Schema, names: &mut Vec<String>) -> Value {
    match (live, config) {
        (Value::Object(l), Value::Object(c)) if !atomic_struct(schema, names, c) => {
            let mut out = l.clone();
            for (k, cv) in c {
                names.push(k.clone());
                let merged = match l.get(k) {
                    Some(lv) => merge(lv, cv, schema, names),
                    None => cv.clone(),
                };
                names.pop();
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        (Value::Array(l), Value::Array(c)) => match list_type(schema, names) {
            ListType::Set => {
                let mut out = l.clone();
                for item in c {
                    if !out.contains(item) {
                        out.push(item.clone());
                    }
                }
                Value::Array(out)
            }
            ListType::Map(keys) if l.iter().chain(c).all(|i| item_key(i, keys).is_some()) => {
                let mut out = l.clone();
                for item in c {
                    let key = item_key(item, keys);
                    match out.iter().position(|o| item_key(o, keys) == key) {
                        Some(i) => out[i] = merge(&out[i], item, schema, names),
                        None => out.push(item.clone()),
                    }
                }
                Value::Array(out)
            }
            _ => config.clone(),
        },
        _ => config.clone(),
    }
}

/// One field another manager owns with a different value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// Its owner.
    pub manager: String,
    /// The API version its owner named it in.
    pub api_version: String,
    /// The field, as kube-apiserver prints it (`.spec.replicas`,
    /// `.spec.template.spec.containers[name="nginx"].image`).
    pub field: String,
}

/// A path as kube-apiserver prints it in a conflict.
pub fn display(path: &Path) -> String {
    let mut out = String::new();
    for element in path {
        if let Some(f) = element.strip_prefix("f:") {
            out.push('.');
            out.push_str(f);
        } else if let Some(k) = element.strip_prefix("k:") {
            let key: Map<String, Value> = serde_json::from_str(k).unwrap_or_default();
            let parts: Vec<String> = key.iter().map(|(k, v)| format!("{k}={v}")).collect();
            out.push_str(&format!("[{}]", parts.join(",")));
        } else if let Some(v) = element.strip_prefix("v:") {
            out.push_str(&format!("[={v}]"));
        } else if let Some(i) = element.strip_prefix("i:") {
            out.push_str(&format!("[{i}]"));
        }
    }
    out
}

/// kube-apiserver's message for refused conflicts, by owner: `Apply failed with 2
/// conflicts: conflicts with "kubectl":\n- .spec.replicas\n- …` (`using v1` when the owner
/// named the fields in another version than `api_version`).
pub fn conflict_message(conflicts: &[Conflict], api_version: &str) -> String {
    let mut owners: Vec<(&str, &str, Vec<&str>)> = Vec::new();
    for c in conflicts {
        match owners
            .iter_mut()
            .find(|(m, v, _)| *m == c.manager && *v == c.api_version)
        {
            Some((_, _, fields)) => fields.push(&c.field),
            None => owners.push((&c.manager, &c.api_version, vec![&c.field])),
        }
    }
    let plural = if conflicts.len() == 1 { "" } else { "s" };
    let mut out = format!("Apply failed with {} conflict{plural}: ", conflicts.len());
    let parts: Vec<String> = owners
        .iter()
        .map(|(manager, version, fields)| {
            let using = if *version == api_version {
                String::new()
            } else {
                format!(" using {version}")
            };
            if let [one] = fields.as_slice() {
                format!("conflict with {manager:?}{using}: {one}")
            } else {
                let list: Vec<String> = fields.iter().map(|f| format!("- {f}")).collect();
                format!("conflicts with {manager:?}{using}:\n{}", list.join("\n"))
            }
        })
        .collect();
    out.push_str(&parts.join("\n"));
    out
}

/// The outcome of a write: the object to store and its managers.
#[derive(Clone, Debug, PartialEq)]
pub struct Written {
    /// The object (its `metadata.managedFields` not updated: `managed` is).
    pub object: Value,
    /// The managers after the write.
    pub managed: Vec<Entry>,
}

/// Who applies, and when.
#[derive(Clone, Copy, Debug)]
pub struct Writer<'a> {
    /// The field manager.
    pub manager: &'a str,
    /// The API version of the request.
    pub api_version: &'a str,
    /// The request's time, RFC 3339.
    pub time: &'a str,
    /// How the kind's lists merge.
    pub schema: Schema,
}

/// Server-side apply of `config` by `writer` onto `live` (none: it is created), whose
/// managers are `managed` (SSA-1 to SSA-5). `Err` lists the conflicts, when not `force`.
pub fn apply(
    live: Option<&Value>,
    managed: &[Entry],
    config: &Value,
    writer: Writer<'_>,
    force: bool,
) -> Result<Written, Vec<Conflict>> {
    let empty = Value::Object(Map::new());
    let live = live.unwrap_or(&empty);
    let fields = field_set(config, writer.schema, false);
    let applied = fields.all();
    let mine = |e: &Entry| e.manager == writer.manager && e.operation == Operation::Apply;
    // SSA-3: conflicts, by owner (a keyed item is no value of its own: its fields are)
    let mut conflicts = Vec::new();
    let mut taken = FieldSet::default();
    for path in fields.leaves.paths() {
        let Some(live_value) = value_at(live, path) else {
            continue;
        };
        if value_at(config, path) == Some(live_value) {
            continue;
        }
        for entry in managed
            .iter()
            .filter(|e| e.manager != writer.manager && e.fields.contains(path))
        {
            conflicts.push(Conflict {
                manager: entry.manager.clone(),
                api_version: entry.api_version.clone(),
                field: display(path),
            });
        }
        taken.0.insert(path.clone());
    }
    if !conflicts.is_empty() && !force {
        return Err(conflicts);
    }
    // SSA-2
    let mut object = merge(live, config, writer.schema, &mut Vec::new());
    // SSA-4: what this manager applied before and applies no more, owned by nobody else
    let before = managed
        .iter()
        .find(|e| mine(e))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    let others: Vec<&Entry> = managed.iter().filter(|e| !mine(e)).collect();
    let mut dropped: Vec<&Path> = before
        .paths()
        .filter(|p| !applied.contains(p) && !others.iter().any(|e| e.fields.covers(p)))
        .collect();
    // deepest first, so an item's fields go before the item
    dropped.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for path in dropped {
        remove_at(&mut object, path);
    }
    // SSA-5, the writer's entry new (kube-apiserver's order puts it last, unless another
    // entry has the same second); with force, the others give up what was taken
    let mut out: Vec<Entry> = Vec::new();
    for entry in managed.iter().filter(|e| !mine(e)) {
        let mut entry = entry.clone();
        entry.fields = entry.fields.without(&taken);
        if !entry.fields.is_empty() {
            out.push(entry);
        }
    }
    out.push(own(writer, Operation::Apply, applied));
    Ok(Written {
        object,
        managed: kube_order(out),
    })
}

/// The entries in the order kube-apiserver stores them (its `sortEncodedManagedFields`):
/// Apply before Update, then by time to the second (older first), then by manager, then by
/// API version. A writer's new entry is therefore last unless another entry has the same
/// second, when the names decide.
fn kube_order(mut entries: Vec<Entry>) -> Vec<Entry> {
    entries.sort_by(|a, b| {
        a.operation
            .as_str()
            .cmp(b.operation.as_str())
            .then_with(|| a.time.cmp(&b.time))
            .then_with(|| a.manager.cmp(&b.manager))
            .then_with(|| a.api_version.cmp(&b.api_version))
    });
    entries
}

fn own(writer: Writer<'_>, operation: Operation, fields: FieldSet) -> Entry {
    Entry {
        manager: writer.manager.to_owned(),
        operation,
        api_version: writer.api_version.to_owned(),
        time: writer.time.to_owned(),
        fields,
    }
}

/// The managers after `writer` replaced `live` (none: it created the object) with `new` by
/// an update: create, replace, or a patch other than apply (SSA-6).
pub fn update(
    live: Option<&Value>,
    managed: &[Entry],
    new: &Value,
    writer: Writer<'_>,
) -> Vec<Entry> {
    let empty = Value::Object(Map::new());
    let live = live.unwrap_or(&empty);
    let before = field_set(live, writer.schema, true);
    let after = field_set(new, writer.schema, true);
    let (before_all, after_all) = (before.all(), after.all());
    let removed = before_all.without(&after_all);
    // what is new, and the leaves whose value changed (a node that holds fields changes
    // with them, and is owned as itself only when it is new)
    let changed = FieldSet(
        after_all
            .paths()
            .filter(|p| {
                !before_all.contains(p)
                    || (after.leaves.contains(p) && value_at(live, p) != value_at(new, p))
            })
            .cloned()
            .collect(),
    );
    let mine = |e: &Entry| e.manager == writer.manager && e.operation == Operation::Update;
    let lost = changed.union(&removed);
    if changed.is_empty() && removed.is_empty() {
        // nothing written: nobody's fields change
        return managed.to_vec();
    }
    let mut out = Vec::new();
    let mut fields = changed;
    for entry in managed {
        if mine(entry) {
            fields = entry.fields.union(&fields);
            continue;
        }
        let mut entry = entry.clone();
        entry.fields = entry.fields.without(&lost);
        if !entry.fields.is_empty() {
            out.push(entry);
        }
    }
    // the writer's entry last, as kube-apiserver keeps them
    let fields = fields.without(&removed);
    if !fields.is_empty() {
        out.push(own(writer, Operation::Update, fields));
    }
    kube_order(out)
}

/// A manager's name from a request's `User-Agent` when it names none (kube-apiserver takes
/// what comes before the first `/`: `kubectl/v1.20.2 (linux/amd64)` → `kubectl`).
pub fn manager_from_user_agent(user_agent: &str) -> String {
    let name = user_agent.split('/').next().unwrap_or_default().trim();
    let name: String = name.chars().take(128).collect();
    if name.is_empty() {
        "unknown".into()
    } else {
        name
    }
}

#[cfg(test)]
mod tests;
