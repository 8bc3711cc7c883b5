//! The contract between a reflector and the API it reads: [`ListerWatcher`] and its plain types.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::Duration;

use futures::stream::BoxStream;

use crate::error::{Error, Status};
use crate::reflector::ListInterner;

/// The value of `resourceVersionMatch` on a list or streaming-list request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResourceVersionMatch {
    /// The state at least as new as the given resource version.
    NotOlderThan,
    /// The state exactly at the given resource version (may be 410 Expired).
    Exact,
}

impl ResourceVersionMatch {
    /// The query-string spelling: `NotOlderThan` or `Exact`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotOlderThan => "NotOlderThan",
            Self::Exact => "Exact",
        }
    }
}

/// One list request (one page of it).
///
/// Selectors here are the reflector's own; a [`ListerWatcher`] that was built with selectors of
/// its own must apply both (their conjunction).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListParams {
    /// A label selector, e.g. `app=web,tier!=db`.
    pub label_selector: Option<String>,
    /// A field selector, e.g. `spec.nodeName=node-1`.
    pub field_selector: Option<String>,
    /// The page size; `None` asks for everything in one response.
    pub limit: Option<u32>,
    /// The continue token of the previous page.
    pub continue_token: Option<String>,
    /// `resourceVersion`: `""` (most recent, consistent), `"0"` (any, from cache) or a version.
    pub resource_version: String,
    /// `resourceVersionMatch`.
    pub resource_version_match: Option<ResourceVersionMatch>,
    /// `shardSelector` (KEP-5866), in the server's grammar
    /// (`informer_shard::ShardSelector`'s `Display`): only the objects of these shards. A server
    /// without the feature ignores it and sends everything, so the reflector filters what it
    /// is sent by the same selector.
    pub shard_selector: Option<String>,
}

/// One page of a list response.
#[derive(Debug, Clone)]
pub struct ListPage<K> {
    /// The objects on this page.
    pub items: Vec<Arc<K>>,
    /// The list's `metadata.resourceVersion`: the version of the snapshot. Every page of one list
    /// carries the same one. A [`ListerWatcher`] returns an error rather than an empty version.
    pub resource_version: String,
    /// The list's `metadata.continue`; `Some` iff more pages follow.
    pub continue_token: Option<String>,
    /// The list's `metadata.shardInfo.selector`: the shard selector the server applied, as it
    /// writes it; `None` when the list was not filtered by shard (none was asked for, or the
    /// server does not serve `shardSelector`).
    pub shard_info: Option<String>,
}

/// One watch request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchParams {
    /// A label selector (see [`ListParams::label_selector`]).
    pub label_selector: Option<String>,
    /// A field selector (see [`ListParams::field_selector`]).
    pub field_selector: Option<String>,
    /// The version to start after: `""` or `"0"` start with synthetic `ADDED` events for the
    /// current state; any other value delivers only the changes after it.
    pub resource_version: String,
    /// `resourceVersionMatch` (used by streaming lists).
    pub resource_version_match: Option<ResourceVersionMatch>,
    /// `timeoutSeconds`: the server ends the watch cleanly after this long.
    pub timeout: Option<Duration>,
    /// `allowWatchBookmarks`.
    pub allow_bookmarks: bool,
    /// `sendInitialEvents`: stream the current state first, then an initial-events-end bookmark.
    pub send_initial_events: bool,
    /// `shardSelector` (see [`ListParams::shard_selector`]).
    pub shard_selector: Option<String>,
}

/// One event of a watch stream.
///
/// The [`ListerWatcher`] extracts each object's resource version, so the reflector never needs
/// to look inside `K`.
pub enum WatchEvent<K> {
    /// An object was created, started to match the watch, or is part of the initial state.
    Added {
        /// The object.
        object: Arc<K>,
        /// Its `metadata.resourceVersion`.
        resource_version: String,
    },
    /// An object changed.
    Modified {
        /// The new state.
        object: Arc<K>,
        /// Its `metadata.resourceVersion`.
        resource_version: String,
    },
    /// An object was deleted or stopped matching the watch.
    Deleted {
        /// The last state, stamped with the version of the deletion.
        object: Arc<K>,
        /// The version of the deletion.
        resource_version: String,
    },
    /// The server's state reached `resource_version` with nothing more to report before it.
    Bookmark {
        /// The bookmark's version, a valid resume point.
        resource_version: String,
        /// The bookmark carries the `k8s.io/initial-events-end: "true"` annotation: the initial
        /// state of a streaming list is complete.
        initial_events_end: bool,
    },
    /// The server reported an error inside the stream (it closes the stream after it).
    Error(Status),
}

impl<K> WatchEvent<K> {
    /// The event's resource version, if it has one (every kind but `Error`).
    pub fn resource_version(&self) -> Option<&str> {
        match self {
            Self::Added {
                resource_version, ..
            }
            | Self::Modified {
                resource_version, ..
            }
            | Self::Deleted {
                resource_version, ..
            }
            | Self::Bookmark {
                resource_version, ..
            } => Some(resource_version),
            Self::Error(_) => None,
        }
    }

    /// The event's type as the wire spells it: `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK`,
    /// `ERROR`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::Added { .. } => "ADDED",
            Self::Modified { .. } => "MODIFIED",
            Self::Deleted { .. } => "DELETED",
            Self::Bookmark { .. } => "BOOKMARK",
            Self::Error(_) => "ERROR",
        }
    }
}

impl<K> Clone for WatchEvent<K> {
    fn clone(&self) -> Self {
        match self {
            Self::Added {
                object,
                resource_version,
            } => Self::Added {
                object: object.clone(),
                resource_version: resource_version.clone(),
            },
            Self::Modified {
                object,
                resource_version,
            } => Self::Modified {
                object: object.clone(),
                resource_version: resource_version.clone(),
            },
            Self::Deleted {
                object,
                resource_version,
            } => Self::Deleted {
                object: object.clone(),
                resource_version: resource_version.clone(),
            },
            Self::Bookmark {
                resource_version,
                initial_events_end,
            } => Self::Bookmark {
                resource_version: resource_version.clone(),
                initial_events_end: *initial_events_end,
            },
            Self::Error(status) => Self::Error(status.clone()),
        }
    }
}

impl<K> fmt::Debug for WatchEvent<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Bookmark {
                resource_version,
                initial_events_end,
            } => f
                .debug_struct("Bookmark")
                .field("resource_version", resource_version)
                .field("initial_events_end", initial_events_end)
                .finish(),
            Self::Error(status) => f.debug_tuple("Error").field(status).finish(),
            other => f
                .debug_struct(other.type_name())
                .field("resource_version", &other.resource_version())
                .finish_non_exhaustive(),
        }
    }
}

/// A watch stream: complete events in server order, or errors.
///
/// The stream ends when the server closes the watch. An `Err` item is a failure the
/// [`ListerWatcher`] saw while reading (a transport error, an undecodable event); the reflector
/// stops reading after it. A torn last event that the server cut off must not be yielded.
pub type WatchStream<K> = BoxStream<'static, Result<WatchEvent<K>, Error>>;

/// Hands a batch of listed objects on (see [`ListSink::handing_over`]); an error ends the list
/// with it.
pub type HandOver<'a, K> = &'a mut (dyn FnMut(Vec<Arc<K>>) -> Result<(), Error> + Send);

/// Decides whether a listed object is kept (see [`ListSink::filtering`]).
pub type ListFilter<'a, K> = &'a (dyn Fn(&K) -> bool + Sync);

/// Where a lister-watcher puts a list's objects as it decodes them
/// ([`ListerWatcher::list_into`]): each goes through the reflector's interner, if any
/// ([`Reflector::with_list_interner`](crate::Reflector::with_list_interner)), and is kept for
/// the page, or, with [`handing_over`](Self::handing_over), handed on in batches while the list
/// is still arriving.
///
/// ```
/// use std::sync::Arc;
/// use informer_reflector::{Error, ListSink};
///
/// let mut batches = Vec::new();
/// let mut hand = |batch: Vec<Arc<u32>>| -> Result<(), Error> {
///     batches.push(batch.len());
///     Ok(())
/// };
/// let mut sink = ListSink::new().handing_over(2, &mut hand);
/// for n in 0..5 {
///     sink.push(Arc::new(n)).unwrap();
/// }
/// let kept = sink.take_kept();
/// drop(sink);
/// assert_eq!((batches, kept.len()), (vec![2, 2], 1));
/// ```
pub struct ListSink<'a, K> {
    filter: Option<ListFilter<'a, K>>,
    filtered_out: usize,
    intern: Option<&'a ListInterner<K>>,
    hand_over: Option<(usize, HandOver<'a, K>)>,
    backlogged: Option<&'a Backlogged<'a>>,
    kept: Vec<Arc<K>>,
    handed_over: usize,
}

/// Whether the consumer of a [`ListSink`]'s hand-overs has more than it should still to take;
/// if it has, the waker given is woken once it may no longer have (a consumer that cannot tell
/// may leave it unwoken: the wait looks again every [`LOOK_AGAIN`] anyway).
pub type Backlogged<'a> = dyn Fn(&Waker) -> bool + Send + Sync + 'a;

/// How often a wait on a [`Backlogged`] consumer looks again without being woken.
pub const LOOK_AGAIN: Duration = Duration::from_millis(10);

/// Waits while `backlogged` says so: goes on when its waker is woken and the consumer is no
/// longer behind, looking again every [`LOOK_AGAIN`] meanwhile.
pub(crate) async fn wait_while(backlogged: &Backlogged<'_>) {
    let caught_up = || {
        std::future::poll_fn(|cx| {
            if backlogged(cx.waker()) {
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        })
    };
    while tokio::time::timeout(LOOK_AGAIN, caught_up()).await.is_err() {}
}

impl<'a, K> ListSink<'a, K> {
    /// A sink that keeps every object, as it is.
    pub fn new() -> Self {
        Self {
            filter: None,
            filtered_out: 0,
            intern: None,
            hand_over: None,
            backlogged: None,
            kept: Vec::new(),
            handed_over: 0,
        }
    }

    /// Drops, as soon as it is decoded, every object that `filter` refuses (a sharded
    /// reflector's objects outside its shards), counting them
    /// ([`filtered_out`](Self::filtered_out)).
    #[must_use]
    pub fn filtering(mut self, filter: Option<ListFilter<'a, K>>) -> Self {
        self.filter = filter;
        self
    }

    /// Passes every object through `intern` and keeps what it returns.
    #[must_use]
    pub fn interning(mut self, intern: Option<&'a ListInterner<K>>) -> Self {
        self.intern = intern;
        self
    }

    /// Hands the objects kept to `hand_over` whenever `every` (at least one) are kept.
    #[must_use]
    pub fn handing_over(mut self, every: usize, hand_over: HandOver<'a, K>) -> Self {
        self.hand_over = Some((every.max(1), hand_over));
        self
    }

    /// Paces the hand-overs by `backlogged`: [`ready`](Self::ready) waits while it says the
    /// consumer is behind.
    #[must_use]
    pub fn pacing(mut self, backlogged: &'a Backlogged<'a>) -> Self {
        self.backlogged = Some(backlogged);
        self
    }

    /// Waits while the consumer of the hand-overs is behind (see [`pacing`](Self::pacing));
    /// at once without pacing. A lister-watcher that decodes a response as it arrives calls it
    /// between the response's chunks, so that one long response (a server that ignores the
    /// page size) is read no faster than its objects are consumed; one that does not call it
    /// is paced only between pages.
    pub fn ready(&self) -> impl Future<Output = ()> + Send + 'a {
        let backlogged = self.backlogged;
        async move {
            if let Some(backlogged) = backlogged {
                wait_while(backlogged).await;
            }
        }
    }

    /// Takes one decoded object; an error is the hand-over's, and ends the list.
    pub fn push(&mut self, object: Arc<K>) -> Result<(), Error> {
        if self.filter.is_some_and(|keep| !keep(&object)) {
            self.filtered_out += 1;
            return Ok(());
        }
        let object = match self.intern {
            Some(intern) => intern(object),
            None => object,
        };
        self.kept.push(object);
        match &mut self.hand_over {
            Some((every, hand_over)) if self.kept.len() >= *every => {
                let batch = std::mem::take(&mut self.kept);
                self.handed_over += batch.len();
                hand_over(batch)
            }
            _ => Ok(()),
        }
    }

    /// Takes every object of `objects`, in order.
    pub fn extend(&mut self, objects: Vec<Arc<K>>) -> Result<(), Error> {
        let plain = self.intern.is_none() && self.filter.is_none() && self.hand_over.is_none();
        if plain && self.kept.is_empty() {
            self.kept = objects;
            return Ok(());
        }
        objects.into_iter().try_for_each(|object| self.push(object))
    }

    /// The objects kept and not handed over, in order (the page's `items`).
    pub fn take_kept(&mut self) -> Vec<Arc<K>> {
        std::mem::take(&mut self.kept)
    }

    /// How many objects were handed over so far.
    pub fn handed_over(&self) -> usize {
        self.handed_over
    }

    /// How many objects the filter dropped so far.
    pub fn filtered_out(&self) -> usize {
        self.filtered_out
    }
}

impl<K> Default for ListSink<'_, K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K> fmt::Debug for ListSink<'_, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListSink")
            .field("filtering", &self.filter.is_some())
            .field("interning", &self.intern.is_some())
            .field("every", &self.hand_over.as_ref().map(|(every, _)| *every))
            .field("kept", &self.kept.len())
            .field("handed_over", &self.handed_over)
            .finish()
    }
}

/// Lists and watches one collection: the reflector's only view of the API server.
///
/// Implementations: the kube-client adapter (`informer-kube`) and [`FakeListerWatcher`]
/// (scriptable, for tests).
///
/// # Contract
///
/// * [`list`](Self::list) returns one page. It fails with an [`Error`] whose
///   [`kind`](Error::kind) tells the reflector how to react (410 Expired, too-large resource
///   version, 429 with its Retry-After, connection refused, ...). A list without a resource
///   version is an error, never a page with an empty version.
/// * [`watch`](Self::watch) resolves once the server has accepted the watch (a non-2xx answer
///   is an `Err` here); the events then arrive on the returned [`WatchStream`]. Each event
///   carries the resource version of its object; an object without one, or an event that cannot
///   be decoded, is an `Err` item, never a half-filled event.
/// * Both futures must be `Send` and must not block the thread.
///
/// [`FakeListerWatcher`]: crate::FakeListerWatcher
pub trait ListerWatcher<K>: Send + Sync {
    /// Lists one page.
    fn list(&self, params: &ListParams) -> impl Future<Output = Result<ListPage<K>, Error>> + Send;

    /// Lists one page, handing each object to `sink` (see [`ListSink`]) as soon as it is
    /// decoded; the returned page's `items` are what the sink kept
    /// ([`ListSink::take_kept`]), the objects it did not hand over.
    ///
    /// The default lists the page, then gives the sink all of its objects. A lister-watcher
    /// that decodes a response item by item should give the sink each object as soon as it is
    /// decoded: an unchanged object's decoded copy is then dropped at once (the interner keeps
    /// the cached one), and a reflector applying a relist by page gets the objects of a long
    /// response in batches while the rest of it is still arriving.
    fn list_into(
        &self,
        params: &ListParams,
        sink: &mut ListSink<'_, K>,
    ) -> impl Future<Output = Result<ListPage<K>, Error>> + Send
    where
        K: Send + Sync,
    {
        let list = self.list(params);
        async move {
            let mut page = list.await?;
            sink.extend(std::mem::take(&mut page.items))?;
            page.items = sink.take_kept();
            Ok(page)
        }
    }

    /// Starts a watch.
    fn watch(
        &self,
        params: &WatchParams,
    ) -> impl Future<Output = Result<WatchStream<K>, Error>> + Send;

    /// The encoding of the last response this lister-watcher read — a list page or a watch it
    /// opened — as a short lowercase label (`json`, `protobuf`); `None`, the default, when it
    /// does not tell.
    ///
    /// The reflector reads it as soon as a list page or a watch succeeded, before anything
    /// else can call this lister-watcher on its task, and tells its observer
    /// ([`ReflectorObserver::response`](crate::ReflectorObserver::response)). A lister-watcher
    /// shared by several reflectors reports whichever response came last.
    fn last_encoding(&self) -> Option<&'static str> {
        None
    }

    /// Whether this lister-watcher can serve a streaming list: it passes
    /// [`WatchParams::send_initial_events`] on to a server that answers with the initial
    /// events and their end bookmark (client-go's `IsWatchListSemanticsUnSupported`, the other
    /// way round). A reflector asked for streaming lists lists and watches instead when it
    /// says `false`, the default: a lister-watcher that ignored the parameter would never send
    /// the end bookmark, and the reflector would wait for it forever.
    ///
    /// The kube adapter's lister-watchers say `true`; a wrapper around another lister-watcher
    /// should forward its answer.
    fn supports_streaming_list(&self) -> bool {
        false
    }
}

impl<K, L: ListerWatcher<K> + ?Sized> ListerWatcher<K> for Arc<L> {
    fn list(&self, params: &ListParams) -> impl Future<Output = Result<ListPage<K>, Error>> + Send {
        (**self).list(params)
    }

    fn list_into(
        &self,
        params: &ListParams,
        sink: &mut ListSink<'_, K>,
    ) -> impl Future<Output = Result<ListPage<K>, Error>> + Send
    where
        K: Send + Sync,
    {
        (**self).list_into(params, sink)
    }

    fn watch(
        &self,
        params: &WatchParams,
    ) -> impl Future<Output = Result<WatchStream<K>, Error>> + Send {
        (**self).watch(params)
    }

    fn last_encoding(&self) -> Option<&'static str> {
        (**self).last_encoding()
    }

    fn supports_streaming_list(&self) -> bool {
        (**self).supports_streaming_list()
    }
}

impl<K> ListPage<K> {
    /// A last (or only) page: `items` at `resource_version`, no continue token.
    pub fn new(items: Vec<Arc<K>>, resource_version: impl Into<String>) -> Self {
        Self {
            items,
            resource_version: resource_version.into(),
            continue_token: None,
            shard_info: None,
        }
    }

    /// The same page with a continue token: more pages follow.
    pub fn with_continue(mut self, token: impl Into<String>) -> Self {
        self.continue_token = Some(token.into());
        self
    }

    /// The same page as the server says it filtered it by shard: `metadata.shardInfo.selector`.
    pub fn with_shard_info(mut self, selector: impl Into<String>) -> Self {
        self.shard_info = Some(selector.into());
        self
    }
}

impl<K> WatchEvent<K> {
    /// An `ADDED` event.
    pub fn added(object: Arc<K>, resource_version: impl Into<String>) -> Self {
        Self::Added {
            object,
            resource_version: resource_version.into(),
        }
    }

    /// A `MODIFIED` event.
    pub fn modified(object: Arc<K>, resource_version: impl Into<String>) -> Self {
        Self::Modified {
            object,
            resource_version: resource_version.into(),
        }
    }

    /// A `DELETED` event.
    pub fn deleted(object: Arc<K>, resource_version: impl Into<String>) -> Self {
        Self::Deleted {
            object,
            resource_version: resource_version.into(),
        }
    }

    /// A plain `BOOKMARK` event.
    pub fn bookmark(resource_version: impl Into<String>) -> Self {
        Self::Bookmark {
            resource_version: resource_version.into(),
            initial_events_end: false,
        }
    }

    /// The `BOOKMARK` that ends the initial events of a streaming list.
    pub fn initial_events_end(resource_version: impl Into<String>) -> Self {
        Self::Bookmark {
            resource_version: resource_version.into(),
            initial_events_end: true,
        }
    }
}
