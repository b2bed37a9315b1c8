//! The store flags of `flotilla up` and `flotilla bench` (the services' `CommonArgs` store
//! flags, with the in-memory store as the default).

use std::path::PathBuf;

use anyhow::{Context as _, anyhow};
use clap::Parser;
use flotilla_runtime::{CommonArgs, StoreKind};

/// Which store, and how to reach etcd.
#[derive(Clone, Debug, clap::Args)]
pub struct StoreArgs {
    /// The store every service shares: `mem` (in this process; the state goes with it) or
    /// `etcd`.
    #[arg(long, value_enum, default_value_t = StoreKind::Mem)]
    pub store: StoreKind,

    /// etcd client URLs, comma-separated (with `--store etcd`).
    #[arg(long, value_delimiter = ',', value_name = "URL,...")]
    pub etcd_endpoints: Vec<String>,

    /// Key prefix of this installation in etcd (docs/design.md §3).
    #[arg(long, default_value = "/flotilla")]
    pub etcd_prefix: String,

    /// CA bundle (PEM) that signed etcd's server certificate.
    #[arg(long)]
    pub etcd_ca: Option<PathBuf>,

    /// Client certificate (PEM) for mutual TLS with etcd; needs `--etcd-key`.
    #[arg(long, requires = "etcd_key")]
    pub etcd_cert: Option<PathBuf>,

    /// Client private key (PEM) for mutual TLS with etcd; needs `--etcd-cert`.
    #[arg(long, requires = "etcd_cert")]
    pub etcd_key: Option<PathBuf>,
}

#[derive(Parser)]
struct Common {
    #[command(flatten)]
    common: CommonArgs,
}

impl StoreArgs {
    /// The services' common flags for this store, with `endpoints` (the given ones win).
    pub fn common(&self, default_endpoints: &[String]) -> anyhow::Result<CommonArgs> {
        let endpoints = if self.etcd_endpoints.is_empty() {
            default_endpoints.to_vec()
        } else {
            self.etcd_endpoints.clone()
        };
        let store = match self.store {
            StoreKind::Mem => "mem",
            StoreKind::Etcd => "etcd",
        };
        let mut argv = vec![
            "flotilla".to_owned(),
            format!("--store={store}"),
            format!("--etcd-prefix={}", self.etcd_prefix),
        ];
        if !endpoints.is_empty() {
            argv.push(format!("--etcd-endpoints={}", endpoints.join(",")));
        }
        for (flag, path) in [
            ("etcd-ca", &self.etcd_ca),
            ("etcd-cert", &self.etcd_cert),
            ("etcd-key", &self.etcd_key),
        ] {
            if let Some(p) = path {
                argv.push(format!("--{flag}={}", p.display()));
            }
        }
        let parsed = Common::try_parse_from(argv).map_err(|e| anyhow!("{e}"))?;
        parsed.common.validate().map_err(|errors| {
            anyhow!(
                "{}",
                errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        })?;
        Ok(parsed.common)
    }

    /// Connects the store (`--store etcd` without endpoints: `http://127.0.0.1:2379`, as
    /// the services).
    pub async fn connect(&self) -> anyhow::Result<flotilla_store::StoreRef> {
        let common = self.common(&["http://127.0.0.1:2379".to_owned()])?;
        let store = common
            .connect_store()
            .await
            .context("connecting the store")?;
        if self.store == StoreKind::Etcd {
            // The connection is lazy: check now, so that a missing etcd is one clear error.
            tokio::time::timeout(std::time::Duration::from_secs(10), store.current_revision())
                .await
                .map_err(|_| {
                    anyhow!(
                        "etcd at {} did not answer within 10s",
                        common.etcd_endpoints.join(",")
                    )
                })?
                .with_context(|| {
                    format!(
                        "etcd at {} does not answer",
                        common.etcd_endpoints.join(",")
                    )
                })?;
        }
        Ok(store)
    }

    /// A short description for the listen table.
    pub fn describe(&self) -> String {
        match self.store {
            StoreKind::Mem => "in-memory (this process)".to_owned(),
            StoreKind::Etcd => format!(
                "etcd {} under {}",
                if self.etcd_endpoints.is_empty() {
                    "http://127.0.0.1:2379".to_owned()
                } else {
                    self.etcd_endpoints.join(",")
                },
                self.etcd_prefix
            ),
        }
    }
}
