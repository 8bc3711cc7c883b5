//! Running an informer: its queue and reflector built from the frozen configuration, the loop
//! run until stopped, and the stop of every consumer however the run ends.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use informer_fifo::{
    DeltaFifo, DeltaFifoOptions, InOrderFifo, InOrderFifoOptions, Queue, RefusalHandler,
};
use informer_reflector::{BoxListerWatcher, Reflector};
use informer_store::Identity;
use tokio_util::sync::CancellationToken;

use crate::apply::{ApplyDeltas, Distributor};
use crate::health::RefusalReason;
use crate::informer::{
    InformerError, InformerReflector, Life, QueueKind, ReflectorConfig, SharedIndexInformer,
};
use crate::informer_loop::InformerLoop;
use crate::registration::ListenerState;

/// Marks the informer stopped and stops its handlers when a run ends, however it ends: a run
/// future dropped mid-way (a `select!`, a timeout, an aborted task, a runtime shut down) leaves
/// no thread blocked and no wait hanging. The consumers are not waited for then: each ends
/// after the notification it is handling.
struct StopInformer<'a, K: Send + Sync + 'static> {
    informer: &'a SharedIndexInformer<K>,
}

/// An informer dropped (never run, or run and ended) stops its consumers: a registration's
/// `wait_for_sync` then returns `false` and its `stopped` returns, instead of waiting for a
/// run that can no longer come.
impl<K> Drop for SharedIndexInformer<K> {
    fn drop(&mut self) {
        self.upstream.mark_stopped();
        drop(self.processor.stop());
    }
}

impl<K: Send + Sync + 'static> Drop for StopInformer<'_, K> {
    fn drop(&mut self) {
        drop(self.informer.stop_handlers());
    }
}

/// What a run takes from an idle informer.
struct Start<K> {
    lister_watcher: BoxListerWatcher<K>,
    reflector_config: Option<ReflectorConfig<K>>,
    /// The resync check period, as the handlers added before the run left it.
    check: std::time::Duration,
}

impl<K> SharedIndexInformer<K>
where
    K: Send + Sync + 'static,
{
    /// Runs the informer until `stop` is cancelled, then shuts everything down promptly: the
    /// watch ends, the queue is closed and what is still queued is dropped (stopping takes no
    /// longer with a long queue), every consumer — removed ones included — stops: a handler after
    /// the notification it is handling, an async handler's task at its next await, a
    /// subscription at once (what is still buffered is dropped, as in client-go). This returns
    /// once the pop job and every handler have ended. A second call returns at once.
    ///
    /// Dropping this future instead (a `select!`, a timeout, an aborted task, a runtime shut
    /// down) cleans up the same way without waiting: the queue is closed, the consumers are
    /// stopped, the informer is marked stopped and every wait for it returns.
    pub async fn run(&self, stop: CancellationToken) -> Result<(), InformerError> {
        let Some(Start {
            lister_watcher,
            reflector_config,
            check,
        }) = self.start()
        else {
            return Ok(());
        };
        // From here on, however the run ends, the informer ends stopped.
        let _stop = StopInformer { informer: self };
        let queue = self.queue();
        *self.queue.lock() = Some(Arc::clone(&queue));
        let reflector = self.reflector(lister_watcher, &queue, reflector_config);
        let pop_loop = InformerLoop::new(Arc::clone(&queue), reflector)
            .with_pool(Arc::clone(self.processor.pool()));
        let reflector = Arc::clone(pop_loop.reflector());
        if let Life::Running(slot) = &mut self.state.lock().life {
            *slot = Some(Arc::clone(&reflector));
        }
        *self.counters.started_at.lock() = Some(tokio::time::Instant::now());

        // Every log line of the run (the reflector's included) carries the informer's name.
        let span = tracing::info_span!("informer", name = %self.name);
        let running = pop_loop.run(stop, self.apply_deltas(&queue));
        tokio::select! {
            biased;
            () = tracing::Instrument::instrument(running, span) => {}
            never = self.resync(check, &queue, &reflector) => match never {},
        }

        let consumers = self.stop_handlers();
        self.upstream
            .wait(|| consumers.iter().all(|c| c.is_stopped()), || false)
            .await;
        Ok(())
    }

    /// Moves an idle informer to running and returns what its run takes (its lister-watcher,
    /// its reflector adjustments, the resync check period); `None`, with a warning, if it has
    /// run already.
    fn start(&self) -> Option<Start<K>> {
        let mut state = self.state.lock();
        match std::mem::replace(&mut state.life, Life::Running(None)) {
            Life::Idle {
                lister_watcher,
                reflector_config,
            } => Some(Start {
                lister_watcher,
                reflector_config,
                check: state.resync_check_period,
            }),
            other => {
                state.life = other;
                tracing::warn!(informer = %self.name, "the informer has already been started; it runs only once");
                None
            }
        }
    }

    /// The queue of the configured kind, over the cache, with the transform and the refusal
    /// handler.
    fn queue(&self) -> Arc<dyn Queue<K>> {
        let known = Arc::clone(&self.indexer);
        let transform = self.config.transform.clone();
        let on_refused = self.refusal_handler();
        let key = Arc::clone(&self.key_func);
        match &self.config.queue_kind {
            QueueKind::DeltaFifo => {
                let mut options = DeltaFifoOptions::default()
                    .known_objects(known)
                    .emit_delta_type_replaced(true)
                    .on_refused(on_refused);
                if let Some(t) = transform {
                    options = options.transform(t);
                }
                Arc::new(DeltaFifo::with_options(key, options))
            }
            QueueKind::InOrder => {
                // Atomic: a relist or a resync is one change, which the pop loop applies to the
                // cache in one step; the cache is read back only to withdraw refused versions.
                let mut options = InOrderFifoOptions::default()
                    .known_objects(known)
                    .on_refused(on_refused)
                    .atomic(true);
                if let Some(t) = transform {
                    options = options.transform(t);
                }
                Arc::new(InOrderFifo::with_options(key, options))
            }
            QueueKind::Custom(make) => make(key, known, transform, on_refused),
        }
    }

    /// Resyncs every `check` while a watch is open (as client-go's reflector does between a
    /// list and the end of its watch), when a consumer's period is due: the processor decides
    /// which, the queue re-delivers the cache to them. Never returns; with no check period it
    /// just waits.
    async fn resync(
        &self,
        check: std::time::Duration,
        queue: &Arc<dyn Queue<K>>,
        reflector: &InformerReflector<K>,
    ) -> std::convert::Infallible {
        if check.is_zero() {
            return std::future::pending().await;
        }
        let start = tokio::time::Instant::now() + check;
        let mut ticks = tokio::time::interval_at(start, check);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let now = ticks.tick().await;
            if reflector.watch_down_since().is_none() && self.processor.should_resync(now) {
                tracing::trace!(informer = %self.name, "resync");
                if let Err(e) = queue.resync() {
                    tracing::debug!(informer = %self.name, error = %e, "resync refused");
                }
            }
        }
    }

    /// The reflector over `lister_watcher` into `queue`, configured as the informer is: its
    /// error handler, streaming list, relist by page, list interner, and the user's adjustments
    /// last. (The informer resyncs by itself: see [`resync`](Self::resync).)
    fn reflector(
        &self,
        lister_watcher: BoxListerWatcher<K>,
        queue: &Arc<dyn Queue<K>>,
        adjust: Option<ReflectorConfig<K>>,
    ) -> InformerReflector<K> {
        let config = &self.config;
        let shards = self.shards.selector.subscribe();
        let mut reflector = Reflector::new(lister_watcher, Arc::clone(queue))
            .with_name(self.name.to_string())
            .with_relist_by_page(config.relist_by_page)
            .with_shards(shards, self.shards.by, Arc::clone(&self.identity));
        let (listed, staged_in) = (Arc::clone(&self.shards.listed), Arc::clone(queue));
        reflector = reflector.with_listed_shards(move |set| listed.stage(set, &*staged_in));
        if let Some(handler) = config.watch_error_handler.clone() {
            reflector = reflector.with_watch_error_handler(move |e| handler(e));
        }
        if config.streaming_list {
            reflector = reflector.with_streaming_list(Arc::clone(&self.key_func));
        }
        if config.transform.is_none() && self.indexer.shares_objects() {
            reflector = reflector.with_list_interner(self.list_interner());
        }
        match adjust {
            Some(adjust) => adjust(reflector),
            None => reflector,
        }
    }

    /// What the pop loop does with each change: apply it to the cache, then notify.
    fn apply_deltas(&self, queue: &Arc<dyn Queue<K>>) -> ApplyDeltas<K> {
        ApplyDeltas {
            distributor: Distributor {
                processor: Arc::clone(&self.processor),
                identity: Arc::clone(&self.identity),
                name: Arc::clone(&self.name),
                counters: Arc::clone(&self.counters),
            },
            indexer: Arc::clone(&self.indexer),
            block_deltas: Arc::clone(&self.block_deltas),
            upstream: Arc::clone(&self.upstream),
            version: Arc::clone(&self.version),
            synced: false,
            listed: (Arc::clone(&self.shards.listed), Arc::clone(queue)),
        }
    }

    /// Marks the informer stopped and stops every consumer; returns their states, to wait for.
    /// Under the state lock, so no consumer can be added in between and never be stopped.
    fn stop_handlers(&self) -> Vec<Arc<ListenerState>> {
        let mut state = self.state.lock();
        if let Life::Running(reflector) = &mut state.life {
            state.life = Life::Stopped(reflector.take());
        }
        self.upstream.mark_stopped();
        self.processor.stop()
    }

    /// The reflector's list interner: a listed object whose key and resourceVersion are those of
    /// the object cached is replaced by the cached one (the same version of the same object), so
    /// a relist does not hold two copies of what did not change. Not used with a transform: the
    /// cached object is the transformed one, and the queue would transform it again. Nor with a
    /// cache that does not keep the objects it is given
    /// ([`informer_store::Store::shares_objects`]): each read would rebuild the cached object,
    /// and there is no copy to share.
    fn list_interner(&self) -> informer_reflector::ListInterner<K> {
        let (key_func, indexer) = (Arc::clone(&self.key_func), Arc::clone(&self.indexer));
        let identity = Arc::clone(&self.identity);
        Arc::new(move |listed: Arc<K>| {
            // User functions: a panic here keeps the listed object (the queue then refuses it
            // and counts the panic, as it would without the interner).
            let same = informer_store::catch_panic(|| {
                let key = key_func(&listed).ok()?;
                let cached = indexer.get_by_key(&key)?;
                let v = identity.resource_version(&cached)?;
                (Some(v) == identity.resource_version(&listed)).then_some(cached)
            });
            match same {
                Ok(Some(cached)) => cached,
                _ => listed,
            }
        })
    }

    /// Counts and logs, with the informer's name and the key, every object the queue refuses.
    fn refusal_handler(&self) -> RefusalHandler {
        let counters = Arc::clone(&self.counters);
        let name = Arc::clone(&self.name);
        Arc::new(move |error: &informer_fifo::Error| {
            counters.refuse(RefusalReason::of_queue(error));
            if error.is_panic() {
                counters.panics.fetch_add(1, Ordering::Relaxed);
            }
            tracing::warn!(informer = %name, key = error.key(), %error, "the queue refused an object");
        })
    }
}
