//! [`MapCache`]: a second, deliberately simple `Indexer`, so that the layers above can be run
//! on a cache that is not `ThreadSafeStore`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use informer_store::{
    Error, IndexValues, Indexer, Indexers, KeyFunc, KnownObjects, ReflectorStore, Result, Store,
    call_key_func, catch_panic,
};
use parking_lot::Mutex;

/// A cache that is a `BTreeMap` behind a mutex, with no index structure at all: every index
/// lookup recomputes the index functions over every object. Slow and obviously right — the
/// point is to be a different implementation of the same traits.
///
/// Writes check every index function first, so a refused write changes nothing (the
/// [`Store`] contract).
pub struct MapCache<K> {
    key_func: KeyFunc<K>,
    inner: Mutex<Inner<K>>,
}

struct Inner<K> {
    objects: BTreeMap<String, Arc<K>>,
    indexers: Indexers<K>,
    resource_version: Option<String>,
}

impl<K> fmt::Debug for MapCache<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MapCache")
            .field("objects", &self.inner.lock().objects.len())
            .finish()
    }
}

impl<K> MapCache<K> {
    /// An empty cache keyed by `key_func`, with `indexers`.
    pub fn new(key_func: KeyFunc<K>, indexers: Indexers<K>) -> Self {
        Self {
            key_func,
            inner: Mutex::new(Inner {
                objects: BTreeMap::new(),
                indexers,
                resource_version: None,
            }),
        }
    }
}

/// The values of every index for `obj`, or the first index function's failure.
fn check_indexes<K>(indexers: &Indexers<K>, key: &str, obj: &K) -> Result<()> {
    for (name, func) in indexers {
        let values = catch_panic(|| func(obj).map(|v| v.iter().count()))
            .unwrap_or_else(|p| Err(Box::new(p)));
        if let Err(source) = values {
            return Err(Error::IndexFunc {
                index: name.clone(),
                key: key.to_owned(),
                source,
            });
        }
    }
    Ok(())
}

fn values_of<K>(indexers: &Indexers<K>, name: &str, obj: &K) -> Result<BTreeSet<String>> {
    let func = indexers
        .get(name)
        .ok_or_else(|| Error::UnknownIndex(name.to_owned()))?;
    let values: IndexValues<'_> = func(obj).map_err(|source| Error::IndexFunc {
        index: name.to_owned(),
        key: String::new(),
        source,
    })?;
    Ok(values.iter().map(str::to_owned).collect())
}

impl<K: Send + Sync + 'static> MapCache<K> {
    fn key(&self, obj: &K) -> Result<String> {
        Ok(call_key_func(&self.key_func, obj)?)
    }

    fn put(&self, key: String, obj: Arc<K>) -> Result<Option<Arc<K>>> {
        let mut inner = self.inner.lock();
        check_indexes(&inner.indexers, &key, &obj)?;
        Ok(inner.objects.insert(key, obj))
    }
}

impl<K: Send + Sync + 'static> ReflectorStore<K> for MapCache<K> {
    type Error = Error;

    fn add(&self, obj: Arc<K>) -> Result<()> {
        let key = self.key(&obj)?;
        self.put(key, obj).map(drop)
    }

    fn update(&self, obj: Arc<K>) -> Result<()> {
        self.add(obj)
    }

    fn delete(&self, obj: Arc<K>) -> Result<()> {
        let key = self.key(&obj)?;
        self.inner.lock().objects.remove(&key);
        Ok(())
    }

    fn replace(&self, list: Vec<Arc<K>>, resource_version: String) -> Result<()> {
        let mut objects = BTreeMap::new();
        let mut inner = self.inner.lock();
        for obj in list {
            let key = self.key(&obj)?;
            check_indexes(&inner.indexers, &key, &obj)?;
            objects.insert(key, obj);
        }
        inner.objects = objects;
        inner.resource_version = Some(resource_version);
        Ok(())
    }

    fn resync(&self) -> Result<()> {
        Ok(())
    }

    fn bookmark(&self, resource_version: &str) -> Result<()> {
        self.inner.lock().resource_version = Some(resource_version.to_owned());
        Ok(())
    }
}

impl<K: Send + Sync + 'static> KnownObjects<K> for MapCache<K> {
    fn list_keys(&self) -> Vec<String> {
        self.inner.lock().objects.keys().cloned().collect()
    }

    fn get_by_key(&self, key: &str) -> Option<Arc<K>> {
        self.inner.lock().objects.get(key).cloned()
    }
}

impl<K: Send + Sync + 'static> Store<K> for MapCache<K> {
    fn list(&self) -> Vec<Arc<K>> {
        self.inner.lock().objects.values().cloned().collect()
    }

    fn get(&self, obj: &K) -> Result<Option<Arc<K>>> {
        let key = self.key(obj)?;
        Ok(self.get_by_key(&key))
    }

    fn key_of(&self, obj: &K) -> Result<String> {
        self.key(obj)
    }

    fn upsert(&self, obj: Arc<K>) -> Result<Option<Arc<K>>> {
        let key = self.key(&obj)?;
        self.put(key, obj)
    }

    fn upsert_with_key(&self, key: &str, obj: Arc<K>) -> Result<Option<Arc<K>>> {
        self.put(key.to_owned(), obj)
    }

    fn delete_by_key(&self, key: &str) -> Result<Option<Arc<K>>> {
        Ok(self.inner.lock().objects.remove(key))
    }

    fn len(&self) -> usize {
        self.inner.lock().objects.len()
    }

    fn last_sync_resource_version(&self) -> Option<String> {
        self.inner.lock().resource_version.clone()
    }
}

impl<K: Send + Sync + 'static> Indexer<K> for MapCache<K> {
    fn index(&self, index_name: &str, obj: &K) -> Result<Vec<Arc<K>>> {
        let inner = self.inner.lock();
        let wanted = values_of(&inner.indexers, index_name, obj)?;
        let mut out = Vec::new();
        for o in inner.objects.values() {
            let values = values_of(&inner.indexers, index_name, o)?;
            if !values.is_disjoint(&wanted) {
                out.push(Arc::clone(o));
            }
        }
        Ok(out)
    }

    fn index_keys(&self, index_name: &str, indexed_value: &str) -> Result<Vec<String>> {
        let inner = self.inner.lock();
        let mut keys = Vec::new();
        for (key, o) in &inner.objects {
            if values_of(&inner.indexers, index_name, o)?.contains(indexed_value) {
                keys.push(key.clone());
            }
        }
        // Already sorted: the map is ordered by key.
        Ok(keys)
    }

    fn list_index_func_values(&self, index_name: &str) -> Vec<String> {
        let inner = self.inner.lock();
        let mut values = BTreeSet::new();
        for o in inner.objects.values() {
            if let Ok(v) = values_of(&inner.indexers, index_name, o) {
                values.extend(v);
            }
        }
        values.into_iter().collect()
    }

    fn by_index(&self, index_name: &str, indexed_value: &str) -> Result<Vec<Arc<K>>> {
        let keys = self.index_keys(index_name, indexed_value)?;
        let inner = self.inner.lock();
        Ok(keys
            .iter()
            .filter_map(|k| inner.objects.get(k).cloned())
            .collect())
    }

    fn add_indexers(&self, indexers: Indexers<K>) -> Result<()> {
        let mut inner = self.inner.lock();
        let conflicts: Vec<String> = indexers
            .keys()
            .filter(|name| inner.indexers.contains_key(*name))
            .cloned()
            .collect();
        if !conflicts.is_empty() {
            return Err(Error::IndexerConflict(conflicts));
        }
        for (key, obj) in &inner.objects {
            check_indexes(&indexers, key, obj)?;
        }
        inner.indexers.extend(indexers);
        Ok(())
    }

    fn get_indexers(&self) -> Indexers<K> {
        self.inner.lock().indexers.clone()
    }
}
