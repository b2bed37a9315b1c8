//! Who may call what: every caller is a [`Principal`], and one table ([`rule`]) says which
//! principals may call each RPC of every Flotilla service (docs/design.md §9).
//!
//! ```text
//!   principal            from a token (tokens file name column)   from a client certificate (CN)
//!   admin                `<sha256> admin` or `<sha256>`           system:flotilla:admin
//!   viewer               `<sha256> viewer`                        system:flotilla:viewer
//!   service:<name>       `<sha256> service:scheduler`             system:flotilla:service:scheduler
//!   agent:<cluster>      `<sha256> agent:edge1`                   system:flotilla:agent:edge1
//! ```
//!
//! [`crate::security::AuthLayer`] finds the caller's principal, checks [`rule`] before any
//! handler runs, and puts the principal into the request's extensions ([`Caller`]). The few
//! methods an agent may call for its own cluster ([`Access::OwnCluster`]) take the cluster
//! from the request body, which the layer does not decode: their handlers call [`confine`]
//! with it, so an agent reaches only its own cluster.

use std::fmt;

/// A caller's identity.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Principal {
    /// May call everything.
    Admin,
    /// May read what is not secret; writes nothing.
    Viewer,
    /// A control-plane service calling another (the api forwarding a dry run, say).
    Service(String),
    /// A Pull cluster's agent: its own cluster's Works, status and heartbeats only.
    Agent(String),
}

/// The prefix of a client certificate's CN that names a principal.
pub const CERT_CN_PREFIX: &str = "system:flotilla:";

/// The service name of the Kubernetes API gateway. Its client certificate
/// (`system:flotilla:service:kube-gateway`) is the one identity that may name another caller,
/// by [`CLIENT_CN_METADATA`]: the gateway verifies a kubectl client certificate itself and
/// passes on its CN, as kube-apiserver's front proxy passes on a user in `X-Remote-User`.
pub const KUBE_GATEWAY: &str = "kube-gateway";

/// The gRPC metadata in which the Kubernetes API gateway names the CN of the client
/// certificate its caller presented (and the gateway verified). Honoured from the
/// gateway's own certificate only; from anyone else it is refused (docs/kubernetes-api.md,
/// "Identity").
pub const CLIENT_CN_METADATA: &str = "x-flotilla-client-cn";

/// A name that is not a principal.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not a principal: admin, viewer, service:<name> or agent:<cluster> \
     (names are lowercase DNS labels)"
)]
pub struct NotAPrincipal(pub String);

impl Principal {
    /// Parses `admin`, `viewer`, `service:<name>` or `agent:<cluster>`.
    pub fn parse(name: &str) -> Result<Self, NotAPrincipal> {
        let bad = || NotAPrincipal(name.to_owned());
        match name {
            "admin" => return Ok(Self::Admin),
            "viewer" => return Ok(Self::Viewer),
            _ => {}
        }
        let (kind, who) = name.split_once(':').ok_or_else(bad)?;
        if !is_dns_label(who) {
            return Err(bad());
        }
        match kind {
            "service" => Ok(Self::Service(who.to_owned())),
            "agent" => Ok(Self::Agent(who.to_owned())),
            _ => Err(bad()),
        }
    }

    /// The principal a client certificate's CN names (`system:flotilla:<principal>`), if any.
    pub fn from_cert_cn(cn: &str) -> Option<Self> {
        Self::parse(cn.strip_prefix(CERT_CN_PREFIX)?).ok()
    }

    /// The Kubernetes API gateway's principal (`service:kube-gateway`).
    pub fn kube_gateway() -> Self {
        Self::Service(KUBE_GATEWAY.to_owned())
    }

    /// The client-certificate CN that names this principal.
    pub fn cert_cn(&self) -> String {
        format!("{CERT_CN_PREFIX}{self}")
    }

    /// Whether `self` may call a method whose rule is `access`. [`Access::OwnCluster`] lets
    /// every agent through here; its handler narrows it with [`confine`].
    pub fn may(&self, access: Access) -> bool {
        matches!(
            (self, access),
            (_, Access::Public)
                | (_, Access::Authenticated)
                | (Self::Admin, _)
                | (Self::Viewer, Access::Read)
                | (
                    Self::Service(_),
                    Access::Read | Access::Private | Access::OwnCluster
                )
                | (Self::Agent(_), Access::OwnCluster)
        )
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Admin => f.write_str("admin"),
            Self::Viewer => f.write_str("viewer"),
            Self::Service(s) => write!(f, "service:{s}"),
            Self::Agent(c) => write!(f, "agent:{c}"),
        }
    }
}

/// A lowercase RFC 1123 label (cluster and service names are).
fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Who may call a method (see [`Principal::may`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Anyone, authenticated or not: health checks and reflection.
    Public,
    /// Every authenticated principal, about itself: `ReviewAccess`.
    Authenticated,
    /// admin, viewer and services: reads of non-secret objects, dry runs.
    Read,
    /// admin and services: reads that can carry secrets (Secrets, Works' manifests are
    /// not this: they are [`Access::OwnCluster`]).
    Private,
    /// admin, services, and an agent for its own cluster only (the handler calls
    /// [`confine`]): a Work's manifests can carry Secrets, so a viewer cannot read them.
    OwnCluster,
    /// admin only: every write.
    Admin,
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Public => "anyone",
            Self::Authenticated => "every authenticated principal",
            Self::Read => "admin, viewer and services",
            Self::Private => "admin and services",
            Self::OwnCluster => "admin, services and the cluster's own agent",
            Self::Admin => "admin",
        })
    }
}

/// The rule of a gRPC path (`/package.Service/Method`); `None` for a method without one,
/// which nobody may call. Every method of every service in `proto/` has a rule (tested
/// against the descriptors).
pub fn rule(path: &str) -> Option<Access> {
    if path.starts_with("/grpc.health.v1.") || path.starts_with("/grpc.reflection.") {
        return Some(Access::Public);
    }
    let (service, method) = path.strip_prefix('/')?.split_once('/')?;
    use Access::*;
    Some(match (service, method) {
        (
            "flotilla.v1.Api",
            "GetCluster"
            | "ListClusters"
            | "WatchClusters"
            | "GetPropagationPolicy"
            | "ListPropagationPolicies"
            | "WatchPropagationPolicies"
            | "GetClusterPropagationPolicy"
            | "ListClusterPropagationPolicies"
            | "WatchClusterPropagationPolicies"
            | "GetOverridePolicy"
            | "ListOverridePolicies"
            | "WatchOverridePolicies"
            | "GetClusterOverridePolicy"
            | "ListClusterOverridePolicies"
            | "WatchClusterOverridePolicies"
            | "GetClusterTaintPolicy"
            | "ListClusterTaintPolicies"
            | "WatchClusterTaintPolicies"
            | "GetWorkload"
            | "ListWorkloads"
            | "WatchWorkloads"
            | "GetResourceBinding"
            | "ListResourceBindings"
            | "WatchResourceBindings"
            | "GetEvent"
            | "ListEvents"
            | "WatchEvents"
            | "GetPeers"
            | "ListShards",
        ) => Read,
        ("flotilla.v1.Api", "ReviewAccess") => Authenticated,
        ("flotilla.v1.Api", "GetSecret" | "ListSecrets") => Private,
        ("flotilla.v1.Api", "GetWork" | "ListWorks" | "WatchWorks") => OwnCluster,
        (
            "flotilla.v1.Api",
            "CreateCluster"
            | "UpdateCluster"
            | "DeleteCluster"
            | "CreatePropagationPolicy"
            | "UpdatePropagationPolicy"
            | "DeletePropagationPolicy"
            | "CreateClusterPropagationPolicy"
            | "UpdateClusterPropagationPolicy"
            | "DeleteClusterPropagationPolicy"
            | "CreateOverridePolicy"
            | "UpdateOverridePolicy"
            | "DeleteOverridePolicy"
            | "CreateClusterOverridePolicy"
            | "UpdateClusterOverridePolicy"
            | "DeleteClusterOverridePolicy"
            | "CreateSecret"
            | "UpdateSecret"
            | "DeleteSecret"
            | "CreateClusterTaintPolicy"
            | "UpdateClusterTaintPolicy"
            | "DeleteClusterTaintPolicy"
            | "CreateWorkload"
            | "UpdateWorkload"
            | "DeleteWorkload"
            | "ReleaseEvictionTask"
            | "RescheduleBinding"
            | "Apply",
        ) => Admin,
        ("flotilla.v1.ClusterHealth", "Heartbeat") => OwnCluster,
        ("flotilla.v1.ClusterHealth", "Assess") => Read,
        ("flotilla.v1.Scheduler", "Simulate") => Read,
        ("flotilla.v1.TaintManager", "Explain") => Read,
        ("flotilla.v1.GracefulEviction", "Assess") => Read,
        ("flotilla.v1.WorkExecutor", "GetWorkStatus" | "Plan") => Read,
        ("flotilla.v1.WorkExecutor", "ReportWorkStatus") => OwnCluster,
        // member-sim's fault controls: a test tool's, and they break things
        ("flotilla.v1.MemberSim", "SetFault") => Admin,
        ("flotilla.v1.MemberSim", "GetStats") => Read,
        _ => return None,
    })
}

/// Whether `principal` may call the method at gRPC `path` for `cluster` (empty: every
/// cluster), and why: the method table ([`rule`]) and, for an agent's own-cluster methods,
/// [`confine`]'s rule. What `ReviewAccess` (`kubectl auth can-i`) answers.
pub fn review(principal: &Principal, path: &str, cluster: &str) -> (bool, String) {
    let shown = crate::status::bounded(path, 256);
    let Some(access) = rule(path) else {
        return (
            false,
            format!("{shown} has no access rule: nobody may call it"),
        );
    };
    if !principal.may(access) {
        return (
            false,
            format!("{principal} may not call {shown} (allowed: {access})"),
        );
    }
    if access == Access::OwnCluster
        && let Principal::Agent(own) = principal
        && own != cluster
    {
        let asked = if cluster.is_empty() {
            "every cluster".to_owned()
        } else {
            format!("cluster {:?}", crate::status::bounded(cluster, 256))
        };
        return (
            false,
            format!("{principal} may call {shown} for its own cluster only, not for {asked}"),
        );
    }
    (
        true,
        format!("{principal} may call {shown} (allowed: {access})"),
    )
}

/// The caller's principal, put into every request's extensions by
/// [`crate::security::AuthLayer`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller(pub Principal);

/// Refuses an agent acting for another cluster than its own: `cluster` is the cluster the
/// request is for (empty: every cluster, which an agent may not ask for). Everyone else the
/// method's rule let through passes. A request without a [`Caller`] (a handler called
/// in-process, not through the layer) passes too.
pub fn confine(extensions: &http::Extensions, cluster: &str) -> Result<(), tonic::Status> {
    match extensions.get::<Caller>() {
        Some(Caller(Principal::Agent(own))) if own != cluster => {
            let asked = if cluster.is_empty() {
                "every cluster".to_owned()
            } else {
                format!("cluster {:?}", crate::status::bounded(cluster, 256))
            };
            Err(tonic::Status::permission_denied(format!(
                "agent:{own} may act only for its own cluster, not for {asked}"
            )))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principals_parse_and_print() {
        for name in ["admin", "viewer", "service:scheduler", "agent:edge-1"] {
            assert_eq!(Principal::parse(name).unwrap().to_string(), name);
        }
        for bad in [
            "",
            "root",
            "agent:",
            "agent:Edge",
            "service:a b",
            "agent:-x",
            "user:bob",
            "alice",
        ] {
            assert!(Principal::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            Principal::from_cert_cn("system:flotilla:agent:edge1"),
            Some(Principal::Agent("edge1".into()))
        );
        assert_eq!(Principal::from_cert_cn("agent:edge1"), None);
        assert_eq!(Principal::from_cert_cn("flotilla-client"), None);
        assert_eq!(
            Principal::Service("api".into()).cert_cn(),
            "system:flotilla:service:api"
        );
    }

    #[test]
    fn who_may_call_what() {
        let agent = Principal::Agent("edge1".into());
        let service = Principal::Service("api".into());
        let cases = [
            (
                "/flotilla.v1.Api/CreateCluster",
                [true, false, false, false],
            ),
            ("/flotilla.v1.Api/Apply", [true, false, false, false]),
            // GE-9.1: only an admin releases a held eviction task
            (
                "/flotilla.v1.Api/ReleaseEvictionTask",
                [true, false, false, false],
            ),
            // SC-3.4: only an admin requests a fresh schedule
            (
                "/flotilla.v1.Api/RescheduleBinding",
                [true, false, false, false],
            ),
            ("/flotilla.v1.Api/ListClusters", [true, true, true, false]),
            ("/flotilla.v1.Api/GetSecret", [true, false, true, false]),
            ("/flotilla.v1.Api/WatchWorks", [true, false, true, true]),
            (
                "/flotilla.v1.ClusterHealth/Heartbeat",
                [true, false, true, true],
            ),
            (
                "/flotilla.v1.WorkExecutor/ReportWorkStatus",
                [true, false, true, true],
            ),
            ("/flotilla.v1.Scheduler/Simulate", [true, true, true, false]),
            ("/grpc.health.v1.Health/Check", [true, true, true, true]),
        ];
        for (path, want) in cases {
            let access = rule(path).unwrap();
            let got = [
                Principal::Admin.may(access),
                Principal::Viewer.may(access),
                service.may(access),
                agent.may(access),
            ];
            assert_eq!(
                got, want,
                "{path} ({access:?}): admin, viewer, service, agent"
            );
        }
        assert_eq!(rule("/flotilla.v1.Api/DropEverything"), None);
        assert_eq!(rule("/other.Service/GetCluster"), None);
        assert_eq!(rule("nonsense"), None);
    }

    /// No method is reachable without a rule: every method of every service Flotilla serves
    /// (its protos, health, reflection), read from the compiled descriptors.
    #[test]
    fn the_method_table_covers_every_method() {
        let known = crate::server::KnownMethods::from_descriptor_sets(&[
            flotilla_proto::FILE_DESCRIPTOR_SET,
            tonic_health::pb::FILE_DESCRIPTOR_SET,
            tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET,
            tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET,
        ]);
        let paths = known.paths();
        assert!(
            paths.len() > 60,
            "the descriptors list {} methods",
            paths.len()
        );
        let missing: Vec<&String> = paths.iter().filter(|p| rule(p).is_none()).collect();
        assert!(
            missing.is_empty(),
            "methods without an access rule: {missing:?}"
        );
        // and the table names no method that does not exist
        for path in [
            "/flotilla.v1.Api/GetCluster",
            "/flotilla.v1.ClusterHealth/Heartbeat",
        ] {
            assert!(paths.iter().any(|p| p == path), "{path}");
        }
    }

    #[test]
    fn a_review_answers_as_the_layer_and_confine_would() {
        let agent = Principal::Agent("edge1".into());
        let cases = [
            (
                &Principal::Admin,
                "/flotilla.v1.Api/Apply",
                "",
                true,
                "admin may call",
            ),
            (
                &Principal::Viewer,
                "/flotilla.v1.Api/Apply",
                "",
                false,
                "allowed: admin",
            ),
            (
                &Principal::Viewer,
                "/flotilla.v1.Api/ListClusters",
                "",
                true,
                "viewer may",
            ),
            (
                &Principal::Viewer,
                "/flotilla.v1.Api/ListWorks",
                "edge1",
                false,
                "viewer may not",
            ),
            (
                &agent,
                "/flotilla.v1.Api/ListWorks",
                "edge1",
                true,
                "agent:edge1 may",
            ),
            (
                &agent,
                "/flotilla.v1.Api/ListWorks",
                "edge2",
                false,
                "not for cluster \"edge2\"",
            ),
            (
                &agent,
                "/flotilla.v1.Api/ListWorks",
                "",
                false,
                "not for every cluster",
            ),
            (
                &agent,
                "/flotilla.v1.Api/ListClusters",
                "",
                false,
                "agent:edge1 may not",
            ),
            (
                &agent,
                "/flotilla.v1.Api/ReviewAccess",
                "",
                true,
                "every authenticated",
            ),
            (
                &Principal::Admin,
                "/flotilla.v1.Api/Nothing",
                "",
                false,
                "no access rule",
            ),
        ];
        for (who, path, cluster, allowed, words) in cases {
            let (got, reason) = review(who, path, cluster);
            assert_eq!(got, allowed, "{who} {path} {cluster:?}: {reason}");
            assert!(
                reason.contains(words),
                "{who} {path}: {reason:?} lacks {words:?}"
            );
        }
    }

    #[test]
    fn an_agent_is_confined_to_its_cluster() {
        let mut ext = http::Extensions::new();
        assert!(confine(&ext, "edge2").is_ok(), "no caller: in-process");
        ext.insert(Caller(Principal::Agent("edge1".into())));
        assert!(confine(&ext, "edge1").is_ok());
        let denied = confine(&ext, "edge2").unwrap_err();
        assert_eq!(denied.code(), tonic::Code::PermissionDenied);
        assert!(
            denied.message().contains("agent:edge1"),
            "{}",
            denied.message()
        );
        assert!(confine(&ext, "").is_err(), "every cluster");
        ext.insert(Caller(Principal::Admin));
        assert!(confine(&ext, "edge2").is_ok());
    }
}
