//! Generic get / list / create / update / delete over the typed store, shared by every kind.
//!
//! Every write is guarded: create is create-if-absent, update and delete compare the
//! resourceVersion read (the caller's, or the current one for an unconditional request,
//! retried a bounded number of times on a concurrent change).

use flotilla_core::validation::{FieldErrorKind, Limits, validate_page_size};
use flotilla_proto::v1;
use flotilla_store::typed::{Typed, decode};
use flotilla_store::{RangeRequest, StoreError, StoreRef};

use flotilla_runtime::cas::Races;

use crate::error::Error;
use crate::kinds::ApiKind;
use crate::selector::Selector;

/// Paging and filtering of a List call.
#[derive(Clone, Copy, Debug, Default)]
pub struct ListParams<'a> {
    /// Items per page; 0 = the server default (500).
    pub page_size: i32,
    /// The previous page's `nextPageToken`, or empty.
    pub page_token: &'a str,
    /// A Kubernetes label selector, or empty.
    pub label_selector: &'a str,
}

/// One page of a List call.
#[derive(Clone, Debug)]
pub struct Page<R> {
    /// The items, in key order.
    pub items: Vec<R>,
    /// The token of the next page; empty on the last.
    pub next_page_token: String,
    /// The revision every page of this list is read at.
    pub resource_version: i64,
}

/// The store, seen as objects.
#[derive(Clone, Debug)]
pub struct Objects {
    store: StoreRef,
    limits: Limits,
}

/// A page token: `<revision>:<last key>`.
fn parse_token(token: &str, prefix: &str) -> Result<(i64, String), Error> {
    let bad = || Error::invalid("pageToken", "not a token this server issued for this list");
    let (rev, key) = token.split_once(':').ok_or_else(bad)?;
    let rev: i64 = rev.parse().map_err(|_| bad())?;
    if rev <= 0 || !key.starts_with(prefix) {
        return Err(bad());
    }
    Ok((rev, key.to_owned()))
}

// === impl Objects ===

impl Objects {
    /// Objects on `store`, with the List page limit of `limits`.
    pub fn new(store: StoreRef, limits: Limits) -> Self {
        Objects { store, limits }
    }

    /// The typed view of the store.
    pub fn typed(&self) -> Typed {
        Typed::new(self.store.clone())
    }

    /// The byte store.
    pub fn store(&self) -> &StoreRef {
        &self.store
    }

    /// Reads one object; NOT_FOUND if absent.
    pub async fn get<R: ApiKind>(&self, key: &str) -> Result<R, Error> {
        self.typed()
            .get::<R>(key)
            .await?
            .ok_or_else(|| Error::NotFound(format!("{} {key}", R::KIND)))
    }

    /// One page of the objects under `prefix` that pass `filter` and the label selector, all
    /// pages of one list being read at the first page's revision.
    pub async fn list<R: ApiKind>(
        &self,
        prefix: &str,
        params: ListParams<'_>,
        filter: impl Fn(&R) -> bool,
    ) -> Result<Page<R>, Error> {
        Error::check(validate_page_size(
            i64::from(params.page_size),
            &self.limits,
        ))?;
        let selector =
            Selector::parse(params.label_selector, "labelSelector").map_err(Error::Invalid)?;
        let limit = match usize::try_from(params.page_size) {
            Ok(0) | Err(_) => self.limits.max_page_size as usize,
            Ok(n) => n,
        };
        let mut req = RangeRequest::prefix(prefix).with_limit(limit);
        if !params.page_token.is_empty() {
            let (rev, key) = parse_token(params.page_token, prefix)?;
            req = req.at_revision(rev);
            req.start_after = Some(key);
        }
        let mut items = Vec::new();
        loop {
            let resp = self.store.range(req.clone()).await?;
            let revision = resp.revision;
            let count = resp.kvs.len();
            for (i, kv) in resp.kvs.iter().enumerate() {
                let obj: R = decode(kv)?;
                let labels_ok =
                    selector.is_empty() || obj.meta().is_some_and(|m| selector.matches(&m.labels));
                if labels_ok && filter(&obj) {
                    items.push(obj);
                }
                if items.len() == limit {
                    let more = i + 1 < count || resp.more;
                    let next_page_token = if more {
                        format!("{revision}:{}", kv.key)
                    } else {
                        String::new()
                    };
                    return Ok(Page {
                        items,
                        next_page_token,
                        resource_version: revision,
                    });
                }
            }
            match req.next_page(&resp) {
                Some(next) => req = next,
                None => {
                    return Ok(Page {
                        items,
                        next_page_token: String::new(),
                        resource_version: resp.revision,
                    });
                }
            }
        }
    }

    /// Creates `obj` (its server-set metadata already cleared); ALREADY_EXISTS if taken.
    pub async fn create<R: ApiKind>(&self, obj: R) -> Result<R, Error> {
        let key = obj.key();
        self.typed().create(obj, None).await.map_err(|e| match e {
            StoreError::AlreadyExists { .. } => Error::AlreadyExists(format!("{} {key}", R::KIND)),
            other => other.into(),
        })
    }

    /// Updates the object at `key`: `build(current)` returns the object to write (or a
    /// validation error, and then nothing is written). `resource_version` 0 means
    /// unconditional (re-read and retried on a race); otherwise it must be the current one
    /// (ABORTED if not). `uid`, if non-empty, must be the current object's (ABORTED if not).
    /// An object marked for deletion whose last finalizer the update removes is deleted.
    pub async fn update<R, F>(
        &self,
        key: &str,
        resource_version: i64,
        uid: &str,
        mut build: F,
    ) -> Result<R, Error>
    where
        R: ApiKind,
        F: FnMut(&R) -> Result<R, Error>,
    {
        if resource_version < 0 {
            return Err(Error::field(
                "metadata.resourceVersion",
                FieldErrorKind::OutOfRange,
                "must not be negative",
            ));
        }
        let typed = self.typed();
        let mut races = Races::new(key);
        loop {
            let current: R = self.get(key).await?;
            check_preconditions(&current, resource_version, uid)?;
            let new = build(&current)?;
            // The update removed the last finalizer of an object marked for deletion.
            let had_finalizers = current.meta().is_some_and(|m| !m.finalizers.is_empty());
            let finished = had_finalizers
                && new
                    .meta()
                    .is_some_and(|m| m.deletion_timestamp.is_some() && m.finalizers.is_empty());
            let result = if finished {
                typed
                    .delete(key, Some(current.resource_version()))
                    .await
                    .map(|_| new)
            } else {
                typed.update(&current, new).await
            };
            match result {
                Ok(obj) => return Ok(obj),
                // unconditional: re-read and build again on the new version
                Err(e) if e.is_conflict() && resource_version == 0 => races.lost()?,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Deletes the object at `key`. While it has finalizers, or when `hold` says so for the
    /// current object, it is only marked (deletionTimestamp) and `false` is returned with it;
    /// otherwise it is removed and `true` is returned with its last state.
    pub async fn delete<R, H>(
        &self,
        key: &str,
        preconditions: Option<&v1::Preconditions>,
        hold: H,
    ) -> Result<(R, bool), Error>
    where
        R: ApiKind,
        H: AsyncHold<R>,
    {
        let rv = preconditions.and_then(|p| p.resource_version).unwrap_or(0);
        let uid = preconditions
            .and_then(|p| p.uid.as_deref())
            .unwrap_or_default();
        let typed = self.typed();
        let mut races = Races::new(key);
        loop {
            let current: R = self.get(key).await?;
            check_preconditions(&current, rv, uid)?;
            let meta = current.meta().cloned().unwrap_or_default();
            let held = !meta.finalizers.is_empty() || hold.hold(&current).await?;
            let result = if held {
                if meta.deletion_timestamp.is_some() {
                    return Ok((current, false));
                }
                let mut marked = current.clone();
                marked.meta_mut().deletion_timestamp = Some(now_timestamp());
                typed.update(&current, marked).await.map(|m| (m, false))
            } else {
                typed
                    .delete(key, Some(current.resource_version()))
                    .await
                    .map(|_| (current, true))
            };
            match result {
                Ok(done) => return Ok(done),
                Err(e) if e.is_conflict() && rv == 0 => races.lost()?,
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// Decides whether a delete must only mark the object (see [`Objects::delete`]).
pub trait AsyncHold<R>: Send + Sync {
    /// `true` to only mark `current` for deletion.
    fn hold(&self, current: &R) -> impl std::future::Future<Output = Result<bool, Error>> + Send;
}

/// Never holds: objects without finalizers go at once.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoHold;

impl<R: Sync> AsyncHold<R> for NoHold {
    async fn hold(&self, _current: &R) -> Result<bool, Error> {
        Ok(false)
    }
}

fn check_preconditions<R: ApiKind>(
    current: &R,
    resource_version: i64,
    uid: &str,
) -> Result<(), Error> {
    if resource_version != 0 && current.resource_version() != resource_version {
        return Err(Error::Aborted(format!(
            "{} {}: resourceVersion {resource_version} is stale (current {}); re-read and retry",
            R::KIND,
            current.name(),
            current.resource_version()
        )));
    }
    let current_uid = current.meta().map_or("", |m| m.uid.as_str());
    if !uid.is_empty() && uid != current_uid {
        return Err(Error::Aborted(format!(
            "{} {}: uid {uid} does not match the object's ({current_uid}): it was re-created",
            R::KIND,
            current.name()
        )));
    }
    Ok(())
}

/// Now, as a wire timestamp with millisecond precision.
pub fn now_timestamp() -> prost_types::Timestamp {
    let ms = flotilla_runtime::now().as_millis();
    prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: i32::try_from(ms.rem_euclid(1000) * 1_000_000).unwrap_or(0),
    }
}

/// Clears what the server sets on create (uid, timestamps, generation); INVALID_ARGUMENT if
/// the caller sent a resourceVersion.
pub fn reset_for_create<R: ApiKind>(obj: &mut R) -> Result<(), Error> {
    let meta = obj.meta_mut();
    if meta.resource_version != 0 {
        return Err(Error::field(
            "metadata.resourceVersion",
            FieldErrorKind::Forbidden,
            "must be 0 (unset) on create",
        ));
    }
    meta.uid.clear();
    meta.creation_timestamp = None;
    meta.deletion_timestamp = None;
    meta.generation = 0;
    Ok(())
}

/// Keeps `current`'s managed-field times when `new` differs from it in nothing but those
/// times: a write that changes nothing is no write, as kube-apiserver skips it. (The
/// Kubernetes API gateway works out managers before this service defaults the object, so
/// a field it defaults, such as a resource selector's namespace, can look like a change
/// to the gateway and stamp the writer's entry with a new time; found when the two
/// applies of an unchanged file fell in different seconds.) A change of a manager's fields
/// or of anything else keeps the new times.
pub fn keep_times_of_a_no_op<R: ApiKind>(current: &R, new: &mut R) {
    let (Some(old), Some(now)) = (current.meta(), new.meta()) else {
        return;
    };
    let same_but_time = |a: &v1::ManagedFieldsEntry, b: &v1::ManagedFieldsEntry| {
        let mut a = a.clone();
        a.time = b.time;
        a == *b
    };
    if old.managed_fields.len() != now.managed_fields.len()
        || !old
            .managed_fields
            .iter()
            .zip(&now.managed_fields)
            .all(|(a, b)| same_but_time(a, b))
    {
        return;
    }
    let mut candidate = new.clone();
    candidate.meta_mut().managed_fields = old.managed_fields.clone();
    if flotilla_store::typed::encode(&candidate) == flotilla_store::typed::encode(current) {
        *new = candidate;
    }
}

/// Carries the server-owned metadata (uid, timestamps, generation, resourceVersion) of
/// `current` over to `new`, and its managed fields when `new` brings none: only the
/// Kubernetes API gateway keeps them (docs/kubernetes-api.md, "Server-side apply"), and a
/// write through gRPC or `flotilla apply` leaves them as they were.
pub fn carry_server_meta<R: ApiKind>(current: &R, new: &mut R) {
    let old = current.meta().cloned().unwrap_or_default();
    let meta = new.meta_mut();
    if meta.managed_fields.is_empty() {
        meta.managed_fields = old.managed_fields;
    }
    meta.uid = old.uid;
    meta.creation_timestamp = old.creation_timestamp;
    meta.deletion_timestamp = old.deletion_timestamp;
    meta.generation = old.generation;
    meta.resource_version = old.resource_version;
}
