//! [`SharedInformerFactory`]: one shared informer per resource type and selection, started,
//! synced and stopped together (client-go's `SharedInformerFactory`).
//!
//! ```text
//! ListerWatcherSource ──lister_watcher(selection)──▶ SharedIndexInformer ◀── informer::<R>()
//!     (e.g. a kube::Client)                            one per (R, selection, transform)   (every caller)
//! ```
//!
//! A program usually needs several informers, and several parts of it want the same one: the
//! factory makes sure each resource is listed and watched once. It depends on no API client:
//! it asks a [`ListerWatcherSource`] for a lister-watcher and an identity (key, resource
//! version, default indexes) per resource. `informer-kube` provides the source and a
//! `KubeInformerFactory` for a `kube::Client`.
//!
//! * [`SharedInformerFactory::informer`] / [`informer_with`](SharedInformerFactory::informer_with)
//!   hand back the shared informer for a resource (with [`InformerOptions`], which informer:
//!   namespace, selectors, a named transform, a named cache);
//! * how informers run is set once: for all with the factory's `with_*` defaults, per type
//!   with [`configure`](SharedInformerFactory::configure) on the informer's builder;
//! * [`informer_for(&resource)`](SharedInformerFactory::informer_for) does the same for a
//!   resource named at run time by a value (a custom resource found by discovery), over a
//!   [`DynamicListerWatcherSource`]: one informer per resource value and selection;
//! * [`start`](SharedInformerFactory::start) (idempotent),
//!   [`wait_for_cache_sync`](SharedInformerFactory::wait_for_cache_sync) (with or without a
//!   timeout, returning a [`CacheSyncReport`]) and
//!   [`shutdown`](SharedInformerFactory::shutdown) (stops every informer, waits until none
//!   of their code runs);
//! * [`remove::<R>(options)`](SharedInformerFactory::remove) (and
//!   [`remove_for`](SharedInformerFactory::remove_for) for a resource named at run time,
//!   [`remove_informer`](SharedInformerFactory::remove_informer) by handle) stops one
//!   informer of a running factory and lets it go: its consumers are stopped (a
//!   registration's `stopped()` resolves, a subscription's stream ends), its stats, health
//!   and metrics series leave with it, and the next request creates a new one, synced anew;
//!   the other informers are untouched;
//! * a resource the server does not serve (a custom resource whose CRD is not installed, or
//!   was deleted) is a state, not a failure: its informer reports it
//!   ([`InformerStatus::availability`], `Problem::NotServed` in its health), starts as soon as
//!   the resource is served, and when it goes away empties its cache and waits, or stops
//!   ([`with_stop_when_not_served`](SharedInformerFactory::with_stop_when_not_served));
//!   [`wait_for_cache_sync_served`](SharedInformerFactory::wait_for_cache_sync_served) waits
//!   for the informers whose resource is served and says which are not;
//! * [`lister`](SharedInformerFactory::lister): the informer's read handle
//!   ([`Lister`](informer_store::Lister)), `lister.namespace("ns").get("name")`,
//!   `lister.list(&selector)`.
//!
//! # Example
//!
//! A source serving one resource from a scripted fake server; with Kubernetes, use
//! `informer_kube::KubeInformerFactory` instead.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use informer::{HandlerOptions, ResourceEventHandlerFuncs};
//! use informer_factory::{ListerWatcherSource, Selection, SharedInformerFactory};
//! use informer_store::Everything;
//! use informer_reflector::{FakeListerWatcher, ListPage};
//! use informer_store::{FnIdentity, SharedIdentity};
//!
//! struct Names;
//! impl ListerWatcherSource<String> for Names {
//!     type Object = String;
//!     type ListerWatcher = FakeListerWatcher<String>;
//!     fn lister_watcher(&self, _: &Selection) -> FakeListerWatcher<String> {
//!         let fake = FakeListerWatcher::new();
//!         fake.push_list(ListPage::new(vec![Arc::new("web-0".to_owned())], "7"));
//!         fake
//!     }
//!     fn identity(&self) -> SharedIdentity<String> {
//!         Arc::new(FnIdentity::new(informer_store::key_func(|s: &String| Ok(s.clone()))))
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let factory = SharedInformerFactory::new(Names);
//! let informer = factory.informer::<String>();
//! assert!(Arc::ptr_eq(&informer, &factory.informer::<String>())); // one, shared
//! informer.add_event_handler(ResourceEventHandlerFuncs::new().with_add(|_key, name: &Arc<String>, _| {
//!     println!("added {name}");
//! }), HandlerOptions::new())?;
//!
//! factory.start()?;
//! let report = factory.wait_for_cache_sync(Some(Duration::from_secs(10))).await;
//! assert!(report.all_synced(), "{report}");
//! let lister = factory.lister::<String>();
//! assert_eq!(lister.get("web-0").as_deref().map(String::as_str), Some("web-0"));
//! assert_eq!(lister.list(&Everything).len(), 1);
//!
//! factory.shutdown().await?; // every informer stopped, none of their code running
//! assert!(informer.is_stopped());
//! # Ok(()) }
//! ```

mod entry;
mod error;
mod factory;
mod options;
mod remove;
mod source;
mod state;
mod stats;
mod sync_report;
mod wait;

pub use crate::error::FactoryError;
pub use crate::factory::{FactoryInformer, SharedInformerFactory};
pub use crate::options::{CacheBuilder, InformerOptions};
pub use crate::source::{DynamicListerWatcherSource, ListerWatcherSource, Selection};
pub use crate::stats::{FactoryHealth, FactoryStats};
pub use crate::sync_report::{CacheSyncReport, InformerStatus};

#[cfg(test)]
mod send_sync {
    use super::*;

    const fn assert_send_sync<T: Send + Sync>() {}
    const _: () = assert_send_sync::<SharedInformerFactory<()>>();
    const _: () = assert_send_sync::<InformerOptions<String>>();
    const _: () = assert_send_sync::<CacheSyncReport>();
    const _: () = assert_send_sync::<FactoryError>();
}
