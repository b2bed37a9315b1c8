//! Pull clusters' heartbeats, kept under `heartbeats/<cluster>` so that every replica (and a
//! restarted one) knows when a cluster was last heard from.
//!
//! ```text
//!   agent ──ClusterHealth.Heartbeat──► any replica ──CAS put──► heartbeats/<cluster>
//!                                                                   │ watch
//!   leader: Cache<HeartbeatRecord> ──► reconcile(cluster): the record's probe is the
//!           observation (CH-3/CH-4, A9), its renewTime the monitor's clock (CH-9)
//! ```
//!
//! A record is written by whichever replica received the heartbeat, leader or not (not
//! fenced: it records an observation, it decides nothing), with a compare on the record's
//! own revision; a record never moves back in time.

use bytes::Bytes;
use flotilla_core::Time;
use flotilla_proto::convert::timestamp_to_time;
use flotilla_proto::v1;
use flotilla_store::{KeyValue, Revision, Store};
use prost::Message;

use crate::assess::Observation;
use crate::error::Error;
use flotilla_runtime::cas::{Lost, Races};

/// The key prefix of heartbeat records.
pub const PREFIX: &str = "heartbeats/";

/// The key of a cluster's heartbeat record.
pub fn key(cluster: &str) -> String {
    format!("{PREFIX}{cluster}")
}

/// The cluster a record key belongs to.
pub fn cluster_of(key: &str) -> Option<&str> {
    key.strip_prefix(PREFIX).filter(|n| !n.is_empty())
}

/// Decodes a stored record.
pub fn decode(kv: &KeyValue) -> Result<v1::HeartbeatRecord, prost::DecodeError> {
    v1::HeartbeatRecord::decode(kv.value.as_ref())
}

/// When the record was written (the server's clock); `None` if absent or malformed.
pub fn renew_time(record: &v1::HeartbeatRecord) -> Option<Time> {
    record
        .renew_time
        .as_ref()
        .and_then(|ts| timestamp_to_time(ts).ok())
}

/// The observation a record carries: the agent's probe and the status it collected.
pub fn observation(record: &v1::HeartbeatRecord) -> Option<Observation> {
    let probe = record.probe.as_ref()?;
    Some(Observation {
        outcome: flotilla_core::health::ProbeOutcome {
            online: probe.online,
            healthy: probe.online && probe.healthy,
        },
        message: probe.message.clone(),
        collected: record.status.clone().map(|mut s| {
            s.conditions.clear();
            s
        }),
    })
}

/// What a replica's cache holds of a stored record: its revision and renew time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Known {
    /// The record's revision (`mod_revision`).
    pub revision: Revision,
    /// Its renew time.
    pub renew_time: Option<Time>,
}

/// Writes `record` unless the stored one is newer; returns the record's revision.
pub async fn record(store: &dyn Store, record: &v1::HeartbeatRecord) -> Result<Revision, Error> {
    let known = store.get(&key(&record.cluster_name)).await?;
    record_over(store, record, known.as_ref().map(Known::of)).await
}

impl Known {
    /// What a stored record says (an undecodable one: no renew time, so it is overwritten).
    pub fn of(kv: &KeyValue) -> Self {
        Known {
            revision: kv.mod_revision,
            renew_time: decode(kv).ok().as_ref().and_then(renew_time),
        }
    }
}

/// [`record`], starting from what the caller's cache says is stored (`None`: nothing) rather
/// than reading it first (#31: one etcd round trip per heartbeat instead of two). The write
/// compares that revision, so a cache behind the store costs a lost compare and a re-read,
/// never a record moved back in time.
pub async fn record_over(
    store: &dyn Store,
    record: &v1::HeartbeatRecord,
    known: Option<Known>,
) -> Result<Revision, Error> {
    let key = key(&record.cluster_name);
    let value = Bytes::from(record.encode_to_vec());
    let ours = renew_time(record);
    // A concurrent writer (another replica) makes the compare fail: the loop re-reads, and
    // gives up when what is stored is newer than ours.
    let mut races = Races::new(&key);
    let mut current = known;
    loop {
        let expected = current.map_or(0, |k| k.revision);
        if let Some(k) = current
            && k.renew_time > ours
        {
            return Ok(k.revision);
        }
        match store.compare_and_put(&key, expected, value.clone()).await {
            Ok(rev) => return Ok(rev),
            Err(e) => {
                current = match races.after::<Error>(e)? {
                    Lost::Changed => store.get(&key).await?.as_ref().map(Known::of),
                    Lost::Gone => None,
                }
            }
        }
    }
}

/// #31: which heartbeat record events queue their cluster. Most heartbeats only renew the
/// lease: the probe and the collected status are what they were, and the cluster is Ready.
/// Such a heartbeat moves the CH-9 deadline, which the reconcile already waits for; it queues
/// nothing. A record queues its cluster when it is new, when its observation changed (the
/// cluster's uid, the probe, the collected status), when the cluster is not Ready=True (a
/// heartbeat may be what turns it Ready, CH-4), or when it comes more than `gap` after the
/// record before it (the cluster may have been judged silent in between, CH-9). Counted in
/// `flotilla_filter_events_total{filter="cluster_health_heartbeats"}`.
#[derive(Debug)]
pub struct RenewalFilter {
    seen: std::collections::HashMap<String, (u64, Option<Time>)>,
    gap: std::time::Duration,
    queued: metrics::Counter,
    skipped: metrics::Counter,
}

impl RenewalFilter {
    /// A filter that lets through renewals more than `gap` apart.
    pub fn new(gap: std::time::Duration) -> Self {
        let counter = |outcome: &'static str| metrics::counter!("flotilla_filter_events_total", "filter" => "cluster_health_heartbeats", "outcome" => outcome);
        RenewalFilter {
            seen: Default::default(),
            gap,
            queued: counter("queued"),
            skipped: counter("skipped"),
        }
    }

    /// The cluster `event` queues, if any; `ready(name)` says whether the cluster is
    /// Ready=True as last seen.
    pub fn cluster_to_queue<'e>(
        &mut self,
        event: &'e flotilla_runtime::Event<v1::HeartbeatRecord>,
        ready: impl FnOnce(&str) -> bool,
    ) -> Option<&'e str> {
        use flotilla_runtime::Event;
        let (key, queue) = match event {
            Event::InitApply(o) | Event::Apply(o) => {
                let record = &o.value;
                let observed = flotilla_runtime::filter::Digest::new()
                    .add(&record.cluster_uid)
                    .message(record.probe.as_ref())
                    .message(record.status.as_ref())
                    .finish();
                let renewed = renew_time(record);
                let before = self.seen.insert(o.key.clone(), (observed, renewed));
                let queue = match before {
                    None => true,
                    Some((was, _)) if was != observed => true,
                    Some((_, at)) => {
                        let late = match (at, renewed) {
                            (Some(at), Some(now)) => now.saturating_since(at) > self.gap,
                            _ => true,
                        };
                        late || !cluster_of(&o.key).is_some_and(ready)
                    }
                };
                (o.key.as_str(), queue)
            }
            Event::Delete { key, .. } => {
                self.seen.remove(key);
                (key.as_str(), true)
            }
            Event::Init { .. } | Event::InitDone { .. } | Event::Progress { .. } => return None,
        };
        if queue {
            self.queued.increment(1);
            cluster_of(key)
        } else {
            self.skipped.increment(1);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use flotilla_proto::convert::time_to_timestamp;
    use flotilla_store::MemStore;

    use super::*;

    fn rec(secs: i64) -> v1::HeartbeatRecord {
        v1::HeartbeatRecord {
            cluster_name: "m1".into(),
            renew_time: Some(time_to_timestamp(Time::from_secs(secs))),
            probe: Some(v1::ProbeResult {
                online: true,
                healthy: false,
                message: "500".into(),
            }),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn records_never_move_back_in_time() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let r1 = record(&*store, &rec(10)).await.unwrap();
        let r2 = record(&*store, &rec(20)).await.unwrap();
        assert!(r2 > r1);
        // an older heartbeat (a slow replica) does not overwrite the newer one
        assert_eq!(record(&*store, &rec(15)).await.unwrap(), r2);
        let kv = store.get(&key("m1")).await.unwrap().unwrap();
        let stored = decode(&kv).unwrap();
        assert_eq!(renew_time(&stored), Some(Time::from_secs(20)));
        let o = observation(&stored).unwrap();
        assert!(o.outcome.online && !o.outcome.healthy);
        assert_eq!(cluster_of(&key("m1")), Some("m1"));
        assert_eq!(cluster_of("heartbeats/"), None);
    }

    #[test]
    fn a_heartbeat_that_only_renews_a_ready_clusters_lease_queues_nothing() {
        use flotilla_runtime::{Event, Object};
        let apply = |r: v1::HeartbeatRecord| {
            Event::Apply(Object {
                key: key("m1"),
                revision: 1,
                value: Arc::new(r),
            })
        };
        let healthy = |secs| {
            let mut r = rec(secs);
            r.probe.as_mut().unwrap().healthy = true;
            r.probe.as_mut().unwrap().message.clear();
            r
        };
        let mut f = RenewalFilter::new(std::time::Duration::from_secs(20));
        let ready = |_: &str| true;
        // (case, record, cluster Ready, queues)
        let cases = [
            ("the first record", healthy(10), true, true),
            ("a renewal 10 s later, Ready", healthy(20), true, false),
            ("another, Ready", healthy(30), true, false),
            (
                "a renewal while not Ready (CH-4 may turn it Ready)",
                healthy(40),
                false,
                true,
            ),
            ("the probe changed", rec(50), true, true),
            ("the same unhealthy probe, Ready", rec(60), true, false),
            (
                "a renewal after a gap past 20 s (CH-9 may have judged it silent)",
                rec(81),
                true,
                true,
            ),
        ];
        for (name, record, is_ready, queues) in cases {
            let event = apply(record);
            let got = f.cluster_to_queue(&event, |_: &str| is_ready);
            assert_eq!(got, queues.then_some("m1"), "{name}");
        }
        let mut status = rec(90);
        status.status = Some(v1::ClusterStatus {
            kubernetes_version: "v1.20.2".into(),
            ..Default::default()
        });
        assert_eq!(
            f.cluster_to_queue(&apply(status), ready),
            Some("m1"),
            "the collected status changed"
        );
        let deleted = Event::Delete {
            key: key("m1"),
            revision: 9,
        };
        assert_eq!(
            f.cluster_to_queue(&deleted, ready),
            Some("m1"),
            "a deleted record"
        );
        assert_eq!(
            f.cluster_to_queue(&apply(healthy(100)), ready),
            Some("m1"),
            "new again after the delete"
        );
        assert_eq!(
            f.cluster_to_queue(&Event::Progress { revision: 10 }, ready),
            None
        );
    }
}
