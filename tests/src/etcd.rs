//! Errors, the store behind the api, a several-member etcd cluster, and steady api load.

use std::process::Stdio;
use std::time::Duration;

use flotilla_proto::v1;
use flotilla_store::{EtcdConfig, EtcdStore};

use crate::*;

// ---------------------------------------------------------------------------------------
// Errors and the store behind the api
// ---------------------------------------------------------------------------------------

/// The `google.rpc.BadRequest` field violations of an error status, as (field, description).
pub fn field_violations(status: &tonic::Status) -> Vec<(String, String)> {
    use tonic_types::StatusExt;
    status
        .get_details_bad_request()
        .map(|b| {
            b.field_violations
                .into_iter()
                .map(|v| (v.field, v.description))
                .collect()
        })
        .unwrap_or_default()
}

/// Every key of the stack's namespace with its mod revision, except leader-election leases
/// (renewed on their own) and events: the objects, as the services stored them.
pub async fn object_revisions(store: &EtcdStore) -> std::collections::BTreeMap<String, i64> {
    use flotilla_store::Store;
    let (kvs, _) = store.list("", 0).await.expect("list the stack's keys");
    kvs.into_iter()
        .filter(|kv| !kv.key.starts_with("leases/") && !kv.key.starts_with("events/"))
        .map(|kv| (kv.key, kv.mod_revision))
        .collect()
}

/// A multi-member etcd cluster of the `etcd` binary on loopback (data on `/dev/shm` when it
/// exists), for the fault suite: the shape a production user runs, whose members can be
/// SIGKILLed one at a time. Removed on drop.
pub struct EtcdCluster {
    /// Client URLs, one per member.
    pub endpoints: Vec<String>,
    members: Vec<Option<std::process::Child>>,
    _dirs: Vec<tempfile::TempDir>,
    /// The members' host names, for [`EtcdCluster::start_named`].
    hosts: Option<HostsNames>,
}

impl EtcdCluster {
    /// Starts `n` members and waits until the cluster answers.
    pub async fn start(n: usize) -> Self {
        let token = format!("flotilla-test-{:08x}", rand::random::<u32>());
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
        let initial = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("e{i}=http://127.0.0.1:{peer}"))
            .collect::<Vec<_>>()
            .join(",");
        let shm = std::path::Path::new("/dev/shm");
        let mut dirs = Vec::new();
        let mut members = Vec::new();
        let mut endpoints = Vec::new();
        for (i, (client, peer)) in ports.iter().enumerate() {
            let dir = if shm.is_dir() {
                tempfile::tempdir_in(shm).unwrap()
            } else {
                tempfile::tempdir().unwrap()
            };
            let url = format!("http://127.0.0.1:{client}");
            let child = std::process::Command::new("etcd")
                .args([
                    format!("--name=e{i}"),
                    format!("--data-dir={}", dir.path().join("data").display()),
                    format!("--listen-client-urls={url}"),
                    format!("--advertise-client-urls={url}"),
                    format!("--listen-peer-urls=http://127.0.0.1:{peer}"),
                    format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"),
                    format!("--initial-cluster={initial}"),
                    "--initial-cluster-state=new".into(),
                    format!("--initial-cluster-token={token}"),
                    "--heartbeat-interval=50".into(),
                    "--election-timeout=500".into(),
                    "--logger=zap".into(),
                    "--log-level=error".into(),
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start an etcd member (is Debian's etcd-server installed?)");
            members.push(Some(child));
            endpoints.push(url);
            dirs.push(dir);
        }
        let cluster = EtcdCluster {
            endpoints,
            members,
            _dirs: dirs,
            hosts: None,
        };
        // every member answers on its own endpoint
        for endpoint in &cluster.endpoints {
            let config = EtcdConfig::new(vec![endpoint.clone()]);
            eventually(
                Duration::from_secs(30),
                &format!("etcd member {endpoint} answers"),
                || {
                    let config = config.clone();
                    async move {
                        let store = EtcdStore::connect(config).await.ok()?;
                        use flotilla_store::Store;
                        store.current_revision().await.ok()
                    }
                },
            )
            .await;
        }
        cluster
    }

    /// Like [`EtcdCluster::start`], but clients reach each member by a host name of its own
    /// (`flotilla-etcd-<random>-e<i>`, written into `/etc/hosts` for 127.0.0.1), as in
    /// docker-compose or a StatefulSet. [`EtcdCluster::forget_name`] then makes one name stop
    /// resolving, as a dead member's name does there. Editing `/etc/hosts` needs root, which
    /// the test machines and CI have; the names are removed again when the cluster drops.
    pub async fn start_named(n: usize) -> Self {
        let mut cluster = Self::start(n).await;
        let tag = format!("{:08x}", rand::random::<u32>());
        let mut names = Vec::new();
        for (i, endpoint) in cluster.endpoints.iter_mut().enumerate() {
            let name = format!("flotilla-etcd-{tag}-e{i}");
            *endpoint = endpoint.replace("127.0.0.1", &name);
            names.push(name);
        }
        cluster.hosts = Some(HostsNames::add(names));
        cluster
    }

    /// Removes member `i`'s host name from `/etc/hosts`: it stops resolving.
    pub fn forget_name(&mut self, i: usize) {
        if let Some(hosts) = &mut self.hosts {
            hosts.remove(i);
        }
    }

    /// The cluster as the [`EtcdServer`] a [`Stack`] runs on (every member's endpoint).
    pub fn server(&self) -> EtcdServer {
        EtcdServer::external(self.endpoints.clone())
    }

    /// SIGKILLs member `i` (it stays down).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}

/// Host names written into `/etc/hosts` (each for 127.0.0.1), removed one by one or on drop.
/// glibc reads the file on every lookup, so a removed name stops resolving at once.
struct HostsNames {
    names: Vec<Option<String>>,
}

impl HostsNames {
    const FILE: &'static str = "/etc/hosts";

    fn add(names: Vec<String>) -> Self {
        let mut text = std::fs::read_to_string(Self::FILE).expect("read /etc/hosts");
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        for name in &names {
            text.push_str(&format!("127.0.0.1 {name}\n"));
        }
        // written in place: /etc/hosts is often a bind mount that cannot be renamed over
        std::fs::write(Self::FILE, text).unwrap_or_else(|e| {
            panic!("cannot write /etc/hosts ({e}): this test edits it and needs root")
        });
        HostsNames {
            names: names.into_iter().map(Some).collect(),
        }
    }

    fn remove(&mut self, i: usize) {
        if let Some(name) = self.names.get_mut(i).and_then(Option::take) {
            Self::drop_lines(&[name]);
        }
    }

    fn drop_lines(names: &[String]) {
        let Ok(text) = std::fs::read_to_string(Self::FILE) else {
            return;
        };
        let kept: String = text
            .lines()
            .filter(|l| !names.iter().any(|n| l.split_whitespace().nth(1) == Some(n)))
            .map(|l| format!("{l}\n"))
            .collect();
        let _ = std::fs::write(Self::FILE, kept);
    }
}

impl Drop for HostsNames {
    fn drop(&mut self) {
        let left: Vec<String> = self.names.iter().flatten().cloned().collect();
        if !left.is_empty() {
            Self::drop_lines(&left);
        }
    }
}

/// Steady API use while a fault happens: reads (list clusters, get the seed binding) and
/// writes (create then delete a Secret), one round every 20 ms, each call counted, each failure
/// kept with when it happened; and [`ApiLoad::WATCHES`] binding watches held open throughout,
/// each of which must neither fail nor end. Nothing retries here: a failed call is what a
/// user would see.
pub struct ApiLoad {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<LoadReport>,
    watches: Vec<tokio::task::JoinHandle<Option<(Duration, String, String)>>>,
}

/// What an [`ApiLoad`] saw.
#[derive(Debug, Default)]
pub struct LoadReport {
    /// Calls made.
    pub requests: usize,
    /// The failed ones: `(time since the load started, call, error)`.
    pub failures: Vec<(Duration, String, String)>,
}

impl std::fmt::Display for LoadReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} of {} API calls failed",
            self.failures.len(),
            self.requests
        )?;
        for (at, call, error) in self.failures.iter().take(10) {
            write!(f, "\n  {:.2}s {call}: {error}", at.as_secs_f64())?;
        }
        Ok(())
    }
}

impl ApiLoad {
    /// How many watches an [`ApiLoad`] holds open: the api opens a store watch for each, and
    /// the client's balancer spreads them over the etcd members, so that one is on any
    /// member lost (all miss one of three with a chance of (2/3)^12, under 1%).
    pub const WATCHES: usize = 12;

    /// Starts the load against `api`; `tag` keeps its Secrets' names apart.
    pub fn start(api: &ApiClient, tag: &str) -> Self {
        let (stop, _) = tokio::sync::watch::channel(false);
        let started = std::time::Instant::now();
        let watches = (0..Self::WATCHES)
            .map(|i| {
                let (mut api, mut stopped) = (api.clone(), stop.subscribe());
                tokio::spawn(async move {
                    let broke = |why: String| {
                        Some((
                            started.elapsed(),
                            format!("WatchResourceBindings #{i}"),
                            why,
                        ))
                    };
                    let request = v1::WatchResourceBindingsRequest {
                        allow_bookmarks: true,
                        ..Default::default()
                    };
                    let mut stream = match api.watch_resource_bindings(request).await {
                        Ok(r) => r.into_inner(),
                        Err(s) => return broke(format!("{:?}: {}", s.code(), s.message())),
                    };
                    loop {
                        tokio::select! {
                            _ = stopped.changed() => return None,
                            item = stream.message() => match item {
                                Ok(Some(_)) => {}
                                Ok(None) => return broke("the stream ended".into()),
                                Err(s) => {
                                    return broke(format!("{:?}: {}", s.code(), s.message()));
                                }
                            },
                        }
                    }
                })
            })
            .collect();
        let mut stopped = stop.subscribe();
        let (mut api, tag) = (api.clone(), tag.to_owned());
        let task = tokio::spawn(async move {
            let mut report = LoadReport::default();
            let mut round = 0u64;
            while !*stopped.borrow() {
                round += 1;
                let name = format!("load-{tag}-{round}");
                let mut record = |call: &str, result: Result<(), tonic::Status>| {
                    report.requests += 1;
                    if let Err(status) = result {
                        report.failures.push((
                            started.elapsed(),
                            call.to_owned(),
                            format!("{:?}: {}", status.code(), status.message()),
                        ));
                    }
                };
                let r = api
                    .list_clusters(v1::ListClustersRequest::default())
                    .await
                    .map(drop);
                record("ListClusters", r);
                let r = api
                    .get_resource_binding(v1::GetResourceBindingRequest {
                        namespace: "default".into(),
                        name: "nginx-deployment".into(),
                    })
                    .await
                    .map(drop);
                record("GetResourceBinding", r);
                let r = api
                    .create_secret(v1::CreateSecretRequest {
                        secret: Some(v1::Secret {
                            metadata: Some(v1::ObjectMeta {
                                name: name.clone(),
                                namespace: "default".into(),
                                ..Default::default()
                            }),
                            data: [("token".to_owned(), b"not-a-secret".to_vec())].into(),
                            r#type: "Opaque".into(),
                        }),
                    })
                    .await
                    .map(drop);
                let created = r.is_ok();
                record("CreateSecret", r);
                if created {
                    let r = api
                        .delete_secret(v1::DeleteSecretRequest {
                            namespace: "default".into(),
                            name,
                            preconditions: None,
                        })
                        .await
                        .map(drop);
                    record("DeleteSecret", r);
                }
                tokio::select! {
                    _ = stopped.changed() => {}
                    () = tokio::time::sleep(Duration::from_millis(20)) => {}
                }
            }
            report
        });
        ApiLoad {
            stop,
            task,
            watches,
        }
    }

    /// Stops the load and returns what it saw.
    pub async fn stop(self) -> LoadReport {
        let _ = self.stop.send(true);
        let mut report = self.task.await.expect("the API load task");
        for watch in self.watches {
            report.requests += 1;
            if let Some(broke) = watch.await.expect("a watch task") {
                report.failures.push(broke);
            }
        }
        report
    }
}
