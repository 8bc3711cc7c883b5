//! The kube-client adapter of the informers stack: the only layer crate that knows kube.
//!
//! In the pipeline
//!
//! ```text
//! API server ──HTTP── kube::Api<K> ──▶ KubeListerWatcher<K> (this crate) ──▶ Reflector ──▶ queue / store
//! ```
//!
//! * [`KubeListerWatcher`] implements the reflector's `ListerWatcher` over kube-client's
//!   [`Api`](kube::Api): all namespaces or one, with label and field selectors. kube-client
//!   builds and sends each request (its auth, TLS and middleware); the adapter reads the body
//!   itself, a list item by item as it arrives (never the whole body at once) and a watch line
//!   by line. It maps errors and watch events onto the reflector's types, so the reflector, not
//!   kube, decides every retry and relist. It asks for protobuf, with JSON as the fallback, and
//!   reads each response as its `Content-Type` says: a built-in type of k8s-openapi through the
//!   decoder `informer-protobuf` generates for it, any other type (a projection, a type of the
//!   application's own) through its `Deserialize`.
//! * [`MetadataListerWatcher`] does the same through the metadata-only API
//!   ([`PartialObjectMeta`](kube::core::PartialObjectMeta)), for memory-lean caches.
//! * [`KubeListerWatcher::without_managed_fields`] (and [`KubeSource::without_managed_fields`]
//!   for a whole factory) leaves `metadata.managedFields` out of every object as it is decoded,
//!   so they are never built; [`strip_managed_fields`] does the same as a transform, after the
//!   decode. [`metadata_without_managed_fields`] does it for the metadata of a partial type.
//! * [`KubeIdentity`] is the identity of every Kubernetes object (its key `namespace/name`, its
//!   `metadata.resourceVersion`, the `namespace` index), so an informer of any `kube::Resource`
//!   is `SharedIndexInformer::new(lister_watcher, KubeIdentity)`; [`key_func`] and
//!   [`namespace_index_func`] are client-go's `MetaNamespaceKeyFunc` and
//!   `MetaNamespaceIndexFunc`, for a store or a reflector used alone.
//! * [`KubeInformerFactory`] is the shared informer factory over a `kube::Client`
//!   (`informer::<Pod>()`, `informer::<Metadata<Pod>>()`, `lister::<Node>()`, `start`,
//!   `wait_for_cache_sync`, `shutdown`), on [`KubeSource`]; [`default_client`] builds the
//!   client from the kubeconfig or the in-cluster service account, and [`LabelSelector`]
//!   selects from a lister by labels. The feature `gzip` (off by default) has that client
//!   ask for gzip of large lists, which pays over a slow link ([`client_from_config`]).
//! * [`DynamicResource`] names a resource known only at run time (an
//!   [`ApiResource`](kube::discovery::ApiResource) and its scope), whose informer caches
//!   [`DynamicObject`](kube::api::DynamicObject)s: client-go's `dynamicinformer`.
//!
//! The reconciler's Kubernetes helpers (finalizer, Events, predicates) live beside the reconciler,
//! in `informer-runtime`'s `kube` feature: this crate stops at the shared informer factory.
//!
//! # Resources known at run time
//!
//! A custom resource found by discovery has no Rust type to ask for. Describe it with a
//! [`DynamicResource`] and ask the factory for `informer_for(&resource)`: the informer lists
//! and watches through `Api::<DynamicObject>::namespaced_with` / `all_with`, keys objects
//! `namespace/name` and starts with the `namespace` index. Requests for equal resources (and
//! equal selections) share one informer; a different resource gets its own.
//!
//! ```no_run
//! use informer_factory::InformerOptions;
//! use informer_kube::{DynamicResource, KubeInformerFactory, KubeSource};
//! use kube::api::GroupVersionKind;
//! use kube::discovery::{self, ApiResource};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let source = KubeSource::try_default().await?;
//! // From discovery...
//! let gvk = GroupVersionKind::gvk("example.com", "v1", "Widget");
//! let widgets = DynamicResource::from(discovery::pinned_kind(source.client(), &gvk).await?);
//! // ... or described by hand.
//! let gadgets = DynamicResource::cluster(ApiResource::from_gvk_with_plural(
//!     &GroupVersionKind::gvk("example.com", "v1", "Gadget"),
//!     "gadgets",
//! ));
//!
//! let factory = KubeInformerFactory::new(source);
//! let informer = factory.informer_for(&widgets);
//! let in_prod = factory.informer_for_with(&widgets, InformerOptions::new().namespace("prod"));
//! let gadget_lister = factory.lister_for(&gadgets);
//! factory.start()?;
//! assert!(factory.wait_for_cache_sync(None).await.all_synced());
//! if let Some(w) = in_prod.lister().namespace("prod").get("w1") {
//!     println!("w1: size {}", w.data["spec"]["size"]);
//! }
//! println!("{} widgets, {} gadgets", informer.lister().len(), gadget_lister.len());
//! factory.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! # Example
//!
//! A pod cache with the namespace index, kept in step with the cluster:
//!
//! ```no_run
//! use std::sync::Arc;
//! use informer_kube::{key_func, namespace_index_func, KubeListerWatcher};
//! use informer_reflector::Reflector;
//! use informer_store::{indexers, Indexer, ThreadSafeStore, NAMESPACE_INDEX};
//! use k8s_openapi::api::core::v1::Pod;
//! use kube::{Api, Client};
//! use tokio_util::sync::CancellationToken;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = Client::try_default().await?;
//! let store = Arc::new(ThreadSafeStore::with_indexers(
//!     key_func::<Pod>(),
//!     indexers([(NAMESPACE_INDEX, namespace_index_func::<Pod>())]),
//! ));
//! let reflector = Arc::new(Reflector::new(KubeListerWatcher::new(Api::<Pod>::all(client)), store.clone()));
//! let stop = CancellationToken::new();
//! tokio::spawn({
//!     let (reflector, stop) = (reflector.clone(), stop.clone());
//!     async move { reflector.run(stop).await }
//! });
//! // ... later
//! let in_default = store.by_index(NAMESPACE_INDEX, "default")?;
//! println!("{} pods in default", in_default.len());
//! stop.cancel();
//! # Ok(()) }
//! ```
//!
//! # Cargo features
//!
//! The TLS stack kube-client uses for `https://` servers, passed through to kube's features
//! of the same names:
//!
//! * `rustls-tls` — rustls, with the crypto provider that `ring` or `aws-lc-rs` picks, or
//!   one the application installs as rustls' process default before it builds a client.
//! * `ring` (default, with `rustls-tls`) — rustls on ring.
//! * `aws-lc-rs` — rustls on aws-lc-rs.
//! * `openssl-tls` — the system's OpenSSL instead of rustls.
//!
//! `default-features = false` builds no TLS stack at all: plain `http://` servers (the API
//! server simulator, `kubectl proxy`) still work.
//!
//! This crate enables no k8s-openapi version feature: enable exactly one (`v1_33` … `v1_37`)
//! in your application's own k8s-openapi dependency.

mod check;
mod compact;
mod decode;
mod dynamic;
mod error;
mod factory;
mod key;
mod lister_watcher;
mod parallel;
mod protobuf;
mod shard;
mod skip;
mod transform;

pub use crate::check::{CacheCheck, Snapshot, check_at_same_version, informer_snapshot};
pub use crate::compact::{JsonCodec, compact_cache};
pub use crate::decode::{decode_list_body, decode_watch_frame, decode_watch_line};
pub use crate::dynamic::DynamicResource;
pub use crate::error::{error_from_kube, status_from_kube};
pub use crate::factory::{
    ApiScope, KubeInformerFactory, KubeSource, LabelSelector, Metadata, client_from_config,
    default_client,
};
pub use crate::key::{
    KubeIdentity, OWNER_UID_INDEX, UID_INDEX, key_func, namespace_index_func, owner_keys,
    owner_uid_index_func, pod_node_index_func, uid_index_func,
};
pub use crate::lister_watcher::{
    INITIAL_EVENTS_END_ANNOTATION, KubeListerWatcher, MetadataListerWatcher,
};
pub use crate::protobuf::{Encoding, EncodingCounts};
pub use crate::skip::{WithoutManagedFields, metadata_without_managed_fields};
pub use crate::transform::strip_managed_fields;

#[cfg(test)]
mod send_sync {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    const fn assert_send_sync<T: Send + Sync>() {}
    const _: () = assert_send_sync::<KubeListerWatcher<Pod>>();
    const _: () = assert_send_sync::<MetadataListerWatcher<Pod>>();
    const _: () = assert_send_sync::<KubeListerWatcher<kube::api::DynamicObject>>();
    const _: () = assert_send_sync::<DynamicResource>();
    const _: () = assert_send_sync::<KubeInformerFactory>();
    const _: () = assert_send_sync::<informer::SharedIndexInformer<Pod>>();
    const _: () =
        assert_send_sync::<informer::SharedIndexInformer<kube::core::PartialObjectMeta<Pod>>>();
}
