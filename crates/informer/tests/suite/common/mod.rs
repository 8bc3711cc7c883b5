//! Test support: a small object type, a channel-driven `ListerWatcher`, a recording handler.
#![allow(dead_code, unreachable_pub)] // the suite and `informer_shutdown` each use a part

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use informer::{InformerBuilder, QueueKind, ResourceEventHandler, SharedIndexInformer};
use informer_reflector::{
    BackoffConfig, Error, ListPage, ListParams, ListerWatcher, Status, WatchEvent, WatchParams,
    WatchStream,
};
use informer_store::{
    FnIdentity, IndexValues, KeyError, index_func, indexers, key_func, meta_namespace_key,
};
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The object every test caches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Obj {
    pub ns: String,
    pub name: String,
    pub rv: u64,
    pub node: String,
}

pub fn obj(ns: &str, name: &str, rv: u64) -> Arc<Obj> {
    on_node(ns, name, rv, "node-0")
}

pub fn on_node(ns: &str, name: &str, rv: u64, node: &str) -> Arc<Obj> {
    Arc::new(Obj {
        ns: ns.into(),
        name: name.into(),
        rv,
        node: node.into(),
    })
}

pub fn key(o: &Obj) -> String {
    format!("{}/{}", o.ns, o.name)
}

pub type Informer = SharedIndexInformer<Obj>;

/// The setups the informer suite runs on: each queue over the default cache, and the
/// DeltaFifo over a cache that is not `ThreadSafeStore` (the informer takes both through their
/// layer traits).
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    DeltaFifo,
    InOrder,
    /// The DeltaFifo over `informer_testing`'s plain-map cache.
    MapCache,
}

/// Runs an async test body once per setup ([`Kind`]).
#[macro_export]
macro_rules! on_each_setup {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn delta_fifo() {
                super::$name($crate::common::Kind::DeltaFifo).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn in_order_fifo() {
                super::$name($crate::common::Kind::InOrder).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn map_cache() {
                super::$name($crate::common::Kind::MapCache).await
            }
        }
    )*};
}

/// An informer over `source` on queue `kind`, with the `namespace` and `node` indexes, and a
/// fast backoff.
pub fn informer(source: &Arc<ChannelSource>, resync: Duration, kind: Kind) -> Informer {
    informer_builder(source, resync, kind).build()
}

/// [`informer`]'s builder, to adjust further before it is built.
pub fn informer_builder(
    source: &Arc<ChannelSource>,
    resync: Duration,
    kind: Kind,
) -> InformerBuilder<Obj> {
    let keys = key_func(|o: &Obj| {
        if o.name.is_empty() {
            return Err(KeyError::MissingName);
        }
        meta_namespace_key(Some(&o.ns), &o.name)
    });
    let indexes = indexers([
        (
            "namespace",
            index_func(|o: &Obj| Ok(IndexValues::one(o.ns.as_str()))),
        ),
        (
            "node",
            index_func(|o: &Obj| Ok(IndexValues::one(o.node.as_str()))),
        ),
    ]);
    let identity = FnIdentity::new(Arc::clone(&keys))
        .with_resource_version(Arc::new(|o: &Obj| Some(rv_str(o))));
    let informer = match kind {
        Kind::DeltaFifo | Kind::InOrder => {
            SharedIndexInformer::builder(Arc::clone(source), identity.with_indexers(indexes))
        }
        Kind::MapCache => {
            let cache = Arc::new(informer_testing::store::map_cache::MapCache::new(
                keys, indexes,
            ));
            SharedIndexInformer::builder(Arc::clone(source), identity).cache(cache)
        }
    }
    .resync(resync);
    let queue = match kind {
        Kind::DeltaFifo | Kind::MapCache => QueueKind::DeltaFifo,
        Kind::InOrder => QueueKind::InOrder,
    };
    informer.queue(queue).reflector_config(|r| {
        r.with_backoff(BackoffConfig {
            initial: Duration::from_millis(5),
            cap: Duration::from_millis(20),
            jitter: 0.0,
            ..BackoffConfig::default()
        })
        .with_seed(7)
    })
}

/// An informer whose user functions panic on purpose: the key function on objects named
/// `key-panics`, the `node` index function on node `index-panics`, the transform on version
/// 666, the resource-version function on version 777.
pub fn panicking_informer(source: &Arc<ChannelSource>, kind: Kind) -> Informer {
    let kind = match kind {
        Kind::DeltaFifo | Kind::MapCache => QueueKind::DeltaFifo,
        Kind::InOrder => QueueKind::InOrder,
    };
    let identity = FnIdentity::new(key_func(|o: &Obj| {
        assert!(o.name != "key-panics", "key function panicked");
        meta_namespace_key(Some(&o.ns), &o.name)
    }))
    .with_resource_version(Arc::new(|o: &Obj| {
        assert!(o.rv != 777, "resource-version function panicked");
        Some(rv_str(o))
    }))
    .with_indexers(indexers([(
        "node",
        index_func(|o: &Obj| {
            assert!(o.node != "index-panics", "index function panicked");
            Ok(IndexValues::one(o.node.as_str()))
        }),
    )]));
    SharedIndexInformer::builder(Arc::clone(source), identity)
        .queue(kind)
        .transform(informer_fifo::transform_func(|o: Arc<Obj>| {
            assert!(o.rv != 666, "transform panicked");
            Ok(o)
        }))
        .build()
}

/// Resource versions as strings, leaked once per distinct value (tests use few).
fn rv_str(o: &Obj) -> &str {
    use std::sync::OnceLock;
    static NAMES: OnceLock<Mutex<BTreeMap<u64, &'static str>>> = OnceLock::new();
    let names = NAMES.get_or_init(|| Mutex::new(BTreeMap::new()));
    let mut names = names.lock();
    names
        .entry(o.rv)
        .or_insert_with(|| Box::leak(o.rv.to_string().into_boxed_str()))
}

type EventTx = mpsc::UnboundedSender<Result<WatchEvent<Obj>, Error>>;
type EventRx = mpsc::UnboundedReceiver<Result<WatchEvent<Obj>, Error>>;

/// A `ListerWatcher` driven by the test: lists come from a queue of pages; each watch request
/// takes the next stream opened with [`ChannelSource::open_watch`]. With nothing queued, a
/// request waits.
#[derive(Default)]
pub struct ChannelSource {
    lists: Mutex<VecDeque<ListPage<Obj>>>,
    watches: Mutex<VecDeque<EventRx>>,
    lists_served: Mutex<usize>,
    lists_asked: Mutex<usize>,
    changed: tokio::sync::Notify,
}

impl ChannelSource {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn push_list(&self, items: Vec<Arc<Obj>>, rv: u64) {
        self.lists
            .lock()
            .push_back(ListPage::new(items, rv.to_string()));
        self.changed.notify_waiters();
    }

    /// Queues one page of a list, with the continue token of the page after it, if any.
    pub fn push_page(&self, items: Vec<Arc<Obj>>, rv: u64, continue_token: Option<&str>) {
        let mut page = ListPage::new(items, rv.to_string());
        if let Some(token) = continue_token {
            page = page.with_continue(token);
        }
        self.lists.lock().push_back(page);
        self.changed.notify_waiters();
    }

    /// Queues a watch stream and returns its sending end.
    pub fn open_watch(&self) -> Watch {
        let (tx, rx) = mpsc::unbounded_channel();
        self.watches.lock().push_back(rx);
        self.changed.notify_waiters();
        Watch(tx)
    }

    pub fn lists_served(&self) -> usize {
        *self.lists_served.lock()
    }

    /// List requests made, answered or not.
    pub fn lists_asked(&self) -> usize {
        *self.lists_asked.lock()
    }

    /// Watch streams opened by the test and not yet taken by a watch request.
    pub fn watches_pending(&self) -> usize {
        self.watches.lock().len()
    }
}

/// The sending end of one watch stream; dropping it ends the stream cleanly.
pub struct Watch(EventTx);

impl Watch {
    /// Whether the watcher has dropped its end (the reflector stopped watching).
    pub fn is_closed(&self) -> bool {
        self.0.is_closed()
    }

    pub fn added(&self, o: &Arc<Obj>) {
        let _ = self
            .0
            .send(Ok(WatchEvent::added(Arc::clone(o), o.rv.to_string())));
    }
    pub fn modified(&self, o: &Arc<Obj>) {
        let _ = self
            .0
            .send(Ok(WatchEvent::modified(Arc::clone(o), o.rv.to_string())));
    }
    pub fn deleted(&self, o: &Arc<Obj>) {
        let _ = self
            .0
            .send(Ok(WatchEvent::deleted(Arc::clone(o), o.rv.to_string())));
    }
    /// An ERROR 410 Expired event: the reflector relists.
    pub fn expire(&self) {
        let _ = self.0.send(Ok(WatchEvent::Error(Status::expired(
            "too old resource version",
        ))));
    }
}

impl ListerWatcher<Obj> for ChannelSource {
    async fn list(&self, _params: &ListParams) -> Result<ListPage<Obj>, Error> {
        *self.lists_asked.lock() += 1;
        loop {
            let notified = self.changed.notified();
            if let Some(page) = self.lists.lock().pop_front() {
                *self.lists_served.lock() += 1;
                return Ok(page);
            }
            notified.await;
        }
    }

    async fn watch(&self, _params: &WatchParams) -> Result<WatchStream<Obj>, Error> {
        loop {
            let notified = self.changed.notified();
            if let Some(rx) = self.watches.lock().pop_front() {
                let stream = futures::stream::unfold(rx, |mut rx| async move {
                    rx.recv().await.map(|item| (item, rx))
                });
                return Ok(stream.boxed());
            }
            notified.await;
        }
    }
}

/// One notification, as a handler saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    Add(String, u64, bool),
    Update(String, u64, u64),
    Delete(String, bool),
}

/// Records every notification in order.
#[derive(Default)]
pub struct Recorder {
    pub seen: Mutex<Vec<Seen>>,
}

impl Recorder {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().clone()
    }

    pub fn len(&self) -> usize {
        self.seen.lock().len()
    }

    /// The cache contents the notifications imply: key → resource version.
    pub fn replay(&self) -> BTreeMap<String, u64> {
        let mut state = BTreeMap::new();
        for s in self.seen.lock().iter() {
            match s {
                Seen::Add(k, rv, _) | Seen::Update(k, _, rv) => {
                    state.insert(k.clone(), *rv);
                }
                Seen::Delete(k, _) => {
                    state.remove(k);
                }
            }
        }
        state
    }
}

/// Every notification carries the object's key: the recorder checks it against the object.
impl ResourceEventHandler<Obj> for Recorder {
    fn on_add(&self, k: &str, obj: &Arc<Obj>, is_in_initial_list: bool) {
        assert_eq!(k, key(obj), "an add carries the object's key");
        self.seen
            .lock()
            .push(Seen::Add(k.to_owned(), obj.rv, is_in_initial_list));
    }
    fn on_update(&self, k: &str, old: &Arc<Obj>, new: &Arc<Obj>) {
        assert_eq!(k, key(new), "an update carries the object's key");
        self.seen
            .lock()
            .push(Seen::Update(k.to_owned(), old.rv, new.rv));
    }
    fn on_delete(&self, k: &str, obj: &Arc<Obj>, final_state_unknown: bool) {
        assert_eq!(
            k,
            key(obj),
            "a delete carries the key of its last known state"
        );
        self.seen
            .lock()
            .push(Seen::Delete(k.to_owned(), final_state_unknown));
    }
}

#[allow(
    unused_imports,
    reason = "the suite and `informer_shutdown` each use a part"
)]
pub use informer_testing::eventually;

/// Runs `informer` on a task; returns the stop token and the task.
pub fn start(
    informer: &Arc<Informer>,
) -> (
    CancellationToken,
    tokio::task::JoinHandle<Result<(), informer::InformerError>>,
) {
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let (informer, stop) = (Arc::clone(informer), stop.clone());
        async move { informer.run(stop).await }
    });
    (stop, task)
}

/// The cache's contents: key → resource version.
pub fn cache(informer: &Informer) -> BTreeMap<String, u64> {
    informer
        .lister()
        .list(&informer_store::Everything)
        .iter()
        .map(|o| (key(o), o.rv))
        .collect()
}

/// Like [`eventually`], for tests on tokio's paused clock: it waits in real time without
/// letting virtual time run on (it yields instead of sleeping on tokio's clock).
pub async fn eventually_paused(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
        tokio::task::yield_now().await;
    }
}
