//! The index maintenance of a [`ThreadSafeStore`](super::ThreadSafeStore): each index with its
//! function, and what a write computes with them (an object's values, an index built anew).

use std::sync::Arc;

use super::items::Items;
use crate::error::{BoxError, Error, Result};
use crate::index::{IndexFunc, IndexValues};
use crate::panic::catch_panic;
use crate::value_index::ValueIndex;

/// See [`Inner::funcs`](super::Inner::funcs).
pub(super) type IndexFuncs<K> = Arc<[(String, IndexFunc<K>)]>;

/// One index: its name, its function, and what it holds.
pub(super) struct Index<K> {
    pub(super) name: String,
    pub(super) func: IndexFunc<K>,
    pub(super) values: ValueIndex,
}

/// What `func` (the index `name`) yields for `obj`, filed under `key`; a failure or a panic is an
/// [`Error::IndexFunc`].
pub(super) fn call_index_func<'a, K>(
    name: &str,
    func: &IndexFunc<K>,
    key: &str,
    obj: &'a K,
) -> Result<IndexValues<'a>> {
    let values =
        catch_panic(|| func(obj)).unwrap_or_else(|panicked| Err(Box::new(panicked) as BoxError));
    values.map_err(|source| Error::IndexFunc {
        index: name.to_owned(),
        key: key.to_owned(),
        source,
    })
}

fn index_values<'a, K>(index: &Index<K>, key: &str, obj: &'a K) -> Result<IndexValues<'a>> {
    call_index_func(&index.name, &index.func, key, obj)
}

/// The names and functions of `indexes`, in order.
pub(super) fn funcs_of<K>(indexes: &[Index<K>]) -> IndexFuncs<K> {
    indexes
        .iter()
        .map(|i| (i.name.clone(), Arc::clone(&i.func)))
        .collect()
}

impl<K> Index<K> {
    /// Builds this index's values for `items` from scratch.
    pub(super) fn build(name: &str, func: &IndexFunc<K>, items: &Items<K>) -> Result<Self> {
        let mut index = Index {
            name: name.to_owned(),
            func: Arc::clone(func),
            values: ValueIndex::default(),
        };
        for (id, slot) in items.iter() {
            let values = index_values(&index, &slot.key, &*slot.obj)?;
            index.values.set(id, values);
        }
        Ok(index)
    }
}
