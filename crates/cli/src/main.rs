//! `flotilla`: the user's command-line tool.
//!
//! ```text
//!   flotilla up [--demo]          every service in one process on the embedded store (up.rs)
//!   flotilla apply|get|describe…  client commands against the api (client/)
//!   flotilla explain|what-if      dry-run RPCs of the controllers (client/)
//!   flotilla bench failover|store measured against the etcd floor (crates/bench)
//!   flotilla healthcheck [ADDR]   one gRPC health check, exit 0/1 (containers' healthcheck)
//! ```

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod client;
mod credentials;
mod gateway;
mod healthcheck;
mod kubeconfig;
mod up;

/// Flotilla: a multi-cluster failover control plane.
#[derive(Debug, Parser)]
#[command(
    name = "flotilla",
    version,
    about,
    long_about = None,
    after_help = "Connection flags (--server, --token, --request-timeout, --tls-ca, --tls-cert, \
--tls-key) and -n/--namespace may also come before the command, as with kubectl: \
`flotilla --server 10.0.0.5:7400 get clusters`."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run every Flotilla service in one process on the embedded store, with simulated
    /// member clusters.
    Up(up::UpArgs),
    /// Measure Flotilla against the etcd floor.
    #[command(subcommand)]
    Bench(flotilla_bench::BenchCommand),
    /// Ask a gRPC server's grpc.health.v1 once: exit 0 if SERVING, else 1 (the health check
    /// of the FROM-scratch container images, which have no shell or curl).
    Healthcheck(healthcheck::HealthcheckArgs),
    /// Make an installation's first credentials (a tokens file with one admin token), as
    /// docker-compose does on its first start.
    #[command(subcommand)]
    Credentials(credentials::CredentialsCommand),
    /// Print a kubeconfig for Flotilla's Kubernetes API (kubectl, client libraries).
    Kubeconfig(kubeconfig::KubeconfigArgs),
    /// Serve Flotilla's Kubernetes API (kubectl, GitOps tools) in front of an api, as a
    /// process of its own (docker-compose's `kube-gateway`; `flotilla up` serves it itself).
    Gateway(gateway::GatewayArgs),
    #[command(flatten)]
    Client(Box<client::ClientCommand>),
}

/// The connection flags every client command takes, with whether each takes a value. kubectl
/// users put them before the subcommand (`flotilla --server X get clusters`); clap wants them
/// on the subcommand, so they are moved there.
const CONNECTION_FLAGS: &[(&str, bool)] = &[
    ("--server", true),
    ("--request-timeout", true),
    ("--token", true),
    ("--token-file", true),
    ("--tls-ca", true),
    ("--tls-cert", true),
    ("--tls-key", true),
    ("--namespace", true),
    ("-n", true),
];

/// `args` with the connection flags found before the subcommand moved to the end (before a
/// `--`, if any), where every client subcommand accepts them.
fn hoist_connection_flags(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut rest = args.into_iter();
    let mut out: Vec<std::ffi::OsString> = rest.next().into_iter().collect();
    let mut hoisted = Vec::new();
    let mut iter = rest.peekable();
    while let Some(arg) = iter.next() {
        let text = arg.to_string_lossy().into_owned();
        let flag = CONNECTION_FLAGS.iter().find(|(name, _)| {
            text == *name || (name.starts_with("--") && text.starts_with(&format!("{name}=")))
        });
        match flag {
            Some((name, takes_value)) => {
                hoisted.push(arg);
                if *takes_value
                    && text == *name
                    && let Some(value) = iter.next()
                {
                    hoisted.push(value);
                }
            }
            None => {
                // the subcommand: everything from here stays in order
                out.push(arg);
                out.extend(iter);
                break;
            }
        }
    }
    if hoisted.is_empty() {
        return out;
    }
    match out.iter().position(|a| a == "--") {
        Some(i) => {
            let tail = out.split_off(i);
            out.extend(hoisted);
            out.extend(tail);
        }
        None => out.extend(hoisted),
    }
    out
}

/// The exit code of a command whose standard output was closed under it: 128 + SIGPIPE, what
/// a shell reports for a Unix tool that a closed pipe ended (`set -o pipefail` sees it).
const CLOSED_STDOUT: u8 = 141;

/// Whether `message` is the panic of Rust's `print!` on a closed standard output.
fn is_closed_stdout_panic(message: &str) -> bool {
    message.starts_with("failed printing to stdout") && message.contains("Broken pipe")
}

/// A closed standard output (`flotilla describe … | head`) ends the command quietly, as it
/// ends any Unix tool. Rust's `print!` panics on it, so the panic hook recognises that one
/// panic and exits with [`CLOSED_STDOUT`]; every other panic keeps the default report.
fn exit_quietly_on_a_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if is_closed_stdout_panic(message) {
            std::process::exit(i32::from(CLOSED_STDOUT));
        }
        default(info);
    }));
}

/// Whether a command failed because its standard output was closed (an explicit write or
/// flush that returned the error instead of panicking).
fn closed_stdout(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> ExitCode {
    exit_quietly_on_a_closed_stdout();
    let cli = Cli::parse_from(hoist_connection_flags(std::env::args_os().collect()));
    let result = match cli.command {
        Command::Up(args) => up::run(args).await,
        Command::Bench(cmd) => flotilla_bench::run(cmd).await,
        Command::Healthcheck(args) => healthcheck::run(args).await,
        Command::Credentials(cmd) => credentials::run(cmd),
        Command::Kubeconfig(args) => kubeconfig::run(args),
        Command::Gateway(args) => gateway::run(args).await,
        Command::Client(cmd) => client::run(*cmd).await,
    };
    match result {
        Ok(code) => code,
        Err(e) if closed_stdout(&e) => ExitCode::from(CLOSED_STDOUT),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{closed_stdout, hoist_connection_flags, is_closed_stdout_panic};

    /// What print! panics with on a closed pipe, and an error chain holding EPIPE, are
    /// recognised; other panics and errors are not.
    #[test]
    fn a_closed_stdout_is_recognised() {
        assert!(is_closed_stdout_panic(
            "failed printing to stdout: Broken pipe (os error 32)"
        ));
        assert!(!is_closed_stdout_panic(
            "failed printing to stdout: No space left on device (os error 28)"
        ));
        assert!(!is_closed_stdout_panic("index out of bounds"));
        let epipe = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
            .context("writing to stdout");
        assert!(closed_stdout(&epipe));
        assert!(!closed_stdout(&anyhow::anyhow!("listing clusters")));
    }

    fn hoist(args: &[&str]) -> Vec<String> {
        hoist_connection_flags(args.iter().map(Into::into).collect())
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn connection_flags_before_the_command_move_after_it() {
        assert_eq!(
            hoist(&["flotilla", "--server", "h:1", "get", "clusters"]),
            ["flotilla", "get", "clusters", "--server", "h:1"]
        );
        assert_eq!(
            hoist(&[
                "flotilla",
                "--server=h:1",
                "-n",
                "team",
                "explain",
                "binding",
                "x"
            ]),
            [
                "flotilla",
                "explain",
                "binding",
                "x",
                "--server=h:1",
                "-n",
                "team"
            ]
        );
        // after the command nothing moves; nor do other flags
        assert_eq!(
            hoist(&["flotilla", "get", "rb", "--server", "h:1"]),
            ["flotilla", "get", "rb", "--server", "h:1"]
        );
        assert_eq!(hoist(&["flotilla", "--version"]), ["flotilla", "--version"]);
        // before a `--`
        assert_eq!(
            hoist(&["flotilla", "--token", "t", "apply", "-f", "x", "--", "y"]),
            ["flotilla", "apply", "-f", "x", "--token", "t", "--", "y"]
        );
    }
}
