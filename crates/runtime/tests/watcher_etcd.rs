//! The watcher and reflector against a REAL etcd (a dedicated instance, because compaction
//! is global to an etcd): the link to etcd is cut, objects are deleted and updated and the
//! history compacted while the watcher cannot see it, the link heals, and the cache must
//! equal the store again, deletions included, without ever going back in revision (F5, I7).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::watch_support::{
    assert_quiet, cached, deleted_keys, drain_quiet, snapshot, until_within,
};
use flotilla_runtime::backoff::Backoff;
use flotilla_runtime::reflector::{Writer, reflect};
use flotilla_runtime::testing::TcpProxy;
use flotilla_runtime::watcher::{Event, WatcherConfig, raw, watcher};
use flotilla_store::testing::EtcdServer;
use flotilla_store::{EtcdConfig, EtcdStore, KeyValue, Store};

type Events = crate::watch_support::Events<KeyValue>;

const WITHIN: Duration = Duration::from_secs(60);

async fn until(
    events: &mut Events,
    done: impl FnMut(&Event<KeyValue>) -> bool,
) -> Vec<Event<KeyValue>> {
    until_within(events, WITHIN, done).await
}

fn upstream(endpoint: &str) -> SocketAddr {
    let hostport = endpoint.split("://").last().unwrap().trim_end_matches('/');
    hostport.parse().expect("a 127.0.0.1:port endpoint")
}

/// A dedicated etcd, a proxy in front of it, and a direct client in a fresh namespace named
/// after `test`.
async fn etcd_behind_proxy(test: &str) -> (EtcdServer, TcpProxy, EtcdStore, String) {
    let etcd = EtcdServer::dedicated().await;
    let proxy = TcpProxy::start(upstream(&etcd.endpoints()[0]))
        .await
        .unwrap();
    let namespace = format!("/flotilla-test/runtime-{test}-{:x}/", std::process::id());
    let direct = EtcdStore::connect(
        EtcdConfig::new(etcd.endpoints().to_vec()).with_namespace(namespace.clone()),
    )
    .await
    .unwrap();
    (etcd, proxy, direct, namespace)
}

/// A client of `namespace` through `proxy`, with short timeouts (a cut link fails fast).
async fn via_proxy(proxy: &TcpProxy, namespace: String) -> Arc<dyn Store> {
    let mut config = EtcdConfig::new([proxy.url()]).with_namespace(namespace);
    config.connect_timeout = Duration::from_secs(1);
    config.request_timeout = Duration::from_secs(2);
    Arc::new(EtcdStore::connect(config).await.unwrap())
}

/// Puts `value` under each of `keys`.
async fn put_each(store: &dyn Store, keys: impl IntoIterator<Item = String>, value: &'static [u8]) {
    for key in keys {
        store
            .put(&key, Bytes::from_static(value), None)
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_while_cut_off_from_etcd_relists_and_the_cache_equals_the_store() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("flotilla_runtime=debug")
        .with_test_writer()
        .try_init();
    let (_etcd, proxy, direct, namespace) = etcd_behind_proxy("watcher").await;
    let watched = via_proxy(&proxy, namespace).await;
    put_each(&direct, (0..20).map(|i| format!("b/{i:02}")), b"v1").await;
    direct
        .put("other/x", Bytes::from_static(b"v1"), None)
        .await
        .unwrap();

    let writer = Writer::new();
    let cache = writer.cache();
    let config = WatcherConfig::default()
        .named("etcd-test")
        .page_size(7)
        .backoff(
            Backoff::new(Duration::from_millis(50), Duration::from_millis(500)).with_jitter(true),
        );
    let mut events: Events = Box::pin(reflect(writer, watcher(watched, "b/", config, raw)));
    let mut all = until(&mut events, |e| matches!(e, Event::InitDone { .. })).await;
    assert_eq!(cached(&cache), snapshot(&direct, "b/").await);
    assert_eq!(cache.len(), 20);

    // A live change arrives through the watch.
    let r = direct
        .put("b/00", Bytes::from_static(b"v2"), None)
        .await
        .unwrap();
    all.extend(until(&mut events, |e| e.revision() == r).await);

    // Cut the link; while the watcher is blind, delete, update, add, and compact.
    proxy.cut().await;
    for i in 0..10 {
        direct.delete(&format!("b/{i:02}")).await.unwrap();
    }
    put_each(&direct, (10..15).map(|i| format!("b/{i:02}")), b"v3").await;
    put_each(&direct, (20..25).map(|i| format!("b/{i:02}")), b"v3").await;
    let last = direct.current_revision().await.unwrap();
    direct.compact(last).await.unwrap();
    // The watcher notices the break and retries against the cut link for a while.
    assert_quiet(
        &mut events,
        Duration::from_secs(2),
        "nothing can arrive while the link is cut",
    )
    .await;
    proxy.restore();

    let healed = until(
        &mut events,
        |e| matches!(e, Event::InitDone { revision } if *revision >= last),
    )
    .await;
    assert!(
        healed.iter().any(|e| matches!(e, Event::Init { .. })),
        "the compacted resume forced a re-list: {healed:?}"
    );
    all.extend(healed);
    all.extend(drain_quiet(&mut events, Duration::from_millis(300)).await);
    assert_eq!(
        cached(&cache),
        snapshot(&direct, "b/").await,
        "the cache equals etcd, deletions included"
    );
    for i in 0..10 {
        assert!(cache.get(&format!("b/{i:02}")).is_none());
    }
    assert_eq!(
        deleted_keys(&all),
        (0..10).map(|i| format!("b/{i:02}")).collect::<Vec<_>>()
    );

    // Positions never go back.
    let mut position = 0;
    for ev in &all {
        match ev {
            Event::Init { revision } => assert!(*revision >= position),
            Event::InitApply(_) => {}
            _ => {
                assert!(ev.revision() >= position, "{} < {position}", ev.revision());
                position = ev.revision();
            }
        }
    }

    // And it keeps following live changes after the re-list.
    let r = direct
        .put("b/99", Bytes::from_static(b"v4"), None)
        .await
        .unwrap();
    until(&mut events, |e| e.revision() == r).await;
    assert_eq!(cached(&cache), snapshot(&direct, "b/").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_stream_resumes_from_the_last_revision_or_relists_if_configured() {
    let (_etcd, proxy, direct, namespace) = etcd_behind_proxy("resume").await;
    put_each(&direct, (0..6).map(|i| format!("b/{i}")), b"v1").await;
    let mut reflectors = Vec::new();
    for relist_on_break in [false, true] {
        let store = via_proxy(&proxy, namespace.clone()).await;
        let writer = Writer::new();
        let cache = writer.cache();
        let config = WatcherConfig::default()
            .backoff(Backoff::new(
                Duration::from_millis(50),
                Duration::from_millis(500),
            ))
            .relist_on_break(relist_on_break);
        let mut events: Events = Box::pin(reflect(writer, watcher(store, "b/", config, raw)));
        until(&mut events, |e| matches!(e, Event::InitDone { .. })).await;
        // Open the watch.
        assert_quiet(&mut events, Duration::from_millis(300), "no event").await;
        reflectors.push((relist_on_break, cache, events));
    }

    proxy.cut().await;
    direct.delete("b/0").await.unwrap();
    direct
        .put("b/1", Bytes::from_static(b"v2"), None)
        .await
        .unwrap();
    let last = direct
        .put("b/7", Bytes::from_static(b"v2"), None)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    proxy.restore();

    for (relist_on_break, cache, mut events) in reflectors {
        let after = until(&mut events, |e| match e {
            Event::InitDone { revision } => *revision >= last,
            Event::Apply(_) | Event::Delete { .. } => e.revision() == last,
            Event::Init { .. } | Event::InitApply(_) | Event::Progress { .. } => false,
        })
        .await;
        let relisted = after.iter().any(|e| matches!(e, Event::Init { .. }));
        assert_eq!(relisted, relist_on_break, "{after:?}");
        if !relist_on_break {
            // Resumed from last seen + 1: the changes arrive as the watch events they were.
            let kinds: Vec<(bool, &str)> = after
                .iter()
                .map(|e| (matches!(e, Event::Delete { .. }), e.key().unwrap()))
                .collect();
            assert_eq!(kinds, vec![(true, "b/0"), (false, "b/1"), (false, "b/7")]);
        }
        assert_eq!(cached(&cache), snapshot(&direct, "b/").await);
    }
}
