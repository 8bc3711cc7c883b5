//! A reconciler over shared informers: the controller runtime of the informers stack.
//!
//! A [`Controller`] watches one informer's objects (its *main* informer) and any number of
//! related informers, turns every change into the key of an object to reconcile, and runs your
//! `reconcile` for each key on a rate-limited [`WorkQueue`] (client-go's `util/workqueue`):
//!
//! * **level-triggered**: `reconcile` gets the object as the cache has it when the key is
//!   dequeued ([`Target::Live`]), or [`Target::Deleted`] with its last known state — a deletion
//!   is a state to reconcile, not an error;
//! * **one key at a time**: up to [`concurrency`](Controller::concurrency) reconciles run at once,
//!   never two of one key; changes that arrive meanwhile coalesce into one more reconcile;
//! * **retries**: an error goes through your `error_policy` (by default a rate-limited retry:
//!   per-key exponential backoff from 5 ms, and an overall 10 per second); a success clears the
//!   key's backoff; [`Action::requeue`] reconciles again after a delay;
//! * **caches first**: no reconcile starts before every informer the controller reads from has
//!   synced and its initial state has been queued;
//! * **related objects**: [`owns`](Controller::owns) and [`watches`](Controller::watches) map a
//!   change of another informer's object to the keys to reconcile (an owner found through an
//!   index, say); a child deleted while a relist was in progress still wakes its owner, since a
//!   deletion always carries the child's last known state;
//! * **graceful shutdown**: on stop, no new reconcile starts; the ones under way get
//!   [`shutdown_timeout`](Controller::shutdown_timeout) to finish, then are cancelled; the
//!   controller's handlers are removed from the informers, which are shared and go on;
//! * **several replicas**: [`leader_election`](Controller::leader_election) puts the controller
//!   behind a [`LeaderElector`] (informer-leaderelection, on a Lease): it reconciles only while
//!   leading, stops the instant a term ends, and keeps its caches warm meanwhile (standing by,
//!   it queues nothing and remembers only its [latest deletions](Controller::standby_deletions),
//!   so its memory stays bounded however long it waits);
//! * **writes not yet in the cache**: [`Expectations`] records the children a reconcile created
//!   or deleted until the child informer has observed them, so that a reconcile run again
//!   meanwhile does not act on a cache that lags its own writes.
//!
//! With the `kube` feature (on by default), helpers for reconcilers of Kubernetes objects,
//! through kube-client:
//!
//! * [`predicates`] for [`Controller::predicate`]: `generation_changed`, `labels_changed`,
//!   `annotations_changed`, `finalizers_changed`;
//! * [`events::Recorder`] publishes Kubernetes Events (`events.k8s.io/v1`) about objects, with
//!   client-go's series for repeats;
//! * [`finalizer()`] runs a reconcile behind a finalizer: added first, the cleanup run when the
//!   object is being deleted, the finalizer removed once the cleanup succeeds;
//! * [`KubeLease`], the leader election's lock on a `coordination.k8s.io/v1` Lease.
//!
//! Without it, the crate knows nothing of Kubernetes' API: any object, any source.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use informer::SharedIndexInformer;
//! use informer_reflector::{FakeListerWatcher, ListPage};
//! use informer_runtime::{Action, Controller, Target};
//! use informer_store::{key_func, FnIdentity};
//! use tokio_util::sync::CancellationToken;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let source = Arc::new(FakeListerWatcher::<String>::new());
//! source.push_list(ListPage::new(vec![Arc::new("a".to_string()), Arc::new("b".to_string())], "1"));
//! let informer = Arc::new(SharedIndexInformer::new(
//!     source, FnIdentity::new(key_func(|s: &String| Ok(s.clone()))),
//! ));
//! let stop = CancellationToken::new();
//! let running = tokio::spawn({ let (i, s) = (informer.clone(), stop.clone()); async move { i.run(s).await } });
//!
//! let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
//! let controller = Controller::new(informer.clone()).concurrency(2);
//! let reconciling = tokio::spawn(controller.run(
//!     stop.clone(),
//!     Arc::new(seen_tx),
//!     |request, seen| async move {
//!         if let Target::Live(obj) = &request.target {
//!             seen.send(obj.to_string()).unwrap();
//!         }
//!         Ok::<_, std::convert::Infallible>(Action::await_change())
//!     },
//!     |_request, _error, _ctx| Action::backoff(),
//! ));
//! let mut names = vec![seen.recv().await.unwrap(), seen.recv().await.unwrap()];
//! names.sort();
//! assert_eq!(names, ["a", "b"]);
//! stop.cancel();
//! reconciling.await.unwrap().unwrap();
//! running.await.unwrap().unwrap();
//! # }
//! ```

use informer::HandlerOptions;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use informer::{HandlerRegistration, InformerError, ResourceEventHandler, SharedIndexInformer};
pub use informer_leaderelection::{LeaderElector, Term};

pub mod expectations;
pub use expectations::Expectations;
#[cfg(feature = "kube")]
pub mod events;
#[cfg(feature = "kube")]
mod finalizer;
#[cfg(feature = "kube")]
pub use finalizer::{Finalize, FinalizerError, finalizer};
#[cfg(feature = "kube")]
pub mod predicates;
#[cfg(feature = "kube")]
pub use informer_leaderelection::KubeLease;
use informer_workqueue::WorkQueue;
use parking_lot::{Mutex, RwLock};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// What to do with a key after its reconcile (kube-runtime's `Action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Action {
    next: Next,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    AwaitChange,
    RequeueAfter(Duration),
    Backoff,
}

impl Action {
    /// Nothing more until something changes.
    pub fn await_change() -> Self {
        Self {
            next: Next::AwaitChange,
        }
    }

    /// Reconcile the key again after `delay` (sooner if something changes).
    pub fn requeue(delay: Duration) -> Self {
        Self {
            next: Next::RequeueAfter(delay),
        }
    }

    /// Retry through the rate limiter: the key's exponential backoff, which grows with each
    /// retry until a reconcile succeeds. The usual answer of an `error_policy`.
    pub fn backoff() -> Self {
        Self {
            next: Next::Backoff,
        }
    }

    /// The delay of a [`requeue`](Self::requeue).
    pub fn requeue_after(&self) -> Option<Duration> {
        match self.next {
            Next::RequeueAfter(d) => Some(d),
            _ => None,
        }
    }
}

/// How one reconcile went, as told to a [`ReconcileObserver`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReconcileOutcome {
    /// Whether `reconcile` returned `Ok`.
    pub succeeded: bool,
    /// Whether the object was gone from the cache ([`Target::Deleted`]).
    pub deleted: bool,
    /// What happens to the key next (from `reconcile`, or the error policy).
    pub action: Action,
    /// How long `reconcile` took.
    pub duration: Duration,
}

/// Told of every reconcile as it ends (the hook of a metrics layer); runs on the worker, so
/// keep it short.
pub trait ReconcileObserver: Send + Sync + 'static {
    /// A reconcile ended.
    fn reconciled(&self, outcome: ReconcileOutcome);
}

/// The state of the object a reconcile is for.
#[derive(Debug)]
pub enum Target<K> {
    /// The object as the cache has it now.
    Live(Arc<K>),
    /// The object is gone from the cache; its last known state, if the controller saw one.
    Deleted {
        /// The state the deletion carried.
        last_known: Option<Arc<K>>,
    },
}

/// One reconcile's input: the key and its object's state.
#[derive(Debug)]
pub struct Request<K> {
    /// The object's cache key (`namespace/name` for a namespaced Kubernetes object).
    pub key: Arc<str>,
    /// Its state.
    pub target: Target<K>,
}

impl<K> Clone for Target<K> {
    fn clone(&self) -> Self {
        match self {
            Self::Live(obj) => Self::Live(Arc::clone(obj)),
            Self::Deleted { last_known } => Self::Deleted {
                last_known: last_known.clone(),
            },
        }
    }
}

impl<K> Clone for Request<K> {
    fn clone(&self) -> Self {
        Self {
            key: Arc::clone(&self.key),
            target: self.target.clone(),
        }
    }
}

/// Errors of [`Controller::run`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// An informer the controller reads from stopped before it synced.
    #[error("an informer stopped before it synced")]
    NotSynced,
    /// Registering a handler on an informer failed.
    #[error("registering a handler: {0}")]
    Informer(#[from] InformerError),
}

type Keys = Arc<dyn Fn(&str) + Send + Sync>;

/// A related informer's registration, for the sync wait and the shutdown.
struct Watched {
    registration: HandlerRegistration,
    remove: Box<dyn Fn() + Send + Sync>,
}

impl Watched {
    /// Registers `handler` on `informer`, remembering how to remove it.
    fn register<C: Send + Sync + 'static>(
        informer: &Arc<SharedIndexInformer<C>>,
        handler: impl ResourceEventHandler<C> + 'static,
    ) -> Result<Self, InformerError> {
        let registration = informer.add_event_handler(handler, HandlerOptions::new())?;
        let (informer, handle) = (Arc::clone(informer), registration.clone());
        Ok(Self {
            registration,
            remove: Box::new(move || {
                let _ = informer.remove_event_handler(&handle);
            }),
        })
    }
}

/// A reconciler over a main informer and related ones (see the crate docs).
pub struct Controller<K> {
    main: Arc<SharedIndexInformer<K>>,
    queue: WorkQueue<Arc<str>>,
    deleted: Arc<Mutex<Deleted<K>>>,
    /// Whether changes are queued: always without an election, within terms with one.
    reconciling: Arc<AtomicBool>,
    /// Those of `owns_expecting`, dropped for an object when it is deleted.
    expectations: Arc<Mutex<Vec<Expectations>>>,
    /// Which updates of the main informer's objects are queued.
    predicate: Arc<RwLock<Option<UpdatePredicate<K>>>>,
    watched: Vec<Result<Watched, InformerError>>,
    concurrency: usize,
    shutdown_timeout: Duration,
    elector: Option<LeaderElector>,
    observer: Option<Arc<dyn ReconcileObserver>>,
}

impl<K> fmt::Debug for Controller<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Controller")
            .field("main", &self.main)
            .field("queue", &self.queue)
            .field("watched", &self.watched.len())
            .field("concurrency", &self.concurrency)
            .finish()
    }
}

/// How many deletions a controller standing by remembers by default (see
/// [`Controller::standby_deletions`]).
pub const STANDBY_DELETIONS: usize = 10_000;

/// The last known states of deleted main objects, kept for their reconciles.
///
/// While the controller stands by (an election, not leading), nothing is queued: a term queues
/// every cached key when it begins. Deletions are the exception, since the cache no longer has
/// them: the latest `limit` seen while standing by are remembered (oldest first in `standby`),
/// and queued when a term begins; older ones are forgotten and counted, so that a standby
/// replica's memory stays bounded however long it waits.
struct Deleted<K> {
    /// Per key, its last known state and the number of the deletion that recorded it.
    states: HashMap<Arc<str>, (Arc<K>, u64)>,
    /// The deletions recorded while standing by, oldest first (an entry whose key was added
    /// again or deleted again since is stale, and skipped when it comes up).
    standby: VecDeque<(Arc<str>, u64)>,
    /// Deletions recorded so far (each gets the next number).
    recorded: u64,
    /// At most this many deletions are remembered while standing by.
    limit: usize,
    /// Deletions forgotten over `limit` since the last term began.
    forgotten: u64,
}

impl<K> Deleted<K> {
    fn new() -> Self {
        Self {
            states: HashMap::new(),
            standby: VecDeque::new(),
            recorded: 0,
            limit: STANDBY_DELETIONS,
            forgotten: 0,
        }
    }

    /// Records `key`'s last known state; while standing by, within the limit.
    fn record(&mut self, key: Arc<str>, obj: Arc<K>, standing_by: bool) {
        self.recorded += 1;
        let n = self.recorded;
        if standing_by {
            self.standby.push_back((Arc::clone(&key), n));
        }
        self.states.insert(key, (obj, n));
        while self.standby.len() > self.limit {
            let Some((old, m)) = self.standby.pop_front() else {
                break;
            };
            if self.states.get(&old).is_some_and(|(_, at)| *at == m) {
                self.states.remove(&old);
                self.forgotten += 1;
            }
        }
    }

    fn get(&self, key: &str) -> Option<Arc<K>> {
        self.states.get(key).map(|(obj, _)| Arc::clone(obj))
    }

    /// `key` exists again: its deletion's state is no longer the one to reconcile.
    fn recreated(&mut self, key: &str) {
        self.states.remove(key);
    }

    /// Forgets `key`'s state if it is still `then` (a later deletion keeps its own).
    fn reconciled(&mut self, key: &str, then: &Arc<K>) {
        if self
            .states
            .get(key)
            .is_some_and(|(now, _)| Arc::ptr_eq(now, then))
        {
            self.states.remove(key);
        }
    }

    /// A term begins: every remembered deletion is to be queued, and the count of the
    /// forgotten ones starts again. Returns the keys and how many were forgotten.
    fn term_begins(&mut self) -> (Vec<Arc<str>>, u64) {
        self.standby.clear();
        let keys = self.states.keys().cloned().collect();
        (keys, std::mem::take(&mut self.forgotten))
    }
}

/// Decides whether an update of a main object (old, new) is worth a reconcile.
type UpdatePredicate<K> = Arc<dyn Fn(&K, &K) -> bool + Send + Sync>;

/// Queues the key of every change of the main informer's objects while reconciling, and
/// keeps the last known state of the deleted ones for their reconcile.
struct MainHandler<K> {
    queue: WorkQueue<Arc<str>>,
    /// Which updates are queued (all without one).
    predicate: Arc<RwLock<Option<UpdatePredicate<K>>>>,
    deleted: Arc<Mutex<Deleted<K>>>,
    reconciling: Arc<AtomicBool>,
    /// The expectations of `owns_expecting`: a deleted object's are dropped with it.
    expectations: Arc<Mutex<Vec<Expectations>>>,
}

impl<K: Send + Sync + 'static> ResourceEventHandler<K> for MainHandler<K> {
    fn on_add(&self, key: &str, _obj: &Arc<K>, _initial: bool) {
        self.deleted.lock().recreated(key);
        if self.reconciling.load(Ordering::Acquire) {
            self.queue.add_with(key, || Arc::from(key));
        }
    }

    fn on_update(&self, key: &str, old: &Arc<K>, new: &Arc<K>) {
        if let Some(predicate) = &*self.predicate.read()
            && !predicate(old, new)
        {
            return;
        }
        if self.reconciling.load(Ordering::Acquire) {
            // Most updates find their key waiting already: no allocation for those.
            self.queue.add_with(key, || Arc::from(key));
        }
    }

    fn on_delete(&self, key: &str, obj: &Arc<K>, _final_state_unknown: bool) {
        for e in self.expectations.lock().iter() {
            e.forget(key);
        }
        let key: Arc<str> = Arc::from(key);
        let reconciling = self.reconciling.load(Ordering::Acquire);
        self.deleted
            .lock()
            .record(Arc::clone(&key), Arc::clone(obj), !reconciling);
        if reconciling {
            self.queue.add(key);
        }
    }
}

/// Maps a related object's changes to keys of the main informer.
struct Related<C, F> {
    map: F,
    /// An update also wakes the keys of the old version (an owner a child left).
    both_sides: bool,
    enqueue: Keys,
    /// Lowered for each owner before it is woken: creations on add, deletions on delete.
    expectations: Option<Expectations>,
    _object: std::marker::PhantomData<fn(&C)>,
}

impl<C, F> ResourceEventHandler<C> for Related<C, F>
where
    C: Send + Sync + 'static,
    F: Fn(&C) -> Vec<String> + Send + Sync,
{
    fn on_add(&self, _key: &str, obj: &Arc<C>, _initial: bool) {
        for k in (self.map)(obj) {
            if let Some(e) = &self.expectations {
                e.creation_observed(&k);
            }
            (self.enqueue)(&k);
        }
    }

    fn on_update(&self, _key: &str, old: &Arc<C>, new: &Arc<C>) {
        let mut keys = (self.map)(new);
        if self.both_sides {
            for k in (self.map)(old) {
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
        }
        keys.iter().for_each(|k| (self.enqueue)(k));
    }

    fn on_delete(&self, key: &str, obj: &Arc<C>, _final_state_unknown: bool) {
        for k in (self.map)(obj) {
            if let Some(e) = &self.expectations {
                e.deletion_of_observed(&k, key);
            }
            (self.enqueue)(&k);
        }
    }
}

impl<K: Send + Sync + 'static> Controller<K> {
    /// A controller reconciling `main`'s objects, with client-go's default rate limiter, one
    /// reconcile at a time, and 30 s for reconciles to finish on shutdown.
    pub fn new(main: Arc<SharedIndexInformer<K>>) -> Self {
        Self::with_queue(main, WorkQueue::builder().name("controller").build())
    }

    /// A controller over a queue of your own (another rate limiter, metrics).
    pub fn with_queue(main: Arc<SharedIndexInformer<K>>, queue: WorkQueue<Arc<str>>) -> Self {
        let deleted = Arc::new(Mutex::new(Deleted::new()));
        let reconciling = Arc::new(AtomicBool::new(true));
        let expectations = Arc::new(Mutex::new(Vec::new()));
        let predicate = Arc::new(RwLock::new(None));
        let registration = Watched::register(
            &main,
            MainHandler {
                queue: queue.clone(),
                predicate: Arc::clone(&predicate),
                deleted: Arc::clone(&deleted),
                reconciling: Arc::clone(&reconciling),
                expectations: Arc::clone(&expectations),
            },
        );
        Self {
            main,
            queue,
            deleted,
            reconciling,
            expectations,
            predicate,
            watched: vec![registration],
            concurrency: 1,
            shutdown_timeout: Duration::from_secs(30),
            elector: None,
            observer: None,
        }
    }

    /// Queues an update of a main object only when `predicate(old, new)` holds (kube-runtime's
    /// predicates, controller-runtime's `UpdateFunc` predicates): skips the updates that need
    /// no reconcile, a status written by the controller itself, say. Adds and deletions are
    /// always queued, as are the changes of related informers; a resync is an update of an
    /// object to itself, and goes through the predicate too. informer-kube has the usual ones
    /// (`generation_changed`, `labels_changed`, ...). A later call replaces the predicate.
    pub fn predicate(self, predicate: impl Fn(&K, &K) -> bool + Send + Sync + 'static) -> Self {
        *self.predicate.write() = Some(Arc::new(predicate));
        self
    }

    /// Tells `observer` of every reconcile (result, next step, duration).
    pub fn observer(mut self, observer: Arc<dyn ReconcileObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Reconciles only while `elector` leads (see the crate docs): the controller runs the
    /// election once its caches have synced, starts reconciling when a term begins (with
    /// every cached object queued, since another leader may have left work), stops
    /// reconciling the instant the term ends — reconciles under way are cancelled at their
    /// next await — and keeps its caches warm meanwhile, so a new term needs no relist. While
    /// not leading it queues nothing (the keys queued when a term ended stay queued) and keeps
    /// the last known states of only the latest deletions, which the next term reconciles
    /// (see [`standby_deletions`](Self::standby_deletions)). On stop, reconciles finish first,
    /// then the lease is released.
    pub fn leader_election(mut self, elector: LeaderElector) -> Self {
        self.elector = Some(elector);
        self.reconciling.store(false, Ordering::Release);
        self
    }

    /// With [`leader_election`](Self::leader_election): while not leading, the controller
    /// queues nothing (a term queues every cached object when it begins) and remembers the
    /// last known states of at most `limit` deletions, the latest, to reconcile them when a
    /// term begins — a deletion the previous leader left unreconciled, say. Older ones are
    /// forgotten, counted in the log line of the next term's start. Default
    /// [`STANDBY_DELETIONS`]; 0 remembers none.
    pub fn standby_deletions(self, limit: usize) -> Self {
        self.deleted.lock().limit = limit;
        self
    }

    /// Up to `n` reconciles at once (at least 1), never two of one key.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// How long reconciles under way may take to finish once stopped, before they are
    /// cancelled.
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }

    /// The work queue (to add keys by hand, or read its length).
    pub fn queue(&self) -> &WorkQueue<Arc<str>> {
        &self.queue
    }

    /// Reconciles the keys `map` returns for every change of `informer`'s objects (the new
    /// version of an update; a deletion's last known state).
    pub fn watches<C, F>(self, informer: Arc<SharedIndexInformer<C>>, map: F) -> Self
    where
        C: Send + Sync + 'static,
        F: Fn(&C) -> Vec<String> + Send + Sync + 'static,
    {
        self.related(informer, map, false, None)
    }

    /// Reconciles the owners `owners` returns for every change of a child in `informer`:
    /// both the old and the new owners of an update, and the owners of a deleted child's last
    /// known state (so a child deleted during a relist still wakes its owner). `owners`
    /// typically reads an index: the child's owner references' UIDs, looked up in an index of
    /// the main informer by UID.
    pub fn owns<C, F>(self, informer: Arc<SharedIndexInformer<C>>, owners: F) -> Self
    where
        C: Send + Sync + 'static,
        F: Fn(&C) -> Vec<String> + Send + Sync + 'static,
    {
        self.related(informer, owners, true, None)
    }

    /// As [`owns`](Self::owns), and counts what the owners' reconciles await in
    /// `expectations` (see [`Expectations`]): before an owner is woken, a child added lowers
    /// its awaited creations, a child deleted its awaited deletions (by the child's key, for
    /// [`Expectations::expect_deletions_of`]). A reconcile checks
    /// [`Expectations::satisfied`] first and waits for the next change while it is not. When
    /// an object of the main informer is deleted, its record is dropped
    /// ([`Expectations::forget`]) by the handler and again once the deletion's reconcile
    /// succeeds, so records do not outlive their owners.
    pub fn owns_expecting<C, F>(
        self,
        informer: Arc<SharedIndexInformer<C>>,
        owners: F,
        expectations: &Expectations,
    ) -> Self
    where
        C: Send + Sync + 'static,
        F: Fn(&C) -> Vec<String> + Send + Sync + 'static,
    {
        self.expectations.lock().push(expectations.clone());
        self.related(informer, owners, true, Some(expectations.clone()))
    }

    fn related<C, F>(
        mut self,
        informer: Arc<SharedIndexInformer<C>>,
        map: F,
        both_sides: bool,
        expectations: Option<Expectations>,
    ) -> Self
    where
        C: Send + Sync + 'static,
        F: Fn(&C) -> Vec<String> + Send + Sync + 'static,
    {
        let (queue, reconciling) = (self.queue.clone(), Arc::clone(&self.reconciling));
        let enqueue: Keys = Arc::new(move |k: &str| {
            // Standing by, nothing is queued: a term queues every cached key.
            if reconciling.load(Ordering::Acquire) {
                queue.add_with(k, || Arc::from(k));
            }
        });
        let handler = Related {
            map,
            both_sides,
            enqueue,
            expectations,
            _object: std::marker::PhantomData,
        };
        self.watched.push(Watched::register(&informer, handler));
        self
    }

    /// Runs until `stop` is cancelled: waits for every informer to sync, then reconciles.
    ///
    /// `reconcile(request, ctx)` returns the [`Action`] for the key, or an error, which
    /// `error_policy(&request, &error, &ctx)` turns into one (usually [`Action::backoff`]).
    /// On stop, no new reconcile starts, those under way get the shutdown timeout, and the
    /// controller's handlers are removed. Fails with [`RuntimeError::NotSynced`] if an informer
    /// stops before it synced.
    pub async fn run<Ctx, E, R, Fut, P>(
        self,
        stop: CancellationToken,
        ctx: Arc<Ctx>,
        reconcile: R,
        error_policy: P,
    ) -> Result<(), RuntimeError>
    where
        Ctx: Send + Sync + 'static,
        E: Send + 'static,
        R: Fn(Request<K>, Arc<Ctx>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
        P: Fn(&Request<K>, &E, &Arc<Ctx>) -> Action + Send + Sync + 'static,
    {
        let mut this = self;
        let mut watched = Vec::with_capacity(this.watched.len());
        for w in std::mem::take(&mut this.watched) {
            watched.push(w?);
        }
        let this = this;
        let result = async {
            // Caches first: every informer synced and its initial state queued.
            for w in &watched {
                tokio::select! {
                    synced = w.registration.wait_for_sync() => {
                        if !synced {
                            return Err(RuntimeError::NotSynced);
                        }
                    }
                    () = stop.cancelled() => return Ok(()),
                }
            }
            let worker = Arc::new(Worker {
                lister: this.main.lister(),
                queue: this.queue.clone(),
                deleted: Arc::clone(&this.deleted),
                expectations: Arc::clone(&this.expectations),
                reconcile,
                error_policy,
                ctx,
                observer: this.observer.clone(),
            });
            let Some(elector) = this.elector.clone() else {
                worker
                    .reconcile_until(this.concurrency, this.shutdown_timeout, &stop, &stop)
                    .await;
                return Ok(());
            };
            // The election runs beside the terms until the reconciles have stopped: the lease
            // is released only once nothing of this replica's term is under way. Both are
            // polled by this future, so dropping it (a crash) ends the election too.
            let election_stop = CancellationToken::new();
            let terms = async {
                loop {
                    let term = tokio::select! {
                        term = elector.leading() => term,
                        () = stop.cancelled() => break,
                    };
                    // A new term: everything may need work (another leader may have left some).
                    // Changes are queued from now on; whatever came before is in the cache, or
                    // among the deletions remembered.
                    this.reconciling.store(true, Ordering::Release);
                    for key in this.main.lister().keys() {
                        this.queue.add(Arc::from(key));
                    }
                    let (gone, forgotten) = this.deleted.lock().term_begins();
                    let remembered = gone.len();
                    for key in gone {
                        this.queue.add(key);
                    }
                    tracing::info!(
                        term = term.number,
                        deletions = remembered,
                        forgotten,
                        "leading: reconciling (deletions: remembered while standing by, queued; \
                         forgotten: seen while standing by, over the limit)"
                    );
                    let until = term.token();
                    let stopped = worker
                        .reconcile_until(this.concurrency, this.shutdown_timeout, &until, &stop)
                        .await;
                    this.reconciling.store(false, Ordering::Release);
                    if stopped {
                        break;
                    }
                    tracing::info!(term = term.number, "leadership lost: reconciles stopped");
                }
                election_stop.cancel();
            };
            tokio::join!(elector.run(election_stop.clone()), terms);
            Ok(())
        }
        .await;
        for w in &watched {
            (w.remove)();
        }
        result
    }
}

/// Marks a key done when its reconcile ends, finished or cancelled.
struct Processing<'a> {
    queue: &'a WorkQueue<Arc<str>>,
    key: Arc<str>,
}

impl Drop for Processing<'_> {
    fn drop(&mut self) {
        self.queue.done(&self.key);
    }
}

struct Worker<K, Ctx, R, P> {
    lister: informer_store::Lister<K>,
    queue: WorkQueue<Arc<str>>,
    deleted: Arc<Mutex<Deleted<K>>>,
    expectations: Arc<Mutex<Vec<Expectations>>>,
    reconcile: R,
    error_policy: P,
    ctx: Arc<Ctx>,
    observer: Option<Arc<dyn ReconcileObserver>>,
}

impl<K, Ctx, E, R, Fut, P> Worker<K, Ctx, R, P>
where
    K: Send + Sync + 'static,
    Ctx: Send + Sync + 'static,
    E: Send + 'static,
    R: Fn(Request<K>, Arc<Ctx>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
    P: Fn(&Request<K>, &E, &Arc<Ctx>) -> Action + Send + Sync + 'static,
{
    /// Runs `concurrency` workers until `stop` (returns `true`: graceful, within
    /// `shutdown_timeout`, the queue shut down) or `until` (returns `false`: a term ended,
    /// reconciles under way are cancelled at once and the queue stays up for the next term).
    async fn reconcile_until(
        self: &Arc<Self>,
        concurrency: usize,
        shutdown_timeout: Duration,
        until: &CancellationToken,
        stop: &CancellationToken,
    ) -> bool {
        let mut workers = JoinSet::new();
        for _ in 0..concurrency {
            let (worker, until, stop) = (Arc::clone(self), until.clone(), stop.clone());
            workers.spawn(async move { worker.work(&until, &stop).await });
        }
        tokio::select! {
            // A stop is graceful, even when it also ends the term (without an election the two
            // are one token): look at it first.
            biased;
            () = stop.cancelled() => {}
            () = until.cancelled() => {
                // Not leading any more: nothing of this term goes on.
                workers.shutdown().await;
                return false;
            }
        }
        // No new reconcile: the workers see the stop after their current one.
        self.queue.shut_down();
        let finished = tokio::time::timeout(shutdown_timeout, async {
            while workers.join_next().await.is_some() {}
        })
        .await;
        if finished.is_err() {
            tracing::warn!(
                cancelled = workers.len(),
                "reconciles still running after the shutdown timeout are cancelled"
            );
            workers.shutdown().await;
        }
        true
    }

    /// Reconciles keys until `until` or `stop` is cancelled (the reconcile under way, if any,
    /// finishes unless the task is aborted).
    async fn work(&self, until: &CancellationToken, stop: &CancellationToken) {
        loop {
            let key = tokio::select! {
                key = self.queue.get() => key,
                () = until.cancelled() => return,
                () = stop.cancelled() => return,
            };
            let Some(key) = key else { return };
            let processing = Processing {
                queue: &self.queue,
                key,
            };
            if until.is_cancelled() || stop.is_cancelled() {
                return;
            }
            self.reconcile_one(&processing.key).await;
        }
    }

    async fn reconcile_one(&self, key: &Arc<str>) {
        // Level-triggered: the object as the cache has it now.
        let target = match self.lister.get(key) {
            Some(obj) => Target::Live(obj),
            None => Target::Deleted {
                last_known: self.deleted.lock().get(key),
            },
        };
        // The last known state a deletion's reconcile is given, forgotten once it succeeds.
        let reconciled = match &target {
            Target::Deleted {
                last_known: Some(obj),
            } => Some(Arc::clone(obj)),
            _ => None,
        };
        let was_deleted = matches!(target, Target::Deleted { .. });
        let request = Request {
            key: Arc::clone(key),
            target,
        };
        let begun = std::time::Instant::now();
        let outcome = (self.reconcile)(request.clone(), Arc::clone(&self.ctx)).await;
        let duration = begun.elapsed();
        let succeeded = outcome.is_ok();
        let action = match outcome {
            Ok(action) => {
                if let Some(then) = reconciled {
                    // Only that state: a later deletion of the key (recreated and deleted again
                    // meanwhile) keeps its own for the next reconcile.
                    self.deleted.lock().reconciled(key, &then);
                }
                if was_deleted {
                    // The deleted object's record, also dropped by the handler, may have been
                    // set again by a reconcile of the live object still running then (one key
                    // is reconciled at a time: none can be now).
                    for e in self.expectations.lock().iter() {
                        e.forget(key);
                    }
                }
                action
            }
            Err(error) => (self.error_policy)(&request, &error, &self.ctx),
        };
        if let Some(observer) = &self.observer {
            observer.reconciled(ReconcileOutcome {
                succeeded,
                deleted: was_deleted,
                action,
                duration,
            });
        }
        // A success clears the key's backoff, as does an error its policy lets go.
        if succeeded || action.next == Next::AwaitChange {
            self.queue.forget(key);
        }
        match action.next {
            Next::AwaitChange => {}
            Next::RequeueAfter(delay) => self.queue.add_after(Arc::clone(key), delay),
            Next::Backoff => self.queue.add_rate_limited(Arc::clone(key)),
        }
    }
}

#[cfg(test)]
mod deleted_tests {
    use super::*;

    #[test]
    fn standing_by_keeps_the_latest_deletions_and_counts_the_rest() {
        let mut d = Deleted::<u32>::new();
        d.limit = 2;
        let rec = |d: &mut Deleted<u32>, k: &str, v: u32, standing_by: bool| {
            d.record(Arc::from(k), Arc::new(v), standing_by);
        };
        // While reconciling: no limit.
        for (k, v) in [("r1", 1), ("r2", 2), ("r3", 3)] {
            rec(&mut d, k, v, false);
        }
        // Standing by: a, then a again (its first entry goes stale), b, c.
        rec(&mut d, "a", 10, true);
        rec(&mut d, "a", 11, true);
        rec(&mut d, "b", 20, true);
        // a's stale entry leaves the window without counting; a's latest stays.
        assert_eq!(d.forgotten, 0);
        assert_eq!(d.get("a").as_deref(), Some(&11));
        rec(&mut d, "c", 30, true);
        // a's latest is the oldest of three: forgotten, counted.
        assert_eq!(d.forgotten, 1);
        assert_eq!(d.get("a"), None);
        // Re-added (the key's entry removed): its window entry goes stale, not counted.
        d.states.remove("b");
        rec(&mut d, "e", 50, true);
        assert_eq!(d.forgotten, 1);
        // The deletions from the term are kept whatever the window.
        assert_eq!(d.get("r1").as_deref(), Some(&1));
        let (mut keys, forgotten) = d.term_begins();
        keys.sort();
        let keys: Vec<&str> = keys.iter().map(|k| &**k).collect();
        assert_eq!(keys, ["c", "e", "r1", "r2", "r3"]);
        assert_eq!(forgotten, 1);
        assert_eq!((d.forgotten, d.standby.len()), (0, 0));
        // Reconciled: only the state it was given is forgotten.
        let c = d.get("c").expect("c");
        rec(&mut d, "c", 31, false);
        d.reconciled("c", &c);
        assert_eq!(d.get("c").as_deref(), Some(&31));
        let c = d.get("c").expect("c");
        d.reconciled("c", &c);
        assert_eq!(d.get("c"), None);
    }
}
