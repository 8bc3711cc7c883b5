//! The reconciler's guarantees, each with a test: level-triggered reads, deletions as a state,
//! one key at a time under concurrency, retries with per-key backoff reset on success,
//! requeues, caches synced first, owners woken by their children (deleted ones included),
//! and a graceful, bounded shutdown.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use informer::SharedIndexInformer;
use informer_reflector::{
    Error, ListPage, ListParams, ListerWatcher, WatchEvent, WatchParams, WatchStream,
};
use informer_runtime::{Action, Controller, Expectations, Target};
use informer_store::{FnIdentity, IndexValues, index_func, indexers, key_func};
use informer_testing::eventually;
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const LONG: Duration = Duration::from_secs(30);

/// An object: a name, a version, and the name of its owner (for children).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Obj {
    name: String,
    rv: u64,
    owner: String,
}

fn obj(name: &str, rv: u64) -> Arc<Obj> {
    child(name, rv, "")
}

fn child(name: &str, rv: u64, owner: &str) -> Arc<Obj> {
    Arc::new(Obj {
        name: name.into(),
        rv,
        owner: owner.into(),
    })
}

type Tx = mpsc::UnboundedSender<Result<WatchEvent<Obj>, Error>>;
type Rx = mpsc::UnboundedReceiver<Result<WatchEvent<Obj>, Error>>;

/// A source driven by the test: one list, then one watch fed through a channel.
struct Source {
    list: Mutex<Option<ListPage<Obj>>>,
    watch: Mutex<Option<Rx>>,
    /// Holds the list back until the test lets it go.
    gate: tokio::sync::Semaphore,
}

impl Source {
    fn new(items: Vec<Arc<Obj>>, open: bool) -> (Arc<Self>, Tx) {
        let (tx, rx) = mpsc::unbounded_channel();
        let source = Arc::new(Self {
            list: Mutex::new(Some(ListPage::new(items, "1"))),
            watch: Mutex::new(Some(rx)),
            gate: tokio::sync::Semaphore::new(usize::from(open)),
        });
        (source, tx)
    }
}

impl ListerWatcher<Obj> for Source {
    async fn list(&self, _: &ListParams) -> Result<ListPage<Obj>, Error> {
        let _permit = self.gate.acquire().await.expect("never closed");
        self.gate.add_permits(1);
        let page = self.list.lock().take();
        match page {
            Some(page) => Ok(page),
            None => std::future::pending().await,
        }
    }

    async fn watch(&self, _: &WatchParams) -> Result<WatchStream<Obj>, Error> {
        let rx = self.watch.lock().take();
        let Some(rx) = rx else {
            return std::future::pending().await;
        };
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        Ok(stream.boxed())
    }
}

fn send(tx: &Tx, event: fn(Arc<Obj>, String) -> WatchEvent<Obj>, o: Arc<Obj>) {
    let rv = o.rv.to_string();
    tx.send(Ok(event(o, rv))).unwrap();
}

fn informer(source: Arc<Source>) -> Arc<SharedIndexInformer<Obj>> {
    Arc::new(SharedIndexInformer::new(
        source,
        FnIdentity::new(key_func(|o: &Obj| Ok(o.name.clone()))).with_indexers(indexers([(
            "owner",
            index_func(|o: &Obj| Ok(IndexValues::one(o.owner.as_str()))),
        )])),
    ))
}

fn run_informer(
    informer: &Arc<SharedIndexInformer<Obj>>,
    stop: &CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let (informer, stop) = (Arc::clone(informer), stop.clone());
    tokio::spawn(async move { informer.run(stop).await.unwrap() })
}

/// Notifications the handlers of `informer` have handled, all together.
fn delivered(informer: &SharedIndexInformer<Obj>) -> usize {
    informer
        .stats()
        .handlers
        .iter()
        .map(|h| h.delivered())
        .sum()
}

/// The state a reconcile saw: the version, or `None` for a deletion.
fn state(target: &Target<Obj>) -> Option<u64> {
    match target {
        Target::Live(o) => Some(o.rv),
        Target::Deleted { .. } => None,
    }
}

/// What reconciles saw: per key, the states in order (`None` for a deletion).
#[derive(Default)]
struct Log {
    seen: Mutex<Vec<(String, Option<u64>)>>,
    running: Mutex<HashMap<String, usize>>,
    overlapped: AtomicBool,
    calls: AtomicUsize,
}

impl Log {
    fn of(&self, key: &str) -> Vec<Option<u64>> {
        self.seen
            .lock()
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| *v)
            .collect()
    }
}

/// Level-triggered: a burst of updates to one key, while its reconcile runs, yields one more
/// reconcile that reads the latest version; a deletion is reported as a state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciles_read_the_cache_and_deletions_are_a_state() {
    let (source, tx) = Source::new(vec![obj("a", 1)], true);
    let informer = informer(source);
    let stop = CancellationToken::new();
    let running = run_informer(&informer, &stop);
    let log = Arc::new(Log::default());
    let (gate_tx, gate_rx) = tokio::sync::watch::channel(false);
    let controller = Controller::new(Arc::clone(&informer));
    let done = tokio::spawn(controller.run(
        stop.clone(),
        Arc::clone(&log),
        move |request, log| {
            let mut gate = gate_rx.clone();
            async move {
                let state = match &request.target {
                    Target::Live(o) => Some(o.rv),
                    Target::Deleted { last_known } => {
                        assert_eq!(last_known.as_ref().map(|o| o.rv), Some(5));
                        None
                    }
                };
                log.seen.lock().push((request.key.to_string(), state));
                // The first reconcile waits while the updates arrive.
                let _ = gate.wait_for(|open| *open).await;
                Ok::<_, ()>(Action::await_change())
            }
        },
        |_, _, _| Action::backoff(),
    ));
    eventually("the first reconcile", || log.of("a") == [Some(1)]).await;
    for rv in 2..5 {
        send(&tx, WatchEvent::modified, obj("a", rv));
    }
    eventually("the cache at 4", || {
        informer.lister().get("a").is_some_and(|o| o.rv == 4)
    })
    .await;
    gate_tx.send_replace(true);
    eventually("one more reconcile, of the latest", || {
        log.of("a") == [Some(1), Some(4)]
    })
    .await;
    send(&tx, WatchEvent::deleted, obj("a", 5));
    eventually("the deletion reconciled", || {
        log.of("a") == [Some(1), Some(4), None]
    })
    .await;
    stop.cancel();
    done.await.unwrap().unwrap();
    running.await.unwrap();
}

/// Four workers, forty keys updated over and over: never two reconciles of one key at once,
/// and every key's last reconcile saw its last version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_reconciles_never_share_a_key() {
    let items: Vec<_> = (0..40).map(|i| obj(&format!("k{i}"), 1)).collect();
    let (source, tx) = Source::new(items, true);
    let informer = informer(source);
    let stop = CancellationToken::new();
    let running = run_informer(&informer, &stop);
    let log = Arc::new(Log::default());
    let controller = Controller::new(Arc::clone(&informer)).concurrency(4);
    let done = tokio::spawn(controller.run(
        stop.clone(),
        Arc::clone(&log),
        |request, log| async move {
            let key = request.key.to_string();
            {
                let mut running = log.running.lock();
                let n = running.entry(key.clone()).or_default();
                *n += 1;
                if *n > 1 {
                    log.overlapped.store(true, Ordering::SeqCst);
                }
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
            if let Target::Live(o) = &request.target {
                log.seen.lock().push((key.clone(), Some(o.rv)));
            }
            *log.running.lock().get_mut(&key).unwrap() -= 1;
            Ok::<_, ()>(Action::await_change())
        },
        |_, _, _| Action::backoff(),
    ));
    for rv in 2..=20 {
        for i in 0..40 {
            send(&tx, WatchEvent::modified, obj(&format!("k{i}"), rv));
        }
        tokio::task::yield_now().await;
    }
    eventually("every key reconciled at its last version", || {
        (0..40).all(|i| log.of(&format!("k{i}")).last() == Some(&Some(20)))
    })
    .await;
    assert!(
        !log.overlapped.load(Ordering::SeqCst),
        "a key reconciled twice at once"
    );
    let reconciles = log.seen.lock().len();
    assert!(
        reconciles < 40 * 20,
        "changes coalesced: {reconciles} reconciles for 800 changes"
    );
    stop.cancel();
    done.await.unwrap().unwrap();
    running.await.unwrap();
}

/// An error is retried with the key's backoff (5, 10, 20 ms on the paused clock); a success
/// resets it; `requeue` reconciles again after its delay.
#[tokio::test(start_paused = true)]
async fn errors_back_off_per_key_and_success_resets() {
    let (source, _tx) = Source::new(vec![obj("a", 1)], true);
    let informer = informer(source);
    let stop = CancellationToken::new();
    let running = run_informer(&informer, &stop);
    let times = Arc::new(Mutex::new(Vec::new()));
    let controller = Controller::new(Arc::clone(&informer));
    let queue = controller.queue().clone();
    let begun = tokio::time::Instant::now();
    let done = tokio::spawn(controller.run(
        stop.clone(),
        Arc::clone(&times),
        move |_request, times| async move {
            let n = {
                let mut times = times.lock();
                times.push(begun.elapsed());
                times.len()
            };
            match n {
                1..=3 => Err("not yet"),
                4 => Ok(Action::requeue(Duration::from_secs(1))),
                _ => Ok(Action::await_change()),
            }
        },
        |_, error: &&str, _| {
            assert_eq!(*error, "not yet");
            Action::backoff()
        },
    ));
    while times.lock().len() < 5 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let times = times.lock().clone();
    let first = times[0];
    let gaps: Vec<_> = times.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(
        gaps[..3],
        [
            Duration::from_millis(5),
            Duration::from_millis(10),
            Duration::from_millis(20)
        ],
        "backoff after the first reconcile at {first:?}"
    );
    assert_eq!(gaps[3], Duration::from_secs(1), "the requeue");
    assert_eq!(
        queue.num_requeues(&Arc::from("a")),
        0,
        "success reset the backoff"
    );
    stop.cancel();
    done.await.unwrap().unwrap();
    running.await.unwrap();
}

/// No reconcile starts before every informer the controller reads from has synced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciles_wait_for_every_cache() {
    let (main_source, _tx) = Source::new(vec![obj("a", 1)], true);
    let (child_source, _ctx) = Source::new(vec![child("c1", 1, "a")], false);
    let main = informer(main_source);
    let children = informer(Arc::clone(&child_source));
    let stop = CancellationToken::new();
    let running = [run_informer(&main, &stop), run_informer(&children, &stop)];
    let log = Arc::new(Log::default());
    let controller = Controller::new(Arc::clone(&main))
        .owns(Arc::clone(&children), |c: &Obj| vec![c.owner.clone()]);
    let queue = controller.queue().clone();
    // Each reconcile records whether the children's cache had synced when it started.
    let early = Arc::new(AtomicBool::new(false));
    let ctx = Arc::new((Arc::clone(&log), Arc::clone(&children), Arc::clone(&early)));
    let done = tokio::spawn(controller.run(
        stop.clone(),
        ctx,
        |_request, ctx| async move {
            let (log, children, early) = &*ctx;
            if !children.has_synced() {
                early.store(true, Ordering::SeqCst);
            }
            log.calls.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ()>(Action::await_change())
        },
        |_, _, _| Action::backoff(),
    ));
    assert!(main.wait_for_sync().await);
    // The main cache is ready and has queued its key; the children's list is held back.
    eventually("the main key queued, or reconciled", || {
        queue.len() == 1 || log.calls.load(Ordering::SeqCst) > 0
    })
    .await;
    child_source.gate.add_permits(1);
    eventually("reconciles once both caches synced", || {
        log.calls.load(Ordering::SeqCst) >= 1
    })
    .await;
    assert!(
        !early.load(Ordering::SeqCst),
        "a reconcile before every cache synced"
    );
    stop.cancel();
    done.await.unwrap().unwrap();
    for r in running {
        r.await.unwrap();
    }
}

/// A child's change wakes its owner — both owners when it moves, and the owner of a deleted
/// child (a deletion carries the child's last known state).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_wake_their_owners() {
    let (main_source, _tx) = Source::new(vec![obj("a", 1), obj("b", 1)], true);
    let (child_source, ctx) = Source::new(vec![child("c1", 1, "a")], true);
    let main = informer(main_source);
    let children = informer(child_source);
    let stop = CancellationToken::new();
    let running = [run_informer(&main, &stop), run_informer(&children, &stop)];
    let log = Arc::new(Log::default());
    let controller = Controller::new(Arc::clone(&main))
        .owns(Arc::clone(&children), |c: &Obj| vec![c.owner.clone()]);
    let done = tokio::spawn(controller.run(
        stop.clone(),
        Arc::clone(&log),
        |request, log| async move {
            log.seen.lock().push((request.key.to_string(), Some(0)));
            Ok::<_, ()>(Action::await_change())
        },
        |_, _, _| Action::backoff(),
    ));
    eventually("the initial reconciles", || {
        log.of("a").len() == 1 && log.of("b").len() == 1
    })
    .await;
    send(&ctx, WatchEvent::modified, child("c1", 2, "b")); // moves from a to b
    eventually("both owners woken", || {
        log.of("a").len() == 2 && log.of("b").len() == 2
    })
    .await;
    send(&ctx, WatchEvent::deleted, child("c1", 3, "b"));
    eventually("the deleted child's owner woken", || log.of("b").len() == 3).await;
    assert_eq!(log.of("a").len(), 2);
    stop.cancel();
    done.await.unwrap().unwrap();
    for r in running {
        r.await.unwrap();
    }
}

/// On stop no new reconcile starts; one under way gets the shutdown timeout, then is
/// cancelled; the controller's handlers are removed and the informer goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_is_graceful_and_bounded() {
    let (source, tx) = Source::new(vec![obj("stuck", 1)], true);
    let informer = informer(source);
    let informer_stop = CancellationToken::new();
    let running = run_informer(&informer, &informer_stop);
    let entered = Arc::new(AtomicBool::new(false));
    let stop = CancellationToken::new();
    let controller =
        Controller::new(Arc::clone(&informer)).shutdown_timeout(Duration::from_millis(100));
    let queue = controller.queue().clone();
    let done = tokio::spawn(controller.run(
        stop.clone(),
        Arc::clone(&entered),
        |_request, entered| async move {
            entered.store(true, Ordering::SeqCst);
            std::future::pending::<()>().await;
            Ok::<_, ()>(Action::await_change())
        },
        |_, _, _| Action::backoff(),
    ));
    eventually("the reconcile is under way", || {
        entered.load(Ordering::SeqCst)
    })
    .await;
    stop.cancel();
    tokio::time::timeout(LONG, done)
        .await
        .expect("bounded by the shutdown timeout")
        .unwrap()
        .unwrap();
    assert!(queue.is_shutting_down());
    // The informer is shared: it goes on, without the controller's handler.
    send(&tx, WatchEvent::added, obj("later", 2));
    eventually("the informer goes on", || {
        informer.lister().get("later").is_some()
    })
    .await;
    assert_eq!(queue.len(), 0, "nothing queued for a stopped controller");
    informer_stop.cancel();
    running.await.unwrap();
}

/// A deletion that arrives while an earlier deletion of the same key is being reconciled keeps
/// its own last known state: the earlier reconcile's success does not erase it, and the next
/// reconcile is told what was deleted last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_during_the_reconcile_of_an_earlier_one_keeps_its_last_known_state() {
    let (source, tx) = Source::new(vec![obj("a", 1)], true);
    let informer = informer(source);
    let stop = CancellationToken::new();
    let running = run_informer(&informer, &stop);
    let log = Arc::new(Log::default());
    let (gate_tx, gate_rx) = tokio::sync::watch::channel(false);
    // Two workers: `b` is reconciled while `a`'s first deletion waits.
    let controller = Controller::new(Arc::clone(&informer)).concurrency(2);
    let done = tokio::spawn(controller.run(
        stop.clone(),
        Arc::clone(&log),
        move |request, log| {
            let mut gate = gate_rx.clone();
            async move {
                let state = match &request.target {
                    Target::Live(o) => Some(o.rv),
                    Target::Deleted { last_known } => last_known.as_ref().map(|o| 100 + o.rv),
                };
                log.seen.lock().push((request.key.to_string(), state));
                if state == Some(102) {
                    let _ = gate.wait_for(|open| *open).await;
                }
                Ok::<_, ()>(Action::await_change())
            }
        },
        |_, _, _| Action::backoff(),
    ));
    eventually("the first reconcile", || log.of("a") == [Some(1)]).await;
    send(&tx, WatchEvent::deleted, obj("a", 2));
    eventually("the first deletion under way", || {
        log.of("a") == [Some(1), Some(102)]
    })
    .await;
    // Recreated and deleted again while that reconcile runs; `b`'s reconcile shows that the
    // controller's handler has seen both (it gets the informer's changes in order).
    send(&tx, WatchEvent::added, obj("a", 3));
    send(&tx, WatchEvent::deleted, obj("a", 4));
    send(&tx, WatchEvent::added, obj("b", 5));
    eventually("b reconciled", || log.of("b") == [Some(5)]).await;
    gate_tx.send_replace(true);
    eventually("the second deletion reconciled", || log.of("a").len() == 3).await;
    assert_eq!(
        log.of("a"),
        [Some(1), Some(102), Some(104)],
        "the second deletion's reconcile gets the state deleted last (104), not none"
    );
    stop.cancel();
    done.await.unwrap().unwrap();
    running.await.unwrap();
}

/// What the owner's reconciles did in [`creates_with_a_lagging_cache`].
#[derive(Default)]
struct Writes {
    /// Children created, in order, not yet delivered to the child informer.
    held: Mutex<Vec<Arc<Obj>>>,
    created: AtomicUsize,
    reconciles: AtomicUsize,
}

/// An owner `p` wants three children; its reconcile counts them in the child cache and creates
/// the missing ones. The creations reach the cache only when the test delivers them, after
/// the owner was changed (and so reconciled) twice more. Returns how many were created.
async fn creates_with_a_lagging_cache(expecting: bool) -> usize {
    const WANTED: usize = 3;
    let (main_source, tx) = Source::new(vec![obj("p", 1)], true);
    let (child_source, ctx) = Source::new(Vec::new(), true);
    let main = informer(main_source);
    let children = informer(child_source);
    let stop = CancellationToken::new();
    let running = [run_informer(&main, &stop), run_informer(&children, &stop)];
    let expectations = Expectations::new();
    let owners = |c: &Obj| vec![c.owner.clone()];
    let controller = Controller::new(Arc::clone(&main));
    let controller = if expecting {
        controller.owns_expecting(Arc::clone(&children), owners, &expectations)
    } else {
        controller.owns(Arc::clone(&children), owners)
    };
    let writes = Arc::new(Writes::default());
    let context = Arc::new((
        Arc::clone(&writes),
        Arc::clone(&children),
        expectations.clone(),
    ));
    let done = tokio::spawn(controller.run(
        stop.clone(),
        context,
        move |request, context| async move {
            let (writes, children, expectations) = &*context;
            let key = request.key.to_string();
            let live = matches!(request.target, Target::Live(_));
            if live && (!expecting || expectations.satisfied(&key)) {
                let have = children.lister().by_index("owner", &key).unwrap().len();
                let missing = WANTED.saturating_sub(have);
                // Recorded before the writes, which the cache may see at once.
                expectations.expect_creations(&key, missing);
                for _ in 0..missing {
                    let n = writes.created.fetch_add(1, Ordering::SeqCst);
                    writes.held.lock().push(child(&format!("c{n}"), 1, &key));
                }
            }
            writes.reconciles.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ()>(Action::await_change())
        },
        |_, _, _| Action::backoff(),
    ));
    eventually("the first reconcile", || {
        writes.reconciles.load(Ordering::SeqCst) == 1
    })
    .await;
    for rv in 2..4 {
        send(&tx, WatchEvent::modified, obj("p", rv));
        eventually("the owner reconciled again", || {
            writes.reconciles.load(Ordering::SeqCst) == rv as usize
        })
        .await;
    }
    // The cache catches up with every creation so far.
    let held: Vec<_> = writes.held.lock().drain(..).collect();
    let delivered = held.len();
    for c in held {
        send(&ctx, WatchEvent::added, c);
    }
    eventually("every creation in the cache", || {
        children.lister().len() == delivered
    })
    .await;
    // Woken by its children (and changed once more), the owner finds what it wants.
    send(&tx, WatchEvent::modified, obj("p", 4));
    eventually(
        "the owner reconciled with its children in the cache",
        || writes.reconciles.load(Ordering::SeqCst) >= 4,
    )
    .await;
    if expecting {
        assert_eq!(expectations.pending("p"), Some((0, 0)));
        // The owner deleted: its record goes with it.
        send(&tx, WatchEvent::deleted, obj("p", 5));
        eventually("the deleted owner's record dropped", || {
            expectations.pending("p").is_none()
        })
        .await;
    }
    stop.cancel();
    done.await.unwrap().unwrap();
    for r in running {
        r.await.unwrap();
    }
    writes.created.load(Ordering::SeqCst)
}

/// With expectations, an owner reconciled while its cache lags its own creations creates each
/// child once; without, every reconcile in the lag creates the whole set again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expectations_keep_a_lagging_cache_from_duplicating_creations() {
    assert_eq!(creates_with_a_lagging_cache(true).await, 3);
    // Three reconciles in the lag create three each; while the cache fills, one woken by a
    // child may count some and create the rest again.
    let without = creates_with_a_lagging_cache(false).await;
    assert!(without >= 9, "{without}");
}

/// An owner deleted while a reconcile of it is still running: that reconcile sets its
/// expectations after the deletion's handler dropped them, and the deletion's reconcile, which
/// comes after (one key at a time), drops them again, so no record outlives its owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expectations_set_by_a_reconcile_running_at_the_deletion_are_dropped_after_it() {
    let (main_source, tx) = Source::new(vec![obj("p", 1)], true);
    let (child_source, _ctx) = Source::new(Vec::new(), true);
    let (main, children) = (informer(main_source), informer(child_source));
    let stop = CancellationToken::new();
    let running = [run_informer(&main, &stop), run_informer(&children, &stop)];
    let expectations = Expectations::new();
    let controller = Controller::new(Arc::clone(&main)).owns_expecting(
        Arc::clone(&children),
        |c: &Obj| vec![c.owner.clone()],
        &expectations,
    );
    let (open_tx, open_rx) = tokio::sync::watch::channel(false);
    let log = Arc::new(Log::default());
    let context = Arc::new((Arc::clone(&log), expectations.clone()));
    let done = tokio::spawn(controller.run(
        stop.clone(),
        context,
        move |request, context| {
            let mut open = open_rx.clone();
            async move {
                let (log, expectations) = &*context;
                let live = matches!(request.target, Target::Live(_));
                log.seen
                    .lock()
                    .push((request.key.to_string(), live.then_some(1)));
                if live {
                    // Creates three children, once the test lets it.
                    let _ = open.wait_for(|o| *o).await;
                    expectations.expect_creations(&request.key, 3);
                }
                Ok::<_, ()>(Action::await_change())
            }
        },
        |_, _, _| Action::backoff(),
    ));
    eventually("the live reconcile under way", || log.of("p") == [Some(1)]).await;
    send(&tx, WatchEvent::deleted, obj("p", 2));
    let handled = || delivered(&main);
    eventually("the deletion handled", || handled() == 2).await;
    open_tx.send_replace(true);
    eventually("the deletion reconciled", || log.of("p") == [Some(1), None]).await;
    eventually("no record left", || expectations.pending("p").is_none()).await;
    stop.cancel();
    done.await.unwrap().unwrap();
    for r in running {
        r.await.unwrap();
    }
}

/// A predicate on the main informer's updates: an update it refuses is not queued; one it
/// accepts is; adds and deletions always are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_predicate_keeps_the_updates_it_refuses_out_of_the_queue() {
    let (source, tx) = Source::new(vec![obj("a", 1)], true);
    let main = informer(source);
    let stop = CancellationToken::new();
    let running = run_informer(&main, &stop);
    let log = Arc::new(Log::default());
    // Only a change of owner is worth a reconcile.
    let controller =
        Controller::new(Arc::clone(&main)).predicate(|old: &Obj, new: &Obj| old.owner != new.owner);
    let queue = controller.queue().clone();
    let done = tokio::spawn(controller.run(
        stop.clone(),
        Arc::clone(&log),
        |request, log| async move {
            log.seen
                .lock()
                .push((request.key.to_string(), state(&request.target)));
            Ok::<_, ()>(Action::await_change())
        },
        |_, _, _| Action::backoff(),
    ));
    eventually("the add reconciled", || log.of("a") == [Some(1)]).await;
    let handled = || delivered(&main);
    // The same owner: refused.
    send(&tx, WatchEvent::modified, obj("a", 2));
    eventually("the refused update handled", || handled() == 2).await;
    assert_eq!(queue.len(), 0);
    assert_eq!(log.of("a"), [Some(1)]);
    // Another owner: accepted.
    send(&tx, WatchEvent::modified, child("a", 3, "x"));
    eventually("the accepted update reconciled", || {
        log.of("a") == [Some(1), Some(3)]
    })
    .await;
    // An add and a deletion go through whatever the predicate says.
    send(&tx, WatchEvent::added, obj("b", 4));
    send(&tx, WatchEvent::deleted, child("a", 5, "x"));
    eventually("the add and the deletion reconciled", || {
        log.of("b") == [Some(4)] && log.of("a") == [Some(1), Some(3), None]
    })
    .await;
    stop.cancel();
    done.await.unwrap().unwrap();
    running.await.unwrap();
}

/// A reconcile that outlives the controller's `reconcile_timeout` is cancelled (its future
/// dropped), counted as a timed-out error, and retried with backoff; the retry that finishes in
/// time succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_past_its_timeout_is_cancelled_and_retried() {
    struct Outcomes(Mutex<Vec<informer_runtime::ReconcileOutcome>>);
    impl informer_runtime::ReconcileObserver for Outcomes {
        fn reconciled(&self, outcome: informer_runtime::ReconcileOutcome) {
            self.0.lock().push(outcome);
        }
    }
    /// Set when the hung reconcile's future is dropped.
    struct Dropped(Arc<AtomicBool>);
    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    let (source, _tx) = Source::new(vec![obj("a", 1)], true);
    let informer = informer(source);
    let stop = CancellationToken::new();
    let running = run_informer(&informer, &stop);
    let outcomes = Arc::new(Outcomes(Mutex::new(Vec::new())));
    let cancelled = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let controller = Controller::new(Arc::clone(&informer))
        .reconcile_timeout(Duration::from_millis(50))
        .observer(Arc::clone(&outcomes) as Arc<dyn informer_runtime::ReconcileObserver>);
    let done = tokio::spawn(controller.run(
        stop.clone(),
        Arc::new((Arc::clone(&cancelled), Arc::clone(&calls))),
        |_request, ctx: Arc<(Arc<AtomicBool>, Arc<AtomicUsize>)>| async move {
            let (cancelled, calls) = &*ctx;
            if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                // The first attempt hangs on a call that never answers.
                let _dropped = Dropped(Arc::clone(cancelled));
                std::future::pending::<()>().await;
            }
            Ok::<_, ()>(Action::await_change())
        },
        |_, _, _| panic!("the error policy is not called on a timeout"),
    ));
    eventually("the retry succeeded", || {
        outcomes.0.lock().iter().any(|o| o.succeeded)
    })
    .await;
    assert!(
        cancelled.load(Ordering::SeqCst),
        "the hung reconcile was dropped"
    );
    let seen = outcomes.0.lock().clone();
    assert!(seen[0].timed_out && !seen[0].succeeded, "{seen:?}");
    assert_eq!(seen[0].action, Action::backoff(), "{seen:?}");
    assert!(seen[1].succeeded && !seen[1].timed_out, "{seen:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    stop.cancel();
    done.await.unwrap().unwrap();
    running.await.unwrap();
}

/// A reconcile reaches the controller's stop through its request: one waiting on
/// `request.cancel` gives up when the controller stops, well before the shutdown timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_hears_the_stop_through_its_request() {
    let (source, _tx) = Source::new(vec![obj("a", 1)], true);
    let informer = informer(source);
    let stop = CancellationToken::new();
    let running = run_informer(&informer, &stop);
    let started = Arc::new(AtomicBool::new(false));
    let gave_up = Arc::new(AtomicBool::new(false));
    let controller = Controller::new(Arc::clone(&informer)).shutdown_timeout(Duration::MAX);
    let done = tokio::spawn(controller.run(
        stop.clone(),
        Arc::new((Arc::clone(&started), Arc::clone(&gave_up))),
        |request, ctx: Arc<(Arc<AtomicBool>, Arc<AtomicBool>)>| async move {
            ctx.0.store(true, Ordering::SeqCst);
            // Long work, tied to the request's cancellation.
            request.cancel.cancelled().await;
            ctx.1.store(true, Ordering::SeqCst);
            Ok::<_, ()>(Action::await_change())
        },
        |_, _, _| Action::backoff(),
    ));
    eventually("the reconcile started", || started.load(Ordering::SeqCst)).await;
    stop.cancel();
    // With no limit on the shutdown, the run ends only if the reconcile gave up by itself.
    tokio::time::timeout(LONG, done)
        .await
        .expect("the controller stops")
        .unwrap()
        .unwrap();
    assert!(gave_up.load(Ordering::SeqCst));
    running.await.unwrap();
}

/// A controller that cannot start (one of its informers stopped before it registered) and a
/// controller that is dropped unrun leave no handler behind on the informers they did register
/// with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_that_fails_to_start_leaves_no_handler_behind() {
    let (source, _tx) = Source::new(vec![obj("a", 1)], true);
    let main = informer(source);
    let (child_source, _child_tx) = Source::new(vec![], true);
    let children = informer(child_source);
    let stop_children = CancellationToken::new();
    stop_children.cancel();
    Arc::clone(&children).run(stop_children).await.unwrap();
    assert!(children.is_stopped());

    let controller = Controller::new(Arc::clone(&main))
        .owns(Arc::clone(&children), |c: &Obj| vec![c.owner.clone()]);
    assert_eq!(
        main.stats().handlers.len(),
        1,
        "the main handler registered"
    );
    let result = controller
        .run(
            CancellationToken::new(),
            Arc::new(()),
            |_, _| async { Ok::<_, ()>(Action::await_change()) },
            |_, _, _| Action::backoff(),
        )
        .await;
    assert!(result.is_err(), "the stopped informer refused its handler");
    assert!(
        main.stats().handlers.is_empty(),
        "the main informer's handler was removed"
    );

    let unrun = Controller::new(Arc::clone(&main));
    assert_eq!(main.stats().handlers.len(), 1);
    drop(unrun);
    assert!(
        main.stats().handlers.is_empty(),
        "dropped with its controller"
    );
}
