//! `flotilla apply -f`: every document is read, converted and validated first; only a file
//! without problems is applied, each object created or, when it exists, updated at its
//! current resourceVersion (kubectl apply semantics, without kubectl's three-way merge: the
//! document's labels, annotations and spec replace the stored ones; server-set finalizers
//! and the policies' permanent ids are kept).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use crate::client::conn::Conn;
use anyhow::Context as _;
use flotilla_core::types as core;
use flotilla_core::validation::{
    validate_cluster_taint_policy_conflicts, validate_propagation_policy_update,
};
use flotilla_proto::v1;
use flotilla_proto::v1::api_client::ApiClient;
use flotilla_proto::{Resource, v1::ObjectMeta};
use tonic::{Code, Status};

use super::conn::{ServerArgs, describe_status};
use super::kinds::list_all;
use super::manifest::{self, DocError, Document, Object, ReadOptions};

/// Arguments of `flotilla apply`.
#[derive(Debug, clap::Args)]
#[command(after_help = APPLY_EXAMPLES)]
pub struct ApplyArgs {
    /// YAML or JSON files with one or more documents (separated by `---`), directories of
    /// `*.yaml`, `*.yml` and `*.json` files, or `-` for standard input.
    #[arg(short = 'f', long = "filename", required = true, value_name = "FILE")]
    pub files: Vec<String>,

    /// Namespace of namespaced documents that name none (default `default`); documents that
    /// name another namespace are rejected when this is given.
    #[arg(
        short = 'n',
        long,
        env = "FLOTILLA_NAMESPACE",
        value_name = "NAMESPACE"
    )]
    pub namespace: Option<String>,

    /// Only read and validate the files (client side); apply nothing.
    #[arg(long)]
    pub dry_run: bool,

    #[command(flatten)]
    pub server: ServerArgs,
}

const APPLY_EXAMPLES: &str = "\
Accepted documents:
  policy.karmada.io/v1alpha1   PropagationPolicy, ClusterPropagationPolicy, ClusterTaintPolicy
                               (Karmada's fields and spellings: NoExecute, Divided, Weighted,
                               Gracefully, Exists, In, ...)
  flotilla.io/v1alpha1 or cluster.karmada.io/v1alpha1   Cluster (spec.apiEndpoint, syncMode,
                               region, zones, provider, taints; metadata.labels)
  anything else, e.g. apps/v1 Deployment   a workload (resource template)

Every document is checked before anything is applied: a file with a problem applies nothing.

Examples:
  flotilla apply -f nginx.yaml                  # a Deployment and its PropagationPolicy
  cat policy.yaml | flotilla apply -f -
  flotilla apply -f manifests/ -n staging
  flotilla apply -f nginx.yaml --dry-run        # only validate";

/// Runs `flotilla apply`.
pub async fn run(args: ApplyArgs) -> anyhow::Result<ExitCode> {
    let opts = ReadOptions {
        namespace: args
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned()),
        namespace_explicit: args.namespace.is_some(),
    };
    let mut documents = Vec::new();
    let mut errors = Vec::new();
    for (source, text) in read_sources(&args.files)? {
        let parsed = manifest::read(&source, &text, &opts);
        for w in &parsed.warnings {
            eprintln!("warning: {w}");
        }
        documents.extend(parsed.documents);
        errors.extend(parsed.errors);
    }
    errors.extend(manifest::cross_check(&documents));
    if !errors.is_empty() {
        return Err(invalid(&errors));
    }
    if documents.is_empty() {
        anyhow::bail!("no objects found in {}", args.files.join(", "));
    }
    if args.dry_run {
        for doc in &documents {
            println!("{} valid (dry run)", doc.object.handle());
        }
        return Ok(ExitCode::SUCCESS);
    }

    let mut api = args.server.api().await?;
    // Pre-flight: read what exists, and check the rules that depend on it, still before
    // anything is written.
    let mut current = Vec::with_capacity(documents.len());
    for doc in &documents {
        let found = fetch_current(&mut api, &doc.object)
            .await
            .map_err(|s| describe_call("reading", doc, &s))?;
        current.push(found);
    }
    let errors = preflight(&mut api, &documents, &current).await?;
    if !errors.is_empty() {
        return Err(invalid(&errors));
    }

    let mut failed = Vec::new();
    for (doc, found) in documents.iter().zip(current) {
        match apply_one(&mut api, &doc.object, found).await {
            Ok(outcome) => println!("{} {outcome}", doc.object.handle()),
            Err(status) => {
                let message = describe_call("applying", doc, &status);
                eprintln!("error: {message:#}");
                failed.push(doc.object.handle());
            }
        }
    }
    if failed.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        anyhow::bail!(
            "{} of {} objects were not applied: {}",
            failed.len(),
            documents.len(),
            failed.join(", ")
        )
    }
}

fn invalid(errors: &[DocError]) -> anyhow::Error {
    let mut text = format!(
        "the input has {} problem{}; nothing was applied:",
        errors.len(),
        if errors.len() == 1 { "" } else { "s" }
    );
    for e in errors {
        text.push_str("\n  ");
        text.push_str(&e.to_string());
    }
    anyhow::anyhow!(text)
}

fn describe_call(what: &str, doc: &Document, status: &Status) -> anyhow::Error {
    anyhow::anyhow!(
        "{}: document {} ({}): {what} it: {}",
        doc.source,
        doc.index,
        manifest::describe(&doc.object),
        describe_status(status)
    )
}

/// The text of every source: files, `-` (stdin) and the YAML/JSON files of directories.
fn read_sources(files: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for file in files {
        if file == "-" {
            let text = std::io::read_to_string(std::io::stdin()).context("reading stdin")?;
            out.push(("-".to_owned(), text));
            continue;
        }
        let path = Path::new(file);
        if path.is_dir() {
            let mut entries: Vec<_> = std::fs::read_dir(path)
                .with_context(|| format!("reading directory {file}"))?
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.is_file()
                        && p.extension()
                            .and_then(|e| e.to_str())
                            .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
                })
                .collect();
            entries.sort();
            for p in entries {
                let text = std::fs::read_to_string(&p)
                    .with_context(|| format!("reading {}", p.display()))?;
                out.push((p.display().to_string(), text));
            }
        } else {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {file}"))?;
            out.push((file.clone(), text));
        }
    }
    Ok(out)
}

/// What exists already for a document.
#[derive(Clone, Debug)]
enum Current {
    Cluster(v1::Cluster),
    PropagationPolicy(v1::PropagationPolicy),
    ClusterPropagationPolicy(v1::ClusterPropagationPolicy),
    ClusterTaintPolicy(v1::ClusterTaintPolicy),
    Workload(v1::Workload),
}

impl Current {
    fn meta(&self) -> ObjectMeta {
        let meta = match self {
            Current::Cluster(o) => o.meta(),
            Current::PropagationPolicy(o) => o.meta(),
            Current::ClusterPropagationPolicy(o) => o.meta(),
            Current::ClusterTaintPolicy(o) => o.meta(),
            Current::Workload(o) => o.meta(),
        };
        meta.cloned().unwrap_or_default()
    }
}

fn found<T>(r: Result<tonic::Response<T>, Status>) -> Result<Option<T>, Status> {
    match r {
        Ok(resp) => Ok(Some(resp.into_inner())),
        Err(s) if s.code() == Code::NotFound => Ok(None),
        Err(s) => Err(s),
    }
}

async fn fetch_current(
    api: &mut ApiClient<Conn>,
    object: &Object,
) -> Result<Option<Current>, Status> {
    let (namespace, name) = object.id();
    Ok(match object {
        Object::Cluster(_) => {
            found(api.get_cluster(v1::GetClusterRequest { name }).await)?.map(Current::Cluster)
        }
        Object::PropagationPolicy(_) => found(
            api.get_propagation_policy(v1::GetPropagationPolicyRequest { namespace, name })
                .await,
        )?
        .map(Current::PropagationPolicy),
        Object::ClusterPropagationPolicy(_) => found(
            api.get_cluster_propagation_policy(v1::GetClusterPropagationPolicyRequest { name })
                .await,
        )?
        .map(Current::ClusterPropagationPolicy),
        Object::ClusterTaintPolicy(..) => found(
            api.get_cluster_taint_policy(v1::GetClusterTaintPolicyRequest { name })
                .await,
        )?
        .map(Current::ClusterTaintPolicy),
        Object::Workload(w) => found(
            api.get_workload(v1::GetWorkloadRequest {
                namespace,
                kind: w.kind.clone(),
                name,
            })
            .await,
        )?
        .map(Current::Workload),
    })
}

/// The rules that depend on what is stored: immutable policy fields (`schedulerName`, PD-3)
/// and taints already managed by another ClusterTaintPolicy (CH-16.2).
async fn preflight(
    api: &mut ApiClient<Conn>,
    documents: &[Document],
    current: &[Option<Current>],
) -> anyhow::Result<Vec<DocError>> {
    let mut errors = Vec::new();
    for (doc, found) in documents.iter().zip(current) {
        let pair = match (&doc.object, found) {
            (Object::PropagationPolicy(new), Some(Current::PropagationPolicy(old))) => Some((
                core::PropagationPolicy::try_from(old.clone()),
                core::PropagationPolicy::try_from(new.clone()),
            )),
            (
                Object::ClusterPropagationPolicy(new),
                Some(Current::ClusterPropagationPolicy(old)),
            ) => Some((
                core::PropagationPolicy::try_from(old.clone()),
                core::PropagationPolicy::try_from(new.clone()),
            )),
            _ => None,
        };
        if let Some((Ok(old), Ok(mut new))) = pair {
            // The server keeps the stored permanent id when the document has none (PD-1.6).
            for (k, v) in &old.meta.labels {
                if k.ends_with("/permanent-id") {
                    new.meta
                        .labels
                        .entry(k.clone())
                        .or_insert_with(|| v.clone());
                }
            }
            if new.spec.scheduler_name.is_empty() {
                new.spec.scheduler_name = core::DEFAULT_SCHEDULER_NAME.to_owned();
            }
            for e in validate_propagation_policy_update(&old, &new) {
                errors.push(manifest::field_error(doc, e));
            }
        }
    }
    if documents
        .iter()
        .any(|d| matches!(d.object, Object::ClusterTaintPolicy(..)))
    {
        let (stored, _) = list_all::<v1::ClusterTaintPolicy>(api, &Default::default())
            .await
            .map_err(|s| {
                anyhow::anyhow!("listing cluster taint policies: {}", describe_status(&s))
            })?;
        let in_file: BTreeMap<String, core::ClusterTaintPolicy> = documents
            .iter()
            .filter_map(|d| match &d.object {
                Object::ClusterTaintPolicy(_, p) => Some((p.meta.name.clone(), p.clone())),
                _ => None,
            })
            .collect();
        // Stored policies that this file does not replace.
        let others: Vec<core::ClusterTaintPolicy> = stored
            .into_iter()
            .filter(|p| !in_file.contains_key(p.name()))
            .filter_map(|p| core::ClusterTaintPolicy::try_from(p).ok())
            .collect();
        for doc in documents {
            if let Object::ClusterTaintPolicy(_, policy) = &doc.object {
                for e in validate_cluster_taint_policy_conflicts(policy, &others) {
                    errors.push(manifest::field_error(doc, e));
                }
            }
        }
    }
    Ok(errors)
}

/// Creates or updates one object; retries when it changes or appears meanwhile.
async fn apply_one(
    api: &mut ApiClient<Conn>,
    object: &Object,
    mut found: Option<Current>,
) -> Result<&'static str, Status> {
    const ATTEMPTS: usize = 5;
    let mut last = Status::aborted("no attempt made");
    for _ in 0..ATTEMPTS {
        let result = match &found {
            None => create(api, object).await.map(|()| "created"),
            Some(cur) => update(api, object, cur).await,
        };
        match result {
            Ok(outcome) => return Ok(outcome),
            Err(s)
                if matches!(
                    s.code(),
                    Code::Aborted | Code::AlreadyExists | Code::NotFound
                ) =>
            {
                // Someone else wrote it between our read and our write: read and go again.
                last = s;
                found = fetch_current(api, object).await?;
            }
            Err(s) => return Err(s),
        }
    }
    Err(last)
}

async fn create(api: &mut ApiClient<Conn>, object: &Object) -> Result<(), Status> {
    match object.clone() {
        Object::Cluster(c) => {
            api.create_cluster(v1::CreateClusterRequest { cluster: Some(c) })
                .await?;
        }
        Object::PropagationPolicy(p) => {
            api.create_propagation_policy(v1::CreatePropagationPolicyRequest {
                propagation_policy: Some(p),
            })
            .await?;
        }
        Object::ClusterPropagationPolicy(p) => {
            api.create_cluster_propagation_policy(v1::CreateClusterPropagationPolicyRequest {
                cluster_propagation_policy: Some(p),
            })
            .await?;
        }
        Object::ClusterTaintPolicy(p, _) => {
            api.create_cluster_taint_policy(v1::CreateClusterTaintPolicyRequest {
                cluster_taint_policy: Some(p),
            })
            .await?;
        }
        Object::Workload(w) => {
            api.create_workload(v1::CreateWorkloadRequest { workload: Some(w) })
                .await?;
        }
    }
    Ok(())
}

/// The document's metadata on top of the stored object's: resourceVersion (the CAS
/// precondition), and finalizers and labels the server set.
fn merge_meta<R: Resource>(new: &mut R, current: &ObjectMeta) {
    let meta = new.meta_mut();
    meta.resource_version = current.resource_version;
    if meta.finalizers.is_empty() {
        meta.finalizers.clone_from(&current.finalizers);
    }
    for (k, v) in &current.labels {
        if k.ends_with("/permanent-id") {
            meta.labels.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
}

async fn update(
    api: &mut ApiClient<Conn>,
    object: &Object,
    current: &Current,
) -> Result<&'static str, Status> {
    let before = current.meta();
    let after: ObjectMeta = match object.clone() {
        Object::Cluster(mut c) => {
            merge_meta(&mut c, &before);
            let r = api
                .update_cluster(v1::UpdateClusterRequest { cluster: Some(c) })
                .await?;
            r.into_inner().metadata.unwrap_or_default()
        }
        Object::PropagationPolicy(mut p) => {
            merge_meta(&mut p, &before);
            let r = api
                .update_propagation_policy(v1::UpdatePropagationPolicyRequest {
                    propagation_policy: Some(p),
                })
                .await?;
            r.into_inner().metadata.unwrap_or_default()
        }
        Object::ClusterPropagationPolicy(mut p) => {
            merge_meta(&mut p, &before);
            let r = api
                .update_cluster_propagation_policy(v1::UpdateClusterPropagationPolicyRequest {
                    cluster_propagation_policy: Some(p),
                })
                .await?;
            r.into_inner().metadata.unwrap_or_default()
        }
        Object::ClusterTaintPolicy(mut p, _) => {
            merge_meta(&mut p, &before);
            let r = api
                .update_cluster_taint_policy(v1::UpdateClusterTaintPolicyRequest {
                    cluster_taint_policy: Some(p),
                })
                .await?;
            r.into_inner().metadata.unwrap_or_default()
        }
        Object::Workload(mut w) => {
            merge_meta(&mut w, &before);
            let r = api
                .update_workload(v1::UpdateWorkloadRequest { workload: Some(w) })
                .await?;
            r.into_inner().metadata.unwrap_or_default()
        }
    };
    let unchanged = after.generation == before.generation
        && after.labels == before.labels
        && after.annotations == before.annotations;
    Ok(if unchanged { "unchanged" } else { "configured" })
}
