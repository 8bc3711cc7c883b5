//! An informer's shard set (KEP-5866): which objects it caches when a collection is split
//! between replicas, and how a change of it reaches the cache.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use informer_fifo::Queue;
use parking_lot::Mutex;

use informer_reflector::{ServerFiltering, ShardBy, ShardSelector};
use tokio::sync::watch;

use crate::informer::SharedIndexInformer;

/// An informer's shard set and whose value decides an object's shard.
pub(crate) struct Shards {
    pub(crate) selector: watch::Sender<Option<ShardSelector>>,
    pub(crate) by: ShardBy,
    /// The set of the cache's last complete list.
    pub(crate) listed: Arc<ListedShards>,
}

/// The shard set of the cache's last complete list: a list the reflector has queued counts
/// once the pop loop has applied it.
///
/// The reflector stages each list's set once the queue holds the list; it is published when
/// the queue is empty and no batch is in flight, checked where either may have just become
/// true: at the staging, and at the end of each batch of the pop loop (the only popper). A
/// queue found empty means every change queued before the staging has been taken off it; no
/// batch in flight means each was applied. The two checks cannot both miss: each side writes
/// (the stage, the batch's end) before it reads the other's.
#[derive(Debug)]
pub(crate) struct ListedShards {
    staged: Mutex<Option<Option<ShardSelector>>>,
    in_batch: AtomicBool,
    listed: watch::Sender<Option<ShardSelector>>,
}

impl Default for ListedShards {
    fn default() -> Self {
        Self {
            staged: Mutex::new(None),
            in_batch: AtomicBool::new(false),
            listed: watch::Sender::new(None),
        }
    }
}

impl ListedShards {
    /// The reflector handed `queue` a list at `set`.
    pub(crate) fn stage<K>(&self, set: Option<&ShardSelector>, queue: &dyn Queue<K>) {
        let mut staged = self.staged.lock();
        *staged = Some(set.cloned());
        // The queue first: found empty, the list was taken; then no batch in flight, so the
        // batch that took it has ended.
        if queue.is_empty() && !self.in_batch.load(Ordering::SeqCst) {
            self.publish(&mut staged);
        }
    }

    /// The pop loop begins a batch.
    pub(crate) fn begin_batch(&self) {
        self.in_batch.store(true, Ordering::SeqCst);
    }

    /// The pop loop has applied its batch.
    pub(crate) fn end_batch<K>(&self, queue: &dyn Queue<K>) {
        self.in_batch.store(false, Ordering::SeqCst);
        let mut staged = self.staged.lock();
        if staged.is_some() && queue.is_empty() {
            self.publish(&mut staged);
        }
    }

    fn publish(&self, staged: &mut Option<Option<ShardSelector>>) {
        if let Some(set) = staged.take() {
            self.listed.send_if_modified(|now| {
                let changed = *now != set;
                *now = set;
                changed
            });
        }
    }
}

impl Default for Shards {
    fn default() -> Self {
        Self {
            selector: watch::Sender::new(None),
            by: ShardBy::Object,
            listed: Arc::default(),
        }
    }
}

impl fmt::Debug for Shards {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shards")
            .field(
                "selector",
                &self.selector.borrow().as_ref().map(|s| s.to_string()),
            )
            .field("by", &self.by)
            .finish()
    }
}

impl<K> SharedIndexInformer<K>
where
    K: Send + Sync + 'static,
{
    /// Changes the shard set the informer caches (`None`: every object), at any time, running
    /// or not (an assignment moved shards).
    ///
    /// A running informer ends its watch and relists at once with the new set (sent as
    /// `shardSelector`, and filtered here whatever the server does); the relist replaces the
    /// cache, so the handlers hear of a deletion for every object that left the set and an
    /// addition for every one that arrived, as for any relist, and the cache ends up with
    /// exactly the objects of the new set. Until that relist is in, the cache holds the
    /// objects of the old set (an informer already synced stays synced). Setting the set it
    /// has changes nothing.
    ///
    /// The objects are hashed as the informer was built to ([`InformerBuilder::shard_by`](crate::InformerBuilder::shard_by)),
    /// by the values its identity reads. An informer shared by a factory keeps the sharing key
    /// it was created under: changing its set changes it for every user of it.
    pub fn set_shards(&self, shards: Option<ShardSelector>) {
        self.shards.selector.send_if_modified(|now| {
            let changed = *now != shards;
            *now = shards;
            changed
        });
    }

    /// The shard set the informer caches now (`None`: every object). A set just changed with
    /// [`set_shards`](Self::set_shards) is returned at once, before the relist is in.
    pub fn shards(&self) -> Option<ShardSelector> {
        self.shards.selector.borrow().clone()
    }

    /// The shard set of the cache's last complete list (`None`: no list at a shard set has
    /// completed, or the informer caches every object): the cache holds exactly the objects
    /// of this set, kept current by the watch. It follows [`set_shards`](Self::set_shards)
    /// only once the relist at the new set is in the cache, so a shard whose objects are to be
    /// read from the cache is there once this set covers it
    /// ([`ShardSelector::covers`]).
    pub fn listed_shards(&self) -> Option<ShardSelector> {
        self.shards.listed.listed.borrow().clone()
    }

    /// A receiver of [`listed_shards`](Self::listed_shards): it changes as each relist at a
    /// new shard set completes.
    pub fn watch_listed_shards(&self) -> watch::Receiver<Option<ShardSelector>> {
        self.shards.listed.listed.subscribe()
    }

    /// Whose value decides an object's shard (see [`ShardBy`]).
    pub fn shard_by(&self) -> ShardBy {
        self.shards.by
    }

    /// The shard set of the reflector's list-and-watch cycle under way (`None`: no cycle yet,
    /// or every object): the set of the list (or streaming list) it runs, then of its watch.
    /// While a relist at a set just changed with [`set_shards`](Self::set_shards) is under
    /// way, this is that set and [`listed_shards`](Self::listed_shards) the one before, so the
    /// cache holds the objects of a set for good once both equal [`shards`](Self::shards).
    pub fn cycle_shards(&self) -> Option<ShardSelector> {
        let state = self.state.lock();
        state.life.reflector().and_then(|r| r.current_shards())
    }

    /// Whether the server filtered the last list by the shard set, as its
    /// `metadata.shardInfo` said ([`ServerFiltering`]). The cache holds the same objects
    /// either way: what the server did not filter, the reflector did.
    pub fn server_filtering(&self) -> ServerFiltering {
        self.state
            .lock()
            .life
            .reflector()
            .map(|r| r.server_filtering())
            .unwrap_or_default()
    }
}
