//! The [`Resource`] trait: what the store's typed layer needs to know about a stored wire
//! object (its kind and its metadata).

use crate::v1;

/// A stored, top-level wire object with [`v1::ObjectMeta`].
///
/// The store's typed layer is generic over this trait: it encodes objects with
/// [`prost::Message`], builds keys from [`Resource::KIND`], [`Resource::NAMESPACED`] and
/// the metadata, and, after a write, sets `metadata.resourceVersion` (the etcd
/// mod_revision) and `metadata.generation` through [`Resource::meta_mut`].
pub trait Resource: prost::Message + Default + Clone {
    /// The kind, as in Karmada (`Cluster`, `ResourceBinding`, ...).
    const KIND: &'static str;

    /// Whether objects of this kind live in a namespace (`metadata.namespace` non-empty).
    const NAMESPACED: bool;

    /// The metadata, if the message carries any.
    fn meta(&self) -> Option<&v1::ObjectMeta>;

    /// The metadata, inserting an empty one first if the message has none.
    fn meta_mut(&mut self) -> &mut v1::ObjectMeta;

    /// `metadata.name`, or `""` without metadata.
    fn name(&self) -> &str {
        self.meta().map_or("", |m| m.name.as_str())
    }

    /// `metadata.namespace`, or `""` without metadata.
    fn namespace(&self) -> &str {
        self.meta().map_or("", |m| m.namespace.as_str())
    }

    /// `metadata.resourceVersion`, or 0 (never written) without metadata.
    fn resource_version(&self) -> i64 {
        self.meta().map_or(0, |m| m.resource_version)
    }

    /// `metadata.generation`, or 0 without metadata.
    fn generation(&self) -> i64 {
        self.meta().map_or(0, |m| m.generation)
    }
}

/// Implements [`Resource`] for messages whose metadata is the `metadata` field.
macro_rules! impl_resource {
    ($($ty:ident => $kind:literal, namespaced: $ns:literal;)*) => {$(
        impl Resource for v1::$ty {
            const KIND: &'static str = $kind;
            const NAMESPACED: bool = $ns;

            fn meta(&self) -> Option<&v1::ObjectMeta> {
                self.metadata.as_ref()
            }

            fn meta_mut(&mut self) -> &mut v1::ObjectMeta {
                self.metadata.get_or_insert_with(Default::default)
            }
        }
    )*};
}

impl_resource! {
    Cluster => "Cluster", namespaced: false;
    PropagationPolicy => "PropagationPolicy", namespaced: true;
    ClusterPropagationPolicy => "ClusterPropagationPolicy", namespaced: false;
    ClusterTaintPolicy => "ClusterTaintPolicy", namespaced: false;
    OverridePolicy => "OverridePolicy", namespaced: true;
    ClusterOverridePolicy => "ClusterOverridePolicy", namespaced: false;
    Secret => "Secret", namespaced: true;
    Workload => "Workload", namespaced: true;
    ResourceBinding => "ResourceBinding", namespaced: true;
    Work => "Work", namespaced: true;
    Event => "Event", namespaced: true;
    StatusCollection => "StatusCollection", namespaced: false;
}

impl crate::v1::TargetCluster {
    /// Targets from (name, replicas) pairs, in their order: the inverse of
    /// `ResourceBinding::target_pairs`.
    pub fn from_pairs(pairs: &[(&str, i32)]) -> Vec<Self> {
        pairs
            .iter()
            .map(|&(name, replicas)| Self {
                name: name.to_owned(),
                replicas,
            })
            .collect()
    }
}

impl crate::v1::GracefulEvictionTask {
    /// Bare tasks (no reason, producer or timestamps), one evicting from each cluster.
    pub fn from_clusters(clusters: &[&str]) -> Vec<Self> {
        clusters
            .iter()
            .map(|&cluster| Self {
                from_cluster: cluster.to_owned(),
                ..Self::default()
            })
            .collect()
    }
}

impl crate::v1::ResourceBinding {
    /// `spec.clusters` as (name, replicas), sorted by name: a binding's placement at a glance.
    pub fn target_pairs(&self) -> Vec<(String, i32)> {
        let mut targets: Vec<(String, i32)> = self
            .spec
            .as_ref()
            .map(|s| {
                s.clusters
                    .iter()
                    .map(|c| (c.name.clone(), c.replicas))
                    .collect()
            })
            .unwrap_or_default();
        targets.sort();
        targets
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip_meta<R: Resource>() {
        let mut obj = R::default();
        assert!(
            obj.meta().is_none(),
            "{}: a default object has no metadata",
            R::KIND
        );
        assert_eq!(obj.resource_version(), 0);
        obj.meta_mut().name = "n".into();
        obj.meta_mut().namespace = "ns".into();
        obj.meta_mut().resource_version = 42;
        obj.meta_mut().generation = 3;
        assert_eq!(obj.name(), "n");
        assert_eq!(obj.namespace(), "ns");
        assert_eq!(obj.resource_version(), 42);
        assert_eq!(obj.generation(), 3);
        // The metadata survives encoding, which is what the store relies on.
        let decoded = R::decode(obj.encode_to_vec().as_slice()).unwrap();
        assert_eq!(decoded.resource_version(), 42, "{}", R::KIND);
        assert_eq!(decoded.name(), "n", "{}", R::KIND);
    }

    #[test]
    fn every_resource_exposes_its_metadata() {
        roundtrip_meta::<v1::Cluster>();
        roundtrip_meta::<v1::PropagationPolicy>();
        roundtrip_meta::<v1::ClusterPropagationPolicy>();
        roundtrip_meta::<v1::ClusterTaintPolicy>();
        roundtrip_meta::<v1::OverridePolicy>();
        roundtrip_meta::<v1::ClusterOverridePolicy>();
        roundtrip_meta::<v1::Workload>();
        roundtrip_meta::<v1::ResourceBinding>();
        roundtrip_meta::<v1::Work>();
        roundtrip_meta::<v1::Event>();
    }

    #[test]
    fn kinds_and_scopes_match_karmada() {
        fn scope<R: Resource>() -> (&'static str, bool) {
            (R::KIND, R::NAMESPACED)
        }
        let got = [
            scope::<v1::Cluster>(),
            scope::<v1::PropagationPolicy>(),
            scope::<v1::ClusterPropagationPolicy>(),
            scope::<v1::ClusterTaintPolicy>(),
            scope::<v1::OverridePolicy>(),
            scope::<v1::ClusterOverridePolicy>(),
            scope::<v1::Workload>(),
            scope::<v1::ResourceBinding>(),
            scope::<v1::Work>(),
            scope::<v1::Event>(),
        ];
        let want = [
            ("Cluster", false),
            ("PropagationPolicy", true),
            ("ClusterPropagationPolicy", false),
            ("ClusterTaintPolicy", false),
            ("OverridePolicy", true),
            ("ClusterOverridePolicy", false),
            ("Workload", true),
            ("ResourceBinding", true),
            ("Work", true),
            ("Event", true),
        ];
        assert_eq!(got, want);
    }
}
