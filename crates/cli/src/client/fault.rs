//! `flotilla cluster fail|heal`: drive a simulated member's faults. The member's address is
//! the Cluster's `spec.apiEndpoint` (a member-sim), whose `SetFault` answers even while it
//! plays unreachable.

use std::process::ExitCode;

use anyhow::Context as _;
use flotilla_proto::v1;
use flotilla_proto::v1::member_sim_client::MemberSimClient;

use super::conn::{ServerArgs, status_error};

/// The faults a member can play.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FaultArg {
    /// Nothing answers (probes and RPCs hang): Ready turns Unknown/False, the
    /// `cluster.karmada.io/not-ready` or `unreachable` taints follow (CH-3.1).
    Unreachable,
    /// The member answers, but `/readyz` says 500: Ready turns False (CH-3.2).
    Unhealthy,
}

/// `flotilla cluster ...`.
#[derive(Debug, clap::Subcommand)]
pub enum ClusterCommand {
    /// Make a simulated member cluster fail (through its member-sim's SetFault).
    #[command(after_help = "\
Examples:
  flotilla cluster fail member1                    # unreachable: nothing answers
  flotilla cluster fail member1 --mode unhealthy   # answers, but /readyz is 500
  flotilla get clusters -w                         # watch Ready and the taints change")]
    Fail(FailArgs),
    /// Heal a simulated member cluster: it answers and is healthy again.
    #[command(after_help = "\
Example:
  flotilla cluster heal member1")]
    Heal(HealArgs),
}

/// Arguments of `flotilla cluster fail`.
#[derive(Debug, clap::Args)]
pub struct FailArgs {
    /// The cluster (its `spec.apiEndpoint` must be a member-sim).
    #[arg(value_name = "NAME")]
    pub name: String,

    /// How it fails.
    #[arg(long, value_enum, default_value_t = FaultArg::Unreachable)]
    pub mode: FaultArg,

    #[command(flatten)]
    pub server: ServerArgs,
}

/// Arguments of `flotilla cluster heal`.
#[derive(Debug, clap::Args)]
pub struct HealArgs {
    /// The cluster.
    #[arg(value_name = "NAME")]
    pub name: String,

    #[command(flatten)]
    pub server: ServerArgs,
}

fn fault_name(mode: i32) -> &'static str {
    match v1::FaultMode::try_from(mode) {
        Ok(v1::FaultMode::Healthy) => "healthy",
        Ok(v1::FaultMode::Unhealthy) => "unhealthy",
        Ok(v1::FaultMode::Unreachable) => "unreachable",
        _ => "unknown",
    }
}

/// Runs `flotilla cluster ...`.
pub async fn run(cmd: ClusterCommand) -> anyhow::Result<ExitCode> {
    let (name, server, mode) = match cmd {
        ClusterCommand::Fail(a) => (
            a.name,
            a.server,
            match a.mode {
                FaultArg::Unreachable => v1::FaultMode::Unreachable,
                FaultArg::Unhealthy => v1::FaultMode::Unhealthy,
            },
        ),
        ClusterCommand::Heal(a) => (a.name, a.server, v1::FaultMode::Healthy),
    };
    let mut api = server.api().await?;
    let cluster = api
        .get_cluster(v1::GetClusterRequest { name: name.clone() })
        .await
        .map_err(|s| status_error(format!("reading cluster {name:?}"), &s))?
        .into_inner();
    let endpoint = cluster
        .spec
        .map(|s| s.api_endpoint)
        .filter(|e| !e.is_empty())
        .with_context(|| format!("cluster {name:?} has no spec.apiEndpoint"))?;
    let channel = server
        .connect(&endpoint, true)
        .await
        .with_context(|| format!("reaching the member-sim of {name:?} at {endpoint}"))?;
    let previous = MemberSimClient::new(channel)
        .set_fault(v1::SetFaultRequest {
            mode: mode as i32,
            api_errors: None,
            watch_delay_ms: 0,
        })
        .await
        .map_err(|s| {
            status_error(
                format!("setting the fault of {name:?} at {endpoint} (is it a member-sim?)"),
                &s,
            )
        })?
        .into_inner()
        .previous;
    println!(
        "cluster/{name} is now {} (was {})",
        fault_name(mode as i32),
        fault_name(previous)
    );
    Ok(ExitCode::SUCCESS)
}
