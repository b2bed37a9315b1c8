//! `flotilla get` and `flotilla describe`: kubectl-style tables, `-o json|yaml|name`,
//! `-w` watches and human-readable descriptions.

use std::collections::{BTreeSet, HashMap};
use std::process::ExitCode;
use std::time::Duration;

use crate::client::conn::Conn;
use anyhow::Context as _;
use flotilla_proto::v1;
use flotilla_proto::v1::api_client::ApiClient;
use futures::StreamExt as _;

use super::conn::{ServerArgs, status_error};
use super::describe::{Describe, events_section};
use super::kinds::{ApiObject, Kind, Scope, list_all};
use super::output::{Format, Table, now, print_value};
use super::shape::{self, kubernetes};

/// Namespace flags shared by the commands on namespaced kinds.
#[derive(Clone, Debug, clap::Args)]
pub struct NamespaceArgs {
    /// Namespace of namespaced kinds (policies, workloads, bindings, works, events).
    #[arg(
        short = 'n',
        long,
        env = "FLOTILLA_NAMESPACE",
        default_value = "default",
        value_name = "NAMESPACE"
    )]
    pub namespace: String,

    /// Every namespace (ignores `-n`).
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
}

/// The namespace flags, then the server flags, of the commands on namespaced kinds.
#[derive(Clone, Debug, clap::Args)]
pub struct NamespacedServerArgs {
    #[command(flatten)]
    pub ns: NamespaceArgs,

    #[command(flatten)]
    pub server: ServerArgs,
}

/// Arguments of `flotilla get`.
#[derive(Debug, clap::Args)]
#[command(after_help = GET_EXAMPLES)]
pub struct GetArgs {
    /// What to list, or a comma list of kinds as kubectl takes (`pp,op`). One of: clusters,
    /// propagationpolicies (pp), clusterpropagationpolicies (cpp), clustertaintpolicies (ctp),
    /// overridepolicies (op), clusteroverridepolicies (cop), workloads (or a workload kind:
    /// deployments, configmaps, namespaces, clusterroles, ...), resourcebindings (bindings,
    /// rb), clusterresourcebindings (crb), works, events (ev), shards (of the services run
    /// with `--shards`; names are services).
    #[arg(value_parser = KindList::parse, value_name = "KIND[,KIND...]")]
    pub kind: KindList,

    /// Names to show; every object when none is given. Workloads may be named `Kind/name`,
    /// Works `CLUSTER/name`.
    #[arg(value_name = "NAME")]
    pub names: Vec<String>,

    /// Output format: a table, a wider table, the objects as JSON (the proto3 mapping of the
    /// wire types) or YAML, or `kind/name` lines.
    #[arg(short = 'o', long, value_enum, default_value_t = Format::Table)]
    pub output: Format,

    /// After listing, watch for changes and print a row (or object) for each.
    #[arg(short = 'w', long)]
    pub watch: bool,

    /// Label selector (`env=prod,tier!=db`).
    #[arg(
        short = 'l',
        long,
        default_value = "",
        hide_default_value = true,
        value_name = "SELECTOR"
    )]
    pub selector: String,

    /// Bindings and Works: only those on this cluster (bindings: targets or eviction tasks).
    #[arg(long, value_name = "CLUSTER")]
    pub cluster: Option<String>,

    #[command(flatten)]
    pub on: NamespacedServerArgs,
}

const GET_EXAMPLES: &str = "\
Examples:
  flotilla get clusters                   # NAME, MODE, READY, TAINTS, AGE
  flotilla get rb                         # bindings in `default`: where each one runs
  flotilla get rb nginx-deployment -w     # watch a binding move during a failover
  flotilla get pp -A -o yaml              # every propagation policy, as YAML
  flotilla get pp,op                      # two kinds, one table each
  flotilla get works --cluster member1    # the Works on one member
  flotilla get events -A
  flotilla get shards                     # who holds each shard of the sharded services";

/// The kinds `get` lists, in the order given.
#[derive(Clone, Debug)]
pub struct KindList(pub Vec<Kind>);

impl KindList {
    fn parse(text: &str) -> Result<KindList, String> {
        Kind::parse_list(text).map(KindList)
    }
}

/// Arguments of `flotilla describe`.
#[derive(Debug, clap::Args)]
#[command(after_help = DESCRIBE_EXAMPLES)]
pub struct DescribeArgs {
    /// What to describe (same kinds as `get`).
    #[arg(value_parser = Kind::parse, value_name = "KIND")]
    pub kind: Kind,

    /// Names to describe; every object in scope when none is given.
    #[arg(value_name = "NAME")]
    pub names: Vec<String>,

    /// Works and bindings: only those on this cluster.
    #[arg(long, value_name = "CLUSTER")]
    pub cluster: Option<String>,

    #[command(flatten)]
    pub on: NamespacedServerArgs,
}

const DESCRIBE_EXAMPLES: &str = "\
Examples:
  flotilla describe cluster member1         # spec, taints, conditions, capacity, events
  flotilla describe rb nginx-deployment     # placement, targets, eviction tasks, status, events
  flotilla describe pp nginx-propagation -n default";

fn scope(kind: &Kind, ns: &NamespaceArgs, selector: &str, cluster: Option<String>) -> Scope {
    Scope {
        namespace: if ns.all_namespaces || !kind.namespaced() {
            None
        } else {
            Some(ns.namespace.clone())
        },
        label_selector: selector.to_owned(),
        cluster,
        workload_kind: match kind {
            Kind::Workload(k) => k.clone(),
            _ => None,
        },
        cluster_scoped: matches!(kind, Kind::ClusterResourceBinding),
        namespaced_only: matches!(kind, Kind::ResourceBinding),
    }
}

/// `$run::<T>($args, $scope)` with `T` the api type of `kind`, awaited; credentials are
/// write-only.
macro_rules! by_kind {
    ($kind:expr, $run:ident($args:expr, $scope:expr)) => {
        match $kind {
            Kind::Cluster => $run::<v1::Cluster>($args, $scope).await,
            Kind::PropagationPolicy => $run::<v1::PropagationPolicy>($args, $scope).await,
            Kind::ClusterPropagationPolicy => {
                $run::<v1::ClusterPropagationPolicy>($args, $scope).await
            }
            Kind::ClusterTaintPolicy => $run::<v1::ClusterTaintPolicy>($args, $scope).await,
            Kind::OverridePolicy => $run::<v1::OverridePolicy>($args, $scope).await,
            Kind::ClusterOverridePolicy => $run::<v1::ClusterOverridePolicy>($args, $scope).await,
            Kind::Workload(_) => $run::<v1::Workload>($args, $scope).await,
            Kind::ResourceBinding | Kind::ClusterResourceBinding => {
                $run::<v1::ResourceBinding>($args, $scope).await
            }
            Kind::Work => $run::<v1::Work>($args, $scope).await,
            Kind::Event => $run::<v1::Event>($args, $scope).await,
            Kind::Credentials => credentials_are_write_only(),
            Kind::Shard => shards_are_not_objects(),
        }
    };
}

/// Runs `flotilla get`: each kind of the list in turn, as kubectl does (tables apart by a
/// blank line; `-o yaml` documents apart by `---`; `-o json` one object per kind). `-w`
/// watches one kind.
pub async fn get(args: GetArgs) -> anyhow::Result<ExitCode> {
    let kinds = &args.kind.0;
    if args.watch && kinds.len() > 1 {
        anyhow::bail!("-w watches one kind at a time; {} were given", kinds.len());
    }
    let mut code = ExitCode::SUCCESS;
    for (i, kind) in kinds.iter().enumerate() {
        if i > 0 {
            match args.output {
                Format::Table | Format::Wide => println!(),
                Format::Yaml => println!("---"),
                Format::Json | Format::Name => {}
            }
        }
        let this = if *kind == Kind::Shard {
            get_shards(&args).await?
        } else {
            let scope = scope(kind, &args.on.ns, &args.selector, args.cluster.clone());
            by_kind!(kind, get_kind(&args, &scope))?
        };
        if this != ExitCode::SUCCESS {
            code = this;
        }
    }
    Ok(code)
}

/// Runs `flotilla describe`.
pub async fn describe(args: DescribeArgs) -> anyhow::Result<ExitCode> {
    let scope = scope(&args.kind, &args.on.ns, "", args.cluster.clone());
    by_kind!(args.kind, describe_kind(&args, &scope))
}

/// The named objects (or all of them), with the names that were not found.
async fn fetch<T: ApiObject>(
    api: &mut ApiClient<Conn>,
    scope: &Scope,
    names: &[String],
) -> anyhow::Result<(Vec<T>, i64, Vec<String>)> {
    if names.is_empty() {
        let (items, revision) = list_all::<T>(api, scope)
            .await
            .map_err(|s| status_error(format!("listing {}s", T::NAME), &s))?;
        return Ok((items, revision, vec![]));
    }
    let mut items = Vec::new();
    let mut missing = Vec::new();
    for name in names {
        let found = T::get_named(api, scope, name)
            .await
            .map_err(|s| status_error(format!("getting {} {name:?}", T::NAME), &s))?;
        if found.is_empty() {
            missing.push(name.clone());
        }
        items.extend(found);
    }
    Ok((items, 0, missing))
}

fn not_found_message<T: ApiObject>(scope: &Scope, missing: &[String]) -> String {
    let place = match &scope.namespace {
        Some(ns) if T::NAMESPACED => format!(" in namespace {ns:?}"),
        _ => String::new(),
    };
    missing
        .iter()
        .map(|n| format!("{} {n:?} not found{place}", T::NAME))
        .collect::<Vec<_>>()
        .join("\n")
}

fn no_resources(scope: &Scope, namespaced: bool) -> String {
    match &scope.namespace {
        Some(ns) if namespaced => format!("No resources found in {ns} namespace."),
        _ => "No resources found.".into(),
    }
}

async fn get_kind<T: ApiObject>(args: &GetArgs, scope: &Scope) -> anyhow::Result<ExitCode> {
    let mut api = args.on.server.api().await?;
    let (mut items, mut revision, missing) = fetch::<T>(&mut api, scope, &args.names).await?;
    T::sort(&mut items);
    let now = now();
    let wide = args.output == Format::Wide;
    let mut table = Table::new(T::headers(wide));
    match args.output {
        Format::Table | Format::Wide => {
            for item in &items {
                table.row(item.row(&now, wide));
            }
            if !table.is_empty() {
                print!("{}", table.render());
            } else if missing.is_empty() && !args.watch {
                eprintln!("{}", no_resources(scope, T::NAMESPACED));
            }
        }
        Format::Json | Format::Yaml => {
            if args.names.len() == 1 && items.len() == 1 && !args.watch {
                print_value(&kubernetes(&items[0])?, args.output)?;
            } else if !args.watch || !items.is_empty() {
                let shaped = items
                    .iter()
                    .map(kubernetes)
                    .collect::<Result<Vec<_>, _>>()?;
                print_value(&shape::list(shaped, revision), args.output)?;
            }
        }
        Format::Name => {
            for item in &items {
                println!("{}/{}", T::NAME, item.name());
            }
        }
    }
    if !missing.is_empty() {
        eprintln!("error: {}", not_found_message::<T>(scope, &missing));
    }
    if !args.watch {
        return Ok(if missing.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    // Named gets have no list revision: watch from the current state without replaying it.
    if revision == 0 {
        let (_, r) = list_all::<T>(&mut api, scope)
            .await
            .map_err(|s| status_error(format!("listing {}s", T::NAME), &s))?;
        revision = r;
    }
    let names: BTreeSet<&str> = args.names.iter().map(String::as_str).collect();
    // `-w` in a table prints a row only when a printed column changed (AGE aside), as kubectl
    // does: the controllers' status writes that show nowhere in the table print nothing.
    let age = T::headers(wide).iter().position(|h| *h == "AGE");
    let printed = |object: &T| -> Vec<String> {
        let mut row = object.row(&now, wide);
        if let Some(i) = age.filter(|i| *i < row.len()) {
            row.remove(i);
        }
        row
    };
    let mut last: HashMap<String, Vec<String>> = items
        .iter()
        .map(|o| (format!("{}/{}", o.namespace(), o.name()), printed(o)))
        .collect();
    let mut watch_api = args.on.server.api_streaming().await?;
    let mut header_printed = !table.is_empty();
    let mut failures = 0u32;
    loop {
        let mut stream = match T::watch(&mut watch_api, scope, revision).await {
            Ok(s) => s,
            Err(s) if s.code() == tonic::Code::OutOfRange => {
                // Compacted: re-list and continue from there.
                let (_, r) = list_all::<T>(&mut api, scope)
                    .await
                    .map_err(|s| status_error(format!("listing {}s", T::NAME), &s))?;
                revision = r;
                continue;
            }
            Err(s) => return Err(status_error(format!("watching {}s", T::NAME), &s)),
        };
        while let Some(item) = stream.next().await {
            let change = match item {
                Ok(c) => c,
                Err(s) => {
                    eprintln!("watch interrupted ({}); resuming", s.message());
                    break;
                }
            };
            failures = 0;
            revision = revision.max(change.revision);
            if change.kind == v1::WatchEventType::Bookmark {
                continue;
            }
            let Some(object) = change.object else {
                continue;
            };
            if !names.is_empty() && !names.contains(object.name()) || !scope.shows(&object) {
                continue;
            }
            if matches!(args.output, Format::Table | Format::Wide) {
                let key = format!("{}/{}", object.namespace(), object.name());
                let row = printed(&object);
                if change.kind == v1::WatchEventType::Deleted {
                    last.remove(&key);
                } else if last.get(&key) == Some(&row) {
                    continue;
                } else {
                    last.insert(key, row);
                }
            }
            print_change(&object, args.output, &mut table, &mut header_printed)?;
        }
        failures += 1;
        if failures > 5 {
            anyhow::bail!("the watch keeps ending; giving up");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn print_change<T: ApiObject>(
    object: &T,
    format: Format,
    table: &mut Table,
    header_printed: &mut bool,
) -> anyhow::Result<()> {
    use std::io::Write as _;
    match format {
        Format::Table | Format::Wide => {
            let row = object.row(&now(), format == Format::Wide);
            if !*header_printed {
                let mut t = Table::new(T::headers(format == Format::Wide));
                t.row(row.clone());
                *table = t;
                print!("{}", table.render().lines().next().unwrap_or_default());
                println!();
                *header_printed = true;
            }
            print!("{}", table.format_line(&row));
        }
        Format::Json => println!("{}", serde_json::to_string(&kubernetes(object)?)?),
        Format::Yaml => {
            println!("---");
            print_value(&kubernetes(object)?, Format::Yaml)?;
        }
        Format::Name => println!("{}/{}", T::NAME, object.name()),
    }
    std::io::stdout().flush().context("writing to stdout")
}

async fn describe_kind<T: ApiObject + Describe>(
    args: &DescribeArgs,
    scope: &Scope,
) -> anyhow::Result<ExitCode> {
    let mut api = args.on.server.api().await?;
    let (items, _, missing) = fetch::<T>(&mut api, scope, &args.names).await?;
    let now = now();
    let mut first = true;
    for item in &items {
        if !first {
            println!();
        }
        first = false;
        print!("{}", item.describe(&now));
        print!("{}", events_section::<T>(&mut api, item, &now).await);
    }
    if items.is_empty() && missing.is_empty() {
        eprintln!("{}", no_resources(scope, T::NAMESPACED));
    }
    if !missing.is_empty() {
        eprintln!("error: {}", not_found_message::<T>(scope, &missing));
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// Credentials Secrets are never read back (S4).
fn shards_are_not_objects() -> anyhow::Result<ExitCode> {
    anyhow::bail!(
        "shards are not objects: `flotilla get shards [SERVICE]` shows who holds each one"
    )
}

/// `flotilla get shards [SERVICE...]`: the shard table of each sharded service (`--shards`):
/// who holds each shard and since which revision; `-o wide` adds the holder's member id,
/// `-o json|yaml` gives the replicas too, `-o name` lists `shard/<service>/<n>`.
async fn get_shards(args: &GetArgs) -> anyhow::Result<ExitCode> {
    if args.watch {
        anyhow::bail!("-w does not watch shards; run `flotilla get shards` again");
    }
    let mut api = args.on.server.api().await?;
    let wanted: Vec<String> = if args.names.is_empty() {
        vec![String::new()]
    } else {
        args.names.clone()
    };
    let mut services = Vec::new();
    for name in &wanted {
        let response = api
            .list_shards(v1::ListShardsRequest {
                service: name.clone(),
            })
            .await
            .map_err(|s| status_error("listing shards", &s))?
            .into_inner();
        if response.services.is_empty() && !name.is_empty() {
            eprintln!("service {name:?} runs no shards (one elected replica, or not running)");
        }
        services.extend(response.services);
    }
    match args.output {
        Format::Json | Format::Yaml => {
            let value = serde_json::json!({
                "services": services.iter().map(|s| serde_json::json!({
                    "service": s.service,
                    "members": s.members.iter().map(|m| serde_json::json!({
                        "id": m.id,
                        "identity": m.identity,
                        "shardCount": m.shard_count,
                        "held": m.held,
                    })).collect::<Vec<_>>(),
                    "shards": s.shards.iter().map(|r| serde_json::json!({
                        "shard": r.shard,
                        "owner": r.owner,
                        "member": r.member,
                        "term": r.term,
                    })).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            });
            print_value(&value, args.output)?;
        }
        Format::Name => {
            for s in &services {
                for r in &s.shards {
                    println!("shard/{}/{}", s.service, r.shard);
                }
            }
        }
        Format::Table | Format::Wide => {
            if services.is_empty() {
                eprintln!(
                    "No sharded services: every controller runs one elected replica \
                     (--shards 0)."
                );
                return Ok(ExitCode::SUCCESS);
            }
            let wide = matches!(args.output, Format::Wide);
            let mut headers = vec!["SERVICE", "SHARD", "OWNER", "TERM"];
            if wide {
                headers.extend(["MEMBER", "REPLICAS"]);
            }
            let mut table = Table::new(headers);
            for s in &services {
                for r in &s.shards {
                    let owned = !r.owner.is_empty();
                    let mut row = vec![
                        s.service.clone(),
                        r.shard.to_string(),
                        if owned {
                            r.owner.clone()
                        } else {
                            "<none>".into()
                        },
                        if owned {
                            r.term.to_string()
                        } else {
                            "<none>".into()
                        },
                    ];
                    if wide {
                        row.push(if owned {
                            r.member.clone()
                        } else {
                            "<none>".into()
                        });
                        row.push(s.members.len().to_string());
                    }
                    table.row(row);
                }
            }
            print!("{}", table.render());
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn credentials_are_write_only() -> anyhow::Result<ExitCode> {
    anyhow::bail!(
        "member credentials are write-only: `flotilla describe cluster NAME` shows which Secret \
         a cluster uses, never its values"
    )
}
