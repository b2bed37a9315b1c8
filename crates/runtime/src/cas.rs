//! The one read → decide → compare-and-swap loop, with the one retry policy.
//!
//! ```text
//!   first read (usually the cache) ─► attempt(object, n) ─► Done(result) ──────────► result
//!                                        │   decides on the object and writes it with a
//!                                        │   compare-and-swap on what it read
//!                                        ├─► Reread (lost the race) ─► read the store ─┐
//!                                        └─► Gone (deleted under us) ─► decide on None ┤
//!                                                 ◄─────────────────── at most CAS_ATTEMPTS
//!                                                                      then Exhausted
//! ```
//!
//! Every service that modifies a shared object does it through [`read_decide_write`], so a
//! concurrent writer's change is never overwritten (every write compares the revision it was
//! derived from) and a conflict is resolved at once, inline, by deciding again on the new
//! version — not through the work queue's back-off (Karmada #7483 measured a 99.7 % retry
//! rate that way in a 5k-binding storm). The loop is bounded so that an object rewritten
//! continuously cannot pin a worker; after [`CAS_ATTEMPTS`] lost races the reconcile fails
//! with [`Exhausted`] and the queue retries it later.

use flotilla_store::StoreError;

/// How many times one operation decides and writes before giving up to the queue's back-off.
pub const CAS_ATTEMPTS: usize = 16;

/// What one attempt came to.
#[derive(Debug)]
pub enum Attempt<R> {
    /// Finished (written, or nothing to write): the loop returns this.
    Done(R),
    /// The compare-and-swap lost to another writer: read the object again, decide again.
    Reread,
    /// The object was deleted under the write: decide again on `None`.
    Gone,
}

/// Every attempt lost its race.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{key}: still conflicting after {attempts} attempts")]
pub struct Exhausted {
    /// The object's key.
    pub key: String,
    /// How many attempts were made.
    pub attempts: usize,
}

impl<R> Attempt<R> {
    /// The attempt after a failed write: [`Attempt::Reread`] on a conflict, [`Attempt::Gone`]
    /// when the object is gone; any other error is returned.
    pub fn after(e: StoreError) -> Result<Self, StoreError> {
        if e.is_conflict() {
            Ok(Attempt::Reread)
        } else if matches!(e, StoreError::NotFound { .. }) {
            Ok(Attempt::Gone)
        } else {
            Err(e)
        }
    }
}

/// Logs one lost race (used by the macros).
#[doc(hidden)]
pub fn lost_race(key: &str, attempt: usize) {
    tracing::debug!(key, attempt, "lost a compare-and-swap race; deciding again");
}

/// The end of the macros' loop: the result, or [`Exhausted`].
#[doc(hidden)]
pub fn finish<R, E: From<Exhausted>>(result: Option<R>, key: &str) -> Result<R, E> {
    result.ok_or_else(|| {
        Exhausted {
            key: key.to_owned(),
            attempts: CAS_ATTEMPTS,
        }
        .into()
    })
}

/// Reads, decides and writes one object until the write wins, at most [`CAS_ATTEMPTS`]
/// times; evaluates to `Result<R, E>` where `E: From<Exhausted>`.
///
/// ```text
///   read_decide_write!(key, first, reread_future, |object, attempt| { … Attempt<R> })
/// ```
///
/// The body decides on `object` (`first`, usually the cached one, at the first attempt; the
/// store's after a lost race; `None` when it does not exist), writes with a compare-and-swap
/// on that version, and evaluates to an [`Attempt`]. `reread_future` is awaited for a fresh
/// read after an [`Attempt::Reread`]. It is a macro, not a function taking closures, so the
/// body may `return` from (and `?` out of) the enclosing function, and the reconcile future
/// stays `Send` (async closures borrowing their context are not, yet).
#[macro_export]
macro_rules! read_decide_write {
    ($key:expr, $first:expr, $reread:expr, |$object:pat_param, $attempt:pat_param| $body:expr) => {{
        let mut next = ::core::option::Option::Some($first);
        let mut result = ::core::option::Option::None;
        for attempt in 0..$crate::cas::CAS_ATTEMPTS {
            let $object = match next.take() {
                ::core::option::Option::Some(object) => object,
                ::core::option::Option::None => $reread.await?,
            };
            let $attempt = attempt;
            match $body {
                $crate::cas::Attempt::Done(done) => {
                    result = ::core::option::Option::Some(done);
                    break;
                }
                $crate::cas::Attempt::Reread => $crate::cas::lost_race(&$key, attempt),
                $crate::cas::Attempt::Gone => next = ::core::option::Option::Some(None),
            }
        }
        $crate::cas::finish(result, &$key)
    }};
}

/// The loop of [`read_decide_write!`] for an operation that reads what it needs itself
/// (several objects, or always the store): runs the body until it is [`Attempt::Done`], at
/// most [`CAS_ATTEMPTS`] times.
///
/// ```text
///   retry_races!(key, |attempt| { … Attempt<R> })
/// ```
#[macro_export]
macro_rules! retry_races {
    ($key:expr, |$attempt:pat_param| $body:expr) => {{
        let mut result = ::core::option::Option::None;
        for attempt in 0..$crate::cas::CAS_ATTEMPTS {
            let $attempt = attempt;
            match $body {
                $crate::cas::Attempt::Done(done) => {
                    result = ::core::option::Option::Some(done);
                    break;
                }
                $crate::cas::Attempt::Reread | $crate::cas::Attempt::Gone => {
                    $crate::cas::lost_race(&$key, attempt)
                }
            }
        }
        $crate::cas::finish(result, &$key)
    }};
}

impl From<Exhausted> for crate::ServiceError {
    fn from(e: Exhausted) -> Self {
        crate::ServiceError::TooManyConflicts {
            key: e.key,
            attempts: e.attempts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ServiceError;

    fn conflict() -> StoreError {
        StoreError::Conflict {
            key: "k".into(),
            expected_revision: 1,
            actual_revision: 2,
        }
    }

    async fn read(n: &mut i32) -> Result<Option<i32>, StoreError> {
        *n += 1;
        Ok(Some(10 + *n))
    }

    async fn run(fail_first: usize) -> Result<(i32, Vec<(Option<i32>, usize)>, i32), ServiceError> {
        let mut rereads = 0;
        let mut seen = Vec::new();
        let out: Result<i32, ServiceError> =
            read_decide_write!("k", Some(1), read(&mut rereads), |object, n| {
                seen.push((object, n));
                if n < fail_first {
                    Attempt::after(conflict())?
                } else {
                    Attempt::Done(object.unwrap_or(0) * 2)
                }
            });
        let out = out?;
        Ok((out, seen, rereads))
    }

    #[tokio::test]
    async fn a_lost_race_decides_again_on_a_fresh_read() {
        let (out, seen, rereads) = run(2).await.unwrap();
        assert_eq!(out, 24);
        assert_eq!(seen, [(Some(1), 0), (Some(11), 1), (Some(12), 2)]);
        assert_eq!(rereads, 2);
    }

    #[tokio::test]
    async fn every_race_lost_is_exhausted() {
        match run(usize::MAX).await {
            Err(ServiceError::TooManyConflicts { key, attempts }) => {
                assert_eq!((key.as_str(), attempts), ("k", CAS_ATTEMPTS));
            }
            other => panic!("{other:?}"),
        }
    }

    async fn vanishing() -> Result<&'static str, ServiceError> {
        let mut rereads = 0;
        let out: Result<&str, ServiceError> =
            read_decide_write!("k", Some(1), read(&mut rereads), |object, _n| {
                match object {
                    Some(_) => Attempt::after(StoreError::NotFound { key: "k".into() })?,
                    None => Attempt::Done("gone"),
                }
            });
        let out = out?;
        assert_eq!(
            rereads, 0,
            "a vanished object is decided on as None without a read"
        );
        Ok(out)
    }

    #[tokio::test]
    async fn a_vanished_object_is_decided_on_as_none() {
        assert_eq!(vanishing().await.unwrap(), "gone");
    }

    async fn unavailable() -> Result<(), ServiceError> {
        retry_races!("k", |_n| {
            Attempt::<()>::after(StoreError::unavailable("down"))?
        })
    }

    #[tokio::test]
    async fn other_errors_pass_through() {
        assert!(matches!(unavailable().await, Err(ServiceError::Store(_))));
    }
}
