//! How a reflector follows a collection once it has its state: one watch after another,
//! each event written to the store, until one ends in an error.

use futures::StreamExt;
use informer_store::ReflectorStore;
use tokio::time::Instant;

use crate::error::Error;
use crate::lister_watcher::{ListerWatcher, WatchEvent, WatchParams, WatchStream};
use crate::observer::{EventType, WatchEnd};

use crate::reaction::{Reaction, RunState, Step};
use crate::reflector::{HEALTHY_WATCH, Reflector, VERY_SHORT_WATCH};

impl<K, L, S> Reflector<K, L, S>
where
    K: Send + Sync + 'static,
    L: ListerWatcher<K>,
    S: ReflectorStore<K>,
{
    /// Watches until a watch ends in a way that needs a relist (`Ok`) or fails (`Err`).
    ///
    /// `stream` is an already-open stream (from a streaming list) and whether its events'
    /// versions may be used from the start.
    pub(crate) async fn watch(
        &self,
        state: &mut RunState,
        mut stream: Option<(WatchStream<K>, bool)>,
    ) -> Result<(), Error> {
        loop {
            let (stream, propagate_from_start) = match stream.take() {
                Some(open) => open,
                None => match self.open_watch(state).await {
                    Ok(Some(open)) => open,
                    Ok(None) => continue,
                    Err(err) => return Err(err),
                },
            };
            let started = Instant::now();
            let mut events = 0_u64;
            self.set_watching(true);
            let end = self
                .handle_watch(stream, propagate_from_start, &mut events)
                .await;
            self.set_watching(false);
            if self.shards_changed() {
                // Ended for the new shard set: the caller relists with it.
                self.observe_watch_end(&end, false);
                return Ok(());
            }
            if started.elapsed() >= HEALTHY_WATCH {
                // The server was back and serving: the next failure is a new outage.
                state.backoff.reset();
                state.relisted_at_once = false;
            }
            let very_short = events == 0 && started.elapsed() < VERY_SHORT_WATCH;
            self.observe_watch_end(&end, very_short);
            let end = match end {
                // A transport failure mid-stream loses nothing that was applied: resume like a
                // clean close.
                Err(Error::Transport(err)) => {
                    tracing::debug!(reflector = %self.name, error = %err, "watch stream broke, resuming");
                    Ok(())
                }
                other => other,
            };
            match end {
                Ok(()) if very_short => return Err(Error::VeryShortWatch),
                Ok(()) => {
                    tracing::trace!(reflector = %self.name, events, "watch closed, resuming");
                }
                Err(err) => match state.react(&err, Step::WatchEnd) {
                    Reaction::Retry { after } => {
                        tracing::debug!(reflector = %self.name, error = %err, "watch ended with an error, re-watching");
                        state.wait(after).await;
                    }
                    reaction => return Err(state.fail(reaction, err)),
                },
            }
        }
    }

    /// Opens a watch from the last synced version: the stream and whether its events' versions
    /// may be used from the start; `None` after a refusal the reflector waited out and should
    /// try again; an error that ends the cycle.
    async fn open_watch(
        &self,
        state: &mut RunState,
    ) -> Result<Option<(WatchStream<K>, bool)>, Error> {
        let rv = self.last_sync_resource_version();
        let propagate = !(rv.is_empty() || rv == "0");
        let (label_selector, field_selector, shard_selector) = self.selectors();
        let params = WatchParams {
            label_selector,
            field_selector,
            shard_selector,
            resource_version: rv,
            resource_version_match: None,
            timeout: Some(state.watch_timeout()),
            allow_bookmarks: true,
            send_initial_events: false,
        };
        match self.lister_watcher.watch(&params).await {
            Ok(stream) => {
                self.observe_response();
                state.ready();
                if let Some(observer) = &self.config.observer {
                    observer.watch_started();
                }
                Ok(Some((stream, propagate)))
            }
            Err(err) => match state.react(&err, Step::WatchStart) {
                Reaction::Retry { after } => {
                    tracing::debug!(reflector = %self.name, error = %err, "watch refused, retrying");
                    state.wait(after).await;
                    Ok(None)
                }
                reaction => Err(state.fail(reaction, err)),
            },
        }
    }

    /// Tells the observer of an event, before it is applied.
    fn observe_event(&self, event: &WatchEvent<K>) {
        if let Some(observer) = &self.config.observer {
            observer.event(match event {
                WatchEvent::Added { .. } => EventType::Added,
                WatchEvent::Modified { .. } => EventType::Modified,
                WatchEvent::Deleted { .. } => EventType::Deleted,
                WatchEvent::Bookmark { .. } => EventType::Bookmark,
                WatchEvent::Error(_) => EventType::Error,
            });
        }
    }

    /// Tells the observer how a watch ended.
    fn observe_watch_end(&self, end: &Result<(), Error>, very_short: bool) {
        if let Some(observer) = &self.config.observer {
            observer.watch_ended(match end {
                Ok(()) if very_short => WatchEnd::VeryShort,
                Ok(()) => WatchEnd::Closed,
                Err(Error::Transport(_)) => WatchEnd::Broken,
                Err(err) => WatchEnd::Error(err.kind()),
            });
        }
    }

    /// Applies the events of one watch stream until it ends, resyncing on the timer meanwhile;
    /// ends (`Ok`) at once when the shard set changes.
    async fn handle_watch(
        &self,
        mut stream: WatchStream<K>,
        propagate_from_start: bool,
        events: &mut u64,
    ) -> Result<(), Error> {
        let mut past_initial = false;
        let mut resync = self
            .config
            .resync_period
            .map(|period| Box::pin(tokio::time::sleep(period)));
        let mut moved = std::pin::pin!(self.shards_moved());
        loop {
            let event = tokio::select! {
                biased;
                () = &mut moved => return Ok(()),
                event = stream.next() => event,
                () = tick(&mut resync) => {
                    if self.config.should_resync.as_ref().is_none_or(|f| f()) {
                        tracing::trace!(reflector = %self.name, "resync");
                        self.store.resync().map_err(|e| Error::Store(Box::new(e)))?;
                    }
                    if let (Some(timer), Some(period)) = (&mut resync, self.config.resync_period) {
                        timer.as_mut().reset(Instant::now() + period);
                    }
                    continue;
                }
            };
            let Some(event) = event else {
                return Ok(());
            };
            let event = event?;
            self.observe_event(&event);
            let written = match &event {
                // Outside the shard set: dropped, a deletion too (it was never cached); its
                // version is still a resume point.
                WatchEvent::Added { object, .. }
                | WatchEvent::Modified { object, .. }
                | WatchEvent::Deleted { object, .. }
                    if !self.in_shards(object) =>
                {
                    past_initial |= !matches!(event, WatchEvent::Added { .. });
                    Ok(())
                }
                WatchEvent::Added { object, .. } => self.store.add(object.clone()),
                WatchEvent::Modified { object, .. } => {
                    past_initial = true;
                    self.store.update(object.clone())
                }
                WatchEvent::Deleted { object, .. } => {
                    past_initial = true;
                    self.store.delete(object.clone())
                }
                WatchEvent::Bookmark {
                    resource_version, ..
                } => {
                    past_initial = true;
                    self.store.bookmark(resource_version)
                }
                WatchEvent::Error(status) => return Err(Error::Api(status.clone())),
            };
            if let Err(err) = written {
                // Not a reason to relist; the store reports (and counts) what it refuses.
                tracing::debug!(reflector = %self.name, event = event.type_name(), error = %err, "store refused a watch event");
            }
            if (propagate_from_start || past_initial)
                && let Some(rv) = event.resource_version().filter(|rv| !rv.is_empty())
            {
                self.set_last_sync_resource_version(rv);
            }
            *events += 1;
        }
    }
}

/// Resolves when the resync timer fires; never without one.
async fn tick(timer: &mut Option<std::pin::Pin<Box<tokio::time::Sleep>>>) {
    match timer {
        Some(timer) => timer.as_mut().await,
        None => std::future::pending().await,
    }
}
