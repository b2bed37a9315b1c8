//! The flags every service shares (`#[command(flatten)] common: CommonArgs`), and how they
//! become a store connection.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use flotilla_store::{EtcdConfig, EtcdStore, EtcdTls, MemStore, Store, StoreError};

use crate::telemetry::LogFormat;

/// Which store backend to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StoreKind {
    /// A real etcd (v3 API) at `--etcd-endpoints`.
    Etcd,
    /// The in-memory store: state lives and dies with the process (demos and tests).
    Mem,
}

/// Flags shared by every Flotilla service. Every flag can also be given as an environment
/// variable `FLOTILLA_<FLAG>`.
#[derive(Clone, Debug, clap::Args)]
pub struct CommonArgs {
    /// The store backend.
    #[arg(long, env = "FLOTILLA_STORE", value_enum, default_value_t = StoreKind::Etcd)]
    pub store: StoreKind,

    /// etcd client URLs, comma-separated (`https://` when TLS flags are given).
    #[arg(
        long,
        env = "FLOTILLA_ETCD_ENDPOINTS",
        value_delimiter = ',',
        default_value = "http://127.0.0.1:2379"
    )]
    pub etcd_endpoints: Vec<String>,

    /// Key prefix of this installation in etcd (docs/design.md §3).
    #[arg(long, env = "FLOTILLA_ETCD_PREFIX", default_value = "/flotilla")]
    pub etcd_prefix: String,

    /// CA bundle (PEM) that signed etcd's server certificate.
    #[arg(long, env = "FLOTILLA_ETCD_CA")]
    pub etcd_ca: Option<PathBuf>,

    /// Client certificate (PEM) for mutual TLS with etcd; needs `--etcd-key`.
    #[arg(long, env = "FLOTILLA_ETCD_CERT", requires = "etcd_key")]
    pub etcd_cert: Option<PathBuf>,

    /// Client private key (PEM) for mutual TLS with etcd; needs `--etcd-cert`.
    #[arg(long, env = "FLOTILLA_ETCD_KEY", requires = "etcd_cert")]
    pub etcd_key: Option<PathBuf>,

    /// Address the gRPC server listens on.
    #[arg(long, env = "FLOTILLA_GRPC_ADDR", default_value = "0.0.0.0:50051")]
    pub grpc_addr: SocketAddr,

    /// Address of the admin HTTP server (`/metrics`, `/livez`, `/readyz`).
    #[arg(long, env = "FLOTILLA_ADMIN_ADDR", default_value = "0.0.0.0:9090")]
    pub admin_addr: SocketAddr,

    /// Log filter, in `tracing-subscriber` `EnvFilter` syntax (e.g. `info,flotilla=debug`).
    #[arg(long, env = "FLOTILLA_LOG", default_value = "info")]
    pub log: String,

    /// Log line format.
    #[arg(long, env = "FLOTILLA_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Longest time one gRPC request may take (`500ms`, `30s`, `2m`). A client's shorter
    /// `grpc-timeout` wins.
    #[arg(long, env = "FLOTILLA_GRPC_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub grpc_timeout: Duration,

    /// Leader-election lease TTL: how long a dead leader blocks its successor. Default 15 s
    /// (Karmada's `--leader-elect-lease-duration`).
    #[arg(long, env = "FLOTILLA_LEASE_TTL", default_value = "15s", value_parser = parse_duration)]
    pub lease_ttl: Duration,

    /// This replica's identity in leader elections. Default: `<hostname>-<pid>`.
    #[arg(long, env = "FLOTILLA_IDENTITY")]
    pub identity: Option<String>,

    /// TLS and caller authentication of the gRPC links (`--tls-*`, `--auth-tokens-file`).
    #[command(flatten)]
    pub security: crate::security::SecurityArgs,
}

/// A flag value that does not make sense together with the others.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("--{flag}: {message}")]
pub struct ArgError {
    /// The flag's long name.
    pub flag: &'static str,
    /// What is wrong with it.
    pub message: String,
}

/// Records in `errors` that `--flag` is wrong (`message`) unless `ok` holds.
pub fn require(errors: &mut Vec<ArgError>, ok: bool, flag: &'static str, message: &str) {
    if !ok {
        errors.push(ArgError {
            flag,
            message: message.into(),
        });
    }
}

/// What `value` builds when no problem was found, else every problem in `errors`.
pub fn or_errors<T>(errors: Vec<ArgError>, value: impl FnOnce() -> T) -> Result<T, Vec<ArgError>> {
    if errors.is_empty() {
        Ok(value())
    } else {
        Err(errors)
    }
}

/// Why the store could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The flags are inconsistent.
    #[error("invalid store flags: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Args(Vec<ArgError>),
    /// The etcd client could not be built (bad TLS files, bad endpoint URLs).
    #[error("cannot set up the etcd client")]
    Etcd(#[source] StoreError),
}

// === impl CommonArgs ===

impl CommonArgs {
    /// Checks the combinations clap cannot (Karmada's `Validate()` pattern); every problem
    /// is reported, not just the first.
    pub fn validate(&self) -> Result<(), Vec<ArgError>> {
        let mut errors = Vec::new();
        if self.store == StoreKind::Etcd {
            if self.etcd_endpoints.iter().all(|e| e.trim().is_empty()) {
                errors.push(ArgError {
                    flag: "etcd-endpoints",
                    message: "at least one endpoint is required with --store etcd".into(),
                });
            }
            let tls = self.etcd_ca.is_some() || self.etcd_cert.is_some();
            for e in &self.etcd_endpoints {
                if tls && e.starts_with("http://") {
                    errors.push(ArgError {
                        flag: "etcd-endpoints",
                        message: format!("{e} is plain http but TLS flags are set"),
                    });
                }
            }
        }
        if self.etcd_cert.is_some() != self.etcd_key.is_some() {
            errors.push(ArgError {
                flag: "etcd-cert",
                message: "--etcd-cert and --etcd-key go together".into(),
            });
        }
        if self.lease_ttl < Duration::from_secs(1) {
            errors.push(ArgError {
                flag: "lease-ttl",
                message: "must be at least 1s".into(),
            });
        }
        if self.grpc_timeout.is_zero() {
            errors.push(ArgError {
                flag: "grpc-timeout",
                message: "must be positive".into(),
            });
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    /// The etcd client configuration these flags describe.
    pub fn etcd_config(&self) -> EtcdConfig {
        let mut config = EtcdConfig::new(
            self.etcd_endpoints
                .iter()
                .map(|e| e.trim().to_owned())
                .filter(|e| !e.is_empty()),
        )
        .with_namespace(self.etcd_prefix.clone());
        if self.etcd_ca.is_some() || self.etcd_cert.is_some() || self.etcd_key.is_some() {
            config.tls = Some(EtcdTls {
                ca_file: self.etcd_ca.clone(),
                cert_file: self.etcd_cert.clone(),
                key_file: self.etcd_key.clone(),
                domain_name: None,
            });
        }
        config
    }

    /// Connects the configured store. The etcd connection is lazy: an unreachable etcd
    /// shows up as retried watcher errors, not as a start-up failure, so that services can
    /// start before etcd does.
    pub async fn connect_store(&self) -> Result<Arc<dyn Store>, ConnectError> {
        self.validate().map_err(ConnectError::Args)?;
        match self.store {
            StoreKind::Mem => Ok(Arc::new(MemStore::new())),
            StoreKind::Etcd => {
                let store = EtcdStore::connect(self.etcd_config())
                    .await
                    .map_err(ConnectError::Etcd)?;
                Ok(Arc::new(store))
            }
        }
    }

    /// The identity for leader elections: `--identity`, or `<hostname>-<pid>`.
    pub fn identity(&self) -> String {
        self.identity.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_owned())
                .ok()
                .filter(|h| !h.is_empty())
                .or_else(|| std::env::var("HOSTNAME").ok())
                .unwrap_or_else(|| "flotilla".into());
            format!("{host}-{}", std::process::id())
        })
    }
}

/// Parses `250ms`, `30s`, `5m`, `1h` (or a bare number of seconds).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 500ms, 30s or 2m"))?;
    let secs = match unit.trim() {
        "ms" => value / 1000.0,
        "" | "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {s:?} (use ms, s, m or h)"
            ));
        }
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{s:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        common: CommonArgs,
    }

    #[test]
    fn defaults() {
        let cli = Cli::try_parse_from(["svc"]).unwrap();
        let c = cli.common;
        assert_eq!(c.store, StoreKind::Etcd);
        // scripts/test.sh lets a developer point every test at their etcd through this one.
        let endpoints = std::env::var("FLOTILLA_ETCD_ENDPOINTS")
            .unwrap_or_else(|_| "http://127.0.0.1:2379".into());
        assert_eq!(c.etcd_endpoints.join(","), endpoints);
        assert_eq!(c.etcd_prefix, "/flotilla");
        assert_eq!(c.log, "info");
        assert_eq!(c.log_format, LogFormat::Text);
        assert_eq!(c.grpc_timeout, Duration::from_secs(30));
        assert_eq!(c.lease_ttl, Duration::from_secs(15));
        assert!(c.validate().is_ok());
    }

    #[test]
    fn flags_parse() {
        let cli = Cli::try_parse_from([
            "svc",
            "--store",
            "mem",
            "--etcd-endpoints",
            "https://a:2379,https://b:2379",
            "--etcd-prefix",
            "/x",
            "--etcd-ca",
            "/ca.pem",
            "--etcd-cert",
            "/c.pem",
            "--etcd-key",
            "/k.pem",
            "--grpc-addr",
            "127.0.0.1:1",
            "--admin-addr",
            "127.0.0.1:2",
            "--log",
            "debug",
            "--log-format",
            "json",
            "--grpc-timeout",
            "250ms",
        ])
        .unwrap();
        let c = cli.common;
        assert_eq!(c.store, StoreKind::Mem);
        assert_eq!(c.etcd_endpoints, vec!["https://a:2379", "https://b:2379"]);
        assert_eq!(c.log_format, LogFormat::Json);
        assert_eq!(c.grpc_timeout, Duration::from_millis(250));
        let cfg = c.etcd_config();
        assert_eq!(cfg.namespace, "/x");
        let tls = cfg.tls.unwrap();
        assert_eq!(tls.ca_file.unwrap(), PathBuf::from("/ca.pem"));
        assert_eq!(tls.key_file.unwrap(), PathBuf::from("/k.pem"));
    }

    #[test]
    fn cert_needs_key() {
        assert!(Cli::try_parse_from(["svc", "--etcd-cert", "/c.pem"]).is_err());
    }

    #[test]
    fn validate_reports_every_problem() {
        let mut c = Cli::try_parse_from(["svc", "--etcd-ca", "/ca.pem"])
            .unwrap()
            .common;
        c.lease_ttl = Duration::from_millis(10);
        let errors = c.validate().unwrap_err();
        let flags: Vec<_> = errors.iter().map(|e| e.flag).collect();
        assert_eq!(flags, vec!["etcd-endpoints", "lease-ttl"], "{errors:?}");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("7").unwrap(), Duration::from_secs(7));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
    }

    #[tokio::test]
    async fn mem_store_connects() {
        let c = Cli::try_parse_from(["svc", "--store", "mem"])
            .unwrap()
            .common;
        let store = c.connect_store().await.unwrap();
        assert_eq!(store.current_revision().await.unwrap(), 1);
    }
}
