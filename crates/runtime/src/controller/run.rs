//! Running a [`Controller`]: caches first, then the workers (within the terms of an election,
//! if it stands in one), and on stop its handlers removed from the informers.

use std::future::Future;
use std::sync::Arc;

use informer::InformerError;
use tokio_util::sync::CancellationToken;

use super::Controller;
use crate::gate::Gate;
use crate::handlers::Watched;
use crate::worker::Worker;
use crate::{Action, Request, RuntimeError};

impl<K: Send + Sync + 'static> Controller<K> {
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
        let watched = this.registrations()?;
        let this = this;
        let sharding = this.sharding()?;
        if let Some(sharded) = &sharding {
            // Nothing is owned yet: the caches hold nothing until the first term.
            this.apply_shard_set(sharded, false);
        }
        let result = async {
            // Caches first: every informer synced and its initial state queued.
            if !caches_synced(&watched, &stop).await? {
                return Ok(());
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
                reconcile_timeout: this.reconcile_timeout,
                gate: Gate::new(this.read_your_writes),
                identity: std::sync::Arc::clone(this.main.identity()),
                sharding: sharding.clone(),
            });
            let (concurrency, timeout) = (this.concurrency, this.shutdown_timeout);
            let reconcile_until = |until: CancellationToken| {
                worker.reconcile_until(concurrency, timeout, until, &stop)
            };
            match (&this.elector, &sharding) {
                (Some(elector), _) => this.lead(elector, &stop, reconcile_until).await,
                (None, Some(sharded)) => this.shard(sharded, &stop, reconcile_until).await,
                (None, None) => {
                    reconcile_until(stop.clone()).await;
                }
            }
            Ok(())
        }
        .await;
        drop(watched); // the handlers leave the informers
        result
    }

    /// The registrations of the controller's handlers, or the first error of one (the others
    /// are dropped, which removes them from their informers).
    fn registrations(&mut self) -> Result<Vec<Watched>, InformerError> {
        std::mem::take(&mut self.watched).into_iter().collect()
    }
}

/// Waits for every informer to sync, its initial state queued: `false` if `stop` comes first.
async fn caches_synced(
    watched: &[Watched],
    stop: &CancellationToken,
) -> Result<bool, RuntimeError> {
    for w in watched {
        tokio::select! {
            synced = w.registration.wait_for_sync() => {
                if !synced {
                    return Err(RuntimeError::NotSynced);
                }
            }
            () = stop.cancelled() => return Ok(false),
        }
    }
    Ok(true)
}
