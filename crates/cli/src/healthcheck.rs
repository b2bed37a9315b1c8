//! `flotilla healthcheck`: one `grpc.health.v1.Health/Check`, exit 0 if SERVING, else 1.
//!
//! The container images are FROM scratch (no shell, no curl), so a compose `healthcheck:`
//! runs this binary: `["CMD", "flotilla", "healthcheck", "127.0.0.1:50051"]`. A Flotilla
//! service reports SERVING once its caches have synced; a member-sim, for as long as the
//! process runs (ask its `--control-listen` address, which ignores simulated faults).

use std::process::ExitCode;
use std::time::Duration;

use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// Arguments of `flotilla healthcheck`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  flotilla healthcheck                          # the service in this container (127.0.0.1:50051)
  flotilla healthcheck 127.0.0.1:6444           # a member-sim's control address
  flotilla healthcheck api:50051 --service flotilla.v1.Api
  flotilla healthcheck https://127.0.0.1:50051 --tls-ca ca.pem --tls-cert c.pem --tls-key c.key")]
pub struct HealthcheckArgs {
    /// The gRPC server to ask, `HOST:PORT` or `http://HOST:PORT`.
    #[arg(default_value = "127.0.0.1:50051", value_name = "ADDR")]
    pub addr: String,

    /// The health service name to ask about (empty: the server as a whole).
    #[arg(long, default_value = "")]
    pub service: String,

    /// How long the connection and the call may take together.
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub timeout: Duration,

    /// TLS towards an `https://` ADDR (a service started with --tls-cert).
    #[command(flatten)]
    pub tls: crate::client::TlsArgs,
}

/// The answer of one check.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The server answered SERVING.
    Serving,
    /// The server answered, but not SERVING (its status in words).
    NotServing(String),
    /// No answer: connection refused, timed out, or the call failed (e.g. NOT_FOUND for an
    /// unknown service name).
    Failed(String),
}

/// Asks `addr` once.
pub async fn check(args: &HealthcheckArgs) -> Verdict {
    let call = async {
        let url = if args.addr.contains("://") {
            args.addr.clone()
        } else {
            format!("http://{}", args.addr)
        };
        let channel = args
            .tls
            .security()
            .endpoint(&url)
            .map_err(|e| format!("{:?}: {e:#}", args.addr))?
            .connect_timeout(args.timeout)
            .timeout(args.timeout)
            .connect()
            .await
            .map_err(|e| format!("connecting: {e}"))?;
        HealthClient::new(channel)
            .check(HealthCheckRequest {
                service: args.service.clone(),
            })
            .await
            .map(|r| r.into_inner().status)
            .map_err(|s| format!("{}: {}", s.code(), s.message()))
    };
    match tokio::time::timeout(args.timeout, call).await {
        Err(_) => Verdict::Failed(format!("no answer within {:?}", args.timeout)),
        Ok(Err(e)) => Verdict::Failed(e),
        Ok(Ok(status)) if status == ServingStatus::Serving as i32 => Verdict::Serving,
        Ok(Ok(status)) => Verdict::NotServing(
            ServingStatus::try_from(status)
                .map(|s| s.as_str_name().to_owned())
                .unwrap_or_else(|_| status.to_string()),
        ),
    }
}

/// Runs `flotilla healthcheck`: prints one line, exits 0 when SERVING.
pub async fn run(args: HealthcheckArgs) -> anyhow::Result<ExitCode> {
    let verdict = check(&args).await;
    let what = if args.service.is_empty() {
        args.addr.clone()
    } else {
        format!("{} ({})", args.addr, args.service)
    };
    Ok(match verdict {
        Verdict::Serving => {
            println!("{what}: SERVING");
            ExitCode::SUCCESS
        }
        Verdict::NotServing(status) => {
            eprintln!("{what}: {status}");
            ExitCode::FAILURE
        }
        Verdict::Failed(error) => {
            eprintln!("{what}: no health answer: {error}");
            ExitCode::FAILURE
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn args(addr: String, service: &str) -> HealthcheckArgs {
        HealthcheckArgs {
            addr,
            service: service.into(),
            timeout: Duration::from_secs(2),
            tls: Default::default(),
        }
    }

    /// A service started with mutual TLS answers a healthcheck that presents the CA and a
    /// client certificate, and none that does not (the compose healthcheck of a TLS stack).
    #[tokio::test]
    async fn mutual_tls_needs_the_ca_and_a_client_certificate() {
        use std::path::Path;
        let dir = std::env::temp_dir().join(format!("flotilla-hc-certs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/dev-certs.sh");
        let out = std::process::Command::new("bash")
            .arg(&script)
            .arg(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let file = |name: &str| Some(dir.join(name));
        let server_security = flotilla_runtime::SecurityArgs {
            tls_cert: file("api.pem"),
            tls_key: file("api-key.pem"),
            tls_client_ca: file("ca.pem"),
            ..Default::default()
        };
        let shutdown = flotilla_runtime::Shutdown::new();
        let readiness = flotilla_runtime::Readiness::new();
        let server = flotilla_runtime::GrpcServer::new(
            &[],
            flotilla_runtime::GrpcConfig::default().tls(server_security.server_tls().unwrap()),
            readiness,
            &shutdown,
        )
        .await
        .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(server.serve(listener, shutdown.clone()));
        let url = format!("https://localhost:{port}");
        let mut good = args(url.clone(), "");
        good.tls = crate::client::TlsArgs {
            tls_ca: file("ca.pem"),
            tls_cert: file("scheduler.pem"),
            tls_key: file("scheduler-key.pem"),
        };
        assert_eq!(
            check(&good).await,
            Verdict::Serving,
            "ready with no caches to wait for"
        );
        let mut no_client_cert = args(url.clone(), "");
        no_client_cert.tls.tls_ca = file("ca.pem");
        assert!(matches!(check(&no_client_cert).await, Verdict::Failed(_)));
        assert!(
            matches!(check(&args(url, "")).await, Verdict::Failed(_)),
            "no CA"
        );
        shutdown.trigger();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn serving_not_serving_and_unreachable() {
        let (reporter, service) = tonic_health::server::health_reporter();
        reporter
            .set_service_status("", tonic_health::ServingStatus::NotServing)
            .await;
        reporter
            .set_service_status("flotilla.v1.Api", tonic_health::ServingStatus::Serving)
            .await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );

        assert_eq!(
            check(&args(addr.clone(), "")).await,
            Verdict::NotServing("NOT_SERVING".into())
        );
        assert_eq!(
            check(&args(addr.clone(), "flotilla.v1.Api")).await,
            Verdict::Serving
        );
        // an unknown service is a NOT_FOUND error: not healthy
        assert!(matches!(
            check(&args(addr.clone(), "nope")).await,
            Verdict::Failed(_)
        ));
        reporter
            .set_service_status("", tonic_health::ServingStatus::Serving)
            .await;
        assert_eq!(check(&args(addr.clone(), "")).await, Verdict::Serving);
        assert_eq!(
            run(args(addr, "")).await.unwrap(),
            ExitCode::SUCCESS,
            "exit code 0 when SERVING"
        );

        // nothing listens: refused, exit 1
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        assert!(matches!(
            check(&args(closed.clone(), "")).await,
            Verdict::Failed(_)
        ));
        assert_eq!(run(args(closed, "")).await.unwrap(), ExitCode::FAILURE);
    }

    #[tokio::test]
    async fn a_server_that_never_answers_times_out() {
        // accepts the TCP connection but never speaks HTTP/2
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = listener.accept().await {
                held.push(s);
            }
        });
        let mut a = args(addr, "");
        a.timeout = Duration::from_millis(300);
        let started = std::time::Instant::now();
        assert!(matches!(check(&a).await, Verdict::Failed(_)));
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
