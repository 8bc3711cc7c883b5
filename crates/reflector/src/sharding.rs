//! A reflector that keeps only a shard set (KEP-5866's server-side sharded list and watch, with
//! the same filter on the client): the selector sent, the objects kept, and what the server
//! said about it.
//!
//! The rules (docs/semantics.md, SH-9 onwards):
//!
//! * Each list-and-watch cycle takes the shard set current when it starts, sends it as
//!   `shardSelector` on its lists, streaming list and watches (unless the objects follow their
//!   owner's shard by uid: the server cannot hash an owner), and keeps only the listed objects
//!   and the `ADDED` / `MODIFIED` / `DELETED` events whose hash falls in it, whatever the
//!   server sent. A server that ignores the selector (an older one, or the feature gate off)
//!   therefore leaves the same cache and the same events as one that applies it.
//! * A list tells whether the server applied the selector (`metadata.shardInfo`):
//!   [`ServerFiltering`], read with [`Reflector::server_filtering`] and told to the observer
//!   ([`ReflectorObserver::shard_filtering`](crate::ReflectorObserver::shard_filtering)). A streaming list says nothing about it.
//! * A change of the shard set ends the watch and relists at once with the new set: the
//!   store's replace removes the objects that left and adds those that arrived. Until that
//!   relist is in, the store holds the old set's objects; the set of the last list completed
//!   is told to [`Reflector::with_listed_shards`]'s hook.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use informer_shard::{ShardField, ShardSelector};
use informer_store::SharedIdentity;
use parking_lot::RwLock;
use tokio::sync::watch;

use crate::lister_watcher::ListerWatcher;
use crate::reflector::Reflector;

/// Whose value decides the shard of an object.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ShardBy {
    /// The object's own `metadata.uid` or `metadata.namespace` (the selector's field), as the
    /// API server hashes it: the server can filter, and saves both bandwidth and memory.
    #[default]
    Object,
    /// Its controller owner's (`ownerReferences[controller=true].uid`), so that children land
    /// in their owner's shard. The API server hashes only an object's own fields, so with a
    /// `metadata.uid` selector nothing is sent to the server: the whole collection is listed
    /// and watched and filtered here (memory saved, not bandwidth). With a `metadata.namespace`
    /// selector an owner and its children share the value, so the server filters as with
    /// [`Object`](Self::Object). An object without a controller owner is hashed by its own uid.
    Owner,
}

impl ShardBy {
    /// The value hashed for `obj` with a selector on `field`: its own uid or namespace, or its
    /// controller owner's uid (see [`Owner`](Self::Owner)); `""` when the object has none, as
    /// the server hashes a missing namespace. A controller placing keys by shard hashes the
    /// same value the reflector filters by.
    pub fn value<'a, K: 'static>(
        self,
        field: ShardField,
        identity: &SharedIdentity<K>,
        obj: &'a K,
    ) -> &'a str {
        let value = match (field, self) {
            (ShardField::Namespace, _) => identity.namespace(obj),
            (ShardField::Uid, ShardBy::Object) => identity.uid(obj),
            (ShardField::Uid, ShardBy::Owner) => {
                identity.controller_uid(obj).or_else(|| identity.uid(obj))
            }
        };
        value.unwrap_or_default()
    }
}

/// Whether the server filtered the last list by the shard selector sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum ServerFiltering {
    /// Not known: no shard selector was sent, no list has been read since it was, or the
    /// state came from a streaming list (a watch says nothing about it).
    #[default]
    Unknown,
    /// The list's `metadata.shardInfo` said the server applied the selector.
    Filtered,
    /// The list had no `metadata.shardInfo`: the server ignored the selector (a server
    /// without KEP-5866, or with its feature gate off) and sent everything; only the
    /// client-side filter kept the shard set.
    NotFiltered,
}

impl ServerFiltering {
    /// A short label: `unknown`, `filtered`, `not_filtered`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::Filtered => "filtered",
            Self::NotFiltered => "not_filtered",
        }
    }

    fn from_u8(v: u8) -> Self {
        match v {
            1 => Self::Filtered,
            2 => Self::NotFiltered,
            _ => Self::Unknown,
        }
    }

    fn to_u8(self) -> u8 {
        match self {
            Self::Unknown => 0,
            Self::Filtered => 1,
            Self::NotFiltered => 2,
        }
    }
}

/// Told the shard set of each list (or streaming list) the store has taken: see
/// [`Reflector::with_listed_shards`].
type ListedHook = Arc<dyn Fn(Option<&ShardSelector>) + Send + Sync>;

/// What a sharded reflector keeps: where its shard set comes from, whose value is hashed, and
/// the set of the cycle running.
pub(crate) struct ShardState<K> {
    source: Option<ShardSource<K>>,
    /// The shard set of the cycle running (taken when it started).
    current: RwLock<Option<ShardSelector>>,
    server: AtomicU8,
    /// Told the shard set of each list completed (see [`Reflector::with_listed_shards`]).
    listed: Option<ListedHook>,
}

struct ShardSource<K> {
    shards: watch::Receiver<Option<ShardSelector>>,
    by: ShardBy,
    identity: SharedIdentity<K>,
}

impl<K> Default for ShardState<K> {
    fn default() -> Self {
        Self {
            source: None,
            current: RwLock::new(None),
            server: AtomicU8::new(0),
            listed: None,
        }
    }
}

impl<K: 'static> ShardState<K> {
    /// The value `selector` hashes for `obj` (`""` when the object has none, as the server
    /// hashes a missing namespace).
    fn value<'a>(source: &ShardSource<K>, selector: &ShardSelector, obj: &'a K) -> &'a str {
        source.by.value(selector.field(), &source.identity, obj)
    }
}

impl<K, L, S> Reflector<K, L, S>
where
    K: Send + Sync + 'static,
    L: ListerWatcher<K>,
{
    /// Keeps only the objects of a shard set: the set `shards` holds now and after each change
    /// (`None`: every object), hashed as `by` says from the values `identity` reads
    /// ([`Identity::uid`](informer_store::Identity::uid),
    /// [`namespace`](informer_store::Identity::namespace),
    /// [`controller_uid`](informer_store::Identity::controller_uid)).
    ///
    /// Each cycle sends the set as `shardSelector` (see [`ShardBy::Owner`] for when it does
    /// not) and filters by it on the client: the same store and events whether or not the
    /// server applies it. A change of the set ends the watch and relists with the new one, the
    /// store's replace delivering the deletions of the objects that left and the additions of
    /// those that arrived.
    pub fn with_shards(
        mut self,
        shards: watch::Receiver<Option<ShardSelector>>,
        by: ShardBy,
        identity: SharedIdentity<K>,
    ) -> Self {
        self.shards.source = Some(ShardSource {
            shards,
            by,
            identity,
        });
        self
    }

    /// Calls `listed` with the shard set of every list (or streaming list) completed, once the
    /// store has taken it (`None` for a list taken without a shard set): from then until the
    /// next one, the store holds exactly the objects of that set. A change of the set does not
    /// reach `listed` until the relist at the new set is in, so whoever reads a shard's objects
    /// from the store (a controller beginning a shard's term) can wait for them. With a queue
    /// as the store, the list is then queued, not yet applied by its consumer: see the
    /// informer's `listed_shards` for the cache's.
    pub fn with_listed_shards(
        mut self,
        listed: impl Fn(Option<&ShardSelector>) + Send + Sync + 'static,
    ) -> Self {
        self.shards.listed = Some(Arc::new(listed));
        self
    }

    /// Whether the server filtered the last list by the shard selector sent (see
    /// [`ServerFiltering`]).
    pub fn server_filtering(&self) -> ServerFiltering {
        ServerFiltering::from_u8(self.shards.server.load(Ordering::Relaxed))
    }

    /// The shard set of the cycle running, if any.
    pub fn current_shards(&self) -> Option<ShardSelector> {
        self.shards.current.read().clone()
    }

    /// Takes the shard set for a new cycle.
    pub(crate) fn begin_shard_cycle(&self) {
        if let Some(source) = &self.shards.source {
            *self.shards.current.write() = source.shards.borrow().clone();
        }
    }

    /// A list at the cycle's shard set is in the store: tells whoever follows it.
    pub(crate) fn note_listed_shards(&self) {
        if let Some(listed) = &self.shards.listed {
            let set = self.shards.current.read().clone();
            listed(set.as_ref());
        }
    }

    /// Whether the shard set changed since the cycle running took it.
    pub(crate) fn shards_changed(&self) -> bool {
        self.shards
            .source
            .as_ref()
            .is_some_and(|s| *s.shards.borrow() != *self.shards.current.read())
    }

    /// Resolves once the shard set differs from the one of the cycle running (never without
    /// a shard source).
    pub(crate) async fn shards_moved(&self) {
        let Some(source) = &self.shards.source else {
            return std::future::pending().await;
        };
        let current = self.shards.current.read().clone();
        let mut shards = source.shards.clone();
        if shards.wait_for(|s| *s != current).await.is_err() {
            // The sender is gone: the set can no longer change.
            std::future::pending::<()>().await;
        }
    }

    /// The `shardSelector` to send this cycle: the set, unless the objects follow their
    /// owner's uid (the server cannot hash that).
    pub(crate) fn shard_selector_param(&self) -> Option<String> {
        let source = self.shards.source.as_ref()?;
        let current = self.shards.current.read();
        let selector = current.as_ref()?;
        let sendable = source.by == ShardBy::Object || selector.field() == ShardField::Namespace;
        sendable.then(|| selector.to_string())
    }

    /// Whether `obj` is in the shard set of the cycle running (always, without one).
    pub(crate) fn in_shards(&self, obj: &K) -> bool {
        let Some(source) = &self.shards.source else {
            return true;
        };
        match &*self.shards.current.read() {
            Some(selector) => selector.matches(ShardState::value(source, selector, obj)),
            None => true,
        }
    }

    /// Whether objects are filtered this cycle.
    pub(crate) fn filters_shards(&self) -> bool {
        self.shards.source.is_some() && self.shards.current.read().is_some()
    }

    /// Notes what a list's first page said about the selector sent (`shard_info`, its
    /// `metadata.shardInfo.selector`), or that the state came from a streaming list
    /// (`streaming`), and tells the observer.
    pub(crate) fn note_server_filtering(&self, streaming: bool, shard_info: Option<&str>) {
        if !self.filters_shards() {
            self.shards.server.store(0, Ordering::Relaxed);
            return;
        }
        let sent = self.shard_selector_param();
        let filtering = match (&sent, streaming) {
            (None, _) | (_, true) => ServerFiltering::Unknown,
            (Some(_), false) if shard_info.is_some() => ServerFiltering::Filtered,
            (Some(_), false) => ServerFiltering::NotFiltered,
        };
        let before = self
            .shards
            .server
            .swap(filtering.to_u8(), Ordering::Relaxed);
        if filtering == ServerFiltering::NotFiltered && before != filtering.to_u8() {
            tracing::info!(reflector = %self.name, selector = sent.as_deref().unwrap_or_default(), "the server does not filter by shard (no shardInfo in the list): every object is sent and filtered here");
        }
        if let Some(observer) = &self.config.observer {
            observer.shard_filtering(filtering);
        }
    }
}
