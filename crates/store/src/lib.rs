//! The store layer of the informers stack: a thread-safe cache of objects with secondary indexes.
//!
//! In the pipeline
//!
//! ```text
//! Reflector ──▶ Queue (DeltaFifo) ──▶ InformerLoop ──▶ Indexer (this crate) ──▶ listers
//! ```
//!
//! this crate is the cache at the end: the informer loop applies every change to an [`Indexer`],
//! and listers read it. It also defines the contracts the other layers build on:
//!
//! * [`ReflectorStore`]: the writes a reflector makes (`add`, `update`, `delete`, `replace`,
//!   `resync`, `bookmark`). Both a store and a queue accept them.
//! * [`KnownObjects`]: what a queue reads back from the cache (`list_keys`, `get_by_key`).
//! * [`Store`] and [`Indexer`]: the full cache, with named indexes.
//!
//! Objects are held as `Arc<K>` and never copied. Keys and index values come from functions the
//! caller supplies ([`KeyFunc`], [`IndexFunc`]); what identifies an object to every layer (its
//! key, its resource version, its default indexes) is one [`Identity`]. Nothing here knows
//! about Kubernetes types.
//! [`ThreadSafeStore`] is the implementation; [`Lister`] is a cheap read-only handle on it.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use informer_store::{index_func, indexers, key_func, meta_namespace_key, Everything, Indexer, IndexValues, Lister,
//!     ReflectorStore, Store, ThreadSafeStore, NAMESPACE_INDEX};
//!
//! #[derive(Debug)]
//! struct Pod { namespace: String, name: String, node: String }
//!
//! let store = Arc::new(ThreadSafeStore::with_indexers(
//!     key_func(|p: &Pod| meta_namespace_key(Some(&p.namespace), &p.name)),
//!     indexers([
//!         (NAMESPACE_INDEX, index_func(|p: &Pod| Ok(IndexValues::one(p.namespace.as_str())))),
//!         ("node", index_func(|p: &Pod| Ok(IndexValues::one(p.node.as_str())))),
//!     ]),
//! ));
//! let pod = |ns: &str, name: &str, node: &str| {
//!     Arc::new(Pod { namespace: ns.into(), name: name.into(), node: node.into() })
//! };
//! store.add(pod("default", "web-0", "node-a")).unwrap();
//! store.add(pod("default", "web-1", "node-b")).unwrap();
//! store.add(pod("kube-system", "dns", "node-a")).unwrap();
//!
//! // Secondary index lookups return shared objects; keys come back sorted.
//! assert_eq!(store.index_keys("node", "node-a").unwrap(), ["default/web-0", "kube-system/dns"]);
//!
//! // Moving a pod to another node moves it in the `node` index only.
//! store.update(pod("default", "web-1", "node-a")).unwrap();
//! assert_eq!(store.by_index("node", "node-a").unwrap().len(), 3);
//! assert!(store.by_index("node", "node-b").unwrap().is_empty());
//!
//! // A lister reads through the namespace index.
//! let lister = Lister::new(store.clone());
//! assert_eq!(lister.namespace("default").list(&Everything).len(), 2);
//! assert_eq!(lister.get("kube-system/dns").unwrap().node, "node-a");
//! ```

mod compact;
mod error;
mod identity;
mod index;
mod index_handle;
mod key;
mod lister;
mod panic;
mod parts;
mod store;
mod sync;
mod thread_safe;
mod value_index;

pub use crate::compact::{Codec, CompactStore};
pub use crate::error::{BoxError, Error, Result};
pub use crate::identity::{
    FnIdentity, Identity, ResourceVersionFunc, SharedIdentity, identity_key_func,
};
pub use crate::index::{IndexFunc, IndexValues, Indexers, NAMESPACE_INDEX, index_func, indexers};
pub use crate::index_handle::Index;
pub use crate::key::{
    KeyError, KeyFunc, ObjectName, call_key_func, key_func, meta_namespace_key,
    split_meta_namespace_key,
};
pub use crate::lister::{Everything, Lister, NamespaceLister, Selector};
pub use crate::panic::{Panicked, catch_panic, panic_message};
pub use crate::parts::ReplaceParts;
pub use crate::store::{Indexer, KnownObjects, ReflectorStore, Store};
pub use crate::thread_safe::ThreadSafeStore;

#[cfg(test)]
mod send_sync {
    use super::*;

    const fn assert_send_sync<T: Send + Sync>() {}
    const _: () = assert_send_sync::<ThreadSafeStore<String>>();
    const _: () = assert_send_sync::<Lister<String>>();
    const _: () = assert_send_sync::<std::sync::Arc<dyn Indexer<String>>>();
    const _: () = assert_send_sync::<Error>();
    const _: () = assert_send_sync::<KeyFunc<String>>();
    const _: () = assert_send_sync::<IndexFunc<String>>();
}
