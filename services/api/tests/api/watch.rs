//! List paging at one revision, and watches: order, filters, bookmarks, lifetimes.

use super::*;

#[tokio::test]
async fn list_pages_are_read_at_one_revision() {
    let (_store, api, mut client) = setup().await;
    for i in 0..5 {
        accepted(client.create_cluster(create_cluster(cluster(
            &format!("m{i}"),
            "http://127.0.0.1:1",
        ))))
        .await;
    }
    let mut names = vec![];
    let mut token = String::new();
    let mut revisions = vec![];
    loop {
        let page = accepted(client.list_clusters(v1::ListClustersRequest {
            page_size: 2,
            page_token: token.clone(),
            ..Default::default()
        }))
        .await;
        assert!(page.items.len() <= 2);
        names.extend(page.items.iter().map(|c| c.name().to_owned()));
        revisions.push(page.resource_version);
        if revisions.len() == 1 {
            // created after the first page: not part of this list
            accepted(client.create_cluster(create_cluster(cluster("m9", "http://127.0.0.1:1"))))
                .await;
        }
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(names, ["m0", "m1", "m2", "m3", "m4"]);
    assert_eq!(revisions.len(), 3);
    assert!(
        revisions.iter().all(|r| *r == revisions[0]),
        "{revisions:?}"
    );
    api.stop().await;
}

#[tokio::test]
async fn watch_sees_added_modified_deleted_in_order() {
    let (store, api, mut client) = setup().await;
    let a =
        accepted(client.create_cluster(create_cluster(cluster("a", "http://127.0.0.1:1")))).await;
    let mut stream = testing::watch_clusters(&mut client).await;
    let first = next(&mut stream).await;
    assert_eq!(first.r#type, WatchEventType::Added as i32);
    assert_eq!(first.object.as_ref().unwrap().name(), "a");
    let bookmark = next(&mut stream).await;
    assert_eq!(bookmark.r#type, WatchEventType::Bookmark as i32);
    assert!(bookmark.object.is_none() && bookmark.resource_version >= a.resource_version());

    let b =
        accepted(client.create_cluster(create_cluster(cluster("b", "http://127.0.0.1:1")))).await;
    let mut b2 = b.clone();
    b2.spec.as_mut().unwrap().region = "us".into();
    accepted(client.update_cluster(v1::UpdateClusterRequest { cluster: Some(b2) })).await;
    accepted(client.delete_cluster(v1::DeleteClusterRequest {
        name: "b".into(),
        preconditions: None,
    }))
    .await;
    let mut seen = vec![];
    let mut last = 0;
    for _ in 0..3 {
        let e = next(&mut stream).await;
        assert!(e.resource_version > last, "revisions increase");
        last = e.resource_version;
        let obj = e.object.unwrap();
        seen.push((
            WatchEventType::try_from(e.r#type).unwrap(),
            obj.name().to_owned(),
            obj.spec.map(|s| s.region).unwrap_or_default(),
        ));
    }
    assert_eq!(
        seen,
        [
            (WatchEventType::Added, "b".to_owned(), "eu".to_owned()),
            (WatchEventType::Modified, "b".to_owned(), "us".to_owned()),
            (WatchEventType::Deleted, "b".to_owned(), "us".to_owned()),
        ]
    );

    // From a List's resourceVersion: only what changed after it.
    let list = accepted(client.list_clusters(v1::ListClustersRequest::default())).await;
    accepted(client.create_cluster(create_cluster(cluster("c", "http://127.0.0.1:1")))).await;
    let mut from_list = accepted(client.watch_clusters(v1::WatchClustersRequest {
        resource_version: list.resource_version,
        ..Default::default()
    }))
    .await;
    let e = next(&mut from_list).await;
    assert_eq!(
        (e.r#type, e.object.unwrap().name().to_owned()),
        (WatchEventType::Added as i32, "c".to_owned())
    );

    // A label-selected view: an object that stops matching leaves it as DELETED.
    let mut gold = accepted(client.watch_clusters(v1::WatchClustersRequest {
        label_selector: "tier=gold".into(),
        ..Default::default()
    }))
    .await;
    assert_eq!(
        next(&mut gold).await.r#type,
        WatchEventType::Bookmark as i32
    );
    let mut d = cluster("d", "http://127.0.0.1:1");
    d.metadata
        .as_mut()
        .unwrap()
        .labels
        .insert("tier".into(), "gold".into());
    let d = accepted(client.create_cluster(create_cluster(d))).await;
    let mut plain = d.clone();
    plain.metadata.as_mut().unwrap().labels.remove("tier");
    accepted(client.update_cluster(v1::UpdateClusterRequest {
        cluster: Some(plain),
    }))
    .await;
    let types: Vec<i32> = vec![next(&mut gold).await.r#type, next(&mut gold).await.r#type];
    assert_eq!(
        types,
        [WatchEventType::Added as i32, WatchEventType::Deleted as i32]
    );

    // A compacted revision: OUT_OF_RANGE, the client must re-list.
    let now = store.current_revision().await.unwrap();
    store.compact(now).await.unwrap();
    let mut old = accepted(client.watch_clusters(v1::WatchClustersRequest {
        resource_version: 2,
        ..Default::default()
    }))
    .await;
    let err = tokio::time::timeout(Duration::from_secs(5), old.message())
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(err.code(), Code::OutOfRange, "{err:?}");
    api.stop().await;
}

#[tokio::test]
async fn watch_works_filters_by_cluster_and_sends_bookmarks() {
    let (store, api, mut client) = setup().await;
    let typed = Typed::new(store.clone());
    typed.create(work("member1", "w1"), None).await.unwrap();
    typed.create(work("member2", "w2"), None).await.unwrap();
    let mut stream = accepted(client.watch_works(v1::WatchWorksRequest {
        cluster: "member1".into(),
        allow_bookmarks: true,
        ..Default::default()
    }))
    .await;
    let e = next(&mut stream).await;
    assert_eq!(e.object.unwrap().name(), "w1");
    assert_eq!(
        next(&mut stream).await.r#type,
        WatchEventType::Bookmark as i32
    );
    // Periodic bookmarks (100 ms in tests) may come at any time: skip them.
    async fn next_change(stream: &mut Streaming<v1::WatchWorksResponse>) -> v1::WatchWorksResponse {
        loop {
            let e = next(stream).await;
            if e.r#type != WatchEventType::Bookmark as i32 {
                return e;
            }
        }
    }
    typed.create(work("member2", "w3"), None).await.unwrap();
    let w4 = typed.create(work("member1", "w4"), None).await.unwrap();
    let e = next_change(&mut stream).await;
    assert_eq!(
        e.object.unwrap().name(),
        "w4",
        "member2's Works are not sent"
    );
    // with nothing happening, periodic bookmarks carry the revision on
    let e = next(&mut stream).await;
    assert_eq!(e.r#type, WatchEventType::Bookmark as i32);
    assert!(e.resource_version >= w4.resource_version());
    typed.delete(&w4.key(), None).await.unwrap();
    let deleted = next_change(&mut stream).await;
    assert_eq!(deleted.r#type, WatchEventType::Deleted as i32);
    assert_eq!(deleted.object.unwrap().spec.unwrap().cluster, "member1");
    api.stop().await;
}

/// The request timeout bounds unary calls, not how long a watch stream stays open.
#[tokio::test]
async fn watches_outlive_the_request_timeout() {
    let store: StoreRef = Arc::new(MemStore::new());
    let mut config = testing::config();
    config.grpc_timeout = Duration::from_millis(200);
    let api = testing::serve(store, config).await;
    let mut client = api.client().await;
    let mut stream = testing::watch_clusters(&mut client).await;
    assert_eq!(
        next(&mut stream).await.r#type,
        WatchEventType::Bookmark as i32
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    accepted(client.create_cluster(create_cluster(cluster("late", "http://127.0.0.1:1")))).await;
    let e = next(&mut stream).await;
    assert_eq!(e.object.unwrap().name(), "late");
    api.stop().await;
}

#[tokio::test]
async fn watches_end_when_the_server_shuts_down() {
    let (_store, api, mut client) = setup().await;
    let mut stream = testing::watch_clusters(&mut client).await;
    assert_eq!(
        next(&mut stream).await.r#type,
        WatchEventType::Bookmark as i32
    );
    api.shutdown.trigger();
    let end = tokio::time::timeout(Duration::from_secs(5), stream.message())
        .await
        .expect("the watch ends promptly");
    match end {
        Ok(None) => {}
        Err(status) => assert_eq!(status.code(), Code::Unavailable, "{status:?}"),
        Ok(Some(msg)) => panic!("unexpected message {msg:?}"),
    }
    api.stop().await;
}
