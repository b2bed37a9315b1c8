//! The conformance suite on `MemStore` (one test per case), plus `Prefixed` over it.

#![cfg(feature = "test-util")]

use std::sync::Arc;

use flotilla_store::conformance::{self, Ctx};
use flotilla_store::{ManualClock, MemStore, Prefixed};

macro_rules! mem_case {
    ($($test:ident => $case:ident),* $(,)?) => {$(
        #[tokio::test]
        async fn $test() {
            conformance::$case(&Ctx::mem()).await;
        }
    )*};
}

mem_case! {
    mem_get_put_delete => get_put_delete,
    mem_range_pagination => range_pagination,
    mem_range_at_revision => range_at_revision,
    mem_create_if_absent => create_if_absent,
    mem_cas_conflict => cas_conflict,
    mem_txn_all_or_nothing => txn_all_or_nothing,
    mem_txn_op_limit => txn_op_limit,
    mem_watch_ordering => watch_ordering,
    mem_watch_resume_from_revision => watch_resume_from_revision,
    mem_watch_sees_deletes => watch_sees_deletes,
    mem_watch_progress => watch_progress,
    mem_compaction_then_watch_is_compacted => compaction_then_watch_is_compacted,
    mem_lease_expiry_removes_keys => lease_expiry_removes_keys,
    mem_lease_revoke_and_keep_alive => lease_revoke_and_keep_alive,
    mem_election_handover => election_handover,
}

/// The chroot wrapper must be invisible: run the key-shaping cases through it.
macro_rules! prefixed_case {
    ($($test:ident => $case:ident),* $(,)?) => {$(
        #[tokio::test]
        async fn $test() {
            let clock = ManualClock::new();
            let inner = Arc::new(MemStore::with_clock(Arc::new(clock.clone())));
            // Noise outside the prefix that the cases must never see.
            flotilla_store::Store::put(inner.as_ref(), "other/p/00", "x".into(), None).await.unwrap();
            let store = Arc::new(Prefixed::new(inner, "tenant/"));
            conformance::$case(&Ctx::with_manual_clock(store, clock)).await;
        }
    )*};
}

prefixed_case! {
    prefixed_mem_range_pagination => range_pagination,
    prefixed_mem_cas_conflict => cas_conflict,
    prefixed_mem_txn_all_or_nothing => txn_all_or_nothing,
    prefixed_mem_watch_ordering => watch_ordering,
    prefixed_mem_lease_expiry_removes_keys => lease_expiry_removes_keys,
    prefixed_mem_election_handover => election_handover,
}

#[test]
fn every_case_runs_on_memstore() {
    let source = include_str!("mem.rs");
    let entry = |case: &str| format!("mem_{case} => {case}");
    conformance::assert_every_case_in(source, "MemStore", entry);
}
