//! Work-queue tests on paused tokio time.

use std::time::Duration;

use tokio::time::{Instant, advance, timeout};

use super::*;

fn queue() -> WorkQueue<String> {
    WorkQueue::new(
        QueueConfig::new("test")
            .backoff(Backoff::new(Duration::from_secs(1), Duration::from_secs(8))),
    )
}

fn k(s: &str) -> String {
    s.to_owned()
}

/// The next item if one is (or becomes) ready within `within`.
/// A fresh queue that handed out `key` (now being processed), and that item.
async fn processing(key: &str) -> (WorkQueue<String>, QueueItem<String>) {
    let q = queue();
    q.add(k(key));
    let item = q.next().await.unwrap();
    (q, item)
}

async fn next_within(q: &WorkQueue<String>, within: Duration) -> Option<QueueItem<String>> {
    timeout(within, q.next()).await.ok().flatten()
}

/// Asserts that no key becomes ready within `within` (`why` says what that shows).
async fn assert_idle(q: &WorkQueue<String>, within: Duration, why: &str) {
    assert!(next_within(q, within).await.is_none(), "{why}");
}

#[tokio::test(start_paused = true)]
async fn a_key_queued_twice_is_handed_out_once() {
    let q = queue();
    q.add(k("a"));
    q.add(k("b"));
    q.add(k("a"));
    assert_eq!(q.len(), 2);
    let first = q.next().await.unwrap();
    assert_eq!(first.key, "a");
    assert_eq!(first.reason, Reason::Changed);
    assert_eq!(q.next().await.unwrap().key, "b");
    assert_idle(&q, Duration::from_secs(60), "nothing ready").await;
}

#[tokio::test(start_paused = true)]
async fn a_key_added_while_processing_runs_again_after_done_never_concurrently() {
    let (q, item) = processing("a").await;
    assert!(q.is_processing(&item.key));
    q.add(k("a"));
    q.add(k("a"));
    assert_eq!(q.len(), 0, "dirty, not ready, while being processed");
    assert_idle(
        &q,
        Duration::from_secs(10),
        "no second worker may get the key while the first has it",
    )
    .await;
    q.done(&item.key);
    let again = q.next().await.unwrap();
    assert_eq!(again.key, "a");
    q.done(&again.key);
    assert_idle(&q, Duration::from_secs(10), "re-run once").await;
}

#[tokio::test(start_paused = true)]
async fn add_after_keeps_the_earliest() {
    let q = queue();
    let t0 = Instant::now();
    q.add_after(k("a"), Duration::from_secs(10), Reason::Requeue);
    q.add_after(k("a"), Duration::from_secs(5), Reason::Requeue);
    q.add_after(k("a"), Duration::from_secs(20), Reason::Requeue);
    assert_eq!(q.delayed_until(&k("a")), Some(t0 + Duration::from_secs(5)));
    assert_eq!(q.delayed_len(), 1);
    assert_idle(&q, Duration::from_millis(4_900), "nothing ready").await;
    let item = q.next().await.unwrap();
    assert_eq!(item.reason, Reason::Requeue);
    assert_eq!(Instant::now() - t0, Duration::from_secs(5));
    q.done(&item.key);
    assert_idle(
        &q,
        Duration::from_secs(60),
        "the later delays were replaced, not kept",
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn an_immediate_add_cancels_a_pending_delay() {
    let q = queue();
    q.add_after(k("a"), Duration::from_secs(10), Reason::Requeue);
    q.add(k("a"));
    assert_eq!(q.delayed_len(), 0);
    let item = q.next().await.unwrap();
    assert_eq!(item.reason, Reason::Changed);
    q.done(&item.key);
    assert_idle(&q, Duration::from_secs(60), "nothing ready").await;
}

#[tokio::test(start_paused = true)]
async fn a_waiting_key_ignores_a_later_delay() {
    let q = queue();
    q.add(k("a"));
    q.add_after(k("a"), Duration::from_secs(3), Reason::Requeue);
    assert_eq!(q.delayed_len(), 0);
    let item = q.next().await.unwrap();
    q.done(&item.key);
    assert_idle(&q, Duration::from_secs(60), "nothing ready").await;
}

#[tokio::test(start_paused = true)]
async fn a_delay_that_ends_during_processing_reruns_after_done() {
    let (q, item) = processing("a").await;
    q.add_after(k("a"), Duration::from_secs(1), Reason::Requeue);
    advance(Duration::from_secs(2)).await;
    assert_idle(&q, Duration::from_secs(1), "still processing").await;
    q.done(&item.key);
    let again = q.next().await.unwrap();
    assert_eq!(again.reason, Reason::Requeue);
}

#[tokio::test(start_paused = true)]
async fn backoff_doubles_caps_and_resets() {
    let q = queue();
    let a = k("a");
    let delays: Vec<u64> = (0..6).map(|_| q.next_backoff(&a).as_secs()).collect();
    assert_eq!(delays, vec![1, 2, 4, 8, 8, 8]);
    assert_eq!(q.failures(&a), 6);
    assert_eq!(q.next_backoff(&k("b")).as_secs(), 1, "per key");
    q.forget(&a);
    assert_eq!(q.failures(&a), 0);
    assert_eq!(q.next_backoff(&a).as_secs(), 1);
}

#[tokio::test(start_paused = true)]
async fn add_rate_limited_waits_the_backoff() {
    let q = queue();
    let t0 = Instant::now();
    q.add_rate_limited(k("a"));
    let item = q.next().await.unwrap();
    assert_eq!(item.reason, Reason::Backoff);
    assert_eq!(Instant::now() - t0, Duration::from_secs(1));
    q.done(&item.key);
    q.add_rate_limited(k("a"));
    q.next().await.unwrap();
    assert_eq!(
        Instant::now() - t0,
        Duration::from_secs(3),
        "second failure waits 2 s"
    );
}

#[tokio::test(start_paused = true)]
async fn many_waiting_workers_all_get_work() {
    let q = queue();
    let mut workers = Vec::new();
    for _ in 0..4 {
        let q = q.clone();
        workers.push(tokio::spawn(async move { q.next().await.map(|i| i.key) }));
    }
    tokio::task::yield_now().await;
    for key in ["a", "b", "c", "d"] {
        q.add_after(k(key), Duration::from_secs(1), Reason::Requeue);
    }
    let mut got = Vec::new();
    for w in workers {
        got.push(
            timeout(Duration::from_secs(5), w)
                .await
                .unwrap()
                .unwrap()
                .unwrap(),
        );
    }
    got.sort();
    assert_eq!(got, vec!["a", "b", "c", "d"]);
}

#[tokio::test(start_paused = true)]
async fn shut_down_wakes_and_stops_workers() {
    let q = queue();
    let waiter = {
        let q = q.clone();
        tokio::spawn(async move { q.next().await })
    };
    tokio::task::yield_now().await;
    q.shut_down();
    assert!(waiter.await.unwrap().is_none());
    q.add(k("a"));
    assert!(q.is_empty());
}

#[tokio::test(start_paused = true)]
async fn depth_and_wait_are_recorded() {
    let recorder = crate::telemetry::prometheus_recorder().unwrap();
    let handle = recorder.handle();
    let q = metrics::with_local_recorder(&recorder, || {
        WorkQueue::<String>::new(QueueConfig::new("graceful-eviction"))
    });
    q.add(k("a"));
    q.add(k("b"));
    let text = handle.render();
    assert!(
        text.contains("flotilla_graceful_eviction_queue_depth 2"),
        "depth gauge missing:\n{text}"
    );
    advance(Duration::from_millis(300)).await;
    q.next().await.unwrap();
    let text = handle.render();
    assert!(
        text.contains("flotilla_graceful_eviction_queue_depth 1"),
        "{text}"
    );
    assert!(
        text.contains("flotilla_graceful_eviction_queue_wait_seconds_bucket"),
        "{text}"
    );
    assert!(
        text.contains("flotilla_graceful_eviction_queue_adds_total 2"),
        "{text}"
    );
    assert!(
        text.contains("flotilla_graceful_eviction_queue_oldest_seconds 0.3"),
        "{text}"
    );
}
