//! Controller tests on paused tokio time: requeues, back-off, workers, per-key exclusion,
//! leader gating, panics, spans and metrics.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::time::sleep;

use super::*;
use crate::backoff::Backoff;
use crate::queue::QueueConfig;

type Script = Box<dyn Fn(&str, usize) -> Result<Action, String> + Send + Sync>;

/// Records every reconcile (key, start in ms since t0) and how many ran at once.
struct Ctx {
    t0: Instant,
    work: Duration,
    script: Script,
    runs: Mutex<Vec<(String, u64)>>,
    attempts: Mutex<HashMap<String, usize>>,
    inflight: Mutex<HashMap<String, usize>>,
    max_same_key: AtomicUsize,
    total: AtomicUsize,
    max_total: AtomicUsize,
}

impl Ctx {
    fn new(
        work: Duration,
        script: impl Fn(&str, usize) -> Result<Action, String> + Send + Sync + 'static,
    ) -> Arc<Self> {
        Arc::new(Self {
            t0: Instant::now(),
            work,
            script: Box::new(script),
            runs: Mutex::new(Vec::new()),
            attempts: Mutex::new(HashMap::new()),
            inflight: Mutex::new(HashMap::new()),
            max_same_key: AtomicUsize::new(0),
            total: AtomicUsize::new(0),
            max_total: AtomicUsize::new(0),
        })
    }

    fn runs_of(&self, key: &str) -> Vec<u64> {
        self.runs
            .lock()
            .unwrap()
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, t)| *t)
            .collect()
    }
}

async fn reconcile(key: String, ctx: Arc<Ctx>) -> Result<Action, String> {
    let at = (Instant::now() - ctx.t0).as_millis() as u64;
    ctx.runs.lock().unwrap().push((key.clone(), at));
    let attempt = {
        let mut a = ctx.attempts.lock().unwrap();
        let n = a.entry(key.clone()).or_insert(0);
        *n += 1;
        *n
    };
    {
        let mut inflight = ctx.inflight.lock().unwrap();
        let n = inflight.entry(key.clone()).or_insert(0);
        *n += 1;
        ctx.max_same_key.fetch_max(*n, Ordering::SeqCst);
    }
    let total = ctx.total.fetch_add(1, Ordering::SeqCst) + 1;
    ctx.max_total.fetch_max(total, Ordering::SeqCst);
    if !ctx.work.is_zero() {
        sleep(ctx.work).await;
    }
    ctx.total.fetch_sub(1, Ordering::SeqCst);
    *ctx.inflight.lock().unwrap().get_mut(&key).unwrap() -= 1;
    if (ctx.script)(&key, attempt).is_err() && key == "panic" {
        panic!("reconcile panicked on purpose");
    }
    (ctx.script)(&key, attempt)
}

fn retry_now(_: &String, _: &String, _: &Ctx) -> Action {
    Action::requeue(Duration::ZERO)
}

fn queue() -> WorkQueue<String> {
    WorkQueue::new(QueueConfig::new("ctl").backoff(Backoff::new(
        Duration::from_secs(1),
        Duration::from_secs(60),
    )))
}

/// A queue holding `keys`.
fn queue_of(keys: &[&str]) -> WorkQueue<String> {
    let q = queue();
    for key in keys {
        q.add((*key).to_owned());
    }
    q
}

fn start(controller: Controller<String, Ctx, String>, ctx: &Arc<Ctx>) -> Shutdown {
    let shutdown = Shutdown::new();
    tokio::spawn(controller.run(ctx.clone(), shutdown.clone()));
    shutdown
}

#[tokio::test(start_paused = true)]
async fn requeue_is_a_return_value() {
    let ctx = Ctx::new(Duration::ZERO, |_, _| {
        Ok(Action::requeue(Duration::from_secs(30)))
    });
    let q = queue_of(&["a"]);
    let stop = start(Controller::new(q, reconcile, retry_now), &ctx);
    sleep(Duration::from_secs(61)).await;
    assert_eq!(ctx.runs_of("a"), vec![0, 30_000, 60_000]);
    stop.trigger();
}

#[tokio::test(start_paused = true)]
async fn await_change_waits_for_the_next_add() {
    let ctx = Ctx::new(Duration::ZERO, |_, _| Ok(Action::await_change()));
    let q = queue_of(&["a"]);
    let stop = start(Controller::new(q.clone(), reconcile, retry_now), &ctx);
    sleep(Duration::from_secs(100)).await;
    assert_eq!(ctx.runs_of("a"), vec![0]);
    q.add("a".into());
    sleep(Duration::from_secs(1)).await;
    assert_eq!(ctx.runs_of("a"), vec![0, 100_000]);
    stop.trigger();
}

#[tokio::test(start_paused = true)]
async fn errors_back_off_doubling_and_success_resets() {
    // Attempts 1-3 fail, 4 succeeds and asks for 10 s, 5 fails, 6 succeeds.
    let ctx = Ctx::new(Duration::ZERO, |_, n| match n {
        1..=3 | 5 => Err(format!("attempt {n} failed")),
        4 => Ok(Action::requeue(Duration::from_secs(10))),
        _ => Ok(Action::await_change()),
    });
    let q = queue_of(&["a"]);
    let stop = start(Controller::new(q.clone(), reconcile, retry_now), &ctx);
    sleep(Duration::from_secs(60)).await;
    // 0 ─1s→ 1 ─2s→ 3 ─4s→ 7 (ok) ─10s→ 17 (fails: back-off reset to 1 s) → 18.
    assert_eq!(
        ctx.runs_of("a"),
        vec![0, 1_000, 3_000, 7_000, 17_000, 18_000]
    );
    assert_eq!(q.failures(&"a".to_owned()), 0);
    stop.trigger();
}

#[tokio::test(start_paused = true)]
async fn the_error_policy_sets_a_floor_and_can_give_up() {
    let ctx = Ctx::new(Duration::ZERO, |_, _| Err("boom".into()));
    let q = queue_of(&["slow", "never"]);
    let policy = |key: &String, _: &String, _: &Ctx| {
        if key == "never" {
            Action::await_change()
        } else {
            Action::requeue(Duration::from_secs(5))
        }
    };
    let stop = start(Controller::new(q, reconcile, policy), &ctx);
    sleep(Duration::from_secs(12)).await;
    assert_eq!(ctx.runs_of("never"), vec![0]);
    // max(5 s, 1 s), max(5 s, 2 s), ...
    assert_eq!(ctx.runs_of("slow"), vec![0, 5_000, 10_000]);
    stop.trigger();
}

#[tokio::test(start_paused = true)]
async fn n_workers_run_distinct_keys_in_parallel() {
    let ctx = Ctx::new(Duration::from_secs(1), |_, _| Ok(Action::await_change()));
    let q = queue();
    for i in 0..8 {
        q.add(format!("k{i}"));
    }
    let stop = start(Controller::new(q, reconcile, retry_now).workers(4), &ctx);
    sleep(Duration::from_millis(2_500)).await;
    assert_eq!(ctx.runs.lock().unwrap().len(), 8);
    assert_eq!(ctx.max_total.load(Ordering::SeqCst), 4);
    let starts: Vec<u64> = ctx.runs.lock().unwrap().iter().map(|(_, t)| *t).collect();
    assert_eq!(starts.iter().filter(|t| **t == 0).count(), 4);
    assert_eq!(starts.iter().filter(|t| **t == 1_000).count(), 4);
    stop.trigger();
}

#[tokio::test(start_paused = true)]
async fn one_key_never_runs_concurrently_with_itself() {
    let ctx = Ctx::new(Duration::from_secs(1), |_, _| Ok(Action::await_change()));
    let q = queue_of(&["a"]);
    let stop = start(
        Controller::new(q.clone(), reconcile, retry_now).workers(4),
        &ctx,
    );
    for _ in 0..5 {
        sleep(Duration::from_millis(100)).await;
        q.add("a".into());
    }
    sleep(Duration::from_secs(5)).await;
    assert_eq!(ctx.max_same_key.load(Ordering::SeqCst), 1);
    assert_eq!(
        ctx.runs_of("a"),
        vec![0, 1_000],
        "re-run once, after the first finished"
    );
    stop.trigger();
}

#[tokio::test(start_paused = true)]
async fn a_panicking_reconcile_is_retried_and_the_controller_survives() {
    let ctx = Ctx::new(Duration::ZERO, |key, n| {
        if key == "panic" && n < 3 {
            Err("panic".into())
        } else {
            Ok(Action::await_change())
        }
    });
    let q = queue_of(&["panic", "fine"]);
    let stop = start(Controller::new(q, reconcile, retry_now), &ctx);
    sleep(Duration::from_secs(10)).await;
    assert_eq!(ctx.runs_of("panic"), vec![0, 1_000, 3_000]);
    assert_eq!(ctx.runs_of("fine"), vec![0]);
    stop.trigger();
}

#[tokio::test(start_paused = true)]
async fn workers_run_only_while_leader() {
    let ctx = Ctx::new(Duration::from_secs(10), |_, _| Ok(Action::await_change()));
    let q = queue();
    let (tx, rx) = watch::channel(None);
    q.add("a".into());
    let stop = start(
        Controller::new(q.clone(), reconcile, retry_now).leader(rx),
        &ctx,
    );
    sleep(Duration::from_secs(5)).await;
    assert!(ctx.runs_of("a").is_empty(), "a follower reconciles nothing");
    let leadership = Leadership {
        key: "leases/ctl/1".into(),
        fencing_revision: 7,
        lease: flotilla_store::LeaseId(1),
    };
    tx.send_replace(Some(leadership.clone()));
    sleep(Duration::from_secs(1)).await;
    assert_eq!(ctx.runs_of("a"), vec![5_000]);
    // Deposed mid-reconcile: the reconcile is abandoned and the key kept for the next term.
    tx.send_replace(None);
    sleep(Duration::from_secs(30)).await;
    assert_eq!(ctx.runs_of("a").len(), 1);
    assert_eq!(q.len(), 1, "the abandoned key waits for the next term");
    tx.send_replace(Some(leadership));
    sleep(Duration::from_secs(1)).await;
    assert_eq!(ctx.runs_of("a"), vec![5_000, 36_000]);
    stop.trigger();
}

fn held(terms: &[(u32, i64)]) -> Held {
    Held {
        lease: Some(flotilla_store::LeaseId(1)),
        terms: terms.iter().copied().collect(),
        shards: 2,
    }
}

/// The shard of a test key: its last character's digit.
fn shard_of_key(key: &str) -> u32 {
    key.chars().last().and_then(|c| c.to_digit(10)).unwrap_or(0)
}

#[tokio::test(start_paused = true)]
async fn workers_run_only_the_keys_of_ready_shards_and_abandon_a_lost_one() {
    let ctx = Ctx::new(Duration::from_secs(10), |_, _| Ok(Action::await_change()));
    let q = queue_of(&["a0", "b1"]);
    let (tx, rx) = watch::channel(Held::default());
    // what the caches hold of shard 1 (queued when it is acquired)
    let keys_of = |shard: u32| {
        if shard == 1 {
            vec!["c1".to_owned()]
        } else {
            vec![]
        }
    };
    let stop = start(
        Controller::new(q.clone(), reconcile, retry_now)
            .workers(4)
            .shards(rx, |k: &String| shard_of_key(k), keys_of),
        &ctx,
    );
    sleep(Duration::from_secs(5)).await;
    assert!(
        ctx.runs.lock().unwrap().is_empty(),
        "no shard held: nothing runs"
    );
    assert!(
        q.is_empty(),
        "the keys are parked, not spinning in the queue"
    );

    // Shard 0 acquired: its parked key runs; shard 1's does not.
    tx.send_replace(held(&[(0, 7)]));
    sleep(Duration::from_secs(1)).await;
    assert_eq!(ctx.runs_of("a0"), vec![5_000]);
    assert!(ctx.runs_of("b1").is_empty());

    // Shard 1 too: its parked key and its cached keys run.
    tx.send_replace(held(&[(0, 7), (1, 9)]));
    sleep(Duration::from_secs(1)).await;
    assert_eq!(ctx.runs_of("b1"), vec![6_000]);
    assert_eq!(ctx.runs_of("c1"), vec![6_000]);

    // Shard 1 lost mid-reconcile (re-claimed by another term): the reconcile is abandoned
    // (it never finishes: its in-flight count stays), and the key waits, parked.
    q.add("d1".into());
    sleep(Duration::from_secs(1)).await;
    assert_eq!(ctx.runs_of("d1"), vec![7_000]);
    tx.send_replace(held(&[(0, 7), (1, 11)]));
    sleep(Duration::from_secs(30)).await;
    assert_eq!(
        ctx.inflight.lock().unwrap()["d1"],
        1,
        "the reconcile on the lost shard was dropped before it finished"
    );
    // the new term of shard 1 became ready after its barrier: every key of it ran again
    assert_eq!(ctx.runs_of("d1").len(), 2, "{:?}", ctx.runs_of("d1"));
    assert_eq!(ctx.runs_of("c1").len(), 2);

    // Shard 1 gone for good: a new key of it is parked.
    tx.send_replace(held(&[(0, 7)]));
    sleep(Duration::from_secs(1)).await;
    q.add("e1".into());
    sleep(Duration::from_secs(30)).await;
    assert!(ctx.runs_of("e1").is_empty());
    stop.trigger();
}

#[tokio::test(start_paused = true)]
async fn watches_feed_the_queue_through_the_mapper() {
    use crate::watcher::{Event, Object};
    let ctx = Ctx::new(Duration::ZERO, |_, _| Ok(Action::await_change()));
    // A cluster event enqueues the bindings placed on it.
    let events = futures::stream::iter(vec![
        Event::Init { revision: 3 },
        Event::InitApply(Object {
            key: "clusters/m1".to_owned(),
            revision: 2,
            value: Arc::new(vec!["bindings/x", "bindings/y"]),
        }),
        Event::InitDone { revision: 3 },
    ]);
    let mapper = |ev: &Event<Vec<&'static str>>| match ev.object() {
        Some(o) => o.value.iter().map(|s| (*s).to_owned()).collect(),
        None => Vec::new(),
    };
    let stop = start(
        Controller::new(queue(), reconcile, retry_now).watches(events, mapper),
        &ctx,
    );
    sleep(Duration::from_secs(1)).await;
    assert_eq!(ctx.runs_of("bindings/x"), vec![0]);
    assert_eq!(ctx.runs_of("bindings/y"), vec![0]);
    stop.trigger();
}

#[tokio::test(start_paused = true)]
async fn shutdown_lets_the_reconcile_in_flight_finish() {
    let ctx = Ctx::new(Duration::from_secs(3), |_, _| Ok(Action::await_change()));
    let q = queue_of(&["a"]);
    let shutdown = Shutdown::new();
    let run =
        tokio::spawn(Controller::new(q, reconcile, retry_now).run(ctx.clone(), shutdown.clone()));
    sleep(Duration::from_secs(1)).await;
    shutdown.trigger();
    run.await.unwrap();
    assert_eq!(Instant::now() - ctx.t0, Duration::from_secs(3));
    assert_eq!(
        ctx.total.load(Ordering::SeqCst),
        0,
        "the reconcile ran to its end"
    );
}

#[tokio::test(start_paused = true)]
async fn reconciles_are_counted_and_timed_by_result() {
    let recorder = crate::telemetry::prometheus_recorder().unwrap();
    let handle = recorder.handle();
    let ctx = Ctx::new(Duration::from_millis(20), |key, _| {
        if key == "bad" {
            Err("no".into())
        } else {
            Ok(Action::await_change())
        }
    });
    let (q, controller) = metrics::with_local_recorder(&recorder, || {
        let q = WorkQueue::new(QueueConfig::new("taint-manager"));
        let c = Controller::new(q.clone(), reconcile, |_: &String, _: &String, _: &Ctx| {
            Action::await_change()
        });
        (q, c)
    });
    q.add("good".into());
    q.add("bad".into());
    let stop = start(controller, &ctx);
    sleep(Duration::from_secs(1)).await;
    let text = handle.render();
    assert!(
        text.contains(r#"flotilla_taint_manager_reconcile_total{result="ok"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"flotilla_taint_manager_reconcile_total{result="error"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(
            r#"flotilla_taint_manager_reconcile_duration_seconds_bucket{result="ok",le="0.025"} 1"#
        ),
        "{text}"
    );
    stop.trigger();
}

/// A failed reconcile queued again after its back-off counts as a retry of the queue
/// (`flotilla_<name>_queue_retries_total`; it stayed 0 when the controller requeued failures
/// itself).
#[tokio::test(start_paused = true)]
async fn failures_queued_again_are_counted_as_retries() {
    let recorder = crate::telemetry::prometheus_recorder().unwrap();
    let handle = recorder.handle();
    let ctx = Ctx::new(Duration::from_millis(1), |_, _| Err("no".into()));
    let (q, controller) = metrics::with_local_recorder(&recorder, || {
        let q = WorkQueue::new(QueueConfig::new("retrying"));
        let c = Controller::new(q.clone(), reconcile, |_: &String, _: &String, _: &Ctx| {
            Action::requeue(Duration::from_millis(100))
        });
        (q, c)
    });
    q.add("bad".into());
    let stop = start(controller, &ctx);
    sleep(Duration::from_millis(350)).await;
    let text = handle.render();
    let retries: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("flotilla_retrying_queue_retries_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no retries series:\n{text}"));
    assert!(retries >= 2.0, "{text}");
    stop.trigger();
}

/// Captures the spans opened while a test runs.
mod spans {
    use std::sync::{Arc, Mutex};

    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id};
    use tracing_subscriber::layer::{Context, Layer};

    /// A span's name and its fields as (name, debug-formatted value).
    pub type SpanRecord = (String, Vec<(String, String)>);

    #[derive(Clone, Default)]
    pub struct Captured(pub Arc<Mutex<Vec<SpanRecord>>>);

    struct Fields(Vec<(String, String)>);

    impl Visit for Fields {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.0.push((field.name().to_owned(), format!("{value:?}")));
        }
    }

    impl<S: tracing::Subscriber> Layer<S> for Captured {
        fn on_new_span(&self, attrs: &Attributes<'_>, _: &Id, _: Context<'_, S>) {
            let mut f = Fields(Vec::new());
            attrs.record(&mut f);
            self.0
                .lock()
                .unwrap()
                .push((attrs.metadata().name().to_owned(), f.0));
        }
    }
}

#[tokio::test(start_paused = true)]
async fn each_reconcile_runs_in_a_span_with_the_object_and_the_reason() {
    use tracing_subscriber::layer::SubscriberExt;
    let captured = spans::Captured::default();
    let subscriber = tracing_subscriber::registry().with(captured.clone());
    let _guard = tracing::subscriber::set_default(subscriber);
    let ctx = Ctx::new(Duration::ZERO, |_, n| {
        if n == 1 {
            Ok(Action::requeue(Duration::from_secs(1)))
        } else {
            Ok(Action::await_change())
        }
    });
    let q = queue();
    q.add("bindings/default/web".into());
    let stop = start(Controller::new(q, reconcile, retry_now), &ctx);
    sleep(Duration::from_secs(2)).await;
    stop.trigger();
    let spans = captured.0.lock().unwrap().clone();
    let reconciles: Vec<_> = spans
        .iter()
        .filter(|(name, _)| name == "reconcile")
        .collect();
    assert_eq!(reconciles.len(), 2, "{spans:?}");
    let field = |i: usize, name: &str| {
        reconciles[i]
            .1
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    assert_eq!(field(0, "object.ref"), "bindings/default/web");
    assert_eq!(field(0, "reason"), "object changed");
    assert_eq!(field(1, "reason"), "requeue requested");
}
