//! The default queue applies a relist to the cache in one step: a reader of the cache sees the
//! old list or the new one, never a mix, and the handlers still hear of every object.

use crate::common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::*;
use informer::HandlerOptions;
use informer_store::Everything;

const OBJECTS: u64 = 2_000;

/// The list at `rv`: objects `from..from + OBJECTS`, every one at `rv`, on node `node-{rv}`.
fn list(from: u64, rv: u64) -> Vec<Arc<Obj>> {
    (from..from + OBJECTS)
        .map(|i| on_node("a", &format!("o{i}"), rv, &format!("node-{rv}")))
        .collect()
}

/// What a reader may see: the whole old list or the whole new one.
#[derive(Debug, PartialEq, Eq)]
enum View {
    Old,
    New,
}

/// A reader's view of the cache, judged: every object at one version, with exactly the keys
/// of that version's list, and the `node` index agreeing.
fn judge(informer: &Informer, old: &BTreeSet<String>, new: &BTreeSet<String>) -> View {
    let lister = informer.lister();
    let objects = lister.list(&Everything);
    let versions: BTreeSet<u64> = objects.iter().map(|o| o.rv).collect();
    let keys: BTreeSet<String> = objects.iter().map(|o| key(o)).collect();
    let seen = match (versions.iter().collect::<Vec<_>>().as_slice(), keys) {
        ([1], keys) if keys == *old => View::Old,
        ([2], keys) if keys == *new => View::New,
        (versions, keys) => panic!(
            "a mix of the old and the new list: versions {versions:?}, {} keys",
            keys.len()
        ),
    };
    // The index is swapped with the objects: all of one node, or none.
    let on_new_node = lister.by_index("node", "node-2").unwrap().len();
    assert!(
        on_new_node == 0 || on_new_node == OBJECTS as usize,
        "the node index half swapped: {on_new_node} objects on the new node"
    );
    seen
}

/// A relist that changes every object's version, and replaces a quarter of the keys: a reader
/// polling the lister from before the relist until it sees the new list never sees both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_never_sees_a_mix_of_the_old_and_the_new_list() {
    let source = ChannelSource::new();
    source.push_list(list(0, 1), 1);
    let first = source.open_watch();
    // The default queue (the atomic in-order one), as `Kind::InOrder` selects it.
    let informer = Arc::new(informer(&source, Duration::ZERO, Kind::InOrder));
    let rec = Recorder::new();
    informer
        .add_event_handler(rec.clone(), HandlerOptions::new())
        .unwrap();
    let (stop, task) = start(&informer);
    assert!(informer.wait_for_sync().await);

    let old: BTreeSet<String> = list(0, 1).iter().map(|o| key(o)).collect();
    let new: BTreeSet<String> = list(OBJECTS / 4, 2).iter().map(|o| key(o)).collect();
    assert_eq!(judge(&informer, &old, &new), View::Old);

    // The reader polls until it sees the new list; the relist starts once it has read once.
    let started = Arc::new(AtomicBool::new(false));
    let reader = {
        let (informer, started) = (Arc::clone(&informer), Arc::clone(&started));
        let (old, new) = (old.clone(), new.clone());
        tokio::task::spawn_blocking(move || {
            let mut reads = 0u64;
            loop {
                let seen = judge(&informer, &old, &new);
                reads += 1;
                started.store(true, Ordering::SeqCst);
                if seen == View::New {
                    return reads;
                }
            }
        })
    };
    eventually("the reader has read", || started.load(Ordering::SeqCst)).await;
    source.push_list(list(OBJECTS / 4, 2), 2);
    let _second = source.open_watch();
    first.expire();
    let reads = reader.await.expect("the reader saw no mix");
    assert!(reads >= 2, "it read the old list, then the new one");

    // Every object was heard of: a quarter deleted, a quarter added, the rest updated.
    let total = 2 * OBJECTS as usize + OBJECTS as usize / 4;
    eventually("every notification of the relist", || rec.len() == total).await;
    assert_eq!(cache(&informer), rec.replay());
    let seen = rec.seen();
    let relist = &seen[OBJECTS as usize..];
    let deletes = relist
        .iter()
        .take_while(|s| matches!(s, common::Seen::Delete(..)))
        .count();
    assert_eq!(
        deletes,
        OBJECTS as usize / 4,
        "the deletions first, with the cached state (final state unknown)"
    );
    assert!(relist[deletes..].iter().all(|s| matches!(
        s,
        common::Seen::Update(_, 1, 2) | common::Seen::Add(_, 2, false)
    )));
    assert_eq!(
        relist[deletes..]
            .iter()
            .filter(|s| matches!(s, common::Seen::Add(..)))
            .count(),
        OBJECTS as usize / 4
    );
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// The default queue is the atomic in-order one: an informer built without choosing one
/// applies a relist as one change, so its cache has the relist's resource version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_queue_records_the_relists_resource_version_in_the_cache() {
    let source = ChannelSource::new();
    source.push_list(vec![obj("a", "x", 1)], 5);
    let _watch = source.open_watch();
    let informer = Arc::new(Informer::new(
        Arc::clone(&source),
        informer_store::FnIdentity::new(informer_store::key_func(|o: &Obj| Ok(key(o)))),
    ));
    let (stop, task) = start(&informer);
    assert!(informer.wait_for_sync().await);
    let indexer = Arc::clone(informer.lister().indexer());
    assert_eq!(
        informer_store::Store::last_sync_resource_version(&*indexer).as_deref(),
        Some("5"),
        "replaced in one step, with the list's version"
    );
    stop.cancel();
    task.await.unwrap().unwrap();
}
