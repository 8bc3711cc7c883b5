//! Server configuration.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use k8s_openapi::{ListableResource, Resource};

use crate::resource::{ResourceInfo, Scope};

/// The shape of the object inside a `BOOKMARK` event.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BookmarkShape {
    /// `{"kind":..,"apiVersion":..,"metadata":{"resourceVersion":..}}` (plus annotations).
    #[default]
    Minimal,
    /// Also `metadata.creationTimestamp: null` and, for pods, `spec: {"containers": null}` and
    /// `status: {}` — what Go's encoder writes for an empty object on older servers, and what
    /// has broken strongly-typed clients.
    NullFilled,
}

/// How to start a watch from a resource version older than the history floor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExpiredWatch {
    /// `200 OK`, then one `ERROR` event (410 `Expired`), then the end of the body — what
    /// kube-apiserver's watch cache does.
    #[default]
    ErrorEvent,
    /// The same, with `reason: "Gone"` (servers up to 1.17).
    ErrorEventGone,
    /// A plain `HTTP 410` response with the Status body (aggregated servers, proxies).
    Http410,
}

/// What the server does with a watcher that falls [`Config::watch_buffer`] changes behind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SlowWatcher {
    /// Ends its stream cleanly, as kube-apiserver's watch cache ends a watcher that does not
    /// keep up; the client must watch again from its last version.
    #[default]
    Close,
    /// Waits for it: the stream goes on where the watcher fell behind, with what it missed read
    /// from the history, as from a server that blocks on its slowest consumer (or a plain etcd
    /// watch). Only once the history no longer holds what it missed is it ended, as with
    /// `Close`.
    Block,
}

/// What the server does with the `shardSelector` of a list or watch (server-side sharded list
/// and watch, KEP-5866).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ShardSelectorSupport {
    /// Served as kube-apiserver v1.36 serves it with the `ShardedListAndWatch` feature gate on:
    /// lists and watches carry only the objects whose hashed field is in a range, a list says
    /// so in `metadata.shardInfo`, and a malformed selector is a `400 BadRequest`.
    #[default]
    Served,
    /// Not known, as by a server before v1.36 or with the feature gate off: the parameter is
    /// ignored, every object is sent and no list has `shardInfo`, so that a client can be tested
    /// for noticing and filtering by itself.
    Ignored,
}

/// Configuration of an [`ApiServer`](crate::ApiServer).
///
/// The defaults are kube-apiserver's where it has one (bookmarks every minute and 2 s before a
/// watch's deadline, a 3 s wait for a too-new resource version, watch timeouts of 30–60 min);
/// tests shorten them.
#[derive(Clone, Debug)]
pub struct Config {
    /// Address to bind; loopback by default.
    pub bind: IpAddr,
    /// Port to bind; `0` picks a free one.
    pub port: u16,
    /// Resource types served from the start (more can be registered later).
    pub resources: Vec<ResourceInfo>,
    /// How many changes the history keeps (all resource types together). Older revisions
    /// become `410 Expired` as the history rolls over.
    pub history_size: usize,
    /// Per-resource buffer of changes not yet written to a watcher. A watcher that falls this
    /// far behind is closed (cleanly, without an ERROR event), as kube-apiserver closes slow
    /// watchers, or waited for (see [`Config::slow_watcher`]).
    pub watch_buffer: usize,
    /// What happens to a watcher that falls `watch_buffer` changes behind.
    pub slow_watcher: SlowWatcher,
    /// Period of bookmarks on watches that allow them.
    pub bookmark_interval: Duration,
    /// How long before its deadline a watch gets its last bookmark.
    pub bookmark_before_deadline: Duration,
    /// How long a request for a resource version ahead of the server waits before failing with
    /// `504 Timeout` / `ResourceVersionTooLarge`.
    pub too_large_wait: Duration,
    /// kube-apiserver's `--min-request-timeout`: a watch without `timeoutSeconds` lasts a random
    /// time in `[min, 2*min)`.
    pub min_request_timeout: Duration,
    /// The revision of the empty store (the first write gets the next one). Must be at least 1,
    /// so that no list ever reports the magic `"0"`.
    pub initial_resource_version: u64,
    /// Revisions taken per write: values above 1 make the sequence sparse, as a shared etcd's is.
    pub resource_version_step: u64,
    /// Write resource versions as opaque strings (`x` and the revision in hex, `"x1f"`) instead
    /// of decimal numbers, as a server not backed by etcd may: a client that parses them, or
    /// compares them as text, fails against it. Requests must then use the strings the server
    /// wrote (or `""` and `"0"`); anything else is a `400`. Off by default.
    pub opaque_resource_versions: bool,
    /// Put `kind` and `apiVersion` on list items of built-in types (kube-apiserver does not).
    pub list_items_typed: bool,
    /// The shape of bookmark objects.
    pub bookmark_shape: BookmarkShape,
    /// How a watch from a too-old resource version fails.
    pub expired_watch: ExpiredWatch,
    /// Reject creating an object in a namespace that does not exist (`404`), as kube-apiserver's
    /// `NamespaceLifecycle` admission does. Off by default so tests need not create namespaces.
    pub require_namespace: bool,
    /// `gitVersion` reported by `/version`.
    pub git_version: String,
    /// Collect the dependents of removed objects in the background, as kube-controller-manager's
    /// garbage collector does: once an object is gone, every object whose
    /// `metadata.ownerReferences` names its `uid` and no other owner that still exists is
    /// deleted (as an HTTP `DELETE` deletes: pods gracefully, finalizers respected), and so on
    /// down; one that has another owner left only loses the reference. Off by default: then
    /// deletes never cascade.
    pub garbage_collection: bool,
    /// Whether `shardSelector` is served or ignored. Served by default, as by a v1.36 server
    /// with the `ShardedListAndWatch` feature gate on (kube-apiserver leaves the alpha gate off
    /// by default; [`ShardSelectorSupport::Ignored`] is that server).
    pub shard_selector: ShardSelectorSupport,
    /// Gzip large responses for the clients that ask, as kube-apiserver's
    /// `APIResponseCompression` does (on by default since 1.16): a get or list response of more
    /// than 128 KiB to a request whose `Accept-Encoding` names `gzip` is compressed at level 1,
    /// JSON and protobuf alike; a watch stream never is (1.36 compresses none). On by default.
    pub response_compression: bool,
    /// A bandwidth limit, in bytes per second, on every response body together (lists,
    /// objects, watch streams), as if the server's clients were behind one network link; the
    /// bytes counted are those on the wire, after compression. A benchmarking aid: what
    /// compression or an encoding buys over a slow link. None by default; changed on a running
    /// server by [`Faults::set_bandwidth`](crate::Faults::set_bandwidth).
    pub bandwidth: Option<u64>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 0,
            resources: Vec::new(),
            history_size: 10_000,
            watch_buffer: 4096,
            slow_watcher: SlowWatcher::Close,
            bookmark_interval: Duration::from_secs(60),
            bookmark_before_deadline: Duration::from_secs(2),
            too_large_wait: Duration::from_secs(3),
            min_request_timeout: Duration::from_secs(1800),
            initial_resource_version: 1,
            resource_version_step: 1,
            opaque_resource_versions: false,
            list_items_typed: false,
            bookmark_shape: BookmarkShape::Minimal,
            expired_watch: ExpiredWatch::ErrorEvent,
            require_namespace: false,
            git_version: "v1.36.0".to_owned(),
            garbage_collection: false,
            shard_selector: ShardSelectorSupport::Served,
            response_compression: true,
            bandwidth: None,
        }
    }
}

impl Config {
    /// How this server writes and reads resource versions.
    pub(crate) fn codec(&self) -> crate::storage::RvCodec {
        crate::storage::RvCodec::new(self.opaque_resource_versions)
    }

    /// Adds a k8s-openapi resource type.
    pub fn register<K>(mut self) -> Self
    where
        K: Resource + ListableResource,
        K::Scope: Scope,
    {
        self.resources.push(ResourceInfo::of::<K>());
        self
    }

    /// Gzips large responses as kube-apiserver does (`true`, the default), or never (`false`):
    /// see [`Config::response_compression`].
    pub fn with_response_compression(mut self, on: bool) -> Self {
        self.response_compression = on;
        self
    }

    /// Limits the server's responses to `bytes_per_second` together: see
    /// [`Config::bandwidth`].
    pub fn with_bandwidth(mut self, bytes_per_second: u64) -> Self {
        self.bandwidth = Some(bytes_per_second).filter(|&rate| rate > 0);
        self
    }

    /// Adds a resource described by hand (e.g. [`ResourceInfo::custom`]).
    pub fn register_info(mut self, info: ResourceInfo) -> Self {
        self.resources.push(info);
        self
    }

    /// Adds Pod, ConfigMap, Namespace and Node (core/v1), and Lease (`coordination.k8s.io/v1`,
    /// for leader election and heartbeats).
    pub fn with_core_types(self) -> Self {
        use k8s_openapi::api::coordination::v1::Lease;
        use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, Secret};
        self.register::<Pod>()
            .register::<ConfigMap>()
            .register::<Secret>()
            .register::<Namespace>()
            .register::<Node>()
            .register::<Lease>()
    }

    /// Serves or ignores `shardSelector` (see [`ShardSelectorSupport`]).
    pub fn with_shard_selector(mut self, support: ShardSelectorSupport) -> Self {
        self.shard_selector = support;
        self
    }

    /// Short intervals for tests: bookmarks every `interval`, a 1 s too-large wait.
    pub fn for_tests(interval: Duration) -> Self {
        Config {
            bookmark_interval: interval,
            bookmark_before_deadline: interval.min(Duration::from_secs(2)),
            too_large_wait: Duration::from_secs(1),
            ..Config::default()
        }
        .with_core_types()
    }
}
