//! A sharded [`Controller`]: its replicas split the objects by shard (a [`ShardRunner`] on
//! Leases); each caches and reconciles only the shards it owns, and begins each shard's term by
//! queueing what is there, since another replica may have left work.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;

use futures::stream::{FuturesUnordered, StreamExt};
use informer::{ShardBy, ShardField, ShardSelector, SharedIndexInformer};
use informer_leaderelection::ShardRunner;
use informer_workqueue::LOW_PRIORITY;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Controller;
use crate::RuntimeError;
use crate::handlers::{Change, priority};
use crate::shards::{Arrivals, ShardStatsHandle, Sharded};

/// One informer of a controller, as far as its shard set goes.
pub(crate) struct ShardedInformer {
    name: String,
    /// `main`, `owns` or `watches`.
    relation: &'static str,
    by: ShardBy,
    set_shards: Box<dyn Fn(Option<ShardSelector>) + Send + Sync>,
    /// The shard set it was last set to (its relist at it may not be in yet), and the set of
    /// its reflector's cycle under way.
    shards: Box<dyn Fn() -> (Option<ShardSelector>, Option<ShardSelector>) + Send + Sync>,
    /// The resource version its reflector has reached.
    version: Box<dyn Fn() -> String + Send + Sync>,
    /// The resource version of the last change its cache applied.
    cache_version: Box<dyn Fn() -> String + Send + Sync>,
    /// The shard set of its cache's last complete list.
    listed: watch::Receiver<Option<ShardSelector>>,
    arrivals: Arc<Arrivals>,
}

impl ShardedInformer {
    pub(crate) fn new<C: Send + Sync + 'static>(
        informer: &Arc<SharedIndexInformer<C>>,
        relation: &'static str,
        arrivals: Arc<Arrivals>,
    ) -> Self {
        let (set, shards, version, cache) = (
            Arc::clone(informer),
            Arc::clone(informer),
            Arc::clone(informer),
            Arc::clone(informer),
        );
        Self {
            name: informer.name().to_owned(),
            relation,
            by: informer.shard_by(),
            set_shards: Box::new(move |s| set.set_shards(s)),
            shards: Box::new(move || (shards.shards(), shards.cycle_shards())),
            version: Box::new(move || version.last_sync_resource_version()),
            cache_version: Box::new(move || cache.cache_version()),
            listed: informer.watch_listed_shards(),
            arrivals,
        }
    }

    /// Whether its cache holds every object of `shard` for good: its last complete list
    /// (`listed`, its receiver) was at a set that covers the shard, which is also the set of
    /// its reflector's cycle under way and the set it was last set to. A relist under way or
    /// to come at another set would replace the cache with that set's objects: one at a set
    /// without the shard (set while its term had ended, before the shard came back) would
    /// take the shard's objects out of a cache whose term has begun, and the handlers would
    /// take them for deletions. Sets are compared by value: a set that went and came back is
    /// caught up only once the relist at the set between is in too.
    fn holds_shard(
        &self,
        sharded: &Sharded,
        listed: &watch::Receiver<Option<ShardSelector>>,
        shard: u32,
    ) -> bool {
        let listed = listed.borrow();
        let (set, cycle) = (self.shards)();
        *listed == set && *listed == cycle && sharded.listed_whole(listed.as_ref(), shard)
    }
}

impl<K: Send + Sync + 'static> Controller<K> {
    /// Shares the controller's objects with its other replicas by shard: each replica caches
    /// and reconciles only the shards `runner` assigns it (see the crate docs and
    /// docs/semantics.md, SH-15 onwards). The objects are hashed by their uid; see
    /// [`shard_field`](Self::shard_field) for their namespace.
    ///
    /// The controller runs `runner` itself once its caches have synced (empty: a replica owns
    /// nothing before its first term), and follows its terms:
    ///
    /// * **caches**: the main informer and every [`owns`](Self::owns) and
    ///   [`watches`](Self::watches) informer cache the shards owned, and nothing while none is
    ///   ([`SharedIndexInformer::set_shards`]; an empty set is
    ///   [`ShardSelector::none`]). Children must follow their owner's shard: with uids, an
    ///   `owns` informer must be built with `shard_by(ShardBy::Owner)` (the controller cannot
    ///   change how a built informer hashes), or the run fails with
    ///   [`RuntimeError::ChildrenNotByOwner`]. A `watches` informer is sharded the same way, so
    ///   its objects must hash with the keys they map to (the same namespace when hashing
    ///   namespaces, say). Shared informers are changed for every user of them.
    /// * **a term begins** once every informer's cache holds a complete list at a shard set
    ///   that covers the shard ([`SharedIndexInformer::listed_shards`]), and that set is the
    ///   one it was last set to and the one of its reflector's cycle under way
    ///   ([`SharedIndexInformer::cycle_shards`]): no relist at an older set, one without the
    ///   shard, is still to land and take the shard's objects out. Until then the term is held
    ///   (its Lease kept) but none of its keys is reconciled, so no reconcile reads a cache
    ///   that lacks the shard (and misses, say, the children the previous owner made). It
    ///   begins with the shard's cached keys queued at
    ///   [`LOW_PRIORITY`](informer_workqueue::LOW_PRIORITY) (the main informer's objects of the
    ///   shard, and the keys its `owns`/`watches` objects map to), and its remembered deletions
    ///   at 0. An add the handlers deliver after that of an object the cache already held
    ///   when the term began (no newer than the cache was then) is not queued again; other
    ///   adds no newer than the cache was when the set grew are queued at `LOW_PRIORITY` too
    ///   (resource versions that are decimal integers; otherwise every add is a real change).
    ///   A term that waits [`SHARD_WAIT_WARNING`](crate::SHARD_WAIT_WARNING) to begin is told
    ///   once at WARN, naming the informers that have not listed the shard, and its wait shows
    ///   in [`ShardCounts::waiting_for`](crate::ShardCounts::waiting_for).
    /// * **a key is reconciled only under its shard's term**: its shard is its cached object's
    ///   (or its deletion's last known state's); the worker holds a clone of that shard's
    ///   [`ShardTerm`](crate::ShardTerm) for the whole reconcile, so the shard's Lease is not
    ///   released to another replica before the reconcile has stopped; when the term ends the
    ///   reconcile is cancelled at its next await (its [`Request::cancel`](crate::Request)
    ///   fires, and its future is dropped) and its key is not queued again here. A key of a
    ///   shard not owned is dropped when dequeued. A key whose object is not known at all (an
    ///   owner gone and forgotten) takes the shard of the `owns`/`watches` object that woke it
    ///   (an orphaned child is in its gone owner's shard, and the replica owning that shard
    ///   reconciles the owner's deletion); with no such object either (a key queued by hand)
    ///   it is dropped, counted
    ///   ([`ControllerShardStats::unplaced`](crate::ControllerShardStats::unplaced)): no
    ///   replica can tell its shard, so none reconciles it.
    /// * **changes** are queued only for objects in the shards owned; a deletion heard for an
    ///   object outside them (it left the cache with its shard) is not reconciled.
    /// * **on stop**, reconciles finish within the shutdown timeout, then the terms are let go
    ///   and the runner hands every shard over and releases its Leases.
    ///
    /// A controller is sharded or in a [`leader_election`](Self::leader_election), not both:
    /// the run fails with [`RuntimeError::ShardedAndElected`].
    pub fn sharded(self, runner: ShardRunner) -> Self {
        let field = self.sharding.read().as_ref().map(|s| s.field());
        let sharded = Sharded::new(runner);
        sharded.set_field(field.unwrap_or(ShardField::Uid));
        // Nothing is owned yet: the caches hold nothing until the first term.
        self.apply_shard_set(&sharded, false);
        *self.sharding.write() = Some(Arc::new(sharded));
        self.reconciling
            .store(true, std::sync::atomic::Ordering::Release);
        self
    }

    /// With [`sharded`](Self::sharded): which field of an object is hashed,
    /// [`ShardField::Uid`] (the default: objects spread evenly) or [`ShardField::Namespace`]
    /// (a namespace's objects share a shard, so related objects of one namespace need no
    /// owner routing and a key never changes shard). Without `sharded`, nothing.
    pub fn shard_field(self, field: ShardField) -> Self {
        if let Some(sharded) = self.sharding.read().clone() {
            sharded.set_field(field);
            self.apply_shard_set(&sharded, false);
        }
        self
    }

    /// With [`sharded`](Self::sharded): a handle on the controller's shard counters (for
    /// metrics), readable while it runs.
    pub fn shard_stats(&self) -> Option<ShardStatsHandle> {
        let sharded = self.sharding.read().clone()?;
        Some(ShardStatsHandle { sharded })
    }

    /// The shard assignment, checked against the rest of the configuration: `None` unsharded.
    pub(super) fn sharding(&self) -> Result<Option<Arc<Sharded>>, RuntimeError> {
        let Some(sharded) = self.sharding.read().clone() else {
            return Ok(None);
        };
        if self.elector.is_some() {
            return Err(RuntimeError::ShardedAndElected);
        }
        if sharded.field() == ShardField::Uid
            && let Some(child) = self
                .informers
                .iter()
                .find(|i| i.relation == "owns" && i.by != ShardBy::Owner)
        {
            return Err(RuntimeError::ChildrenNotByOwner {
                informer: child.name.clone(),
            });
        }
        Ok(Some(sharded))
    }

    /// Sharded: sets the shard set of an informer just added (`owns`, `watches`) to the
    /// shards held.
    pub(super) fn apply_shard_set_to_last(&self) {
        if let (Some(sharded), Some(informer)) = (&*self.sharding.read(), self.informers.last()) {
            (informer.set_shards)(Some(sharded.selector()));
        }
    }

    /// Sets every informer's shard set to the shards held (none at first).
    pub(super) fn apply_shard_set(&self, sharded: &Sharded, grew: bool) {
        let selector = sharded.selector();
        for informer in &self.informers {
            if grew {
                informer.arrivals.grew_at(&(informer.version)());
            }
            (informer.set_shards)(Some(selector.clone()));
        }
    }

    /// Runs the shard assignment and, beside it, `reconcile_until(stop)` (`true`: stopped)
    /// and the loop that follows the terms, until `stop`.
    ///
    /// The runner stops only once the workers have: every Lease is released after the
    /// reconciles under way have finished (or been cancelled at the shutdown timeout). Both
    /// are polled by this future, so dropping it (a crash) ends the assignment too.
    pub(super) async fn shard<F, Fut>(
        &self,
        sharded: &Sharded,
        stop: &CancellationToken,
        reconcile_until: F,
    ) where
        F: Fn(CancellationToken) -> Fut,
        Fut: Future<Output = bool>,
    {
        let runner_stop = CancellationToken::new();
        let work = async {
            tokio::join!(
                reconcile_until(stop.clone()),
                self.follow_terms(sharded, stop)
            );
            sharded.release_all();
            runner_stop.cancel();
        };
        tokio::join!(sharded.runner.run(runner_stop.clone()), work);
    }

    /// Follows the runner's terms until `stop`: holds each new term, begins it once every
    /// informer has relisted at a shard set that includes it, lets go of each ended one, and
    /// keeps the informers at the shards held.
    async fn follow_terms(&self, sharded: &Sharded, stop: &CancellationToken) {
        let mut status = sharded.runner.subscribe();
        let mut listed: Vec<_> = self.informers.iter().map(|i| i.listed.clone()).collect();
        loop {
            let held = sharded.held();
            let ended: Vec<u32> = held
                .keys()
                .copied()
                .filter(|s| sharded.held_term(*s).is_none())
                .collect();
            let current = sharded.runner.terms();
            let new: Vec<_> = current
                .into_iter()
                .filter(|t| t.is_current() && held.get(&t.shard()) != Some(&t.number()))
                .collect();
            if !ended.is_empty() {
                sharded.release(ended.iter().copied());
                tracing::info!(shards = ?ended, "shard terms ended: their keys are no longer reconciled here");
            }
            let grew = !new.is_empty();
            for term in new {
                sharded.hold(term);
            }
            if !ended.is_empty() || grew {
                self.apply_shard_set(sharded, grew);
            }
            // A term begins once its shard's objects are in every cache: a reconcile must not
            // read a cache that has not listed its shard yet (it would miss the children the
            // previous owner made, and make them again).
            for rx in &mut listed {
                rx.borrow_and_update();
            }
            let ready: BTreeSet<u32> = sharded
                .waiting()
                .into_iter()
                .filter(|s| {
                    let mut informers = self.informers.iter().zip(&listed);
                    informers.all(|(i, rx)| i.holds_shard(sharded, rx, *s))
                })
                .collect();
            if !ready.is_empty() {
                // Before the handlers may queue the shards' changes: the adds they deliver
                // late of what the caches hold now are not queued twice.
                for informer in &self.informers {
                    informer
                        .arrivals
                        .began_at(&ready, &(informer.cache_version)());
                }
                for (shard, waited) in sharded.begin(&ready) {
                    tracing::info!(shard, waited = ?waited, "a shard term that waited long has begun");
                }
                self.begin_shard_terms(sharded, &ready);
            }
            self.warn_of_long_waits(sharded, &listed);
            let mut tokens: FuturesUnordered<_> = sharded
                .held()
                .keys()
                .filter_map(|s| sharded.held_term(*s))
                .map(|t| t.token().cancelled_owned())
                .collect();
            let waiting = !sharded.waiting().is_empty();
            let warning = sharded.next_wait_warning();
            tokio::select! {
                changed = status.changed() => if changed.is_err() { break },
                Some(()) = tokens.next() => {}
                () = relisted(&mut listed), if waiting => {}
                () = sleep_until(warning), if warning.is_some() => {}
                () = stop.cancelled() => break,
            }
        }
        // Stopping: the workers finish their reconciles (each holds its term); the terms are
        // let go of once they have (see `shard`).
    }

    /// Logs at WARN, once per term, the terms that have waited
    /// [`SHARD_WAIT_WARNING`](crate::SHARD_WAIT_WARNING) to begin, naming the informers whose
    /// caches have not listed their shards yet (`listed`: their receivers, in the order of
    /// `self.informers`): one line for the terms the same informers hold back.
    fn warn_of_long_waits(
        &self,
        sharded: &Sharded,
        listed: &[watch::Receiver<Option<ShardSelector>>],
    ) {
        let mut by_behind: BTreeMap<Vec<String>, (Vec<u32>, u64)> = BTreeMap::new();
        for (shard, waited) in sharded.take_wait_warnings() {
            let behind: Vec<String> = self
                .informers
                .iter()
                .zip(listed)
                .filter(|(i, rx)| !i.holds_shard(sharded, rx, shard))
                .map(|(i, _)| format!("{} ({})", i.name, i.relation))
                .collect();
            let (shards, longest) = by_behind.entry(behind).or_default();
            shards.push(shard);
            *longest = (*longest).max(waited.as_secs());
        }
        for (behind, (shards, waited)) in by_behind {
            tracing::warn!(
                "shard terms {shards:?} have waited {waited}s to begin, and none of their keys is \
                 reconciled here meanwhile: not yet listed by {} (a relist that keeps failing, \
                 or a queue that never empties)",
                behind.join(", ")
            );
        }
    }

    /// Terms begin on `shards` (every cache holds their objects): their cached keys queued at
    /// [`LOW_PRIORITY`] (the main informer's objects in them, and the keys the
    /// `owns`/`watches` objects map to whose object is in them, or, with no object, whose
    /// related object is: an owner gone, placed in its orphan's shard), their remembered
    /// deletions at 0.
    fn begin_shard_terms(&self, sharded: &Sharded, shards: &BTreeSet<u32>) {
        let lister = self.main.lister();
        let identity = self.main.identity();
        let shard_of_key = |key: &str| {
            lister
                .get(key)
                .map(|obj| sharded.shard_of(identity, &obj))
                .filter(|s| shards.contains(s))
        };
        let mut queued: BTreeMap<u32, u64> = BTreeMap::new();
        let mut queue = |key: &str, shard: u32, priority: i32| {
            self.queue.add_with_priority(Arc::from(key), priority);
            *queued.entry(shard).or_default() += 1;
        };
        for key in lister.keys() {
            if let Some(shard) = shard_of_key(&key) {
                queue(&key, shard, LOW_PRIORITY);
            }
        }
        for keys in &self.related_keys {
            for (key, related) in keys(Some(sharded)) {
                let cached = lister.get(&key);
                let shard = match (&cached, &related) {
                    (Some(obj), _) => Some(sharded.shard_of(identity, obj)),
                    (None, placed) => placed.as_ref().map(|p| p.shard),
                };
                let Some(shard) = shard.filter(|s| shards.contains(s)) else {
                    continue;
                };
                if let (None, Some(placement)) = (&cached, &related) {
                    sharded.place(&key, placement);
                }
                queue(&key, shard, LOW_PRIORITY);
            }
        }
        for (key, last_known) in self.deleted.lock().remembered() {
            let shard = sharded.shard_of(identity, &last_known);
            if shards.contains(&shard) && lister.get(&key).is_none() {
                queue(&key, shard, priority(Change::Deleted));
            }
        }
        for shard in shards {
            let keys = queued.get(shard).copied().unwrap_or(0);
            sharded.note_queued(*shard, keys);
        }
        tracing::info!(
            shards = ?shards,
            keys = queued.values().sum::<u64>(),
            "shard terms began: their cached keys and remembered deletions queued"
        );
    }
}

/// Resolves at `at` (never if `None`).
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Resolves once an informer's cache has completed a list at another shard set (never if none
/// can: their senders live as long as the informers, which the controller holds).
async fn relisted(listed: &mut [watch::Receiver<Option<ShardSelector>>]) {
    let changes = listed.iter_mut().map(|rx| {
        Box::pin(async move {
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    });
    let mut any: FuturesUnordered<_> = changes.collect();
    if any.next().await.is_none() {
        std::future::pending::<()>().await;
    }
}
