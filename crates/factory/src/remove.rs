//! Removing an informer from a running factory: its consumers are stopped, it stops, and its
//! entry (cache, stats, health, sync report) leaves the factory, which creates a new one on
//! the next request.

use std::any::TypeId;
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use informer::SharedIndexInformer;

use crate::entry::{DynamicKey, Entry, Key};
use crate::error::FactoryError;
use crate::factory::{SharedInformerFactory, State, failure};
use crate::options::InformerOptions;
use crate::source::{DynamicListerWatcherSource, ListerWatcherSource};

impl<S: Send + Sync + 'static> SharedInformerFactory<S> {
    /// Removes the informer of resource `R` that `options` name (as
    /// [`informer_with`](Self::informer_with) would share it), if the factory holds one:
    /// it is stopped, which stops every consumer of it (each registration's `stopped()`
    /// resolves, each subscription ends), and awaited; its entry leaves the factory (its
    /// stats, health and sync report; a metrics layer reading them at scrape time loses it
    /// too), its reflector observer is told (`ReflectorObserver::retired`: the metrics layer
    /// drops its series), and the next request for it, once this has returned, creates a new
    /// informer, which the next [`start`](Self::start) runs and which syncs anew. Its cache
    /// goes with the last handle to it: the factory holds none any more.
    ///
    /// The way to drop an informer no longer needed (a controller for a custom resource
    /// whose CRD was deleted), or to start one afresh (one that stopped because its resource
    /// went away, see [`with_stop_when_not_served`](Self::with_stop_when_not_served)).
    ///
    /// Returns `Ok(true)` once it has stopped, `Ok(false)` if there was none, and the
    /// informer's failure if its run ended with one. An informer never started is stopped
    /// all the same, so that its consumers are told. Dropped before it returns, the removal
    /// still happens (the informer leaves the factory; a started one stops), but nothing
    /// waits for the run to end and its reflector observer is not told.
    pub async fn remove<R>(&self, options: InformerOptions<S::Object>) -> Result<bool, FactoryError>
    where
        R: ?Sized + 'static,
        S: ListerWatcherSource<R>,
    {
        let key = self.key(TypeId::of::<R>(), None, &options);
        self.remove_key(&key).await
    }

    /// As [`remove`](Self::remove), for the informer of a resource named at run time (see
    /// [`informer_for_with`](Self::informer_for_with)).
    pub async fn remove_for<P>(
        &self,
        resource: &P,
        options: InformerOptions<<S as DynamicListerWatcherSource<P>>::Object>,
    ) -> Result<bool, FactoryError>
    where
        P: Clone + Eq + Hash + fmt::Display + Send + Sync + 'static,
        S: DynamicListerWatcherSource<P>,
    {
        let dynamic = DynamicKey(Arc::new(resource.clone()));
        let key = self.key(TypeId::of::<P>(), Some(dynamic), &options);
        self.remove_key(&key).await
    }

    /// As [`remove`](Self::remove), for the informer `informer` (a handle the factory gave
    /// out); `Ok(false)` if the factory does not hold it (any more).
    pub async fn remove_informer<O>(
        &self,
        informer: &Arc<SharedIndexInformer<O>>,
    ) -> Result<bool, FactoryError>
    where
        O: Send + Sync + 'static,
    {
        let target = Arc::as_ptr(informer).cast::<()>();
        self.remove_where(|state| {
            let held = |e: &Entry| Arc::as_ptr(&e.informer).cast::<()>() == target;
            state.entries.iter().position(held)
        })
        .await
    }

    async fn remove_key(&self, key: &Key) -> Result<bool, FactoryError> {
        self.remove_where(|state| state.by_key.get(key).copied())
            .await
    }

    /// Takes out the entry `which` finds (under the factory's lock), stops its informer,
    /// waits for it, and tells its reflector observer that it is gone.
    async fn remove_where(
        &self,
        which: impl FnOnce(&State) -> Option<usize>,
    ) -> Result<bool, FactoryError> {
        let (entry, task) = {
            let mut state = self.state.lock();
            let Some(at) = which(&state) else {
                return Ok(false);
            };
            state.take(at)
        };
        let name = entry.describe();
        entry.stop.cancel();
        let joined = match (task, entry.started) {
            (Some((_, _, task)), _) => task.await,
            // Started, and its task taken by `shutdown`, which waits for it.
            (None, true) => Ok(Ok(())),
            // Never started: a run that finds its stop cancelled stops it, consumers and all.
            (None, false) => Ok(Arc::clone(&entry.runner).run(entry.stop.clone()).await),
        };
        if let Some(observer) = &entry.observer {
            observer.retired();
        }
        tracing::debug!(informer = %name, "removed from the factory");
        failure(name, joined).map_or(Ok(true), Err)
    }
}
