//! An in-process, Kubernetes-compatible API server for tests and demos, with fault injection.
//!
//! [`ApiServer`] listens on a loopback port and speaks the real list/watch protocol over
//! HTTP/1.1 and JSON, so kube-client, kubectl or any other client talks to it as to a v1.36
//! cluster:
//!
//! * **list** with `resourceVersion` unset / `"0"` / `N` and `resourceVersionMatch`
//!   (`NotOlderThan`, `Exact`), `limit`/`continue` pagination with kube-apiserver's continue
//!   tokens, `remainingItemCount`, label and field selectors;
//! * **watch** with `resourceVersion`, `allowWatchBookmarks`, `timeoutSeconds`,
//!   `sendInitialEvents` (streaming lists ending in the `k8s.io/initial-events-end` bookmark),
//!   selector transitions;
//! * **sharded lists and watches** (KEP-5866): `shardSelector`, the objects whose FNV-1a hash
//!   of `metadata.uid` or `metadata.namespace` falls in a range, echoed in a list's
//!   `metadata.shardInfo` (or ignored, as by an older server: [`ShardSelectorSupport`]);
//! * **writes** over HTTP (POST, PUT, JSON, merge and strategic merge PATCH, DELETE) and from
//!   Rust ([`ApiServer::create`], [`update`](ApiServer::update), [`patch`](ApiServer::patch),
//!   [`delete`](ApiServer::delete)...);
//! * **server-side apply** (`application/apply-patch+yaml`) with kube-apiserver's field
//!   ownership: `metadata.managedFields` on every object written over HTTP, conflicts, `force`;
//!   and the **`/status` subresource** of the types that have one;
//! * one revision counter for every type (like etcd's), a bounded history, compaction, and
//!   `Status` errors with the codes, reasons and messages kube-apiserver sends;
//! * the types of [`Config::with_core_types`]: Pod, ConfigMap, Namespace, Node, and
//!   `coordination.k8s.io/v1` Lease with its registry's rules (a `PUT` needs a current
//!   `resourceVersion`, and creates a missing lease);
//! * **gzip** of responses above 128 KiB for the clients that ask, as kube-apiserver's
//!   `APIResponseCompression` ([`Config::response_compression`], on by default; never a watch);
//!   and, as a benchmarking aid, a **bandwidth limit** on every response ([`Config::bandwidth`]);
//! * [`Faults`]: dropped and torn watches, injected ERROR events, failing and slow requests,
//!   compaction, restarts, one client isolated ([`Faults::isolate`]: its requests fail or hang
//!   while the others are served), and more (see `docs/apiserver.md`).
//!
//! In the informers stack it stands in for the cluster: the reflector lists and watches it
//! through kube-client.
//!
//! # Example
//!
//! ```
//! use informer_apiserver::{ApiServer, Config};
//! use k8s_openapi::api::core::v1::Pod;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), informer_apiserver::Error> {
//! let server = ApiServer::start(Config::default().with_core_types()).await?;
//! assert!(server.url().starts_with("http://127.0.0.1:"));
//!
//! // Churn objects from Rust, without HTTP.
//! let mut pod = Pod::default();
//! pod.metadata.name = Some("web-0".into());
//! pod.metadata.namespace = Some("demo".into());
//! let created = server.create(&pod)?;
//! let rv = created.metadata.resource_version.clone().unwrap();
//! assert_eq!(rv, server.resource_version().to_string());
//!
//! // A stale resourceVersion on update is a 409 Conflict, as on a real server.
//! server.patch::<Pod>(Some("demo"), "web-0", &serde_json::json!({"metadata": {"labels": {"app": "web"}}}))?;
//! let err = server.update(&created).unwrap_err();
//! assert!(matches!(err, informer_apiserver::Error::Status(ref s) if s.code() == 409));
//!
//! // Compaction makes the old revision unusable: lists at it and watches from it get 410.
//! server.faults().compact_all();
//! assert_eq!(server.history_floor(), server.resource_version());
//!
//! server.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! With kube-client, point a `kube::Config` at [`ApiServer::url`] (see the crate's tests), or
//! write [`ApiServer::kubeconfig`] to a file for kubectl.
//!
//! # Telling clients apart
//!
//! The server knows a client by its bearer token (else its `User-Agent`), as kube-apiserver
//! knows a user; it checks no credentials. A kube client gets a token in three lines
//! (kube-client sends it over plain HTTP; this crate does not depend on kube):
//!
//! ```
//! use informer_apiserver::{ApiServer, Config, Failure, Isolation};
//! use k8s_openapi::api::coordination::v1::Lease;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let server = ApiServer::start(Config::default().with_core_types()).await?;
//! let mut config = kube::Config::new(server.url().parse()?);
//! config.auth_info.token = Some("client-a".to_owned().into());
//! let client = kube::Client::try_from(config)?;
//!
//! server.faults().isolate("client-a", Isolation::Fail(Failure::internal("cut off")));
//! let leases: kube::Api<Lease> = kube::Api::namespaced(client, "kube-system");
//! assert!(leases.list(&Default::default()).await.is_err());
//! server.faults().heal("client-a");
//! assert!(leases.list(&Default::default()).await.is_ok());
//! # server.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! [`ApiServer::kubeconfig_with_token`] gives the same identity as a kubeconfig.

// The modules in layers, each importing only modules of the layers below it:
//
// 1. the handles: `server` (`ApiServer`) and `fault_control` (`Faults`), and `fuzzing`;
// 2. HTTP: `router` (paths, and the gates a request passes; around it `compression`, gzip as
//    kube-apiserver does it, and `bandwidth`, the link's limit), over `handlers` (a routed request
//    served by its verb);
// 3. the operations on the shared state: `garbage` (the optional garbage collector) over
//    `apply` (server-side apply) and `deletion` over
//    `objects` (creates, replaces, patches, reads), `list`, `watch` (opening one) over
//    `watch_stream` (a running one, writing the lines of `watch_events`), `isolation` (the
//    gate of an isolated client);
// 4. the shared state: `state`;
// 5. what knows no server state: encodings (`codec`, `protobuf`), the request's parts
//    (`query`, `selector`, `shard`, `patch`, `duration`), the registries' rules (`strategy`,
//    `defaults`, `object_meta`), field ownership (`field_manager` over `managed` over
//    `structured` over `fieldpath`), `discovery`, `storage`, `status` (with `field_error`),
//    `faults` (the fault descriptions and the
//    injected state), `config`, `resource`, `kubeconfig`.

// Handles.
mod fault_control;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod server;

// HTTP.
mod bandwidth;
mod compression;
mod handlers;
mod router;

// Operations on the shared state.
mod apply;
mod deletion;
mod garbage;
mod isolation;
mod list;
mod objects;
mod watch;
mod watch_events;
mod watch_stream;

// The shared state.
mod state;

// Protocol pieces, storage and configuration.
mod codec;
mod config;
mod defaults;
mod discovery;
mod duration;
mod faults;
mod field_error;
mod field_manager;
mod fieldpath;
mod kubeconfig;
mod managed;
mod object_meta;
mod patch;
#[cfg(feature = "protobuf")]
mod protobuf;
mod query;
mod resource;
mod selector;
mod shard;
mod status;
mod storage;
mod strategy;
mod structured;

pub use config::{BookmarkShape, Config, ExpiredWatch, ShardSelectorSupport, SlowWatcher};
pub use fault_control::Faults;
pub use faults::{Failure, Isolation, RemainingItemCount, SlowStream, Verb};
pub use resource::{ResourceInfo, Scope};
pub use selector::{FieldSelector, LabelSelector};
pub use server::{ApiServer, Error};
pub use state::RecordedRequest;
pub use status::{DeletePrecondition, FieldError, FieldErrorKind, StatusError};

/// The annotation on the bookmark that ends a streaming list's initial events.
pub const INITIAL_EVENTS_END_ANNOTATION: &str = watch_events::INITIAL_EVENTS_END;

/// The simulator's protobuf encoding of an object (`application/vnd.kubernetes.protobuf`: the
/// `k8s\0` envelope around the message), given its JSON form with `apiVersion` and `kind`;
/// `None` for a kind without a protobuf form. For tests and benchmarks that need the bytes a
/// protobuf server sends.
#[cfg(feature = "protobuf")]
pub fn encode_protobuf(object: &serde_json::Value) -> Option<Vec<u8>> {
    protobuf::encode_object(object)
}

/// One frame of a protobuf watch stream (the 4-byte length, then the `WatchEvent`) for an event
/// of `event_type` (`ADDED`, ...) about `object` (its JSON form); `None` as for
/// [`encode_protobuf`].
#[cfg(feature = "protobuf")]
pub fn protobuf_watch_frame(event_type: &str, object: &serde_json::Value) -> Option<Vec<u8>> {
    protobuf::watch_frame(event_type, object)
}

/// [`encode_protobuf`] by way of a `prost_reflect::DynamicMessage`: the simulator's former
/// encoder, the reference its output is checked against and its speed measured with. The same
/// bytes, but for the order of map entries (in no particular order here).
#[cfg(feature = "protobuf")]
#[doc(hidden)]
pub fn encode_protobuf_reflect(object: &serde_json::Value) -> Option<Vec<u8>> {
    protobuf::reflect::encode_object(object)
}

/// [`protobuf_watch_frame`] by way of a `prost_reflect::DynamicMessage`, as
/// [`encode_protobuf_reflect`].
#[cfg(feature = "protobuf")]
#[doc(hidden)]
pub fn protobuf_watch_frame_reflect(
    event_type: &str,
    object: &serde_json::Value,
) -> Option<Vec<u8>> {
    protobuf::reflect::watch_frame(event_type, object)
}
