//! The watch handle every backend returns: a boxed stream of [`WatchEvent`]s that the
//! consumer polls, plus a control channel to ask for a progress notification.
//!
//! `EtcdStore` polls etcd's gRPC stream directly from it; `MemStore` feeds it from a task
//! through a bounded channel.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;

use crate::error::{Result, StoreError};
use crate::types::WatchEvent;

/// How many items a channel-fed watch buffers between its backend task and the consumer
/// before the task waits.
pub const DEFAULT_WATCH_BUFFER: usize = 1024;

type BoxStream = Pin<Box<dyn Stream<Item = Result<WatchEvent>> + Send>>;

/// A stream of changes under a prefix, ordered by revision, that never goes backwards.
///
/// It yields `Ok(WatchEvent::Batch)` per revision and `Ok(WatchEvent::Progress)` after
/// [`WatchStream::request_progress`]. An `Err` is terminal: after it the stream ends. The
/// important one is [`StoreError::Compacted`]: the watch started (or fell) below the
/// compaction point, so the caller must re-list and watch again from the list's revision.
/// Both backends report it as a stream item, never from `watch()` itself.
///
/// Dropping the stream cancels the watch.
#[derive(derive_more::Debug)]
pub struct WatchStream {
    #[debug(skip)]
    inner: BoxStream,
    #[debug(skip)]
    progress: mpsc::UnboundedSender<()>,
    #[debug(skip)]
    task: Option<JoinHandle<()>>,
    done: bool,
}

/// The backend's half of a channel-fed [`WatchStream`].
#[derive(Debug)]
pub(crate) struct WatchSink {
    /// Where events go.
    pub(crate) tx: mpsc::Sender<Result<WatchEvent>>,
    /// Progress requests from the consumer.
    pub(crate) progress: mpsc::UnboundedReceiver<()>,
}

// === impl WatchStream ===

impl WatchStream {
    /// Test shorthand: the next item, which must be a batch of changes and arrive within
    /// `within` (panics otherwise, naming what came instead).
    #[cfg(any(test, feature = "test-util"))]
    pub async fn next_batch(&mut self, within: std::time::Duration) -> crate::types::WatchBatch {
        let item = tokio::time::timeout(within, self.next())
            .await
            .expect("a watch item in time")
            .expect("the watch still open")
            .expect("a watch item, not an error");
        match item {
            WatchEvent::Batch(batch) => batch,
            other => panic!("expected a batch of changes, got {other:?}"),
        }
    }

    /// Creates a connected stream/sink pair with a buffer of `capacity` items.
    pub(crate) fn channel(capacity: usize) -> (Self, WatchSink) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let (ptx, prx) = mpsc::unbounded_channel();
        (
            Self::from_stream(ReceiverStream::new(rx), ptx),
            WatchSink { tx, progress: prx },
        )
    }

    /// Wraps a stream the consumer polls directly; `progress` carries progress requests to
    /// whatever produces the stream.
    pub(crate) fn from_stream(
        inner: impl Stream<Item = Result<WatchEvent>> + Send + 'static,
        progress: mpsc::UnboundedSender<()>,
    ) -> Self {
        Self {
            inner: Box::pin(inner),
            progress,
            task: None,
            done: false,
        }
    }

    /// Ties a backend task's lifetime to the stream: it is aborted when the stream drops.
    pub(crate) fn with_task(mut self, task: JoinHandle<()>) -> Self {
        self.task = Some(task);
        self
    }

    /// Where progress requests for this stream go (for wrappers such as `Prefixed`).
    pub(crate) fn progress_sender(&self) -> mpsc::UnboundedSender<()> {
        self.progress.clone()
    }

    /// The next item, or `None` once the watch has ended (after a terminal error, or when the
    /// backend closed it).
    pub async fn next(&mut self) -> Option<Result<WatchEvent>> {
        StreamExt::next(self).await
    }

    /// Asks the backend for a [`WatchEvent::Progress`]: it arrives in order, after every event
    /// up to its revision. Useful to learn that a quiet prefix is up to date.
    pub fn request_progress(&self) -> Result<()> {
        self.progress
            .send(())
            .map_err(|_| StoreError::WatchClosed("watch has ended".into()))
    }
}

impl Drop for WatchStream {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Stream for WatchStream {
    type Item = Result<WatchEvent>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        let item = std::task::ready!(this.inner.as_mut().poll_next(cx));
        if !matches!(item, Some(Ok(_))) {
            this.done = true;
        }
        Poll::Ready(item)
    }
}
