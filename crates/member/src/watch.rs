//! Status by watch: the objects Flotilla applied of one kind on a member, followed through a
//! Kubernetes watch (kube-runtime's `watcher` and `reflector`, selected by Flotilla's label)
//! instead of listed every status period.
//!
//! ```text
//!   Member::watch_managed(apiVersion, kind, changed)
//!     GET {kind}?labelSelector=resourcebinding.karmada.io/permanent-id  (list, then watch;
//!        a lost watch resumes from its resourceVersion, an expired one lists again)
//!       └─► reflector store ─► ManagedWatch::objects()   (what `list_managed` returns)
//!       └─► `changed` receives the identity of every object added, changed or deleted
//! ```
//!
//! The watch has its own client without the per-call deadline: a watch is one request that
//! lasts minutes (the server ends it after about 5, and it is resumed).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::{Member, MemberError, ObjectRef, into_value, kube_client, managed_label};

/// How long a watch request may stay silent before the client gives up on it (the server
/// ends a watch after `timeoutSeconds`, about 290 s, and bookmarks keep it busy).
const WATCH_READ_TIMEOUT: Duration = Duration::from_secs(330);

/// The objects Flotilla applied of one kind on one member, kept current by a watch. The
/// watch stops when this is dropped.
pub struct ManagedWatch {
    store: Store<DynamicObject>,
    ready: Arc<AtomicBool>,
    api_version: String,
    kind: String,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for ManagedWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagedWatch")
            .field("api_version", &self.api_version)
            .field("kind", &self.kind)
            .field("ready", &self.is_ready())
            .finish_non_exhaustive()
    }
}

impl Drop for ManagedWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ManagedWatch {
    /// Whether the first list has arrived (before that, [`ManagedWatch::objects`] is not the
    /// member's state).
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Every object of the kind that carries Flotilla's label, as
    /// [`Member::list_managed`] returns them (identity, labels, `spec`, `status`).
    pub fn objects(&self) -> Vec<Value> {
        self.store
            .state()
            .iter()
            .map(|o| into_value(DynamicObject::clone(o), &self.api_version, &self.kind))
            .collect()
    }
}

impl Member {
    /// Starts watching the objects of `api_version` `kind` that carry Flotilla's label (by
    /// the kind's scope); `changed` receives the identity of each object added, changed or
    /// deleted, and the kind's first list as `None` once it has arrived.
    pub async fn watch_managed(
        &self,
        api_version: &str,
        kind: &str,
        changed: mpsc::UnboundedSender<Option<ObjectRef>>,
    ) -> Result<ManagedWatch, MemberError> {
        let (resource, namespaced) = self.resource_for(api_version, kind).await?;
        let target = self
            .target
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .1
            .clone();
        let client = kube_client(&target, WATCH_READ_TIMEOUT)?;
        let api: Api<DynamicObject> = Api::all_with(client, &resource);
        let writer = reflector::store::Writer::new(resource.clone());
        let store = writer.as_reader();
        let ready = Arc::new(AtomicBool::new(false));
        let config = watcher::Config::default().labels(managed_label(namespaced));
        let stream = reflector::reflector(writer, watcher(api, config).default_backoff());
        let (av, k, endpoint) = (
            api_version.to_owned(),
            kind.to_owned(),
            self.endpoint.clone(),
        );
        let flag = ready.clone();
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                let object = match event {
                    Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o)) => o,
                    Ok(watcher::Event::InitDone) => {
                        if !flag.swap(true, Ordering::AcqRel) {
                            tracing::debug!(%endpoint, api_version = %av, kind = %k, "watching managed objects");
                        }
                        if changed.send(None).is_err() {
                            return;
                        }
                        continue;
                    }
                    Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => continue,
                    Err(error) => {
                        tracing::debug!(%endpoint, api_version = %av, kind = %k, %error, "watch failed; resuming");
                        continue;
                    }
                };
                let r = ObjectRef {
                    api_version: av.clone(),
                    kind: k.clone(),
                    namespace: object.metadata.namespace.clone().unwrap_or_default(),
                    name: object.metadata.name.clone().unwrap_or_default(),
                };
                if changed.send(Some(r)).is_err() {
                    return;
                }
            }
        });
        Ok(ManagedWatch {
            store,
            ready,
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            task,
        })
    }
}
