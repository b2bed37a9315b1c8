//! The kinds that CustomResourceDefinitions define, served as resource templates.
//!
//! As on karmada-apiserver, applying a CRD to the control plane makes its kind servable: the
//! gateway reads the CRDs the api stores (they are resource templates themselves, propagated
//! like any other) and serves each *served* version of each one's kind, with the CRD's plural
//! and short names, under its group. An object of such a kind is a template of the api like a
//! Deployment: the same admission, the same detector, the same RBAC.
//!
//! What is left out, on purpose (docs/kubernetes-api.md):
//! - a CRD of `scope: Cluster`: Flotilla takes every custom kind to be namespaced (CR-2 in
//!   docs/rules.md), so such objects cannot be stored yet and their kind is not served;
//! - a CRD of a `*.karmada.io` group (CR-5 refuses its objects) or one that names a kind the
//!   gateway serves already (the built-in entry wins);
//! - schemas: a custom kind's OpenAPI document has an open object schema.
//!
//! Its Tables have NAME and the version's `additionalPrinterColumns` (or `Age`), as
//! kube-apiserver prints a custom kind.
//!
//! The table of built-in kinds is static and requests carry `&'static KindInfo`; the
//! custom ones are interned (leaked once per distinct kind and version, and reused), so the
//! memory kept is bounded by the distinct CRDs seen since start-up, not by the requests.

use std::sync::{Mutex, OnceLock};

use axum::http::HeaderMap;
use flotilla_proto::v1;
use flotilla_proto::v1::api_client::ApiClient;
use serde_json::Value;
use tonic::transport::Channel;

use super::{KINDS, Kind, KindInfo, request};
use crate::table::PrinterColumn;

/// The api's name of the CRD kind (RM-1).
const CRD_KIND: &str = "CustomResourceDefinition.apiextensions.k8s.io";

/// The most CRDs read for one request (pages of 500).
const MAX_PAGES: usize = 20;

/// One served version of one CRD's kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct CustomKind {
    pub group_version: String,
    pub kind: String,
    pub plural: String,
    pub short_names: Vec<String>,
    /// The version's printer columns (after NAME), kube-apiserver's `Age` when it declares
    /// none.
    pub columns: Vec<PrinterColumn>,
}

/// A version's `additionalPrinterColumns`; a column without a name, a type or a path is
/// left out (kube-apiserver refuses such a CRD; the api stores templates unvalidated).
fn printer_columns(version: &Value) -> Vec<PrinterColumn> {
    let declared: Vec<PrinterColumn> = version
        .get("additionalPrinterColumns")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| {
            let text = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or_default();
            let (name, type_, path) = (text("name"), text("type"), text("jsonPath"));
            if name.is_empty() || type_.is_empty() || path.is_empty() {
                return None;
            }
            let description = match text("description") {
                "" => format!("Custom resource definition column (in JSONPath format): {path}"),
                d => d.to_owned(),
            };
            Some(PrinterColumn {
                name: name.to_owned(),
                type_: type_.to_owned(),
                format: text("format").to_owned(),
                description,
                priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                json_path: path.to_owned(),
            })
        })
        .collect();
    if declared.is_empty() {
        vec![PrinterColumn::default_age()]
    } else {
        declared
    }
}

/// Why a CRD's kind is not served, or its kinds (one per served version).
pub(super) fn from_crd(crd: &Value) -> Result<Vec<CustomKind>, String> {
    let spec = crd.get("spec").ok_or("it has no spec")?;
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_owned();
    let group = text(spec.get("group"));
    let names = spec.get("names");
    let kind = text(names.and_then(|n| n.get("kind")));
    let plural = text(names.and_then(|n| n.get("plural")));
    if group.is_empty() || kind.is_empty() || plural.is_empty() {
        return Err("it lacks spec.group, spec.names.kind or spec.names.plural".into());
    }
    if group == "karmada.io" || group.ends_with(".karmada.io") {
        return Err(format!(
            "{group} is Karmada's own API, whose objects are not templates (CR-5)"
        ));
    }
    let scope = spec
        .get("scope")
        .and_then(Value::as_str)
        .unwrap_or("Namespaced");
    if scope != "Namespaced" {
        return Err(format!(
            "its scope is {scope}: Flotilla stores custom kinds in namespaces only (CR-2)"
        ));
    }
    let short_names = names
        .and_then(|n| n.get("shortNames"))
        .and_then(Value::as_array)
        .map(|s| {
            s.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let kinds: Vec<CustomKind> = spec
        .get("versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|v| v.get("served").and_then(Value::as_bool).unwrap_or(true))
        .filter_map(|v| Some((v.get("name").and_then(Value::as_str)?, v)))
        .filter(|(name, _)| !name.is_empty())
        .map(|(name, version)| CustomKind {
            group_version: format!("{group}/{name}"),
            kind: kind.clone(),
            plural: plural.clone(),
            short_names: Vec::clone(&short_names),
            columns: printer_columns(version),
        })
        .collect();
    if kinds.is_empty() {
        return Err("it serves no version".into());
    }
    if let Some(taken) = kinds.iter().find(|c| {
        KINDS
            .iter()
            .any(|k| k.group_version == c.group_version && k.plural == c.plural)
    }) {
        return Err(format!(
            "{}/{} is a kind the gateway serves already",
            taken.group_version, taken.plural
        ));
    }
    Ok(kinds)
}

/// Every custom kind seen, with its interned `KindInfo`.
type Seen = Mutex<Vec<(CustomKind, &'static KindInfo)>>;

fn seen() -> std::sync::MutexGuard<'static, Vec<(CustomKind, &'static KindInfo)>> {
    static SEEN: OnceLock<Seen> = OnceLock::new();
    SEEN.get_or_init(|| Mutex::new(Vec::new()))
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The printer columns of a custom kind's `info`; `None` for a built-in kind.
pub(super) fn columns(info: &'static KindInfo) -> Option<Vec<PrinterColumn>> {
    seen()
        .iter()
        .find(|(_, i)| std::ptr::eq(*i, info))
        .map(|(c, _)| c.columns.clone())
}

/// The one `KindInfo` of `custom`, made on first sight (a CRD that changes its columns
/// makes another).
fn intern(custom: &CustomKind) -> &'static KindInfo {
    let mut seen = seen();
    if let Some((_, info)) = seen.iter().find(|(c, _)| c == custom) {
        return info;
    }
    let leak = |s: &str| -> &'static str { Box::leak(s.to_owned().into_boxed_str()) };
    let short_names: Vec<&'static str> = custom.short_names.iter().map(|s| leak(s)).collect();
    let info: &'static KindInfo = Box::leak(Box::new(KindInfo {
        kind: Kind::Template,
        name: leak(&custom.kind),
        group_version: leak(&custom.group_version),
        plural: leak(&custom.plural),
        namespaced: true,
        short_names: Box::leak(short_names.into_boxed_slice()),
        message: "flotilla.v1.Workload",
    }));
    seen.push((custom.clone(), info));
    info
}

/// The custom kinds the CRDs stored in the api define, as far as the caller may list CRDs
/// (a caller who may not sees none: the api's RBAC decides, as for every template).
pub(super) async fn kinds(
    mut api: ApiClient<Channel>,
    headers: &HeaderMap,
) -> Vec<&'static KindInfo> {
    let mut out: Vec<&'static KindInfo> = Vec::new();
    let mut page_token = String::new();
    for _ in 0..MAX_PAGES {
        let page = match api
            .list_workloads(request(
                v1::ListWorkloadsRequest {
                    namespace: String::new(),
                    kind: CRD_KIND.into(),
                    label_selector: String::new(),
                    page_size: 500,
                    page_token: std::mem::take(&mut page_token),
                },
                headers,
            ))
            .await
        {
            Ok(page) => page.into_inner(),
            Err(status) => {
                tracing::debug!(code = ?status.code(), "custom kinds not listed: the CRDs could not be read");
                return out;
            }
        };
        for crd in &page.items {
            let name = crd.metadata.as_ref().map_or("", |m| m.name.as_str());
            let manifest: Value = match serde_json::from_str(&crd.manifest) {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(crd = name, error = %e, "a stored CRD is not JSON; its kind is not served");
                    continue;
                }
            };
            match from_crd(&manifest) {
                Ok(kinds) => {
                    for k in &kinds {
                        let info = intern(k);
                        if !out.iter().any(|o| std::ptr::eq(*o, info)) {
                            out.push(info);
                        }
                    }
                }
                Err(why) => tracing::debug!(crd = name, why, "a CRD's kind is not served"),
            }
        }
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn crd(scope: &str, group: &str) -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("flinkdeployments.{group}")},
            "spec": {
                "group": group,
                "scope": scope,
                "names": {"kind": "FlinkDeployment", "plural": "flinkdeployments",
                          "singular": "flinkdeployment", "shortNames": ["flinkdep"]},
                "versions": [
                    {"name": "v1beta1", "served": true, "storage": true},
                    {"name": "v1alpha1", "served": false, "storage": false},
                ],
            },
        })
    }

    #[test]
    fn a_namespaced_crd_serves_each_served_version_with_its_names() {
        let kinds = from_crd(&crd("Namespaced", "flink.apache.org")).unwrap();
        assert_eq!(
            kinds,
            [CustomKind {
                group_version: "flink.apache.org/v1beta1".into(),
                kind: "FlinkDeployment".into(),
                plural: "flinkdeployments".into(),
                short_names: vec!["flinkdep".into()],
                columns: vec![PrinterColumn::default_age()],
            }]
        );
        assert_eq!(
            columns(intern(&kinds[0])),
            Some(vec![PrinterColumn::default_age()])
        );
        assert_eq!(
            columns(&KINDS[0]),
            None,
            "a built-in kind has its own printer"
        );
        let info = intern(&kinds[0]);
        assert!(std::ptr::eq(info, intern(&kinds[0])), "interned once");
        assert_eq!(info.short_names, ["flinkdep"]);
        assert!(info.namespaced && info.kind == Kind::Template);
    }

    #[test]
    fn crds_whose_kind_cannot_be_a_template_are_not_served() {
        let cluster = from_crd(&crd("Cluster", "flink.apache.org")).unwrap_err();
        assert!(cluster.contains("Cluster"), "{cluster}");
        let karmada = from_crd(&crd("Namespaced", "policy.karmada.io")).unwrap_err();
        assert!(karmada.contains("CR-5"), "{karmada}");
        let mut none = crd("Namespaced", "flink.apache.org");
        none["spec"]["versions"][0]["served"] = json!(false);
        assert!(from_crd(&none).unwrap_err().contains("no version"));
        let mut taken = crd("Namespaced", "apps");
        taken["spec"]["names"]["plural"] = json!("deployments");
        taken["spec"]["versions"][0]["name"] = json!("v1");
        assert!(from_crd(&taken).unwrap_err().contains("already"));
        assert!(from_crd(&json!({"spec": {"group": "x.io"}})).is_err());
    }
}
