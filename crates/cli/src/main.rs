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
mod healthcheck;
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

#[tokio::main(flavor = "multi_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse_from(hoist_connection_flags(std::env::args_os().collect()));
    let result = match cli.command {
        Command::Up(args) => up::run(args).await,
        Command::Bench(cmd) => flotilla_bench::run(cmd).await,
        Command::Healthcheck(args) => healthcheck::run(args).await,
        Command::Credentials(cmd) => credentials::run(cmd),
        Command::Client(cmd) => client::run(*cmd).await,
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::hoist_connection_flags;

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
