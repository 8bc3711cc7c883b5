//! Configuring a [`Controller`]: what it watches, which updates it queues, how many reconciles
//! it runs at once, how it stops, and whether it stands in an election.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use informer::SharedIndexInformer;
use informer_leaderelection::LeaderElector;
use informer_workqueue::WorkQueue;
use parking_lot::{Mutex, RwLock};

use super::{Controller, ShardedInformer};
use crate::deleted::Deleted;
use crate::handlers::{MainHandler, Related, Watched};
use crate::shards::{Arrivals, ShardSlot};
use crate::{Expectations, ReconcileObserver};

impl<K: Send + Sync + 'static> Controller<K> {
    /// A controller reconciling `main`'s objects, with client-go's default rate limiter, one
    /// reconcile at a time, and 30 s for reconciles to finish on shutdown.
    ///
    /// Its queue is a priority queue, fair across namespaces (controller-runtime's default
    /// since 0.23; see [`WorkQueueBuilder::priority`](informer_workqueue::WorkQueueBuilder::priority)):
    /// the keys of the initial lists, of resyncs and of a new leader's term go in at
    /// [`LOW_PRIORITY`](informer_workqueue::LOW_PRIORITY), real changes (of the main
    /// informer's objects, or of related ones through `owns`/`watches`) at 0, so a change made
    /// while a backlog of initial keys drains is reconciled before the backlog is; within a
    /// priority the namespaces take turns. Requeues keep their key's priority. For client-go's
    /// first-in-first-out queue, pass `WorkQueue::new()` to [`with_queue`](Self::with_queue).
    pub fn new(main: Arc<SharedIndexInformer<K>>) -> Self {
        let queue = WorkQueue::builder().name("controller").priority().build();
        Self::with_queue(main, queue)
    }

    /// A controller over a queue of your own (another rate limiter, metrics, first in, first
    /// out or by priority: see [`new`](Self::new)).
    pub fn with_queue(main: Arc<SharedIndexInformer<K>>, queue: WorkQueue<Arc<str>>) -> Self {
        let deleted = Arc::new(Mutex::new(Deleted::new()));
        let reconciling = Arc::new(AtomicBool::new(true));
        let expectations = Arc::new(Mutex::new(Vec::new()));
        let predicate = Arc::new(RwLock::new(None));
        let sharding = ShardSlot::default();
        let arrivals = Arc::new(Arrivals::default());
        let informers = vec![ShardedInformer::new(&main, "main", Arc::clone(&arrivals))];
        let registration = Watched::register(
            &main,
            MainHandler {
                queue: queue.clone(),
                identity: Arc::clone(main.identity()),
                predicate: Arc::clone(&predicate),
                deleted: Arc::clone(&deleted),
                reconciling: Arc::clone(&reconciling),
                expectations: Arc::clone(&expectations),
                sharding: Arc::clone(&sharding),
                arrivals,
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
            related_keys: Vec::new(),
            concurrency: 1,
            shutdown_timeout: Duration::from_secs(30),
            reconcile_timeout: None,
            read_your_writes: crate::READ_YOUR_WRITES_TIMEOUT,
            elector: None,
            observer: None,
            sharding,
            informers,
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
    /// [`STANDBY_DELETIONS`](crate::STANDBY_DELETIONS); 0 remembers none.
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

    /// How long one reconcile may take (controller-runtime's `ReconciliationTimeout`): at the
    /// deadline its future is dropped, which cancels it at its current await, and the key is
    /// retried through the rate limiter ([`Action::backoff`](crate::Action::backoff)), counted as an error
    /// ([`ReconcileOutcome::timed_out`](crate::ReconcileOutcome::timed_out)) and logged. The
    /// error policy is not called: there is no error to give it. `Duration::ZERO` (the
    /// default) is no limit; any other duration is one, however long.
    pub fn reconcile_timeout(mut self, timeout: Duration) -> Self {
        self.reconcile_timeout = (!timeout.is_zero()).then_some(timeout);
        self
    }

    /// How long a reconcile of a key waits, before it starts, for the caches to show what the
    /// key's previous reconcile wrote through a [`Client`](crate::Client) (read-your-own-writes;
    /// default [`READ_YOUR_WRITES_TIMEOUT`](crate::READ_YOUR_WRITES_TIMEOUT), 5 s).
    ///
    /// Each write through the client, made in the reconcile's task, records the resource
    /// version the server answered with, per informer, and each deletion the deleted object's
    /// UID; the key's next reconcile starts once every such informer's cache has applied that
    /// version or a later one and no longer holds a deleted UID. A later reconcile therefore
    /// never reads a cache older than its key's own writes: a child it created is in the
    /// cache, a status it wrote is the one its target shows. At the timeout it runs anyway, on
    /// what the caches have: a stale read, counted
    /// ([`WritesAwaited::timed_out`](crate::WritesAwaited::timed_out), through
    /// [`ReconcileObserver::writes_awaited`](crate::ReconcileObserver::writes_awaited)) and
    /// logged at debug level. A cache whose resource versions are not decimal integers (a
    /// server older than Kubernetes 1.35 may have opaque ones) cannot be compared and is not
    /// waited for ([`WritesAwaited::not_comparable`](crate::WritesAwaited::not_comparable)): for
    /// those, [`Expectations`] still count creations and deletions.
    ///
    /// `Duration::ZERO` does not wait: the reconcile starts at once, and a cache behind its
    /// writes is counted as a stale read. Any other duration is a bound, however long (a stop
    /// or a term's end cancels the wait, and the reconcile does not start). The wait is not
    /// part of the [`reconcile_timeout`](Self::reconcile_timeout); it holds one of the
    /// [`concurrency`](Self::concurrency) workers while it lasts.
    pub fn read_your_writes(mut self, timeout: Duration) -> Self {
        self.read_your_writes = timeout;
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
        self.related(informer, map, false, None, "watches")
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
        self.related(informer, owners, true, None, "owns")
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
        self.related(informer, owners, true, Some(expectations.clone()), "owns")
    }

    fn related<C, F>(
        mut self,
        informer: Arc<SharedIndexInformer<C>>,
        map: F,
        both_sides: bool,
        expectations: Option<Expectations>,
        relation: &'static str,
    ) -> Self
    where
        C: Send + Sync + 'static,
        F: Fn(&C) -> Vec<String> + Send + Sync + 'static,
    {
        let map = Arc::new(map);
        let arrivals = Arc::new(Arrivals::default());
        let handler = Related::new(
            {
                let map = Arc::clone(&map);
                move |c: &C| map(c)
            },
            Arc::clone(informer.identity()),
            both_sides,
            expectations,
            (self.queue.clone(), Arc::clone(&self.reconciling)),
            (
                Arc::clone(&arrivals),
                Arc::clone(&self.sharding),
                informer.shard_by(),
            ),
        );
        self.watched.push(Watched::register(&informer, handler));
        self.informers
            .push(ShardedInformer::new(&informer, relation, arrivals));
        self.apply_shard_set_to_last();
        // A new term maps every cached object as its initial add would have been.
        let (lister, identity, by) = (
            informer.lister(),
            Arc::clone(informer.identity()),
            informer.shard_by(),
        );
        self.related_keys.push(Box::new(move |sharded| {
            let objects = lister.list(&informer_store::Everything);
            let keys = objects.iter().flat_map(|o| {
                let placed = sharded.map(|s| s.placement_of(&identity, by, o));
                map(o).into_iter().map(move |k| (k, placed.clone()))
            });
            keys.collect()
        }));
        self
    }
}
