//! [`ObjectKey`]: the store key of an object, with its parts read from the key layout of
//! [`crate::typed`] (`clusters/<name>`, `bindings/<ns>/<name>`, `works/<cluster>/<ns>/<name>`,
//! `workloads/<ns>/<kind>[.<group>]/<name>`, …; `<ns>` is empty for cluster-scoped objects). Controllers queue these instead of plain strings, so
//! that "which namespace, which name" is answered in one place.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;

/// The key of a stored object, e.g. `bindings/default/nginx`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ObjectKey(String);

/// How many segments after the kind a key of that kind has, and which is the namespace.
fn layout(kind: &str) -> (usize, Option<usize>) {
    match kind {
        // <cluster>/<ns>/<name>
        "works" => (3, Some(1)),
        // <ns>/<kind>/<name>
        "workloads" => (3, Some(0)),
        "clusters" | "clusterpolicies" | "clustertaintpolicies" | "leases" => (1, None),
        // <ns>/<name>: bindings, policies, events
        _ => (2, Some(0)),
    }
}

// === impl ObjectKey ===

impl ObjectKey {
    /// The key `key` (no check: any string is a key; its parts are read on demand).
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    /// The key of a namespaced object: `<prefix><namespace>/<name>` (`prefix` ends with `/`).
    pub fn namespaced(prefix: &str, namespace: &str, name: &str) -> Self {
        Self(format!("{prefix}{namespace}/{name}"))
    }

    /// The whole key.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The kind's prefix segment (`bindings`).
    pub fn kind(&self) -> &str {
        self.0.split_once('/').map_or("", |(k, _)| k)
    }

    fn segments(&self) -> Vec<&str> {
        match self.0.split_once('/') {
            Some((_, rest)) => rest.split('/').collect(),
            None => Vec::new(),
        }
    }

    /// The namespace (empty for a cluster-scoped kind or a malformed key).
    pub fn namespace(&self) -> &str {
        let (len, ns) = layout(self.kind());
        let segments = self.segments();
        match ns {
            Some(i) if segments.len() == len => segments[i],
            _ => "",
        }
    }

    /// The name: the last segment.
    pub fn name(&self) -> &str {
        self.0.rsplit_once('/').map_or(self.0.as_str(), |(_, n)| n)
    }

    /// `(namespace, name)`.
    pub fn namespace_name(&self) -> (&str, &str) {
        (self.namespace(), self.name())
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl Deref for ObjectKey {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for ObjectKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for ObjectKey {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl From<String> for ObjectKey {
    fn from(key: String) -> Self {
        Self(key)
    }
}

impl From<&str> for ObjectKey {
    fn from(key: &str) -> Self {
        Self(key.to_owned())
    }
}

impl From<ObjectKey> for String {
    fn from(key: ObjectKey) -> Self {
        key.0
    }
}

impl PartialEq<str> for ObjectKey {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<String> for ObjectKey {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

impl PartialEq<&str> for ObjectKey {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_layout_names_its_namespace_and_name() {
        for (key, kind, ns, name) in [
            ("bindings/default/nginx", "bindings", "default", "nginx"),
            ("policies/team-a/p", "policies", "team-a", "p"),
            ("events/default/e.1", "events", "default", "e.1"),
            ("clusters/member1", "clusters", "", "member1"),
            ("clustertaintpolicies/t", "clustertaintpolicies", "", "t"),
            (
                "works/member1/default/nginx-x",
                "works",
                "default",
                "nginx-x",
            ),
            (
                "workloads/default/Deployment.apps/nginx",
                "workloads",
                "default",
                "nginx",
            ),
            // cluster-scoped templates, their ClusterResourceBindings and Works
            ("workloads//Namespace/team-a", "workloads", "", "team-a"),
            (
                "bindings//team-a-namespace",
                "bindings",
                "",
                "team-a-namespace",
            ),
            (
                "works/m1//team-a-namespace",
                "works",
                "",
                "team-a-namespace",
            ),
            // malformed: no namespace can be read, the name is the last segment
            ("bindings/nginx", "bindings", "", "nginx"),
            ("nginx", "", "", "nginx"),
        ] {
            let k = ObjectKey::new(key);
            assert_eq!(
                (k.kind(), k.namespace(), k.name()),
                (kind, ns, name),
                "{key}"
            );
            assert_eq!(k.as_str(), key);
        }
        assert_eq!(
            ObjectKey::namespaced("bindings/", "default", "nginx"),
            "bindings/default/nginx"
        );
    }
}
