//! Table responses (`meta.k8s.io` Table): what `kubectl get` prints, column by column, when
//! it asks for `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`.
//!
//! ```text
//!   objects (Kubernetes form) ──columns(kind)──► {columnDefinitions, rows[{cells, object}]}
//! ```
//!
//! Karmada's kinds get the printer columns of Karmada's CRDs; the built-in kinds get
//! kube-apiserver 1.20's printers for the columns kubectl users read (Deployment READY,
//! Job COMPLETIONS, Service PORT(S), ...); every other kind gets NAME and AGE, as
//! kube-apiserver's default table convertor gives a kind without printers. Ages and
//! durations are written as kube-apiserver writes them (`5m`, `2d3h`,
//! [`human_duration`]). docs/kubernetes-api.md, "Tables".

use serde_json::{Map, Value, json};

/// What a Table response carries with each row (`includeObject`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Include {
    /// No object.
    None,
    /// The object's metadata, as a `PartialObjectMetadata` (the default).
    Metadata,
    /// The whole object (kubectl asks for it to sort with `--sort-by`).
    Object,
}

/// A request for a Table: the `meta.k8s.io` version asked for and what rows carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wanted {
    /// `v1` or `v1beta1`.
    pub version: &'static str,
    /// `includeObject`.
    pub include: Include,
}

/// Whether `accept` asks for a Table (its first Table media type the server can give), and
/// with `include_object` (the `includeObject` parameter) what each row carries. An unknown
/// `includeObject` is an error, as on kube-apiserver.
pub fn wanted(accept: &str, include_object: Option<&str>) -> Result<Option<Wanted>, String> {
    let version = accept.split(',').find_map(|media| {
        let mut parts = media.split(';').map(str::trim);
        let base = parts.next()?;
        if base != "application/json" && base != "*/*" {
            return None;
        }
        let (mut table, mut group, mut version) = (false, "", "");
        for p in parts {
            match p.split_once('=') {
                Some(("as", "Table")) => table = true,
                Some(("g", g)) => group = g,
                Some(("v", v)) => version = v,
                _ => {}
            }
        }
        (table && group == "meta.k8s.io")
            .then_some(version)
            .and_then(|v| match v {
                "v1" => Some("v1"),
                "v1beta1" => Some("v1beta1"),
                _ => None,
            })
    });
    let Some(version) = version else {
        return Ok(None);
    };
    let include = match include_object {
        None | Some("" | "Metadata") => Include::Metadata,
        Some("None") => Include::None,
        Some("Object") => Include::Object,
        Some(other) => {
            return Err(format!(
                "includeObject: Unsupported value: {other:?}: supported values: \"Metadata\", \"None\", \"Object\""
            ));
        }
    };
    Ok(Some(Wanted { version, include }))
}

/// A cell's value, from the object and the time now (seconds since the epoch).
type Cell = fn(&Value, i64) -> Value;

struct Column {
    name: &'static str,
    type_: &'static str,
    format: &'static str,
    description: &'static str,
    /// 0: always shown; 1: with `-o wide`.
    priority: u8,
    cell: Cell,
}

const fn col(name: &'static str, type_: &'static str, priority: u8, cell: Cell) -> Column {
    Column {
        name,
        type_,
        format: "",
        description: "",
        priority,
        cell,
    }
}

const NAME: Column = Column {
    name: "Name",
    type_: "string",
    format: "name",
    description: "Name must be unique within a namespace. It is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: http://kubernetes.io/docs/user-guide/identifiers#names",
    priority: 0,
    cell: |o, _| json!(text(o, "/metadata/name")),
};

const AGE: Column = Column {
    name: "Age",
    type_: "string",
    format: "",
    description: "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
    priority: 0,
    cell: |o, now| json!(age(o, "/metadata/creationTimestamp", now)),
};

/// A CRD's `date` column: the age of the time at the path (kube-apiserver writes it so).
const CRD_AGE: Column = Column {
    name: "AGE",
    type_: "date",
    format: "",
    description: "",
    priority: 0,
    cell: |o, now| json!(age(o, "/metadata/creationTimestamp", now)),
};

fn or_none(o: &Value, pointer: &str) -> Value {
    json!(match text(o, pointer) {
        "" => "<none>",
        t => t,
    })
}

fn text<'a>(o: &'a Value, pointer: &str) -> &'a str {
    o.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn int(o: &Value, pointer: &str) -> i64 {
    o.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

/// A JSON value as a CRD printer column writes it: a string as it is, anything else as
/// JSON, nothing when absent.
fn raw(o: &Value, pointer: &str) -> Value {
    match o.pointer(pointer) {
        None | Some(Value::Null) => Value::Null,
        Some(v) => v.clone(),
    }
}

/// The status of the condition of `type_` (`.status.conditions[?(@.type=="…")].status`).
fn condition(o: &Value, type_: &str) -> Value {
    o.pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
        })
        .and_then(|c| c.get("status"))
        .cloned()
        .unwrap_or(Value::Null)
}

/// Seconds since the epoch of an RFC 3339 time.
fn seconds(rfc3339: &str) -> Option<i64> {
    rfc3339
        .parse::<prost_types::Timestamp>()
        .ok()
        .map(|t| t.seconds)
}

fn age(o: &Value, pointer: &str, now: i64) -> String {
    match seconds(text(o, pointer)) {
        Some(t) => human_duration(now - t),
        None => "<unknown>".into(),
    }
}

/// A duration as kube-apiserver writes ages (`apimachinery`'s `HumanDuration`): seconds up
/// to two minutes, then minutes (with seconds under ten), hours (with minutes under eight),
/// days (with hours under eight days), years (with days under eight years).
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    if secs < 0 {
        return "0s".into();
    }
    if secs < 120 {
        return format!("{secs}s");
    }
    let minutes = secs / 60;
    if minutes < 10 {
        return match secs % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = secs / 3600;
    if hours < 8 {
        return match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        return match hours % 24 {
            0 => format!("{}d", hours / 24),
            h => format!("{}d{h}h", hours / 24),
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        return match days {
            0 => format!("{}y", hours / 24 / 365),
            d => format!("{}y{d}d", hours / 24 / 365),
        };
    }
    format!("{}y", hours / 24 / 365)
}

fn containers(o: &Value, field: &str) -> String {
    o.pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .map(|c| c.get(field).and_then(Value::as_str).unwrap_or(""))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// A label selector as kubectl writes it (`app=nginx,tier in (a,b)`), `<none>` when empty.
fn selector(o: &Value, pointer: &str) -> String {
    let Some(sel) = o.pointer(pointer) else {
        return "<none>".into();
    };
    let mut parts: Vec<String> = Vec::new();
    if let Some(labels) = sel.get("matchLabels").and_then(Value::as_object) {
        parts.extend(
            labels
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))),
        );
    }
    for e in sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = text(e, "/key");
        let values: Vec<&str> = e
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        parts.push(match text(e, "/operator") {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_owned(),
            "DoesNotExist" => format!("!{key}"),
            other => format!("{key} {other}"),
        });
    }
    if parts.is_empty() {
        "<none>".into()
    } else {
        parts.sort();
        parts.join(",")
    }
}

fn map_selector(o: &Value, pointer: &str) -> String {
    match o.pointer(pointer).and_then(Value::as_object) {
        Some(m) if !m.is_empty() => {
            let mut parts: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect();
            parts.sort();
            parts.join(",")
        }
        _ => "<none>".into(),
    }
}

fn job_completions(o: &Value, _: i64) -> Value {
    let succeeded = int(o, "/status/succeeded");
    let text = match o.pointer("/spec/completions").and_then(Value::as_i64) {
        Some(c) => format!("{succeeded}/{c}"),
        None => match int(o, "/spec/parallelism") {
            p if p > 1 => format!("{succeeded}/1 of {p}"),
            _ => format!("{succeeded}/1"),
        },
    };
    json!(text)
}

fn job_duration(o: &Value, now: i64) -> Value {
    let Some(start) = seconds(text(o, "/status/startTime")) else {
        return json!("");
    };
    let end = seconds(text(o, "/status/completionTime")).unwrap_or(now);
    json!(human_duration(end - start))
}

fn service_ports(o: &Value, _: i64) -> Value {
    let ports: Vec<String> = o
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|p| {
            let protocol = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
            let port = int(p, "/port");
            match p.get("nodePort").and_then(Value::as_i64) {
                Some(node) if node != 0 => format!("{port}:{node}/{protocol}"),
                _ => format!("{port}/{protocol}"),
            }
        })
        .collect();
    json!(if ports.is_empty() {
        "<none>".to_owned()
    } else {
        ports.join(",")
    })
}

fn external_ips(o: &Value, _: i64) -> Value {
    let mut ips: Vec<String> = o
        .pointer("/status/loadBalancer/ingress")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|i| {
            i.get("ip")
                .or_else(|| i.get("hostname"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect();
    ips.extend(
        o.pointer("/spec/externalIPs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned),
    );
    let kind = text(o, "/spec/type");
    json!(match (kind, ips.is_empty()) {
        (_, false) => ips.join(","),
        ("LoadBalancer", true) => "<pending>".to_owned(),
        ("ExternalName", true) => text(o, "/spec/externalName").to_owned(),
        _ => "<none>".to_owned(),
    })
}

fn data_count(o: &Value, _: i64) -> Value {
    let count = |f: &str| o.get(f).and_then(Value::as_object).map_or(0, Map::len);
    json!(count("data") + count("binaryData"))
}

/// The wide columns of a kind with a pod template, and its selector.
const CONTAINERS: Column = col("Containers", "string", 1, |o, _| {
    json!(containers(o, "name"))
});
const IMAGES: Column = col("Images", "string", 1, |o, _| json!(containers(o, "image")));
const SELECTOR: Column = col("Selector", "string", 1, |o, _| {
    json!(selector(o, "/spec/selector"))
});
/// Ready of desired replicas (`spec.replicas`, 1 when unset).
const READY_OF_REPLICAS: Column = col("Ready", "string", 0, |o, _| {
    json!(format!(
        "{}/{}",
        int(o, "/status/readyReplicas"),
        o.pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(1)
    ))
});

/// The columns of `kind` in `group` (Karmada's CRDs' and kube-apiserver 1.20's printers).
/// A Pod's READY: its containers ready of its containers (kubectl's `1/2`).
fn pod_ready(o: &Value, _: i64) -> Value {
    let total = o
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let ready = statuses(o, "/status/containerStatuses")
        .filter(|c| c.get("ready").and_then(Value::as_bool) == Some(true))
        .count();
    json!(format!("{ready}/{total}"))
}

fn statuses<'a>(o: &'a Value, pointer: &str) -> impl Iterator<Item = &'a Value> {
    o.pointer(pointer)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// A terminated container's word: its reason, else its signal or exit code.
fn terminated_word(t: &Value) -> Option<String> {
    let reason = text(t, "/reason");
    if !reason.is_empty() {
        return Some(reason.to_owned());
    }
    match t.pointer("/signal").and_then(Value::as_i64) {
        Some(signal) if signal != 0 => Some(format!("Signal:{signal}")),
        _ => Some(format!("ExitCode:{}", int(t, "/exitCode"))),
    }
}

/// A Pod's STATUS as kube-apiserver's printer words it: the phase (or the pod's reason),
/// `Init:i/n` while init containers run, a container's waiting or terminated reason, and
/// `Terminating` once deleted.
fn pod_status(o: &Value, _: i64) -> Value {
    let mut reason = match text(o, "/status/reason") {
        "" => text(o, "/status/phase").to_owned(),
        r => r.to_owned(),
    };
    let inits: Vec<&Value> = statuses(o, "/status/initContainerStatuses").collect();
    let mut initializing = false;
    for (i, c) in inits.iter().enumerate() {
        if let Some(t) = c.pointer("/state/terminated") {
            if int(t, "/exitCode") == 0 {
                continue;
            }
            reason = format!("Init:{}", terminated_word(t).unwrap_or_default());
        } else {
            match text(c, "/state/waiting/reason") {
                "" | "PodInitializing" => {
                    reason = format!("Init:{i}/{}", inits.len());
                }
                waiting => reason = format!("Init:{waiting}"),
            }
        }
        initializing = true;
        break;
    }
    if !initializing {
        let mut running = false;
        for c in statuses(o, "/status/containerStatuses")
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
        {
            let waiting = text(c, "/state/waiting/reason");
            if !waiting.is_empty() {
                reason = waiting.to_owned();
            } else if let Some(t) = c.pointer("/state/terminated") {
                reason = terminated_word(t).unwrap_or_default();
            } else if c.pointer("/state/running").is_some()
                && c.get("ready").and_then(Value::as_bool) == Some(true)
            {
                running = true;
            }
        }
        if reason == "Completed" && running {
            reason = "Running".into();
        }
    }
    if o.pointer("/metadata/deletionTimestamp").is_some() {
        reason = if text(o, "/status/reason") == "NodeLost" {
            "Unknown".into()
        } else {
            "Terminating".into()
        };
    }
    json!(reason)
}

/// A Pod's RESTARTS: the sum of its containers' restarts, with the age of the last one
/// (`3 (5m ago)`).
fn pod_restarts(o: &Value, now: i64) -> Value {
    let mut restarts = 0;
    let mut last: Option<i64> = None;
    for c in statuses(o, "/status/containerStatuses") {
        restarts += int(c, "/restartCount");
        if let Some(at) = seconds(text(c, "/lastState/terminated/finishedAt")) {
            last = Some(last.map_or(at, |l| l.max(at)));
        }
    }
    json!(match last {
        Some(at) if restarts > 0 => format!("{restarts} ({} ago)", human_duration(now - at)),
        _ => restarts.to_string(),
    })
}

fn columns(group: &str, kind: &str) -> Vec<Column> {
    match (group, kind) {
        ("", "Pod") => vec![
            NAME,
            col("Ready", "string", 0, pod_ready),
            col("Status", "string", 0, pod_status),
            col("Restarts", "string", 0, pod_restarts),
            AGE,
            col("IP", "string", 1, |o, _| or_none(o, "/status/podIP")),
            col("Node", "string", 1, |o, _| or_none(o, "/spec/nodeName")),
        ],
        ("apps", "Deployment") => vec![
            NAME,
            READY_OF_REPLICAS,
            col("Up-to-date", "integer", 0, |o, _| {
                json!(int(o, "/status/updatedReplicas"))
            }),
            col("Available", "integer", 0, |o, _| {
                json!(int(o, "/status/availableReplicas"))
            }),
            AGE,
            CONTAINERS,
            IMAGES,
            SELECTOR,
        ],
        ("apps", "StatefulSet") => vec![NAME, READY_OF_REPLICAS, AGE, CONTAINERS, IMAGES],
        ("apps", "DaemonSet") => vec![
            NAME,
            col("Desired", "integer", 0, |o, _| {
                json!(int(o, "/status/desiredNumberScheduled"))
            }),
            col("Current", "integer", 0, |o, _| {
                json!(int(o, "/status/currentNumberScheduled"))
            }),
            col("Ready", "integer", 0, |o, _| {
                json!(int(o, "/status/numberReady"))
            }),
            col("Up-to-date", "integer", 0, |o, _| {
                json!(int(o, "/status/updatedNumberScheduled"))
            }),
            col("Available", "integer", 0, |o, _| {
                json!(int(o, "/status/numberAvailable"))
            }),
            col("Node Selector", "string", 0, |o, _| {
                json!(map_selector(o, "/spec/template/spec/nodeSelector"))
            }),
            AGE,
            CONTAINERS,
            IMAGES,
            SELECTOR,
        ],
        ("batch", "Job") => vec![
            NAME,
            col("Completions", "string", 0, job_completions),
            col("Duration", "string", 0, job_duration),
            AGE,
            CONTAINERS,
            IMAGES,
            SELECTOR,
        ],
        ("", "Service") => vec![
            NAME,
            col("Type", "string", 0, |o, _| {
                json!(match text(o, "/spec/type") {
                    "" => "ClusterIP",
                    t => t,
                })
            }),
            col("Cluster-IP", "string", 0, |o, _| {
                json!(match text(o, "/spec/clusterIP") {
                    "" => "<none>",
                    ip => ip,
                })
            }),
            col("External-IP", "string", 0, external_ips),
            col("Port(s)", "string", 0, service_ports),
            AGE,
            col("Selector", "string", 1, |o, _| {
                json!(map_selector(o, "/spec/selector"))
            }),
        ],
        ("", "ConfigMap") => vec![NAME, col("Data", "integer", 0, data_count), AGE],
        ("", "Secret") => vec![
            NAME,
            col("Type", "string", 0, |o, _| json!(text(o, "/type"))),
            col("Data", "integer", 0, data_count),
            AGE,
        ],
        // kube-apiserver 1.20's event printer: the involved object as `kind/name`, lower case
        ("", "Event") => vec![
            col("Last Seen", "string", 0, |o, now| {
                let last = if text(o, "/lastTimestamp").is_empty() {
                    "/firstTimestamp"
                } else {
                    "/lastTimestamp"
                };
                json!(age(o, last, now))
            }),
            col("Type", "string", 0, |o, _| json!(text(o, "/type"))),
            col("Reason", "string", 0, |o, _| json!(text(o, "/reason"))),
            col("Object", "string", 0, |o, _| {
                json!(format!(
                    "{}/{}",
                    text(o, "/involvedObject/kind").to_lowercase(),
                    text(o, "/involvedObject/name")
                ))
            }),
            col("Subobject", "string", 1, |o, _| {
                json!(text(o, "/involvedObject/fieldPath"))
            }),
            col("Source", "string", 1, |o, _| {
                json!(
                    match (text(o, "/source/component"), text(o, "/source/host")) {
                        (c, "") => c.to_owned(),
                        (c, h) => format!("{c}, {h}"),
                    }
                )
            }),
            col("Message", "string", 0, |o, _| {
                json!(text(o, "/message").trim())
            }),
            col("First Seen", "string", 1, |o, now| {
                json!(age(o, "/firstTimestamp", now))
            }),
            col("Count", "string", 1, |o, _| json!(int(o, "/count"))),
            Column {
                priority: 1,
                ..NAME
            },
        ],
        ("", "Namespace") => vec![
            NAME,
            col("Status", "string", 0, |o, _| {
                json!(text(o, "/status/phase"))
            }),
            AGE,
        ],
        // Karmada's Cluster is served by karmada-aggregated-apiserver, with its own printer
        (KARMADA_CLUSTER, "Cluster") => vec![
            NAME,
            col("Version", "string", 0, |o, _| {
                json!(text(o, "/status/kubernetesVersion"))
            }),
            col("Mode", "string", 0, |o, _| json!(text(o, "/spec/syncMode"))),
            col("Ready", "string", 0, |o, _| match condition(o, "Ready") {
                Value::Null => json!("Unknown"),
                v => v,
            }),
            AGE,
            col("Zones", "string", 1, |o, _| {
                let zones: Vec<&str> = o
                    .pointer("/spec/zones")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                json!(if zones.is_empty() {
                    "<none>".to_owned()
                } else {
                    zones.join(",")
                })
            }),
            col("Region", "string", 1, |o, _| or_none(o, "/spec/region")),
            col("Provider", "string", 1, |o, _| or_none(o, "/spec/provider")),
            col("API-Endpoint", "string", 1, |o, _| {
                json!(text(o, "/spec/apiEndpoint"))
            }),
            col("Proxy-URL", "string", 1, |o, _| {
                or_none(o, "/spec/proxyURL")
            }),
        ],
        // the printer columns of Karmada's CRDs
        (KARMADA_POLICY, "PropagationPolicy" | "ClusterPropagationPolicy") => vec![
            NAME,
            col("CONFLICT-RESOLUTION", "string", 0, |o, _| {
                raw(o, "/spec/conflictResolution")
            }),
            col("PRIORITY", "string", 0, |o, _| raw(o, "/spec/priority")),
            CRD_AGE,
        ],
        (KARMADA_WORK, "ResourceBinding" | "ClusterResourceBinding") => vec![
            NAME,
            col("SCHEDULED", "string", 0, |o, _| condition(o, "Scheduled")),
            col("FULLYAPPLIED", "string", 0, |o, _| {
                condition(o, "FullyApplied")
            }),
            CRD_AGE,
        ],
        (KARMADA_WORK, "Work") => vec![
            NAME,
            col("WORKLOAD-KIND", "string", 0, |o, _| {
                let kinds: Vec<&str> = o
                    .pointer("/spec/workload/manifests")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|m| text(m, "/kind"))
                    .collect();
                json!(kinds.join(" "))
            }),
            col("APPLIED", "string", 0, |o, _| condition(o, "Applied")),
            CRD_AGE,
        ],
        (KARMADA_POLICY | KARMADA_WORK | KARMADA_CLUSTER, _) => vec![NAME, CRD_AGE],
        _ => vec![NAME, AGE],
    }
}

const KARMADA_CLUSTER: &str = "cluster.karmada.io";
const KARMADA_POLICY: &str = "policy.karmada.io";
const KARMADA_WORK: &str = "work.karmada.io";

/// A CRD column's cell, as kube-apiserver converts a JSON value for its column type: a
/// `boolean` or `string` column shows `true`/`"True"` as they are, a missing value empty.
fn crd_cell(type_: &str, value: Value) -> Value {
    match (type_, value) {
        (_, Value::Null) => Value::Null,
        ("string", Value::String(s)) => Value::String(s),
        ("string", other) => Value::String(other.to_string()),
        (_, other) => other,
    }
}

/// The Table of `items` (objects of `kind` in `group`, in Kubernetes form), with the list's
/// `metadata` (resourceVersion, continue), at `now` (seconds since the epoch).
pub fn table(
    wanted: Wanted,
    group: &str,
    kind: &str,
    items: &[Value],
    metadata: Value,
    now: i64,
) -> Value {
    let columns = columns(group, kind);
    let definitions: Vec<Value> = columns
        .iter()
        .map(|c| {
            definition(
                c.name,
                c.type_,
                c.format,
                c.description,
                i64::from(c.priority),
            )
        })
        .collect();
    let cells = |item: &Value| {
        columns
            .iter()
            .map(|c| crd_cell(c.type_, (c.cell)(item, now)))
            .collect()
    };
    render(wanted, definitions, cells, items, metadata)
}

/// A column that a CustomResourceDefinition declares for a version of its kind
/// (`spec.versions[].additionalPrinterColumns`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrinterColumn {
    /// The header.
    pub name: String,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    pub type_: String,
    /// OpenAPI's format (`name`, `int32`...), shown to clients as it is.
    pub format: String,
    /// The header's description (kube-apiserver's wording when the CRD has none).
    pub description: String,
    /// 0: always shown; more: with `-o wide`.
    pub priority: i64,
    /// A simple JSONPath (`.spec.replicas`, `.status.conditions[?(@.type=="Ready")].status`).
    pub json_path: String,
}

impl PrinterColumn {
    /// The column kube-apiserver gives a CRD version that declares none: `Age`, a date.
    pub fn default_age() -> Self {
        Self {
            name: "Age".into(),
            type_: "date".into(),
            format: String::new(),
            description: AGE.description.into(),
            priority: 0,
            json_path: ".metadata.creationTimestamp".into(),
        }
    }
}

/// The Table of `items` of a custom kind whose version declares `columns` (after NAME, as
/// kube-apiserver's CRD convertor does). A cell is the path's first result converted for
/// the column's type: a date as an age, a `string` column's number or object as JSON, a
/// value of the wrong type or a path that finds nothing empty.
pub fn custom_table(
    wanted: Wanted,
    columns: &[PrinterColumn],
    items: &[Value],
    metadata: Value,
    now: i64,
) -> Value {
    let mut definitions = vec![definition(
        NAME.name,
        NAME.type_,
        NAME.format,
        NAME.description,
        0,
    )];
    definitions.extend(
        columns
            .iter()
            .map(|c| definition(&c.name, &c.type_, &c.format, &c.description, c.priority)),
    );
    let cells = |item: &Value| {
        let mut cells = vec![(NAME.cell)(item, now)];
        cells.extend(columns.iter().map(|c| {
            let found = json_path(item, &c.json_path)
                .cloned()
                .unwrap_or(Value::Null);
            custom_cell(&c.type_, found, now)
        }));
        cells
    };
    render(wanted, definitions, cells, items, metadata)
}

/// A custom column's cell as kube-apiserver's CRD convertor converts the JSON value.
fn custom_cell(type_: &str, value: Value, now: i64) -> Value {
    match (type_, value) {
        (_, Value::Null) => Value::Null,
        ("string", Value::String(s)) => Value::String(s),
        ("string", other) => Value::String(other.to_string()),
        ("integer", Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f as i64))
            .map_or(Value::Null, |i| json!(i)),
        ("number", Value::Number(n)) => n.as_f64().map_or(Value::Null, |f| json!(f)),
        ("boolean", Value::Bool(b)) => Value::Bool(b),
        ("date", Value::String(s)) => match seconds(&s) {
            Some(t) => json!(human_duration(now - t)),
            None => json!("<invalid>"),
        },
        _ => Value::Null,
    }
}

/// The first value a simple JSONPath finds in `o`: `.a.b`, `.a[0]`, `.a[*].b` (the first),
/// `.a['b.c']` and a filter `.a[?(@.type=="Ready")]` (of `==` on a field of each element).
/// `None` when nothing is found or the path is not one of these forms.
pub fn json_path<'a>(o: &'a Value, path: &str) -> Option<&'a Value> {
    let path = path.trim();
    let path = path
        .strip_prefix('{')
        .and_then(|p| p.strip_suffix('}'))
        .unwrap_or(path);
    let mut found: Vec<&Value> = vec![o];
    let mut rest = path.strip_prefix('$').unwrap_or(path);
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('[') {
            let end = closing_bracket(after)?;
            let inside = after[..end].trim();
            rest = &after[end + 1..];
            found = found
                .into_iter()
                .flat_map(|v| step_bracket(v, inside))
                .collect();
        } else if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let field = &after[..end];
            rest = &after[end..];
            if field.is_empty() {
                continue;
            }
            found = found.into_iter().filter_map(|v| v.get(field)).collect();
        } else {
            return None;
        }
        if found.is_empty() {
            return None;
        }
    }
    found.into_iter().next()
}

/// Where the `]` closing a bracket that began before `text` is, outside quotes.
fn closing_bracket(text: &str) -> Option<usize> {
    let mut quote = None;
    for (i, c) in text.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, ']') => return Some(i),
            _ => {}
        }
    }
    None
}

fn unquote(text: &str) -> Option<&str> {
    let text = text.trim();
    text.strip_prefix('\'')
        .and_then(|t| t.strip_suffix('\''))
        .or_else(|| text.strip_prefix('"').and_then(|t| t.strip_suffix('"')))
}

/// What one bracket step finds from `v`.
fn step_bracket<'a>(v: &'a Value, inside: &str) -> Vec<&'a Value> {
    if inside == "*" {
        return match v {
            Value::Array(a) => a.iter().collect(),
            Value::Object(m) => m.values().collect(),
            _ => Vec::new(),
        };
    }
    if let Some(filter) = inside.strip_prefix("?(").and_then(|f| f.strip_suffix(')')) {
        let Some((left, right)) = filter.split_once("==") else {
            return Vec::new();
        };
        let (Some(field), Some(want)) = (left.trim().strip_prefix("@"), unquote(right)) else {
            return Vec::new();
        };
        let items = v.as_array().map(Vec::as_slice).unwrap_or_default();
        return items
            .iter()
            .filter(|item| json_path(item, field).and_then(Value::as_str) == Some(want))
            .collect();
    }
    if let Some(key) = unquote(inside) {
        return v.get(key).into_iter().collect();
    }
    match (v, inside.parse::<i64>()) {
        (Value::Array(a), Ok(i)) => {
            let i = if i < 0 { a.len() as i64 + i } else { i };
            usize::try_from(i)
                .ok()
                .and_then(|i| a.get(i))
                .into_iter()
                .collect()
        }
        _ => Vec::new(),
    }
}

fn definition(name: &str, type_: &str, format: &str, description: &str, priority: i64) -> Value {
    json!({
        "name": name,
        "type": type_,
        "format": format,
        "description": description,
        "priority": priority,
    })
}

/// The Table of `items` with the column `definitions`, each row's cells from `cells`.
fn render(
    wanted: Wanted,
    definitions: Vec<Value>,
    cells: impl Fn(&Value) -> Vec<Value>,
    items: &[Value],
    metadata: Value,
) -> Value {
    let rows: Vec<Value> = items
        .iter()
        .map(|item| {
            let mut row = json!({ "cells": cells(item) });
            match wanted.include {
                Include::None => {}
                Include::Metadata => {
                    row["object"] = json!({
                        "kind": "PartialObjectMetadata",
                        "apiVersion": format!("meta.k8s.io/{}", wanted.version),
                        "metadata": item.get("metadata").cloned().unwrap_or_else(|| json!({})),
                    });
                }
                Include::Object => row["object"] = item.clone(),
            }
            row
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": format!("meta.k8s.io/{}", wanted.version),
        "metadata": metadata,
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests;
