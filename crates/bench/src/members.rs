//! The simulated members of `flotilla bench failover`, in a process of their own, so that the
//! control plane's CPU and memory can be told apart from theirs (in production the members
//! are real clusters and cost Flotilla nothing).
//!
//! ```text
//!   flotilla bench failover ──spawns──► flotilla bench members --clusters N   (hidden)
//!        │  reads "member <name> <addr>" lines, then "ready"        │ N member-sims, each on
//!        │  registers Push Clusters at those addresses              │ its own 127.0.0.1 port
//!        │  fails one with MemberSim.SetFault over gRPC ───────────►│
//!        └─ closes the child's stdin ─────────────────────────────► exits
//! ```

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use flotilla_member_sim::{Fault, Listeners, Sim, SimConfig};
use flotilla_proto::v1;
use flotilla_proto::v1::member_sim_client::MemberSimClient;
use flotilla_runtime::Shutdown;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, BufReader};
use tokio::net::TcpListener;
use tokio::process::{Child, Command};

/// Flags of the hidden `flotilla bench members`.
#[derive(Debug, clap::Args)]
pub struct MembersArgs {
    /// Member clusters to simulate, named as `bench failover` names them.
    #[arg(long)]
    pub clusters: usize,

    /// Pods each member runs at once.
    #[arg(long, default_value_t = u32::MAX / 2)]
    pub capacity: u32,

    /// Start-up delay of their pods.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub pod_startup_delay: Duration,

    /// Instead of simulating members, send the heartbeats of `--clusters` Pull clusters
    /// (named as `bench idle` names them) to cluster-health at this URL, each at the renew
    /// interval cluster-health answers with (10s by default), spread evenly.
    #[arg(long, value_name = "URL")]
    pub heartbeats_to: Option<String>,

    /// A delay added to every request to each member (a remote cluster's round trip).
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub latency: Duration,
}

/// Runs `clusters` member-sims in this process, prints `member <name> <addr>` for each and
/// then `ready`, and runs until stdin closes (the parent went away) or a signal arrives.
pub async fn serve(args: MembersArgs) -> anyhow::Result<()> {
    let shutdown = Shutdown::new();
    shutdown.trigger_on_signals();
    if let Some(url) = args.heartbeats_to.clone() {
        return heartbeats(args.clusters, url, shutdown).await;
    }
    let mut tasks = tokio::task::JoinSet::new();
    let mut lines = String::new();
    for i in 0..args.clusters {
        let name = super::failover::cluster_name(i, args.clusters);
        let listen = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .context("binding a member's port")?;
        let addr = listen.local_addr()?;
        let sim = Arc::new(Sim::new(SimConfig {
            name: name.clone(),
            capacity: args.capacity,
            pod_startup_delay: args.pod_startup_delay,
            fault: Fault::Healthy,
            node_cpu_millis: None,
            node_memory_bytes: None,
        }));
        sim.set_latency(args.latency);
        let listeners = Listeners {
            listen,
            control: None,
        };
        let sd = shutdown.clone();
        tasks.spawn(async move { flotilla_member_sim::run_with(sim, listeners, sd).await });
        lines.push_str(&format!("member {name} {addr}\n"));
    }
    lines.push_str("ready\n");
    print!("{lines}");
    use std::io::Write as _;
    std::io::stdout().flush()?;
    let sd = shutdown.clone();
    tokio::spawn(async move {
        let mut sink = Vec::new();
        let _ = tokio::io::stdin().read_to_end(&mut sink).await;
        sd.trigger();
    });
    shutdown.triggered().await;
    while let Some(r) = tasks.join_next().await {
        if let Ok(Err(e)) = r {
            eprintln!("a member stopped with an error: {e}");
        }
    }
    Ok(())
}

/// The members' process, as the parent sees it.
pub struct External {
    child: Child,
    /// (name, address) of every member, in order.
    pub members: Vec<(String, SocketAddr)>,
}

impl External {
    /// Starts `flotilla bench members` from this very executable and waits for its members.
    pub async fn spawn(clusters: usize, timeout: Duration) -> anyhow::Result<Self> {
        Self::spawn_with(clusters, &[], clusters, timeout).await
    }

    /// [`External::spawn`] with every request to a member delayed by `latency`.
    pub async fn spawn_with_latency(
        clusters: usize,
        latency: Duration,
        timeout: Duration,
    ) -> anyhow::Result<Self> {
        let extra = [format!("--latency={}ms", latency.as_millis())];
        Self::spawn_with(clusters, &extra, clusters, timeout).await
    }

    /// Starts `flotilla bench members --heartbeats-to URL`: `clusters` Pull clusters'
    /// heartbeats, sent from their own process.
    pub async fn heartbeats(clusters: usize, url: &str, timeout: Duration) -> anyhow::Result<Self> {
        let extra = ["--heartbeats-to".to_owned(), url.to_owned()];
        Self::spawn_with(clusters, &extra, 0, timeout).await
    }

    async fn spawn_with(
        clusters: usize,
        extra: &[String],
        expect: usize,
        timeout: Duration,
    ) -> anyhow::Result<Self> {
        let exe = std::env::current_exe().context("finding the flotilla executable")?;
        let mut child = Command::new(exe)
            .args(["bench", "members", "--clusters", &clusters.to_string()])
            .args(extra)
            .env("FLOTILLA_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("starting the members' process (flotilla bench members)")?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow!("no stdout from the members' process"))?;
        let mut reader = BufReader::new(stdout).lines();
        let mut members = Vec::with_capacity(clusters);
        let read = async {
            while let Some(line) = reader.next_line().await? {
                if line == "ready" {
                    return Ok(());
                }
                let mut parts = line.split_whitespace();
                match (parts.next(), parts.next(), parts.next()) {
                    (Some("member"), Some(name), Some(addr)) => {
                        let addr: SocketAddr = addr
                            .parse()
                            .with_context(|| format!("a member's address in {line:?}"))?;
                        members.push((name.to_owned(), addr));
                    }
                    _ => anyhow::bail!("unexpected line from the members' process: {line:?}"),
                }
            }
            anyhow::bail!("the members' process exited before it was ready")
        };
        tokio::time::timeout(timeout, read)
            .await
            .map_err(|_| anyhow!("the members' process was not ready within {timeout:?}"))??;
        if members.len() != expect {
            anyhow::bail!(
                "the members' process started {} members, not {expect}",
                members.len()
            );
        }
        Ok(External { child, members })
    }

    /// Its process id (for CPU and memory accounting).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The address of member `name`.
    pub fn addr(&self, name: &str) -> Option<SocketAddr> {
        self.members
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| *a)
    }

    /// Sets `fault` on the member at `addr` through its MemberSim gRPC service.
    pub async fn set_fault(addr: SocketAddr, fault: Fault) -> anyhow::Result<()> {
        let mut client = MemberSimClient::connect(format!("http://{addr}"))
            .await
            .with_context(|| format!("connecting to the member at {addr}"))?;
        client
            .set_fault(v1::SetFaultRequest {
                mode: fault.to_wire().into(),
                api_errors: None,
                watch_delay_ms: 0,
            })
            .await
            .map_err(|s| anyhow!("SetFault on {addr}: {}", s.message()))?;
        Ok(())
    }

    /// Closes its stdin and waits up to 10 s for it to exit (then kills it).
    pub async fn stop(mut self) {
        drop(self.child.stdin.take());
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// The cluster names `bench idle` registers as Pull clusters.
pub fn pull_cluster_name(i: usize, n: usize) -> String {
    let width = n.saturating_sub(1).to_string().len().max(4);
    format!("pull-{i:0width$}")
}

/// Sends every Pull cluster's heartbeat (a healthy member with a small status) until stdin
/// closes; prints `ready` once the first round was sent.
async fn heartbeats(clusters: usize, url: String, shutdown: Shutdown) -> anyhow::Result<()> {
    use flotilla_proto::v1::cluster_health_client::ClusterHealthClient;
    let channel = tonic::transport::Endpoint::from_shared(url.clone())
        .with_context(|| format!("cluster-health URL {url}"))?
        .connect()
        .await
        .with_context(|| format!("connecting to cluster-health at {url}"))?;
    let client = ClusterHealthClient::new(channel);
    let status = v1::ClusterStatus {
        kubernetes_version: "v1.33.0".into(),
        api_enablements: vec![v1::ApiEnablement {
            group_version: "apps/v1".into(),
            resources: vec![v1::ApiResource {
                name: "deployments".into(),
                kind: "Deployment".into(),
            }],
        }],
        resource_summary: Some(v1::ResourceSummary {
            allocatable_replicas: Some(110),
            ..Default::default()
        }),
        ..Default::default()
    };
    let sd = shutdown.clone();
    tokio::spawn(async move {
        let mut sink = Vec::new();
        let _ = tokio::io::stdin().read_to_end(&mut sink).await;
        sd.trigger();
    });
    let mut interval = Duration::from_secs(10);
    let mut first = true;
    loop {
        let round = tokio::time::Instant::now();
        let spacing = interval / u32::try_from(clusters.max(1)).unwrap_or(u32::MAX);
        for i in 0..clusters {
            let mut c = client.clone();
            let request = v1::HeartbeatRequest {
                cluster_name: pull_cluster_name(i, clusters),
                cluster_uid: String::new(),
                probe: Some(v1::ProbeResult {
                    online: true,
                    healthy: true,
                    message: String::new(),
                }),
                status: Some(status.clone()),
                sent_at: None,
            };
            match c.heartbeat(request).await {
                Ok(r) => {
                    if let Some(d) = r.into_inner().renew_interval
                        && let Ok(d) = flotilla_proto::convert::duration_from_wire(&d)
                        && !d.is_zero()
                    {
                        interval = d;
                    }
                }
                Err(s) => eprintln!(
                    "heartbeat of {}: {}",
                    pull_cluster_name(i, clusters),
                    s.message()
                ),
            }
            if !first {
                tokio::select! {
                    () = shutdown.triggered() => return Ok(()),
                    () = tokio::time::sleep(spacing) => {}
                }
            }
        }
        if first {
            println!("ready");
            use std::io::Write as _;
            std::io::stdout().flush()?;
            first = false;
        }
        tokio::select! {
            () = shutdown.triggered() => return Ok(()),
            () = tokio::time::sleep_until(round + interval) => {}
        }
    }
}
