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

use tonic::transport::Endpoint;

/// Arguments of `flotilla healthcheck`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  flotilla healthcheck                          # the service in this container (127.0.0.1:50051)
  flotilla healthcheck 127.0.0.1:6444           # a member-sim's control address
  flotilla healthcheck api:50051 --service flotilla.v1.Api")]
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
        let channel = Endpoint::from_shared(url)
            .map_err(|e| format!("{:?} is not a valid address: {e}", args.addr))?
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
        }
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
