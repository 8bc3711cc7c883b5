//! Kubernetes informers for Rust: client-go's `tools/cache` machinery — Reflector, DeltaFifo,
//! SharedIndexInformer, Indexer, SharedInformerFactory — typed, `Arc`-shared, tested hard.
//!
//! This crate is the front door: it re-exports every layer of the stack, each behind a
//! feature, and [`prelude`] gathers what a program usually needs.
//!
//! ```text
//!  API server ──list/watch──▶ Reflector ──▶ DeltaFifo ──▶ InformerLoop ──▶ Indexer (cache) ◀── listers
//!                          (ListerWatcher)                      │
//!                                                               └──▶ Processor ──▶ your handlers
//!  SharedInformerFactory: one SharedIndexInformer per resource type and selection.
//! ```
//!
//! | module | crate | feature | what it holds |
//! |---|---|---|---|
//! | [`store`] | `informer-store` | `store` | the cache: `Store`, `Indexer`, `ThreadSafeStore`, `Lister`, key and index functions |
//! | [`fifo`] | `informer-fifo` | `fifo` | the queue: `DeltaFifo`, `InOrderFifo`, deltas and tombstones |
//! | [`reflector`] | `informer-reflector` | `reflector` | `ListerWatcher` and the `Reflector` (list, watch, relist, backoff) |
//! | [`informer`] | `informer` | `informer` | `SharedIndexInformer`, event handlers, streams, the delivery pool |
//! | [`factory`] | `informer-factory` | `factory` | `SharedInformerFactory`, typed listers |
//! | [`kube`] | `informer-kube` | `kube` | the kube-client adapter and `KubeInformerFactory` |
//! | [`workqueue`] | `informer-workqueue` | `workqueue` | the rate-limited work queue (client-go's `util/workqueue`) |
//! | [`runtime`] | `informer-runtime` | `runtime` | the reconciler: `Controller`, `Action`, `Target`; with `kube`, `finalizer`, `events::Recorder`, `predicates` |
//! | [`leaderelection`] | `informer-leaderelection` | `leaderelection` (or `runtime`) | leader election on Leases: `LeaderElector`, `KubeLease` (with `kube`) |
//! | `metrics` | `informer-metrics` | `metrics` (not a default) | metrics in a prometheus-client registry; `/metrics`, `/readyz`, `/livez` over HTTP |
//! | `apiserver` | `informer-apiserver` | `apiserver` | the in-process API server simulator, for tests and demos |
//!
//! Features: `default = ["kube", "runtime", "rustls-tls", "ring"]`, which turns on every layer (each
//! layer's feature turns on the ones below it) and kube-client's TLS ([Cargo
//! features](#cargo-features)). Without default features, pick layers one by one: only `kube`
//! brings in kube-client and k8s-openapi, so a program with its own `ListerWatcher` can use
//! `factory` alone. `apiserver` is not a default: it is for tests, and brings in an HTTP
//! server. [`kube_client`] and [`k8s_openapi`] re-export the versions the adapter is built on.
//!
//! # From zero to a running informer
//!
//! 1. **A client.** [`KubeSource::try_default`](informer_kube::KubeSource::try_default)
//!    reads your kubeconfig (or the in-cluster service account). The example below uses the
//!    embedded API server simulator instead, so it runs anywhere.
//! 2. **A factory and an informer.** `factory.informer::<Pod>()` is the shared pod informer:
//!    every part of the program asking for it gets the same one, listing and watching once.
//! 3. **Indexes.** Informers of the kube factory come with the `namespace` index; add your own
//!    with `add_index`, which returns a typed handle for lookups (before or after start).
//! 4. **Handlers.** `add_event_handler` takes any [`ResourceEventHandler`](prelude::ResourceEventHandler);
//!    [`ResourceEventHandlerFuncs`](prelude::ResourceEventHandlerFuncs) builds one from
//!    closures. Each handler gets every change, in order, with the object's key (async handlers and
//!    `subscribe()` streams too).
//! 5. **Start, sync, read.** `start()`, then `wait_for_cache_sync`; read through listers and
//!    index lookups, never from the server.
//! 6. **Stop.** `shutdown()` stops every informer and returns once none of their code runs.
//!
#![cfg_attr(
    feature = "kube",
    doc = r##"
```
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use informers::k8s_openapi::api::core::v1::Pod;
use informers::prelude::*;

# #[tokio::main(flavor = "current_thread")]
# async fn main() -> Result<(), Box<dyn std::error::Error>> {
// 1. An API server with three pods, and a client for it.
let server = informer_apiserver::ApiServer::start(
    informer_apiserver::Config::default().with_core_types(),
).await?;
for (name, node) in [("web-0", "node-1"), ("web-1", "node-2"), ("db-0", "node-1")] {
    server.create(&serde_json::from_value::<Pod>(serde_json::json!({
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "app"}]},
    }))?)?;
}
let client = informers::kube_client::Client::try_from(
    informers::kube_client::Config::new(server.url().parse()?),
)?;

// 2. The factory and its shared pod informer.
let factory = KubeInformerFactory::new(KubeSource::new(client));
let pods = factory.informer::<Pod>();

// 3. An index of pods by node, and its typed handle for lookups.
let by_node = pods.add_index("node", index_func(|pod: &Pod| {
    Ok(pod.spec.as_ref().and_then(|s| s.node_name.as_deref())
        .map(IndexValues::one).unwrap_or_default())
}))?;

// 4. A handler.
let added = Arc::new(AtomicUsize::new(0));
let handler = pods.add_event_handler(ResourceEventHandlerFuncs::new().with_add({
    let added = Arc::clone(&added);
    move |_key, pod: &Arc<Pod>, _in_initial_list| {
        added.fetch_add(1, Ordering::Relaxed);
        println!("pod {} added", pod.metadata.name.as_deref().unwrap_or_default());
    }
}), HandlerOptions::new())?;

// 5. Start, wait for the caches, read.
factory.start()?;
let report = factory.wait_for_cache_sync(Some(Duration::from_secs(30))).await;
assert!(report.all_synced(), "{report}");
assert_eq!(pods.lister().lookup_keys(&by_node, "node-1")?, ["shop/db-0", "shop/web-0"]);
let lister = factory.lister::<Pod>();
assert!(lister.namespace("shop").get("web-1").is_some());
// The handler's own sync: it has handled every pod of the first list.
assert!(handler.wait_for_sync().await);
assert_eq!(added.load(Ordering::Relaxed), 3);

// 6. Stop everything.
factory.shutdown().await?;
server.shutdown().await;
# Ok(()) }
```
"##
)]
//!
//! More: `examples/` in the repository (the demo, an index lookup, a custom handler, handing
//! events to async code, a metadata-only informer), `docs/architecture.md` and
//! `docs/semantics.md` (every behaviour against client-go's).
//!
//! # Cargo features
//!
//! Layers: `store`, `fifo`, `reflector`, `informer`, `factory` and `kube`, each turning on
//! the ones below it (see the table above); `apiserver` adds the simulator.
//!
//! TLS, for kube-client's connections to `https://` servers (each one implies `kube`):
//!
//! * `rustls-tls` — rustls, with the crypto provider that `ring` or `aws-lc-rs` picks, or
//!   one the application installs as rustls' process default before it builds a client.
//! * `ring` — rustls on ring.
//! * `aws-lc-rs` — rustls on aws-lc-rs.
//! * `openssl-tls` — the system's OpenSSL instead of rustls.
//!
//! `default = ["kube", "runtime", "rustls-tls", "ring"]`. For another stack, turn defaults off and
//! name it: `default-features = false, features = ["aws-lc-rs"]`. With `kube` and no TLS
//! feature, kube-client speaks plain `http://` only, enough for the simulator or
//! `kubectl proxy`.
//!
//! Kubernetes version: no crate of this project enables a k8s-openapi version feature.
//! Enable exactly one in your application, in its own dependency on the same k8s-openapi
//! release as [`k8s_openapi`]:
//!
//! ```toml
//! [dependencies]
//! # not published yet: a checkout of the repository, by its path
//! informers = { path = "../informers/crates/informers" }
//! k8s-openapi = { version = "0.29", features = ["v1_36"] }
//! ```

#[cfg(feature = "informer")]
pub use informer;
#[cfg(feature = "factory")]
pub use informer_factory as factory;
#[cfg(feature = "fifo")]
pub use informer_fifo as fifo;
#[cfg(feature = "kube")]
pub use informer_kube as kube;
#[cfg(any(feature = "leaderelection", feature = "runtime"))]
pub use informer_leaderelection as leaderelection;
#[cfg(feature = "metrics")]
pub use informer_metrics as metrics;
#[cfg(feature = "reflector")]
pub use informer_reflector as reflector;
#[cfg(feature = "runtime")]
pub use informer_runtime as runtime;
#[cfg(feature = "store")]
pub use informer_store as store;
#[cfg(feature = "workqueue")]
pub use informer_workqueue as workqueue;

/// The in-process API server simulator (`informer-apiserver`).
#[cfg(feature = "apiserver")]
pub use informer_apiserver as apiserver;

/// kube-client, the version the adapter is built on.
#[cfg(feature = "kube")]
pub use ::kube as kube_client;
#[cfg(feature = "kube")]
pub use k8s_openapi;

/// What most programs use, in one import: `use informers::prelude::*;`.
pub mod prelude {
    #[cfg(feature = "informer")]
    pub use informer::{
        AsyncResourceEventHandler, DeliveryPool, Event, HandlerOptions, HandlerRegistration,
        InformerBuilder, ResourceEventHandler, ResourceEventHandlerExt, ResourceEventHandlerFuncs,
        SharedIndexInformer, Subscription, async_trait,
    };
    #[cfg(feature = "factory")]
    pub use informer_factory::{InformerOptions, SharedInformerFactory};
    #[cfg(feature = "kube")]
    pub use informer_kube::{
        DynamicResource, KubeIdentity, KubeInformerFactory, KubeSource, LabelSelector, Metadata,
    };
    #[cfg(feature = "runtime")]
    pub use informer_runtime::{Action, Expectations, Target};
    #[cfg(feature = "store")]
    pub use informer_store::{
        Everything, FnIdentity, Identity, Index, IndexValues, Indexer, Lister, NAMESPACE_INDEX,
        NamespaceLister, Selector, Store, index_func, indexers,
    };
    #[cfg(feature = "workqueue")]
    pub use informer_workqueue::WorkQueue;
    #[cfg(feature = "informer")]
    pub use tokio_util::sync::CancellationToken;
}

/// The README's usage example, compiled (not run: it needs a cluster) with the doctests.
#[cfg(all(doctest, feature = "kube"))]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;
