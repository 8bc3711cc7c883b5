//! Stopping an informer leaves nothing of it running — no pop loop, no handler, no task —
//! however it is stopped, and promptly; its threads are the delivery pool's, a fixed number
//! whatever the number of handlers, and they end with the pool. (Its own test binary: it counts
//! the process's threads, so its tests take turns, each on a pool of its own.)

#[path = "suite/common/mod.rs"]
mod common;

use informer::HandlerOptions;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use common::*;
use informer::{DeliveryPool, POP_BATCH, ResourceEventHandlerFuncs};
use tokio::sync::Mutex;

/// The tests count the whole process's threads: one at a time.
static SERIAL: Mutex<()> = Mutex::const_new(());

/// Waits until no informer thread is left.
async fn no_informer_threads_left(what: &str) {
    eventually(what, || informer_threads() == 0).await;
}

/// A pool of two threads for one test: with its monitor, three threads named `informer-`.
fn new_pool() -> Arc<DeliveryPool> {
    Arc::new(DeliveryPool::new(2).unwrap())
}

/// The threads of a two-thread pool: its two and the monitor.
const POOL_THREADS: usize = 3;

/// Threads of this process whose name starts with `informer-` (the delivery pool's).
fn informer_threads() -> usize {
    threads_where(|name| name.starts_with("informer-"))
}

/// The pool threads that are not spares: its fixed threads and the monitor.
fn fixed_pool_threads() -> usize {
    threads_where(|name| name.starts_with("informer-") && !name.starts_with("informer-spare-"))
}

/// Threads of this process whose name passes `keep`, counted in one pass.
fn threads_where(keep: impl Fn(&str) -> bool) -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .filter(|name| keep(name))
                .count()
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_joins_every_thread_and_task() {
    let _serial = SERIAL.lock().await;
    if !std::path::Path::new("/proc/self/task").exists() {
        eprintln!("no /proc: thread counting not available on this platform");
        return;
    }
    let metrics = tokio::runtime::Handle::current().metrics();
    // An earlier test's threads have ended before it gave up its turn; this only waits for
    // the kernel to have removed them all.
    no_informer_threads_left("no thread of an earlier test").await;
    let pool = new_pool();
    let source = ChannelSource::new();
    source.push_list(
        (0..20).map(|i| obj("a", &format!("o{i}"), i + 1)).collect(),
        20,
    );
    let watch = source.open_watch();
    let informer = Arc::new(
        informer_builder(&source, Duration::from_secs(1), Kind::DeltaFifo)
            .pool(Arc::clone(&pool))
            .build(),
    );
    let regs: Vec<_> = (0..4)
        .map(|_| {
            informer
                .add_event_handler(Recorder::new(), HandlerOptions::new())
                .unwrap()
        })
        .collect();
    let (stop, task) = start(&informer);
    informer.wait_for_sync().await;
    for i in 0..200 {
        watch.modified(&obj("a", &format!("o{}", i % 20), 100 + i));
    }
    // The pop loop and four handlers are five jobs on the pool's threads: no thread each.
    eventually("the pop loop and four handlers are running", || {
        pool.jobs() == 5
    })
    .await;
    // The pool's own threads are its two and the monitor, whatever the jobs. A new thread
    // names itself once it runs, which on a loaded machine can be a moment after the jobs are
    // already running; and a spare may come and go, when the monitor finds a pool thread that
    // looks stuck (a stalled machine). A thread per job would never let the count settle at 3.
    eventually("the pool's two threads and its monitor, named", || {
        fixed_pool_threads() == POOL_THREADS
    })
    .await;
    assert!(metrics.num_alive_tasks() >= 1);

    stop.cancel();
    task.await.unwrap().unwrap();
    assert!(
        regs.iter().all(|r| r.is_stopped()),
        "no handler runs once run has returned"
    );
    // A finished job is released by its thread a moment after it has said so.
    eventually("every job of the informer has ended", || pool.jobs() == 0).await;
    // The runtime releases a finished task's slot on its worker thread, a moment after `await`.
    eventually("no task left behind", || metrics.num_alive_tasks() == 0).await;
    drop((regs, informer, pool));
    no_informer_threads_left("the pool's threads end with it").await;
}

/// A synced informer with two handlers on a pool of its own, running on `informer.run(stop)`
/// somewhere.
fn synced_informer_parts() -> (Arc<ChannelSource>, Arc<Informer>, Watch, Arc<DeliveryPool>) {
    let pool = new_pool();
    let source = ChannelSource::new();
    source.push_list(vec![obj("a", "x", 1), obj("a", "y", 2)], 2);
    let watch = source.open_watch();
    let informer = Arc::new(
        informer_builder(&source, Duration::ZERO, Kind::DeltaFifo)
            .pool(Arc::clone(&pool))
            .build(),
    );
    informer
        .add_event_handler(Recorder::new(), HandlerOptions::new())
        .unwrap();
    informer
        .add_event_handler(Recorder::new(), HandlerOptions::new())
        .unwrap();
    (source, informer, watch, pool)
}

/// Waits until every job on `pool` has ended, then drops the last handles and waits for its
/// threads to end.
async fn nothing_left(pool: Arc<DeliveryPool>, informer: Arc<Informer>, what: &str) {
    eventually(what, || pool.jobs() == 0).await;
    drop((informer, pool));
    no_informer_threads_left("the pool's threads end with it").await;
}

/// Dropping the run future used to leave the queue open: the pop loop and every handler
/// blocked forever, `is_stopped` stayed false and `wait_for_sync` never returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_run_future_stops_every_thread_and_marks_the_informer_stopped() {
    let _serial = SERIAL.lock().await;
    let (_source, informer, _watch, pool) = synced_informer_parts();
    let stop = tokio_util::sync::CancellationToken::new();
    {
        let run = informer.run(stop.clone());
        tokio::pin!(run);
        tokio::select! {
            _ = &mut run => panic!("the informer runs until stopped"),
            synced = informer.wait_for_sync() => assert!(synced),
        }
        eventually("the pop loop and two handlers", || pool.jobs() == 3).await;
        // `run` is dropped here, never stopped through its token.
    }
    assert!(
        informer.is_stopped(),
        "a dropped run marks the informer stopped"
    );
    nothing_left(pool, informer, "every job of a dropped run ends").await;
    let pool = new_pool();
    let unsynced = Arc::new(
        common::informer_builder(&ChannelSource::new(), Duration::ZERO, Kind::DeltaFifo)
            .pool(Arc::clone(&pool))
            .build(),
    );
    let run = tokio::time::timeout(Duration::from_millis(10), unsynced.run(stop.clone()));
    assert!(run.await.is_err(), "cut short by the timeout");
    assert!(
        !unsynced.wait_for_sync().await,
        "a wait for an informer whose run was dropped returns, unsynced"
    );
    nothing_left(pool, unsynced, "the unsynced informer's pop loop ends").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborting_the_run_task_stops_every_thread() {
    let _serial = SERIAL.lock().await;
    let (_source, informer, _watch, pool) = synced_informer_parts();
    let (_stop, task) = start(&informer);
    assert!(informer.wait_for_sync().await);
    eventually("the pop loop and two handlers", || pool.jobs() == 3).await;
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    assert!(informer.is_stopped());
    nothing_left(pool, informer, "every job of an aborted run ends").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutting_the_runtime_down_stops_every_thread() {
    let _serial = SERIAL.lock().await;
    let (_source, informer, _watch, pool) = synced_informer_parts();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    runtime.spawn({
        let (informer, stop) = (Arc::clone(&informer), stop.clone());
        async move { informer.run(stop).await }
    });
    assert!(informer.wait_for_sync().await);
    eventually("the pop loop and two handlers", || pool.jobs() == 3).await;
    // The runtime goes away with the run still in it (no stop, no factory shutdown).
    runtime.shutdown_background();
    eventually("the informer is marked stopped", || informer.is_stopped()).await;
    nothing_left(pool, informer, "every job ends with the runtime").await;
}

type Fifo = informer_fifo::DeltaFifo<Obj>;
type FifoLoop = informer::InformerLoop<Obj, Arc<ChannelSource>, Fifo>;

/// The DeltaFifo controller of the controller-level tests, over `source`, on `pool`.
fn controller_over(
    source: &Arc<ChannelSource>,
    pool: &Arc<DeliveryPool>,
) -> (Arc<Fifo>, Arc<FifoLoop>) {
    let queue = Arc::new(informer_fifo::DeltaFifo::new(informer_store::key_func(
        |o: &Obj| Ok(key(o)),
    )));
    let controller = Arc::new(
        informer::InformerLoop::new(
            Arc::clone(&queue),
            informer_reflector::Reflector::new(Arc::clone(source), Arc::clone(&queue)),
        )
        .with_pool(Arc::clone(pool)),
    );
    (queue, controller)
}

/// The pop loop of a controller over `source`, counting what it processes; the end of its
/// first batch holds it until `release` (the queue's lock is free then, so the reflector goes
/// on), after telling `entered`.
struct Gated {
    processed: Arc<AtomicUsize>,
    gate: Option<(std::sync::mpsc::Sender<()>, std::sync::mpsc::Receiver<()>)>,
}

impl informer::ProcessDeltas<Obj> for Gated {
    fn process(&mut self, _deltas: informer_fifo::Deltas<Obj>, _initial: bool) {
        self.processed.fetch_add(1, Ordering::SeqCst);
    }

    fn end_batch(&mut self) {
        if let Some((entered, release)) = self.gate.take() {
            entered.send(()).unwrap();
            release.recv().unwrap();
        }
    }
}

/// Stopping used to drain the whole queue first (after a relist, 100,000 deltas inside a pod's
/// grace period, all thrown away). Now the pop loop stops after the change it is on: here it is
/// held after its first batch while the stop comes, and nothing queued after that is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_does_not_drain_a_long_queue() {
    let _serial = SERIAL.lock().await;
    const LISTED: u64 = 20_000;
    let source = ChannelSource::new();
    source.push_list(
        (0..LISTED)
            .map(|i| obj("a", &format!("o{i}"), i + 1))
            .collect(),
        LISTED,
    );
    let watch = source.open_watch();
    let pool = new_pool();
    let (_queue, controller) = controller_over(&source, &pool);
    let (entered_tx, entered) = std::sync::mpsc::channel::<()>();
    let (release, release_rx) = std::sync::mpsc::channel::<()>();
    let processed = Arc::new(AtomicUsize::new(0));
    let gated = Gated {
        processed: Arc::clone(&processed),
        gate: Some((entered_tx, release_rx)),
    };
    let stop = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn({
        let (controller, stop) = (Arc::clone(&controller), stop.clone());
        async move { controller.run(stop, gated).await }
    });
    tokio::task::spawn_blocking(move || entered.recv().unwrap())
        .await
        .unwrap();
    eventually("the reflector is watching", || {
        source.watches_pending() == 0
    })
    .await;
    stop.cancel();
    eventually("the reflector has stopped", || watch.is_closed()).await;
    release.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the stop is prompt")
        .unwrap();
    let processed = processed.load(Ordering::SeqCst);
    assert!(
        processed <= 2 * POP_BATCH,
        "at most the batches under way are processed, not the queue: {processed} of {LISTED}"
    );
    eventually("the pop loop has ended", || pool.jobs() == 0).await;
    drop((controller, pool));
    no_informer_threads_left("the pool's threads end with it").await;
}

/// A panicking process function used to kill the pop thread while the reflector went on
/// filling the queue; `run` returned only once stopped. Now the panic comes out of `run` at
/// once (client-go's controller crashes the same way), with the reflector stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_process_function_comes_out_of_the_loop_at_once() {
    let _serial = SERIAL.lock().await;
    let source = ChannelSource::new();
    source.push_list(vec![obj("a", "x", 1)], 1);
    let watch = source.open_watch();
    let pool = new_pool();
    let (queue, controller) = controller_over(&source, &pool);
    let stop = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn({
        let (controller, stop) = (Arc::clone(&controller), stop.clone());
        async move {
            controller
                .run(stop, |_: informer_fifo::Deltas<Obj>, _| {
                    panic!("process function panicked")
                })
                .await
        }
    });
    let ended = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("run ends at once, without a stop");
    let panic = ended.expect_err("the panic comes out of run").into_panic();
    assert_eq!(
        informer_store::panic_message(&*panic),
        "process function panicked"
    );
    assert!(!stop.is_cancelled());
    eventually("the reflector let go of its watch", || watch.is_closed()).await;
    assert!(informer_fifo::Queue::is_closed(&*queue));
    eventually("the pop loop has ended", || pool.jobs() == 0).await;
    drop((controller, queue, pool));
    no_informer_threads_left("the pool's threads end with it").await;
}

/// `shutdown` (here: the end of `run`) used to return while a removed handler, detached, could
/// still be running its code. Now the run waits for the removed handler too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_does_not_return_while_a_removed_handler_still_runs() {
    let _serial = SERIAL.lock().await;
    let source = ChannelSource::new();
    source.push_list(vec![obj("a", "x", 1)], 1);
    let _watch = source.open_watch();
    let pool = new_pool();
    let informer = Arc::new(
        informer_builder(&source, Duration::ZERO, Kind::DeltaFifo)
            .pool(Arc::clone(&pool))
            .build(),
    );
    let entered = Arc::new(AtomicUsize::new(0));
    let returned = Arc::new(AtomicBool::new(false));
    let (release, release_rx) = std::sync::mpsc::channel::<()>();
    let release_rx = StdMutex::new(release_rx);
    let registration = informer
        .add_event_handler(
            ResourceEventHandlerFuncs::new().with_add({
                let (entered, returned) = (Arc::clone(&entered), Arc::clone(&returned));
                move |_, _: &Arc<Obj>, _| {
                    entered.fetch_add(1, Ordering::SeqCst);
                    release_rx.lock().unwrap().recv().unwrap();
                    returned.store(true, Ordering::SeqCst);
                }
            }),
            HandlerOptions::new(),
        )
        .unwrap();
    let (stop, mut task) = start(&informer);
    eventually("the handler is inside its code", || {
        entered.load(Ordering::SeqCst) == 1
    })
    .await;
    informer.remove_event_handler(&registration).unwrap();
    stop.cancel();
    // While the removed handler is held, the run cannot have returned.
    tokio::select! {
        _ = &mut task => panic!("run returned while a removed handler was still running"),
        () = tokio::time::sleep(Duration::from_millis(200)) => {}
    }
    release.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), registration.stopped())
        .await
        .expect("the removed handler ends");
    task.await.unwrap().unwrap();
    assert!(returned.load(Ordering::SeqCst));
    drop(registration);
    nothing_left(pool, informer, "every job has ended").await;
}

/// A hundred informers with three handlers each run on the pool's threads: the thread count
/// does not grow with informers or handlers (it was one pop thread per informer and one thread
/// per handler: 400 here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_informers_with_three_handlers_each_run_on_the_pools_threads() {
    let _serial = SERIAL.lock().await;
    let pool = new_pool();
    let mut parts = Vec::new();
    for i in 0..100 {
        let source = ChannelSource::new();
        source.push_list(
            (0..10)
                .map(|j| obj(&format!("ns{i}"), &format!("o{j}"), j + 1))
                .collect(),
            10,
        );
        let watch = source.open_watch();
        let informer = Arc::new(
            informer_builder(&source, Duration::ZERO, Kind::DeltaFifo)
                .pool(Arc::clone(&pool))
                .build(),
        );
        let recorders: Vec<_> = (0..3).map(|_| Recorder::new()).collect();
        for r in &recorders {
            informer
                .add_event_handler(Arc::clone(r), HandlerOptions::new())
                .unwrap();
        }
        let (stop, task) = start(&informer);
        parts.push((source, watch, informer, recorders, stop, task));
    }
    for (i, (_, watch, _, _, _, _)) in parts.iter().enumerate() {
        for j in 0..10 {
            watch.modified(&obj(&format!("ns{i}"), &format!("o{j}"), 100 + j));
        }
    }
    eventually("every handler saw its informer's list and changes", || {
        parts
            .iter()
            .all(|(_, _, _, recorders, _, _)| recorders.iter().all(|r| r.len() == 20))
    })
    .await;
    let threads = informer_threads();
    let total = std::fs::read_dir("/proc/self/task").map_or(0, |tasks| tasks.count());
    eprintln!(
        "100 informers x 3 handlers: {threads} informer threads, {total} threads in the \
         process, {} jobs",
        pool.jobs()
    );
    assert_eq!(
        pool.jobs(),
        400,
        "a pop loop per informer and a job per handler"
    );
    // The pool's two threads and its monitor; a spare only if the machine stalled a thread
    // inside a job for longer than STUCK_AFTER.
    assert!(
        threads <= 2 * pool.size() + 3,
        "{threads} threads for 100 informers and 300 handlers"
    );
    for (_, _, informer, recorders, stop, task) in parts {
        stop.cancel();
        task.await.unwrap().unwrap();
        for r in recorders {
            assert_eq!(r.replay(), cache(&informer));
        }
    }
    eventually("every job has ended", || pool.jobs() == 0).await;
    drop(pool);
    no_informer_threads_left("the pool's threads end with it").await;
}
