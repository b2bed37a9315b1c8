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

/// Writes `record` unless the stored one is newer; returns the record's revision.
pub async fn record(store: &dyn Store, record: &v1::HeartbeatRecord) -> Result<Revision, Error> {
    let key = key(&record.cluster_name);
    let value = Bytes::from(record.encode_to_vec());
    let ours = renew_time(record);
    // A concurrent writer (another replica) makes the compare fail: the loop re-reads, and
    // gives up when what is stored is newer than ours.
    let mut races = Races::new(&key);
    let mut current = store.get(&key).await?;
    loop {
        let expected = current.as_ref().map_or(0, |kv| kv.mod_revision);
        if let Some(kv) = &current
            && let Ok(stored) = decode(kv)
            && renew_time(&stored) > ours
        {
            return Ok(kv.mod_revision);
        }
        match store.compare_and_put(&key, expected, value.clone()).await {
            Ok(rev) => return Ok(rev),
            Err(e) => {
                current = match races.after::<Error>(e)? {
                    Lost::Changed => store.get(&key).await?,
                    Lost::Gone => None,
                }
            }
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
}
