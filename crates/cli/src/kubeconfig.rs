//! `flotilla kubeconfig`: prints a kubeconfig for Flotilla's Kubernetes API (the gateway,
//! docs/kubernetes-api.md), with a principal's token from a file, so that kubectl needs only
//! `--kubeconfig`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use flotilla_kube::kubeconfig::{KubeconfigFor, render, write_private};

/// Print (or write) a kubeconfig for Flotilla's Kubernetes API.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    flotilla kubeconfig > flotilla.kubeconfig   (flotilla up's, on 127.0.0.1:7406)\n  \
    flotilla kubeconfig --server https://cp.example:7406 --certificate-authority ca.pem \
    --token-file admin.token -o cp.kubeconfig\n  \
    kubectl --kubeconfig cp.kubeconfig get pp -A")]
pub struct KubeconfigArgs {
    /// The Kubernetes API's URL (http:// or https://).
    #[arg(long, default_value = "http://127.0.0.1:7406", value_name = "URL")]
    server: String,

    /// A file holding the principal's bearer token (one of the api's --auth-tokens-file). The
    /// token is written into the kubeconfig; kubectl sends it over https only.
    #[arg(long, value_name = "PATH")]
    token_file: Option<PathBuf>,

    /// The CA certificate (PEM) that signed the server's certificate, embedded.
    #[arg(long, value_name = "PEM")]
    certificate_authority: Option<PathBuf>,

    /// The name of the kubeconfig's cluster, user and context.
    #[arg(long, default_value = "flotilla")]
    name: String,

    /// Write it to this file (owner-only, replaced whole) instead of standard output.
    #[arg(short, long, value_name = "PATH")]
    output: Option<PathBuf>,
}

pub fn run(args: KubeconfigArgs) -> anyhow::Result<ExitCode> {
    let token = args
        .token_file
        .as_ref()
        .map(|p| {
            std::fs::read_to_string(p)
                .with_context(|| format!("--token-file {}", p.display()))
                .map(|t| t.trim().to_owned())
        })
        .transpose()?;
    let ca = args
        .certificate_authority
        .as_ref()
        .map(|p| {
            std::fs::read(p).with_context(|| format!("--certificate-authority {}", p.display()))
        })
        .transpose()?;
    if token.is_some() && args.server.starts_with("http://") {
        eprintln!(
            "warning: kubectl sends no token to an http:// server; serve the Kubernetes API over \
             TLS (flotilla up --kube-tls-cert/--kube-tls-key) for the token to be used"
        );
    }
    let text = render(&KubeconfigFor {
        server: &args.server,
        ca_pem: ca.as_deref(),
        token: token.as_deref(),
        name: &args.name,
    })?;
    match &args.output {
        Some(path) => {
            write_private(path, &text)?;
            eprintln!("wrote {}", path.display());
        }
        None => print!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}
