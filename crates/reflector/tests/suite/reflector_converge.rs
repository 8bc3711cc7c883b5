//! Convergence under faults: a reflector against an in-memory server that keeps changing and
//! fails in every way the protocol allows. Whatever happens, once the faults stop the store equals
//! the server's state and the resume version is the server's; relists happen only after faults
//! that call for one; and while the server fails the request rate stays bounded.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::model_server::{Fault, ModelServer};
use common::*;
use informer_reflector::{BackoffConfig, Reflector};
use informer_store::{KnownObjects, ThreadSafeStore, key_func, meta_namespace_key};
use proptest::prelude::*;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone)]
enum Step {
    Put(u8),
    Delete(u8),
    ResetHistory,
    Fault(Fault),
    Wait(u64),
}

fn fault() -> impl Strategy<Value = Fault> {
    let code = prop::sample::select(vec![0_u16, 403, 410, 429, 500, 504]);
    prop_oneof![
        code.clone().prop_map(Fault::List),
        code.clone().prop_map(Fault::Page),
        code.clone().prop_map(Fault::WatchRefused),
        Just(Fault::ConnectionRefused),
        (0_usize..4, code).prop_map(|(n, c)| Fault::ErrorEvent(n, c)),
        (0_usize..4).prop_map(Fault::Break),
        (0_usize..4).prop_map(Fault::Close),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0_u8..8).prop_map(Step::Put),
        2 => (0_u8..8).prop_map(Step::Delete),
        1 => Just(Step::ResetHistory),
        3 => fault().prop_map(Step::Fault),
        4 => (0_u64..20_000).prop_map(Step::Wait),
    ]
}

/// Whether a fault can lead to a relist (client-go's rules): everything but 429 on a watch,
/// refused connections, and watch ends after at least one event.
fn may_relist(f: &Fault) -> bool {
    match f {
        Fault::List(_) | Fault::Page(_) => true,
        Fault::WatchRefused(code) | Fault::ErrorEvent(_, code) => *code != 429,
        Fault::ConnectionRefused => false,
        // A break or close before any event is a very short watch.
        Fault::Break(n) | Fault::Close(n) => *n == 0,
    }
}

fn content(store: &ThreadSafeStore<Obj>) -> Vec<(String, u32)> {
    let mut all: Vec<_> = store
        .list_keys()
        .iter()
        .map(|k| {
            let o = store.get_by_key(k).unwrap();
            (o.name.clone(), o.generation)
        })
        .collect();
    all.sort();
    all
}

fn name(i: u8) -> String {
    format!("obj-{i}")
}

async fn run(steps: Vec<Step>, seed: u64) -> Result<(), TestCaseError> {
    let server = ModelServer::new();
    for i in 0..4 {
        server.put(&name(i));
    }
    let store = Arc::new(ThreadSafeStore::new(key_func(|o: &Obj| {
        meta_namespace_key(None, &o.name)
    })));
    let reflector = Arc::new(
        Reflector::new(server.clone(), store.clone())
            .with_seed(seed)
            .with_page_size(3)
            .with_min_watch_timeout(Duration::from_secs(30)),
    );
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let (reflector, stop) = (reflector.clone(), stop.clone());
        async move { reflector.run(stop).await }
    });

    let mut relist_faults = 0;
    for step in &steps {
        match step {
            Step::Put(i) => server.put(&name(*i)),
            Step::Delete(i) => server.delete(&name(*i)),
            Step::ResetHistory => {
                relist_faults += 1;
                server.reset_history();
            }
            Step::Fault(f) => {
                relist_faults += usize::from(may_relist(f));
                server.inject(f.clone());
            }
            Step::Wait(ms) => tokio::time::sleep(Duration::from_millis(*ms)).await,
        }
        tokio::task::yield_now().await;
    }
    // Faults still queued may fire during recovery; they count as injected.
    server.clear_faults();
    // Recovery: the longest backoff delay is under a minute, a watch lasts at most a minute.
    tokio::time::sleep(Duration::from_secs(5 * 60)).await;

    prop_assert_eq!(content(&store), server.content());
    prop_assert_eq!(
        reflector.last_sync_resource_version(),
        server.head().to_string()
    );
    let lists = server
        .requests()
        .iter()
        .filter(|(kind, _, _)| *kind == "list")
        .count();
    // One initial list; each relist-worthy fault adds at most a list, a consistent relist and a
    // full list after an expired continue token.
    prop_assert!(
        lists <= 1 + 3 * relist_faults,
        "{lists} lists for {relist_faults} relist-worthy faults"
    );
    stop.cancel();
    task.await.unwrap();
    Ok(())
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn the_store_converges_to_the_servers_state_after_any_faults(
        steps in prop::collection::vec(step(), 0..80),
        seed in any::<u64>(),
    ) {
        paused_runtime().block_on(run(steps, seed))?;
    }
}

#[tokio::test(start_paused = true)]
async fn without_faults_there_is_one_list_however_long_the_watch_runs() {
    let server = ModelServer::new();
    let store = Arc::new(RecordingStore::new());
    let reflector = Arc::new(
        Reflector::new(server.clone(), store.clone())
            .with_seed(1)
            .with_min_watch_timeout(Duration::from_secs(30)),
    );
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let (reflector, stop) = (reflector.clone(), stop.clone());
        async move { reflector.run(stop).await }
    });
    // Thirty minutes of changes, one every 7 s, across many watch timeouts.
    for i in 0..260_u32 {
        server.put(&format!("o{}", i % 13));
        if i % 5 == 0 {
            server.delete(&format!("o{}", (i + 3) % 13));
        }
        tokio::time::sleep(Duration::from_secs(7)).await;
    }
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(store.content(), server.content());
    let requests = server.requests();
    let lists = requests.iter().filter(|(k, _, _)| *k == "list").count();
    let watches = requests.iter().filter(|(k, _, _)| *k == "watch").count();
    assert_eq!(lists, 1);
    // Watches of 30–60 s over 31 minutes, each resumed at the previous one's last version.
    assert!((31..=63).contains(&watches), "{watches} watches");
    assert_eq!(
        reflector.last_sync_resource_version(),
        server.head().to_string()
    );
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_failing_server_sees_a_bounded_request_rate() {
    let server = ModelServer::new();
    server.put("a");
    // Every request for the next while fails: lists with 500, watches refused.
    for _ in 0..200 {
        server.inject(Fault::List(500));
        server.inject(Fault::ConnectionRefused);
    }
    let store = Arc::new(RecordingStore::new());
    let reflector = Arc::new(Reflector::new(server.clone(), store.clone()).with_seed(3));
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let (reflector, stop) = (reflector.clone(), stop.clone());
        async move { reflector.run(stop).await }
    });
    tokio::time::sleep(Duration::from_secs(10 * 60)).await;
    let requests = server.requests().len();
    // Backoff 0.8 s doubling to a 30 s cap, jittered up to ×2: after the first minute at most
    // two requests a minute... well under 40 in ten minutes (client-go: about 0.22 QPS at most).
    assert!(requests <= 40, "{requests} requests in 10 minutes");
    assert!(requests >= 10, "{requests}: it keeps trying");
    assert!(store.content().is_empty());

    // Once the server recovers, the store catches up.
    server.clear_faults();
    tokio::time::sleep(Duration::from_secs(2 * 60)).await;
    assert_eq!(store.content(), server.content());
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_history_reset_is_a_410_and_one_relist() {
    let server = ModelServer::new();
    server.put("a");
    server.put("b");
    let store = Arc::new(RecordingStore::new());
    let reflector = Arc::new(
        Reflector::new(server.clone(), store.clone())
            .with_seed(5)
            .with_backoff(BackoffConfig {
                jitter: 0.0,
                ..BackoffConfig::default()
            }),
    );
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let (reflector, stop) = (reflector.clone(), stop.clone());
        async move { reflector.run(stop).await }
    });
    tokio::time::sleep(Duration::from_secs(5)).await;
    server.put("c");
    tokio::time::sleep(Duration::from_secs(5)).await;
    // Two changes, then the cache re-initialises before the watch could deliver them: every watch
    // closes and the history is gone, so the client cannot resume from 4.
    server.delete("b");
    server.put("a");
    server.reset_history();
    tokio::time::sleep(Duration::from_secs(5)).await;

    let shapes: Vec<String> = server
        .requests()
        .iter()
        .map(|(k, rv, _)| format!("{k}@{rv}"))
        .collect();
    // list at 0, watch from 3 (+ c at 4), re-watch from 4 → 410 → relist at 4 after 0.8 s,
    // watch from the new list's version.
    assert_eq!(
        shapes,
        ["list@0", "watch@3", "watch@4", "list@4", "watch@6"]
    );
    assert_eq!(store.content(), server.content());
    stop.cancel();
    task.await.unwrap();
}
