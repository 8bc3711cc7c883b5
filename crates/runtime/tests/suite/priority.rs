//! The controller's priority queue: a change made while a backlog of 100,000 initial keys drains
//! is reconciled before the backlog has drained, where client-go's first-in-first-out queue
//! reconciles it last.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use informer::SharedIndexInformer;
use informer_reflector::{
    Error, FakeListerWatcher, ListPage, ListParams, ListerWatcher, WatchEvent, WatchParams,
    WatchStream,
};
use informer_runtime::{Action, Controller, Request};
use informer_store::{FnIdentity, key_func};
use informer_workqueue::WorkQueue;
use parking_lot::Mutex;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

/// The initial list.
const BACKLOG: usize = 100_000;

/// How long any wait of these tests may take: generous, for a loaded machine in debug.
const LONG: Duration = Duration::from_secs(120);

/// An object: its namespace, name and resource version.
#[derive(Debug)]
struct Obj {
    namespace: String,
    name: String,
    rv: String,
}

fn obj(i: usize, rv: &str) -> Arc<Obj> {
    Arc::new(Obj {
        namespace: format!("ns-{}", i % 10),
        name: format!("obj-{i}"),
        rv: rv.into(),
    })
}

fn key_of(i: usize) -> String {
    format!("ns-{}/obj-{i}", i % 10)
}

type Rx = mpsc::UnboundedReceiver<WatchEvent<Obj>>;

/// Lists the backlog once, then watches what the test sends.
struct Source {
    /// Lists as scripted: the backlog, then never again.
    list: FakeListerWatcher<Obj>,
    watch: Mutex<Option<Rx>>,
}

impl ListerWatcher<Obj> for Source {
    async fn list(&self, params: &ListParams) -> Result<ListPage<Obj>, Error> {
        self.list.list(params).await
    }

    async fn watch(&self, _: &WatchParams) -> Result<WatchStream<Obj>, Error> {
        let rx = self.watch.lock().take();
        match rx {
            Some(mut rx) => {
                Ok(
                    futures::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|event| event.map(Ok)))
                        .boxed(),
                )
            }
            None => std::future::pending().await,
        }
    }
}

fn version(o: &Obj) -> Option<&str> {
    Some(&o.rv)
}

/// An informer listing objects `objects` (at version 1), and the sender of its watch.
struct Fixture {
    informer: Arc<SharedIndexInformer<Obj>>,
    tx: mpsc::UnboundedSender<WatchEvent<Obj>>,
    objects: std::ops::Range<usize>,
}

fn fixture(objects: std::ops::Range<usize>) -> Fixture {
    let (tx, rx) = mpsc::unbounded_channel();
    let list = FakeListerWatcher::new();
    list.push_list(ListPage::new(
        objects.clone().map(|i| obj(i, "1")).collect(),
        "1",
    ));
    let source = Source {
        list,
        watch: Mutex::new(Some(rx)),
    };
    let identity = FnIdentity::new(key_func(|o: &Obj| {
        Ok(format!("{}/{}", o.namespace, o.name))
    }))
    .with_resource_version(Arc::new(version));
    let informer = Arc::new(SharedIndexInformer::new(source, identity));
    Fixture {
        informer,
        tx,
        objects,
    }
}

impl Fixture {
    fn run(&self, stop: &CancellationToken) -> tokio::task::JoinHandle<()> {
        let (informer, stop) = (Arc::clone(&self.informer), stop.clone());
        tokio::spawn(async move { informer.run(stop).await.unwrap() })
    }

    /// Updates the last object listed (to version 2), and waits until the informer's handlers
    /// have taken the update.
    async fn change_last(&self) {
        let last = self.objects.end - 1;
        let update = WatchEvent::modified(obj(last, "2"), "2".to_string());
        self.tx.send(update).unwrap();
        let deadline = tokio::time::Instant::now() + LONG;
        while delivered(&self.informer) < self.objects.len() + 1 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the update never reached the handler"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

/// Notifications the handlers of `informer` have handled, all together.
fn delivered(informer: &SharedIndexInformer<Obj>) -> usize {
    let stats = informer.stats();
    stats.handlers.iter().map(|h| h.delivered()).sum()
}

/// Waits until `rx`'s value meets `cond`, for at most [`LONG`].
async fn wait_for<T>(what: &str, rx: &mut watch::Receiver<T>, cond: impl FnMut(&T) -> bool) {
    tokio::time::timeout(LONG, rx.wait_for(cond))
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
        .expect("the reconciles' log is kept");
}

/// What the reconciles have done: how many there were, and how many came before the first of
/// the watched key.
type Log = (usize, Option<usize>);

/// A reconcile that logs its key against `watched` and, the first one, waits for `gate`.
fn reconcile(
    watched: String,
    log: watch::Sender<Log>,
    gate: watch::Receiver<bool>,
) -> impl Fn(Request<Obj>, Arc<()>) -> BoxFuture<'static, Result<Action, ()>> + Send + Sync {
    move |request, _ctx| {
        let mut gate = gate.clone();
        log.send_modify(|(count, at)| {
            if *request.key == *watched && at.is_none() {
                *at = Some(*count);
            }
            *count += 1;
        });
        Box::pin(async move {
            // The first reconcile holds the others back until the change is queued.
            let _ = gate.wait_for(|open| *open).await;
            Ok(Action::await_change())
        })
    }
}

/// Runs `controller` (one reconcile at a time) over `main`'s objects; once its first reconcile
/// has begun, updates the last object of `changed` (`main` itself, or an informer `controller`
/// relates to it), lets the reconciles go on once the update is queued, and waits for every
/// key to be reconciled. Returns how many reconciles came before the one of the last main key,
/// and how many there were in all.
async fn changed_key_position(
    main: &Fixture,
    changed: Option<&Fixture>,
    controller: Controller<Obj>,
) -> (usize, usize) {
    let stop = CancellationToken::new();
    let mut running = vec![main.run(&stop)];
    running.extend(changed.map(|c| c.run(&stop)));
    let (log, mut reconciled) = watch::channel((0, None));
    let (gate, gate_rx) = watch::channel(false);
    let watched = key_of(main.objects.end - 1);
    let done = tokio::spawn(controller.concurrency(1).run(
        stop.clone(),
        Arc::new(()),
        reconcile(watched, log, gate_rx),
        |_, _, _| Action::backoff(),
    ));
    wait_for("the first reconcile", &mut reconciled, |(count, _)| {
        *count >= 1
    })
    .await;
    changed.unwrap_or(main).change_last().await;
    gate.send_replace(true);
    let all = main.objects.len();
    wait_for("every key reconciled", &mut reconciled, |(count, at)| {
        at.is_some() && *count >= all
    })
    .await;
    let (count, at) = *reconciled.borrow();
    stop.cancel();
    done.await.unwrap().unwrap();
    for r in running {
        r.await.unwrap();
    }
    (at.expect("the changed key was reconciled"), count)
}

/// The default controller (a priority queue): the update of the last object listed, made while
/// the 100,000 initial keys wait, is the next key reconciled; the backlog then drains, each
/// key once (the changed key's initial add and its update are one reconcile, unless it was the
/// first key taken: see [`each_key_once`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_is_reconciled_before_the_initial_backlog_drains() {
    let main = fixture(0..BACKLOG);
    let controller = Controller::new(Arc::clone(&main.informer));
    let (before, total) = changed_key_position(&main, None, controller).await;
    assert!(
        before <= 1,
        "{before} initial keys reconciled before the change (of {BACKLOG})"
    );
    assert!(each_key_once(total, BACKLOG, before), "{total} reconciles");
}

/// Client-go's first-in-first-out queue, for contrast: the change waits behind the whole
/// backlog (its key was queued last by the initial list, and the update finds it waiting).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_in_first_out_controller_reconciles_the_change_last() {
    let main = fixture(0..BACKLOG);
    let controller = Controller::with_queue(Arc::clone(&main.informer), WorkQueue::new());
    let (before, total) = changed_key_position(&main, None, controller).await;
    assert_eq!(before, BACKLOG - 1);
    assert_eq!(total, BACKLOG);
}

/// A related object's change wakes its owner at a change's priority, ahead of the initial
/// backlog: 10,000 owners listed, one child (of the last owner) updated while they wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_change_wakes_its_owner_before_the_backlog() {
    const OWNERS: usize = 10_000;
    let main = fixture(0..OWNERS);
    // The child of owner `i` has the owner's namespace and name.
    let child = fixture(OWNERS - 1..OWNERS);
    let controller = Controller::new(Arc::clone(&main.informer))
        .watches(Arc::clone(&child.informer), |c: &Obj| {
            vec![format!("{}/{}", c.namespace, c.name)]
        });
    let (before, total) = changed_key_position(&main, Some(&child), controller).await;
    assert!(
        before <= 1,
        "{before} owners reconciled before the woken one"
    );
    assert!(each_key_once(total, OWNERS, before), "{total} reconciles");
}

/// Whether `total` reconciles of `keys` keys are each key once, or, when the changed key was
/// the very first one taken (`before == 0`: its change came while that reconcile ran), each key
/// once and the changed key a second time.
fn each_key_once(total: usize, keys: usize, before: usize) -> bool {
    total == keys || (before == 0 && total == keys + 1)
}
