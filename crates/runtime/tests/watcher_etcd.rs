//! The watcher and reflector against a REAL etcd (a dedicated instance, because compaction
//! is global to an etcd): the link to etcd is cut, objects are deleted and updated and the
//! history compacted while the watcher cannot see it, the link heals, and the cache must
//! equal the store again, deletions included, without ever going back in revision (F5, I7).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use flotilla_runtime::backoff::Backoff;
use flotilla_runtime::reflector::{Cache, Writer, reflect};
use flotilla_runtime::testing::TcpProxy;
use flotilla_runtime::watcher::{Event, WatcherConfig, raw, watcher};
use flotilla_store::testing::EtcdServer;
use flotilla_store::{EtcdConfig, EtcdStore, KeyValue, Revision, Store};
use futures::{Stream, StreamExt};

type Events = Pin<Box<dyn Stream<Item = Event<KeyValue>> + Send>>;

async fn next(events: &mut Events) -> Event<KeyValue> {
    tokio::time::timeout(Duration::from_secs(60), events.next())
        .await
        .expect("an event in time")
        .expect("the watcher never ends")
}

async fn until(
    events: &mut Events,
    mut done: impl FnMut(&Event<KeyValue>) -> bool,
) -> Vec<Event<KeyValue>> {
    let mut out = Vec::new();
    loop {
        let ev = next(events).await;
        let stop = done(&ev);
        out.push(ev);
        if stop {
            return out;
        }
    }
}

async fn snapshot(store: &dyn Store, prefix: &str) -> BTreeMap<String, (Revision, Bytes)> {
    let (kvs, _) = store.list(prefix, 0).await.unwrap();
    kvs.into_iter()
        .map(|kv| (kv.key, (kv.mod_revision, kv.value)))
        .collect()
}

fn cached(cache: &Cache<KeyValue>) -> BTreeMap<String, (Revision, Bytes)> {
    cache
        .objects()
        .into_iter()
        .map(|o| (o.key, (o.revision, o.value.value.clone())))
        .collect()
}

fn upstream(endpoint: &str) -> SocketAddr {
    let hostport = endpoint.split("://").last().unwrap().trim_end_matches('/');
    hostport.parse().expect("a 127.0.0.1:port endpoint")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_while_cut_off_from_etcd_relists_and_the_cache_equals_the_store() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("flotilla_runtime=debug")
        .with_test_writer()
        .try_init();
    let etcd = EtcdServer::dedicated().await;
    let proxy = TcpProxy::start(upstream(&etcd.endpoints()[0]))
        .await
        .unwrap();
    let namespace = format!("/flotilla-test/runtime-watcher-{:x}/", std::process::id());
    let direct = EtcdStore::connect(
        EtcdConfig::new(etcd.endpoints().to_vec()).with_namespace(namespace.clone()),
    )
    .await
    .unwrap();
    let mut via_proxy = EtcdConfig::new([proxy.url()]).with_namespace(namespace);
    via_proxy.connect_timeout = Duration::from_secs(1);
    via_proxy.request_timeout = Duration::from_secs(2);
    let watched: Arc<dyn Store> = Arc::new(EtcdStore::connect(via_proxy).await.unwrap());

    for i in 0..20 {
        direct
            .put(&format!("b/{i:02}"), Bytes::from_static(b"v1"), None)
            .await
            .unwrap();
    }
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
    for i in 10..15 {
        direct
            .put(&format!("b/{i:02}"), Bytes::from_static(b"v3"), None)
            .await
            .unwrap();
    }
    for i in 20..25 {
        direct
            .put(&format!("b/{i:02}"), Bytes::from_static(b"v3"), None)
            .await
            .unwrap();
    }
    let last = direct.current_revision().await.unwrap();
    direct.compact(last).await.unwrap();
    // The watcher notices the break and retries against the cut link for a while.
    assert!(
        tokio::time::timeout(Duration::from_secs(2), events.next())
            .await
            .is_err(),
        "nothing can arrive while the link is cut"
    );
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
    while let Ok(Some(ev)) = tokio::time::timeout(Duration::from_millis(300), events.next()).await {
        all.push(ev);
    }
    assert_eq!(
        cached(&cache),
        snapshot(&direct, "b/").await,
        "the cache equals etcd, deletions included"
    );
    for i in 0..10 {
        assert!(cache.get(&format!("b/{i:02}")).is_none());
    }
    let mut deleted: Vec<String> = all
        .iter()
        .filter(|e| matches!(e, Event::Delete { .. }))
        .map(|e| e.key().unwrap().to_owned())
        .collect();
    deleted.sort();
    deleted.dedup();
    assert_eq!(
        deleted,
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
    let etcd = EtcdServer::dedicated().await;
    let proxy = TcpProxy::start(upstream(&etcd.endpoints()[0]))
        .await
        .unwrap();
    let namespace = format!("/flotilla-test/runtime-resume-{:x}/", std::process::id());
    let direct = EtcdStore::connect(
        EtcdConfig::new(etcd.endpoints().to_vec()).with_namespace(namespace.clone()),
    )
    .await
    .unwrap();
    for i in 0..6 {
        direct
            .put(&format!("b/{i}"), Bytes::from_static(b"v1"), None)
            .await
            .unwrap();
    }
    let mut reflectors = Vec::new();
    for relist_on_break in [false, true] {
        let mut cfg = EtcdConfig::new([proxy.url()]).with_namespace(namespace.clone());
        cfg.connect_timeout = Duration::from_secs(1);
        cfg.request_timeout = Duration::from_secs(2);
        let store: Arc<dyn Store> = Arc::new(EtcdStore::connect(cfg).await.unwrap());
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
        assert!(
            tokio::time::timeout(Duration::from_millis(300), events.next())
                .await
                .is_err()
        );
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
