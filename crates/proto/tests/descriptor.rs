//! Smoke test of the generated contract: the descriptor set that reflection serves decodes,
//! names every service, keeps Karmada's JSON names and the proto comments, and the
//! generated clients and servers exist.

use flotilla_proto::FILE_DESCRIPTOR_SET;
use prost::Message;
use prost_types::{DescriptorProto, FileDescriptorProto, FileDescriptorSet};

fn descriptor_set() -> FileDescriptorSet {
    FileDescriptorSet::decode(FILE_DESCRIPTOR_SET).expect("descriptor set decodes")
}

fn flotilla_files(set: &FileDescriptorSet) -> Vec<&FileDescriptorProto> {
    set.file
        .iter()
        .filter(|f| f.package() == "flotilla.v1")
        .collect()
}

fn message<'a>(set: &'a FileDescriptorSet, name: &str) -> &'a DescriptorProto {
    flotilla_files(set)
        .into_iter()
        .flat_map(|f| &f.message_type)
        .find(|m| m.name() == name)
        .unwrap_or_else(|| panic!("message {name} missing"))
}

fn json_name(set: &FileDescriptorSet, message_name: &str, field: &str) -> String {
    let m = message(set, message_name);
    let f = m
        .field
        .iter()
        .find(|f| f.name() == field)
        .unwrap_or_else(|| panic!("{message_name}.{field} missing"));
    f.json_name().to_owned()
}

#[test]
fn descriptor_set_names_every_service_and_its_methods() {
    let set = descriptor_set();
    let services: Vec<(String, Vec<String>)> = flotilla_files(&set)
        .into_iter()
        .flat_map(|f| &f.service)
        .map(|s| {
            (
                format!("flotilla.v1.{}", s.name()),
                s.method.iter().map(|m| m.name().to_owned()).collect(),
            )
        })
        .collect();
    let expected: &[(&str, &[&str])] = &[
        (
            "flotilla.v1.Api",
            &[
                "CreateCluster",
                "ListPropagationPolicies",
                "UpdateClusterTaintPolicy",
                "DeleteWorkload",
                "WatchResourceBindings",
                "GetPeers",
                "ListShards",
                "ReviewAccess",
                "GetWork",
                "ListEvents",
            ],
        ),
        ("flotilla.v1.ClusterHealth", &["Heartbeat", "Assess"]),
        ("flotilla.v1.TaintManager", &["Explain"]),
        ("flotilla.v1.Scheduler", &["Simulate"]),
        ("flotilla.v1.GracefulEviction", &["Assess"]),
        (
            "flotilla.v1.WorkExecutor",
            &["GetWorkStatus", "ReportWorkStatus", "Plan"],
        ),
        ("flotilla.v1.MemberSim", &["SetFault", "GetStats"]),
    ];
    for (service, methods) in expected {
        let (_, have) = services
            .iter()
            .find(|(name, _)| name == service)
            .unwrap_or_else(|| panic!("{service} missing from {services:?}"));
        for method in *methods {
            assert!(
                have.iter().any(|m| m == method),
                "{service}/{method} missing"
            );
        }
    }
    // Api: 7 kinds × 6 RPCs + 3 read-only kinds × 3 RPCs + Apply + GetPeers + Secret's 5
    // (no Watch: its values are write-only) + ReleaseEvictionTask (GE-9.1) + RescheduleBinding
    // (SC-3.4) + ListShards + ReviewAccess.
    let api = services
        .iter()
        .find(|(n, _)| n == "flotilla.v1.Api")
        .map(|(_, m)| m.len());
    assert_eq!(api, Some(62));
}

#[test]
fn descriptor_set_is_self_contained_for_reflection() {
    let set = descriptor_set();
    let names: Vec<&str> = set.file.iter().map(|f| f.name()).collect();
    for file in [
        "google/protobuf/timestamp.proto",
        "google/protobuf/duration.proto",
    ] {
        assert!(names.contains(&file), "{file} missing from {names:?}");
    }
    // Every import is in the set, before the file that imports it.
    for (i, file) in set.file.iter().enumerate() {
        for dep in &file.dependency {
            let pos = names.iter().position(|n| n == dep);
            assert!(
                pos.is_some_and(|p| p < i),
                "{}: import {dep} missing or late",
                file.name()
            );
        }
    }
    assert!(
        flotilla_files(&set)
            .iter()
            .any(|f| f.name() == "flotilla/v1/resources.proto")
    );
}

#[test]
fn json_names_read_like_karmada() {
    let set = descriptor_set();
    // `Message.field` → the JSON name Karmada's YAML uses
    let cases = [
        ("GracefulEvictionTask.from_cluster", "fromCluster"),
        (
            "GracefulEvictionTask.grace_period_seconds",
            "gracePeriodSeconds",
        ),
        ("Taint.time_added", "timeAdded"),
        ("Toleration.toleration_seconds", "tolerationSeconds"),
        (
            "ResourceBindingStatus.scheduler_observed_generation",
            "schedulerObservedGeneration",
        ),
        (
            "ResourceBindingStatus.scheduler_observing_affinity_name",
            "schedulerObservingAffinityName",
        ),
        (
            "ResourceBindingSpec.graceful_eviction_tasks",
            "gracefulEvictionTasks",
        ),
        (
            "ResourceBindingSpec.reschedule_triggered_at",
            "rescheduleTriggeredAt",
        ),
        ("ClusterStatus.api_enablements", "apiEnablements"),
        (
            "ReplicaSchedulingStrategy.replica_division_preference",
            "replicaDivisionPreference",
        ),
        ("ClusterPreferences.static_weight_list", "staticWeightList"),
        ("ObjectMeta.resource_version", "resourceVersion"),
    ];
    for (path, want) in cases {
        let (message_name, field) = path.split_once('.').unwrap();
        assert_eq!(json_name(&set, message_name, field), want, "{path}");
    }
}

#[test]
fn optional_scalars_are_proto3_optional() {
    let set = descriptor_set();
    for (message_name, field) in [
        ("Toleration", "toleration_seconds"),
        ("GracefulEvictionTask", "grace_period_seconds"),
        ("GracefulEvictionTask", "suppress_deletion"),
        ("GracefulEvictionTask", "replicas"),
        ("ResourceSummary", "allocatable_replicas"),
        ("DecisionConditions", "toleration_seconds"),
    ] {
        let f = message(&set, message_name)
            .field
            .iter()
            .find(|f| f.name() == field)
            .unwrap();
        assert!(
            f.proto3_optional(),
            "{message_name}.{field} is not `optional`"
        );
    }
}

#[test]
fn every_enum_starts_with_unspecified_zero() {
    let set = descriptor_set();
    let enums: Vec<_> = flotilla_files(&set)
        .into_iter()
        .flat_map(|f| &f.enum_type)
        .collect();
    assert!(enums.len() >= 15, "only {} enums", enums.len());
    for e in enums {
        let first = &e.value[0];
        assert_eq!(first.number(), 0, "{}", e.name());
        assert!(
            first.name().ends_with("_UNSPECIFIED"),
            "{}: {}",
            e.name(),
            first.name()
        );
    }
}

#[test]
fn every_message_and_field_has_a_comment() {
    let set = descriptor_set();
    let mut missing = Vec::new();
    for file in flotilla_files(&set) {
        let info = file.source_code_info.as_ref().expect("source info is kept");
        let commented = |path: &[i32]| {
            info.location
                .iter()
                .any(|l| l.path == path && !l.leading_comments().trim().is_empty())
        };
        // FileDescriptorProto.message_type = 4, DescriptorProto.field = 2,
        // service = 6, ServiceDescriptorProto.method = 2, enum_type = 5, value = 2.
        // Each element is (its name, the names of its members); a member's path is the
        // element's path, 2 and its index.
        let messages = file.message_type.iter().map(|m| {
            let members = m.field.iter().map(|f| format!("{}.{}", m.name(), f.name()));
            (m.name().to_owned(), members.collect())
        });
        let services = file.service.iter().map(|s| {
            let members = s
                .method
                .iter()
                .map(|m| format!("{}/{}", s.name(), m.name()));
            (s.name().to_owned(), members.collect())
        });
        let enums = file.enum_type.iter().map(|e| {
            let members = e.value.iter().map(|v| v.name().to_owned());
            (e.name().to_owned(), members.collect())
        });
        for (tag, elements) in [
            (4, messages.collect::<Vec<(String, Vec<String>)>>()),
            (6, services.collect()),
            (5, enums.collect()),
        ] {
            for (i, (name, members)) in elements.into_iter().enumerate() {
                let i = i as i32;
                if !commented(&[tag, i]) {
                    missing.push(name);
                }
                for (j, member) in members.into_iter().enumerate() {
                    if !commented(&[tag, i, 2, j as i32]) {
                        missing.push(member);
                    }
                }
            }
        }
    }
    assert!(missing.is_empty(), "undocumented: {missing:?}");
}

#[test]
fn generated_clients_and_servers_exist() {
    use flotilla_proto::v1;
    // Names only: a missing service generator fails to compile this test.
    let names = [
        std::any::type_name::<v1::api_client::ApiClient<tonic::transport::Channel>>(),
        std::any::type_name::<v1::cluster_health_server::ClusterHealthServer<()>>(),
        std::any::type_name::<v1::taint_manager_server::TaintManagerServer<()>>(),
        std::any::type_name::<v1::scheduler_server::SchedulerServer<()>>(),
        std::any::type_name::<v1::graceful_eviction_server::GracefulEvictionServer<()>>(),
        std::any::type_name::<v1::work_executor_server::WorkExecutorServer<()>>(),
        std::any::type_name::<v1::member_sim_server::MemberSimServer<()>>(),
    ];
    assert_eq!(v1::api_server::SERVICE_NAME, "flotilla.v1.Api");
    assert!(
        names.iter().all(|n| n.contains("flotilla_proto::v1::")),
        "{names:?}"
    );
}
