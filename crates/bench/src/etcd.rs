//! A temporary etcd for `flotilla bench` when no `--etcd-endpoints` are given: the `etcd`
//! binary from PATH on free loopback ports with a fresh data directory, removed on drop.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
use flotilla_store::etcd::single_member_flags;
use flotilla_store::{EtcdConfig, EtcdStore};
use tokio::process::{Child, Command};

/// How long a started etcd has to answer.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(15);

/// A running etcd of our own.
#[derive(Debug)]
pub struct TempEtcd {
    endpoint: String,
    child: Child,
    dir: tempfile::TempDir,
    binary: PathBuf,
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .context("finding a free loopback port")?
        .port())
}

impl TempEtcd {
    /// Starts etcd and waits until it answers (retrying on other ports if one was taken
    /// meanwhile).
    pub async fn start() -> anyhow::Result<Self> {
        let binary = find_on_path("etcd").ok_or_else(|| {
            anyhow!(
                "no `etcd` on PATH for a temporary etcd: install it (Debian: apt-get install \
                 etcd-server) or give --etcd-endpoints"
            )
        })?;
        let mut last = String::new();
        for _ in 0..3 {
            let mut etcd = Self::spawn(&binary)?;
            match etcd.wait_ready().await {
                Ok(()) => return Ok(etcd),
                Err(e) => last = format!("{e:#}"),
            }
        }
        Err(anyhow!("the temporary etcd did not start: {last}"))
    }

    fn spawn(binary: &Path) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("flotilla-bench-etcd-")
            .tempdir()
            .context("creating a data directory for etcd")?;
        let (client, peer) = (free_port()?, free_port()?);
        let client_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let log = std::fs::File::create(dir.path().join("etcd.log")).context("etcd log file")?;
        let name = format!("flotilla-bench-{}", std::process::id());
        let data = dir.path().join("data");
        let child = Command::new(binary)
            .args(single_member_flags(&name, &data, &client_url, &peer_url))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        Ok(Self {
            endpoint: client_url,
            child,
            dir,
            binary: binary.to_owned(),
        })
    }

    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        let mut last = String::new();
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait()? {
                let tail = std::fs::read_to_string(self.dir.path().join("etcd.log"))
                    .unwrap_or_default()
                    .lines()
                    .rev()
                    .take(5)
                    .collect::<Vec<_>>()
                    .join(" | ");
                anyhow::bail!("etcd exited with {status}: {tail}");
            }
            let config = EtcdConfig {
                connect_timeout: Duration::from_millis(500),
                request_timeout: Duration::from_millis(500),
                ..EtcdConfig::new([self.endpoint.clone()])
            };
            match EtcdStore::connect(config).await {
                Ok(store) => match store.status().await {
                    Ok(_) => return Ok(()),
                    Err(e) => last = e.to_string(),
                },
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(anyhow!(
            "{} at {} gave no answer within {}s: {last}",
            self.binary.display(),
            self.endpoint,
            STARTUP_TIMEOUT.as_secs()
        ))
    }

    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Its client URL.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Stops it and removes its data.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}
