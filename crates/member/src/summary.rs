//! A member's nodes and pods kept by watch for its capacity summary (CH-5.2).
//!
//! ```text
//!   watcher(nodes) ─┐                                    probe: summary()
//!                   ├─► State { nodes, pods, dirty } ──► recomputed only after a change,
//!   watcher(pods) ──┘   (spec + status of each)          None until both are listed
//! ```
//!
//! Listing every pod of every member at each status collection was a tenth of the control
//! plane's CPU with 1 s probes of 100 members (docs/design.md §7); a watch costs only the
//! changes. The watches end when the [`Member`](crate::Member) is dropped (its target
//! changed, or the cluster was forgotten).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use flotilla_proto::v1;
use futures::StreamExt as _;
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher;
use serde_json::Value;
use tokio::task::JoinHandle;

/// One kind's objects as the watch last listed and followed them.
#[derive(Default)]
struct Objects {
    /// name (namespace/name for pods) → `{spec, status}`.
    items: HashMap<String, Value>,
    /// A list is being received: the items it replaces are dropped at its end.
    relisting: Option<HashMap<String, Value>>,
    /// A list completed and the watch has not failed since.
    current: bool,
}

#[derive(Default)]
struct State {
    nodes: Objects,
    pods: Objects,
    /// The last summary computed, while nothing changed.
    cached: Option<v1::ResourceSummary>,
}

/// The watches of one member's nodes and pods, stopped on drop.
pub(crate) struct SummaryWatch {
    state: Arc<Mutex<State>>,
    tasks: Vec<JoinHandle<()>>,
}

impl SummaryWatch {
    /// Starts watching the nodes and pods behind `client`.
    pub(crate) fn start(client: kube::Client) -> Self {
        let state = Arc::new(Mutex::new(State::default()));
        let tasks = [false, true]
            .into_iter()
            .map(|pods| {
                let resource = if pods {
                    kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&())
                } else {
                    kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::Node>(&())
                };
                let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
                tokio::spawn(follow(api, state.clone(), pods))
            })
            .collect();
        SummaryWatch { state, tasks }
    }

    /// The summary from the watched nodes and pods, or `None` while either is not listed
    /// (or its watch is failing).
    pub(crate) fn summary(&self) -> Option<v1::ResourceSummary> {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if !(st.nodes.current && st.pods.current) {
            return None;
        }
        if st.cached.is_none() {
            let summary =
                crate::status::resource_summary(st.nodes.items.values(), st.pods.items.values());
            st.cached = Some(summary);
        }
        st.cached
    }
}

impl Drop for SummaryWatch {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// What the summary reads of an object: its `spec` and `status`.
fn slim(object: DynamicObject) -> (String, Value) {
    let name = match (&object.metadata.namespace, &object.metadata.name) {
        (Some(ns), Some(n)) => format!("{ns}/{n}"),
        (None, Some(n)) => n.clone(),
        _ => String::new(),
    };
    let mut map = serde_json::Map::new();
    if let Value::Object(mut data) = object.data {
        for key in ["spec", "status"] {
            if let Some(v) = data.remove(key) {
                map.insert(key.to_owned(), v);
            }
        }
    }
    (name, Value::Object(map))
}

async fn follow(api: Api<DynamicObject>, state: Arc<Mutex<State>>, pods: bool) {
    let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
    while let Some(event) = events.next().await {
        let mut st = state.lock().unwrap_or_else(PoisonError::into_inner);
        let State {
            nodes,
            pods: pod_objects,
            cached,
        } = &mut *st;
        let objects = if pods { pod_objects } else { nodes };
        match event {
            Ok(watcher::Event::Init) => objects.relisting = Some(HashMap::new()),
            Ok(watcher::Event::InitApply(o)) => {
                let (name, v) = slim(o);
                if let Some(list) = objects.relisting.as_mut() {
                    list.insert(name, v);
                }
            }
            Ok(watcher::Event::InitDone) => {
                if let Some(list) = objects.relisting.take() {
                    objects.items = list;
                }
                objects.current = true;
                *cached = None;
            }
            Ok(watcher::Event::Apply(o)) => {
                let (name, v) = slim(o);
                objects.items.insert(name, v);
                *cached = None;
            }
            Ok(watcher::Event::Delete(o)) => {
                let (name, _) = slim(o);
                objects.items.remove(&name);
                *cached = None;
            }
            Err(error) => {
                // Until the watch lists again, the caller lists for itself.
                objects.current = false;
                tracing::debug!(%error, pods, "node/pod watch failed; retrying");
            }
        }
    }
}
