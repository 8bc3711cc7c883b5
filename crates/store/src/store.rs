//! The layer's contracts: the writes a reflector makes, what a queue reads back, the full store,
//! and the indexer.

use std::sync::Arc;
use std::task::Waker;

use crate::error::Result;
use crate::index::Indexers;
use crate::parts::ReplaceParts;

/// The writes a reflector makes: the whole contract between a reflector and whatever it feeds.
///
/// A plain store and a queue (the DeltaFifo) both implement it, so a reflector can feed either.
/// Objects travel as `Arc<K>`: nothing on this path deep-copies an object.
///
/// Every method is quick and never blocks on I/O. A failing write (a key or index function
/// error) changes nothing.
///
/// What a write can fail with is the implementation's own [`Error`](Self::Error): a store's
/// is this crate's [`Error`](crate::Error), a queue's is its layer's (it adds transforms).
pub trait ReflectorStore<K>: Send + Sync {
    /// What a refused write reports.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Adds an object. For a store this is an upsert, the same as [`update`](Self::update).
    fn add(&self, obj: Arc<K>) -> Result<(), Self::Error>;

    /// Updates an object. For a store this is an upsert, the same as [`add`](Self::add).
    fn update(&self, obj: Arc<K>) -> Result<(), Self::Error>;

    /// Deletes an object (found by its key). Deleting a key that is not present is a no-op.
    fn delete(&self, obj: Arc<K>) -> Result<(), Self::Error>;

    /// Replaces the whole content with `list`, which the server reported at `resource_version`.
    ///
    /// For duplicate keys in `list` the last object wins. What an object the implementation
    /// cannot accept does is the implementation's rule: [`ThreadSafeStore`](crate::ThreadSafeStore)
    /// refuses the whole list before changing anything; the queues apply the rest and report
    /// the refused objects.
    fn replace(&self, list: Vec<Arc<K>>, resource_version: String) -> Result<(), Self::Error>;

    /// One part of a replace delivered in parts (a list applied page by page): `part` is the
    /// next page of the list, `parts` what this implementation keeps between the parts.
    ///
    /// The default holds the part, for [`replace_parts_done`](Self::replace_parts_done) to
    /// [`replace`](Self::replace) the whole content at once. An implementation may instead
    /// apply each part as it comes (the queues do, the initial list's parts too, counting as
    /// synced only at the end: see [`ReplaceParts`]), so that what the list replaces can be
    /// freed, and what it lists consumed, before the list is over.
    fn replace_part(
        &self,
        part: Vec<Arc<K>>,
        parts: &mut ReplaceParts<K>,
    ) -> Result<(), Self::Error> {
        parts.hold(part);
        Ok(())
    }

    /// Ends a replace delivered in parts, which the server reported at `resource_version`: the
    /// content is then what the parts listed, as after one [`replace`](Self::replace) with all
    /// of them. The default replaces the content with the parts held; an implementation whose
    /// `replace_part` applies parts implements this too.
    ///
    /// A list that fails before its end never calls it: parts held are then dropped, parts
    /// applied stay applied (each a version the server listed), and nothing is deleted.
    fn replace_parts_done(
        &self,
        parts: ReplaceParts<K>,
        resource_version: String,
    ) -> Result<(), Self::Error> {
        let mut parts = parts;
        self.replace(parts.take_held(), resource_version)
    }

    /// Asks for a resync. A plain store has nothing to do; a queue re-delivers what it knows.
    fn resync(&self) -> Result<(), Self::Error>;

    /// Records a bookmark: the server's state has reached `resource_version` with no change to
    /// this resource. The default does nothing.
    fn bookmark(&self, resource_version: &str) -> Result<(), Self::Error> {
        let _ = resource_version;
        Ok(())
    }

    /// How many changes it holds that its consumer has not taken yet, if it is a queue; `None`
    /// (the default) for a store, which applies each write itself. A reflector handing a list
    /// over by page waits, between pages, while a queue's backlog is above a bound, so that a
    /// consumer slower than the decoding never lets decoded pages pile up.
    fn backlog(&self) -> Option<usize> {
        None
    }

    /// [`backlog`](Self::backlog), and, if it is above `bound`, `waker` kept to be woken once
    /// the consumer has taken enough for it to be at most `bound` (or the queue is closed): a
    /// reflector waiting between pages goes on as soon as it may, not at its next look. Only
    /// the last waker registered is kept. The default keeps none; a reflector waiting on such a
    /// queue looks again at an interval.
    fn backlog_waking(&self, bound: usize, waker: &Waker) -> Option<usize> {
        let _ = (bound, waker);
        self.backlog()
    }
}

/// What a queue needs to read back from the cache it feeds: the keys and the object per key.
///
/// The DeltaFifo uses it to emit deletions for objects that vanished while no watch was open, and
/// to resync. Lookups never fail: an in-memory cache either has the key or it does not.
pub trait KnownObjects<K>: Send + Sync {
    /// Every key, in no particular order.
    fn list_keys(&self) -> Vec<String>;

    /// The object filed under `key`, if any.
    fn get_by_key(&self, key: &str) -> Option<Arc<K>>;
}

/// A keyed, thread-safe collection of objects (client-go's `Store`).
///
/// `add` and `update` are both upserts; `delete` of a missing key is a no-op; `replace` swaps
/// the whole content atomically and records the resource version; `resync` does nothing.
/// Objects handed out are shared (`Arc<K>`) and must be treated as read-only.
pub trait Store<K>: ReflectorStore<K, Error = crate::Error> + KnownObjects<K> {
    /// Every object, in no particular order.
    fn list(&self) -> Vec<Arc<K>>;

    /// The stored object with the same key as `obj`; fails only if the key cannot be computed.
    fn get(&self, obj: &K) -> Result<Option<Arc<K>>>;

    /// The key this store files `obj` under (its key function, a panic caught as an error).
    fn key_of(&self, obj: &K) -> Result<String>;

    /// Adds or replaces `obj` and returns the object it replaced, if any: `get` and `update` in
    /// one step (the default does exactly that; a store can do it with one key computation and
    /// one lock).
    fn upsert(&self, obj: Arc<K>) -> Result<Option<Arc<K>>> {
        let old = self.get(&obj)?;
        self.update(obj)?;
        Ok(old)
    }

    /// [`upsert`](Self::upsert) with the key already computed: `key` must be what this store's
    /// key function returns for `obj` (a queue fed by the same key function hands it over with
    /// each change). It saves computing and allocating the key a second time; the default
    /// ignores `key` and calls [`upsert`](Self::upsert).
    fn upsert_with_key(&self, key: &str, obj: Arc<K>) -> Result<Option<Arc<K>>> {
        let _ = key;
        self.upsert(obj)
    }

    /// Whether this store keeps the very objects it is given, so that a read hands back the
    /// `Arc` written and costs no more than a lookup (the default, `true`). A store that keeps
    /// them in another form and rebuilds them on read ([`CompactStore`](crate::CompactStore))
    /// says `false`: an informer then does not look up the cached version of every listed
    /// object to share it, which would rebuild each one and keep none.
    fn shares_objects(&self) -> bool {
        true
    }

    /// Removes the object filed under `key` and returns it; a missing key is a no-op.
    ///
    /// This is how a tombstone (which carries a key, not necessarily an object) is applied.
    fn delete_by_key(&self, key: &str) -> Result<Option<Arc<K>>>;

    /// The number of objects.
    fn len(&self) -> usize {
        self.list_keys().len()
    }

    /// Whether the store holds no object.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The resource version of the last `replace` or `bookmark`, if any.
    fn last_sync_resource_version(&self) -> Option<String>;
}

/// A [`Store`] with named secondary indexes (client-go's `Indexer`).
///
/// An index maps each value its [`IndexFunc`](crate::IndexFunc) yields to the set of keys of the
/// objects that yield it. Indexes are kept exact on every write: an index never names a key the
/// store lacks, and a value with no keys left is removed.
pub trait Indexer<K>: Store<K> {
    /// The objects that share at least one value of index `index_name` with `obj`.
    fn index(&self, index_name: &str, obj: &K) -> Result<Vec<Arc<K>>>;

    /// The keys filed under `indexed_value` in index `index_name`, sorted.
    fn index_keys(&self, index_name: &str, indexed_value: &str) -> Result<Vec<String>>;

    /// Every value of index `index_name` that currently has objects; empty for an unknown index.
    fn list_index_func_values(&self, index_name: &str) -> Vec<String>;

    /// The objects filed under `indexed_value` in index `index_name` (empty if none).
    fn by_index(&self, index_name: &str, indexed_value: &str) -> Result<Vec<Arc<K>>>;

    /// Registers more index functions and indexes every object already stored under them.
    ///
    /// A name that is already registered is an [`IndexerConflict`](crate::Error::IndexerConflict)
    /// and nothing is added.
    fn add_indexers(&self, indexers: Indexers<K>) -> Result<()>;

    /// The registered index functions.
    fn get_indexers(&self) -> Indexers<K>;
}

macro_rules! forward_through {
    ($($ptr:ty),*) => {$(
        impl<K, T: ReflectorStore<K> + ?Sized> ReflectorStore<K> for $ptr {
            type Error = T::Error;
            fn add(&self, obj: Arc<K>) -> Result<(), T::Error> { (**self).add(obj) }
            fn update(&self, obj: Arc<K>) -> Result<(), T::Error> { (**self).update(obj) }
            fn delete(&self, obj: Arc<K>) -> Result<(), T::Error> { (**self).delete(obj) }
            fn replace(&self, list: Vec<Arc<K>>, resource_version: String) -> Result<(), T::Error> {
                (**self).replace(list, resource_version)
            }
            fn replace_part(
                &self,
                part: Vec<Arc<K>>,
                parts: &mut ReplaceParts<K>,
            ) -> Result<(), T::Error> {
                (**self).replace_part(part, parts)
            }
            fn replace_parts_done(
                &self,
                parts: ReplaceParts<K>,
                resource_version: String,
            ) -> Result<(), T::Error> {
                (**self).replace_parts_done(parts, resource_version)
            }
            fn resync(&self) -> Result<(), T::Error> { (**self).resync() }
            fn bookmark(&self, resource_version: &str) -> Result<(), T::Error> {
                (**self).bookmark(resource_version)
            }
            fn backlog(&self) -> Option<usize> { (**self).backlog() }
            fn backlog_waking(&self, bound: usize, waker: &Waker) -> Option<usize> {
                (**self).backlog_waking(bound, waker)
            }
        }

        impl<K, T: KnownObjects<K> + ?Sized> KnownObjects<K> for $ptr {
            fn list_keys(&self) -> Vec<String> { (**self).list_keys() }
            fn get_by_key(&self, key: &str) -> Option<Arc<K>> { (**self).get_by_key(key) }
        }

        impl<K, T: Store<K> + ?Sized> Store<K> for $ptr {
            fn list(&self) -> Vec<Arc<K>> { (**self).list() }
            fn get(&self, obj: &K) -> Result<Option<Arc<K>>> { (**self).get(obj) }
            fn key_of(&self, obj: &K) -> Result<String> { (**self).key_of(obj) }
            fn upsert(&self, obj: Arc<K>) -> Result<Option<Arc<K>>> { (**self).upsert(obj) }
            fn upsert_with_key(&self, key: &str, obj: Arc<K>) -> Result<Option<Arc<K>>> {
                (**self).upsert_with_key(key, obj)
            }
            fn delete_by_key(&self, key: &str) -> Result<Option<Arc<K>>> {
                (**self).delete_by_key(key)
            }
            fn shares_objects(&self) -> bool { (**self).shares_objects() }
            fn len(&self) -> usize { (**self).len() }
            fn is_empty(&self) -> bool { (**self).is_empty() }
            fn last_sync_resource_version(&self) -> Option<String> {
                (**self).last_sync_resource_version()
            }
        }

        impl<K, T: Indexer<K> + ?Sized> Indexer<K> for $ptr {
            fn index(&self, index_name: &str, obj: &K) -> Result<Vec<Arc<K>>> {
                (**self).index(index_name, obj)
            }
            fn index_keys(&self, index_name: &str, indexed_value: &str) -> Result<Vec<String>> {
                (**self).index_keys(index_name, indexed_value)
            }
            fn list_index_func_values(&self, index_name: &str) -> Vec<String> {
                (**self).list_index_func_values(index_name)
            }
            fn by_index(&self, index_name: &str, indexed_value: &str) -> Result<Vec<Arc<K>>> {
                (**self).by_index(index_name, indexed_value)
            }
            fn add_indexers(&self, indexers: Indexers<K>) -> Result<()> {
                (**self).add_indexers(indexers)
            }
            fn get_indexers(&self) -> Indexers<K> { (**self).get_indexers() }
        }
    )*};
}

forward_through!(Arc<T>, &T);
