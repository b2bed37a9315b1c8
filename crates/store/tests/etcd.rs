//! The conformance suite on a real etcd (one test per case). The harness provides etcd:
//! `FLOTILLA_ETCD_ENDPOINTS`, else the local Docker image, else the `etcd` binary; with none
//! of them these tests fail, they are never skipped.

#![cfg(feature = "test-util")]

use std::sync::Arc;

use flotilla_store::Store;
use flotilla_store::conformance::{self, Ctx};
use flotilla_store::testing::{EtcdServer, EtcdSource};

macro_rules! etcd_case {
    ($($test:ident => $case:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            let server = EtcdServer::start().await;
            let store = server.store(stringify!($case)).await;
            conformance::$case(&Ctx::new(Arc::new(store))).await;
        }
    )*};
}

etcd_case! {
    etcd_get_put_delete => get_put_delete,
    etcd_range_pagination => range_pagination,
    etcd_range_at_revision => range_at_revision,
    etcd_create_if_absent => create_if_absent,
    etcd_cas_conflict => cas_conflict,
    etcd_txn_all_or_nothing => txn_all_or_nothing,
    etcd_txn_op_limit => txn_op_limit,
    etcd_watch_ordering => watch_ordering,
    etcd_watch_resume_from_revision => watch_resume_from_revision,
    etcd_watch_sees_deletes => watch_sees_deletes,
    etcd_watch_progress => watch_progress,
    etcd_lease_expiry_removes_keys => lease_expiry_removes_keys,
    etcd_lease_revoke_and_keep_alive => lease_revoke_and_keep_alive,
    etcd_election_handover => election_handover,
}

/// Compaction is global to an etcd: this case always gets an instance of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_compaction_then_watch_is_compacted() {
    let server = EtcdServer::dedicated().await;
    assert_ne!(server.source(), EtcdSource::External);
    let store = server.store("compaction").await;
    conformance::compaction_then_watch_is_compacted(&Ctx::new(Arc::new(store))).await;
}

#[test]
fn every_case_runs_on_etcd() {
    let source = include_str!("etcd.rs");
    conformance::assert_every_case_in(source, "etcd", |case| format!("etcd_{case}"));
}

/// Namespaces isolate tests sharing one etcd, and the harness says what it started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_namespaces_are_isolated() {
    let server = EtcdServer::start().await;
    let a = server.store("iso").await;
    let b = server.store("iso").await;
    assert_ne!(a.namespace(), b.namespace());
    a.put("k", "from-a".into(), None).await.unwrap();
    assert!(b.get("k").await.unwrap().is_none());
    let (kvs, _) = a.list("", 0).await.unwrap();
    assert_eq!(kvs.len(), 1);
    assert_eq!(kvs[0].key, "k", "keys come back relative to the namespace");
    assert!(a.status().await.unwrap().starts_with("3."));
    if server.source() != EtcdSource::External {
        assert!(
            server.started_in() < std::time::Duration::from_secs(5),
            "etcd took {:?} to start",
            server.started_in()
        );
    }
}

/// A stopped etcd is `Unavailable`, which is retryable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_down_is_unavailable() {
    let server = EtcdServer::dedicated().await;
    let store = server.store("down").await;
    store.put("k", "v".into(), None).await.unwrap();
    drop(server);
    let err = store.get("k").await.unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
}

/// The harness's order: the external endpoints, else the local Docker image, else the binary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_harness_picks_sources_in_order() {
    let dedicated = EtcdServer::dedicated().await;
    let forced = std::env::var(flotilla_store::testing::SOURCE_ENV).ok();
    let expected = if forced.as_deref() == Some("binary") {
        EtcdSource::Binary
    } else if flotilla_store::testing::docker_image_available() {
        EtcdSource::Docker
    } else {
        EtcdSource::Binary
    };
    assert_eq!(dedicated.source(), expected);
    let shared = EtcdServer::start().await;
    if std::env::var(flotilla_store::testing::ENDPOINTS_ENV).is_ok() {
        assert_eq!(shared.source(), EtcdSource::External);
    } else {
        assert_eq!(shared.source(), expected);
        assert_ne!(
            shared.endpoints(),
            dedicated.endpoints(),
            "each test gets its own etcd"
        );
    }
}

/// User/password authentication: with the right credentials requests work; without them,
/// or with a wrong password, they fail with `PermissionDenied`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_user_password_auth() {
    use flotilla_store::{EtcdConfig, EtcdStore, StoreError};
    let server = EtcdServer::dedicated().await;
    let admin = server.store("auth-admin").await;
    let mut client = admin.client().clone();
    client.role_add("root").await.unwrap();
    client.user_add("root", "s3cret", None).await.unwrap();
    client.user_grant_role("root", "root").await.unwrap();
    client.auth_enable().await.unwrap();

    let config = |user: Option<(&str, &str)>| EtcdConfig {
        user: user.map(|(u, p)| (u.to_owned(), p.to_owned())),
        ..EtcdConfig::new(server.endpoints().to_vec()).with_namespace("/auth-test/")
    };
    let store = EtcdStore::connect(config(Some(("root", "s3cret"))))
        .await
        .unwrap();
    store.put("k", "v".into(), None).await.unwrap();
    assert_eq!(store.get("k").await.unwrap().unwrap().value, "v");

    let anonymous = EtcdStore::connect(config(None)).await.unwrap();
    let err = anonymous.get("k").await.unwrap_err();
    assert!(matches!(err, StoreError::PermissionDenied(_)), "{err:?}");
    let wrong = EtcdStore::connect(config(Some(("root", "wrong")))).await;
    assert!(
        matches!(wrong, Err(StoreError::PermissionDenied(_))),
        "{wrong:?}"
    );

    // A service user whose role covers only its namespace can do everything the store does.
    let mut root = store.client().clone();
    root.role_add("svc-role").await.unwrap();
    root.role_grant_permission(
        "svc-role",
        etcd_client::Permission::read_write("/auth-test/").with_prefix(),
    )
    .await
    .unwrap();
    root.user_add("svc", "svc-pw", None).await.unwrap();
    root.user_grant_role("svc", "svc-role").await.unwrap();
    let svc = EtcdStore::connect(EtcdConfig {
        namespace: "/auth-test/svc/".into(),
        ..config(Some(("svc", "svc-pw")))
    })
    .await
    .unwrap();
    assert!(svc.current_revision().await.unwrap() > 1);
    let ctx = Ctx::new(Arc::new(svc));
    conformance::cas_conflict(&ctx).await;
    conformance::watch_ordering(&ctx).await;
    conformance::lease_revoke_and_keep_alive(&ctx).await;
    let outside = EtcdStore::connect(EtcdConfig {
        user: Some(("svc".into(), "svc-pw".into())),
        ..EtcdConfig::new(server.endpoints().to_vec()).with_namespace("/elsewhere/")
    })
    .await
    .unwrap();
    let denied = outside.put("k", "v".into(), None).await.unwrap_err();
    assert!(
        matches!(denied, StoreError::PermissionDenied(_)),
        "{denied:?}"
    );
}

/// Mutual TLS: with the CA and a client certificate the store works; without the client
/// certificate the server refuses the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_mutual_tls() {
    use flotilla_store::testing::TestCerts;
    use flotilla_store::{EtcdConfig, EtcdStore, EtcdTls};
    let certs = TestCerts::generate();
    let server = EtcdServer::dedicated_tls(&certs).await;
    assert!(server.endpoints()[0].starts_with("https://"));
    let store = server.store("tls").await;
    store.put("k", "over tls".into(), None).await.unwrap();
    assert_eq!(store.get("k").await.unwrap().unwrap().value, "over tls");

    let no_client_cert = EtcdConfig {
        tls: Some(EtcdTls {
            ca_file: Some(certs.ca.clone()),
            ..EtcdTls::default()
        }),
        ..EtcdConfig::new(server.endpoints().to_vec())
    };
    let refused = EtcdStore::connect(no_client_cert).await.unwrap();
    assert!(
        refused.get("k").await.is_err(),
        "mutual TLS requires the client certificate"
    );
}

/// With `watch_prev_kv`, etcd's delete events carry the last value (MemStore always does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_watch_prev_kv_on_request() {
    use flotilla_store::{EtcdConfig, EtcdStore, Event};
    let server = EtcdServer::start().await;
    let namespace = server.store("prev-kv").await.namespace().to_owned();
    let store = EtcdStore::connect(EtcdConfig {
        watch_prev_kv: true,
        ..EtcdConfig::new(server.endpoints().to_vec()).with_namespace(namespace)
    })
    .await
    .unwrap();
    store.put("k", "last".into(), None).await.unwrap();
    let from = store.current_revision().await.unwrap() + 1;
    let mut watch = store.watch("k", Some(from)).await.unwrap();
    store.delete("k").await.unwrap();
    let batch = watch.next_batch(conformance::WAIT).await;
    let [
        Event::Delete {
            prev: Some(prev), ..
        },
    ] = &batch.events[..]
    else {
        panic!(
            "expected a delete with its previous value, got {:?}",
            batch.events
        );
    };
    assert_eq!(prev.value, "last");
}

/// A watch that replays a large backlog: etcd packs many revisions into one response, which
/// exceeded the client's default 4 MiB decode limit in a 10,000-binding failover (found by the
/// scheduler's burst test). The watch must replay all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_watch_replays_a_backlog_larger_than_4_mib() {
    let server = EtcdServer::start().await;
    let store = server.store("big-backlog").await;
    let value = bytes::Bytes::from(vec![b'x'; 200 * 1024]);
    let first = store.put("big/0", value.clone(), None).await.unwrap();
    for i in 1..40 {
        store
            .put(&format!("big/{i}"), value.clone(), None)
            .await
            .unwrap();
    }
    // 40 × 200 KiB ≈ 8 MiB of history from `first`
    let mut watch = store.watch("big/", Some(first)).await.unwrap();
    let mut seen = 0usize;
    while seen < 40 {
        let ev = tokio::time::timeout(std::time::Duration::from_secs(20), watch.next())
            .await
            .expect("the backlog arrives")
            .expect("the watch stays open")
            .expect("no watch error");
        if let flotilla_store::WatchEvent::Batch(batch) = ev {
            seen += batch.events.len();
        }
    }
    assert_eq!(seen, 40);
}

/// A member whose name stops resolving (a dead member's DNS name disappears, in compose and
/// in a StatefulSet alike) costs no request while another endpoint answers: reads and
/// guarded writes go to the endpoints that answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_an_endpoint_that_stops_resolving_costs_no_request() {
    use flotilla_store::{EtcdConfig, EtcdStore};
    let server = EtcdServer::start().await;
    let mut endpoints = server.endpoints().to_vec();
    endpoints.push("http://etcd-gone.invalid:2379".into());
    let config =
        EtcdConfig::new(endpoints).with_namespace(format!("/gone-{:08x}/", rand::random::<u32>()));
    let store = EtcdStore::connect(config).await.expect("connect");
    let mut failed = Vec::new();
    for i in 0..40 {
        let key = format!("k{i}");
        if let Err(e) = store.put(&key, bytes::Bytes::from_static(b"v"), None).await {
            failed.push(format!("put {key}: {e}"));
        }
        if let Err(e) = store.get(&key).await {
            failed.push(format!("get {key}: {e}"));
        }
    }
    assert!(
        failed.is_empty(),
        "{} of 80 failed: {failed:?}",
        failed.len()
    );
}
