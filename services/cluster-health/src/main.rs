//! `flotilla-cluster-health`: cluster health and controller taints (see the library docs).

flotilla_runtime::global_allocator!();

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    flotilla_runtime::service::main::<flotilla_cluster_health::ClusterHealth>().await
}
