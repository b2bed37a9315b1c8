//! Commands that change objects: `delete`, `taint`/`untaint`, `cordon`/`uncordon`,
//! `join`/`unjoin`. Cluster changes are compare-and-swap updates at the resourceVersion just
//! read, retried on a conflict, so that a concurrent writer's change is never lost.

use std::process::ExitCode;

use crate::client::conn::Conn;
use flotilla_proto::Resource as _;
use flotilla_proto::v1;
use flotilla_proto::v1::api_client::ApiClient;
use tonic::{Code, Status};

use super::conn::{ServerArgs, status_error};
use super::get::NamespacedServerArgs;
use super::kinds::{ApiObject, Kind, Scope};
use super::words;

/// The taint `cordon` adds: a NoSchedule taint outside `cluster.karmada.io/*` (owned by
/// cluster-health), in the spirit of a node's `node.kubernetes.io/unschedulable`.
pub const CORDON_TAINT_KEY: &str = "cluster.flotilla.io/unschedulable";

/// Keys owned by cluster-health; the api keeps the stored ones on a user update.
const CONTROLLER_TAINT_PREFIX: &str = "cluster.karmada.io/";

/// Arguments of `flotilla delete`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  flotilla delete pp nginx-propagation
  flotilla delete deployment nginx -n default
  flotilla delete ctp detect-cluster-notready
  flotilla delete cluster member3          # same as `flotilla unjoin member3`
  flotilla delete -f nginx.yaml            # every object of the file, as kubectl does")]
pub struct DeleteArgs {
    /// What to delete: clusters, pp, cpp, ctp, workloads (or deployments, configmaps, ...).
    /// Bindings, Works and events are written by the controllers and cannot be deleted.
    #[arg(
        value_parser = Kind::parse,
        value_name = "KIND",
        required_unless_present = "filenames"
    )]
    pub kind: Option<Kind>,

    /// Names to delete (workloads may be named `Kind/name` or `Kind.group/name`).
    #[arg(value_name = "NAME", required_unless_present = "filenames")]
    pub names: Vec<String>,

    /// Delete the objects a file (or directory, or `-` for stdin) describes, as `apply -f`
    /// reads it; every document is read and checked before anything is deleted.
    #[arg(
        short = 'f',
        long = "filename",
        value_name = "FILE",
        conflicts_with_all = ["kind", "names"]
    )]
    pub filenames: Vec<String>,

    #[command(flatten)]
    pub on: NamespacedServerArgs,
}

/// `cluster` or `clusters`: the only kind taints apply to.
fn cluster_kind(text: &str) -> Result<String, String> {
    match text {
        "cluster" | "clusters" => Ok(text.to_owned()),
        other => Err(format!(
            "only clusters have taints (got {other:?}); write `cluster`"
        )),
    }
}

/// A taint to add: `key[=value]:Effect`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaintArg {
    key: String,
    value: String,
    effect: v1::TaintEffect,
}

fn parse_effect(text: &str) -> Result<v1::TaintEffect, String> {
    match text {
        "NoSchedule" => Ok(v1::TaintEffect::NoSchedule),
        "NoExecute" => Ok(v1::TaintEffect::NoExecute),
        "PreferNoSchedule" => Err(
            "PreferNoSchedule is not allowed on clusters (Karmada); use NoSchedule or NoExecute"
                .into(),
        ),
        other => Err(format!(
            "unknown effect {other:?}: use NoSchedule or NoExecute"
        )),
    }
}

/// A taint argument of `flotilla taint`: `key[=value]:Effect` adds, `key[:Effect]-` removes
/// (kubectl's spelling).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaintChange {
    /// Add (or with --overwrite, change) a taint.
    Add(TaintArg),
    /// Remove a taint (every effect of the key without an effect).
    Remove(UntaintArg),
}

fn parse_taint_change(text: &str) -> Result<TaintChange, String> {
    if text.ends_with('-') {
        let u = parse_untaint(text)?;
        if u.key.is_empty() {
            return Err(format!("{text:?} has an empty key"));
        }
        return Ok(TaintChange::Remove(u));
    }
    parse_taint(text).map(TaintChange::Add)
}

fn parse_taint(text: &str) -> Result<TaintArg, String> {
    let (kv, effect) = text
        .rsplit_once(':')
        .ok_or_else(|| format!("{text:?} is not key[=value]:Effect"))?;
    let effect = parse_effect(effect)?;
    let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
    if key.is_empty() {
        return Err(format!("{text:?} has an empty key"));
    }
    Ok(TaintArg {
        key: key.to_owned(),
        value: value.to_owned(),
        effect,
    })
}

/// A taint to remove: `key[:Effect]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UntaintArg {
    key: String,
    effect: Option<v1::TaintEffect>,
}

fn parse_untaint(text: &str) -> Result<UntaintArg, String> {
    let text = text.strip_suffix('-').unwrap_or(text);
    match text.rsplit_once(':') {
        Some((key, effect)) if !effect.contains('/') => Ok(UntaintArg {
            key: key.split_once('=').map_or(key, |(k, _)| k).to_owned(),
            effect: Some(parse_effect(effect)?),
        }),
        _ => Ok(UntaintArg {
            key: text.split_once('=').map_or(text, |(k, _)| k).to_owned(),
            effect: None,
        }),
    }
}

/// Arguments of `flotilla taint`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Taints under cluster.karmada.io/ belong to cluster-health and cannot be set here.

Examples:
  flotilla taint cluster member1 maintenance=true:NoSchedule   # no new placements
  flotilla taint cluster member1 decommission:NoExecute        # evict what does not tolerate it
  flotilla taint cluster member1 maintenance=later:NoSchedule --overwrite
  flotilla taint cluster member1 maintenance:NoSchedule-       # remove it (kubectl's spelling)")]
pub struct TaintArgs {
    /// `cluster` (only clusters have taints).
    #[arg(value_parser = cluster_kind, value_name = "cluster")]
    pub kind: String,

    /// The cluster.
    #[arg(value_name = "NAME")]
    pub name: String,

    /// Taints as `key[=value]:Effect` (Effect is NoSchedule or NoExecute) to add, or
    /// `key[:Effect]-` to remove, as with kubectl.
    #[arg(required = true, value_parser = parse_taint_change, value_name = "KEY[=VALUE]:EFFECT[-]")]
    pub taints: Vec<TaintChange>,

    /// Replace the value of a taint with the same key and effect instead of failing.
    #[arg(long)]
    pub overwrite: bool,

    #[command(flatten)]
    pub server: ServerArgs,
}

/// Arguments of `flotilla untaint`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  flotilla untaint cluster member1 maintenance:NoSchedule
  flotilla untaint cluster member1 maintenance              # every effect of that key")]
pub struct UntaintArgs {
    /// `cluster` (only clusters have taints).
    #[arg(value_parser = cluster_kind, value_name = "cluster")]
    pub kind: String,

    /// The cluster.
    #[arg(value_name = "NAME")]
    pub name: String,

    /// Taints to remove as `key[:Effect]`; without an effect, every effect of the key.
    #[arg(required = true, value_parser = parse_untaint, value_name = "KEY[:EFFECT]")]
    pub taints: Vec<UntaintArg>,

    #[command(flatten)]
    pub server: ServerArgs,
}

/// Arguments of `flotilla cordon` and `flotilla uncordon`: `cluster NAME`, as `taint` takes
/// them (the bare `NAME` is accepted too).
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  flotilla cordon cluster member1      # no new placements on member1 (a NoSchedule taint)
  flotilla uncordon cluster member1")]
pub struct CordonArgs {
    /// `cluster` (as with `taint`), or the cluster's name.
    #[arg(value_name = "cluster")]
    pub kind_or_name: String,

    /// The cluster, after `cluster`.
    #[arg(value_name = "NAME")]
    pub cluster: Option<String>,

    #[command(flatten)]
    pub server: ServerArgs,
}

/// Arguments of `flotilla release`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  flotilla release rb nginx-deployment --cluster member1
  flotilla release crb default-ns --cluster member1     # a ClusterResourceBinding

A task of purge mode Never (application failover's `purgeMode: Never`) keeps the old copy
on its cluster with `suppressDeletion: true` until someone releases it. Karmada's guide says
to edit the binding's task to `suppressDeletion: false`; this command makes that one change
(a compare-and-swap on the binding), and so does `flotilla apply -f` of a binding whose only
change is that edit. The release is recorded as an EvictionTaskReleased event on the
binding; graceful eviction then ends the task and the old copy is deleted.")]
pub struct ReleaseArgs {
    /// `rb` (resourcebindings) or `crb` (clusterresourcebindings).
    #[arg(value_parser = Kind::parse, value_name = "KIND")]
    pub kind: Kind,

    /// The binding's name.
    #[arg(value_name = "NAME")]
    pub name: String,

    /// The cluster whose task to release (`gracefulEvictionTasks[].fromCluster`); repeat it
    /// to release several.
    #[arg(long, value_name = "CLUSTER", required = true)]
    pub cluster: Vec<String>,

    #[command(flatten)]
    pub on: NamespacedServerArgs,
}

/// Arguments of `flotilla reschedule`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  flotilla reschedule rb nginx-deployment
  flotilla reschedule crb default-ns          # a ClusterResourceBinding

The scheduler keeps a binding's current split while its clusters stay candidates (dynamic
weights only place the difference). A reschedule request sets the binding's
`rescheduleTriggeredAt`, and the scheduler divides the replicas again from scratch, from the
clusters' allocatable replicas now: what Karmada's WorkloadRebalancer does for each workload
it names. Replicas that move are moved make before break: a shrinking cluster keeps its
replicas until the growing ones are Ready (see `flotilla explain binding`). The request is
recorded as a RescheduleRequested event on the binding.")]
pub struct RescheduleArgs {
    /// `rb` (resourcebindings) or `crb` (clusterresourcebindings).
    #[arg(value_parser = Kind::parse, value_name = "KIND")]
    pub kind: Kind,

    /// The bindings' names.
    #[arg(value_name = "NAME", required = true)]
    pub names: Vec<String>,

    #[command(flatten)]
    pub on: NamespacedServerArgs,
}

/// `flotilla reschedule`: one `RescheduleBinding` per name, in order; stops at the first
/// refusal (the earlier requests stay, each being complete on its own).
pub async fn reschedule(args: RescheduleArgs) -> anyhow::Result<ExitCode> {
    let (namespace, word) = match args.kind {
        Kind::ResourceBinding => (args.on.ns.namespace.clone(), "resourcebinding"),
        Kind::ClusterResourceBinding => (String::new(), "clusterresourcebinding"),
        other => anyhow::bail!("only a binding can be rescheduled (rb or crb), not {other:?}"),
    };
    let mut api = args.on.server.api().await?;
    for name in &args.names {
        api.reschedule_binding(v1::RescheduleBindingRequest {
            namespace: namespace.clone(),
            name: name.clone(),
            resource_version: 0,
        })
        .await
        .map_err(|s| status_error(format!("requesting a reschedule of {name:?}"), &s))?;
        println!("{word}/{name} reschedule requested");
    }
    Ok(ExitCode::SUCCESS)
}

/// Arguments of `flotilla join`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  flotilla join member4 --endpoint http://127.0.0.1:7414
  flotilla join member1 --kubeconfig ~/.kube/config --context kind-member1
  flotilla join edge1 --endpoint http://10.0.0.7:7410 --pull --region eu-west --zone eu-west-1a \\
      --label env=prod

With --kubeconfig, the context's API server becomes the Cluster's apiEndpoint and its
credentials (a token or a client certificate, and the CA) are stored in the Secret
<--secret-namespace>/<NAME>, which the Cluster's secretRef names, as karmadactl join does;
both are written in one transaction. The credentials are never printed.

With --pull and --agent-token-file, the agent gets a credential of its own: a new random
token is written to that file (mode 0600; give it to the agent as its --token-file) and its
line `<sha256> agent:<NAME>` is added to the services' --auth-tokens-file given here. The
token authenticates the principal agent:<NAME>, which may heartbeat, read Works and report
status for <NAME> only. The services read the file again within 2 s. `flotilla unjoin NAME
--auth-tokens-file FILE` revokes it.

  flotilla join edge1 --pull --endpoint https://edge1.example:6443 \\
      --agent-token-file edge1.token --auth-tokens-file /etc/flotilla/tokens")]
pub struct JoinArgs {
    /// The new cluster's name (a DNS-1123 label of at most 48 characters).
    #[arg(value_name = "NAME")]
    pub name: String,

    /// The member's API endpoint (`http://HOST:PORT` of a member-sim). Required unless
    /// --kubeconfig gives it.
    #[arg(long, value_name = "URL", required_unless_present = "kubeconfig")]
    pub endpoint: Option<String>,

    /// A kubeconfig whose context reaches the member: its server, CA and credentials.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<std::path::PathBuf>,

    /// The kubeconfig context (default: its current context).
    #[arg(long, value_name = "NAME", requires = "kubeconfig")]
    pub context: Option<String>,

    /// Where the credentials Secret goes (Karmada's namespace for member credentials).
    #[arg(long, value_name = "NAMESPACE", default_value = "karmada-cluster")]
    pub secret_namespace: String,

    /// Pull mode: the member's agent heartbeats and pulls its Works (default: Push, the
    /// control plane probes the member and applies Works to it).
    #[arg(long)]
    pub pull: bool,

    /// Region (for field selectors and spread constraints).
    #[arg(long, default_value = "")]
    pub region: String,

    /// Zones (repeatable).
    #[arg(long = "zone", value_name = "ZONE")]
    pub zones: Vec<String>,

    /// Cloud provider.
    #[arg(long, default_value = "")]
    pub provider: String,

    /// Labels as `key=value` (repeatable).
    #[arg(long = "label", value_parser = parse_label, value_name = "KEY=VALUE")]
    pub labels: Vec<(String, String)>,

    /// Pull mode: issue the agent a token of its own (principal agent:NAME) and write it to
    /// this new file. Needs --auth-tokens-file.
    #[arg(long, value_name = "FILE", requires_all = ["pull", "auth_tokens_file"])]
    pub agent_token_file: Option<std::path::PathBuf>,

    /// The services' tokens file (their --auth-tokens-file), to add the agent's token to.
    #[arg(long, value_name = "FILE", requires = "agent_token_file")]
    pub auth_tokens_file: Option<std::path::PathBuf>,

    #[command(flatten)]
    pub server: ServerArgs,
}

fn parse_label(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("{text:?} is not key=value"))
}

/// Arguments of `flotilla unjoin`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
The cluster is marked for deletion while bindings or Works still reference it: cluster-health
taints it cluster.karmada.io/terminating:NoExecute, its workloads are evicted, and it is removed
once nothing references it (A2).

With --auth-tokens-file, every token of the principal agent:NAME is removed from that file
first: the services refuse the agent within 2 s.

Example:
  flotilla unjoin member3
  flotilla unjoin edge1 --auth-tokens-file /etc/flotilla/tokens")]
pub struct UnjoinArgs {
    /// The cluster.
    #[arg(value_name = "NAME")]
    pub name: String,

    /// The services' tokens file, to revoke the cluster's agent tokens in.
    #[arg(long, value_name = "FILE")]
    pub auth_tokens_file: Option<std::path::PathBuf>,

    #[command(flatten)]
    pub server: ServerArgs,
}

/// Runs `flotilla delete`.
pub async fn delete(args: DeleteArgs) -> anyhow::Result<ExitCode> {
    let targets: Vec<(Kind, String, String)> = match &args.kind {
        Some(kind) => args
            .names
            .iter()
            .map(|name| (kind.clone(), args.on.ns.namespace.clone(), name.clone()))
            .collect(),
        None => file_targets(&args)?,
    };
    let mut api = args.on.server.api().await?;
    let mut failed = 0;
    for (kind, ns, name) in &targets {
        let result = delete_one(&mut api, kind, ns, name).await;
        match result {
            Ok((handle, true)) => println!("{handle} deleted"),
            Ok((handle, false)) => println!(
                "{handle} marked for deletion (finalizers or references remain; it goes once \
                 they are released)"
            ),
            Err(e) => {
                eprintln!("error: {e:#}");
                failed += 1;
            }
        }
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The objects `delete -f` names: every document of the files, read and checked as `apply -f`
/// reads them (a file with a problem deletes nothing), as `(kind, namespace, name)`.
fn file_targets(args: &DeleteArgs) -> anyhow::Result<Vec<(Kind, String, String)>> {
    use super::manifest::{self, Object, ReadOptions};
    let opts = ReadOptions {
        namespace: args.on.ns.namespace.clone(),
        namespace_explicit: false,
    };
    let mut documents = Vec::new();
    let mut errors = Vec::new();
    for (source, text) in super::apply::read_sources(&args.filenames)? {
        let parsed = manifest::read(&source, &text, &opts);
        documents.extend(parsed.documents);
        errors.extend(parsed.errors);
    }
    if !errors.is_empty() {
        return Err(super::apply::invalid(&errors, "deleted"));
    }
    if documents.is_empty() {
        anyhow::bail!("no objects found in {}", args.filenames.join(", "));
    }
    Ok(documents
        .iter()
        .map(|doc| {
            let (namespace, name) = doc.object.id();
            let kind = match &doc.object {
                Object::Cluster(_) => Kind::Cluster,
                Object::PropagationPolicy(_) => Kind::PropagationPolicy,
                Object::ClusterPropagationPolicy(_) => Kind::ClusterPropagationPolicy,
                Object::ClusterTaintPolicy(..) => Kind::ClusterTaintPolicy,
                Object::OverridePolicy(_) => Kind::OverridePolicy,
                Object::ClusterOverridePolicy(_) => Kind::ClusterOverridePolicy,
                Object::Secret(_) => Kind::Credentials,
                Object::Workload(w) => {
                    // named exactly, with its group (RM-1)
                    return (
                        Kind::Workload(None),
                        namespace,
                        format!("{}/{name}", segment_of(w)),
                    );
                }
            };
            (kind, namespace, name)
        })
        .collect())
}

async fn delete_one(
    api: &mut ApiClient<Conn>,
    kind: &Kind,
    namespace: &str,
    name: &str,
) -> anyhow::Result<(String, bool)> {
    let what = |k: &str| format!("deleting {k} {name:?}");
    // One delete call, as a `Result` of what to show and whether it is gone: the kind's type
    // (its lowercase name for errors and `kind/name` for the output) or its name and the text
    // to show, and the request (with the namespace where the kind is namespaced).
    macro_rules! delete {
        ($ty:ty, $method:ident($req:ident { $($ns:ident)? })) => {
            delete!(
                <$ty as ApiObject>::NAME,
                format!("{}/{name}", <$ty as ApiObject>::NAME),
                $method($req { $($ns)? })
            )
        };
        ($kind:expr, $shown:expr, $method:ident($req:ident { $($ns:ident)? })) => {
            api.$method(v1::$req {
                $($ns: $ns.into(),)?
                name: name.into(),
                preconditions: None,
            })
            .await
            .map(|r| ($shown, r.into_inner().deleted))
            .map_err(|s| status_error(what($kind), &s))
        };
    }
    match kind {
        Kind::Cluster => delete!(v1::Cluster, delete_cluster(DeleteClusterRequest {})),
        Kind::PropagationPolicy => delete!(
            v1::PropagationPolicy,
            delete_propagation_policy(DeletePropagationPolicyRequest { namespace })
        ),
        Kind::ClusterPropagationPolicy => delete!(
            v1::ClusterPropagationPolicy,
            delete_cluster_propagation_policy(DeleteClusterPropagationPolicyRequest {})
        ),
        Kind::ClusterTaintPolicy => delete!(
            v1::ClusterTaintPolicy,
            delete_cluster_taint_policy(DeleteClusterTaintPolicyRequest {})
        ),
        Kind::OverridePolicy => delete!(
            v1::OverridePolicy,
            delete_override_policy(DeleteOverridePolicyRequest { namespace })
        ),
        Kind::Credentials => delete!(
            "secret",
            format!("secret/{namespace}/{name}"),
            delete_secret(DeleteSecretRequest { namespace })
        ),
        Kind::ClusterOverridePolicy => delete!(
            v1::ClusterOverridePolicy,
            delete_cluster_override_policy(DeleteClusterOverridePolicyRequest {})
        ),
        Kind::Workload(workload_kind) => {
            let scope = Scope {
                namespace: Some(namespace.to_owned()),
                workload_kind: workload_kind.clone(),
                ..Default::default()
            };
            let found = v1::Workload::get_named(api, &scope, name)
                .await
                .map_err(|s| status_error(what("workload"), &s))?;
            let workload = match found.as_slice() {
                [one] => one.clone(),
                [] => anyhow::bail!("workload {name:?} not found in namespace {namespace:?}"),
                many => anyhow::bail!(
                    "{name:?} names {} workloads in {namespace:?} ({}); name one as Kind.group/name",
                    many.len(),
                    many.iter()
                        .map(|w| format!("{}/{}", segment_of(w), w.name()))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            let r = api
                .delete_workload(v1::DeleteWorkloadRequest {
                    namespace: namespace.into(),
                    kind: segment_of(&workload),
                    name: workload.name().to_owned(),
                    preconditions: None,
                })
                .await
                .map_err(|s| status_error(what("workload"), &s))?
                .into_inner();
            Ok((
                format!(
                    "{}/{}",
                    flotilla_core::resource::qualified_kind(
                        flotilla_core::resource::group(&workload.api_version),
                        &workload.kind
                    )
                    .to_ascii_lowercase(),
                    workload.name()
                ),
                r.deleted,
            ))
        }
        Kind::ResourceBinding | Kind::ClusterResourceBinding | Kind::Work | Kind::Event => {
            anyhow::bail!(
                "bindings, Works and events are written by Flotilla's controllers and cannot be \
             deleted; delete the workload or its policy instead"
            )
        }
        Kind::Shard => anyhow::bail!(
            "shards are held by the replicas of a sharded service through etcd leases and \
             cannot be deleted; stop a replica and its shards move to the others"
        ),
    }
}

/// A workload's kind with its group (`Deployment.apps`), which names it exactly (RM-1).
fn segment_of(workload: &v1::Workload) -> String {
    flotilla_core::resource::kind_segment(
        flotilla_core::resource::group(&workload.api_version),
        &workload.kind,
    )
}

/// Reads the cluster, applies `change` to its taints and writes it back at the
/// resourceVersion read (CAS), re-reading and re-deciding on a conflict. `change` returns
/// the message to print, or `None` when there is nothing to write.
async fn update_taints<F>(server: &ServerArgs, name: &str, mut change: F) -> anyhow::Result<String>
where
    F: FnMut(&mut Vec<v1::Taint>) -> anyhow::Result<Option<String>>,
{
    const ATTEMPTS: usize = 8;
    let mut api = server.api().await?;
    for _ in 0..ATTEMPTS {
        let mut cluster = api
            .get_cluster(v1::GetClusterRequest { name: name.into() })
            .await
            .map_err(|s| status_error(format!("reading cluster {name:?}"), &s))?
            .into_inner();
        let spec = cluster.spec.get_or_insert_with(Default::default);
        let Some(message) = change(&mut spec.taints)? else {
            return Ok(format!("cluster/{name} unchanged"));
        };
        // The resourceVersion read is the precondition (ABORTED if someone wrote since).
        cluster.status = None;
        match api
            .update_cluster(v1::UpdateClusterRequest {
                cluster: Some(cluster),
            })
            .await
        {
            Ok(_) => return Ok(message),
            Err(s) if s.code() == Code::Aborted => continue,
            Err(s) => return Err(status_error(format!("updating cluster {name:?}"), &s)),
        }
    }
    anyhow::bail!("cluster {name:?} kept changing; gave up after {ATTEMPTS} attempts")
}

fn check_user_key(key: &str) -> anyhow::Result<()> {
    if key.starts_with(CONTROLLER_TAINT_PREFIX) {
        anyhow::bail!(
            "taints under {CONTROLLER_TAINT_PREFIX} belong to cluster-health (it adds and \
             removes them from the cluster's health); use another key"
        );
    }
    Ok(())
}

/// Runs `flotilla taint`.
pub async fn taint(args: TaintArgs) -> anyhow::Result<ExitCode> {
    let mut wanted = Vec::new();
    let mut unwanted = Vec::new();
    for change in &args.taints {
        match change {
            TaintChange::Add(t) => {
                check_user_key(&t.key)?;
                wanted.push(t.clone());
            }
            TaintChange::Remove(u) => {
                check_user_key(&u.key)?;
                unwanted.push(u.clone());
            }
        }
    }
    let overwrite = args.overwrite;
    let message = update_taints(&args.server, &args.name, |taints| {
        let mut changed = remove_taints(&args.name, taints, &unwanted)?;
        for t in &wanted {
            let effect = t.effect as i32;
            match taints
                .iter_mut()
                .find(|x| x.key == t.key && x.effect == effect)
            {
                Some(existing) if existing.value == t.value => {}
                Some(existing) if overwrite => {
                    existing.value.clone_from(&t.value);
                    changed = true;
                }
                Some(existing) => anyhow::bail!(
                    "cluster {:?} already has taint {}; use --overwrite to change its value",
                    args.name,
                    words::taint(existing)
                ),
                None => {
                    taints.push(v1::Taint {
                        key: t.key.clone(),
                        value: t.value.clone(),
                        effect,
                        // The api stamps timeAdded on new NoExecute taints.
                        time_added: None,
                        trace_context: String::new(),
                    });
                    changed = true;
                }
            }
        }
        Ok(changed.then(|| {
            let verb = if wanted.is_empty() {
                "untainted"
            } else {
                "tainted"
            };
            format!("cluster/{} {verb}", args.name)
        }))
    })
    .await?;
    println!("{message}");
    Ok(ExitCode::SUCCESS)
}

/// Removes each of `unwanted` from `taints` (a key without an effect: every effect of it);
/// a taint the cluster does not have is an error, as in kubectl. Whether anything changed.
fn remove_taints(
    cluster: &str,
    taints: &mut Vec<v1::Taint>,
    unwanted: &[UntaintArg],
) -> anyhow::Result<bool> {
    for u in unwanted {
        let matches =
            |x: &v1::Taint| x.key == u.key && u.effect.is_none_or(|e| x.effect == e as i32);
        if !taints.iter().any(matches) {
            anyhow::bail!(
                "cluster {cluster:?} has no taint {}{}",
                u.key,
                u.effect
                    .map(|e| format!(":{}", words::effect(e as i32)))
                    .unwrap_or_default()
            );
        }
        taints.retain(|x| !matches(x));
    }
    Ok(!unwanted.is_empty())
}

/// Runs `flotilla untaint`.
pub async fn untaint(args: UntaintArgs) -> anyhow::Result<ExitCode> {
    for t in &args.taints {
        check_user_key(&t.key)?;
    }
    let unwanted = args.taints.clone();
    let message = update_taints(&args.server, &args.name, |taints| {
        remove_taints(&args.name, taints, &unwanted)?;
        Ok(Some(format!("cluster/{} untainted", args.name)))
    })
    .await?;
    println!("{message}");
    Ok(ExitCode::SUCCESS)
}

/// Runs `flotilla cordon` (`cordon` true) or `flotilla uncordon`.
/// `flotilla release`: one `ReleaseEvictionTask` per cluster, in order; stops at the first
/// refusal (the earlier releases stay, each being complete on its own).
pub async fn release(args: ReleaseArgs) -> anyhow::Result<ExitCode> {
    let (namespace, word) = match args.kind {
        Kind::ResourceBinding => (args.on.ns.namespace.clone(), "resourcebinding"),
        Kind::ClusterResourceBinding => (String::new(), "clusterresourcebinding"),
        other => anyhow::bail!("only a binding's task can be released (rb or crb), not {other:?}"),
    };
    let mut api = args.on.server.api().await?;
    for cluster in &args.cluster {
        release_task(&mut api, &namespace, &args.name, cluster, 0).await?;
        println!(
            "{word}/{} released the eviction task of cluster {cluster}",
            args.name
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Releases `cluster`'s task of the binding (`namespace` empty: a ClusterResourceBinding),
/// at `resource_version` if it is not 0.
pub async fn release_task(
    api: &mut ApiClient<Conn>,
    namespace: &str,
    name: &str,
    cluster: &str,
    resource_version: i64,
) -> anyhow::Result<v1::ResourceBinding> {
    api.release_eviction_task(v1::ReleaseEvictionTaskRequest {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        cluster: cluster.to_owned(),
        resource_version,
    })
    .await
    .map(tonic::Response::into_inner)
    .map_err(|s| {
        status_error(
            format!("releasing the task of cluster {cluster:?} of {name:?}"),
            &s,
        )
    })
}

pub async fn cordon(args: CordonArgs, cordon: bool) -> anyhow::Result<ExitCode> {
    let name = match &args.cluster {
        Some(name) => {
            cluster_kind(&args.kind_or_name).map_err(anyhow::Error::msg)?;
            name.clone()
        }
        None => args.kind_or_name.clone(),
    };
    let message = update_taints(&args.server, &name, |taints| {
        let effect = v1::TaintEffect::NoSchedule as i32;
        let present = taints
            .iter()
            .any(|t| t.key == CORDON_TAINT_KEY && t.effect == effect);
        Ok(match (cordon, present) {
            (true, true) | (false, false) => None,
            (true, false) => {
                taints.push(v1::Taint {
                    key: CORDON_TAINT_KEY.into(),
                    value: String::new(),
                    effect,
                    time_added: None,
                    trace_context: String::new(),
                });
                Some(format!("cluster/{name} cordoned"))
            }
            (false, true) => {
                taints.retain(|t| !(t.key == CORDON_TAINT_KEY && t.effect == effect));
                Some(format!("cluster/{name} uncordoned"))
            }
        })
    })
    .await?;
    if message.ends_with("unchanged") {
        println!(
            "cluster/{name} already {}",
            if cordon { "cordoned" } else { "uncordoned" }
        );
    } else {
        println!("{message}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The Secret holding a member's credentials, in Karmada's keys.
fn credentials_secret(
    namespace: &str,
    name: &str,
    creds: &super::kubeconfig::Credentials,
) -> v1::Secret {
    use secrecy::ExposeSecret as _;
    let mut data = std::collections::BTreeMap::new();
    if let Some(token) = &creds.token {
        data.insert(
            flotilla_member::SECRET_TOKEN.to_owned(),
            token.expose_secret().as_bytes().to_vec(),
        );
    }
    if let Some(ca) = &creds.ca {
        data.insert(flotilla_member::SECRET_CA_BUNDLE.to_owned(), ca.clone());
    }
    if let Some(client) = &creds.client_cert {
        data.insert(
            flotilla_member::SECRET_TLS_CERT.to_owned(),
            client.cert.clone(),
        );
        data.insert(
            flotilla_member::SECRET_TLS_KEY.to_owned(),
            client.key.expose_secret().to_vec(),
        );
    }
    v1::Secret {
        metadata: Some(v1::ObjectMeta {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            ..Default::default()
        }),
        data,
        r#type: "Opaque".into(),
    }
}

/// Runs `flotilla join`.
pub async fn join(args: JoinArgs) -> anyhow::Result<ExitCode> {
    // the agent's credential is checked before anything is written
    let agent_principal = flotilla_runtime::Principal::Agent(args.name.clone());
    if let (Some(token_file), Some(tokens)) = (&args.agent_token_file, &args.auth_tokens_file) {
        anyhow::ensure!(
            !token_file.exists(),
            "{} exists already; remove it or choose another file (a token is never overwritten)",
            token_file.display()
        );
        flotilla_runtime::AuthTokens::from_file(tokens)?;
        flotilla_runtime::Principal::parse(&agent_principal.to_string())
            .map_err(|e| anyhow::anyhow!("cluster name {:?}: {e}", args.name))?;
    }
    let creds = match &args.kubeconfig {
        Some(path) => Some(super::kubeconfig::read(path, args.context.as_deref())?),
        None => None,
    };
    let endpoint = match (&args.endpoint, &creds) {
        (Some(e), _) => e.clone(),
        (None, Some(c)) => c.server.clone(),
        (None, None) => anyhow::bail!("--endpoint or --kubeconfig is required"),
    };
    let secret_ref = creds.as_ref().map(|_| v1::SecretReference {
        namespace: args.secret_namespace.clone(),
        name: args.name.clone(),
    });
    let cluster = v1::Cluster {
        metadata: Some(v1::ObjectMeta {
            name: args.name.clone(),
            labels: args.labels.iter().cloned().collect(),
            ..Default::default()
        }),
        spec: Some(v1::ClusterSpec {
            sync_mode: if args.pull {
                v1::SyncMode::Pull
            } else {
                v1::SyncMode::Push
            } as i32,
            api_endpoint: endpoint.clone(),
            provider: args.provider.clone(),
            region: args.region.clone(),
            zones: args.zones.clone(),
            secret_ref,
            insecure_skip_tls_verification: creds.as_ref().is_some_and(|c| c.insecure),
            ..Default::default()
        }),
        status: None,
    };
    let mut api = args.server.api().await?;
    match &creds {
        None => {
            api.create_cluster(v1::CreateClusterRequest {
                cluster: Some(cluster),
            })
            .await
            .map_err(|s: Status| status_error(format!("joining cluster {:?}", args.name), &s))?;
        }
        Some(c) => {
            use v1::apply_object::Object;
            // the Secret and the Cluster in one transaction: no Cluster without its Secret
            let secret = credentials_secret(&args.secret_namespace, &args.name, c);
            let objects = vec![
                v1::ApplyObject {
                    object: Some(Object::Secret(secret)),
                },
                v1::ApplyObject {
                    object: Some(Object::Cluster(cluster)),
                },
            ];
            api.apply(v1::ApplyRequest {
                objects,
                dry_run: false,
                ..Default::default()
            })
            .await
            .map_err(|s: Status| status_error(format!("joining cluster {:?}", args.name), &s))?;
            println!(
                "secret/{}/{} configured (credentials of context {:?})",
                args.secret_namespace, args.name, c.context
            );
        }
    }
    println!(
        "cluster/{} joined ({} mode, {})",
        args.name,
        if args.pull { "Pull" } else { "Push" },
        endpoint
    );
    if let (Some(token_file), Some(tokens)) = (&args.agent_token_file, &args.auth_tokens_file) {
        issue_agent_token(token_file, tokens, &agent_principal)?;
        println!(
            "{agent_principal}: token written to {} (give it to the agent as --token-file); \
             {} lists it (the services use it within 2 s)",
            token_file.display(),
            tokens.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes a new token to `token_file` (created, mode 0600) and its line to `tokens`.
fn issue_agent_token(
    token_file: &std::path::Path,
    tokens: &std::path::Path,
    principal: &flotilla_runtime::Principal,
) -> anyhow::Result<()> {
    use std::io::Write as _;
    let token = flotilla_runtime::security::new_token()
        .map_err(|_| anyhow::anyhow!("the operating system's random generator failed"))?;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(token_file)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", token_file.display()))?;
    file.write_all(token.as_bytes())
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", token_file.display()))?;
    if let Err(e) = flotilla_runtime::security::add_token(tokens, &token, principal) {
        // no token file that no service accepts
        let _ = std::fs::remove_file(token_file);
        return Err(e.into());
    }
    Ok(())
}

/// Runs `flotilla unjoin`.
pub async fn unjoin(args: UnjoinArgs) -> anyhow::Result<ExitCode> {
    if let Some(tokens) = &args.auth_tokens_file {
        let principal = flotilla_runtime::Principal::Agent(args.name.clone());
        let removed = flotilla_runtime::security::revoke_principal(tokens, &principal)?;
        println!(
            "{principal}: {removed} token(s) revoked in {} (refused within 2 s)",
            tokens.display()
        );
    }
    let mut api = args.server.api().await?;
    let (handle, deleted) = delete_one(&mut api, &Kind::Cluster, "", &args.name).await?;
    if deleted {
        println!("{handle} unjoined");
    } else {
        println!(
            "{handle} marked for deletion: its workloads are being evicted; it is removed once \
             no binding or Work references it"
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taint_arguments_parse_like_kubectl() {
        assert_eq!(
            parse_taint("maintenance=true:NoSchedule").unwrap(),
            TaintArg {
                key: "maintenance".into(),
                value: "true".into(),
                effect: v1::TaintEffect::NoSchedule
            }
        );
        assert_eq!(
            parse_taint("example.com/decommission:NoExecute").unwrap(),
            TaintArg {
                key: "example.com/decommission".into(),
                value: String::new(),
                effect: v1::TaintEffect::NoExecute
            }
        );
        assert!(parse_taint("k=v").is_err());
        assert!(parse_taint("k:PreferNoSchedule").is_err());
        // `taint … KEY[:EFFECT]-` removes, as kubectl spells it
        assert_eq!(
            parse_taint_change("k:NoSchedule-").unwrap(),
            TaintChange::Remove(UntaintArg {
                key: "k".into(),
                effect: Some(v1::TaintEffect::NoSchedule)
            })
        );
        assert_eq!(
            parse_taint_change("k-").unwrap(),
            TaintChange::Remove(UntaintArg {
                key: "k".into(),
                effect: None
            })
        );
        assert!(matches!(
            parse_taint_change("k=v:NoExecute").unwrap(),
            TaintChange::Add(_)
        ));
        assert!(parse_taint_change("-").is_err());
        assert!(parse_taint(":NoSchedule").is_err());
        assert_eq!(
            parse_untaint("example.com/k").unwrap(),
            UntaintArg {
                key: "example.com/k".into(),
                effect: None
            }
        );
        assert_eq!(
            parse_untaint("k:NoExecute-").unwrap(),
            UntaintArg {
                key: "k".into(),
                effect: Some(v1::TaintEffect::NoExecute)
            }
        );
        assert!(check_user_key("cluster.karmada.io/not-ready").is_err());
        assert!(check_user_key(CORDON_TAINT_KEY).is_ok());
    }
}
