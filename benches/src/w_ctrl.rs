//! W-CTRL: a controller over an informer, from a cold start and then through a burst of
//! updates that it coalesces — our `informer_runtime::Controller` against kube-runtime's
//! `Controller`, both with 4 concurrent reconciles, over the same in-memory objects.
//!
//! The objects are W-INF's ([`w_inf::Data`]) at W-CTRL's sizes: 10,000 pods listed at resource
//! version 10000, then 100,000 MODIFIED events, event `k` on pod `i = (k * 7919) % 10000` at
//! resource version `10000 + k + 1`, the pod moved to another node (so every pod gets 10
//! events, and its final resource version is its last event's). Everything is built before any
//! clock starts.
//!
//! **The reconcile** is the same function on both sides, [`Slots::record`]: it reads the pod's
//! number (from its name) and resource version, stores the version in the pod's slot (a
//! pre-sized `Vec` of atomics), counts the reconcile and the pods seen for the first time or at
//! their final version, reads the clock once, and returns "await change". The moment the last
//! pod is seen for the first time, and the moment of the latest reconcile, are recorded by the
//! reconciles themselves; the driving task only polls the counters (every millisecond) to know
//! when to move on, so its polling does not enter the figures.
//!
//! **The sources.** Each side reads one in-memory stream with a gate in it, opened by the
//! driving task between the two phases:
//!
//! * **Ours**: a [`SharedIndexInformer`] built as W-INF's (the `namespace` and `node`
//!   indexes, no resync) over a `ListerWatcher` that answers the list with one page of the
//!   10,000 pods (`Arc`s built beforehand) and the watch with the 100,000 MODIFIED events
//!   (built beforehand too) once the gate is open; the [`Controller`] (`concurrency(4)`, the
//!   default rate limiter) is built on it before the clock starts.
//! * **kube-runtime**: its `reflector` (a plain `store()`) over a stream of
//!   `watcher::Event`s — `Init`, one `InitApply` per pod, `InitDone`, then, once the gate is
//!   open, one `Apply` per event: what its `watcher` yields for a list and a watch — into
//!   `applied_objects()` and `Controller::for_stream` with
//!   `Config::default().concurrency(4)`. The events are owned copies built before the clock;
//!   its reflector stores a deep clone of each (its design). Its store has no indexes.
//!
//! **What is timed** ([`Run`]):
//!
//! * **(a) cold start**: from the spawn of the informer and the controller (kube-runtime: of
//!   the controller's stream, which drives its reflector) until the reconcile that sees the
//!   last of the 10,000 pods for the first time. Each pod is reconciled exactly once in this
//!   phase on both sides (checked).
//! * **(b) updates to quiescence**: the driving task waits until the cold start is quiet (no
//!   reconcile for [`SETTLE`], and on our side the work queue empty with nothing in flight),
//!   then opens the gate. Timed from the gate's opening until the latest reconcile, once every
//!   pod's slot holds its final resource version and nothing has been reconciled for
//!   [`SETTLE`] (on our side, also the work queue empty with nothing in flight; kube-runtime
//!   has no view of its scheduler's queue, so its quiet period stands for it). A reconcile
//!   that comes after a pod reached its final version (a redundant one, which sees the final
//!   version again) moves the end of the phase, so the figure is the time to quiescence, not
//!   only to the last final version.
//! * **(c)**: the reconciles of phase (b) on each side, and per second of phase (b). Both sides
//!   coalesce (ours in the work queue's dirty set, kube-runtime in its scheduler, which also
//!   drains everything its input has ready before it hands out a request), so this is between
//!   10,000 (each pod once, at its final version) and 100,000.
//!
//! Both sides must really reconcile everything: a run panics, rather than report a figure, if
//! a pod's final version is never seen (nothing reconciled for [`STALL`] before the phase is
//! done), a reconcile sees an older version than the one before it, a reconcile gets a
//! deleted pod, or kube-runtime's controller reports an error.

use std::convert::Infallible;
use std::future::{Future, ready};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::stream::{self, Stream, StreamExt};
use informer::SharedIndexInformer;
use informer_reflector::{
    Error, ListPage, ListParams, ListerWatcher, WatchEvent, WatchParams, WatchStream,
};
use informer_runtime::{Action, Controller, Request, Target};
use k8s_openapi::api::core::v1::Pod;
use kube_runtime::WatchStreamExt;
use kube_runtime::reflector::{self, store};
use kube_runtime::watcher::{self, Event};
use tokio::runtime::Runtime;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::w_inf;

/// Reconciles at once, on both sides.
pub const CONCURRENCY: usize = 4;

/// How long no reconcile may happen (and, on our side, the work queue stay empty with nothing
/// in flight) for a phase to count as quiet.
pub const SETTLE: Duration = Duration::from_millis(50);

/// How long a phase may go without any reconcile before the run panics.
pub const STALL: Duration = Duration::from_secs(10);

/// How often the driving task looks at the counters.
const POLL: Duration = Duration::from_millis(1);

/// The objects of W-CTRL, built once.
#[derive(Debug)]
pub struct Data {
    objects: w_inf::Data,
    last: Arc<Vec<u64>>,
}

impl Data {
    /// `pods` pods listed, then `updates` MODIFIED events on them (W-INF's objects).
    pub fn new(pods: usize, updates: usize) -> Self {
        let objects = w_inf::Data::new(pods, updates);
        let last = Arc::new(objects.last_versions());
        Self { objects, last }
    }

    /// The pods listed.
    pub fn pods(&self) -> usize {
        self.objects.list.len()
    }

    /// The MODIFIED events after the list.
    pub fn updates(&self) -> usize {
        self.objects.events.len()
    }

    /// The pods that at least one update touches: the fewest reconciles phase (b) can do.
    pub fn touched(&self) -> usize {
        let listed = self.pods() as u64;
        self.last.iter().filter(|&&rv| rv != listed).count()
    }

    /// kube-runtime's input: the list as `Init`, `InitApply`s and `InitDone`, and the
    /// updates as `Apply`s (owned copies).
    pub fn watcher_events(&self) -> (Vec<Event<Pod>>, Vec<Event<Pod>>) {
        let mut list = Vec::with_capacity(self.pods() + 2);
        list.push(Event::Init);
        list.extend(
            self.objects
                .list
                .iter()
                .map(|p| Event::InitApply(Pod::clone(p))),
        );
        list.push(Event::InitDone);
        let updates = self
            .objects
            .events
            .iter()
            .map(|(p, _)| Event::Apply(Pod::clone(p)))
            .collect();
        (list, updates)
    }
}

/// The reconciles' shared record: each pod's latest resource version seen, and counters.
#[derive(Debug)]
pub struct Slots {
    seen: Vec<AtomicU64>,
    last: Arc<Vec<u64>>,
    base: Instant,
    reconciles: AtomicUsize,
    first_seen: AtomicUsize,
    at_final: AtomicUsize,
    /// Reconciles that saw an older version than the one before, of a deleted pod, or errors
    /// of kube-runtime's controller: none in a valid run.
    faults: AtomicUsize,
    /// Nanoseconds after `base` of the reconcile that saw the last pod for the first time.
    cold_done: AtomicU64,
    /// Nanoseconds after `base` of the latest reconcile.
    latest: AtomicU64,
}

impl Slots {
    /// Empty slots for `data`'s pods.
    pub fn new(data: &Data) -> Self {
        Self {
            seen: (0..data.pods()).map(|_| AtomicU64::new(0)).collect(),
            last: Arc::clone(&data.last),
            base: Instant::now(),
            reconciles: AtomicUsize::new(0),
            first_seen: AtomicUsize::new(0),
            at_final: AtomicUsize::new(0),
            faults: AtomicUsize::new(0),
            cold_done: AtomicU64::new(0),
            latest: AtomicU64::new(0),
        }
    }

    /// The reconcile of both sides: records `pod`'s resource version in its slot.
    ///
    /// Panics on an object that is not one of the workload's pods.
    pub fn record(&self, pod: &Pod) {
        let i = pod_number(pod).expect("a W-CTRL pod");
        let rv = resource_version(pod).expect("a numeric resource version");
        let n = self.seen.len();
        let before = self.seen[i].swap(rv, Ordering::Relaxed);
        if rv < before {
            self.faults.fetch_add(1, Ordering::Relaxed);
        }
        let cold_done = before == 0 && self.first_seen.fetch_add(1, Ordering::Relaxed) + 1 == n;
        if rv == self.last[i] && before != rv {
            self.at_final.fetch_add(1, Ordering::Relaxed);
        }
        self.reconciles.fetch_add(1, Ordering::Relaxed);
        let now = self.now_ns();
        if cold_done {
            self.cold_done.store(now, Ordering::Relaxed);
        }
        self.latest.fetch_max(now, Ordering::Relaxed);
    }

    /// Counts a reconcile or an error that a valid run never has.
    fn fault(&self) {
        self.faults.fetch_add(1, Ordering::Relaxed);
    }

    fn now_ns(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }

    /// Reconciles so far.
    pub fn reconciles(&self) -> usize {
        self.reconciles.load(Ordering::Relaxed)
    }

    fn all_seen(&self) -> bool {
        self.first_seen.load(Ordering::Relaxed) == self.seen.len()
    }

    fn all_final(&self) -> bool {
        self.at_final.load(Ordering::Relaxed) == self.seen.len()
    }

    /// The pods not at their final version, described.
    fn missing(&self) -> String {
        let mut behind = (0..self.seen.len())
            .filter(|&i| self.seen[i].load(Ordering::Relaxed) != self.last[i])
            .peekable();
        let Some(&first) = behind.peek() else {
            return "every pod is at its final version".to_owned();
        };
        format!(
            "{} pods not at their final version, the first pod-{first} at resource version {} \
             (0: never reconciled), final {}",
            behind.count(),
            self.seen[first].load(Ordering::Relaxed),
            self.last[first],
        )
    }

    /// Panics unless every pod's slot holds its final version and nothing went wrong.
    fn check(&self, side: &str) {
        assert_eq!(
            self.faults.load(Ordering::Relaxed),
            0,
            "W-CTRL, {side}: a reconcile saw an older version or a deleted pod, or the \
             controller failed"
        );
        assert!(self.all_final(), "W-CTRL, {side}: {}", self.missing());
    }
}

/// Pod number `i` of `pod-{i}`.
fn pod_number(pod: &Pod) -> Option<usize> {
    pod.metadata
        .name
        .as_deref()?
        .strip_prefix("pod-")?
        .parse()
        .ok()
}

fn resource_version(pod: &Pod) -> Option<u64> {
    pod.metadata.resource_version.as_deref()?.parse().ok()
}

/// One run of either side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// (a) From start until every pod was reconciled once.
    pub cold_start: Duration,
    /// Reconciles of the cold start (one per pod).
    pub cold_reconciles: usize,
    /// (b) From the updates' release until the latest reconcile, at quiescence.
    pub updates: Duration,
    /// (c) Reconciles of phase (b).
    pub reconciles: usize,
}

impl Run {
    /// Reconciles per second of phase (b).
    pub fn reconciles_per_sec(&self) -> f64 {
        self.reconciles as f64 / self.updates.as_secs_f64().max(1e-12)
    }
}

/// `before`, then — once `gate` opens — `after`, then nothing, never ending (a watch that
/// stays open).
fn gated<T: Send + 'static>(
    before: Vec<T>,
    gate: oneshot::Receiver<()>,
    after: Vec<T>,
) -> impl Stream<Item = T> + Send + 'static {
    stream::iter(before)
        .chain(
            stream::once(async move {
                let _ = gate.await;
                stream::iter(after)
            })
            .flatten(),
        )
        .chain(stream::pending())
}

/// A watch's events, and the gate that holds them back.
type GatedWatch = (oneshot::Receiver<()>, Vec<WatchEvent<Pod>>);

/// Our source: one list page, then one watch that holds its events until the gate opens.
struct GatedSource {
    list: Mutex<Option<ListPage<Pod>>>,
    watch: Mutex<Option<GatedWatch>>,
}

impl ListerWatcher<Pod> for GatedSource {
    fn list(&self, _: &ListParams) -> impl Future<Output = Result<ListPage<Pod>, Error>> + Send {
        let page = self.list.lock().expect("not poisoned").take();
        async move {
            match page {
                Some(page) => Ok(page),
                None => std::future::pending().await,
            }
        }
    }

    fn watch(
        &self,
        _: &WatchParams,
    ) -> impl Future<Output = Result<WatchStream<Pod>, Error>> + Send {
        let watch = self.watch.lock().expect("not poisoned").take();
        async move {
            match watch {
                Some((gate, events)) => {
                    let events = events.into_iter().map(Ok).collect();
                    Ok(gated(Vec::new(), gate, events).boxed())
                }
                None => std::future::pending().await,
            }
        }
    }
}

/// Waits until `done`; panics if no reconcile happens for [`STALL`] before, or on a fault.
async fn wait_for(slots: &Slots, side: &str, what: &str, done: impl Fn(&Slots) -> bool) {
    let (mut count, mut since) = (slots.reconciles(), Instant::now());
    while !done(slots) {
        assert_eq!(
            slots.faults.load(Ordering::Relaxed),
            0,
            "W-CTRL, {side}: a fault before {what}"
        );
        tokio::time::sleep(POLL).await;
        let now = slots.reconciles();
        if now != count {
            (count, since) = (now, Instant::now());
        } else if since.elapsed() > STALL {
            panic!(
                "W-CTRL, {side}: no reconcile for {STALL:?} before {what}: {}",
                slots.missing()
            );
        }
    }
}

/// Waits until no reconcile has happened for [`SETTLE`] and `idle`.
async fn settle(slots: &Slots, idle: &impl Fn() -> bool) {
    loop {
        let count = slots.reconciles();
        tokio::time::sleep(SETTLE).await;
        if slots.reconciles() == count && idle() {
            return;
        }
    }
}

/// Drives a side from its start (`start`, nanoseconds after the slots' base): the cold start,
/// the gate, the updates; see the module's docs.
async fn drive(
    slots: &Slots,
    side: &str,
    start: u64,
    gate: oneshot::Sender<()>,
    idle: impl Fn() -> bool,
) -> Run {
    wait_for(slots, side, "every pod reconciled once", Slots::all_seen).await;
    settle(slots, &idle).await;
    let cold_reconciles = slots.reconciles();
    assert_eq!(
        cold_reconciles,
        slots.seen.len(),
        "W-CTRL, {side}: one reconcile per pod in the cold start"
    );
    let cold_start = Duration::from_nanos(slots.cold_done.load(Ordering::Relaxed) - start);
    let released = slots.now_ns();
    gate.send(()).expect("the source is read");
    wait_for(
        slots,
        side,
        "every pod reconciled at its final version",
        Slots::all_final,
    )
    .await;
    settle(slots, &idle).await;
    let latest = slots.latest.load(Ordering::Relaxed);
    Run {
        cold_start,
        cold_reconciles,
        updates: Duration::from_nanos(latest.saturating_sub(released)),
        reconciles: slots.reconciles() - cold_reconciles,
    }
}

/// Our side: builds the source, the informer and the controller (not timed), then runs both
/// phases. Panics unless every pod ends reconciled at its final version.
pub fn ours(rt: &Runtime, data: &Data) -> Run {
    let (gate, opened) = oneshot::channel();
    let events = data
        .objects
        .events
        .iter()
        .map(|(p, rv)| WatchEvent::modified(Arc::clone(p), rv.clone()))
        .collect();
    let source = GatedSource {
        list: Mutex::new(Some(ListPage::new(
            data.objects.list.clone(),
            data.pods().to_string(),
        ))),
        watch: Mutex::new(Some((opened, events))),
    };
    let (informer, _) = w_inf::informer(source, 0);
    let controller = Controller::new(Arc::clone(&informer)).concurrency(CONCURRENCY);
    let queue = controller.queue().clone();
    let slots = Arc::new(Slots::new(data));
    let run = rt.block_on(async {
        let stop = CancellationToken::new();
        let start = slots.now_ns();
        let informing = tokio::spawn({
            let (informer, stop): (Arc<SharedIndexInformer<Pod>>, _) = (informer, stop.clone());
            async move { informer.run(stop).await }
        });
        let reconciling = tokio::spawn(controller.run(
            stop.clone(),
            Arc::clone(&slots),
            |request: Request<Pod>, slots: Arc<Slots>| {
                match &request.target {
                    Target::Live(pod) => slots.record(pod),
                    Target::Deleted { .. } => slots.fault(),
                }
                ready(Ok::<_, Infallible>(Action::await_change()))
            },
            |_, error, _| match *error {},
        ));
        let idle = || queue.is_empty() && queue.in_flight() == 0;
        let run = drive(&slots, "ours", start, gate, idle).await;
        stop.cancel();
        reconciling
            .await
            .expect("controller task")
            .expect("controller run");
        informing
            .await
            .expect("informer task")
            .expect("informer run");
        run
    });
    slots.check("ours");
    run
}

/// kube-runtime: builds the events (not timed), then runs both phases. Panics unless every
/// pod ends reconciled at its final version.
pub fn kube_runtime(rt: &Runtime, data: &Data) -> Run {
    let (list, updates) = data.watcher_events();
    let (gate, opened) = oneshot::channel();
    let slots = Arc::new(Slots::new(data));
    let run = rt.block_on(async {
        let (reader, writer) = store::<Pod>();
        let events = gated(list, opened, updates).map(Ok::<_, watcher::Error>);
        let trigger = reflector::reflector(writer, events).applied_objects();
        let stop = CancellationToken::new();
        let controller = kube_runtime::Controller::for_stream(trigger, reader)
            .with_config(
                kube_runtime::controller::Config::default().concurrency(CONCURRENCY as u16),
            )
            .graceful_shutdown_on(stop.clone().cancelled_owned());
        let start = slots.now_ns();
        let reconciling = tokio::spawn({
            let results = Arc::clone(&slots);
            controller
                .run(
                    |pod: Arc<Pod>, slots: Arc<Slots>| {
                        slots.record(&pod);
                        ready(Ok::<_, Infallible>(
                            kube_runtime::controller::Action::await_change(),
                        ))
                    },
                    |_, error: &Infallible, _| match *error {},
                    Arc::clone(&slots),
                )
                .for_each(move |result| {
                    if result.is_err() {
                        results.fault();
                    }
                    ready(())
                })
        });
        let run = drive(&slots, "kube-runtime", start, gate, || true).await;
        stop.cancel();
        reconciling.await.expect("controller task");
        run
    });
    slots.check("kube-runtime");
    run
}
