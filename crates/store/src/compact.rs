//! [`CompactStore`]: an [`Indexer`] that keeps its objects encoded, for caches that must be
//! small more than fast to read.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};

use crate::error::{BoxError, Error, Result};
use crate::index::{IndexValues, Indexers, index_func};
use crate::key::KeyFunc;
use crate::parts::ReplaceParts;
use crate::store::{Indexer, KnownObjects, ReflectorStore, Store};
use crate::thread_safe::ThreadSafeStore;

/// How a [`CompactStore`] keeps an object at rest: bytes in, the object back out.
///
/// [`decode`](Self::decode) reads back what [`encode`](Self::encode) wrote, so two objects
/// that encode to the same bytes are taken as equal (the store does not decode the old version
/// of an object written again unchanged).
pub trait Codec<K>: Send + Sync + 'static {
    /// The object's bytes.
    fn encode(&self, object: &K) -> Result<Vec<u8>, BoxError>;
    /// The object of `bytes` written by [`encode`](Self::encode).
    fn decode(&self, bytes: &[u8]) -> Result<K, BoxError>;
}

/// One object at rest: its key, its encoded bytes, and its index values, computed when it was
/// written (so that writes and index lookups never decode).
struct Packed<K> {
    key: Box<str>,
    bytes: Box<[u8]>,
    /// Values per index, in the order of [`CompactStore::names`] when packed.
    values: Box<[Box<[Box<str>]>]>,
    object: PhantomData<fn() -> K>,
}

/// A cache that holds every object encoded by a [`Codec`] (e.g. compact JSON without managed
/// fields: a realistic pod in about 9 KB instead of about 50 KB decoded), and decodes on read.
/// The objects written or read last are kept decoded too (up to `hot` of them, first in first
/// out), so that the reads that follow a change (a reconcile reading what it was told of) cost
/// nothing.
///
/// Costs, against [`ThreadSafeStore`]: every write encodes the object (and, through the
/// informer's `upsert`, decodes the object it replaces unless that one is hot or encodes to the
/// same bytes, an object relisted unchanged); every read of
/// an object that is not hot decodes it (tens of microseconds for a realistic pod), so `list`
/// and `by_index` of many objects cost a decode each. Keys, index values and index lookups by
/// key cost the same as in [`ThreadSafeStore`], which holds the encoded objects underneath.
pub struct CompactStore<K> {
    inner: ThreadSafeStore<Packed<K>>,
    key_func: KeyFunc<K>,
    /// The index functions on decoded objects, and their names in packing order.
    indexers: RwLock<(Indexers<K>, Vec<String>)>,
    codec: Arc<dyn Codec<K>>,
    hot: Mutex<Hot<K>>,
    /// Packed pages of a relist in progress.
    parts: Mutex<Vec<Arc<Packed<K>>>>,
    undecodable: AtomicU64,
}

/// A packed object and the object decoded from it.
type HotEntry<K> = (Arc<Packed<K>>, Arc<K>);

/// The objects kept decoded: by key, the packed object they were decoded from.
struct Hot<K> {
    capacity: usize,
    by_key: HashMap<Box<str>, HotEntry<K>>,
    order: VecDeque<Box<str>>,
}

impl<K> Hot<K> {
    fn get(&self, packed: &Arc<Packed<K>>) -> Option<Arc<K>> {
        let (p, object) = self.by_key.get(&packed.key)?;
        Arc::ptr_eq(p, packed).then(|| Arc::clone(object))
    }

    fn put(&mut self, packed: Arc<Packed<K>>, object: Arc<K>) {
        if self.capacity == 0 {
            return;
        }
        let key = packed.key.clone();
        if self.by_key.insert(key.clone(), (packed, object)).is_none() {
            self.order.push_back(key);
        }
        while self.by_key.len() > self.capacity {
            match self.order.pop_front() {
                Some(old) => {
                    self.by_key.remove(&old);
                }
                None => break,
            }
        }
    }
}

impl<K: Send + Sync + 'static> fmt::Debug for CompactStore<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompactStore")
            .field("len", &self.inner.len())
            .field("hot", &self.hot.lock().by_key.len())
            .finish_non_exhaustive()
    }
}

impl<K: Send + Sync + 'static> CompactStore<K> {
    /// A compact store keyed by `key_func`, indexed by `indexers`, its objects encoded by
    /// `codec`, the last `hot` written or read kept decoded.
    pub fn new(
        key_func: KeyFunc<K>,
        indexers: Indexers<K>,
        codec: Arc<dyn Codec<K>>,
        hot: usize,
    ) -> Self {
        let store = Self {
            inner: ThreadSafeStore::new(Arc::new(|p: &Packed<K>| Ok(p.key.to_string()))),
            key_func,
            indexers: RwLock::new((Indexers::new(), Vec::new())),
            codec,
            hot: Mutex::new(Hot {
                capacity: hot,
                by_key: HashMap::new(),
                order: VecDeque::new(),
            }),
            parts: Mutex::new(Vec::new()),
            undecodable: AtomicU64::new(0),
        };
        // A new store has no objects and no indexers: this cannot conflict.
        let _ = store.add_indexers(indexers);
        store
    }

    fn pack(&self, object: &Arc<K>) -> Result<Arc<Packed<K>>> {
        let key = (self.key_func)(object)?;
        let bytes = self
            .codec
            .encode(object)
            .map_err(|source| codec_error(&key, source))?;
        let indexers = self.indexers.read();
        let mut values = Vec::with_capacity(indexers.1.len());
        for name in &indexers.1 {
            let f = &indexers.0[name];
            let of = f(object).map_err(|source| Error::IndexFunc {
                index: name.clone(),
                key: key.clone(),
                source,
            })?;
            values.push(of.iter().map(Box::from).collect());
        }
        let packed = Arc::new(Packed {
            key: key.into(),
            bytes: bytes.into(),
            values: values.into(),
            object: PhantomData,
        });
        self.hot.lock().put(Arc::clone(&packed), Arc::clone(object));
        Ok(packed)
    }

    fn unpack(&self, packed: Arc<Packed<K>>) -> Result<Arc<K>> {
        if let Some(object) = self.hot.lock().get(&packed) {
            return Ok(object);
        }
        let object = self
            .codec
            .decode(&packed.bytes)
            .map_err(|source| codec_error(&packed.key, source))?;
        let object = Arc::new(object);
        self.hot.lock().put(packed, Arc::clone(&object));
        Ok(object)
    }

    /// Objects left out of a read because they did not decode (a codec that cannot read what
    /// it wrote: a bug of the codec); always 0 with a sound codec.
    pub fn undecodable(&self) -> u64 {
        self.undecodable.load(Ordering::Relaxed)
    }

    /// Decodes every object; one that does not decode is left out, counted
    /// ([`undecodable`](Self::undecodable)) and logged.
    fn unpack_all(&self, packed: Vec<Arc<Packed<K>>>) -> Vec<Arc<K>> {
        packed
            .into_iter()
            .filter_map(|p| match self.unpack(p) {
                Ok(object) => Some(object),
                Err(e) => {
                    self.undecodable.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, "a cached object does not decode: its codec cannot read what it wrote");
                    None
                }
            })
            .collect()
    }
}

fn codec_error(key: &str, source: BoxError) -> Error {
    Error::Codec {
        key: key.to_owned(),
        source,
    }
}

impl<K: Send + Sync + 'static> ReflectorStore<K> for CompactStore<K> {
    type Error = Error;

    fn add(&self, obj: Arc<K>) -> Result<()> {
        self.inner.add(self.pack(&obj)?)
    }

    fn update(&self, obj: Arc<K>) -> Result<()> {
        self.inner.update(self.pack(&obj)?)
    }

    fn delete(&self, obj: Arc<K>) -> Result<()> {
        let key = (self.key_func)(&obj)?;
        self.inner.delete_by_key(&key).map(drop)
    }

    fn replace(&self, list: Vec<Arc<K>>, resource_version: String) -> Result<()> {
        let packed = list
            .iter()
            .map(|o| self.pack(o))
            .collect::<Result<Vec<_>>>()?;
        drop(list);
        self.inner.replace(packed, resource_version)
    }

    /// Packs each page as it comes, so that a relist holds the new list encoded, not decoded.
    fn replace_part(&self, part: Vec<Arc<K>>, parts: &mut ReplaceParts<K>) -> Result<()> {
        let mut packed = Vec::with_capacity(part.len());
        for object in &part {
            packed.push(self.pack(object)?);
        }
        self.parts.lock().extend(packed);
        parts.hold(Vec::new());
        Ok(())
    }

    fn replace_parts_done(&self, parts: ReplaceParts<K>, resource_version: String) -> Result<()> {
        let mut parts = parts;
        let mut packed = std::mem::take(&mut *self.parts.lock());
        for object in parts.take_held() {
            packed.push(self.pack(&object)?);
        }
        self.inner.replace(packed, resource_version)
    }

    fn resync(&self) -> Result<()> {
        Ok(())
    }

    fn bookmark(&self, resource_version: &str) -> Result<()> {
        self.inner.bookmark(resource_version)
    }
}

impl<K: Send + Sync + 'static> KnownObjects<K> for CompactStore<K> {
    fn list_keys(&self) -> Vec<String> {
        self.inner.list_keys()
    }

    fn get_by_key(&self, key: &str) -> Option<Arc<K>> {
        let packed = self.inner.get_by_key(key)?;
        self.unpack(packed).ok()
    }
}

impl<K: Send + Sync + 'static> Store<K> for CompactStore<K> {
    fn list(&self) -> Vec<Arc<K>> {
        self.unpack_all(self.inner.list())
    }

    fn get(&self, obj: &K) -> Result<Option<Arc<K>>> {
        let key = (self.key_func)(obj)?;
        self.inner
            .get_by_key(&key)
            .map(|p| self.unpack(p))
            .transpose()
    }

    fn key_of(&self, obj: &K) -> Result<String> {
        Ok((self.key_func)(obj)?)
    }

    /// The object replaced is decoded (unless it is kept decoded), but not when its bytes are
    /// the new object's: an object relisted unchanged, the most common write of a relist, is
    /// handed back as its own old version (equal bytes are an equal object, since the codec
    /// reads back what it writes).
    fn upsert(&self, obj: Arc<K>) -> Result<Option<Arc<K>>> {
        let packed = self.pack(&obj)?;
        match self.inner.upsert(Arc::clone(&packed))? {
            Some(old) if old.bytes == packed.bytes => Ok(Some(obj)),
            Some(old) => self.unpack(old).map(Some),
            None => Ok(None),
        }
    }

    /// `false`: its objects are kept encoded, and every read not kept decoded decodes one.
    fn shares_objects(&self) -> bool {
        false
    }

    fn delete_by_key(&self, key: &str) -> Result<Option<Arc<K>>> {
        self.inner
            .delete_by_key(key)?
            .map(|old| self.unpack(old))
            .transpose()
    }

    fn len(&self) -> usize {
        self.inner.len()
    }

    fn last_sync_resource_version(&self) -> Option<String> {
        self.inner.last_sync_resource_version()
    }
}

impl<K: Send + Sync + 'static> Indexer<K> for CompactStore<K> {
    fn index(&self, index_name: &str, obj: &K) -> Result<Vec<Arc<K>>> {
        let f = {
            let indexers = self.indexers.read();
            indexers
                .0
                .get(index_name)
                .cloned()
                .ok_or_else(|| Error::UnknownIndex(index_name.to_owned()))?
        };
        let key = (self.key_func)(obj)?;
        let values = f(obj).map_err(|source| Error::IndexFunc {
            index: index_name.to_owned(),
            key,
            source,
        })?;
        let mut keys: Vec<String> = Vec::new();
        for value in values.iter() {
            keys.extend(self.inner.index_keys(index_name, value)?);
        }
        keys.sort_unstable();
        keys.dedup();
        Ok(keys.iter().filter_map(|k| self.get_by_key(k)).collect())
    }

    fn index_keys(&self, index_name: &str, indexed_value: &str) -> Result<Vec<String>> {
        self.inner.index_keys(index_name, indexed_value)
    }

    fn list_index_func_values(&self, index_name: &str) -> Vec<String> {
        self.inner.list_index_func_values(index_name)
    }

    fn by_index(&self, index_name: &str, indexed_value: &str) -> Result<Vec<Arc<K>>> {
        Ok(self.unpack_all(self.inner.by_index(index_name, indexed_value)?))
    }

    /// Adds index functions. The objects already stored are decoded once each to index them.
    fn add_indexers(&self, indexers: Indexers<K>) -> Result<()> {
        let mut own = self.indexers.write();
        let conflicts: Vec<String> = indexers
            .keys()
            .filter(|name| own.0.contains_key(*name))
            .cloned()
            .collect();
        if !conflicts.is_empty() {
            return Err(Error::IndexerConflict(conflicts));
        }
        let mut packed_indexers = Indexers::new();
        for (i, (name, f)) in indexers.iter().enumerate() {
            let position = own.1.len() + i;
            let (f, codec) = (Arc::clone(f), Arc::clone(&self.codec));
            packed_indexers.insert(
                name.clone(),
                index_func(move |p: &Packed<K>| match p.values.get(position) {
                    Some(values) => Ok(values.iter().map(|v| &**v).collect()),
                    // Packed before this index existed: decoded once to index it.
                    None => {
                        let object = codec.decode(&p.bytes)?;
                        let values: Vec<String> = f(&object)?.iter().map(str::to_owned).collect();
                        Ok(IndexValues::from(values))
                    }
                }),
            );
        }
        self.inner.add_indexers(packed_indexers)?;
        own.1.extend(indexers.keys().cloned());
        own.0.extend(indexers);
        Ok(())
    }

    fn get_indexers(&self) -> Indexers<K> {
        self.indexers.read().0.clone()
    }
}
