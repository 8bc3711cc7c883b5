//! W-IDX: the indexer with the `namespace` and `node` indexes — `add` every pod, `update` every
//! pod to the next node, `by_index` on each index, `delete` every pod — and the same phases on
//! kube-runtime's reflector store, which has no indexes.
//!
//! kube-runtime's store is written through `Writer::apply_watcher_event`: an `add` or `update`
//! is an `Event::Apply` (the writer computes the `ObjectRef` and stores a deep clone of the
//! object behind a new `Arc`: that is how its writer works), a `delete` is an `Event::Delete`.
//! The events are built before the clock starts, as our `Arc<Pod>`s are.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use informer_store::{
    Indexer, Indexers, KnownObjects, NAMESPACE_INDEX, ReflectorStore, ThreadSafeStore,
};
use k8s_openapi::api::core::v1::Pod;
use kube_runtime::reflector::store::Writer;
use kube_runtime::watcher::Event;

use crate::workload::{NODE_INDEX, indexers, key_func, pod_at, pods};

/// A phase of W-IDX.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// `add` every pod.
    Add,
    /// `update` every pod, moved to the next node.
    Update,
    /// `by_index("namespace", ns-{j % 100})`: 1,000 objects per call at full size.
    ByNamespace,
    /// `by_index("node", node-{j % 1000})`: 100 objects per call at full size.
    ByNode,
    /// `delete` every pod.
    Delete,
}

impl Phase {
    /// Every phase, in the workload's order.
    pub const ALL: [Phase; 5] = [
        Phase::Add,
        Phase::Update,
        Phase::ByNamespace,
        Phase::ByNode,
        Phase::Delete,
    ];

    /// The phase's name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Add => "add",
            Phase::Update => "update",
            Phase::ByNamespace => "by_index namespace",
            Phase::ByNode => "by_index node",
            Phase::Delete => "delete",
        }
    }
}

/// The objects of one W-IDX run, built once.
#[derive(Debug)]
pub struct Data {
    /// Pods `0..n`.
    pub objects: Vec<Arc<Pod>>,
    /// Every pod moved to `node-{(i+1) % 1000}`, at a newer resource version.
    pub moved: Vec<Arc<Pod>>,
    /// `ns-0` … `ns-99`.
    pub namespaces: Vec<String>,
    /// `node-0` … `node-999`.
    pub nodes: Vec<String>,
}

impl Data {
    /// The objects for `n` pods.
    pub fn new(n: usize) -> Self {
        Self {
            objects: pods(n),
            moved: (0..n)
                .map(|i| Arc::new(pod_at(i, (n + i + 1) as u64, (i + 1) % 1000)))
                .collect(),
            namespaces: (0..100).map(|j| format!("ns-{j}")).collect(),
            nodes: (0..1000).map(|j| format!("node-{j}")).collect(),
        }
    }

    /// The pod count.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// Whether there are no pods.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}

/// A store with the two indexes, or with none.
pub fn store(with_indexes: bool) -> ThreadSafeStore<Pod> {
    let idx = if with_indexes {
        indexers()
    } else {
        Indexers::new()
    };
    ThreadSafeStore::with_indexers(key_func(), idx)
}

/// `add` every object.
pub fn add_all(s: &ThreadSafeStore<Pod>, objects: &[Arc<Pod>]) {
    for p in objects {
        s.add(Arc::clone(p)).expect("add");
    }
}

/// `update` every object.
pub fn update_all(s: &ThreadSafeStore<Pod>, objects: &[Arc<Pod>]) {
    for p in objects {
        s.update(Arc::clone(p)).expect("update");
    }
}

/// `delete` every object.
pub fn delete_all(s: &ThreadSafeStore<Pod>, objects: &[Arc<Pod>]) {
    for p in objects {
        s.delete(Arc::clone(p)).expect("delete");
    }
}

/// `calls` calls of `by_index(index, values[j % values.len()])`; returns the objects returned.
pub fn by_index(s: &ThreadSafeStore<Pod>, index: &str, values: &[String], calls: usize) -> usize {
    let mut n = 0;
    for j in 0..calls {
        n += black_box(
            s.by_index(index, &values[j % values.len()])
                .expect("by_index"),
        )
        .len();
    }
    n
}

/// Our side, every phase in order on one store: `(phase, time per operation)`. Without indexes
/// the `by_index` phases are skipped.
pub fn ours(data: &Data, with_indexes: bool, by_index_calls: usize) -> Vec<(Phase, Duration)> {
    let n = data.len() as u32;
    let s = store(with_indexes);
    let mut out = Vec::with_capacity(5);
    out.push((Phase::Add, time(|| add_all(&s, &data.objects)) / n));
    out.push((Phase::Update, time(|| update_all(&s, &data.moved)) / n));
    if with_indexes {
        let calls = by_index_calls as u32;
        let t = time(|| {
            let found = by_index(&s, NAMESPACE_INDEX, &data.namespaces, by_index_calls);
            assert!(found >= by_index_calls.min(1));
        });
        out.push((Phase::ByNamespace, t / calls));
        let t = time(|| {
            black_box(by_index(&s, NODE_INDEX, &data.nodes, by_index_calls));
        });
        out.push((Phase::ByNode, t / calls));
    }
    out.push((Phase::Delete, time(|| delete_all(&s, &data.moved)) / n));
    assert!(s.list_keys().is_empty(), "every pod deleted");
    out
}

/// kube-runtime's side: the events its writer is given for each phase.
#[derive(Debug)]
pub struct PeerEvents {
    /// `Apply` of every pod.
    pub add: Vec<Event<Pod>>,
    /// `Apply` of every moved pod.
    pub update: Vec<Event<Pod>>,
    /// `Delete` of every moved pod.
    pub delete: Vec<Event<Pod>>,
}

impl PeerEvents {
    /// Owned copies of the same objects, wrapped as watcher events.
    pub fn new(data: &Data) -> Self {
        let owned = |objects: &[Arc<Pod>], f: fn(Pod) -> Event<Pod>| {
            objects.iter().map(|p| f(Pod::clone(p))).collect()
        };
        Self {
            add: owned(&data.objects, Event::Apply),
            update: owned(&data.moved, Event::Apply),
            delete: owned(&data.moved, Event::Delete),
        }
    }
}

/// Applies every event to kube-runtime's store writer.
pub fn apply_all(w: &mut Writer<Pod>, events: &[Event<Pod>]) {
    for e in events {
        w.apply_watcher_event(e);
    }
}

/// kube-runtime's side, the phases it supports (add, update, delete) in order on one store:
/// `(phase, time per operation)`.
pub fn kube_runtime(events: &PeerEvents) -> Vec<(Phase, Duration)> {
    let n = events.add.len() as u32;
    let mut w = Writer::<Pod>::default();
    let reader = w.as_reader();
    let add = time(|| apply_all(&mut w, &events.add)) / n;
    assert_eq!(reader.len(), events.add.len());
    let update = time(|| apply_all(&mut w, &events.update)) / n;
    let delete = time(|| apply_all(&mut w, &events.delete)) / n;
    assert!(reader.is_empty(), "every pod deleted");
    vec![
        (Phase::Add, add),
        (Phase::Update, update),
        (Phase::Delete, delete),
    ]
}

fn time(f: impl FnOnce()) -> Duration {
    let start = Instant::now();
    f();
    start.elapsed()
}
