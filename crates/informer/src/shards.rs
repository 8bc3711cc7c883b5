//! An informer's shard set (KEP-5866): which objects it caches when a collection is split
//! between replicas, and how a change of it reaches the cache.

use std::fmt;

use informer_reflector::{ServerFiltering, ShardBy, ShardSelector};
use tokio::sync::watch;

use crate::informer::SharedIndexInformer;

/// An informer's shard set and whose value decides an object's shard.
pub(crate) struct Shards {
    pub(crate) selector: watch::Sender<Option<ShardSelector>>,
    pub(crate) by: ShardBy,
}

impl Default for Shards {
    fn default() -> Self {
        Self {
            selector: watch::Sender::new(None),
            by: ShardBy::Object,
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

    /// Whose value decides an object's shard (see [`ShardBy`]).
    pub fn shard_by(&self) -> ShardBy {
        self.shards.by
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
