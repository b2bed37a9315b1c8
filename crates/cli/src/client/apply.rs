//! `flotilla apply -f`: every document is read, converted and validated first; only a file
//! without problems is applied, each object created or, when it exists, updated at its
//! current resourceVersion (kubectl apply semantics, without kubectl's three-way merge: the
//! document's labels, annotations and spec replace the stored ones; server-set finalizers
//! and the policies' permanent ids are kept).

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;
use flotilla_proto::v1;
use tonic::Status;

use super::conn::{ServerArgs, describe_status};
use super::manifest::{self, DocError, Document, ReadOptions};

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
  policy.karmada.io/v1alpha1   PropagationPolicy, ClusterPropagationPolicy, ClusterTaintPolicy,
                               OverridePolicy, ClusterOverridePolicy (Karmada's fields and
                               spellings: NoExecute, Divided, Weighted, Gracefully, Exists, In,
                               ...; fields Flotilla does not carry yet are refused by name)
  flotilla.io/v1alpha1 or cluster.karmada.io/v1alpha1   Cluster (spec.apiEndpoint, syncMode,
                               region, zones, provider, taints, secretRef; metadata.labels)
  v1 Secret in namespace karmada-cluster   a member's credentials (write-only: never read back)
  v1 List                      its items, each as above (what `flotilla get -o yaml` prints)
  work.karmada.io/v1alpha2     ResourceBinding, ClusterResourceBinding: only to release a held
                               eviction task (gracefulEvictionTasks[].suppressDeletion: false),
                               as Karmada's guide edits it; in a file of their own
  anything else, e.g. apps/v1 Deployment, v1 Namespace, a custom resource
                               a workload (resource template)

Every document is checked before anything is applied: a file with a problem applies nothing.

Examples:
  flotilla apply -f nginx.yaml                  # a Deployment and its PropagationPolicy
  cat policy.yaml | flotilla apply -f -
  flotilla apply -f manifests/ -n staging
  flotilla apply -f nginx.yaml --dry-run        # only validate";

/// GE-9.1: the releases that binding documents ask for, in order (each one a
/// compare-and-swap of its own); stops at the first refusal.
async fn release_tasks(
    args: &ApplyArgs,
    releases: &[manifest::Release],
) -> anyhow::Result<ExitCode> {
    let mut api = if args.dry_run {
        None
    } else {
        Some(args.server.api().await?)
    };
    for release in releases {
        for cluster in &release.clusters {
            let what = format!(
                "{}/{} eviction task of cluster {cluster}",
                release.word, release.name
            );
            match api.as_mut() {
                None => println!("{what} released (dry run)"),
                Some(api) => {
                    super::mutate::release_task(api, &release.namespace, &release.name, cluster, 0)
                        .await?;
                    println!("{what} released");
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

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
    let mut releases = Vec::new();
    let mut errors = Vec::new();
    for (source, text) in read_sources(&args.files)? {
        let parsed = manifest::read(&source, &text, &opts);
        for w in &parsed.warnings {
            eprintln!("warning: {w}");
        }
        documents.extend(parsed.documents);
        releases.extend(parsed.releases);
        errors.extend(parsed.errors);
    }
    errors.extend(manifest::cross_check(&documents));
    if !errors.is_empty() {
        return Err(invalid(&errors, "applied"));
    }
    if !releases.is_empty() {
        if !documents.is_empty() {
            anyhow::bail!(
                "apply bindings in a file of their own: releasing an eviction task is not \
                 part of the transaction that writes the other {} objects",
                documents.len()
            );
        }
        return release_tasks(&args, &releases).await;
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

    // The server admits every object too (what depends on stored state: immutable fields,
    // taints other ClusterTaintPolicies manage, its own switches) and writes them all in one
    // transaction, or none.
    let mut api = args.server.api().await?;
    // One request holds what one gRPC message may (the servers decode up to 1.5 MiB) and one
    // transaction (128 objects). A file that needs several requests is checked by the server
    // as a whole first (a dry run of every request), so a refused object still applies
    // nothing; only a concurrent write can then stop a later request.
    let batches = batches(&documents);
    if batches.len() > 1 {
        for range in &batches {
            apply_batch(&mut api, &documents[range.clone()], true).await?;
        }
    }
    let suffix = if args.dry_run { " (dry run)" } else { "" };
    for (n, range) in batches.iter().enumerate() {
        let batch = &documents[range.clone()];
        let response = apply_batch(&mut api, batch, args.dry_run)
            .await
            .map_err(|e| {
                if n == 0 {
                    e
                } else {
                    e.context(format!(
                        "the first {} objects were applied, the rest was not",
                        range.start
                    ))
                }
            })?;
        for (doc, outcome) in batch.iter().zip(&response.outcomes) {
            println!("{} {}{suffix}", doc.object.handle(), outcome.action);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Bytes of objects per Apply request (below the servers' 1.5 MiB decode limit).
const BATCH_BYTES: usize = 1024 * 1024;
/// Objects per Apply request: one store transaction.
const BATCH_OBJECTS: usize = 128;

/// The documents split into consecutive requests of at most [`BATCH_OBJECTS`] objects and
/// [`BATCH_BYTES`] bytes (an object larger than that alone is sent alone; the server refuses
/// it as too large).
fn batches(documents: &[Document]) -> Vec<std::ops::Range<usize>> {
    let mut ranges = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, doc) in documents.iter().enumerate() {
        let size = prost::Message::encoded_len(&v1::ApplyObject {
            object: Some(doc.object.to_apply()),
        });
        if i > start && (i - start == BATCH_OBJECTS || bytes + size > BATCH_BYTES) {
            ranges.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    if start < documents.len() {
        ranges.push(start..documents.len());
    }
    ranges
}

async fn apply_batch(
    api: &mut v1::api_client::ApiClient<super::conn::Conn>,
    batch: &[Document],
    dry_run: bool,
) -> anyhow::Result<v1::ApplyResponse> {
    let objects = batch
        .iter()
        .map(|d| v1::ApplyObject {
            object: Some(d.object.to_apply()),
        })
        .collect();
    Ok(api
        .apply(v1::ApplyRequest {
            objects,
            dry_run,
            ..Default::default()
        })
        .await
        .map_err(|status| refused(batch, &status))?
        .into_inner())
}

/// The server's refusal, with each `objects[i]` problem named by its document.
fn refused(documents: &[Document], status: &Status) -> anyhow::Error {
    let violations = tonic_types::StatusExt::get_details_bad_request(status)
        .map(|b| b.field_violations)
        .unwrap_or_default();
    if violations.is_empty() {
        return anyhow::anyhow!("nothing was applied: {}", describe_status(status));
    }
    let lines: Vec<String> = violations
        .iter()
        .map(|v| {
            let (doc, field) = v
                .field
                .strip_prefix("objects[")
                .and_then(|rest| rest.split_once(']'))
                .and_then(|(i, field)| Some((documents.get(i.parse::<usize>().ok()?)?, field)))
                .map_or((None, v.field.as_str()), |(d, f)| {
                    (Some(d), f.trim_start_matches('.'))
                });
            match doc {
                Some(doc) => format!(
                    "  {} (document {} of {}): {}: {}",
                    doc.object.handle(),
                    doc.index,
                    doc.source,
                    field,
                    v.description
                ),
                None => format!("  {}: {}", v.field, v.description),
            }
        })
        .collect();
    anyhow::anyhow!(
        "rejected by the server (invalid); nothing was applied:\n{}",
        lines.join("\n")
    )
}

/// The refusal of a file with problems: every problem, and that nothing was `done`
/// (`applied`, `deleted`).
pub(super) fn invalid(errors: &[DocError], done: &str) -> anyhow::Error {
    let mut text = format!(
        "the input has {} problem{}; nothing was {done}:",
        errors.len(),
        if errors.len() == 1 { "" } else { "s" }
    );
    for e in errors {
        text.push_str("\n  ");
        text.push_str(&e.to_string());
    }
    anyhow::anyhow!(text)
}

/// The text of every source: files, `-` (stdin) and the YAML/JSON files of directories.
pub(super) fn read_sources(files: &[String]) -> anyhow::Result<Vec<(String, String)>> {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn config_maps(n: usize, data_bytes: usize) -> Vec<Document> {
        let text: String = (0..n)
            .map(|i| {
                format!(
                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm-{i}}}\ndata: {{a: \"{}\"}}\n---\n",
                    "x".repeat(data_bytes)
                )
            })
            .collect();
        let opts = ReadOptions {
            namespace: "default".into(),
            namespace_explicit: false,
        };
        let parsed = manifest::read("f.yaml", &text, &opts);
        assert!(parsed.errors.is_empty(), "{:?}", parsed.errors);
        parsed.documents
    }

    #[test]
    fn a_large_file_is_split_by_count_and_by_bytes() {
        assert_eq!(
            batches(&config_maps(3, 1)),
            vec![std::ops::Range { start: 0, end: 3 }]
        );
        assert_eq!(batches(&config_maps(300, 1)), [0..128, 128..256, 256..300]);
        // ~400 KB each: two fit in one request of 1 MiB, the third starts the next
        assert_eq!(batches(&config_maps(3, 400_000)), [0..2, 2..3]);
        assert!(batches(&[]).is_empty());
    }
}
