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

    // The server admits every object too (what depends on stored state: immutable fields,
    // taints other ClusterTaintPolicies manage, its own switches) and writes them all in one
    // transaction, or none.
    let mut api = args.server.api().await?;
    let objects = documents
        .iter()
        .map(|d| v1::ApplyObject {
            object: Some(d.object.to_apply()),
        })
        .collect();
    let response = api
        .apply(v1::ApplyRequest {
            objects,
            dry_run: args.dry_run,
        })
        .await
        .map_err(|status| refused(&documents, &status))?
        .into_inner();
    let suffix = if args.dry_run { " (dry run)" } else { "" };
    for (doc, outcome) in documents.iter().zip(&response.outcomes) {
        println!("{} {}{suffix}", doc.object.handle(), outcome.action);
    }
    Ok(ExitCode::SUCCESS)
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
