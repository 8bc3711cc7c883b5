//! The workers of a controller: they take keys off the queue, reconcile each with the state the
//! cache has of its object, and queue it again as the reconcile (or its error policy) says.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use informer_workqueue::WorkQueue;
use parking_lot::Mutex;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::action::Next;
use crate::deleted::Deleted;
use crate::gate::Gate;
use crate::shards::{Placement, Sharded};
use crate::written::{self, Written};
use crate::{Action, Expectations, ReconcileObserver, ReconcileOutcome, Request, Target};

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

/// What every worker of a controller shares: the cache, the queue, `reconcile` and its error
/// policy.
pub(crate) struct Worker<K, Ctx, R, P> {
    pub(crate) lister: informer_store::Lister<K>,
    pub(crate) queue: WorkQueue<Arc<str>>,
    pub(crate) deleted: Arc<Mutex<Deleted<K>>>,
    pub(crate) expectations: Arc<Mutex<Vec<Expectations>>>,
    pub(crate) reconcile: R,
    pub(crate) error_policy: P,
    pub(crate) ctx: Arc<Ctx>,
    pub(crate) observer: Option<Arc<dyn ReconcileObserver>>,
    /// How long one reconcile may take.
    pub(crate) reconcile_timeout: Option<Duration>,
    /// What each key's last reconcile wrote, for its next one to wait for.
    pub(crate) gate: Gate,
    /// The main informer's: an object's shard.
    pub(crate) identity: informer_store::SharedIdentity<K>,
    /// Sharded: a key is reconciled only under its shard's term.
    pub(crate) sharding: Option<Arc<Sharded>>,
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
    pub(crate) async fn reconcile_until(
        self: &Arc<Self>,
        concurrency: usize,
        shutdown_timeout: Duration,
        until: CancellationToken,
        stop: &CancellationToken,
    ) -> bool {
        // What each reconcile is told to give up with: the term's end, or the stop.
        let cancel = until.child_token();
        let _linked = cancel.clone().drop_guard();
        tokio::spawn({
            let (cancel, stop) = (cancel.clone(), stop.clone());
            async move {
                tokio::select! {
                    () = stop.cancelled() => cancel.cancel(),
                    () = cancel.cancelled() => {}
                }
            }
        });
        let mut workers = JoinSet::new();
        for _ in 0..concurrency {
            let (worker, until, stop) = (Arc::clone(self), until.clone(), stop.clone());
            let cancel = cancel.clone();
            workers.spawn(async move { worker.work(&until, &stop, &cancel).await });
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
    async fn work(
        &self,
        until: &CancellationToken,
        stop: &CancellationToken,
        cancel: &CancellationToken,
    ) {
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
            match &self.sharding {
                None => self.reconcile_one(&processing.key, cancel, None).await,
                Some(sharded) => {
                    self.reconcile_in_shard(sharded, &processing.key, cancel)
                        .await
                }
            }
        }
    }

    /// Sharded: reconciles `key` under its shard's term, holding a clone of the term until the
    /// reconcile has stopped; the term's end cancels it (its token, then its future dropped),
    /// and the key is not queued again here. A key of a shard not held, or of no known object,
    /// is dropped.
    async fn reconcile_in_shard(
        &self,
        sharded: &Sharded,
        key: &Arc<str>,
        cancel: &CancellationToken,
    ) {
        let placed = sharded.take_placement(key);
        let known = self
            .lister
            .get(key)
            .or_else(|| self.deleted.lock().get(key));
        let (shard, owner_uid) = match (known, placed) {
            (Some(obj), _) => (Some(sharded.shard_of(&self.identity, &obj)), None),
            (None, placed) => placed.map_or((None, None), |p| (Some(p.shard), p.owner_uid)),
        };
        let Some(shard) = shard else {
            sharded.note_unplaced();
            tracing::debug!(
                "{key} is not reconciled: its object is neither cached nor a remembered \
                 deletion, so its shard is not known"
            );
            self.queue.forget(key);
            return;
        };
        let Some(term) = sharded.term(shard) else {
            sharded.note_skipped(shard);
            self.queue.forget(key);
            return;
        };
        let cancel = cancel.child_token();
        let placed = Some((sharded, shard, owner_uid));
        let mut running = Box::pin(self.reconcile_one(key, &cancel, placed));
        tokio::select! {
            biased;
            () = term.ended() => {
                // Told first, then dropped: cancelled at its current await.
                cancel.cancel();
                drop(running);
                tracing::debug!(shard, "the reconcile of {key} is cancelled: the shard's term ended");
            }
            () = &mut running => {}
        }
        // Only now may the shard's Lease go to another replica.
        drop(term);
    }

    /// Reconciles `key` with its object's state now (once the caches show what its previous
    /// reconcile wrote), and queues it again as the outcome says. Sharded (`placed`), only if
    /// the object is still in that shard.
    async fn reconcile_one(
        &self,
        key: &Arc<str>,
        cancel: &CancellationToken,
        placed: Option<(&Sharded, u32, Option<Arc<str>>)>,
    ) {
        if !self.await_writes(key, cancel).await {
            return;
        }
        let target = self.target(key);
        let mut owner_uid = None;
        let mut in_shard = None;
        if let Some((sharded, shard, uid)) = placed {
            let object = match &target {
                Target::Live(obj) => Some(obj),
                Target::Deleted { last_known } => last_known.as_ref(),
            };
            // A key recreated meanwhile as an object of another shard is that shard's. One with
            // no object at all stays where a related object placed it.
            if object.is_some_and(|o| sharded.shard_of(&self.identity, o) != shard) {
                sharded.note_skipped(shard);
                return;
            }
            sharded.note_reconcile(shard);
            // Only for a key with no object at all.
            owner_uid = uid.filter(|_| object.is_none());
            in_shard = Some((sharded, shard));
        }
        let request = Request {
            key: Arc::clone(key),
            target,
            cancel: cancel.clone(),
            owner_uid,
        };
        let deleted = matches!(request.target, Target::Deleted { .. });
        let begun = Instant::now();
        let writes = Arc::new(Mutex::new(Written::default()));
        let running = written::recording(
            Arc::clone(&writes),
            (self.reconcile)(request.clone(), Arc::clone(&self.ctx)),
        );
        let outcome = match self.reconcile_timeout {
            // tokio takes a deadline past its clock's range as never.
            Some(limit) => tokio::time::timeout(limit, running).await.ok(),
            None => Some(running.await),
        };
        let duration = begun.elapsed();
        // Whatever it wrote, finished or not, the key's next reconcile waits for.
        self.gate.keep(key, std::mem::take(&mut *writes.lock()));
        let succeeded = matches!(outcome, Some(Ok(_)));
        let timed_out = outcome.is_none();
        let action = match outcome {
            Some(Ok(action)) => {
                self.deletion_reconciled(&request);
                action
            }
            Some(Err(error)) => (self.error_policy)(&request, &error, &self.ctx),
            None => {
                tracing::warn!(
                    "reconcile of {key} timed out after {:.1} s; cancelled, retrying with backoff",
                    duration.as_secs_f64()
                );
                Action::backoff()
            }
        };
        if let Some(observer) = &self.observer {
            observer.reconciled(ReconcileOutcome {
                succeeded,
                deleted,
                action,
                duration,
                timed_out,
            });
        }
        // A deletion's key (its object gone, or only remembered) queued again is placed in the
        // shard it was reconciled in, with the uid of the object it was: its last known state
        // may be let go of by then, and the key may live again under another uid in another
        // shard.
        if let Some((sharded, shard)) = in_shard
            && let Target::Deleted { last_known } = &request.target
            && action.next != Next::AwaitChange
        {
            let owner_uid = match last_known {
                Some(gone) => self.identity.uid(gone).map(Arc::from),
                None => request.owner_uid.clone(),
            };
            sharded.place_again(key, Placement { shard, owner_uid });
        }
        self.schedule(key, succeeded, action);
    }

    /// Waits until the caches show what the last reconcile of `key` wrote, or the gate's time
    /// is up (see [`Controller::read_your_writes`](crate::Controller::read_your_writes));
    /// `false` if the reconcile is cancelled meanwhile (a stop, a term's end): it does not run.
    async fn await_writes(&self, key: &str, cancel: &CancellationToken) -> bool {
        let awaited = tokio::select! {
            awaited = self.gate.wait(key) => awaited,
            () = cancel.cancelled() => return false,
        };
        if let (Some(awaited), Some(observer)) = (awaited, &self.observer) {
            observer.writes_awaited(awaited);
        }
        true
    }

    /// Level-triggered: the object as the cache has it now, or the last known state of a
    /// deleted one.
    fn target(&self, key: &str) -> Target<K> {
        match self.lister.get(key) {
            Some(obj) => Target::Live(obj),
            None => Target::Deleted {
                last_known: self.deleted.lock().get(key),
            },
        }
    }

    /// A reconcile of `request` succeeded: if it was a deletion's, the last known state it was
    /// given and the deleted object's expectations are done with.
    fn deletion_reconciled(&self, request: &Request<K>) {
        let Target::Deleted { last_known } = &request.target else {
            return;
        };
        if let Some(then) = last_known {
            // Only that state: a later deletion of the key (recreated and deleted again
            // meanwhile) keeps its own for the next reconcile.
            self.deleted.lock().reconciled(&request.key, then);
        }
        // The deleted object's record, also dropped by the handler, may have been set again by
        // a reconcile of the live object still running then (one key is reconciled at a time:
        // none can be now).
        for e in self.expectations.lock().iter() {
            e.forget(&request.key);
        }
    }

    /// Queues `key` again as `action` says.
    fn schedule(&self, key: &Arc<str>, succeeded: bool, action: Action) {
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
