//! [`KubeListerWatcher`] and [`MetadataListerWatcher`]: the reflector's [`ListerWatcher`] over
//! kube-client's [`Api`].

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use informer_reflector::{
    Error, ListPage, ListParams, ListSink, ListerWatcher, ResourceVersionMatch, WatchEvent,
    WatchParams, WatchStream,
};
use kube::api::{Api, VersionMatch};
use kube::core::PartialObjectMeta;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::decode::{self, Decoding};
use crate::error::{error_from_kube, status_from_kube};
use crate::protobuf::{self, Encoding, EncodingCounts, Negotiation};
use crate::shard::{append_shard_selector, shard_refusal};

/// The annotation that marks the bookmark ending a streaming list's initial events.
pub const INITIAL_EVENTS_END_ANNOTATION: &str = "k8s.io/initial-events-end";

/// Lists and watches a resource through kube-client's [`Api`]: all namespaces
/// ([`Api::all`]), one namespace ([`Api::namespaced`]), optionally narrowed by selectors.
///
/// kube-client builds and sends every request (its auth, TLS, config and middleware); this
/// adapter reads the bodies itself: a list item by item as its bytes arrive, never holding the
/// whole body, and a watch line by line without copying each line into a `String`. It leaves
/// every retry and relist to the reflector. What it maps:
///
/// * a non-2xx answer (410 Expired, 429, 504 too-large, ...) → an [`Error::Api`] with the
///   server's status; connection refused → [`Error::ConnectionRefused`]; other transport
///   failures → [`Error::Transport`];
/// * watch events → [`WatchEvent`]s carrying `metadata.resourceVersion`; an `ERROR` event →
///   [`WatchEvent::Error`] (so a 410 reaches the reflector both as an HTTP error and as an event);
///   a bookmark → [`WatchEvent::Bookmark`] with its initial-events-end flag;
/// * an object without a `resourceVersion`, a list without one, a line that is not JSON, or an
///   event of an unknown type → [`Error::Decode`]. A last line torn by the server's close is
///   dropped by kube-client and the stream simply ends.
///
/// Every list carries the reflector's `limit`, at `"0"` too. kube-client leaves
/// `resourceVersion=0` out of a list request that has a `limit`; such a list would become a
/// consistent read from etcd, so this adapter builds that one request itself and sends
/// `limit=…&resourceVersion=0`, as client-go does: a server whose watch cache is on answers it
/// whole from the cache, any other server answers it in pages.
///
/// ```no_run
/// use std::sync::Arc;
/// use informer_kube::{key_func, KubeListerWatcher};
/// use informer_reflector::Reflector;
/// use informer_store::ThreadSafeStore;
/// use k8s_openapi::api::core::v1::Pod;
/// use kube::{Api, Client};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let client = Client::try_default().await?;
/// let pods = KubeListerWatcher::new(Api::<Pod>::namespaced(client, "default"))
///     .labels("app=web");
/// let store = Arc::new(ThreadSafeStore::new(key_func::<Pod>()));
/// let reflector = Reflector::new(pods, store.clone());
/// reflector.run(tokio_util::sync::CancellationToken::new()).await;
/// # Ok(()) }
/// ```
pub struct KubeListerWatcher<K> {
    api: Api<K>,
    selectors: Selectors,
    decoding: Decoding,
    negotiation: Arc<Negotiation>,
}

/// The same as [`KubeListerWatcher`], but through the metadata-only API: objects come as
/// [`PartialObjectMeta<K>`] (name, namespace, labels, annotations, owner references, ...), which
/// keeps a cache small when the rest of the object is not needed.
pub struct MetadataListerWatcher<K> {
    api: Api<K>,
    selectors: Selectors,
    decoding: Decoding,
    /// Always JSON: the metadata API's protobuf form is not read.
    negotiation: Arc<Negotiation>,
}

#[derive(Debug, Clone, Default)]
struct Selectors {
    labels: Option<String>,
    fields: Option<String>,
}

impl Selectors {
    /// The conjunction of our selector and the request's.
    fn join(own: &Option<String>, requested: &Option<String>) -> Option<String> {
        match (own.as_deref(), requested.as_deref()) {
            (Some(a), Some(b)) if !a.is_empty() && !b.is_empty() => Some(format!("{a},{b}")),
            (Some(a), _) if !a.is_empty() => Some(a.to_owned()),
            (_, Some(b)) if !b.is_empty() => Some(b.to_owned()),
            _ => None,
        }
    }

    fn list_params(&self, params: &ListParams) -> kube::api::ListParams {
        let rv = params.resource_version.as_str();
        let continuing = params.continue_token.is_some();
        let at_version = !rv.is_empty() && !continuing;
        kube::api::ListParams {
            label_selector: Self::join(&self.labels, &params.label_selector),
            field_selector: Self::join(&self.fields, &params.field_selector),
            continue_token: params.continue_token.clone(),
            limit: params.limit,
            resource_version: at_version.then(|| rv.to_owned()),
            version_match: params
                .resource_version_match
                .filter(|_| at_version)
                .map(|m| match m {
                    ResourceVersionMatch::NotOlderThan => VersionMatch::NotOlderThan,
                    ResourceVersionMatch::Exact => VersionMatch::Exact,
                }),
            ..kube::api::ListParams::default()
        }
    }

    /// Whether kube-client would drop the resource version of this list: `"0"` with a limit
    /// (see [`list`], which appends it back).
    fn drops_zero(params: &ListParams) -> bool {
        params.resource_version == "0" && params.continue_token.is_none() && params.limit.is_some()
    }

    fn watch_params(&self, params: &WatchParams) -> kube::api::WatchParams {
        kube::api::WatchParams {
            label_selector: Self::join(&self.labels, &params.label_selector),
            field_selector: Self::join(&self.fields, &params.field_selector),
            timeout: params
                .timeout
                .map(|t| u32::try_from(t.as_secs().max(1)).unwrap_or(u32::MAX)),
            bookmarks: params.allow_bookmarks || params.send_initial_events,
            // kube-client adds resourceVersionMatch=NotOlderThan along with sendInitialEvents.
            send_initial_events: params.send_initial_events,
        }
    }
}

macro_rules! common_methods {
    ($ty:ident, $negotiation:expr) => {
        impl<K: Resource> $ty<K> {
            /// A lister-watcher over `api`: its scope (all namespaces or one) is the api's.
            pub fn new(api: Api<K>) -> Self {
                Self {
                    api,
                    selectors: Selectors::default(),
                    decoding: Decoding::default(),
                    negotiation: Arc::new($negotiation),
                }
            }

            /// How many responses of each encoding this lister-watcher has read, and whether a
            /// schema gap made it give protobuf up.
            pub fn encoding_counts(&self) -> EncodingCounts {
                self.negotiation.counts()
            }

            /// Leaves `metadata.managedFields` out of every object as it is decoded: the
            /// same objects as [`strip_managed_fields`](crate::strip_managed_fields) as a
            /// transform leaves in the cache, but the managed fields are never built (they are
            /// most of a real object's metadata, and most of the decoder's allocations), and
            /// there is nothing to free afterwards.
            #[must_use]
            pub fn without_managed_fields(mut self) -> Self {
                self.decoding.skip_managed_fields = true;
                self
            }

            /// Whether the complete objects of a protobuf chunk (a list page's, or a
            /// streaming list's initial events) are decoded together on a pool of threads the
            /// process shares, a thread per core up to four, when there are at least 32 KiB of
            /// them (default: yes). The objects are handed on in their order either way, and a
            /// bad one fails the response where it would on one thread; `false` decodes every
            /// object on the thread that reads the response. A watch's events one at a time
            /// and JSON responses are always decoded there.
            #[must_use]
            pub fn parallel_decoding(mut self, parallel: bool) -> Self {
                self.decoding.parallel_from = if parallel {
                    crate::parallel::PARALLEL_FROM
                } else {
                    usize::MAX
                };
                self
            }

            /// Narrows every list and watch to objects matching this label selector.
            #[must_use]
            pub fn labels(mut self, selector: impl Into<String>) -> Self {
                self.selectors.labels = Some(selector.into());
                self
            }

            /// Narrows every list and watch to objects matching this field selector.
            #[must_use]
            pub fn fields(mut self, selector: impl Into<String>) -> Self {
                self.selectors.fields = Some(selector.into());
                self
            }

            /// The namespace this lister-watcher is scoped to, if any.
            pub fn namespace(&self) -> Option<&str> {
                self.api.namespace()
            }
        }

        /// A clone shares its original's encoding choice and counts.
        impl<K: Clone> Clone for $ty<K> {
            fn clone(&self) -> Self {
                Self {
                    api: self.api.clone(),
                    selectors: self.selectors.clone(),
                    decoding: self.decoding,
                    negotiation: self.negotiation.clone(),
                }
            }
        }

        impl<K: Resource> fmt::Debug for $ty<K> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($ty))
                    .field("url", &self.api.resource_url())
                    .field("label_selector", &self.selectors.labels)
                    .field("field_selector", &self.selectors.fields)
                    .field("without_managed_fields", &self.decoding.skip_managed_fields)
                    .field(
                        "parallel_decoding",
                        &(self.decoding.parallel_from != usize::MAX),
                    )
                    .field("protobuf", &self.negotiation.asks_protobuf())
                    .finish()
            }
        }
    };
}

common_methods!(KubeListerWatcher, Negotiation::default());
// The metadata API's protobuf form is not read.
common_methods!(MetadataListerWatcher, Negotiation::json_only());

impl<K: Resource> KubeListerWatcher<K> {
    /// Asks for JSON only. By default a lister-watcher asks for protobuf with JSON as the
    /// fallback, and reads each response as its `Content-Type` says: built-in types come as
    /// protobuf (about 30 % fewer bytes than JSON; a `Pod` is read by its generated decoder in
    /// about 0.9× the time of its JSON, 0.7× without managed fields), custom resources as JSON.
    #[must_use]
    pub fn json_only(mut self) -> Self {
        self.negotiation = Arc::new(Negotiation::json_only());
        self
    }
}

/// Whether a lister-watcher of `K` asks for protobuf: not for `DynamicObject`, which is read as
/// JSON whatever its kind.
fn protobuf_for<K: 'static>(negotiation: &Negotiation) -> bool {
    negotiation.asks_protobuf()
        && std::any::TypeId::of::<K>() != std::any::TypeId::of::<kube::api::DynamicObject>()
}
impl<K> ListerWatcher<K> for KubeListerWatcher<K>
where
    K: Resource + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
{
    async fn list(&self, params: &ListParams) -> Result<ListPage<K>, Error> {
        self.list_into(params, &mut ListSink::new()).await
    }

    fn list_into(
        &self,
        params: &ListParams,
        sink: &mut ListSink<'_, K>,
    ) -> impl Future<Output = Result<ListPage<K>, Error>> + Send
    where
        K: Send + Sync,
    {
        let protobuf = protobuf_for::<K>(&self.negotiation);
        list(
            &self.api,
            &self.selectors,
            params,
            Ask {
                metadata: false,
                protobuf,
            },
            (self.decoding, &self.negotiation),
            sink,
        )
    }

    fn watch(
        &self,
        params: &WatchParams,
    ) -> impl Future<Output = Result<WatchStream<K>, Error>> + Send {
        let wp = self.selectors.watch_params(params);
        let rv = params.resource_version.clone();
        let api = self.api.clone();
        let decoding = self.decoding;
        let negotiation = self.negotiation.clone();
        let ask = Ask {
            metadata: false,
            protobuf: protobuf_for::<K>(&negotiation),
        };
        let shard = params.shard_selector.clone();
        async move { watch(api, (&wp, &rv, shard), ask, decoding, negotiation).await }
    }

    /// `json` or `protobuf`, as the last response's `Content-Type` said.
    fn last_encoding(&self) -> Option<&'static str> {
        self.negotiation.last().map(Encoding::as_str)
    }

    /// `true`: `sendInitialEvents` goes to the API server, which streams the initial state or
    /// refuses (the reflector then lists).
    fn supports_streaming_list(&self) -> bool {
        true
    }
}

impl<K> ListerWatcher<PartialObjectMeta<K>> for MetadataListerWatcher<K>
where
    K: Resource + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default,
{
    async fn list(&self, params: &ListParams) -> Result<ListPage<PartialObjectMeta<K>>, Error> {
        self.list_into(params, &mut ListSink::new()).await
    }

    fn list_into(
        &self,
        params: &ListParams,
        sink: &mut ListSink<'_, PartialObjectMeta<K>>,
    ) -> impl Future<Output = Result<ListPage<PartialObjectMeta<K>>, Error>> + Send
    where
        PartialObjectMeta<K>: Send + Sync,
    {
        list(
            &self.api,
            &self.selectors,
            params,
            Ask {
                metadata: true,
                protobuf: false,
            },
            (self.decoding, &self.negotiation),
            sink,
        )
    }

    fn watch(
        &self,
        params: &WatchParams,
    ) -> impl Future<Output = Result<WatchStream<PartialObjectMeta<K>>, Error>> + Send {
        let wp = self.selectors.watch_params(params);
        let rv = params.resource_version.clone();
        let api = self.api.clone();
        let decoding = self.decoding;
        let negotiation = self.negotiation.clone();
        let ask = Ask {
            metadata: true,
            protobuf: false,
        };
        let shard = params.shard_selector.clone();
        async move { watch(api, (&wp, &rv, shard), ask, decoding, negotiation).await }
    }

    /// `json` or `protobuf`, as the last response's `Content-Type` said.
    fn last_encoding(&self) -> Option<&'static str> {
        self.negotiation.last().map(Encoding::as_str)
    }

    /// `true`: `sendInitialEvents` goes to the API server, which streams the initial state or
    /// refuses (the reflector then lists).
    fn supports_streaming_list(&self) -> bool {
        true
    }
}

/// One list request for `params` (with `selectors` applied), built by kube-client
/// (`Request::list` or `list_metadata`), sent through the api's client, its body decoded item by
/// item as it arrives ([`decode::list_page`]), each item handed to the sink as soon as it is
/// decoded.
///
/// A list at `resourceVersion=0` with a limit, which kube-client's request builder cannot
/// express (it drops the version when a limit is set), is sent as the same request with
/// `resourceVersion=0` (and `resourceVersionMatch`, if any) appended.
async fn list<K, T>(
    api: &Api<K>,
    selectors: &Selectors,
    params: &ListParams,
    ask: Ask,
    (decoding, negotiation): (Decoding, &Negotiation),
    sink: &mut ListSink<'_, T>,
) -> Result<ListPage<T>, Error>
where
    K: Resource + Clone,
    T: DeserializeOwned + Send + Sync + 'static,
{
    let lp = selectors.list_params(params);
    let request = kube::core::Request::new(api.resource_url());
    let built = if ask.metadata {
        request.list_metadata(&lp)
    } else {
        request.list(&lp)
    };
    let mut req = built.map_err(|e| error_from_kube(kube::Error::BuildRequest(e)))?;
    if Selectors::drops_zero(params) {
        let mut uri = req.uri().to_string();
        uri.push_str("&resourceVersion=0");
        match lp.version_match {
            Some(VersionMatch::NotOlderThan) => uri.push_str("&resourceVersionMatch=NotOlderThan"),
            Some(VersionMatch::Exact) => uri.push_str("&resourceVersionMatch=Exact"),
            None => {}
        }
        *req.uri_mut() = uri.parse().map_err(|e| Error::Other(Box::new(e)))?;
    }
    let shard = params.shard_selector.as_deref();
    append_shard_selector(&mut req, shard)?;
    req.extensions_mut().insert("list");
    ask.accept(&mut req);
    let (body, encoding) = decode::send(&api.clone().into_client(), req)
        .await
        .map_err(|e| shard_refusal(e, shard))?;
    negotiation.record(encoding);
    match encoding {
        Encoding::Protobuf => protobuf::list_page(body, decoding, negotiation, sink).await,
        Encoding::Json => decode::list_page(body, decoding, sink).await,
    }
}

/// What a request asks for: the metadata-only form, protobuf.
#[derive(Debug, Clone, Copy)]
struct Ask {
    metadata: bool,
    protobuf: bool,
}

impl Ask {
    /// Sets the request's `Accept` to protobuf-or-JSON when protobuf is asked for (kube-client
    /// sets none for a typed list or watch, which the server answers with JSON).
    fn accept<B>(self, req: &mut http::Request<B>) {
        if self.protobuf {
            req.headers_mut().insert(
                http::header::ACCEPT,
                http::HeaderValue::from_static(protobuf::ACCEPT),
            );
        }
    }
}

/// One watch request, built by kube-client (`Request::watch` or `watch_metadata`), sent through
/// the api's client, its lines framed and decoded by [`decode::watch_events`].
async fn watch<K, T>(
    api: Api<K>,
    (wp, rv, shard): (&kube::api::WatchParams, &str, Option<String>),
    ask: Ask,
    decoding: Decoding,
    negotiation: Arc<Negotiation>,
) -> Result<WatchStream<T>, Error>
where
    K: Resource,
    T: Resource + Clone + DeserializeOwned + Send + Sync + 'static,
{
    let request = kube::core::Request::new(api.resource_url());
    let built = if ask.metadata {
        request.watch_metadata(wp, rv)
    } else {
        request.watch(wp, rv)
    };
    let mut req = built.map_err(|e| error_from_kube(kube::Error::BuildRequest(e)))?;
    append_shard_selector(&mut req, shard.as_deref())?;
    req.extensions_mut().insert("watch");
    // Watch streams uncompressed, as kube-client asks for them (a gzip member per event is not
    // decoded past the first by its middleware).
    req.headers_mut()
        .entry(http::header::ACCEPT_ENCODING)
        .or_insert(http::HeaderValue::from_static("identity"));
    ask.accept(&mut req);
    let (body, encoding) = decode::send(&api.into_client(), req)
        .await
        .map_err(|e| shard_refusal(e, shard.as_deref()))?;
    negotiation.record(encoding);
    Ok(match encoding {
        Encoding::Protobuf => protobuf::WatchFrames::<T>::new(body, decoding, negotiation)
            .map(|e| e.and_then(event_from_kube))
            .boxed(),
        Encoding::Json => watch_stream(decode::watch_events::<T>(body, decoding)),
    })
}

/// kube-client's watch stream as the reflector's.
fn watch_stream<O, S>(events: S) -> WatchStream<O>
where
    O: Resource + Send + Sync + 'static,
    S: futures::Stream<Item = kube::Result<kube::api::WatchEvent<Arc<O>>>> + Send + 'static,
{
    events
        .map(|e| e.map_err(stream_error_from_kube).and_then(event_from_kube))
        .boxed()
}

/// A failure inside a watch stream. kube-client reports a line that is not a watch event but
/// parses as a `Status` as an API error; a line of an unknown event type parses as an empty one.
fn stream_error_from_kube(err: kube::Error) -> Error {
    match err {
        kube::Error::Api(status)
            if status.code == 0 && status.reason.is_empty() && status.message.is_empty() =>
        {
            Error::decode("watch line is not a watch event (unknown event type?)")
        }
        other => error_from_kube(other),
    }
}

/// A kube-client watch event as the reflector's.
fn event_from_kube<O: Resource>(
    event: kube::api::WatchEvent<Arc<O>>,
) -> Result<WatchEvent<O>, Error> {
    use kube::api::WatchEvent as Kube;
    Ok(match event {
        Kube::Added(o) => {
            let resource_version = object_resource_version(&*o)?;
            WatchEvent::Added {
                object: o,
                resource_version,
            }
        }
        Kube::Modified(o) => {
            let resource_version = object_resource_version(&*o)?;
            WatchEvent::Modified {
                object: o,
                resource_version,
            }
        }
        Kube::Deleted(o) => {
            let resource_version = object_resource_version(&*o)?;
            WatchEvent::Deleted {
                object: o,
                resource_version,
            }
        }
        Kube::Bookmark(b) => {
            if b.metadata.resource_version.is_empty() {
                return Err(Error::decode("bookmark without metadata.resourceVersion"));
            }
            WatchEvent::Bookmark {
                initial_events_end: b
                    .metadata
                    .annotations
                    .get(INITIAL_EVENTS_END_ANNOTATION)
                    .is_some_and(|v| v == "true"),
                resource_version: b.metadata.resource_version,
            }
        }
        Kube::Error(status) => WatchEvent::Error(status_from_kube(&status)),
    })
}

fn object_resource_version<O: Resource>(o: &O) -> Result<String, Error> {
    match o.resource_version() {
        Some(rv) if !rv.is_empty() => Ok(rv),
        _ => Err(Error::decode(format!(
            "watch event object {:?} without metadata.resourceVersion",
            o.meta().name.as_deref().unwrap_or("")
        ))),
    }
}
