//! Strategic merge patch (`application/strategic-merge-patch+json`) of Kubernetes' built-in
//! kinds, as kube-apiserver applies it: what client-side `kubectl apply`, `kubectl edit` and
//! a plain `kubectl patch` send for a Deployment, a Service, a ConfigMap…
//!
//! Like a JSON merge patch, objects merge key by key and `null` deletes; unlike it, a list
//! with a merge key (containers by `name`, a container's ports by `containerPort`, …) merges
//! item by item, and the patch may carry directives:
//!
//! - `$patch: replace` (an object or list is replaced whole) and `$patch: delete` (an object,
//!   or a list item by its key, is removed);
//! - `$setElementOrder/<list>`: the order of a merged list's items;
//! - `$deleteFromPrimitiveList/<list>`: values taken out of a list of scalars;
//! - `$retainKeys`: the keys an object keeps (the others are dropped).
//!
//! The merge keys are those of Kubernetes' API types (`patchMergeKey`, `patchStrategy:
//! merge`) for the fields of the kinds served; any other list is replaced, as for a list
//! without a patch strategy. A list of scalars with the merge strategy (`finalizers`) is a
//! union.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

/// How a list at a path merges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ListStrategy {
    /// Items are matched by this key.
    Key(&'static str),
    /// Scalars, merged as a set union.
    Union,
    /// Replaced whole.
    Replace,
}

/// The strategy of the list `field` whose parent is at `path` (field names from the root).
pub(crate) fn strategy(path: &[String], field: &str) -> ListStrategy {
    let parent = path.last().map(String::as_str).unwrap_or_default();
    let in_pod_spec = path.iter().any(|p| p == "spec");
    match field {
        "containers" | "initContainers" | "ephemeralContainers" if in_pod_spec => {
            ListStrategy::Key("name")
        }
        "env" | "resourceClaims" | "imagePullSecrets" | "volumes" | "schedulingGates" => {
            ListStrategy::Key("name")
        }
        // a ServiceAccount's secrets
        "secrets" if path.is_empty() => ListStrategy::Key("name"),
        "ports"
            if matches!(
                parent,
                "containers" | "initContainers" | "ephemeralContainers"
            ) =>
        {
            ListStrategy::Key("containerPort")
        }
        // A Service's ports (`spec.ports`)
        "ports" if parent == "spec" => ListStrategy::Key("port"),
        "volumeMounts" => ListStrategy::Key("mountPath"),
        "volumeDevices" => ListStrategy::Key("devicePath"),
        "hostAliases" => ListStrategy::Key("ip"),
        "topologySpreadConstraints" => ListStrategy::Key("topologyKey"),
        "conditions" => ListStrategy::Key("type"),
        "ownerReferences" if parent == "metadata" => ListStrategy::Key("uid"),
        "finalizers" if parent == "metadata" => ListStrategy::Union,
        _ => ListStrategy::Replace,
    }
}

/// Applies `patch` to `doc`. `Err` says what in the patch is malformed.
pub fn apply(doc: &mut Value, patch: &Value) -> Result<(), String> {
    if !patch.is_object() {
        return Err("a strategic merge patch must be an object".into());
    }
    merge_object(doc, patch, &mut Vec::new())
}

fn merge_object(doc: &mut Value, patch: &Value, path: &mut Vec<String>) -> Result<(), String> {
    let Some(patch) = patch.as_object() else {
        *doc = patch.clone();
        return Ok(());
    };
    match patch.get("$patch").and_then(Value::as_str) {
        None | Some("merge") => {}
        Some("replace") => {
            let mut replaced = patch.clone();
            replaced.remove("$patch");
            *doc = Value::Object(strip_directives(replaced));
            return Ok(());
        }
        Some("delete") => {
            *doc = Value::Null;
            return Ok(());
        }
        Some(other) => return Err(format!("{}: unknown $patch {other:?}", at(path))),
    }
    if !doc.is_object() {
        *doc = Value::Object(Map::new());
    }
    let mut orders = Vec::new();
    let mut deletions = Vec::new();
    let mut retain = None;
    for (key, value) in patch {
        if key == "$patch" {
            continue;
        }
        if key == "$retainKeys" {
            let keys = value
                .as_array()
                .ok_or_else(|| format!("{}: $retainKeys must be a list", at(path)))?;
            retain = Some(
                keys.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect::<Vec<_>>(),
            );
            continue;
        }
        if let Some(list) = key.strip_prefix("$setElementOrder/") {
            orders.push((list.to_owned(), value.clone()));
            continue;
        }
        if let Some(list) = key.strip_prefix("$deleteFromPrimitiveList/") {
            deletions.push((list.to_owned(), value.clone()));
            continue;
        }
        if key.starts_with('$') {
            return Err(format!("{}: unknown directive {key:?}", at(path)));
        }
        let Some(map) = doc.as_object_mut() else {
            return Ok(());
        };
        if value.is_null() {
            map.remove(key);
            continue;
        }
        let current = map.entry(key.clone()).or_insert(Value::Null);
        path.push(key.clone());
        let merged = match value {
            Value::Object(_) => merge_object(current, value, path),
            Value::Array(items) => {
                let s = strategy(&path[..path.len() - 1], key);
                merge_list(current, items, s, path)
            }
            scalar => {
                *current = scalar.clone();
                Ok(())
            }
        };
        path.pop();
        merged?;
        if map.get(key).is_some_and(Value::is_null) && value.get("$patch").is_some() {
            map.remove(key);
        }
    }
    let Some(map) = doc.as_object_mut() else {
        return Ok(());
    };
    for (list, values) in deletions {
        let gone: HashSet<String> = values
            .as_array()
            .map(|a| a.iter().map(Value::to_string).collect())
            .unwrap_or_default();
        if let Some(Value::Array(items)) = map.get_mut(&list) {
            items.retain(|v| !gone.contains(&v.to_string()));
        }
    }
    for (list, order) in orders {
        let s = strategy(path, &list);
        if let (Some(Value::Array(items)), Some(order)) = (map.get_mut(&list), order.as_array()) {
            reorder(items, order, s);
        }
    }
    if let Some(keep) = retain {
        if let Some(k) = patch
            .keys()
            .find(|k| !k.starts_with('$') && !keep.contains(k))
        {
            return Err(format!("{}: {k:?} is not among its $retainKeys", at(path)));
        }
        map.retain(|k, _| keep.contains(k));
    }
    Ok(())
}

fn merge_list(
    doc: &mut Value,
    items: &[Value],
    strategy: ListStrategy,
    path: &mut Vec<String>,
) -> Result<(), String> {
    // `[{"$patch": "replace"}, …]`: the rest replaces the list
    let replace = items
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"));
    if replace || strategy == ListStrategy::Replace || !doc.is_array() {
        let kept: Vec<Value> = items
            .iter()
            .filter(|i| i.get("$patch").is_none())
            .cloned()
            .map(|v| match v {
                Value::Object(m) => Value::Object(strip_directives(m)),
                other => other,
            })
            .collect();
        *doc = Value::Array(kept);
        return Ok(());
    }
    let Some(current) = doc.as_array_mut() else {
        return Ok(());
    };
    // Items are found through an index (by their key's JSON text), so that a long list and
    // a long patch cost linear time, not their product.
    match strategy {
        ListStrategy::Union => {
            let mut have: HashSet<String> = current.iter().map(Value::to_string).collect();
            for item in items {
                if have.insert(item.to_string()) {
                    current.push(item.clone());
                }
            }
        }
        ListStrategy::Key(key) => {
            let mut at_index: HashMap<String, usize> = current
                .iter()
                .enumerate()
                .filter_map(|(i, c)| Some((c.get(key)?.to_string(), i)))
                .collect();
            let mut removed = HashSet::new();
            for item in items {
                let id = item
                    .get(key)
                    .ok_or_else(|| format!("{}: an item has no merge key {key:?}", at(path)))?
                    .to_string();
                let found = at_index.get(&id).copied();
                match (item.get("$patch").and_then(Value::as_str), found) {
                    (Some("delete"), Some(i)) => {
                        removed.insert(i);
                        at_index.remove(&id);
                    }
                    (Some("delete"), None) => {}
                    (_, Some(i)) => merge_object(&mut current[i], item, path)?,
                    (_, None) => {
                        let mut fresh = Value::Object(Map::new());
                        merge_object(&mut fresh, item, path)?;
                        at_index.insert(id, current.len());
                        current.push(fresh);
                    }
                }
            }
            if !removed.is_empty() {
                let mut i = 0;
                current.retain(|_| {
                    let keep = !removed.contains(&i);
                    i += 1;
                    keep
                });
            }
        }
        ListStrategy::Replace => {}
    }
    Ok(())
}

/// Orders `items` as `order` says (items it does not name keep their place after).
fn reorder(items: &mut [Value], order: &[Value], strategy: ListStrategy) {
    let id = |v: &Value| match strategy {
        ListStrategy::Key(key) => v.get(key).map(Value::to_string).unwrap_or_default(),
        _ => v.to_string(),
    };
    let rank: HashMap<String, usize> = order
        .iter()
        .enumerate()
        .map(|(i, o)| (id(o), i))
        .rev()
        .collect();
    items.sort_by_cached_key(|i| rank.get(&id(i)).copied().unwrap_or(usize::MAX));
}

/// An object without directive keys, at any depth.
fn strip_directives(map: Map<String, Value>) -> Map<String, Value> {
    map.into_iter()
        .filter(|(k, _)| !k.starts_with('$'))
        .map(|(k, v)| {
            let v = match v {
                Value::Object(m) => Value::Object(strip_directives(m)),
                other => other,
            };
            (k, v)
        })
        .collect()
}

fn at(path: &[String]) -> String {
    if path.is_empty() {
        "the patch".into()
    } else {
        path.join(".")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn patched(doc: Value, patch: Value) -> Value {
        let mut doc = doc;
        apply(&mut doc, &patch).unwrap();
        doc
    }

    fn deployment() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web", "tier": "front"}, "finalizers": ["a"]},
            "spec": {"replicas": 2, "template": {"spec": {
                "containers": [
                    {"name": "web", "image": "nginx:1", "ports": [{"containerPort": 80}],
                     "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
                    {"name": "sidecar", "image": "envoy"}],
                "tolerations": [{"key": "x", "operator": "Exists"}]}}}})
    }

    #[test]
    fn containers_merge_by_name_and_their_lists_by_their_keys() {
        let got = patched(
            deployment(),
            json!({"spec": {"template": {"spec": {"containers": [
                {"name": "web", "image": "nginx:2", "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}],
                 "ports": [{"containerPort": 443}]}]}}}}),
        );
        let c = &got["spec"]["template"]["spec"]["containers"];
        assert_eq!(c.as_array().unwrap().len(), 2, "the sidecar stays: {c}");
        assert_eq!(c[0]["image"], "nginx:2");
        assert_eq!(
            c[0]["env"],
            json!([{"name": "A", "value": "1"}, {"name": "B", "value": "3"}, {"name": "C", "value": "4"}])
        );
        assert_eq!(
            c[0]["ports"],
            json!([{"containerPort": 80}, {"containerPort": 443}])
        );
        assert_eq!(got["spec"]["replicas"], 2);
    }

    #[test]
    fn lists_without_a_strategy_are_replaced_and_null_deletes() {
        let got = patched(
            deployment(),
            json!({"metadata": {"labels": {"tier": null}},
                   "spec": {"replicas": 5, "template": {"spec": {"tolerations": [{"key": "y", "operator": "Exists"}]}}}}),
        );
        assert_eq!(got["metadata"]["labels"], json!({"app": "web"}));
        assert_eq!(got["spec"]["replicas"], 5);
        assert_eq!(
            got["spec"]["template"]["spec"]["tolerations"],
            json!([{"key": "y", "operator": "Exists"}])
        );
    }

    #[test]
    fn directives_delete_replace_order_and_primitive_deletions() {
        // kubectl apply's patch when a container and an env var are dropped from the file
        let got = patched(
            deployment(),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]},
                   "spec": {"template": {"spec": {
                "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "web"}],
                "containers": [{"name": "web", "env": [{"name": "A", "$patch": "delete"}]},
                               {"name": "gone", "$patch": "delete"}]}}}}),
        );
        let c = &got["spec"]["template"]["spec"]["containers"];
        assert_eq!(
            c[0]["name"], "sidecar",
            "ordered as $setElementOrder says: {c}"
        );
        assert_eq!(c[1]["env"], json!([{"name": "B", "value": "2"}]));
        assert_eq!(got["metadata"]["finalizers"], json!([]));
        let replaced = patched(
            deployment(),
            json!({"spec": {"template": {"spec": {"$patch": "replace", "containers": [{"name": "only"}]}}}}),
        );
        assert_eq!(
            replaced["spec"]["template"]["spec"],
            json!({"containers": [{"name": "only"}]})
        );
        let finalizers = patched(
            deployment(),
            json!({"metadata": {"finalizers": ["b", "a"]}}),
        );
        assert_eq!(
            finalizers["metadata"]["finalizers"],
            json!(["a", "b"]),
            "a union"
        );
        let retained = patched(
            json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}}),
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
        );
        assert_eq!(retained["spec"]["strategy"], json!({"type": "Recreate"}));
    }

    #[test]
    fn a_long_list_merges_item_by_item() {
        let n = 50_000;
        let doc = json!({"spec": {"template": {"spec": {"containers":
            (0..n).map(|i| json!({"name": format!("c{i}")})).collect::<Vec<_>>()}}}});
        let patch = json!({"spec": {"template": {"spec": {"containers":
            (0..n).map(|i| json!({"name": format!("c{}", n - 1 - i), "image": "x"})).collect::<Vec<_>>()}}}});
        let got = patched(doc, patch);
        let c = got["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap();
        assert_eq!(c.len(), n);
        assert!(c.iter().all(|c| c["image"] == "x"));
    }

    #[test]
    fn malformed_patches_are_refused() {
        for (patch, says) in [
            (
                json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate", "rollingUpdate": {}}}}),
                "not among its $retainKeys",
            ),
            (json!([1]), "must be an object"),
            (json!({"spec": {"$patch": "sideways"}}), "unknown $patch"),
            (json!({"spec": {"$bogus": 1}}), "unknown directive"),
            (
                json!({"spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}}),
                "no merge key \"name\"",
            ),
        ] {
            let mut doc = deployment();
            let e = apply(&mut doc, &patch).unwrap_err();
            assert!(e.contains(says), "{patch}: {e}");
        }
    }
}
