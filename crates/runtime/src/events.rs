//! Events: every decision a service takes is recorded as an `Event` object
//! (`events/<ns>/<name>`) on a TTL lease, without slowing the decision down.
//!
//! ```text
//!   reconcile ──record()──► bounded channel ──► writer task ──► Txn of ≤ 64 puts, one lease
//!                 (never blocks; drops and counts when full)        (re-granted on expiry)
//! ```
//!
//! Events are best effort: a full channel or a store error drops the event (counted in
//! `flotilla_events_dropped_total`), never the decision.

use std::time::Duration;

use flotilla_proto::v1;
use flotilla_store::typed::{Stored, encode};
use flotilla_store::{LeaseId, Op, StoreRef, Txn};
use tokio::sync::mpsc;

use crate::shutdown::Shutdown;

/// How long events live (Kubernetes' default event TTL is one hour).
pub const EVENT_TTL: Duration = Duration::from_secs(3600);

const BATCH: usize = 64;
const CHANNEL: usize = 10_000;

/// The system's wall-clock time as a core [`flotilla_core::Time`], for what is not a
/// service's decision (the CLI, tests). Services read their [`crate::Clock`] instead.
pub fn now() -> flotilla_core::Time {
    crate::clock::Clock::system().now()
}

fn timestamp(t: flotilla_core::Time) -> prost_types::Timestamp {
    let ms = t.as_millis();
    prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: i32::try_from(ms.rem_euclid(1000) * 1_000_000).unwrap_or(0),
    }
}

/// Normal or Warning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Normal operation.
    Normal,
    /// Something went wrong or needs attention.
    Warning,
}

/// The object an event is about.
#[derive(Clone, Copy, Debug)]
pub struct Regarding<'a> {
    /// Kind, e.g. `ResourceBinding`.
    pub kind: &'a str,
    /// Namespace; empty for cluster-scoped objects (the event goes to `default`).
    pub namespace: &'a str,
    /// Name.
    pub name: &'a str,
}

impl<'a> Regarding<'a> {
    /// A binding.
    pub fn binding(namespace: &'a str, name: &'a str) -> Self {
        Regarding {
            kind: "ResourceBinding",
            namespace,
            name,
        }
    }

    /// A cluster.
    pub fn cluster(name: &'a str) -> Self {
        Regarding {
            kind: "Cluster",
            namespace: "",
            name,
        }
    }
}

/// Records events for one component; cheap to clone.
#[derive(Clone, Debug)]
pub struct Recorder {
    component: String,
    tx: mpsc::Sender<v1::Event>,
}

// === impl Recorder ===

impl Recorder {
    /// Starts the writer task on `store` and returns a recorder for `component`.
    pub fn spawn(store: StoreRef, component: impl Into<String>, shutdown: Shutdown) -> Self {
        let (tx, rx) = mpsc::channel(CHANNEL);
        tokio::spawn(write_events(store, rx, shutdown));
        Recorder {
            component: component.into(),
            tx,
        }
    }

    /// A recorder that drops everything (for tests and dry runs).
    pub fn disabled(component: impl Into<String>) -> Self {
        let (tx, _rx) = mpsc::channel(1);
        Recorder {
            component: component.into(),
            tx,
        }
    }

    /// Records an event about `regarding`. Never blocks.
    pub fn record(
        &self,
        regarding: Regarding<'_>,
        type_: EventType,
        reason: &str,
        message: impl Into<String>,
        trace_context: &str,
    ) {
        let Regarding {
            kind,
            namespace,
            name,
        } = regarding;
        let now = timestamp(now());
        let suffix: u64 = rand::random();
        let ns = if namespace.is_empty() {
            "default"
        } else {
            namespace
        };
        let event = v1::Event {
            metadata: Some(v1::ObjectMeta {
                name: format!("{name}.{suffix:016x}"),
                namespace: ns.to_owned(),
                creation_timestamp: Some(now),
                ..Default::default()
            }),
            involved_object: Some(v1::ObjectReference {
                kind: kind.to_owned(),
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                ..Default::default()
            }),
            r#type: match type_ {
                EventType::Normal => v1::EventType::Normal as i32,
                EventType::Warning => v1::EventType::Warning as i32,
            },
            reason: reason.to_owned(),
            message: message.into(),
            source: Some(v1::EventSource {
                component: self.component.clone(),
                host: String::new(),
            }),
            first_timestamp: Some(now),
            last_timestamp: Some(now),
            count: 1,
            trace_context: trace_context.to_owned(),
        };
        if self.tx.try_send(event).is_err() {
            metrics::counter!("flotilla_events_dropped_total", "component" => self.component.clone()).increment(1);
        }
    }
}

async fn write_events(store: StoreRef, mut rx: mpsc::Receiver<v1::Event>, shutdown: Shutdown) {
    let mut lease: Option<(LeaseId, tokio::time::Instant)> = None;
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        let first = tokio::select! {
            e = rx.recv() => e,
            () = shutdown.triggered() => None,
        };
        let Some(first) = first else { return };
        batch.push(first);
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(e) => batch.push(e),
                Err(_) => break,
            }
        }
        // one lease for many events; re-grant well before it expires
        let lease_id = match lease {
            Some((id, granted)) if granted.elapsed() < EVENT_TTL / 2 => id,
            _ => match store.lease_grant(EVENT_TTL).await {
                Ok(l) => {
                    lease = Some((l.id, tokio::time::Instant::now()));
                    l.id
                }
                Err(e) => {
                    tracing::debug!(error = %e, dropped = batch.len(), "cannot grant an event lease");
                    count_dropped(&batch);
                    batch.clear();
                    continue;
                }
            },
        };
        let mut txn = Txn::new();
        for e in &batch {
            txn = txn.and_then(Op::put_with_lease(e.key(), encode(e), lease_id));
        }
        if let Err(e) = store.txn(txn).await {
            tracing::debug!(error = %e, dropped = batch.len(), "cannot write events");
            count_dropped(&batch);
            lease = None;
        }
        batch.clear();
    }
}

/// Counts events the store did not take (`flotilla_events_dropped_total`, by the component
/// that recorded them), as a full queue is counted.
fn count_dropped(batch: &[v1::Event]) {
    for e in batch {
        let component = e
            .source
            .as_ref()
            .map(|s| s.component.clone())
            .unwrap_or_default();
        metrics::counter!("flotilla_events_dropped_total", "component" => component).increment(1);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use flotilla_store::MemStore;
    use flotilla_store::typed::Typed;

    use super::*;

    /// Events the store refuses (no lease, a failed write) are counted as dropped, as a full
    /// queue is, under the component that recorded each.
    #[test]
    fn refused_events_are_counted_as_dropped_by_component() {
        let recorder = crate::telemetry::prometheus_recorder().unwrap();
        let handle = recorder.handle();
        let event = |component: &str| v1::Event {
            source: Some(v1::EventSource {
                component: component.into(),
                host: String::new(),
            }),
            ..Default::default()
        };
        metrics::with_local_recorder(&recorder, || {
            count_dropped(&[
                event("taint-manager"),
                event("taint-manager"),
                event("scheduler"),
            ]);
        });
        let text = handle.render();
        assert!(
            text.contains(r#"flotilla_events_dropped_total{component="taint-manager"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"flotilla_events_dropped_total{component="scheduler"} 1"#),
            "{text}"
        );
    }

    #[tokio::test]
    async fn events_are_written_on_a_lease() {
        let store: StoreRef = Arc::new(MemStore::new());
        let shutdown = Shutdown::new();
        let rec = Recorder::spawn(store.clone(), "taint-manager", shutdown.clone());
        rec.record(
            Regarding::binding("default", "nginx"),
            EventType::Normal,
            "EvictWorkload",
            "evicted from member1",
            "",
        );
        rec.record(
            Regarding::cluster("member1"),
            EventType::Warning,
            "TaintClusterSucceed",
            "tainted",
            "",
        );
        let typed = Typed::new(store.clone());
        let mut events = vec![];
        for _ in 0..100 {
            events = typed.list::<v1::Event>(None).await.unwrap().0;
            if events.len() == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(events.len(), 2);
        let e = events.iter().find(|e| e.reason == "EvictWorkload").unwrap();
        assert_eq!(e.source.as_ref().unwrap().component, "taint-manager");
        assert_eq!(e.involved_object.as_ref().unwrap().name, "nginx");
        let kv = store.get(&e.key()).await.unwrap().unwrap();
        assert!(kv.lease.is_some(), "events live on a lease");
        let cluster_event = events
            .iter()
            .find(|e| e.reason == "TaintClusterSucceed")
            .unwrap();
        assert_eq!(
            cluster_event.metadata.as_ref().unwrap().namespace,
            "default"
        );
        shutdown.trigger();
    }
}
