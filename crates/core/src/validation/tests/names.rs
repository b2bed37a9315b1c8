//! Name and string checks (Kubernetes `util/validation`, Karmada cluster names, §1.7).

use crate::validation::names::{check_api_version, check_kind};
use crate::validation::*;

/// Expected outcome of a name check.
#[derive(Debug, PartialEq)]
enum Want {
    Ok,
    Err(FieldErrorKind),
}
use Want::{Err as E, Ok as K};

struct Case {
    name: &'static str,
    value: String,
    want: Want,
}

fn case(name: &'static str, value: impl Into<String>, want: Want) -> Case {
    Case {
        name,
        value: value.into(),
        want,
    }
}

fn run(check: fn(&str) -> Result<(), NameError>, cases: Vec<Case>) {
    for c in cases {
        let got = match check(&c.value) {
            Ok(()) => K,
            Err(e) => {
                // The NameError → FieldError mapping keeps the kind.
                let fe = e.at(&FieldPath::new("x"));
                assert_eq!(fe.kind, e.kind(), "case {:?}", c.name);
                assert_eq!(fe.field, "x");
                E(e.kind())
            }
        };
        assert_eq!(got, c.want, "case {:?} ({:?})", c.name, c.value);
    }
}

use FieldErrorKind::{Invalid, Required, TooLong};

#[test]
fn k8s_dns1123_label() {
    run(
        check_dns1123_label,
        vec![
            case("single char", "a", K),
            case("digits and dash", "0-9a", K),
            case("exactly 63", "a".repeat(63), K),
            case("64 is too long", "a".repeat(64), E(TooLong)),
            case("empty", "", E(Required)),
            case("leading dash", "-a", E(Invalid)),
            case("trailing dash", "a-", E(Invalid)),
            case("upper case", "A", E(Invalid)),
            case("underscore", "a_b", E(Invalid)),
            case("dot", "a.b", E(Invalid)),
            case("non-ascii", "é", E(Invalid)),
        ],
    );
}

#[test]
fn k8s_dns1123_subdomain() {
    let max = format!("{}.{}", "a".repeat(126), "b".repeat(126));
    run(
        check_dns1123_subdomain,
        vec![
            case("dotted", "nginx.example.com", K),
            case("exactly 253", max.clone(), K),
            case("254 is too long", format!("{max}c"), E(TooLong)),
            case("parts may exceed 63", "a".repeat(100), K),
            case("empty", "", E(Required)),
            case("double dot", "a..b", E(Invalid)),
            case("leading dot", ".a", E(Invalid)),
            case("trailing dot", "a.", E(Invalid)),
            case("part ends with dash", "a-.b", E(Invalid)),
            case("upper case", "Nginx", E(Invalid)),
        ],
    );
}

#[test]
fn karmada_cluster_name_48_chars() {
    run(
        check_cluster_name,
        vec![
            case("short", "member1", K),
            case("exactly 48", "a".repeat(48), K),
            case("49 is too long", "a".repeat(49), E(TooLong)),
            case("63 is too long for a cluster", "a".repeat(63), E(TooLong)),
            case("empty", "", E(Required)),
            case("upper case", "Member1", E(Invalid)),
            case("dot", "member.1", E(Invalid)),
        ],
    );
}

#[test]
fn k8s_qualified_name() {
    let prefix253 = format!("{}.{}", "a".repeat(126), "b".repeat(126));
    run(
        check_qualified_name,
        vec![
            case("plain", "app", K),
            case("prefixed", "cluster.karmada.io/not-ready", K),
            case("mixed chars", "A_b.c-D9", K),
            case("name exactly 63", "a".repeat(63), K),
            case("name 64 is too long", "a".repeat(64), E(TooLong)),
            case("prefix exactly 253", format!("{prefix253}/a"), K),
            case(
                "prefix 254 is too long",
                format!("{prefix253}c/a"),
                E(TooLong),
            ),
            case("empty", "", E(Required)),
            case("empty prefix", "/a", E(Invalid)),
            case("empty name", "example.com/", E(Invalid)),
            case("two slashes", "a/b/c", E(Invalid)),
            case("leading dash", "-a", E(Invalid)),
            case("trailing dot", "a.", E(Invalid)),
            case("upper-case prefix", "Example.com/a", E(Invalid)),
            case("space", "a b", E(Invalid)),
        ],
    );
}

#[test]
fn k8s_label_value() {
    run(
        check_label_value,
        vec![
            case("empty is allowed", "", K),
            case("plain", "us-east-1", K),
            case("exactly 63", "a".repeat(63), K),
            case("64 is too long", "a".repeat(64), E(TooLong)),
            case("leading underscore", "_a", E(Invalid)),
            case("slash", "a/b", E(Invalid)),
            case("space", "a b", E(Invalid)),
        ],
    );
}

#[test]
fn pd_2_affinity_name_1_to_32_chars() {
    run(
        check_affinity_name,
        vec![
            case("plain", "primary", K),
            case("exactly 32", "a".repeat(32), K),
            case("33 is too long", "a".repeat(33), E(TooLong)),
            case("empty", "", E(Required)),
            case("not a label key", "a b", E(Invalid)),
        ],
    );
}

#[test]
fn eviction_task_reason_pattern() {
    run(
        check_eviction_reason,
        vec![
            case("taint manager", "TaintUntolerated", K),
            case("one letter", "A", K),
            case("ends with underscore", "a_", K),
            case("inner comma and colon", "Ab:c,d_e", K),
            case("exactly 32", "A".repeat(32), K),
            case("33 is too long", "A".repeat(33), E(TooLong)),
            case("empty", "", E(Required)),
            case("starts with digit", "1a", E(Invalid)),
            case("ends with colon", "a:", E(Invalid)),
            case("ends with comma", "a,", E(Invalid)),
            case("dash", "a-b", E(Invalid)),
            case("space", "a b", E(Invalid)),
        ],
    );
}

#[test]
fn utf8_text_without_control_characters() {
    let single = |s: &str| check_text(s, 1024, false);
    let multi = |s: &str| check_text(s, 1024, true);
    assert_eq!(single("hello, wörld"), Ok(()));
    assert_eq!(single(""), Ok(()));
    assert_eq!(multi("line\n\tline\r\n"), Ok(()));
    assert!(matches!(single("a\nb"), Err(NameError::Invalid(_))));
    assert!(matches!(multi("bell\u{7}"), Err(NameError::Invalid(_))));
    assert!(matches!(multi("nul\0"), Err(NameError::Invalid(_))));
    assert!(matches!(single("c1\u{85}"), Err(NameError::Invalid(_))));
    // Characters are counted, not bytes.
    assert_eq!(single(&"é".repeat(1024)), Ok(()));
    assert_eq!(
        single(&"é".repeat(1025)),
        Err(NameError::TooLong {
            len: 1025,
            max: 1024
        })
    );
}

#[test]
fn k8s_path_segment_name() {
    run(
        check_path_segment_name,
        vec![
            case("rbac name", "system:aggregate-to-admin", K),
            case("exactly 253", "a".repeat(253), K),
            case("254 is too long", "a".repeat(254), E(TooLong)),
            case("empty", "", E(Required)),
            case("dot", ".", E(Invalid)),
            case("dot dot", "..", E(Invalid)),
            case("slash", "a/b", E(Invalid)),
            case("percent", "a%2f", E(Invalid)),
            case("newline", "a\nb", E(Invalid)),
        ],
    );
}

#[test]
fn api_version_and_kind() {
    run(
        check_api_version,
        vec![
            case("core", "v1", K),
            case("group", "apps/v1", K),
            case("dotted group", "policy.karmada.io/v1alpha1", K),
            case("empty", "", E(Required)),
            case("empty group", "/v1", E(Invalid)),
            case("empty version", "apps/", E(Invalid)),
            case("upper case", "Apps/V1", E(Invalid)),
            case("three parts", "a/b/c", E(Invalid)),
        ],
    );
    run(
        check_kind,
        vec![
            case("kind", "Deployment", K),
            case("digits", "V1Thing2", K),
            case("exactly 63", "A".repeat(63), K),
            case("64 is too long", "A".repeat(64), E(TooLong)),
            case("empty", "", E(Required)),
            case("starts with digit", "1Deployment", E(Invalid)),
            case("dot", "apps.Deployment", E(Invalid)),
        ],
    );
}

#[test]
fn field_error_display_and_paths() {
    let p = FieldPath::new("spec").child("taints").index(1).child("key");
    assert_eq!(p.as_str(), "spec.taints[1].key");
    assert_eq!(FieldPath::new("").child("reason").as_str(), "reason");
    assert_eq!(
        FieldPath::new("metadata")
            .child("labels")
            .key("app")
            .as_str(),
        "metadata.labels[app]"
    );
    let e = FieldError::required(&p, "must not be empty");
    assert_eq!(
        e.to_string(),
        "spec.taints[1].key: Required value: must not be empty"
    );
    let e = FieldError::not_supported(&p, "Lt", &["Equal", "Exists"]);
    assert_eq!(
        e.to_string(),
        "spec.taints[1].key: Unsupported value: \"Lt\": supported values: \"Equal\", \"Exists\""
    );
    // A huge value is cut when echoed back.
    let e = FieldError::not_supported(&p, &"x".repeat(10_000), &["a"]);
    assert!(e.message.len() < 200, "{}", e.message);
}

/// managedFields as kube-apiserver checks them: a manager, `Apply` or `Update`, `FieldsV1`
/// with a JSON object (docs/kubernetes-api.md, "Server-side apply").
#[test]
fn managed_fields_entries_are_checked_as_kube_apiserver_checks_them() {
    use crate::types::ManagedFieldsEntry;
    let good = || ManagedFieldsEntry {
        manager: "kubectl".into(),
        operation: "Apply".into(),
        api_version: "v1".into(),
        time: None,
        fields_type: "FieldsV1".into(),
        fields_v1: r#"{"f:data":{"f:a":{}}}"#.into(),
        subresource: String::new(),
    };
    let path = FieldPath::new("metadata").child("managedFields");
    let limits = Limits::default();
    let cases: Vec<(&str, ManagedFieldsEntry, Option<&str>)> = vec![
        ("a good entry", good(), None),
        (
            "no manager",
            ManagedFieldsEntry {
                manager: String::new(),
                ..good()
            },
            Some("metadata.managedFields[0].manager"),
        ),
        (
            "a manager of 129 characters",
            ManagedFieldsEntry {
                manager: "m".repeat(129),
                ..good()
            },
            Some("metadata.managedFields[0].manager"),
        ),
        (
            "an unknown operation",
            ManagedFieldsEntry {
                operation: "Patch".into(),
                ..good()
            },
            Some("metadata.managedFields[0].operation"),
        ),
        (
            "another fields type",
            ManagedFieldsEntry {
                fields_type: "FieldsV2".into(),
                ..good()
            },
            Some("metadata.managedFields[0].fieldsType"),
        ),
        (
            "fields that are not a JSON object",
            ManagedFieldsEntry {
                fields_v1: "[1]".into(),
                ..good()
            },
            Some("metadata.managedFields[0].fieldsV1"),
        ),
    ];
    for (what, entry, want) in cases {
        let errs = validate_managed_fields(&[entry], &path, &limits);
        let fields: Vec<String> = errs.iter().map(|e| e.field.clone()).collect();
        match want {
            None => assert!(fields.is_empty(), "{what}: {fields:?}"),
            Some(f) => assert_eq!(fields, [f], "{what}"),
        }
    }
    let many = vec![good(); 65];
    assert!(
        !validate_managed_fields(&many, &path, &limits).is_empty(),
        "at most 64 entries"
    );
}
