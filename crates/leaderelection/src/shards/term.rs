//! A replica's term on one shard, as its consumer holds it: [`ShardTerm`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use informer_shard::ShardRange;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// One term of this replica's ownership of one shard: current from when the replica acquired
/// the shard's Lease until it [ends](Self::ended) — the shard moves to another replica, the
/// Lease could not be renewed within the renew deadline, or the runner stopped.
///
/// **Hold it while working on the shard, and drop it (every clone) once the work has
/// stopped**: a shard moving to another replica is released only when the last clone of its
/// ended term is gone, so that the new owner starts after the old one stopped. (A term ended by
/// the renew deadline is not waited for: the Lease lapses on its own.)
#[derive(Debug, Clone)]
pub struct ShardTerm {
    inner: Arc<TermInner>,
}

#[derive(Debug)]
struct TermInner {
    shard: u32,
    count: u32,
    range: ShardRange,
    number: u64,
    ended: CancellationToken,
    /// Set (and `acked` told) when the last clone is dropped.
    done: Arc<AtomicBool>,
    acked: Arc<Notify>,
}

impl Drop for TermInner {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Release);
        self.acked.notify_one();
    }
}

impl ShardTerm {
    /// A current term; its [`done_flag`](Self::done_flag) is set and `acked` told when the
    /// last clone is dropped.
    pub(crate) fn new(
        shard: u32,
        count: u32,
        range: ShardRange,
        number: u64,
        acked: Arc<Notify>,
    ) -> Self {
        let inner = TermInner {
            shard,
            count,
            range,
            number,
            ended: CancellationToken::new(),
            done: Arc::default(),
            acked,
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The flag set once every clone is dropped.
    pub(crate) fn done_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.inner.done)
    }

    /// Ends the term (its token is cancelled); the runner then drops its own clone.
    pub(crate) fn end(&self) {
        self.inner.ended.cancel();
    }

    /// The shard's index, in `0..count`.
    pub fn shard(&self) -> u32 {
        self.inner.shard
    }

    /// How many shards there are.
    pub fn count(&self) -> u32 {
        self.inner.count
    }

    /// The shard's part of the hash space: `ShardRange::shard(shard, count)`.
    pub fn range(&self) -> ShardRange {
        self.inner.range
    }

    /// The term's number among this replica's terms on this shard (1 for the first).
    pub fn number(&self) -> u64 {
        self.inner.number
    }

    /// Whether the term is still under way.
    pub fn is_current(&self) -> bool {
        !self.inner.ended.is_cancelled()
    }

    /// Completes when the term ends.
    pub async fn ended(&self) {
        self.inner.ended.cancelled().await;
    }

    /// A token cancelled when the term ends (to tie other work to it).
    pub fn token(&self) -> CancellationToken {
        self.inner.ended.clone()
    }
}
