//! The layer users touch: event handlers, the processor that feeds them, the loop that runs a reflector into a queue, and
//! [`SharedIndexInformer`].
//!
//! ```text
//! ListerWatcher ─▶ Reflector ─▶ Queue ─pop─▶ process_deltas ─▶ Indexer (cache)
//!   (tokio task)                  (job on the DeliveryPool)  └─▶ Processor ─▶ consumer 1..N
//!                                                      (a bounded buffer each: handler jobs,
//!                                                       async handler tasks, Subscription streams)
//! ```
//!
//! A [`SharedIndexInformer`] lists and watches one resource through any
//! [`ListerWatcher`](informer_reflector::ListerWatcher), keeps an indexed cache of it, and
//! delivers every change, with the object's key, to every consumer — after the cache has been
//! updated, in order: a synchronous [`ResourceEventHandler`] (run on the shared
//! [`DeliveryPool`], a few threads for every informer), an [`AsyncResourceEventHandler`] (a
//! tokio task) or a [`Subscription`] (a `futures::Stream`, from
//! [`subscribe`](SharedIndexInformer::subscribe)). Each consumer has a bounded buffer: one that
//! falls behind receives one notification per changed key until it catches up, and delays no
//! one else.
//!
//! It fails loud and never stalls: a key, index, transform or resource-version function that
//! fails or panics refuses one object (counted in
//! [`refused_deltas`](SharedIndexInformer::refused_deltas), logged with the informer's name and
//! the key) and the informer goes on; a refused version never stays in the cache as if current.
//! Readiness is awaited ([`wait_for_sync`](SharedIndexInformer::wait_for_sync),
//! [`HandlerRegistration::wait_for_sync`]), woken by the change itself. Dropping the `run`
//! future stops everything it started.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use informer::{HandlerOptions, ResourceEventHandlerFuncs, SharedIndexInformer};
//! use informer_reflector::{FakeListerWatcher, ListPage};
//! use informer_store::{index_func, indexers, key_func, FnIdentity, IndexValues};
//! use tokio_util::sync::CancellationToken;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! // Objects are (name, colour) pairs here; with Kubernetes types, informer-kube's
//! // `KubeIdentity` keys them and reads their resource versions.
//! type Obj = (String, String);
//! let source = Arc::new(FakeListerWatcher::<Obj>::new());
//! source.push_list(ListPage::new(vec![Arc::new(("apple".into(), "red".into()))], "1"));
//!
//! // No resource versions here: every update is a real one.
//! let identity = FnIdentity::new(key_func(|o: &Obj| Ok(o.0.clone())))
//!     .with_indexers(indexers([("colour", index_func(|o: &Obj| Ok(IndexValues::one(o.1.as_str()))))]));
//! let informer = Arc::new(SharedIndexInformer::new(source.clone(), identity));
//! let registration = informer
//!     .add_event_handler(ResourceEventHandlerFuncs::new().with_add(|key, obj: &Arc<Obj>, initial| {
//!         println!("added {key}: {} (initial list: {initial})", obj.1);
//!     }), HandlerOptions::new())
//!     .unwrap();
//!
//! let stop = CancellationToken::new();
//! let running = tokio::spawn({
//!     let (informer, stop) = (informer.clone(), stop.clone());
//!     async move { informer.run(stop).await }
//! });
//! assert!(informer.wait_for_sync().await); // woken by the sync itself
//! assert_eq!(informer.lister().by_index("colour", "red").unwrap().len(), 1);
//! assert!(registration.wait_for_sync().await); // the handler has handled the first list
//! stop.cancel();
//! running.await.unwrap().unwrap();
//! # }
//! ```

mod apply;
mod buffer;
mod builder;
mod handler;
mod health;
mod informer;
mod informer_loop;
mod lag;
mod listener;
mod options;
mod pool;
mod processor;
mod registration;
mod run;
mod shards;
mod subscription;
mod version;

/// The attribute an [`AsyncResourceEventHandler`] implementation takes (re-exported from
/// `async-trait`, so no dependency of your own is needed).
pub use async_trait::async_trait;

pub use crate::builder::InformerBuilder;

pub use crate::handler::{
    AsyncResourceEventHandler, Event, FilteringResourceEventHandler, ResourceEventHandler,
    ResourceEventHandlerExt, ResourceEventHandlerFuncs,
};
pub use crate::health::{Health, HealthOptions, InformerStats, Problem, RefusalReason};
pub use crate::informer::{
    InformerError, InformerReflector, MINIMUM_RESYNC_PERIOD, QueueFactory, QueueKind,
    ReflectorConfig, SharedIndexInformer,
};
pub use crate::informer_loop::{InformerLoop, POP_BATCH, ProcessDeltas, process_deltas};
pub use crate::lag::{LAG_BUCKETS, LagHistogram};
pub use crate::options::{DEFAULT_BUFFER, EventFilter, HandlerOptions, PanicPolicy};
pub use crate::pool::{DeliveryPool, MAX_SPARES, SPARE_IDLE, STUCK_AFTER};
pub use crate::registration::HandlerRegistration;
pub use crate::subscription::Subscription;
pub use crate::version::{VersionWaitError, compare_versions};
pub use informer_reflector::{ServerFiltering, ShardBy, ShardField, ShardSelector};

#[cfg(test)]
mod send_sync {
    use super::*;

    const fn assert_send_sync<T: Send + Sync>() {}
    const _: () = assert_send_sync::<SharedIndexInformer<String>>();
    const _: () = assert_send_sync::<HandlerRegistration>();
    const _: () = assert_send_sync::<ResourceEventHandlerFuncs<String>>();
    const _: () = assert_send_sync::<InformerError>();
    const _: () = assert_send_sync::<Subscription<String>>();
}
