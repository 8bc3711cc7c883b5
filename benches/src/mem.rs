//! MEM: bytes per cached object, for our informer and for kube-runtime's store, each synced
//! with the same pods (list only).
//!
//! Each measurement runs in a process of its own (the `mem` binary, driven by the report) so
//! that its resident set is its own. Two figures:
//!
//! * **RSS**: the peak resident set (`VmHWM`) of a process that builds the pods and syncs them
//!   into the cache, minus the peak of a process that builds the same pods and caches nothing
//!   ([`Mode::OursBaseline`], [`Mode::KubeRuntimeBaseline`]), per pod;
//! * **heap**: bytes allocated and still live, counted by the `mem` binary's global allocator
//!   (the [`HeapProbe`]), per pod: the object itself, and the cache's overhead beyond it; for
//!   ours the overhead is also split into the store's key and slot, the index entries, what a
//!   DeltaFifo keeps after every object has been added and popped, and the rest (processor,
//!   reflector, runtime).
//!
//! Our informer shares the built `Arc<Pod>` with its cache, so the object is counted once; the
//! built handles are dropped once synced. kube-runtime's writer stores a deep clone of each
//! object from its `InitApply` event, and the event (with the original) is dropped after: its
//! object figure is the size of that clone.

use informer::HandlerOptions;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use informer::SharedIndexInformer;
use informer_fifo::{DeltaFifo, Queue};
use informer_reflector::{FakeListerWatcher, ListPage, WatchStep};
use informer_store::ReflectorStore;
use k8s_openapi::api::core::v1::Pod;
use kube::core::{PartialObjectMeta, PartialObjectMetaExt};
use kube_runtime::reflector::{self, store};
use kube_runtime::watcher::Event;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::realistic::{ManagedFields, SlimPod, decoded, decoded_synthetic, slim_node_index};
use crate::relist::{self, Listing, Side};
use crate::workload::{key_func, pod, pods};
use crate::{w_fifo, w_idx, w_inf};

/// Live heap: bytes and blocks allocated and not yet freed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Heap {
    /// Bytes.
    pub bytes: usize,
    /// Blocks (allocations).
    pub blocks: usize,
}

impl Heap {
    /// The live heap of a counting allocator's statistics (the `mem` and `anatomy` binaries').
    pub fn of(stats: stats_alloc::Stats) -> Self {
        Self {
            bytes: stats
                .bytes_allocated
                .saturating_sub(stats.bytes_deallocated),
            blocks: stats.allocations.saturating_sub(stats.deallocations),
        }
    }
}

/// Reads the live heap (from a counting global allocator); `None` without one.
pub type HeapProbe = fn() -> Option<Heap>;

/// What a `mem` process does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Builds the pods as our informer gets them (`Arc<Pod>`) and caches nothing.
    OursBaseline,
    /// Builds the pods and syncs them into our informer (DeltaFifo, two indexes, one handler).
    Ours,
    /// Builds the pods as kube-runtime's watcher yields them (`InitApply` events) and caches
    /// nothing.
    KubeRuntimeBaseline,
    /// Builds the events and runs them through kube-runtime's `reflector` into its store.
    KubeRuntime,
    /// Builds each pod's metadata only (`PartialObjectMeta<Pod>`, what a metadata-only informer
    /// caches) and syncs it into our informer (DeltaFifo, the namespace index, one handler).
    OursMetadata,
    /// Realistic pods ([`crate::realistic`]), decoded as `Pod`, synced into our informer (as
    /// [`Mode::Ours`]).
    RealisticPod,
    /// Realistic pods as `Pod`, with `strip_managed_fields` as the informer's transform.
    RealisticPodStripped,
    /// Realistic pods as `PartialObjectMeta<Pod>` (as [`Mode::OursMetadata`]).
    RealisticMetadata,
    /// Realistic pods as `PartialObjectMeta<Pod>`, with `strip_managed_fields`.
    RealisticMetadataStripped,
    /// Realistic pods as the [`SlimPod`] projection (namespace and node indexes).
    RealisticProjection,
    /// Realistic pods as [`SlimPod`]s, with `strip_managed_fields`.
    RealisticProjectionStripped,
    /// Realistic pods as `Pod`, decoded without their managed fields.
    RealisticPodSkipped,
    /// Realistic pods as `PartialObjectMeta<Pod>`, decoded without their managed fields.
    RealisticMetadataSkipped,
    /// Realistic pods as [`SlimPod`]s, decoded without their managed fields.
    RealisticProjectionSkipped,
    /// Realistic pods as `Pod`, decoded without their managed fields, in a compact cache
    /// (`informer_kube::compact_cache`: compact JSON at rest, [`COMPACT_HOT`] kept decoded).
    RealisticPodCompact,
    /// Synthetic pods as [`SlimPod`]s, decoded from their JSON (namespace and node indexes).
    OursProjection,
    /// Relist ([`crate::relist`]): the runtime, the relist server and a client; nothing listed.
    RelistBaseline,
    /// Relist: our informer over `KubeListerWatcher`, the list in pages of 500.
    RelistPaged,
    /// Relist: our informer over `KubeListerWatcher`, the list as one response.
    RelistWhole,
    /// Relist: kube-runtime's `watcher` into a `reflector` store, the list in pages of 500.
    RelistKubeRuntimePaged,
    /// Relist: kube-runtime's `watcher` into a `reflector` store, the list as one response.
    RelistKubeRuntimeWhole,
    /// Relist: our informer, pages of 500, the relist at the same versions (nothing changed).
    RelistPagedUnchanged,
    /// Relist: kube-runtime, pages of 500, the relist at the same versions.
    RelistKubeRuntimePagedUnchanged,
    /// Relist: our informer, one response, the relist at the same versions.
    RelistWholeUnchanged,
    /// Relist: kube-runtime, one response, the relist at the same versions.
    RelistKubeRuntimeWholeUnchanged,
    /// Relist: our informer, pages of 500, each page of the relist applied as it arrives.
    RelistPagedByPage,
    /// Relist: our informer, one response, applied by page (one page: the whole response).
    RelistWholeByPage,
    /// Relist: our informer on a compact cache, pages of 500, each applied as it arrives.
    RelistPagedCompact,
    /// Relist: our informer on a compact cache, pages of 500, each applied as it arrives, the
    /// relist at the same versions.
    RelistPagedCompactUnchanged,
}

impl Mode {
    /// The modes over realistic pods: full, metadata-only and projected, each as decoded, with
    /// `strip_managed_fields` and decoded without the managed fields.
    pub const REALISTIC: [Mode; 10] = [
        Mode::RealisticPod,
        Mode::RealisticPodStripped,
        Mode::RealisticPodSkipped,
        Mode::RealisticPodCompact,
        Mode::RealisticMetadata,
        Mode::RealisticMetadataStripped,
        Mode::RealisticMetadataSkipped,
        Mode::RealisticProjection,
        Mode::RealisticProjectionStripped,
        Mode::RealisticProjectionSkipped,
    ];

    /// The relist modes ([`crate::relist`]).
    pub const RELIST: [Mode; 13] = [
        Mode::RelistBaseline,
        Mode::RelistPaged,
        Mode::RelistWhole,
        Mode::RelistKubeRuntimePaged,
        Mode::RelistKubeRuntimeWhole,
        Mode::RelistPagedUnchanged,
        Mode::RelistKubeRuntimePagedUnchanged,
        Mode::RelistWholeUnchanged,
        Mode::RelistKubeRuntimeWholeUnchanged,
        Mode::RelistPagedByPage,
        Mode::RelistWholeByPage,
        Mode::RelistPagedCompact,
        Mode::RelistPagedCompactUnchanged,
    ];

    /// Every mode.
    pub const ALL: [Mode; 4] = [
        Mode::OursBaseline,
        Mode::Ours,
        Mode::KubeRuntimeBaseline,
        Mode::KubeRuntime,
    ];

    /// The mode's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mode::OursBaseline => "ours-baseline",
            Mode::Ours => "ours",
            Mode::KubeRuntimeBaseline => "kube-runtime-baseline",
            Mode::KubeRuntime => "kube-runtime",
            Mode::OursMetadata => "ours-metadata",
            Mode::RealisticPod => "realistic-pod",
            Mode::RealisticPodStripped => "realistic-pod-stripped",
            Mode::RealisticMetadata => "realistic-metadata",
            Mode::RealisticMetadataStripped => "realistic-metadata-stripped",
            Mode::RealisticProjection => "realistic-projection",
            Mode::RealisticProjectionStripped => "realistic-projection-stripped",
            Mode::RealisticPodSkipped => "realistic-pod-skipped",
            Mode::RealisticMetadataSkipped => "realistic-metadata-skipped",
            Mode::RealisticProjectionSkipped => "realistic-projection-skipped",
            Mode::RealisticPodCompact => "realistic-pod-compact",
            Mode::OursProjection => "ours-projection",
            Mode::RelistBaseline => "relist-baseline",
            Mode::RelistPaged => "relist-paged",
            Mode::RelistWhole => "relist-whole",
            Mode::RelistKubeRuntimePaged => "relist-kube-runtime-paged",
            Mode::RelistKubeRuntimeWhole => "relist-kube-runtime-whole",
            Mode::RelistPagedUnchanged => "relist-paged-unchanged",
            Mode::RelistKubeRuntimePagedUnchanged => "relist-kube-runtime-paged-unchanged",
            Mode::RelistWholeUnchanged => "relist-whole-unchanged",
            Mode::RelistKubeRuntimeWholeUnchanged => "relist-kube-runtime-whole-unchanged",
            Mode::RelistPagedByPage => "relist-paged-by-page",
            Mode::RelistWholeByPage => "relist-whole-by-page",
            Mode::RelistPagedCompact => "relist-paged-compact",
            Mode::RelistPagedCompactUnchanged => "relist-paged-compact-unchanged",
        }
    }

    /// The mode named `name`.
    pub fn parse(name: &str) -> Option<Mode> {
        Mode::ALL
            .into_iter()
            .chain([Mode::OursMetadata, Mode::OursProjection])
            .chain(Mode::REALISTIC)
            .chain(Mode::RELIST)
            .find(|m| m.name() == name)
    }
}

/// What one `mem` process measured; heap figures are bytes per pod (absent without a probe).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample {
    /// Pods built (and cached, unless a baseline).
    pub pods: usize,
    /// Peak resident set, bytes (`VmHWM`; absent where `/proc` is not).
    pub rss_peak: Option<u64>,
    /// Heap per object as built (or, for kube-runtime, as its store keeps it: the deep clone).
    pub object: Option<f64>,
    /// Heap blocks per object as kept.
    pub object_blocks: Option<f64>,
    /// Everything live at the end, per object (the object and the cache).
    pub all_in: Option<f64>,
    /// Ours: the store's key and slot per object (a store without indexes).
    pub key_and_slot: Option<f64>,
    /// Ours: the two indexes' entries per object.
    pub index_entries: Option<f64>,
    /// Ours: what a DeltaFifo keeps once every object has been added and popped.
    pub queue_leftovers: Option<f64>,
    /// Relist: the resident set once synced (`VmRSS`), bytes.
    pub rss_synced: Option<u64>,
    /// Relist: the peak resident set from synced until the relist has reached the cache, bytes.
    pub rss_relist_peak: Option<u64>,
    /// Relist: the resident set once relisted, bytes.
    pub rss_after_relist: Option<u64>,
    /// Relist: whether the peak was reset at synced (otherwise the relist peak is the whole
    /// run's).
    pub peak_reset: Option<bool>,
    /// Relist: seconds from the watch's expiry until the relist reached the cache.
    pub relist_secs: Option<f64>,
    /// Relist: lists served (two: the first and the relist).
    pub lists: Option<u64>,
    /// Relist: the live heap once synced, bytes.
    pub heap_synced: Option<u64>,
    /// Relist: the live heap once relisted, bytes.
    pub heap_after_relist: Option<u64>,
}

impl Sample {
    /// The cache's overhead per object: everything minus the object.
    pub fn overhead(&self) -> Option<f64> {
        Some(self.all_in? - self.object?)
    }

    /// Ours: the rest of the overhead after the key, slot, index entries and queue leftovers
    /// (processor, reflector, runtime).
    pub fn rest(&self) -> Option<f64> {
        Some(self.overhead()? - self.key_and_slot? - self.index_entries? - self.queue_leftovers?)
    }

    /// As one JSON line.
    pub fn to_json(&self) -> String {
        json!({
            "pods": self.pods,
            "rss_peak": self.rss_peak,
            "object": self.object,
            "object_blocks": self.object_blocks,
            "all_in": self.all_in,
            "key_and_slot": self.key_and_slot,
            "index_entries": self.index_entries,
            "queue_leftovers": self.queue_leftovers,
            "rss_synced": self.rss_synced,
            "rss_relist_peak": self.rss_relist_peak,
            "rss_after_relist": self.rss_after_relist,
            "peak_reset": self.peak_reset,
            "relist_secs": self.relist_secs,
            "lists": self.lists,
            "heap_synced": self.heap_synced,
            "heap_after_relist": self.heap_after_relist,
        })
        .to_string()
    }

    /// From [`to_json`](Self::to_json)'s line.
    pub fn from_json(line: &str) -> Option<Sample> {
        let v: Value = serde_json::from_str(line).ok()?;
        let f = |k: &str| v.get(k).and_then(Value::as_f64);
        Some(Sample {
            pods: v.get("pods")?.as_u64()? as usize,
            rss_peak: v.get("rss_peak").and_then(Value::as_u64),
            object: f("object"),
            object_blocks: f("object_blocks"),
            all_in: f("all_in"),
            key_and_slot: f("key_and_slot"),
            index_entries: f("index_entries"),
            queue_leftovers: f("queue_leftovers"),
            rss_synced: v.get("rss_synced").and_then(Value::as_u64),
            rss_relist_peak: v.get("rss_relist_peak").and_then(Value::as_u64),
            rss_after_relist: v.get("rss_after_relist").and_then(Value::as_u64),
            peak_reset: v.get("peak_reset").and_then(Value::as_bool),
            relist_secs: f("relist_secs"),
            lists: v.get("lists").and_then(Value::as_u64),
            heap_synced: v.get("heap_synced").and_then(Value::as_u64),
            heap_after_relist: v.get("heap_after_relist").and_then(Value::as_u64),
        })
    }
}

/// The peak resident set of this process, from `/proc/self/status`.
pub fn rss_peak() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Runs `mode` over `n` pods in this process.
pub fn measure(mode: Mode, n: usize, heap: HeapProbe) -> Sample {
    match mode {
        Mode::OursBaseline => baseline(n, heap, |n| Box::new(pods(n))),
        Mode::KubeRuntimeBaseline => baseline(n, heap, |n| Box::new(init_events(n))),
        Mode::Ours => ours(n, heap),
        Mode::KubeRuntime => kube_runtime(n, heap),
        Mode::OursMetadata => ours_metadata(n, heap),
        Mode::RealisticPod | Mode::RealisticPodStripped | Mode::RealisticPodSkipped => {
            realistic(n, heap, managed_fields(mode), crate::workload::indexers())
        }
        Mode::RealisticPodCompact => cached_in(
            n,
            heap,
            |n| decoded::<Pod>(n, true),
            false,
            crate::workload::indexers(),
            Some(informer_kube::compact_cache::<Pod>(COMPACT_HOT)),
        ),
        Mode::RealisticMetadata
        | Mode::RealisticMetadataStripped
        | Mode::RealisticMetadataSkipped => realistic(
            n,
            heap,
            managed_fields(mode),
            informer_store::indexers([(
                informer_store::NAMESPACE_INDEX,
                informer_kube::namespace_index_func::<PartialObjectMeta<Pod>>(),
            )]),
        ),
        Mode::RealisticProjection
        | Mode::RealisticProjectionStripped
        | Mode::RealisticProjectionSkipped => {
            realistic(n, heap, managed_fields(mode), slim_indexers())
        }
        Mode::OursProjection => cached(
            n,
            heap,
            decoded_synthetic::<SlimPod>,
            false,
            slim_indexers(),
        ),
        Mode::RelistBaseline => relist::measure(Side::Baseline, Listing::Paged, n, heap),
        Mode::RelistPaged => relist::measure(Side::Ours, Listing::Paged, n, heap),
        Mode::RelistWhole => relist::measure(Side::Ours, Listing::Whole, n, heap),
        Mode::RelistKubeRuntimePaged => relist::measure(Side::KubeRuntime, Listing::Paged, n, heap),
        Mode::RelistKubeRuntimeWhole => relist::measure(Side::KubeRuntime, Listing::Whole, n, heap),
        Mode::RelistPagedUnchanged => relist::measure(Side::Ours, Listing::PagedUnchanged, n, heap),
        Mode::RelistKubeRuntimePagedUnchanged => {
            relist::measure(Side::KubeRuntime, Listing::PagedUnchanged, n, heap)
        }
        Mode::RelistWholeUnchanged => relist::measure(Side::Ours, Listing::WholeUnchanged, n, heap),
        Mode::RelistKubeRuntimeWholeUnchanged => {
            relist::measure(Side::KubeRuntime, Listing::WholeUnchanged, n, heap)
        }
        Mode::RelistPagedByPage => relist::measure(Side::OursByPage, Listing::Paged, n, heap),
        Mode::RelistWholeByPage => relist::measure(Side::OursByPage, Listing::Whole, n, heap),
        Mode::RelistPagedCompact => relist::measure(Side::OursCompact, Listing::Paged, n, heap),
        Mode::RelistPagedCompactUnchanged => {
            relist::measure(Side::OursCompact, Listing::PagedUnchanged, n, heap)
        }
    }
}

/// What a realistic mode does with the managed fields.
fn managed_fields(mode: Mode) -> ManagedFields {
    match mode {
        Mode::RealisticPodStripped
        | Mode::RealisticMetadataStripped
        | Mode::RealisticProjectionStripped => ManagedFields::Stripped,
        Mode::RealisticPodSkipped
        | Mode::RealisticMetadataSkipped
        | Mode::RealisticProjectionSkipped => ManagedFields::Skipped,
        _ => ManagedFields::Kept,
    }
}

/// The namespace and node indexes of [`SlimPod`]s.
fn slim_indexers() -> informer_store::Indexers<SlimPod> {
    informer_store::indexers([
        (
            informer_store::NAMESPACE_INDEX,
            informer_kube::namespace_index_func::<SlimPod>(),
        ),
        (crate::workload::NODE_INDEX, slim_node_index()),
    ])
}

fn per(n: usize, after: Option<Heap>, before: Option<Heap>) -> (Option<f64>, Option<f64>) {
    match (after, before) {
        (Some(a), Some(b)) => (
            Some((a.bytes as f64 - b.bytes as f64) / n as f64),
            Some((a.blocks as f64 - b.blocks as f64) / n as f64),
        ),
        _ => (None, None),
    }
}

fn baseline(n: usize, heap: HeapProbe, build: fn(usize) -> Box<dyn std::any::Any>) -> Sample {
    let h0 = heap();
    let built = build(n);
    let (object, object_blocks) = per(n, heap(), h0);
    let rss_peak = rss_peak();
    drop(built);
    Sample {
        pods: n,
        rss_peak,
        object,
        object_blocks,
        all_in: object,
        ..Sample::default()
    }
}

/// `Init`, one `InitApply` per pod, `InitDone`.
fn init_events(n: usize) -> Vec<Event<Pod>> {
    let mut out = Vec::with_capacity(n + 2);
    out.push(Event::Init);
    out.extend((0..n).map(|i| Event::InitApply(pod(i))));
    out.push(Event::InitDone);
    out
}

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime")
}

fn ours(n: usize, heap: HeapProbe) -> Sample {
    let rt = runtime();
    let h0 = heap();
    let built = pods(n);
    let (object, object_blocks) = per(n, heap(), h0);

    let source = FakeListerWatcher::new();
    source.push_list(ListPage::new(built, n.to_string()));
    source.push_watch(vec![WatchStep::Hang]);
    let (informer, counters) = w_inf::informer(source, 1);
    let counter = &counters[0];
    let (stop, task) = run_until_synced(&rt, &informer, counter, n);
    let (all_in, _) = per(n, heap(), h0);
    let rss_peak = rss_peak();

    // The breakdown, from the cached objects themselves (shared, so only overhead is counted).
    let cached = informer.lister().list(&informer_store::Everything);
    assert_eq!(cached.len(), n);
    stop_and_join(&rt, &stop, task);
    drop(informer);
    let store_overhead = |with_indexes: bool| {
        let before = heap();
        let s = w_idx::store(with_indexes);
        w_idx::add_all(&s, &cached);
        let (bytes, _) = per(n, heap(), before);
        drop(s);
        bytes
    };
    let key_and_slot = store_overhead(false);
    let indexed = store_overhead(true);
    let queue_leftovers = {
        let before = heap();
        let q = DeltaFifo::new(key_func());
        for p in &cached {
            q.add(Arc::clone(p)).expect("add");
        }
        q.close();
        assert_eq!(w_fifo::drain(&q), n);
        let (bytes, _) = per(n, heap(), before);
        drop(q);
        bytes
    };
    Sample {
        pods: n,
        rss_peak,
        object,
        object_blocks,
        all_in,
        key_and_slot,
        index_entries: indexed.zip(key_and_slot).map(|(a, b)| a - b),
        queue_leftovers,
        ..Sample::default()
    }
}

fn kube_runtime(n: usize, heap: HeapProbe) -> Sample {
    let rt = runtime();
    let h0 = heap();
    let events = init_events(n);
    // The object as the store keeps it: a deep clone behind an `Arc`, sized on a sample.
    let sample = n.min(1000);
    let before = heap();
    let clones: Vec<Arc<Pod>> = events[1..=sample]
        .iter()
        .map(|e| match e {
            Event::InitApply(p) => Arc::new(p.clone()),
            _ => unreachable!("InitApply events between Init and InitDone"),
        })
        .collect();
    let after = heap();
    let (mut object, mut object_blocks) = per(sample, after, before);
    // The sample's own vector is not part of an object.
    let vec_bytes = (clones.capacity() * size_of::<Arc<Pod>>()) as f64 / sample as f64;
    object = object.map(|b| b - vec_bytes);
    object_blocks = object_blocks.map(|b| b - 1.0 / sample as f64);
    drop(clones);

    let (reader, writer) = store::store::<Pod>();
    rt.block_on(
        reflector::reflector(writer, futures::stream::iter(events.into_iter().map(Ok)))
            .for_each(|_| async {}),
    );
    assert_eq!(reader.len(), n);
    let (all_in, _) = per(n, heap(), h0);
    let rss_peak = rss_peak();
    drop(reader);
    Sample {
        pods: n,
        rss_peak,
        object,
        object_blocks,
        all_in,
        ..Sample::default()
    }
}

/// The metadata-only informer: the same pods, as `PartialObjectMeta<Pod>` (metadata only), with
/// the namespace index (the node index needs the spec, which is not there).
fn ours_metadata(n: usize, heap: HeapProbe) -> Sample {
    let rt = runtime();
    let h0 = heap();
    let built: Vec<Arc<PartialObjectMeta<Pod>>> = (0..n)
        .map(|i| Arc::new(pod(i).metadata.clone().into_response_partial::<Pod>()))
        .collect();
    let (object, object_blocks) = per(n, heap(), h0);

    let source = FakeListerWatcher::new();
    source.push_list(ListPage::new(built, n.to_string()));
    source.push_watch(vec![WatchStep::Hang]);
    let informer = Arc::new(SharedIndexInformer::new(
        source,
        informer_kube::KubeIdentity,
    ));
    let counter = Arc::new(w_inf::Counter::default());
    informer
        .add_event_handler(Arc::clone(&counter), HandlerOptions::new())
        .expect("handler before start");
    let (stop, task) = run_until_synced(&rt, &informer, &counter, n);
    let (all_in, _) = per(n, heap(), h0);
    let rss_peak = rss_peak();
    stop_and_join(&rt, &stop, task);
    Sample {
        pods: n,
        rss_peak,
        object,
        object_blocks,
        all_in,
        ..Sample::default()
    }
}

/// Realistic pods, each decoded as a `K` from its JSON, synced into our informer (DeltaFifo,
/// `indexers`, one handler), their managed fields treated as `managed` says. The object figure
/// is the object as decoded (before any transform).
fn realistic<K>(
    n: usize,
    heap: HeapProbe,
    managed: ManagedFields,
    indexers: informer_store::Indexers<K>,
) -> Sample
where
    K: kube::Resource + serde::de::DeserializeOwned + Clone + Send + Sync + 'static,
{
    let skip = managed == ManagedFields::Skipped;
    let strip = managed == ManagedFields::Stripped;
    cached(n, heap, |n| decoded::<K>(n, skip), strip, indexers)
}

/// How many objects the compact cache of [`Mode::RealisticPodCompact`] keeps decoded.
pub const COMPACT_HOT: usize = 100;

/// `build(n)` objects synced into our informer (DeltaFifo, `indexers`, one handler), with
/// `strip_managed_fields` as its transform when `strip`.
fn cached<K>(
    n: usize,
    heap: HeapProbe,
    build: impl FnOnce(usize) -> Vec<Arc<K>>,
    strip: bool,
    indexers: informer_store::Indexers<K>,
) -> Sample
where
    K: kube::Resource + Clone + Send + Sync + 'static,
{
    cached_in(n, heap, build, strip, indexers, None)
}

/// [`cached`], in the cache `cache` builds (the default `ThreadSafeStore` if `None`).
fn cached_in<K>(
    n: usize,
    heap: HeapProbe,
    build: impl FnOnce(usize) -> Vec<Arc<K>>,
    strip: bool,
    indexers: informer_store::Indexers<K>,
    cache: Option<informer_factory::CacheBuilder<K>>,
) -> Sample
where
    K: kube::Resource + Clone + Send + Sync + 'static,
{
    let rt = runtime();
    let h0 = heap();
    let built: Vec<Arc<K>> = build(n);
    let (object, object_blocks) = per(n, heap(), h0);

    let source = FakeListerWatcher::new();
    source.push_list(ListPage::new(built, n.to_string()));
    source.push_watch(vec![WatchStep::Hang]);
    let identity = informer_store::FnIdentity::new(informer_kube::key_func::<K>())
        .with_resource_version(Arc::new(|o: &K| o.meta().resource_version.as_deref()));
    let mut builder = match cache {
        None => SharedIndexInformer::builder(source, identity.with_indexers(indexers)),
        Some(cache) => SharedIndexInformer::builder(source, identity)
            .cache(cache(informer_kube::key_func::<K>(), indexers)),
    };
    if strip {
        builder = builder.transform(informer_kube::strip_managed_fields::<K>());
    }
    let informer = Arc::new(builder.build());
    let counter = Arc::new(w_inf::Counter::default());
    informer
        .add_event_handler(Arc::clone(&counter), HandlerOptions::new())
        .expect("handler before start");
    let (stop, task) = run_until_synced(&rt, &informer, &counter, n);
    let (all_in, _) = per(n, heap(), h0);
    let rss_peak = rss_peak();
    let cached = informer.lister().list(&informer_store::Everything);
    assert_eq!(cached.len(), n);
    assert!(!strip || cached.iter().all(|o| o.meta().managed_fields.is_none()));
    drop(cached);
    stop_and_join(&rt, &stop, task);
    Sample {
        pods: n,
        rss_peak,
        object,
        object_blocks,
        all_in,
        ..Sample::default()
    }
}

pub(crate) type RunTask = tokio::task::JoinHandle<Result<(), informer::InformerError>>;

/// Starts `informer` on `rt` and waits until it has synced and `counter` has seen `n` adds.
pub(crate) fn run_until_synced<K>(
    rt: &tokio::runtime::Runtime,
    informer: &Arc<SharedIndexInformer<K>>,
    counter: &w_inf::Counter,
    n: usize,
) -> (CancellationToken, RunTask)
where
    K: Send + Sync + 'static,
{
    let stop = CancellationToken::new();
    let task = rt.spawn({
        let (informer, stop) = (Arc::clone(informer), stop.clone());
        async move { informer.run(stop).await }
    });
    rt.block_on(async {
        while !(informer.has_synced() && counter.saw(n, 0)) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    (stop, task)
}

/// Stops an informer started by [`run_until_synced`] and waits for its run to end.
pub(crate) fn stop_and_join(rt: &tokio::runtime::Runtime, stop: &CancellationToken, task: RunTask) {
    stop.cancel();
    rt.block_on(task)
        .expect("informer task")
        .expect("informer run");
}
