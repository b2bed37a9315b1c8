//! Recorders that keep every change of an api watch, so that "never happened" is
//! checked on the whole history, not on polls.

use std::time::Duration;

use flotilla_proto::v1;

use crate::*;

// ---------------------------------------------------------------------------------------
// Watch recorders
// ---------------------------------------------------------------------------------------

/// One change seen by a [`Recorder`].
#[derive(Clone, Debug)]
pub struct Seen<T> {
    /// ADDED, MODIFIED or DELETED.
    pub kind: v1::WatchEventType,
    /// The object after the change (its last state for DELETED).
    pub object: T,
    /// The store revision of the change.
    pub revision: i64,
}

/// Records every change of an api watch stream in the background, from the state at the
/// moment it started (sent as ADDED) on, so that a scenario can assert on everything that
/// happened — including states too short-lived for polling to see.
pub struct Recorder<T> {
    seen: std::sync::Arc<std::sync::Mutex<Vec<Seen<T>>>>,
    error: std::sync::Arc<std::sync::Mutex<Option<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl<T: Clone + Send + 'static> Recorder<T> {
    /// Everything seen so far, in order. Panics if the watch broke (a broken watch would make
    /// "never happened" assertions vacuous).
    pub fn seen(&self) -> Vec<Seen<T>> {
        if let Some(e) = self.error.lock().unwrap().as_ref() {
            panic!("the watch recorder broke: {e}");
        }
        self.seen.lock().unwrap().clone()
    }

    /// The objects seen (every version), in order.
    pub fn objects(&self) -> Vec<T> {
        self.seen().into_iter().map(|s| s.object).collect()
    }

    async fn start<S, F>(mut stream: tonic::Streaming<S>, split: F) -> Self
    where
        S: Send + 'static,
        F: Fn(S) -> (i32, Option<T>, i64) + Send + 'static,
    {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let error = std::sync::Arc::new(std::sync::Mutex::new(None));
        let (synced_tx, synced_rx) = tokio::sync::oneshot::channel();
        let task = {
            let seen = seen.clone();
            let error = error.clone();
            tokio::spawn(async move {
                let mut synced = Some(synced_tx);
                loop {
                    match stream.message().await {
                        Ok(Some(msg)) => {
                            let (kind, object, revision) = split(msg);
                            let kind = v1::WatchEventType::try_from(kind)
                                .unwrap_or(v1::WatchEventType::Unspecified);
                            match (kind, object) {
                                (v1::WatchEventType::Bookmark, _) => {
                                    if let Some(tx) = synced.take() {
                                        let _ = tx.send(());
                                    }
                                }
                                (kind, Some(object)) => seen.lock().unwrap().push(Seen {
                                    kind,
                                    object,
                                    revision,
                                }),
                                (kind, None) => {
                                    *error.lock().unwrap() =
                                        Some(format!("{kind:?} event without an object"));
                                }
                            }
                        }
                        Ok(None) => {
                            *error.lock().unwrap() = Some("the stream ended".into());
                            return;
                        }
                        Err(e) => {
                            *error.lock().unwrap() = Some(e.to_string());
                            return;
                        }
                    }
                }
            })
        };
        tokio::time::timeout(Duration::from_secs(10), synced_rx)
            .await
            .expect("the watch sends its initial state within 10 s")
            .expect("the watch recorder stopped before its initial state");
        Recorder { seen, error, task }
    }
}

impl<T> Drop for Recorder<T> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `pub async fn $name(api) -> Recorder<Item>`: records every change of every object of a
/// kind (initial state first, as ADDED).
macro_rules! record_every {
    ($(#[$doc:meta])* $name:ident = $rpc:ident($request:ident) -> $response:ident($item:ident)) => {
        $(#[$doc])*
        pub async fn $name(api: &ApiClient) -> Recorder<v1::$item> {
            let watch = api.clone().$rpc(v1::$request::default()).await;
            let stream = watch.expect(stringify!($rpc)).into_inner();
            Recorder::start(stream, |m: v1::$response| (m.r#type, m.object, m.resource_version))
                .await
        }
    };
}

record_every!(
    /// Records every change of every Work (initial state first, as ADDED).
    record_works = watch_works(WatchWorksRequest) -> WatchWorksResponse(Work)
);
record_every!(
    /// Records every change of every binding (initial state first, as ADDED).
    record_bindings = watch_resource_bindings(WatchResourceBindingsRequest)
        -> WatchResourceBindingsResponse(ResourceBinding)
);
