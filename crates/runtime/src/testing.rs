//! Fault injection and test support for anything built on the runtime (feature `test-util`).
//!
//! ```text
//!   FlakyStore ── wraps any Store: partition()/heal() (every call fails Unavailable),
//!                 inject_watch_error(e) (the next watch() calls fail with e),
//!                 stale_lists(n, rev) (the next n un-pinned ranges are read at an old rev),
//!                 rewind_watches(by) (watches start `by` revisions early: replayed history)
//!   Interpose  ── wraps any Store: runs a hook once before the first txn writing a key (a
//!                 concurrent writer between a read and its CAS); counts binding writes
//!   TcpProxy   ── 127.0.0.1:0 → upstream; cut() drops every connection and refuses new ones
//!                 until restore(): a network partition between a client and etcd
//!   harness    ── Harness (a service's run_with on a task, stop()), eventually(..)
//!   bindings   ── cluster / taint / toleration / binding builders, CAS helpers
//!   grpc       ── serve_loopback (a gRPC service on 127.0.0.1:0), BadRequest assertions
//!   flags      ── rejected_flags(validate()), assert_help_names::<Args>(flags)
//! ```

use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use flotilla_store::{
    Op, RangeRequest, RangeResponse, Result, Revision, Store, StoreError, StoreRef, Txn,
    TxnResponse, WatchStream, Wrapper,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

pub mod bindings;
pub mod grpc;
pub mod harness;

pub use self::harness::{Harness, env_or, eventually, stop_task};

/// `mutex` locked, whether or not a panicking test poisoned it.
fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The flags that a validation which must fail names, in its order.
pub fn rejected_flags<T: std::fmt::Debug>(
    validated: std::result::Result<T, Vec<crate::args::ArgError>>,
) -> Vec<&'static str> {
    let errors = validated.expect_err("the flags are rejected");
    errors.iter().map(|e| e.flag).collect()
}

/// Asserts that the long `--help` of `A` names each of `flags`.
pub fn assert_help_names<A: clap::CommandFactory>(flags: &[&str]) {
    let help = A::command().render_long_help().to_string();
    for flag in flags {
        assert!(help.contains(flag), "{flag} in --help");
    }
}

/// A [`Store`] wrapper that fails on demand.
pub struct FlakyStore {
    inner: Arc<dyn Store>,
    partitioned: AtomicBool,
    paused: tokio::sync::watch::Sender<bool>,
    watch_errors: Mutex<VecDeque<StoreError>>,
    stale_lists: AtomicUsize,
    stale_revision: AtomicI64,
    rewind: AtomicI64,
    watch_calls: AtomicUsize,
    range_calls: AtomicUsize,
}

impl std::fmt::Debug for FlakyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlakyStore")
            .field("partitioned", &self.partitioned.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

// === impl FlakyStore ===

impl FlakyStore {
    /// Wraps `inner`; nothing fails until told to.
    pub fn new(inner: Arc<dyn Store>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            partitioned: AtomicBool::new(false),
            paused: tokio::sync::watch::channel(false).0,
            watch_errors: Mutex::new(VecDeque::new()),
            stale_lists: AtomicUsize::new(0),
            stale_revision: AtomicI64::new(0),
            rewind: AtomicI64::new(0),
            watch_calls: AtomicUsize::new(0),
            range_calls: AtomicUsize::new(0),
        })
    }

    /// Every call fails with [`StoreError::Unavailable`] until [`FlakyStore::heal`]. Watches
    /// opened before keep running (the wrapper cannot break them).
    pub fn partition(&self) {
        self.partitioned.store(true, Ordering::SeqCst);
    }

    /// Ends a partition.
    pub fn heal(&self) {
        self.partitioned.store(false, Ordering::SeqCst);
    }

    /// Every call waits (as against a SIGSTOPped etcd) until [`FlakyStore::resume`], then
    /// goes through: a write decided during the pause commits after it. Watches opened
    /// before keep running.
    pub fn pause(&self) {
        self.paused.send_replace(true);
    }

    /// Ends a pause: the waiting calls go through.
    pub fn resume(&self) {
        self.paused.send_replace(false);
    }

    async fn gate(&self) {
        let mut rx = self.paused.subscribe();
        let _ = rx.wait_for(|paused| !*paused).await;
    }

    /// The next `watch` call fails with `error` (queue several for several calls).
    pub fn inject_watch_error(&self, error: StoreError) {
        locked(&self.watch_errors).push_back(error);
    }

    /// The next `n` ranges that do not ask for a revision are read at `revision` instead of
    /// the current one, as a lagging etcd member would answer.
    pub fn stale_lists(&self, n: usize, revision: Revision) {
        self.stale_revision.store(revision, Ordering::SeqCst);
        self.stale_lists.store(n, Ordering::SeqCst);
    }

    /// Watches start `by` revisions before the one asked for, so that the watcher receives
    /// history it has already seen.
    pub fn rewind_watches(&self, by: i64) {
        self.rewind.store(by, Ordering::SeqCst);
    }

    /// How many `watch` calls were made.
    pub fn watch_calls(&self) -> usize {
        self.watch_calls.load(Ordering::SeqCst)
    }

    /// How many `range` calls were made.
    pub fn range_calls(&self) -> usize {
        self.range_calls.load(Ordering::SeqCst)
    }

    /// Waits while paused, then fails while partitioned: what every call goes through.
    async fn ready(&self) -> Result<()> {
        self.gate().await;
        if self.partitioned.load(Ordering::SeqCst) {
            Err(StoreError::unavailable("partitioned by the test"))
        } else {
            Ok(())
        }
    }
}

#[async_trait]
impl Wrapper for FlakyStore {
    fn inner(&self) -> &dyn Store {
        &*self.inner
    }

    async fn admit(&self) -> Result<()> {
        self.ready().await
    }

    async fn range(&self, mut req: RangeRequest) -> Result<RangeResponse> {
        self.range_calls.fetch_add(1, Ordering::SeqCst);
        self.ready().await?;
        if req.revision.is_none()
            && self
                .stale_lists
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        {
            req.revision = Some(self.stale_revision.load(Ordering::SeqCst));
        }
        self.inner.range(req).await
    }

    async fn watch(&self, prefix: &str, from_revision: Option<Revision>) -> Result<WatchStream> {
        self.watch_calls.fetch_add(1, Ordering::SeqCst);
        self.ready().await?;
        let injected = locked(&self.watch_errors).pop_front();
        if let Some(e) = injected {
            return Err(e);
        }
        let rewind = self.rewind.load(Ordering::SeqCst);
        let from = from_revision.map(|r| (r - rewind).max(1));
        self.inner.watch(prefix, from).await
    }
}

/// An async hook for [`Interpose`].
pub type Hook = Box<dyn Fn() -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// A [`Store`] wrapper that runs a hook once, right before the first transaction that writes
/// `key`: a concurrent writer that gets in between a controller's read and its CAS. It also
/// counts the transactions that write bindings, to check that writes are batched.
#[derive(derive_more::Debug)]
pub struct Interpose {
    #[debug(skip)]
    inner: StoreRef,
    key: String,
    #[debug(skip)]
    hook: Mutex<Option<Hook>>,
    /// How often the hook ran (0 or 1).
    pub fired: AtomicUsize,
    /// Transactions that wrote `key` (the hook's and any later ones).
    #[debug(skip)]
    pub key_txns: AtomicUsize,
    /// Transactions that wrote at least one binding.
    #[debug(skip)]
    pub binding_txns: AtomicUsize,
    /// Binding puts in those transactions.
    #[debug(skip)]
    pub binding_puts: AtomicUsize,
}

// === impl Interpose ===

impl Interpose {
    /// Wraps `inner`; `hook` runs before the first transaction that puts `key`.
    pub fn new(inner: StoreRef, key: &str, hook: Hook) -> Arc<Self> {
        Arc::new(Interpose {
            inner,
            key: key.into(),
            hook: Mutex::new(Some(hook)),
            fired: AtomicUsize::new(0),
            key_txns: AtomicUsize::new(0),
            binding_txns: AtomicUsize::new(0),
            binding_puts: AtomicUsize::new(0),
        })
    }

    /// How often the hook ran (0 or 1).
    pub fn fired(&self) -> usize {
        self.fired.load(Ordering::SeqCst)
    }

    /// How many transactions wrote `key` so far.
    pub fn key_txns(&self) -> usize {
        self.key_txns.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Wrapper for Interpose {
    fn inner(&self) -> &dyn Store {
        &*self.inner
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        let writes_key = txn
            .success
            .iter()
            .any(|op| matches!(op, Op::Put { key, .. } if *key == self.key));
        let puts = txn
            .success
            .iter()
            .filter(|op| matches!(op, Op::Put { key, .. } if key.starts_with("bindings/")))
            .count();
        if puts > 0 {
            self.binding_txns.fetch_add(1, Ordering::SeqCst);
            self.binding_puts.fetch_add(puts, Ordering::SeqCst);
        }
        if writes_key {
            self.key_txns.fetch_add(1, Ordering::SeqCst);
            let hook = locked(&self.hook).take();
            if let Some(hook) = hook {
                hook().await;
                self.fired.fetch_add(1, Ordering::SeqCst);
            }
        }
        self.inner.txn(txn).await
    }
}

/// A TCP proxy on 127.0.0.1 that can cut its connections: a network partition between a
/// client (e.g. an `EtcdStore`) and its server. Stops when dropped.
#[derive(Debug)]
pub struct TcpProxy {
    addr: SocketAddr,
    cut: watch::Sender<bool>,
    /// Connections being relayed.
    open: watch::Receiver<usize>,
    task: tokio::task::JoinHandle<()>,
}

// === impl TcpProxy ===

impl TcpProxy {
    /// Starts a proxy to `upstream` on a free local port.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (cut, cut_rx) = watch::channel(false);
        let (open_tx, open) = watch::channel(0);
        let task = tokio::spawn(proxy_loop(listener, upstream, cut_rx, open_tx));
        Ok(Self {
            addr,
            cut,
            open,
            task,
        })
    }

    /// The proxy's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>`, for an etcd endpoint list.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Drops every open connection and refuses new ones; returns once no connection relays
    /// any more (a byte sent after this returns never crosses the proxy).
    pub async fn cut(&self) {
        self.cut.send_replace(true);
        let mut open = self.open.clone();
        let _ = open.wait_for(|n| *n == 0).await;
    }

    /// Accepts connections again.
    pub fn restore(&self) {
        self.cut.send_replace(false);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn proxy_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    cut: watch::Receiver<bool>,
    open: watch::Sender<usize>,
) {
    let open = std::sync::Arc::new(open);
    let mut conns = JoinSet::new();
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        if *cut.borrow() {
            drop(client);
            continue;
        }
        let mut cut = cut.clone();
        // counted from the accept, so that a cut waits for a relay still connecting
        open.send_modify(|n| *n += 1);
        let open = open.clone();
        conns.spawn(async move {
            if let Ok(mut server) = TcpStream::connect(upstream).await {
                let mut client = client;
                tokio::select! {
                    biased;
                    _ = cut.wait_for(|c| *c) => {}
                    _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                }
            }
            open.send_modify(|n| *n -= 1);
        });
        while conns.try_join_next().is_some() {}
    }
}
