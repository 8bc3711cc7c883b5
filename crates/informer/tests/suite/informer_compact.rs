//! An informer over a cache that keeps its objects encoded (`CompactStore`): a relist decodes
//! only what its notifications need, the old versions of the objects that changed.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use informer::HandlerOptions;
use informer_store::{BoxError, Codec, CompactStore, key_func, meta_namespace_key};

/// The suite's objects as four lines, counting the decodes.
#[derive(Default)]
struct Counting(AtomicUsize);

impl Codec<Obj> for Counting {
    fn encode(&self, o: &Obj) -> Result<Vec<u8>, BoxError> {
        Ok(format!("{}\n{}\n{}\n{}", o.ns, o.name, o.rv, o.node).into_bytes())
    }

    fn decode(&self, bytes: &[u8]) -> Result<Obj, BoxError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        let text = std::str::from_utf8(bytes)?;
        let mut lines = text.split('\n');
        let mut next = || lines.next().ok_or("a line is missing");
        let (ns, name, rv, node) = (next()?, next()?, next()?.parse()?, next()?);
        Ok(Obj {
            ns: ns.into(),
            name: name.into(),
            rv,
            node: node.into(),
        })
    }
}

/// Half of the objects relisted at a new version, half as they were, one added; how many
/// cached objects the cache decoded for it. The handler hears every change with its old
/// version, and the cache ends with the new list.
async fn relist_decodes(by_page: bool) -> usize {
    const OBJECTS: usize = 100;
    let source = ChannelSource::new();
    let listed = |i: usize, rv: u64| obj("a", &format!("o{i}"), rv);
    source.push_list((0..OBJECTS).map(|i| listed(i, 1)).collect(), 1);
    let first = source.open_watch();
    let codec = Arc::new(Counting::default());
    // Nothing kept decoded: every read of a cached object decodes it.
    let compact = CompactStore::new(
        key_func(|o: &Obj| meta_namespace_key(Some(&o.ns), &o.name)),
        Default::default(),
        Arc::clone(&codec) as Arc<dyn Codec<Obj>>,
        0,
    );
    let informer = Arc::new(
        informer_builder(&source, Duration::ZERO, Kind::InOrder)
            .cache(Arc::new(compact))
            .relist_by_page(by_page)
            .build(),
    );
    let rec = Recorder::new();
    informer
        .add_event_handler(rec.clone(), HandlerOptions::new())
        .unwrap();
    let (stop, task) = start(&informer);
    assert!(informer.wait_for_sync().await);
    assert_eq!(codec.0.load(Ordering::SeqCst), 0, "nothing read yet");

    let changed = |i: usize| i.is_multiple_of(2);
    let mut relist: Vec<_> = (0..OBJECTS)
        .map(|i| listed(i, if changed(i) { 2 } else { 1 }))
        .collect();
    relist.push(obj("a", "late", 2));
    source.push_list(relist, 2);
    let _second = source.open_watch();
    first.expire();
    let late = Seen::Add("a/late".into(), 2, false);
    eventually("the relist's last object is heard of", || {
        rec.seen().contains(&late)
    })
    .await;

    let decodes = codec.0.load(Ordering::SeqCst);
    // (The unchanged ones are heard of too, as resyncs, by a handler due one.)
    let updates: Vec<_> = rec.seen()[OBJECTS..]
        .iter()
        .filter(|s| matches!(s, Seen::Update(_, _, 2)))
        .cloned()
        .collect();
    let expected: Vec<_> = (0..OBJECTS)
        .filter(|i| changed(*i))
        .map(|i| Seen::Update(format!("a/o{i}"), 1, 2))
        .collect();
    assert_eq!(updates, expected, "each change with its old version");
    // (Reading the cache decodes every object.)
    let cached = cache(&informer);
    assert_eq!(cached.len(), OBJECTS + 1);
    assert!((0..OBJECTS).all(|i| cached[&format!("a/o{i}")] == if changed(i) { 2 } else { 1 }));
    stop.cancel();
    task.await.unwrap().unwrap();
    decodes
}

/// No listed object is matched against a decoded copy of the cached one (there is no decoded
/// copy to share). A relist applied in one step reads each cached object it lists again once,
/// for the old versions it hands on; one applied by page decodes only the changed objects' old
/// versions (an unchanged object encodes to the bytes stored).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relist_into_a_compact_cache_decodes_only_the_old_versions_it_hands_on() {
    assert_eq!(relist_decodes(false).await, 100, "in one step");
    assert_eq!(relist_decodes(true).await, 50, "by page");
}
