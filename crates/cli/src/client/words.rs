//! Wire values in the words a Karmada user knows: `NoExecute`, `key=value:NoSchedule`,
//! `member1:1,member2:2`, `Gracefully`.

use flotilla_proto::v1;

/// A taint effect in Kubernetes spelling.
pub fn effect(value: i32) -> &'static str {
    match v1::TaintEffect::try_from(value) {
        Ok(v1::TaintEffect::NoSchedule) => "NoSchedule",
        Ok(v1::TaintEffect::PreferNoSchedule) => "PreferNoSchedule",
        Ok(v1::TaintEffect::NoExecute) => "NoExecute",
        Ok(v1::TaintEffect::Unspecified) => "",
        Err(_) => "?",
    }
}

/// A condition status in Kubernetes spelling.
pub fn condition_status(value: i32) -> &'static str {
    match v1::ConditionStatus::try_from(value) {
        Ok(v1::ConditionStatus::True) => "True",
        Ok(v1::ConditionStatus::False) => "False",
        Ok(v1::ConditionStatus::Unknown) => "Unknown",
        _ => "",
    }
}

/// A purge mode in Karmada spelling (empty when unset).
pub fn purge_mode(value: i32) -> &'static str {
    match v1::PurgeMode::try_from(value) {
        Ok(v1::PurgeMode::Directly) => "Directly",
        Ok(v1::PurgeMode::Gracefully) => "Gracefully",
        Ok(v1::PurgeMode::Never) => "Never",
        _ => "",
    }
}

/// A resource health in Karmada spelling.
pub fn health(value: i32) -> &'static str {
    match v1::ResourceHealth::try_from(value) {
        Ok(v1::ResourceHealth::Healthy) => "Healthy",
        Ok(v1::ResourceHealth::Unhealthy) => "Unhealthy",
        Ok(v1::ResourceHealth::Unknown) => "Unknown",
        _ => "",
    }
}

/// A selector operator in Kubernetes spelling.
pub fn selector_operator(value: i32) -> &'static str {
    match v1::SelectorOperator::try_from(value) {
        Ok(v1::SelectorOperator::In) => "In",
        Ok(v1::SelectorOperator::NotIn) => "NotIn",
        Ok(v1::SelectorOperator::Exists) => "Exists",
        Ok(v1::SelectorOperator::DoesNotExist) => "DoesNotExist",
        _ => "?",
    }
}

/// A sync mode in Karmada spelling.
pub fn sync_mode(value: i32) -> &'static str {
    match v1::SyncMode::try_from(value) {
        Ok(v1::SyncMode::Push) => "Push",
        Ok(v1::SyncMode::Pull) => "Pull",
        _ => "",
    }
}

/// An event type in Kubernetes spelling.
pub fn event_type(value: i32) -> &'static str {
    match v1::EventType::try_from(value) {
        Ok(v1::EventType::Normal) => "Normal",
        Ok(v1::EventType::Warning) => "Warning",
        _ => "",
    }
}

/// `key=value:Effect` (kubectl's taint syntax; `key:Effect` without a value).
pub fn taint(t: &v1::Taint) -> String {
    taint_parts(&t.key, &t.value, t.effect)
}

/// A taint a policy adds or removes, written like a [`taint`].
pub fn taint_spec(t: &v1::TaintSpec) -> String {
    taint_parts(&t.key, &t.value, t.effect)
}

/// `key=value:Effect`, or `key:Effect` when the value is empty.
fn taint_parts(key: &str, value: &str, eff: i32) -> String {
    if value.is_empty() {
        format!("{key}:{}", effect(eff))
    } else {
        format!("{key}={value}:{}", effect(eff))
    }
}

/// A toleration, e.g. `cluster.karmada.io/not-ready:NoExecute (Exists) for 300s`.
pub fn toleration(t: &v1::Toleration) -> String {
    let key = if t.key.is_empty() { "*" } else { &t.key };
    let op = match v1::TolerationOperator::try_from(t.operator) {
        Ok(v1::TolerationOperator::Exists) => "Exists".to_owned(),
        _ => format!("={}", t.value),
    };
    let eff = match effect(t.effect) {
        "" => "*",
        e => e,
    };
    let op = if op == "Exists" {
        " (Exists)".to_owned()
    } else {
        op
    };
    let secs = t
        .toleration_seconds
        .map(|s| format!(" for {s}s"))
        .unwrap_or_default();
    format!("{key}{op}:{eff}{secs}")
}

/// `member1:1,member2:2`, or `<none>`.
pub fn targets(clusters: &[v1::TargetCluster]) -> String {
    if clusters.is_empty() {
        return "<none>".into();
    }
    clusters
        .iter()
        .map(|c| format!("{}:{}", c.name, c.replicas))
        .collect::<Vec<_>>()
        .join(",")
}

/// The status of condition `type_` (`True`/`False`/`Unknown`), or `""` when absent.
pub fn condition<'a>(conditions: &'a [v1::Condition], type_: &str) -> Option<&'a v1::Condition> {
    conditions.iter().find(|c| c.r#type == type_)
}

/// A condition's status and reason, then its message when it has one: `True (Applied)`,
/// `False (Failed): no such cluster`.
pub fn condition_summary(c: &v1::Condition) -> String {
    if c.message.is_empty() {
        format!("{} ({})", condition_status(c.status), c.reason)
    } else {
        format!(
            "{} ({}): {}",
            condition_status(c.status),
            c.reason,
            c.message
        )
    }
}

/// The status word of condition `type_`, or `-` when absent.
pub fn condition_word(conditions: &[v1::Condition], type_: &str) -> String {
    condition(conditions, type_)
        .map(|c| condition_status(c.status).to_owned())
        .unwrap_or_else(|| "-".into())
}

/// `ns/name`, or `name` without a namespace.
pub fn qualified(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_owned()
    } else {
        format!("{namespace}/{name}")
    }
}

/// A list joined by `, `, or `<none>` when empty.
pub fn list_spaced<I, S>(items: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    list_joined(items, ", ")
}

/// A list joined by commas, or `<none>` when empty.
pub fn list_or_none<I, S>(items: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    list_joined(items, ",")
}

/// A list joined by `sep`, or `<none>` when empty.
fn list_joined<I, S>(items: I, sep: &str) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let v: Vec<String> = items.into_iter().map(|s| s.as_ref().to_owned()).collect();
    if v.is_empty() {
        "<none>".into()
    } else {
        v.join(sep)
    }
}

/// Placement summary: `Duplicated`, `Divided/Weighted (member1:1,member2:2)`,
/// `Divided/Aggregated`, `Divided/Weighted (dynamic)`.
pub fn placement_type(p: Option<&v1::Placement>) -> String {
    let Some(rs) = p.and_then(|p| p.replica_scheduling.as_ref()) else {
        return "Duplicated".into();
    };
    if rs.replica_scheduling_type == v1::ReplicaSchedulingType::Duplicated as i32 {
        return "Duplicated".into();
    }
    let pref = match v1::ReplicaDivisionPreference::try_from(rs.replica_division_preference) {
        Ok(v1::ReplicaDivisionPreference::Aggregated) => "Aggregated",
        _ => "Weighted",
    };
    let mut out = format!("Divided/{pref}");
    if pref == "Weighted"
        && let Some(wp) = &rs.weight_preference
    {
        if wp.dynamic_weight != 0 {
            out.push_str(" (dynamic)");
        } else if !wp.static_weight_list.is_empty() {
            let weights: Vec<String> = wp
                .static_weight_list
                .iter()
                .map(|w| {
                    let names = w
                        .target_cluster
                        .as_ref()
                        .map(|a| a.cluster_names.join("|"))
                        .filter(|s| !s.is_empty())
                        .unwrap_or_else(|| "*".into());
                    format!("{names}:{}", w.weight)
                })
                .collect();
            out.push_str(&format!(" ({})", weights.join(",")));
        }
    }
    out
}

/// The overrider kinds of a rule: `image,args,plaintext` (`none` for an empty rule).
pub fn overrider_kinds(o: Option<&flotilla_proto::v1::Overriders>) -> String {
    let Some(o) = o else {
        return "none".into();
    };
    let kinds: Vec<&str> = [
        ("image", o.image_overrider.len()),
        ("command", o.command_overrider.len()),
        ("args", o.args_overrider.len()),
        ("labels", o.labels_overrider.len()),
        ("annotations", o.annotations_overrider.len()),
        ("field", o.field_overrider.len()),
        ("plaintext", o.plaintext.len()),
    ]
    .into_iter()
    .filter(|(_, n)| *n > 0)
    .map(|(k, _)| k)
    .collect();
    if kinds.is_empty() {
        "none".into()
    } else {
        kinds.join(",")
    }
}
