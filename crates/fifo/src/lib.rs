//! The queue layer of the informers stack: the changes between a reflector and a controller.
//!
//! In the pipeline
//!
//! ```text
//! Reflector ──add/update/delete/replace/resync──▶ Queue (this crate) ──pop──▶ Controller ──▶ Indexer
//!                                                   ▲                                          │
//!                                                   └──────────── KnownObjects ◀───────────────┘
//! ```
//!
//! the reflector writes what the API server reports, and the controller pops it and applies it to
//! the cache (an `informer_store::Indexer`), which the queue reads back as its
//! [`KnownObjects`](informer_store::KnownObjects) to report deletions a relist reveals.
//!
//! * [`Queue`]: the contract the controller depends on. Its writes are the store layer's
//!   [`ReflectorStore`](informer_store::ReflectorStore), so a reflector feeds a queue or a plain
//!   store alike; it adds a blocking [`pop`](Queue::pop) (and [`pop_batch`](Queue::pop_batch)),
//!   a non-blocking [`try_pop_batch`](Queue::try_pop_batch) with a [`ReadyHook`] for consumers
//!   on a thread pool, [`has_synced`](Queue::has_synced) and [`close`](Queue::close). A pop hands
//!   its changes to `process` with the queue's lock released: the reflector's writes never wait
//!   on the consumer.
//! * [`DeltaFifo`]: client-go's DeltaFIFO. One queue entry per key, holding every change not yet
//!   popped ([`Deltas`]): the consumer sees each object's history in one go, in key arrival order.
//! * [`InOrderFifo`]: every change kept and delivered in arrival order (client-go's RealFIFO).
//!   In its atomic mode (the informer's default queue) a relist is one [`ReplacedAll`] change
//!   and a resync one [`Delta::SyncAll`], which the consumer applies to its cache in one step.
//! * [`Delta`], [`DeltaType`], [`Deltas`]; a relist-discovered deletion carries a
//!   [`DeletedFinalStateUnknown`] tombstone inside a [`DeletedObject`].
//!
//! Objects travel as `Arc<K>`; nothing here copies an object.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use informer_fifo::{Delta, DeltaFifo, DeltaFifoOptions, DeltaType, Queue, QueueExt};
//! use informer_store::{key_func, ReflectorStore, Store, ThreadSafeStore};
//!
//! #[derive(Debug, PartialEq)]
//! struct Pod { name: String, version: u32 }
//! let pod = |name: &str, version| Arc::new(Pod { name: name.into(), version });
//! let key = key_func(|p: &Pod| Ok(p.name.clone()));
//!
//! // The cache the consumer fills, which the queue reads back.
//! let cache = Arc::new(ThreadSafeStore::new(key.clone()));
//! let fifo = DeltaFifo::with_options(key, DeltaFifoOptions::default().known_objects(cache.clone()));
//!
//! // What a consumer does with each popped key: apply its newest state to the cache.
//! let apply = |deltas: informer_fifo::Deltas<Pod>, _initial: bool| match deltas.newest() {
//!     Delta::Deleted(deleted) => {
//!         let key = deleted.object().map(|p| p.name.clone())
//!             .or_else(|| deleted.tombstone().map(|t| t.key.clone()));
//!         cache.delete_by_key(&key.unwrap()).unwrap();
//!     }
//!     other => cache.update(other.object().unwrap().clone()).unwrap(),
//! };
//!
//! // The first relist: two pods. The queue has not synced until both are popped.
//! fifo.replace(vec![pod("a", 1), pod("b", 1)], "10".into()).unwrap();
//! assert!(!fifo.has_synced());
//! while !fifo.is_empty() {
//!     fifo.pop_with(&apply).unwrap();
//! }
//! assert!(fifo.has_synced());
//!
//! // A relist without "b": the queue reports b's deletion with the cache's last state.
//! fifo.replace(vec![pod("a", 2)], "20".into()).unwrap();
//! fifo.pop_with(|d, _| assert_eq!(d.newest().delta_type(), DeltaType::Replaced)).unwrap();
//! fifo.pop_with(|d, _| {
//!     let tombstone = d.newest().is_tombstone();
//!     assert!(tombstone);
//!     assert_eq!(d.newest().object().unwrap().version, 1);
//! }).unwrap();
//! ```

mod delta;
mod delta_fifo;
mod error;
mod in_order;
mod intake;
mod keyed;
mod queue;
mod replaced_all;
mod shared;
mod sync;
mod tombstone;

pub use crate::delta::{Delta, DeltaType, Deltas, EmptyDeltas};
pub use crate::delta_fifo::{DeltaFifo, DeltaFifoOptions};
pub use crate::error::{Error, Result};
pub use crate::in_order::{InOrderFifo, InOrderFifoOptions};
pub use crate::queue::{
    Queue, QueueClosed, QueueCounts, QueueExt, ReadyHook, RefusalHandler, TransformFunc,
    transform_func,
};
pub use crate::replaced_all::{ReplacedAll, sync_all_changes};
pub use crate::tombstone::{DeletedFinalStateUnknown, DeletedObject};

#[cfg(test)]
mod send_sync {
    use super::*;

    const fn assert_send_sync<T: Send + Sync>() {}
    const _: () = assert_send_sync::<DeltaFifo<String>>();
    const _: () = assert_send_sync::<InOrderFifo<String>>();
    const _: () = assert_send_sync::<std::sync::Arc<dyn Queue<String>>>();
    const _: () = assert_send_sync::<Deltas<String>>();
    const _: () = assert_send_sync::<QueueClosed>();
}
